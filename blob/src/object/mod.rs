//! The object tier: a target on S3-compatible object storage (through `object_store`), shared by
//! every store configured with the same bucket and prefix.
//!
//! # What lives in the bucket (under the target's prefix)
//!
//! * `tags/<tag>`: an empty object per tag name, so that every store sees every tag.
//! * `blobs/<tag>/<name>`: the blob's **manifest**: its size, its part size and, per part, the
//!   id of the put that wrote it (0: a hole, read as zeros).
//! * `parts/<tag>/<name>/<put id>/<index>`: one part's bytes, written once and never changed.
//!
//! Names are path segments, percent-encoded where S3 keys would be ambiguous.
//!
//! # A put
//!
//! Reads the manifest (and its etag), writes a new part object for every part its range
//! touches (the bytes around the range come from the old parts), up to `in_flight` uploads at
//! once, and only then writes the manifest. A put that fails before the manifest is written
//! changes nothing a reader can see; its parts are deleted. One killed before leaves
//! unreferenced parts behind, never a visible blob.
//!
//! The manifest write is conditional: on the etag read (`If-Match`), or on there being no
//! manifest (`If-None-Match: *`). When another writer replaced the manifest meanwhile, the put
//! waits a random while (its ceiling doubling with each conflict), re-reads it, rewrites only
//! the two parts at the ends of its range (whose outer bytes came from the old version; the
//! fill bytes of those two parts are kept for this), and tries again.
//! Two writers of one blob therefore never lose each other's bytes, on stores that honour
//! these conditions. Stores that ignore them (probed at open; Garage 2.5 is one) still never
//! mix two versions, because a manifest is one object written whole, but the last manifest
//! written wins: of two concurrent puts to one blob, one put's bytes may be lost. `tracing`
//! says so at open, and `require_conditional_writes` refuses such a store.
//!
//! After the manifest, the parts it replaced are deleted. A get on another store that read the
//! old manifest then finds a part missing; it waits as a put does, re-reads the manifest and
//! starts over, unless it already handed bytes to its caller, in which case it fails
//! ([`BlobError::ObjectConflict`]).
//!
//! # Caching
//!
//! Part objects never change, so a store keeps the parts it read or wrote (up to
//! `cache_bytes`, least recently used first out) and never asks for them again. Every get, stat
//! and put re-reads the manifest, conditionally (`If-None-Match` on the etag it holds), so a
//! store sees another store's put as soon as the object store returns the new manifest.
//!
//! # The store's way in
//!
//! The store reaches the tier through [`ObjectTarget`] alone: it is absent or present, and
//! every call the store makes (tags shared by name, the blobs a local store lacks, listings, the
//! target's description) answers for both, so the store routes to it and never asks which.
//! A blob the tier answers for is an [`InBucket`]. The rest of this module is the tier itself:
//! `block_on` (waiting for its futures from plain threads), `client` (connecting, running
//! requests), `keys` (the layout above), `manifest`, `parts`,
//! `conflict` (retries and put ids), then the operations `put`, `get` and `catalog` (tags,
//! listing, delete).

mod block_on;
mod catalog;
mod client;
mod conflict;
mod get;
mod keys;
mod manifest;
mod parts;
mod put;

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use object_store::path::Path;
use object_store::ObjectStore;
use parking_lot::Mutex;

use crate::config::StoreConfig;
use crate::context::Persistence;
use crate::error::{BlobError, NameKind};
use crate::local::LocalStore;
use crate::types::{check_name, BlobStat, Drain, Fill, PutInfo, TagId, TargetStat};
use manifest::Read;
use parts::PartCache;

/// One object target: the client, its own I/O threads, and the caches.
pub(crate) struct ObjectTier {
    /// Runs the client's requests; the store's callers only wait for them (see
    /// `client::wait`). Shut down in the background on drop (see `Drop`).
    io: ManuallyDrop<tokio::runtime::Runtime>,
    store: Arc<dyn ObjectStore>,
    root: Path,
    /// Part size of blobs this store creates.
    part_size: u64,
    in_flight: usize,
    /// Whether the store honours `If-Match` / `If-None-Match` on writes (probed at open).
    conditional: bool,
    /// What errors call this target: `s3://bucket/prefix`.
    label: String,
    parts: Mutex<PartCache>,
    manifests: Mutex<HashMap<Path, Read>>,
}

/// The object tier as the store sees it: the one interface the store routes to. Without an
/// object target, tag calls do nothing, lookups find nothing and no blob is the tier's.
pub(crate) enum ObjectTarget {
    /// No target of kind object: tags stay in the local metadata, and no blob is in a bucket.
    Absent,
    /// The object target: its index among the store's targets, and its tier (boxed: the
    /// store holds one, absent or present, and the tier is large).
    Present { index: usize, tier: Box<ObjectTier> },
}

impl ObjectTarget {
    /// The object target of `config` (at most one), on `store` when one is given (then
    /// `config` needs an object target), else on the S3 client its settings describe.
    pub(crate) fn open(
        config: &StoreConfig,
        store: Option<Arc<dyn ObjectStore>>,
    ) -> Result<ObjectTarget, BlobError> {
        let objects: Vec<_> = config
            .targets
            .iter()
            .enumerate()
            .filter_map(|(index, t)| t.object.as_ref().map(|o| (index, o)))
            .collect();
        let (index, tier) = match (objects.as_slice(), store) {
            ([], None) => return Ok(ObjectTarget::Absent),
            ([], Some(_)) => {
                return Err(BlobError::Config(
                    "an object store was given but no target is of kind object".into(),
                ))
            }
            ([(index, one)], None) => (*index, Box::new(ObjectTier::open(one)?)),
            ([(index, one)], Some(store)) => {
                (*index, Box::new(ObjectTier::with_store(store, one)?))
            }
            _ => return Err(BlobError::Config("at most one object target".into())),
        };
        Ok(ObjectTarget::Present { index, tier })
    }

    /// Records tag `name` in the bucket, so that every store sharing it sees the tag
    /// (idempotent).
    pub(crate) fn share_tag(&self, name: &str) -> Result<(), BlobError> {
        match self {
            ObjectTarget::Absent => Ok(()),
            ObjectTarget::Present { tier, .. } => tier.put_tag(name),
        }
    }

    /// Records in the bucket each of the tags `local` names that it lacks: tags made before
    /// the object target was configured become visible to the other stores.
    pub(crate) fn share_tags(&self, local: &[String]) -> Result<(), BlobError> {
        let ObjectTarget::Present { tier, .. } = self else {
            return Ok(());
        };
        let shared = tier.tags()?;
        for name in local.iter().filter(|n| !shared.contains(n)) {
            tier.put_tag(name)?;
        }
        Ok(())
    }

    /// Whether the bucket has tag `name` (another store made it).
    pub(crate) fn has_tag(&self, name: &str) -> Result<bool, BlobError> {
        match self {
            ObjectTarget::Absent => Ok(false),
            ObjectTarget::Present { tier, .. } => tier.has_tag(name),
        }
    }

    /// Every tag name in the bucket.
    pub(crate) fn tags(&self) -> Result<Vec<String>, BlobError> {
        match self {
            ObjectTarget::Absent => Ok(Vec::new()),
            ObjectTarget::Present { tier, .. } => tier.tags(),
        }
    }

    /// Blob `name` of `tag`, when the tier answers for it: there is an object target and
    /// `local` has no published version of the blob (checking the name and the tag then).
    pub(crate) fn answers_for<'a>(
        &'a self,
        local: &LocalStore,
        tag: TagId,
        name: &'a str,
    ) -> Result<Option<InBucket<'a>>, BlobError> {
        let ObjectTarget::Present { index, tier } = self else {
            return Ok(None);
        };
        check_name(name, NameKind::Blob)?;
        let tag_name = local.tag_name(tag)?;
        if local.holds(tag, name) {
            return Ok(None);
        }
        Ok(Some(InBucket {
            index: *index,
            tier,
            tag,
            tag_name,
            name,
        }))
    }

    /// Adds to `blobs` (the local blobs of `tag`, named `tag_name`) those of the bucket that
    /// it lacks, keeping the list by name.
    pub(crate) fn list_into(
        &self,
        tag: TagId,
        tag_name: &str,
        blobs: &mut Vec<BlobStat>,
    ) -> Result<(), BlobError> {
        let ObjectTarget::Present { index, tier } = self else {
            return Ok(());
        };
        for (name, size) in tier.list(tag_name)? {
            if !blobs.iter().any(|b| b.name == name) {
                blobs.push(bucket_stat(tag, name, size, *index));
            }
        }
        blobs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(())
    }

    /// Says in `targets` (every target's description) what only the object target knows:
    /// whether its store honours conditional writes.
    pub(crate) fn describe(&self, targets: &mut [TargetStat]) {
        if let ObjectTarget::Present { index, tier } = self {
            targets[*index].conditional_writes = tier.conditional_writes();
        }
    }
}

/// A blob of the bucket's: what [`ObjectTarget::answers_for`] gives, each call on it a
/// request to the tier that answers as the store's own calls do.
pub(crate) struct InBucket<'a> {
    index: usize,
    tier: &'a ObjectTier,
    tag: TagId,
    tag_name: String,
    name: &'a str,
}

impl InBucket<'_> {
    /// The object target's index among the store's targets.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Whether the bucket has the blob.
    pub(crate) fn exists(&self) -> Result<bool, BlobError> {
        Ok(self.tier.size(&self.tag_name, self.name)?.is_some())
    }

    /// Writes `end - offset` bytes from `fill` at `offset` of the blob.
    pub(crate) fn put(
        &self,
        offset: u64,
        end: u64,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        let size = self
            .tier
            .put(&self.tag_name, self.name, offset, end, fill)?;
        Ok(PutInfo {
            size,
            durable: true,
            persistence: Persistence::LongTerm,
            targets: vec![self.index],
        })
    }

    /// Reads `len` bytes at `offset` of the blob into `drain`.
    pub(crate) fn get(
        &self,
        offset: u64,
        len: u64,
        drain: &mut Drain<'_>,
    ) -> Result<(), BlobError> {
        let found = self
            .tier
            .get(&self.tag_name, self.name, offset, len, &mut |at, src| {
                drain(at, src).map_err(BlobError::Fill)
            })?;
        if found {
            Ok(())
        } else {
            Err(self.not_found())
        }
    }

    /// The blob's description.
    pub(crate) fn stat(&self) -> Result<BlobStat, BlobError> {
        match self.tier.size(&self.tag_name, self.name)? {
            Some(size) => Ok(bucket_stat(
                self.tag,
                self.name.to_owned(),
                size,
                self.index,
            )),
            None => Err(self.not_found()),
        }
    }

    /// Removes the blob.
    pub(crate) fn delete(&self) -> Result<(), BlobError> {
        if self.tier.delete(&self.tag_name, self.name)? {
            Ok(())
        } else {
            Err(self.not_found())
        }
    }

    fn not_found(&self) -> BlobError {
        BlobError::NotFound {
            tag: self.tag,
            name: self.name.to_owned(),
        }
    }
}

/// A bucket blob's description: long-term, raw, on the object target alone.
fn bucket_stat(tag: TagId, name: String, size: u64, index: usize) -> BlobStat {
    BlobStat {
        tag,
        name,
        size,
        stored: size,
        codecs: Vec::new(),
        durable: true,
        persistence: Persistence::LongTerm,
        targets: vec![index],
    }
}
