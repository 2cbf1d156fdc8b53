//! Builds the examples' kernels (`kernels.toml`) for the CPU device, CUDA and,
//! with feature `hip`, HIP: what a crate of your own does to call its pools
//! from kernels (README, "How to add a pool").

fn main() {
    // Tandem's headers (tandem/runtime.h...) come from tandem-device-kernels,
    // a direct dependency, through its `links` metadata.
    let built = tandem_kernel_build::tandem_include_dir().and_then(|tandem| {
        tandem_kernel_build::Builder::new("kernels.toml")
            .include(tandem)
            .build()
    });
    if let Err(e) = built {
        eprintln!("error: tandem-examples: {e}");
        std::process::exit(1);
    }
}
