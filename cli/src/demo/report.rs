//! The demo's report: each device's figures, every task the demo sent and those that failed,
//! printed as one verdict line or as one JSON object.

use serde::Serialize;
use tandem_hal::{GpuApi, GpuDevice};

use super::figures::{Latency, LaunchReport, TotalReport};
use super::peers::PeerReport;
use super::services::{Services, StopFlags};
use super::workers::{KernelRoundTrips, Workers};
use super::Demo;
use crate::blob::Tally;
use crate::stdout;

/// What the demo's phases measured.
pub(super) struct Phases {
    pub(super) workers: Workers,
    pub(super) services: Services,
    pub(super) peers: Vec<PeerReport>,
    /// The tasks each device's service ran, in device order.
    pub(super) served: Vec<u64>,
    pub(super) blob: Tally,
    pub(super) stop_flags: StopFlags,
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

/// The demo's report, ready to print.
pub(super) struct Report {
    figures: DemoReport,
    json: bool,
    /// The verdict line's parts of `figures.tasks`.
    to_cpu_workers: u64,
    to_services: u64,
    blob_calls: u64,
}

impl Report {
    /// The report of a demo on `backend` (in words) whose phases measured `phases`.
    pub(super) fn of<A: GpuApi>(demo: &Demo<'_, A>, backend: &str, phases: Phases) -> Self {
        let Phases {
            workers,
            services,
            peers,
            served,
            blob,
            stop_flags,
        } = phases;
        let peer_launches = || peers.iter().filter_map(PeerReport::sent);
        // Counted as the lines above show them: the tasks sent to the CPU
        // workers, to the devices' services (from their own kernels, the host,
        // and other devices' kernels), and the blob puts and gets. The runtime's
        // own count, logged at its stop, is what its workers ran: neither the
        // services' tasks nor the blob kernels'.
        let to_cpu_workers =
            workers.total.tasks + workers.single.tasks + workers.host_round_trip.samples as u64;
        let to_services = services.total.tasks
            + services
                .host_to_service
                .iter()
                .map(|latency| latency.samples as u64)
                .sum::<u64>()
            + peer_launches().map(|launch| launch.tasks).sum::<u64>();
        let blob_calls = blob.puts + blob.gets;
        let failed = workers.total.failures()
            + workers.single.failed
            + workers.host_failed
            + services.total.failures()
            + services.host_failed
            + peer_launches().map(LaunchReport::failures).sum::<u64>()
            + blob.failed
            + stop_flags.not_released;
        let devices = device_reports(
            demo,
            workers.to_workers,
            workers.single,
            services.to_service,
            services.host_to_service,
            served,
            stop_flags.stopped,
        );
        let figures = DemoReport {
            backend: backend.to_string(),
            device: demo.device_word(),
            workers: demo.runtime.workers(),
            to_workers: workers.total,
            workers_completed: workers.stats.completed,
            workers_failed: workers.stats.failed,
            to_services: services.total,
            devices,
            peers,
            host_round_trip: workers.host_round_trip,
            blob_puts: blob.puts,
            blob_gets: blob.gets,
            blob_failed: blob.failed,
            tasks: to_cpu_workers + to_services + blob_calls,
            failed,
            ok: failed == 0,
        };
        Self {
            figures,
            json: demo.json,
            to_cpu_workers,
            to_services,
            blob_calls,
        }
    }

    /// Prints the report; whether every task succeeded.
    pub(super) fn print(self) -> Result<bool, String> {
        let DemoReport {
            tasks, failed, ok, ..
        } = self.figures;
        if self.json {
            stdout::print_line(
                &serde_json::to_string_pretty(&self.figures).map_err(|e| e.to_string())?,
            );
        } else {
            let verdict = if ok { "ok" } else { "FAILED" };
            stdout::print_line(&format!(
                "demo: {tasks} tasks ({} to workers, {} to services, {} blob calls), \
                 {failed} failed: {verdict}",
                self.to_cpu_workers, self.to_services, self.blob_calls
            ));
        }
        Ok(ok)
    }
}

/// Each device's figures, in device order, from the phases' lists in device order.
fn device_reports<A: GpuApi>(
    demo: &Demo<'_, A>,
    to_workers: Vec<LaunchReport>,
    single: KernelRoundTrips,
    to_service: Vec<LaunchReport>,
    host_to_service: Vec<Latency>,
    served: Vec<u64>,
    stopped: Vec<usize>,
) -> Vec<DeviceReport> {
    let mut to_workers = to_workers.into_iter();
    let mut kernel_round_trips = single.latencies.into_iter();
    let mut to_service = to_service.into_iter();
    let mut host_to_service = host_to_service.into_iter();
    let mut reports = Vec::with_capacity(demo.devices.len());
    for (d, queues) in demo.devices.iter().enumerate() {
        let next = "one figure per device";
        reports.push(DeviceReport {
            ordinal: queues.device().ordinal(),
            name: queues.properties().name.clone(),
            workers: queues.workers(),
            worker_cpus: queues.worker_cpus().to_vec(),
            to_workers: to_workers.next().expect(next),
            kernel_round_trip: kernel_round_trips.next().expect(next),
            launch_and_sync_us: single.launch_and_sync[d],
            to_service: to_service.next().expect(next),
            host_to_service_round_trip: host_to_service.next().expect(next),
            service_ran: served[d],
            stopped_threads: stopped[d],
        });
    }
    reports
}
