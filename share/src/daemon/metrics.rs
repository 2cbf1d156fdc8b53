//! The daemon's Prometheus series: its books read under the ledger's lock at the scrape (what
//! `tandem share status` reads), and refusals and requests counted as they happen.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tandem_hal::GpuApi;
use tandem_metrics::{LatencyHistogram, Scrape, Source, Unit};

use super::{lock, DaemonState};

/// Why the daemon turned a client or a request away.
#[derive(Debug, Clone, Copy)]
pub(super) enum Refusal {
    /// Over the connections' limits, in all or per client process.
    Connections,
    /// A create over the buffer limit.
    Buffers,
    /// Out of file descriptors.
    Descriptors,
    /// A frame that is not a valid request, or a descriptor sent with one.
    BadFrame,
    /// A connection from another user.
    OtherUser,
}

impl Refusal {
    const ALL: [Refusal; 5] = [
        Refusal::Connections,
        Refusal::Buffers,
        Refusal::Descriptors,
        Refusal::BadFrame,
        Refusal::OtherUser,
    ];

    fn label(self) -> &'static str {
        match self {
            Refusal::Connections => "connections",
            Refusal::Buffers => "buffers",
            Refusal::Descriptors => "descriptors",
            Refusal::BadFrame => "bad_frame",
            Refusal::OtherUser => "other_user",
        }
    }
}

/// What the daemon counts as it serves.
#[derive(Debug, Default)]
pub(super) struct DaemonCounters {
    refusals: [AtomicU64; Refusal::ALL.len()],
    requests: LatencyHistogram,
}

impl DaemonCounters {
    pub(super) fn refused(&self, why: Refusal) {
        self.refusals[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A request answered in `took` (its reply sent).
    pub(super) fn answered(&self, took: Duration) {
        self.requests.observe(took);
    }
}

impl<A: GpuApi> Source for DaemonState<A> {
    fn collect(&self, scrape: &mut Scrape) {
        let status = self.status();
        let connections = lock(&self.connections).len();
        let gauges: [(&str, &str, Option<Unit>, f64); 10] = [
            (
                "tandem_share_buffers",
                "Buffers held (deleted ones still leased included)",
                None,
                f64::from(status.objects),
            ),
            (
                "tandem_share_buffer",
                "Bytes of the buffers' allocations",
                Some(Unit::Bytes),
                status.bytes as f64,
            ),
            (
                "tandem_share_leases",
                "Leases held on buffers",
                None,
                f64::from(status.leases),
            ),
            (
                "tandem_share_clients",
                "Client processes connected",
                None,
                f64::from(status.clients),
            ),
            (
                "tandem_share_connections",
                "Connections open",
                None,
                connections as f64,
            ),
            (
                "tandem_share_kept_buffers",
                "Deleted buffers' allocations kept for their creators",
                None,
                f64::from(status.kept),
            ),
            (
                "tandem_share_kept",
                "Bytes of those allocations",
                Some(Unit::Bytes),
                status.kept_bytes as f64,
            ),
            (
                "tandem_share_sets",
                "Named sets held",
                None,
                f64::from(status.sets),
            ),
            (
                "tandem_share_set_versions",
                "Versions the named sets keep",
                None,
                f64::from(status.set_versions),
            ),
            (
                "tandem_share_set",
                "Bytes of those versions' buffers",
                Some(Unit::Bytes),
                status.set_bytes as f64,
            ),
        ];
        for (name, help, unit, value) in gauges {
            scrape.gauge(name, help, unit, [(vec![], value)]);
        }
        let c = &self.counters;
        scrape.counter(
            "tandem_share_refusals",
            "Connections and requests turned away, by reason: connections or buffers over \
             their limits, out of descriptors, a bad frame, another user",
            None,
            Refusal::ALL.map(|why| {
                let n = c.refusals[why as usize].load(Ordering::Relaxed);
                (vec![("reason", why.label().to_owned())], n)
            }),
        );
        scrape.histogram(
            "tandem_share_request_latency",
            "Time from a request's arrival to its reply",
            [(vec![], c.requests.snapshot())],
        );
    }
}
