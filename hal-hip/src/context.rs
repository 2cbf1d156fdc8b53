//! The calling thread's current device.
//!
//! HIP has no context object to hold: each thread has a current device, so
//! every call that acts on a device makes its device current first
//! (`hipSetDevice` only writes a thread-local in the runtime, cheap enough to
//! do unconditionally, and robust against other code on the same thread
//! switching devices in between).

use hip_runtime_sys::hipSetDevice;
use tandem_hal::GpuResult;

use crate::error::check;

/// Makes device `ordinal` current on the calling thread.
pub(crate) fn bind_device(ordinal: i32) -> GpuResult<()> {
    // SAFETY: hipSetDevice validates the ordinal and only changes this
    // thread's current device.
    check("hipSetDevice", unsafe { hipSetDevice(ordinal) })
}
