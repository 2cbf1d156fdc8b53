//! `cargo xtask capi-header [--check]`: tandem-capi's C header
//! (`capi/include/tandem.h`) from its Rust source with cbindgen
//! (`capi/cbindgen.toml`), committed so that a C or C++ build needs no Rust
//! tooling beyond the library; `--check` (the `cpp` leg) fails when the
//! committed header is not what the source makes now.

use std::path::{Path, PathBuf};

use crate::error::XtaskError;

/// The header, relative to the repository root.
pub const HEADER: &str = "capi/include/tandem.h";

/// tandem-capi's version: xtask's own, as both take the workspace's.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The header's version macros, which `tandem_version()` and
/// `tandem_version_numbers()` of the library built from the same source
/// return: cbindgen cannot evaluate the `env!` the library's come from.
fn version_macros() -> String {
    [
        String::new(),
        "/* The version this header describes; tandem_version() and".into(),
        " * tandem_version_numbers() say the loaded library's. */".into(),
        format!(
            "#define TANDEM_VERSION_MAJOR {}",
            env!("CARGO_PKG_VERSION_MAJOR")
        ),
        format!(
            "#define TANDEM_VERSION_MINOR {}",
            env!("CARGO_PKG_VERSION_MINOR")
        ),
        format!(
            "#define TANDEM_VERSION_PATCH {}",
            env!("CARGO_PKG_VERSION_PATCH")
        ),
        format!("#define TANDEM_VERSION_STRING \"{VERSION}\""),
    ]
    .join("\n")
}

/// The header the source makes now.
fn generate(root: &Path) -> Result<String, XtaskError> {
    let crate_dir = root.join("capi");
    let mut config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .map_err(|e| XtaskError::Check(format!("capi/cbindgen.toml: {e}")))?;
    config.after_includes = Some(version_macros());
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .map_err(|e| XtaskError::Check(format!("cbindgen over capi/: {e}")))?;
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).map_err(|e| XtaskError::Check(format!("cbindgen wrote non-UTF-8: {e}")))
}

/// Rewrites the header (or, with `check`, fails if it differs); the file
/// when it was rewritten.
pub fn run(root: &Path, check: bool) -> Result<Option<PathBuf>, XtaskError> {
    let fresh = generate(root)?;
    let path = root.join(HEADER);
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed == fresh {
        return Ok(None);
    }
    if check {
        return Err(XtaskError::Check(format!(
            "{HEADER} differs from what capi/src makes now: run `cargo xtask capi-header` and commit it"
        )));
    }
    std::fs::write(&path, fresh)
        .map_err(|e| XtaskError::Check(format!("writing {}: {e}", path.display())))?;
    Ok(Some(path))
}
