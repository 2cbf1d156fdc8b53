//! The library's version, for a program to check that the `libtandem.so`
//! it loaded is the one its `tandem.h` describes (`TANDEM_VERSION_*`, which
//! `cargo xtask capi-header` writes from the same Cargo version).

use std::ffi::c_char;

use crate::args;
use crate::error::guard;
use crate::layout::Status;

/// `CARGO_PKG_VERSION`, NUL-terminated for C.
static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The decimal number `digits` (one of Cargo's version parts, which are
/// digits only), at compile time.
const fn number(digits: &str) -> u32 {
    let bytes = digits.as_bytes();
    let mut value = 0;
    let mut i = 0;
    while i < bytes.len() {
        value = value * 10 + (bytes[i] - b'0') as u32;
        i += 1;
    }
    value
}

const MAJOR: u32 = number(env!("CARGO_PKG_VERSION_MAJOR"));
const MINOR: u32 = number(env!("CARGO_PKG_VERSION_MINOR"));
const PATCH: u32 = number(env!("CARGO_PKG_VERSION_PATCH"));

/// The library's version, `"MAJOR.MINOR.PATCH"`: `TANDEM_VERSION_STRING`
/// of the header it was built with. Static, NUL-terminated, never null.
/// Thread-safe; never blocks.
#[no_mangle]
pub extern "C" fn tandem_version() -> *const c_char {
    VERSION.as_ptr().cast()
}

/// The library's version as numbers (`TANDEM_VERSION_MAJOR`, `_MINOR`,
/// `_PATCH` of the header it was built with); each output is nullable.
/// Thread-safe; never blocks.
///
/// # Safety
/// `major`, `minor` and `patch` are each null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_version_numbers(
    major: *mut u32,
    minor: *mut u32,
    patch: *mut u32,
) -> Status {
    guard(|| {
        for (out, value, what) in [
            (major, MAJOR, "major"),
            (minor, MINOR, "minor"),
            (patch, PATCH, "patch"),
        ] {
            if !out.is_null() {
                // SAFETY: non-null, writable per the caller.
                unsafe { args::write_out(out, value, what) }?;
            }
        }
        Ok(())
    })
}
