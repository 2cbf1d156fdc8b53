//! [`HipApi`]: the loaded HIP runtime. Its
//! [`GpuApi`](tandem_hal::GpuApi) implementation is in `device.rs`, next to
//! the devices it hands out, so that this module sits below every resource
//! that names the backend.

use hip_runtime_sys::{hipError_t, hipGetDeviceCount, hipInit};
use tandem_hal::GpuResult;

use crate::error::{check, hip_error, means_no_device, vendor_kind};

/// The HIP runtime (`libamdhip64`), initialised.
///
/// The runtime is linked, not loaded at run time (`hip-runtime-sys` links
/// `amdhip64`): a machine without it fails when the program starts, so
/// [`GpuApi::load`](tandem_hal::GpuApi::load) never reports
/// `LibraryUnavailable`. A machine with the runtime but no AMD GPU loads fine
/// with 0 devices.
#[derive(Debug)]
pub struct HipApi {
    device_count: usize,
}

/// Number of visible devices; "no device" answers count as 0.
fn count_devices() -> GpuResult<usize> {
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    match unsafe { hipGetDeviceCount(&mut count) } {
        hipError_t::hipSuccess => Ok(usize::try_from(count).unwrap_or(0)),
        status if means_no_device(status) => Ok(0),
        failure => Err(hip_error("hipGetDeviceCount", vendor_kind(failure))),
    }
}

impl HipApi {
    /// `hipInit(0)` then `hipGetDeviceCount`. With no GPU the ROCm 5.2
    /// runtime fails `hipInit` with a "no device" code; that is a loaded
    /// runtime with 0 devices, confirmed by the count.
    pub(crate) fn open() -> GpuResult<Self> {
        // SAFETY: hipInit takes no pointers; flags must be 0.
        let init = unsafe { hipInit(0) };
        if !means_no_device(init) {
            check("hipInit", init)?;
        }
        let device_count = count_devices()?;
        if init != hipError_t::hipSuccess && device_count != 0 {
            // The runtime sees devices yet could not initialise: a real failure.
            return Err(hip_error("hipInit", vendor_kind(init)));
        }
        Ok(HipApi { device_count })
    }

    /// How many devices the runtime reported.
    pub(crate) fn devices(&self) -> usize {
        self.device_count
    }
}
