//! The demo's CPU-worker phase: every device's kernels sending tasks to their CPU workers at
//! once, one kernel thread's round trip on each device beside what a launch costs there, and a
//! host thread's round trip through the CPU queues.

use std::sync::atomic::AtomicU32;

use tandem_hal::{numa::format_cpu_list, GpuApi, GpuDevice};
use tandem_runtime::kernels::{EchoLaunch, EchoPriority, RuntimeKernels};
use tandem_runtime::{DeviceQueues, Route, StatsSnapshot};

use super::figures::{micros, Latency, LaunchReport, TotalReport};
use super::{devices_word, echo_on_every_device, host_round_trips, Demo};

/// Launches of one kernel thread on each device for its round trip.
const SINGLE_LAUNCHES: u32 = 5;

/// What the CPU-worker phase measured.
pub(super) struct Workers {
    /// Each device's launch, in device order.
    pub(super) to_workers: Vec<LaunchReport>,
    /// Those launches added up.
    pub(super) total: TotalReport,
    /// The workers' counters after those launches.
    pub(super) stats: StatsSnapshot,
    pub(super) single: KernelRoundTrips,
    pub(super) host_round_trip: Latency,
    /// The host's tasks that failed.
    pub(super) host_failed: u64,
}

/// One kernel thread's round trips on each device, in device order.
pub(super) struct KernelRoundTrips {
    pub(super) latencies: Vec<Latency>,
    /// A kernel launch + sync, in microseconds.
    pub(super) launch_and_sync: Vec<f64>,
    /// The tasks those launches sent, and those that failed.
    pub(super) tasks: u64,
    pub(super) failed: u64,
}

/// Runs the phase.
pub(super) fn run<A: GpuApi>(
    demo: &Demo<'_, A>,
    kernels: &mut [RuntimeKernels<'_, A>],
) -> Result<Workers, String> {
    let launch = &demo.launch;
    demo.say(format!(
        "kernels on {} ({}) at once, each {} blocks x {} threads:\n  \
         every thread sends {} math.add tasks to its device's CPU workers, waiting for each",
        devices_word(demo.devices.len()),
        demo.device_word(),
        launch.blocks,
        launch.threads,
        launch.tasks_per_thread,
    ));
    let (outcomes, wall) = echo_on_every_device(kernels, launch)?;
    let to_workers: Vec<LaunchReport> = outcomes
        .iter()
        .map(|o| LaunchReport::of(launch, o))
        .collect();
    for (queues, report) in demo.devices.iter().zip(&to_workers) {
        demo.say(format!(
            "  {}:\n    {} tasks in {:.3} s, {:.2} M tasks/s; {} threads failed, {} wrong answers",
            describe(queues),
            report.tasks,
            report.seconds,
            report.tasks_per_second / 1e6,
            report.failed_threads,
            report.wrong_answers
        ));
    }
    let total = TotalReport::of(&to_workers, wall);
    let stats = demo.runtime.stats();
    demo.say(format!(
        "  {} in all: {} tasks in {:.3} s, {:.2} M tasks/s\n  \
         the workers completed {} tasks ({} with errors)",
        devices_word(total.devices),
        total.tasks,
        total.seconds,
        total.tasks_per_second / 1e6,
        stats.completed,
        stats.failed
    ));
    let single = kernel_round_trips(demo, kernels)?;
    let (host_round_trip, host_failed) = host_round_trip(demo);
    Ok(Workers {
        to_workers,
        total,
        stats,
        single,
        host_round_trip,
        host_failed,
    })
}

/// One kernel thread's round trip, as its own clock saw it (rank 0's phases: the launch is
/// not in it), device by device, and what a kernel launch + sync costs there: what a
/// persistent kernel saves per request.
fn kernel_round_trips<A: GpuApi>(
    demo: &Demo<'_, A>,
    kernels: &mut [RuntimeKernels<'_, A>],
) -> Result<KernelRoundTrips, String> {
    let single = EchoLaunch {
        blocks: 1,
        threads: 1,
        tasks_per_thread: 1000,
        // High alone: a low-priority task waits for the workers' turn at
        // the low rings, which a round trip should not measure.
        priority: EchoPriority::High,
        ..demo.launch
    };
    demo.say(format!(
        "one kernel thread's round trip per task, as its clock saw it ({SINGLE_LAUNCHES} launches \
         of {}),\n  and a kernel launch + sync for comparison:",
        single.tasks_per_thread
    ));
    let mut found = KernelRoundTrips {
        latencies: Vec::new(),
        launch_and_sync: Vec::new(),
        tasks: u64::from(SINGLE_LAUNCHES) * single.tasks_per_thread * demo.devices.len() as u64,
        failed: 0,
    };
    for (queues, k) in demo.devices.iter().zip(kernels) {
        let mut per_task = Vec::new();
        for _ in 0..SINGLE_LAUNCHES {
            let (o, phases) = k.echo_with_phases(&single).map_err(|e| e.to_string())?;
            found.failed += LaunchReport::of(&single, &o).failures();
            per_task.push(phases.make + phases.send + phases.wait + phases.output);
        }
        let latency = Latency::of(per_task);
        let launch = k.launch_and_sync(100).map_err(|e| e.to_string())?;
        demo.say(format!(
            "  device {}: p50 {:.2} us, min {:.2} us; a launch + sync {:.1} us",
            queues.device().ordinal(),
            latency.p50_us,
            latency.min_us,
            micros(launch)
        ));
        found.latencies.push(latency);
        found.launch_and_sync.push(micros(launch));
    }
    Ok(found)
}

/// Per-task latency percentiles of a host submitter on the CPU queues, and its failures.
fn host_round_trip<A: GpuApi>(demo: &Demo<'_, A>) -> (Latency, u64) {
    let stop = AtomicU32::new(0);
    let (host, failed) = host_round_trips(2000, 1, "host task", |task| {
        demo.runtime
            .submit(Route::lane(0), task)
            .and_then(|mut p| p.wait(&stop, None))
    });
    let latency = Latency::of(host);
    demo.say(format!(
        "host thread's round trip through the CPU queues (2000 tasks):\n  \
         p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, max {:.1} us",
        latency.p50_us, latency.p90_us, latency.p99_us, latency.max_us
    ));
    (latency, failed)
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
