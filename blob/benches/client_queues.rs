//! A client process's kernels against the same kernels in the runtime's own
//! process (ratios printed): the client's device queues
//! (`Client::device_queues`) served by a runtime in another process, beside
//! the runtime's own device queues.
//!
//! * one kernel thread's no-op round trip (send + wait, the kernel's own
//!   clock; median of 5 runs): target client <= 1.1x in-process;
//! * many kernel threads' no-op throughput (median of 3): target client
//!   >= 0.9x in-process;
//! * the same two rows on the GPU route (`rt_send_to_gpu`), to a GPU
//!   service of a quarter of the device's multiprocessors started on the
//!   queues of each side, which for the client runs in the client's
//!   process (`runtime/src/client_queues.rs`, "The GPU route"): the same
//!   targets;
//! * kernel threads' 4 KiB blob puts (RAM target) and blocks' 1 MiB puts,
//!   per second and GB/s, client against in-process (no target).
//!
//! Each row is the median of three rounds, the two sides taking turns with
//! fresh runtimes (`ROUNDS`). Both runtimes have the same configuration,
//! blob pool and store layout;
//! the one serving clients is this binary started again
//! (`--serve-runtime`), so the bench needs nothing beside itself. Runs on
//! the CPU device always, and on CUDA when built with `--features cuda` and
//! a device is present (else "skipped: no CUDA device", or a failure with
//! TANDEM_REQUIRE_GPU=1). The CPU device's rows share CI's two cores
//! between the kernel threads and the workers: their ratios are what that
//! sharing gives, not what the targets are set for.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tandem_blob::demo::{BlobKernels, PutGetLaunch, PutGetMode};
use tandem_blob::{pool, BlobCaller, BlobStore, Score, StoreConfig, TagId};
use tandem_hal::{GpuApi, GpuDevice, HostApi};
use tandem_process::ServiceChild;
use tandem_runtime::kernels::{EchoRoute, NoopLaunch, RuntimeKernels};
use tandem_runtime::{
    serve, Backend, Client, Config, DeviceQueues, DeviceSelection, GpuService, Registry, Runtime,
    ServeOptions,
};

/// Sizes of one backend's run.
struct Scale {
    workers: usize,
    /// Bytes of the runtime's device segment and of the client's.
    segment_bytes: usize,
    single_tasks: u64,
    /// The no-op throughput grid (blocks, threads) and tasks per thread.
    grid: (u32, u32),
    grid_tasks: u64,
    /// Threads of each block of the GPU service.
    service_threads: u32,
    /// 4 KiB puts: the grid and rounds per thread.
    small_grid: (u32, u32),
    small_rounds: u64,
    /// 1 MiB puts (one per block a round): the grid and rounds.
    large_grid: (u32, u32),
    large_rounds: u64,
    /// Whether the targets apply (a GPU).
    targets: bool,
}

const SMALL: u64 = 4 << 10;
const LARGE: u64 = 1 << 20;
/// Runs of the round trip (odd: the median is a run).
const REPEATS: usize = 5;
/// Rounds of both sides (odd, as REPEATS): runtimes differ from one start
/// to the next by more than the targets' margins, so each side's figures
/// are the median of this many, the sides taking turns.
const ROUNDS: usize = 3;

/// The runtime of both sides: its device segment and a client's are the
/// same size, so their kernels get the same arena.
fn config(workers: usize, segment_bytes: usize, segment: Option<String>) -> Config {
    Config {
        workers,
        gpu_segment_size: segment_bytes,
        client_device_segment_size: segment_bytes,
        copy_space: tandem_blob::wire::COPY_SPACE,
        devices: DeviceSelection::Only(vec![0]),
        cpu_segment_name: segment,
        ..Config::default()
    }
}

fn registry(store: &Path) -> Result<Registry, String> {
    let store =
        BlobStore::open(&StoreConfig::ram_and_file(store, 1 << 30)).map_err(|e| e.to_string())?;
    let mut registry = Registry::with_builtins();
    pool::register(&mut registry, Arc::new(store)).map_err(|e| e.to_string())?;
    Ok(registry)
}

/// What one side measured.
struct Figures {
    round_trip: Duration,
    noops_per_s: f64,
    gpu_round_trip: Duration,
    gpu_noops_per_s: f64,
    small_puts_per_s: f64,
    large_gbs: f64,
}

impl Figures {
    /// Each figure's median over `rounds`.
    fn median_of(rounds: &[Figures]) -> Figures {
        let of = |f: fn(&Figures) -> f64| median(rounds.iter().map(f).collect());
        let secs = |f: fn(&Figures) -> Duration| {
            Duration::from_secs_f64(median(rounds.iter().map(|r| f(r).as_secs_f64()).collect()))
        };
        Figures {
            round_trip: secs(|r| r.round_trip),
            noops_per_s: of(|r| r.noops_per_s),
            gpu_round_trip: secs(|r| r.gpu_round_trip),
            gpu_noops_per_s: of(|r| r.gpu_noops_per_s),
            small_puts_per_s: of(|r| r.small_puts_per_s),
            large_gbs: of(|r| r.large_gbs),
        }
    }
}

/// One route's no-op round trip (one thread, the median of [`REPEATS`]
/// runs) and throughput (the scale's grid, the median of 3 runs).
fn noop_rows<A: GpuApi>(
    kernels: &mut RuntimeKernels<'_, A>,
    route: EchoRoute,
    scale: &Scale,
) -> Result<(Duration, f64), String> {
    let err = |e: tandem_runtime::RuntimeError| e.to_string();
    let noop = |blocks, threads, tasks| NoopLaunch {
        route,
        blocks,
        threads,
        tasks_per_thread: tasks,
        spin_budget: 1 << 40,
    };
    // Warm up: first touches, the kernels' first launch.
    kernels.noop_tasks(&noop(1, 1, 100)).map_err(err)?;
    let mut trips = Vec::new();
    for _ in 0..REPEATS {
        let (outcome, phases) = kernels
            .noop_tasks_with_phases(&noop(1, 1, scale.single_tasks))
            .map_err(err)?;
        if outcome.failed_threads() > 0 {
            return Err(format!("{route:?} round trip: {:?}", outcome.status));
        }
        // The phases are per task already.
        trips.push(phases.send + phases.wait);
    }
    let (blocks, threads) = scale.grid;
    let mut rates = Vec::new();
    for _ in 0..3 {
        let outcome = kernels
            .noop_tasks(&noop(blocks, threads, scale.grid_tasks))
            .map_err(err)?;
        if outcome.failed_threads() > 0 {
            return Err(format!(
                "{route:?} throughput: {} threads failed",
                outcome.failed_threads()
            ));
        }
        let tasks = u64::from(blocks * threads) * scale.grid_tasks;
        rates.push(tasks as f64 / outcome.elapsed.as_secs_f64());
    }
    Ok((median(trips), median(rates)))
}

/// The GPU service's blocks on a device of `multiprocessors`: a quarter of
/// them.
fn service_blocks_of(multiprocessors: u32) -> u32 {
    (multiprocessors / 4).max(1)
}

fn median<T: PartialOrd + Copy>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[values.len() / 2]
}

/// The rows' measurements on `queues`, whose runtime serves the blob pool
/// with tag `tag`.
fn measure<A: GpuApi>(
    queues: &DeviceQueues<A>,
    tag: TagId,
    scale: &Scale,
) -> Result<Figures, String> {
    let err = |e: tandem_runtime::RuntimeError| e.to_string();
    let mut kernels = RuntimeKernels::load(queues).map_err(err)?;
    let (round_trip, noops_per_s) = noop_rows(&mut kernels, EchoRoute::CpuWorkers, scale)?;
    // Started once the kernels are loaded: see GpuService on driver calls
    // while it runs.
    let blocks = service_blocks_of(queues.properties().multiprocessor_count);
    let service = GpuService::start(queues, blocks, scale.service_threads).map_err(err)?;
    let (gpu_round_trip, gpu_noops_per_s) = noop_rows(&mut kernels, EchoRoute::GpuService, scale)?;
    service.stop().map_err(err)?;
    drop(kernels);
    let mut blobs = BlobKernels::load(queues).map_err(err)?;
    let put = |grid: (u32, u32), bytes, rounds, mode| PutGetLaunch {
        score: Score(1.0),
        ..PutGetLaunch::new(grid, tag, bytes, rounds, mode)
    };
    let small = put(scale.small_grid, SMALL, scale.small_rounds, PutGetMode::Put);
    let large = put(
        scale.large_grid,
        LARGE,
        scale.large_rounds,
        PutGetMode::BlockPut,
    );
    // Each run twice: the first fills the RAM target's pages.
    let mut run = |launch: &PutGetLaunch| -> Result<Duration, String> {
        let mut elapsed = Duration::ZERO;
        for _ in 0..2 {
            let outcome = blobs.put_get(launch).map_err(err)?;
            if let Some((thread, status, code)) = outcome.first_failure() {
                return Err(format!(
                    "put: thread {thread}: status {status}, code {code}"
                ));
            }
            elapsed = outcome.elapsed;
        }
        Ok(elapsed)
    };
    let small_time = run(&small)?;
    let large_time = run(&large)?;
    let small_puts = u64::from(small.blocks * small.threads) * small.rounds;
    let large_bytes = u64::from(large.blocks) * large.rounds * LARGE;
    Ok(Figures {
        round_trip,
        noops_per_s,
        gpu_round_trip,
        gpu_noops_per_s,
        small_puts_per_s: small_puts as f64 / small_time.as_secs_f64(),
        large_gbs: large_bytes as f64 / large_time.as_secs_f64() / 1e9,
    })
}

/// One round of the in-process side: a runtime of this process, with its
/// store in `store`, and its own device queues.
fn in_process_side<A: GpuApi>(store: &Path, scale: &Scale) -> Result<Figures, String> {
    let err = |e: tandem_runtime::RuntimeError| e.to_string();
    let runtime = Runtime::start_with(
        A::load().map_err(|e| e.to_string())?,
        config(scale.workers, scale.segment_bytes, None),
        registry(store)?,
    )
    .map_err(err)?;
    let tag = BlobCaller::new(&runtime)
        .get_or_create_tag("bench")
        .map_err(|e| e.to_string())?;
    measure(&runtime.devices()[0], tag, scale)
}

/// One round of the client side: a runtime in a child process (this
/// binary, `--serve-runtime`) with its store in `store`, and device queues
/// of this process's own that it serves.
fn client_process_side<A: GpuApi>(
    api: &A,
    backend: &str,
    store: &Path,
    scale: &Scale,
) -> Result<Figures, String> {
    let err = |e: tandem_runtime::RuntimeError| e.to_string();
    let segment = format!("tandem-bench-cq-{}", std::process::id());
    let (workers, segment_bytes) = (scale.workers.to_string(), scale.segment_bytes.to_string());
    let args: [&OsStr; 6] = [
        "--serve-runtime".as_ref(),
        backend.as_ref(),
        segment.as_ref(),
        store.as_os_str(),
        workers.as_ref(),
        segment_bytes.as_ref(),
    ];
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let child = ServiceChild::spawn(&exe, &args).map_err(|e| e.to_string())?;
    let client = Client::attach(child.ready()).map_err(err)?;
    let tag = BlobCaller::new(&client)
        .get_or_create_tag("bench")
        .map_err(|e| e.to_string())?;
    let figures = {
        let queues = client.device_queues(api, 0).map_err(err)?;
        measure(&queues, tag, scale)?
    };
    drop(client);
    child.stop().map_err(|e| e.to_string())?;
    Ok(figures)
}

/// Both sides on backend `A` (`backend` names it for the child), in
/// [`ROUNDS`] rounds that take turns, each with fresh runtimes: each row is
/// the median of the rounds' figures.
fn bench<A: GpuApi>(api: A, backend: &str, scale: &Scale) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut in_process = Vec::with_capacity(ROUNDS);
    let mut client_side = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        in_process.push(in_process_side::<A>(
            &dir.path().join(format!("in-process-{round}")),
            scale,
        )?);
        client_side.push(client_process_side(
            &api,
            backend,
            &dir.path().join(format!("served-{round}")),
            scale,
        )?);
    }
    let (in_process, client_side) = (
        Figures::median_of(&in_process),
        Figures::median_of(&client_side),
    );
    let multiprocessors = api
        .device(0)
        .and_then(|device| device.properties())
        .map_err(|e| e.to_string())?
        .multiprocessor_count;
    let service_size = (service_blocks_of(multiprocessors), scale.service_threads);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let verdict = |met: bool, target: &str| {
        if !scale.targets {
            "no target on the CPU device".to_string()
        } else if met {
            format!("target {target}: meets")
        } else {
            format!("target {target}: BELOW")
        }
    };
    let trip_ratio = client_side.round_trip.as_secs_f64() / in_process.round_trip.as_secs_f64();
    let rate_ratio = client_side.noops_per_s / in_process.noops_per_s;
    println!(
        "  no-op round trip (1 thread): in-process {:.2} us, client process {:.2} us: {trip_ratio:.2}x ({})",
        us(in_process.round_trip),
        us(client_side.round_trip),
        verdict(trip_ratio <= 1.1, "<= 1.1x"),
    );
    println!(
        "  no-op throughput ({} x {}): in-process {:.2} M/s, client process {:.2} M/s: {rate_ratio:.2}x ({})",
        scale.grid.0,
        scale.grid.1,
        in_process.noops_per_s / 1e6,
        client_side.noops_per_s / 1e6,
        verdict(rate_ratio >= 0.9, ">= 0.9x"),
    );
    let gpu_trip_ratio =
        client_side.gpu_round_trip.as_secs_f64() / in_process.gpu_round_trip.as_secs_f64();
    let gpu_rate_ratio = client_side.gpu_noops_per_s / in_process.gpu_noops_per_s;
    println!(
        "  GPU route, no-op round trip (1 thread, service {} x {}): in-process {:.2} us, client process {:.2} us: {gpu_trip_ratio:.2}x ({})",
        service_size.0,
        service_size.1,
        us(in_process.gpu_round_trip),
        us(client_side.gpu_round_trip),
        verdict(gpu_trip_ratio <= 1.1, "<= 1.1x"),
    );
    println!(
        "  GPU route, no-op throughput ({} x {}): in-process {:.2} M/s, client process {:.2} M/s: {gpu_rate_ratio:.2}x ({})",
        scale.grid.0,
        scale.grid.1,
        in_process.gpu_noops_per_s / 1e6,
        client_side.gpu_noops_per_s / 1e6,
        verdict(gpu_rate_ratio >= 0.9, ">= 0.9x"),
    );
    println!(
        "  4 KiB puts ({} x {}): in-process {:.0} /s, client process {:.0} /s: {:.2}x",
        scale.small_grid.0,
        scale.small_grid.1,
        in_process.small_puts_per_s,
        client_side.small_puts_per_s,
        client_side.small_puts_per_s / in_process.small_puts_per_s,
    );
    println!(
        "  1 MiB puts ({} blocks): in-process {:.2} GB/s, client process {:.2} GB/s: {:.2}x",
        scale.large_grid.0,
        in_process.large_gbs,
        client_side.large_gbs,
        client_side.large_gbs / in_process.large_gbs,
    );
    Ok(())
}

/// `--serve-runtime <backend> <segment> <store dir> <workers> <segment
/// bytes>`: the runtime of the client side, until stdin closes.
fn serve_runtime(args: &[String]) -> Result<(), String> {
    let [backend, segment, store, workers, segment_bytes] = args else {
        return Err(format!("--serve-runtime takes 5 arguments, not {args:?}"));
    };
    let workers = workers.parse().map_err(|e| format!("workers: {e}"))?;
    let segment_bytes = segment_bytes
        .parse()
        .map_err(|e| format!("segment bytes: {e}"))?;
    let config = config(workers, segment_bytes, Some(segment.clone()));
    let registry = registry(Path::new(store))?;
    let options = ServeOptions {
        announce: true,
        exit_on_stdin_eof: true,
        metrics: None,
    };
    let served = match backend.as_str() {
        "host" => serve(
            HostApi::load().map_err(|e| e.to_string())?,
            Backend::Host,
            config,
            registry,
            options,
        ),
        #[cfg(feature = "cuda")]
        "cuda" => serve(
            <tandem_hal_cuda::CudaApi as GpuApi>::load().map_err(|e| e.to_string())?,
            Backend::Cuda,
            config,
            registry,
            options,
        ),
        other => return Err(format!("backend {other} is not built in")),
    };
    served.map_err(|e| e.to_string())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--serve-runtime") {
        if let Err(e) = serve_runtime(&args[1..]) {
            eprintln!("client queues bench, runtime: {e}");
            std::process::exit(1);
        }
        return;
    }
    let host = Scale {
        workers: 2,
        segment_bytes: 64 << 20,
        single_tasks: 2000,
        grid: (2, 8),
        grid_tasks: 500,
        service_threads: 2,
        small_grid: (2, 8),
        small_rounds: 50,
        large_grid: (2, 16),
        large_rounds: 8,
        targets: false,
    };
    println!("client queues on the CPU device (host backend):");
    if let Err(e) = bench(HostApi::with_devices(1), "host", &host) {
        eprintln!("client queues bench on the CPU device failed: {e}");
        std::process::exit(1);
    }
    cuda();
}

#[cfg(feature = "cuda")]
fn cuda() {
    let gpu = Scale {
        workers: 8,
        segment_bytes: 512 << 20,
        single_tasks: 20_000,
        grid: (132, 128),
        grid_tasks: 64,
        service_threads: 128,
        small_grid: (132, 64),
        small_rounds: 20,
        large_grid: (32, 256),
        large_rounds: 8,
        targets: true,
    };
    if let Some(api) =
        tandem_tests::gpu::api_or_skip::<tandem_hal_cuda::CudaApi>("client queues bench")
    {
        println!("client queues on CUDA device 0:");
        if let Err(e) = bench(api, "cuda", &gpu) {
            eprintln!("client queues bench on CUDA failed: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda() {
    println!("client queues bench on CUDA: skipped: built without the cuda feature");
}
