//! Unit tests: every error, placement, spills, holes, copy-on-write accounting.

use std::path::{Path, PathBuf};

use crate::*;

/// A store in `dir` with the given (kind, capacity in pages, score) targets; file targets live
/// in `dir`.
fn config(dir: &Path, targets: &[(TargetKind, u64, f32)]) -> StoreConfig {
    StoreConfig {
        metadata: dir.join("meta.redb"),
        targets: targets
            .iter()
            .enumerate()
            .map(|(i, &(kind, pages, score))| TargetConfig {
                kind,
                path: (kind == TargetKind::File).then(|| dir.join(format!("t{i}.dat"))),
                capacity: pages * PAGE_SIZE,
                score,
                object: None,
            })
            .collect(),
        limits: Limits::default(),
    }
}

fn used(s: &BlobStore) -> Vec<u64> {
    s.targets().iter().map(|t| t.used).collect()
}

const RAM: TargetKind = TargetKind::Ram;
const FILE: TargetKind = TargetKind::File;

#[test]
fn store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<BlobStore>();
}

/// A first start killed while the metadata file was being laid out leaves it only under its
/// temporary name, which the next start replaces; a half-made file at the metadata path itself
/// (what a start that made it in place could leave) is refused with an error, not a panic.
#[test]
fn a_metadata_file_left_half_made_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[(RAM, 4, 1.0)]);
    let creating = dir.path().join("meta.redb.creating");
    std::fs::write(&creating, vec![0u8; 8192]).unwrap();
    let s = BlobStore::open(&cfg).unwrap();
    assert!(!creating.exists(), "the half-made file was replaced");
    let tag = s.get_or_create_tag("t").unwrap();
    drop(s);
    let s = BlobStore::open(&cfg).unwrap();
    assert_eq!(
        s.tag("t").unwrap(),
        Some(tag),
        "the made file is the store's"
    );
    drop(s);

    let other = tempfile::tempdir().unwrap();
    let cfg = config(other.path(), &[(RAM, 4, 1.0)]);
    std::fs::write(&cfg.metadata, vec![0u8; 8192]).unwrap();
    assert!(matches!(BlobStore::open(&cfg), Err(BlobError::Metadata(_))));
}

#[test]
fn put_get_round_trip_on_each_kind() {
    for dir in [
        tempfile::tempdir().unwrap(),
        tempfile::tempdir_in("/dev/shm").unwrap(),
    ] {
        let s = BlobStore::open(&config(dir.path(), &[(RAM, 16, 1.0), (FILE, 16, 0.5)])).unwrap();
        let t = s.get_or_create_tag("t").unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let a = s.put(t, "ram", 0, &data, Score::AUTO).unwrap();
        assert_eq!(
            a,
            PutInfo {
                size: 10_000,
                durable: false,
                targets: vec![0]
            }
        );
        let b = s.put(t, "file", 0, &data, Score(0.5)).unwrap();
        assert_eq!(
            b,
            PutInfo {
                size: 10_000,
                durable: true,
                targets: vec![1]
            }
        );
        for name in ["ram", "file"] {
            let mut out = vec![0; 10_000];
            s.get(t, name, 0, &mut out).unwrap();
            assert_eq!(out, data);
            let mut mid = vec![0; 5000];
            s.get(t, name, 3000, &mut mid).unwrap();
            assert_eq!(mid, data[3000..8000]);
        }
        assert_eq!(used(&s), vec![3 * PAGE_SIZE, 3 * PAGE_SIZE]);
    }
}

#[test]
fn o_direct_on_disk_and_buffered_fallback_on_tmpfs() {
    let disk = tempfile::tempdir().unwrap(); // /tmp: a real disk here
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut cfg = config(disk.path(), &[(FILE, 8, 0.5)]);
    cfg.targets.push(TargetConfig {
        kind: FILE,
        path: Some(shm.path().join("shm.dat")),
        capacity: 8 * PAGE_SIZE,
        score: 0.4,
        object: None,
    });
    let s = BlobStore::open(&cfg).unwrap();
    let ts = s.targets();
    // tmpfs refuses O_DIRECT before Linux 6.6 and takes it since; either way the data path
    // works (the forced fallback has its own test in `target`).
    eprintln!(
        "O_DIRECT: disk {}, tmpfs {}",
        ts[0].direct_io, ts[1].direct_io
    );
    let t = s.get_or_create_tag("t").unwrap();
    for (score, name) in [(Score(0.5), "disk"), (Score(0.4), "shm")] {
        let data = vec![7u8; 3 * PAGE_SIZE as usize + 5];
        s.put(t, name, 100, &data, score).unwrap();
        let mut out = vec![1u8; data.len() + 100];
        s.get(t, name, 0, &mut out).unwrap();
        assert!(out[..100].iter().all(|&b| b == 0));
        assert_eq!(out[100..], data[..]);
    }
    assert_eq!(s.stat(t, "shm").unwrap().targets, vec![1]);
    assert_eq!(s.stat(t, "disk").unwrap().targets, vec![0]);
}

#[test]
fn holes_read_as_zeros_and_overwrites_keep_neighbours() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(RAM, 64, 1.0), (FILE, 64, 0.5)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    for (name, score) in [("r", Score(1.0)), ("f", Score(0.5))] {
        s.put(t, name, 5, b"hello", score).unwrap();
        let info = s.put(t, name, 3 * PAGE_SIZE + 1, b"far", score).unwrap();
        assert_eq!(info.size, 3 * PAGE_SIZE + 4);
        let mut out = vec![9u8; (3 * PAGE_SIZE + 4) as usize];
        s.get(t, name, 0, &mut out).unwrap();
        let mut want = vec![0u8; out.len()];
        want[5..10].copy_from_slice(b"hello");
        want[3 * PAGE_SIZE as usize + 1..].copy_from_slice(b"far");
        assert_eq!(out, want);
        // An overwrite inside a page keeps the bytes around it.
        s.put(t, name, 6, b"EL", score).unwrap();
        want[6..8].copy_from_slice(b"EL");
        s.get(t, name, 0, &mut out).unwrap();
        assert_eq!(out, want);
        // Two pages mapped (0 and 3), the middle is a hole.
        assert_eq!(s.stat(t, name).unwrap().size, 3 * PAGE_SIZE + 4);
    }
    assert_eq!(used(&s), vec![2 * PAGE_SIZE, 2 * PAGE_SIZE]);
}

#[test]
fn bytes_past_the_size_of_a_reused_page_read_as_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(RAM, 3, 1.0)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    s.put(t, "a", 0, &[0xff; 3 * PAGE_SIZE as usize], Score::AUTO)
        .unwrap();
    s.delete(t, "a").unwrap();
    // b's page 0 is one of a's dirty pages.
    s.put(t, "b", 0, b"x", Score::AUTO).unwrap();
    // Extending past page 0 leaves page 0 as it is: its bytes past the old size must be zeros.
    s.put(t, "b", PAGE_SIZE + 1, b"y", Score::AUTO).unwrap();
    let mut out = vec![1u8; PAGE_SIZE as usize + 2];
    s.get(t, "b", 0, &mut out).unwrap();
    assert_eq!(out[0], b'x');
    assert!(out[1..=PAGE_SIZE as usize].iter().all(|&b| b == 0));
    assert_eq!(out[PAGE_SIZE as usize + 1], b'y');
    // The same through a rewrite of page 0.
    s.put(t, "b", 100, b"z", Score::AUTO).unwrap();
    s.get(t, "b", 0, &mut out).unwrap();
    assert_eq!((out[0], out[100]), (b'x', b'z'));
    assert!(out[1..100]
        .iter()
        .chain(&out[101..=PAGE_SIZE as usize])
        .all(|&b| b == 0));
}

#[test]
fn placement_follows_scores_and_spills() {
    let dir = tempfile::tempdir().unwrap();
    // 0: ram fast, 1: file mid, 2: file slow.
    let s = BlobStore::open(&config(
        dir.path(),
        &[(RAM, 2, 1.0), (FILE, 2, 0.6), (FILE, 3, 0.2)],
    ))
    .unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    let page = vec![1u8; PAGE_SIZE as usize];
    assert_eq!(
        s.put(t, "auto", 0, &page, Score::AUTO).unwrap().targets,
        vec![0]
    );
    assert_eq!(
        s.put(t, "mid", 0, &page, Score(0.7)).unwrap().targets,
        vec![1]
    );
    assert_eq!(
        s.put(t, "slow", 0, &page, Score(0.3)).unwrap().targets,
        vec![2]
    );
    // Nothing at or below 0.1: the nearest above, slowest first.
    assert_eq!(
        s.put(t, "low", 0, &page, Score(0.1)).unwrap().targets,
        vec![2]
    );
    // RAM has 1 page left; a 2-page AUTO put does not fit in RAM, so it is durable and spills
    // from the mid file target (1 page left) into the slow one.
    let two = vec![2u8; 2 * PAGE_SIZE as usize];
    let info = s.put(t, "spill", 0, &two, Score::AUTO).unwrap();
    assert!(info.durable);
    assert_eq!(info.targets, vec![1, 2]);
    let mut out = vec![0; two.len()];
    s.get(t, "spill", 0, &mut out).unwrap();
    assert_eq!(out, two);
    // A durable blob never moves into RAM, though RAM has room.
    let e = s
        .put(t, "spill", 2 * PAGE_SIZE, &page, Score(1.0))
        .unwrap_err();
    assert!(
        matches!(
            e,
            BlobError::NoSpace {
                requested: 4096,
                available: 0
            }
        ),
        "{e}"
    );
    // A volatile blob never spills to files.
    s.put(t, "auto", PAGE_SIZE, &page, Score::AUTO).unwrap();
    let e = s
        .put(t, "auto", 2 * PAGE_SIZE, &page, Score::AUTO)
        .unwrap_err();
    assert!(
        matches!(
            e,
            BlobError::NoSpace {
                requested: 4096,
                available: 0
            }
        ),
        "{e}"
    );
}

#[test]
fn no_space_leaves_nothing_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(RAM, 2, 1.0), (FILE, 3, 0.5)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    s.put(t, "a", 0, &[1; 4096], Score::AUTO).unwrap();
    let before = used(&s);
    let big = vec![0u8; 4 * PAGE_SIZE as usize];
    match s.put(t, "b", 0, &big, Score::AUTO).unwrap_err() {
        BlobError::NoSpace {
            requested,
            available,
        } => {
            assert_eq!(requested, 4 * PAGE_SIZE);
            assert_eq!(available, 3 * PAGE_SIZE);
        }
        e => panic!("{e}"),
    }
    assert_eq!(used(&s), before);
    assert!(matches!(s.stat(t, "b"), Err(BlobError::NotFound { .. })));
    // An absurd length is refused before anything is allocated (no 1 TiB buffer either).
    let e = s
        .put_with(t, "c", 0, 1 << 39, Score::AUTO, &mut |_, _| {
            panic!("fill must not run")
        })
        .unwrap_err();
    assert!(matches!(e, BlobError::NoSpace { .. }), "{e}");
    assert_eq!(used(&s), before);
}

#[test]
fn failing_fill_leaves_nothing_and_keeps_the_old_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(RAM, 600, 1.0), (FILE, 600, 0.5)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    for score in [Score(1.0), Score(0.5)] {
        let name = format!("b{}", score.0);
        s.put(t, &name, 0, &[3; 100], score).unwrap();
        let before = used(&s);
        // Fails in the second 1 MiB chunk, after the first was written.
        let mut calls = 0;
        let e = s
            .put_with(t, &name, 0, 2 << 20, score, &mut |at, dst| {
                calls += 1;
                if at > 0 {
                    return Err(FillError("device copy failed".into()));
                }
                dst.fill(4);
                Ok(())
            })
            .unwrap_err();
        assert!(
            matches!(&e, BlobError::Fill(FillError(m)) if m == "device copy failed"),
            "{e}"
        );
        assert!(calls >= 2);
        assert_eq!(used(&s), before);
        let mut out = [0u8; 100];
        s.get(t, &name, 0, &mut out).unwrap();
        assert_eq!(out, [3; 100]);
        assert_eq!(s.stat(t, &name).unwrap().size, 100);
        // A failing first put leaves no blob.
        let e = s
            .put_with(t, "new", 0, 10, score, &mut |_, _| {
                Err(FillError("x".into()))
            })
            .unwrap_err();
        assert!(matches!(e, BlobError::Fill(_)));
        assert!(matches!(s.stat(t, "new"), Err(BlobError::NotFound { .. })));
        assert_eq!(used(&s), before);
    }
}

#[test]
fn get_with_and_put_with_chunks_cover_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(FILE, 1024, 0.5)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    let len = 3 * (1 << 20) + 17;
    s.put_with(t, "b", 9, len, Score::AUTO, &mut |at, dst| {
        for (i, b) in dst.iter_mut().enumerate() {
            *b = ((at + i as u64) % 251) as u8;
        }
        Ok(())
    })
    .unwrap();
    let mut next = 0;
    s.get_with(t, "b", 9, len, &mut |at, src| {
        assert_eq!(at, next);
        for (i, &b) in src.iter().enumerate() {
            assert_eq!(b, ((at + i as u64) % 251) as u8);
        }
        next += src.len() as u64;
        Ok(())
    })
    .unwrap();
    assert_eq!(next, len);
    let e = s
        .get_with(t, "b", 0, 10, &mut |_, _| Err(FillError("stop".into())))
        .unwrap_err();
    assert!(matches!(e, BlobError::Fill(_)));
}

#[test]
fn name_and_range_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(RAM, 4, 1.0)])).unwrap();
    assert!(matches!(
        s.get_or_create_tag(""),
        Err(BlobError::EmptyName(NameKind::Tag))
    ));
    assert_eq!(
        s.get_or_create_tag("").unwrap_err().to_string(),
        "empty tag name"
    );
    let long = "x".repeat(MAX_TAG_LEN + 1);
    assert!(matches!(
        s.get_or_create_tag(&long),
        Err(BlobError::NameTooLong {
            kind: NameKind::Tag,
            len: 256,
            max: 255
        })
    ));
    assert!(matches!(
        s.tag(""),
        Err(BlobError::EmptyName(NameKind::Tag))
    ));
    assert!(matches!(
        s.get_or_create_tag("a\nb"),
        Err(BlobError::ControlInName {
            kind: NameKind::Tag,
            ..
        })
    ));
    assert_eq!(s.tag("t").unwrap(), None);
    let t = s.get_or_create_tag("t").unwrap();
    assert_eq!(s.get_or_create_tag("t").unwrap(), t);
    assert_eq!(s.tag("t").unwrap(), Some(t));
    assert!(s.get_or_create_tag(&"x".repeat(MAX_TAG_LEN)).is_ok());

    assert!(matches!(
        s.put(t, "", 0, b"a", Score::AUTO),
        Err(BlobError::EmptyName(NameKind::Blob))
    ));
    for bad in ["two\nlines", "tab\there", "nul\0"] {
        assert!(
            matches!(
                s.put(t, bad, 0, b"a", Score::AUTO),
                Err(BlobError::ControlInName {
                    kind: NameKind::Blob,
                    ..
                })
            ),
            "{bad:?}"
        );
    }
    // Looking one up is no error: there is none.
    assert!(matches!(
        s.stat(t, "two\nlines"),
        Err(BlobError::NotFound { .. })
    ));
    let long = "n".repeat(MAX_NAME_LEN + 1);
    assert!(matches!(
        s.put(t, &long, 0, b"a", Score::AUTO),
        Err(BlobError::NameTooLong { .. })
    ));
    assert!(s
        .put(t, &"n".repeat(MAX_NAME_LEN), 0, b"a", Score::AUTO)
        .is_ok());

    let nope = TagId(999);
    assert!(matches!(
        s.put(nope, "a", 0, b"a", Score::AUTO),
        Err(BlobError::UnknownTag(TagId(999)))
    ));
    assert!(matches!(
        s.get(nope, "a", 0, &mut [0]),
        Err(BlobError::UnknownTag(_))
    ));
    assert!(matches!(s.stat(nope, "a"), Err(BlobError::UnknownTag(_))));
    assert!(matches!(s.delete(nope, "a"), Err(BlobError::UnknownTag(_))));
    assert!(matches!(s.list_blobs(nope), Err(BlobError::UnknownTag(_))));

    match s.get(t, "missing", 0, &mut [0]) {
        Err(BlobError::NotFound { tag, name }) => assert_eq!((tag, name.as_str()), (t, "missing")),
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        s.delete(t, "missing"),
        Err(BlobError::NotFound { .. })
    ));
    assert!(matches!(
        s.stat(t, "missing"),
        Err(BlobError::NotFound { .. })
    ));

    s.put(t, "a", 0, &[1; 10], Score::AUTO).unwrap();
    match s.get(t, "a", 5, &mut [0; 6]) {
        Err(
            e @ BlobError::OutOfRange {
                size: 10,
                offset: 5,
                len: 6,
            },
        ) => {
            assert!(e.to_string().contains("size 10"), "{e}")
        }
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        s.get(t, "a", u64::MAX, &mut [0; 2]),
        Err(BlobError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.get(t, "a", 0, &mut []),
        Err(BlobError::EmptyRange)
    ));
    assert!(matches!(
        s.put(t, "a", 0, &[], Score::AUTO),
        Err(BlobError::EmptyRange)
    ));
    assert!(matches!(
        s.get(t, "a", 10, &mut [0]),
        Err(BlobError::OutOfRange { .. })
    ));
    // Absurd lengths are refused before any callback runs or anything is allocated.
    let e = s.get_with(t, "a", 0, u64::MAX, &mut |_, _| {
        panic!("drain must not run")
    });
    assert!(
        matches!(e, Err(BlobError::OutOfRange { size: 10, .. })),
        "{e:?}"
    );
    let e = s.put_with(t, "a", 1, u64::MAX, Score::AUTO, &mut |_, _| {
        panic!("fill must not run")
    });
    assert!(matches!(e, Err(BlobError::TooLarge { .. })), "{e:?}");

    assert!(matches!(
        s.put(t, "a", u64::MAX, b"ab", Score::AUTO),
        Err(BlobError::TooLarge { .. })
    ));
    let max = Limits::default().max_blob_size;
    assert!(matches!(
        s.put(t, "a", max, b"a", Score::AUTO),
        Err(BlobError::TooLarge { .. })
    ));
    for bad in [-0.5, 1.5, f32::NAN, -2.0] {
        assert!(matches!(
            s.put(t, "a", 0, b"a", Score(bad)),
            Err(BlobError::BadScore(_))
        ));
    }
    assert_eq!(s.stat(t, "a").unwrap().size, 10);
}

#[test]
fn delete_frees_and_lists() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(RAM, 4, 1.0), (FILE, 4, 0.5)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    let u = s.get_or_create_tag("u").unwrap();
    assert_eq!(
        s.list_tags().unwrap(),
        vec![(t, "t".to_owned()), (u, "u".to_owned())]
    );
    s.put(t, "b", 0, b"bb", Score(1.0)).unwrap();
    s.put(t, "a", 0, b"a", Score(0.5)).unwrap();
    s.put(u, "a", 0, b"other", Score(0.5)).unwrap();
    let l = s.list_blobs(t).unwrap();
    assert_eq!(
        l.iter()
            .map(|b| (b.name.as_str(), b.size, b.durable))
            .collect::<Vec<_>>(),
        vec![("a", 1, true), ("b", 2, false)]
    );
    s.delete(t, "a").unwrap();
    s.delete(t, "b").unwrap();
    assert!(s.list_blobs(t).unwrap().is_empty());
    assert_eq!(used(&s), vec![0, PAGE_SIZE]);
    let mut out = [0; 5];
    s.get(u, "a", 0, &mut out).unwrap();
    assert_eq!(&out, b"other");
}

#[test]
fn reopen_keeps_durable_and_drops_volatile() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[(RAM, 4, 1.0), (FILE, 8, 0.5)]);
    {
        let s = BlobStore::open(&cfg).unwrap();
        let t = s.get_or_create_tag("t").unwrap();
        s.put(t, "vol", 0, b"gone", Score(1.0)).unwrap();
        s.put(t, "dur", 0, b"kept", Score(0.5)).unwrap();
        s.put(t, "dur", 2 * PAGE_SIZE, b"far", Score(0.5)).unwrap();
        s.put(t, "del", 0, b"x", Score(0.5)).unwrap();
        s.delete(t, "del").unwrap();
    }
    let s = BlobStore::open(&cfg).unwrap();
    let t = s.tag("t").unwrap().unwrap();
    assert_eq!(t, TagId(1));
    assert!(matches!(s.stat(t, "vol"), Err(BlobError::NotFound { .. })));
    assert!(matches!(s.stat(t, "del"), Err(BlobError::NotFound { .. })));
    let st = s.stat(t, "dur").unwrap();
    assert_eq!((st.size, st.durable), (2 * PAGE_SIZE + 3, true));
    let mut out = vec![0; 4];
    s.get(t, "dur", 0, &mut out).unwrap();
    assert_eq!(out, b"kept");
    s.get(t, "dur", 2 * PAGE_SIZE, &mut out[..3]).unwrap();
    assert_eq!(&out[..3], b"far");
    assert_eq!(used(&s), vec![0, 2 * PAGE_SIZE]);
    // New tags continue after the old ids.
    assert_eq!(s.get_or_create_tag("n").unwrap(), TagId(2));
}

#[test]
fn target_file_errors_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &[(FILE, 4, 0.5)]);
    let bad = dir.path().join("no-such-dir").join("t.dat");
    cfg.targets[0].path = Some(bad.clone());
    match BlobStore::open(&cfg) {
        Err(BlobError::TargetCreate { path, .. }) => assert_eq!(path, bad),
        r => panic!("{:?}", r.err()),
    }
    let cfg = config(dir.path(), &[(FILE, 4, 0.5)]);
    let path = cfg.targets[0].path.clone().unwrap();
    std::fs::write(&path, b"short").unwrap();
    match BlobStore::open(&cfg) {
        Err(e @ BlobError::TargetSize { .. }) => {
            assert!(e.to_string().contains(&path.display().to_string()));
            assert!(matches!(
                e,
                BlobError::TargetSize {
                    expected: 16384,
                    actual: 5,
                    ..
                }
            ));
        }
        r => panic!("{:?}", r.err()),
    }
    std::fs::remove_file(&path).unwrap();
    // Created on first start, then a capacity change is refused.
    drop(BlobStore::open(&cfg).unwrap());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 4 * PAGE_SIZE);
    let mut bigger = cfg.clone();
    bigger.targets[0].capacity = 8 * PAGE_SIZE;
    assert!(matches!(
        BlobStore::open(&bigger),
        Err(BlobError::TargetSize { .. })
    ));
    // A known target whose file vanished.
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(
        BlobStore::open(&cfg),
        Err(BlobError::TargetMismatch { .. })
    ));
}

#[test]
fn a_target_dropped_from_the_config_with_blobs_on_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[(FILE, 4, 0.5), (FILE, 4, 0.2)]);
    {
        let s = BlobStore::open(&cfg).unwrap();
        let t = s.get_or_create_tag("t").unwrap();
        s.put(t, "b", 0, b"x", Score(0.2)).unwrap();
    }
    let mut fewer = cfg.clone();
    fewer.targets.remove(1);
    match BlobStore::open(&fewer) {
        Err(BlobError::TargetMismatch { path, .. }) => {
            assert_eq!(Some(path), cfg.targets[1].path.clone())
        }
        r => panic!("{:?}", r.err()),
    }
    // Reordered targets are matched by path.
    let mut swapped = cfg.clone();
    swapped.targets.swap(0, 1);
    let s = BlobStore::open(&swapped).unwrap();
    let t = s.tag("t").unwrap().unwrap();
    assert_eq!(s.stat(t, "b").unwrap().targets, vec![0]);
}

#[test]
fn bad_configs() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), &[]);
    assert!(matches!(BlobStore::open(&cfg), Err(BlobError::Config(_))));
    cfg = config(dir.path(), &[(RAM, 1, 2.0)]);
    assert!(matches!(BlobStore::open(&cfg), Err(BlobError::Config(_))));
    cfg = config(dir.path(), &[(FILE, 1, 0.5)]);
    cfg.targets[0].path = None;
    assert!(matches!(BlobStore::open(&cfg), Err(BlobError::Config(_))));
    cfg = config(dir.path(), &[(FILE, 1, 0.5), (FILE, 1, 0.5)]);
    cfg.targets[1].path = cfg.targets[0].path.clone();
    assert!(matches!(BlobStore::open(&cfg), Err(BlobError::Config(_))));
}

#[test]
fn config_deserialises_from_toml() {
    let cfg: StoreConfig = toml::from_str(
        r#"
        metadata = "/tmp/x/meta.redb"
        [[targets]]
        kind = "ram"
        capacity = 1073741824
        score = 1.0
        [[targets]]
        kind = "file"
        path = "/tmp/x/t0.dat"
        capacity = 17179869184
        score = 0.5
        [limits]
        max_blob_size = 4096
        "#,
    )
    .unwrap();
    assert_eq!(cfg.targets.len(), 2);
    assert_eq!(cfg.targets[1].kind, TargetKind::File);
    assert_eq!(cfg.targets[1].capacity, 16 << 30);
    assert_eq!(cfg.limits.max_blob_size, 4096);
    assert_eq!(
        cfg.limits.max_commit_batch,
        Limits::default().max_commit_batch
    );
}

#[test]
fn error_codes_are_distinct_and_non_zero() {
    let p = std::path::PathBuf::from("/x");
    let io = || std::io::Error::from(std::io::ErrorKind::Other);
    let all = [
        BlobError::EmptyName(NameKind::Blob),
        BlobError::NameTooLong {
            kind: NameKind::Tag,
            len: 1,
            max: 0,
        },
        BlobError::UnknownTag(TagId(1)),
        BlobError::NotFound {
            tag: TagId(1),
            name: "n".into(),
        },
        BlobError::OutOfRange {
            size: 0,
            offset: 0,
            len: 1,
        },
        BlobError::EmptyRange,
        BlobError::TooLarge {
            offset: 0,
            len: 0,
            max: 0,
        },
        BlobError::NoSpace {
            requested: 1,
            available: 0,
        },
        BlobError::BadScore(2.0),
        BlobError::Fill(FillError("f".into())),
        BlobError::TargetCreate {
            path: p.clone(),
            source: io(),
        },
        BlobError::TargetSize {
            path: p.clone(),
            expected: 1,
            actual: 0,
        },
        BlobError::TargetIo {
            path: p.clone(),
            source: io(),
        },
        BlobError::TargetMismatch {
            path: p,
            reason: "r".into(),
        },
        BlobError::Config("c".into()),
        BlobError::Metadata("m".into()),
        BlobError::Corrupt("c".into()),
        BlobError::ControlInName {
            kind: NameKind::Blob,
            name: "\n".into(),
        },
    ];
    let codes: Vec<i32> = all.iter().map(|e| e.code()).collect();
    assert_eq!(codes, (1..=18).collect::<Vec<i32>>());
    assert!(all.iter().all(|e| !e.to_string().is_empty()));
}

#[test]
fn io_uring_and_pwrite_pread_move_the_same_bytes() {
    for dir in [
        tempfile::tempdir().unwrap(),
        tempfile::tempdir_in("/dev/shm").unwrap(),
    ] {
        for depth in [0, 1, 4] {
            let sub = dir.path().join(format!("d{depth}"));
            let mut cfg = config(&sub, &[(FILE, 4096, 0.5)]);
            cfg.limits.io_uring_depth = depth;
            let s = BlobStore::open(&cfg).unwrap();
            let ts = s.targets();
            eprintln!(
                "depth {depth}: io_uring {}, O_DIRECT {}",
                ts[0].io_uring, ts[0].direct_io
            );
            if depth == 0 {
                assert!(!ts[0].io_uring);
            }
            let t = s.get_or_create_tag("t").unwrap();
            // 6 MiB + a bit, at an unaligned offset: more chunks than the depth, partial pages.
            let len = (6 << 20) + 333;
            let data: Vec<u8> = (0..len as u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect();
            s.put(t, "big", 77, &data, Score::AUTO).unwrap();
            s.put(t, "big", 5 << 20, &[9; 1000], Score::AUTO).unwrap();
            let mut want = vec![0u8; 77];
            want.extend_from_slice(&data);
            want[5 << 20..(5 << 20) + 1000].fill(9);
            drop(s);
            let s = BlobStore::open(&cfg).unwrap();
            let mut out = vec![0u8; want.len()];
            s.get(t, "big", 0, &mut out).unwrap();
            assert!(out == want, "depth {depth}");
            // Pipelined reads reach the drain in order, consecutive.
            let mut next = 0u64;
            s.get_with(t, "big", 10, want.len() as u64 - 10, &mut |at, src| {
                assert_eq!(at, next, "depth {depth}: chunks in order");
                next += src.len() as u64;
                Ok(())
            })
            .unwrap();
            assert_eq!(next, want.len() as u64 - 10);
            // A failing fill mid-way through a pipelined put leaves nothing behind.
            let before = used(&s);
            let e = s.put_with(t, "big", 0, 5 << 20, Score::AUTO, &mut |at, dst| {
                if at >= 3 << 20 {
                    return Err(FillError("stop".into()));
                }
                dst.fill(1);
                Ok(())
            });
            assert!(matches!(e, Err(BlobError::Fill(_))));
            assert_eq!(used(&s), before);
            s.get(t, "big", 0, &mut out).unwrap();
            assert!(out == want);
        }
    }
}

/// Every file and folder under `dir`, sorted.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(tree(&path));
        }
        out.push(path);
    }
    out.sort();
    out
}

#[test]
fn a_look_at_a_store_never_made_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir.path().join("store"), &[(RAM, 4, 1.0), (FILE, 4, 0.5)]);
    assert!(matches!(
        BlobStore::open_existing(&cfg),
        Err(BlobError::Metadata(_))
    ));
    assert_eq!(tree(dir.path()), Vec::<PathBuf>::new());
    // Once made, it opens; a file target added since is not made by a look.
    drop(BlobStore::open(&cfg).unwrap());
    let made = tree(dir.path());
    let existing = BlobStore::open_existing(&cfg).unwrap();
    assert_eq!(existing.list_tags().unwrap(), vec![]);
    drop(existing);
    let mut grown = cfg.clone();
    grown.targets.push(TargetConfig {
        kind: FILE,
        path: Some(dir.path().join("store/new.dat")),
        capacity: 4 * PAGE_SIZE,
        score: 0.2,
        object: None,
    });
    assert!(matches!(
        BlobStore::open_existing(&grown),
        Err(BlobError::TargetMismatch { .. })
    ));
    assert_eq!(tree(dir.path()), made);
}

#[test]
fn a_failed_open_removes_what_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir.path().join("a/b"), &[(FILE, 4, 0.5), (FILE, 4, 0.4)]);
    // The second target cannot be made: its folder does not exist.
    cfg.targets[1].path = Some(dir.path().join("missing/t1.dat"));
    assert!(matches!(
        BlobStore::open(&cfg),
        Err(BlobError::TargetCreate { .. })
    ));
    assert_eq!(tree(dir.path()), Vec::<PathBuf>::new());
    // A store that existed keeps its files when a later open fails.
    let good = config(dir.path(), &[(FILE, 4, 0.5)]);
    let s = BlobStore::open(&good).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    s.put(t, "b", 0, b"kept", Score::AUTO).unwrap();
    drop(s);
    let made = tree(dir.path());
    let mut broken = good.clone();
    broken.targets.push(TargetConfig {
        kind: FILE,
        path: Some(dir.path().join("missing/t9.dat")),
        capacity: 4 * PAGE_SIZE,
        score: 0.2,
        object: None,
    });
    assert!(BlobStore::open(&broken).is_err());
    assert_eq!(tree(dir.path()), made);
    let s = BlobStore::open(&good).unwrap();
    let mut back = [0u8; 4];
    s.get(t, "b", 0, &mut back).unwrap();
    assert_eq!(&back, b"kept");
}

#[test]
fn targets_without_a_whole_page_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (kind, capacity) in [(RAM, 0), (RAM, PAGE_SIZE - 1), (FILE, 0), (FILE, 100)] {
        let mut cfg = config(dir.path(), &[(kind, 1, 0.5)]);
        cfg.targets[0].capacity = capacity;
        match BlobStore::open(&cfg) {
            Err(BlobError::Config(why)) => assert!(why.contains("holds no page"), "{why}"),
            Err(e) => panic!("{kind:?} of {capacity} bytes: {e}"),
            Ok(_) => panic!("{kind:?} of {capacity} bytes was accepted"),
        }
    }
    assert_eq!(tree(dir.path()), Vec::<PathBuf>::new());
}
