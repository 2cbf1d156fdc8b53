//! [`CudaApi`]: the driver library, loaded at run time. Its
//! [`GpuApi`](tandem_hal::GpuApi) implementation is in `device.rs`, next to
//! the devices it hands out, so that this module sits below every resource
//! that names the backend.

use core::ffi::c_int;

use cudarc::driver::sys::{self, CUresult};
use tandem_hal::{ErrorKind, GpuResult};

use crate::driver::{check, error, load_driver};

/// The CUDA driver API (`libcuda`), loaded with `dlopen` when
/// [`GpuApi::load`](tandem_hal::GpuApi::load) runs: the crate builds and runs
/// without CUDA installed and reports `LibraryUnavailable` there.
pub struct CudaApi {
    device_count: usize,
}

impl CudaApi {
    /// Loads `libcuda` and runs `cuInit(0)`. A driver without devices
    /// (`CUDA_ERROR_NO_DEVICE`) loads with 0 devices; any other failure of
    /// `cuInit` is returned as the vendor error.
    pub(crate) fn open() -> GpuResult<Self> {
        load_driver().map_err(|why| error("load", ErrorKind::LibraryUnavailable(why)))?;
        // SAFETY: the driver and all its symbols are loaded.
        match unsafe { sys::cuInit(0) } {
            CUresult::CUDA_ERROR_NO_DEVICE => return Ok(Self::with_device_count(0)),
            result => check("cuInit", result)?,
        }
        let mut count: c_int = 0;
        // SAFETY: initialised driver, valid out-pointer.
        check("cuDeviceGetCount", unsafe {
            sys::cuDeviceGetCount(&mut count)
        })?;
        // The driver never reports a negative count; treat one as none.
        Ok(Self::with_device_count(usize::try_from(count).unwrap_or(0)))
    }

    fn with_device_count(device_count: usize) -> Self {
        Self { device_count }
    }

    /// How many devices the driver reported.
    pub(crate) fn devices(&self) -> usize {
        self.device_count
    }
}

#[cfg(test)]
mod tests {
    use tandem_hal::{Backend, GpuApi};

    use super::*;

    #[test]
    fn load_never_panics() {
        match CudaApi::load() {
            Ok(api) => {
                let count = api.device_count().unwrap();
                if count == 0 {
                    let e = api.device(0).err().expect("device(0) without devices");
                    assert!(matches!(e.kind, ErrorKind::NoDevice { .. }), "{e}");
                }
            }
            Err(e) => {
                assert_eq!(e.backend, Backend::Cuda);
                assert!(
                    matches!(
                        e.kind,
                        ErrorKind::LibraryUnavailable(_) | ErrorKind::Vendor { .. }
                    ),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn no_devices_means_no_device_error() {
        let api = CudaApi::with_device_count(0);
        assert_eq!(api.device_count().unwrap(), 0);
        let e = api.device(0).err().expect("no device 0");
        assert_eq!(
            e.kind,
            ErrorKind::NoDevice {
                requested: Some(0),
                available: 0
            }
        );
        let e = CudaApi::with_device_count(2)
            .device(5)
            .err()
            .expect("no device 5");
        assert_eq!(
            e.kind,
            ErrorKind::NoDevice {
                requested: Some(5),
                available: 2
            }
        );
    }
}
