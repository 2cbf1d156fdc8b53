//! Loaded modules and the kernels looked up in them.

use core::ffi::{c_uint, c_void};
use std::ffi::CString;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUfunction, CUjit_option, CUmodule, CUresult};
use tandem_hal::{ErrorKind, GpuResult, KernelSignature, ModuleArtifacts};

use crate::artifact::{check_image, select_artifact, ArtifactChoice};
use crate::context::Context;
use crate::driver::{check, error, error_name};
use crate::nvrtc;

/// A module loaded into one context, with the library's declared signatures.
pub(crate) struct ModuleInner {
    pub(crate) ctx: Arc<Context>,
    raw: CUmodule,
    signatures: Vec<KernelSignature>,
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        let raw = self.raw as usize;
        // SAFETY: this owner's module, unloaded once; every kernel taken from
        // it held an `Arc` to this and is gone.
        self.ctx
            .release_when_idle(move || unsafe { sys::cuModuleUnload(raw as CUmodule) });
    }
}

/// A loaded kernel library; unloaded when it and all its kernels are dropped.
pub struct CudaModule {
    inner: Arc<ModuleInner>,
}

impl CudaModule {
    /// The driver handle, for interoperating with other CUDA code.
    pub fn as_raw(&self) -> CUmodule {
        self.inner.raw
    }
}

/// A kernel and its declared signature; keeps its module loaded.
pub struct CudaKernel {
    pub(crate) module: Arc<ModuleInner>,
    pub(crate) raw: CUfunction,
    pub(crate) signature: KernelSignature,
}

impl CudaKernel {
    /// The driver handle, for interoperating with other CUDA code.
    pub fn as_raw(&self) -> CUfunction {
        self.raw
    }

    /// The declared signature launches are checked against.
    pub fn signature(&self) -> &KernelSignature {
        &self.signature
    }
}

// SAFETY: module and function handles are driver objects used
// only through the thread-safe driver API; the rest is plain owned data.
unsafe impl Send for ModuleInner {}
// SAFETY: see above.
unsafe impl Sync for ModuleInner {}
// SAFETY: see above.
unsafe impl Send for CudaKernel {}
// SAFETY: see above.
unsafe impl Sync for CudaKernel {}

/// Driver codes that mean "this image is not for this device or driver";
/// they become `UnsupportedArtifact` with the JIT log.
const IMAGE_REJECTIONS: &[CUresult] = &[
    CUresult::CUDA_ERROR_INVALID_IMAGE,
    CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU,
    CUresult::CUDA_ERROR_INVALID_PTX,
    CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
    CUresult::CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
    CUresult::CUDA_ERROR_INVALID_SOURCE,
];

/// Loads the best form of `artifacts` for `ctx`'s device.
pub(crate) fn load(ctx: &Arc<Context>, artifacts: &ModuleArtifacts<'_>) -> GpuResult<CudaModule> {
    let unsupported = |what: String| error("load_module", ErrorKind::UnsupportedArtifact(what));
    let name = artifacts.name;
    let raw = match select_artifact(ctx.arch, artifacts) {
        Some(ArtifactChoice::Cubin { arch, image }) => {
            check_image(image)
                .map_err(|why| unsupported(format!("cubin {arch} of `{name}`: {why}")))?;
            load_binary(ctx, image, &format!("cubin {arch} of `{name}`"))?
        }
        Some(ArtifactChoice::Ptx { arch, ptx }) => {
            // PTX is handed over as a C string.
            let text = CString::new(ptx)
                .map_err(|_| unsupported(format!("PTX {arch} of `{name}` contains a NUL byte")))?;
            load_image(
                ctx,
                text.as_ptr().cast(),
                &format!("PTX {arch} of `{name}`"),
            )?
        }
        Some(ArtifactChoice::Source(source)) => {
            let cubin = nvrtc::compile_cached(name, source, ctx.arch, artifacts.nvrtc_options)?;
            check_image(&cubin)
                .map_err(|why| unsupported(format!("NVRTC output for `{name}`: {why}")))?;
            load_binary(ctx, &cubin, &format!("NVRTC cubin of `{name}`"))?
        }
        None => {
            return Err(unsupported(format!(
                "`{name}` has no cubin for {arch}, no PTX for {arch} or older, and no CUDA source \
                 (cubins: {cubins:?}, PTX: {ptx:?})",
                arch = ctx.arch,
                cubins = artifacts.cubins.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
                ptx = artifacts.ptx.iter().map(|(a, _)| *a).collect::<Vec<_>>(),
            )))
        }
    };
    Ok(CudaModule {
        inner: Arc::new(ModuleInner {
            ctx: Arc::clone(ctx),
            raw,
            signatures: artifacts.signatures.to_vec(),
        }),
    })
}

/// Loads a checked cubin or fatbin. The driver parses it in place and
/// expects the 8-byte alignment nvcc gives it; `include_bytes!` data may lack
/// it, so a misaligned image is copied into aligned words first.
fn load_binary(ctx: &Context, image: &[u8], what: &str) -> GpuResult<CUmodule> {
    if image.as_ptr().align_offset(8) == 0 {
        return load_image(ctx, image.as_ptr().cast(), what);
    }
    let mut words = vec![0u64; image.len().div_ceil(8)];
    // SAFETY: `words` owns at least `image.len()` bytes, any byte pattern is
    // a valid u64, and the two allocations are distinct.
    unsafe {
        core::ptr::copy_nonoverlapping(image.as_ptr(), words.as_mut_ptr().cast::<u8>(), image.len())
    };
    load_image(ctx, words.as_ptr().cast(), what)
}

/// `cuModuleLoadDataEx` with an error-log buffer, so a rejected image
/// reports why (the JIT's message) instead of a bare code.
fn load_image(ctx: &Context, image: *const c_void, what: &str) -> GpuResult<CUmodule> {
    const LOG_BYTES: usize = 4096;
    ctx.bind()?;
    let mut log = vec![0u8; LOG_BYTES];
    let mut options = [
        CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    // Option values are pointer-sized: the buffer, then its size as a value.
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), LOG_BYTES as *mut c_void];
    let mut module: CUmodule = core::ptr::null_mut();
    // SAFETY: `image` is a checked cubin/fatbin or a NUL-terminated PTX string
    // that outlives the call; the option arrays have the 2 entries announced
    // and the log buffer has the announced size.
    let result = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            image,
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if IMAGE_REJECTIONS.contains(&result) {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        return Err(error(
            "cuModuleLoadDataEx",
            ErrorKind::UnsupportedArtifact(format!(
                "{what} rejected by the driver ({} = {}): {}",
                error_name(result),
                result as i64,
                String::from_utf8_lossy(&log[..end]).trim_end()
            )),
        ));
    }
    check("cuModuleLoadDataEx", result)?;
    Ok(module)
}

/// Looks up `name`, which must be declared in the module's signatures.
pub(crate) fn kernel(module: &CudaModule, name: &str) -> GpuResult<CudaKernel> {
    let inner = &module.inner;
    let not_found = || {
        error(
            "cuModuleGetFunction",
            ErrorKind::KernelNotFound(name.to_owned()),
        )
    };
    let signature = *inner
        .signatures
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(not_found)?;
    let c_name = CString::new(name).map_err(|_| not_found())?;
    inner.ctx.bind()?;
    let mut raw: CUfunction = core::ptr::null_mut();
    // SAFETY: live module, NUL-terminated name, valid out-pointer.
    let result = unsafe { sys::cuModuleGetFunction(&mut raw, inner.raw, c_name.as_ptr()) };
    if result == CUresult::CUDA_ERROR_NOT_FOUND {
        return Err(not_found());
    }
    check("cuModuleGetFunction", result)?;
    Ok(CudaKernel {
        module: Arc::clone(inner),
        raw,
        signature,
    })
}
