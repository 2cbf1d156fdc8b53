//! HIP status codes turned into [`GpuError`]s.
//!
//! `hip-runtime-sys` declares `hipError_t` as a Rust enum, so a code the enum
//! does not list would be undefined behaviour the moment a call returns it.
//! Its variants were checked against the headers of the runtime this crate
//! builds with (ROCm 5.2, `/usr/include/hip/hip_runtime_api.h`): every code the
//! 5.2 runtime can return is listed (aliases such as `hipErrorMemoryAllocation`
//! are constants of the same value). A newer runtime that adds codes needs
//! regenerated bindings before it is linked.

use core::ffi::CStr;

use hip_runtime_sys::{hipError_t, hipGetErrorName};
use tandem_hal::{Backend, ErrorKind, GpuError, GpuResult};

/// The error every backend-level check in this crate reports.
pub(crate) fn hip_error(call: &'static str, kind: ErrorKind) -> GpuError {
    GpuError::new(Backend::Hip, call, kind)
}

/// The vendor name and numeric value of a HIP status.
pub(crate) fn vendor_kind(status: hipError_t) -> ErrorKind {
    ErrorKind::Vendor {
        code: status as i64,
        name: error_name(status),
    }
}

/// `hipGetErrorName(status)`, e.g. `"hipErrorInvalidValue"`.
pub(crate) fn error_name(status: hipError_t) -> String {
    // SAFETY: hipGetErrorName only looks the code up in a static table; it
    // needs no device and no initialised runtime.
    let name = unsafe { hipGetErrorName(status) };
    if name.is_null() {
        return format!("hipError({})", status as i64);
    }
    // SAFETY: a non-null result is a NUL-terminated string in the runtime's
    // static storage, valid for the life of the process.
    unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

/// `Ok(())` for `hipSuccess`, else a vendor error naming `call`.
pub(crate) fn check(call: &'static str, status: hipError_t) -> GpuResult<()> {
    match status {
        hipError_t::hipSuccess => Ok(()),
        failure => Err(hip_error(call, vendor_kind(failure))),
    }
}

/// Whether `status` means "this machine has no usable HIP device".
///
/// `hipErrorNoDevice` is the documented answer of `hipGetDeviceCount`; the
/// ROCm 5.2 runtime's `hipInit` answers `hipErrorInvalidDevice` instead when
/// there is no GPU (observed on this project's build machine, which has the
/// runtime but no AMD GPU).
pub(crate) fn means_no_device(status: hipError_t) -> bool {
    matches!(
        status,
        hipError_t::hipErrorNoDevice | hipError_t::hipErrorInvalidDevice
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_errors_carry_the_runtime_name_and_code() {
        let err = check("hipMalloc", hipError_t::hipErrorInvalidValue).unwrap_err();
        assert_eq!(err.backend, Backend::Hip);
        assert_eq!(err.call, "hipMalloc");
        assert_eq!(
            err.kind,
            ErrorKind::Vendor {
                code: 1,
                name: "hipErrorInvalidValue".into()
            }
        );
        assert!(err.to_string().contains("hipErrorInvalidValue"));
    }

    #[test]
    fn success_is_ok() {
        assert_eq!(check("hipInit", hipError_t::hipSuccess), Ok(()));
    }

    #[test]
    fn no_device_codes() {
        assert!(means_no_device(hipError_t::hipErrorNoDevice));
        assert!(means_no_device(hipError_t::hipErrorInvalidDevice));
        assert!(!means_no_device(hipError_t::hipErrorOutOfMemory));
    }
}
