//! The cross-language suite (`tandem_tests::cross_language`) on every
//! backend built in: `host` (the CPU device) always, `cuda` and `hip` with
//! their features, each at its own scale and with every shared structure in
//! mapped pinned memory, so Rust threads work on it while kernels run. GPU
//! tests skip without a device unless `TANDEM_REQUIRE_GPU=1` (see
//! `tandem_tests::gpu`).

mod host {
    tandem_tests::cross_language_tests!(tandem_hal::HostApi);
}

#[cfg(feature = "cuda")]
mod cuda {
    tandem_tests::cross_language_tests!(tandem_hal_cuda::CudaApi);
}

#[cfg(feature = "hip")]
mod hip {
    tandem_tests::cross_language_tests!(tandem_hal_hip::HipApi);
}
