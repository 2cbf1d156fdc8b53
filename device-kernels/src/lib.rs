//! Tandem's device kernels: one C++ source (`kernels/*.cu` over the headers in
//! `include/tandem/`) built for every backend, described by one manifest
//! (`kernels.toml`).
//!
//! The build script turns the manifest into
//! * the CPU device's kernels: the sources and a generated `extern "C"` entry
//!   per kernel (`tandem_host_<name>`, the [`HostKernelFn`] ABI), compiled
//!   with the host C++ compiler and linked into this crate ([`HOST_TABLE`]);
//! * [`CUDA_SOURCE`], the same sources with every header inlined, for NVRTC;
//!   PTX and cubins of it for `TANDEM_CUDA_ARCHS` when nvcc is installed;
//! * with feature `hip`, code objects built by hipcc for `TANDEM_HIP_ARCHS`;
//! * [`SIGNATURES`], and `static_assert`s in every C++ build that each
//!   kernel's parameters are exactly the manifest's.
//!
//! The C++ mirrors of tandem-shm-core's shared layouts
//! (`include/tandem/layout.h`) and of hal's host ABI are checked field by field
//! against the Rust types when this crate compiles (`layout_check`); the
//! runtime's (`include/tandem/runtime.h`) when tandem-runtime compiles,
//! against [`runtime_mirror`]. Both go through bindgen's reading of the
//! headers, committed in `src/generated/` and asserted by every C++ build
//! (`mirror` says why that chain holds).
//!
//! [`library`] bundles all of it as the [`ModuleArtifacts`] a backend loads.
//!
//! [`HostKernelFn`]: tandem_hal::host_abi::HostKernelFn

mod layout_check;
mod mirror;

pub use mirror::runtime_mirror;

use core::ffi::c_void;

use tandem_hal::host_abi::{HostKernel, HostThreadCtx};
use tandem_hal::{ArgKind, KernelSignature, ModuleArtifacts};

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// Name of the library, used in backend errors and as the NVRTC program name.
pub const LIBRARY_NAME: &str = "tandem-device-kernels";

/// Bytes of one side's device tickets of a ring (`tandem::DeviceTickets` in
/// tandem/mpmc.h, which asserts the same size): device memory, zeroed when
/// the ring is initialised.
pub const DEVICE_TICKETS_BYTES: usize = 32;

/// Lane depths from which a kernel thread may claim a lane slot without
/// probing the lane first, when its last push there found it nearly empty
/// (`tandem::NEARLY_EMPTY_MIN_CAPACITY` in tandem/layout.h, compared with
/// this one at compile time).
pub const NEARLY_EMPTY_MIN_CAPACITY: u32 = 256;

/// NVRTC options the embedded source needs (the backend adds the architecture).
pub const NVRTC_OPTIONS: &[&str] = &["--std=c++17"];

/// Every form this crate's kernels were built into.
pub fn library() -> ModuleArtifacts<'static> {
    ModuleArtifacts {
        name: LIBRARY_NAME,
        signatures: SIGNATURES,
        host_table: Some(HOST_TABLE),
        cuda_source: Some(CUDA_SOURCE),
        nvrtc_options: NVRTC_OPTIONS,
        ptx: PTX,
        cubins: CUBINS,
        hip_code_objects: HIP_CODE_OBJECTS,
    }
}
