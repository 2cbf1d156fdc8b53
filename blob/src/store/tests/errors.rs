//! Every error a call can return, and their codes.

use super::*;
use crate::{BlobPut, BlobRange};

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
        s.put(&BlobPut::new(t, ""), b"a"),
        Err(BlobError::EmptyName(NameKind::Blob))
    ));
    for bad in ["two\nlines", "tab\there", "nul\0"] {
        assert!(
            matches!(
                s.put(&BlobPut::new(t, bad), b"a"),
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
        s.put(&BlobPut::new(t, &long), b"a"),
        Err(BlobError::NameTooLong { .. })
    ));
    assert!(s
        .put(&BlobPut::new(t, &"n".repeat(MAX_NAME_LEN)), b"a")
        .is_ok());

    let nope = TagId(999);
    assert!(matches!(
        s.put(&BlobPut::new(nope, "a"), b"a"),
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

    s.put(&BlobPut::new(t, "a"), &[1; 10]).unwrap();
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
        s.put(&BlobPut::new(t, "a"), &[]),
        Err(BlobError::EmptyRange)
    ));
    assert!(matches!(
        s.get(t, "a", 10, &mut [0]),
        Err(BlobError::OutOfRange { .. })
    ));
    // Absurd lengths are refused before any callback runs or anything is allocated.
    let e = s.get_with(BlobRange::new(t, "a", 0, u64::MAX), &mut |_, _| {
        panic!("drain must not run")
    });
    assert!(
        matches!(e, Err(BlobError::OutOfRange { size: 10, .. })),
        "{e:?}"
    );
    let e = s.put_with(&BlobPut::new(t, "a").at(1), u64::MAX, &mut |_, _| {
        panic!("fill must not run")
    });
    assert!(matches!(e, Err(BlobError::TooLarge { .. })), "{e:?}");

    assert!(matches!(
        s.put(&BlobPut::new(t, "a").at(u64::MAX), b"ab"),
        Err(BlobError::TooLarge { .. })
    ));
    let max = Limits::default().max_blob_size;
    assert!(matches!(
        s.put(&BlobPut::new(t, "a").at(max), b"a"),
        Err(BlobError::TooLarge { .. })
    ));
    for bad in [-0.5, 1.5, f32::NAN, -2.0] {
        assert!(matches!(
            s.put(&BlobPut::new(t, "a").score(Score(bad)), b"a"),
            Err(BlobError::BadScore(_))
        ));
    }
    assert_eq!(s.stat(t, "a").unwrap().size, 10);
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
