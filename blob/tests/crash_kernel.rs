//! Kill -9 the runtime in the middle of a stream of puts from a kernel. The
//! test binary re-executes itself as a child (`crash_kernel_child`, which
//! does nothing unless `TANDEM_BLOB_KCRASH_DIR` is set): it opens a durable
//! store (one file target), serves it on the best device it finds (the CPU
//! device in CI; CUDA when built with `cuda` and a GPU answers), and
//! launches `tandem_blob_put_stream`, whose threads each put their blob
//! `k<rank>` round after round. A host thread of the child polls the
//! kernel's acknowledgements and prints `ack <rank> <n>` (rounds `0..n` of
//! that thread were acknowledged) as they advance. The parent SIGKILLs the
//! child at a random moment, over several rounds, each with its own tag, and
//! checks:
//!
//! * the dead runtime's segment is stale and removed, and nothing of the
//!   child is left in `/dev/shm`;
//! * the store reopens; every thread's blob holds one whole put of that
//!   thread (stamp and pattern), of its last printed acknowledged round or
//!   a later one (acknowledged but not printed yet, or in flight and
//!   committed), and is missing only when nothing was acknowledged;
//! * the blobs of earlier rounds read back unchanged, and the space in use
//!   is exactly the blobs' pages (unacknowledged puts' space is reclaimed).
//!
//! First, in this process, the stream kernel itself: it runs to its end with
//! every put acknowledged, and a stop ends it early with its blobs whole.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tandem_blob::demo::{pattern, BlobKernels, PutStreamLaunch};
use tandem_blob::{
    BlobError, BlobStore, Limits, Score, StoreConfig, TagId, TargetConfig, PAGE_SIZE,
};
use tandem_hal::GpuApi;
use tandem_runtime::{
    on_best_backend, remove_stale_segment, Backend, DeviceSelection, OnBackend, Runtime,
};

const DIR_ENV: &str = "TANDEM_BLOB_KCRASH_DIR";
const TAG_ENV: &str = "TANDEM_BLOB_KCRASH_TAG";
const ROUNDS: u64 = 5;
const BLOCKS: u32 = 2;
const THREADS: u32 = 8;
const RANKS: usize = (BLOCKS * THREADS) as usize;
/// Not a multiple of the page: the last page of every blob is partial.
const BLOB_BYTES: u64 = 4096 + 100;

fn store_config(dir: &Path) -> StoreConfig {
    StoreConfig {
        metadata: dir.join("meta.redb"),
        targets: vec![TargetConfig::file(dir.join("data.dat"), 64 << 20, 0.5)],
        limits: Limits::default(),
    }
}

/// What `tandem_blob_put_stream` puts in round `round` of thread `rank`:
/// the pattern, its first eight bytes the stamp.
fn content(rank: u64, round: u64) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..BLOB_BYTES).map(|i| pattern(rank, round, i)).collect();
    bytes[..8].copy_from_slice(&((rank << 40) | round).to_le_bytes());
    bytes
}

/// The child's work, on whichever backend `on_best_backend` picked.
struct Child {
    dir: PathBuf,
    tag: String,
}

impl OnBackend for Child {
    type Output = ();

    fn run<A: GpuApi>(self, api: A, backend: Backend) {
        let store = Arc::new(BlobStore::open(&store_config(&self.dir)).expect("open the store"));
        // Committed before the kernel starts: the parent always finds it.
        let tag = store.get_or_create_tag(&self.tag).expect("tag");
        let runtime = runtime(api, &store);
        let mut kernels = BlobKernels::load(&runtime.devices()[0]).expect("load the blob kernels");
        let mut out = std::io::stdout().lock();
        let segment = runtime.cpu_segment().name().expect("a named CPU segment");
        writeln!(out, "segment {segment} {}", backend.describe()).expect("stdout");
        out.flush().expect("stdout");
        let launch = PutStreamLaunch {
            blocks: BLOCKS,
            threads: THREADS,
            tag,
            blob_bytes: BLOB_BYTES,
            rounds: u64::MAX,
            score: Score(0.5),
            spin_budget: 1 << 40,
        };
        let mut printed = vec![0u64; RANKS];
        let acks = kernels
            .put_stream(&launch, Duration::from_millis(1), |acks| {
                let mut any = false;
                for (rank, (&n, seen)) in acks.iter().zip(&mut printed).enumerate() {
                    if n > *seen {
                        writeln!(out, "ack {rank} {n}").expect("stdout");
                        *seen = n;
                        any = true;
                    }
                }
                if any {
                    out.flush().expect("stdout");
                }
                ControlFlow::Continue(())
            })
            .expect("the put stream");
        // Only an error ends a stream of u64::MAX rounds before the kill.
        panic!("the put stream ended: acks {acks:?}");
    }
}

/// The child: serves the store and streams puts from a kernel until killed.
#[test]
fn crash_kernel_child() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let tag = std::env::var(TAG_ENV).expect("the tag to put in");
    on_best_backend(Child {
        dir: dir.into(),
        tag,
    })
    .expect("a backend");
}

/// What the parent read from a child.
enum Line {
    Segment(String, String),
    Ack(usize, u64),
}

fn parse(line: &str) -> Option<Line> {
    // libtest may print "test crash_kernel_child ... " in front of a line.
    if let Some(at) = line.find("segment ") {
        // The backend is described in words with spaces: the rest of the line.
        let (name, backend) = line[at + 8..].split_once(' ')?;
        return Some(Line::Segment(name.to_string(), backend.to_string()));
    }
    let at = line.find("ack ")?;
    let mut f = line[at + 4..].split_whitespace();
    let rank = f.next()?.parse().ok()?;
    let n = f.next()?.parse().ok()?;
    Some(Line::Ack(rank, n))
}

/// A delay in 100..400 ms, different each call.
fn random_delay(round: u64) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut x = u64::from(nanos) ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    Duration::from_millis(100 + x % 300)
}

/// One child run, killed mid-stream: its segment, backend, and the last
/// acknowledgement printed per rank.
struct Killed {
    segment: String,
    backend: String,
    pid: u32,
    acks: Vec<u64>,
    delay: Duration,
}

fn kill_one(dir: &Path, tag: &str, round: u64) -> Killed {
    let log = dir.join(format!("child-{round}.log"));
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "crash_kernel_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir)
        .env(TAG_ENV, tag)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("child log"))
        .spawn()
        .expect("start the child");
    let pid = child.id();
    let stdout = child.stdout.take().expect("stdout");
    let (events, seen) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut segment = None;
        let mut acks = vec![0u64; RANKS];
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            match parse(&line) {
                Some(Line::Segment(name, backend)) => {
                    segment = Some((name, backend));
                }
                Some(Line::Ack(rank, n)) => {
                    assert!(n > acks[rank], "acks of rank {rank} advance: {line:?}");
                    acks[rank] = n;
                    // The parent waits for the first; it may be gone later.
                    let _ = events.send(());
                }
                None => {}
            }
        }
        (segment, acks)
    });
    let first = seen.recv_timeout(Duration::from_secs(20));
    let delay = random_delay(round);
    if first.is_ok() {
        std::thread::sleep(delay);
    }
    // SIGKILL (std's kill), then reap: a zombie would still own its segment.
    child.kill().expect("kill the child");
    let status = child.wait().expect("reap the child");
    let (segment, acks) = reader.join().expect("reader thread");
    let stderr = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        first.is_ok(),
        "round {round}: no acknowledgement within 20 s ({status:?}); child stderr:\n{}",
        stderr()
    );
    assert!(
        !status.success(),
        "round {round}: the child ended before the kill; stderr:\n{}",
        stderr()
    );
    let (segment, backend) = segment.expect("a segment line before the first ack");
    Killed {
        segment,
        backend,
        pid,
        acks,
        delay,
    }
}

/// Which round of `rank`'s stream `bytes` is, when they are one whole put
/// of that thread.
fn whole_round(rank: u64, bytes: &[u8]) -> Option<u64> {
    let stamp = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let round = stamp & ((1 << 40) - 1);
    (stamp >> 40 == rank && bytes == content(rank, round).as_slice()).then_some(round)
}

#[test]
fn kill_9_in_a_stream_of_kernel_puts() {
    if std::env::var_os(DIR_ENV).is_some() {
        return; // inside the child
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir"); // a real disk
                                                     // (tag, rank) -> the bytes found after that round's kill.
    let mut earlier: BTreeMap<(String, u64), Vec<u8>> = BTreeMap::new();
    let mut total_acks = 0;
    for round in 0..ROUNDS {
        let tag_name = format!("kcrash-{round}");
        let killed = kill_one(dir.path(), &tag_name, round);

        let removed = remove_stale_segment(&killed.segment).expect("remove the dead segment");
        assert!(
            removed.is_some(),
            "round {round}: {} was not stale",
            killed.segment
        );
        let prefix = format!("tandem-{}-", killed.pid);
        let left: Vec<String> = std::fs::read_dir("/dev/shm")
            .expect("read /dev/shm")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with(&prefix) || *name == killed.segment)
            .collect();
        assert!(left.is_empty(), "round {round}: left in /dev/shm: {left:?}");

        let store = BlobStore::open(&store_config(dir.path())).expect("reopen the store");
        let tag = store
            .tag(&tag_name)
            .expect("tags")
            .expect("the tag was committed before the kernel started");
        let mut later = 0;
        for (rank, &acked) in killed.acks.iter().enumerate() {
            let rank = rank as u64;
            let name = format!("k{rank}");
            let stat = match store.stat(tag, &name) {
                Ok(stat) => stat,
                Err(BlobError::NotFound { .. }) => {
                    assert_eq!(acked, 0, "round {round}: {name}, acknowledged, is lost");
                    continue;
                }
                Err(e) => panic!("round {round}: stat {name}: {e}"),
            };
            assert_eq!(stat.size, BLOB_BYTES, "round {round}: {name}'s size");
            assert!(stat.durable, "round {round}: {name} is not on the file");
            let mut bytes = vec![0u8; BLOB_BYTES as usize];
            store.get(tag, &name, 0, &mut bytes).expect("get");
            let found = whole_round(rank, &bytes).unwrap_or_else(|| {
                panic!("round {round}: {name} is not one whole put of thread {rank}")
            });
            // acked = n: rounds 0..n were acknowledged, so round n - 1 or a
            // later one (acknowledged unprinted, or in flight) must be there.
            assert!(
                found + 1 >= acked,
                "round {round}: {name} holds round {found}, older than acknowledged round {}",
                acked - 1
            );
            later += u64::from(found + 1 > acked);
            earlier.insert((tag_name.clone(), rank), bytes);
        }
        // Earlier rounds' blobs did not change, and nothing else exists.
        let mut blobs = 0;
        let mut pages = 0;
        for t in 0..=round {
            let old_tag = store
                .tag(&format!("kcrash-{t}"))
                .expect("tags")
                .expect("an earlier round's tag");
            for stat in store.list_blobs(old_tag).expect("list") {
                let rank: u64 = stat
                    .name
                    .strip_prefix('k')
                    .and_then(|r| r.parse().ok())
                    .unwrap_or_else(|| panic!("round {round}: a stray blob {}", stat.name));
                let want = earlier
                    .get(&(format!("kcrash-{t}"), rank))
                    .unwrap_or_else(|| panic!("round {round}: kcrash-{t}/{} appeared", stat.name));
                let mut bytes = vec![0u8; want.len()];
                store.get(old_tag, &stat.name, 0, &mut bytes).expect("get");
                assert!(
                    &bytes == want,
                    "round {round}: kcrash-{t}/{} changed",
                    stat.name
                );
                blobs += 1;
                pages += stat.size.div_ceil(PAGE_SIZE);
            }
        }
        assert_eq!(blobs, earlier.len(), "round {round}: blobs lost");
        let used: u64 = store.targets().iter().map(|t| t.used).sum();
        assert_eq!(
            used,
            pages * PAGE_SIZE,
            "round {round}: space not reclaimed"
        );
        drop(store);
        let acks: u64 = killed.acks.iter().sum();
        total_acks += acks;
        println!(
            "round {round} on {}: killed after {:?} of puts, {acks} acknowledgements printed \
             ({} threads with none), {later} blobs past their last printed one",
            killed.backend,
            killed.delay,
            killed.acks.iter().filter(|&&n| n == 0).count()
        );
    }
    println!(
        "{ROUNDS} rounds, {total_acks} acknowledged puts, {} blobs verified, {:?}",
        earlier.len(),
        started.elapsed()
    );
    assert!(total_acks > 0);
}

/// A runtime in this process serving `store` on device 0 of `api`.
fn runtime<A: GpuApi>(api: A, store: &Arc<BlobStore>) -> Runtime<A> {
    common::blob_runtime(api, store, DeviceSelection::Only(vec![0]), 32 << 20)
}

/// Every blob of `tag` is one whole put of its thread, not older than its
/// acknowledgement; the rounds found.
fn check_blobs(store: &BlobStore, tag: TagId, acks: &[u64]) -> Vec<u64> {
    let mut bytes = vec![0u8; BLOB_BYTES as usize];
    acks.iter()
        .enumerate()
        .map(|(rank, &acked)| {
            let name = format!("k{rank}");
            store.get(tag, &name, 0, &mut bytes).expect("get");
            let found = whole_round(rank as u64, &bytes)
                .unwrap_or_else(|| panic!("{name} is not one whole put of thread {rank}"));
            assert!(
                found + 1 >= acked,
                "{name}: round {found}, acknowledged {acked}"
            );
            found
        })
        .collect()
}

fn stream_runs_to_its_end_and_stops<A: GpuApi>(api: A) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(
        BlobStore::open(&StoreConfig::ram_and_file(dir.path(), 64 << 20)).expect("open the store"),
    );
    let runtime = runtime(api, &store);
    let mut kernels = BlobKernels::load(&runtime.devices()[0]).expect("load the blob kernels");
    let tag = store.get_or_create_tag("stream").expect("tag");
    let launch = PutStreamLaunch {
        blocks: BLOCKS,
        threads: THREADS,
        tag,
        blob_bytes: BLOB_BYTES,
        rounds: 3,
        score: Score::AUTO,
        spin_budget: 1 << 40,
    };
    let mut watched = Vec::new();
    let acks = kernels
        .put_stream(&launch, Duration::from_millis(1), |acks| {
            assert!(
                acks.iter().zip(&watched).all(|(n, w)| n >= w),
                "acks go back"
            );
            watched = acks.to_vec();
            ControlFlow::Continue(())
        })
        .expect("a stream of 3 rounds");
    assert_eq!(acks, vec![3; RANKS]);
    assert_eq!(watched, acks, "the last call sees the final acks");
    assert_eq!(check_blobs(&store, tag, &acks), vec![2; RANKS]);

    // Stopped once every thread had a put acknowledged.
    let endless = PutStreamLaunch {
        rounds: u64::MAX,
        ..launch
    };
    let acks = kernels
        .put_stream(&endless, Duration::from_millis(1), |acks| {
            if acks.iter().all(|&n| n > 3) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .expect("an endless stream, stopped");
    assert!(acks.iter().all(|&n| n > 3 && n < u64::MAX), "{acks:?}");
    check_blobs(&store, tag, &acks);
    drop(kernels);
    runtime.shutdown().expect("shutdown");
}

tandem_tests::backend_tests!(stream_runs_to_its_end_and_stops);
