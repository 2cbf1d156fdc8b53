//! Code objects loaded onto a device, kernels looked up in them, launches.

use core::ffi::c_void;
use core::ptr;
use std::ffi::CString;
use std::sync::Arc;

use hip_runtime_sys::{
    hipError_t, hipFunction_t, hipModuleGetFunction, hipModuleLaunchKernel, hipModuleLoadData,
    hipModuleUnload, hipModule_t,
};
use tandem_hal::checks::{launch_config, LaunchLimits};
use tandem_hal::{
    check_args, Backend, ErrorKind, GpuResult, KernelArg, KernelSignature, LaunchConfig,
    ModuleArtifacts, MAX_KERNEL_ARGS,
};

use crate::context::{bind_device, release_when_idle};
use crate::error::{check, hip_error, vendor_kind};
use crate::stream::HipStream;
use crate::target::select_code_object;

/// A loaded code object; unloaded when the module and all its kernels are gone.
#[derive(Debug)]
struct LoadedModule {
    raw: hipModule_t,
    /// The code object, owned for the module's whole life: HIP does not
    /// promise to copy it in `hipModuleLoadData` (lazy loading reads it later).
    _image: Box<[u8]>,
    name: String,
    signatures: Vec<KernelSignature>,
    ordinal: i32,
}

// SAFETY: a hipModule_t is an opaque runtime handle usable from any thread.
unsafe impl Send for LoadedModule {}
// SAFETY: shared access only passes the handle to thread-safe HIP calls.
unsafe impl Sync for LoadedModule {}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        // Once, after the module's last kernel (each holds an `Arc` to it).
        let raw = self.raw as usize;
        release_when_idle(self.ordinal, move || {
            // SAFETY: `raw` came from hipModuleLoadData and is unloaded only
            // here.
            let _ = unsafe { hipModuleUnload(raw as hipModule_t) };
        });
    }
}

/// A kernel library loaded on one device.
#[derive(Debug)]
pub struct HipModule {
    loaded: Arc<LoadedModule>,
}

/// A kernel of a [`HipModule`], with its declared signature.
#[derive(Debug)]
pub struct HipKernel {
    raw: hipFunction_t,
    signature: KernelSignature,
    /// Keeps the code object loaded while the kernel can be launched.
    _module: Arc<LoadedModule>,
}

// SAFETY: a hipFunction_t is an opaque runtime handle usable from any thread.
unsafe impl Send for HipKernel {}
// SAFETY: shared access only passes the handle to thread-safe HIP calls.
unsafe impl Sync for HipKernel {}

/// Loads the code object of `artifacts` built for `device_target` onto device
/// `ordinal`.
pub(crate) fn load_module(
    ordinal: i32,
    device_target: &str,
    artifacts: &ModuleArtifacts<'_>,
) -> GpuResult<HipModule> {
    let object = select_code_object(device_target, artifacts.hip_code_objects).map_err(|why| {
        hip_error(
            "load_module",
            ErrorKind::UnsupportedArtifact(format!("module `{}`: {why}", artifacts.name)),
        )
    })?;
    let image: Box<[u8]> = object.into();
    bind_device(ordinal)?;
    let mut raw = ptr::null_mut();
    // SAFETY: `image` is a whole code object (an ELF image, which carries its
    // own length) that outlives the module: both live in `LoadedModule`, whose
    // drop unloads the module before the image is freed.
    check("hipModuleLoadData", unsafe {
        hipModuleLoadData(&mut raw, image.as_ptr().cast())
    })?;
    Ok(HipModule {
        loaded: Arc::new(LoadedModule {
            raw,
            _image: image,
            name: artifacts.name.to_owned(),
            signatures: artifacts.signatures.to_vec(),
            ordinal,
        }),
    })
}

/// Looks up `name`, which must be both declared and present in the module.
pub(crate) fn kernel(ordinal: i32, module: &HipModule, name: &str) -> GpuResult<HipKernel> {
    let loaded = &module.loaded;
    let not_found = |call| {
        hip_error(
            call,
            ErrorKind::KernelNotFound(format!("{name} (module `{}`)", loaded.name)),
        )
    };
    let signature = *loaded
        .signatures
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| not_found("kernel"))?;
    let c_name = CString::new(name).map_err(|_| not_found("kernel"))?;
    bind_device(ordinal)?;
    let mut raw = ptr::null_mut();
    // SAFETY: the module is live; `c_name` is NUL-terminated; `raw` is a
    // valid out-pointer.
    match unsafe { hipModuleGetFunction(&mut raw, loaded.raw, c_name.as_ptr()) } {
        hipError_t::hipSuccess => Ok(HipKernel {
            raw,
            signature,
            _module: Arc::clone(loaded),
        }),
        hipError_t::hipErrorNotFound => Err(not_found("hipModuleGetFunction")),
        failure => Err(hip_error("hipModuleGetFunction", vendor_kind(failure))),
    }
}

/// Checks `config` and `args`, then `hipModuleLaunchKernel` on `stream`
/// with device `ordinal` current.
///
/// # Safety
/// As [`tandem_hal::GpuDevice::launch`]: pointer arguments must be valid for
/// what the kernel does until the stream has passed the launch.
pub(crate) unsafe fn launch(
    ordinal: i32,
    limits: &LaunchLimits,
    kernel: &HipKernel,
    config: &LaunchConfig,
    args: &[KernelArg<'_>],
    stream: &HipStream,
) -> GpuResult<()> {
    launch_config(Backend::Hip, config, limits)?;
    check_args(kernel.signature.name, kernel.signature.params, args).map_err(|detail| {
        hip_error(
            "launch",
            ErrorKind::ArgumentMismatch {
                kernel: kernel.signature.name.to_owned(),
                detail,
            },
        )
    })?;
    // The runtime reads each parameter through its pointer before the launch
    // call returns, so pointers into `args` (borrowed for this call) suffice;
    // a stack array keeps the launch path free of allocation.
    let mut params = [ptr::null_mut::<c_void>(); MAX_KERNEL_ARGS];
    for (slot, arg) in params.iter_mut().zip(args) {
        *slot = arg.value_ptr().cast_mut();
    }
    bind_device(ordinal)?;
    let (grid, block) = (config.grid, config.block);
    // SAFETY: the kernel and stream are live; dimensions and shared memory
    // are within the device's limits; `params` holds one pointer per declared
    // parameter, each to a value of the declared type (check_args); the
    // caller vouches for what the kernel does with pointer arguments.
    check("hipModuleLaunchKernel", unsafe {
        hipModuleLaunchKernel(
            kernel.raw,
            grid.x,
            grid.y,
            grid.z,
            block.x,
            block.y,
            block.z,
            config.shared_mem_bytes,
            stream.raw(),
            params.as_mut_ptr(),
            ptr::null_mut(),
        )
    })
}
