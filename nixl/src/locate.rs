//! Where NIXL's C API library is: a configured path, else the `nixl_cu13`
//! or `nixl_cu12` Python package's library folder.
//!
//! NIXL ships for Linux as those wheels (`pip install --no-deps nixl-cu13`
//! needs no PyTorch): the C API, NIXL itself, its plugins and UCX, all in
//! the package's `.nixl_cu13.mesonpy.libs` folder beside it, whose
//! libraries find each other by their rpaths. A package is looked up with
//! the Python interpreters that may have it (the active virtual
//! environment's, then `python3` on the PATH), asking for its location
//! without importing it; the site-packages folders of the virtual
//! environment are scanned too, for a machine whose Python cannot run.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::NixlError;

/// The library's file name.
pub const LIBRARY_NAME: &str = "libnixl_capi.so";
/// The Python packages that carry it, preferred first.
pub const PYTHON_PACKAGES: &[&str] = &["nixl_cu13", "nixl_cu12"];
/// An environment variable naming the library, when no path is configured.
pub const LIBRARY_ENV: &str = "TANDEM_NIXL_LIBRARY";

/// The library at `configured`, or at [`LIBRARY_ENV`], or in a Python
/// package; the error lists every place looked in.
pub fn find_library(configured: Option<&Path>) -> Result<PathBuf, NixlError> {
    if let Some(path) = configured {
        return existing(path).ok_or_else(|| NixlError::NotFound {
            searched: vec![path.to_path_buf()],
        });
    }
    if let Some(path) = std::env::var_os(LIBRARY_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return existing(&path).ok_or(NixlError::NotFound {
            searched: vec![path],
        });
    }
    let mut searched = Vec::new();
    for site in site_packages() {
        for package in PYTHON_PACKAGES {
            let candidate = library_in(&site, package);
            if existing(&candidate).is_some() {
                return Ok(candidate);
            }
            searched.push(candidate);
        }
    }
    Err(NixlError::NotFound { searched })
}

fn existing(path: &Path) -> Option<PathBuf> {
    path.is_file().then(|| path.to_path_buf())
}

/// Where `package`'s wheel puts the library, in `site` (its site-packages).
fn library_in(site: &Path, package: &str) -> PathBuf {
    site.join(format!(".{package}.mesonpy.libs"))
        .join(LIBRARY_NAME)
}

/// The site-packages folders that may hold a NIXL package, each once, in
/// order: those Python names for the packages, then the active virtual
/// environment's.
fn site_packages() -> Vec<PathBuf> {
    let mut sites = Vec::new();
    let venv = std::env::var_os("VIRTUAL_ENV").map(PathBuf::from);
    let mut interpreters: Vec<PathBuf> = venv.iter().map(|v| v.join("bin/python3")).collect();
    interpreters.push(PathBuf::from("python3"));
    for python in interpreters {
        sites.extend(package_sites(&python));
    }
    if let Some(venv) = venv {
        sites.extend(scan_lib(&venv.join("lib")));
    }
    let mut unique = Vec::new();
    for site in sites {
        if !unique.contains(&site) {
            unique.push(site);
        }
    }
    unique
}

/// The site-packages folder of each NIXL package `python` finds (the
/// folder its package directory lives in), without importing them.
fn package_sites(python: &Path) -> Vec<PathBuf> {
    let script = format!(
        "import importlib.util as u\nfor n in {PYTHON_PACKAGES:?}:\n    s = u.find_spec(n)\n    \
         if s and s.origin: print(s.origin)\n"
    );
    let Ok(output) = Command::new(python).args(["-c", &script]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|origin| Path::new(origin).parent()?.parent().map(Path::to_path_buf))
        .collect()
}

/// `lib/python3.*/site-packages` under a virtual environment's `lib`.
fn scan_lib(lib: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(lib) else {
        return Vec::new();
    };
    let mut sites: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("site-packages"))
        .filter(|p| p.is_dir())
        .collect();
    sites.sort();
    sites
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_path_that_is_not_there_is_named() {
        let missing = Path::new("/nonexistent/libnixl_capi.so");
        let error = find_library(Some(missing)).unwrap_err();
        assert!(
            matches!(&error, NixlError::NotFound { searched } if searched == &[missing.to_path_buf()]),
            "{error}"
        );
        assert!(error.to_string().contains("/nonexistent/libnixl_capi.so"));
    }

    #[test]
    fn a_wheel_keeps_the_library_beside_its_package() {
        assert_eq!(
            library_in(Path::new("/site"), "nixl_cu13"),
            Path::new("/site/.nixl_cu13.mesonpy.libs/libnixl_capi.so")
        );
    }
}
