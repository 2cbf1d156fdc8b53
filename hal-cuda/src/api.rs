//! [`CudaApi`]: the driver library, loaded at run time.

use core::ffi::c_int;

use cudarc::driver::sys::{self, CUresult};
use tandem_hal::{Backend, ErrorKind, GpuApi, GpuResult};

use crate::context::Context;
use crate::device::CudaDevice;
use crate::driver::{check, error, load_driver};

/// The CUDA driver API (`libcuda`), loaded with `dlopen` when [`GpuApi::load`]
/// runs: the crate builds and runs without CUDA installed and reports
/// `LibraryUnavailable` there.
pub struct CudaApi {
    device_count: usize,
}

impl GpuApi for CudaApi {
    const BACKEND: Backend = Backend::Cuda;
    type Device = CudaDevice;

    /// Loads `libcuda` and runs `cuInit(0)`. A driver without devices
    /// (`CUDA_ERROR_NO_DEVICE`) loads with 0 devices; any other failure of
    /// `cuInit` is returned as the vendor error.
    fn load() -> GpuResult<Self> {
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

    fn device_count(&self) -> GpuResult<usize> {
        Ok(self.device_count)
    }

    fn device(&self, ordinal: usize) -> GpuResult<CudaDevice> {
        if ordinal >= self.device_count {
            return Err(error(
                "device",
                ErrorKind::NoDevice {
                    requested: Some(ordinal),
                    available: self.device_count,
                },
            ));
        }
        Ok(CudaDevice::new(Context::open(ordinal)?))
    }
}

impl CudaApi {
    fn with_device_count(device_count: usize) -> Self {
        Self { device_count }
    }
}

#[cfg(test)]
mod tests {
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
