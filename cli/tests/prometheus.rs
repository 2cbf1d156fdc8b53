//! A real Prometheus scrapes `tandem run`, `tandem blob run` and `tandem share serve` while
//! the test drives work through them; what its HTTP API answers (counters, rates, histogram
//! quantiles) matches what was done. Needs Debian's `prometheus` (`.ci/run` installs it, or
//! name one with TANDEM_PROMETHEUS): without it the test says it skipped, and fails under
//! CI=true.

mod common;

use common::scrape::{free_addr, http_get, try_http_get};
use common::{start_service, Cleanup};

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use tandem_hal::{GpuApi, HostApi};
use tandem_runtime::{math, Client, Route};
use tandem_share::ShareClient;

/// How often Prometheus scrapes: the rates below need a few samples in their windows.
const SCRAPE_INTERVAL: &str = "1s";

/// Prometheus, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts Prometheus on `web`, scraping each `(job, target)`, its data in `dir`.
fn start_prometheus(
    exe: &Path,
    dir: &Path,
    web: SocketAddr,
    jobs: &[(&str, SocketAddr)],
) -> Running {
    let mut config = format!("global:\n  scrape_interval: {SCRAPE_INTERVAL}\nscrape_configs:\n");
    for (job, target) in jobs {
        config.push_str(&format!(
            "  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
        ));
    }
    let config_path = dir.join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let child = Command::new(exe)
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .arg("--log.level=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(try_http_get(web, "/-/ready"), Ok((200, _))) {
        assert!(Instant::now() < deadline, "prometheus not ready after 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    running
}

/// `query` (PromQL) evaluated now by the Prometheus at `web`: each series' labels and value.
fn query(web: SocketAddr, query: &str) -> Vec<(serde_json::Value, f64)> {
    let encoded: String = query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (status, body) = http_get(web, &format!("/api/v1/query?query={encoded}"));
    assert_eq!(status, 200, "{query}: {body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let result = answer["data"]["result"]
        .as_array()
        .expect("a vector")
        .clone();
    result
        .into_iter()
        .map(|r| {
            let value = r["value"][1].as_str().and_then(|v| v.parse().ok());
            (r["metric"].clone(), value.expect("a value"))
        })
        .collect()
}

/// Asks `q` until its one value passes `ok`, or fails after 30 s with the last answer.
fn wait_for(web: SocketAddr, q: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = query(web, q);
        if let [(_, value)] = answer[..] {
            if ok(value) {
                return value;
            }
        }
        assert!(Instant::now() < deadline, "{q}: {answer:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Kills the service `pid` of `cleanup` with SIGKILL, reaps it and removes what it left in
/// /dev/shm.
fn kill_service(cleanup: &mut Cleanup, pid: u32) {
    let child = cleanup
        .children
        .iter_mut()
        .find(|c| c.id() == pid)
        .expect("a service of this test");
    child.kill().expect("kill");
    child.wait().expect("reap");
    tandem_process::remove_host_ipc_segments_of(pid);
}

/// Sends `per_second` math tasks a second for `how_long`: how many it sent.
fn steady_tasks(client: &Client, per_second: u64, how_long: Duration) -> u64 {
    let stop = AtomicU32::new(0);
    let start = Instant::now();
    let mut sent = 0;
    while start.elapsed() < how_long {
        let due = (start.elapsed().as_secs_f64() * per_second as f64) as u64;
        while sent < due {
            let sum = client.call(Route::lane(0), &math::Add { a: sent, b: 1 }, &stop, None);
            assert_eq!(sum, Ok(sent + 1));
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    sent
}

#[test]
fn prometheus_scrapes_the_services_and_its_queries_match_the_work() {
    let Some(exe) = common::tool_or_skip("prometheus", "TANDEM_PROMETHEUS") else {
        return;
    };
    let mut cleanup = Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let (runtime_at, blob_at, share_at, web) = (free_addr(), free_addr(), free_addr(), free_addr());

    let segment = format!("tandem-prom-rt-{}", std::process::id());
    let run_toml = dir.path().join("run.toml");
    let cpu_only = "workers = 2\ndevices = []\n";
    std::fs::write(
        &run_toml,
        format!("{cpu_only}cpu_segment_name = {segment:?}\n"),
    )
    .unwrap();
    let runtime_metrics = runtime_at.to_string();
    let run_args = [
        "run",
        "--config",
        run_toml.to_str().unwrap(),
        "--metrics",
        &runtime_metrics,
    ];
    start_service(&run_args, &mut cleanup);

    let blob_toml = dir.path().join("blob.toml");
    let store = format!(
        "{cpu_only}[blob]\nmetadata = {:?}\n[[blob.targets]]\nkind = \"ram\"\ncapacity = {}\nscore = 1.0\n",
        dir.path().join("meta.redb"),
        64 << 20
    );
    std::fs::write(&blob_toml, store).unwrap();
    let blob_metrics = blob_at.to_string();
    let blob_toml = blob_toml.to_str().unwrap();
    let blob_args = [
        "blob",
        "run",
        "--config",
        blob_toml,
        "--metrics",
        &blob_metrics,
    ];
    let blob_pid = start_service(&blob_args, &mut cleanup);

    let socket = dir.path().join("share.sock");
    let share_metrics = share_at.to_string();
    let share_args = ["share", "serve", "--backend", "host", "--max-buffers", "3"];
    let share_more = [
        "--socket",
        socket.to_str().unwrap(),
        "--metrics",
        &share_metrics,
    ];
    start_service(&[&share_args[..], &share_more[..]].concat(), &mut cleanup);

    let prometheus_dir = dir.path().join("prometheus");
    std::fs::create_dir(&prometheus_dir).unwrap();
    let jobs = [
        ("runtime", runtime_at),
        ("blob", blob_at),
        ("share", share_at),
    ];
    let _prometheus = start_prometheus(&exe, &prometheus_dir, web, &jobs);
    wait_for(web, "count(up == 1)", |n| n == 3.0);

    // The runtime: a steady rate, which rate() over Prometheus' samples must find.
    let client = Client::attach(&segment).expect("attach");
    let per_second = 400;
    let sent = steady_tasks(&client, per_second, Duration::from_secs(6));
    let math = r#"{job="runtime",pool="math"}"#;
    let rate = query(
        web,
        &format!("rate(tandem_tasks_completed_total{math}[4s])"),
    );
    let [(_, rate)] = rate[..] else {
        panic!("one rate: {rate:?}")
    };
    let want = per_second as f64;
    assert!(
        rate > 0.6 * want && rate < 1.4 * want,
        "rate {rate}, sent {want} a second"
    );
    let sent = sent as f64;
    wait_for(web, &format!("tandem_tasks_completed_total{math}"), |n| {
        n == sent
    });
    wait_for(web, r#"tandem_clients_attached{job="runtime"}"#, |n| {
        n == 1.0
    });
    // Every call was timed by its client: as many round trips as calls, of a sane length.
    let round_trips = r#"tandem_client_task_round_trip_seconds_count{job="runtime"}"#;
    wait_for(web, round_trips, |n| n == sent);
    let p50 = r#"histogram_quantile(0.5, increase(tandem_client_task_round_trip_seconds_bucket{job="runtime"}[1m]))"#;
    wait_for(web, p50, |s| s > 0.0 && s < 0.1);
    // A client that detaches holding a future leaves its slot to be taken back.
    let leaving = Client::attach(&segment).expect("attach a second client");
    std::mem::forget(leaving.submit(Route::lane(0), &math::Add { a: 1, b: 1 }));
    drop(leaving);
    wait_for(web, r#"tandem_client_attaches_total{job="runtime"}"#, |n| {
        n == 2.0
    });
    let detached = r#"tandem_clients_reclaimed_total{job="runtime",reason="detached"}"#;
    wait_for(web, detached, |n| n == 1.0);
    let gone = r#"tandem_clients_reclaimed_total{job="runtime",reason="gone"}"#;
    wait_for(web, gone, |n| n == 0.0);

    // The blob store: puts of known sizes, whose time histogram_quantile reads.
    let file = dir.path().join("data.bin");
    std::fs::write(&file, vec![3u8; 50_000]).unwrap();
    for i in 0..20 {
        let name = format!("b{i}");
        let put = [
            "put",
            file.to_str().unwrap(),
            "--config",
            blob_toml,
            "--tag",
            "t",
        ];
        let out = common::blob(&[&put[..], &["--name", &name]].concat());
        assert!(out.status.success(), "{}", common::text(&out.stderr));
    }
    let bytes = r#"sum(tandem_blob_put_bytes_total{job="blob"})"#;
    wait_for(web, bytes, |n| n == 1_000_000.0);
    let p90 = r#"histogram_quantile(0.9, sum by (le) (rate(tandem_blob_latency_seconds_bucket{op="put"}[1m])))"#;
    wait_for(web, p90, |s| s > 0.0 && s <= 1.0);
    let used = r#"tandem_blob_target_used_bytes{job="blob",target="0"}"#;
    wait_for(web, used, |n| n >= 1_000_000.0);
    // Killed and started again on the same store: one crash recovery, where a new store had none.
    let recoveries = r#"tandem_blob_crash_recoveries_total{job="blob"}"#;
    wait_for(web, recoveries, |n| n == 0.0);
    kill_service(&mut cleanup, blob_pid);
    start_service(&blob_args, &mut cleanup);
    wait_for(web, recoveries, |n| n == 1.0);

    // The share daemon: buffers held, and a create over its limit refused.
    let share = ShareClient::connect(HostApi::load().unwrap(), &socket).expect("connect");
    let held: Vec<_> = (0..3)
        .map(|_| share.create_buffer(0, 1 << 16).unwrap())
        .collect();
    assert!(share.create_buffer(0, 1 << 16).is_err());
    wait_for(web, r#"tandem_share_buffers{job="share"}"#, |n| n == 3.0);
    wait_for(web, r#"tandem_share_buffer_bytes{job="share"}"#, |n| {
        n >= 3.0 * 65536.0
    });
    let refusals = r#"tandem_share_refusals_total{job="share",reason="buffers"}"#;
    wait_for(web, refusals, |n| n == 1.0);
    drop(held);
}
