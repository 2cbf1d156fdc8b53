//! The conformance suite: one `#[test]` per behaviour of
//! `tandem_tests::conformance` (and the two-process IPC tests of
//! `tandem_tests::ipc`) per backend: `host` always, `cuda` and `hip` with
//! their features. GPU tests skip without a device unless
//! `TANDEM_REQUIRE_GPU=1` (see `tandem_tests::gpu::device_or_skip`).

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

/// `backend_tests!(module_name, Api, load)` stamps out the suite for one
/// backend; `load` loads it for the tests of two devices (the host backend
/// with two, whatever `TANDEM_HOST_DEVICES` says).
macro_rules! backend_tests {
    ($backend:ident, $api:ty, $load:expr) => {
        mod $backend {
            use super::*;
            use tandem_tests::gpu::{device_or_skip, devices_or_skip};
            use tandem_tests::{conformance, ipc};

            backend_tests!(@device $api, conformance: [
                properties_are_sane,
                allocations_reject_bad_sizes,
                copies_round_trip,
                out_of_bounds_accesses_are_refused,
                forged_memory_is_refused,
                fill_sets_a_range,
                device_to_device_copies,
                synchronous_copies_and_fills_are_complete,
                kernel_writes_pinned_memory,
                kernel_writes_registered_segment,
                managed_memory_is_shared,
                stream_work_runs_in_order,
                events_record_query_and_time,
                streams_wait_on_events,
                block_sums_match_reference,
                bad_launches_are_refused,
                ipc_same_process_open_is_refused,
                garbage_ipc_handles_are_invalid,
                shareable_memory_round_trips,
                shareable_bad_sizes_are_refused,
                shareable_garbage_is_refused,
                a_device_is_its_own_peer,
            ]);
            backend_tests!(@two_devices $api, $load, conformance: [
                peer_access_is_reported_and_enabled,
                peer_copies_between_devices,
                kernel_on_a_peer_reaches_another_devices_memory,
            ]);
            backend_tests!(@device_and_child $api, ipc: [
                add_in_child_process,
                stale_handle_in_child_process,
            ]);
        }
    };
    (@device $api:ty, $module:ident: [$($behaviour:ident),* $(,)?]) => {
        $(
            #[test]
            fn $behaviour() {
                if let Some(device) = device_or_skip::<$api>(stringify!($behaviour)) {
                    $module::$behaviour::<$api>(&device);
                }
            }
        )*
    };
    (@two_devices $api:ty, $load:expr, $module:ident: [$($behaviour:ident),* $(,)?]) => {
        $(
            #[test]
            fn $behaviour() {
                if let Some(devices) = devices_or_skip::<$api>(stringify!($behaviour), 2, $load) {
                    $module::$behaviour::<$api>(&devices);
                }
            }
        )*
    };
    (@device_and_child $api:ty, $module:ident: [$($behaviour:ident),* $(,)?]) => {
        $(
            #[test]
            fn $behaviour() {
                if let Some(device) = device_or_skip::<$api>(stringify!($behaviour)) {
                    $module::$behaviour::<$api>(&device, &ipc_child());
                }
            }
        )*
    };
}

backend_tests!(host, tandem_hal::HostApi, || Ok(
    tandem_hal::HostApi::with_devices(2)
));
#[cfg(feature = "cuda")]
backend_tests!(
    cuda,
    tandem_hal_cuda::CudaApi,
    <tandem_hal_cuda::CudaApi as tandem_hal::GpuApi>::load
);
#[cfg(feature = "hip")]
backend_tests!(
    hip,
    tandem_hal_hip::HipApi,
    <tandem_hal_hip::HipApi as tandem_hal::GpuApi>::load
);
