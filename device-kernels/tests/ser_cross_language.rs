//! tandem/ser.h against tandem-shm-core's serializer, on the CPU device (the
//! same bodies run on CUDA and HIP from tandem-tests' `device_kernels` test).

mod cross_language {
    pub mod harness;
    pub mod ser;
}

use cross_language::harness::Gpu;
use cross_language::ser;
use proptest::prelude::*;
use tandem_hal::{GpuApi, HostApi};

fn host() -> Gpu<HostApi> {
    let api = HostApi::load().expect("the host backend loads");
    Gpu::new(api.device(0).expect("host device 0"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn cpp_writes_what_rust_reads(sample in ser::samples(), spare in -20i64..20) {
        // Buffers from 20 bytes short of the record to 20 bytes over.
        let len = tandem_shm_core::ser::serialized_len(&sample).unwrap() as i64 + spare;
        ser::cpp_writes_rust_reads(&host(), &sample, len.max(0) as usize);
    }

    #[test]
    fn rust_writes_what_cpp_reads(sample in ser::samples(), cut in 1usize..100) {
        ser::rust_writes_cpp_reads(&host(), &sample, cut);
    }
}
