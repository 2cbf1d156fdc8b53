//! Kill -9 the runtime in the middle of a host client's stream of puts: a
//! `tandem blob run --announce` on a durable store (one file target), a
//! client in this process putting blobs (unique names, bytes derived from
//! the name) one after another, and SIGKILL at a random moment. Each round
//! checks:
//!
//! * the client's pending put ends with `RuntimeDead`, and does not hang;
//! * the store reopens; every acknowledged put (of every round so far) reads
//!   back byte for byte;
//! * no blob exists that was neither acknowledged nor the one put in flight
//!   at the kill, which, if present, is whole;
//! * the dead runtime's segment is removed from `/dev/shm`.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tandem_blob::BlobPut;

use tandem_blob::{BlobCaller, BlobStore, CallError, Limits, StoreConfig, TargetConfig};
use tandem_runtime::{Client, TaskError};

const ROUNDS: u64 = 5;
const TAG: &str = "crash";

/// `tandem` (`tandem blob ...` are the commands under test).
fn exe() -> PathBuf {
    common::tandem_exe()
}

fn store_config(dir: &Path) -> StoreConfig {
    StoreConfig {
        metadata: dir.join("meta.redb"),
        targets: vec![TargetConfig::file(dir.join("data.dat"), 256 << 20, 0.5)],
        limits: Limits::default(),
    }
}

/// The runtime's configuration (CPU queues only) with the store as [blob].
fn write_config(dir: &Path) -> PathBuf {
    let store = store_config(dir);
    let target = &store.targets[0];
    let text = format!(
        "workers = 2\ndevices = []\nclient_heap_bytes = 1048576\n\
         [blob]\nmetadata = {:?}\n\
         [[blob.targets]]\nkind = \"file\"\npath = {:?}\ncapacity = {}\nscore = {}\n",
        store.metadata,
        target.path.as_ref().expect("a file target"),
        target.capacity,
        target.score
    );
    let path = dir.join("tandem.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The bytes of blob `name`: 1..=40000 of them, a stream seeded by the name.
fn content(name: &str) -> Vec<u8> {
    let x = fnv(name) | 1;
    let len = 1 + (x % 40_000) as usize;
    tandem_tests::support::xorshift_bytes(x, len)
}

/// A delay in 50..300 ms, different each call.
fn random_delay(round: u64) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let x = fnv(&format!("{nanos}-{round}"));
    Duration::from_millis(50 + x % 250)
}

/// What a round left: the names acknowledged, and the one in flight.
struct Round {
    acked: Vec<String>,
    in_flight: String,
    segment: String,
}

fn one_round(config: &Path, round: u64) -> Round {
    let mut child = Command::new(exe())
        .arg("blob")
        .args(["run", "--config"])
        .arg(config)
        .arg("--announce")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start tandem blob run");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready = lines.next().expect("a ready line").expect("stdout");
    let segment = ready
        .strip_prefix("ready ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("ready line {ready:?}"))
        .to_string();
    let client = Client::attach(&segment).expect("attach");
    // A safety net only: the runtime's death must end the wait long before.
    let caller = BlobCaller::new(&client).with_timeout(Duration::from_secs(20));
    let tag = caller.get_or_create_tag(TAG).expect("tag");

    let delay = random_delay(round);
    // Kills and reaps (a zombie would still look alive to the waiter).
    let killer = std::thread::spawn(move || {
        std::thread::sleep(delay);
        // SAFETY: kill(2) on our own child's pid, which it still is: only
        // this thread reaps it, below.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
        child.wait().expect("reap the runtime")
    });

    let mut acked = Vec::new();
    let started = Instant::now();
    let (in_flight, error) = loop {
        let name = format!("r{round}-{}", acked.len());
        match caller.put(&BlobPut::new(tag, &name), &content(&name)) {
            Ok(size) => {
                assert_eq!(size, content(&name).len() as u64);
                acked.push(name);
            }
            Err(e) => break (name, e),
        }
    };
    let waited = started.elapsed();
    let status = killer.join().expect("killer thread");
    assert!(!status.success(), "the runtime was killed: {status:?}");
    assert!(
        matches!(error, CallError::Task(TaskError::RuntimeDead { .. })),
        "round {round}: the pending put ended with {error:?}, not RuntimeDead"
    );
    assert!(
        waited < delay + Duration::from_secs(10),
        "round {round}: the put took {waited:?} to see the death"
    );
    drop(client);
    Round {
        acked,
        in_flight,
        segment,
    }
}

#[test]
fn killing_the_runtime_mid_stream_keeps_every_acknowledged_put() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path());
    // Every blob that must be there, by name (acknowledged, or in flight and
    // found whole).
    let mut expected: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for round in 0..ROUNDS {
        let r = one_round(&config, round);
        // The client removed the dead runtime's segment when it was dropped.
        assert!(
            !Path::new("/dev/shm").join(&r.segment).exists(),
            "round {round}: {} left behind",
            r.segment
        );

        let store = BlobStore::open(&store_config(dir.path())).expect("reopen the store");
        let tag = store.tag(TAG).expect("tags").expect("the tag survives");
        for name in &r.acked {
            expected.insert(name.clone(), content(name));
        }
        let found = store.list_blobs(tag).expect("list");
        for blob in &found {
            if expected.contains_key(&blob.name) {
                continue;
            }
            assert_eq!(
                blob.name, r.in_flight,
                "round {round}: a blob that was never acknowledged"
            );
            // Committed before the kill, unacknowledged: it must be whole.
            let want = content(&blob.name);
            assert_eq!(blob.size, want.len() as u64, "in-flight {} torn", blob.name);
            expected.insert(blob.name.clone(), want);
        }
        assert_eq!(found.len(), expected.len(), "round {round}: blobs lost");
        for (name, want) in &expected {
            let mut back = vec![0u8; want.len()];
            store.get(tag, name, 0, &mut back).expect("get");
            assert!(&back == want, "round {round}: {name} differs");
            assert!(store.stat(tag, name).expect("stat").durable);
        }
        println!(
            "round {round}: {} puts acknowledged, in flight {} ({}), {} blobs in all",
            r.acked.len(),
            r.in_flight,
            if expected.contains_key(&r.in_flight) {
                "committed"
            } else {
                "not visible"
            },
            expected.len()
        );
    }
}
