//! The boundary's errors: a [`Status`] and a message kept per thread, and
//! [`guard`], which every exported call runs its body in so that no panic
//! unwinds into C.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};

use tandem_blob::CallError;
use tandem_hal::GpuError;
use tandem_runtime::{ConfigError, DeviceQueueRefusal, RuntimeError, TaskError};
use tandem_share::ShareError;
use tandem_shm_core::SegmentError;

use crate::layout::Status;

/// A failed call: its code and what to tell the caller.
#[derive(Debug)]
pub(crate) struct CapiError {
    pub(crate) status: Status,
    pub(crate) message: String,
}

impl CapiError {
    pub(crate) fn new(status: Status, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn null(what: &str) -> Self {
        Self::new(Status::NullPointer, format!("{what} is null"))
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(Status::InvalidArgument, message)
    }
}

pub(crate) type CapiResult<T = ()> = Result<T, CapiError>;

impl From<RuntimeError> for CapiError {
    fn from(e: RuntimeError) -> Self {
        let status = match &e {
            RuntimeError::RuntimeDead { .. } => Status::RuntimeDead,
            // A device ordinal that does not exist is NOT_FOUND whichever
            // side found out: this process's backend (`Gpu`), or the
            // runtime, whose refusal reaches the client as its text.
            RuntimeError::NoSuchDevice { .. } => Status::NotFound,
            RuntimeError::DeviceQueuesRefused { why, .. }
                if *why == DeviceQueueRefusal::NoSuchDevice.to_string() =>
            {
                Status::NotFound
            }
            RuntimeError::TooManyClients { .. }
            | RuntimeError::TooManyDeviceQueues { .. }
            | RuntimeError::DeviceQueuesRefused { .. } => Status::Refused,
            RuntimeError::Gpu(e) => gpu_status(e),
            RuntimeError::Config(_) => Status::InvalidArgument,
            // Opening a segment by name: no such name, or one that cannot be
            // a segment's.
            RuntimeError::Segment(SegmentError::InvalidName(_)) => Status::InvalidArgument,
            RuntimeError::Segment(e)
                if e.raw_os_error().is_some_and(|errno| {
                    io::Error::from_raw_os_error(errno).kind() == io::ErrorKind::NotFound
                }) =>
            {
                Status::NotFound
            }
            _ => Status::Failed,
        };
        Self::new(status, e.to_string())
    }
}

impl From<ConfigError> for CapiError {
    fn from(e: ConfigError) -> Self {
        Self::new(Status::InvalidArgument, e.to_string())
    }
}

impl From<TaskError> for CapiError {
    fn from(e: TaskError) -> Self {
        let status = match &e {
            TaskError::Failed { .. } => Status::TaskFailed,
            TaskError::Stopped | TaskError::TimedOut => Status::TimedOut,
            TaskError::RuntimeDead { .. } => Status::RuntimeDead,
            TaskError::QueueFull
            | TaskError::ClientQuota { .. }
            | TaskError::ClientHeapFragmented { .. }
            | TaskError::OutOfMemory(_) => Status::Refused,
            TaskError::NoSuchDevice { .. } => Status::NotFound,
            TaskError::ArgsTooLarge { .. } => Status::InvalidArgument,
            _ => Status::Failed,
        };
        Self::new(status, e.to_string())
    }
}

impl From<CallError> for CapiError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Task(e) => e.into(),
            CallError::Blob(code) => {
                use tandem_blob::wire::code as c;
                let status = match code {
                    c::NOT_FOUND | c::UNKNOWN_TAG => Status::NotFound,
                    c::EMPTY_NAME
                    | c::NAME_TOO_LONG
                    | c::CONTROL_IN_NAME
                    | c::OUT_OF_RANGE
                    | c::EMPTY_RANGE
                    | c::TOO_LARGE
                    | c::BAD_SCORE => Status::InvalidArgument,
                    c::NO_SPACE => Status::Refused,
                    _ => Status::Failed,
                };
                Self::new(status, CallError::Blob(code).to_string())
            }
        }
    }
}

impl From<ShareError> for CapiError {
    fn from(e: ShareError) -> Self {
        let status = match &e {
            ShareError::NoDaemon { .. } | ShareError::DaemonGone(_) => Status::RuntimeDead,
            // A remote id the other node does not know; before the other refusals of a daemon.
            ShareError::Daemon {
                code: tandem_share::ErrorCode::UnknownId,
                ..
            } => Status::NotFound,
            ShareError::UnknownId(_)
            | ShareError::Deleted(_)
            | ShareError::NoDevice(_)
            | ShareError::UnknownSet(_)
            | ShareError::UnknownNode(_) => Status::NotFound,
            ShareError::NotSealed { .. } => Status::TimedOut,
            ShareError::Refused(_)
            | ShareError::Busy(_)
            | ShareError::NotWriter(_)
            | ShareError::SetPublishing(_)
            | ShareError::NotExported(_)
            | ShareError::ClusterRefused(_)
            | ShareError::Daemon { .. } => Status::Refused,
            ShareError::InvalidSize { .. }
            | ShareError::OutOfRange { .. }
            | ShareError::BadSetName(_)
            | ShareError::BadRemoteId(_) => Status::InvalidArgument,
            ShareError::Gpu(_) => Status::Device,
            ShareError::GpuInForkedChild { .. } | ShareError::NoCluster(_) => Status::Unsupported,
            ShareError::RemoteGone(_) | ShareError::ClusterUnavailable(_) => Status::Unreachable,
            _ => Status::Failed,
        };
        Self::new(status, e.to_string())
    }
}

/// A device ordinal that does not exist is NOT_FOUND, as every call taking
/// a device says; any other backend failure is DEVICE.
fn gpu_status(e: &GpuError) -> Status {
    match e.kind {
        tandem_hal::ErrorKind::NoDevice { .. } => Status::NotFound,
        _ => Status::Device,
    }
}

impl From<GpuError> for CapiError {
    fn from(e: GpuError) -> Self {
        Self::new(gpu_status(&e), e.to_string())
    }
}

thread_local! {
    /// The last failed call's message on this thread, NUL-terminated for C.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // An interior NUL would end the C string early: shown as a space.
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
}

/// Runs `body`, the whole of an exported call: its error, or a panic caught
/// here, becomes the returned code and this thread's last message; success
/// clears the message.
pub(crate) fn guard(body: impl FnOnce() -> CapiResult) -> Status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            set_last_error("");
            Status::Ok
        }
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            set_last_error(&format!("Tandem panicked inside the call: {what}"));
            Status::Panic
        }
    }
}

/// The message of this thread's last failed call (empty after a call that
/// succeeded). Valid until this thread's next Tandem call; never null.
/// Thread-safe (each thread has its own); never blocks.
#[no_mangle]
pub extern "C" fn tandem_last_error_message() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}
