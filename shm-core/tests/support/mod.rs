//! Regions for the ring and allocator tests and benchmarks: a page-aligned heap block, and
//! (Linux) one memfd mapped twice at two addresses, as two processes would.
#![allow(dead_code, reason = "each test crate uses a different subset")]

use std::alloc::{alloc_zeroed, dealloc, Layout};

/// A zeroed heap region aligned like a mapped segment (a page): ring headers
/// need 64, and a page-aligned start also keeps the header's hot lines in the
/// same places, relative to 128-byte prefetch pairs, as in real shared memory.
pub struct AlignedRegion {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedRegion {
    pub fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len.max(1), 4096).expect("test region layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "test region allocation failed");
        Self { ptr, layout }
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for AlignedRegion {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

// SAFETY: the region is plain memory; the structures placed in it arbitrate
// access between threads themselves.
unsafe impl Send for AlignedRegion {}
// SAFETY: as above.
unsafe impl Sync for AlignedRegion {}

/// One memfd mapped twice: the same pages at two different addresses.
#[cfg(target_os = "linux")]
pub struct DoubleMapping {
    first: *mut u8,
    second: *mut u8,
    len: usize,
}

#[cfg(target_os = "linux")]
impl DoubleMapping {
    pub fn new(len: usize) -> Self {
        // SAFETY: plain libc calls with checked results; the name is a
        // NUL-terminated literal.
        unsafe {
            let fd = libc::memfd_create(c"tandem-ring-test".as_ptr(), 0);
            assert!(fd >= 0, "memfd_create failed");
            assert_eq!(
                libc::ftruncate(fd, len as libc::off_t),
                0,
                "ftruncate failed"
            );
            let map = || {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                );
                assert_ne!(p, libc::MAP_FAILED, "mmap failed");
                p.cast::<u8>()
            };
            let first = map();
            let second = map();
            libc::close(fd);
            Self { first, second, len }
        }
    }

    pub fn first(&self) -> *mut u8 {
        self.first
    }

    pub fn second(&self) -> *mut u8 {
        self.second
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(target_os = "linux")]
impl Drop for DoubleMapping {
    fn drop(&mut self) {
        // SAFETY: both were mapped in `new` with this length.
        unsafe {
            libc::munmap(self.first.cast(), self.len);
            libc::munmap(self.second.cast(), self.len);
        }
    }
}

#[cfg(target_os = "linux")]
// SAFETY: as for `AlignedRegion`.
unsafe impl Send for DoubleMapping {}
#[cfg(target_os = "linux")]
// SAFETY: as for `AlignedRegion`.
unsafe impl Sync for DoubleMapping {}

#[cfg(loom)]
mod loom_model;
#[cfg(loom)]
pub use loom_model::model;
