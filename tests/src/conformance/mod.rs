//! Behaviour every [`tandem_hal::GpuApi`] backend must show, written once.
//! Each `pub fn` takes a device of backend `A` (or, for peer access, two
//! devices) and panics (fails its test) on a deviation. Each file lists its
//! behaviours in a macro at its bottom; [`conformance_tests!`](crate::conformance_tests)
//! stamps one `#[test]` per behaviour for a backend, and
//! `tests/conformance.rs` calls it for every backend built in.
//!
//! Synchronous copies are complete when they return but do not wait for
//! stream work ([`tandem_hal::GpuDevice`]'s rule), so the functions
//! synchronise a stream before they read what it wrote.

pub mod kernels;
pub mod memory;
pub mod peer;
pub mod sharing;
pub mod streams;

/// The whole conformance suite for backend `$api`, one `#[test]` per
/// behaviour, in a module per file (`memory::copies_round_trip`):
/// `$load_two` loads the backend for the tests of two devices, `$ipc_child`
/// is the path of the `ipc_child` binary for the two-process tests. Name
/// functions in them from the crate root (`crate::ipc_child()`): the tests
/// sit in modules of their own.
#[macro_export]
macro_rules! conformance_tests {
    ($api:ty, $load_two:expr, $ipc_child:expr) => {
        $crate::conformance_memory_tests!($api);
        $crate::conformance_kernels_tests!($api);
        $crate::conformance_streams_tests!($api);
        $crate::conformance_sharing_tests!($api);
        $crate::conformance_peer_tests!($api, $load_two);
        $crate::ipc_tests!($api, $ipc_child);
    };
}

/// `#[test] fn $behaviour ...` for each behaviour: each runs
/// `crate::conformance::$part::$behaviour` on a device of `$api`, or skips
/// without one (`crate::gpu::device_or_skip`).
#[doc(hidden)]
#[macro_export]
macro_rules! stamp_device_tests {
    ($api:ty, $part:ident: [$($behaviour:ident),* $(,)?]) => {
        $(
            #[test]
            fn $behaviour() {
                let label = concat!(stringify!($part), "::", stringify!($behaviour));
                if let Some(device) = $crate::gpu::device_or_skip::<$api>(label) {
                    $crate::conformance::$part::$behaviour::<$api>(&device);
                }
            }
        )*
    };
}

/// As [`stamp_device_tests!`](crate::stamp_device_tests), on two devices of
/// the backend `$load_two` loads.
#[doc(hidden)]
#[macro_export]
macro_rules! stamp_two_device_tests {
    ($api:ty, $load_two:expr, $part:ident: [$($behaviour:ident),* $(,)?]) => {
        $(
            #[test]
            fn $behaviour() {
                let label = concat!(stringify!($part), "::", stringify!($behaviour));
                if let Some(devices) = $crate::gpu::devices_or_skip::<$api>(label, 2, $load_two) {
                    $crate::conformance::$part::$behaviour::<$api>(&devices);
                }
            }
        )*
    };
}
