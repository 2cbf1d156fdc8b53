//! Peer access: a device is its own peer; between two devices, access
//! reported and enabled, copies both ways, a kernel on one reaching the
//! other's memory.

use tandem_hal::{
    DeviceMemory, Dim3, ErrorKind, GpuApi, GpuDevice, HostMemory, KernelArg, LaunchConfig,
};

use crate::support::{
    assert_out_of_bounds, block_sums_reference, kernels, kind, launch, pattern, read_u32s,
    u32_bytes,
};

/// A device is its own peer: it reports access to itself, enabling that is
/// `Ok` (twice), and a peer copy from itself moves the bytes, sync and
/// async, with the bounds of every copy checked.
pub fn a_device_is_its_own_peer<A: GpuApi>(device: &A::Device) {
    assert!(device.can_access_peer(device).unwrap());
    device.enable_peer_access(device).unwrap();
    device.enable_peer_access(device).unwrap();
    let src = device.alloc_device(512).unwrap();
    let dst = device.alloc_device(512).unwrap();
    let bytes = pattern(512, 21);
    device.copy_to_device(&src, 0, &bytes).unwrap();
    device.fill(&dst, 0, 512, 0).unwrap();
    device.copy_peer(&dst, 4, device, &src, 40, 200).unwrap();
    let stream = device.create_stream().unwrap();
    device
        .copy_peer_async(&stream, &dst, 400, device, &src, 0, 64)
        .unwrap();
    device.synchronize_stream(&stream).unwrap();
    let mut expected = vec![0u8; 512];
    expected[4..204].copy_from_slice(&bytes[40..240]);
    expected[400..464].copy_from_slice(&bytes[..64]);
    let mut back = vec![0u8; 512];
    device.copy_from_device(&mut back, &dst, 0).unwrap();
    assert_eq!(back, expected);
    assert_peer_copy_bounds::<A>(device, &dst, device, &src, &stream);
}

/// Every peer copy past the end of either buffer is `OutOfBounds`, sync or
/// async, and nothing is queued.
fn assert_peer_copy_bounds<A: GpuApi>(
    device: &A::Device,
    dst: &impl DeviceMemory<Api = A>,
    src_device: &A::Device,
    src: &impl DeviceMemory<Api = A>,
    stream: &<A::Device as GpuDevice>::Stream,
) {
    let (dst_len, src_len) = (dst.len(), src.len());
    assert_out_of_bounds(device.copy_peer(dst, 0, src_device, src, 1, src_len));
    assert_out_of_bounds(device.copy_peer(dst, dst_len, src_device, src, 0, 1));
    assert_out_of_bounds(device.copy_peer(dst, usize::MAX, src_device, src, 0, 2));
    assert_out_of_bounds(device.copy_peer(dst, 0, src_device, src, src_len - 1, 2));
    assert_out_of_bounds(device.copy_peer_async(stream, dst, 1, src_device, src, 0, dst_len));
    assert_out_of_bounds(device.copy_peer_async(stream, dst, 0, src_device, src, src_len, 1));
    device.synchronize_stream(stream).unwrap();
}

/// Every ordered pair of `devices` reports peer access or not; enabling it
/// where reported is `Ok`, twice (idempotent), and refused as
/// `PeerAccessUnsupported` naming both ordinals where not. The CPU device
/// reports access between every pair.
pub fn peer_access_is_reported_and_enabled<A: GpuApi>(devices: &[A::Device]) {
    for device in devices {
        for peer in devices {
            let can = device.can_access_peer(peer).unwrap();
            let pair = format!("device {} to {}", device.ordinal(), peer.ordinal());
            if device.ordinal() == peer.ordinal() || A::BACKEND == tandem_hal::Backend::Host {
                assert!(can, "{pair}");
            }
            println!("peer access {pair}: {can}");
            if can {
                device.enable_peer_access(peer).unwrap();
                device.enable_peer_access(peer).unwrap();
            } else {
                assert_eq!(
                    kind(device.enable_peer_access(peer)),
                    ErrorKind::PeerAccessUnsupported {
                        device: device.ordinal(),
                        peer: peer.ordinal(),
                    },
                    "{pair}"
                );
            }
        }
    }
}

/// Peer copies between two devices move the bytes both ways, sync and
/// async, before and after peer access is enabled (where it can be), with
/// the bounds of both buffers checked.
pub fn peer_copies_between_devices<A: GpuApi>(devices: &[A::Device]) {
    const LEN: usize = 1 << 20;
    let (first, second) = (&devices[0], &devices[1]);
    let on_first = first.alloc_device(LEN).unwrap();
    let on_second = second.alloc_device(LEN).unwrap();
    let stream_first = first.create_stream().unwrap();
    let stream_second = second.create_stream().unwrap();
    for enabled in [false, true] {
        if enabled {
            for (device, peer) in [(first, second), (second, first)] {
                if device.can_access_peer(peer).unwrap() {
                    device.enable_peer_access(peer).unwrap();
                }
            }
        }
        let seed = if enabled { 101 } else { 7 };
        let bytes = pattern(LEN, seed);
        first.copy_to_device(&on_first, 0, &bytes).unwrap();
        second.fill(&on_second, 0, LEN, 0).unwrap();
        // First to second: a sync copy of a part, an async copy of another.
        second
            .copy_peer(&on_second, 16, first, &on_first, 1000, 5000)
            .unwrap();
        second
            .copy_peer_async(
                &stream_second,
                &on_second,
                LEN / 2,
                first,
                &on_first,
                0,
                LEN / 2,
            )
            .unwrap();
        second.synchronize_stream(&stream_second).unwrap();
        let mut expected = vec![0u8; LEN];
        expected[16..5016].copy_from_slice(&bytes[1000..6000]);
        expected[LEN / 2..].copy_from_slice(&bytes[..LEN / 2]);
        let mut back = vec![0u8; LEN];
        second.copy_from_device(&mut back, &on_second, 0).unwrap();
        assert!(back == expected, "first to second (enabled: {enabled})");
        // And back: the whole of the second device's buffer into the first's.
        first.fill(&on_first, 0, LEN, 0xee).unwrap();
        first
            .copy_peer_async(&stream_first, &on_first, 0, second, &on_second, 0, LEN)
            .unwrap();
        first.synchronize_stream(&stream_first).unwrap();
        first.copy_from_device(&mut back, &on_first, 0).unwrap();
        assert!(back == expected, "second to first (enabled: {enabled})");
        first.fill(&on_first, 0, LEN, 0).unwrap();
        first
            .copy_peer(&on_first, 3, second, &on_second, 16, 100)
            .unwrap();
        first
            .copy_from_device(&mut back[..200], &on_first, 0)
            .unwrap();
        let mut head = [0u8; 200];
        head[3..103].copy_from_slice(&expected[16..116]);
        assert_eq!(
            back[..200],
            head[..],
            "second to first, sync (enabled: {enabled})"
        );
    }
    assert_peer_copy_bounds::<A>(second, &on_second, first, &on_first, &stream_second);
    assert_peer_copy_bounds::<A>(first, &on_first, second, &on_second, &stream_first);
}

/// A kernel on the second device reads and writes pinned memory allocated
/// through the first (mapped for every device, no peer access needed), and,
/// where it has peer access to the first device, reads the first device's
/// memory directly once access is enabled: the block sums it computes from
/// it match a CPU reference.
pub fn kernel_on_a_peer_reaches_another_devices_memory<A: GpuApi>(devices: &[A::Device]) {
    const N: usize = 1 << 16;
    let (first, second) = (&devices[0], &devices[1]);
    let module = kernels(second);
    let stream = second.create_stream().unwrap();
    let config = LaunchConfig::linear(16, 256);

    let pinned = first.alloc_pinned_mapped(N * 4).unwrap();
    let words = pinned.host_ptr().cast::<u32>();
    for i in 0..N {
        // SAFETY: N u32s of live, aligned pinned memory; no kernel runs yet.
        unsafe { words.add(i).write(i as u32) };
    }
    let args = [
        KernelArg::Ptr(pinned.device_ptr()),
        KernelArg::U64(N as u64),
        KernelArg::U32(5),
    ];
    launch(second, &module, "tandem_add_u32", config, &args, &stream);
    second.synchronize_stream(&stream).unwrap();
    // SAFETY: as above; the kernel has finished.
    let seen = unsafe { core::slice::from_raw_parts(words, N) };
    if let Some(i) = (0..N).find(|&i| seen[i] != i as u32 + 5) {
        panic!("pinned word {i} is {}, expected {}", seen[i], i + 5);
    }

    if !second.can_access_peer(first).unwrap() {
        println!(
            "kernel_on_a_peer_reaches_another_devices_memory: device memory part skipped: \
             device {} has no peer access to device {}",
            second.ordinal(),
            first.ordinal()
        );
        return;
    }
    second.enable_peer_access(first).unwrap();
    let input: Vec<u32> = (0..N as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let on_first = first.alloc_device(N * 4).unwrap();
    first
        .copy_to_device(&on_first, 0, &u32_bytes(&input))
        .unwrap();
    let (grid, block) = (Dim3::linear(8), Dim3::linear(128));
    let sums = second.alloc_device(8 * 4).unwrap();
    let args = [
        KernelArg::Ptr(on_first.device_ptr()),
        KernelArg::Ptr(sums.device_ptr()),
        KernelArg::U64(N as u64),
    ];
    let config = LaunchConfig {
        grid,
        block,
        shared_mem_bytes: 0,
    };
    launch(
        second,
        &module,
        "tandem_block_sum_u32",
        config,
        &args,
        &stream,
    );
    second.synchronize_stream(&stream).unwrap();
    assert_eq!(
        read_u32s(second, &sums, 8),
        block_sums_reference(&input, grid, block)
    );
}

/// One `#[test]` per behaviour above for backend `$api`, in a module
/// `peer`; `$load_two` loads the backend for the tests of two devices.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_peer_tests {
    ($api:ty, $load_two:expr) => {
        mod peer {
            $crate::stamp_device_tests!($api, peer: [a_device_is_its_own_peer]);
            $crate::stamp_two_device_tests!($api, $load_two, peer: [
                peer_access_is_reported_and_enabled,
                peer_copies_between_devices,
                kernel_on_a_peer_reaches_another_devices_memory,
            ]);
        }
    };
}
