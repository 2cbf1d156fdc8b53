//! A zeroed heap buffer aligned to a page, as `O_DIRECT` needs: the file data path's bounce
//! buffers and io_uring slots.

use crate::PAGE_SIZE;

/// A zeroed heap buffer aligned to [`PAGE_SIZE`], as O_DIRECT needs.
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `len` bytes (a multiple of PAGE_SIZE, non-zero).
    pub(crate) fn new(len: usize) -> AlignedBuf {
        assert!(len > 0 && len % PAGE_SIZE as usize == 0);
        let layout = std::alloc::Layout::from_size_align(len, PAGE_SIZE as usize).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is a live, initialised allocation of len bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout =
            std::alloc::Layout::from_size_align(self.len, PAGE_SIZE as usize).expect("layout");
        // SAFETY: allocated in new() with this very layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}
