//! Build support for Tandem kernels, called from a crate's `build.rs`: one C++
//! kernel source, described by a `kernels.toml`, built for every backend.
//!
//! ```no_run
//! // In build.rs's main, of a crate with `tandem-device-kernels` as a
//! // dependency (its headers come through `links` metadata) and this crate as
//! // a build-dependency; print the error and exit(1) should it fail.
//! let tandem = tandem_kernel_build::tandem_include_dir()?;
//! tandem_kernel_build::Builder::new("kernels.toml")
//!     .include(tandem)
//!     .build()?;
//! # Ok::<(), tandem_kernel_build::BuildError>(())
//! ```
//!
//! and in the crate's `src/lib.rs` (or an example), the generated module:
//!
//! ```ignore
//! include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
//! // library() is the ModuleArtifacts a backend loads: device.load_module(&library())
//! ```
//!
//! [`Builder::build`] turns the manifest into
//! * the CPU device's kernels: the sources and a generated `extern "C"` entry
//!   per kernel (`tandem_host_<name>`, tandem-hal's `HostKernelFn` ABI),
//!   compiled with the host C++ compiler (warnings are errors) into a static
//!   library linked into the crate (`HOST_TABLE`);
//! * `CUDA_SOURCE`, the sources with every header inlined, for NVRTC; PTX and
//!   cubins of it for `TANDEM_CUDA_ARCHS` (default `sm_90`) when nvcc is
//!   installed (`PTX`, `CUBINS`);
//! * with the crate's feature `hip`, code objects built by hipcc for
//!   `TANDEM_HIP_ARCHS` (default `gfx90a`; `HIP_CODE_OBJECTS`);
//! * `SIGNATURES`, and `static_assert`s in every C++ build that each kernel's
//!   parameters are exactly the manifest's;
//! * `names::<KERNEL>` constants, `LIBRARY_NAME`, `NVRTC_OPTIONS` and
//!   `library()`, which bundles all of it as a `tandem_hal::ModuleArtifacts`
//!   (so the crate depends on `tandem-hal`).
//!
//! all written to `$OUT_DIR/kernels.rs`.
//!
//! Kernel sources include only `#include "..."` headers found in the
//! include folders (NVRTC has no system headers); kernel names are C symbols
//! of the final binary, so give them a prefix of your own (`tandem_` is
//! Tandem's).

mod codegen;
mod manifest;
mod source;
mod toolchain;

use std::env;
use std::fmt;
use std::path::{Path, PathBuf};

use manifest::Manifest;

/// Why a kernel build failed: the message names the file, kernel or tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError(String);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

impl From<String> for BuildError {
    fn from(message: String) -> Self {
        BuildError(message)
    }
}

/// A build script's whole job for a crate whose kernels use only Tandem's
/// headers: builds `manifest` with [`tandem_include_dir`] on the include
/// path, or prints `error: <crate>: <why>` and exits 1 (the crate's name from
/// `CARGO_PKG_NAME`).
pub fn build_or_exit(manifest: &str) {
    let built =
        tandem_include_dir().and_then(|tandem| Builder::new(manifest).include(tandem).build());
    if let Err(e) = built {
        let package = env::var("CARGO_PKG_NAME").unwrap_or_default();
        eprintln!("error: {package}: {e}");
        std::process::exit(1);
    }
}

/// The folder of Tandem's headers (`tandem/runtime.h`...), which
/// `tandem-device-kernels` exports to the build scripts of crates that depend
/// on it directly (`DEP_TANDEM_DEVICE_KERNELS_INCLUDE`).
pub fn tandem_include_dir() -> Result<PathBuf, BuildError> {
    env_path("DEP_TANDEM_DEVICE_KERNELS_INCLUDE").map_err(|_| {
        BuildError(
            "DEP_TANDEM_DEVICE_KERNELS_INCLUDE is not set: the crate must depend on \
             tandem-device-kernels directly (a [dependencies] entry), which exports its headers"
                .to_string(),
        )
    })
}

/// C++ appended to every build after the kernels (see [`Builder::checks`]).
struct Checks {
    label: String,
    headers: Vec<String>,
    text: String,
}

/// Builds the kernels of one manifest; see the crate docs.
pub struct Builder {
    manifest: PathBuf,
    includes: Vec<PathBuf>,
    name: Option<String>,
    checks: Vec<Checks>,
}

impl Builder {
    /// A build of the kernels listed in `manifest` (a `kernels.toml`, relative
    /// to the crate's folder; its `sources` are relative to its own folder).
    pub fn new(manifest: impl Into<PathBuf>) -> Self {
        Builder {
            manifest: manifest.into(),
            includes: Vec::new(),
            name: None,
            checks: Vec::new(),
        }
    }

    /// Adds a folder `#include "..."` is resolved in, searched in the order
    /// added (relative: to the crate's folder).
    pub fn include(mut self, dir: impl Into<PathBuf>) -> Self {
        self.includes.push(dir.into());
        self
    }

    /// The library's name (`LIBRARY_NAME`: backend errors, the NVRTC program
    /// name); default: the crate's package name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Appends C++ to every build (host, NVRTC source, nvcc, hipcc) after the
    /// kernels and their signature checks: `headers` (include-relative) first,
    /// then `text`, shown as `label` in diagnostics. For compile-time checks
    /// such as tandem-device-kernels' layout assertions.
    pub fn checks(
        mut self,
        label: impl Into<String>,
        headers: Vec<String>,
        text: impl Into<String>,
    ) -> Self {
        self.checks.push(Checks {
            label: label.into(),
            headers,
            text: text.into(),
        });
        self
    }

    /// Builds everything and writes `$OUT_DIR/kernels.rs`; prints the
    /// `cargo:` lines (rerun triggers, the static library to link).
    pub fn build(self) -> Result<(), BuildError> {
        let crate_dir = env_path("CARGO_MANIFEST_DIR")?;
        let out_dir = env_path("OUT_DIR")?;
        let name = match self.name {
            Some(name) => name,
            None => env::var("CARGO_PKG_NAME")
                .map_err(|_| BuildError("CARGO_PKG_NAME is not set".to_string()))?,
        };
        let manifest_path = crate_dir.join(&self.manifest);
        let includes: Vec<PathBuf> = self.includes.iter().map(|d| crate_dir.join(d)).collect();
        print_rerun_triggers(&manifest_path, &includes);
        let manifest_dir = manifest_path.parent().unwrap_or(&crate_dir);
        let manifest = Manifest::load(&manifest_path, manifest_dir)?;
        for src in &manifest.sources {
            println!("cargo:rerun-if-changed={}", src.display());
        }
        let dirs = Dirs {
            crate_dir: &crate_dir,
            out_dir: &out_dir,
            includes: &includes,
        };
        let cuda_source = write_gpu_source(&manifest, &self.checks, &dirs, &name)?;
        compile_host(&manifest, &self.checks, &dirs, &name)?;
        let (ptx, cubins) = compile_cuda(&cuda_source, &out_dir)?;
        let hip_code_objects = compile_hip(&cuda_source, &out_dir)?;
        let forms = codegen::GpuForms {
            name: &name,
            cuda_source: &cuda_source,
            ptx: &ptx,
            cubins: &cubins,
            hip_code_objects: &hip_code_objects,
        };
        write(
            &out_dir.join("kernels.rs"),
            &codegen::rust_module(&manifest, &forms),
        )?;
        Ok(())
    }
}

/// The folders a build reads from and writes to.
struct Dirs<'a> {
    crate_dir: &'a Path,
    out_dir: &'a Path,
    includes: &'a [PathBuf],
}

/// `(arch, file)` pairs: one kind of compiled kernels, one file per arch.
type ArchFiles = Vec<(String, PathBuf)>;

/// Prints the `cargo:rerun-if-*` lines for what the build reads before the
/// manifest: the environment the toolchains look at, the manifest, the
/// include folders.
fn print_rerun_triggers(manifest_path: &Path, includes: &[PathBuf]) {
    for var in [
        "TANDEM_CUDA_ARCHS",
        "TANDEM_HIP_ARCHS",
        "CUDA_PATH",
        "HIP_PATH",
        "ROCM_PATH",
        "PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed={}", manifest_path.display());
    for dir in includes {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
}

/// Writes `$OUT_DIR/tandem_kernels.cu`, one self-contained source for NVRTC,
/// nvcc and hipcc alike; its path.
fn write_gpu_source(
    manifest: &Manifest,
    checks: &[Checks],
    dirs: &Dirs<'_>,
    name: &str,
) -> Result<PathBuf, BuildError> {
    let mut gpu_source = source::Inliner::new(dirs.includes, dirs.crate_dir, name);
    for src in &manifest.sources {
        gpu_source.add_file(src)?;
    }
    gpu_source.add_generated(
        "kernels.toml (signature checks)",
        &codegen::signature_checks(manifest),
    );
    for checks in checks {
        for header in &checks.headers {
            gpu_source.add_include(header)?;
        }
        gpu_source.add_generated(&checks.label, &checks.text);
    }
    let cuda_source = dirs.out_dir.join("tandem_kernels.cu");
    write(&cuda_source, &gpu_source.out)?;
    Ok(cuda_source)
}

/// Compiles the CPU device's kernels, the sources and their generated
/// entries in one translation unit, into the static library the crate links.
fn compile_host(
    manifest: &Manifest,
    checks: &[Checks],
    dirs: &Dirs<'_>,
    name: &str,
) -> Result<(), BuildError> {
    let host_tu = dirs.out_dir.join("tandem_host_entries.cpp");
    let mut host_text = codegen::host_entries(manifest);
    for checks in checks {
        for header in &checks.headers {
            host_text.push_str(&format!("#include \"{header}\"\n"));
        }
        host_text.push_str(&checks.text);
    }
    write(&host_tu, &host_text)?;
    let mut host = cc::Build::new();
    host.cpp(true)
        .std("c++17")
        .opt_level(2)
        .flag("-fno-exceptions")
        .flag("-fno-rtti")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .file(&host_tu);
    for dir in dirs.includes {
        host.include(dir);
    }
    host.try_compile(&format!("{}_host", file_name_part(name)))
        .map_err(|e| BuildError(format!("compiling the host kernels of {name}: {e}")))
}

/// PTX and cubins of `cuda_source` for each arch of `TANDEM_CUDA_ARCHS`, by
/// nvcc; none where nvcc is not installed.
fn compile_cuda(cuda_source: &Path, out_dir: &Path) -> Result<(ArchFiles, ArchFiles), BuildError> {
    let ptx_archs = toolchain::archs("TANDEM_CUDA_ARCHS", "sm_90", toolchain::is_cuda_arch)?;
    let mut ptx = Vec::new();
    let mut cubins = Vec::new();
    match toolchain::find_tool("nvcc", &["CUDA_PATH"]) {
        Some(nvcc) => {
            for arch in &ptx_archs.list {
                let ptx_file = out_dir.join(format!("tandem_{arch}.ptx"));
                toolchain::nvcc(&nvcc, "-ptx", arch, cuda_source, &ptx_file)?;
                ptx.push((arch.clone(), ptx_file));
                let cubin_file = out_dir.join(format!("tandem_{arch}.cubin"));
                toolchain::nvcc(&nvcc, "-cubin", arch, cuda_source, &cubin_file)?;
                cubins.push((arch.clone(), cubin_file));
            }
        }
        // Normal on machines without the CUDA toolkit: NVRTC compiles the
        // embedded source at run time. Worth a word only if PTX was asked for.
        None if ptx_archs.explicit => println!(
            "cargo:warning=TANDEM_CUDA_ARCHS is set but nvcc was found neither on PATH nor \
             in $CUDA_PATH/bin: no PTX embedded, kernels will be compiled by NVRTC at run time"
        ),
        None => {}
    }
    Ok((ptx, cubins))
}

/// With the crate's feature `hip`, code objects of `cuda_source` for each
/// arch of `TANDEM_HIP_ARCHS`, by hipcc; none without it.
fn compile_hip(cuda_source: &Path, out_dir: &Path) -> Result<ArchFiles, BuildError> {
    let mut hip_code_objects = Vec::new();
    if env::var_os("CARGO_FEATURE_HIP").is_some() {
        let hip_archs = toolchain::archs("TANDEM_HIP_ARCHS", "gfx90a", toolchain::is_hip_arch)?;
        let hipcc = toolchain::find_tool("hipcc", &["HIP_PATH", "ROCM_PATH"]).ok_or(
            "feature `hip` needs hipcc (on PATH, in $HIP_PATH/bin or $ROCM_PATH/bin) to \
             build HIP code objects; install ROCm (Debian: the `hipcc` package) or drop the \
             feature"
                .to_string(),
        )?;
        for arch in &hip_archs.list {
            let object = out_dir.join(format!("tandem_{}.hsaco", file_name_part(arch)));
            toolchain::hipcc(&hipcc, arch, cuda_source, &object)?;
            hip_code_objects.push((arch.clone(), object));
        }
    }
    Ok(hip_code_objects)
}

/// `text` with every character but ASCII letters and digits made `_`, for a
/// file or library name.
fn file_name_part(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Writes `text` to `path` unless it already holds exactly that, so that an
/// unchanged file's mtime triggers no rebuild.
fn write(path: &Path, text: &str) -> Result<(), BuildError> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    std::fs::write(path, text).map_err(|e| BuildError(format!("writing {}: {e}", path.display())))
}

fn env_path(var: &str) -> Result<PathBuf, BuildError> {
    env::var_os(var)
        .map(PathBuf::from)
        .ok_or_else(|| BuildError(format!("{var} is not set (run from a build script)")))
}
