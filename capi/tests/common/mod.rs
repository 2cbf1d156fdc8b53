//! What the C ABI's tests share: reading the calling thread's last message,
//! and checking a call's status against the one expected.

use std::ffi::CStr;

use tandem::layout::Status;
use tandem::tandem_last_error_message;

/// This thread's last failed call's message.
pub fn message() -> String {
    // SAFETY: never null, NUL-terminated, valid until this thread's next call.
    unsafe { CStr::from_ptr(tandem_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// `status` is `want`; a failure leaves a message.
pub fn expect(status: Status, want: Status) {
    assert_eq!(status, want, "message: {}", message());
    if want != Status::Ok {
        assert!(!message().is_empty(), "a failed call leaves a message");
    }
}
