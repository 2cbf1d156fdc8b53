//! tandem/future.h against tandem-shm-core's FutureShm, on the CPU device
//! (the same bodies run on CUDA and HIP from tandem-tests' `device_kernels`
//! test).

mod cross_language {
    pub mod future;
    pub mod harness;
}

use cross_language::future::{self, Task};
use cross_language::harness::Gpu;
use proptest::prelude::*;
use tandem_hal::{Dim3, GpuApi, HostApi};

fn host() -> Gpu<HostApi> {
    let api = HostApi::load().expect("the host backend loads");
    Gpu::new(api.device(0).expect("host device 0"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn cpp_completes_what_rust_waits_on(
        a in any::<u64>(),
        b in any::<u64>(),
        payload in proptest::collection::vec(any::<u8>(), 0..=256),
        return_code in (tandem_shm_core::future::RC_RESERVED_MAX + 1)..=i32::MAX,
    ) {
        let task = Task { a, b, payload: &payload };
        future::cpp_completes_what_rust_waits_on(&host(), &task, return_code);
    }
}

#[test]
fn cpp_completion_failures_release_rust_waiters() {
    future::cpp_completion_failures_release_waiters(&host());
}

#[test]
fn rust_stop_flag_ends_a_wait_and_completion_wins() {
    future::rust_stop_flag_ends_wait_and_completion_wins(&host());
}

#[test]
fn cpp_blocks_wait_on_futures_rust_completes_or_stops() {
    let gpu = host();
    for launch in [
        (Dim3::linear(2), Dim3::linear(8)),
        (Dim3::new(1, 2, 1), Dim3::new(2, 2, 3)),
    ] {
        future::cpp_blocks_wait_on_rust(&gpu, launch);
    }
}
