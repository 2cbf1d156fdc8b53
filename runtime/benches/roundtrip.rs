//! Task round trip and throughput of the runtime, against the floors it is
//! built on (one run, ratios printed):
//!
//! * floor: a kernel thread and a host thread ping-pong a value through two
//!   words of mapped pinned memory (`tandem_rt_pingpong`);
//! * one kernel launch + stream synchronisation per request;
//! * the runtime: one kernel thread's task round trip (`math.noop`), and
//!   many kernel threads with 4 workers (no-op tasks per second).
//!
//! Runs on the CPU device always, and on CUDA when built with `--features
//! cuda` and a device is present (else "skipped: no CUDA device", or a
//! failure with TANDEM_REQUIRE_GPU=1). Targets (issue 5, on the H100): round
//! trip at most 1.5x the floor; at least 10 M no-op tasks/s.

use std::time::Duration;

use tandem_hal::{GpuApi, HostApi};
use tandem_runtime::kernels::{EchoLaunch, EchoPriority, EchoRoute, RuntimeKernels};
use tandem_runtime::{math, Config, DeviceSelection, Registry, Runtime};

/// Sizes of one backend's run.
struct Scale {
    pingpong_rounds: u64,
    launches: u32,
    single_tasks: u64,
    /// Launch shapes (blocks, threads per block) of the throughput runs.
    grids: &'static [(u32, u32)],
    /// Tasks of one throughput run, about (split evenly among its threads).
    tasks_per_grid: u64,
}

/// Issue 5's targets: round trip at most this many floors; tasks per second.
const ROUND_TRIP_TARGET: f64 = 1.5;
/// Turns of floor and round-trip measurement (odd: the median is a run).
const REPEATS: usize = 5;
/// Runs of each throughput shape (odd, likewise).
const GRID_REPEATS: usize = 3;
const TASKS_PER_S_TARGET: f64 = 10e6;

fn verdict(met: bool) -> &'static str {
    if met {
        "meets"
    } else {
        "BELOW"
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn bench<A: GpuApi>(api: A, label: &str, scale: &Scale) -> Result<(), String> {
    let config = Config {
        workers: 4,
        devices: DeviceSelection::Only(vec![0]),
        ..Config::default()
    };
    let runtime =
        Runtime::start_with(api, config, Registry::with_builtins()).map_err(|e| e.to_string())?;
    let mut kernels = RuntimeKernels::load(&runtime.devices()[0]).map_err(|e| e.to_string())?;
    let launch_sync = kernels
        .launch_and_sync(scale.launches)
        .map_err(|e| e.to_string())?;
    let noop = |blocks, threads, tasks| EchoLaunch {
        blocks,
        threads,
        tasks_per_thread: tasks,
        method: math::NOOP,
        priority: EchoPriority::High,
        route: EchoRoute::CpuWorkers,
        spin_budget: 1 << 40,
    };
    // Warm up the workers and the module, then measure the floor and the
    // round trip in turns, REPEATS times each: both drift with the host's
    // state, so each is the median of its runs and the spread is printed.
    // The round trips run untimed (the floor's kernel reads no clock either);
    // one more, timed run splits a round trip into its phases.
    kernels.echo(&noop(1, 1, 100)).map_err(|e| e.to_string())?;
    let single_run = |kernels: &mut RuntimeKernels<'_, A>| {
        let single = kernels
            .echo(&noop(1, 1, scale.single_tasks))
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
        .echo_with_phases(&noop(1, 1, scale.single_tasks))
        .map_err(|e| e.to_string())?;
    if timed.failed_threads() > 0 {
        return Err(format!(
            "timed single-thread run failed: {:?}",
            timed.status
        ));
    }
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
    println!(
        "  task round trip, one kernel thread: {:8.2} us  (median of {REPEATS}; {:.2} - {:.2}; {vs_floor:.2}x floor, target <= {ROUND_TRIP_TARGET}x: {}; launch + sync is {:.2}x the round trip)",
        us(round_trip),
        us(trips[0]),
        us(trips[REPEATS - 1]),
        verdict(vs_floor <= ROUND_TRIP_TARGET),
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
    for &(blocks, threads) in scale.grids {
        let per_thread = scale.tasks_per_grid.div_ceil(u64::from(blocks * threads));
        let tasks = u64::from(blocks * threads) * per_thread;
        let mut rates = Vec::with_capacity(GRID_REPEATS);
        for _ in 0..GRID_REPEATS {
            let many = kernels
                .echo(&noop(blocks, threads, per_thread))
                .map_err(|e| e.to_string())?;
            if many.failed_threads() > 0 {
                return Err(format!("{} threads failed", many.failed_threads()));
            }
            rates.push(tasks as f64 / many.elapsed.as_secs_f64());
        }
        rates.sort_by(f64::total_cmp);
        let rate = rates[GRID_REPEATS / 2];
        println!(
            "  {blocks} x {threads} kernel threads, 4 workers: {tasks} no-op tasks a run, {:.2} M tasks/s (median of {GRID_REPEATS}; {:.2} - {:.2}; target >= {} M/s: {})",
            rate / 1e6,
            rates[0] / 1e6,
            rates[GRID_REPEATS - 1] / 1e6,
            TASKS_PER_S_TARGET / 1e6,
            verdict(rate >= TASKS_PER_S_TARGET)
        );
    }
    Ok(())
}

fn main() {
    let host = Scale {
        pingpong_rounds: 20_000,
        launches: 2_000,
        single_tasks: 20_000,
        grids: &[(8, 16)],
        tasks_per_grid: 64_000,
    };
    if let Err(e) = bench(HostApi::with_devices(1), "CPU device (host backend)", &host) {
        eprintln!("host backend bench failed: {e}");
        std::process::exit(1);
    }
    cuda();
}

#[cfg(feature = "cuda")]
fn cuda() {
    let gpu = Scale {
        pingpong_rounds: 100_000,
        launches: 10_000,
        single_tasks: 100_000,
        grids: &[(132, 32), (132, 128), (264, 256)],
        tasks_per_grid: 2_000_000,
    };
    let api = tandem_hal_cuda::CudaApi::load()
        .ok()
        .filter(|api| api.device_count().is_ok_and(|n| n > 0));
    match api {
        Some(api) => {
            if let Err(e) = bench(api, "CUDA device 0", &gpu) {
                eprintln!("CUDA bench failed: {e}");
                std::process::exit(1);
            }
        }
        None => skip(),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda() {
    skip();
}

fn skip() {
    if std::env::var("TANDEM_REQUIRE_GPU").as_deref() == Ok("1") {
        eprintln!("CUDA: no device (or not compiled in), but TANDEM_REQUIRE_GPU=1");
        std::process::exit(1);
    }
    println!("CUDA: skipped: no CUDA device");
}
