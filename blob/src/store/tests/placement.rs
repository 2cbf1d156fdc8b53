//! Placement: scores, spills, classes, and a put that finds no room.

use super::*;
use crate::BlobPut;

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
        s.put(&BlobPut::new(t, "auto"), &page).unwrap().targets,
        vec![0]
    );
    assert_eq!(
        s.put(&BlobPut::new(t, "mid").score(Score(0.7)), &page)
            .unwrap()
            .targets,
        vec![1]
    );
    assert_eq!(
        s.put(&BlobPut::new(t, "slow").score(Score(0.3)), &page)
            .unwrap()
            .targets,
        vec![2]
    );
    // Nothing at or below 0.1: the nearest above, slowest first.
    assert_eq!(
        s.put(&BlobPut::new(t, "low").score(Score(0.1)), &page)
            .unwrap()
            .targets,
        vec![2]
    );
    // RAM has 1 page left; a 2-page AUTO put does not fit in RAM, so it is durable and spills
    // from the mid file target (1 page left) into the slow one.
    let two = vec![2u8; 2 * PAGE_SIZE as usize];
    let info = s.put(&BlobPut::new(t, "spill"), &two).unwrap();
    assert!(info.durable);
    assert_eq!(info.targets, vec![1, 2]);
    let mut out = vec![0; two.len()];
    s.get(t, "spill", 0, &mut out).unwrap();
    assert_eq!(out, two);
    // A durable blob never moves into RAM, though RAM has room.
    let e = s
        .put(
            &BlobPut::new(t, "spill").at(2 * PAGE_SIZE).score(Score(1.0)),
            &page,
        )
        .unwrap_err();
    assert_a_page_found_no_room(e);
    // A volatile blob never spills to files.
    s.put(&BlobPut::new(t, "auto").at(PAGE_SIZE), &page)
        .unwrap();
    let e = s
        .put(&BlobPut::new(t, "auto").at(2 * PAGE_SIZE), &page)
        .unwrap_err();
    assert_a_page_found_no_room(e);
}

fn assert_a_page_found_no_room(e: BlobError) {
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
    s.put(&BlobPut::new(t, "a"), &[1; 4096]).unwrap();
    let before = used(&s);
    let big = vec![0u8; 4 * PAGE_SIZE as usize];
    match s.put(&BlobPut::new(t, "b"), &big).unwrap_err() {
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
        .put_with(&BlobPut::new(t, "c"), 1 << 39, &mut |_, _| {
            panic!("fill must not run")
        })
        .unwrap_err();
    assert!(matches!(e, BlobError::NoSpace { .. }), "{e}");
    assert_eq!(used(&s), before);
}
