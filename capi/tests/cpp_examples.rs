//! The C++ examples (`examples/cpp`, built with CMake by the `cpp` leg of
//! `cargo xtask test`, which names their build folder in
//! `$TANDEM_CPP_EXAMPLES`) against a `tandem blob run` runtime and a
//! `tandem share serve` daemon started here: two programs' kernels put and
//! get blobs through one store at once, a C program calls it from host
//! code, a producer hands a consumer a buffer by id, and a C program forks
//! with its share handle and stores into a sealed buffer. Nothing is left in
//! /dev/shm or the temporary folder.
//!
//! Without the variable the test says it skipped; with
//! `TANDEM_REQUIRE_CPP=1` (the leg sets it) a missing build is a failure.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tandem_process::{find_tandem_binary, ServiceChild};

mod common;

/// The examples' build folder, or None (after saying why) when the test
/// may skip.
fn examples() -> Option<PathBuf> {
    let required = std::env::var("TANDEM_REQUIRE_CPP").is_ok_and(|v| v == "1");
    match std::env::var_os("TANDEM_CPP_EXAMPLES") {
        Some(dir) => Some(PathBuf::from(dir)),
        None if required => panic!("TANDEM_REQUIRE_CPP=1 but TANDEM_CPP_EXAMPLES is not set"),
        None => {
            println!(
                "skipped: examples/cpp not built (`cargo xtask test cpp` builds and runs them)"
            );
            None
        }
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn spawn(exe: &Path, args: &[&OsStr]) -> ServiceChild {
    ServiceChild::spawn(exe, args).unwrap_or_else(|e| panic!("starting {}: {e}", exe.display()))
}

/// A `tandem share serve` on `socket`.
fn share_daemon(socket: &Path) -> ServiceChild {
    let tandem = find_tandem_binary().expect("the tandem binary");
    spawn(
        &tandem,
        &[
            "share".as_ref(),
            "serve".as_ref(),
            "--socket".as_ref(),
            socket.as_os_str(),
            "--announce".as_ref(),
            "--exit-on-stdin-eof".as_ref(),
        ],
    )
}

#[test]
fn a_cpp_kernel_puts_and_gets_blobs_through_a_runtime_of_another_process() {
    let Some(build) = examples() else { return };
    let tandem = find_tandem_binary().expect("the tandem binary");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let runtime = common::blob_run(&tandem, dir.path(), 64 << 20);
    let segment = runtime.ready().to_owned();
    let programs: Vec<_> = ["1", "2"]
        .into_iter()
        .map(|program| {
            Command::new(build.join("cpp_client_blobs"))
                .args([segment.as_str(), program])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("starting cpp_client_blobs")
        })
        .collect();
    for (program, child) in programs.into_iter().enumerate() {
        let output = child.wait_with_output().expect("its output");
        let text = text(&output);
        print!("{text}");
        assert!(output.status.success(), "{text}");
        assert!(text.contains(": host: 2 + 3 = 5"), "{text}");
        assert!(
            text.contains(&format!("program {}: ok", program + 1)),
            "{text}"
        );
    }
    let c = Command::new(build.join("c_client"))
        .arg(&segment)
        .output()
        .expect("running c_client");
    let text = self::text(&c);
    print!("{text}");
    assert!(
        c.status.success() && text.contains("c_client: ok"),
        "{text}"
    );
    assert!(runtime.stop().expect("stopping the runtime").success());
    assert!(
        !Path::new("/dev/shm").join(&segment).exists(),
        "{segment} left behind"
    );
}

#[test]
fn a_cpp_producer_hands_a_consumer_a_buffer_through_the_share_daemon() {
    let Some(build) = examples() else { return };
    let dir = tempfile::tempdir().expect("a temporary folder");
    let socket = dir.path().join("share.sock");
    let daemon = share_daemon(&socket);
    let exchange = build.join("cpp_share_exchange");
    let count = "262144";
    let produced = Command::new(&exchange)
        .arg("produce")
        .arg(&socket)
        .arg(count)
        .output()
        .expect("running the producer");
    let text = self::text(&produced);
    assert!(produced.status.success(), "{text}");
    let id = text
        .lines()
        .find_map(|line| line.strip_prefix("id "))
        .unwrap_or_else(|| panic!("no `id` line: {text}"))
        .trim()
        .to_owned();
    // The producer is gone, having exited as soon as its seal returned: the
    // sealed buffer lives in the daemon until the consumer deletes it.
    let consumed = Command::new(&exchange)
        .arg("consume")
        .arg(&socket)
        .args([id.as_str(), count])
        .output()
        .expect("running the consumer");
    let text = self::text(&consumed);
    print!("{text}");
    assert!(consumed.status.success(), "{text}");
    assert!(
        text.contains("0 mismatched") && text.contains("cpp_share_exchange: ok"),
        "{text}"
    );
    assert!(daemon.stop().expect("stopping the daemon").success());
    assert!(!socket.exists(), "the daemon left its socket");
}

/// `c_share_fork` (examples/cpp/c_share_fork.c) against a daemon: writes to
/// a sealed buffer are refused, a forked child's store into its read-only
/// mapping dies of SIGSEGV, and a forked child uses the parent's
/// `tandem_share` handle while the parent's buffer keeps its bytes. The
/// program checks each step; here its verdicts are read back.
#[test]
fn a_c_program_forks_with_its_share_handle_and_no_reader_writes_a_sealed_buffer() {
    let Some(build) = examples() else { return };
    let dir = tempfile::tempdir().expect("a temporary folder");
    let socket = dir.path().join("share.sock");
    let daemon = share_daemon(&socket);
    let run = Command::new(build.join("c_share_fork"))
        .arg(&socket)
        .output()
        .expect("running c_share_fork");
    let text = self::text(&run);
    print!("{text}");
    assert!(run.status.success(), "{text}");
    for verdict in [
        "writes to sealed buffer",
        "the storing child: killed by SIGSEGV",
        "the child using the share: exit 0",
        "kept its 1048576 bytes",
        "c_share_fork: ok",
    ] {
        assert!(text.contains(verdict), "no `{verdict}`: {text}");
    }
    assert!(daemon.stop().expect("stopping the daemon").success());
    assert!(!socket.exists(), "the daemon left its socket");
}

/// `c_share_sets` (examples/cpp/c_share_sets.c) against a daemon: a named
/// set published from C, looked up by name, read by id, listed and
/// deleted, with bad names, unknown sets and unstaged buffers refused by
/// code. The program checks each step; here its verdict is read back.
#[test]
fn a_c_program_publishes_looks_up_lists_and_deletes_a_named_set() {
    let Some(build) = examples() else { return };
    let dir = tempfile::tempdir().expect("a temporary folder");
    let socket = dir.path().join("share.sock");
    let daemon = share_daemon(&socket);
    let run = Command::new(build.join("c_share_sets"))
        .arg(&socket)
        .output()
        .expect("running c_share_sets");
    let text = self::text(&run);
    print!("{text}");
    assert!(run.status.success(), "{text}");
    assert!(text.contains("\"name\":\"c-model\""), "{text}");
    assert!(text.contains("c_share_sets: ok"), "{text}");
    assert!(daemon.stop().expect("stopping the daemon").success());
    assert!(!socket.exists(), "the daemon left its socket");
}
