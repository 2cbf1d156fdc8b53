//! Kernels: writes to pinned memory and to a registered segment, block
//! sums against a reference, launches the backend must refuse.

use tandem_hal::{
    DeviceMemory, Dim3, ErrorKind, GpuApi, GpuDevice, HostMemory, KernelArg, LaunchConfig,
};
use tandem_shm_core::Segment;

use crate::support::{
    assert_argument_mismatch, assert_invalid_argument, block_sums_reference, fill_u32_and_wait,
    kernels, kind, launch, read_u32s, u32_bytes,
};

/// Pinned mapped memory starts on a page boundary, and a kernel's writes to
/// it are visible to the host.
pub fn kernel_writes_pinned_memory<A: GpuApi>(device: &A::Device) {
    const N: usize = 4096;
    // Page-aligned, host and device address, whatever the size (a pool may
    // hand small requests out mid-page: CUDA's does).
    let page = tandem_hal::numa::page_size();
    for bytes in [64, 4096, 32 * 1024, 1 << 20] {
        let buffers: Vec<_> = (0..4)
            .map(|_| device.alloc_pinned_mapped(bytes).unwrap())
            .collect();
        for b in &buffers {
            assert_eq!(
                b.host_ptr() as usize % page,
                0,
                "{bytes}-byte pinned buffer"
            );
            assert_eq!(
                b.device_ptr() as usize % page,
                0,
                "{bytes}-byte pinned buffer"
            );
        }
    }
    let pinned = device.alloc_pinned_mapped(N * 4).unwrap();
    let target = (pinned.device_ptr(), N);
    fill_u32_and_wait(device, LaunchConfig::linear(4, 128), target, 0xfeed);
    // SAFETY: N u32s of live, aligned pinned memory; the kernel has finished.
    let seen = unsafe { core::slice::from_raw_parts(pinned.host_ptr().cast::<u32>(), N) };
    assert!(seen.iter().all(|&v| v == 0xfeed));
}

/// A registered shared-memory segment is written by a kernel, and the bytes
/// show through a second mapping of the segment.
pub fn kernel_writes_registered_segment<A: GpuApi>(device: &A::Device) {
    const LEN: usize = 64 * 1024;
    let segment = Segment::create_anonymous(LEN).unwrap();
    let other_view = segment.map_again().unwrap();
    // SAFETY: `segment` stays mapped until after `registration` is dropped.
    let registration = unsafe { device.register_host(segment.as_ptr(), LEN) }.unwrap();
    assert_eq!(registration.host_ptr(), segment.as_ptr());
    let target = (registration.device_ptr(), LEN / 4);
    fill_u32_and_wait(device, LaunchConfig::linear(8, 64), target, 0x5eed);
    // SAFETY: the second mapping has LEN bytes, page-aligned; the kernel finished.
    let seen = unsafe { core::slice::from_raw_parts(other_view.as_ptr().cast::<u32>(), LEN / 4) };
    assert!(seen.iter().all(|&v| v == 0x5eed));
    drop(registration);
}

/// 1D, 2D and 3D launches of the block-sum kernel (block-shared memory and
/// the barrier) match a CPU reference.
pub fn block_sums_match_reference<A: GpuApi>(device: &A::Device) {
    const N: usize = 50_000;
    let input: Vec<u32> = (0..N as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) >> 7)
        .collect();
    let input_buffer = device.alloc_device(N * 4).unwrap();
    device
        .copy_to_device(&input_buffer, 0, &u32_bytes(&input))
        .unwrap();
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    for (grid, block) in [
        (Dim3::linear(7), Dim3::linear(128)),
        (Dim3::linear(3), Dim3::linear(1000)),
        (Dim3::new(3, 2, 1), Dim3::new(16, 8, 1)),
        (Dim3::new(2, 2, 2), Dim3::new(8, 4, 4)),
        (Dim3::new(2, 1, 1), Dim3::new(32, 32, 1)),
        (Dim3::linear(1), Dim3::linear(1)),
    ] {
        let blocks = grid.count().unwrap() as usize;
        let out = device.alloc_device(blocks * 4).unwrap();
        let config = LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        };
        let args = [
            KernelArg::Ptr(input_buffer.device_ptr()),
            KernelArg::Ptr(out.device_ptr()),
            KernelArg::U64(N as u64),
        ];
        launch(
            device,
            &module,
            "tandem_block_sum_u32",
            config,
            &args,
            &stream,
        );
        device.synchronize_stream(&stream).unwrap();
        assert_eq!(
            read_u32s(device, &out, blocks),
            block_sums_reference(&input, grid, block),
            "grid {grid:?}, block {block:?}"
        );
    }
}

/// Bad launches are refused with typed errors before anything runs.
pub fn bad_launches_are_refused<A: GpuApi>(device: &A::Device) {
    let module = kernels(device);
    let missing = device.kernel(&module, "tandem_no_such_kernel");
    assert!(matches!(kind(missing), ErrorKind::KernelNotFound(_)));
    let fill = device.kernel(&module, "tandem_fill_u32").unwrap();
    let stream = device.create_stream().unwrap();
    let buffer = device.alloc_device(4096).unwrap();
    let ptr = KernelArg::Ptr(buffer.device_ptr());
    let good = [ptr, KernelArg::U64(1024), KernelArg::U32(1)];
    let one = LaunchConfig::linear(1, 32);
    // SAFETY: (every launch below) each is refused before it could run,
    // and `buffer` holds the 1024 u32s the well-formed arguments name.
    unsafe {
        assert_argument_mismatch(device.launch(&fill, &one, &good[..2], &stream));
        assert_argument_mismatch(device.launch(
            &fill,
            &one,
            &[ptr, KernelArg::U32(1024), KernelArg::U32(1)],
            &stream,
        ));
        assert_argument_mismatch(device.launch(
            &fill,
            &one,
            &[good[0], good[1], good[2], KernelArg::U32(0)],
            &stream,
        ));
        for config in [
            LaunchConfig::linear(0, 32),
            LaunchConfig::linear(1, 0),
            LaunchConfig {
                grid: Dim3::new(1, 0, 1),
                block: Dim3::linear(1),
                shared_mem_bytes: 0,
            },
            LaunchConfig::linear(1, 1025),
            LaunchConfig {
                grid: Dim3::linear(1),
                block: Dim3::new(32, 32, 2),
                shared_mem_bytes: 0,
            },
            LaunchConfig {
                grid: Dim3::linear(1),
                block: Dim3::new(1, 1, 65),
                shared_mem_bytes: 0,
            },
            LaunchConfig {
                grid: Dim3::new(1, 65536, 1),
                block: Dim3::linear(1),
                shared_mem_bytes: 0,
            },
            LaunchConfig {
                grid: Dim3::linear(1),
                block: Dim3::linear(32),
                shared_mem_bytes: u32::MAX,
            },
        ] {
            assert_invalid_argument(device.launch(&fill, &config, &good, &stream));
        }
        device.launch(&fill, &one, &good, &stream).unwrap();
    }
    device.synchronize_stream(&stream).unwrap();
    assert!(read_u32s(device, &buffer, 1024).iter().all(|&v| v == 1));
}

/// One `#[test]` per behaviour above for backend `$api`, in a module
/// `kernels`.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_kernels_tests {
    ($api:ty) => {
        mod kernels {
            $crate::stamp_device_tests!($api, kernels: [
                kernel_writes_pinned_memory,
                kernel_writes_registered_segment,
                block_sums_match_reference,
                bad_launches_are_refused,
            ]);
        }
    };
}
