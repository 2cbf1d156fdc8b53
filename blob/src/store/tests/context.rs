//! Put contexts: compressed frames (round trips at any offset, holes, stat, dynamic mode, damage)
//! and persistence levels (placement, errors, temporary blobs across reopens and reboots).

use super::*;
use crate::BlobPut;
use redb::ReadableTable;

use crate::meta::{self, BLOBS};

/// Float32s in steps (each value 64 times), which compress well.
fn smooth(n: usize) -> Vec<u8> {
    (0..n / 4)
        .flat_map(|i| ((i / 64) as f32 * 0.25).to_le_bytes())
        .collect()
}

/// Random bytes, which do not.
fn noise(n: usize, x: u64) -> Vec<u8> {
    tandem_tests::support::xorshift_bytes(x, n)
}

fn ctx(compression: &str, persistence: Persistence) -> PutContext {
    PutContext {
        compression: compression.parse().unwrap(),
        persistence,
    }
}

fn read(s: &BlobStore, t: TagId, name: &str, offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    s.get(t, name, offset, &mut out).unwrap();
    out
}

#[test]
fn compressed_blobs_read_back_at_any_offset_on_each_kind() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(RAM, 256, 1.0), (FILE, 256, 0.5)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    let data = smooth(300_000);
    for (i, compression) in [
        "zstd:fast",
        "zstd:balanced",
        "zstd:best",
        "lz4",
        "dynamic:lz4",
    ]
    .into_iter()
    .enumerate()
    {
        for score in [Score::AUTO, Score(0.5)] {
            let name = format!("{i}-{}", score.0);
            let info = s
                .put(
                    &BlobPut::new(t, &name)
                        .score(score)
                        .context(ctx(compression, Persistence::Volatile)),
                    &data,
                )
                .unwrap();
            assert_eq!(info.size, data.len() as u64);
            let stat = s.stat(t, &name).unwrap();
            assert!(stat.stored * 2 < stat.size, "{compression}: {stat:?}");
            assert_eq!(stat.codecs.len(), 1, "{compression}: {stat:?}");
            assert!(read(&s, t, &name, 0, data.len()) == data, "{compression}");
            // Within a frame, across frames, to the end.
            for (at, len) in [(10, 100), (65_000, 70_000), (131_072, 1), (299_000, 1000)] {
                assert!(
                    read(&s, t, &name, at, len) == data[at as usize..at as usize + len],
                    "{compression} {at}+{len}"
                );
            }
        }
    }
}

#[test]
fn puts_at_offsets_rewrite_only_their_frames_and_mix_with_raw_puts() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(FILE, 512, 0.5)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    let mut model = smooth(400_000);
    let zstd = ctx("zstd", Persistence::LongTerm);
    s.put(&BlobPut::new(t, "b").context(zstd), &model).unwrap();
    let before = s.stat(t, "b").unwrap().stored;
    // A raw put into the middle of a compressed frame: that frame is rewritten raw, whole.
    let patch = noise(5000, 1);
    s.put(&BlobPut::new(t, "b").at(70_000), &patch).unwrap();
    model[70_000..75_000].copy_from_slice(&patch);
    let after = s.stat(t, "b").unwrap();
    assert!(
        after.stored <= before + 16 * PAGE_SIZE,
        "{before} -> {after:?}"
    );
    // A compressed put across a frame boundary.
    let patch2 = smooth(20_000);
    s.put(
        &BlobPut::new(t, "b")
            .at(128_000)
            .context(ctx("lz4", Persistence::LongTerm)),
        &patch2,
    )
    .unwrap();
    model[128_000..148_000].copy_from_slice(&patch2);
    assert_eq!(
        s.stat(t, "b").unwrap().codecs,
        vec![Codec::Lz4, Codec::Zstd]
    );
    assert!(read(&s, t, "b", 0, model.len()) == model);
    // Reopened: the extents' codecs came back from the metadata.
    drop(s);
    let s = BlobStore::open(&config(dir.path(), &[(FILE, 512, 0.5)])).unwrap();
    assert!(read(&s, t, "b", 0, model.len()) == model);
    assert_eq!(s.stat(t, "b").unwrap().persistence, Persistence::LongTerm);
}

#[test]
fn holes_in_frames_no_put_touched_stay_holes() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(RAM, 64, 1.0)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    let far = 10 << 20;
    s.put(
        &BlobPut::new(t, "h")
            .at(far)
            .context(ctx("zstd", Persistence::Volatile)),
        &smooth(1000),
    )
    .unwrap();
    let stat = s.stat(t, "h").unwrap();
    assert_eq!(stat.size, far + 1000);
    // One page of compressed frame, however far the bytes are.
    assert_eq!(stat.stored, PAGE_SIZE);
    assert!(read(&s, t, "h", far - 5000, 5000).iter().all(|&b| b == 0));
    assert!(read(&s, t, "h", far, 1000) == smooth(1000));
}

#[test]
fn dynamic_compression_stores_what_does_not_compress_raw() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(RAM, 256, 1.0)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    let random = noise(200_000, 7);
    s.put(
        &BlobPut::new(t, "r").context(ctx("dynamic:zstd", Persistence::Volatile)),
        &random,
    )
    .unwrap();
    let stat = s.stat(t, "r").unwrap();
    assert!(stat.codecs.is_empty(), "{stat:?}");
    assert_eq!(stat.stored, (200_000u64).div_ceil(PAGE_SIZE) * PAGE_SIZE);
    assert!(read(&s, t, "r", 0, random.len()) == random);
    // Static compression of the same bytes: each frame falls back to raw on its own.
    s.put(
        &BlobPut::new(t, "s").context(ctx("zstd:best", Persistence::Volatile)),
        &random,
    )
    .unwrap();
    assert!(s.stat(t, "s").unwrap().codecs.is_empty());
    // The fill is asked for every byte once, in order, sample included.
    let mut asked = Vec::new();
    let data = smooth(100_000);
    s.put_with(
        &BlobPut::new(t, "f").context(ctx("dynamic:lz4", Persistence::Volatile)),
        data.len() as u64,
        &mut |at, dst| {
            asked.push((at, dst.len()));
            dst.copy_from_slice(&data[at as usize..at as usize + dst.len()]);
            Ok(())
        },
    )
    .unwrap();
    let mut next = 0;
    for (at, len) in asked {
        assert_eq!(at, next);
        next += len as u64;
    }
    assert_eq!(next, data.len() as u64);
    assert!(read(&s, t, "f", 0, data.len()) == data);
}

#[test]
fn a_damaged_frame_is_an_error_naming_the_blob() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[(FILE, 64, 0.5)]);
    let s = BlobStore::open(&cfg).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    s.put(
        &BlobPut::new(t, "z").context(ctx("lz4", Persistence::LongTerm)),
        &smooth(100_000),
    )
    .unwrap();
    drop(s);
    // Every page of the target garbled: whichever the frames are on.
    let path = cfg.targets[0].path.clone().unwrap();
    std::fs::write(&path, noise(64 * PAGE_SIZE as usize, 3)).unwrap();
    let s = BlobStore::open(&cfg).unwrap();
    let mut out = vec![0; 100];
    match s.get(t, "z", 70_000, &mut out) {
        Err(e @ BlobError::CorruptFrame { .. }) => {
            assert_eq!(e.code(), wire::code::CORRUPT_FRAME);
            assert!(e.to_string().contains("\"z\""), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // A put that needs a damaged frame's old bytes fails too, and changes nothing.
    assert!(matches!(
        s.put(&BlobPut::new(t, "z").at(70_000), b"x"),
        Err(BlobError::CorruptFrame { .. })
    ));
}

#[test]
fn placement_honours_the_persistence_level_before_the_score() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(&config(dir.path(), &[(RAM, 16, 1.0), (FILE, 16, 0.5)])).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    let level = |p| ctx("none", p);
    let v = s
        .put(
            &BlobPut::new(t, "v").context(level(Persistence::Volatile)),
            b"x",
        )
        .unwrap();
    assert_eq!((v.persistence, v.targets), (Persistence::Volatile, vec![0]));
    let tmp = s
        .put(
            &BlobPut::new(t, "tmp")
                .score(Score(1.0))
                .context(level(Persistence::Temporary)),
            b"x",
        )
        .unwrap();
    assert_eq!(
        (tmp.persistence, tmp.targets),
        (Persistence::Temporary, vec![1])
    );
    let lt = s
        .put(
            &BlobPut::new(t, "lt").context(level(Persistence::LongTerm)),
            b"x",
        )
        .unwrap();
    assert_eq!((lt.persistence, lt.durable), (Persistence::LongTerm, true));
    // A volatile blob cannot be asked for more; a temporary one can, and becomes long-term.
    match s.put(
        &BlobPut::new(t, "v").context(level(Persistence::Temporary)),
        b"y",
    ) {
        Err(e @ BlobError::ClassTooLow { .. }) => assert_eq!(e.code(), wire::code::CLASS_TOO_LOW),
        other => panic!("{other:?}"),
    }
    let up = s
        .put(
            &BlobPut::new(t, "tmp")
                .at(1)
                .context(level(Persistence::LongTerm)),
            b"y",
        )
        .unwrap();
    assert_eq!(up.persistence, Persistence::LongTerm);
    // A lower level than the blob's keeps the blob's.
    let same = s
        .put(
            &BlobPut::new(t, "lt").context(level(Persistence::Temporary)),
            b"z",
        )
        .unwrap();
    assert_eq!(same.persistence, Persistence::LongTerm);
    // When the file target is full, a long-term put has nowhere to go.
    let big = vec![1u8; 16 * PAGE_SIZE as usize];
    assert!(matches!(
        s.put(
            &BlobPut::new(t, "big").context(level(Persistence::LongTerm)),
            &big
        ),
        Err(BlobError::NoSpace { .. })
    ));

    let ram_only = tempfile::tempdir().unwrap();
    let r = BlobStore::open(&config(ram_only.path(), &[(RAM, 16, 1.0)])).unwrap();
    let t = r.get_or_create_tag("t").unwrap();
    for p in [Persistence::Temporary, Persistence::LongTerm] {
        match r.put(&BlobPut::new(t, "x").context(level(p)), b"x") {
            Err(e @ BlobError::NoTargetFor(_)) => assert_eq!(e.code(), wire::code::NO_TARGET_FOR),
            other => panic!("{other:?}"),
        }
    }
    assert!(r
        .put(
            &BlobPut::new(t, "x").context(level(Persistence::Volatile)),
            b"x"
        )
        .is_ok());
}

#[test]
fn temporary_blobs_survive_a_reopen_but_not_a_reboot() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[(FILE, 64, 0.5)]);
    let s = BlobStore::open(&cfg).unwrap();
    let t = s.get_or_create_tag("t").unwrap();
    let data = smooth(100_000);
    let temporary = ctx("zstd", Persistence::Temporary);
    for name in ["a", "b"] {
        s.put(&BlobPut::new(t, name).context(temporary), &data)
            .unwrap();
    }
    s.put(&BlobPut::new(t, "kept"), b"long-term").unwrap();
    drop(s);
    let s = BlobStore::open(&cfg).unwrap();
    assert_eq!(s.stat(t, "a").unwrap().persistence, Persistence::Temporary);
    assert!(read(&s, t, "b", 0, data.len()) == data);
    let used_before = used(&s)[0];
    drop(s);

    // Stamp "a" with another boot's id, as a reboot would leave it.
    let db = redb::Database::create(&cfg.metadata).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut blobs = txn.open_table(BLOBS).unwrap();
        let value = blobs.get((t.0, "a")).unwrap().unwrap().value().to_vec();
        let mut stored = meta::decode(&value).unwrap();
        stored.boot[0] ^= 0xff;
        blobs
            .insert((t.0, "a"), meta::encode(&stored).as_slice())
            .unwrap();
    }
    txn.commit().unwrap();
    drop(db);

    let s = BlobStore::open(&cfg).unwrap();
    assert!(matches!(s.stat(t, "a"), Err(BlobError::NotFound { .. })));
    assert!(read(&s, t, "b", 0, data.len()) == data);
    assert_eq!(read(&s, t, "kept", 0, 9), b"long-term");
    assert!(used(&s)[0] < used_before, "its pages are free again");
    drop(s);
    // Its record went at that open.
    let db = redb::Database::create(&cfg.metadata).unwrap();
    let txn = db.begin_read().unwrap();
    let blobs = txn.open_table(BLOBS).unwrap();
    assert!(blobs.get((t.0, "a")).unwrap().is_none());
}
