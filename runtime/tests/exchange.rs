//! Two processes, one shared segment mapped at different addresses: records
//! go through shm-core's SPSC ring with their bytes in the size-class
//! allocator. Every record arrives once, intact; a producer killed mid-stream
//! leaves the consumer with a clear error and the records sent so far, not a hang.

mod common;

use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::lines;

/// `tandem exchange ...`.
fn peer() -> Command {
    let mut cmd = common::tandem();
    cmd.arg("exchange")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
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
    let mut producer = Reaped(
        peer()
            .args(["produce", &name, &RECORDS.to_string()])
            .spawn()
            .unwrap(),
    );
    let from_producer = lines(&mut producer.0);
    let mut seen = Vec::new();
    let ready = next_line_with(&from_producer, "ready", &mut seen);

    let mut consumer = Reaped(peer().args(["consume", &name]).spawn().unwrap());
    let from_consumer = lines(&mut consumer.0);
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
    assert!(
        !std::path::Path::new(&format!("/dev/shm/{name}")).exists(),
        "segment name left behind"
    );
}

#[test]
fn killed_producer_leaves_consumer_with_an_error_not_a_hang() {
    let name = unique_name("killed");
    // Far more records than can be sent before the kill.
    let mut producer = Reaped(
        peer()
            .args(["produce", &name, "1000000000"])
            .spawn()
            .unwrap(),
    );
    let from_producer = lines(&mut producer.0);
    let mut seen = Vec::new();
    next_line_with(&from_producer, "ready", &mut seen);

    let mut consumer = Reaped(peer().args(["consume", &name]).spawn().unwrap());
    let from_consumer = lines(&mut consumer.0);
    next_line_with(&from_consumer, "received 20000", &mut seen);

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
    assert!(
        !std::path::Path::new(&format!("/dev/shm/{name}")).exists(),
        "segment name left behind"
    );
}

#[test]
fn killed_consumer_ends_the_producer_with_an_error_not_a_hang() {
    let name = unique_name("consumer-killed");
    // Far more records than the ring and heap hold: the producer blocks on
    // its consumer.
    let mut producer = Reaped(
        peer()
            .args(["produce", &name, "1000000000"])
            .spawn()
            .unwrap(),
    );
    let from_producer = lines(&mut producer.0);
    let mut seen = Vec::new();
    next_line_with(&from_producer, "ready", &mut seen);

    let mut consumer = Reaped(peer().args(["consume", &name]).spawn().unwrap());
    let consumer_pid = consumer.0.id();
    let from_consumer = lines(&mut consumer.0);
    next_line_with(&from_consumer, "received 20000", &mut seen);

    consumer.0.kill().unwrap();
    consumer.0.wait().unwrap();

    let status = wait_with_deadline(&mut producer.0, Duration::from_secs(20));
    assert_eq!(status.code(), Some(3), "producer exit: {status:?}");
    let error = next_line_with(&from_producer, "error:", &mut seen);
    assert!(
        error.contains(&format!("consumer (pid {consumer_pid}) died")),
        "{error}"
    );
    assert!(
        !std::path::Path::new(&format!("/dev/shm/{name}")).exists(),
        "segment name left behind"
    );
}
