//! SIGINT and SIGTERM end `tandem run`, `tandem demo` and `tandem share
//! serve` without leaving their named segments in /dev/shm: `run` and the
//! share daemon shut down cleanly (the daemon even with its socket file
//! deleted under it), the demo removes its segments and exits with 128 +
//! the signal.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Cleanup;
use tandem_hal::{GpuApi, GpuDevice, HostApi};
use tandem_process::host_ipc_exporter;
use tandem_share::ShareClient;
use tandem_tests::support::lines;

fn tandem() -> Command {
    let mut cmd = common::tandem();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

fn line_starting(rx: &mpsc::Receiver<String>, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no line starting {prefix:?}: {e}"));
        if line.trim_start().starts_with(prefix) {
            return line;
        }
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: signals our own child, not yet reaped (the guard reaps it).
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

fn exit_of(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(Instant::now() < deadline, "did not exit after the signal");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn run_until(sig: libc::c_int, tag: &str) {
    let name = format!("tandem-test-signal-{tag}-{}", std::process::id());
    let config = std::env::temp_dir().join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "workers = 1\nlanes = 2\nqueue_depth = 64\ncpu_segment_size = 2097152\ndevices = []\ncpu_segment_name = \"{name}\"\n"
        ),
    )
    .expect("write config");
    let shm = PathBuf::from(format!("/dev/shm/{name}"));
    let child = tandem()
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--announce")
        .spawn()
        .expect("spawn tandem run");
    let mut guard = Cleanup {
        children: vec![child],
        files: vec![config, shm.clone()],
    };
    let child = &mut guard.children[0];
    let out = lines(child);
    let ready = line_starting(&out, "ready ");
    assert!(ready.contains(&name), "{ready}");
    assert!(shm.exists(), "no segment while serving");
    signal(child, sig);
    let status = exit_of(child);
    assert!(
        status.success(),
        "tandem run after signal {sig}: {status:?}"
    );
    assert!(!shm.exists(), "signal {sig} left {} behind", shm.display());
}

#[test]
fn sigterm_ends_run_and_removes_its_segment() {
    run_until(libc::SIGTERM, "term");
}

#[test]
fn sigint_ends_run_and_removes_its_segment() {
    run_until(libc::SIGINT, "int");
}

#[test]
fn sigint_mid_demo_removes_its_segments_and_exits_130() {
    let child = tandem().arg("demo").spawn().expect("spawn tandem demo");
    // The demo's CPU segment has the default name of its first runtime.
    let shm = PathBuf::from(format!("/dev/shm/tandem-{}-0", child.id()));
    let mut guard = Cleanup {
        children: vec![child],
        files: vec![shm.clone()],
    };
    let child = &mut guard.children[0];
    let out = lines(child);
    // Printed just before the echo kernels start (on whichever devices).
    line_starting(&out, "kernels on ");
    assert!(shm.exists(), "no segment while the demo runs");
    signal(child, libc::SIGINT);
    let status = exit_of(child);
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{status:?}");
    assert!(!shm.exists(), "the demo left {} behind", shm.display());
    let pid = child.id().to_string();
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&pid))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // Nor the temporary folder of its blob store.
    let store = format!("tandem-demo-blob-{pid}-");
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .expect("the temporary folder")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&store))
        .collect();
    assert!(
        left.is_empty(),
        "left behind in the temporary folder: {left:?}"
    );
    assert!(Path::new("/dev/shm").exists());
}

/// The daemon's segments in /dev/shm (its buffers' seal events, on the CPU
/// device).
fn segments_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| host_ipc_exporter(name) == Some(pid))
        .collect()
}

#[test]
fn sigterm_ends_share_serve_whose_socket_file_was_deleted() {
    // The default socket, in a runtime folder of the test's own: the
    // daemon removes the folder it made there once the socket is gone.
    let runtime = tempfile::tempdir().expect("a runtime folder");
    let child = tandem()
        .env("XDG_RUNTIME_DIR", runtime.path())
        .args(["share", "serve", "--backend", "host", "--announce"])
        .spawn()
        .expect("spawn tandem share serve");
    let pid = child.id();
    let mut guard = Cleanup {
        children: vec![child],
        files: Vec::new(),
    };
    let child = &mut guard.children[0];
    let out = lines(child);
    let ready = line_starting(&out, "ready ");
    let socket = PathBuf::from(ready.split_whitespace().nth(1).expect("the socket"));
    assert!(socket.starts_with(runtime.path()), "{ready}");
    {
        // A sealed buffer the daemon holds after its writer left: its
        // event is a segment of the daemon's in /dev/shm until the stop.
        let client = ShareClient::connect(HostApi::load().expect("the CPU device"), &socket)
            .expect("connect");
        let device = client.device(0).expect("device 0");
        let stream = device.create_stream().expect("a stream");
        let (_, buffer) = client.create_buffer(0, 4096).expect("create");
        drop(client.seal(buffer, &stream).expect("seal"));
        device
            .synchronize_stream(&stream)
            .expect("the seal recorded");
    }
    assert!(!segments_of(pid).is_empty(), "no segment while serving");
    std::fs::remove_file(&socket).expect("deleting the socket file");
    signal(child, libc::SIGTERM);
    let status = exit_of(child);
    assert!(status.success(), "share serve after SIGTERM: {status:?}");
    assert_eq!(segments_of(pid), Vec::<String>::new(), "left in /dev/shm");
    let left: Vec<_> = std::fs::read_dir(runtime.path())
        .expect("the runtime folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left in the runtime folder: {left:?}");
}
