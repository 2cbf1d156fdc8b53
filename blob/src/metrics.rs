//! The store's Prometheus series: puts and gets counted as they finish (relaxed counters, a
//! few nanoseconds beside a put's microseconds), targets' space read at the scrape.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tandem_metrics::{Labels, LatencyHistogram, Scrape, Unit};

use crate::config::TargetKind;
use crate::context::{Codec, Compression};
use crate::types::TargetStat;

/// The codecs a put may ask for, in their counters' order.
const CODECS: [&str; 3] = ["none", "lz4", "zstd"];

fn codec_index(compression: Compression) -> usize {
    match compression {
        Compression::Skip => 0,
        Compression::Static(Codec::Lz4, _) | Compression::Dynamic(Codec::Lz4, _) => 1,
        Compression::Static(Codec::Zstd, _) | Compression::Dynamic(Codec::Zstd, _) => 2,
    }
}

#[derive(Debug, Default)]
struct Count {
    ops: AtomicU64,
    bytes: AtomicU64,
}

impl Count {
    fn add(&self, bytes: u64) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// What the store's calls did since it opened.
#[derive(Debug)]
pub(crate) struct BlobCounters {
    /// Puts by the target their first page went to, and the codec they asked for.
    puts: Vec<[Count; CODECS.len()]>,
    gets: Count,
    put_errors: AtomicU64,
    get_errors: AtomicU64,
    put_latency: LatencyHistogram,
    get_latency: LatencyHistogram,
}

impl BlobCounters {
    /// Counters for a store of `targets` targets.
    pub(crate) fn new(targets: usize) -> Self {
        BlobCounters {
            puts: (0..targets).map(|_| Default::default()).collect(),
            gets: Count::default(),
            put_errors: AtomicU64::new(0),
            get_errors: AtomicU64::new(0),
            put_latency: LatencyHistogram::default(),
            get_latency: LatencyHistogram::default(),
        }
    }

    /// A put of `len` bytes that went to `targets` (empty: it failed), taking `took`.
    pub(crate) fn put_done(
        &self,
        targets: Option<&[usize]>,
        len: u64,
        how: Compression,
        took: Duration,
    ) {
        self.put_latency.observe(took);
        let first = targets
            .and_then(|t| t.first())
            .and_then(|&t| self.puts.get(t));
        match first {
            Some(by_codec) => by_codec[codec_index(how)].add(len),
            None => {
                self.put_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A get of `len` bytes, done or failed, taking `took`.
    pub(crate) fn get_done(&self, ok: bool, len: u64, took: Duration) {
        self.get_latency.observe(took);
        if ok {
            self.gets.add(len);
        } else {
            self.get_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn kind_name(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Ram => "ram",
        TargetKind::File => "file",
        TargetKind::Object => "object",
    }
}

impl BlobCounters {
    /// The store's series: these counters, its `crash_recoveries` (over its life, from its
    /// metadata), and `targets`' space.
    pub(crate) fn series(
        &self,
        targets: &[TargetStat],
        crash_recoveries: u64,
        scrape: &mut Scrape,
    ) {
        let c = self;
        let target = |i: usize| -> Labels {
            let kind = targets.get(i).map_or("", |t| kind_name(t.kind));
            vec![("target", i.to_string()), ("kind", kind.to_owned())]
        };
        let puts = c.puts.iter().enumerate().flat_map(|(i, by_codec)| {
            by_codec.iter().zip(CODECS).map(move |(count, codec)| {
                let mut labels = target(i);
                labels.push(("codec", codec.to_owned()));
                (labels, count)
            })
        });
        let puts: Vec<(Labels, &Count)> = puts.collect();
        let rows = |f: fn(&Count) -> u64| puts.iter().map(move |(l, n)| (l.clone(), f(n)));
        scrape.counter(
            "tandem_blob_puts",
            "Puts done, by the target their first page went to and the codec they asked for",
            None,
            rows(|n| n.ops.load(Ordering::Relaxed)),
        );
        scrape.counter(
            "tandem_blob_put",
            "Bytes put, by target and codec (before compression)",
            Some(Unit::Bytes),
            rows(|n| n.bytes.load(Ordering::Relaxed)),
        );
        let gets = [(vec![], &c.gets)];
        scrape.counter(
            "tandem_blob_gets",
            "Gets done",
            None,
            gets.map(|(l, n)| (l, n.ops.load(Ordering::Relaxed))),
        );
        scrape.counter(
            "tandem_blob_get",
            "Bytes got",
            Some(Unit::Bytes),
            [(vec![], c.gets.bytes.load(Ordering::Relaxed))],
        );
        let errors = [("put", &c.put_errors), ("get", &c.get_errors)];
        scrape.counter(
            "tandem_blob_errors",
            "Puts and gets refused or failed, by operation",
            None,
            errors.map(|(op, n)| (vec![("op", op.to_owned())], n.load(Ordering::Relaxed))),
        );
        let latency = [("put", &c.put_latency), ("get", &c.get_latency)];
        scrape.histogram(
            "tandem_blob_latency",
            "Time a put or get took in the store, by operation",
            latency.map(|(op, h)| (vec![("op", op.to_owned())], h.snapshot())),
        );
        scrape.counter(
            "tandem_blob_crash_recoveries",
            "Opens of the store that recovered it after a crash (the last process holding it \
             ended without closing it), over the store's life",
            None,
            [(vec![], crash_recoveries)],
        );
        let space = |f: fn(u64, u64) -> u64| {
            targets
                .iter()
                .filter(|t| t.kind != TargetKind::Object)
                .map(move |t| (target(t.index), f(t.capacity, t.used) as f64))
        };
        scrape.gauge(
            "tandem_blob_target_capacity",
            "A RAM or file target's capacity",
            Some(Unit::Bytes),
            space(|cap, _| cap).collect::<Vec<_>>(),
        );
        scrape.gauge(
            "tandem_blob_target_used",
            "Bytes allocated on a RAM or file target, puts in progress included",
            Some(Unit::Bytes),
            space(|_, used| used).collect::<Vec<_>>(),
        );
        scrape.gauge(
            "tandem_blob_target_free",
            "Bytes free on a RAM or file target",
            Some(Unit::Bytes),
            space(|cap, used| cap.saturating_sub(used)).collect::<Vec<_>>(),
        );
    }
}
