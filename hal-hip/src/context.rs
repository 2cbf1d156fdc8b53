//! The calling thread's current device, and each device's resident kernels.
//!
//! HIP has no context object to hold: each thread has a current device, so
//! every call that acts on a device makes its device current first
//! (`hipSetDevice` only writes a thread-local in the runtime, cheap enough to
//! do unconditionally, and robust against other code on the same thread
//! switching devices in between). For the same reason a device's account of
//! resident kernels is a process-wide one per ordinal, as the device itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use hip_runtime_sys::hipSetDevice;
use tandem_hal::{GpuResult, ResidentKernels};

use crate::error::check;

/// Device `ordinal`'s resident kernels (tandem_hal::ResidentKernels):
/// `hipFree`, `hipHostFree`, `hipHostUnregister`, `hipIpcCloseMemHandle`
/// and `hipModuleUnload` wait for the device to go idle, so while one runs
/// they are kept ([`release_when_idle`]).
pub(crate) fn resident(ordinal: i32) -> Arc<ResidentKernels> {
    static ACCOUNTS: OnceLock<Mutex<HashMap<i32, Arc<ResidentKernels>>>> = OnceLock::new();
    // A poisoned lock only means a panic elsewhere; the map is changed by
    // single inserts.
    let mut accounts = ACCOUNTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    Arc::clone(accounts.entry(ordinal).or_default())
}

/// Runs `free` with device `ordinal` current, now or once the device's last
/// resident kernel has ended (see [`resident`]). Errors cannot be reported
/// from the drops that call it; a failed release leaks, it never panics.
pub(crate) fn release_when_idle(ordinal: i32, free: impl FnOnce() + Send + 'static) {
    resident(ordinal).release(move || {
        let _ = bind_device(ordinal);
        free();
    });
}

/// Makes device `ordinal` current on the calling thread.
pub(crate) fn bind_device(ordinal: i32) -> GpuResult<()> {
    // SAFETY: hipSetDevice validates the ordinal and only changes this
    // thread's current device.
    check("hipSetDevice", unsafe { hipSetDevice(ordinal) })
}
