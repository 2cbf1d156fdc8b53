//! `cargo xtask install-capi --prefix DIR [--debug]`: builds tandem-capi and
//! lays out what a CMake project's `find_package(Tandem)` finds:
//!
//! - `lib/libtandem.so`, `lib/libtandem.a`;
//! - `include/tandem.h`, `tandem.hpp`, `tandem_cpu_kernel.hpp` (capi's) and
//!   `include/tandem/*.h` (the kernel-side headers, device-kernels');
//! - `lib/cmake/Tandem/TandemConfig.cmake` and its version file: the
//!   imported target `Tandem::tandem`, relocatable (paths from its own place).
//!
//! The `cpp` test leg and the GPU bundle install through this too.

use std::fs;
use std::path::Path;

use crate::cmd::Cmd;
use crate::error::XtaskError;
use crate::metadata::Metadata;

/// Builds tandem-capi (`--release` unless `debug`, with `features`) and
/// installs it into `prefix`.
pub fn run(metadata: &Metadata, prefix: &Path, debug: bool) -> Result<(), XtaskError> {
    build_and_install(metadata, prefix, debug, None)
}

/// [`run`] with cargo features for tandem-capi (the bundle's `cuda`).
pub fn build_and_install(
    metadata: &Metadata,
    prefix: &Path,
    debug: bool,
    features: Option<&str>,
) -> Result<(), XtaskError> {
    let root = &metadata.workspace_root;
    let mut build = Cmd::cargo(root).args(["build", "-p", "tandem-capi", "--lib"]);
    if !debug {
        build = build.arg("--release");
    }
    if let Some(features) = features {
        build = build.args(["--features", features]);
    }
    if !build.run()?.success() {
        return Err(XtaskError::Check("building tandem-capi failed".into()));
    }
    let built = metadata
        .target_directory
        .join(if debug { "debug" } else { "release" });
    install(root, &built, prefix)
}

/// Copies the library from `built` and the headers and CMake package from
/// the repository `root` into `prefix`.
fn install(root: &Path, built: &Path, prefix: &Path) -> Result<(), XtaskError> {
    let lib = prefix.join("lib");
    let include = prefix.join("include");
    let cmake = lib.join("cmake").join("Tandem");
    for dir in [&lib, &include.join("tandem"), &cmake] {
        fs::create_dir_all(dir).map_err(XtaskError::io(dir))?;
    }
    for name in ["libtandem.so", "libtandem.a"] {
        copy(&built.join(name), &lib.join(name))?;
    }
    copy_dir(&root.join("capi/include"), &include)?;
    copy_dir(&root.join("device-kernels/include/tandem"), &include.join("tandem"))?;
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
        if entry.file_type().map_err(XtaskError::io(entry.path()))?.is_file() {
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
