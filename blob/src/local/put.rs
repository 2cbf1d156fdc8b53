//! A local put, copy-on-write: it never writes pages that a reader may see. It reserves new
//! pages for every page its range touches and writes them (the untouched head and tail of the
//! first and last page copied from the old version; bytes past the new size zeros); for a
//! durable blob the committer `fdatasync`s the target files and commits the new extent map to
//! redb; then the put publishes the new version in the index under the blob's lock for writing
//! (which waits out every get still copying from the old version), and only then frees the
//! replaced pages. Puts to one blob are serialised by the blob's put lock; puts to different
//! blobs write their data in parallel and meet only in the group committer, which takes every
//! metadata change that arrived during the previous commit, syncs the files their data went to
//! (once per file for the whole batch), then commits them in one redb transaction. A put
//! returns after its transaction committed.
//!
//! Free space is never stored: at open it is derived from the committed extent maps (see
//! `recover`). Space is reserved in memory only, and pages are freed in memory only after the
//! metadata that stopped referencing them committed, so a committed map never points at reused
//! pages.

use std::sync::Arc;

use super::{BlobEntry, LocalStore};
use crate::error::BlobError;
use crate::extent::{replace_range, targets_of, Extent, Version};
use crate::meta::{self, MetaOp, StoredExtent};
use crate::placement;
use crate::target::{AlignedBuf, Area, FileArea};
use crate::types::{Fill, PutInfo, TagId, CHUNK_PAGES, PAGE_SIZE};
use crate::uring::{Pipeline, Rings};

/// A put's blob, range and placement, checked by the store.
pub(crate) struct PutRequest<'a> {
    pub(crate) tag: TagId,
    pub(crate) name: &'a str,
    pub(crate) offset: u64,
    /// Where the range ends: past `offset`, within the largest blob size.
    pub(crate) end: u64,
    /// The score checked: `None` for automatic placement.
    pub(crate) score: Option<f32>,
}

impl PutRequest<'_> {
    /// The logical pages the range touches.
    fn pages(&self) -> (u64, u64) {
        (self.offset / PAGE_SIZE, self.end.div_ceil(PAGE_SIZE))
    }
}

/// What a put's fresh pages hold: `fill`'s bytes for `offset..end`, the old version's bytes
/// around them (zeros where it has none), zeros past the new `size`.
struct Content<'v> {
    old: Option<&'v Version>,
    offset: u64,
    end: u64,
    size: u64,
}

impl LocalStore {
    /// Writes the request's range from `fill` to its blob, creating or extending it. See the
    /// crate docs for placement, atomicity and errors.
    pub(crate) fn put(
        &self,
        req: &PutRequest<'_>,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        loop {
            let entry = self.lookup_or_insert(req.tag, req.name)?;
            let mut dead = entry.writer.lock();
            if *dead {
                continue; // deleted between lookup and lock: start over with the new entry
            }
            let result = self.put_locked(&entry, req, fill);
            if result.is_err() && entry.state.read().is_none() {
                *dead = true;
                self.remove_entry(req.tag, req.name, &entry);
            }
            return result;
        }
    }

    /// The put, under the blob's put lock: fresh pages reserved and written, the new version
    /// committed (a durable blob) and published, the pages it replaced freed. A failure gives
    /// the fresh pages back and leaves the blob as it was.
    fn put_locked(
        &self,
        entry: &BlobEntry,
        req: &PutRequest<'_>,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        let old = entry.state.read().clone();
        let (p0, p1) = req.pages();
        let class = old.as_ref().map(|v| v.durable);
        let reserved = placement::reserve(&self.targets, p1 - p0, req.score, class)?;
        let durable = reserved.durable;
        let fresh = reserved.into_extents(p0);
        let content = Content {
            old: old.as_deref(),
            offset: req.offset,
            end: req.end,
            size: old.as_ref().map_or(0, |v| v.size).max(req.end),
        };
        let put_targets = targets_of(&fresh);
        let prepared = self.write_fresh(&fresh, &content, fill).and_then(|()| {
            let (extents, replaced) =
                replace_range(old.as_ref().map_or(&[][..], |v| &v.extents), &fresh, p0, p1);
            let version = Version {
                size: content.size,
                durable,
                extents,
            };
            if durable {
                self.commit_version(req, &version, put_targets.clone())?;
            }
            Ok((version, replaced))
        });
        let (version, replaced) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => {
                self.free(&fresh);
                return Err(e);
            }
        };
        // Publishing waits for gets of the old version to finish; after it none can start.
        *entry.state.write() = Some(Arc::new(version));
        self.free(&replaced);
        Ok(PutInfo {
            size: content.size,
            durable,
            targets: put_targets,
        })
    }

    /// Commits `version` as the request's blob, once the committer synced the file targets
    /// `sync` (those the put wrote): the metadata never points at pages not on the device.
    fn commit_version(
        &self,
        req: &PutRequest<'_>,
        version: &Version,
        sync: Vec<usize>,
    ) -> Result<(), BlobError> {
        let stored: Vec<StoredExtent> = version
            .extents
            .iter()
            .map(|e| StoredExtent {
                lpage: e.lpage,
                npages: e.npages,
                persistent_id: self.targets[e.target]
                    .persistent_id
                    .expect("durable blobs live on file targets"),
                ppage: e.ppage,
            })
            .collect();
        self.committer.commit(MetaOp::PutBlob {
            tag: req.tag.0,
            name: req.name.to_owned(),
            value: meta::encode(version.size, &stored),
            sync,
        })
    }

    /// Writes the fresh pages with `content`, a chunk of at most [`CHUNK_PAGES`] at a time.
    fn write_fresh(
        &self,
        fresh: &[Extent],
        content: &Content<'_>,
        fill: &mut Fill<'_>,
    ) -> Result<(), BlobError> {
        let mut files = FileWrites::new(self.rings.as_ref());
        for e in fresh {
            let mut done = 0;
            while done < e.npages {
                let n = (e.npages - done).min(CHUNK_PAGES);
                let lstart = (e.lpage + done) * PAGE_SIZE;
                let ppage = e.ppage + done;
                match &self.targets[e.target].area {
                    Area::Object => unreachable!("no extent lies on the object target"),
                    Area::Ram(ram) => {
                        // SAFETY: these pages were just allocated to this put and are not
                        // published, so no one else reads or writes them.
                        let dst = unsafe { ram.pages_mut(ppage, n) };
                        self.compose(content, dst, lstart, fill)?;
                    }
                    Area::File(file) => files.write(file, ppage, n, |buf| {
                        self.compose(content, buf, lstart, fill)
                    })?,
                }
                done += n;
            }
        }
        // Early returns above drop the pipeline, which waits for its writes before its buffers go.
        files.finish()
    }

    /// Fills `dst`, the bytes of logical positions `lstart..`, with the new content.
    fn compose(
        &self,
        content: &Content<'_>,
        dst: &mut [u8],
        lstart: u64,
        fill: &mut Fill<'_>,
    ) -> Result<(), BlobError> {
        let lend = lstart + dst.len() as u64;
        let a = content.offset.clamp(lstart, lend);
        let b = content.end.clamp(lstart, lend);
        let rel = |x: u64| (x - lstart) as usize;
        // Head and tail come from the old version (zeros where it has none).
        self.old_bytes(content.old, lstart, &mut dst[..rel(a)])?;
        if b > a {
            fill(a - content.offset, &mut dst[rel(a)..rel(b)])?;
        }
        let tail_end = content.size.clamp(b, lend);
        self.old_bytes(content.old, b, &mut dst[rel(b)..rel(tail_end)])?;
        dst[rel(tail_end)..].fill(0);
        Ok(())
    }

    /// Fills `dst` with the bytes of `old` from `pos` on: zeros past its size, or without one.
    fn old_bytes(&self, old: Option<&Version>, pos: u64, dst: &mut [u8]) -> Result<(), BlobError> {
        if dst.is_empty() {
            return Ok(());
        }
        let Some(v) = old else {
            dst.fill(0);
            return Ok(());
        };
        let have = v.size.saturating_sub(pos).min(dst.len() as u64) as usize;
        dst[have..].fill(0);
        if have > 0 {
            let (head, _) = dst.split_at_mut(have);
            self.read_version(v, pos, have as u64, &mut |at, src| {
                head[at as usize..at as usize + src.len()].copy_from_slice(src);
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// A put's file chunks: through io_uring with several writes in flight (the next chunk composed
/// meanwhile) where the kernel allows it, else `pwrite` from one bounce buffer.
struct FileWrites<'a> {
    rings: Option<&'a Rings>,
    /// Made at the first file chunk; `None` after that: no rings, or none to spare.
    pipe: Option<Pipeline<'a>>,
    tried_pipe: bool,
    bounce: Option<AlignedBuf>,
}

impl<'a> FileWrites<'a> {
    fn new(rings: Option<&'a Rings>) -> Self {
        FileWrites {
            rings,
            pipe: None,
            tried_pipe: false,
            bounce: None,
        }
    }

    /// Writes `n` pages at page `ppage` of `file`, their bytes composed by `compose` into the
    /// buffer they go from.
    fn write(
        &mut self,
        file: &'a FileArea,
        ppage: u64,
        n: u64,
        compose: impl FnOnce(&mut [u8]) -> Result<(), BlobError>,
    ) -> Result<(), BlobError> {
        let bytes = (n * PAGE_SIZE) as usize;
        if !self.tried_pipe {
            self.pipe = self.rings.and_then(Pipeline::new);
            self.tried_pipe = true;
        }
        if let Some(p) = self.pipe.as_mut() {
            // Compose this chunk while earlier ones are being written.
            let slot = p.free_slot(bytes)?;
            compose(p.buf(slot, bytes))?;
            return p.submit(slot, file, ppage, bytes);
        }
        if self.bounce.as_ref().is_none_or(|b| b.len() < bytes) {
            self.bounce = Some(AlignedBuf::new(bytes));
        }
        let buf = &mut self.bounce.as_mut().expect("set above")[..bytes];
        compose(buf)?;
        file.write_pages(ppage, buf)
    }

    /// Waits for the writes still in flight.
    fn finish(&mut self) -> Result<(), BlobError> {
        match self.pipe.as_mut() {
            Some(p) => p.finish(),
            None => Ok(()),
        }
    }
}
