//! The cross-language suite: the device kernels' C++ (tandem/arena.h,
//! future.h, mpmc.h, ser.h, size_class.h) against tandem-shm-core on the same
//! bytes, written once over [`tandem_hal::GpuApi`]. Every `pub fn` of a module
//! is one behaviour, run on a [`harness::Gpu`] at that backend's scale; each
//! file lists its behaviours in a macro at its bottom, and
//! [`cross_language_tests!`](crate::cross_language_tests) stamps one `#[test]`
//! per behaviour for a backend (`tests/cross_language.rs`).

pub mod arena;
pub mod future;
pub mod harness;
pub mod mpmc;
pub mod ser;
pub mod size_class;

/// The whole cross-language suite for backend `$api`, one `#[test]` per
/// behaviour, in a module per file (`mpmc::rust_writes_what_cpp_reads`).
#[macro_export]
macro_rules! cross_language_tests {
    ($api:ty) => {
        $crate::cross_language_arena_tests!($api);
        $crate::cross_language_future_tests!($api);
        $crate::cross_language_mpmc_tests!($api);
        $crate::cross_language_ser_tests!($api);
        $crate::cross_language_size_class_tests!($api);
    };
}

/// `#[test] fn $behaviour ...` for each behaviour: each runs
/// `crate::cross_language::$part::$behaviour` on a [`harness::Gpu`] of
/// `$api`, or skips without a device (`crate::gpu::device_or_skip`).
#[doc(hidden)]
#[macro_export]
macro_rules! stamp_cross_language_tests {
    ($api:ty, $part:ident: [$($behaviour:ident),* $(,)?]) => {
        $(
            #[test]
            fn $behaviour() {
                let label = concat!(stringify!($part), "::", stringify!($behaviour));
                if let Some(device) = $crate::gpu::device_or_skip::<$api>(label) {
                    $crate::cross_language::$part::$behaviour(
                        &$crate::cross_language::harness::Gpu::<$api>::new(device),
                    );
                }
            }
        )*
    };
}
