//! `--metrics` on the three services: each is scraped after the test drove work through it,
//! and the series say what was done; the endpoint is off by default, and a bad address or a
//! taken port is a clear error.

mod common;

use common::scrape::{free_addr, scrape, value, wait_for};
use common::{start_service, text, Cleanup};

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU32;

use tandem_hal::{GpuApi, HostApi};
use tandem_runtime::{math, Client, MethodId, PoolId, Route, Task};
use tandem_share::ShareClient;

/// A method the math pool does not have: each one fails.
#[derive(Clone, Copy, Debug)]
struct Unknown;
tandem_shm_core::impl_serialize_fields!(Unknown {});
impl Task for Unknown {
    const POOL: PoolId = math::POOL;
    const METHOD: MethodId = 999;
    type Output = Unknown;
}

/// A runtime configuration on the CPU device only, its segment `segment`, with `extra` lines.
fn runtime_config(dir: &Path, segment: &str, extra: &str) -> String {
    let path = dir.join("tandem.toml");
    let text = format!("workers = 2\ndevices = []\ncpu_segment_name = {segment:?}\n{extra}");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn the_runtime_shows_tasks_by_pool_and_segment_and_its_clients() {
    let mut cleanup = Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let segment = format!("tandem-metrics-rt-{}", std::process::id());
    // The config key, not the flag.
    let config = runtime_config(dir.path(), &segment, &format!("metrics = \"{addr}\"\n"));
    start_service(&["run", "--config", &config], &mut cleanup);

    let client = Client::attach(&segment).expect("attach");
    let stop = AtomicU32::new(0);
    for i in 0..100 {
        let sum = client.call(Route::lane(0), &math::Add { a: i, b: 1 }, &stop, None);
        assert_eq!(sum, Ok(i + 1));
    }
    for _ in 0..5 {
        assert!(client.call(Route::lane(1), &Unknown, &stop, None).is_err());
    }
    let math = r#"{pool="math",pool_id="1"}"#;
    let text = wait_for(addr, &format!("tandem_tasks_completed_total{math}"), 105.0);
    assert_eq!(
        value(&text, &format!("tandem_tasks_failed_total{math}")),
        Some(5.0),
        "{text}"
    );
    let cpu = r#"{segment="cpu",device=""}"#;
    assert_eq!(
        value(&text, &format!("tandem_segment_tasks_total{cpu}")),
        Some(105.0),
        "{text}"
    );
    assert_eq!(
        value(&text, &format!("tandem_segment_tasks_failed_total{cpu}")),
        Some(5.0),
        "{text}"
    );
    assert_eq!(
        value(&text, &format!("tandem_queue_depth{cpu}")),
        Some(0.0),
        "{text}"
    );
    assert_eq!(value(&text, "tandem_workers"), Some(2.0), "{text}");
    assert_eq!(value(&text, "tandem_clients_attached"), Some(1.0), "{text}");
    assert_eq!(
        value(&text, r#"tandem_client_slots{state="attached"}"#),
        Some(1.0)
    );
    assert!(
        text.contains(&format!("tandem_runtime_info{{segment=\"{segment}\"")),
        "{text}"
    );
    let heap = value(&text, r#"tandem_client_heap_bytes{slot="0"}"#);
    assert_eq!(heap, Some(131_072.0), "the default quota: {text}");

    // A client in another process, killed: the runtime takes its slot back and says why.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_client", "--nocapture", "--test-threads=1"])
        .env(CHILD_SEGMENT_ENV, &segment)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child client");
    let stdout = child.stdout.take().unwrap();
    let attached = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains(CHILD_ATTACHED));
    assert!(attached, "the child client attached");
    wait_for(addr, "tandem_clients_attached", 2.0);
    child.kill().unwrap();
    child.wait().unwrap();
    let text = wait_for(
        addr,
        r#"tandem_clients_reclaimed_total{reason="gone"}"#,
        1.0,
    );
    assert_eq!(
        value(&text, "tandem_client_attaches_total"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            r#"tandem_clients_reclaimed_total{reason="detached"}"#
        ),
        Some(0.0),
        "{text}"
    );
    drop(client);
    wait_for(addr, "tandem_clients_attached", 0.0);
}

/// Names the segment [`child_client`] attaches to; unset in a normal run.
const CHILD_SEGMENT_ENV: &str = "TANDEM_METRICS_CHILD_SEGMENT";
/// What the child prints once attached.
const CHILD_ATTACHED: &str = "metrics child attached";

/// The child side of the runtime's test: attaches to the segment `$TANDEM_METRICS_CHILD_SEGMENT`
/// names, says so, and waits to be killed. Does nothing in a normal test run.
#[test]
fn child_client() {
    let Ok(segment) = std::env::var(CHILD_SEGMENT_ENV) else {
        return;
    };
    let _client = Client::attach(&segment).expect("the child attaches");
    println!("{CHILD_ATTACHED}");
    std::thread::sleep(std::time::Duration::from_secs(600));
}

#[test]
fn scrapes_during_work_all_answer_and_count_up() {
    let mut cleanup = Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let segment = format!("tandem-metrics-busy-{}", std::process::id());
    let config = runtime_config(dir.path(), &segment, "");
    let metrics = addr.to_string();
    start_service(
        &["run", "--config", &config, "--metrics", &metrics],
        &mut cleanup,
    );
    let client = Client::attach(&segment).expect("attach");
    let series = r#"tandem_tasks_completed_total{pool="math",pool_id="1"}"#;
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let mut last = 0.0;
                for _ in 0..40 {
                    let now = value(&scrape(addr), series).expect("the series");
                    assert!(now >= last, "{now} after {last}");
                    last = now;
                }
            });
        }
        let stop = AtomicU32::new(0);
        for i in 0..2000 {
            client
                .call(Route::lane(0), &math::Add { a: i, b: 0 }, &stop, None)
                .unwrap();
        }
    });
    wait_for(addr, series, 2000.0);
}

/// A store of one file target in `dir`, in a runtime configuration.
fn blob_config(dir: &Path, segment: &str) -> String {
    let store = format!(
        "[blob]\nmetadata = {:?}\n[[blob.targets]]\nkind = \"file\"\npath = {:?}\n\
         capacity = {}\nscore = 0.5\n",
        dir.join("meta.redb"),
        dir.join("target0.dat"),
        16 << 20
    );
    runtime_config(dir, segment, &store)
}

#[test]
fn the_blob_store_shows_puts_gets_bytes_and_space() {
    let mut cleanup = Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let segment = format!("tandem-metrics-blob-{}", std::process::id());
    let config = blob_config(dir.path(), &segment);
    let metrics = addr.to_string();
    start_service(
        &["blob", "run", "--config", &config, "--metrics", &metrics],
        &mut cleanup,
    );
    let file = dir.path().join("data.bin");
    std::fs::write(&file, vec![7u8; 100_000]).unwrap();
    for name in ["a", "b", "c"] {
        let args = [
            "put",
            file.to_str().unwrap(),
            "--config",
            &config,
            "--tag",
            "t",
            "--name",
            name,
        ];
        let out = common::blob(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let out = common::blob(&["get", "a", "--config", &config, "--tag", "t"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout.len(), 100_000);
    let text = scrape(addr);
    // The command puts and gets a blob in pieces of its client heap: each piece is a call.
    let none = r#"{target="0",kind="file",codec="none"}"#;
    let puts = value(&text, &format!("tandem_blob_puts_total{none}")).unwrap();
    assert!(puts >= 3.0, "{text}");
    let put_bytes = value(&text, &format!("tandem_blob_put_bytes_total{none}"));
    assert_eq!(put_bytes, Some(300_000.0), "{text}");
    let gets = value(&text, "tandem_blob_gets_total").unwrap();
    assert!(gets >= 1.0, "{text}");
    let get_bytes = value(&text, "tandem_blob_get_bytes_total");
    assert_eq!(get_bytes, Some(100_000.0), "{text}");
    let timed = |op: &str| {
        value(
            &text,
            &format!("tandem_blob_latency_seconds_count{{op=\"{op}\"}}"),
        )
    };
    assert_eq!(
        (timed("put"), timed("get")),
        (Some(puts), Some(gets)),
        "{text}"
    );
    let target = r#"{target="0",kind="file"}"#;
    let capacity = value(&text, &format!("tandem_blob_target_capacity_bytes{target}")).unwrap();
    let used = value(&text, &format!("tandem_blob_target_used_bytes{target}")).unwrap();
    let free = value(&text, &format!("tandem_blob_target_free_bytes{target}")).unwrap();
    assert_eq!(capacity, f64::from(16 << 20));
    assert!(used >= 300_000.0, "{text}");
    assert_eq!(used + free, capacity);
    // The runtime's own series come along.
    assert!(value(&text, "tandem_workers").is_some(), "{text}");
}

#[test]
fn the_share_daemon_shows_buffers_clients_and_refusals() {
    let mut cleanup = Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("share.sock");
    let addr = free_addr();
    let (socket_s, metrics) = (socket.to_str().unwrap(), addr.to_string());
    let args = ["share", "serve", "--backend", "host", "--socket", socket_s];
    let limits = ["--max-buffers", "2", "--metrics", &metrics];
    start_service(&[&args[..], &limits[..]].concat(), &mut cleanup);
    let client = ShareClient::connect(HostApi::load().unwrap(), &socket).expect("connect");
    let (_a, _buf_a) = client.create_buffer(0, 4096).expect("first buffer");
    let (_b, _buf_b) = client.create_buffer(0, 8192).expect("second buffer");
    assert!(
        client.create_buffer(0, 4096).is_err(),
        "over the buffer limit"
    );
    // A frame that is no request.
    {
        use std::io::{Read, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        stream.write_all(&[0; 64]).unwrap();
        let _ = stream.read_to_end(&mut Vec::new());
    }
    let text = wait_for(
        addr,
        r#"tandem_share_refusals_total{reason="bad_frame"}"#,
        1.0,
    );
    let buffers = r#"tandem_share_refusals_total{reason="buffers"}"#;
    assert_eq!(value(&text, buffers), Some(1.0), "{text}");
    assert_eq!(value(&text, "tandem_share_buffers"), Some(2.0), "{text}");
    assert!(
        value(&text, "tandem_share_buffer_bytes").unwrap() >= 12_288.0,
        "{text}"
    );
    assert_eq!(value(&text, "tandem_share_leases"), Some(2.0), "{text}");
    assert_eq!(value(&text, "tandem_share_clients"), Some(1.0), "{text}");
    let answered = value(&text, "tandem_share_request_latency_seconds_count").unwrap();
    assert!(answered >= 3.0, "{text}");
}

#[test]
fn no_endpoint_unless_asked() {
    let mut cleanup = Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let segment = format!("tandem-metrics-off-{}", std::process::id());
    let config = runtime_config(dir.path(), &segment, "");
    // Whatever port it might have taken: the default one stays closed.
    start_service(&["run", "--config", &config], &mut cleanup);
    assert!(std::net::TcpStream::connect("127.0.0.1:9464").is_err());
}

fn fails(args: &[&str]) -> (Option<i32>, String) {
    let out = common::tandem()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tandem");
    (out.status.code(), text(&out.stderr))
}

#[test]
fn a_bad_address_or_a_taken_port_is_a_clear_error() {
    let (code, err) = fails(&["run", "--metrics", "localhost:x"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("neither a port"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let config = runtime_config(dir.path(), "tandem-metrics-bad", "metrics = \"nope\"\n");
    let (code, err) = fails(&["run", "--config", &config]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("`metrics`"), "{err}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = taken.local_addr().unwrap();
    let segment = format!("tandem-metrics-taken-{}", std::process::id());
    let config = runtime_config(dir.path(), &segment, "");
    let (code, err) = fails(&["run", "--config", &config, "--metrics", &addr.to_string()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot serve metrics on {addr}")),
        "{err}"
    );
    assert!(
        !Path::new("/dev/shm").join(&segment).exists(),
        "its segment is removed"
    );
    let socket = dir.path().join("s.sock");
    let args = [
        "share",
        "serve",
        "--backend",
        "host",
        "--metrics",
        &addr.to_string(),
    ];
    let (code, err) = fails(&[&args[..], &["--socket", socket.to_str().unwrap()]].concat());
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot serve metrics"), "{err}");
    assert!(!socket.exists(), "its socket is removed");
}

/// The command's help names the flag (every service takes it).
#[test]
fn every_service_documents_the_flag() {
    for args in [&["run"][..], &["blob", "run"], &["share", "serve"]] {
        let out = Command::new(common::tandem_exe())
            .args(args)
            .arg("--help")
            .output()
            .unwrap();
        let help = text(&out.stdout);
        assert!(help.contains("--metrics <ADDR>"), "{args:?}: {help}");
    }
}
