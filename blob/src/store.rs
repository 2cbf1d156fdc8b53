//! The blob store's calls: each checks its arguments, then goes to the local store, or to the
//! object target for a blob the local store lacks ([`ObjectTarget::answers_for`]). This is
//! the one place the two meet.

use std::sync::Arc;
use std::time::Instant;

use crate::blob_put::BlobPut;
use crate::blob_range::BlobRange;
use crate::config::{Limits, StoreConfig, TargetKind};
use crate::error::{BlobError, NameKind};
use crate::local::{LocalStore, PutRequest};
use crate::meta::meta_io;
use crate::metrics::BlobCounters;
use crate::object::{InBucket, ObjectTarget};
use crate::open::{self, Opening};
use crate::placement;
use crate::types::{
    check_name, check_new_name, BlobStat, Drain, Fill, PutInfo, StoreIdentity, TagId, TargetStat,
};

/// The blob store. `Send + Sync`: share it (`Arc`) between any number of threads.
pub struct BlobStore {
    local: LocalStore,
    object: ObjectTarget,
    limits: Limits,
    identity: StoreIdentity,
    counters: BlobCounters,
}

impl BlobStore {
    /// Opens the store, creating the metadata file and target files on first start, and
    /// rebuilds the in-memory index and free space from the committed metadata. An open that
    /// fails removes what it created.
    pub fn open(config: &StoreConfig) -> Result<BlobStore, BlobError> {
        Self::open_as(config, None, Opening::CreateMissing)
    }

    /// Like [`BlobStore::open`], but creates nothing: for a look at a store, which a store that
    /// was never made has nothing to show. A missing metadata file is [`BlobError::Metadata`],
    /// a missing file target [`BlobError::TargetMismatch`]. A store with an object target is
    /// the exception: its blobs live in the bucket, which other nodes share, so a node that
    /// never opened it still has them to show, and its look opens the store as
    /// [`BlobStore::open`] does.
    pub fn open_existing(config: &StoreConfig) -> Result<BlobStore, BlobError> {
        let in_a_bucket = config.targets.iter().any(|t| t.kind == TargetKind::Object);
        let opening = if in_a_bucket {
            Opening::CreateMissing
        } else {
            Opening::ExistingOnly
        };
        Self::open_as(config, None, opening)
    }

    /// Like [`BlobStore::open`], with the object target on `store` (any `object_store`
    /// backend: S3 built by the caller, a local folder, memory) instead of the S3 client its
    /// configuration describes; the rest of its `[object]` settings (prefix, part size,
    /// concurrency, cache, `require_conditional_writes`) apply. The configuration must have an
    /// object target.
    pub fn open_with_object_store(
        config: &StoreConfig,
        store: Arc<dyn object_store::ObjectStore>,
    ) -> Result<BlobStore, BlobError> {
        Self::open_as(config, Some(store), Opening::CreateMissing)
    }

    fn open_as(
        config: &StoreConfig,
        object_store: Option<Arc<dyn object_store::ObjectStore>>,
        opening: Opening,
    ) -> Result<BlobStore, BlobError> {
        let (local, object) = open::open(config, object_store, opening)?;
        // The file is open and locked here: the path names it until the store closes.
        let identity = StoreIdentity::of_metadata(&config.metadata).map_err(meta_io)?;
        Ok(BlobStore {
            local,
            object,
            limits: config.limits.clone(),
            identity,
            counters: BlobCounters::new(config.targets.len()),
        })
    }

    /// Which store this is (its metadata file), as [`StoreIdentity::of_metadata`] tells it
    /// from a configuration.
    pub fn identity(&self) -> StoreIdentity {
        self.identity
    }

    /// The id of tag `name`, creating (and durably committing) it if it does not exist.
    pub fn get_or_create_tag(&self, name: &str) -> Result<TagId, BlobError> {
        check_new_name(name, NameKind::Tag)?;
        if let Some(id) = self.local.tag_id(name) {
            return Ok(id);
        }
        self.object.share_tag(name)?;
        self.local.create_tag(name)
    }

    /// The id of tag `name`, if it exists (here, or in the object target's bucket: another
    /// store made it; it then gets an id here).
    pub fn tag(&self, name: &str) -> Result<Option<TagId>, BlobError> {
        check_name(name, NameKind::Tag)?;
        if let Some(id) = self.local.tag_id(name) {
            return Ok(Some(id));
        }
        if self.object.has_tag(name)? {
            return self.local.create_tag(name).map(Some);
        }
        Ok(None)
    }

    /// All tags, by id: with an object target, those other stores made as well (they get ids
    /// here).
    pub fn list_tags(&self) -> Result<Vec<(TagId, String)>, BlobError> {
        for name in self.object.tags()? {
            self.local.create_tag(&name)?;
        }
        Ok(self.local.tags())
    }

    /// Writes `data` where `put` says (at its offset of its blob, creating or extending it),
    /// placed and kept as it says. See the crate docs for placement, atomicity, put contexts
    /// and errors.
    pub fn put(&self, put: &BlobPut<'_>, data: &[u8]) -> Result<PutInfo, BlobError> {
        self.put_with(put, data.len() as u64, &mut |at, dst| {
            dst.copy_from_slice(&data[at as usize..at as usize + dst.len()]);
            Ok(())
        })
    }

    /// Like [`BlobStore::put`], but the `len` bytes are produced by `fill(offset_within_data,
    /// dst)`, called with consecutive chunks that together cover `0..len`, writing straight
    /// into the target's memory (RAM target) or an aligned bounce buffer (file target); a
    /// compressing put fills a frame's staging buffer instead, still once for each byte, in
    /// order. A fill error aborts the put, which then leaves nothing behind.
    ///
    /// `fill` runs while the put holds the blob's put lock: it must not put to or delete the
    /// same blob (that would wait on itself); gets of the blob, and anything on other blobs,
    /// are fine.
    pub fn put_with(
        &self,
        put: &BlobPut<'_>,
        len: u64,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        let start = Instant::now();
        let done = self.put_counted(put, len, fill);
        let targets = done.as_ref().ok().map(|info| info.targets.as_slice());
        let how = put.context.compression;
        self.counters.put_done(targets, len, how, start.elapsed());
        done
    }

    fn put_counted(
        &self,
        put: &BlobPut<'_>,
        len: u64,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        let BlobPut {
            tag,
            name,
            offset,
            score,
            context,
        } = *put;
        check_new_name(name, NameKind::Blob)?;
        let score = score.check()?;
        self.local.check_tag(tag)?;
        if len == 0 {
            return Err(BlobError::EmptyRange);
        }
        let max = self.limits.max_blob_size;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= max)
            .ok_or(BlobError::TooLarge { offset, len, max })?;
        let level = context.persistence;
        if !self
            .local
            .targets
            .iter()
            .any(|t| placement::keeps(t, level))
        {
            return Err(BlobError::NoTargetFor(level));
        }
        let req = PutRequest {
            tag,
            name,
            offset,
            end,
            score,
            context,
        };
        match self.object.answers_for(&self.local, tag, name)? {
            Some(blob) => self.put_new(blob, &req, fill),
            None => self.local.put(&req, fill),
        }
    }

    /// A put to a blob with no local version, with an object target: to the bucket when
    /// placement puts the object target first, or when the bucket already has the blob (one
    /// name, one blob); else to the local targets, the bucket taking what they have no room
    /// for.
    fn put_new(
        &self,
        blob: InBucket<'_>,
        req: &PutRequest<'_>,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        let level = req.context.persistence;
        let first = placement::candidates(&self.local.targets, req.score, level).first()
            == Some(&blob.index());
        if first || blob.exists()? {
            return blob.put(req.offset, req.end, fill);
        }
        match self.local.put(req, fill) {
            Err(BlobError::NoSpace { .. }) if !self.local.holds(req.tag, req.name) => {
                blob.put(req.offset, req.end, fill)
            }
            other => other,
        }
    }

    /// Reads `out.len()` bytes from byte `at` of blob `name` into `out`.
    pub fn get(&self, tag: TagId, name: &str, at: u64, out: &mut [u8]) -> Result<(), BlobError> {
        let range = BlobRange::new(tag, name, at, out.len() as u64);
        self.get_with(range, &mut |within, src| {
            out[within as usize..within as usize + src.len()].copy_from_slice(src);
            Ok(())
        })
    }

    /// Reads the bytes of `range`, handing them to `drain(offset_within,
    /// bytes)` in consecutive chunks, straight from the target's memory (RAM target) or from a
    /// bounce buffer (file target). A drain error aborts the get.
    ///
    /// `drain` runs while the get holds the blob's read lock: it must not put to or delete the
    /// same blob (the put would wait for this get to finish).
    pub fn get_with(&self, range: BlobRange<'_>, drain: &mut Drain<'_>) -> Result<(), BlobError> {
        let start = Instant::now();
        let done = self.get_counted(range, drain);
        self.counters
            .get_done(done.is_ok(), range.len, start.elapsed());
        done
    }

    fn get_counted(&self, range: BlobRange<'_>, drain: &mut Drain<'_>) -> Result<(), BlobError> {
        if let Some(blob) = self
            .object
            .answers_for(&self.local, range.tag, range.name)?
        {
            if range.len == 0 {
                return Err(BlobError::EmptyRange);
            }
            return blob.get(range.offset, range.len, drain);
        }
        self.local.get(range, drain)
    }

    /// Size, class and targets of blob `name`.
    pub fn stat(&self, tag: TagId, name: &str) -> Result<BlobStat, BlobError> {
        match self.object.answers_for(&self.local, tag, name)? {
            Some(blob) => blob.stat(),
            None => self.local.stat(tag, name),
        }
    }

    /// Removes blob `name`; its pages are freed once no get is reading them.
    pub fn delete(&self, tag: TagId, name: &str) -> Result<(), BlobError> {
        match self.object.answers_for(&self.local, tag, name)? {
            Some(blob) => blob.delete(),
            None => self.local.delete(tag, name),
        }
    }

    /// The blobs of `tag`, by name.
    pub fn list_blobs(&self, tag: TagId) -> Result<Vec<BlobStat>, BlobError> {
        let tag_name = self.local.tag_name(tag)?;
        let mut blobs = self.local.list(tag);
        self.object.list_into(tag, &tag_name, &mut blobs)?;
        Ok(blobs)
    }

    /// The targets, in configuration order.
    pub fn targets(&self) -> Vec<TargetStat> {
        let mut targets = self.local.target_stats();
        self.object.describe(&mut targets);
        targets
    }
}

/// The store's series on its service's metrics endpoint: what its calls did since it opened,
/// and its targets' space now.
impl tandem_metrics::Source for BlobStore {
    fn collect(&self, scrape: &mut tandem_metrics::Scrape) {
        let targets = self.targets();
        self.counters
            .series(&targets, self.local.crash_recoveries, scrape);
    }
}

#[cfg(test)]
mod tests;
