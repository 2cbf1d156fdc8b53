//! What the runtime's integration tests that start the `tandem` binary
//! share: where the binary is, a guard that kills children and removes
//! files however a test ends, runtime configurations and `tandem blob` runs.

#![allow(
    dead_code,
    reason = "each test file is its own crate and uses a part of this module"
)]

pub mod cluster;
pub mod scrape;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output};

use tandem_runtime::{Config, DeviceSelection};

/// The `tandem` binary: `$TANDEM_BIN_DIR/tandem` when set (a GPU bundle
/// carries the binary away from the build machine), else the one cargo built
/// for this package.
pub fn tandem_exe() -> PathBuf {
    match std::env::var_os("TANDEM_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("tandem"),
        None => env!("CARGO_BIN_EXE_tandem").into(),
    }
}

/// `tandem` with warnings-only logs (tests read its stdout, not its logs).
pub fn tandem() -> Command {
    let mut cmd = Command::new(tandem_exe());
    cmd.env("RUST_LOG", "warn");
    cmd
}

/// A small runtime on the CPU device only, its segment named `name`.
pub fn cpu_config(name: &str, workers: usize) -> Config {
    Config {
        workers,
        queue_depth: 64,
        lanes: 2,
        cpu_segment_size: 2 << 20,
        devices: DeviceSelection::Only(vec![]),
        cpu_segment_name: Some(name.into()),
        ..Config::default()
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `tandem blob args...`, warnings-only logs, no store from the environment.
pub fn blob_command(args: &[&str]) -> Command {
    let mut command = tandem();
    command
        .arg("blob")
        .args(args)
        .env_remove("TANDEM_BLOB_CONFIG");
    command
}

pub fn blob(args: &[&str]) -> Output {
    blob_command(args).output().expect("run tandem blob")
}

/// Runs `tandem blob args...` expecting failure (exit 1): its message.
pub fn blob_fails(args: &[&str]) -> String {
    let out = blob(args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?}: {}",
        text(&out.stdout)
    );
    let err = text(&out.stderr);
    assert!(err.starts_with("tandem blob: "), "{err}");
    err
}

/// Kills and reaps its children and removes its files when dropped, so a
/// failing test leaves no process or segment behind.
#[derive(Default)]
pub struct Cleanup {
    pub children: Vec<Child>,
    pub files: Vec<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for child in &mut self.children {
            // A child started with --exit-on-stdin-eof stops cleanly, its
            // segments removed, once its stdin closes; one that does not is
            // killed, and what it held in /dev/shm removed for it.
            drop(child.stdin.take());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if matches!(child.try_wait(), Ok(None)) {
                // Killed now, or already reaped: errors leave nothing to do.
                let _ = child.kill();
                let _ = child.wait();
                tandem_process::remove_host_ipc_segments_of(child.id());
            }
        }
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// `run()` again (up to 50 times, 20 ms apart) while it fails with an error
/// `busy` says is ETXTBSY: an executable just written may be busy for a
/// moment, because a process that another test thread forked meanwhile
/// holds it open until it execs.
pub fn while_busy<T, E>(
    mut run: impl FnMut() -> Result<T, E>,
    busy: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let mut result = run();
    for _ in 0..50 {
        match &result {
            Err(e) if busy(e) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                result = run();
            }
            _ => break,
        }
    }
    result
}

/// `Client::fork_runtime_with(exe, config)` for a script just written,
/// through [`while_busy`].
pub fn fork_script(
    exe: &std::path::Path,
    config: &tandem_runtime::Config,
) -> tandem_runtime::Client {
    while_busy(
        || tandem_runtime::Client::fork_runtime_with(exe, config),
        |e| matches!(e, tandem_runtime::RuntimeError::Process(why) if why.contains("Text file busy")),
    )
    .expect("fork the runtime")
}

/// A tool the test needs: `$env` if set (which must then name it), else `name` on PATH; `None`
/// (the test says it skipped, and why) when there is none, except under CI=true, where
/// `.ci/run` installs it and its absence fails the test.
pub fn tool_or_skip(name: &str, env: &str) -> Option<PathBuf> {
    if let Some(named) = std::env::var_os(env) {
        return Some(PathBuf::from(named));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no {name} under CI=true: .ci/run installs it"
        );
        eprintln!("skipped: no {name} (install it, or name it with {env})");
    }
    found
}

/// Starts `command` (stdout piped), hands it to `cleanup` and waits for its
/// line starting with `ready`; returns its pid.
pub fn start_until_ready(mut command: Command, cleanup: &mut Cleanup) -> u32 {
    let mut child = command.spawn().expect("spawn");
    let pid = child.id();
    let out = child.stdout.take().expect("stdout");
    cleanup.children.push(child);
    let ready = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.starts_with("ready"));
    assert!(ready, "no ready line");
    pid
}

/// `tandem ARGS --announce --exit-on-stdin-eof` (no store from the environment), started
/// until ready: a service that stops when the cleanup closes its stdin.
pub fn start_service(args: &[&str], cleanup: &mut Cleanup) -> u32 {
    let mut command = tandem();
    command
        .args(args)
        .args(["--announce", "--exit-on-stdin-eof"])
        .env_remove("TANDEM_BLOB_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    start_until_ready(command, cleanup)
}

/// Starts `command`, waits for its line starting with `ready`, kills it
/// with SIGKILL and reaps it: what it created stays behind. Returns its pid.
pub fn kill_after_ready(command: Command, cleanup: &mut Cleanup) -> u32 {
    let pid = start_until_ready(command, cleanup);
    let child = cleanup.children.last_mut().expect("child");
    child.kill().expect("kill");
    child.wait().expect("reap");
    pid
}
