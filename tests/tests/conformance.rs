//! The conformance suite (`tandem_tests::conformance`, and the two-process
//! IPC tests of `tandem_tests::ipc`) on every backend built in: `host`
//! always, `cuda` and `hip` with their features. GPU tests skip without a
//! device unless `TANDEM_REQUIRE_GPU=1` (see `tandem_tests::gpu`).

use std::path::PathBuf;

/// The `ipc_child` binary: from `$TANDEM_BIN_DIR` when set (a GPU bundle,
/// carried away from the build machine), else the one cargo built next to
/// this test.
fn ipc_child() -> PathBuf {
    match std::env::var_os("TANDEM_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("ipc_child"),
        None => PathBuf::from(env!("CARGO_BIN_EXE_ipc_child")),
    }
}

/// The CPU device, with two devices for the tests of two, whatever
/// `TANDEM_HOST_DEVICES` says.
mod host {
    tandem_tests::conformance_tests!(
        tandem_hal::HostApi,
        || Ok(tandem_hal::HostApi::with_devices(2)),
        crate::ipc_child()
    );
}

#[cfg(feature = "cuda")]
mod cuda {
    tandem_tests::conformance_tests!(
        tandem_hal_cuda::CudaApi,
        <tandem_hal_cuda::CudaApi as tandem_hal::GpuApi>::load,
        crate::ipc_child()
    );
}

#[cfg(feature = "hip")]
mod hip {
    tandem_tests::conformance_tests!(
        tandem_hal_hip::HipApi,
        <tandem_hal_hip::HipApi as tandem_hal::GpuApi>::load,
        crate::ipc_child()
    );
}
