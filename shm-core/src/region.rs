//! What the bump arena and the size-class allocator share about the raw region
//! they are placed in: checking the base, publishing and reading the header's
//! magic word, validating a request, and offset arithmetic.

use crate::alloc_error::AllocError;
use crate::layout::CACHE_LINE;

/// Alignment an allocator region's base address must have. Headers are
/// cache-line aligned, and every alignment up to this one holds for the
/// absolute address in every mapping of the region.
pub const REGION_ALIGN: u64 = CACHE_LINE as u64;

/// The address of `ptr` as a `u64` (every supported target has addresses of
/// at most 64 bits).
pub(crate) fn address<T>(ptr: *const T) -> u64 {
    ptr.addr() as u64
}

/// Checks that a region can hold a header of `header_size` bytes at offset 0.
pub(crate) fn check_region(
    region: *mut u8,
    len: usize,
    header_size: usize,
) -> Result<(), AllocError> {
    let addr = address(region);
    if addr == 0 || addr % REGION_ALIGN != 0 {
        return Err(AllocError::BadRegionBase { addr });
    }
    if len < header_size {
        return Err(AllocError::RegionTooSmall {
            needed: header_size as u64,
            available: len as u64,
        });
    }
    Ok(())
}

/// Validates the arguments every `allocate` takes.
pub(crate) fn check_request(size: u64, align: u64) -> Result<(), AllocError> {
    if size == 0 {
        return Err(AllocError::ZeroSize);
    }
    if !align.is_power_of_two() {
        return Err(AllocError::BadAlignment(align));
    }
    Ok(())
}

/// `value` rounded up to a multiple of `align` (a power of two); `None` on
/// overflow.
pub(crate) fn align_up(value: u64, align: u64) -> Option<u64> {
    Some(value.checked_add(align - 1)? & !(align - 1))
}

/// `value` rounded down to a multiple of `align` (a power of two).
pub(crate) fn align_down(value: u64, align: u64) -> u64 {
    value & !(align - 1)
}

// The magic word is a plain `u64` in the layout (it is written once, before
// the header is shared), but it is the flag that publishes the header, so it
// is stored and loaded atomically through `AtomicU64::from_ptr`. This is the
// one place shm-core does not take its atomic from `crate::sync`: loom cannot
// wrap a plain field, and loom models initialise a region before spawning the
// threads that use it, so nothing is lost by not modelling this store.

/// Publishes an initialised header: every field written before this call is
/// visible to whoever reads `value` through [`load_magic`].
///
/// # Safety
/// `magic` is valid, 8-byte aligned, and only ever accessed atomically while
/// other parties may read it.
pub(crate) unsafe fn publish_magic(magic: *mut u64, value: u64) {
    // SAFETY: the caller guarantees validity, alignment and atomic-only access.
    let word = unsafe { core::sync::atomic::AtomicU64::from_ptr(magic) };
    // Release pairs with the Acquire in `load_magic`: an attacher that sees
    // the magic sees every header field written before it.
    word.store(value, core::sync::atomic::Ordering::Release);
}

/// Reads the magic word of a header published by [`publish_magic`].
///
/// # Safety
/// As for [`publish_magic`].
pub(crate) unsafe fn load_magic(magic: *const u64) -> u64 {
    // SAFETY: the caller guarantees validity, alignment and atomic-only
    // access; the atomic is only read through this shared reference.
    let word = unsafe { core::sync::atomic::AtomicU64::from_ptr(magic.cast_mut()) };
    word.load(core::sync::atomic::Ordering::Acquire)
}
