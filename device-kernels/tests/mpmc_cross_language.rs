//! tandem/mpmc.h against tandem-shm-core's MpmcRing, on the CPU device (the
//! same bodies run on CUDA and HIP from tandem-tests' `device_kernels` test).

mod cross_language {
    pub mod harness;
    pub mod mpmc;
}

use cross_language::harness::Gpu;
use cross_language::mpmc;
use proptest::prelude::*;
use tandem_hal::{Dim3, GpuApi, HostApi};

fn host() -> Gpu<HostApi> {
    let api = HostApi::load().expect("the host backend loads");
    Gpu::new(api.device(0).expect("host device 0"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn mixed_rust_and_cpp_sequences_match_all_rust(
        ops in mpmc::op_sequences(),
        capacity in prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        init_in_cpp in any::<bool>(),
    ) {
        mpmc::mixed_sequence_matches_all_rust(&host(), capacity, init_in_cpp, &ops)?;
    }
}

#[test]
fn cpp_producers_rust_consumers_lose_and_duplicate_nothing() {
    let gpu = host();
    for launch in [
        (Dim3::linear(3), Dim3::linear(8)),
        (Dim3::new(2, 2, 1), Dim3::new(2, 2, 2)),
    ] {
        mpmc::cpp_producers_rust_consumers(&gpu, launch, 16, 6000, 2);
    }
}

#[test]
fn rust_producers_cpp_consumers_lose_and_duplicate_nothing() {
    let gpu = host();
    let launch = (Dim3::linear(2), Dim3::new(3, 2, 1));
    mpmc::rust_producers_cpp_consumers(&gpu, launch, 8, 5000, 2);
}

#[test]
fn malformed_rings_are_refused_like_rust_refuses_them() {
    mpmc::malformed_rings_are_refused(&host());
}
