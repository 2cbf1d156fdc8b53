//! The runtime's Prometheus series, read at each scrape from its status block and client
//! table: the workers' hot path keeps the counters it always kept, and nothing more; the round
//! trips are the host clients' own, counted in their slots (`client_table::ClientRoundTrips`).

use tandem_metrics::{HistogramSnapshot, Labels, Scrape, Source, Unit};

use crate::status::{read_runtime, SegmentStatus, ServiceCounts, StatusSnapshot};

/// Reads the status block of the runtime whose CPU segment is `segment` at every scrape.
pub(crate) struct RuntimeSource {
    pub(crate) segment: String,
}

impl Source for RuntimeSource {
    fn collect(&self, scrape: &mut Scrape) {
        match read_runtime(&self.segment) {
            Ok((status, round_trips)) => {
                status_series(&status, scrape);
                round_trip_series(round_trips, scrape);
            }
            Err(e) => tracing::warn!("metrics: cannot read the status block: {e}"),
        }
    }
}

/// The series a status block gives: tasks by pool and by segment, queues, workers, clients.
fn status_series(s: &StatusSnapshot, scrape: &mut Scrape) {
    let info = vec![
        ("segment", s.segment.clone()),
        ("backend", s.runtime.backend.clone()),
    ];
    scrape.gauge(
        "tandem_runtime_info",
        "The runtime serving: its CPU segment and backend.",
        None,
        [(info, 1.0)],
    );
    scrape.gauge(
        "tandem_runtime_uptime",
        "Time since the runtime started.",
        Some(Unit::Seconds),
        [(vec![], s.runtime.uptime_s)],
    );
    pool_series(s, scrape);
    segment_series(s, scrape);
    worker_series(s, scrape);
    client_series(s, scrape);
}

/// Tasks completed and failed by pool, and the records no task could be made of.
fn pool_series(s: &StatusSnapshot, scrape: &mut Scrape) {
    let pool = |name: &str, id: String| vec![("pool", name.to_owned()), ("pool_id", id)];
    let mut completed: Vec<(Labels, u64)> = Vec::new();
    let mut failed: Vec<(Labels, u64)> = Vec::new();
    for p in &s.pools {
        completed.push((pool(&p.name, p.id.to_string()), p.completed));
        failed.push((pool(&p.name, p.id.to_string()), p.failed));
    }
    completed.push((pool("other", String::new()), s.other.completed));
    failed.push((pool("other", String::new()), s.other.failed));
    scrape.counter(
        "tandem_tasks_completed",
        "Tasks the CPU workers completed (failed ones included), by pool; `other` is pools past \
         the status block's list and tasks no pool ran.",
        None,
        completed,
    );
    scrape.counter(
        "tandem_tasks_failed",
        "Tasks completed with a nonzero return code, by pool.",
        None,
        failed,
    );
    scrape.counter(
        "tandem_tasks_bad_pointers",
        "Records naming no future of their segment, skipped.",
        None,
        [(vec![], s.tasks.bad_pointers)],
    );
    scrape.counter(
        "tandem_tasks_double_completions",
        "Futures found already complete when a worker took them.",
        None,
        [(vec![], s.tasks.double_completions)],
    );
}

/// Per segment: the route a record came by (host clients through the CPU segment, a device's
/// kernels through its device segment), its queue depth and workers.
fn segment_series(s: &StatusSnapshot, scrape: &mut Scrape) {
    let labels = |kind: &str, device: Option<u32>| -> Labels {
        let device = device.map_or_else(String::new, |d| d.to_string());
        vec![("segment", kind.to_owned()), ("device", device)]
    };
    let rows = || {
        s.segments
            .iter()
            .map(|seg| (labels(&seg.kind, seg.device), seg))
    };
    scrape.counter(
        "tandem_segment_tasks",
        "Records the CPU workers took from a segment: `cpu` from host clients, `device` from a \
         device's kernels.",
        None,
        rows().map(|(l, seg)| (l, seg.tasks)).collect::<Vec<_>>(),
    );
    scrape.counter(
        "tandem_segment_tasks_failed",
        "Of the records the CPU workers took from a segment, tasks completed with a nonzero \
         return code.",
        None,
        rows().map(|(l, seg)| (l, seg.failed)).collect::<Vec<_>>(),
    );
    gpu_service_series(&s.segments, scrape);
    scrape.gauge(
        "tandem_queue_depth",
        "Records waiting in a segment's lanes.",
        None,
        rows()
            .map(|(l, seg)| (l, seg.queued as f64))
            .collect::<Vec<_>>(),
    );
    scrape.gauge(
        "tandem_segment_workers",
        "Workers polling a segment's lanes.",
        None,
        rows()
            .map(|(l, seg)| (l, f64::from(seg.workers)))
            .collect::<Vec<_>>(),
    );
    let queues = s.clients.iter().flat_map(|c| &c.device_queues);
    scrape.counter(
        "tandem_client_device_queue_tasks",
        "Records the workers took from host clients' own device queues, by device.",
        None,
        queues
            .map(|q| (vec![("device", q.device.to_string())], q.tasks))
            .fold(Vec::<(Labels, u64)>::new(), sum_by_labels),
    );
}

/// The GPU services' tasks per device, by route: `kernel`, sent by kernels to their device's
/// service; `host`, sent by host threads to a device's service.
fn gpu_service_series(segments: &[SegmentStatus], scrape: &mut Scrape) {
    let devices = || {
        segments
            .iter()
            .filter_map(|seg| seg.device.map(|d| (d.to_string(), seg.gpu_service)))
    };
    let by_route = |pick: fn(&ServiceCounts) -> [u64; 2]| {
        devices()
            .flat_map(|(device, counts)| {
                let [kernel, host] = pick(&counts);
                [("kernel", kernel), ("host", host)].map(|(route, n)| {
                    (
                        vec![("device", device.clone()), ("route", route.to_owned())],
                        n,
                    )
                })
            })
            .collect::<Vec<_>>()
    };
    scrape.counter(
        "tandem_gpu_service_tasks_completed",
        "Tasks a device's GPU services ran and answered (failed ones included), by route: \
         `kernel`, sent by kernels; `host`, sent by host threads. Each service thread adds its \
         count every few thousand tasks and when it idles.",
        None,
        by_route(|c| [c.kernel_tasks, c.host_tasks]),
    );
    scrape.counter(
        "tandem_gpu_service_tasks_failed",
        "Tasks a device's GPU services answered with a nonzero return code, by route.",
        None,
        by_route(|c| [c.kernel_failed, c.host_failed]),
    );
    scrape.counter(
        "tandem_gpu_service_tasks_skipped",
        "Entries a device's GPU services could not run or answer: they named no future of the \
         segment.",
        None,
        devices()
            .map(|(device, c)| (vec![("device", device)], c.skipped))
            .collect::<Vec<_>>(),
    );
}

fn worker_series(s: &StatusSnapshot, scrape: &mut Scrape) {
    scrape.gauge(
        "tandem_workers",
        "Worker threads running.",
        None,
        [(vec![], f64::from(s.workers.running))],
    );
    scrape.gauge(
        "tandem_workers_busy",
        "Workers that completed a task during the last heartbeat period.",
        None,
        [(vec![], f64::from(s.workers.busy))],
    );
}

/// Client slots by state (`attached`, or `claiming`, `detaching`, `reclaiming` while a dead
/// client's slot is taken back) and their heaps.
fn client_series(s: &StatusSnapshot, scrape: &mut Scrape) {
    scrape.gauge(
        "tandem_clients_attached",
        "Host clients holding a client slot.",
        None,
        [(vec![], f64::from(s.clients_attached.unwrap_or(0)))],
    );
    let totals = &s.client_totals;
    scrape.counter(
        "tandem_client_attaches",
        "Host clients that attached since the runtime started.",
        None,
        [(vec![], totals.attached)],
    );
    let reasons = [
        ("gone", totals.reclaimed_gone),
        ("detached", totals.reclaimed_detached),
    ];
    scrape.counter(
        "tandem_clients_reclaimed",
        "Client slots the runtime took back, by reason: `gone`, its client's process died; \
         `detached`, it detached with tasks outstanding.",
        None,
        reasons.map(|(why, n)| (vec![("reason", why.to_owned())], n)),
    );
    let mut by_state: Vec<(Labels, u64)> = ["claiming", "attached", "detaching", "reclaiming"]
        .iter()
        .map(|state| (vec![("state", (*state).to_owned())], 0))
        .collect();
    for c in &s.clients {
        by_state = sum_by_labels(by_state, (vec![("state", c.state.clone())], 1));
    }
    scrape.gauge(
        "tandem_client_slots",
        "Client slots in use, by state; `reclaiming` is a dead client's slot being taken back.",
        None,
        by_state.into_iter().map(|(l, n)| (l, n as f64)),
    );
    let slot = |c: &crate::status::ClientStatus| vec![("slot", c.slot.to_string())];
    scrape.gauge(
        "tandem_client_heap",
        "A client's heap, its quota, by slot",
        Some(Unit::Bytes),
        s.clients
            .iter()
            .map(|c| (slot(c), c.heap_bytes as f64))
            .collect::<Vec<_>>(),
    );
    scrape.gauge(
        "tandem_client_heap_used",
        "Bytes in use in a client's heap, by slot: at its size, the client's requests fail \
         with ClientQuota",
        Some(Unit::Bytes),
        s.clients
            .iter()
            .map(|c| (slot(c), c.in_use_bytes as f64))
            .collect::<Vec<_>>(),
    );
}

fn round_trip_series(round_trips: HistogramSnapshot, scrape: &mut Scrape) {
    scrape.histogram(
        "tandem_client_task_round_trip",
        "Time from a host client's submit until its wait saw the task complete",
        [(vec![], round_trips)],
    );
}

/// Adds `row` to the row of the same labels, or appends it.
fn sum_by_labels(mut rows: Vec<(Labels, u64)>, row: (Labels, u64)) -> Vec<(Labels, u64)> {
    match rows.iter_mut().find(|(labels, _)| *labels == row.0) {
        Some((_, n)) => *n += row.1,
        None => rows.push(row),
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(device: Option<u32>, gpu_service: ServiceCounts) -> SegmentStatus {
        SegmentStatus {
            kind: if device.is_some() { "device" } else { "cpu" }.into(),
            device,
            numa_node: None,
            bytes: 0,
            lanes: 0,
            queued: 0,
            workers: 0,
            tasks: 0,
            failed: 0,
            gpu_service,
        }
    }

    #[test]
    fn each_devices_service_counts_are_series_by_route() {
        let counts = ServiceCounts {
            kernel_tasks: 7,
            kernel_failed: 2,
            host_tasks: 5,
            host_failed: 1,
            skipped: 3,
        };
        let segments = [
            segment(None, ServiceCounts::default()),
            segment(Some(1), counts),
        ];
        let mut scrape = Scrape::default();
        gpu_service_series(&segments, &mut scrape);
        let text = scrape.encode();
        for line in [
            r#"tandem_gpu_service_tasks_completed_total{device="1",route="kernel"} 7"#,
            r#"tandem_gpu_service_tasks_completed_total{device="1",route="host"} 5"#,
            r#"tandem_gpu_service_tasks_failed_total{device="1",route="kernel"} 2"#,
            r#"tandem_gpu_service_tasks_failed_total{device="1",route="host"} 1"#,
            r#"tandem_gpu_service_tasks_skipped_total{device="1"} 3"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert!(
            !text.contains(r#"device="""#),
            "no series for the CPU segment:\n{text}"
        );
    }
}
