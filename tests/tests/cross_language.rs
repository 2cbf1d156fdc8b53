//! The cross-language suite: one `#[test]` per behaviour of
//! `tandem_tests::cross_language` per backend: `host` (the CPU device)
//! always, `cuda` and `hip` with their features, each at its own scale and
//! with every shared structure in mapped pinned memory, so Rust threads work
//! on it while kernels run. GPU tests skip without a device unless
//! `TANDEM_REQUIRE_GPU=1` (see `tandem_tests::gpu::device_or_skip`).

/// `cross_language_tests!(module_name, Api)` stamps out the suite for one
/// backend, as `module_name::<part>::<behaviour>`.
macro_rules! cross_language_tests {
    ($backend:ident, $api:ty) => {
        mod $backend {
            cross_language_tests!(@part $api, arena: [
                mixed_rust_and_cpp_sequences_match_all_rust,
                concurrent_rust_and_cpp_allocations_never_overlap,
                block_contexts_hand_out_disjoint_usable_buffers,
            ]);
            cross_language_tests!(@part $api, future: [
                cpp_completes_what_rust_waits_on,
                cpp_completion_failures_release_rust_waiters,
                rust_stop_flag_ends_a_wait_and_completion_wins,
                cpp_blocks_wait_on_futures_rust_completes_or_stops,
            ]);
            cross_language_tests!(@part $api, mpmc: [
                mixed_rust_and_cpp_sequences_match_all_rust,
                cpp_producers_rust_consumers_lose_and_duplicate_nothing,
                cpp_producers_rust_run_consumers_lose_and_duplicate_nothing,
                waiting_producers_measure_their_consumers_pace,
                rust_producers_cpp_consumers_lose_and_duplicate_nothing,
                malformed_rings_are_refused_like_rust_refuses_them,
            ]);
            cross_language_tests!(@part $api, ser: [
                cpp_writes_what_rust_reads,
                rust_writes_what_cpp_reads,
            ]);
            cross_language_tests!(@part $api, size_class: [
                mixed_rust_and_cpp_sequences_match_all_rust,
                cpp_allocates_rust_frees_and_back,
                cache_serves_own_frees_until_flushed,
                racing_frees_have_one_winner,
                cpp_and_rust_threads_at_once_overlap_and_lose_nothing,
                malformed_heaps_are_refused_like_rust_refuses_them,
                a_heap_of_freed_blocks_of_one_size_serves_another,
            ]);
        }
    };
    (@part $api:ty, $part:ident: [$($behaviour:ident),* $(,)?]) => {
        mod $part {
            use tandem_tests::cross_language::{harness::Gpu, $part};
            use tandem_tests::gpu::device_or_skip;

            $(
                #[test]
                fn $behaviour() {
                    let label = concat!(stringify!($part), "::", stringify!($behaviour));
                    if let Some(device) = device_or_skip::<$api>(label) {
                        $part::$behaviour(&Gpu::<$api>::new(device));
                    }
                }
            )*
        }
    };
}

cross_language_tests!(host, tandem_hal::HostApi);
#[cfg(feature = "cuda")]
cross_language_tests!(cuda, tandem_hal_cuda::CudaApi);
#[cfg(feature = "hip")]
cross_language_tests!(hip, tandem_hal_hip::HipApi);
