//! Two processes, one shared segment mapped at different addresses: records
//! go through shm-core's SPSC ring with their bytes in the size-class
//! allocator. Every record arrives once, intact; a producer killed mid-stream
//! leaves the consumer with a clear error and the records sent so far, not a
//! hang, and its segment is found by `tandem clean`'s scan.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tandem_runtime::{clean_stale_segments, StaleWhy};
use tandem_tests::support::lines;

/// The `exchange` binary: `$TANDEM_BIN_DIR/exchange` when set (a GPU bundle
/// carries binaries away from the build machine), else the one cargo built.
fn exchange_exe() -> PathBuf {
    match std::env::var_os("TANDEM_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("exchange"),
        None => env!("CARGO_BIN_EXE_exchange").into(),
    }
}

fn assert_segment_name_removed(name: &str) {
    assert!(
        !std::path::Path::new(&format!("/dev/shm/{name}")).exists(),
        "segment name left behind"
    );
}

/// `exchange <args>` started with its stdout piped, and that stdout's lines.
fn start(args: &[&str]) -> (Reaped, mpsc::Receiver<String>) {
    let mut child = Reaped(
        Command::new(exchange_exe())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let out = lines(&mut child.0);
    (child, out)
}

/// A producer of far more records than can be sent before a kill (more than
/// the ring and heap hold: it blocks on its consumer), ready, and a consumer
/// that has received some of them; both with their stdout lines.
fn mid_stream(
    name: &str,
    seen: &mut Vec<String>,
) -> (
    (Reaped, mpsc::Receiver<String>),
    (Reaped, mpsc::Receiver<String>),
) {
    let producer = start(&["produce", name, "1000000000"]);
    next_line_with(&producer.1, "ready", seen);
    let consumer = start(&["consume", name]);
    next_line_with(&consumer.1, "received 20000", seen);
    (producer, consumer)
}

fn unique_name(tag: &str) -> String {
    format!("tandem-test-{tag}-{}", std::process::id())
}

/// Kills the child if the test fails before it was reaped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn next_line_with(rx: &mpsc::Receiver<String>, prefix: &str, seen: &mut Vec<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no `{prefix}` line ({e}); saw {seen:?}"));
        seen.push(line.clone());
        if line.starts_with(prefix) {
            return line;
        }
    }
}

fn wait_with_deadline(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "process did not exit within {limit:?}: hang"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn address(line: &str) -> usize {
    let hex = line.split_whitespace().nth(1).expect("address");
    usize::from_str_radix(hex.trim_start_matches("0x"), 16).expect("hex address")
}

#[test]
fn every_record_arrives_once_intact() {
    const RECORDS: u64 = 200_000;
    let name = unique_name("clean");
    let (mut producer, from_producer) = start(&["produce", &name, &RECORDS.to_string()]);
    let mut seen = Vec::new();
    let ready = next_line_with(&from_producer, "ready", &mut seen);

    let (mut consumer, from_consumer) = start(&["consume", &name]);
    let attached = next_line_with(&from_consumer, "attached", &mut seen);
    assert_ne!(
        address(&ready),
        address(&attached),
        "both processes mapped one address"
    );

    let done = next_line_with(&from_consumer, "received 200000 records intact", &mut seen);
    assert!(done.contains("all free"), "{done}");
    assert!(wait_with_deadline(&mut consumer.0, Duration::from_secs(60)).success());
    assert!(wait_with_deadline(&mut producer.0, Duration::from_secs(60)).success());
    assert_segment_name_removed(&name);
}

#[test]
fn killed_producer_leaves_consumer_with_an_error_not_a_hang() {
    let name = unique_name("killed");
    let mut seen = Vec::new();
    let ((mut producer, _from_producer), (mut consumer, from_consumer)) =
        mid_stream(&name, &mut seen);

    producer.0.kill().unwrap();
    producer.0.wait().unwrap();

    let status = wait_with_deadline(&mut consumer.0, Duration::from_secs(20));
    assert_eq!(status.code(), Some(3), "consumer exit: {status:?}");
    let error = next_line_with(&from_consumer, "error:", &mut seen);
    assert!(error.contains("died mid-stream"), "{error}");
    let received: u64 = error
        .split_whitespace()
        .find_map(|w| {
            w.parse()
                .ok()
                .filter(|_| error.contains("records received intact"))
        })
        .expect("a count");
    assert!(received >= 20_000, "{error}");
    assert_segment_name_removed(&name);
}

#[test]
fn killed_consumer_ends_the_producer_with_an_error_not_a_hang() {
    let name = unique_name("consumer-killed");
    let mut seen = Vec::new();
    let ((mut producer, from_producer), (mut consumer, _from_consumer)) =
        mid_stream(&name, &mut seen);
    let consumer_pid = consumer.0.id();

    consumer.0.kill().unwrap();
    consumer.0.wait().unwrap();

    let status = wait_with_deadline(&mut producer.0, Duration::from_secs(20));
    assert_eq!(status.code(), Some(3), "producer exit: {status:?}");
    let error = next_line_with(&from_producer, "error:", &mut seen);
    assert!(
        error.contains(&format!("consumer (pid {consumer_pid}) died")),
        "{error}"
    );
    assert_segment_name_removed(&name);
}

#[test]
fn a_killed_producers_segment_is_stale_and_reclaimed_by_the_next() {
    let name = unique_name("stale");
    let (mut producer, from_producer) = start(&["produce", &name, "1000000000"]);
    let producer_pid = producer.0.id();
    let mut seen = Vec::new();
    next_line_with(&from_producer, "ready", &mut seen);
    producer.0.kill().unwrap();
    producer.0.wait().unwrap();

    // The owner record names the dead producer: `tandem clean` would remove it.
    let would = clean_stale_segments(true).expect("dry run");
    let stale = would
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} not found stale in {would:?}"));
    assert_eq!(
        (stale.owner_pid, stale.why),
        (Some(producer_pid), StaleWhy::OwnerGone)
    );

    // A producer starting on the name reclaims it and runs to the end.
    let (mut next, from_next) = start(&["produce", &name, "1000"]);
    next_line_with(&from_next, "ready", &mut seen);
    let (mut consumer, from_consumer) = start(&["consume", &name]);
    next_line_with(&from_consumer, "received 1000 records intact", &mut seen);
    assert!(wait_with_deadline(&mut consumer.0, Duration::from_secs(60)).success());
    assert!(wait_with_deadline(&mut next.0, Duration::from_secs(60)).success());
    assert_segment_name_removed(&name);
}
