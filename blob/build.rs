//! Builds the blob store's kernels (`kernels.toml`: the wire check and the
//! put/get kernel of the tests and benches) for the CPU device, CUDA and,
//! with feature `hip`, HIP, as any crate with kernels of its own does.

fn main() {
    // Tandem's headers (tandem/runtime.h...) come from tandem-device-kernels,
    // a direct dependency, through its `links` metadata.
    let built = tandem_kernel_build::tandem_include_dir().and_then(|tandem| {
        tandem_kernel_build::Builder::new("kernels.toml")
            .include(tandem)
            .build()
    });
    if let Err(e) = built {
        eprintln!("error: tandem-blob: {e}");
        std::process::exit(1);
    }
}
