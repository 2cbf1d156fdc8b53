//! A latency histogram that threads observe into without a lock, and a scrape reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The buckets' upper bounds in seconds: from ten microseconds (a task's round trip through
/// shared memory) to ten seconds (a large blob through a file target), 1-2.5-5 per decade.
pub const LATENCY_BOUNDS: [f64; 19] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Durations counted into [`LATENCY_BOUNDS`]' buckets (and one past the last), with their sum.
/// Relaxed counters: a scrape may see one observation's bucket before its sum, which the next
/// scrape makes good; nothing orders other memory by them.
///
/// `repr(C)` and atomics alone, so that it may live in memory that processes share (a runtime's
/// client slots): all-zero bytes are an empty histogram, and any process may observe into it.
#[repr(C)]
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    sum_nanos: AtomicU64,
}

/// What a [`LatencyHistogram`] held when read: each bucket's own count (not cumulative), the
/// last one's bound infinite.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Upper bound in seconds and the observations in that bucket alone.
    pub buckets: Vec<(f64, u64)>,
    /// Observations in all.
    pub count: u64,
    /// Their sum in seconds.
    pub sum_seconds: f64,
}

impl HistogramSnapshot {
    /// No observation: what several histograms' [`add`](Self::add) starts from.
    pub fn empty() -> Self {
        LatencyHistogram::default().snapshot()
    }

    /// Adds `other`'s observations, bucket by bucket (both have [`LATENCY_BOUNDS`]' buckets).
    pub fn add(&mut self, other: &HistogramSnapshot) {
        for ((_, n), (_, m)) in self.buckets.iter_mut().zip(&other.buckets) {
            *n += m;
        }
        self.count += other.count;
        self.sum_seconds += other.sum_seconds;
    }
}

impl LatencyHistogram {
    /// Counts one duration.
    pub fn observe(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = LATENCY_BOUNDS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(LATENCY_BOUNDS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let bounds = LATENCY_BOUNDS.iter().copied().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds
            .zip(&self.buckets)
            .map(|(bound, n)| (bound, n.load(Ordering::Relaxed)))
            .collect();
        HistogramSnapshot {
            count: buckets.iter().map(|&(_, n)| n).sum(),
            buckets,
            sum_seconds: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = LatencyHistogram::default();
        h.observe(Duration::from_micros(5));
        h.observe(Duration::from_millis(1));
        h.observe(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[0], (0.000_01, 1));
        let ms = LATENCY_BOUNDS.iter().position(|&b| b == 0.001).unwrap();
        assert_eq!(s.buckets[ms], (0.001, 1));
        assert_eq!(*s.buckets.last().unwrap(), (f64::INFINITY, 1));
        assert!((s.sum_seconds - 60.001_005).abs() < 1e-9);
    }

    #[test]
    fn snapshots_add_bucket_by_bucket() {
        let (a, b) = (LatencyHistogram::default(), LatencyHistogram::default());
        a.observe(Duration::from_micros(5));
        b.observe(Duration::from_micros(5));
        b.observe(Duration::from_secs(1));
        let mut sum = HistogramSnapshot::empty();
        sum.add(&a.snapshot());
        sum.add(&b.snapshot());
        assert_eq!(sum.count, 3);
        assert_eq!(sum.buckets[0], (0.000_01, 2));
        assert!((sum.sum_seconds - 1.000_01).abs() < 1e-9);
    }
}
