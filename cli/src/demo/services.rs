//! The demo's service phase: each device's service (a persistent kernel) runs the tasks its
//! own kernels and the host route to it; once the services have stopped, the stop flags
//! release kernels that wait on tasks nobody serves.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use tandem_hal::{GpuApi, GpuDevice};
use tandem_runtime::kernels::{EchoLaunch, EchoRoute, RuntimeKernels};
use tandem_runtime::{math, DeviceQueues, GpuService};

use super::figures::{Latency, LaunchReport, TotalReport};
use super::{devices_word, echo_on_every_device, host_round_trips, Demo};

/// `rt_status::stopped` (tandem/runtime/context.h): a thread released by its stop
/// flag.
const RT_STOPPED: u32 = 7;

/// What the service phase measured.
pub(super) struct Services {
    /// Each device's kernels sending to its own service, in device order.
    pub(super) to_service: Vec<LaunchReport>,
    /// Those launches added up.
    pub(super) total: TotalReport,
    /// A host thread's round trips to each device's service, in device order.
    pub(super) host_to_service: Vec<Latency>,
    /// The host's tasks that failed, on every device.
    pub(super) host_failed: u64,
}

/// What the stop flags released.
pub(super) struct StopFlags {
    /// Threads released on each device, in device order.
    pub(super) stopped: Vec<usize>,
    /// Threads that no stop flag released, on every device.
    pub(super) not_released: u64,
}

/// The launch of kernels that send to a device's service: their own device's, or another's
/// over a peer route.
pub(super) fn launch<A: GpuApi>(demo: &Demo<'_, A>) -> EchoLaunch {
    let gpu = demo.gpu;
    EchoLaunch {
        blocks: if gpu { 132 } else { 4 },
        threads: if gpu { 64 } else { 8 },
        tasks_per_thread: if gpu { 16 } else { 50 },
        route: EchoRoute::GpuService,
        ..demo.launch
    }
}

/// Starts every device's service and sends it tasks from its device's kernels, all devices at
/// once, then from the host; the services keep running for the peer phase.
pub(super) fn run<'r, A: GpuApi>(
    demo: &Demo<'r, A>,
    kernels: &mut [RuntimeKernels<'r, A>],
) -> Result<(Vec<GpuService<'r, A>>, Services), String> {
    let devices = demo.devices;
    // On a GPU, a quarter of the multiprocessors, 128 threads each: the
    // kernels' tasks split evenly among the service's threads.
    let service_shape = |queues: &DeviceQueues<_>| {
        if demo.gpu {
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
    let to_gpu = launch(demo);
    demo.say(format!(
        "{} on each device, {service_blocks} x {service_threads} threads;\n  \
         kernels of {} x {} threads on every device at once, each thread sending {} math.add\n  \
         tasks to its own device's service:",
        demo.service(),
        to_gpu.blocks,
        to_gpu.threads,
        to_gpu.tasks_per_thread
    ));
    let (routed, wall) = echo_on_every_device(kernels, &to_gpu)?;
    let to_service: Vec<LaunchReport> = routed
        .iter()
        .map(|o| LaunchReport::of(&to_gpu, o))
        .collect();
    let (host_to_service, host_failed) = host_to_services(demo, &to_service);
    let total = TotalReport::of(&to_service, wall);
    demo.say(format!(
        "  {} in all: {} tasks in {:.3} s, {:.2} M tasks/s",
        devices_word(total.devices),
        total.tasks,
        total.seconds,
        total.tasks_per_second / 1e6
    ));
    Ok((
        services,
        Services {
            to_service,
            total,
            host_to_service,
            host_failed,
        },
    ))
}

/// A host thread's round trips to each device's service, each device's line with what its
/// kernels did (`to_service`); the latencies in device order and the failures on all.
fn host_to_services<A: GpuApi>(
    demo: &Demo<'_, A>,
    to_service: &[LaunchReport],
) -> (Vec<Latency>, u64) {
    let stop = AtomicU32::new(0);
    let mut latencies = Vec::new();
    let mut failed_in_all = 0;
    for (d, (queues, report)) in demo.devices.iter().zip(to_service).enumerate() {
        let (times, failed) = host_round_trips(500, 2, demo.service(), |task| {
            demo.runtime
                .submit_to_gpu(d, task, None)
                .and_then(|mut p| p.wait(&stop, None))
        });
        failed_in_all += failed;
        let latency = Latency::of(times);
        demo.say(format!(
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
        latencies.push(latency);
    }
    (latencies, failed_in_all)
}

/// Stops every device's service; the tasks each ran, in device order.
pub(super) fn stop<A: GpuApi>(
    demo: &Demo<'_, A>,
    services: Vec<GpuService<'_, A>>,
) -> Result<Vec<u64>, String> {
    let mut ran = Vec::new();
    for (queues, running) in demo.devices.iter().zip(services) {
        let served = running.stop().map_err(|e| e.to_string())?;
        demo.say(format!(
            "  device {}'s service ran {} tasks",
            queues.device().ordinal(),
            served.served
        ));
        ran.push(served.served);
    }
    Ok(ran)
}

/// Kernels on every device wait for tasks no service serves (the services are stopped) until
/// the host raises each device's stop flag.
pub(super) fn stop_flags<A: GpuApi>(
    demo: &Demo<'_, A>,
    kernels: &mut [RuntimeKernels<'_, A>],
) -> Result<StopFlags, String> {
    let gpu = demo.gpu;
    let waiting = EchoLaunch {
        blocks: if gpu { 8 } else { 2 },
        threads: if gpu { 64 } else { 4 },
        tasks_per_thread: 1,
        method: math::NOOP,
        route: EchoRoute::GpuService,
        ..demo.launch
    };
    let stopped = std::thread::scope(|s| {
        let running: Vec<_> = kernels
            .iter_mut()
            .map(|k| s.spawn(move || k.echo(&waiting)))
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        for queues in demo.devices {
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
    for queues in demo.devices {
        queues.clear_stop();
    }
    let waiting_threads = (waiting.blocks * waiting.threads) as usize;
    let not_released: u64 = stopped
        .iter()
        .map(|&n| (waiting_threads - n.min(waiting_threads)) as u64)
        .sum();
    demo.say(format!(
        "stop flags: kernels of {waiting_threads} threads on each device wait on tasks nobody serves;\n  \
         raising each device's stop flag released {} of {}",
        stopped.iter().sum::<usize>(),
        waiting_threads * demo.devices.len()
    ));
    Ok(StopFlags {
        stopped,
        not_released,
    })
}
