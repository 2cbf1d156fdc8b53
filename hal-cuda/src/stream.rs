//! Streams and events.

use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::sys::{self, CUevent, CUstream};
use tandem_hal::{EventFlags, IpcEventHandle};

use crate::context::Context;
use crate::ipc;

/// A non-blocking stream (`CU_STREAM_NON_BLOCKING`: it does not wait for the
/// legacy default stream); destroyed on drop.
pub struct CudaStream {
    pub(crate) ctx: Arc<Context>,
    pub(crate) raw: CUstream,
}

impl CudaStream {
    /// The driver handle, for interoperating with other CUDA code (it stays
    /// owned by `self`).
    pub fn as_raw(&self) -> CUstream {
        self.raw
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        let raw = self.raw;
        // SAFETY: this owner's stream, destroyed exactly once; the driver
        // lets queued work finish first.
        self.ctx.release(|| unsafe { sys::cuStreamDestroy_v2(raw) });
    }
}

/// An event; created here or opened from another process's handle.
pub struct CudaEvent {
    pub(crate) ctx: Arc<Context>,
    pub(crate) raw: CUevent,
    /// What the event supports (`timing` is off for interprocess events).
    pub(crate) flags: EventFlags,
    /// The handle once this process exported the event, retired on drop.
    pub(crate) exported: Mutex<Option<IpcEventHandle>>,
}

impl CudaEvent {
    pub(crate) fn new(ctx: Arc<Context>, raw: CUevent, flags: EventFlags) -> Self {
        Self {
            ctx,
            raw,
            flags,
            exported: Mutex::new(None),
        }
    }

    /// The driver handle, for interoperating with other CUDA code.
    pub fn as_raw(&self) -> CUevent {
        self.raw
    }

    /// What this event was created with (timing is never on for an
    /// interprocess event: the driver forbids the combination).
    pub fn flags(&self) -> EventFlags {
        self.flags
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        if let Some(handle) = *self.exported.lock().unwrap_or_else(PoisonError::into_inner) {
            ipc::EXPORTED_EVENTS.forget(handle.0);
        }
        let raw = self.raw;
        // SAFETY: this owner's event (created or IPC-opened, both destroyed
        // with cuEventDestroy), destroyed exactly once.
        self.ctx.release(|| unsafe { sys::cuEventDestroy_v2(raw) });
    }
}

// SAFETY: stream and event handles are driver objects used only
// through the thread-safe driver API.
unsafe impl Send for CudaStream {}
// SAFETY: see above.
unsafe impl Sync for CudaStream {}
// SAFETY: see above.
unsafe impl Send for CudaEvent {}
// SAFETY: see above.
unsafe impl Sync for CudaEvent {}
