//! Shared-memory segments: named and anonymous, second mappings, errors with
//! their errno, name validation and unlinking on drop.
#![cfg(unix)]

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};

use tandem_shm_core::{NameError, Segment, SegmentError, SegmentProbe, MAX_NAME_LEN};

/// A name no other test (or concurrent test run) uses.
fn unique_name(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "tandem-test-{}-{tag}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Writes `value` at byte `at` of one mapping and reads it through another.
fn shares_bytes(write_base: *mut u8, read_base: *mut u8, at: usize, value: u8) -> bool {
    // SAFETY: both bases map at least `at + 1` bytes of the same pages (the
    // callers' segments are longer); single-threaded, so no race.
    unsafe {
        write_base.add(at).write_volatile(value);
        read_base.add(at).read_volatile() == value
    }
}

fn page_size() -> usize {
    // SAFETY: plain query.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).expect("page size")
}

#[test]
fn named_create_and_open_share_bytes_at_different_addresses() {
    let name = unique_name("share");
    let creator = Segment::create_named(&name, 10_000).unwrap();
    let opener = Segment::open_named(&name).unwrap();
    assert_ne!(creator.as_ptr(), opener.as_ptr());
    assert_eq!(opener.len(), 10_000);
    assert_eq!(creator.name(), Some(name.as_str()));
    assert_eq!(opener.name(), Some(name.as_str()));
    assert_eq!(creator.as_ptr() as usize % page_size(), 0);
    assert!(shares_bytes(creator.as_ptr(), opener.as_ptr(), 9_999, 0x5A));
    assert!(shares_bytes(opener.as_ptr(), creator.as_ptr(), 0, 0xC3));
}

#[test]
fn open_of_missing_name_reports_enoent() {
    let err = Segment::open_named(&unique_name("missing")).unwrap_err();
    assert!(
        matches!(
            err,
            SegmentError::Os {
                call: "shm_open",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    assert!(err.to_string().contains("shm_open"), "{err}");
}

#[test]
fn create_of_existing_name_reports_eexist_and_keeps_it() {
    let name = unique_name("exists");
    let first = Segment::create_named(&name, 4096).unwrap();
    let err = Segment::create_named(&name, 4096).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    assert!(
        matches!(&err, SegmentError::Exists { name: n } if *n == name),
        "{err:?}"
    );
    assert!(err.to_string().contains(&name), "{err}");
    // The failed attempt did not unlink the first creator's name.
    let opener = Segment::open_named(&name).unwrap();
    assert!(shares_bytes(first.as_ptr(), opener.as_ptr(), 1, 9));
}

#[test]
fn probe_sees_a_live_creator_and_leaves_its_name() {
    let name = unique_name("probe-live");
    let creator = Segment::create_named(&name, 4096).unwrap();
    // SAFETY: the mapping is 4096 bytes long and ours.
    unsafe { creator.as_ptr().add(3).write(7) };
    let probe = SegmentProbe::open(&name).unwrap();
    assert!(probe.is_held());
    assert_eq!(probe.len(), 4096);
    let mut byte = [0u8; 1];
    assert_eq!(probe.read_at(3, &mut byte).unwrap(), 1);
    assert_eq!(byte[0], 7);
    assert!(!probe.unlink().unwrap());
    assert!(
        Segment::open_named(&name).is_ok(),
        "probe removed a held name"
    );
}

#[test]
fn probe_removes_a_name_nobody_holds_once() {
    let name = unique_name("probe-left");
    let path = std::ffi::CString::new(format!("/{name}")).unwrap();
    // What a creator that died leaves: a name whose fd is closed.
    // SAFETY: plain calls with a NUL-terminated path.
    unsafe {
        let fd = libc::shm_open(
            path.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
            0o600,
        );
        assert!(fd >= 0);
        libc::close(fd);
    }
    let probe = SegmentProbe::open(&name).unwrap();
    assert!(!probe.is_held());
    assert!(probe.is_empty());
    // While the probe holds the lock, a second prober sees it held, and the
    // creator of a new name cannot take the old object's lock.
    assert!(SegmentProbe::open(&name).unwrap().is_held());
    assert!(probe.unlink().unwrap());
    assert!(!probe.unlink().unwrap(), "removed twice");
    let next = Segment::create_named(&name, 4096).unwrap();
    // The stale probe must not remove the new object's name.
    assert!(!probe.unlink().unwrap());
    drop(probe);
    assert!(SegmentProbe::open(&name).unwrap().is_held());
    drop(next);
}

#[test]
fn bad_names_are_typed_errors() {
    let too_long = "x".repeat(MAX_NAME_LEN + 1);
    let cases: [(&str, NameError); 6] = [
        ("", NameError::Empty),
        ("a/b", NameError::ContainsSlash),
        ("/lead", NameError::ContainsSlash),
        (".", NameError::DotName),
        ("nul\0byte", NameError::ContainsNul),
        (
            &too_long,
            NameError::TooLong {
                len: MAX_NAME_LEN + 1,
                max: MAX_NAME_LEN,
            },
        ),
    ];
    for (name, expected) in cases {
        for result in [Segment::create_named(name, 64), Segment::open_named(name)] {
            match result {
                Err(SegmentError::InvalidName(reason)) => assert_eq!(reason, expected),
                other => panic!("{name:?}: {other:?}"),
            }
        }
    }
    assert!(matches!(
        Segment::open_named(".."),
        Err(SegmentError::InvalidName(NameError::DotName))
    ));
    // The longest accepted name works.
    let longest = format!("{}{}", unique_name("max"), "y".repeat(MAX_NAME_LEN));
    let longest = &longest[..MAX_NAME_LEN];
    Segment::create_named(longest, 64).unwrap();
}

#[test]
fn drop_of_the_creator_unlinks_but_mappings_stay() {
    let name = unique_name("unlink");
    let creator = Segment::create_named(&name, 4096).unwrap();
    let opener = Segment::open_named(&name).unwrap();
    assert!(shares_bytes(creator.as_ptr(), opener.as_ptr(), 100, 42));
    drop(creator);
    let err = Segment::open_named(&name).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    // SAFETY: the opener's mapping is still live; single-threaded.
    assert_eq!(unsafe { opener.as_ptr().add(100).read_volatile() }, 42);
    // Dropping an opener does not unlink: recreate, open, drop the opener.
    let again = Segment::create_named(&name, 4096).unwrap();
    drop(Segment::open_named(&name).unwrap());
    Segment::open_named(&name).unwrap();
    drop(again);
}

#[test]
fn anonymous_segment_mapped_twice_shares_bytes() {
    let segment = Segment::create_anonymous(3 * 4096 + 1).unwrap();
    assert_eq!(segment.len(), 3 * 4096 + 1);
    assert!(!segment.is_empty());
    assert_eq!(segment.name(), None);
    let again = segment.map_again().unwrap();
    assert_ne!(segment.as_ptr(), again.as_ptr());
    assert_eq!(again.len(), segment.len());
    assert_eq!(again.as_ptr() as usize % page_size(), 0);
    assert!(shares_bytes(segment.as_ptr(), again.as_ptr(), 3 * 4096, 7));
    // A mapping outlives the segment it came from.
    drop(segment);
    // SAFETY: `again` is still mapped; single-threaded.
    assert_eq!(unsafe { again.as_ptr().add(3 * 4096).read_volatile() }, 7);
}

#[test]
fn from_fd_maps_the_same_object() {
    let segment = Segment::create_anonymous(8192).unwrap();
    let fd = segment.fd().try_clone_to_owned().unwrap();
    let other = Segment::from_fd(fd).unwrap();
    assert_eq!(other.len(), 8192);
    assert!(shares_bytes(segment.as_ptr(), other.as_ptr(), 8191, 1));
    assert!(other.fd().as_fd().try_clone_to_owned().is_ok());
}

#[test]
fn zero_lengths_are_refused() {
    assert!(matches!(
        Segment::create_anonymous(0),
        Err(SegmentError::ZeroLength)
    ));
    assert!(matches!(
        Segment::create_named(&unique_name("zero"), 0),
        Err(SegmentError::ZeroLength)
    ));
    // A named object that exists but was never sized (its creator is between
    // shm_open and ftruncate) opens as ZeroLength, not as a bogus mapping.
    let name = unique_name("unsized");
    let path = std::ffi::CString::new(format!("/{name}")).unwrap();
    // SAFETY: plain calls with a NUL-terminated path.
    let fd = unsafe {
        libc::shm_open(
            path.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
            0o600,
        )
    };
    assert!(fd >= 0);
    let result = Segment::open_named(&name);
    // SAFETY: closing and unlinking what this test created.
    unsafe {
        libc::close(fd);
        libc::shm_unlink(path.as_ptr());
    }
    assert!(
        matches!(result, Err(SegmentError::ZeroLength)),
        "{result:?}"
    );
}

#[test]
fn segments_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Segment>();
    assert_send_sync::<tandem_shm_core::Mapping>();
}
