//! The C calls against a `tandem blob run` started here: the status JSON's
//! reported size is the buffer a call needs.
//!
//! Without the `tandem` binary (`cargo build -p tandem-cli --bin tandem`)
//! each test says it skipped.

use std::ffi::{c_char, CStr, CString};
use std::ptr::null_mut;

use tandem::layout::Status;
use tandem::*;
use tandem_process::{find_tandem_binary, ServiceChild};

fn message() -> String {
    // SAFETY: never null, NUL-terminated, valid until this thread's next call.
    unsafe { CStr::from_ptr(tandem_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn expect(status: Status, want: Status) {
    assert_eq!(status, want, "message: {}", message());
}

/// A `tandem blob run` with a RAM tier, and its segment's name; None
/// (after saying why) without the binary.
fn blob_runtime(dir: &std::path::Path) -> Option<(ServiceChild, CString)> {
    let Ok(tandem) = find_tandem_binary() else {
        println!("skipped: no tandem binary (cargo build -p tandem-cli --bin tandem)");
        return None;
    };
    let config = dir.join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "workers = 2\n[blob]\nmetadata = {:?}\n[[blob.targets]]\nkind = \"ram\"\ncapacity = {}\nscore = 1.0\n",
            dir.join("meta.redb"),
            256 << 20
        ),
    )
    .expect("writing the configuration");
    let runtime = ServiceChild::spawn(
        &tandem,
        &[
            "blob".as_ref(),
            "run".as_ref(),
            "--config".as_ref(),
            config.as_os_str(),
            "--announce".as_ref(),
            "--exit-on-stdin-eof".as_ref(),
        ],
    )
    .expect("starting tandem blob run");
    let segment = CString::new(runtime.ready()).expect("a segment name");
    Some((runtime, segment))
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
