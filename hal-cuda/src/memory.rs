//! The memory a `CudaDevice` hands out. Each type owns one driver allocation
//! (or registration, or IPC mapping), holds an `Arc` to its context so the
//! context outlives it, and frees exactly once on drop.

use core::ffi::c_void;
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::sys::{self, CUdeviceptr};
use tandem_hal::{DeviceMemory, HostMemory, IpcMemHandle};

use crate::api::CudaApi;
use crate::context::Context;
use crate::ipc::{self, IpcMapping};

/// Device memory from `cuMemAlloc` (never the stream-ordered pool, whose
/// memory cannot be exported with legacy IPC handles).
pub struct CudaDeviceBuffer {
    ctx: Arc<Context>,
    ptr: CUdeviceptr,
    len: usize,
    /// `Some` for exportable buffers: the handle once exported, so repeated
    /// exports are free and the drop can retire it from the exported set.
    export: Option<Mutex<Option<IpcMemHandle>>>,
}

impl CudaDeviceBuffer {
    /// Takes ownership of `ptr`, a `cuMemAlloc` of `len` bytes in `ctx`.
    pub(crate) fn new(ctx: Arc<Context>, ptr: CUdeviceptr, len: usize, exportable: bool) -> Self {
        Self {
            ctx,
            ptr,
            len,
            export: exportable.then(|| Mutex::new(None)),
        }
    }

    /// The export state, `None` if the buffer was not allocated exportable.
    pub(crate) fn export_state(&self) -> Option<&Mutex<Option<IpcMemHandle>>> {
        self.export.as_ref()
    }

    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }
}

impl Drop for CudaDeviceBuffer {
    fn drop(&mut self) {
        if let Some(state) = &self.export {
            if let Some(handle) = *state.lock().unwrap_or_else(PoisonError::into_inner) {
                ipc::EXPORTED_MEMORY.forget(handle.0);
            }
        }
        let ptr = self.ptr;
        // SAFETY: `ptr` is this buffer's own cuMemAlloc, freed only here.
        self.ctx
            .release_when_idle(move || unsafe { sys::cuMemFree_v2(ptr) });
    }
}

/// Page-locked host memory from `cuMemHostAlloc(DEVICEMAP | PORTABLE)`.
pub struct CudaPinnedBuffer {
    ctx: Arc<Context>,
    /// The cuMemHostAlloc, freed on drop.
    base: *mut u8,
    /// The buffer: the first page boundary in it.
    host: *mut u8,
    device: CUdeviceptr,
    len: usize,
}

impl CudaPinnedBuffer {
    /// Takes ownership of `base`, a `cuMemHostAlloc` holding the `len`-byte
    /// buffer at `host`; the device address is looked up by the caller after
    /// this owner exists, so a failed lookup frees the allocation.
    pub(crate) fn new(ctx: Arc<Context>, base: *mut u8, host: *mut u8, len: usize) -> Self {
        Self {
            ctx,
            base,
            host,
            device: 0,
            len,
        }
    }

    pub(crate) fn set_device_ptr(&mut self, device: CUdeviceptr) {
        self.device = device;
    }
}

impl Drop for CudaPinnedBuffer {
    fn drop(&mut self) {
        let base = self.base as usize;
        // SAFETY: `base` is this buffer's own cuMemHostAlloc, freed only here.
        self.ctx
            .release_when_idle(move || unsafe { sys::cuMemFreeHost(base as *mut c_void) });
    }
}

/// A caller's host region registered with `cuMemHostRegister(DEVICEMAP |
/// PORTABLE)`; unregistered on drop (the region itself stays the caller's).
pub struct CudaHostRegistration {
    ctx: Arc<Context>,
    host: *mut u8,
    device: CUdeviceptr,
    len: usize,
}

impl CudaHostRegistration {
    /// Takes ownership of the registration of `host`; as for pinned
    /// buffers, the device address is filled in afterwards.
    pub(crate) fn new(ctx: Arc<Context>, host: *mut u8, len: usize) -> Self {
        Self {
            ctx,
            host,
            device: 0,
            len,
        }
    }

    pub(crate) fn set_device_ptr(&mut self, device: CUdeviceptr) {
        self.device = device;
    }
}

impl Drop for CudaHostRegistration {
    fn drop(&mut self) {
        let host = self.host as usize;
        // SAFETY: `host` was registered by this owner and is unregistered
        // exactly once, here (or later, kept for a resident kernel: the
        // driver holds the pages pinned until then); the caller keeps it
        // mapped until the registration is dropped.
        self.ctx
            .release_when_idle(move || unsafe { sys::cuMemHostUnregister(host as *mut c_void) });
    }
}

/// Managed memory from `cuMemAllocManaged(GLOBAL)`; one address for both sides.
pub struct CudaManagedBuffer {
    ctx: Arc<Context>,
    ptr: CUdeviceptr,
    len: usize,
}

impl CudaManagedBuffer {
    /// Takes ownership of `ptr`, a `cuMemAllocManaged` of `len` bytes.
    pub(crate) fn new(ctx: Arc<Context>, ptr: CUdeviceptr, len: usize) -> Self {
        Self { ctx, ptr, len }
    }
}

impl Drop for CudaManagedBuffer {
    fn drop(&mut self) {
        let ptr = self.ptr;
        // SAFETY: `ptr` is this buffer's own cuMemAllocManaged, freed only here.
        self.ctx
            .release_when_idle(move || unsafe { sys::cuMemFree_v2(ptr) });
    }
}

/// Another process's exported memory opened here. Clones of one handle's
/// opening share the mapping; the last one to go closes it.
pub struct CudaIpcBuffer {
    mapping: Arc<IpcMapping>,
}

impl CudaIpcBuffer {
    pub(crate) fn new(mapping: Arc<IpcMapping>) -> Self {
        Self { mapping }
    }
}

// SAFETY: these buffer types hold driver addresses and a
// context handle. The driver API is thread-safe, and the host pointers of
// pinned and registered memory are only handed out through `host_ptr`,
// whose users synchronise their own accesses (as with any shared buffer).
unsafe impl Send for CudaDeviceBuffer {}
// SAFETY: see above.
unsafe impl Sync for CudaDeviceBuffer {}
// SAFETY: see above.
unsafe impl Send for CudaPinnedBuffer {}
// SAFETY: see above.
unsafe impl Sync for CudaPinnedBuffer {}
// SAFETY: see above.
unsafe impl Send for CudaHostRegistration {}
// SAFETY: see above.
unsafe impl Sync for CudaHostRegistration {}
// SAFETY: see above.
unsafe impl Send for CudaManagedBuffer {}
// SAFETY: see above.
unsafe impl Sync for CudaManagedBuffer {}

/// `DeviceMemory` for an owner with `ptr`/`device` and `len` fields.
macro_rules! device_memory {
    ($ty:ty, $ptr:ident) => {
        // SAFETY: `$ptr` is the device address of the `len` bytes this owner
        // allocated or registered, freed only when it drops; neither field
        // changes after construction (pinned and registered owners set
        // their device address once, before they are handed out).
        unsafe impl DeviceMemory for $ty {
            type Api = CudaApi;
            #[inline]
            fn device_ptr(&self) -> u64 {
                self.$ptr
            }
            #[inline]
            fn len(&self) -> usize {
                self.len
            }
        }
    };
}

device_memory!(CudaDeviceBuffer, ptr);
device_memory!(CudaPinnedBuffer, device);
device_memory!(CudaHostRegistration, device);
device_memory!(CudaManagedBuffer, ptr);

// SAFETY: the mapping is open, at `ptr` for `len` bytes, until the last
// buffer sharing it drops; its fields never change.
unsafe impl DeviceMemory for CudaIpcBuffer {
    type Api = CudaApi;
    #[inline]
    fn device_ptr(&self) -> u64 {
        self.mapping.ptr
    }
    #[inline]
    fn len(&self) -> usize {
        self.mapping.len
    }
}

// SAFETY: `host` is the same `len` bytes as the device address (the driver
// maps the allocation both ways), allocated until drop.
unsafe impl HostMemory for CudaPinnedBuffer {
    fn host_ptr(&self) -> *mut u8 {
        self.host
    }
}

// SAFETY: `host` is the caller's region, which `register_host`'s contract
// keeps mapped until the registration drops.
unsafe impl HostMemory for CudaHostRegistration {
    fn host_ptr(&self) -> *mut u8 {
        self.host
    }
}

// SAFETY: managed memory has one address on both sides, allocated until drop.
unsafe impl HostMemory for CudaManagedBuffer {
    fn host_ptr(&self) -> *mut u8 {
        // Managed memory has one address for host and device.
        self.ptr as *mut u8
    }
}
