//! Opening: the metadata and target files made, found or refused, what a failed open leaves, the
//! configuration's checks, and what a reopen keeps.

use crate::BlobPut;
use std::path::PathBuf;

use super::*;

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

/// An open store holds its metadata file: a second open is `InUse`, and makes nothing. The
/// identity is the file's, however the path names it, and another store's differs.
#[test]
fn a_store_open_elsewhere_is_in_use_and_known_by_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[(FILE, 4, 0.5)]);
    let s = BlobStore::open(&cfg).unwrap();
    match BlobStore::open_existing(&cfg) {
        Err(BlobError::InUse { metadata }) => assert_eq!(metadata, cfg.metadata),
        other => panic!("a second open: {:?}", other.map(|_| ())),
    }
    assert!(BlobStore::open(&cfg).is_err());
    let via = dir.path().join("sub");
    std::fs::create_dir(&via).unwrap();
    let roundabout = via.join("..").join(cfg.metadata.file_name().unwrap());
    assert_eq!(
        StoreIdentity::of_metadata(&roundabout).unwrap(),
        s.identity()
    );
    let other = tempfile::tempdir().unwrap();
    let t = BlobStore::open(&config(other.path(), &[(FILE, 4, 0.5)])).unwrap();
    assert_ne!(t.identity(), s.identity());
    drop(s);
    assert!(BlobStore::open_existing(&cfg).is_ok(), "released on close");
}

#[test]
fn reopen_keeps_durable_and_drops_volatile() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), &[(RAM, 4, 1.0), (FILE, 8, 0.5)]);
    {
        let s = BlobStore::open(&cfg).unwrap();
        let t = s.get_or_create_tag("t").unwrap();
        s.put(&BlobPut::new(t, "vol").score(Score(1.0)), b"gone")
            .unwrap();
        s.put(&BlobPut::new(t, "dur").score(Score(0.5)), b"kept")
            .unwrap();
        s.put(
            &BlobPut::new(t, "dur").at(2 * PAGE_SIZE).score(Score(0.5)),
            b"far",
        )
        .unwrap();
        s.put(&BlobPut::new(t, "del").score(Score(0.5)), b"x")
            .unwrap();
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
        s.put(&BlobPut::new(t, "b").score(Score(0.2)), b"x")
            .unwrap();
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
    grown.targets.push(TargetConfig::file(
        dir.path().join("store/new.dat"),
        4 * PAGE_SIZE,
        0.2,
    ));
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
    s.put(&BlobPut::new(t, "b"), b"kept").unwrap();
    drop(s);
    let made = tree(dir.path());
    let mut broken = good.clone();
    broken.targets.push(TargetConfig::file(
        dir.path().join("missing/t9.dat"),
        4 * PAGE_SIZE,
        0.2,
    ));
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
