//! Launch overhead of the CPU device (the host backend): an empty kernel
//! launched through `GpuApi` and synchronised, for a few grid shapes, and a
//! 264 x 256 launch of the runtime's round-trip kernel, next to the cost of
//! spawning and joining one OS thread (what each kernel thread would cost a
//! backend that started one per kernel thread) measured in the same run.
//!
//! Targets (docs/perf/README.md, "Targets"): an empty launch + sync within
//! 10 us, 4 blocks x 256 threads within 300 us, and 264 x 256 threads of the
//! round-trip kernel running to the end; each is printed as now / target.

use std::time::{Duration, Instant};

use tandem_hal::{GpuApi, GpuDevice, HostApi, LaunchConfig};
use tandem_runtime::kernels::{EchoLaunch, EchoPriority, EchoRoute, RuntimeKernels};
use tandem_runtime::{math, Config, DeviceSelection, Registry, Runtime};
use tandem_tests::support::kernels;

/// The targets for an empty launch + sync of 1 x 1 and 4 x 256.
const EMPTY_TARGET: Duration = Duration::from_micros(10);
const FOUR_BY_256_TARGET: Duration = Duration::from_micros(300);

/// The round-trip launch: 264 blocks of 256 threads (the largest shape of
/// the runtime bench on the H100), each sending this many no-op tasks.
const ROUNDTRIP_GRID: (u32, u32) = (264, 256);
const ROUNDTRIP_TASKS_PER_THREAD: u64 = 2;
/// Runs of the round-trip launch (odd: the median is a run).
const ROUNDTRIP_REPEATS: usize = 3;

/// Median time of `op` over `reps` calls after a warm-up.
fn median(reps: usize, mut op: impl FnMut()) -> Duration {
    for _ in 0..reps / 10 + 1 {
        op();
    }
    let mut times: Vec<Duration> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            op();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[reps / 2]
}

fn verdict(met: bool) -> &'static str {
    if met {
        "meets"
    } else {
        "MISSES"
    }
}

fn main() {
    let api = HostApi::load().expect("the host backend always loads");
    let device = api.device(0).expect("host device 0");
    let module = kernels(&device);
    let kernel = device
        .kernel(&module, tandem_device_kernels::names::TANDEM_EMPTY)
        .expect("tandem_empty");
    let stream = device.create_stream().expect("stream");

    let thread_spawn = median(2000, || std::thread::spawn(|| {}).join().expect("join"));
    println!("CPU device launch overhead (empty kernel, launch + stream sync, median):");
    println!(
        "  reference: std::thread spawn + join        {:>9.2} us",
        us(thread_spawn)
    );
    for (label, config, target) in [
        (
            "1 block x 1 thread",
            LaunchConfig::linear(1, 1),
            Some(EMPTY_TARGET),
        ),
        ("1 block x 32 threads", LaunchConfig::linear(1, 32), None),
        (
            "4 blocks x 256 threads",
            LaunchConfig::linear(4, 256),
            Some(FOUR_BY_256_TARGET),
        ),
    ] {
        let t = median(500, || {
            // SAFETY: `tandem_empty` takes no arguments and touches no memory.
            unsafe { device.launch(&kernel, &config, &[], &stream) }.expect("launch");
            device.synchronize_stream(&stream).expect("sync");
        });
        let vs_target = target.map_or(String::new(), |target| {
            let ratio = t.as_secs_f64() / target.as_secs_f64();
            format!(
                "; {ratio:.2}x the {:.0} us target: {}",
                us(target),
                verdict(ratio <= 1.0)
            )
        });
        println!(
            "  {label:<24} launch + sync         {:>9.2} us  ({:.2}x a thread spawn{vs_target})",
            us(t),
            t.as_secs_f64() / thread_spawn.as_secs_f64()
        );
    }
    let batch = 1000;
    let config = LaunchConfig::linear(1, 1);
    let t = median(9, || {
        for _ in 0..batch {
            // SAFETY: as above.
            unsafe { device.launch(&kernel, &config, &[], &stream) }.expect("launch");
        }
        device.synchronize_stream(&stream).expect("sync");
    });
    println!(
        "  1000 launches, one sync                    {:>9.2} us per launch",
        us(t) / batch as f64
    );
    roundtrip(thread_spawn);
}

/// The 264 x 256 launch of the runtime's echo kernel (every thread sends
/// no-op tasks to 4 CPU workers and waits for each answer), to the end.
fn roundtrip(thread_spawn: Duration) {
    let config = Config {
        workers: 4,
        devices: DeviceSelection::Only(vec![0]),
        ..Config::default()
    };
    let runtime = Runtime::start_with(HostApi::with_devices(1), config, Registry::with_builtins())
        .expect("runtime on the CPU device");
    let mut kernels = RuntimeKernels::load(&runtime.devices()[0]).expect("runtime kernels");
    let (blocks, threads) = ROUNDTRIP_GRID;
    let launch = EchoLaunch {
        blocks,
        threads,
        tasks_per_thread: ROUNDTRIP_TASKS_PER_THREAD,
        method: math::NOOP,
        priority: EchoPriority::High,
        route: EchoRoute::CpuWorkers,
        spin_budget: 1 << 40,
    };
    let kernel_threads = u64::from(blocks * threads);
    let mut times = Vec::with_capacity(ROUNDTRIP_REPEATS);
    let mut failed = 0;
    for _ in 0..ROUNDTRIP_REPEATS {
        let outcome = kernels.echo(&launch).expect("echo launch");
        failed = failed.max(outcome.failed_threads());
        times.push(outcome.elapsed);
    }
    times.sort();
    let t = times[ROUNDTRIP_REPEATS / 2];
    // What the same threads would cost a backend that spawned an OS thread
    // for each (the spawn alone, measured above).
    let spawns = thread_spawn.as_secs_f64() * kernel_threads as f64;
    println!(
        "  {blocks} x {threads} round-trip kernel ({} no-op tasks, 4 workers): {:.2} ms launch to sync (median of {ROUNDTRIP_REPEATS}; {:.2} - {:.2}); {:.3}x spawning its {kernel_threads} threads; {failed} threads failed; target: runs to the end: {}",
        kernel_threads * ROUNDTRIP_TASKS_PER_THREAD,
        ms(t),
        ms(times[0]),
        ms(times[ROUNDTRIP_REPEATS - 1]),
        t.as_secs_f64() / spawns,
        verdict(failed == 0)
    );
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
