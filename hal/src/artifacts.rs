//! What a kernel library is built into: its declared signatures and every
//! compiled form, which [`crate::GpuDevice::load_module`] picks from.

use crate::host_abi::HostKernel;
use crate::types::ArgKind;

/// A kernel's name and parameter types, as declared next to its source.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct KernelSignature {
    /// The kernel's name in its module.
    pub name: &'static str,
    /// Its parameters, in order.
    pub params: &'static [ArgKind],
}

/// Every form one kernel library was built into. A backend loads the form it
/// understands: the host backend the table, CUDA a cubin for its architecture,
/// else PTX, else the source through NVRTC; HIP the code object for its gfx
/// target. A library with no usable form is `UnsupportedArtifact`.
#[derive(Clone, Copy, Debug)]
pub struct ModuleArtifacts<'a> {
    /// Library name, used in errors and as the NVRTC program name.
    pub name: &'a str,
    /// Every kernel's declared signature, which launches are checked against.
    pub signatures: &'a [KernelSignature],
    /// The kernels compiled for the CPU device (the host backend's form).
    pub host_table: Option<&'a [HostKernel]>,
    /// CUDA C++ source (self-contained: headers already inlined).
    pub cuda_source: Option<&'a str>,
    /// Extra NVRTC options (e.g. `-DTANDEM_...`); the architecture is added by the backend.
    pub nvrtc_options: &'a [&'a str],
    /// `(arch, ptx)` pairs, arch like `sm_90`.
    pub ptx: &'a [(&'a str, &'a str)],
    /// `(arch, cubin)` pairs.
    pub cubins: &'a [(&'a str, &'a [u8])],
    /// `(gfx target, code object)` pairs.
    pub hip_code_objects: &'a [(&'a str, &'a [u8])],
}

impl<'a> ModuleArtifacts<'a> {
    /// Looks up a kernel's declared signature.
    pub fn signature(&self, name: &str) -> Option<&'a KernelSignature> {
        self.signatures.iter().find(|s| s.name == name)
    }
}
