//! A put to a blob in the bucket (see the module docs of `object`, "A put"): every part of its
//! range written under a fresh put id, then the manifest, conditional on the one read; after a
//! conflict, the two end parts composed again over the newer version and the manifest tried
//! again.

use std::time::Instant;

use bytes::Bytes;
use object_store::path::Path;

use super::conflict::{conflict_wait, put_id, MAX_CONFLICTS};
use super::manifest::{Manifest, Read};
use super::parts::Uploads;
use super::ObjectTier;
use crate::error::BlobError;
use crate::types::Fill;

/// One put in progress: the blob, its range, its part size and id, and its part writes.
struct PartPut<'a> {
    tier: &'a ObjectTier,
    tag: &'a str,
    name: &'a str,
    offset: u64,
    end: u64,
    part_size: u64,
    /// Names this put's part objects.
    id: u128,
    uploads: Uploads,
}

/// An end part of a put's range: its fill bytes (those of the range in it), kept to be composed
/// again over another version's bytes after a conflict.
struct EndPart {
    index: u64,
    fresh: Vec<u8>,
}

impl ObjectTier {
    /// Writes `end - offset` bytes from `fill` at `offset` of blob `name` of `tag`; returns the
    /// blob's new size. See the module docs.
    pub(super) fn put(
        &self,
        tag: &str,
        name: &str,
        offset: u64,
        end: u64,
        fill: &mut Fill<'_>,
    ) -> Result<u64, BlobError> {
        let old = self.manifest(tag, name)?;
        let part_size = old
            .as_ref()
            .map_or(self.part_size, |r| r.manifest.part_size);
        let mut put = PartPut {
            tier: self,
            tag,
            name,
            offset,
            end,
            part_size,
            id: put_id(),
            uploads: Uploads::default(),
        };
        match put.run(old, fill) {
            Ok(size) => {
                put.uploads.keep(self);
                Ok(size)
            }
            Err(e) => {
                put.uploads.abandon(self);
                Err(e)
            }
        }
    }
}

impl PartPut<'_> {
    /// The first and the last part the range touches.
    fn range_parts(&self) -> (u64, u64) {
        (
            self.offset / self.part_size,
            (self.end - 1) / self.part_size,
        )
    }

    /// The key of this put's part `index`.
    fn key(&self, index: u64) -> Path {
        self.tier.part_path(self.tag, self.name, self.id, index)
    }

    /// The put over `old`, the manifest read first: attempts until one's manifest is written,
    /// or another writer came first [`MAX_CONFLICTS`] times.
    fn run(&mut self, mut old: Option<Read>, fill: &mut Fill<'_>) -> Result<u64, BlobError> {
        let ends = self.write_middle_parts(fill)?;
        let mut started = Instant::now();
        for attempt in 1..=MAX_CONFLICTS {
            if attempt > 1 {
                old = self.read_again(attempt, &mut started)?;
            }
            if let Some(size) = self.attempt(old.as_ref(), &ends)? {
                return Ok(size);
            }
        }
        Err(self.tier.conflict(self.tag, self.name, MAX_CONFLICTS))
    }

    /// Has `fill` produce the range, part after part, and starts writing the middle parts:
    /// whole parts of fill bytes, whatever the old version holds. The end parts' other bytes
    /// come from the version the manifest write is conditional on, so they are composed last,
    /// and again after a conflict: their fill bytes are returned.
    fn write_middle_parts(&mut self, fill: &mut Fill<'_>) -> Result<Vec<EndPart>, BlobError> {
        let (first, last) = self.range_parts();
        let mut ends = Vec::new();
        for index in first..=last {
            let a = self.offset.max(index * self.part_size);
            let b = self.end.min((index + 1) * self.part_size);
            let mut fresh = vec![0u8; (b - a) as usize];
            fill(a - self.offset, &mut fresh)?;
            if index == first || index == last {
                ends.push(EndPart { index, fresh });
                continue;
            }
            let key = self.key(index);
            self.uploads.start(self.tier, key, Bytes::from(fresh))?;
        }
        Ok(ends)
    }

    /// After an attempt lost to another writer: waits for this put's writes (its end parts are
    /// written again under the same keys), then a random while, and reads the manifest again.
    /// One of another part size (a delete and a first put with another part size came between)
    /// would need every part of the range cut anew: the put gives up instead.
    fn read_again(
        &mut self,
        attempt: u32,
        started: &mut Instant,
    ) -> Result<Option<Read>, BlobError> {
        self.uploads.finish(self.tier)?;
        std::thread::sleep(conflict_wait(attempt - 1, started.elapsed()));
        *started = Instant::now();
        let old = self.tier.manifest(self.tag, self.name)?;
        if old
            .as_ref()
            .is_some_and(|r| r.manifest.part_size != self.part_size)
        {
            return Err(self.tier.conflict(self.tag, self.name, attempt));
        }
        Ok(old)
    }

    /// One attempt over `old`: the end parts composed and written, then the manifest,
    /// conditional on `old`, and the parts it replaced deleted. The blob's new size, or `None`
    /// when another writer came first (a part of `old` is gone, or the manifest was replaced).
    fn attempt(&mut self, old: Option<&Read>, ends: &[EndPart]) -> Result<Option<u64>, BlobError> {
        let Some(composed) = self.compose_ends(old, ends)? else {
            return Ok(None);
        };
        for (index, bytes) in composed {
            let key = self.key(index);
            self.uploads.start(self.tier, key, bytes)?;
        }
        self.uploads.finish(self.tier)?;
        let (manifest, replaced) = self.next_manifest(old);
        if self
            .tier
            .write_manifest(self.tag, self.name, old, &manifest)?
        {
            self.tier.drop_parts(replaced.into_iter());
            return Ok(Some(manifest.size));
        }
        tracing::debug!(
            target = %self.tier.label,
            blob = %format!("{}/{}", self.tag, self.name),
            "another writer replaced the manifest; merging again"
        );
        Ok(None)
    }

    /// The manifest this put writes over `old`: its size, and this put's id for every part of
    /// the range; with the keys of the parts it replaces.
    fn next_manifest(&self, old: Option<&Read>) -> (Manifest, Vec<Path>) {
        let prior = old.map(|r| &r.manifest);
        let size = prior.map_or(0, |m| m.size).max(self.end);
        let mut parts = prior.map_or_else(Vec::new, |m| m.parts.clone());
        parts.resize(size.div_ceil(self.part_size) as usize, 0);
        let (first, last) = self.range_parts();
        let replaced = (first..=last)
            .filter_map(
                |i| match std::mem::replace(&mut parts[i as usize], self.id) {
                    0 => None,
                    was => Some(self.tier.part_path(self.tag, self.name, was, i)),
                },
            )
            .collect();
        let manifest = Manifest {
            size,
            part_size: self.part_size,
            parts,
        };
        (manifest, replaced)
    }

    /// The end parts' bytes over `old`, by index; `None` when a part of `old` is gone (a newer
    /// put replaced it, and so its manifest).
    fn compose_ends(
        &self,
        old: Option<&Read>,
        ends: &[EndPart],
    ) -> Result<Option<Vec<(u64, Bytes)>>, BlobError> {
        let mut composed = Vec::with_capacity(ends.len());
        for part in ends {
            match self.compose(old, part)? {
                Some(bytes) => composed.push((part.index, bytes)),
                None => return Ok(None),
            }
        }
        Ok(Some(composed))
    }

    /// End part `part`'s bytes: its fill bytes, the old version's bytes around them (zeros
    /// where it has none), as long as the part is in a blob of size `max(old size, end)`.
    /// `None` when the old part object is gone.
    fn compose(&self, old: Option<&Read>, part: &EndPart) -> Result<Option<Bytes>, BlobError> {
        let (index, fresh) = (part.index, &part.fresh[..]);
        let start = index * self.part_size;
        let old_size = old.map_or(0, |r| r.manifest.size);
        let len = self.part_size.min(old_size.max(self.end) - start) as usize;
        let a = (self.offset.max(start) - start) as usize;
        if a == 0 && fresh.len() == len {
            return Ok(Some(Bytes::copy_from_slice(fresh)));
        }
        let mut bytes = vec![0u8; len];
        if let Some(r) = old.filter(|r| start < r.manifest.size) {
            let Some(was) = self.tier.part(self.tag, self.name, &r.manifest, index)? else {
                return Ok(None);
            };
            bytes[..was.len()].copy_from_slice(&was);
        }
        bytes[a..a + fresh.len()].copy_from_slice(fresh);
        Ok(Some(Bytes::from(bytes)))
    }
}
