//! Memory: properties, allocation sizes, copies (synchronous and on
//! streams, between device buffers), fills, bounds, forged memory, managed
//! memory.

use tandem_hal::checks::MAX_ALLOCATION;
use tandem_hal::{
    DeviceMemory, ErrorKind, GpuApi, GpuDevice, GpuResult, HostMemory, KernelArg, LaunchConfig,
    NumaSource,
};

use crate::support::{
    assert_invalid_size, assert_out_of_bounds, kernels, kind, launch, pattern, read_u32s, u32_bytes,
};

/// Properties are filled in and consistent.
pub fn properties_are_sane<A: GpuApi>(device: &A::Device) {
    let p = device.properties().unwrap();
    assert_eq!(p.ordinal, device.ordinal());
    assert!(!p.name.is_empty() && !p.arch.is_empty(), "{p:?}");
    assert!(p.total_memory >= 1 << 30, "less than 1 GiB: {p:?}");
    assert!(p.multiprocessor_count >= 1, "{p:?}");
    assert!(p.warp_size.is_power_of_two() && p.warp_size <= 64, "{p:?}");
    assert!((64..=1024).contains(&p.max_threads_per_block), "{p:?}");
    assert!(p.max_shared_mem_per_block >= 16 * 1024, "{p:?}");
    assert!(p.can_map_host_memory, "{p:?}");
    assert_eq!(
        p.host_numa_node.is_none(),
        p.numa_source == NumaSource::Unknown,
        "{p:?}"
    );
}

/// Zero and absurd sizes are `InvalidSize` for every kind of allocation.
pub fn allocations_reject_bad_sizes<A: GpuApi>(device: &A::Device) {
    for bytes in [0, MAX_ALLOCATION + 1, usize::MAX] {
        assert_invalid_size(device.alloc_device(bytes));
        assert_invalid_size(device.alloc_device_exportable(bytes));
        assert_invalid_size(device.alloc_pinned_mapped(bytes));
        assert_invalid_size(device.alloc_managed(bytes));
    }
}

/// Bytes copied in come back out, at any offset.
pub fn copies_round_trip<A: GpuApi>(device: &A::Device) {
    let buffer = device.alloc_device(4096).unwrap();
    assert_eq!(buffer.len(), 4096);
    let whole = pattern(4096, 1);
    device.copy_to_device(&buffer, 0, &whole).unwrap();
    let patch = pattern(100, 77);
    device.copy_to_device(&buffer, 1000, &patch).unwrap();
    let mut expected = whole.clone();
    expected[1000..1100].copy_from_slice(&patch);
    let mut back = vec![0u8; 4096];
    device.copy_from_device(&mut back, &buffer, 0).unwrap();
    assert_eq!(back, expected);
    let mut middle = vec![0u8; 50];
    device.copy_from_device(&mut middle, &buffer, 1025).unwrap();
    assert_eq!(middle, expected[1025..1075]);
}

/// Every copy or fill past the end of a buffer is `OutOfBounds`, sync or async.
pub fn out_of_bounds_accesses_are_refused<A: GpuApi>(device: &A::Device) {
    let buffer = device.alloc_device(256).unwrap();
    let other = device.alloc_device(256).unwrap();
    let stream = device.create_stream().unwrap();
    assert_out_of_bounds(device.copy_to_device(&buffer, 0, &[0; 257]));
    assert_out_of_bounds(device.copy_to_device(&buffer, 256, &[0; 1]));
    assert_out_of_bounds(device.copy_to_device(&buffer, usize::MAX, &[0; 2]));
    assert_out_of_bounds(device.copy_from_device(&mut [0; 16], &buffer, 250));
    assert_out_of_bounds(device.copy_device_to_device(&buffer, 0, &other, 200, 57));
    assert_out_of_bounds(device.copy_device_to_device(&buffer, 255, &other, 0, 2));
    assert_out_of_bounds(device.fill(&buffer, 100, 157, 0));
    assert_out_of_bounds(device.fill_async(&stream, &buffer, 0, 257, 0));
    assert_out_of_bounds(device.copy_device_to_device_async(&stream, &buffer, 0, &other, 1, 256));
    let mut sink = [0u8; 8];
    // SAFETY: refused before anything is enqueued (asserted).
    assert_out_of_bounds(unsafe {
        device.copy_from_device_async(&stream, &mut sink, &buffer, 249)
    });
    // SAFETY: as above.
    assert_out_of_bounds(unsafe { device.copy_to_device_async(&stream, &buffer, 252, &[1; 8]) });
    device.synchronize_stream(&stream).unwrap();
}

/// Memory that claims `len` bytes at `ptr`, whatever is there.
struct Forged<A> {
    ptr: u64,
    len: usize,
    api: core::marker::PhantomData<A>,
}

impl<A> Forged<A> {
    fn at(ptr: u64, len: usize) -> Self {
        Self {
            ptr,
            len,
            api: core::marker::PhantomData,
        }
    }
}

// SAFETY: breaks the contract on purpose, only in the two ways the trait
// documents as errors every backend refuses before calling its vendor: a null
// address and a range that wraps around the address space (what the test
// checks). Any other lie would be undefined behaviour on a GPU.
unsafe impl<A: GpuApi> DeviceMemory for Forged<A> {
    type Api = A;
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// Safe code cannot forge memory: [`DeviceMemory`] is an `unsafe trait`, so
/// a type claiming an address of its choosing does not compile without an
/// `unsafe impl`, for any backend (E0200 pins the reason):
///
/// ```compile_fail,E0200
/// use tandem_hal::{DeviceMemory, GpuApi};
///
/// struct Forged<A>(core::marker::PhantomData<A>);
///
/// impl<A: GpuApi> DeviceMemory for Forged<A> {
///     type Api = A;
///     fn device_ptr(&self) -> u64 {
///         0x7f00_0000_0000
///     }
///     fn len(&self) -> usize {
///         1 << 20
///     }
/// }
/// ```
///
/// And what a backend can check of an `unsafe impl`'s promise without asking
/// its driver, it checks: memory at address 0, or running past the end of
/// the address space, is `InvalidArgument` for every copy and fill, sync or
/// async, even an empty one, and nothing is queued.
pub fn forged_memory_is_refused<A: GpuApi>(device: &A::Device) {
    let real = device.alloc_device(4096).unwrap();
    let stream = device.create_stream().unwrap();
    for forged in [
        Forged::<A>::at(0, 4096),
        // The last 2 KiB of the address space, claiming 4 KiB.
        Forged::<A>::at(u64::MAX - 2047, 4096),
        Forged::<A>::at(u64::MAX, usize::MAX),
    ] {
        let what = format!("{:#x}+{}", forged.ptr, forged.len);
        let refused = |result: GpuResult<()>| {
            let kind = kind(result);
            assert!(
                matches!(kind, ErrorKind::InvalidArgument(_)),
                "{what}: expected InvalidArgument, got {kind:?}"
            );
        };
        refused(device.copy_to_device(&forged, 0, &[1; 16]));
        refused(device.copy_to_device(&forged, 0, &[]));
        refused(device.copy_from_device(&mut [0; 16], &forged, 16));
        refused(device.copy_device_to_device(&forged, 0, &real, 0, 16));
        refused(device.copy_device_to_device(&real, 0, &forged, 0, 16));
        refused(device.fill(&forged, 0, 16, 0xff));
        refused(device.fill(&forged, 0, 0, 0xff));
        refused(device.fill_async(&stream, &forged, 0, 16, 0xff));
        refused(device.copy_device_to_device_async(&stream, &real, 0, &forged, 0, 16));
        // SAFETY: refused before anything is enqueued (asserted).
        refused(unsafe { device.copy_to_device_async(&stream, &forged, 8, &[1; 8]) });
        let mut sink = [0u8; 8];
        // SAFETY: as above.
        refused(unsafe { device.copy_from_device_async(&stream, &mut sink, &forged, 0) });
    }
    device.synchronize_stream(&stream).unwrap();
}

/// `fill` sets exactly the bytes asked for.
pub fn fill_sets_a_range<A: GpuApi>(device: &A::Device) {
    let buffer = device.alloc_device(1024).unwrap();
    device.fill(&buffer, 0, 1024, 0).unwrap();
    device.fill(&buffer, 10, 20, 0xab).unwrap();
    let mut back = vec![0u8; 1024];
    device.copy_from_device(&mut back, &buffer, 0).unwrap();
    let mut expected = vec![0u8; 1024];
    expected[10..30].fill(0xab);
    assert_eq!(back, expected);
}

/// Synchronous copies and fills are complete when they return, as
/// [`GpuDevice`] promises: a kernel launched right after on a stream (which
/// does not synchronise with them) sees every byte, and so does the host
/// reading mapped memory right after. A backend that returned while its
/// driver still moved the data would race here; the buffers are large enough
/// (16 MiB) that a GPU could not usually finish in the time the next call takes.
pub fn synchronous_copies_and_fills_are_complete<A: GpuApi>(device: &A::Device) {
    const N: usize = 4 << 20;
    const BYTES: usize = N * 4;
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let config = LaunchConfig::linear(64, 256);
    let add_one = |memory: &<A::Device as GpuDevice>::DeviceBuffer| {
        let args = [
            KernelArg::Ptr(memory.device_ptr()),
            KernelArg::U64(N as u64),
            KernelArg::U32(1),
        ];
        launch(device, &module, "tandem_add_u32", config, &args, &stream);
        device.synchronize_stream(&stream).unwrap();
    };
    let expect_words =
        |memory: &<A::Device as GpuDevice>::DeviceBuffer, what: &str, f: &dyn Fn(usize) -> u32| {
            let words = read_u32s(device, memory, N);
            if let Some(i) = (0..N).find(|&i| words[i] != f(i)) {
                panic!("{what}: word {i} is {:#x}, expected {:#x}", words[i], f(i));
            }
        };

    let buffer = device.alloc_device(BYTES).unwrap();
    device.fill(&buffer, 0, BYTES, 0x11).unwrap();
    add_one(&buffer);
    expect_words(&buffer, "fill, then a kernel", &|_| 0x1111_1112);

    let words: Vec<u32> = (0..N as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    device
        .copy_to_device(&buffer, 0, &u32_bytes(&words))
        .unwrap();
    add_one(&buffer);
    expect_words(&buffer, "copy_to_device, then a kernel", &|i| {
        words[i].wrapping_add(1)
    });

    let other = device.alloc_device(BYTES).unwrap();
    device
        .copy_device_to_device(&other, 0, &buffer, 0, BYTES)
        .unwrap();
    add_one(&other);
    expect_words(&other, "copy_device_to_device, then a kernel", &|i| {
        words[i].wrapping_add(2)
    });

    // The host reads mapped memory right after each call, with no wait.
    let host_view = |memory: &dyn HostMemory<Api = A>| {
        // SAFETY: BYTES of live mapped memory; no stream work touches it.
        unsafe { core::slice::from_raw_parts(memory.host_ptr().cast_const(), BYTES) }.to_vec()
    };
    let pinned = device.alloc_pinned_mapped(BYTES).unwrap();
    device
        .copy_device_to_device(&pinned, 0, &buffer, 0, BYTES)
        .unwrap();
    assert!(
        host_view(&pinned)
            == u32_bytes(&words.iter().map(|w| w.wrapping_add(1)).collect::<Vec<_>>()),
        "copy_device_to_device into pinned memory, then the host"
    );
    let managed = device.alloc_managed(BYTES).unwrap();
    device.fill(&managed, 0, BYTES, 0x5a).unwrap();
    assert!(
        host_view(&managed).iter().all(|&b| b == 0x5a),
        "fill of managed memory, then the host"
    );
    let bytes = pattern(BYTES, 3);
    device.copy_to_device(&managed, 0, &bytes).unwrap();
    assert!(
        host_view(&managed) == bytes,
        "copy_to_device into managed memory, then the host"
    );
}

/// Device-to-device copies move the right bytes, sync and async.
pub fn device_to_device_copies<A: GpuApi>(device: &A::Device) {
    let src = device.alloc_device(512).unwrap();
    let dst = device.alloc_device(512).unwrap();
    let bytes = pattern(512, 9);
    device.copy_to_device(&src, 0, &bytes).unwrap();
    device.fill(&dst, 0, 512, 0).unwrap();
    device
        .copy_device_to_device(&dst, 8, &src, 16, 100)
        .unwrap();
    let stream = device.create_stream().unwrap();
    device
        .copy_device_to_device_async(&stream, &dst, 300, &src, 0, 50)
        .unwrap();
    device.synchronize_stream(&stream).unwrap();
    let mut back = vec![0u8; 512];
    device.copy_from_device(&mut back, &dst, 0).unwrap();
    let mut expected = vec![0u8; 512];
    expected[8..108].copy_from_slice(&bytes[16..116]);
    expected[300..350].copy_from_slice(&bytes[..50]);
    assert_eq!(back, expected);
}

/// Managed memory is written by the host, updated by a kernel, read by the host.
pub fn managed_memory_is_shared<A: GpuApi>(device: &A::Device) {
    const N: usize = 1000;
    let managed = device.alloc_managed(N * 4).unwrap();
    let words = managed.host_ptr().cast::<u32>();
    for i in 0..N {
        // SAFETY: N u32s of live, aligned managed memory; no kernel runs yet.
        unsafe { words.add(i).write(i as u32) };
    }
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let args = [
        KernelArg::Ptr(managed.device_ptr()),
        KernelArg::U64(N as u64),
        KernelArg::U32(3),
    ];
    launch(
        device,
        &module,
        "tandem_add_u32",
        LaunchConfig::linear(3, 96),
        &args,
        &stream,
    );
    device.synchronize_stream(&stream).unwrap();
    // SAFETY: as above; the kernel has finished.
    let seen = unsafe { core::slice::from_raw_parts(words, N) };
    assert!(seen.iter().enumerate().all(|(i, &v)| v == i as u32 + 3));
}

/// One `#[test]` per behaviour above for backend `$api`, in a module
/// `memory`.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_memory_tests {
    ($api:ty) => {
        mod memory {
            $crate::stamp_device_tests!($api, memory: [
                properties_are_sane,
                allocations_reject_bad_sizes,
                copies_round_trip,
                out_of_bounds_accesses_are_refused,
                forged_memory_is_refused,
                fill_sets_a_range,
                device_to_device_copies,
                synchronous_copies_and_fills_are_complete,
                managed_memory_is_shared,
            ]);
        }
    };
}
