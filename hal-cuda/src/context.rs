//! One device's primary context, shared (through `Arc`) by the device and
//! every resource made on it, so the context outlives them all.

use core::ffi::c_int;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdevice_attribute};
use tandem_hal::checks::LaunchLimits;
use tandem_hal::{ErrorKind, GpuResult, ResidentKernels};

use crate::artifact::SmArch;
use crate::driver::{check, error};

/// A retained primary context and what is read once when the device opens.
pub(crate) struct Context {
    pub(crate) ordinal: usize,
    pub(crate) device: CUdevice,
    pub(crate) raw: CUcontext,
    /// Compute capability as an arch (`sm_90`), for module selection.
    pub(crate) arch: SmArch,
    /// Launch limits, read once so `launch` asks the driver nothing extra.
    pub(crate) limits: LaunchLimits,
    /// The context's resident kernels, and the releases kept for them
    /// ([`Context::release_when_idle`]).
    pub(crate) resident: Arc<ResidentKernels>,
}

// SAFETY: a CUcontext is a driver handle, not memory this crate dereferences;
// the driver API is thread-safe and a context may be current on any thread.
unsafe impl Send for Context {}
// SAFETY: as above; `&Context` only reads plain fields and passes the handle
// to thread-safe driver calls.
unsafe impl Sync for Context {}

impl Context {
    /// Retains device `ordinal`'s primary context (the caller checked the
    /// ordinal against the device count) and makes it current.
    pub(crate) fn open(ordinal: usize) -> GpuResult<Arc<Self>> {
        let index = c_int::try_from(ordinal).map_err(|_| {
            error(
                "cuDeviceGet",
                ErrorKind::InvalidArgument(format!("device ordinal {ordinal}")),
            )
        })?;
        let mut device: CUdevice = 0;
        // SAFETY: valid out-pointer; the driver is initialised (`CudaApi::load`).
        check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut device, index)
        })?;
        // Attributes need no context: read them before retaining one, so no
        // error path below has to release it.
        let attr = |a| device_attribute(device, a);
        let arch = SmArch::from_compute_capability(
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let limits = LaunchLimits {
            max_threads_per_block: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            )?,
            max_block_dim: [
                attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid_dim: [
                attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            // The default dynamic limit (48 KiB); more needs a per-kernel
            // opt-in this backend does not make, so the check matches the driver.
            max_shared_mem_per_block: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
            )?,
        };
        let mut raw: CUcontext = core::ptr::null_mut();
        // SAFETY: valid out-pointer and device handle.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut raw, device)
        })?;
        // From here on, dropping `context` releases the retain.
        let context = Arc::new(Self {
            ordinal,
            device,
            raw,
            arch,
            limits,
            resident: ResidentKernels::new(),
        });
        context.bind()?;
        Ok(context)
    }

    /// Makes this context current on the calling thread if it is not already.
    /// Asking first (a thread-local read in the driver) keeps repeated calls
    /// cheap, and unlike a cache of our own it stays right when other code
    /// switches the thread's context in between.
    #[inline]
    pub(crate) fn bind(&self) -> GpuResult<()> {
        bind_raw(self.raw)
    }

    /// Binds (ignoring failure) and runs a release call whose status is
    /// ignored: used by `Drop`, which must neither fail nor panic. At process
    /// exit the driver may already be torn down; there is nothing to do then.
    /// For the releases that return while kernels run and that no queued
    /// work can still need (streams, events); the others go through
    /// [`Context::release_when_idle`].
    pub(crate) fn release(&self, free: impl FnOnce() -> sys::CUresult) {
        let _ = self.bind();
        let _ = free();
    }

    /// As [`Context::release`], for a release the driver makes wait for the
    /// whole device to go idle (freeing device, pinned or managed memory,
    /// unregistering host memory, closing an IPC mapping, unloading a
    /// module), or that waits for it itself (unmapping virtual memory): run now, or kept until the context's last resident kernel
    /// has ended (tandem_hal::ResidentKernels), whose wait it would otherwise
    /// join for good. `free` holds plain handles, not pointers into `self`:
    /// it may run on another thread, when its owner is long gone.
    pub(crate) fn release_when_idle(&self, free: impl FnOnce() -> sys::CUresult + Send + 'static) {
        let raw = ContextHandle(self.raw);
        self.resident.release(move || {
            // The whole handle (which is Send), not its field alone.
            let raw = raw;
            let _ = bind_raw(raw.0);
            let _ = free();
        });
    }

    /// `InvalidArgument` unless `other` is this same context (a stream or
    /// kernel made on another device).
    #[inline]
    pub(crate) fn expect_same(&self, call: &'static str, other: &Context) -> GpuResult<()> {
        if other.raw == self.raw {
            Ok(())
        } else {
            Err(error(
                call,
                ErrorKind::InvalidArgument(format!(
                    "resource of device {} used on device {}",
                    other.ordinal, self.ordinal
                )),
            ))
        }
    }

    /// A device attribute that must be non-negative.
    pub(crate) fn attribute(&self, attribute: CUdevice_attribute) -> GpuResult<u32> {
        device_attribute(self.device, attribute)
    }

    /// A device attribute as the driver reports it (may be negative).
    pub(crate) fn raw_attribute(&self, attribute: CUdevice_attribute) -> GpuResult<i32> {
        raw_device_attribute(self.device, attribute)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // What a resident kernel kept: no handle is left to launch with, and
        // the context must still be retained while they run.
        self.resident.run_kept();
        // SAFETY: releases the retain taken in `open`, exactly once; every
        // resource made in this context held an `Arc` to it and is gone.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// A context handle moved into a kept release ([`Context::release_when_idle`]).
struct ContextHandle(CUcontext);

// SAFETY: a CUcontext is a driver handle usable from any thread (see
// `Context`); a kept release only makes it current.
unsafe impl Send for ContextHandle {}

/// Makes `raw` current on the calling thread if it is not already.
fn bind_raw(raw: CUcontext) -> GpuResult<()> {
    let mut current: CUcontext = core::ptr::null_mut();
    // SAFETY: valid out-pointer.
    check("cuCtxGetCurrent", unsafe {
        sys::cuCtxGetCurrent(&mut current)
    })?;
    if current != raw {
        // SAFETY: `raw` is a retained context: its `Context` releases the
        // retain only after the kept releases have run.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(raw) })?;
    }
    Ok(())
}

fn raw_device_attribute(device: CUdevice, attribute: CUdevice_attribute) -> GpuResult<i32> {
    let mut value: c_int = 0;
    // SAFETY: valid out-pointer and device handle.
    check("cuDeviceGetAttribute", unsafe {
        sys::cuDeviceGetAttribute(&mut value, attribute, device)
    })?;
    Ok(value)
}

fn device_attribute(device: CUdevice, attribute: CUdevice_attribute) -> GpuResult<u32> {
    let value = raw_device_attribute(device, attribute)?;
    u32::try_from(value).map_err(|_| {
        error(
            "cuDeviceGetAttribute",
            ErrorKind::Unsupported(format!("{attribute:?} reported as {value}")),
        )
    })
}
