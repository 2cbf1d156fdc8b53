//! tandem/size_class.h against tandem-shm-core's SizeClassAllocator, on the
//! CPU device (the same bodies run on CUDA and HIP from tandem-tests'
//! `device_kernels` test).

mod cross_language {
    pub mod harness;
    pub mod size_class;
}

use cross_language::harness::Gpu;
use cross_language::size_class;
use proptest::prelude::*;
use tandem_hal::{Dim3, GpuApi, HostApi};

fn host() -> Gpu<HostApi> {
    let api = HostApi::load().expect("the host backend loads");
    Gpu::new(api.device(0).expect("host device 0"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn mixed_rust_and_cpp_sequences_match_all_rust(ops in size_class::op_sequences()) {
        size_class::mixed_sequence_matches_all_rust(&host(), &ops)?;
    }
}

#[test]
fn cpp_allocates_rust_frees_and_back() {
    size_class::cpp_allocates_rust_frees_and_back(&host());
}

#[test]
fn cache_serves_own_frees_until_flushed() {
    size_class::cache_serves_own_frees_until_flushed(&host());
}

#[test]
fn racing_frees_have_one_winner() {
    size_class::racing_frees_have_one_winner(&host(), (Dim3::linear(2), Dim3::new(16, 2, 1)));
}

#[test]
fn cpp_and_rust_threads_at_once_overlap_and_lose_nothing() {
    let gpu = host();
    for cached in [false, true] {
        size_class::cpp_and_rust_threads_at_once(
            &gpu,
            (Dim3::linear(3), Dim3::linear(8)),
            2000,
            2,
            cached,
        );
    }
    size_class::cpp_and_rust_threads_at_once(
        &gpu,
        (Dim3::new(2, 2, 1), Dim3::new(2, 2, 2)),
        1000,
        1,
        true,
    );
}

#[test]
fn malformed_heaps_are_refused_like_rust_refuses_them() {
    size_class::malformed_heaps_are_refused(&host());
}
