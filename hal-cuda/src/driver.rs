//! Loading the CUDA driver library and turning its status codes into [`GpuError`]s.
//!
//! cudarc resolves every driver symbol lazily and *panics* when the library
//! or a symbol is missing. [`load_driver`] therefore probes first with
//! cudarc's non-panicking `is_culib_present` and then resolves every symbol
//! this crate calls ([`DRIVER_SYMBOLS`]); only after both succeed is any
//! `sys::cu*` function called, so a machine without the driver (or with one
//! too old for the CUDA 13 bindings) gets `LibraryUnavailable`, never a panic.

use core::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::{self, CUresult};
use tandem_hal::{Backend, ErrorKind, GpuError, GpuResult};

/// Every driver entry point this crate calls through `sys::`. A unit test
/// keeps this list equal to the calls in the sources.
pub(crate) const DRIVER_SYMBOLS: &[&str] = &[
    "cuCtxEnablePeerAccess",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuDeviceCanAccessPeer",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuDeviceGetCount",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDeviceTotalMem_v2",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventElapsedTime_v2",
    "cuEventQuery",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuGetErrorName",
    "cuInit",
    "cuIpcCloseMemHandle",
    "cuIpcGetEventHandle",
    "cuIpcGetMemHandle",
    "cuIpcOpenEventHandle",
    "cuIpcOpenMemHandle_v2",
    "cuLaunchKernel",
    "cuMemAddressFree",
    "cuMemAddressReserve",
    "cuMemAllocManaged",
    "cuMemAlloc_v2",
    "cuMemCreate",
    "cuMemExportToShareableHandle",
    "cuMemFreeHost",
    "cuMemFree_v2",
    "cuMemGetAddressRange_v2",
    "cuMemGetAllocationGranularity",
    "cuMemHostAlloc",
    "cuMemHostGetDevicePointer_v2",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuMemImportFromShareableHandle",
    "cuMemMap",
    "cuMemRelease",
    "cuMemSetAccess",
    "cuMemUnmap",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyPeer",
    "cuMemcpyPeerAsync",
    "cuMemsetD8Async",
    "cuMemsetD8_v2",
    "cuModuleGetFunction",
    "cuModuleLoadDataEx",
    "cuModuleUnload",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
];

/// Set once [`load_driver`] has found the library and every symbol.
/// Only [`error_name`] reads it, to decide whether `cuGetErrorName` may be
/// called (it may not in unit tests without a driver). Relaxed suffices: it
/// publishes no data — cudarc's own `OnceLock`s synchronise the symbol table.
static DRIVER_LOADED: AtomicBool = AtomicBool::new(false);

/// Finds `libcuda` and every symbol in [`DRIVER_SYMBOLS`]; the error says
/// what is missing.
pub(crate) fn load_driver() -> Result<(), String> {
    // SAFETY: `is_culib_present` only dlopens candidate library names (running
    // their initialisers, as any load would) and closes them again.
    if !unsafe { sys::is_culib_present() } {
        return Err("libcuda.so (the NVIDIA driver library) was not found".to_owned());
    }
    // SAFETY: the library is present, so `culib` finds it instead of panicking.
    let lib = unsafe { sys::culib() };
    for name in DRIVER_SYMBOLS {
        // SAFETY: the symbol is only looked up, never called through this type.
        if let Err(e) = unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) } {
            return Err(format!(
                "libcuda lacks `{name}` (driver older than the CUDA 13 API this crate binds?): {e}"
            ));
        }
    }
    DRIVER_LOADED.store(true, Ordering::Relaxed);
    Ok(())
}

/// The CUDA name of a status code (`CUDA_ERROR_INVALID_VALUE`), from the
/// driver when it is loaded, else from the binding's enum.
pub(crate) fn error_name(result: CUresult) -> String {
    if DRIVER_LOADED.load(Ordering::Relaxed) {
        let mut name: *const c_char = core::ptr::null();
        // SAFETY: the driver is loaded; `name` is a valid out-pointer.
        let rc = unsafe { sys::cuGetErrorName(result, &mut name) };
        if rc == CUresult::CUDA_SUCCESS && !name.is_null() {
            // SAFETY: on success the driver points `name` at a static C string.
            return unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
        }
    }
    format!("{result:?}")
}

/// The typed error for a failed driver call.
#[cold]
pub(crate) fn vendor_error(call: &'static str, result: CUresult) -> GpuError {
    GpuError::new(
        Backend::Cuda,
        call,
        ErrorKind::Vendor {
            code: result as i64,
            name: error_name(result),
        },
    )
}

/// `Ok` for `CUDA_SUCCESS`, else the typed error naming `call`.
#[inline]
pub(crate) fn check(call: &'static str, result: CUresult) -> GpuResult<()> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(vendor_error(call, result))
    }
}

/// A backend error that is not a driver status code.
#[cold]
pub(crate) fn error(call: &'static str, kind: ErrorKind) -> GpuError {
    GpuError::new(Backend::Cuda, call, kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_errors_carry_code_and_cuda_name() {
        let e = vendor_error("cuMemAlloc_v2", CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(e.backend, Backend::Cuda);
        assert_eq!(e.call, "cuMemAlloc_v2");
        assert_eq!(
            e.kind,
            ErrorKind::Vendor {
                code: 2,
                name: "CUDA_ERROR_OUT_OF_MEMORY".to_owned()
            }
        );
        assert!(e.to_string().contains("CUDA_ERROR_OUT_OF_MEMORY (2)"));
    }

    #[test]
    fn check_passes_success_only() {
        assert!(check("cuInit", CUresult::CUDA_SUCCESS).is_ok());
        let e = check("cuInit", CUresult::CUDA_ERROR_NO_DEVICE).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Vendor { code: 100, .. }));
    }

    /// Every `sys::cu*(` call in the sources is in [`DRIVER_SYMBOLS`] (so
    /// `load_driver` proves it resolvable) and every listed symbol is called.
    #[test]
    fn driver_symbol_list_matches_the_sources() {
        let called = crate::test_support::calls_in_sources("sys::", "cu");
        let listed: std::collections::BTreeSet<String> =
            DRIVER_SYMBOLS.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(called, listed);
    }
}
