//! What a Prometheus scrape every 100 ms costs a runtime's clients: host-client task
//! throughput and round trip against a `tandem run --metrics`, with a scraper and without,
//! taking turns in one run, printed side by side. The scrape reads the status block, which the
//! workers never wait on, so the target is no difference: 0.98x to 1.02x.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tandem_runtime::{math, Client, Pending, Route};

/// Rounds of each kind, taking turns (odd: the median is a round).
const ROUNDS: usize = 7;
/// How long a throughput round submits for.
const THROUGHPUT_TIME: Duration = Duration::from_millis(700);
/// Calls timed in a round-trip round.
const ROUND_TRIPS: u64 = 5000;
/// Host threads submitting in a throughput round, and tasks each keeps in flight.
const THREADS: usize = 2;
const IN_FLIGHT: usize = 32;
const SCRAPE_EVERY: Duration = Duration::from_millis(100);

/// The integration tests' helpers: the `tandem` binary (`TANDEM_BIN_DIR` in a GPU bundle), a
/// service started until ready and stopped at the end, a free port, a scrape.
#[path = "../tests/common/mod.rs"]
mod common;

/// `tandem run` with a metrics endpoint, stopped when dropped.
struct Runtime {
    _service: common::Cleanup,
    _dir: tempfile::TempDir,
    segment: String,
    metrics: SocketAddr,
}

fn start(workers: usize) -> Runtime {
    let metrics = common::scrape::free_addr();
    let segment = format!("tandem-scrape-bench-{}", std::process::id());
    let dir = tempfile::tempdir().expect("a temporary folder");
    let config = dir.path().join("tandem.toml");
    let text = format!("workers = {workers}\ndevices = []\ncpu_segment_name = {segment:?}\n");
    std::fs::write(&config, text).expect("write the configuration");
    let mut service = common::Cleanup::default();
    let (config, address) = (config.to_str().expect("a UTF-8 path"), metrics.to_string());
    let args = ["run", "--config", config, "--metrics", &address];
    common::start_service(&args, &mut service);
    Runtime {
        _service: service,
        _dir: dir,
        segment,
        metrics,
    }
}

/// One scrape; whether it answered 200.
fn scrape(addr: SocketAddr) -> bool {
    matches!(common::scrape::try_http_get(addr, "/metrics"), Ok((200, _)))
}

/// Tasks a second, `THREADS` clients each keeping `IN_FLIGHT` in flight.
fn throughput(segment: &str) -> f64 {
    let done = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let client = Client::attach(segment).expect("attach");
                let stop = AtomicU32::new(0);
                while start.elapsed() < THROUGHPUT_TIME {
                    let add = |i: u64| client.submit(Route::lane(0), &math::Add { a: i, b: 1 });
                    let mut pending: Vec<Pending<'_, math::Add>> = (0..IN_FLIGHT as u64)
                        .map(|i| add(i).expect("submit"))
                        .collect();
                    for (i, p) in pending.iter_mut().enumerate() {
                        assert_eq!(p.wait(&stop, None), Ok(i as u64 + 1));
                    }
                    done.fetch_add(IN_FLIGHT as u64, Ordering::Relaxed);
                }
            });
        }
    });
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// Microseconds a call, one host thread calling one at a time.
fn round_trip(client: &Client) -> f64 {
    let stop = AtomicU32::new(0);
    let start = Instant::now();
    for i in 0..ROUND_TRIPS {
        let sum = client.call(Route::lane(1), &math::Add { a: i, b: 2 }, &stop, None);
        assert_eq!(sum, Ok(i + 2));
    }
    start.elapsed().as_secs_f64() * 1e6 / ROUND_TRIPS as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// What a round measured: tasks a second, microseconds a round trip, scrapes made.
struct Measured {
    throughput: f64,
    round_trip: f64,
    scrapes: u64,
}

/// A round of both measurements, with a scraper at work during it or not.
fn round(runtime: &Runtime, client: &Client, scraping: bool) -> Measured {
    let running = AtomicBool::new(true);
    let scrapes = AtomicU64::new(0);
    let (throughput, round_trip) = std::thread::scope(|s| {
        if scraping {
            s.spawn(|| {
                while running.load(Ordering::Relaxed) {
                    assert!(scrape(runtime.metrics), "a scrape failed");
                    scrapes.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(SCRAPE_EVERY);
                }
            });
        }
        let measured = (throughput(&runtime.segment), round_trip(client));
        running.store(false, Ordering::Relaxed);
        measured
    });
    Measured {
        throughput,
        round_trip,
        scrapes: scrapes.load(Ordering::Relaxed),
    }
}

/// "meets" or "OUTSIDE" the 0.98x..1.02x target, or no target where the cores are shared.
fn verdict(targets: bool, ratio: f64) -> &'static str {
    match (targets, (0.98..=1.02).contains(&ratio)) {
        (false, _) => "no target on shared cores",
        (true, true) => "meets",
        (true, false) => "OUTSIDE",
    }
}

fn main() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = 2;
    // The clients, the workers and the scraper each on a core of their own.
    let targets = cores >= workers + THREADS + 2;
    let runtime = start(workers);
    let client = Client::attach(&runtime.segment).expect("attach");
    // A first round warms the runtime and the client's heap; not counted.
    round(&runtime, &client, false);
    let (mut quiet, mut scraped) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        quiet.push(round(&runtime, &client, false));
        scraped.push(round(&runtime, &client, true));
    }
    let scrapes: u64 = scraped.iter().map(|m| m.scrapes).sum();
    let pick =
        |rounds: &[Measured], f: fn(&Measured) -> f64| median(rounds.iter().map(f).collect());
    println!(
        "tandem run --metrics, {workers} workers, {cores} cores: no scrape against a scrape \
         every {} ms ({scrapes} scrapes), median of {ROUNDS} rounds each, taking turns",
        SCRAPE_EVERY.as_millis()
    );
    let (tq, ts) = (
        pick(&quiet, |m| m.throughput),
        pick(&scraped, |m| m.throughput),
    );
    println!(
        "  host-client throughput ({THREADS} threads x {IN_FLIGHT} in flight): {:.3} M tasks/s, \
         scraped {:.3} M tasks/s: {:.3}x, target 0.98x..1.02x: {}",
        tq / 1e6,
        ts / 1e6,
        ts / tq,
        verdict(targets, ts / tq)
    );
    let (rq, rs) = (
        pick(&quiet, |m| m.round_trip),
        pick(&scraped, |m| m.round_trip),
    );
    println!(
        "  host-client round trip (1 thread): {rq:.2} us, scraped {rs:.2} us: {:.3}x, \
         target 0.98x..1.02x: {}",
        rs / rq,
        verdict(targets, rs / rq)
    );
}
