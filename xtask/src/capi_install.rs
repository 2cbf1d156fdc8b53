//! `cargo xtask install-capi --prefix DIR [--debug]`: builds tandem-capi and
//! lays it out as a distribution would, for CMake's `find_package(Tandem)`
//! and for pkg-config:
//!
//! - `lib/libtandem.so.X.Y.Z` (its SONAME `libtandem.so.X`, which
//!   `build.rs` sets), the symlink `lib/libtandem.so.X` that the dynamic
//!   loader finds it by, and `lib/libtandem.so` that the linker finds;
//! - `include/tandem.h`, `tandem.hpp`, `tandem_cpu_kernel.hpp` (capi's) and
//!   `include/tandem/` (the kernel-side headers, device-kernels', with the
//!   parts of `tandem/runtime.h` in `include/tandem/runtime/`);
//! - `lib/cmake/Tandem/TandemConfig.cmake` and its version file: the
//!   imported target `Tandem::tandem`, relocatable (paths from its own place);
//! - `lib/pkgconfig/tandem.pc`, relocatable the same way (`${pcfiledir}`).
//!
//! The `cpp` test leg installs through this too, and the GPU bundle
//! ([`install_for_bundle`]) lays out the same, with examples/cpp's sources
//! beside it.

use std::fs;
use std::path::Path;

use crate::capi::VERSION;
use crate::cmd::Cmd;
use crate::error::XtaskError;
use crate::metadata::Metadata;

/// The library's file, `libtandem.so.X.Y.Z`.
fn library_file() -> String {
    format!("libtandem.so.{VERSION}")
}

/// Its SONAME, `libtandem.so.X`: `build.rs` sets the same.
fn soname() -> String {
    format!("libtandem.so.{}", env!("CARGO_PKG_VERSION_MAJOR"))
}

/// Builds tandem-capi (`--release` unless `debug`, with `features`) and
/// installs it into `prefix`.
pub fn run(metadata: &Metadata, prefix: &Path, debug: bool) -> Result<(), XtaskError> {
    let built = build(metadata, debug, None, false)?;
    install(&metadata.workspace_root, &built, prefix)
}

/// The GPU bundle's `capi/`: the release library with `features` (the
/// bundle's backend), debug info stripped when `strip` (the bundle's limit
/// on carried files), the headers, the CMake and pkg-config packages, and
/// `examples/cpp/`'s sources, which `run.sh` builds with nvcc.
pub fn install_for_bundle(
    metadata: &Metadata,
    dir: &Path,
    features: &str,
    strip: bool,
) -> Result<(), XtaskError> {
    let root = &metadata.workspace_root;
    let built = build(metadata, false, Some(features), !strip)?;
    install(root, &built, dir)?;
    if strip {
        // The file itself: strip would replace a symlink with a copy.
        let file = library_file();
        if !Cmd::new("strip", &dir.join("lib"))
            .args(["--strip-debug", &file])
            .run()?
            .success()
        {
            return Err(XtaskError::Check(format!("strip {file} failed")));
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

/// Copies the library from `built` and the headers and CMake package from
/// the repository `root` into `prefix`, with the library's symlinks and
/// the pkg-config file.
fn install(root: &Path, built: &Path, prefix: &Path) -> Result<(), XtaskError> {
    let lib = prefix.join("lib");
    let include = prefix.join("include");
    let cmake = lib.join("cmake").join("Tandem");
    let pkgconfig = lib.join("pkgconfig");
    for dir in [&lib, &include.join("tandem"), &cmake, &pkgconfig] {
        fs::create_dir_all(dir).map_err(XtaskError::io(dir))?;
    }
    let (file, soname) = (library_file(), soname());
    copy(&built.join("libtandem.so"), &lib.join(&file))?;
    symlink(&file, &lib.join(&soname))?;
    symlink(&soname, &lib.join("libtandem.so"))?;
    let pc = pkgconfig.join("tandem.pc");
    fs::write(&pc, pkg_config()).map_err(XtaskError::io(&pc))?;
    copy_dir(&root.join("capi/include"), &include)?;
    copy_tree(
        &root.join("device-kernels/include/tandem"),
        &include.join("tandem"),
    )?;
    for name in ["TandemConfig.cmake", "TandemConfigVersion.cmake"] {
        copy(&root.join("capi/cmake").join(name), &cmake.join(name))?;
    }
    println!("xtask: installed tandem-capi into {}", prefix.display());
    Ok(())
}

/// `tandem.pc`: every path from its own place, so the prefix may move.
fn pkg_config() -> String {
    format!(
        "prefix=${{pcfiledir}}/../..
libdir=${{prefix}}/lib
includedir=${{prefix}}/include

Name: Tandem
Description: Tandem's C ABI: attach to a runtime, device queues for your kernels, the blob store, the share daemon
Version: {VERSION}
Libs: -L${{libdir}} -ltandem
Cflags: -I${{includedir}}
"
    )
}

/// Makes `link` a symlink to `target` (a name in the same folder), replacing
/// what was there.
fn symlink(target: &str, link: &Path) -> Result<(), XtaskError> {
    let _ = fs::remove_file(link);
    std::os::unix::fs::symlink(target, link).map_err(XtaskError::io(link))
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

/// Copies the files under `from`, in folders too, into `to`.
fn copy_tree(from: &Path, to: &Path) -> Result<(), XtaskError> {
    fs::create_dir_all(to).map_err(XtaskError::io(to))?;
    for entry in fs::read_dir(from).map_err(XtaskError::io(from))? {
        let entry = entry.map_err(XtaskError::io(from))?;
        let kind = entry.file_type().map_err(XtaskError::io(entry.path()))?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_file() {
            copy(&entry.path(), &dest)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_headers_are_installed_with_their_folders() {
        let prefix =
            std::env::temp_dir().join(format!("xtask-capi-headers-{}", std::process::id()));
        let root = crate::repo_root();
        let installed = prefix.join("tandem");
        copy_tree(&root.join("device-kernels/include/tandem"), &installed).unwrap();
        // Every header the umbrella includes, and the umbrella itself.
        let umbrella = fs::read_to_string(installed.join("runtime.h")).unwrap();
        let parts: Vec<&str> = umbrella
            .lines()
            .filter_map(|line| line.strip_prefix("#include \"tandem/"))
            .map(|rest| rest.trim_end_matches('"'))
            .collect();
        assert!(
            parts.iter().any(|p| p.starts_with("runtime/")),
            "{umbrella}"
        );
        for part in parts {
            assert!(installed.join(part).is_file(), "{part}");
        }
        fs::remove_dir_all(&prefix).unwrap();
    }
}
