//! The device kernels' cross-language tests (tandem/mpmc.h, future.h, ser.h,
//! size_class.h against tandem-shm-core on the same bytes) on the GPU backends: the
//! bodies are tandem-device-kernels' `tests/cross_language` module, which
//! that crate runs on the CPU device; here they run on CUDA and HIP (with
//! their features), at GPU scale, with every shared structure in mapped
//! pinned memory so Rust threads work on it while kernels run. Without a
//! device they skip, unless `TANDEM_REQUIRE_GPU=1`.

#![cfg(any(feature = "cuda", feature = "hip"))]

#[path = "../../device-kernels/tests/cross_language/mod.rs"]
mod cross_language;

/// `gpu_tests!(module_name, Api)` stamps out every cross-language test for
/// one GPU backend.
macro_rules! gpu_tests {
    ($backend:ident, $api:ty) => {
        mod $backend {
            use super::cross_language::future::{self, Task};
            use super::cross_language::harness::Gpu;
            use super::cross_language::{mpmc, ser, size_class};
            use proptest::prelude::*;
            use tandem_hal::Dim3;
            use tandem_tests::gpu::device_or_skip;

            fn gpu(label: &str) -> Option<Gpu<$api>> {
                device_or_skip::<$api>(label).map(Gpu::new)
            }

            proptest! {
                #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

                #[test]
                fn mpmc_mixed_sequences_match_all_rust(
                    ops in mpmc::op_sequences(),
                    capacity in prop_oneof![Just(1u32), Just(2), Just(8)],
                    init_in_cpp in any::<bool>(),
                ) {
                    if let Some(gpu) = gpu("mpmc_mixed_sequences_match_all_rust") {
                        mpmc::mixed_sequence_matches_all_rust(&gpu, capacity, init_in_cpp, &ops)?;
                    }
                }

                #[test]
                fn future_cpp_completes_what_rust_waits_on(
                    a in any::<u64>(),
                    b in any::<u64>(),
                    payload in proptest::collection::vec(any::<u8>(), 0..=256),
                    return_code in (tandem_shm_core::future::RC_RESERVED_MAX + 1)..=i32::MAX,
                ) {
                    if let Some(gpu) = gpu("future_cpp_completes_what_rust_waits_on") {
                        let task = Task { a, b, payload: &payload };
                        future::cpp_completes_what_rust_waits_on(&gpu, &task, return_code);
                    }
                }

                #[test]
                fn ser_cpp_writes_what_rust_reads(sample in ser::samples(), spare in -20i64..20) {
                    if let Some(gpu) = gpu("ser_cpp_writes_what_rust_reads") {
                        let len = tandem_shm_core::ser::serialized_len(&sample).unwrap() as i64 + spare;
                        ser::cpp_writes_rust_reads(&gpu, &sample, len.max(0) as usize);
                    }
                }

                #[test]
                fn ser_rust_writes_what_cpp_reads(sample in ser::samples(), cut in 1usize..100) {
                    if let Some(gpu) = gpu("ser_rust_writes_what_cpp_reads") {
                        ser::rust_writes_cpp_reads(&gpu, &sample, cut);
                    }
                }

                #[test]
                fn size_class_mixed_sequences_match_all_rust(ops in size_class::op_sequences()) {
                    if let Some(gpu) = gpu("size_class_mixed_sequences_match_all_rust") {
                        size_class::mixed_sequence_matches_all_rust(&gpu, &ops)?;
                    }
                }
            }

            #[test]
            fn size_class_cpp_allocates_rust_frees_and_back() {
                if let Some(gpu) = gpu("size_class_cpp_allocates_rust_frees_and_back") {
                    size_class::cpp_allocates_rust_frees_and_back(&gpu);
                }
            }

            #[test]
            fn size_class_cache_serves_own_frees_until_flushed() {
                if let Some(gpu) = gpu("size_class_cache_serves_own_frees_until_flushed") {
                    size_class::cache_serves_own_frees_until_flushed(&gpu);
                }
            }

            #[test]
            fn size_class_racing_frees_have_one_winner() {
                if let Some(gpu) = gpu("size_class_racing_frees_have_one_winner") {
                    let launch = (Dim3::linear(8), Dim3::linear(256));
                    size_class::racing_frees_have_one_winner(&gpu, launch);
                }
            }

            #[test]
            fn size_class_gpu_and_rust_threads_at_once() {
                if let Some(gpu) = gpu("size_class_gpu_and_rust_threads_at_once") {
                    // Every list operation is a compare-and-swap across
                    // PCIe, and the whole GPU completes about 30 M of those a
                    // second, shared by all contenders of a word: 256 threads
                    // on the shared lists alone, 2 K through thread caches
                    // (which reach the lists on refills and overflows only).
                    let launch = (Dim3::linear(4), Dim3::linear(64));
                    size_class::cpp_and_rust_threads_at_once(&gpu, launch, 64, 4, false);
                    let launch = (Dim3::linear(16), Dim3::linear(128));
                    size_class::cpp_and_rust_threads_at_once(&gpu, launch, 256, 4, true);
                    // A partial last warp, a 3D block.
                    let launch = (Dim3::linear(5), Dim3::new(7, 3, 2));
                    size_class::cpp_and_rust_threads_at_once(&gpu, launch, 256, 2, true);
                }
            }

            #[test]
            fn size_class_malformed_heaps_are_refused() {
                if let Some(gpu) = gpu("size_class_malformed_heaps_are_refused") {
                    size_class::malformed_heaps_are_refused(&gpu);
                }
            }

            #[test]
            fn mpmc_gpu_producers_rust_consumers() {
                if let Some(gpu) = gpu("mpmc_gpu_producers_rust_consumers") {
                    // 16 K threads, a million records through 1024 slots.
                    let launch = (Dim3::linear(64), Dim3::linear(256));
                    mpmc::cpp_producers_rust_consumers(&gpu, launch, 1024, 1 << 20, 4);
                    // A partial last warp, a 3D block, a small ring.
                    let launch = (Dim3::linear(5), Dim3::new(7, 3, 2));
                    mpmc::cpp_producers_rust_consumers(&gpu, launch, 64, 100_003, 2);
                }
            }

            #[test]
            fn mpmc_rust_producers_gpu_consumers() {
                if let Some(gpu) = gpu("mpmc_rust_producers_gpu_consumers") {
                    let launch = (Dim3::linear(16), Dim3::linear(128));
                    mpmc::rust_producers_cpp_consumers(&gpu, launch, 1024, 200_000, 4);
                }
            }

            #[test]
            fn mpmc_malformed_rings_are_refused() {
                if let Some(gpu) = gpu("mpmc_malformed_rings_are_refused") {
                    mpmc::malformed_rings_are_refused(&gpu);
                }
            }

            #[test]
            fn future_completion_failures_release_rust_waiters() {
                if let Some(gpu) = gpu("future_completion_failures_release_rust_waiters") {
                    future::cpp_completion_failures_release_waiters(&gpu);
                }
            }

            #[test]
            fn future_rust_stop_flag_and_completion_wins() {
                if let Some(gpu) = gpu("future_rust_stop_flag_and_completion_wins") {
                    future::rust_stop_flag_ends_wait_and_completion_wins(&gpu);
                }
            }

            #[test]
            fn future_gpu_blocks_wait_on_rust() {
                if let Some(gpu) = gpu("future_gpu_blocks_wait_on_rust") {
                    for launch in [
                        (Dim3::linear(8), Dim3::linear(256)),
                        (Dim3::new(2, 2, 1), Dim3::new(8, 4, 2)),
                    ] {
                        future::cpp_blocks_wait_on_rust(&gpu, launch);
                    }
                }
            }
        }
    };
}

#[cfg(feature = "cuda")]
gpu_tests!(cuda, tandem_hal_cuda::CudaApi);
#[cfg(feature = "hip")]
gpu_tests!(hip, tandem_hal_hip::HipApi);
