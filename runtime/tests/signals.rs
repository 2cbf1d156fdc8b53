//! SIGINT and SIGTERM end `tandem run` and `tandem demo` without leaving
//! their named segments in /dev/shm: `run` shuts down cleanly, the demo
//! removes its segments and exits with 128 + the signal.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn tandem() -> Command {
    // A GPU bundle carries the binary away from the build machine.
    let exe = match std::env::var_os("TANDEM_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("tandem"),
        None => env!("CARGO_BIN_EXE_tandem").into(),
    };
    let mut cmd = Command::new(exe);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

/// Kills the child and removes what the test created if it fails midway.
struct Guard {
    child: Child,
    files: Vec<PathBuf>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Each stdout line of `child`, through a channel.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
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
    let mut guard = Guard {
        child,
        files: vec![config, shm.clone()],
    };
    let out = lines(&mut guard.child);
    let ready = line_starting(&out, "ready ");
    assert!(ready.contains(&name), "{ready}");
    assert!(shm.exists(), "no segment while serving");
    signal(&guard.child, sig);
    let status = exit_of(&mut guard.child);
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
    let mut guard = Guard {
        child,
        files: vec![shm.clone()],
    };
    let out = lines(&mut guard.child);
    // Printed just before the echo kernel starts (on whichever device).
    line_starting(&out, "kernel on the ");
    assert!(shm.exists(), "no segment while the demo runs");
    signal(&guard.child, libc::SIGINT);
    let status = exit_of(&mut guard.child);
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{status:?}");
    assert!(!shm.exists(), "the demo left {} behind", shm.display());
    let pid = guard.child.id().to_string();
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&pid))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(Path::new("/dev/shm").exists());
}
