//! A local put, copy-on-write: it never writes pages that a reader may see. It reserves new
//! pages for every page its range touches and writes them (the untouched head and tail of the
//! first and last page copied from the old version; bytes past the new size zeros), raw or in
//! compressed frames (`compress`); for a long-term blob the committer `fdatasync`s the target
//! files and commits the new extent map to redb (a temporary blob's map is committed without
//! the sync); then the put publishes the new version in the index under the blob's lock for writing
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
use crate::compress::{self, Packer, FRAME_PAGES, SAMPLE_BYTES};
use crate::context::{Codec, Compression, Persistence, Preset, PutContext};
use crate::error::{BlobError, FillError};
use crate::extent::{cover_packed, replace_range, targets_of, Extent, Version};
use crate::meta::{self, MetaOp, StoredExtent, StoredVersion};
use crate::placement::{self, Reservation};
use crate::target::{AlignedBuf, Area, FileArea};
use crate::types::{Fill, PutInfo, TagId, CHUNK_PAGES, PAGE_SIZE};
use crate::uring::{Dir, Pipeline, Rings};

/// A put's blob, range, placement and context, checked by the store.
pub(crate) struct PutRequest<'a> {
    pub(crate) tag: TagId,
    pub(crate) name: &'a str,
    pub(crate) offset: u64,
    /// Where the range ends: past `offset`, within the largest blob size.
    pub(crate) end: u64,
    /// The score checked: `None` for automatic placement.
    pub(crate) score: Option<f32>,
    pub(crate) context: PutContext,
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
    tag: TagId,
    name: &'v str,
    old: Option<&'v Version>,
    offset: u64,
    end: u64,
    size: u64,
}

/// A dynamic put's sample: the first bytes of its data, taken from `fill` to decide whether to
/// compress, then handed out again in their turn (a `fill` may be a stream: each byte is asked
/// for once).
struct Sampled<'f, 'a> {
    sample: Vec<u8>,
    fill: &'f mut Fill<'a>,
}

impl Sampled<'_, '_> {
    fn fill(&mut self, at: u64, dst: &mut [u8]) -> Result<(), FillError> {
        let have = self.sample.len() as u64;
        if at >= have {
            return (self.fill)(at, dst);
        }
        let n = ((have - at) as usize).min(dst.len());
        dst[..n].copy_from_slice(&self.sample[at as usize..at as usize + n]);
        if n < dst.len() {
            (self.fill)(at + n as u64, &mut dst[n..])?;
        }
        Ok(())
    }
}

/// The logical pages a put writes: raw, those its range touches, widened to whole the
/// compressed frames among them; compressing, whole frames of its codec.
struct Span {
    raw: (u64, u64),
    packed: Option<(Codec, Preset, (u64, u64))>,
}

impl Span {
    /// The span of `req` over a blob of `old_extents` that is `size` bytes after the put.
    fn of(req: &PutRequest<'_>, old_extents: &[Extent], size: u64) -> Self {
        let (p0, p1) = req.pages();
        let packed = match req.context.compression {
            Compression::Skip => None,
            Compression::Static(c, p) | Compression::Dynamic(c, p) => {
                Some((c, p, frame_range(old_extents, p0, p1, size)))
            }
        };
        Self {
            raw: cover_packed(old_extents, p0, p1),
            packed,
        }
    }

    /// The pages to reserve, uncompressed, before anything is written.
    fn reserved(&self) -> (u64, u64) {
        self.packed.map_or(self.raw, |(_, _, frames)| frames)
    }
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
    /// committed (a long-term or temporary blob) and published, the pages it replaced freed. A
    /// failure gives the fresh pages back and leaves the blob as it was.
    ///
    /// A compressing put rewrites whole frames: its range widened to the frames it touches.
    /// Any put rewrites whole the compressed frames it touches. It reserves pages for the
    /// widened range uncompressed, before asking `fill` for anything, and gives back what the
    /// frames did not need.
    fn put_locked(
        &self,
        entry: &BlobEntry,
        req: &PutRequest<'_>,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        let old = entry.state.read().clone();
        let wanted = req.context.persistence;
        let class = old.as_ref().map(|v| v.class);
        if class == Some(Persistence::Volatile) && wanted > Persistence::Volatile {
            return Err(BlobError::ClassTooLow {
                tag: req.tag,
                name: req.name.to_owned(),
                class: Persistence::Volatile,
                wanted,
            });
        }
        let content = Content {
            tag: req.tag,
            name: req.name,
            old: old.as_deref(),
            offset: req.offset,
            end: req.end,
            size: old.as_ref().map_or(0, |v| v.size).max(req.end),
        };
        let old_extents = old.as_ref().map_or(&[][..], |v| &v.extents);
        let span = Span::of(req, old_extents, content.size);
        let (r0, r1) = span.reserved();
        let on_file = class.map(|c| c != Persistence::Volatile);
        let mut reserved = placement::reserve(&self.targets, r1 - r0, req.score, wanted, on_file)?;
        let new_class = match class {
            Some(c) => c.max(wanted),
            None if !reserved.durable => Persistence::Volatile,
            None if wanted == Persistence::Temporary => Persistence::Temporary,
            None => Persistence::LongTerm,
        };
        let mut fresh = Vec::new();
        let written = self.write_fresh(req, &content, &span, &mut reserved, fill, &mut fresh);
        reserved.give_back(&self.targets);
        let put_targets = targets_of(&fresh);
        let prepared = written.and_then(|(w0, w1)| {
            let (extents, replaced) = replace_range(old_extents, &fresh, w0, w1);
            let version = Version {
                size: content.size,
                class: new_class,
                extents,
            };
            let sync = match new_class {
                Persistence::Volatile | Persistence::Temporary => None,
                // A temporary blob asked to be long-term: every page of it synced.
                Persistence::LongTerm if class != Some(Persistence::LongTerm) => {
                    Some(targets_of(&version.extents))
                }
                Persistence::LongTerm => Some(put_targets.clone()),
            };
            if new_class != Persistence::Volatile {
                self.commit_version(req, &version, sync.unwrap_or_default())?;
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
            durable: new_class != Persistence::Volatile,
            persistence: new_class,
            targets: put_targets,
        })
    }

    /// Writes the put's pages into `reserved`, raw or in compressed frames as `span` says
    /// (raw after all where a dynamic put's sample does not compress), each written extent
    /// pushed to `fresh`: the logical pages written.
    fn write_fresh(
        &self,
        req: &PutRequest<'_>,
        content: &Content<'_>,
        span: &Span,
        reserved: &mut Reservation,
        fill: &mut Fill<'_>,
        fresh: &mut Vec<Extent>,
    ) -> Result<(u64, u64), BlobError> {
        let mut sampled = Sampled {
            sample: Vec::new(),
            fill,
        };
        if let Compression::Dynamic(c, _) = req.context.compression {
            let n = SAMPLE_BYTES.min((req.end - req.offset) as usize);
            sampled.sample.resize(n, 0);
            (sampled.fill)(0, &mut sampled.sample)?;
            if !compress::worth_it(c, &sampled.sample) {
                return self.write_raw(reserved, span.raw, content, &mut sampled, fresh);
            }
        }
        match span.packed {
            Some((c, preset, frames)) => {
                let packer = Packer::new(c, preset);
                self.write_packed(reserved, frames, content, &mut sampled, packer, fresh)?;
                Ok(frames)
            }
            None => self.write_raw(reserved, span.raw, content, &mut sampled, fresh),
        }
    }

    /// Commits `version` as the request's blob, once the committer synced the file targets
    /// `sync`: the metadata of a long-term blob never points at pages not on the device.
    fn commit_version(
        &self,
        req: &PutRequest<'_>,
        version: &Version,
        sync: Vec<usize>,
    ) -> Result<(), BlobError> {
        let extents: Vec<StoredExtent> = version
            .extents
            .iter()
            .map(|e| StoredExtent {
                lpage: e.lpage,
                npages: e.npages,
                persistent_id: self.targets[e.target]
                    .persistent_id
                    .expect("kept blobs live on file targets"),
                ppage: e.ppage,
                packed: e.packed,
            })
            .collect();
        let stored = StoredVersion {
            class: version.class,
            boot: if version.class == Persistence::Temporary {
                self.boot
            } else {
                [0; 16]
            },
            size: version.size,
            extents,
        };
        self.committer.commit(MetaOp::PutBlob {
            tag: req.tag.0,
            name: req.name.to_owned(),
            value: meta::encode(&stored),
            sync,
        })
    }

    /// Writes logical pages `range` raw, on pages taken from `reserved` (into `fresh`); the
    /// range written.
    fn write_raw(
        &self,
        reserved: &mut Reservation,
        (p0, p1): (u64, u64),
        content: &Content<'_>,
        fill: &mut Sampled<'_, '_>,
        fresh: &mut Vec<Extent>,
    ) -> Result<(u64, u64), BlobError> {
        fresh.extend(reserved.take_extents(p0, p1 - p0));
        let mut files = FileWrites::new(self.rings.as_ref());
        for e in fresh.iter() {
            let mut done = 0;
            while done < e.npages {
                let n = (e.npages - done).min(CHUNK_PAGES);
                let lstart = (e.lpage + done) * PAGE_SIZE;
                self.write_to(&mut files, e.target, e.ppage + done, n, |dst| {
                    self.compose(content, dst, lstart, fill)
                })?;
                done += n;
            }
        }
        // Early returns above drop the pipeline, which waits for its writes before its buffers go.
        files.finish()?;
        Ok((p0, p1))
    }

    /// Writes logical pages `p0..p1` (whole frames, or up to the blob's end) frame by frame:
    /// each composed, compressed, and stored in the pages it needs when that saves a page and
    /// the front of `reserved` has them in one run; else raw. The extents go to `fresh`.
    fn write_packed(
        &self,
        reserved: &mut Reservation,
        (p0, p1): (u64, u64),
        content: &Content<'_>,
        fill: &mut Sampled<'_, '_>,
        mut packer: Packer,
        fresh: &mut Vec<Extent>,
    ) -> Result<(), BlobError> {
        let mut staging = vec![0u8; (FRAME_PAGES * PAGE_SIZE) as usize];
        let mut files = FileWrites::new(self.rings.as_ref());
        let mut f0 = p0;
        while f0 < p1 {
            let f1 = ((f0 / FRAME_PAGES + 1) * FRAME_PAGES).min(p1);
            let n = f1 - f0;
            let frame = &mut staging[..(n * PAGE_SIZE) as usize];
            self.compose(content, frame, f0 * PAGE_SIZE, fill)?;
            let limit = ((n - 1) * PAGE_SIZE) as usize;
            let packed = packer.pack(frame, limit).and_then(|(p, bytes)| {
                let at = reserved.take_contiguous(p.pages())?;
                Some((p, bytes, at))
            });
            if let Some((p, bytes, (target, ppage))) = packed {
                fresh.push(Extent {
                    lpage: f0,
                    npages: n,
                    target,
                    ppage,
                    packed: Some(p),
                });
                self.write_to(&mut files, target, ppage, p.pages(), |dst| {
                    dst[..bytes.len()].copy_from_slice(bytes);
                    dst[bytes.len()..].fill(0);
                    Ok(())
                })?;
            } else {
                for e in reserved.take_extents(f0, n) {
                    fresh.push(e);
                    let from = ((e.lpage - f0) * PAGE_SIZE) as usize;
                    let src = &frame[from..from + (e.npages * PAGE_SIZE) as usize];
                    self.write_to(&mut files, e.target, e.ppage, e.npages, |dst| {
                        dst.copy_from_slice(src);
                        Ok(())
                    })?;
                }
            }
            f0 = f1;
        }
        files.finish()
    }

    /// Writes `n` fresh pages (at most [`CHUNK_PAGES`]) at page `ppage` of target `target`,
    /// their bytes made by `compose` in the target's memory (RAM) or a buffer (file).
    fn write_to<'s>(
        &'s self,
        files: &mut FileWrites<'s>,
        target: usize,
        ppage: u64,
        n: u64,
        compose: impl FnOnce(&mut [u8]) -> Result<(), BlobError>,
    ) -> Result<(), BlobError> {
        match &self.targets[target].area {
            Area::Object => unreachable!("no extent lies on the object target"),
            Area::Ram(ram) => {
                // SAFETY: these pages were just allocated to this put and are not
                // published, so no one else reads or writes them.
                let dst = unsafe { ram.pages_mut(ppage, n) };
                compose(dst)
            }
            Area::File(file) => files.write(file, ppage, n, compose),
        }
    }

    /// Fills `dst`, the bytes of logical positions `lstart..`, with the new content.
    fn compose(
        &self,
        content: &Content<'_>,
        dst: &mut [u8],
        lstart: u64,
        fill: &mut Sampled<'_, '_>,
    ) -> Result<(), BlobError> {
        let lend = lstart + dst.len() as u64;
        let a = content.offset.clamp(lstart, lend);
        let b = content.end.clamp(lstart, lend);
        let rel = |x: u64| (x - lstart) as usize;
        // Head and tail come from the old version (zeros where it has none).
        self.old_bytes(content, lstart, &mut dst[..rel(a)])?;
        if b > a {
            fill.fill(a - content.offset, &mut dst[rel(a)..rel(b)])?;
        }
        let tail_end = content.size.clamp(b, lend);
        self.old_bytes(content, b, &mut dst[rel(b)..rel(tail_end)])?;
        dst[rel(tail_end)..].fill(0);
        Ok(())
    }

    /// Fills `dst` with the bytes of the old version from `pos` on: zeros past its size, or
    /// without one.
    fn old_bytes(&self, content: &Content<'_>, pos: u64, dst: &mut [u8]) -> Result<(), BlobError> {
        if dst.is_empty() {
            return Ok(());
        }
        let Some(v) = content.old else {
            dst.fill(0);
            return Ok(());
        };
        let have = v.size.saturating_sub(pos).min(dst.len() as u64) as usize;
        dst[have..].fill(0);
        if have > 0 {
            let (head, _) = dst.split_at_mut(have);
            let blob = (content.tag, content.name);
            self.read_version(v, blob, pos..pos + have as u64, &mut |at, src| {
                head[at as usize..at as usize + src.len()].copy_from_slice(src);
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// The logical pages a compressing put of pages `p0..p1` rewrites: the whole frames they
/// touch, up to the new size's last page, and whole every compressed frame they touch.
fn frame_range(old: &[Extent], p0: u64, p1: u64, size: u64) -> (u64, u64) {
    let a = p0 / FRAME_PAGES * FRAME_PAGES;
    let b = (p1.div_ceil(FRAME_PAGES) * FRAME_PAGES).min(size.div_ceil(PAGE_SIZE));
    cover_packed(old, a, b)
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
            return p.submit(Dir::Write, slot, file, ppage, bytes);
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
