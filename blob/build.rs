//! Builds the blob store's kernels (`kernels.toml`: the wire check and the
//! put/get kernel of the tests and benches) for the CPU device, CUDA and,
//! with feature `hip`, HIP, as any crate with kernels of its own does.
//! Tandem's headers (tandem/blob.h, runtime.h) come from
//! tandem-device-kernels, a direct dependency, through its `links` metadata.

fn main() {
    tandem_kernel_build::build_or_exit("kernels.toml");
}
