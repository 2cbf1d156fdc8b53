//! `tandem demo`: kernels on every device (or those `--devices` names) send
//! tasks to the CPU workers and to their devices' services at the same
//! time, and to another device's service over a peer route; the blob store's
//! kernels put and get; stop flags release every device's waiting kernels.
//! Per-device figures and a total, then one verdict line.

use std::process::ExitCode;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use tandem_blob::{BlobStore, StoreConfig};
use tandem_hal::{numa::format_cpu_list, GpuApi, GpuDevice};
use tandem_runtime::kernels::{
    expected_add_sum, EchoLaunch, EchoOutcome, EchoPriority, EchoRoute, RuntimeKernels,
    ECHO_NO_PEER_ACCESS,
};
use tandem_runtime::{
    math, on_best_backend, Backend, Config, DeviceQueues, DeviceSelection, GpuService, OnBackend,
    PeerAccess, Registry, Route, Runtime,
};

use crate::{blob, stdout};

/// `tandem demo`'s options.
#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Prints the figures as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// The devices to run on, by ordinal (`0,1`); default: every device.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    devices: Option<Vec<usize>>,
}

/// What names `tandem demo`'s temporary blob store
/// ([`tandem_runtime::owned_temp_prefix`]), which `tandem clean` removes
/// once its owner is gone.
pub(crate) const DEMO_STORE_KIND: &str = "demo-blob";

/// `rt_status::stopped` (tandem/runtime/context.h): a thread released by
/// its stop flag.
const RT_STOPPED: u32 = 7;

/// Percentile `p` (0..=100) of sorted `values`.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Microseconds, for reports.
fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What a kernel launch of the demo did.
#[derive(Serialize)]
struct LaunchReport {
    blocks: u32,
    threads: u32,
    tasks_per_thread: u64,
    tasks: u64,
    seconds: f64,
    tasks_per_second: f64,
    /// Threads whose tasks failed (a nonzero return code or a wait error).
    failed_threads: usize,
    /// Threads whose answers did not add up.
    wrong_answers: usize,
}

impl LaunchReport {
    fn of(launch: &EchoLaunch, outcome: &EchoOutcome) -> Self {
        let tasks = outcome.results.len() as u64 * launch.tasks_per_thread;
        let wrong_answers = outcome
            .results
            .iter()
            .enumerate()
            .filter(|(r, &sum)| sum != expected_add_sum(*r as u64, launch.tasks_per_thread))
            .count();
        Self {
            blocks: launch.blocks,
            threads: launch.threads,
            tasks_per_thread: launch.tasks_per_thread,
            tasks,
            seconds: outcome.elapsed.as_secs_f64(),
            tasks_per_second: tasks as f64 / outcome.elapsed.as_secs_f64(),
            failed_threads: outcome.failed_threads(),
            wrong_answers,
        }
    }

    fn failures(&self) -> u64 {
        (self.failed_threads + self.wrong_answers) as u64
    }
}

/// Launches that ran at the same time on several devices, added up: their
/// tasks over the time from the first launch to the last one's end.
#[derive(Serialize)]
struct TotalReport {
    devices: usize,
    tasks: u64,
    seconds: f64,
    tasks_per_second: f64,
    failed_threads: usize,
    wrong_answers: usize,
}

impl TotalReport {
    fn of<'a>(launches: impl IntoIterator<Item = &'a LaunchReport>, wall: Duration) -> Self {
        let mut total = Self {
            devices: 0,
            tasks: 0,
            seconds: wall.as_secs_f64(),
            tasks_per_second: 0.0,
            failed_threads: 0,
            wrong_answers: 0,
        };
        for launch in launches {
            total.devices += 1;
            total.tasks += launch.tasks;
            total.failed_threads += launch.failed_threads;
            total.wrong_answers += launch.wrong_answers;
        }
        total.tasks_per_second = total.tasks as f64 / total.seconds;
        total
    }

    fn failures(&self) -> u64 {
        (self.failed_threads + self.wrong_answers) as u64
    }
}

/// Round-trip percentiles, in microseconds.
#[derive(Serialize)]
struct Latency {
    samples: usize,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    min_us: f64,
    max_us: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        let at = |p| micros(percentile(&samples, p));
        Self {
            samples: samples.len(),
            p50_us: at(50.0),
            p90_us: at(90.0),
            p99_us: at(99.0),
            min_us: at(0.0),
            max_us: at(100.0),
        }
    }
}

/// One device's part of `tandem demo --json`.
#[derive(Serialize)]
struct DeviceReport {
    ordinal: usize,
    name: String,
    /// Workers serving its lanes, and the CPUs they run on (empty: any).
    workers: usize,
    worker_cpus: Vec<u32>,
    /// Its kernel's threads sending tasks to its CPU workers.
    to_workers: LaunchReport,
    /// One kernel thread's round trip per task, as its clock saw it (no
    /// launch in it).
    kernel_round_trip: Latency,
    /// One empty kernel's launch + sync, in microseconds.
    launch_and_sync_us: f64,
    /// Its kernel's threads sending tasks to its service.
    to_service: LaunchReport,
    /// A host thread's round trip to its service.
    host_to_service_round_trip: Latency,
    /// Tasks its service ran.
    service_ran: u64,
    /// Threads of the last kernel that its stop flag released.
    stopped_threads: usize,
}

/// A kernel on one device sending to another device's service.
#[derive(Serialize)]
struct PeerReport {
    from: usize,
    to: usize,
    /// "direct", or "unreachable" (every thread told so, nothing sent).
    access: &'static str,
    launch: LaunchReport,
}

/// `tandem demo --json`: the figures the text report prints.
#[derive(Serialize)]
struct DemoReport {
    /// The backend it ran on, in words.
    backend: String,
    /// "CPU device" or "GPU".
    device: &'static str,
    /// Worker threads in all.
    workers: usize,
    /// Every device's kernels sending to the CPU workers at once, added up.
    to_workers: TotalReport,
    /// The workers' counters after those launches: every task they took,
    /// and those that failed.
    workers_completed: u64,
    workers_failed: u64,
    /// Every device's kernels sending to their own services at once.
    to_services: TotalReport,
    devices: Vec<DeviceReport>,
    /// Kernels sending to another device's service (two devices or more).
    peers: Vec<PeerReport>,
    /// A host thread's round trip through the CPU queues.
    host_round_trip: Latency,
    /// The blob part: kernel puts, kernel and host gets, failures.
    blob_puts: u64,
    blob_gets: u64,
    blob_failed: u64,
    /// Every task the demo sent and saw answered, and those that failed or
    /// answered wrong (a thread its stop flag did not release counts too).
    tasks: u64,
    failed: u64,
    ok: bool,
}

/// Host round trips of `count` `math.add(i, b)` tasks through `submit`; the
/// failures (errors and wrong answers) are counted, the first one logged.
fn host_round_trips<E: std::fmt::Display>(
    count: u64,
    b: u64,
    what: &str,
    mut submit: impl FnMut(&math::Add) -> Result<u64, E>,
) -> (Vec<Duration>, u64) {
    let mut times = Vec::with_capacity(count as usize);
    let mut failed = 0;
    for a in 0..count {
        let start = Instant::now();
        let answer = submit(&math::Add { a, b });
        times.push(start.elapsed());
        let why = match answer {
            Ok(sum) if sum == a + b => continue,
            Ok(sum) => format!("returned {sum}"),
            Err(e) => e.to_string(),
        };
        if failed == 0 {
            tracing::warn!("{what}: add({a}, {b}) {why}");
        }
        failed += 1;
    }
    (times, failed)
}

/// Runs `launch` on every device's kernels at once; the outcomes in device
/// order and the time from before the first launch to after the last.
fn echo_on_every_device<A: GpuApi>(
    kernels: &mut [RuntimeKernels<'_, A>],
    launch: &EchoLaunch,
) -> Result<(Vec<EchoOutcome>, Duration), String> {
    let start = Instant::now();
    let outcomes = std::thread::scope(|s| {
        let running: Vec<_> = kernels
            .iter_mut()
            .map(|k| s.spawn(move || k.echo(launch)))
            .collect();
        running
            .into_iter()
            .map(|t| match t.join() {
                Ok(outcome) => outcome.map_err(|e| e.to_string()),
                Err(_) => Err("a launch thread panicked".to_string()),
            })
            .collect::<Result<Vec<_>, String>>()
    })?;
    Ok((outcomes, start.elapsed()))
}

/// "1 device", "2 devices".
fn devices_word(n: usize) -> String {
    if n == 1 {
        "1 device".into()
    } else {
        format!("{n} devices")
    }
}

/// Two distinct elements of `items`, both mutably.
fn pair_mut<T>(items: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    assert_ne!(a, b, "two distinct elements");
    if a < b {
        let (low, high) = items.split_at_mut(b);
        (&mut low[a], &mut high[0])
    } else {
        let (low, high) = items.split_at_mut(a);
        (&mut high[0], &mut low[b])
    }
}

/// "device 0 (NAME, 4 workers on CPUs 0-15)".
fn describe<A: GpuApi>(queues: &DeviceQueues<A>) -> String {
    let cpus = if queues.worker_cpus().is_empty() {
        "any CPU".to_string()
    } else {
        format!("CPUs {}", format_cpu_list(queues.worker_cpus()))
    };
    format!(
        "device {} ({}, {} worker{} on {cpus})",
        queues.device().ordinal(),
        queues.properties().name,
        queues.workers(),
        if queues.workers() == 1 { "" } else { "s" }
    )
}

impl OnBackend for DemoArgs {
    /// `Ok(false)`: it ran, and reported a failure itself.
    type Output = Result<bool, String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        demo(api, backend.describe(), &self)
    }
}

/// `tandem demo` on the best backend: its verdict line (text) or report
/// (JSON); exit 1 when anything failed.
pub(crate) fn demo_command(args: DemoArgs) -> ExitCode {
    let json = args.json;
    match on_best_backend(args).map_err(|e| e.to_string()) {
        Ok(Ok(true)) => ExitCode::SUCCESS,
        Ok(Ok(false)) => ExitCode::from(1),
        Ok(Err(why)) | Err(why) => {
            eprintln!("tandem: {why}");
            if !json {
                stdout::print_line(&format!("demo: FAILED: {why}"));
            }
            ExitCode::from(1)
        }
    }
}

/// The demo; `Ok(false)` when tasks failed (the report says so).
pub(crate) fn demo<A: GpuApi>(api: A, backend: &str, args: &DemoArgs) -> Result<bool, String> {
    let json = args.json;
    let gpu = A::BACKEND != tandem_hal::Backend::Host;
    // Words for what runs where: "GPU service" on a CPU device would say
    // something that did not happen.
    let (device_word, service) = if gpu {
        ("GPU", "GPU service (a persistent kernel on the GPU)")
    } else {
        (
            "CPU device",
            "device service (a persistent kernel on the CPU device)",
        )
    };
    let say = |line: String| {
        if !json {
            stdout::print_line(&line);
        }
    };
    let devices_asked = match &args.devices {
        Some(list) => list.len(),
        None => api.device_count().map_err(|e| e.to_string())?,
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let config = Config {
        devices: args
            .devices
            .clone()
            .map_or(DeviceSelection::All, DeviceSelection::Only),
        // The default worker count for each device, as far as the cores go:
        // more devices, more workers.
        workers_per_device: Some(
            (cores / devices_asked.max(1)).clamp(1, Config::default().workers),
        ),
        // The blob part's tasks carry names; its kernel threads' data
        // buffers live in the device segment.
        copy_space: tandem_blob::wire::COPY_SPACE,
        gpu_segment_size: 96 << 20,
        ..Config::default()
    };
    // The blob part's store: a RAM and a file target in a temporary folder,
    // removed at the end.
    let store_dir = tempfile::Builder::new()
        // Names its owner: `tandem clean` removes what a killed demo left.
        .prefix(&tandem_runtime::owned_temp_prefix(DEMO_STORE_KIND))
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let store = Arc::new(
        BlobStore::open(&StoreConfig::ram_and_file(store_dir.path(), 64 << 20))
            .map_err(|e| format!("opening the demo's blob store: {e}"))?,
    );
    let mut registry = Registry::with_builtins();
    tandem_blob::pool::register(&mut registry, Arc::clone(&store)).map_err(|e| e.to_string())?;
    say(format!("tandem demo on {backend}"));
    // Kernels in flight cannot be interrupted: on SIGINT/SIGTERM, remove the
    // named segments and the store's folder, and exit.
    let folder = store_dir.path().to_owned();
    tandem_process::exit_on_termination(move || {
        let _ = std::fs::remove_dir_all(folder);
    })
    .map_err(|e| e.to_string())?;
    let runtime = Runtime::start_with(api, config, registry)
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let devices = runtime.devices();
    if devices.is_empty() {
        return Err("no device to run the demo's kernels on".into());
    }
    // Every module is loaded before any service starts: a service spinning
    // on its device would hold up a lazy load there.
    let mut kernels = devices
        .iter()
        .map(RuntimeKernels::load)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    // Real GPUs take many threads; the CPU device runs the grid on a few
    // cores, so it gets a smaller grid.
    let launch = EchoLaunch {
        blocks: if gpu { 264 } else { 8 },
        threads: if gpu { 128 } else { 16 },
        tasks_per_thread: if gpu { 64 } else { 200 },
        method: math::ADD,
        priority: EchoPriority::Alternate,
        route: EchoRoute::CpuWorkers,
        spin_budget: 1 << 40,
    };
    say(format!(
        "kernels on {} ({device_word}) at once, each {} blocks x {} threads:\n  \
         every thread sends {} math.add tasks to its device's CPU workers, waiting for each",
        devices_word(devices.len()),
        launch.blocks,
        launch.threads,
        launch.tasks_per_thread,
    ));
    let (outcomes, wall) = echo_on_every_device(&mut kernels, &launch)?;
    let to_workers: Vec<LaunchReport> = outcomes
        .iter()
        .map(|o| LaunchReport::of(&launch, o))
        .collect();
    for (queues, report) in devices.iter().zip(&to_workers) {
        say(format!(
            "  {}:\n    {} tasks in {:.3} s, {:.2} M tasks/s; {} threads failed, {} wrong answers",
            describe(queues),
            report.tasks,
            report.seconds,
            report.tasks_per_second / 1e6,
            report.failed_threads,
            report.wrong_answers
        ));
    }
    let to_workers_total = TotalReport::of(&to_workers, wall);
    let stats = runtime.stats();
    say(format!(
        "  {} in all: {} tasks in {:.3} s, {:.2} M tasks/s\n  \
         the workers completed {} tasks ({} with errors)",
        devices_word(to_workers_total.devices),
        to_workers_total.tasks,
        to_workers_total.seconds,
        to_workers_total.tasks_per_second / 1e6,
        stats.completed,
        stats.failed
    ));

    // One kernel thread's round trip, as its own clock saw it (rank 0's
    // phases: the launch is not in it), device by device, and what a kernel
    // launch + sync costs there: what a persistent kernel saves per request.
    let single = EchoLaunch {
        blocks: 1,
        threads: 1,
        tasks_per_thread: 1000,
        // High alone: a low-priority task waits for the workers' turn at
        // the low rings, which a round trip should not measure.
        priority: EchoPriority::High,
        ..launch
    };
    const SINGLE_LAUNCHES: u32 = 5;
    say(format!(
        "one kernel thread's round trip per task, as its clock saw it ({SINGLE_LAUNCHES} launches \
         of {}),\n  and a kernel launch + sync for comparison:",
        single.tasks_per_thread
    ));
    let mut kernel_round_trips = Vec::new();
    let mut launch_and_sync = Vec::new();
    let mut single_failed = 0u64;
    for (queues, k) in devices.iter().zip(&mut kernels) {
        let mut per_task = Vec::new();
        for _ in 0..SINGLE_LAUNCHES {
            let (o, phases) = k.echo_with_phases(&single).map_err(|e| e.to_string())?;
            single_failed += LaunchReport::of(&single, &o).failures();
            per_task.push(phases.make + phases.send + phases.wait + phases.output);
        }
        let latency = Latency::of(per_task);
        let launch = k.launch_and_sync(100).map_err(|e| e.to_string())?;
        say(format!(
            "  device {}: p50 {:.2} us, min {:.2} us; a launch + sync {:.1} us",
            queues.device().ordinal(),
            latency.p50_us,
            latency.min_us,
            micros(launch)
        ));
        kernel_round_trips.push(latency);
        launch_and_sync.push(micros(launch));
    }

    // Per-task latency percentiles of a host submitter on the CPU queues.
    let stop = AtomicU32::new(0);
    let (host, host_failed) = host_round_trips(2000, 1, "host task", |task| {
        runtime
            .submit(Route::lane(0), task)
            .and_then(|mut p| p.wait(&stop, None))
    });
    let host_round_trip = Latency::of(host);
    say(format!(
        "host thread's round trip through the CPU queues (2000 tasks):\n  \
         p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, max {:.1} us",
        host_round_trip.p50_us,
        host_round_trip.p90_us,
        host_round_trip.p99_us,
        host_round_trip.max_us
    ));

    // Tasks routed to the devices: each device's service (a persistent
    // kernel) runs them, from its kernels and from the host, and from
    // another device's kernels over a peer route.
    // On a GPU, a quarter of the multiprocessors, 128 threads each: the
    // kernels' tasks split evenly among the service's threads.
    let service_shape = |queues: &DeviceQueues<_>| {
        if gpu {
            ((queues.properties().multiprocessor_count / 4).max(1), 128)
        } else {
            (1, 4)
        }
    };
    let (service_blocks, service_threads) = devices.first().map_or((1, 4), service_shape);
    let services = devices
        .iter()
        .map(|queues| {
            let (blocks, threads) = service_shape(queues);
            GpuService::start(queues, blocks, threads)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let to_gpu = EchoLaunch {
        blocks: if gpu { 132 } else { 4 },
        threads: if gpu { 64 } else { 8 },
        tasks_per_thread: if gpu { 16 } else { 50 },
        route: EchoRoute::GpuService,
        ..launch
    };
    say(format!(
        "{service} on each device, {service_blocks} x {service_threads} threads;\n  \
         kernels of {} x {} threads on every device at once, each thread sending {} math.add\n  \
         tasks to its own device's service:",
        to_gpu.blocks, to_gpu.threads, to_gpu.tasks_per_thread
    ));
    let (routed, wall) = echo_on_every_device(&mut kernels, &to_gpu)?;
    let to_service: Vec<LaunchReport> = routed
        .iter()
        .map(|o| LaunchReport::of(&to_gpu, o))
        .collect();
    let mut host_to_service = Vec::new();
    let mut host_to_service_failed = 0;
    for (d, (queues, report)) in devices.iter().zip(&to_service).enumerate() {
        let (times, failed) = host_round_trips(500, 2, service, |task| {
            runtime
                .submit_to_gpu(d, task, None)
                .and_then(|mut p| p.wait(&stop, None))
        });
        host_to_service_failed += failed;
        let latency = Latency::of(times);
        say(format!(
            "  device {}: {} tasks in {:.3} s ({:.2} M tasks/s), {} threads failed, {} wrong answers\n    \
             host round trip to the service (500 tasks): p50 {:.1} us, p90 {:.1} us",
            queues.device().ordinal(),
            report.tasks,
            report.seconds,
            report.tasks_per_second / 1e6,
            report.failed_threads,
            report.wrong_answers,
            latency.p50_us,
            latency.p90_us
        ));
        host_to_service.push(latency);
    }
    let to_services_total = TotalReport::of(&to_service, wall);
    say(format!(
        "  {} in all: {} tasks in {:.3} s, {:.2} M tasks/s",
        devices_word(to_services_total.devices),
        to_services_total.tasks,
        to_services_total.seconds,
        to_services_total.tasks_per_second / 1e6
    ));
    let mut peers = Vec::new();
    if devices.len() > 1 {
        say("kernels sending to the next device's service over a peer route:".into());
    }
    for from in 0..devices.len() {
        let to = (from + 1) % devices.len();
        if to == from {
            continue;
        }
        let route = runtime.peer_route(from, to).map_err(|e| e.to_string())?;
        let (senders, servers) = pair_mut(&mut kernels, from, to);
        let outcome = senders
            .echo_via_peer(servers, &route, &to_gpu)
            .map_err(|e| e.to_string())?;
        let report = LaunchReport::of(&to_gpu, &outcome);
        let access = match route.access {
            PeerAccess::Direct => "direct",
            PeerAccess::Unreachable => "unreachable",
        };
        if route.access == PeerAccess::Direct {
            say(format!(
                "  device {} -> device {}'s service (peer access):\n    \
                 {} tasks in {:.3} s ({:.2} M tasks/s), {} threads failed, {} wrong answers",
                route.from,
                route.to,
                report.tasks,
                report.seconds,
                report.tasks_per_second / 1e6,
                report.failed_threads,
                report.wrong_answers
            ));
        } else {
            let told = outcome
                .status
                .iter()
                .filter(|&&s| s == ECHO_NO_PEER_ACCESS)
                .count();
            say(format!(
                "  device {} -> device {}: no peer access; {told} of {} threads told so, none sent",
                route.from,
                route.to,
                outcome.status.len()
            ));
        }
        peers.push(PeerReport {
            from: route.from,
            to: route.to,
            access,
            launch: report,
        });
    }
    let mut service_ran = Vec::new();
    for (queues, running) in devices.iter().zip(services) {
        let served = running.stop().map_err(|e| e.to_string())?;
        say(format!(
            "  device {}'s service ran {} tasks",
            queues.device().ordinal(),
            served.served
        ));
        service_ran.push(served.served);
    }

    // The blob store, a pool of this runtime: kernel threads put and get
    // blobs of their own, the host checks them (after the services stopped:
    // it loads a module).
    say("blob store (a pool of this runtime; RAM and file targets):".to_string());
    let blob = blob::demo_part(&runtime, &store, gpu, &|line| say(format!("  {line}")))?;

    // Stop flags: kernels on every device wait for tasks no service serves
    // (the services are stopped) until the host raises each device's stop
    // flag.
    let waiting = EchoLaunch {
        blocks: if gpu { 8 } else { 2 },
        threads: if gpu { 64 } else { 4 },
        tasks_per_thread: 1,
        method: math::NOOP,
        route: EchoRoute::GpuService,
        ..launch
    };
    let stopped = std::thread::scope(|s| {
        let running: Vec<_> = kernels
            .iter_mut()
            .map(|k| s.spawn(move || k.echo(&waiting)))
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        for queues in devices {
            queues.raise_stop();
        }
        running
            .into_iter()
            .map(|t| match t.join() {
                Ok(outcome) => outcome
                    .map(|o| o.status.iter().filter(|&&s| s == RT_STOPPED).count())
                    .map_err(|e| e.to_string()),
                Err(_) => Err("a launch thread panicked".to_string()),
            })
            .collect::<Result<Vec<usize>, String>>()
    })?;
    for queues in devices {
        queues.clear_stop();
    }
    let waiting_threads = (waiting.blocks * waiting.threads) as usize;
    let not_released: u64 = stopped
        .iter()
        .map(|&n| (waiting_threads - n.min(waiting_threads)) as u64)
        .sum();
    say(format!(
        "stop flags: kernels of {waiting_threads} threads on each device wait on tasks nobody serves;\n  \
         raising each device's stop flag released {} of {}",
        stopped.iter().sum::<usize>(),
        waiting_threads * devices.len()
    ));

    drop(kernels);
    let workers = runtime.workers();
    // Each device's figures, in device order.
    let mut to_workers = to_workers.into_iter();
    let mut kernel_round_trips = kernel_round_trips.into_iter();
    let mut to_service = to_service.into_iter();
    let mut host_to_service = host_to_service.into_iter();
    let mut device_reports = Vec::with_capacity(devices.len());
    for (d, queues) in devices.iter().enumerate() {
        let next = "one figure per device";
        device_reports.push(DeviceReport {
            ordinal: queues.device().ordinal(),
            name: queues.properties().name.clone(),
            workers: queues.workers(),
            worker_cpus: queues.worker_cpus().to_vec(),
            to_workers: to_workers.next().expect(next),
            kernel_round_trip: kernel_round_trips.next().expect(next),
            launch_and_sync_us: launch_and_sync[d],
            to_service: to_service.next().expect(next),
            host_to_service_round_trip: host_to_service.next().expect(next),
            service_ran: service_ran[d],
            stopped_threads: stopped[d],
        });
    }
    runtime.shutdown().map_err(|e| e.to_string())?;

    let peer_tasks: u64 = peers
        .iter()
        .filter(|p| p.access == "direct")
        .map(|p| p.launch.tasks)
        .sum();
    let peer_failed: u64 = peers
        .iter()
        .filter(|p| p.access == "direct")
        .map(|p| p.launch.failures())
        .sum();
    // Counted as the lines above show them: the tasks sent to the CPU
    // workers, to the devices' services (from their own kernels, the host,
    // and other devices' kernels), and the blob puts and gets. The runtime's
    // own count, logged at its stop, is what its workers ran: neither the
    // services' tasks nor the blob kernels'.
    let to_cpu_workers = to_workers_total.tasks
        + u64::from(SINGLE_LAUNCHES) * single.tasks_per_thread * device_reports.len() as u64
        + host_round_trip.samples as u64;
    let to_services = to_services_total.tasks
        + device_reports
            .iter()
            .map(|d| d.host_to_service_round_trip.samples as u64)
            .sum::<u64>()
        + peer_tasks;
    let blob_calls = blob.puts + blob.gets;
    let tasks = to_cpu_workers + to_services + blob_calls;
    let failed = to_workers_total.failures()
        + single_failed
        + host_failed
        + to_services_total.failures()
        + host_to_service_failed
        + peer_failed
        + blob.failed
        + not_released;
    let ok = failed == 0;
    if json {
        let report = DemoReport {
            backend: backend.to_string(),
            device: device_word,
            workers,
            to_workers: to_workers_total,
            workers_completed: stats.completed,
            workers_failed: stats.failed,
            to_services: to_services_total,
            devices: device_reports,
            peers,
            host_round_trip,
            blob_puts: blob.puts,
            blob_gets: blob.gets,
            blob_failed: blob.failed,
            tasks,
            failed,
            ok,
        };
        stdout::print_line(&serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        let verdict = if ok { "ok" } else { "FAILED" };
        stdout::print_line(&format!(
            "demo: {tasks} tasks ({to_cpu_workers} to workers, {to_services} to services, \
             {blob_calls} blob calls), {failed} failed: {verdict}"
        ));
    }
    Ok(ok)
}
