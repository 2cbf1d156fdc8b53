//! bindgen over the C++ mirrors (`tandem/layout.h`, `tandem/host_abi.h`): how
//! a C++ compiler lays them out, as Rust types the crate compares with
//! tandem-shm-core's and tandem-hal's at compile time.

use std::path::Path;

/// Writes the bindings (module `root::tandem`) to `out`.
pub fn generate(include_dir: &Path, out: &Path) -> Result<(), String> {
    let bindings = bindgen::Builder::default()
        .header_contents(
            "tandem_layout_bindgen.hpp",
            "#include \"tandem/layout.h\"\n#include \"tandem/host_abi.h\"\n",
        )
        .clang_args(["-x", "c++", "-std=c++17"])
        .clang_arg(format!("-I{}", include_dir.display()))
        .enable_cxx_namespaces()
        .allowlist_type("tandem::.*")
        .allowlist_var("tandem::.*")
        // The crate checks these types against Rust's, not against clang's
        // own idea of them, and only needs their layout.
        .layout_tests(false)
        .derive_debug(false)
        .use_core()
        .generate()
        .map_err(|e| format!("bindgen on tandem/layout.h: {e}"))?;
    bindings
        .write_to_file(out)
        .map_err(|e| format!("writing {}: {e}", out.display()))
}
