//! io_uring for the file data path, where the kernel allows it (probed at open, refusal logged;
//! plain `pwrite`/`pread` where not): a put's file chunks are written with several writes in
//! flight (composing the next chunk while the previous ones reach the file), and a get's chunks
//! are read with several reads in flight (handing one to the caller while the next arrive).

use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;

use crate::error::BlobError;
use crate::target::{AlignedBuf, FileArea};
use crate::PAGE_SIZE;

/// Rings kept for reuse; a put takes one for its duration.
pub(crate) struct Rings {
    depth: u32,
    idle: Mutex<Vec<IoUring>>,
}

impl Rings {
    /// `None` when `depth` is 0 or the kernel refuses io_uring (old kernel, seccomp, sysctl).
    pub(crate) fn probe(depth: u32) -> Option<Rings> {
        if depth == 0 {
            return None;
        }
        match IoUring::new(depth) {
            Ok(ring) => Some(Rings {
                depth,
                idle: Mutex::new(vec![ring]),
            }),
            Err(err) => {
                tracing::info!(%err, "io_uring unavailable; file targets use pread and pwrite");
                None
            }
        }
    }

    fn take(&self) -> Option<IoUring> {
        if let Some(r) = self.idle.lock().pop() {
            return Some(r);
        }
        IoUring::new(self.depth).ok()
    }

    fn give(&self, ring: IoUring) {
        self.idle.lock().push(ring);
    }
}

/// Which way a request moves bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dir {
    Write,
    Read,
}

struct Slot<'a> {
    buf: AlignedBuf,
    /// The request in flight on this buffer: its direction, target file, file offset, length.
    io: Option<(Dir, &'a FileArea, u64, usize)>,
    /// A read's bytes are here (or on their way) and not yet taken: see `release_read`.
    held: bool,
}

/// Writes of one put or reads of one get, up to `depth` in flight. Buffers are only reused or
/// dropped after their request completed; dropping the pipeline waits for every one still in
/// flight.
pub(crate) struct Pipeline<'a> {
    rings: &'a Rings,
    ring: Option<IoUring>,
    slots: Vec<Slot<'a>>,
    in_flight: usize,
    /// Reads that could not be queued and were done at once, for wait_one to report.
    done_now: Vec<usize>,
    error: Option<BlobError>,
}

impl<'a> Pipeline<'a> {
    /// A pipeline on a ring of `rings`; `None` if no ring can be had (fall back to pwrite).
    pub(crate) fn new(rings: &'a Rings) -> Option<Pipeline<'a>> {
        let ring = rings.take()?;
        Some(Pipeline {
            rings,
            ring: Some(ring),
            slots: Vec::new(),
            in_flight: 0,
            done_now: Vec::new(),
            error: None,
        })
    }

    /// A free buffer of at least `bytes` bytes (waiting for a write to complete if all are
    /// busy): its slot index.
    pub(crate) fn free_slot(&mut self, bytes: usize) -> Result<usize, BlobError> {
        let free = match self.idle_or_new_slot(bytes, |s| s.io.is_none()) {
            Some(i) => i,
            None => self.wait_one()?,
        };
        self.fit(free, bytes);
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        Ok(free)
    }

    /// The buffer of a free slot.
    pub(crate) fn buf(&mut self, slot: usize, bytes: usize) -> &mut [u8] {
        debug_assert!(self.slots[slot].io.is_none());
        &mut self.slots[slot].buf[..bytes]
    }

    /// A buffer of at least `bytes` bytes for a read, without waiting (`None`: all `depth` are
    /// in flight; reap one with [`wait_read`](Self::wait_read) first).
    pub(crate) fn read_slot(&mut self, bytes: usize) -> Option<usize> {
        let free = self.idle_or_new_slot(bytes, |s| s.io.is_none() && !s.held)?;
        self.fit(free, bytes);
        Some(free)
    }

    /// The first slot `idle` takes, else a new one (a buffer of `bytes`) while there are
    /// fewer than `depth`; `None` when neither.
    fn idle_or_new_slot(
        &mut self,
        bytes: usize,
        idle: impl Fn(&Slot<'a>) -> bool,
    ) -> Option<usize> {
        if let Some(i) = self.slots.iter().position(idle) {
            return Some(i);
        }
        if self.slots.len() >= self.rings.depth as usize {
            return None;
        }
        self.slots.push(Slot {
            buf: AlignedBuf::new(bytes),
            io: None,
            held: false,
        });
        Some(self.slots.len() - 1)
    }

    /// Grows `slot`'s buffer to at least `bytes`.
    fn fit(&mut self, slot: usize, bytes: usize) {
        if self.slots[slot].buf.len() < bytes {
            self.slots[slot].buf = AlignedBuf::new(bytes);
        }
    }

    /// Waits for the next read to complete: its slot, whose buffer holds the bytes until the
    /// slot is used again. A failed or short read is redone with pread.
    pub(crate) fn wait_read(&mut self) -> Result<usize, BlobError> {
        let slot = self.wait_one()?;
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(slot),
        }
    }

    /// The first `bytes` of a slot whose read completed.
    pub(crate) fn read_buf(&self, slot: usize, bytes: usize) -> &[u8] {
        debug_assert!(self.slots[slot].io.is_none());
        &self.slots[slot].buf[..bytes]
    }

    /// Gives a read's slot back once its bytes were taken.
    pub(crate) fn release_read(&mut self, slot: usize) {
        self.slots[slot].held = false;
    }

    /// Starts moving `bytes` (whole pages for a read) between `slot`'s buffer and page `page`
    /// of `file`: a write sends the buffer's first `bytes`; a read's bytes are there once
    /// [`wait_read`](Self::wait_read) returns the slot, which comes from
    /// [`read_slot`](Self::read_slot) and is held until [`release_read`](Self::release_read).
    pub(crate) fn submit(
        &mut self,
        dir: Dir,
        slot: usize,
        file: &'a FileArea,
        page: u64,
        bytes: usize,
    ) -> Result<(), BlobError> {
        if dir == Dir::Read {
            self.slots[slot].held = true;
        }
        let fd = file.fd_for_io();
        let off = page * PAGE_SIZE;
        let s = &mut self.slots[slot];
        let entry = match dir {
            Dir::Write => opcode::Write::new(types::Fd(fd), s.buf.as_ptr(), bytes as u32)
                .offset(off)
                .build(),
            Dir::Read => opcode::Read::new(types::Fd(fd), s.buf.as_mut_ptr(), bytes as u32)
                .offset(off)
                .build(),
        }
        .user_data(slot as u64);
        s.io = Some((dir, file, off, bytes));
        let ring = self.ring.as_mut().expect("ring held until drop");
        // SAFETY: the buffer stays allocated, and untouched by us, until this request's
        // completion is reaped (slots are reused only after wait_one, and Drop waits for all in
        // flight); the queue has room because at most `depth` requests are in flight on a ring
        // of `depth`.
        let pushed = unsafe { ring.submission().push(&entry) };
        if pushed.is_err() {
            s.io = None;
            return match dir {
                Dir::Write => file.write_pages(page, &s.buf[..bytes]),
                Dir::Read => {
                    // Done at once: reported by the next wait_read like a completion.
                    self.done_now.push(slot);
                    file.read_pages(page, &mut s.buf[..bytes])
                }
            };
        }
        self.in_flight += 1;
        loop {
            match ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if retry(&e) => continue,
                Err(e) => fatal(e),
            }
        }
    }

    /// Waits for one request to complete; returns its slot, now free. A failed or short write is
    /// completed with pwrite, a failed or short read redone with pread, or the error kept for
    /// the caller.
    fn wait_one(&mut self) -> Result<usize, BlobError> {
        if let Some(slot) = self.done_now.pop() {
            return Ok(slot);
        }
        let ring = self.ring.as_mut().expect("ring held until drop");
        let cqe = loop {
            if let Some(c) = ring.completion().next() {
                break c;
            }
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if retry(&e) => {}
                Err(e) => fatal(e),
            }
        };
        self.in_flight -= 1;
        let slot = cqe.user_data() as usize;
        let (dir, file, off, len) = self.slots[slot]
            .io
            .take()
            .expect("completion of a request in flight");
        let res = cqe.result();
        let page = off / PAGE_SIZE;
        if dir == Dir::Read {
            if res < 0 || (res as usize) < len {
                // Refused (O_DIRECT), failed or short: pread decides.
                if let Err(e) = file.read_pages(page, &mut self.slots[slot].buf[..len]) {
                    self.error.get_or_insert(e);
                }
            }
            return Ok(slot);
        }
        let buf = &self.slots[slot].buf[..len];
        let outcome = if res < 0 {
            // O_DIRECT refused for this request, or another error: pwrite decides.
            file.write_pages(page, buf)
        } else if (res as usize) < len {
            // A short write: the rest with pwrite on the buffered descriptor, at its byte offset.
            file.write_tail(off + res as u64, &buf[res as usize..])
        } else {
            Ok(())
        };
        if let Err(e) = outcome {
            self.error.get_or_insert(e);
        }
        Ok(slot)
    }

    /// Waits for every write in flight; the first error of any of them.
    pub(crate) fn finish(&mut self) -> Result<(), BlobError> {
        while self.in_flight > 0 {
            self.wait_one()?;
        }
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Pipeline<'_> {
    fn drop(&mut self) {
        while self.in_flight > 0 {
            let _ = self.wait_one();
        }
        if let Some(ring) = self.ring.take() {
            self.rings.give(ring);
        }
    }
}

fn retry(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}

/// io_uring_enter failed in a way that leaves unknown whether the kernel still uses our
/// buffers: freeing them could let it write freed memory, so stop the process.
fn fatal(e: std::io::Error) -> ! {
    tracing::error!(%e, "io_uring_enter failed with requests in flight; aborting");
    eprintln!("tandem-blob: io_uring_enter failed with requests in flight: {e}; aborting");
    std::process::abort()
}
