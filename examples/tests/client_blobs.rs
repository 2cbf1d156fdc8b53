//! The client_blobs example end to end: one runtime serving a blob store
//! (`client_blobs serve`), two programs whose own kernels put, get and
//! compare blobs through it at once (`client_blobs run`), each on device
//! queues of its own; nothing left in /dev/shm afterwards.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tandem_process::ServiceChild;

/// The `client_blobs` binary: from `$TANDEM_BIN_DIR` when set (a GPU
/// bundle), else the one cargo built next to this test.
fn client_blobs() -> PathBuf {
    match std::env::var_os("TANDEM_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("client_blobs"),
        None => PathBuf::from(env!("CARGO_BIN_EXE_client_blobs")),
    }
}

#[test]
fn two_programs_put_and_get_blobs_through_one_store_at_once() {
    let exe = client_blobs();
    let store = std::env::temp_dir().join(format!("tandem-client-blobs-{}", std::process::id()));
    let segment = format!("tandem-client-blobs-{}", std::process::id());
    let args = [
        "serve".as_ref(),
        "--store".as_ref(),
        store.as_os_str(),
        "--segment".as_ref(),
        segment.as_ref(),
    ];
    let runtime = ServiceChild::spawn(&exe, &args).expect("client_blobs serve");
    assert_eq!(runtime.ready(), segment);
    let programs: Vec<_> = [1, 2]
        .into_iter()
        .map(|program| {
            Command::new(&exe)
                .args(["run", "--segment", &segment, "--program"])
                .arg(program.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("client_blobs run")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    for mut program in programs {
        while program.try_wait().expect("waiting").is_none() {
            assert!(
                Instant::now() < deadline,
                "a program still runs after 120 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let output = program.wait_with_output().expect("its output");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{text}");
        assert!(text.contains(": ok"), "{text}");
    }
    assert!(runtime.stop().expect("stopping the runtime").success());
    assert!(!Path::new("/dev/shm").join(&segment).exists());
    std::fs::remove_dir_all(&store).expect("removing the store");
}
