//! Tandem's examples (`host_client.rs`, `user_pool.rs`, `client_blobs.rs`),
//! and the kernels of `user_pool` and `client_blobs`: `kernels.toml` and
//! `kernels/*.cu`, built by `build.rs` with
//! `tandem-kernel-build` for the CPU device, CUDA and HIP, as a crate of your
//! own builds its kernels.

/// The examples' kernel library: `kernels::library()` is what
/// `GpuDevice::load_module` takes; `kernels::names` names its kernels.
pub mod kernels {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}
