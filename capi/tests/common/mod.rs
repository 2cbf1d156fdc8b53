//! What the C ABI's tests share: reading the calling thread's last message,
//! checking a call's status against the one expected, and a blob runtime of
//! another process.

#![allow(
    dead_code,
    reason = "each test file is its own crate and uses a part of this module"
)]

use std::ffi::CStr;
use std::path::Path;

use tandem_process::ServiceChild;

use tandem::layout::Status;
use tandem::tandem_last_error_message;

/// This thread's last failed call's message.
pub fn message() -> String {
    // SAFETY: never null, NUL-terminated, valid until this thread's next call.
    unsafe { CStr::from_ptr(tandem_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// A `tandem blob run` of the binary `tandem`, configured in `dir`, with a
/// RAM tier of `capacity` bytes.
pub fn blob_run(tandem: &Path, dir: &Path, capacity: u64) -> ServiceChild {
    let config = dir.join("tandem.toml");
    std::fs::write(
        &config,
        format!(
            "workers = 2\n[blob]\nmetadata = {:?}\n[[blob.targets]]\nkind = \"ram\"\ncapacity = {capacity}\nscore = 1.0\n",
            dir.join("meta.redb"),
        ),
    )
    .expect("writing the configuration");
    ServiceChild::spawn(
        tandem,
        &[
            "blob".as_ref(),
            "run".as_ref(),
            "--config".as_ref(),
            config.as_os_str(),
            "--announce".as_ref(),
            "--exit-on-stdin-eof".as_ref(),
        ],
    )
    .expect("starting tandem blob run")
}

/// `status` is `want`; a failure leaves a message.
pub fn expect(status: Status, want: Status) {
    assert_eq!(status, want, "message: {}", message());
    if want != Status::Ok {
        assert!(!message().is_empty(), "a failed call leaves a message");
    }
}
