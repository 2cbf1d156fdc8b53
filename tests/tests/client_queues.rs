//! Kernels of client processes submit to a runtime in another process
//! through device queues of their own (`tandem_tests::client_queues`): two
//! clients at once, a client killed mid-kernel, the runtime killed under
//! client kernels, one client at its quota, a device the runtime does not
//! serve. On the CPU device always, on CUDA and HIP with their features
//! (skipped without a device unless `TANDEM_REQUIRE_GPU=1`, see
//! `tandem_tests::gpu`).

use std::path::PathBuf;

/// The `client_queues_child` binary: from `$TANDEM_BIN_DIR` when set (a GPU
/// bundle), else the one cargo built next to this test.
fn child() -> PathBuf {
    match std::env::var_os("TANDEM_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("client_queues_child"),
        None => PathBuf::from(env!("CARGO_BIN_EXE_client_queues_child")),
    }
}

macro_rules! client_queue_tests {
    ($name:ident, $api:ty) => {
        mod $name {
            use std::sync::MutexGuard;

            use tandem_tests::client_queues as cq;
            use tandem_tests::gpu::{api_or_skip, one_at_a_time};

            /// The backend and this test's turn, or `None` when it skips:
            /// the tests run GPU services in this process, one at a time.
            fn api(label: &str) -> Option<($api, MutexGuard<'static, ()>)> {
                let api = api_or_skip::<$api>(label)?;
                Some((api, one_at_a_time()))
            }

            #[test]
            fn two_clients_kernels_at_once() {
                if let Some((api, _turn)) = api("client queues two_clients_kernels_at_once") {
                    cq::two_clients_kernels_at_once(&api, &crate::child());
                }
            }

            #[test]
            fn client_killed_mid_kernel() {
                if let Some((api, _turn)) = api("client queues client_killed_mid_kernel") {
                    cq::client_killed_mid_kernel(&api, &crate::child());
                }
            }

            #[test]
            fn runtime_killed_under_client_kernels() {
                if let Some((_, _turn)) = api("client queues runtime_killed_under_client_kernels") {
                    cq::runtime_killed_under_client_kernels::<$api>(&crate::child());
                }
            }

            #[test]
            fn quota_of_one_client_leaves_the_other_alone() {
                if let Some((api, _turn)) =
                    api("client queues quota_of_one_client_leaves_the_other_alone")
                {
                    cq::quota_of_one_client_leaves_the_other_alone(&api, &crate::child());
                }
            }
        }
    };
}

client_queue_tests!(host, tandem_hal::HostApi);

#[test]
fn a_device_the_runtime_does_not_serve_is_refused() {
    tandem_tests::client_queues::a_device_the_runtime_does_not_serve_is_refused(&child());
}
#[cfg(feature = "cuda")]
client_queue_tests!(cuda, tandem_hal_cuda::CudaApi);
#[cfg(feature = "hip")]
client_queue_tests!(hip, tandem_hal_hip::HipApi);
