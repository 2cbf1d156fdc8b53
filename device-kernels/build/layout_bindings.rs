//! bindgen over the C++ mirrors: how a C++ compiler lays them out, as Rust
//! types and constants that Rust code compares with its own at compile time.
//! `tandem/layout.h` and `tandem/host_abi.h` mirror tandem-shm-core's and
//! tandem-hal's layouts (checked in this crate, src/layout_check.rs);
//! `tandem/runtime.h` mirrors tandem-runtime's segment layout and record
//! words (exported as `runtime_mirror`, checked in runtime/src/layout.rs).

use std::path::Path;

/// Writes the bindings of `layout.h` and `host_abi.h` (module
/// `root::tandem`: every type and constant) to `out`.
pub fn generate_layout(include_dir: &Path, out: &Path) -> Result<(), String> {
    generate(
        include_dir,
        out,
        &["tandem/layout.h", "tandem/host_abi.h"],
        &["tandem::.*"],
        &["tandem::.*"],
    )
}

/// Writes the bindings of `runtime.h`'s mirrors of tandem-runtime (module
/// `root::tandem`) to `out`: the segment and task headers, the inbox rings
/// and the constants (`RT_*`, `rt_record`, `rt_notify`), not the device API.
pub fn generate_runtime(include_dir: &Path, out: &Path) -> Result<(), String> {
    generate(
        include_dir,
        out,
        &["tandem/runtime.h"],
        &[
            "tandem::RuntimeSegmentHeader",
            "tandem::TaskHeader",
            "tandem::RtInbox",
        ],
        &[
            "tandem::RT_.*",
            "tandem::rt_record::.*",
            "tandem::rt_notify::.*",
        ],
    )
}

fn generate(
    include_dir: &Path,
    out: &Path,
    headers: &[&str],
    types: &[&str],
    vars: &[&str],
) -> Result<(), String> {
    let contents: String = headers
        .iter()
        .map(|h| format!("#include \"{h}\"\n"))
        .collect();
    let mut builder = bindgen::Builder::default()
        .header_contents("tandem_bindgen.hpp", &contents)
        .clang_args(["-x", "c++", "-std=c++17"])
        .clang_arg(format!("-I{}", include_dir.display()))
        .enable_cxx_namespaces()
        // The checks compare these types with Rust's, not with clang's own
        // idea of them, and only need their layout.
        .layout_tests(false)
        .derive_debug(false)
        .use_core();
    for t in types {
        builder = builder.allowlist_type(t);
    }
    for v in vars {
        builder = builder.allowlist_var(v);
    }
    let bindings = builder
        .generate()
        .map_err(|e| format!("bindgen on {}: {e}", headers.join(", ")))?;
    bindings
        .write_to_file(out)
        .map_err(|e| format!("writing {}: {e}", out.display()))
}
