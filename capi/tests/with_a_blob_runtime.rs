//! The C calls against a `tandem blob run` started here: blob puts and gets
//! of any size round trip byte for byte (larger ones than the client's heap
//! go a chunk at a time), a zero-byte one is refused naming `len`, and the
//! status JSON's reported size is the buffer a call needs.
//!
//! Without the `tandem` binary (`cargo build -p tandem-cli --bin tandem`)
//! each test says it skipped.

use std::ffi::{c_char, CStr, CString};
use std::ptr::null_mut;

use tandem::layout::Status;
use tandem::*;
use tandem_process::{find_tandem_binary, ServiceChild};

mod common;
use common::{blob_run, expect, message};

/// A `tandem blob run` with a RAM tier room for the largest blob below,
/// and its segment's name; None (after saying why) without the binary.
fn blob_runtime(dir: &std::path::Path) -> Option<(ServiceChild, CString)> {
    let Ok(tandem) = find_tandem_binary() else {
        println!("skipped: no tandem binary (cargo build -p tandem-cli --bin tandem)");
        return None;
    };
    let runtime = blob_run(&tandem, dir, 256 << 20);
    let segment = CString::new(runtime.ready()).expect("a segment name");
    Some((runtime, segment))
}

/// `len` bytes that depend on their offset, with a period (251, a prime)
/// that no power-of-two chunk lines up with, so a chunk put or read at
/// the wrong place shows.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ seed.wrapping_add((i / 251) as u8))
        .collect()
}

#[test]
fn blobs_of_any_size_round_trip_and_an_empty_one_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let Some((runtime, segment)) = blob_runtime(dir.path()) else {
        return;
    };
    let mut client = null_mut();
    // SAFETY: every call passes valid pointers of the lengths given.
    unsafe {
        expect(
            tandem_client_attach(segment.as_ptr(), &mut client),
            Status::Ok,
        );
        let mut tag = 0;
        expect(
            tandem_blob_tag(client, c"sizes".as_ptr(), 10_000, &mut tag),
            Status::Ok,
        );

        // Zero bytes: the store holds no empty blobs, so nothing is made.
        let byte = 0u8;
        expect(
            tandem_blob_put(
                client,
                tag,
                c"empty".as_ptr(),
                0,
                &byte,
                0,
                10_000,
                null_mut(),
            ),
            Status::InvalidArgument,
        );
        assert!(message().starts_with("len is zero"), "{}", message());
        let mut size = 0;
        expect(
            tandem_blob_size(client, tag, c"empty".as_ptr(), 10_000, &mut size),
            Status::NotFound,
        );
        let mut out = 0u8;
        expect(
            tandem_blob_get(client, tag, c"empty".as_ptr(), 0, &mut out, 0, 10_000),
            Status::InvalidArgument,
        );
        assert!(message().starts_with("len is zero"), "{}", message());

        // 64 MiB is past the client's whole heap, let alone one chunk.
        for (i, len) in [4 << 10, 64 << 10, 64 << 20].into_iter().enumerate() {
            let name = CString::new(format!("b{len}")).expect("a name");
            let data = pattern(len, i as u8);
            let mut after = 0;
            expect(
                tandem_blob_put(
                    client,
                    tag,
                    name.as_ptr(),
                    0,
                    data.as_ptr(),
                    len,
                    0,
                    &mut after,
                ),
                Status::Ok,
            );
            assert_eq!(after, len as u64, "the size a put of {len} bytes reports");
            expect(
                tandem_blob_size(client, tag, name.as_ptr(), 10_000, &mut size),
                Status::Ok,
            );
            assert_eq!(size, len as u64);
            let mut back = vec![0u8; len];
            expect(
                tandem_blob_get(client, tag, name.as_ptr(), 0, back.as_mut_ptr(), len, 0),
                Status::Ok,
            );
            let first_wrong = data.iter().zip(&back).position(|(a, b)| a != b);
            assert_eq!(first_wrong, None, "a {len}-byte blob read back");
            expect(
                tandem_blob_delete(client, tag, name.as_ptr(), 10_000),
                Status::Ok,
            );
        }
        expect(tandem_client_close(client), Status::Ok);
    }
    assert!(runtime.stop().expect("stopping the runtime").success());
}

#[test]
fn the_status_size_reported_is_the_buffer_a_call_needs() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let Some((runtime, segment)) = blob_runtime(dir.path()) else {
        return;
    };
    let mut needed = 0;
    // SAFETY: a NUL-terminated name; no buffer, with a zero capacity.
    let status = unsafe { tandem_status_json(segment.as_ptr(), null_mut(), 0, &mut needed) };
    expect(status, Status::InvalidArgument);
    assert!(message().starts_with("cap: 0 bytes"), "{}", message());
    // The status is live: a counter may gain a digit between two calls, and
    // then the second says the new size the same way.
    let mut buf: Vec<c_char> = Vec::new();
    let mut written = None;
    for _ in 0..4 {
        buf.resize(needed, 1);
        let mut len = 0;
        // SAFETY: a NUL-terminated name, a buffer of `needed` bytes, an output.
        let status =
            unsafe { tandem_status_json(segment.as_ptr(), buf.as_mut_ptr(), needed, &mut len) };
        if status == Status::Ok {
            written = Some(len);
            break;
        }
        expect(status, Status::InvalidArgument);
        needed = len;
    }
    let len = written.expect("a buffer of the size reported took the status");
    assert_eq!(len, needed, "a call that succeeded reports what it wrote");
    // SAFETY: the call wrote a NUL-terminated string into `buf`.
    let json = unsafe { CStr::from_ptr(buf.as_ptr()) };
    assert_eq!(json.to_bytes().len() + 1, len, "the size includes the NUL");
    assert!(json.to_bytes().starts_with(b"{"), "{json:?}");
    // One byte less is refused.
    let mut len = 0;
    // SAFETY: as above, with a capacity one byte short.
    let status =
        unsafe { tandem_status_json(segment.as_ptr(), buf.as_mut_ptr(), needed - 1, &mut len) };
    expect(status, Status::InvalidArgument);
    assert!(len >= needed, "{len} reported for a status of {needed}");
    assert!(runtime.stop().expect("stopping the runtime").success());
}
