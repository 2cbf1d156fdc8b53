//! `tandem`: Tandem's command-line entry point (`tandem --help`).
//!
//! * `tandem demo [--json]`: starts a runtime on the best backend (CUDA when
//!   compiled in and a device is present, else the CPU device), launches a
//!   kernel whose threads send tasks to the CPU workers and wait, and reports
//!   tasks, errors, throughput and latency, ending with one verdict line.
//! * `tandem run [--config FILE] [--announce] [--exit-on-stdin-eof]`: serves
//!   a runtime until SIGINT/SIGTERM (or until stdin closes), then removes its
//!   segments. `--announce` prints
//!   `ready <cpu segment> <pid>` on stdout once serving (what
//!   `Client::fork_runtime` waits for).
//! * `tandem info [--json]`: lists backends and devices.
//! * `tandem status [--segment NAME] [--json]`: what a running runtime's
//!   status block says.
//! * `tandem clean [--dry-run]`: removes Tandem segments in `/dev/shm` whose
//!   owner process is gone.
//! * `tandem blob run|put|get|ls|stat|rm|demo ...`: the blob store's
//!   commands (`blob.rs`): a runtime serving the blob pool, a store looked
//!   at directly, kernels putting and getting blobs.
//!
//! Results go to stdout; logs (`tracing`, filtered by `RUST_LOG`, default
//! `info`) to stderr. Usage errors exit 2.

mod blob;
mod share;
mod stdout;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use tandem_blob::{BlobStore, StoreConfig};
use tandem_hal::{GpuApi, GpuDevice, HostApi};
use tandem_runtime::kernels::{
    expected_add_sum, EchoLaunch, EchoOutcome, EchoPriority, EchoRoute, RuntimeKernels,
};
use tandem_runtime::status::{read_status, single_live_runtime, StatusSnapshot};
use tandem_runtime::{
    clean_stale_segments, clean_stale_temp_folders, init_logging, math, on_best_backend,
    owned_temp_prefix, serve, Backend, Config, DeviceSelection, GpuService, OnBackend, Registry,
    Route, Runtime, ServeOptions,
};

/// Tandem: host threads and GPU kernels sharing memory and work.
#[derive(Parser, Debug)]
#[command(name = "tandem", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// One variant and one function per subcommand.
#[derive(Subcommand, Debug)]
enum Command {
    /// Runs kernels that send tasks to CPU workers and to the device's
    /// service, and reports what happened.
    Demo(DemoArgs),
    /// Serves a runtime that host clients attach to, until killed.
    Run(RunArgs),
    /// Lists the backends compiled in, their devices and properties.
    Info(InfoArgs),
    /// Asks a running runtime (through its CPU segment) what it is doing.
    Status(StatusArgs),
    /// Removes Tandem segments in /dev/shm whose owner process is gone, and
    /// the temporary folders of demos that were killed.
    Clean(CleanArgs),
    /// The blob store: serve it, look at it, run its demo.
    #[command(subcommand)]
    Blob(blob::BlobCommand),
    /// Shared buffers between processes: the daemon and a look at it.
    #[command(subcommand)]
    Share(share::ShareCommand),
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Prints the figures as one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// `tandem run`'s options.
#[derive(Args, Debug)]
struct RunArgs {
    /// A TOML configuration (see tandem.example.toml); defaults otherwise.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Prints `ready <cpu segment> <pid>` on stdout once serving.
    #[arg(long)]
    announce: bool,
    /// Stops (cleanly) when stdin closes, e.g. when the parent dies.
    #[arg(long)]
    exit_on_stdin_eof: bool,
}

#[derive(Args, Debug)]
struct InfoArgs {
    /// Prints the backends and devices as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// The runtime's CPU segment (in /dev/shm); default: the one live runtime.
    #[arg(long, value_name = "NAME")]
    segment: Option<String>,
    /// Prints the status as JSON (the schema in the README).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct CleanArgs {
    /// Lists what would be removed, and removes nothing.
    #[arg(long)]
    dry_run: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    // Services and demos hold segments and folders that a SIGPIPE would
    // leave behind; the others print and exit.
    let holds_resources = matches!(
        &cli.command,
        Command::Demo(_)
            | Command::Run(_)
            | Command::Blob(blob::BlobCommand::Run(_) | blob::BlobCommand::Demo(_))
            | Command::Share(share::ShareCommand::Serve(_))
    );
    if !holds_resources {
        stdout::end_quietly_when_the_reader_leaves();
    }
    match cli.command {
        Command::Demo(args) => demo_command(args),
        Command::Run(args) => report(run_on_best_backend(BackendCommand::Run(args)).map(drop)),
        Command::Info(args) => report(info(args)),
        Command::Status(args) => report(status(args)),
        Command::Clean(args) => report(clean(args)),
        Command::Blob(command) => blob::run(command),
        Command::Share(command) => share::run(command),
    }
}

fn report(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("tandem: {why}");
            ExitCode::from(1)
        }
    }
}

/// What names `tandem demo`'s temporary blob store ([`owned_temp_prefix`]).
const DEMO_STORE_KIND: &str = "demo-blob";

/// `tandem clean`: one line per stale segment and per temporary folder of a
/// killed demo, then counts.
fn clean(args: CleanArgs) -> Result<(), String> {
    let stale = clean_stale_segments(args.dry_run).map_err(|e| e.to_string())?;
    let folders = clean_stale_temp_folders(&[DEMO_STORE_KIND, blob::DEMO_STORE_KIND], args.dry_run)
        .map_err(|e| format!("cleaning {}: {e}", std::env::temp_dir().display()))?;
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for segment in &stale {
        println!("{verb} /dev/shm/{segment}");
    }
    for folder in &folders {
        println!("{verb} {} (a killed demo's store)", folder.display());
    }
    println!(
        "{verb} {} stale segment(s), {} stale folder(s)",
        stale.len(),
        folders.len()
    );
    Ok(())
}

enum BackendCommand {
    Demo(DemoArgs),
    Run(RunArgs),
}

impl OnBackend for BackendCommand {
    /// `Ok(false)`: it ran, and reported a failure itself.
    type Output = Result<bool, String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        match self {
            BackendCommand::Demo(args) => demo(api, &backend.to_string(), args.json),
            BackendCommand::Run(args) => {
                let config = match &args.config {
                    Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
                    None => Config::default(),
                };
                let options = ServeOptions {
                    announce: args.announce,
                    exit_on_stdin_eof: args.exit_on_stdin_eof,
                };
                serve(api, backend, config, Registry::with_builtins(), options)
                    .map_err(|e| format!("serving the runtime: {e}"))?;
                Ok(true)
            }
        }
    }
}

/// Runs `command` on the best backend; `Ok(false)`: it ran, and reported a
/// failure itself.
fn run_on_best_backend(command: BackendCommand) -> Result<bool, String> {
    on_best_backend(command).map_err(|e| e.to_string())?
}

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

/// `tandem demo --json`: the figures the text report prints.
#[derive(Serialize)]
struct DemoReport {
    /// The backend it ran on, in words.
    backend: String,
    /// "CPU device" or "GPU".
    device: &'static str,
    workers: usize,
    /// Kernel threads sending tasks to the CPU workers.
    to_workers: LaunchReport,
    /// The workers' counters after that launch.
    workers_completed: u64,
    workers_failed: u64,
    /// One kernel thread's round trip per task (launch included).
    kernel_round_trip: Latency,
    /// A host thread's round trip through the CPU queues.
    host_round_trip: Latency,
    /// The device's service (a persistent kernel).
    service_threads: u32,
    to_service: LaunchReport,
    host_to_service_round_trip: Latency,
    service_ran: u64,
    /// The blob part: kernel puts, kernel and host gets, failures.
    blob_puts: u64,
    blob_gets: u64,
    blob_failed: u64,
    /// Every task the demo sent, and those that failed or answered wrong.
    tasks: u64,
    failed: u64,
    ok: bool,
}

/// Runs the demo and prints its verdict line (text) or report (JSON);
/// exit 1 when anything failed.
fn demo_command(args: DemoArgs) -> ExitCode {
    let json = args.json;
    match run_on_best_backend(BackendCommand::Demo(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(why) => {
            eprintln!("tandem: {why}");
            if !json {
                println!("demo: FAILED: {why}");
            }
            ExitCode::from(1)
        }
    }
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

/// The demo; `Ok(false)` when tasks failed (the report says so).
fn demo<A: GpuApi>(api: A, backend: &str, json: bool) -> Result<bool, String> {
    let gpu = A::BACKEND != tandem_hal::Backend::Host;
    // Words for what runs where: "GPU service" on a CPU device would say
    // something that did not happen.
    let (device, service) = if gpu {
        ("GPU", "GPU service (a persistent kernel on the GPU)")
    } else {
        (
            "CPU device",
            "device service (a persistent kernel on the CPU device)",
        )
    };
    let say = |line: String| {
        if !json {
            println!("{line}");
        }
    };
    let config = Config {
        devices: DeviceSelection::Only(vec![0]),
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
        .prefix(&owned_temp_prefix(DEMO_STORE_KIND))
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
    tandem_runtime::exit_on_termination(move || {
        let _ = std::fs::remove_dir_all(folder);
    })
    .map_err(|e| e.to_string())?;
    let runtime = Runtime::start_with(api, config, registry)
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let queues = &runtime.devices()[0];
    let mut kernels = RuntimeKernels::load(queues).map_err(|e| e.to_string())?;
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
        "kernel on the {device}: {} blocks x {} threads, each sending {} math.add tasks\n  \
         to {} CPU workers and waiting for each answer",
        launch.blocks,
        launch.threads,
        launch.tasks_per_thread,
        runtime.workers()
    ));
    let outcome = kernels.echo(&launch).map_err(|e| e.to_string())?;
    let to_workers = LaunchReport::of(&launch, &outcome);
    let stats = runtime.stats();
    say(format!(
        "  {} tasks in {:.3} s: {:.2} M tasks/s; {} threads failed, {} wrong answers\n  \
         workers completed {} tasks ({} with errors)",
        to_workers.tasks,
        to_workers.seconds,
        to_workers.tasks_per_second / 1e6,
        to_workers.failed_threads,
        to_workers.wrong_answers,
        stats.completed,
        stats.failed
    ));

    // Latency of one kernel thread's round trips, batch by batch.
    let single = EchoLaunch {
        blocks: 1,
        threads: 1,
        tasks_per_thread: 200,
        ..launch
    };
    let mut per_task = Vec::new();
    let mut single_failed = 0u64;
    for _ in 0..25 {
        let o = kernels.echo(&single).map_err(|e| e.to_string())?;
        single_failed += LaunchReport::of(&single, &o).failures();
        per_task.push(o.elapsed / single.tasks_per_thread as u32);
    }
    let kernel_round_trip = Latency::of(per_task);
    say(format!(
        "one kernel thread's round trip per task (25 launches of 200, launch included):\n  \
         p50 {:.1} us, p90 {:.1} us, min {:.1} us",
        kernel_round_trip.p50_us, kernel_round_trip.p90_us, kernel_round_trip.min_us
    ));

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

    // Tasks routed to the device: its service (a persistent kernel) runs
    // them, from kernels and from the host.
    let service_threads = if gpu { 64 } else { 4 };
    let service_handle =
        GpuService::start(queues, 1, service_threads).map_err(|e| e.to_string())?;
    let to_gpu = EchoLaunch {
        blocks: if gpu { 132 } else { 4 },
        threads: if gpu { 64 } else { 8 },
        tasks_per_thread: if gpu { 16 } else { 50 },
        route: EchoRoute::GpuService,
        ..launch
    };
    let routed = kernels.echo(&to_gpu).map_err(|e| e.to_string())?;
    let to_service = LaunchReport::of(&to_gpu, &routed);
    let (host_to_gpu, host_to_gpu_failed) = host_round_trips(500, 2, service, |task| {
        runtime
            .submit_to_gpu(0, task, None)
            .and_then(|mut p| p.wait(&stop, None))
    });
    let served = service_handle.stop().map_err(|e| e.to_string())?;
    let host_to_service_round_trip = Latency::of(host_to_gpu);
    say(format!(
        "{service}, {service_threads} threads:\n  \
         kernel of {} x {} threads sent {} math.add tasks in {:.3} s ({:.2} M tasks/s);\n  \
         {} threads failed, {} wrong answers\n  \
         host round trip to the service (500 tasks): p50 {:.1} us, p90 {:.1} us\n  \
         the service ran {} tasks",
        to_gpu.blocks,
        to_gpu.threads,
        to_service.tasks,
        to_service.seconds,
        to_service.tasks_per_second / 1e6,
        to_service.failed_threads,
        to_service.wrong_answers,
        host_to_service_round_trip.p50_us,
        host_to_service_round_trip.p90_us,
        served.served
    ));
    drop(kernels);

    // The blob store, a pool of this runtime: kernel threads put and get
    // blobs of their own, the host checks them (after the service stopped:
    // it loads a module).
    say("blob store (a pool of this runtime; RAM and file targets):".to_string());
    let blob = blob::demo_part(&runtime, &store, gpu, &|line| say(format!("  {line}")))?;
    let workers = runtime.workers();
    runtime.shutdown().map_err(|e| e.to_string())?;

    // Counted as the lines above show them: the tasks sent to the CPU
    // workers, to the device's service, and the blob puts and gets (the
    // runtime's own count, logged at its stop, is what its workers ran:
    // not the service's tasks, and the blob kernels' own too).
    let to_cpu_workers =
        to_workers.tasks + 25 * single.tasks_per_thread + host_round_trip.samples as u64;
    let to_device_service = to_service.tasks + host_to_service_round_trip.samples as u64;
    let tasks = to_cpu_workers + to_device_service + blob.puts + blob.gets;
    let failed = to_workers.failures()
        + single_failed
        + host_failed
        + to_service.failures()
        + host_to_gpu_failed
        + blob.failed;
    let ok = failed == 0;
    if json {
        let report = DemoReport {
            backend: backend.to_string(),
            device,
            workers,
            to_workers,
            workers_completed: stats.completed,
            workers_failed: stats.failed,
            kernel_round_trip,
            host_round_trip,
            service_threads,
            to_service,
            host_to_service_round_trip,
            service_ran: served.served,
            blob_puts: blob.puts,
            blob_gets: blob.gets,
            blob_failed: blob.failed,
            tasks,
            failed,
            ok,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        let verdict = if ok { "ok" } else { "FAILED" };
        println!(
            "demo: {tasks} tasks ({to_cpu_workers} to the workers, {to_device_service} to the \
             service, {} blob puts/gets), {failed} failed: {verdict}",
            blob.puts + blob.gets
        );
    }
    Ok(ok)
}

/// One backend in `tandem info --json`.
#[derive(Serialize)]
struct BackendInfo {
    backend: &'static str,
    compiled_in: bool,
    /// Why it could not be used, if so.
    error: Option<String>,
    devices: Vec<DeviceInfo>,
}

/// One device in `tandem info --json`.
#[derive(Serialize)]
struct DeviceInfo {
    ordinal: usize,
    /// Why it could not be opened; the other fields are then empty.
    error: Option<String>,
    name: String,
    arch: String,
    total_memory: u64,
    multiprocessors: u32,
    warp_size: u32,
    can_map_host_memory: bool,
    host_native_atomics: bool,
    pci_bus_id: Option<String>,
    host_numa_node: Option<u32>,
    numa_source: String,
}

fn list_devices<A: GpuApi>(backend: &'static str) -> BackendInfo {
    let mut info = BackendInfo {
        backend,
        compiled_in: true,
        error: None,
        devices: Vec::new(),
    };
    match A::load().and_then(|api| Ok((api.device_count()?, api))) {
        Err(e) => info.error = Some(e.to_string()),
        Ok((count, api)) => {
            for ordinal in 0..count {
                let device = match api.device(ordinal).and_then(|d| d.properties()) {
                    Ok(p) => DeviceInfo {
                        ordinal,
                        error: None,
                        name: p.name,
                        arch: p.arch,
                        total_memory: p.total_memory,
                        multiprocessors: p.multiprocessor_count,
                        warp_size: p.warp_size,
                        can_map_host_memory: p.can_map_host_memory,
                        host_native_atomics: p.host_native_atomics,
                        pci_bus_id: p.pci_bus_id,
                        host_numa_node: p.host_numa_node,
                        numa_source: format!("{:?}", p.numa_source),
                    },
                    Err(e) => DeviceInfo {
                        ordinal,
                        error: Some(e.to_string()),
                        name: String::new(),
                        arch: String::new(),
                        total_memory: 0,
                        multiprocessors: 0,
                        warp_size: 0,
                        can_map_host_memory: false,
                        host_native_atomics: false,
                        pci_bus_id: None,
                        host_numa_node: None,
                        numa_source: String::new(),
                    },
                };
                info.devices.push(device);
            }
        }
    }
    info
}

/// A backend left out of this build.
#[cfg(not(all(feature = "cuda", feature = "hip")))]
fn not_compiled(backend: &'static str, feature: &str) -> BackendInfo {
    BackendInfo {
        backend,
        compiled_in: false,
        error: Some(format!("not compiled in (build with --features {feature})")),
        devices: Vec::new(),
    }
}

fn info(args: InfoArgs) -> Result<(), String> {
    let backends = [
        list_devices::<HostApi>("host"),
        #[cfg(feature = "cuda")]
        list_devices::<tandem_hal_cuda::CudaApi>("cuda"),
        #[cfg(not(feature = "cuda"))]
        not_compiled("cuda", "cuda"),
        #[cfg(feature = "hip")]
        list_devices::<tandem_hal_hip::HipApi>("hip"),
        #[cfg(not(feature = "hip"))]
        not_compiled("hip", "hip"),
    ];
    if args.json {
        let text = serde_json::to_string_pretty(&backends).map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(());
    }
    for b in &backends {
        let label = match b.backend {
            "host" => "host (CPU device)",
            "cuda" => "CUDA",
            _ => "HIP",
        };
        match &b.error {
            Some(why) if !b.compiled_in => println!("{label}: {why}"),
            Some(why) => println!("{label}: unavailable ({why})"),
            None => println!("{label}: {} device(s)", b.devices.len()),
        }
        for d in &b.devices {
            if let Some(why) = &d.error {
                println!("  [{}] cannot open: {why}", d.ordinal);
                continue;
            }
            println!(
                "  [{}] {} ({}), {} MiB, {} SMs/CUs/threads, warp {}",
                d.ordinal,
                d.name,
                d.arch,
                d.total_memory >> 20,
                d.multiprocessors,
                d.warp_size
            );
            println!(
                "      maps host memory: {}, host-native atomics: {}, PCI {}, host NUMA node {} ({})",
                d.can_map_host_memory,
                d.host_native_atomics,
                d.pci_bus_id.as_deref().unwrap_or("-"),
                d.host_numa_node
                    .map_or("unknown".to_string(), |n| n.to_string()),
                d.numa_source
            );
        }
    }
    Ok(())
}

fn status(args: StatusArgs) -> Result<(), String> {
    let name = match args.segment {
        Some(name) => name,
        None => single_live_runtime().map_err(|e| e.to_string())?,
    };
    let status = read_status(&name).map_err(|e| e.to_string())?;
    if args.json {
        let text = serde_json::to_string_pretty(&status).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print_status(&status);
    }
    if status.runtime.process == "gone" {
        return Err(format!(
            "the runtime of segment {name} (pid {}) is gone: killed or crashed; the figures \
             are the last it published. `tandem clean` removes its segment",
            status.runtime.pid
        ));
    }
    Ok(())
}

fn print_status(s: &StatusSnapshot) {
    let r = &s.runtime;
    let c = &s.config;
    println!("segment   {}", s.segment);
    let gone = r.process == "gone";
    if gone {
        println!(
            "runtime   pid {} (gone; it last said {}), {} backend, up {:.1} s when it last wrote",
            r.pid, r.state, r.backend, r.uptime_s
        );
    } else {
        println!(
            "runtime   pid {} ({}, {}), {} backend, up {:.1} s",
            r.pid, r.process, r.state, r.backend, r.uptime_s
        );
    }
    let capped = if s.workers.running < c.workers {
        format!(" ({} configured, capped by the cores)", c.workers)
    } else {
        String::new()
    };
    if gone {
        println!(
            "workers   none running (it ran {}{capped})",
            s.workers.running
        );
    } else {
        println!(
            "workers   {} running{capped}, {} busy",
            s.workers.running, s.workers.busy
        );
    }
    println!(
        "queues    {} lanes ({} on a GPU's segments) x {} slots, copy space {} bytes",
        c.lanes, c.gpu_lanes, c.queue_depth, c.copy_space
    );
    let t = &s.tasks;
    println!(
        "tasks     {} completed, {} failed ({:.0} /s); {} bad pointers, {} double completions",
        t.completed, t.failed, t.per_second, t.bad_pointers, t.double_completions
    );
    match s.clients_attached {
        Some(n) => println!("clients   {n} attached"),
        None => println!("clients   unknown (not counted by this runtime)"),
    }
    println!();
    println!(
        "{:>6}  {:<24} {:>12} {:>10}",
        "pool", "name", "completed", "failed"
    );
    for p in &s.pools {
        println!(
            "{:>6}  {:<24} {:>12} {:>10}",
            p.id, p.name, p.completed, p.failed
        );
    }
    if s.other.completed > 0 {
        println!(
            "{:>6}  {:<24} {:>12} {:>10}",
            "-", "(other)", s.other.completed, s.other.failed
        );
    }
    println!();
    println!(
        "{:<8} {:>6} {:>6} {:>10} {:>6} {:>8}",
        "segment", "device", "NUMA", "MiB", "lanes", "queued"
    );
    let or_dash = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    for seg in &s.segments {
        println!(
            "{:<8} {:>6} {:>6} {:>10} {:>6} {:>8}",
            seg.kind,
            or_dash(seg.device),
            or_dash(seg.numa_node),
            seg.bytes >> 20,
            seg.lanes,
            seg.queued
        );
    }
    if (s.segments.len() as u32) < s.segments_total {
        println!(
            "(and {} more device segments)",
            s.segments_total - s.segments.len() as u32
        );
    }
}
