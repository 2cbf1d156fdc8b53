//! Builds the examples' kernels (`kernels.toml`) for the CPU device, CUDA and,
//! with feature `hip`, HIP: what a crate of your own does to call its pools
//! from kernels (docs/pools.md). Tandem's headers
//! (tandem/runtime.h...) come from tandem-device-kernels, a direct
//! dependency, through its `links` metadata.

fn main() {
    tandem_kernel_build::build_or_exit("kernels.toml");
}
