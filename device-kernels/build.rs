//! Builds Tandem's kernels from `kernels.toml` into every form the backends
//! load: a static library of host entries (cc), the self-contained CUDA source
//! for NVRTC, PTX/cubins when nvcc is found, HIP code objects with feature
//! `hip`; and the Rust tables describing them (`$OUT_DIR/kernels.rs`). Every C++ build also
//! asserts the layouts recorded in the committed bindings, `src/generated/` (see
//! `build/layout_checks.rs`); this script needs a C++ compiler, not libclang.

#[path = "../kernel-build/src/codegen.rs"]
mod codegen;
#[path = "build/layout_checks.rs"]
mod layout_checks;
#[path = "../kernel-build/src/manifest.rs"]
mod manifest;
#[path = "../kernel-build/src/source.rs"]
mod source;
#[path = "../kernel-build/src/toolchain.rs"]
mod toolchain;

use std::env;
use std::path::{Path, PathBuf};

use manifest::Manifest;

fn main() {
    if let Err(e) = build() {
        eprintln!("error: tandem-device-kernels: {e}");
        std::process::exit(1);
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    // Leave an unchanged file alone so that its mtime does not trigger rebuilds.
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn env_path(var: &str) -> Result<PathBuf, String> {
    env::var_os(var)
        .map(PathBuf::from)
        .ok_or_else(|| format!("{var} is not set"))
}

fn build() -> Result<(), String> {
    let crate_dir = env_path("CARGO_MANIFEST_DIR")?;
    let out_dir = env_path("OUT_DIR")?;
    let include_dir = crate_dir.join("include");
    let manifest_path = crate_dir.join("kernels.toml");

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
    for input in [
        "kernels.toml",
        "build.rs",
        "build",
        "include",
        "kernels",
        "src/generated",
    ] {
        println!("cargo:rerun-if-changed={}", crate_dir.join(input).display());
    }
    // Dependents' build scripts read this as DEP_TANDEM_DEVICE_KERNELS_INCLUDE.
    println!("cargo:include={}", include_dir.display());

    let manifest = Manifest::load(&manifest_path, &crate_dir)?;

    // What the committed bindings say the mirror headers' layouts are, asserted by every C++
    // build below (the Rust side compares the same files with the Rust types).
    let layout_checks = layout_checks::generate(&layout_checks::read(&crate_dir)?)?;

    // One self-contained source for NVRTC, nvcc and hipcc alike.
    let mut gpu_source = source::Inliner::new(&include_dir, &crate_dir);
    for src in &manifest.sources {
        gpu_source.add_file(src)?;
    }
    gpu_source.add_generated(
        "kernels.toml (signature checks)",
        &codegen::signature_checks(&manifest),
    );
    for header in &layout_checks.headers {
        gpu_source.add_file(&include_dir.join(header))?;
    }
    gpu_source.add_generated("src/generated (layout checks)", &layout_checks.text);
    let cuda_source = out_dir.join("tandem_kernels.cu");
    write(&cuda_source, &gpu_source.out)?;

    // The host: kernels and generated entries in one translation unit.
    let host_tu = out_dir.join("tandem_host_entries.cpp");
    let mut host_text = codegen::host_entries(&manifest);
    for header in &layout_checks.headers {
        host_text.push_str(&format!("#include \"{header}\"\n"));
    }
    host_text.push_str(&layout_checks.text);
    write(&host_tu, &host_text)?;
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .opt_level(2)
        .include(&include_dir)
        .flag("-fno-exceptions")
        .flag("-fno-rtti")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .file(&host_tu)
        .compile("tandem_device_kernels_host");

    let ptx_archs = toolchain::archs("TANDEM_CUDA_ARCHS", "sm_90", toolchain::is_cuda_arch)?;
    let mut ptx = Vec::new();
    let mut cubins = Vec::new();
    match toolchain::find_tool("nvcc", &["CUDA_PATH"]) {
        Some(nvcc) => {
            for arch in &ptx_archs.list {
                let ptx_file = out_dir.join(format!("tandem_{arch}.ptx"));
                toolchain::nvcc(&nvcc, "-ptx", arch, &cuda_source, &ptx_file)?;
                ptx.push((arch.clone(), ptx_file));
                let cubin_file = out_dir.join(format!("tandem_{arch}.cubin"));
                toolchain::nvcc(&nvcc, "-cubin", arch, &cuda_source, &cubin_file)?;
                cubins.push((arch.clone(), cubin_file));
            }
        }
        // Normal on machines without the CUDA toolkit: NVRTC compiles the
        // embedded source at run time. Worth a word only if PTX was asked for.
        None if ptx_archs.explicit => println!(
            "cargo:warning=TANDEM_CUDA_ARCHS is set but nvcc was found neither on PATH nor in \
             $CUDA_PATH/bin: no PTX embedded, kernels will be compiled by NVRTC at run time"
        ),
        None => {}
    }

    let mut hip_code_objects = Vec::new();
    if env::var_os("CARGO_FEATURE_HIP").is_some() {
        let hip_archs = toolchain::archs("TANDEM_HIP_ARCHS", "gfx90a", toolchain::is_hip_arch)?;
        let hipcc = toolchain::find_tool("hipcc", &["HIP_PATH", "ROCM_PATH"]).ok_or(
            "feature `hip` needs hipcc (on PATH, in $HIP_PATH/bin or $ROCM_PATH/bin) to build \
             HIP code objects; install ROCm (Debian: the `hipcc` package) or drop the feature",
        )?;
        for arch in &hip_archs.list {
            let file_arch: String = arch
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            let object = out_dir.join(format!("tandem_{file_arch}.hsaco"));
            toolchain::hipcc(&hipcc, arch, &cuda_source, &object)?;
            hip_code_objects.push((arch.clone(), object));
        }
    }

    let forms = codegen::GpuForms {
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
