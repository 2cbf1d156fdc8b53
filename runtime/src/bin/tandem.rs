//! `tandem`: Tandem's command-line entry point.
//!
//! * `tandem demo`: starts a runtime on the best backend (CUDA when compiled
//!   in and a device is present, else the CPU device), launches a kernel
//!   whose threads send tasks to the CPU workers and wait, and reports tasks,
//!   errors, throughput and latency.
//! * `tandem run [--config FILE] [--announce] [--exit-on-stdin-eof]`: serves
//!   a runtime until killed (or until stdin closes). `--announce` prints
//!   `ready <cpu segment> <pid>` on stdout once serving (what
//!   `Client::fork_runtime` waits for).
//! * `tandem info`: lists backends and devices.
//! * `tandem exchange produce|consume ...`: the shm-core two-process exchange.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use tandem_hal::{GpuApi, GpuDevice, HostApi};
use tandem_runtime::config::DeviceSelection;
use tandem_runtime::exchange::{consume, produce, ExchangeError};
use tandem_runtime::kernels::{
    expected_add_sum, EchoLaunch, EchoPriority, EchoRoute, GpuService, RuntimeKernels,
};
use tandem_runtime::signals::Termination;
use tandem_runtime::task::math;
use tandem_runtime::{Config, Registry, Route, Runtime};

const USAGE: &str = "usage: tandem demo
       tandem run [--config FILE] [--announce] [--exit-on-stdin-eof]
       tandem info
       tandem exchange produce <segment> <records>
       tandem exchange consume <segment>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["demo"] => report(run_on_best_backend(Command::Demo)),
        ["run", rest @ ..] => match RunOptions::parse(rest) {
            Ok(options) => report(run_on_best_backend(Command::Run(options))),
            Err(why) => usage_error(&why),
        },
        ["info"] => report(info()),
        ["exchange", "produce", name, records] => match records.parse() {
            Ok(records) => finish_exchange(produce(name, records)),
            Err(e) => usage_error(&format!("bad record count {records:?}: {e}")),
        },
        ["exchange", "consume", name] => finish_exchange(consume(name).map(|_| ())),
        [] => usage_error("no command"),
        [other, ..] => usage_error(&format!("unknown command {other:?}")),
    }
}

fn usage_error(why: &str) -> ExitCode {
    eprintln!("tandem: {why}\n{USAGE}");
    ExitCode::from(2)
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

fn finish_exchange(result: Result<(), ExchangeError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tandem: {e}");
            println!("error: {e}");
            ExitCode::from(match e {
                ExchangeError::ProducerDied { .. } => 3,
                _ => 2,
            })
        }
    }
}

/// `tandem run`'s options.
struct RunOptions {
    config: Option<PathBuf>,
    announce: bool,
    exit_on_stdin_eof: bool,
}

impl RunOptions {
    fn parse(args: &[&str]) -> Result<Self, String> {
        let mut options = RunOptions {
            config: None,
            announce: false,
            exit_on_stdin_eof: false,
        };
        let mut args = args.iter();
        while let Some(&arg) = args.next() {
            match arg {
                "--config" => match args.next() {
                    Some(path) => options.config = Some(PathBuf::from(path)),
                    None => return Err("--config needs a file".into()),
                },
                "--announce" => options.announce = true,
                "--exit-on-stdin-eof" => options.exit_on_stdin_eof = true,
                other => return Err(format!("unknown option {other:?} for run")),
            }
        }
        Ok(options)
    }
}

enum Command {
    Demo,
    Run(RunOptions),
}

/// A backend that loads and has at least one device.
#[cfg(any(feature = "cuda", feature = "hip"))]
fn usable<A: GpuApi>() -> Option<A> {
    let api = A::load().ok()?;
    (api.device_count().ok()? > 0).then_some(api)
}

fn run_on_best_backend(command: Command) -> Result<(), String> {
    #[cfg(feature = "cuda")]
    if let Some(api) = usable::<tandem_hal_cuda::CudaApi>() {
        return run_command(api, "CUDA", command);
    }
    #[cfg(feature = "hip")]
    if let Some(api) = usable::<tandem_hal_hip::HipApi>() {
        return run_command(api, "HIP", command);
    }
    let api = HostApi::load().map_err(|e| e.to_string())?;
    run_command(api, "CPU device (host backend)", command)
}

fn run_command<A: GpuApi>(api: A, backend: &str, command: Command) -> Result<(), String> {
    match command {
        Command::Demo => demo(api, backend),
        Command::Run(options) => serve(api, backend, options),
    }
}

fn serve<A: GpuApi>(api: A, backend: &str, options: RunOptions) -> Result<(), String> {
    let config = match &options.config {
        Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    // Caught before the runtime starts: a signal during setup still ends
    // in a clean shutdown.
    let mut termination = Termination::catch().map_err(|e| e.to_string())?;
    let runtime = Runtime::start_with(api, config, Registry::with_builtins())
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    eprintln!("tandem run: {backend}");
    for note in runtime.notes() {
        eprintln!("  {note}");
    }
    let name = runtime.cpu_segment().name().unwrap_or_default().to_string();
    if options.announce {
        println!("ready {name} {}", std::process::id());
    } else {
        println!(
            "serving: CPU segment {name}, {} workers, {} device segment(s)",
            runtime.config().workers,
            runtime.devices().len()
        );
    }
    if options.exit_on_stdin_eof {
        // Stop when the parent closes the pipe (or dies).
        let waker = termination.waker();
        std::thread::spawn(move || {
            let mut sink = [0u8; 64];
            while std::io::stdin().read(&mut sink).is_ok_and(|n| n > 0) {}
            waker.wake();
        });
    }
    // SIGINT/SIGTERM (or stdin EOF): shut down; dropping the runtime removes
    // its named segment.
    termination.wait();
    runtime.shutdown().map_err(|e| e.to_string())
}

/// Percentile `p` (0..=100) of sorted `values`.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn demo<A: GpuApi>(api: A, backend: &str) -> Result<(), String> {
    let gpu = A::BACKEND != tandem_hal::Backend::Host;
    let config = Config {
        devices: DeviceSelection::Only(vec![0]),
        ..Config::default()
    };
    println!("tandem demo on {backend}");
    // Kernels in flight cannot be interrupted: on SIGINT/SIGTERM, remove the
    // named segments and exit.
    tandem_runtime::signals::exit_on_termination().map_err(|e| e.to_string())?;
    let runtime = Runtime::start_with(api, config, Registry::with_builtins())
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    for note in runtime.notes() {
        println!("  {note}");
    }
    let queues = &runtime.devices()[0];
    let mut kernels = RuntimeKernels::load(queues).map_err(|e| e.to_string())?;
    // Real GPUs take many threads; the CPU device runs each kernel thread on
    // an OS thread, so it gets a smaller grid.
    let launch = EchoLaunch {
        blocks: if gpu { 264 } else { 8 },
        threads: if gpu { 128 } else { 16 },
        tasks_per_thread: if gpu { 64 } else { 200 },
        method: math::ADD,
        priority: EchoPriority::Alternate,
        route: EchoRoute::CpuWorkers,
        spin_budget: 1 << 40,
    };
    println!(
        "  echo kernel: {} blocks x {} threads, each sending {} math.add tasks to {} CPU workers and waiting for each",
        launch.blocks,
        launch.threads,
        launch.tasks_per_thread,
        runtime.config().workers
    );
    let outcome = kernels.echo(&launch).map_err(|e| e.to_string())?;
    let tasks = outcome.results.len() as u64 * launch.tasks_per_thread;
    let wrong = outcome
        .results
        .iter()
        .enumerate()
        .filter(|(r, &sum)| sum != expected_add_sum(*r as u64, launch.tasks_per_thread))
        .count();
    let stats = runtime.stats();
    println!(
        "  {tasks} tasks in {:.3} s: {:.2} M tasks/s; {} threads failed, {wrong} wrong answers; workers completed {} ({} with errors)",
        outcome.elapsed.as_secs_f64(),
        tasks as f64 / outcome.elapsed.as_secs_f64() / 1e6,
        outcome.failed_threads(),
        stats.completed,
        stats.failed
    );

    // Latency of one kernel thread's round trips, batch by batch.
    let single = EchoLaunch {
        blocks: 1,
        threads: 1,
        tasks_per_thread: 200,
        ..launch
    };
    let mut per_task = Vec::new();
    for _ in 0..25 {
        let o = kernels.echo(&single).map_err(|e| e.to_string())?;
        if o.failed_threads() > 0 {
            return Err(format!("single-thread echo failed: status {:?}", o.status));
        }
        per_task.push(o.elapsed / single.tasks_per_thread as u32);
    }
    per_task.sort();
    println!(
        "  one kernel thread, round trip per task (25 launches of 200, launch included): p50 {:?} p90 {:?} min {:?}",
        percentile(&per_task, 50.0),
        percentile(&per_task, 90.0),
        per_task[0]
    );

    // Per-task latency percentiles of a host submitter on the CPU queues.
    let stop = AtomicU32::new(0);
    let mut host = Vec::with_capacity(2000);
    for i in 0..2000u64 {
        let start = Instant::now();
        let sum = runtime
            .submit(Route::lane(0), &math::Add { a: i, b: 1 })
            .and_then(|mut p| p.wait(&stop, None))
            .map_err(|e| e.to_string())?;
        host.push(start.elapsed());
        if sum != i + 1 {
            return Err(format!("host task add({i}, 1) returned {sum}"));
        }
    }
    host.sort();
    println!(
        "  host submitter round trip (2000 tasks): p50 {:?} p90 {:?} p99 {:?} max {:?}",
        percentile(&host, 50.0),
        percentile(&host, 90.0),
        percentile(&host, 99.0),
        host[host.len() - 1]
    );

    // Tasks routed to the device: the GPU service (a persistent kernel)
    // runs them, from kernels and from the host.
    let service_threads = if gpu { 64 } else { 4 };
    let service = GpuService::start(queues, 1, service_threads).map_err(|e| e.to_string())?;
    let to_gpu = EchoLaunch {
        blocks: if gpu { 132 } else { 4 },
        threads: if gpu { 64 } else { 8 },
        tasks_per_thread: if gpu { 16 } else { 50 },
        route: EchoRoute::GpuService,
        ..launch
    };
    let routed = kernels.echo(&to_gpu).map_err(|e| e.to_string())?;
    let routed_tasks = routed.results.len() as u64 * to_gpu.tasks_per_thread;
    let routed_wrong = routed
        .results
        .iter()
        .enumerate()
        .filter(|(r, &sum)| sum != expected_add_sum(*r as u64, to_gpu.tasks_per_thread))
        .count();
    let mut host_to_gpu = Vec::with_capacity(500);
    for i in 0..500u64 {
        let start = Instant::now();
        let sum = runtime
            .submit_to_gpu(0, &math::Add { a: i, b: 2 }, None)
            .and_then(|mut p| p.wait(&stop, None))
            .map_err(|e| e.to_string())?;
        host_to_gpu.push(start.elapsed());
        if sum != i + 2 {
            return Err(format!("GPU-routed add({i}, 2) returned {sum}"));
        }
    }
    let served = service.stop().map_err(|e| e.to_string())?;
    host_to_gpu.sort();
    println!(
        "  routed to the GPU service ({service_threads} service threads): kernel {} x {} threads sent {routed_tasks} math.add tasks in {:.3} s ({:.2} M tasks/s; {} threads failed, {routed_wrong} wrong); \
         host -> GPU round trip (500 tasks): p50 {:?} p90 {:?}; the service ran {} tasks",
        to_gpu.blocks,
        to_gpu.threads,
        routed.elapsed.as_secs_f64(),
        routed_tasks as f64 / routed.elapsed.as_secs_f64() / 1e6,
        routed.failed_threads(),
        percentile(&host_to_gpu, 50.0),
        percentile(&host_to_gpu, 90.0),
        served.served
    );
    drop(kernels);
    runtime.shutdown().map_err(|e| e.to_string())?;
    if wrong > 0 || outcome.failed_threads() > 0 || routed_wrong > 0 || routed.failed_threads() > 0
    {
        return Err("the demo saw failures (above)".into());
    }
    Ok(())
}

fn list_devices<A: GpuApi>(label: &str) {
    match A::load().and_then(|api| Ok((api.device_count()?, api))) {
        Err(e) => println!("{label}: unavailable ({e})"),
        Ok((count, api)) => {
            println!("{label}: {count} device(s)");
            for ordinal in 0..count {
                match api.device(ordinal).and_then(|d| d.properties()) {
                    Ok(p) => println!(
                        "  [{ordinal}] {} ({}), {} MiB, {} SMs/CUs/threads, warp {}, maps host memory: {}, host-native atomics: {}, PCI {}, host NUMA node {} ({:?})",
                        p.name,
                        p.arch,
                        p.total_memory >> 20,
                        p.multiprocessor_count,
                        p.warp_size,
                        p.can_map_host_memory,
                        p.host_native_atomics,
                        p.pci_bus_id.as_deref().unwrap_or("-"),
                        p.host_numa_node.map_or("unknown".to_string(), |n| n.to_string()),
                        p.numa_source
                    ),
                    Err(e) => println!("  [{ordinal}] cannot open: {e}"),
                }
            }
        }
    }
}

fn info() -> Result<(), String> {
    list_devices::<HostApi>("host (CPU device)");
    #[cfg(feature = "cuda")]
    list_devices::<tandem_hal_cuda::CudaApi>("CUDA");
    #[cfg(not(feature = "cuda"))]
    println!("CUDA: not compiled in (build with --features cuda)");
    #[cfg(feature = "hip")]
    list_devices::<tandem_hal_hip::HipApi>("HIP");
    #[cfg(not(feature = "hip"))]
    println!("HIP: not compiled in (build with --features hip)");
    Ok(())
}
