//! Concurrency stress: many threads putting, getting and deleting the same and different blobs,
//! on a RAM target and file targets. Every version of a blob is one 32-bit word repeated
//! (blob id and version), so a reader that saw a torn put, another blob's bytes, or freed and
//! reused pages finds a word that differs.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_blob::BlobPut;

use tandem_blob::*;

const P: u64 = PAGE_SIZE;
const SHARED: u32 = 6;
/// Sizes spanning several pages, not page multiples.
const SIZE: u64 = 3 * P + 124;

fn word(blob: u32, version: u32) -> u32 {
    (blob << 24) | (version & 0x00ff_ffff)
}

fn fill_version(blob: u32, version: u32, len: u64) -> Vec<u8> {
    word(blob, version)
        .to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(len as usize)
        .collect()
}

/// Checks that `bytes` is one whole version of `blob`; returns the version.
fn check_whole(blob: u32, bytes: &[u8]) -> u32 {
    let first = u32::from_le_bytes(bytes[..4].try_into().unwrap());
    assert_eq!(first >> 24, blob, "another blob's bytes");
    for (i, c) in bytes.chunks(4).enumerate() {
        let want = &first.to_le_bytes()[..c.len()];
        assert_eq!(c, want, "torn read of blob {blob} at byte {}", i * 4);
    }
    first & 0x00ff_ffff
}

fn name(b: u32) -> String {
    format!("shared-{b}")
}

#[test]
fn concurrent_puts_gets_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let cfg = StoreConfig {
        metadata: dir.path().join("meta.redb"),
        targets: vec![
            TargetConfig::ram(4096 * P, 1.0),
            TargetConfig::file(shm.path().join("a.dat"), 2048 * P, 0.5),
            TargetConfig::file(dir.path().join("b.dat"), 2048 * P, 0.4),
        ],
        limits: Limits::default(),
    };
    let store = Arc::new(BlobStore::open(&cfg).unwrap());
    let tag = store.get_or_create_tag("stress").unwrap();
    // Even shared blobs are volatile (RAM), odd ones durable (files).
    let score = |b: u32| if b % 2 == 0 { Score::AUTO } else { Score(0.5) };
    let version = Arc::new(AtomicU32::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let (puts, gets, not_found) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut threads = Vec::new();

    for w in 0..6u32 {
        let (store, version, stop, puts) =
            (store.clone(), version.clone(), stop.clone(), puts.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let b = (w + i) % SHARED;
                let v = version.fetch_add(1, Ordering::Relaxed);
                let data = fill_version(b, v, SIZE);
                store
                    .put(&BlobPut::new(tag, &name(b)).score(score(b)), &data)
                    .unwrap();
                // A private blob of this writer: puts to different blobs run side by side.
                let own = format!("own-{w}");
                let pb = 100 + w;
                let len = 1 + (v as u64 * 7919) % (4 * P);
                store
                    .put(
                        &BlobPut::new(tag, &own).score(score(w)),
                        &fill_version(pb, v, len),
                    )
                    .unwrap();
                let mut out = vec![0; len as usize];
                store.get(tag, &own, 0, &mut out).unwrap();
                assert!(
                    out == fill_version(pb, v, len),
                    "own blob reads back what was put"
                );
                // Leave it shorter next time: delete it.
                store.delete(tag, &own).unwrap();
                puts.fetch_add(2, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    for r in 0..6u32 {
        let (store, stop, gets, not_found) =
            (store.clone(), stop.clone(), gets.clone(), not_found.clone());
        threads.push(std::thread::spawn(move || {
            let mut out = vec![0; SIZE as usize];
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let b = (r + i) % SHARED;
                match store.get(tag, &name(b), 0, &mut out) {
                    Ok(()) => {
                        check_whole(b, &out);
                        gets.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(BlobError::NotFound { .. }) => {
                        not_found.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("get: {e}"),
                }
                // Part of a blob, crossing a page boundary: also one whole version.
                if let Ok(()) = store.get(tag, &name(b), P - 10, &mut out[..P as usize + 20]) {
                    let shift = ((P - 10) % 4) as usize;
                    let w = u32::from_le_bytes([
                        out[(4 - shift) % 4],
                        out[(5 - shift) % 4],
                        out[(6 - shift) % 4],
                        out[(7 - shift) % 4],
                    ]);
                    assert_eq!(w >> 24, b);
                }
                i += 1;
            }
        }));
    }
    for d in 0..2u32 {
        let (store, stop) = (store.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = d;
            while !stop.load(Ordering::Relaxed) {
                match store.delete(tag, &name(i % SHARED)) {
                    Ok(()) | Err(BlobError::NotFound { .. }) => {}
                    Err(e) => panic!("delete: {e}"),
                }
                let _ = store.list_blobs(tag).unwrap();
                std::thread::sleep(Duration::from_millis(2));
                i += 3;
            }
        }));
    }
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    eprintln!(
        "puts {}, whole gets {}, not found {}",
        puts.load(Ordering::Relaxed),
        gets.load(Ordering::Relaxed),
        not_found.load(Ordering::Relaxed)
    );
    assert!(gets.load(Ordering::Relaxed) > 0 && puts.load(Ordering::Relaxed) > 0);

    // Nothing leaked: space used is exactly the pages of the blobs left.
    let blobs = store.list_blobs(tag).unwrap();
    let want: u64 = blobs.iter().map(|b| b.size.div_ceil(P) * P).sum();
    let used: u64 = store.targets().iter().map(|t| t.used).sum();
    assert_eq!(used, want);
    // Durable shared blobs survive a reopen whole; volatile ones are gone.
    let live: Vec<(u32, u32)> = blobs
        .iter()
        .filter(|b| b.durable)
        .map(|b| {
            let id: u32 = b.name.trim_start_matches("shared-").parse().unwrap();
            let mut out = vec![0; SIZE as usize];
            store.get(tag, &b.name, 0, &mut out).unwrap();
            (id, check_whole(id, &out))
        })
        .collect();
    drop(Arc::into_inner(store).expect("threads are done"));
    let store = BlobStore::open(&cfg).unwrap();
    let after = store.list_blobs(tag).unwrap();
    assert!(after.iter().all(|b| b.durable));
    assert_eq!(after.len(), live.len());
    for (id, v) in live {
        let mut out = vec![0; SIZE as usize];
        store.get(tag, &name(id), 0, &mut out).unwrap();
        assert_eq!(check_whole(id, &out), v);
    }
}

/// Durable 4 KiB puts from many threads on a disk file target: how far group commit carries.
/// Ignored by default (timing only): `cargo test -p tandem-blob --release --test stress -- --ignored --nocapture`.
#[test]
#[ignore]
fn durable_put_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let target = TargetConfig::file(dir.path().join("d.dat"), 65536 * P, 0.5);
    let (store, tag) = bench_store(dir.path(), target);
    for threads in [1u32, 4, 16] {
        let per = 2000 / threads;
        let store = store.clone();
        let puts = rate(threads, per, move |t| {
            let data = vec![t as u8; P as usize];
            for i in 0..per {
                store
                    .put(
                        &BlobPut::new(tag, &format!("b-{threads}-{t}-{}", i % 64))
                            .score(Score(0.5)),
                        &data,
                    )
                    .unwrap();
            }
        });
        eprintln!("{threads:>2} threads: {puts:.0} durable 4 KiB puts/s");
    }
}

/// A store of one target in `dir`, and its tag `bench`.
fn bench_store(dir: &std::path::Path, target: TargetConfig) -> (Arc<BlobStore>, TagId) {
    let cfg = StoreConfig {
        metadata: dir.join("meta.redb"),
        targets: vec![target],
        limits: Limits::default(),
    };
    let store = Arc::new(BlobStore::open(&cfg).unwrap());
    let tag = store.get_or_create_tag("bench").unwrap();
    (store, tag)
}

/// Runs `each(t)` on threads `0..threads` at once, `per` operations each:
/// their operations per second.
fn rate(threads: u32, per: u32, each: impl Fn(u32) + Clone + Send + 'static) -> f64 {
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let each = each.clone();
            std::thread::spawn(move || each(t))
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    (per * threads) as f64 / start.elapsed().as_secs_f64()
}

fn small_store(dir: &std::path::Path) -> BlobStore {
    BlobStore::open(&StoreConfig {
        metadata: dir.join("meta.redb"),
        targets: vec![
            TargetConfig::ram(64 * P, 1.0),
            TargetConfig::file(dir.join("f.dat"), 64 * P, 0.5),
        ],
        limits: Limits::default(),
    })
    .unwrap()
}

/// Two puts to different blobs are in their data phase at the same time: each one's `fill`
/// waits for the other's, which would deadlock (and time out) if puts were serialised.
#[test]
fn puts_to_different_blobs_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(small_store(dir.path()));
    let tag = store.get_or_create_tag("t").unwrap();
    for score in [Score(1.0), Score(0.5)] {
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let (tx, rx) = std::sync::mpsc::channel();
        for b in 0..2 {
            let (store, barrier, tx) = (store.clone(), barrier.clone(), tx.clone());
            std::thread::spawn(move || {
                let r = store.put_with(
                    &BlobPut::new(tag, &format!("p{b}-{}", score.0)).score(score),
                    100,
                    &mut |_, dst| {
                        barrier.wait();
                        dst.fill(b as u8);
                        Ok(())
                    },
                );
                tx.send(r.map(|_| ())).unwrap();
            });
        }
        for _ in 0..2 {
            rx.recv_timeout(Duration::from_secs(20))
                .expect("puts to different blobs were serialised")
                .unwrap();
        }
    }
}

/// Puts to one blob never overlap: while one put is inside its `fill`, a second put of the
/// same blob does not reach its own `fill`; it proceeds once the first returned.
#[test]
fn puts_to_one_blob_are_serialised() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(small_store(dir.path()));
    let tag = store.get_or_create_tag("t").unwrap();
    for score in [Score(1.0), Score(0.5)] {
        let name = format!("one-{}", score.0);
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
        let first = {
            let (store, name) = (store.clone(), name.clone());
            std::thread::spawn(move || {
                store
                    .put_with(&BlobPut::new(tag, &name).score(score), 10, &mut |_, dst| {
                        entered_tx.send(()).unwrap();
                        release_rx.recv().unwrap();
                        dst.fill(1);
                        Ok(())
                    })
                    .unwrap()
            })
        };
        entered_rx.recv().unwrap();
        let second_filled = Arc::new(AtomicBool::new(false));
        let second = {
            let (store, name, flag) = (store.clone(), name.clone(), second_filled.clone());
            std::thread::spawn(move || {
                store
                    .put_with(
                        &BlobPut::new(tag, &name).at(5).score(score),
                        10,
                        &mut |_, dst| {
                            flag.store(true, Ordering::SeqCst);
                            dst.fill(2);
                            Ok(())
                        },
                    )
                    .unwrap()
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !second_filled.load(Ordering::SeqCst),
            "a second put of one blob ran alongside the first"
        );
        release_tx.send(()).unwrap();
        assert_eq!(first.join().unwrap().size, 10);
        assert_eq!(second.join().unwrap().size, 15);
        let mut out = [0u8; 15];
        store.get(tag, &name, 0, &mut out).unwrap();
        assert_eq!(out, [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]);
    }
}

/// Volatile 4 KiB puts and gets from many threads on a RAM target (overwrites of 64 blobs per
/// thread). Ignored by default (timing only).
#[test]
#[ignore]
fn ram_put_get_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let (store, tag) = bench_store(dir.path(), TargetConfig::ram(65536 * P, 1.0));
    let names = |t: u32| -> Vec<String> { (0..64).map(|i| format!("r-{t}-{i}")).collect() };
    for threads in [1u32, 2, 8] {
        let per = 400_000 / threads;
        let putter = store.clone();
        let puts = rate(threads, per, move |t| {
            let data = vec![t as u8; P as usize];
            let names = names(t);
            for i in 0..per as usize {
                putter
                    .put(&BlobPut::new(tag, &names[i % 64]), &data)
                    .unwrap();
            }
        });
        let getter = store.clone();
        let gets = rate(threads, per, move |t| {
            let mut out = vec![0; P as usize];
            let names = names(t);
            for i in 0..per as usize {
                getter.get(tag, &names[i % 64], 0, &mut out).unwrap();
            }
        });
        eprintln!("{threads:>2} threads: {puts:.0} RAM 4 KiB puts/s, {gets:.0} gets/s");
    }
}

/// 64 MiB durable puts on a disk file target, pwrite against io_uring with writes in flight.
/// Ignored by default (timing only).
#[test]
#[ignore]
fn large_put_bandwidth() {
    for depth in [0u32, 4, 8] {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            io_uring_depth: depth,
            ..Limits::default()
        };
        let cfg = StoreConfig {
            metadata: dir.path().join("meta.redb"),
            targets: vec![TargetConfig::file(dir.path().join("d.dat"), 65536 * P, 0.5)],
            limits,
        };
        let store = BlobStore::open(&cfg).unwrap();
        let tag = store.get_or_create_tag("bench").unwrap();
        let data = vec![7u8; 64 << 20];
        let start = Instant::now();
        for i in 0..3 {
            store
                .put(
                    &BlobPut::new(tag, &format!("big{i}")).score(Score(0.5)),
                    &data,
                )
                .unwrap();
        }
        let gbs = 3.0 * data.len() as f64 / start.elapsed().as_secs_f64() / 1e9;
        let t = &store.targets()[0];
        eprintln!(
            "depth {depth} (io_uring {}, O_DIRECT {}): {gbs:.2} GB/s durable 64 MiB puts",
            t.io_uring, t.direct_io
        );
    }
}
