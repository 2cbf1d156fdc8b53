//! `tandem status` against a runtime of this process: the binary reads the
//! status block of the named CPU segment, and its JSON carries the counts of
//! the tasks run here; the worker count is capped by the cores.

mod common;

use common::cpu_config;

use std::process::Output;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use tandem_hal::HostApi;
use tandem_runtime::status::StatusSnapshot;
use tandem_runtime::{math, Config, Pool, Registry, Route, Runtime, Task};

/// A pool nobody registered: its tasks fail and count as "other".
struct Nowhere;
tandem_shm_core::impl_serialize_fields!(Nowhere {});
impl Task for Nowhere {
    const POOL: u32 = 77;
    const METHOD: u32 = 0;
    type Output = u64;
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn tandem(args: &[&str]) -> Output {
    common::tandem().args(args).output().expect("run tandem")
}

#[test]
fn status_json_reports_the_runtimes_counts() {
    let name = format!("tandem-test-status-{}", std::process::id());
    let requested = cores() + 3;
    let mut registry = Registry::with_builtins();
    registry
        .register(Pool::new(9, "idle").task::<math::Noop, _>("noop", |_| Ok(math::Noop)))
        .expect("register");
    // Dropped (the segment unlinked) however the test ends.
    let runtime = Runtime::start_with(
        HostApi::with_devices(0),
        cpu_config(&name, requested),
        registry,
    )
    .expect("start");
    let stop = AtomicU32::new(0);
    for a in 0..100u64 {
        let sum = runtime
            .submit(Route::lane(0), &math::Add { a, b: 1 })
            .and_then(|mut p| p.wait(&stop, None))
            .expect("add");
        assert_eq!(sum, a + 1);
    }
    for _ in 0..10 {
        let answer = runtime
            .submit(Route::lane(1), &Nowhere)
            .and_then(|mut p| p.wait(&stop, None));
        assert!(answer.is_err(), "an unknown pool's task must fail");
    }

    // A client attached (from this process, as another would).
    let client = tandem_runtime::Client::attach(&name).expect("attach");
    // The heartbeat refreshes the block every STATUS_PERIOD: poll until it
    // has counted every task and the client.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let out = tandem(&["status", "--json", "--segment", &name]);
        assert!(
            out.status.success(),
            "tandem status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let status: StatusSnapshot = serde_json::from_slice(&out.stdout).expect("status JSON");
        let counted = status.tasks.completed == 110 && status.clients_attached == Some(1);
        if counted || Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.segment, name);
    assert_eq!(status.tasks.completed, 110, "{status:?}");
    assert_eq!(status.tasks.failed, 10);
    assert_eq!(status.runtime.pid, std::process::id());
    assert_eq!(status.runtime.process, "running");
    assert_eq!(status.runtime.state, "ready");
    assert_eq!(status.runtime.backend, "host");
    assert_eq!(status.config.workers as usize, requested);
    assert_eq!(status.config.lanes, 2);
    assert_eq!(status.config.gpu_lanes, Config::default().gpu_lanes);
    assert_eq!(status.workers.running as usize, cores());
    assert_eq!(status.clients_attached, Some(1), "{status:?}");
    let line = &status.clients[..];
    assert_eq!(line.len(), 1, "{status:?}");
    assert_eq!(
        (line[0].slot, line[0].pid),
        (client.slot(), std::process::id())
    );
    assert_eq!((line[0].state.as_str(), line[0].futures), ("attached", 0));
    assert!(line[0].largest_request > 0 && line[0].free_bytes <= line[0].heap_bytes);
    let pools: Vec<_> = status
        .pools
        .iter()
        .map(|p| (p.id, p.name.as_str(), p.completed, p.failed))
        .collect();
    assert_eq!(pools, [(math::POOL, "math", 100, 0), (9, "idle", 0, 0)]);
    assert_eq!((status.other.completed, status.other.failed), (10, 10));
    assert_eq!(status.segments.len(), 1);
    assert_eq!(status.segments_total, 1);
    let cpu = &status.segments[0];
    assert_eq!(
        (cpu.kind.as_str(), cpu.device, cpu.queued),
        ("cpu", None, 0)
    );
    assert_eq!(cpu.bytes, 2 << 20);
    assert_eq!(cpu.lanes, 2);

    // The same, as a table.
    let out = tandem(&["status", "--segment", &name]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    assert!(text.contains("math"), "{text}");
    assert!(text.contains("largest request"), "{text}");
    drop(client);
    runtime.shutdown().expect("shutdown");
}

#[test]
fn status_of_a_missing_segment_is_a_clear_error() {
    let name = format!("tandem-test-status-missing-{}", std::process::id());
    let out = tandem(&["status", "--segment", &name]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot open segment {name}")),
        "{err}"
    );
}

/// With `--json`, a runtime that cannot be read is still an answer on
/// stdout: an object saying it is not running and why, and the exit status
/// of the failure.
#[test]
fn status_json_of_a_missing_segment_says_not_running() {
    let name = format!("tandem-test-status-json-missing-{}", std::process::id());
    let out = tandem(&["status", "--json", "--segment", &name]);
    assert_eq!(out.status.code(), Some(1));
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {:?}", String::from_utf8_lossy(&out.stdout));
    });
    assert_eq!(said["running"], false, "{said}");
    assert_eq!(said["segment"], name.as_str(), "{said}");
    let reason = said["reason"].as_str().expect("a reason");
    assert!(
        reason.contains(&format!("cannot open segment {name}")),
        "{reason}"
    );
    assert_eq!(said["stale_segments"], serde_json::json!([]), "{said}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(reason), "{err}");
}

#[test]
fn workers_are_capped_by_the_cores() {
    let name = format!("tandem-test-status-cap-{}", std::process::id());
    let requested = cores() + 2;
    let runtime = Runtime::start_with(
        HostApi::with_devices(0),
        cpu_config(&name, requested),
        Registry::with_builtins(),
    )
    .expect("start");
    assert_eq!(runtime.workers(), cores());
    assert_eq!(runtime.config().workers, requested, "the request is kept");
    // Every lane still has a poller.
    let stop = AtomicU32::new(0);
    for lane in 0..2 {
        let sum = runtime
            .submit(Route::lane(lane), &math::Add { a: 1, b: 2 })
            .and_then(|mut p| p.wait(&stop, None))
            .expect("add");
        assert_eq!(sum, 3);
    }
    runtime.shutdown().expect("shutdown");
}

#[test]
fn a_live_runtime_is_listed_until_it_stops() {
    let name = format!("tandem-test-status-live-{}", std::process::id());
    let runtime = Runtime::start_with(
        HostApi::with_devices(0),
        cpu_config(&name, 1),
        Registry::with_builtins(),
    )
    .expect("start");
    let live = tandem_runtime::status::live_runtime_segments().expect("list /dev/shm");
    assert!(live.contains(&name), "{name} not in {live:?}");
    runtime.shutdown().expect("shutdown");
    let live = tandem_runtime::status::live_runtime_segments().expect("list /dev/shm");
    assert!(!live.contains(&name), "{name} still in {live:?}");
}

/// A killed runtime's segment: `tandem status --segment` says it is gone
/// (no workers running) and fails; `tandem status` with no live runtime
/// names the stale segment and `tandem clean`.
#[test]
fn a_killed_runtimes_status_says_gone() {
    let name = format!("tandem-test-status-killed-{}", std::process::id());
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        format!("workers = 1\ndevices = []\ncpu_segment_name = {name:?}\n"),
    )
    .unwrap();
    let mut run = common::tandem();
    run.args(["run", "--announce", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::piped());
    let mut cleanup = common::Cleanup::default();
    cleanup.files.push(format!("/dev/shm/{name}").into());
    common::kill_after_ready(run, &mut cleanup);

    let out = tandem(&["status", "--segment", &name]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("(gone;"), "{said}");
    assert!(said.contains("workers   none running"), "{said}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is gone") && err.contains("tandem clean"),
        "{err}"
    );

    // Other tests may run a live runtime meanwhile: only a "no live
    // runtime" answer is checked.
    let out = tandem(&["status"]);
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("no live Tandem runtime") {
        assert!(err.contains(&name) && err.contains("tandem clean"), "{err}");
    }
    // As JSON: the object saying none runs, naming the stale segment.
    let out = tandem(&["status", "--json"]);
    if String::from_utf8_lossy(&out.stderr).contains("no live Tandem runtime") {
        assert_eq!(out.status.code(), Some(1));
        let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(said["running"], false, "{said}");
        assert_eq!(said["segment"], serde_json::Value::Null, "{said}");
        let stale = said["stale_segments"].as_array().expect("a list");
        assert!(stale.iter().any(|s| s == name.as_str()), "{said}");
    }
    // A killed runtime's own segment still prints what it last published.
    let out = tandem(&["status", "--json", "--segment", &name]);
    assert_eq!(out.status.code(), Some(1));
    let status: StatusSnapshot = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(status.runtime.process, "gone");
}
