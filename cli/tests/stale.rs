//! `clean_stale_segments` (`tandem clean`): runtime segments whose owner was
//! killed are found by their header and removed; a live runtime's segment and
//! files that are not Tandem's are left alone. (Segments of a user's own
//! format, found by their `OwnerRecord`: the exchange example's tests.)

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::Cleanup;

use tandem_hal::HostApi;
use tandem_runtime::{clean_stale_segments, Registry, Runtime, StaleSegment, StaleWhy};

fn tandem() -> Command {
    let mut cmd = common::tandem();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

fn find<'a>(found: &'a [StaleSegment], name: &str) -> Option<&'a StaleSegment> {
    found.iter().find(|s| s.name == name)
}

#[test]
fn clean_removes_dead_owners_segments_only() {
    let tag = std::process::id();
    let dead_runtime = format!("tandem-test-clean-dead-{tag}");
    let live_runtime = format!("tandem-test-clean-live-{tag}");
    let foreign = format!("tandem-test-clean-foreign-{tag}");
    let shm = |name: &str| PathBuf::from(format!("/dev/shm/{name}"));
    let config_file = std::env::temp_dir().join(format!("{dead_runtime}.toml"));
    let mut cleanup = Cleanup {
        children: Vec::new(),
        files: [&dead_runtime, &live_runtime, &foreign]
            .iter()
            .map(|n| shm(n))
            .chain([config_file.clone()])
            .collect(),
    };

    std::fs::write(
        &config_file,
        format!(
            "workers = 1\nlanes = 2\nqueue_depth = 64\ncpu_segment_size = 2097152\ndevices = []\ncpu_segment_name = \"{dead_runtime}\"\n"
        ),
    )
    .expect("config");
    let mut run = tandem();
    run.arg("run")
        .arg("--config")
        .arg(&config_file)
        .arg("--announce");
    let runtime_pid = common::kill_after_ready(run, &mut cleanup);

    let config = common::cpu_config(&live_runtime, 1);
    let live = Runtime::start_with(HostApi::with_devices(0), config, Registry::with_builtins())
        .expect("start");
    // Not a Tandem segment: no magic, nobody holds it.
    std::fs::write(shm(&foreign), [0xabu8; 4096]).expect("foreign file");

    for name in [&dead_runtime, &live_runtime, &foreign] {
        assert!(shm(name).exists(), "{name} missing before the clean");
    }
    let would = clean_stale_segments(true).expect("dry run");
    let rt = find(&would, &dead_runtime).expect("dead runtime's segment found");
    assert_eq!(
        (rt.owner_pid, rt.why),
        (Some(runtime_pid), StaleWhy::OwnerGone)
    );
    assert!(
        rt.to_string()
            .contains(&format!("owner pid {runtime_pid}, gone")),
        "{rt}"
    );
    assert!(find(&would, &live_runtime).is_none(), "{would:?}");
    assert!(find(&would, &foreign).is_none(), "{would:?}");
    assert!(shm(&dead_runtime).exists(), "a dry run removed it");

    // The removal itself through `tandem clean`, as a person runs it.
    let out = tandem().arg("clean").output().expect("tandem clean");
    assert!(out.status.success(), "tandem clean: {:?}", out.status);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("removed /dev/shm/{dead_runtime} (owner pid")),
        "{said}"
    );
    assert!(!said.contains(&live_runtime), "{said}");
    assert!(!shm(&dead_runtime).exists());
    assert!(
        shm(&live_runtime).exists(),
        "the live runtime's segment was removed"
    );
    assert!(shm(&foreign).exists(), "a foreign file was removed");
    drop(live);
    assert!(!shm(&live_runtime).exists());
}

/// A demo killed with SIGKILL leaves its temporary blob store; `tandem
/// clean` removes it (and its segments), and only after its owner died.
#[test]
fn clean_removes_a_killed_demos_store() {
    let mut cleanup = Cleanup::default();
    let mut command = tandem();
    command.args(["blob", "demo"]);
    let mut child = command.spawn().expect("spawn");
    let pid = child.id();
    let out = child.stdout.take().expect("stdout");
    cleanup.children.push(child);
    // Printed once its store and runtime are up.
    let started = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.starts_with("kernel: "));
    assert!(started, "the demo did not start");
    let prefix = format!("tandem-blob-demo-{pid}-");
    let folders = || -> Vec<PathBuf> {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect()
    };
    let store = folders();
    assert_eq!(store.len(), 1, "the demo's store: {store:?}");
    let clean = || {
        let out = common::tandem()
            .arg("clean")
            .output()
            .expect("tandem clean");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Its owner lives: kept.
    clean();
    assert!(store[0].exists(), "a live demo's store was removed");
    let child = cleanup.children.last_mut().expect("child");
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert!(store[0].exists(), "SIGKILL leaves the store behind");
    let said = clean();
    assert!(
        said.contains(&store[0].display().to_string()),
        "tandem clean said: {said}"
    );
    assert_eq!(folders(), Vec::<PathBuf>::new());
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&format!("-{pid}-")) || n.contains(&format!("{pid:x}")))
        .collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}
