//! Builds Tandem's kernels from `kernels.toml` with `tandem-kernel-build` (the
//! build support user crates call the same way; see its docs for what it
//! produces into `$OUT_DIR/kernels.rs`). Specific to this crate: every C++
//! build also asserts the layouts recorded in the committed bindings,
//! `src/generated/` (see `build/layout_checks.rs`), and the headers are
//! exported to dependents' build scripts. This script needs a C++ compiler,
//! not libclang.

#[path = "build/layout_checks.rs"]
mod layout_checks;

use std::path::PathBuf;

fn main() {
    if let Err(e) = build() {
        eprintln!("error: tandem-device-kernels: {e}");
        std::process::exit(1);
    }
}

fn build() -> Result<(), Box<dyn std::error::Error>> {
    let crate_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?,
    );
    let include_dir = crate_dir.join("include");
    println!(
        "cargo:rerun-if-changed={}",
        crate_dir.join("src/generated").display()
    );
    // Dependents' build scripts read this as DEP_TANDEM_DEVICE_KERNELS_INCLUDE
    // (tandem_kernel_build::tandem_include_dir).
    println!("cargo:include={}", include_dir.display());

    // What the committed bindings say the mirror headers' layouts are,
    // asserted by every C++ build (the Rust side compares the same files with
    // the Rust types). Kept here rather than in tandem-kernel-build: they
    // check Tandem's headers against Tandem's bindings, once, where the headers
    // live; a user's kernels include the same headers and need not repeat it.
    let checks = layout_checks::generate(&layout_checks::read(&crate_dir)?)?;
    tandem_kernel_build::Builder::new("kernels.toml")
        .include(&include_dir)
        .checks("src/generated (layout checks)", checks.headers, checks.text)
        .build()?;
    Ok(())
}
