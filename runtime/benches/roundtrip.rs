//! Task round trip and throughput of the runtime, against the floors it is
//! built on (one run, ratios printed):
//!
//! * floor: a kernel thread and a host thread ping-pong a value through two
//!   words of mapped pinned memory (`tandem_rt_pingpong`);
//! * one kernel launch + stream synchronisation per request;
//! * the runtime: one kernel thread's task round trip (`math.noop`), and
//!   many kernel threads with 4 and 8 workers (no-op tasks per second);
//! * the GPU service (the GPU route), against floors measured in the same
//!   run: a kernel thread's round trip to it against two blocks ping-ponging
//!   through device memory (target <= 1.5x); kernel threads' throughput to a
//!   service of at most a quarter of the multiprocessors, its size printed
//!   (target >= 1 G tasks/s, with multiprocessors x 128 threads sending); a
//!   host thread's round trip against the pinned-memory ping-pong (target
//!   <= 1.5x) and against a kernel launch + sync per request, and that of a
//!   task with output (no target: what output adds); on a GPU, four host
//!   threads' tasks a second, each sending one at a time (no target: the
//!   host route's ring when it does not drain, beside one thread's); and,
//!   for a kernel thread and for a host thread, the first round trip after an
//!   idle second against a busy one (target <= 2x), and for the host thread
//!   against the pinned ping-pong's first round after the same pause (no
//!   target: what the pause costs a host thread that touches one line) and
//!   the same pause spent spinning (no target: whether what the pause costs
//!   is the thread's own sleep).
//!
//! The kernel thread's busy round trip is timed as the floor is, by the
//! launch over many tasks with no clock read between them; the timed run
//! that splits one into its phases prints its own time per task beside
//! them.
//!
//! The runtime's rows run the no-op kernel (`tandem_rt_noop_tasks`), whose
//! threads only send no-op tasks and wait for them, as the floor's kernel
//! only exchanges words. The echo kernel, which the tests run, also picks a
//! method, a route and a priority for every task and reads its output; a GPU
//! thread pays for each of those instructions, so its round trip is printed
//! beside the no-op kernel's for comparison.
//!
//! Runs on the CPU device always, and on CUDA when built with `--features
//! cuda` and a device is present (else "skipped: no CUDA device", or a
//! failure with TANDEM_REQUIRE_GPU=1). Targets (on the H100; their origin
//! in docs/perf/README.md, "Targets"): a kernel thread's round trip at most
//! 1.25x the floor (the CPU device's 1.5x); at least 20 M no-op tasks/s at
//! every shape with 4 workers and 40 M with 8 at 132 x 128 threads (the CPU
//! device's 10 M with 4).
//!
//! Every run takes the default [`Config`] but for its workers and device,
//! so the lanes are the defaults': the CPU device's segment gets `lanes`
//! (16), a GPU's `gpu_lanes` (64), as `tandem run` gives them.

mod support;

use support::{skip_cuda, us, Pooled, RUNS_PER_RUNTIME, RUNTIMES};

use std::time::Duration;

use tandem_hal::{GpuApi, HostApi};
use tandem_runtime::kernels::{
    EchoLaunch, EchoOutcome, EchoPhases, EchoPriority, EchoRoute, NoopLaunch, RuntimeKernels,
    ThreadSpan,
};
use tandem_runtime::{math, Config, DeviceSelection, GpuService, Registry, Runtime};

/// Sizes of one backend's run.
struct Scale {
    pingpong_rounds: u64,
    launches: u32,
    single_tasks: u64,
    /// Round trip target, in floors.
    round_trip_target: f64,
    /// Throughput runs, by worker count.
    throughput: &'static [(usize, &'static [Shape])],
    /// Tasks of one throughput run, about (split evenly among its threads).
    tasks_per_grid: u64,
}

/// A throughput run's launch (blocks, threads per block) and its target in
/// tasks per second.
type Shape = (u32, u32, f64);

/// Sizes of one backend's GPU-service rows.
struct ServiceScale {
    /// Rounds of each ping-pong floor.
    pingpong_rounds: u64,
    launches: u32,
    /// Tasks of a single thread's round-trip run (kernel or host).
    single_tasks: u64,
    /// Threads per block of the throughput launch (whose blocks are the
    /// device's multiprocessors) and of the service.
    producer_threads: u32,
    service_threads: u32,
    /// Tasks of one throughput run, about.
    tasks_per_grid: u64,
    /// Host threads sending to the service at once (none: no row; the CPU
    /// device's service threads would share the host's cores with them).
    host_senders: u32,
    /// The pause before an idle round trip.
    idle: Duration,
    /// Whether the targets apply (a GPU, not the CPU device's shared cores).
    targets: bool,
}

/// Turns of floor and round-trip measurement (odd: the median is a run).
const REPEATS: usize = 5;

fn verdict(met: bool) -> &'static str {
    if met {
        "meets"
    } else {
        "BELOW"
    }
}

/// "target {target}: meets/BELOW", or that the CPU device has none.
fn service_verdict(scale: &ServiceScale, target: &str, met: bool) -> String {
    if scale.targets {
        format!("target {target}: {}", verdict(met))
    } else {
        "no target on the CPU device".to_string()
    }
}

/// The median of `REPEATS` runs of `run`, and the lowest and highest.
fn median_of<T: Copy + Ord>(
    mut run: impl FnMut() -> Result<T, String>,
) -> Result<(T, T, T), String> {
    let mut values = (0..REPEATS)
        .map(|_| run())
        .collect::<Result<Vec<T>, String>>()?;
    values.sort();
    Ok((values[REPEATS / 2], values[0], values[REPEATS - 1]))
}

/// The GPU-route launch of one kernel thread sending `tasks` no-op tasks.
fn lone_sender(tasks: u64) -> NoopLaunch {
    NoopLaunch {
        route: EchoRoute::GpuService,
        ..noop(1, 1, tasks)
    }
}

/// Whether a lone sender's GPU-route launch had its every task answered.
fn sender_answered(outcome: &EchoOutcome) -> Result<(), String> {
    if outcome.failed_threads() > 0 {
        return Err(format!("GPU-route run failed: {:?}", outcome.status));
    }
    Ok(())
}

/// One kernel thread's `tasks` no-op tasks to the GPU service, untimed (its
/// kernel reads no clock between them, as the floor's reads none): the
/// launch's time per task, whose launch and set-up `tasks` amortise as the
/// floor's rounds amortise its own.
fn service_round_trip<A: GpuApi>(
    kernels: &mut RuntimeKernels<'_, A>,
    tasks: u64,
) -> Result<Duration, String> {
    let outcome = kernels
        .noop_tasks(&lone_sender(tasks))
        .map_err(|e| e.to_string())?;
    sender_answered(&outcome)?;
    Ok(outcome.elapsed / tasks as u32)
}

/// One kernel thread's first task to the GPU service of a launch, as its
/// own clock saw it: from its set-up (its future allocated) to the answer,
/// making the task included. A launch's own start is not the service's to
/// answer for, and the thread reads its clock only at those two points.
fn service_first_round_trip<A: GpuApi>(
    kernels: &mut RuntimeKernels<'_, A>,
) -> Result<Duration, String> {
    let (outcome, spans) = kernels
        .noop_tasks_with_spans(&lone_sender(1))
        .map_err(|e| e.to_string())?;
    sender_answered(&outcome)?;
    let span = spans.first().ok_or("no span came back")?;
    Ok(span.first_answered.saturating_sub(span.set_up))
}

/// One kernel thread's `tasks` no-op tasks to the GPU service, its phases
/// by its clock, read three times a task, and the launch's time per task
/// with those reads.
fn service_phases<A: GpuApi>(
    kernels: &mut RuntimeKernels<'_, A>,
    tasks: u64,
) -> Result<(EchoPhases, Duration), String> {
    let (outcome, phases) = kernels
        .noop_tasks_with_phases(&lone_sender(tasks))
        .map_err(|e| e.to_string())?;
    sender_answered(&outcome)?;
    Ok((phases, outcome.elapsed / tasks as u32))
}

/// One host thread's `tasks` tasks (`task(i)`) to device 0's GPU service,
/// one at a time: the time per round trip.
fn host_round_trips<A: GpuApi, T: tandem_runtime::Task>(
    runtime: &Runtime<A>,
    stop: &std::sync::atomic::AtomicU32,
    tasks: u64,
    task: impl Fn(u64) -> T,
) -> Result<Duration, String> {
    let start = std::time::Instant::now();
    for i in 0..tasks {
        let mut pending = runtime
            .submit_to_gpu(0, &task(i), None)
            .map_err(|e| e.to_string())?;
        pending.wait(stop, None).map_err(|e| e.to_string())?;
    }
    Ok(start.elapsed() / tasks as u32)
}

/// `threads` host threads sending `tasks` tasks each to device 0's GPU
/// service, each one at a time: the time per task over all of them.
fn host_threads_round_trips<A: GpuApi>(
    runtime: &Runtime<A>,
    stop: &std::sync::atomic::AtomicU32,
    threads: u32,
    tasks: u64,
) -> Result<Duration, String> {
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        let senders: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| host_round_trips(runtime, stop, tasks, |_| math::Noop)))
            .collect();
        senders.into_iter().try_for_each(|sender| {
            sender
                .join()
                .map_err(|_| "a host sender panicked".to_owned())?
                .map(drop)
        })
    })?;
    Ok(start.elapsed() / (u64::from(threads) * tasks) as u32)
}

/// Spins the calling thread for `pause`, reading the clock: it stays on its
/// core, awake, as a thread that waits by spinning.
fn spin_for(pause: Duration) {
    let start = std::time::Instant::now();
    while start.elapsed() < pause {
        std::hint::spin_loop();
    }
}

/// The GPU service's rows (see the top of the file): floors first, on a
/// device no service runs on, as a floor is the hardware's alone.
fn service_bench<A: GpuApi>(
    api: impl Fn() -> Result<A, String>,
    scale: &ServiceScale,
) -> Result<(), String> {
    let runtime = start(&api, 1)?;
    let queues = &runtime.devices()[0];
    let mut kernels = RuntimeKernels::load(queues).map_err(|e| e.to_string())?;
    let err = |e: tandem_runtime::RuntimeError| e.to_string();
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let spread = |(m, lo, hi): (Duration, Duration, Duration)| {
        format!(
            "{:.2} us (median of {REPEATS}; {:.2} - {:.2})",
            us(m),
            us(lo),
            us(hi)
        )
    };
    let sms = queues.properties().multiprocessor_count;
    // At most a quarter of the multiprocessors (the target's bound).
    let service_blocks = (sms / 4).max(1);
    // Each row is printed once measured, so that a run cut short still
    // shows what it measured.
    println!(
        "  GPU service ({service_blocks} x {} threads):",
        scale.service_threads
    );
    let device_floor = median_of(|| kernels.device_pingpong(scale.pingpong_rounds).map_err(err))?;
    println!(
        "    device-memory ping-pong floor (two blocks): {}",
        spread(device_floor)
    );
    let pinned_floor = median_of(|| kernels.pingpong(scale.pingpong_rounds).map_err(err))?;
    println!(
        "    pinned-memory ping-pong floor: {}",
        spread(pinned_floor)
    );
    // What the idle rows' pause costs a host thread that touches only the
    // floor's one line; before the service starts, as the busy floor, so
    // that both floors have the device to themselves.
    let pinned_idle_floor = median_of(|| kernels.pingpong_after(scale.idle).map_err(err))?;
    println!(
        "    pinned-memory ping-pong after {:?} idle (the host thread's first round): {}; {:.2}x the busy floor",
        scale.idle,
        spread(pinned_idle_floor),
        ratio(pinned_idle_floor.0, pinned_floor.0)
    );
    let launch_sync = kernels.launch_and_sync(scale.launches).map_err(err)?;
    let service = GpuService::start(queues, service_blocks, scale.service_threads).map_err(err)?;
    service_round_trip(&mut kernels, 100)?;
    let kernel_trip = median_of(|| service_round_trip(&mut kernels, scale.single_tasks))?;
    let vs = ratio(kernel_trip.0, device_floor.0);
    println!(
        "    kernel thread -> service round trip: {}; {vs:.2}x the device floor, {}",
        spread(kernel_trip),
        service_verdict(scale, "<= 1.5x", vs <= 1.5)
    );
    let (phases, timed) = service_phases(&mut kernels, scale.single_tasks)?;
    println!(
        "      as the kernel thread's clock saw it (a timed run, {:.2} us a task with its clock reads): send {:.2} us, wait {:.2} us",
        us(timed),
        us(phases.send),
        us(phases.wait)
    );
    let stop = std::sync::atomic::AtomicU32::new(0);
    // Per task: the submit and the wait, as the host thread's clock saw them.
    let host_phases = |tasks: u64| {
        let (mut submit, mut wait) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..tasks {
            let start = std::time::Instant::now();
            let mut pending = runtime
                .submit_to_gpu(0, &math::Noop, None)
                .map_err(|e| e.to_string())?;
            let submitted = std::time::Instant::now();
            pending.wait(&stop, None).map_err(|e| e.to_string())?;
            drop(pending);
            submit += submitted - start;
            wait += submitted.elapsed();
        }
        Ok::<_, String>((submit / tasks as u32, wait / tasks as u32))
    };
    let host_trips = |tasks: u64| host_round_trips(&runtime, &stop, tasks, |_| math::Noop);
    let host_trip = median_of(|| host_trips(scale.single_tasks))?;
    let vs = ratio(host_trip.0, pinned_floor.0);
    println!(
        "    host thread -> service round trip: {}; {vs:.2}x the pinned floor, {}; a kernel launch + sync per request is {:.2} us, {:.2}x this",
        spread(host_trip),
        service_verdict(scale, "<= 1.5x", vs <= 1.5),
        us(launch_sync),
        ratio(launch_sync, host_trip.0)
    );
    let (submit, wait) = host_phases(scale.single_tasks)?;
    println!(
        "      as the host thread's clock saw it (one run): submit {:.2} us, wait and drop {:.2} us",
        us(submit),
        us(wait)
    );
    let add_trip = median_of(|| {
        host_round_trips(&runtime, &stop, scale.single_tasks, |i| math::Add {
            a: i,
            b: 1,
        })
    })?;
    println!(
        "      a task with output (math.add, 8 bytes back): {}; {:.2}x the pinned floor",
        spread(add_trip),
        ratio(add_trip.0, pinned_floor.0)
    );
    if scale.host_senders != 0 {
        // Several senders keep the host route's ring from draining: its
        // server then polls after each answer at once
        // (tandem/runtime/host_route.h, RtHostPacing).
        let senders = scale.host_senders;
        let busy = median_of(|| {
            let tasks = scale.single_tasks / u64::from(senders);
            host_threads_round_trips(&runtime, &stop, senders, tasks)
        })?;
        let rate = |per_task: Duration| 1e-6 / per_task.as_secs_f64();
        println!(
            "    {senders} host threads -> service, one task at a time each: {:.2} M tasks/s (median of {REPEATS}; {:.2} - {:.2}); one host thread's is {:.2} M/s (its round trip's)",
            rate(busy.0),
            rate(busy.2),
            rate(busy.1),
            rate(host_trip.0)
        );
    }
    let idle_trip = median_of(|| {
        std::thread::sleep(scale.idle);
        service_first_round_trip(&mut kernels)
    })?;
    let vs = ratio(idle_trip.0, kernel_trip.0);
    println!(
        "    kernel thread -> service after {:?} idle: {}; {vs:.2}x the busy round trip, {}",
        scale.idle,
        spread(idle_trip),
        service_verdict(scale, "<= 2x", vs <= 2.0)
    );
    let host_idle_trip = median_of(|| {
        std::thread::sleep(scale.idle);
        host_trips(1)
    })?;
    let vs = ratio(host_idle_trip.0, host_trip.0);
    println!(
        "    host thread -> service after {:?} idle: {}; {vs:.2}x the busy round trip, {}; {:.2}x the ping-pong after the same pause",
        scale.idle,
        spread(host_idle_trip),
        service_verdict(scale, "<= 2x", vs <= 2.0),
        ratio(host_idle_trip.0, pinned_idle_floor.0)
    );
    std::thread::sleep(scale.idle);
    let (submit, wait) = host_phases(1)?;
    println!(
        "      as the host thread's clock saw it (one run): submit {:.2} us, wait and drop {:.2} us",
        us(submit),
        us(wait)
    );
    let spun_trip = median_of(|| {
        spin_for(scale.idle);
        host_trips(1)
    })?;
    spin_for(scale.idle);
    let (submit, wait) = host_phases(1)?;
    println!(
        "      the host thread spinning through the pause instead: {}; {:.2}x the busy round trip; submit {:.2} us, wait and drop {:.2} us (one run)",
        spread(spun_trip),
        ratio(spun_trip.0, host_trip.0),
        us(submit),
        us(wait)
    );
    let producers = (sms, scale.producer_threads);
    let per_thread = scale
        .tasks_per_grid
        .div_ceil(u64::from(producers.0 * producers.1));
    // The no-op kernel, as the CPU route's rows: a GPU thread pays for every
    // instruction of its loop, and the echo kernel's would be the bound.
    let grid = NoopLaunch {
        route: EchoRoute::GpuService,
        ..noop(producers.0, producers.1, per_thread)
    };
    // A service of its own for these runs, so that its counts are theirs.
    let earlier = service.stop().map_err(err)?;
    let service = GpuService::start(queues, service_blocks, scale.service_threads).map_err(err)?;
    let mut rates = Vec::with_capacity(REPEATS);
    let mut busy = Duration::ZERO;
    for _ in 0..REPEATS {
        let outcome = kernels.noop_tasks(&grid).map_err(err)?;
        if outcome.failed_threads() > 0 {
            return Err(format!("{} threads failed", outcome.failed_threads()));
        }
        let tasks = u64::from(producers.0 * producers.1) * per_thread;
        rates.push(tasks as f64 / outcome.elapsed.as_secs_f64());
        busy += outcome.elapsed;
    }
    rates.sort_by(f64::total_cmp);
    let median = rates[REPEATS / 2];
    println!(
        "    {} x {} kernel threads -> service ({service_blocks} x {}): {:.1} M tasks/s (median of {REPEATS}; {:.1} - {:.1}), {}",
        producers.0,
        producers.1,
        scale.service_threads,
        median / 1e6,
        rates[0] / 1e6,
        rates[REPEATS - 1] / 1e6,
        service_verdict(scale, ">= 1000 M/s", median >= 1e9)
    );
    let (outcome, phases) = kernels.noop_tasks_with_phases(&grid).map_err(err)?;
    if outcome.failed_threads() > 0 {
        return Err(format!("{} threads failed", outcome.failed_threads()));
    }
    println!(
        "      as global rank 0's clock saw it (one more run): make {:.2} us, send {:.2} us, wait {:.2} us a task",
        us(phases.make),
        us(phases.send),
        us(phases.wait)
    );
    let (outcome, spans) = kernels.noop_tasks_with_spans(&grid).map_err(err)?;
    if outcome.failed_threads() > 0 {
        return Err(format!("{} threads failed", outcome.failed_threads()));
    }
    print_spans(&spans, producers.1, outcome.elapsed);
    let served = service.stop().map_err(err)?;
    // rt_serve's inbox pollers: all but its host server (a warp where a
    // block holds one and the grid more, else one thread).
    let threads = u64::from(service_blocks * scale.service_threads);
    let warp = u64::from(queues.properties().warp_size);
    let host_lanes = if u64::from(scale.service_threads) >= warp && threads > warp {
        warp
    } else {
        1
    };
    let pollers = threads.saturating_sub(host_lanes).max(1);
    println!(
        "      the service over these runs: {:.3} tasks a round of polls; a round every {:.2} us a polling thread ({} rounds)",
        served.served as f64 / served.rounds.max(1) as f64,
        us(busy + outcome.elapsed) * pollers as f64 / served.rounds.max(1) as f64,
        served.rounds
    );
    println!(
        "    the service ran {} tasks",
        earlier.served + served.served
    );
    Ok(())
}

/// Where the threads of a loaded launch spent it (`spans`, blocks of
/// `threads` threads), from the first thread's start: how late threads
/// started, when their first answers came and when they ended; and the
/// blocks that ended last, with the multiprocessor each ran on and how many
/// blocks of the launch shared it. The throughput is the launch's, so its
/// slowest threads set it: this tells threads that started late from
/// threads that ran slowly, and which.
fn print_spans(spans: &[ThreadSpan], threads: u32, elapsed: Duration) {
    let pct = |mut v: Vec<Duration>| {
        v.sort();
        let at = |q: usize| us(v[(v.len() - 1) * q / 100]);
        format!(
            "p10 {:.1}, p50 {:.1}, p90 {:.1}, max {:.1} us",
            at(10),
            at(50),
            at(90),
            at(100)
        )
    };
    println!(
        "      every thread (one more run, {:.1} us launch to sync): started {}; set up {}; first answer {}; ended {}",
        us(elapsed),
        pct(spans.iter().map(|s| s.started).collect()),
        pct(spans.iter().map(|s| s.set_up).collect()),
        pct(spans.iter().map(|s| s.first_answered).collect()),
        pct(spans.iter().map(|s| s.ended).collect()),
    );
    let blocks: Vec<(usize, Duration, u32)> = spans
        .chunks(threads as usize)
        .enumerate()
        .map(|(b, block)| {
            let end = block.iter().map(|s| s.ended).max().unwrap_or_default();
            (b, end, block[0].multiprocessor)
        })
        .collect();
    let mut per_mp = std::collections::HashMap::new();
    for &(_, _, mp) in &blocks {
        *per_mp.entry(mp).or_insert(0u32) += 1;
    }
    let mut slowest = blocks.clone();
    slowest.sort_by_key(|&(_, end, _)| std::cmp::Reverse(end));
    let listed: Vec<String> = slowest
        .iter()
        .take(6)
        .map(|&(b, end, mp)| {
            format!(
                "block {b} {:.1} us (SM {mp}, {} blocks)",
                us(end),
                per_mp[&mp]
            )
        })
        .collect();
    println!(
        "      blocks on {} multiprocessors; the last to end: {}",
        per_mp.len(),
        listed.join(", ")
    );
}

/// A runtime on device 0 with `workers` workers.
fn start<A: GpuApi>(
    api: impl Fn() -> Result<A, String>,
    workers: usize,
) -> Result<Runtime<A>, String> {
    let config = Config {
        workers,
        devices: DeviceSelection::Only(vec![0]),
        ..Config::default()
    };
    Runtime::start_with(api()?, config, Registry::with_builtins()).map_err(|e| e.to_string())
}

fn noop(blocks: u32, threads: u32, tasks: u64) -> NoopLaunch {
    NoopLaunch {
        route: EchoRoute::CpuWorkers,
        blocks,
        threads,
        tasks_per_thread: tasks,
        spin_budget: 1 << 40,
    }
}

/// The echo kernel's launch of the same no-op tasks.
fn echo_of_noops(tasks: u64) -> EchoLaunch {
    EchoLaunch {
        blocks: 1,
        threads: 1,
        tasks_per_thread: tasks,
        method: math::NOOP,
        priority: EchoPriority::High,
        route: EchoRoute::CpuWorkers,
        spin_budget: 1 << 40,
    }
}

fn bench<A: GpuApi>(
    api: impl Fn() -> Result<A, String>,
    label: &str,
    scale: &Scale,
) -> Result<(), String> {
    let runtime = start(&api, 4)?;
    let mut kernels = RuntimeKernels::load(&runtime.devices()[0]).map_err(|e| e.to_string())?;
    let launch_sync = kernels
        .launch_and_sync(scale.launches)
        .map_err(|e| e.to_string())?;
    // Warm up the workers and the module, then measure the floor and the
    // round trip in turns, REPEATS times each: both drift with the host's
    // state, so each is the median of its runs and the spread is printed.
    // The round trips run untimed (the floor's kernel reads no clock either);
    // one more, timed run splits a round trip into its phases.
    kernels
        .noop_tasks(&noop(1, 1, 100))
        .map_err(|e| e.to_string())?;
    let single_run = |kernels: &mut RuntimeKernels<'_, A>| {
        let single = kernels
            .noop_tasks(&noop(1, 1, scale.single_tasks))
            .map_err(|e| e.to_string())?;
        if single.failed_threads() > 0 {
            return Err(format!("single-thread run failed: {:?}", single.status));
        }
        Ok(single.elapsed / scale.single_tasks as u32)
    };
    let mut floors = Vec::with_capacity(REPEATS);
    let mut trips = Vec::with_capacity(REPEATS);
    for _ in 0..REPEATS {
        floors.push(
            kernels
                .pingpong(scale.pingpong_rounds)
                .map_err(|e| e.to_string())?,
        );
        trips.push(single_run(&mut kernels)?);
    }
    floors.sort();
    trips.sort();
    let floor = floors[REPEATS / 2];
    let round_trip = trips[REPEATS / 2];
    let (timed, phases) = kernels
        .noop_tasks_with_phases(&noop(1, 1, scale.single_tasks))
        .map_err(|e| e.to_string())?;
    if timed.failed_threads() > 0 {
        return Err(format!(
            "timed single-thread run failed: {:?}",
            timed.status
        ));
    }
    let echo = kernels
        .echo(&echo_of_noops(scale.single_tasks))
        .map_err(|e| e.to_string())?;
    if echo.failed_threads() > 0 {
        return Err(format!("echo single-thread run failed: {:?}", echo.status));
    }
    let echo_trip = echo.elapsed / scale.single_tasks as u32;
    println!("{label}:");
    println!(
        "  pinned-memory ping-pong floor:      {:8.2} us  (median of {REPEATS}; {:.2} - {:.2})",
        us(floor),
        us(floors[0]),
        us(floors[REPEATS - 1])
    );
    println!(
        "  kernel launch + sync per request:   {:8.2} us",
        us(launch_sync)
    );
    let vs_floor = round_trip.as_secs_f64() / floor.as_secs_f64();
    let target = scale.round_trip_target;
    println!(
        "  task round trip, one kernel thread: {:8.2} us  (median of {REPEATS}; {:.2} - {:.2}; {vs_floor:.2}x floor, target <= {target}x: {}; launch + sync is {:.2}x the round trip)",
        us(round_trip),
        us(trips[0]),
        us(trips[REPEATS - 1]),
        verdict(vs_floor <= target),
        launch_sync.as_secs_f64() / round_trip.as_secs_f64()
    );
    println!(
        "    as the kernel thread's clock saw it (a timed run, {:.2} us a task with its clock reads): make {:.2} us, send {:.2} us, wait {:.2} us ({} tasks)",
        us(timed.elapsed / scale.single_tasks as u32),
        us(phases.make),
        us(phases.send),
        us(phases.wait),
        phases.tasks
    );
    println!(
        "    the echo kernel's round trip, for comparison (one run): {:.2} us ({:.2}x floor)",
        us(echo_trip),
        echo_trip.as_secs_f64() / floor.as_secs_f64()
    );
    drop(kernels);
    drop(runtime);
    for &(workers, grids) in scale.throughput {
        // Per shape: each runtime's runs, sorted.
        let mut runs: Vec<Vec<Vec<f64>>> = vec![Vec::with_capacity(RUNTIMES); grids.len()];
        for _ in 0..RUNTIMES {
            let runtime = start(&api, workers)?;
            let mut kernels =
                RuntimeKernels::load(&runtime.devices()[0]).map_err(|e| e.to_string())?;
            for (shape, &(blocks, threads, _)) in runs.iter_mut().zip(grids) {
                shape.push(throughput(
                    &mut kernels,
                    blocks,
                    threads,
                    scale.tasks_per_grid,
                )?);
            }
        }
        for (shape, &(blocks, threads, target)) in runs.iter().zip(grids) {
            let pooled = Pooled::of(shape);
            println!(
                "  {blocks} x {threads} kernel threads, {workers} workers: {:.2} M tasks/s ({}; target >= {} M/s: {})",
                pooled.median / 1e6,
                pooled.spread_in_millions(),
                target / 1e6,
                verdict(pooled.median >= target)
            );
        }
    }
    Ok(())
}

/// No-op tasks per second of RUNS_PER_RUNTIME runs of `blocks` x `threads`
/// kernel threads sharing about `tasks` tasks, sorted.
fn throughput<A: GpuApi>(
    kernels: &mut RuntimeKernels<'_, A>,
    blocks: u32,
    threads: u32,
    tasks: u64,
) -> Result<Vec<f64>, String> {
    let per_thread = tasks.div_ceil(u64::from(blocks * threads));
    let tasks = u64::from(blocks * threads) * per_thread;
    let mut rates = Vec::with_capacity(RUNS_PER_RUNTIME);
    for _ in 0..RUNS_PER_RUNTIME {
        let many = kernels
            .noop_tasks(&noop(blocks, threads, per_thread))
            .map_err(|e| e.to_string())?;
        if many.failed_threads() > 0 {
            return Err(format!("{} threads failed", many.failed_threads()));
        }
        rates.push(tasks as f64 / many.elapsed.as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    Ok(rates)
}

fn main() {
    // A GPU's rows first (see cuda()), then the CPU device's.
    cuda();
    let host = Scale {
        pingpong_rounds: 20_000,
        launches: 2_000,
        single_tasks: 20_000,
        round_trip_target: 1.5,
        throughput: &[(4, &[(8, 16, 10e6)])],
        tasks_per_grid: 64_000,
    };
    let host_service = ServiceScale {
        pingpong_rounds: 20_000,
        launches: 2_000,
        single_tasks: 20_000,
        producer_threads: 16,
        service_threads: 4,
        tasks_per_grid: 64_000,
        host_senders: 0,
        idle: Duration::from_millis(100),
        targets: false,
    };
    let host_api = || Ok(HostApi::with_devices(1));
    let host_run = bench(host_api, "CPU device (host backend)", &host)
        .and_then(|()| service_bench(host_api, &host_service));
    if let Err(e) = host_run {
        eprintln!("host backend bench failed: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "cuda")]
fn cuda() {
    let gpu = Scale {
        pingpong_rounds: 100_000,
        launches: 10_000,
        single_tasks: 100_000,
        round_trip_target: 1.25,
        throughput: &[
            (4, &[(132, 32, 20e6), (132, 128, 20e6), (264, 256, 20e6)]),
            (8, &[(132, 128, 40e6)]),
        ],
        tasks_per_grid: 2_000_000,
    };
    let service = ServiceScale {
        pingpong_rounds: 100_000,
        launches: 10_000,
        single_tasks: 100_000,
        producer_threads: 128,
        service_threads: 128,
        tasks_per_grid: 4_000_000,
        host_senders: 4,
        idle: Duration::from_secs(1),
        targets: true,
    };
    let load = || tandem_hal_cuda::CudaApi::load().map_err(|e| e.to_string());
    let present = load()
        .ok()
        .is_some_and(|api| api.device_count().is_ok_and(|n| n > 0));
    if !present {
        skip_cuda("no CUDA device");
    } else if let Err(e) = {
        // The GPU route's rows first: the ones a capped run is likeliest to be after.
        println!("CUDA device 0, the GPU service:");
        service_bench(load, &service).and_then(|()| bench(load, "CUDA device 0", &gpu))
    } {
        eprintln!("CUDA bench failed: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda() {
    skip_cuda("no CUDA device");
}
