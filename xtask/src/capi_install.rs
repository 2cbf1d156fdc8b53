//! `cargo xtask install-capi --prefix DIR [--debug]`: builds tandem-capi and
//! lays out what a CMake project's `find_package(Tandem)` finds:
//!
//! - `lib/libtandem.so`, `lib/libtandem.a`;
//! - `include/tandem.h`, `tandem.hpp`, `tandem_cpu_kernel.hpp` (capi's) and
//!   `include/tandem/*.h` (the kernel-side headers, device-kernels');
//! - `lib/cmake/Tandem/TandemConfig.cmake` and its version file: the
//!   imported target `Tandem::tandem`, relocatable (paths from its own place).
//!
//! The `cpp` test leg installs through this too, and the GPU bundle
//! ([`install_for_bundle`]) lays out the same, less the static library,
//! with examples/cpp's sources beside it.

use std::fs;
use std::path::Path;

use crate::cmd::Cmd;
use crate::error::XtaskError;
use crate::metadata::Metadata;

/// Builds tandem-capi (`--release` unless `debug`, with `features`) and
/// installs it into `prefix`.
pub fn run(metadata: &Metadata, prefix: &Path, debug: bool) -> Result<(), XtaskError> {
    let built = build(metadata, debug, None, false)?;
    install(&metadata.workspace_root, &built, prefix, true)
}

/// The GPU bundle's `capi/`: the release library with `features` (the
/// bundle's backend), debug info stripped when `strip` (the bundle's limit
/// on carried files; the static library is left out for the same reason),
/// the headers, the CMake package, and `examples/cpp/`'s sources, which
/// `run.sh` builds with nvcc.
pub fn install_for_bundle(
    metadata: &Metadata,
    dir: &Path,
    features: &str,
    strip: bool,
) -> Result<(), XtaskError> {
    let root = &metadata.workspace_root;
    let built = build(metadata, false, Some(features), !strip)?;
    install(root, &built, dir, false)?;
    if strip {
        let lib = dir.join("lib");
        if !Cmd::new("strip", &lib)
            .args(["--strip-debug", "libtandem.so"])
            .run()?
            .success()
        {
            return Err(XtaskError::Check("strip libtandem.so failed".into()));
        }
    }
    let examples = dir.join("examples").join("cpp");
    fs::create_dir_all(&examples).map_err(XtaskError::io(&examples))?;
    copy_dir(&root.join("examples/cpp"), &examples)
}

/// Builds tandem-capi's libraries (`--release` unless `debug`, with
/// `features`; without debug info when `no_debug_info`, as the bundle's
/// builds are where `strip` is missing); the folder cargo wrote them to.
fn build(
    metadata: &Metadata,
    debug: bool,
    features: Option<&str>,
    no_debug_info: bool,
) -> Result<std::path::PathBuf, XtaskError> {
    let root = &metadata.workspace_root;
    let mut build = Cmd::cargo(root).args(["build", "-p", "tandem-capi", "--lib"]);
    if !debug {
        build = build.arg("--release");
    }
    if let Some(features) = features {
        build = build.args(["--features", features]);
    }
    if no_debug_info {
        build = build
            .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
            .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    }
    if !build.run()?.success() {
        return Err(XtaskError::Check("building tandem-capi failed".into()));
    }
    Ok(metadata
        .target_directory
        .join(if debug { "debug" } else { "release" }))
}

/// Copies the libraries (the static one too when `with_static`) from
/// `built` and the headers and CMake package from the repository `root`
/// into `prefix`.
fn install(root: &Path, built: &Path, prefix: &Path, with_static: bool) -> Result<(), XtaskError> {
    let lib = prefix.join("lib");
    let include = prefix.join("include");
    let cmake = lib.join("cmake").join("Tandem");
    for dir in [&lib, &include.join("tandem"), &cmake] {
        fs::create_dir_all(dir).map_err(XtaskError::io(dir))?;
    }
    copy(&built.join("libtandem.so"), &lib.join("libtandem.so"))?;
    if with_static {
        copy(&built.join("libtandem.a"), &lib.join("libtandem.a"))?;
    }
    copy_dir(&root.join("capi/include"), &include)?;
    copy_dir(
        &root.join("device-kernels/include/tandem"),
        &include.join("tandem"),
    )?;
    for name in ["TandemConfig.cmake", "TandemConfigVersion.cmake"] {
        copy(&root.join("capi/cmake").join(name), &cmake.join(name))?;
    }
    println!("xtask: installed tandem-capi into {}", prefix.display());
    Ok(())
}

/// Copies the files (not folders) directly in `from` into `to`.
fn copy_dir(from: &Path, to: &Path) -> Result<(), XtaskError> {
    for entry in fs::read_dir(from).map_err(XtaskError::io(from))? {
        let entry = entry.map_err(XtaskError::io(from))?;
        if entry
            .file_type()
            .map_err(XtaskError::io(entry.path()))?
            .is_file()
        {
            copy(&entry.path(), &to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

fn copy(from: &Path, to: &Path) -> Result<(), XtaskError> {
    // Removed first: a library a running program maps must not be
    // rewritten in place.
    let _ = fs::remove_file(to);
    fs::copy(from, to).map_err(XtaskError::io(from))?;
    Ok(())
}
