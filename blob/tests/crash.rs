//! Crash test: the test binary re-executes itself as a child (`crash_child`, which does nothing
//! unless `TANDEM_BLOB_CRASH_DIR` is set) whose writer threads do a stream of durable puts
//! (unique names, and overwrites of a few hot blobs) plus a few volatile ones, printing
//! `ACK writer seq` after each put returned. The parent SIGKILLs it at a random moment, over many
//! rounds, reopens the store and checks:
//!
//! * every acknowledged put reads back byte for byte, or is superseded by a later put of the
//!   same blob that is itself whole;
//! * no blob holds bytes of a put that was neither acknowledged nor the one put each writer had
//!   in flight at the kill (that one may be visible, whole: it may have committed before its
//!   acknowledgement was printed);
//! * volatile blobs are gone, and the space in use is exactly the surviving blobs store (space
//!   of unacknowledged puts is reclaimed).
//!
//! The puts vary their context: raw, compressed (static and dynamic, each codec), and kept
//! long-term or temporary (both survive a kill; only a reboot drops a temporary blob).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tandem_blob::BlobPut;

use tandem_blob::*;

const P: u64 = PAGE_SIZE;
const WRITERS: u64 = 3;
const HOT: u64 = 3;
const HOT_LEN: u64 = 2 * P + 77;
const ROUNDS: u64 = 20;

fn config(dir: &Path) -> StoreConfig {
    StoreConfig {
        metadata: dir.join("meta.redb"),
        targets: vec![
            TargetConfig::ram(256 * P, 1.0),
            TargetConfig::file(dir.join("data.dat"), 65536 * P, 0.5),
        ],
        limits: Limits::default(),
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The version id of writer `w`'s put number `seq` in round `round`.
fn version(round: u64, w: u64, seq: u64) -> u64 {
    (round << 40) | (w << 32) | seq
}

/// What writer `w`'s put number `seq` writes: (name, length, durable).
fn put_of(round: u64, w: u64, seq: u64) -> (String, u64, bool) {
    match seq % 5 {
        0 | 2 => {
            let name = format!("u-{round}-{w}-{seq}");
            let len = 8 + fnv(&name) % (5 * P);
            (name, len, true)
        }
        4 => (format!("v-{w}"), 100, false),
        _ => (format!("hot-{w}-{}", seq % HOT), HOT_LEN, true),
    }
}

/// The context of writer `w`'s put number `seq` (durable or not).
fn context_of(seq: u64, durable: bool) -> PutContext {
    const COMPRESSIONS: [&str; 4] = ["none", "zstd:fast", "dynamic:lz4", "lz4"];
    PutContext {
        compression: COMPRESSIONS[(seq % 4) as usize].parse().unwrap(),
        persistence: if durable && seq % 3 == 1 {
            Persistence::Temporary
        } else {
            Persistence::Volatile
        },
    }
}

/// The bytes of version `v` of blob `name`: the version id, then a stream seeded by both, each
/// word of it eight times (so that it compresses).
fn content(name: &str, v: u64, len: u64) -> Vec<u8> {
    let mut x = fnv(name) ^ v.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = v.to_le_bytes().to_vec();
    while (out.len() as u64) < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for _ in 0..8 {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out.truncate(len as usize);
    out
}

/// The child: writers putting until killed.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var("TANDEM_BLOB_CRASH_DIR") else {
        return;
    };
    let round: u64 = std::env::var("TANDEM_BLOB_CRASH_ROUND")
        .unwrap()
        .parse()
        .unwrap();
    let store = std::sync::Arc::new(BlobStore::open(&config(Path::new(&dir))).unwrap());
    let tag = store.get_or_create_tag("crash").unwrap();
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                for seq in 0.. {
                    let (name, len, durable) = put_of(round, w, seq);
                    let v = version(round, w, seq);
                    let score = if durable { Score(0.5) } else { Score::AUTO };
                    let bytes = content(&name, v, len);
                    let info = store
                        .put(
                            &BlobPut::new(tag, &name)
                                .score(score)
                                .context(context_of(seq, durable)),
                            &bytes,
                        )
                        .unwrap();
                    // A full file target would spill a durable put into RAM: not what is tested.
                    assert_eq!(
                        info.durable, durable,
                        "put {name} landed in the wrong class"
                    );
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {w} {seq}").unwrap();
                    out.flush().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn kill_9_in_a_stream_of_puts() {
    if std::env::var("TANDEM_BLOB_CRASH_DIR").is_ok() {
        return; // inside the child
    }
    let dir = tempfile::tempdir().unwrap(); // /tmp: a real disk, with O_DIRECT
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = Rng(seed);
    let exe = std::env::current_exe().unwrap();
    let start = Instant::now();
    // name -> version it must hold now (verified after the previous round).
    let mut expect: HashMap<String, u64> = HashMap::new();
    let mut total_acks = 0;
    let mut in_flight_seen = 0;
    let mut total_compressed = 0;
    for round in 1..=ROUNDS {
        let mut child = Command::new(&exe)
            .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
            .env("TANDEM_BLOB_CRASH_DIR", dir.path())
            .env("TANDEM_BLOB_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut acked: Vec<Option<u64>> = vec![None; WRITERS as usize];
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest may print "test crash_child ... " in front of the first line.
                let Some(at) = line.find("ACK ") else {
                    continue;
                };
                let mut f = line[at + 4..].split_whitespace();
                let w: usize = f.next().unwrap().parse().unwrap();
                let seq: u64 = f.next().unwrap().parse().unwrap();
                assert_eq!(
                    acked[w].map_or(0, |s| s + 1),
                    seq,
                    "acks of a writer come in order"
                );
                acked[w] = Some(seq);
            }
            acked
        });
        std::thread::sleep(Duration::from_millis(50 + rng.below(400)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let acked = reader.join().unwrap();

        // What may be in the store now: the acknowledged puts (the last one per blob wins) and
        // each writer's single in-flight put.
        let mut in_flight: HashMap<String, u64> = HashMap::new();
        for w in 0..WRITERS {
            let n_acked = acked[w as usize].map_or(0, |s| s + 1);
            total_acks += n_acked;
            for seq in 0..n_acked {
                let (name, _, durable) = put_of(round, w, seq);
                if durable {
                    expect.insert(name, version(round, w, seq));
                }
            }
            let (name, _, durable) = put_of(round, w, n_acked);
            if durable {
                in_flight.insert(name, version(round, w, n_acked));
            }
        }

        let store = BlobStore::open(&config(dir.path())).unwrap();
        // The child creates the tag before its first put. Killed sooner (a
        // slow start on a loaded machine), it leaves no tag and nothing else.
        let Some(tag) = store.tag("crash").unwrap() else {
            assert_eq!(
                total_acks, 0,
                "the tag was committed before the first acknowledged put"
            );
            let used: u64 = store.targets().iter().map(|t| t.used).sum();
            assert_eq!(used, 0, "space in use without a tag");
            continue;
        };
        let blobs = store.list_blobs(tag).unwrap();
        let mut stored = 0;
        let mut compressed = 0;
        for b in &blobs {
            compressed += u64::from(!b.codecs.is_empty());
            assert!(b.durable, "volatile blob {} survived a restart", b.name);
            let mut out = vec![0; b.size as usize];
            store.get(tag, &b.name, 0, &mut out).unwrap();
            let v = u64::from_le_bytes(out[..8].try_into().unwrap());
            assert!(
                out == content(&b.name, v, b.size),
                "blob {} is not one whole put",
                b.name
            );
            match (expect.get(&b.name), in_flight.get(&b.name)) {
                (_, Some(&f)) if f == v => {
                    in_flight_seen += 1;
                    expect.insert(b.name.clone(), v);
                }
                (Some(&e), _) => assert_eq!(
                    v, e,
                    "blob {} holds neither its last acknowledged put nor the one in flight",
                    b.name
                ),
                (None, _) => panic!(
                    "blob {} (version {v:#x}) was never acknowledged nor in flight",
                    b.name
                ),
            }
            stored += b.stored;
        }
        for name in expect.keys() {
            assert!(
                blobs.iter().any(|b| &b.name == name),
                "acknowledged blob {name} is lost"
            );
        }
        // Space of unacknowledged puts is free again; nothing else is.
        let used: u64 = store.targets().iter().map(|t| t.used).sum();
        assert_eq!(used, stored);
        total_compressed += compressed;
        drop(store);
    }
    eprintln!(
        "{ROUNDS} rounds, {total_acks} acknowledged puts, {} blobs verified ({total_compressed} \
         compressed, over the rounds), {in_flight_seen} in-flight puts found whole, {:?}",
        expect.len(),
        start.elapsed()
    );
    assert!(total_acks > 0);
    assert!(total_compressed > 0, "no compressed blob was ever verified");
}
