//! Tests of the host backend's own mechanics with kernels written in Rust
//! (the shared C++ kernels are exercised by the `tandem-tests` conformance
//! suite).

use core::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::*;
use crate::api::{DeviceMemory, GpuApi, GpuDevice, HostMemory};
use crate::artifacts::{KernelSignature, ModuleArtifacts};
use crate::error::GpuResult;
use crate::host_abi::{HostKernel, HostThreadCtx};
use crate::types::{ArgKind, Dim3, EventFlags, KernelArg, LaunchConfig};

/// Reads parameter `i` of a kernel as a `T`.
///
/// # Safety
/// `args` is a kernel's argument array and parameter `i` is a `T`.
unsafe fn arg<T: Copy>(args: *const *const c_void, i: usize) -> T {
    // SAFETY: by the caller's contract.
    unsafe { (*args.add(i)).cast::<T>().read() }
}

fn linear(idx: Dim3, dims: Dim3) -> u64 {
    u64::from(idx.x) + u64::from(dims.x) * (u64::from(idx.y) + u64::from(dims.y) * u64::from(idx.z))
}

/// `count(u32* hits)`: every thread adds 1 to `hits[global linear id]`.
unsafe extern "C" fn count(ctx: *const HostThreadCtx, args: *const *const c_void) {
    // SAFETY: the backend passes a live context and a `(Ptr)` argument array.
    let (ctx, hits) = unsafe { (&*ctx, arg::<u64>(args, 0) as *const AtomicU32) };
    let block = linear(ctx.block_idx, ctx.grid_dim);
    let threads = u64::from(ctx.block_dim.x * ctx.block_dim.y * ctx.block_dim.z);
    let id = block * threads + linear(ctx.thread_idx, ctx.block_dim);
    // SAFETY: the test sizes `hits` to the launch's thread count.
    unsafe { &*hits.add(id as usize) }.fetch_add(1, Ordering::Relaxed);
}

/// `block_sum(u32* out, u32* dirty)`: each thread stores its id + 1 in shared
/// memory (counting a dirty slot if it was not zeroed), a barrier, then
/// thread 0 sums the block into `out[block]`.
unsafe extern "C" fn block_sum(ctx: *const HostThreadCtx, args: *const *const c_void) {
    // SAFETY: a live context and a `(Ptr, Ptr)` argument array.
    let (ctx, out, dirty) = unsafe {
        (
            &*ctx,
            arg::<u64>(args, 0) as *mut u32,
            arg::<u64>(args, 1) as *const AtomicU32,
        )
    };
    let threads = (ctx.block_dim.x * ctx.block_dim.y * ctx.block_dim.z) as usize;
    let tid = linear(ctx.thread_idx, ctx.block_dim) as usize;
    let shared = ctx.shared_mem.cast::<u32>();
    // SAFETY: slot `tid` < 1024 lies in the 48 KiB static area, written only
    // by this thread before the barrier and read by thread 0 after it.
    unsafe {
        if shared.add(tid).read() != 0 {
            (*dirty).fetch_add(1, Ordering::Relaxed);
        }
        shared.add(tid).write(tid as u32 + 1);
        (ctx.barrier)(ctx);
    }
    if tid == 0 {
        // SAFETY: every slot was written before the barrier; `out` has a slot per block.
        unsafe {
            let sum = (0..threads).map(|t| shared.add(t).read()).sum::<u32>();
            out.add(linear(ctx.block_idx, ctx.grid_dim) as usize)
                .write(sum);
        }
    }
}

/// `fail_one(u32 victim)`: thread `victim` of block 0 panics before the
/// barrier every other thread waits in.
unsafe extern "C" fn fail_one(ctx: *const HostThreadCtx, args: *const *const c_void) {
    // SAFETY: a live context and a `(U32)` argument array.
    let (ctx, victim) = unsafe { (&*ctx, arg::<u32>(args, 0)) };
    catch_kernel_panic(|| {
        if ctx.block_idx.x == 0 && ctx.thread_idx.x == victim {
            panic!("thread {victim} gives up");
        }
    });
    // SAFETY: the context's own barrier.
    unsafe { (ctx.barrier)(ctx) };
}

/// `nap(u32 ms)`: sleeps, to keep a stream busy.
unsafe extern "C" fn nap(_ctx: *const HostThreadCtx, args: *const *const c_void) {
    // SAFETY: a `(U32)` argument array.
    let ms = unsafe { arg::<u32>(args, 0) };
    std::thread::sleep(Duration::from_millis(ms.into()));
}

/// `handshake(u32* out)`: between two barriers, threads 1.. of each block
/// count themselves in a shared counter and wait for thread 0's go, which it
/// gives once the count is complete: each thread waits on others of its
/// block, in a wait loop. Then `out[global id]` = the count (threads - 1).
unsafe extern "C" fn handshake(ctx: *const HostThreadCtx, args: *const *const c_void) {
    // SAFETY: a live context and a `(Ptr)` argument array.
    let (ctx, out) = unsafe { (&*ctx, arg::<u64>(args, 0) as *mut u32) };
    let threads = ctx.block_dim.x * ctx.block_dim.y * ctx.block_dim.z;
    let tid = linear(ctx.thread_idx, ctx.block_dim);
    // SAFETY: the static shared area starts 16-aligned and holds both words;
    // every thread reaches them only atomically.
    let (count, go) = unsafe {
        let shared = ctx.shared_mem.cast::<AtomicU32>();
        (&*shared, &*shared.add(1))
    };
    // SAFETY: the context's own barrier, reached by every thread.
    unsafe { (ctx.barrier)(ctx) };
    if tid == 0 {
        // Acquire pairs with the counting RMWs' Release: what each thread
        // wrote before counting is visible once the count is seen.
        while count.load(Ordering::Acquire) != threads - 1 {
            super::tandem_host_yield();
        }
        go.store(1, Ordering::Release);
    } else {
        count.fetch_add(1, Ordering::Release);
        while go.load(Ordering::Acquire) == 0 {
            super::tandem_host_yield();
        }
    }
    // SAFETY: as above.
    unsafe { (ctx.barrier)(ctx) };
    let id = linear(ctx.block_idx, ctx.grid_dim) * u64::from(threads) + tid;
    // SAFETY: the test sizes `out` to the launch's thread count.
    unsafe { out.add(id as usize).write(count.load(Ordering::Relaxed)) };
}

/// `skip_barrier()`: odd threads return without reaching the barrier that
/// the even ones wait in.
unsafe extern "C" fn skip_barrier(ctx: *const HostThreadCtx, _args: *const *const c_void) {
    // SAFETY: a live context.
    let ctx = unsafe { &*ctx };
    if ctx.thread_idx.x % 2 == 0 {
        // SAFETY: the context's own barrier.
        unsafe { (ctx.barrier)(ctx) };
    }
}

const SIGNATURES: &[KernelSignature] = &[
    KernelSignature {
        name: "handshake",
        params: &[ArgKind::Ptr],
    },
    KernelSignature {
        name: "skip_barrier",
        params: &[],
    },
    KernelSignature {
        name: "count",
        params: &[ArgKind::Ptr],
    },
    KernelSignature {
        name: "block_sum",
        params: &[ArgKind::Ptr, ArgKind::Ptr],
    },
    KernelSignature {
        name: "fail_one",
        params: &[ArgKind::U32],
    },
    KernelSignature {
        name: "nap",
        params: &[ArgKind::U32],
    },
];
const TABLE: &[HostKernel] = &[
    HostKernel {
        name: "handshake",
        entry: handshake,
        params: &[ArgKind::Ptr],
    },
    HostKernel {
        name: "skip_barrier",
        entry: skip_barrier,
        params: &[],
    },
    HostKernel {
        name: "count",
        entry: count,
        params: &[ArgKind::Ptr],
    },
    HostKernel {
        name: "block_sum",
        entry: block_sum,
        params: &[ArgKind::Ptr, ArgKind::Ptr],
    },
    HostKernel {
        name: "fail_one",
        entry: fail_one,
        params: &[ArgKind::U32],
    },
    HostKernel {
        name: "nap",
        entry: nap,
        params: &[ArgKind::U32],
    },
    // In the table but undeclared: not launchable.
    HostKernel {
        name: "undeclared",
        entry: nap,
        params: &[ArgKind::U32],
    },
];

fn artifacts() -> ModuleArtifacts<'static> {
    ModuleArtifacts {
        name: "host-backend-tests",
        signatures: SIGNATURES,
        host_table: Some(TABLE),
        cuda_source: None,
        nvrtc_options: &[],
        ptx: &[],
        cubins: &[],
        hip_code_objects: &[],
    }
}

fn device() -> HostDevice {
    HostApi::with_devices(1).device(0).unwrap()
}

fn words(device: &HostDevice, buffer: &HostBuffer) -> Vec<u32> {
    let mut bytes = vec![0u8; buffer.len()];
    device.copy_from_device(&mut bytes, buffer, 0).unwrap();
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn every_thread_of_every_launch_shape_runs_once() {
    let device = device();
    let module = device.load_module(&artifacts()).unwrap();
    let kernel = device.kernel(&module, "count").unwrap();
    let stream = device.create_stream().unwrap();
    for (grid, block) in [
        (Dim3::linear(1), Dim3::linear(1)),
        (Dim3::linear(7), Dim3::linear(33)),
        (Dim3::new(3, 2, 2), Dim3::new(4, 3, 2)),
        (Dim3::new(2, 1, 1), Dim3::new(8, 8, 16)),
    ] {
        let threads = (grid.count().unwrap() * block.count().unwrap()) as usize;
        let hits = device.alloc_device(threads * 4).unwrap();
        let config = LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        };
        // SAFETY: `hits` holds one u32 per thread of the launch.
        unsafe {
            device.launch(
                &kernel,
                &config,
                &[KernelArg::Ptr(hits.device_ptr())],
                &stream,
            )
        }
        .unwrap();
        device.synchronize_stream(&stream).unwrap();
        assert!(
            words(&device, &hits).iter().all(|&h| h == 1),
            "grid {grid:?} block {block:?}"
        );
    }
}

#[test]
fn blocks_share_zeroed_memory_and_a_barrier() {
    let device = device();
    let module = device.load_module(&artifacts()).unwrap();
    let kernel = device.kernel(&module, "block_sum").unwrap();
    let stream = device.create_stream().unwrap();
    for block in [
        Dim3::linear(1),
        Dim3::linear(64),
        Dim3::new(8, 4, 2),
        Dim3::linear(1024),
    ] {
        let grid = Dim3::new(3, 2, 1);
        let blocks = grid.count().unwrap() as usize;
        let out = device.alloc_device(blocks * 4).unwrap();
        let dirty = device.alloc_device(4).unwrap();
        let config = LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 256,
        };
        let args = [
            KernelArg::Ptr(out.device_ptr()),
            KernelArg::Ptr(dirty.device_ptr()),
        ];
        // SAFETY: `out` has a slot per block, `dirty` one counter.
        unsafe { device.launch(&kernel, &config, &args, &stream) }.unwrap();
        device.synchronize_stream(&stream).unwrap();
        let n = block.count().unwrap() as u32;
        assert_eq!(
            words(&device, &out),
            vec![n * (n + 1) / 2; blocks],
            "block {block:?}"
        );
        assert_eq!(
            words(&device, &dirty),
            vec![0],
            "shared memory was not zeroed"
        );
    }
}

/// Launches `handshake` on `stream` and checks every thread saw the full count.
fn run_handshake(
    device: &HostDevice,
    kernel: &HostKernelEntry,
    stream: &HostStream,
    grid: u32,
    block: u32,
) {
    let threads = grid as usize * block as usize;
    let out = device.alloc_device(threads * 4).unwrap();
    // SAFETY: `out` holds one u32 per thread of the launch.
    unsafe {
        device.launch(
            kernel,
            &LaunchConfig::linear(grid, block),
            &[KernelArg::Ptr(out.device_ptr())],
            stream,
        )
    }
    .unwrap();
    device.synchronize_stream(stream).unwrap();
    let seen = words(device, &out);
    assert!(
        seen.iter().all(|&c| c == block - 1),
        "grid {grid} block {block}: {:?}",
        seen.iter().find(|&&c| c != block - 1)
    );
}

/// 264 x 256 threads (67 584, far more than the OS threads the backend
/// starts) that wait on each other in barriers and wait loops all finish.
#[test]
fn a_grid_of_67k_threads_that_wait_on_each_other_completes() {
    let device = device();
    let module = device.load_module(&artifacts()).unwrap();
    let kernel = device.kernel(&module, "handshake").unwrap();
    let stream = device.create_stream().unwrap();
    run_handshake(&device, &kernel, &stream, 264, 256);
}

/// Launches of every block size on four streams at once, over and over: the
/// lanes of concurrent launches share the pool, and fibers of different
/// blocks share cached stacks.
#[test]
fn concurrent_launches_of_waiting_threads_stress() {
    let device = device();
    let module = device.load_module(&artifacts()).unwrap();
    let kernel = device.kernel(&module, "handshake").unwrap();
    std::thread::scope(|scope| {
        for seed in 0..4u32 {
            let (device, kernel) = (&device, &kernel);
            scope.spawn(move || {
                let stream = device.create_stream().unwrap();
                for i in 0..40u32 {
                    let block = [1, 2, 31, 64, 255, 1024][((seed + i) % 6) as usize];
                    run_handshake(device, kernel, &stream, 1 + (seed * 7 + i) % 9, block);
                }
            });
        }
    });
}

#[test]
fn a_barrier_that_some_threads_skip_fails_the_launch_not_the_process() {
    let device = device();
    let module = device.load_module(&artifacts()).unwrap();
    let kernel = device.kernel(&module, "skip_barrier").unwrap();
    let stream = device.create_stream().unwrap();
    // SAFETY: the kernel touches no memory.
    unsafe { device.launch(&kernel, &LaunchConfig::linear(3, 64), &[], &stream) }.unwrap();
    let err = device.synchronize_stream(&stream).unwrap_err();
    match err.kind {
        crate::ErrorKind::KernelFailed(why) => {
            assert!(
                why.contains("32 of 64 threads wait in a block barrier"),
                "{why}"
            )
        }
        other => panic!("expected KernelFailed, got {other:?}"),
    }
    // The stream still runs launches, and this one is fine.
    let handshake = device.kernel(&module, "handshake").unwrap();
    run_handshake(&device, &handshake, &stream, 2, 64);
}

/// Thread 5 of block 0 of a 264 x 256 launch panics before the barrier
/// its block-mates wait in: the launch fails (releasing them) and reports
/// it, and the stream goes on.
#[test]
fn a_failure_in_a_67k_thread_grid_is_reported_and_the_stream_goes_on() {
    let device = device();
    let module = device.load_module(&artifacts()).unwrap();
    let kernel = device.kernel(&module, "fail_one").unwrap();
    let stream = device.create_stream().unwrap();
    let config = LaunchConfig::linear(264, 256);
    // SAFETY: the kernel touches no memory.
    unsafe { device.launch(&kernel, &config, &[KernelArg::U32(5)], &stream) }.unwrap();
    match device.synchronize_stream(&stream).unwrap_err().kind {
        crate::ErrorKind::KernelFailed(why) => assert!(why.contains("thread 5 gives up"), "{why}"),
        other => panic!("expected KernelFailed, got {other:?}"),
    }
    let handshake = device.kernel(&module, "handshake").unwrap();
    run_handshake(&device, &handshake, &stream, 4, 256);
}

#[test]
fn yielding_outside_a_kernel_returns() {
    super::tandem_host_yield();
}

#[test]
fn a_panicking_kernel_fails_the_next_sync_only() {
    let device = device();
    let module = device.load_module(&artifacts()).unwrap();
    let kernel = device.kernel(&module, "fail_one").unwrap();
    let stream = device.create_stream().unwrap();
    let config = LaunchConfig::linear(4, 32);
    // SAFETY: the kernel touches no memory.
    unsafe { device.launch(&kernel, &config, &[KernelArg::U32(5)], &stream) }.unwrap();
    let err = device.synchronize_stream(&stream).unwrap_err();
    match err.kind {
        crate::ErrorKind::KernelFailed(why) => assert!(why.contains("thread 5 gives up"), "{why}"),
        other => panic!("expected KernelFailed, got {other:?}"),
    }
    device.synchronize_stream(&stream).unwrap();
    // SAFETY: as above; no thread fails this time.
    unsafe { device.launch(&kernel, &config, &[KernelArg::U32(999)], &stream) }.unwrap();
    device.synchronize_stream(&stream).unwrap();
    // A device-wide sync sees a failure on any of its streams.
    // SAFETY: as above.
    unsafe { device.launch(&kernel, &config, &[KernelArg::U32(0)], &stream) }.unwrap();
    assert!(matches!(
        device.synchronize().unwrap_err().kind,
        crate::ErrorKind::KernelFailed(_)
    ));
}

#[test]
fn undeclared_and_unknown_kernels_are_not_found() {
    let device = device();
    let module = device.load_module(&artifacts()).unwrap();
    for name in ["undeclared", "nonexistent"] {
        let err = device.kernel(&module, name).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::KernelNotFound(name.into()));
    }
    let mut no_table = artifacts();
    no_table.host_table = None;
    assert!(matches!(
        device.load_module(&no_table).unwrap_err().kind,
        crate::ErrorKind::UnsupportedArtifact(_)
    ));
    let mut disagreeing = artifacts();
    disagreeing.signatures = &[KernelSignature {
        name: "nap",
        params: &[ArgKind::U64],
    }];
    assert!(matches!(
        device.load_module(&disagreeing).unwrap_err().kind,
        crate::ErrorKind::InvalidArgument(_)
    ));
}

/// A `DeviceMemory` that points wherever it likes.
struct Forged {
    ptr: u64,
    len: usize,
}

// SAFETY: this breaks the contract on purpose, in the one way the trait
// documents as an error rather than undefined behaviour on this backend:
// ranges that are not memory the host device has live, which it refuses
// before touching them (what the test checks).
unsafe impl DeviceMemory for Forged {
    type Api = HostApi;
    fn device_ptr(&self) -> u64 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

#[test]
fn copies_refuse_memory_the_device_does_not_own() {
    let device = device();
    let buffer = device.alloc_device(4096).unwrap();
    let mut local = [0u8; 16];
    for forged in [
        Forged {
            ptr: local.as_mut_ptr() as u64,
            len: 16,
        },
        Forged { ptr: 8, len: 16 },
        // Starts inside a live buffer but runs past its end.
        Forged {
            ptr: buffer.device_ptr() + 4000,
            len: 4096,
        },
    ] {
        let err = device.fill(&forged, 0, 16, 0xff).unwrap_err();
        assert!(
            matches!(err.kind, crate::ErrorKind::InvalidArgument(_)),
            "{err}"
        );
    }
    let stale = Forged {
        ptr: buffer.device_ptr(),
        len: 16,
    };
    device.fill(&stale, 0, 16, 1).unwrap();
    drop(buffer);
    assert!(matches!(
        device.fill(&stale, 0, 16, 1).unwrap_err().kind,
        crate::ErrorKind::InvalidArgument(_)
    ));
}

#[test]
fn dropping_a_buffer_with_queued_work_is_safe() {
    let device = device();
    let module = device.load_module(&artifacts()).unwrap();
    let nap = device.kernel(&module, "nap").unwrap();
    let stream = device.create_stream().unwrap();
    let buffer = device.alloc_device(1 << 20).unwrap();
    // SAFETY: the kernel touches no memory.
    unsafe {
        device.launch(
            &nap,
            &LaunchConfig::linear(1, 1),
            &[KernelArg::U32(50)],
            &stream,
        )
    }
    .unwrap();
    device
        .fill_async(&stream, &buffer, 0, 1 << 20, 0xab)
        .unwrap();
    drop(buffer);
    device.synchronize_stream(&stream).unwrap();
}

#[test]
fn register_host_checks_its_region() {
    let device = device();
    let page = crate::numa::page_size();
    let segment = tandem_shm_core::Segment::create_anonymous(4 * page).unwrap();
    let base = segment.as_ptr();
    // SAFETY: `segment` outlives every registration made here (all calls).
    unsafe {
        let kind = |r: GpuResult<HostRegistration>| r.unwrap_err().kind;
        assert!(matches!(
            kind(device.register_host(base.add(1), page)),
            crate::ErrorKind::InvalidArgument(_)
        ));
        assert!(matches!(
            kind(device.register_host(core::ptr::null_mut(), page)),
            crate::ErrorKind::InvalidArgument(_)
        ));
        assert!(matches!(
            kind(device.register_host(base, 0)),
            crate::ErrorKind::InvalidSize { .. }
        ));
        let registration = device.register_host(base, 2 * page).unwrap();
        assert_eq!(registration.host_ptr(), base);
        assert_eq!(registration.device_ptr(), base as u64);
        assert!(matches!(
            kind(device.register_host(base.add(page), 2 * page)),
            crate::ErrorKind::InvalidArgument(_)
        ));
        let neighbour = device.register_host(base.add(2 * page), 2 * page).unwrap();
        device.fill(&registration, 0, 2 * page, 7).unwrap();
        assert_eq!(*base.add(2 * page - 1), 7);
        drop(registration);
        drop(neighbour);
        device.register_host(base, 4 * page).unwrap();
    }
}

#[test]
fn streams_wait_for_events_of_other_streams() {
    let device = device();
    let module = device.load_module(&artifacts()).unwrap();
    let nap = device.kernel(&module, "nap").unwrap();
    let (a, b) = (
        device.create_stream().unwrap(),
        device.create_stream().unwrap(),
    );
    let timing = EventFlags {
        timing: true,
        interprocess: false,
    };
    let (start, end) = (
        device.create_event(timing).unwrap(),
        device.create_event(timing).unwrap(),
    );
    assert!(
        device.query_event(&start).unwrap(),
        "a never-recorded event is complete"
    );
    let buffer = device.alloc_device(64).unwrap();
    device.record_event(&start, &a).unwrap();
    // SAFETY: the kernel touches no memory.
    unsafe { device.launch(&nap, &LaunchConfig::linear(1, 1), &[KernelArg::U32(30)], &a) }.unwrap();
    device.fill_async(&a, &buffer, 0, 64, 9).unwrap();
    device.record_event(&end, &a).unwrap();
    device.stream_wait_event(&b, &end).unwrap();
    let mut seen = [0u8; 64];
    // SAFETY: `seen` is neither read nor moved before the sync below.
    unsafe { device.copy_from_device_async(&b, &mut seen, &buffer, 0) }.unwrap();
    assert!(
        !device.query_event(&end).unwrap(),
        "the nap is still running"
    );
    device.synchronize_stream(&b).unwrap();
    assert_eq!(seen, [9u8; 64]);
    assert!(device.query_event(&end).unwrap());
    device.synchronize_event(&end).unwrap();
    assert!(device.elapsed(&start, &end).unwrap() >= Duration::from_millis(30));
    let plain = device.create_event(EventFlags::default()).unwrap();
    device.record_event(&plain, &a).unwrap();
    device.synchronize_event(&plain).unwrap();
    assert!(matches!(
        device.elapsed(&start, &plain).unwrap_err().kind,
        crate::ErrorKind::InvalidArgument(_)
    ));
    let both = EventFlags {
        timing: true,
        interprocess: true,
    };
    assert!(matches!(
        device.create_event(both).unwrap_err().kind,
        crate::ErrorKind::InvalidArgument(_)
    ));
}

#[test]
fn device_counts_and_properties() {
    let api = HostApi::with_devices(3);
    assert_eq!(api.device_count().unwrap(), 3);
    let err = api.device(3).unwrap_err();
    assert_eq!(
        err.kind,
        crate::ErrorKind::NoDevice {
            requested: Some(3),
            available: 3
        }
    );
    assert!(HostApi::with_devices(0).device(0).is_err());
    let props = api.device(2).unwrap().properties().unwrap();
    assert_eq!(props.ordinal, 2);
    assert_eq!(props.name, "Tandem CPU device");
    assert_eq!(props.arch, format!("host-{}", std::env::consts::ARCH));
    assert_eq!(props.warp_size, 1);
    assert!(props.multiprocessor_count >= 1 && props.total_memory > 0);
    assert_eq!(
        props.host_numa_node.is_some(),
        props.numa_source == crate::NumaSource::Sysfs
    );
}

#[test]
fn resident_blocks_respects_the_thread_budget() {
    assert!(resident_blocks(1) >= 1);
    assert_eq!(resident_blocks(MAX_RESIDENT_THREADS), 1);
    assert!(resident_blocks(1024) * 1024 <= MAX_RESIDENT_THREADS);
}
