//! Every device of the machine at once (one run, ratios printed against
//! figures measured in the same run):
//!
//! * throughput: no-op tasks per second with kernels on 1, 2, 4... devices
//!   at once (as many as there are), `workers_per_device` workers each,
//!   pooled over three runtimes of each count, the counts taking turns;
//!   target: N devices >= 0.9 x N x one device;
//! * each device's task round trip (one kernel thread, no-op tasks) against
//!   that device's own pinned-memory ping-pong floor; target <= 1.25x on
//!   every device;
//! * across devices: a kernel thread on device 0 sending to device 1's GPU
//!   service over a peer route, against the two devices' ping-pong through
//!   peer memory (`tandem_rt_peer_pingpong`); target <= 1.5x.
//!
//! On the CPU device the same rows run on two pretend devices, which share
//! the host's cores: printed for the code path, without targets. On CUDA
//! with fewer than two devices: "skipped: needs 2 CUDA devices" (a failure
//! with TANDEM_REQUIRE_GPU=1 only when there is no device at all).

mod support;

use support::{skip_cuda, us, Pooled, RUNS_PER_RUNTIME, RUNTIMES};

use tandem_hal::{GpuApi, GpuDevice, HostApi};
use tandem_runtime::kernels::{EchoLaunch, EchoPriority, EchoRoute, NoopLaunch, RuntimeKernels};
use tandem_runtime::{math, Config, DeviceSelection, GpuService, Registry, Runtime};

/// Sizes of one backend's run.
struct Scale {
    /// Workers for each device.
    workers_per_device: usize,
    /// The throughput launch on each device.
    blocks: u32,
    threads: u32,
    /// Tasks of one device's throughput launch, about.
    tasks_per_device: u64,
    pingpong_rounds: u64,
    single_tasks: u64,
    /// Whether the targets apply (devices of their own, not shared cores).
    targets: bool,
}

/// Turns of floor and round-trip measurement (odd: the median is a run).
const REPEATS: usize = 5;

fn median<T: Copy + PartialOrd>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
    values[values.len() / 2]
}

/// "meets"/"BELOW" against `target`, or "no target" for shared cores.
fn verdict(scale: &Scale, met: bool) -> &'static str {
    match (scale.targets, met) {
        (false, _) => "no target on shared cores",
        (true, true) => "meets",
        (true, false) => "BELOW",
    }
}

fn start<A: GpuApi>(api: A, devices: usize, scale: &Scale) -> Result<Runtime<A>, String> {
    let config = Config {
        workers_per_device: Some(scale.workers_per_device),
        devices: DeviceSelection::Only((0..devices).collect()),
        ..Config::default()
    };
    Runtime::start_with(api, config, Registry::with_builtins()).map_err(|e| e.to_string())
}

fn load_all<'q, A: GpuApi>(runtime: &'q Runtime<A>) -> Result<Vec<RuntimeKernels<'q, A>>, String> {
    runtime
        .devices()
        .iter()
        .map(RuntimeKernels::load)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())
}

/// No-op tasks per second of `kernels`' devices running the same launch at
/// once: every task over the time from the first launch to the last end.
fn throughput_at_once<A: GpuApi>(
    kernels: &mut [RuntimeKernels<'_, A>],
    launch: &NoopLaunch,
) -> Result<f64, String> {
    let start = std::time::Instant::now();
    let failed = std::thread::scope(|s| {
        let running: Vec<_> = kernels
            .iter_mut()
            .map(|k| s.spawn(move || k.noop_tasks(launch)))
            .collect();
        running
            .into_iter()
            .map(|t| {
                t.join()
                    .map_err(|_| "a launch thread panicked".to_string())?
                    .map(|o| o.failed_threads())
                    .map_err(|e| e.to_string())
            })
            .sum::<Result<usize, String>>()
    })?;
    let elapsed = start.elapsed();
    if failed > 0 {
        return Err(format!("{failed} threads failed"));
    }
    let tasks =
        kernels.len() as u64 * u64::from(launch.blocks * launch.threads) * launch.tasks_per_thread;
    Ok(tasks as f64 / elapsed.as_secs_f64())
}

fn bench<A: GpuApi>(
    api: impl Fn() -> Result<A, String>,
    label: &str,
    scale: &Scale,
) -> Result<(), String> {
    let count = api()?.device_count().map_err(|e| e.to_string())?;
    println!(
        "{label}: {count} devices, {} workers each",
        scale.workers_per_device
    );

    // Throughput on 1, 2, 4, ... devices at once (and on all of them), each
    // count in RUNTIMES runtimes of its own, the counts taking turns, so
    // that neither one runtime's luck nor a drift of the machine decides a
    // ratio.
    let per_thread = scale
        .tasks_per_device
        .div_ceil(u64::from(scale.blocks * scale.threads));
    let launch = NoopLaunch {
        route: EchoRoute::CpuWorkers,
        blocks: scale.blocks,
        threads: scale.threads,
        tasks_per_thread: per_thread,
        spin_budget: 1 << 40,
    };
    let mut counts = Vec::new();
    let mut n = 1;
    while n <= count {
        counts.push(n);
        n = if n * 2 > count && n < count {
            count
        } else {
            n * 2
        };
    }
    let mut runs: Vec<Vec<Vec<f64>>> = vec![Vec::with_capacity(RUNTIMES); counts.len()];
    let mut workers = vec![0; counts.len()];
    for _ in 0..RUNTIMES {
        for (at, &n) in counts.iter().enumerate() {
            let runtime = start(api()?, n, scale)?;
            workers[at] = runtime.workers();
            let mut kernels = load_all(&runtime)?;
            throughput_at_once(
                &mut kernels,
                &NoopLaunch {
                    tasks_per_thread: 4,
                    ..launch
                },
            )?;
            runs[at].push(
                (0..RUNS_PER_RUNTIME)
                    .map(|_| throughput_at_once(&mut kernels, &launch))
                    .collect::<Result<Vec<f64>, String>>()?,
            );
        }
    }
    let one = Pooled::of(&runs[0]).median;
    for ((&n, runs), workers) in counts.iter().zip(&runs).zip(workers) {
        let pooled = Pooled::of(runs);
        let scaling = pooled.median / (n as f64 * one);
        println!(
            "  no-op tasks, {} x {} kernel threads on each device, {n} at once, {workers} workers: {:.2} M tasks/s ({}); {scaling:.2} x {n} x one device, target >= 0.9: {}",
            scale.blocks,
            scale.threads,
            pooled.median / 1e6,
            pooled.spread_in_millions(),
            verdict(scale, scaling >= 0.9)
        );
    }

    // Each device's round trip against its own floor, in turns.
    let runtime = start(api()?, count, scale)?;
    let mut kernels = load_all(&runtime)?;
    let single = NoopLaunch {
        route: EchoRoute::CpuWorkers,
        blocks: 1,
        threads: 1,
        tasks_per_thread: scale.single_tasks,
        spin_budget: 1 << 40,
    };
    for (queues, k) in runtime.devices().iter().zip(kernels.iter_mut()) {
        let ordinal = queues.device().ordinal();
        k.noop_tasks(&NoopLaunch {
            tasks_per_thread: 100,
            ..single
        })
        .map_err(|e| e.to_string())?;
        let mut floors = Vec::new();
        let mut trips = Vec::new();
        for _ in 0..REPEATS {
            floors.push(
                k.pingpong(scale.pingpong_rounds)
                    .map_err(|e| e.to_string())?,
            );
            let o = k.noop_tasks(&single).map_err(|e| e.to_string())?;
            if o.failed_threads() > 0 {
                return Err(format!(
                    "device {ordinal}: single-thread run failed: {:?}",
                    o.status
                ));
            }
            trips.push(o.elapsed / scale.single_tasks as u32);
        }
        let (floor, trip) = (median(floors), median(trips));
        let ratio = trip.as_secs_f64() / floor.as_secs_f64();
        println!(
            "  device {ordinal}: task round trip {:.2} us against its ping-pong floor {:.2} us (medians of {REPEATS}): {ratio:.2}x, target <= 1.25x: {}",
            us(trip),
            us(floor),
            verdict(scale, ratio <= 1.25)
        );
    }

    // Device 0's kernel to device 1's service, against their peer ping-pong.
    if count < 2 {
        return Ok(());
    }
    let route = runtime.peer_route(0, 1).map_err(|e| e.to_string())?;
    let back = runtime.peer_route(1, 0).map_err(|e| e.to_string())?;
    if route.access != tandem_runtime::PeerAccess::Direct
        || back.access != tandem_runtime::PeerAccess::Direct
    {
        println!("  device 0 -> device 1: no peer access between them ({route:?}, {back:?}): no cross-device rows");
        return Ok(());
    }
    let (first, rest) = kernels.split_at_mut(1);
    let (senders, servers) = (&mut first[0], &mut rest[0]);
    let echo = EchoLaunch {
        blocks: 1,
        threads: 1,
        tasks_per_thread: scale.single_tasks,
        method: math::NOOP,
        priority: EchoPriority::High,
        route: EchoRoute::GpuService,
        spin_budget: 1 << 40,
    };
    // Floors first, in a block of their own: they allocate device memory,
    // which waits for a device to be idle, and a service never is.
    let floors = (0..REPEATS)
        .map(|_| senders.peer_pingpong(servers, scale.pingpong_rounds))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let service = GpuService::start(&runtime.devices()[1], 1, 64).map_err(|e| e.to_string())?;
    senders
        .echo_via_peer(
            servers,
            &route,
            &EchoLaunch {
                tasks_per_thread: 100,
                ..echo
            },
        )
        .map_err(|e| e.to_string())?;
    let mut trips = Vec::new();
    for _ in 0..REPEATS {
        let o = senders
            .echo_via_peer(servers, &route, &echo)
            .map_err(|e| e.to_string())?;
        if o.failed_threads() > 0 {
            return Err(format!("cross-device run failed: {:?}", o.status));
        }
        trips.push(o.elapsed / scale.single_tasks as u32);
    }
    let (_, phases) = senders
        .echo_via_peer_with_phases(servers, &route, &echo)
        .map_err(|e| e.to_string())?;
    let served = service.stop().map_err(|e| e.to_string())?;
    let (floor, trip) = (median(floors), median(trips));
    let ratio = trip.as_secs_f64() / floor.as_secs_f64();
    println!(
        "  device 0 -> device 1's GPU service: task round trip {:.2} us against their peer-memory ping-pong {:.2} us (medians of {REPEATS}): {ratio:.2}x, target <= 1.5x: {} (the service ran {} tasks)",
        us(trip),
        us(floor),
        verdict(scale, ratio <= 1.5),
        served.served
    );
    println!(
        "    as the kernel thread's clock saw it (one run): make {:.2} us, send {:.2} us, wait {:.2} us, output {:.2} us",
        us(phases.make),
        us(phases.send),
        us(phases.wait),
        us(phases.output)
    );
    Ok(())
}

fn main() {
    let host = Scale {
        workers_per_device: 1,
        blocks: 4,
        threads: 8,
        tasks_per_device: 20_000,
        pingpong_rounds: 20_000,
        single_tasks: 20_000,
        targets: false,
    };
    let host_api = || Ok(HostApi::with_devices(2));
    if let Err(e) = bench(
        host_api,
        "CPU device (host backend), 2 pretend devices",
        &host,
    ) {
        eprintln!("host backend bench failed: {e}");
        std::process::exit(1);
    }
    cuda();
}

#[cfg(feature = "cuda")]
fn cuda() {
    let gpu = Scale {
        workers_per_device: 4,
        blocks: 132,
        threads: 128,
        tasks_per_device: 8_000_000,
        pingpong_rounds: 100_000,
        single_tasks: 100_000,
        targets: true,
    };
    let load = || tandem_hal_cuda::CudaApi::load().map_err(|e| e.to_string());
    let devices = load()
        .ok()
        .and_then(|api| api.device_count().ok())
        .unwrap_or(0);
    if devices == 0 {
        skip_cuda("no CUDA device");
    } else if devices < 2 {
        println!("CUDA: skipped: needs 2 CUDA devices ({devices} present)");
    } else if let Err(e) = bench(load, "CUDA", &gpu) {
        eprintln!("CUDA bench failed: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda() {
    skip_cuda("no CUDA device");
}
