//! The runtime end to end: kernel threads (the same C++ kernels on the CPU
//! device, and on CUDA/HIP with their features) send tasks through their
//! device's queue segment to CPU workers and wait. Every task completes
//! exactly once with the right output; errors come back as return codes
//! and the workers live on; a raised stop flag releases waiting kernels.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_hal::{Backend, ErrorKind, GpuApi, GpuDevice, HostApi};
use tandem_runtime::kernels::{
    EchoLaunch, EchoOutcome, EchoPhases, EchoPriority, EchoRoute, NoopLaunch, RuntimeKernels,
    ECHO_MIXED, ECHO_NO_PEER_ACCESS, ECHO_TASK_FAILED,
};
use tandem_runtime::status::ServiceCounts;
use tandem_runtime::{
    math, Config, DeviceSelection, GpuService, Pool, Registry, Runtime, RuntimeError,
    StatsSnapshot, RC_UNKNOWN_METHOD,
};
use tandem_shm_core::layout::{magic, LANE_QUEUE_RINGS_OFFSET};

/// `rt_status::stopped` (tandem/runtime/context.h).
/// How long a test waits for the workers' counts to settle.
const SETTLE: Duration = Duration::from_secs(10);

const RT_STOPPED: u32 = 7;
/// `rt_status::bad_queue` (tandem/runtime/context.h).
const RT_BAD_QUEUE: u32 = 2;

fn config(devices: DeviceSelection, workers: usize, depth: u32) -> Config {
    Config {
        workers,
        queue_depth: depth,
        lanes: 2,
        // The same few lanes on a GPU as on the CPU device.
        gpu_lanes: 2,
        gpu_segment_size: 16 << 20,
        cpu_segment_size: 2 << 20,
        devices,
        ..Config::default()
    }
}

/// A runtime on `api`'s device 0 with `workers` workers, lanes `depth` deep
/// and the built-in pools.
fn runtime_on_device_0<A: GpuApi>(api: A, workers: usize, depth: u32) -> Runtime<A> {
    Runtime::start_with(
        api,
        config(DeviceSelection::Only(vec![0]), workers, depth),
        Registry::with_builtins(),
    )
    .expect("start")
}

fn add_launch(blocks: u32, threads: u32, tasks: u64, priority: EchoPriority) -> EchoLaunch {
    EchoLaunch {
        blocks,
        threads,
        tasks_per_thread: tasks,
        method: math::ADD,
        priority,
        route: EchoRoute::CpuWorkers,
        spin_budget: 1 << 40,
    }
}

fn assert_all_added(outcome: &EchoOutcome, tasks: u64) {
    if let Err(wrong) = outcome.check_added(tasks) {
        panic!("{wrong}");
    }
}

/// A fresh runtime's `stats` after `total` tasks: each completed once, none
/// failed, no stray pointers.
fn assert_completed_once(stats: StatsSnapshot, total: u64) {
    assert_eq!(stats.completed, total);
    assert_eq!(
        (stats.failed, stats.double_completions, stats.bad_pointers),
        (0, 0, 0)
    );
}

/// Many blocks and threads at once through `depth`-slot lanes, more threads
/// than slots (back-pressure on the device side): every answer right, every
/// future completed once.
fn many_threads_every_task_once<A: GpuApi>(
    api: A,
    blocks: u32,
    threads: u32,
    tasks: u64,
    depth: u32,
) {
    let runtime = runtime_on_device_0(api, 4, depth);
    let mut kernels = RuntimeKernels::load(&runtime.devices()[0]).expect("load");
    for priority in [EchoPriority::High, EchoPriority::Alternate] {
        let before = runtime.stats();
        let outcome = kernels
            .echo(&add_launch(blocks, threads, tasks, priority))
            .expect("echo");
        assert_all_added(&outcome, tasks);
        let total = u64::from(blocks * threads) * tasks;
        let after = runtime.stats_when(|s| s.completed - before.completed >= total, SETTLE);
        assert_eq!(after.completed - before.completed, total);
        assert_eq!(after.failed, 0);
        assert_eq!(after.double_completions, 0);
        assert_eq!(after.bad_pointers, 0);
    }
}

/// Lanes deep enough that a thread whose last push found its lane nearly
/// empty claims the next slot without probing (tandem/mpmc.h claim_mode),
/// more threads per lane than slots, and workers slowed down (each `add`
/// spins 100 us): the first threads find their lane nearly empty, and their
/// next, direct claims meet it full and wait for their slots. Every answer
/// right, every future completed once.
fn direct_claims_wait_on_full_lanes<A: GpuApi>(api: A, blocks: u32, threads: u32, tasks: u64) {
    let slow_add = Pool::new(math::POOL, "math").task::<math::Add, _>("add", |t| {
        let start = Instant::now();
        while start.elapsed() < Duration::from_micros(100) {
            std::hint::spin_loop();
        }
        Ok(t.a.wrapping_add(t.b))
    });
    let mut registry = Registry::new();
    registry.register(slow_add).expect("one pool");
    let depth = tandem_device_kernels::NEARLY_EMPTY_MIN_CAPACITY;
    let runtime = Runtime::start_with(
        api,
        config(DeviceSelection::Only(vec![0]), 4, depth),
        registry,
    )
    .expect("start");
    let mut kernels = RuntimeKernels::load(&runtime.devices()[0]).expect("load");
    assert!(
        u64::from(blocks * threads) > 2 * u64::from(depth),
        "more threads per lane (of two) than slots"
    );
    let outcome = kernels
        .echo(&add_launch(blocks, threads, tasks, EchoPriority::High))
        .expect("echo");
    assert_all_added(&outcome, tasks);
    let total = u64::from(blocks * threads) * tasks;
    assert_completed_once(runtime.stats_when(|s| s.completed >= total, SETTLE), total);
}

/// Tasks too large for a lane record go through the future's copy space (a
/// fenced publication), alternating with inline ones on the same futures,
/// and a no-op after each inline one, answered by the notify word alone
/// while the future holds the last output (which the kernel must not read
/// as the no-op's): every answer right, every task completed once.
fn large_and_inline_tasks_alternate<A: GpuApi>(api: A, blocks: u32, threads: u32, tasks: u64) {
    let runtime = runtime_on_device_0(api, 4, 16);
    let mut kernels = RuntimeKernels::load(&runtime.devices()[0]).expect("load");
    let launch = EchoLaunch {
        method: math::SUM,
        ..add_launch(blocks, threads, tasks, EchoPriority::Alternate)
    };
    let outcome = kernels.echo(&launch).expect("echo");
    assert_all_added(&outcome, tasks);
    let noops = tasks.div_ceil(2);
    let total = u64::from(blocks * threads) * (tasks + noops);
    assert_completed_once(runtime.stats_when(|s| s.completed >= total, SETTLE), total);
}

/// Unknown methods complete with an error code; the workers serve the next
/// launch normally.
fn unknown_method_is_an_error_code<A: GpuApi>(api: A) {
    let runtime = runtime_on_device_0(api, 2, 64);
    let mut kernels = RuntimeKernels::load(&runtime.devices()[0]).expect("load");
    let bad = EchoLaunch {
        method: 99,
        ..add_launch(2, 4, 3, EchoPriority::High)
    };
    let outcome = kernels.echo(&bad).expect("echo");
    for (&status, &result) in outcome.status.iter().zip(&outcome.results) {
        assert_eq!(status, ECHO_TASK_FAILED);
        assert_eq!(result as i64, i64::from(RC_UNKNOWN_METHOD));
    }
    let outcome = kernels
        .echo(&add_launch(2, 4, 10, EchoPriority::Low))
        .expect("echo");
    assert_all_added(&outcome, 10);
    assert_eq!(runtime.stats_when(|s| s.failed >= 8, SETTLE).failed, 8);
}

/// Kernel threads waiting on tasks no worker gets to, on every device of
/// `api` at once, are released by the host raising each device's stop word;
/// queued tasks complete later.
fn stop_flag_releases_waiting_kernels<A: GpuApi>(api: A) {
    let release = Arc::new(AtomicBool::new(false));
    let gate = Arc::clone(&release);
    // A blocking pool on the math pool id: the kernel's noop tasks block.
    let blocking =
        Pool::new(math::POOL, "blocking math").task::<math::Noop, _>("noop", move |_| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !gate.load(Ordering::Acquire) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(math::Noop)
        });
    let mut registry = Registry::new();
    registry.register(blocking).expect("register");
    let runtime =
        Runtime::start_with(api, config(DeviceSelection::All, 1, 64), registry).expect("start");
    let launch = EchoLaunch {
        method: math::NOOP,
        ..add_launch(2, 4, 1, EchoPriority::High)
    };
    std::thread::scope(|s| {
        for queues in runtime.devices() {
            s.spawn(move || {
                let mut kernels = RuntimeKernels::load(queues).expect("load");
                let outcome = kernels.echo(&launch).expect("echo");
                assert!(
                    outcome.status.iter().all(|&s| s == RT_STOPPED),
                    "statuses {:?}",
                    outcome.status
                );
            });
        }
        std::thread::sleep(Duration::from_millis(200));
        for queues in runtime.devices() {
            queues.raise_stop();
        }
    });
    release.store(true, Ordering::Release);
    for queues in runtime.devices() {
        queues.clear_stop();
    }
    // The queued tasks still complete (the futures live in the arena, which
    // is kept since the kernel left them behind).
    let total = 8 * runtime.devices().len() as u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while runtime.stats().completed < total && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(runtime.stats().completed, total);
    assert_eq!(runtime.stats().double_completions, 0);
}

/// The GPU service runs tasks routed to the device, from the host and from
/// kernels, with the right outputs and error codes, and the CPU workers run
/// none of them; stopping it drains the inbox.
fn gpu_service_runs_tasks_routed_to_the_device<A: GpuApi>(api: A, blocks: u32, threads: u32) {
    let runtime = runtime_on_device_0(api, 2, 64);
    let queues = &runtime.devices()[0];
    // Loaded first: see GpuService on driver calls while it runs.
    let mut kernels = RuntimeKernels::load(queues).expect("kernels");
    let service = GpuService::start(queues, 1, 4).expect("service");
    let stop = std::sync::atomic::AtomicU32::new(0);
    // From the host: more tasks than the inbox holds (back-pressure).
    let host_tasks = 150u64;
    let pending: Vec<_> = (0..host_tasks)
        .map(|i| {
            runtime
                .submit_to_gpu(0, &math::Add { a: i, b: 1000 }, None)
                .expect("submit to the GPU")
        })
        .collect();
    for (i, mut p) in pending.into_iter().enumerate() {
        assert_eq!(p.wait(&stop, None).expect("GPU answer"), i as u64 + 1000);
    }
    // From kernels: every thread's tasks, on the device only.
    let tasks = 8;
    let launch = EchoLaunch {
        route: EchoRoute::GpuService,
        ..add_launch(blocks, threads, tasks, EchoPriority::High)
    };
    let outcome = kernels.echo(&launch).expect("echo");
    assert_all_added(&outcome, tasks);
    let bad = EchoLaunch {
        method: 99,
        ..launch
    };
    let outcome = kernels.echo(&bad).expect("echo");
    for (&status, &result) in outcome.status.iter().zip(&outcome.results) {
        assert_eq!(status, ECHO_TASK_FAILED);
        assert_eq!(result as i64, i64::from(RC_UNKNOWN_METHOD));
    }
    let stats = service.stop().expect("the service ends");
    let kernel_tasks = u64::from(blocks * threads) * (tasks + 1);
    assert_eq!(stats.served, host_tasks + kernel_tasks);
    assert_eq!(stats.bad_pointers, 0);
    assert_eq!(runtime.stats().completed, 0, "no task reached a CPU worker");
    // What the metrics show of the service: each route's tasks, and the
    // failed ones (the unknown method, once a thread), in the segment and
    // then in the status block.
    let expected = ServiceCounts {
        kernel_tasks,
        kernel_failed: u64::from(blocks * threads),
        host_tasks,
        host_failed: 0,
        skipped: 0,
    };
    let h = queues.segment().header();
    let seen = ServiceCounts {
        kernel_tasks: h.service_kernel_tasks.load(Ordering::Relaxed),
        kernel_failed: h.service_kernel_failed.load(Ordering::Relaxed),
        host_tasks: h.service_host_tasks.load(Ordering::Relaxed),
        host_failed: h.service_host_failed.load(Ordering::Relaxed),
        skipped: h.service_skipped.load(Ordering::Relaxed),
    };
    assert_eq!(
        seen, expected,
        "the segment's counts once the service ended"
    );
    let name = runtime.cpu_segment().name().expect("a named CPU segment");
    let deadline = Instant::now() + Duration::from_secs(10);
    let shown = loop {
        let status = tandem_runtime::status::read_status(name).expect("status");
        let shown = status.segments[1].gpu_service;
        if shown == expected || Instant::now() > deadline {
            break shown;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(shown, expected, "the status block's, at a refresh");
}

/// Every thread of an [`ECHO_MIXED`] launch of `tasks` tasks a thread had
/// each answered as its method should be.
fn assert_mixed_answered(outcome: &EchoOutcome, tasks: u64) {
    for (r, (&status, &result)) in outcome.status.iter().zip(&outcome.results).enumerate() {
        assert_eq!(status, 0, "thread {r}: status (result {result})");
        let expected: u64 = (0..tasks)
            .map(|i| if i % 6 == 4 { r as u64 + i } else { 1 })
            .sum();
        assert_eq!(result, expected, "thread {r}");
    }
}

/// Kernel threads' tasks to the GPU service that repeat their last one's
/// method without arguments, between tasks that change the method or carry
/// arguments: each is answered by its own method (a repeated add without
/// arguments is refused as the first was, a no-op after an add is a no-op),
/// and every one is served once.
fn repeated_tasks_keep_their_methods<A: GpuApi>(api: A, blocks: u32, threads: u32, tasks: u64) {
    let runtime = runtime_on_device_0(api, 1, 64);
    let queues = &runtime.devices()[0];
    let mut kernels = RuntimeKernels::load(queues).expect("kernels");
    let service = GpuService::start(queues, 1, 4).expect("service");
    let launch = EchoLaunch {
        method: ECHO_MIXED,
        route: EchoRoute::GpuService,
        ..add_launch(blocks, threads, tasks, EchoPriority::High)
    };
    let outcome = kernels.echo(&launch).expect("echo");
    assert_mixed_answered(&outcome, tasks);
    let stats = service.stop().expect("the service ends");
    assert_eq!(stats.served, u64::from(blocks * threads) * tasks);
    assert_eq!(stats.bad_pointers, 0);
}

/// Memory, a host registration and a module dropped while the GPU service
/// runs do not wait for it: the drivers' frees wait for the device to go
/// idle, which a running service never is, so the backend keeps them until
/// the service has ended (GpuDevice::resident_kernel). They are dropped on
/// another thread, so a release that waited would show as a timeout here
/// (the service's stop then lets it through), not as a hung test; the
/// service answers meanwhile, and the device's memory comes back after. A
/// host range whose registration is kept cannot be registered again until
/// the service has ended (a clear error on CUDA and HIP, whose kept
/// registration still pins the range; the CPU device keeps nothing).
fn releases_while_the_service_runs_do_not_wait_for_it<A: GpuApi>(api: A) {
    let runtime = runtime_on_device_0(api, 2, 64);
    let queues = &runtime.devices()[0];
    let device = queues.device();
    // Loaded and its kernels got before the service: loading waits for it.
    let kernels = RuntimeKernels::load(queues).expect("kernels");
    const PAGE: usize = 4096;
    const HOST_BYTES: usize = 16 * PAGE;
    const ROUNDS: usize = 4;
    // A range per round, and one more to register twice.
    let layout =
        std::alloc::Layout::from_size_align(HOST_BYTES * (ROUNDS + 1), PAGE).expect("layout");
    // SAFETY: a non-zero size; freed below, after the registrations' release.
    let host = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!host.is_null());
    let service = GpuService::start(queues, 1, 4).expect("service");
    let (released_tx, released_rx) = std::sync::mpsc::channel();
    // An address, to cross to the releasing thread.
    let host_addr = host as usize;
    std::thread::scope(|s| {
        s.spawn(move || {
            let host = host_addr as *mut u8;
            for round in 0..ROUNDS {
                drop(device.alloc_device(1 << 20).expect("device memory"));
                drop(
                    device
                        .alloc_device_exportable(1 << 20)
                        .expect("exportable memory"),
                );
                drop(device.alloc_pinned_mapped(1 << 16).expect("pinned memory"));
                // SAFETY: page-aligned, inside the allocation, mapped until
                // the dealloc below, which comes after the service (and so
                // the kept unregisters) ended.
                let at = unsafe { host.add(round * HOST_BYTES) };
                // SAFETY: as above.
                let registration =
                    unsafe { device.register_host(at, HOST_BYTES) }.expect("registration");
                drop(registration);
            }
            // SAFETY: as above.
            let again = unsafe { device.register_host(host, HOST_BYTES) };
            drop(kernels);
            released_tx.send(again.map(drop)).expect("the test waits");
        });
        let released = released_rx.recv_timeout(Duration::from_secs(30));
        let stop = AtomicU32::new(0);
        let mut pending = runtime
            .submit_to_gpu(0, &math::Add { a: 40, b: 2 }, None)
            .expect("submit to the GPU");
        let answer = pending.wait(&stop, None);
        let stats = service.stop();
        let again = released
            .expect("dropping memory, a registration and a module waited for the running service");
        assert_eq!(answer.expect("GPU answer"), 42);
        assert_eq!(stats.expect("the service ends").served, 1);
        match (A::BACKEND, again) {
            (Backend::Host, again) => again.expect("the CPU device keeps no registration"),
            (_, Ok(())) => panic!("a range whose registration is kept was registered again"),
            (_, Err(e)) => assert!(
                matches!(&e.kind, ErrorKind::InvalidArgument(why) if why.contains("resident kernel")),
                "{e}"
            ),
        }
    });
    // SAFETY: allocated above with this layout; the registrations are gone.
    unsafe { std::alloc::dealloc(host, layout) };
    // What was kept is freed: the device still allocates and frees at once.
    drop(
        device
            .alloc_device(1 << 20)
            .expect("device memory after the service"),
    );
}

/// The host route reuses an answered task's reply future: a thread that
/// waits for each task before the next sends them all with one future,
/// tasks in flight together each have their own, and rounds of them leave
/// the device segment's heap as the first round left it (the route keeps a
/// bounded number back, the rest is freed).
fn host_route_reuses_reply_futures<A: GpuApi>(api: A) {
    let runtime = runtime_on_device_0(api, 1, 64);
    let queues = &runtime.devices()[0];
    let service = GpuService::start(queues, 1, 4).expect("service");
    let stop = AtomicU32::new(0);
    let mut first = None;
    for i in 0..100u64 {
        let mut pending = runtime
            .submit_to_gpu(0, &math::Add { a: i, b: 1 }, None)
            .expect("submit");
        assert_eq!(*first.get_or_insert(pending.ptr()), pending.ptr());
        assert_eq!(pending.wait(&stop, None).expect("answer"), i + 1);
    }
    let round = || {
        let batch: Vec<_> = (0..24u64)
            .map(|i| {
                runtime
                    .submit_to_gpu(0, &math::Add { a: i, b: 2 }, None)
                    .expect("submit")
            })
            .collect();
        let futures: std::collections::HashSet<u64> = batch.iter().map(|p| p.ptr().off).collect();
        assert_eq!(futures.len(), batch.len(), "tasks in flight share a future");
        for (i, mut pending) in batch.into_iter().enumerate() {
            assert_eq!(pending.wait(&stop, None).expect("answer"), i as u64 + 2);
        }
        queues.segment().heap().stats().expect("stats").free_bytes()
    };
    let after_first = round();
    for _ in 0..3 {
        assert_eq!(round(), after_first, "reply futures leaked");
    }
    service.stop().expect("the service ends");
}

/// The pinned ping-pong's round after a pause times that round alone: the
/// host thread sleeps before its first answer, the kernel thread polls
/// meanwhile, and the round from that answer to the kernel's next value
/// comes back without the pause in it.
fn pingpong_after_a_pause_times_one_round<A: GpuApi>(api: A) {
    let runtime = runtime_on_device_0(api, 1, 64);
    let kernels = RuntimeKernels::load(&runtime.devices()[0]).expect("load");
    let pause = Duration::from_millis(300);
    let round = kernels.pingpong_after(pause).expect("the ping-pong");
    assert!(
        round > Duration::ZERO && round < pause,
        "one round, not the pause: {round:?}"
    );
    // The kernel and the words are done with: the floor runs again.
    kernels.pingpong(10).expect("the ping-pong again");
}

/// Tasks a host thread of gpu_service_stress keeps in flight at once.
const HOST_IN_FLIGHT: u64 = 8;

/// Many kernel threads and host threads send to one GPU service at once,
/// with tasks inline in the device inbox and the from-host records (ADD) and
/// in copy spaces (SUM), over two
/// launches (the second reusing the reset arena and reply region): every
/// answer is checked, each task is served exactly once, stopping drains both
/// routes, and no task reaches a CPU worker. The service has `service`
/// (blocks, threads), whose size sets how many inbox slots it keeps hot: a
/// small one makes the kernel threads share slots.
fn gpu_service_stress<A: GpuApi>(
    api: A,
    (blocks, threads): (u32, u32),
    tasks: u64,
    service: (u32, u32),
    (host_threads, host_tasks): (u64, u64),
) {
    let runtime = runtime_on_device_0(api, 2, 64);
    let queues = &runtime.devices()[0];
    // Loaded first: see GpuService on driver calls while it runs.
    let mut kernels = RuntimeKernels::load(queues).expect("kernels");
    let running = GpuService::start(queues, service.0, service.1).expect("service");
    let launch = EchoLaunch {
        method: math::SUM,
        route: EchoRoute::GpuService,
        ..add_launch(blocks, threads, tasks, EchoPriority::High)
    };
    std::thread::scope(|s| {
        for h in 0..host_threads {
            let runtime = &runtime;
            s.spawn(move || {
                let stop = std::sync::atomic::AtomicU32::new(0);
                // Several tasks in flight a thread, waited for in reverse:
                // ADD in its record, every third a SUM in its copy space.
                let mut i = 0;
                while i < host_tasks {
                    let batch: Vec<_> = (i..host_tasks.min(i + HOST_IN_FLIGHT))
                        .map(|i| {
                            let submitted = if i % 3 == 2 {
                                let task = math::Sum {
                                    values: [h << 32, i, 1, 2, 3, 4],
                                };
                                runtime.submit_to_gpu(0, &task, None).map(Err)
                            } else {
                                let task = math::Add { a: h << 32, b: i };
                                runtime.submit_to_gpu(0, &task, None).map(Ok)
                            };
                            (i, submitted.expect("submit"))
                        })
                        .collect();
                    i += batch.len() as u64;
                    for (i, pending) in batch.into_iter().rev() {
                        let answer = match pending {
                            Ok(mut add) => add.wait(&stop, None).expect("ADD answer"),
                            Err(mut sum) => sum.wait(&stop, None).expect("SUM answer") - 10,
                        };
                        assert_eq!(answer, (h << 32) + i);
                    }
                }
            });
        }
        for _ in 0..2 {
            assert_all_added(&kernels.echo(&launch).expect("echo"), tasks);
        }
    });
    let stats = running.stop().expect("the service ends");
    let kernel_tasks = 2 * u64::from(blocks * threads) * tasks;
    assert_eq!(stats.served, kernel_tasks + host_threads * host_tasks);
    assert_eq!(stats.bad_pointers, 0);
    assert_eq!(runtime.stats().completed, 0, "no task reached a CPU worker");
}

/// A kernel thread waiting for a GPU service's answer returns `stopped` once
/// the stop flag is raised; its task stays in the device inbox, and a
/// service started later serves it (and its stop then drains it); a service
/// after that starts where it ended; one service a device at a time, of at
/// most one block a multiprocessor.
fn gpu_route_waits_end_at_stop<A: GpuApi>(api: A, blocks: u32, threads: u32) {
    let runtime = runtime_on_device_0(api, 1, 64);
    let queues = &runtime.devices()[0];
    let mut kernels = RuntimeKernels::load(queues).expect("kernels");
    let launch = EchoLaunch {
        route: EchoRoute::GpuService,
        ..add_launch(blocks, threads, 1, EchoPriority::High)
    };
    std::thread::scope(|s| {
        let waiting = s.spawn(|| kernels.echo(&launch).expect("echo"));
        std::thread::sleep(Duration::from_millis(200));
        queues.raise_stop();
        let outcome = waiting.join().expect("echo thread");
        assert!(
            outcome.status.iter().all(|&s| s == RT_STOPPED),
            "statuses {:?}",
            outcome.status
        );
    });
    queues.clear_stop();
    let stats = GpuService::start(queues, 1, 4)
        .expect("service")
        .stop()
        .expect("the service ends");
    assert_eq!(stats.served, u64::from(blocks * threads));
    // A later service (of another size) starts where the last one ended,
    // and is the device's only one while it runs.
    let again = GpuService::start(queues, 1, 3).expect("second service");
    assert!(matches!(
        GpuService::start(queues, 1, 4),
        Err(RuntimeError::ServiceRunning { .. })
    ));
    let tasks = 5;
    let outcome = kernels
        .echo(&EchoLaunch {
            tasks_per_thread: tasks,
            ..launch
        })
        .expect("echo");
    assert_all_added(&outcome, tasks);
    let stats = again.stop().expect("the second service ends");
    assert_eq!(stats.served, u64::from(blocks * threads) * tasks);
    // A service that could not keep all its blocks resident is refused.
    let multiprocessors = queues.properties().multiprocessor_count;
    assert!(matches!(
        GpuService::start(queues, multiprocessors + 1, 1),
        Err(RuntimeError::ServiceTooLarge { blocks, .. }) if blocks == multiprocessors + 1
    ));
}

/// Rank 0 timed every one of its `tasks`, waiting took time (every task
/// crosses to a worker and back), and the phases fit in the launch.
fn assert_rank_zero_timed(phases: &EchoPhases, tasks: u64, outcome: &EchoOutcome) {
    assert_eq!(phases.tasks, tasks, "rank 0 alone is timed, every task");
    assert!(phases.wait > Duration::ZERO, "{phases:?}");
    let per_task = phases.make + phases.send + phases.wait + phases.output;
    assert!(
        per_task * tasks as u32 <= outcome.elapsed,
        "{phases:?} per task does not fit in {:?}",
        outcome.elapsed
    );
}

/// The echo kernel's phase timing: rank 0 times every one of its tasks, each
/// phase is counted, and together they fit in the launch.
fn echo_phases_cover_rank_zero<A: GpuApi>(api: A) {
    let runtime = runtime_on_device_0(api, 2, 64);
    let mut kernels = RuntimeKernels::load(&runtime.devices()[0]).expect("load");
    let tasks = 200;
    let (outcome, phases) = kernels
        .echo_with_phases(&add_launch(2, 4, tasks, EchoPriority::High))
        .expect("echo");
    assert_all_added(&outcome, tasks);
    assert_rank_zero_timed(&phases, tasks, &outcome);
    // The plain echo leaves no phases behind (null `phase_ns`).
    assert_all_added(
        &kernels
            .echo(&add_launch(2, 4, tasks, EchoPriority::High))
            .expect("echo"),
        tasks,
    );
}

/// The no-op kernel (the roundtrip bench's): every thread's tasks are
/// answered, each once, rank 0's are timed with its phases (no output to
/// read), and the runtime counts each task once.
fn noop_kernel_answers_every_task<A: GpuApi>(api: A, blocks: u32, threads: u32) {
    let runtime = runtime_on_device_0(api, 2, 64);
    let mut kernels = RuntimeKernels::load(&runtime.devices()[0]).expect("load");
    let tasks = 150;
    let launch = NoopLaunch {
        route: EchoRoute::CpuWorkers,
        blocks,
        threads,
        tasks_per_thread: tasks,
        spin_budget: 1 << 40,
    };
    let (outcome, phases) = kernels.noop_tasks_with_phases(&launch).expect("noop");
    let untimed = kernels.noop_tasks(&launch).expect("noop");
    for outcome in [&outcome, &untimed] {
        assert_eq!(outcome.failed_threads(), 0, "{:?}", outcome.status);
        assert!(
            outcome.results.iter().all(|&done| done == tasks),
            "{:?}",
            outcome.results
        );
    }
    assert_rank_zero_timed(&phases, tasks, &outcome);
    assert_eq!(phases.output, Duration::ZERO, "a no-op has no output");
    let total = 2 * u64::from(blocks * threads) * tasks;
    assert_completed_once(runtime.stats_when(|s| s.completed >= total, SETTLE), total);
}

/// A device segment whose lane queue's first ring does not hold a ring's
/// header is refused by every block of a launch (`rt_init` reads that ring's
/// header, the one it checks the layout by), and the same segment serves
/// again once the header is back.
fn corrupt_first_ring_is_refused<A: GpuApi>(api: A, blocks: u32, threads: u32) {
    let runtime = runtime_on_device_0(api, 1, 64);
    let queues = &runtime.devices()[0];
    let segment = queues.segment();
    let offset =
        usize::try_from(segment.header().queue_offset).expect("offset") + LANE_QUEUE_RINGS_OFFSET;
    // SAFETY: the lane queue and its first ring lie inside the segment's
    // mapping (the runtime laid them there), whose rings' headers are u32
    // words, 64-aligned; no kernel runs while it is written.
    let magic = unsafe { &*segment.base().add(offset).cast::<AtomicU32>() };
    let mut kernels = RuntimeKernels::load(queues).expect("load");
    let launch = NoopLaunch {
        route: EchoRoute::CpuWorkers,
        blocks,
        threads,
        tasks_per_thread: 4,
        spin_budget: 1 << 40,
    };
    let good = magic.swap(0, Ordering::SeqCst);
    assert_eq!(good, magic::RING, "the first ring's magic");
    let refused = kernels.noop_tasks(&launch).expect("noop");
    assert!(
        refused.status.iter().all(|&s| s == RT_BAD_QUEUE),
        "{:?}",
        refused.status
    );
    assert!(
        refused.results.iter().all(|&done| done == 0),
        "{:?}",
        refused.results
    );
    magic.store(good, Ordering::SeqCst);
    let served = kernels.noop_tasks(&launch).expect("noop");
    assert_eq!(served.failed_threads(), 0, "{:?}", served.status);
    assert!(
        served.results.iter().all(|&done| done == 4),
        "{:?}",
        served.results
    );
}

#[test]
fn host_corrupt_first_ring_is_refused() {
    corrupt_first_ring_is_refused(HostApi::with_devices(1), 3, 8);
}

#[test]
fn host_noop_kernel_answers_every_task() {
    noop_kernel_answers_every_task(HostApi::with_devices(1), 3, 8);
}

#[test]
fn host_echo_phases_cover_rank_zero() {
    echo_phases_cover_rank_zero(HostApi::with_devices(1));
}

#[test]
fn host_releases_while_the_service_runs_do_not_wait_for_it() {
    releases_while_the_service_runs_do_not_wait_for_it(HostApi::load().expect("host"));
}

#[test]
fn host_gpu_service_runs_tasks_routed_to_the_device() {
    gpu_service_runs_tasks_routed_to_the_device(HostApi::load().expect("host"), 2, 4);
}

#[test]
fn host_pingpong_after_a_pause_times_one_round() {
    pingpong_after_a_pause_times_one_round(HostApi::with_devices(1));
}

#[test]
fn host_host_route_reuses_reply_futures() {
    host_route_reuses_reply_futures(HostApi::with_devices(1));
}

#[test]
fn host_gpu_service_stress() {
    gpu_service_stress(
        HostApi::load().expect("host"),
        (8, 16),
        400,
        (1, 6),
        (3, 1000),
    );
}

/// More kernel threads than the service keeps inbox slots hot (one mailbox
/// thread: four leased slots, fewer than a block's threads, and one shared
/// slot): every block shares that one slot, and every task is still served
/// once.
#[test]
fn host_gpu_service_with_shared_slots() {
    gpu_service_stress(
        HostApi::load().expect("host"),
        (8, 32),
        100,
        (1, 2),
        (1, 200),
    );
}

#[test]
fn host_gpu_route_waits_end_at_stop() {
    gpu_route_waits_end_at_stop(HostApi::load().expect("host"), 2, 8);
}

#[test]
fn host_many_threads_every_task_once() {
    many_threads_every_task_once(HostApi::with_devices(1), 16, 16, 25, 16);
}

/// The GPU runs' largest grid, 264 x 256 threads, on the CPU device (whose
/// blocks' threads are fibers that wait for their answers in turns), with
/// the default segment sizes: its blocks' arena shares need more than
/// `config`'s.
#[test]
fn host_a_67k_thread_grid_runs_to_the_end() {
    let config = Config {
        workers: 4,
        devices: DeviceSelection::Only(vec![0]),
        ..Config::default()
    };
    let runtime = Runtime::start_with(HostApi::with_devices(1), config, Registry::with_builtins())
        .expect("start");
    let mut kernels = RuntimeKernels::load(&runtime.devices()[0]).expect("load");
    let outcome = kernels
        .echo(&add_launch(264, 256, 2, EchoPriority::Alternate))
        .expect("echo");
    assert_all_added(&outcome, 2);
}

#[test]
fn host_direct_claims_wait_on_full_lanes() {
    direct_claims_wait_on_full_lanes(HostApi::with_devices(1), 2, 512, 4);
}

#[test]
fn host_repeated_tasks_keep_their_methods() {
    // Two threads (each on a server of its own) and more threads than
    // servers (which take from several slots in turn).
    repeated_tasks_keep_their_methods(HostApi::with_devices(1), 1, 2, 600);
    repeated_tasks_keep_their_methods(HostApi::with_devices(1), 4, 16, 60);
}

#[test]
fn host_large_and_inline_tasks_alternate() {
    large_and_inline_tasks_alternate(HostApi::with_devices(1), 4, 16, 40);
}

#[test]
fn host_unknown_method_is_an_error_code() {
    unknown_method_is_an_error_code(HostApi::with_devices(1));
}

#[test]
fn host_stop_flag_releases_waiting_kernels() {
    stop_flag_releases_waiting_kernels(HostApi::with_devices(1));
}

#[test]
fn host_stop_flags_release_every_devices_kernels() {
    stop_flag_releases_waiting_kernels(HostApi::with_devices(3));
}

/// Zero devices: CPU queues only, and host submissions are served.
#[test]
fn host_zero_devices_serves_cpu_queues() {
    let runtime = Runtime::start_with(
        HostApi::with_devices(0),
        config(DeviceSelection::All, 2, 64),
        Registry::with_builtins(),
    )
    .expect("start");
    assert!(runtime.devices().is_empty());
    assert!(runtime
        .notes()
        .iter()
        .any(|n| n.contains("CPU queues only")));
    let stop = std::sync::atomic::AtomicU32::new(0);
    let mut pending = runtime
        .submit(tandem_runtime::Route::lane(1), &math::Add { a: 40, b: 2 })
        .expect("submit");
    assert_eq!(pending.wait(&stop, None).expect("wait"), 42);
}

/// Several (pretend) devices: one segment each, kernels on all of them at
/// once, the workers serving every segment.
#[test]
fn host_several_devices_each_with_its_own_segment() {
    let runtime = Runtime::start_with(
        HostApi::with_devices(3),
        config(DeviceSelection::All, 3, 32),
        Registry::with_builtins(),
    )
    .expect("start");
    assert_eq!(runtime.devices().len(), 3);
    let ids: Vec<_> = runtime.devices().iter().map(|d| d.segment().id()).collect();
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    std::thread::scope(|s| {
        for queues in runtime.devices() {
            s.spawn(move || {
                let mut kernels = RuntimeKernels::load(queues).expect("load");
                let outcome = kernels
                    .echo(&add_launch(4, 8, 20, EchoPriority::Alternate))
                    .expect("echo");
                assert_all_added(&outcome, 20);
            });
        }
    });
    let total = 3 * 4 * 8 * 20;
    assert_eq!(
        runtime
            .stats_when(|s| s.completed >= total, SETTLE)
            .completed,
        total
    );
}

/// A configuration naming a device that does not exist is refused.
#[test]
fn host_missing_device_is_a_config_error() {
    let Err(err) = Runtime::start_with(
        HostApi::with_devices(1),
        config(DeviceSelection::Only(vec![3]), 1, 64),
        Registry::with_builtins(),
    ) else {
        panic!("a missing device must be refused");
    };
    assert!(err.to_string().contains("device 3"), "{err}");
}

/// A runtime on the first two devices of `api`, `workers_per_device`
/// workers each (capped by the cores), with the built-in pools.
fn runtime_on_two_devices<A: GpuApi>(api: A, workers_per_device: usize) -> Runtime<A> {
    let config = Config {
        workers_per_device: Some(workers_per_device),
        ..config(DeviceSelection::Only(vec![0, 1]), 1, 64)
    };
    Runtime::start_with(api, config, Registry::with_builtins()).expect("start")
}

/// Kernels on two devices at once, each device's tasks taken by its own
/// workers: every answer right, every task completed once, and the status
/// block's lines count each device's workers and tasks.
fn kernels_on_two_devices_at_once<A: GpuApi>(api: A, blocks: u32, threads: u32, tasks: u64) {
    let runtime = runtime_on_two_devices(api, 2);
    let devices = runtime.devices();
    assert!(devices.iter().all(|d| d.workers() >= 1));
    assert_eq!(
        devices.iter().map(|d| d.workers()).sum::<usize>(),
        runtime.workers(),
        "every worker serves one device"
    );
    std::thread::scope(|s| {
        for queues in devices {
            s.spawn(move || {
                let mut kernels = RuntimeKernels::load(queues).expect("load");
                let outcome = kernels
                    .echo(&add_launch(blocks, threads, tasks, EchoPriority::Alternate))
                    .expect("echo");
                assert_all_added(&outcome, tasks);
            });
        }
    });
    let per_device = u64::from(blocks * threads) * tasks;
    assert_completed_once(
        runtime.stats_when(|s| s.completed >= 2 * per_device, SETTLE),
        2 * per_device,
    );
    let name = runtime.cpu_segment().name().expect("a named CPU segment");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = tandem_runtime::status::read_status(name).expect("status");
        if status
            .segments
            .iter()
            .skip(1)
            .all(|s| s.tasks == per_device)
            || Instant::now() > deadline
        {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.segments.len(), 3, "{status:?}");
    assert_eq!(status.segments[0].workers as usize, runtime.workers());
    for (line, queues) in status.segments[1..].iter().zip(devices) {
        assert_eq!(line.device, Some(queues.device().ordinal() as u32));
        assert_eq!(line.workers as usize, queues.workers());
        assert_eq!(line.tasks, per_device, "{status:?}");
    }
}

/// `submit_to_gpu(device)` reaches that device's service and no other.
fn submit_to_gpu_reaches_the_named_device_only<A: GpuApi>(api: A) {
    let runtime = runtime_on_two_devices(api, 1);
    let [first, second] = runtime.devices() else {
        panic!("two devices");
    };
    let services = [
        GpuService::start(first, 1, 4).expect("service 0"),
        GpuService::start(second, 1, 4).expect("service 1"),
    ];
    let stop = std::sync::atomic::AtomicU32::new(0);
    for i in 0..40u64 {
        let mut pending = runtime
            .submit_to_gpu(1, &math::Add { a: i, b: 7 }, None)
            .expect("submit to device 1");
        assert_eq!(pending.wait(&stop, None).expect("answer"), i + 7);
    }
    assert!(matches!(
        runtime.submit_to_gpu(2, &math::Noop, None),
        Err(tandem_runtime::TaskError::NoSuchDevice {
            device: 2,
            devices: 2
        })
    ));
    let [first, second] = services.map(|s| s.stop().expect("the service ends").served);
    assert_eq!((first, second), (0, 40));
}

/// A kernel on device 0 sends tasks to device 1's GPU service over a peer
/// route: every answer right, device 1's service ran them all and no CPU
/// worker did, whether the senders' slots are leased (a launch no larger
/// than the service's hot peer slots: two for its three mailbox servers),
/// partly leased and partly shared, or all shared (`blocks` x `threads`),
/// and again after the leases were reset with the kernel arena. Over a
/// route that says the devices cannot reach each other,
/// every thread stops with `no_peer_access`; a route used between other
/// devices is refused.
fn kernels_send_to_another_devices_service<A: GpuApi>(api: A, blocks: u32, threads: u32) {
    use tandem_runtime::{PeerAccess, PeerRoute};
    let runtime = runtime_on_two_devices(api, 1);
    let [first, second] = runtime.devices() else {
        panic!("two devices");
    };
    let reachable = first
        .device()
        .can_access_peer(second.device())
        .expect("ask")
        && second
            .device()
            .can_access_peer(first.device())
            .expect("ask");
    let route = runtime.peer_route(0, 1).expect("route");
    assert_eq!(
        route,
        PeerRoute {
            from: first.device().ordinal(),
            to: second.device().ordinal(),
            access: if reachable {
                PeerAccess::Direct
            } else {
                PeerAccess::Unreachable
            },
        }
    );
    assert!(matches!(
        runtime.peer_route(0, 2),
        Err(RuntimeError::NoSuchDevice {
            device: 2,
            devices: 2
        })
    ));
    // Loaded before the service starts (see GpuService).
    let mut senders = RuntimeKernels::load(first).expect("kernels 0");
    let mut servers = RuntimeKernels::load(second).expect("kernels 1");
    let service = GpuService::start(second, 1, 4).expect("service 1");
    let tasks = 8;
    let launch = EchoLaunch {
        route: EchoRoute::GpuService,
        ..add_launch(blocks, threads, tasks, EchoPriority::High)
    };
    let mut sent = 0;
    if reachable {
        for (blocks, threads) in [(1, 2), (1, 2), (2, 2), (blocks, threads)] {
            let launch = EchoLaunch {
                blocks,
                threads,
                ..launch
            };
            let outcome = senders
                .echo_via_peer(&mut servers, &route, &launch)
                .expect("echo via the peer");
            assert_all_added(&outcome, tasks);
            sent += u64::from(blocks * threads) * tasks;
        }
        // Repeated tasks through the peer's leased slots, answered at system scope.
        let mixed_tasks = 60;
        let mixed = EchoLaunch {
            blocks: 1,
            threads: 2,
            tasks_per_thread: mixed_tasks,
            method: ECHO_MIXED,
            ..launch
        };
        let outcome = senders
            .echo_via_peer(&mut servers, &route, &mixed)
            .expect("a mix via the peer");
        assert_mixed_answered(&outcome, mixed_tasks);
        sent += 2 * mixed_tasks;
    } else {
        println!("peer route 0 -> 1: the devices have no peer access; checking the refusal only");
    }
    let unreachable = PeerRoute {
        access: PeerAccess::Unreachable,
        ..route
    };
    let outcome = senders
        .echo_via_peer(&mut servers, &unreachable, &launch)
        .expect("launch");
    assert!(
        outcome.status.iter().all(|&s| s == ECHO_NO_PEER_ACCESS),
        "statuses {:?}",
        outcome.status
    );
    let reversed = PeerRoute {
        from: route.to,
        to: route.from,
        ..route
    };
    assert!(matches!(
        senders.echo_via_peer(&mut servers, &reversed, &launch),
        Err(RuntimeError::PeerRouteMismatch { .. })
    ));
    let stats = service.stop().expect("the service ends");
    assert_eq!(stats.served, sent);
    assert_eq!(stats.bad_pointers, 0);
    assert_eq!(runtime.stats().completed, 0, "no task reached a CPU worker");
    if reachable
        && second
            .device()
            .can_access_peer(first.device())
            .expect("ask")
    {
        // The floor the cross-device round trip is measured against runs
        // every round (it errs when a side gives up).
        let floor = senders
            .peer_pingpong(&servers, 1000)
            .expect("peer ping-pong");
        assert!(floor > Duration::ZERO);
    }
}

#[test]
fn host_kernels_on_two_devices_at_once() {
    kernels_on_two_devices_at_once(HostApi::with_devices(2), 4, 8, 20);
}

#[test]
fn host_submit_to_gpu_reaches_the_named_device_only() {
    submit_to_gpu_reaches_the_named_device_only(HostApi::with_devices(2));
}

#[test]
fn host_kernels_send_to_another_devices_service() {
    kernels_send_to_another_devices_service(HostApi::with_devices(2), 2, 8);
}

#[cfg(any(feature = "cuda", feature = "hip"))]
macro_rules! gpu_tests {
    ($backend:ident, $api:ty) => {
        mod $backend {
            use std::sync::MutexGuard;

            use tandem_tests::gpu::{api_with_devices_or_skip, device_or_skip, one_at_a_time};

            /// The backend and this test's turn (one device test at a
            /// time), or `None` when the test skips.
            fn api(label: &str) -> Option<($api, MutexGuard<'static, ()>)> {
                device_or_skip::<$api>(label)?;
                let turn = one_at_a_time();
                Some((<$api as tandem_hal::GpuApi>::load().expect("load"), turn))
            }

            /// The backend with two devices and this test's turn, or `None`
            /// when the test skips.
            fn api_with_two(label: &str) -> Option<($api, MutexGuard<'static, ()>)> {
                let api =
                    api_with_devices_or_skip::<$api>(label, 2, <$api as tandem_hal::GpuApi>::load)?;
                Some((api, one_at_a_time()))
            }

            #[test]
            fn kernels_on_two_devices_at_once() {
                if let Some((api, _one)) = api_with_two("runtime kernels_on_two_devices_at_once") {
                    super::kernels_on_two_devices_at_once(api, 132, 128, 16);
                }
            }

            #[test]
            fn submit_to_gpu_reaches_the_named_device_only() {
                if let Some((api, _one)) =
                    api_with_two("runtime submit_to_gpu_reaches_the_named_device_only")
                {
                    super::submit_to_gpu_reaches_the_named_device_only(api);
                }
            }

            #[test]
            fn kernels_send_to_another_devices_service() {
                if let Some((api, _one)) =
                    api_with_two("runtime kernels_send_to_another_devices_service")
                {
                    super::kernels_send_to_another_devices_service(api, 16, 64);
                }
            }

            #[test]
            fn many_threads_every_task_once() {
                if let Some((api, _one)) = api("runtime many_threads_every_task_once") {
                    super::many_threads_every_task_once(api, 132, 128, 16, 16);
                }
            }

            #[test]
            fn direct_claims_wait_on_full_lanes() {
                if let Some((api, _one)) = api("runtime direct_claims_wait_on_full_lanes") {
                    super::direct_claims_wait_on_full_lanes(api, 132, 128, 4);
                }
            }

            #[test]
            fn large_and_inline_tasks_alternate() {
                if let Some((api, _one)) = api("runtime large_and_inline_tasks_alternate") {
                    super::large_and_inline_tasks_alternate(api, 132, 64, 16);
                }
            }

            #[test]
            fn repeated_tasks_keep_their_methods() {
                if let Some((api, _one)) = api("runtime repeated_tasks_keep_their_methods") {
                    // One warp (its server's last task is its own) and a
                    // full grid (servers take from several slots in turn).
                    super::repeated_tasks_keep_their_methods(api, 1, 32, 600);
                    let again = <$api as tandem_hal::GpuApi>::load().expect("load");
                    super::repeated_tasks_keep_their_methods(again, 132, 128, 60);
                }
            }

            #[test]
            fn unknown_method_is_an_error_code() {
                if let Some((api, _one)) = api("runtime unknown_method_is_an_error_code") {
                    super::unknown_method_is_an_error_code(api);
                }
            }

            #[test]
            fn releases_while_the_service_runs_do_not_wait_for_it() {
                if let Some((api, _one)) =
                    api("runtime releases_while_the_service_runs_do_not_wait_for_it")
                {
                    super::releases_while_the_service_runs_do_not_wait_for_it(api);
                }
            }

            #[test]
            fn gpu_service_runs_tasks_routed_to_the_device() {
                if let Some((api, _one)) =
                    api("runtime gpu_service_runs_tasks_routed_to_the_device")
                {
                    super::gpu_service_runs_tasks_routed_to_the_device(api, 16, 64);
                }
            }

            #[test]
            fn pingpong_after_a_pause_times_one_round() {
                if let Some((api, _one)) = api("runtime pingpong_after_a_pause_times_one_round") {
                    super::pingpong_after_a_pause_times_one_round(api);
                }
            }

            #[test]
            fn host_route_reuses_reply_futures() {
                if let Some((api, _one)) = api("runtime host_route_reuses_reply_futures") {
                    super::host_route_reuses_reply_futures(api);
                }
            }

            #[test]
            fn gpu_service_stress() {
                if let Some((api, _one)) = api("runtime gpu_service_stress") {
                    super::gpu_service_stress(api, (132, 128), 64, (16, 120), (4, 500));
                }
            }

            #[test]
            fn gpu_route_waits_end_at_stop() {
                if let Some((api, _one)) = api("runtime gpu_route_waits_end_at_stop") {
                    super::gpu_route_waits_end_at_stop(api, 16, 64);
                }
            }

            #[test]
            fn echo_phases_cover_rank_zero() {
                if let Some((api, _one)) = api("runtime echo_phases_cover_rank_zero") {
                    super::echo_phases_cover_rank_zero(api);
                }
            }

            #[test]
            fn corrupt_first_ring_is_refused() {
                if let Some((api, _one)) = api("runtime corrupt_first_ring_is_refused") {
                    super::corrupt_first_ring_is_refused(api, 132, 32);
                }
            }

            #[test]
            fn noop_kernel_answers_every_task() {
                if let Some((api, _one)) = api("runtime noop_kernel_answers_every_task") {
                    super::noop_kernel_answers_every_task(api, 132, 32);
                }
            }

            #[test]
            fn stop_flag_releases_waiting_kernels() {
                if let Some((api, _one)) = api("runtime stop_flag_releases_waiting_kernels") {
                    super::stop_flag_releases_waiting_kernels(api);
                }
            }
        }
    };
}

#[cfg(feature = "cuda")]
gpu_tests!(cuda, tandem_hal_cuda::CudaApi);
#[cfg(feature = "hip")]
gpu_tests!(hip, tandem_hal_hip::HipApi);
