//! A local get: the blob's published version read under its read lock (which keeps its pages
//! from being freed), holes as zeros, RAM pages straight from the mapping, file pages through
//! io_uring (several reads in flight, handed on in order) or a bounce buffer. Gets never touch
//! redb: the in-memory index is the read path.

use std::collections::VecDeque;
use std::ops::Range;

use super::{not_found, LocalStore};
use crate::blob_range::BlobRange;
use crate::compress::{self, Packed};
use crate::error::BlobError;
use crate::extent::{Extent, Version};
use crate::target::{AlignedBuf, Area, FileArea, Target};
use crate::types::{Drain, Sink, TagId, CHUNK_PAGES, PAGE_SIZE};
use crate::uring::{Dir, Pipeline, Rings};

static ZEROS: [u8; 65536] = [0; 65536];

impl LocalStore {
    /// Reads the bytes of `range` into `drain` (see [`crate::BlobStore::get_with`]).
    pub(crate) fn get(&self, range: BlobRange<'_>, drain: &mut Drain<'_>) -> Result<(), BlobError> {
        let (tag, name, offset, len) = (range.tag, range.name, range.offset, range.len);
        let entry = self.published(tag, name)?;
        if len == 0 {
            return Err(BlobError::EmptyRange);
        }
        // The read lock is held while copying: the version's pages cannot be freed meanwhile.
        let state = entry.state.read();
        let Some(v) = state.as_ref() else {
            return Err(not_found(tag, name));
        };
        if offset.checked_add(len).is_none_or(|e| e > v.size) {
            return Err(BlobError::OutOfRange {
                size: v.size,
                offset,
                len,
            });
        }
        self.read_version(v, (tag, name), offset..offset + len, &mut |at, src| {
            drain(at, src).map_err(BlobError::Fill)
        })
    }

    /// Streams the bytes `range` of `v` (within its size), a version of blob `blob`, to
    /// `sink(offset_within, bytes)` in order; compressed frames decompressed, a damaged one
    /// [`BlobError::CorruptFrame`]. The caller keeps `v`'s pages from being freed.
    pub(crate) fn read_version(
        &self,
        v: &Version,
        blob: (TagId, &str),
        range: Range<u64>,
        sink: &mut Sink<'_>,
    ) -> Result<(), BlobError> {
        let (pos, end) = (range.start, range.end);
        let mut at = pos;
        let mut chunks = Chunks::new(self, pos);
        let mut i = v
            .extents
            .partition_point(|e| (e.lpage + e.npages) * PAGE_SIZE <= pos);
        while at < end {
            let ext = v.extents.get(i).filter(|e| e.lpage * PAGE_SIZE < end);
            let hole_end = ext.map_or(end, |e| (e.lpage * PAGE_SIZE).max(at));
            chunks.zeros(at, hole_end, sink)?;
            at = at.max(hole_end);
            let Some(e) = ext else { break };
            let e_end = (e.lend() * PAGE_SIZE).min(end);
            if let Some(packed) = &e.packed {
                chunks.frame(e, packed, blob, at, e_end, sink)?;
                at = e_end;
            }
            while at < e_end {
                at += chunks.pages(e, at, e_end, sink)? as u64;
            }
            i += 1;
        }
        chunks.flush(sink)
    }
}

/// A read's chunks on their way to its sink, in order.
struct Chunks<'a> {
    targets: &'a [Target],
    /// Where the read starts: chunks go to the sink at their offset from it.
    pos: u64,
    /// The store's io_uring rings, when the kernel allows them.
    rings: Option<&'a Rings>,
    /// File reads through io_uring (a sink may write a stream, so they reach it in the order
    /// asked for): taken at the first file chunk, so a get from RAM alone takes no ring (a
    /// ring comes from a pool every worker shares).
    reads: Option<Reads<'a>>,
    /// Else file pages come through this, read with `pread` (and compressed frames, always).
    bounce: Option<AlignedBuf>,
    /// A compressed frame's bytes, decompressed.
    frame: Vec<u8>,
}

impl<'a> Chunks<'a> {
    fn new(store: &'a LocalStore, pos: u64) -> Self {
        Chunks {
            targets: &store.targets,
            pos,
            rings: store.rings.as_ref(),
            reads: None,
            bounce: None,
            frame: Vec::new(),
        }
    }

    /// The bytes `at..e_end` of the compressed frame `e` of blob `blob`: its pages read,
    /// checked and decompressed whole; [`BlobError::CorruptFrame`] when they do not check or
    /// decompress.
    fn frame(
        &mut self,
        e: &Extent,
        packed: &Packed,
        blob: (TagId, &str),
        at: u64,
        e_end: u64,
        sink: &mut Sink<'_>,
    ) -> Result<(), BlobError> {
        self.flush(sink)?;
        let bytes = (packed.pages() * PAGE_SIZE) as usize;
        self.frame.resize((e.npages * PAGE_SIZE) as usize, 0);
        let unpacked = match &self.targets[e.target].area {
            Area::Object => unreachable!("no extent lies on the object target"),
            Area::Ram(ram) => {
                // SAFETY: the pages belong to a published version the caller holds, and
                // published pages are never written.
                let src = unsafe { ram.pages(e.ppage, packed.pages()) };
                compress::unpack(packed, src, &mut self.frame)
            }
            Area::File(file) => {
                if self.bounce.as_ref().is_none_or(|b| b.len() < bytes) {
                    self.bounce = Some(AlignedBuf::new(bytes));
                }
                let buf = &mut self.bounce.as_mut().expect("set above")[..bytes];
                file.read_pages(e.ppage, buf)?;
                compress::unpack(packed, buf, &mut self.frame)
            }
        };
        let start = e.lpage * PAGE_SIZE;
        if !unpacked {
            return Err(BlobError::CorruptFrame {
                tag: blob.0,
                name: blob.1.to_owned(),
                offset: start,
            });
        }
        let part = &self.frame[(at - start) as usize..(e_end - start) as usize];
        sink(at - self.pos, part)
    }

    /// Zeros for the hole `at..hole_end` (nothing when it is empty), after every read before it.
    fn zeros(&mut self, mut at: u64, hole_end: u64, sink: &mut Sink<'_>) -> Result<(), BlobError> {
        if at < hole_end {
            self.flush(sink)?;
        }
        while at < hole_end {
            let n = (hole_end - at).min(ZEROS.len() as u64);
            sink(at - self.pos, &ZEROS[..n as usize])?;
            at += n;
        }
        Ok(())
    }

    /// The bytes of `e` from `at` on, up to `e_end` and at most [`CHUNK_PAGES`] pages: handed on
    /// (a RAM target) or read (a file target). Returns how many bytes.
    fn pages(
        &mut self,
        e: &Extent,
        at: u64,
        e_end: u64,
        sink: &mut Sink<'_>,
    ) -> Result<usize, BlobError> {
        let page_in = at / PAGE_SIZE - e.lpage;
        let n_pages = (e_end.div_ceil(PAGE_SIZE) - at / PAGE_SIZE).min(CHUNK_PAGES);
        let skip = (at % PAGE_SIZE) as usize;
        let take = (e_end - at).min(n_pages * PAGE_SIZE - skip as u64) as usize;
        let targets = self.targets;
        match &targets[e.target].area {
            Area::Object => unreachable!("no extent lies on the object target"),
            Area::Ram(ram) => {
                self.flush(sink)?;
                // SAFETY: the pages belong to a published version the caller holds, and
                // published pages are never written.
                let src = unsafe { ram.pages(e.ppage + page_in, n_pages) };
                sink(at - self.pos, &src[skip..skip + take])?;
            }
            Area::File(file) => {
                let chunk = ReadChunk {
                    at: at - self.pos,
                    skip,
                    take,
                    bytes: (n_pages * PAGE_SIZE) as usize,
                };
                self.file(file, e.ppage + page_in, chunk, sink)?;
            }
        }
        Ok(take)
    }

    /// Reads `chunk` from page `page` of `file`.
    fn file(
        &mut self,
        file: &'a FileArea,
        page: u64,
        chunk: ReadChunk,
        sink: &mut Sink<'_>,
    ) -> Result<(), BlobError> {
        if self.reads.is_none() {
            // Tried once: a ring refused now is refused for the rest of this read too.
            self.reads = self.rings.take().and_then(Pipeline::new).map(Reads::new);
        }
        if let Some(r) = self.reads.as_mut() {
            return r.read((file, page), chunk, sink);
        }
        if self.bounce.as_ref().is_none_or(|b| b.len() < chunk.bytes) {
            self.bounce = Some(AlignedBuf::new(chunk.bytes));
        }
        let buf = &mut self.bounce.as_mut().expect("set above")[..chunk.bytes];
        file.read_pages(page, buf)?;
        sink(chunk.at, &buf[chunk.skip..chunk.skip + chunk.take])
    }

    /// Hands on every file read still in flight.
    fn flush(&mut self, sink: &mut Sink<'_>) -> Result<(), BlobError> {
        match self.reads.as_mut() {
            Some(r) => r.flush(sink),
            None => Ok(()),
        }
    }
}

/// A file chunk of a get: `bytes` of whole pages read, of which `take` from `skip` go to the
/// sink at offset `at`.
#[derive(Clone, Copy)]
struct ReadChunk {
    at: u64,
    skip: usize,
    take: usize,
    bytes: usize,
}

/// A get's file reads through io_uring: several in flight, handed to the sink in the order
/// they were asked for.
struct Reads<'a> {
    pipe: Pipeline<'a>,
    /// Submitted, not yet sunk: slot and chunk, oldest first.
    queue: VecDeque<(usize, ReadChunk)>,
    /// Slots whose read completed but that are not yet sunk.
    done: Vec<usize>,
}

impl<'a> Reads<'a> {
    fn new(pipe: Pipeline<'a>) -> Self {
        Reads {
            pipe,
            queue: VecDeque::new(),
            done: Vec::new(),
        }
    }

    /// Starts reading `chunk` at `(file, page)`, sinking the oldest reads first when every
    /// buffer is in use.
    fn read(
        &mut self,
        (file, page): (&'a FileArea, u64),
        chunk: ReadChunk,
        sink: &mut Sink<'_>,
    ) -> Result<(), BlobError> {
        let slot = loop {
            if let Some(slot) = self.pipe.read_slot(chunk.bytes) {
                break slot;
            }
            self.sink_oldest(sink)?;
        };
        self.pipe.submit(Dir::Read, slot, file, page, chunk.bytes)?;
        self.queue.push_back((slot, chunk));
        Ok(())
    }

    /// Waits for the oldest read and hands its bytes to `sink`.
    fn sink_oldest(&mut self, sink: &mut Sink<'_>) -> Result<(), BlobError> {
        let Some(&(slot, chunk)) = self.queue.front() else {
            return Ok(());
        };
        while !self.done.contains(&slot) {
            let finished = self.pipe.wait_read()?;
            self.done.push(finished);
        }
        self.done.retain(|&s| s != slot);
        self.queue.pop_front();
        let buf = self.pipe.read_buf(slot, chunk.bytes);
        let sunk = sink(chunk.at, &buf[chunk.skip..chunk.skip + chunk.take]);
        self.pipe.release_read(slot);
        sunk
    }

    /// Sinks every read still queued, in order.
    fn flush(&mut self, sink: &mut Sink<'_>) -> Result<(), BlobError> {
        while !self.queue.is_empty() {
            self.sink_oldest(sink)?;
        }
        Ok(())
    }
}
