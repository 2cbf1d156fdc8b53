//! A RAM target's bytes: one anonymous mapping of its capacity, its pages handed out under the
//! store's page ownership.

use std::io;

use crate::PAGE_SIZE;

/// An anonymous mapping of a RAM target's capacity.
pub(crate) struct RamArea {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; who may touch which pages is governed by the store's
// page ownership (a writer owns freshly allocated pages alone; published pages are only read),
// which the unsafe accessors below require of their callers.
unsafe impl Send for RamArea {}
// SAFETY: see Send.
unsafe impl Sync for RamArea {}

impl RamArea {
    pub(super) fn new(len: usize) -> io::Result<RamArea> {
        if len == 0 {
            return Ok(RamArea {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len: 0,
            });
        }
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        // MAP_NORESERVE: pages are committed as they are first written, not up front.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(RamArea { ptr: p.cast(), len })
    }

    /// The bytes of pages `page..page+n`.
    ///
    /// # Safety
    /// No one may write these pages while the slice lives.
    pub(crate) unsafe fn pages(&self, page: u64, n: u64) -> &[u8] {
        let (off, len) = self.span(page, n);
        // SAFETY: span() checked the range lies in the mapping; the caller excludes writers.
        unsafe { std::slice::from_raw_parts(self.ptr.add(off), len) }
    }

    /// The bytes of pages `page..page+n`, writable.
    ///
    /// # Safety
    /// The caller must own these pages alone (freshly allocated, not yet published) while the
    /// slice lives.
    #[allow(
        clippy::mut_from_ref,
        reason = "a put writes its own fresh pages of the shared mapping: the safety contract \
                  gives it those pages alone"
    )]
    pub(crate) unsafe fn pages_mut(&self, page: u64, n: u64) -> &mut [u8] {
        let (off, len) = self.span(page, n);
        // SAFETY: span() checked the range lies in the mapping; the caller owns the pages alone.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), len) }
    }

    fn span(&self, page: u64, n: u64) -> (usize, usize) {
        let off = (page * PAGE_SIZE) as usize;
        let len = (n * PAGE_SIZE) as usize;
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "page range outside RAM target"
        );
        (off, len)
    }
}

impl Drop for RamArea {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: ptr/len are the mapping made in new(); no slice outlives the store.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}
