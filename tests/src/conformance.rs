//! Behaviour every [`GpuApi`] backend must show, written once. Each `pub fn`
//! takes a device of backend `A` (or, for peer access, two devices) and
//! panics (fails its test) on a deviation; `tests/conformance.rs` runs each
//! one on every backend built in.
//!
//! Synchronous copies are complete when they return but do not wait for
//! stream work ([`GpuDevice`]'s rule), so the functions synchronise a stream
//! before they read what it wrote.

use tandem_hal::checks::MAX_ALLOCATION;
use tandem_hal::{
    DeviceMemory, Dim3, ErrorKind, EventFlags, GpuApi, GpuDevice, GpuResult, HostMemory,
    IpcMemHandle, KernelArg, LaunchConfig, NumaSource, ShareableHandle,
};
use tandem_shm_core::segment::Segment;

/// The device kernels library, loaded on `device`.
pub fn kernels<D: GpuDevice>(device: &D) -> D::Module {
    device
        .load_module(&tandem_device_kernels::library())
        .expect("loading the device kernels")
}

/// Launches kernel `name` of `module` and panics if the launch is refused.
pub fn launch<D: GpuDevice>(
    device: &D,
    module: &D::Module,
    name: &str,
    config: LaunchConfig,
    args: &[KernelArg<'_>],
    stream: &D::Stream,
) {
    let kernel = device.kernel(module, name).expect("looking up a kernel");
    // SAFETY: every caller passes pointers to live allocations sized for the
    // `n` it passes, and synchronises before freeing them.
    unsafe { device.launch(&kernel, &config, args, stream) }.expect("launching");
}

/// The first `count` u32s of `memory`.
pub fn read_u32s<D: GpuDevice>(
    device: &D,
    memory: &impl DeviceMemory<Api = D::Api>,
    count: usize,
) -> Vec<u32> {
    let mut bytes = vec![0u8; count * 4];
    device
        .copy_from_device(&mut bytes, memory, 0)
        .expect("copy_from_device");
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn u32_bytes(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Bytes that differ from position to position, so shifted copies show.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn kind<T>(result: GpuResult<T>) -> ErrorKind {
    match result {
        Ok(_) => panic!("expected an error, the call succeeded"),
        Err(e) => e.kind,
    }
}

fn assert_invalid_size<T>(result: GpuResult<T>) {
    let kind = kind(result);
    assert!(
        matches!(kind, ErrorKind::InvalidSize { .. }),
        "expected InvalidSize, got {kind:?}"
    );
}

fn assert_out_of_bounds<T>(result: GpuResult<T>) {
    let kind = kind(result);
    assert!(
        matches!(kind, ErrorKind::OutOfBounds { .. }),
        "expected OutOfBounds, got {kind:?}"
    );
}

fn assert_invalid_argument<T>(result: GpuResult<T>) {
    let kind = kind(result);
    assert!(
        matches!(kind, ErrorKind::InvalidArgument(_)),
        "expected InvalidArgument, got {kind:?}"
    );
}

fn assert_argument_mismatch<T>(result: GpuResult<T>) {
    let kind = kind(result);
    assert!(
        matches!(kind, ErrorKind::ArgumentMismatch { .. }),
        "expected ArgumentMismatch, got {kind:?}"
    );
}

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
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let args = [
        KernelArg::Ptr(pinned.device_ptr()),
        KernelArg::U64(N as u64),
        KernelArg::U32(0xfeed),
    ];
    launch(
        device,
        &module,
        "tandem_fill_u32",
        LaunchConfig::linear(4, 128),
        &args,
        &stream,
    );
    device.synchronize_stream(&stream).unwrap();
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
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let n = (LEN / 4) as u64;
    let args = [
        KernelArg::Ptr(registration.device_ptr()),
        KernelArg::U64(n),
        KernelArg::U32(0x5eed),
    ];
    launch(
        device,
        &module,
        "tandem_fill_u32",
        LaunchConfig::linear(8, 64),
        &args,
        &stream,
    );
    device.synchronize_stream(&stream).unwrap();
    // SAFETY: the second mapping has LEN bytes, page-aligned; the kernel finished.
    let seen = unsafe { core::slice::from_raw_parts(other_view.as_ptr().cast::<u32>(), LEN / 4) };
    assert!(seen.iter().all(|&v| v == 0x5eed));
    drop(registration);
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

/// A stream runs its work in order: fill, then add, then the copy back.
pub fn stream_work_runs_in_order<A: GpuApi>(device: &A::Device) {
    const N: usize = 1 << 16;
    let buffer = device.alloc_device(N * 4).unwrap();
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let data = KernelArg::Ptr(buffer.device_ptr());
    device.fill_async(&stream, &buffer, 0, N * 4, 0xff).unwrap();
    let config = LaunchConfig::linear(32, 256);
    launch(
        device,
        &module,
        "tandem_fill_u32",
        config,
        &[data, KernelArg::U64(N as u64), KernelArg::U32(3)],
        &stream,
    );
    launch(
        device,
        &module,
        "tandem_add_u32",
        config,
        &[data, KernelArg::U64(N as u64), KernelArg::U32(4)],
        &stream,
    );
    let mut back = vec![0u8; N * 4];
    // SAFETY: `back` is neither read nor moved until the stream is synchronised.
    unsafe { device.copy_from_device_async(&stream, &mut back, &buffer, 0) }.unwrap();
    device.synchronize_stream(&stream).unwrap();
    assert_eq!(back, u32_bytes(&vec![7; N]));
}

/// Events record, query, synchronise and time.
pub fn events_record_query_and_time<A: GpuApi>(device: &A::Device) {
    let timing = EventFlags {
        timing: true,
        interprocess: false,
    };
    let start = device.create_event(timing).unwrap();
    let end = device.create_event(timing).unwrap();
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let buffer = device.alloc_device(1 << 20).unwrap();
    let args = [
        KernelArg::Ptr(buffer.device_ptr()),
        KernelArg::U64(1 << 18),
        KernelArg::U32(1),
    ];
    device.record_event(&start, &stream).unwrap();
    launch(
        device,
        &module,
        "tandem_fill_u32",
        LaunchConfig::linear(16, 256),
        &args,
        &stream,
    );
    device.record_event(&end, &stream).unwrap();
    device.synchronize_event(&end).unwrap();
    assert!(device.query_event(&end).unwrap());
    assert!(
        device.query_event(&start).unwrap(),
        "an earlier record of the same stream"
    );
    let elapsed = device.elapsed(&start, &end).unwrap();
    assert!(elapsed.as_secs() < 60, "{elapsed:?}");
    device.synchronize_stream(&stream).unwrap();
}

/// Work on one stream waits for an event recorded on another.
pub fn streams_wait_on_events<A: GpuApi>(device: &A::Device) {
    const N: usize = 1 << 18;
    const ROUNDS: u32 = 8;
    let buffer = device.alloc_device(N * 4).unwrap();
    let module = kernels(device);
    let producer = device.create_stream().unwrap();
    let consumer = device.create_stream().unwrap();
    let done = device.create_event(EventFlags::default()).unwrap();
    let data = KernelArg::Ptr(buffer.device_ptr());
    let config = LaunchConfig::linear(16, 256);
    launch(
        device,
        &module,
        "tandem_fill_u32",
        config,
        &[data, KernelArg::U64(N as u64), KernelArg::U32(1)],
        &producer,
    );
    for _ in 0..ROUNDS {
        launch(
            device,
            &module,
            "tandem_add_u32",
            config,
            &[data, KernelArg::U64(N as u64), KernelArg::U32(1)],
            &producer,
        );
    }
    device.record_event(&done, &producer).unwrap();
    device.stream_wait_event(&consumer, &done).unwrap();
    let mut back = vec![0u8; N * 4];
    // SAFETY: `back` is neither read nor moved until the consumer is synchronised.
    unsafe { device.copy_from_device_async(&consumer, &mut back, &buffer, 0) }.unwrap();
    device.synchronize_stream(&consumer).unwrap();
    assert_eq!(back, u32_bytes(&vec![1 + ROUNDS; N]));
    device.synchronize_stream(&producer).unwrap();
}

/// What `tandem_block_sum_u32` must produce: per block, the sum of the
/// elements its threads visit in a grid-stride loop.
fn block_sums_reference(input: &[u32], grid: Dim3, block: Dim3) -> Vec<u32> {
    let blocks = grid.count().unwrap();
    let threads = block.count().unwrap();
    let stride = blocks * threads;
    (0..blocks)
        .map(|b| {
            (0..threads)
                .flat_map(|t| (b * threads + t..input.len() as u64).step_by(stride as usize))
                .fold(0u32, |sum, i| sum.wrapping_add(input[i as usize]))
        })
        .collect()
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

/// Opening a handle in the process that exported it is `IpcSameProcess`.
pub fn ipc_same_process_open_is_refused<A: GpuApi>(device: &A::Device) {
    let memory = device.alloc_device_exportable(4096).unwrap();
    assert!(memory.len() >= 4096);
    let handle = device.ipc_export_memory(&memory).unwrap();
    assert_eq!(
        kind(device.ipc_open_memory(&handle)),
        ErrorKind::IpcSameProcess
    );
    let event = device
        .create_event(EventFlags {
            timing: false,
            interprocess: true,
        })
        .unwrap();
    let handle = device.ipc_export_event(&event).unwrap();
    assert_eq!(
        kind(device.ipc_open_event(&handle)),
        ErrorKind::IpcSameProcess
    );
}

/// 64 random bytes (and 64 zeros) are an `InvalidIpcHandle`, not a crash.
pub fn garbage_ipc_handles_are_invalid<A: GpuApi>(device: &A::Device) {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new();
    let mut bytes = [0u8; 64];
    for (i, chunk) in bytes.chunks_exact_mut(8).enumerate() {
        let mut hasher = random.build_hasher();
        hasher.write_usize(i);
        chunk.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    for handle in [IpcMemHandle(bytes), IpcMemHandle([0; 64])] {
        let kind = kind(device.ipc_open_memory(&handle));
        assert!(
            matches!(kind, ErrorKind::InvalidIpcHandle(_)),
            "{handle:?}: {kind:?}"
        );
    }
}

/// Shareable memory survives an export and an import in this process: the
/// import sees the owner's bytes, the owner sees what is written through the
/// import (by a copy and by a kernel), and the import stays readable after
/// the owner is dropped. Every export is a new handle (a new fd). A legacy
/// handle (CUDA or HIP without fd handles) may not be imported by its
/// exporter: `IpcSameProcess`, and the test ends there.
pub fn shareable_memory_round_trips<A: GpuApi>(device: &A::Device) {
    // Not a multiple of any page or granularity: `len` is what was asked for.
    const LEN: usize = (64 << 10) + 12;
    const WORDS: usize = LEN / 4;
    let owner = device.alloc_shareable(LEN).unwrap();
    assert_eq!(owner.len(), LEN);
    let bytes = pattern(LEN, 5);
    device.copy_to_device(&owner, 0, &bytes).unwrap();
    let handle = device.export_shareable(&owner).unwrap();
    assert_eq!(handle.len(), LEN);
    let handle = match handle {
        ShareableHandle::Ipc { .. } => {
            let kind = kind(device.import_shareable(handle));
            assert_eq!(kind, ErrorKind::IpcSameProcess);
            return;
        }
        ShareableHandle::Fd { ref fd, size, .. } => {
            assert!(size >= LEN, "{size}");
            use std::os::fd::AsRawFd;
            let again = device.export_shareable(&owner).unwrap();
            match &again {
                ShareableHandle::Fd { fd: other, .. } => {
                    assert_ne!(other.as_raw_fd(), fd.as_raw_fd(), "a new fd per export")
                }
                other => panic!("{other:?}"),
            }
            handle
        }
    };
    let import = device.import_shareable(handle).unwrap();
    assert_eq!(import.len(), LEN);
    let mut back = vec![0u8; LEN];
    device.copy_from_device(&mut back, &import, 0).unwrap();
    assert_eq!(back, bytes, "the owner's bytes, read through the import");

    let patch = pattern(100, 99);
    device.copy_to_device(&import, 1000, &patch).unwrap();
    let mut seen = vec![0u8; 100];
    device.copy_from_device(&mut seen, &owner, 1000).unwrap();
    assert_eq!(
        seen, patch,
        "written through the import, read through the owner"
    );

    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let args = [
        KernelArg::Ptr(import.device_ptr()),
        KernelArg::U64(WORDS as u64),
        KernelArg::U32(0x5eed),
    ];
    launch(
        device,
        &module,
        "tandem_fill_u32",
        LaunchConfig::linear(8, 64),
        &args,
        &stream,
    );
    device.synchronize_stream(&stream).unwrap();
    assert!(read_u32s(device, &owner, WORDS)
        .iter()
        .all(|&v| v == 0x5eed));

    drop(owner);
    assert!(
        read_u32s(device, &import, WORDS)
            .iter()
            .all(|&v| v == 0x5eed),
        "the import outlives its owner"
    );
}

/// Zero, absurd and larger-than-the-device sizes are `InvalidSize`.
pub fn shareable_bad_sizes_are_refused<A: GpuApi>(device: &A::Device) {
    let total = device.properties().unwrap().total_memory;
    let beyond = usize::try_from(total + 1).unwrap_or(usize::MAX);
    for bytes in [0, beyond, MAX_ALLOCATION + 1, usize::MAX] {
        assert_invalid_size(device.alloc_shareable(bytes));
    }
}

/// Descriptors that are no allocation (`/dev/null`, a socket), a handle
/// claiming more than its allocation holds, and legacy garbage are
/// `InvalidIpcHandle`, never a crash.
pub fn shareable_garbage_is_refused<A: GpuApi>(device: &A::Device) {
    const SIZE: usize = 2 << 20;
    let refused = |handle: ShareableHandle, what: &str| {
        let kind = kind(device.import_shareable(handle));
        assert!(
            matches!(kind, ErrorKind::InvalidIpcHandle(_)),
            "{what}: expected InvalidIpcHandle, got {kind:?}"
        );
    };
    let null = std::fs::File::open("/dev/null").unwrap();
    let fd = |size, len| ShareableHandle::Fd {
        fd: null.try_clone().unwrap().into(),
        size,
        len,
    };
    refused(fd(SIZE, 4096), "/dev/null");
    refused(fd(SIZE, SIZE + 1), "/dev/null, len beyond size");
    let (socket, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
    let socket = ShareableHandle::Fd {
        fd: socket.into(),
        size: SIZE,
        len: SIZE,
    };
    refused(socket, "a socket");
    let legacy = ShareableHandle::Ipc {
        handle: IpcMemHandle([0; 64]),
        offset: 0,
        len: 4096,
    };
    refused(legacy, "64 zero bytes");

    let owner = device.alloc_shareable(4096).unwrap();
    let export = || match device.export_shareable(&owner).unwrap() {
        ShareableHandle::Fd { fd, size, .. } => Some((fd, size)),
        ShareableHandle::Ipc { .. } => None, // its exporter may not open it
    };
    if let Some((fd, size)) = export() {
        refused(
            ShareableHandle::Fd {
                fd,
                size,
                len: size + 1,
            },
            "len beyond size",
        );
    }
    if let Some((fd, size)) = export() {
        refused(
            ShareableHandle::Fd {
                fd,
                size: size * 2,
                len: size * 2,
            },
            "size beyond the allocation",
        );
    }
}

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
