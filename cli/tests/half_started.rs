//! `tandem status` and `tandem blob ls` meeting a runtime's CPU segment at
//! every step of its start, or left by a runtime killed during it: each
//! ends with an error (not found, not ready, dead), never a panic. The
//! segments are a real runtime's image cut or cleared by hand (written to
//! `/dev/shm`), and runtimes killed at increasing delays into their start.

mod common;

use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tandem_runtime::layout::{SegmentHeader, SEGMENT_HEADER_RESERVED};

/// How long one command may take before the test calls it hung.
const PATIENCE: Duration = Duration::from_secs(60);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `command` to its end (killed past [`PATIENCE`]) and fails the test
/// if it panicked: Rust's exit status 101, a panic message, or a signal.
fn run_unpanicked(what: &str, command: &mut Command) -> Output {
    let mut child = command
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .env_remove("TANDEM_BLOB_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tandem");
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: still running after {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().expect("output");
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(101), "{what} panicked: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(
        out.status.code().is_some(),
        "{what} ended by a signal: {:?}: {err}",
        out.status
    );
    out
}

/// A runtime configuration with a store in `dir` and its CPU segment named
/// `segment`, small enough to copy.
fn config(dir: &Path, segment: &str) -> String {
    let text = format!(
        "workers = 1\ndevices = []\nlanes = 2\nqueue_depth = 64\nmax_clients = 2\n\
         cpu_segment_size = 2097152\ncpu_segment_name = {segment:?}\n\
         [blob]\nmetadata = {:?}\n[[blob.targets]]\nkind = \"file\"\npath = {:?}\n\
         capacity = 4194304\nscore = 0.5\n",
        dir.join("meta.redb"),
        dir.join("target0.dat"),
    );
    let path = dir.join(format!("{segment}.toml"));
    std::fs::write(&path, text).expect("write config");
    path.to_str().expect("utf-8 path").into()
}

/// The bytes of a published CPU segment of `tandem blob run` (its status
/// block lists the blob pool), taken while it serves, and how long it took
/// to be ready; the runtime is stopped before this returns, so its pid
/// names a process gone.
fn published_image(dir: &Path, name: &str) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut cleanup = common::Cleanup::default();
    cleanup.files.push(Path::new("/dev/shm").join(name));
    let mut command = common::tandem();
    command
        .args(["blob", "run", "--announce", "--exit-on-stdin-eof"])
        .args(["--config", &config(dir, name)])
        .env_remove("TANDEM_BLOB_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    common::start_until_ready(command, &mut cleanup);
    let took = started.elapsed();
    let image = std::fs::read(Path::new("/dev/shm").join(name)).expect("read the segment");
    // The runtime ends when its stdin closes, as the cleanup drops.
    drop(cleanup);
    (image, took)
}

/// `image` with the header's `u64` field at `at` set to `value`.
fn with_u64(mut image: Vec<u8>, at: usize, value: u64) -> Vec<u8> {
    image[at..at + 8].copy_from_slice(&value.to_ne_bytes());
    image
}

/// The header's region fields (offsets and lengths of the queue, heap,
/// arena, client table and inbox), each set to `value`.
fn with_regions(mut image: Vec<u8>, value: u64) -> Vec<u8> {
    for at in [
        offset_of!(SegmentHeader, queue_offset),
        offset_of!(SegmentHeader, queue_bytes),
        offset_of!(SegmentHeader, heap_offset),
        offset_of!(SegmentHeader, heap_bytes),
        offset_of!(SegmentHeader, arena_offset),
        offset_of!(SegmentHeader, arena_bytes),
        offset_of!(SegmentHeader, clients_offset),
        offset_of!(SegmentHeader, clients_bytes),
        offset_of!(SegmentHeader, inbox_offset),
        offset_of!(SegmentHeader, inbox_ring_bytes),
    ] {
        image = with_u64(image, at, value);
    }
    image
}

/// `image`'s first `keep` bytes, the rest of its length zero (written
/// before the runtime got further).
fn first(image: &[u8], keep: usize) -> Vec<u8> {
    let mut cut = vec![0u8; image.len()];
    cut[..keep].copy_from_slice(&image[..keep]);
    cut
}

/// Segments of a start cut at each step, and of a runtime gone: status
/// and the blob commands aimed at them fail with an error naming them.
#[test]
fn half_initialised_segments_are_errors_not_panics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid = std::process::id();
    let (image, _) = published_image(dir.path(), &format!("tandem-halfinit-{pid}-image"));
    let magic = offset_of!(SegmentHeader, magic);
    let steps: Vec<(&str, Vec<u8>)> = vec![
        // Created, not yet sized.
        ("empty", Vec::new()),
        // Sized shorter than its header.
        ("short", image[..100].to_vec()),
        // Sized, nothing written.
        ("zeros", vec![0; image.len()]),
        // Everything written but the magic.
        ("unpublished", with_u64(image.clone(), magic, 0)),
        // The magic and the header alone: no status block, no regions.
        ("header-only", first(&image, size_of::<SegmentHeader>())),
        // The header page (header and status block), no regions.
        ("header-page", first(&image, SEGMENT_HEADER_RESERVED)),
        // Published with its layout not yet written.
        ("no-layout", with_regions(image.clone(), 0)),
        // Published with a layout past any length.
        ("wild-layout", with_regions(image.clone(), u64::MAX - 4095)),
        // Whole, its runtime gone.
        ("dead", image.clone()),
    ];
    let mut cleanup = common::Cleanup::default();
    let mut names = Vec::new();
    for (step, bytes) in &steps {
        let name = format!("tandem-halfinit-{pid}-{step}");
        let path = Path::new("/dev/shm").join(&name);
        cleanup.files.push(path.clone());
        std::fs::write(&path, bytes).expect("write the segment");
        names.push(name);
    }
    let blob_config = config(dir.path(), &format!("tandem-halfinit-{pid}-unused"));
    for name in &names {
        let out = run_unpanicked(
            &format!("status {name}"),
            common::tandem().args(["status", "--segment", name]),
        );
        assert_eq!(out.status.code(), Some(1), "status {name}");
        let err = text(&out.stderr);
        assert!(err.contains(name.as_str()), "status {name}: {err}");
        if name.ends_with("-zeros") {
            assert!(err.contains("is not ready"), "{err}");
        }
        if name.ends_with("-unpublished") {
            assert!(err.contains("died while starting"), "{err}");
        }

        let out = run_unpanicked(
            &format!("status --json {name}"),
            common::tandem().args(["status", "--json", "--segment", name]),
        );
        assert_eq!(out.status.code(), Some(1), "status --json {name}");
        let said: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("status --json {name}: {e}: {}", text(&out.stdout)));
        assert!(said.is_object(), "{name}: {said}");

        let out = run_unpanicked(
            &format!("blob ls {name}"),
            common::tandem().args(["blob", "ls", "--config", &blob_config, "--segment", name]),
        );
        assert_eq!(out.status.code(), Some(1), "blob ls {name}");
        assert!(
            text(&out.stderr).starts_with("tandem blob: "),
            "blob ls {name}: {}",
            text(&out.stderr)
        );
    }
    // Every one of them in /dev/shm at once, for the commands that look
    // through it all (other tests' runtimes may answer too).
    run_unpanicked("status", common::tandem().arg("status"));
    run_unpanicked(
        "clean --dry-run",
        common::tandem().args(["clean", "--dry-run"]),
    );
    run_unpanicked(
        "blob ls",
        common::tandem().args(["blob", "ls", "--config", &blob_config]),
    );
}

/// Rounds of [`runtimes_killed_during_their_start_leave_no_panic`].
const KILLS: u32 = 50;

/// Runtimes killed at [`KILLS`] delays spread over their start (from 0 to
/// a quarter past the time one took to be ready, so that every step of it
/// is cut, however fast this build is): `tandem blob ls` on their store
/// and `tandem status` on their segment right after end with an answer or
/// an error, never a panic.
#[test]
fn runtimes_killed_during_their_start_leave_no_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid = std::process::id();
    let (_, ready) = published_image(dir.path(), &format!("tandem-halfinit-{pid}-timed"));
    let span = ready * 5 / 4;
    for round in 0..KILLS {
        let delay = span * round / KILLS;
        let name = format!("tandem-halfinit-{pid}-killed-{round}");
        let mut cleanup = common::Cleanup::default();
        cleanup.files.push(Path::new("/dev/shm").join(&name));
        let blob_config = config(dir.path(), &name);
        let child = common::tandem()
            .args(["blob", "run", "--config", &blob_config])
            .env_remove("TANDEM_BLOB_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tandem blob run");
        cleanup.children.push(child);
        std::thread::sleep(delay);
        let child = cleanup.children.last_mut().expect("child");
        // Killed, or already ended (a start that failed): either leaves
        // what it made behind.
        let _ = child.kill();
        child.wait().expect("reap");
        tandem_process::remove_host_ipc_segments_of(child.id());

        run_unpanicked(
            &format!("blob ls after {delay:?}"),
            common::tandem().args(["blob", "ls", "--config", &blob_config]),
        );
        let out = run_unpanicked(
            &format!("status after {delay:?}"),
            common::tandem().args(["status", "--segment", &name]),
        );
        assert_ne!(out.status.code(), Some(0), "a killed runtime's status");
    }
}
