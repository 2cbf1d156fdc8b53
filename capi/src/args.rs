//! C arguments checked and borrowed as Rust values: a null pointer, a
//! string that is not UTF-8, a zero or oversized size becomes a
//! [`CapiError`] before anything runs.

use std::ffi::{c_char, CStr};
use std::time::{Duration, Instant};

use crate::error::{CapiError, CapiResult};

/// The largest buffer one call takes or fills: what a `usize` slice and
/// the runtime's `u64` lengths both hold, well past any heap it comes from.
pub(crate) const MAX_BYTES: usize = isize::MAX as usize;

/// The NUL-terminated UTF-8 string `ptr`, named `what` in errors.
///
/// # Safety
/// `ptr` is null or points at a NUL-terminated string that lives and does
/// not change while the returned borrow is used.
pub(crate) unsafe fn c_str<'a>(ptr: *const c_char, what: &str) -> CapiResult<&'a str> {
    if ptr.is_null() {
        return Err(CapiError::null(what));
    }
    // SAFETY: non-null, and NUL-terminated and live per the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) };
    bytes
        .to_str()
        .map_err(|_| CapiError::invalid(format!("{what} is not UTF-8")))
}

/// [`c_str`], or `None` for a null `ptr`.
///
/// # Safety
/// As [`c_str`].
pub(crate) unsafe fn opt_c_str<'a>(ptr: *const c_char, what: &str) -> CapiResult<Option<&'a str>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { c_str(ptr, what) }.map(Some)
}

/// The `len` bytes at `ptr`; zero bytes may come with a null pointer.
///
/// # Safety
/// `ptr` is null or valid for reads of `len` bytes that do not change
/// while the borrow is used.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize, what: &str) -> CapiResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(CapiError::null(what));
    }
    if len > MAX_BYTES {
        return Err(CapiError::invalid(format!(
            "{what}: {len} bytes is too many"
        )));
    }
    // SAFETY: non-null, in range, and readable for `len` bytes per the caller.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// The `len` writable bytes at `ptr`.
///
/// # Safety
/// `ptr` is null or valid for writes of `len` bytes, not otherwise
/// accessed while the borrow is used.
pub(crate) unsafe fn bytes_mut<'a>(
    ptr: *mut u8,
    len: usize,
    what: &str,
) -> CapiResult<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(CapiError::null(what));
    }
    if len > MAX_BYTES {
        return Err(CapiError::invalid(format!(
            "{what}: {len} bytes is too many"
        )));
    }
    // SAFETY: non-null, in range, and writable for `len` bytes per the caller.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// Writes `value` to the output argument `out`.
///
/// # Safety
/// `out` is null or valid for a write of a `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T, what: &str) -> CapiResult {
    if out.is_null() {
        return Err(CapiError::null(what));
    }
    // SAFETY: non-null and writable per the caller; `write` drops nothing
    // of what was there (C memory).
    unsafe { out.write(value) };
    Ok(())
}

/// Writes `text` NUL-terminated into `buf` of `cap` bytes, and the bytes it
/// takes (the NUL included) to `len` first, so that a `cap` too small is
/// `TANDEM_STATUS_INVALID_ARGUMENT` with `len` set all the same: a caller
/// sizes its buffer by one call and fills it by the next.
///
/// # Safety
/// `buf` is null or writable for `cap` bytes; `len` is null or writable.
pub(crate) unsafe fn write_text(
    text: &str,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
    what: &str,
) -> CapiResult {
    let needed = text.len() + 1;
    // SAFETY: the caller's contract.
    unsafe { write_out(len, needed, "len") }?;
    if cap < needed {
        return Err(CapiError::invalid(format!(
            "cap: {cap} bytes, {what} takes {needed} with its NUL (now in len)"
        )));
    }
    // SAFETY: `buf` is writable for `cap` bytes per the caller's contract
    // (its null case is refused by `bytes_mut`).
    let out = unsafe { bytes_mut(buf.cast(), cap, "buf") }?;
    out[..text.len()].copy_from_slice(text.as_bytes());
    out[text.len()] = 0;
    Ok(())
}

/// Checks that an output argument is not null before the call does any
/// work whose result it could not report.
pub(crate) fn need_out<T>(out: *mut T, what: &str) -> CapiResult {
    if out.is_null() {
        return Err(CapiError::null(what));
    }
    Ok(())
}

/// The deadline of a wait of `timeout_ms` milliseconds from now; zero
/// waits without one.
pub(crate) fn deadline(timeout_ms: u64) -> Option<Instant> {
    (timeout_ms != 0).then(|| Instant::now() + Duration::from_millis(timeout_ms))
}
