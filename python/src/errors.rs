//! Failures as Python exceptions, a class per kind (`tandem.errors`
//! defines the classes, so one can also derive from a built-in such as
//! `KeyError`); nothing a caller does reaches a panic.

use pyo3::exceptions::{PyBufferError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyType;
use tandem_blob::{wire::code, CallError};
use tandem_runtime::status::StatusError;
use tandem_runtime::{RuntimeError, TaskError};
use tandem_share::ShareError;

/// What went wrong, as the exception class that says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An argument no call could take (`ArgumentError`, a `ValueError`).
    Argument,
    NoDaemon,
    DaemonGone,
    Refused,
    Busy,
    UnknownId,
    Deleted,
    NotSealed,
    Sealed,
    InvalidSize,
    Stream,
    NoDevice,
    Device,
    Protocol,
    UnknownSet,
    SetPublishing,
    SetName,
    NoCluster,
    ClusterUnavailable,
    UnknownNode,
    NotExported,
    RemoteGone,
    ClusterRefused,
    Transfer,
    Share,
    Dtype,
    Shape,
    Unsupported,
    /// A DLPack export refused, as the standard says: `BufferError`.
    Export,
    BlobNotFound,
    BlobName,
    BlobRange,
    BlobSpace,
    BlobRuntime,
    Blob,
    Status,
}

impl Kind {
    /// The class's name in `tandem.errors`.
    fn class_name(self) -> &'static str {
        match self {
            Kind::Argument => "ArgumentError",
            Kind::NoDaemon => "NoDaemonError",
            Kind::DaemonGone => "DaemonGoneError",
            Kind::Refused => "RefusedError",
            Kind::Busy => "BusyError",
            Kind::UnknownId => "UnknownIdError",
            Kind::Deleted => "DeletedError",
            Kind::NotSealed => "NotSealedError",
            Kind::Sealed => "SealedError",
            Kind::InvalidSize => "InvalidSizeError",
            Kind::Stream => "StreamError",
            Kind::NoDevice => "NoDeviceError",
            Kind::Device => "DeviceError",
            Kind::Protocol => "ProtocolError",
            Kind::UnknownSet => "UnknownSetError",
            Kind::SetPublishing => "SetPublishingError",
            Kind::SetName => "SetNameError",
            Kind::NoCluster => "NoClusterError",
            Kind::ClusterUnavailable => "ClusterUnavailableError",
            Kind::UnknownNode => "UnknownNodeError",
            Kind::NotExported => "NotExportedError",
            Kind::RemoteGone => "RemoteGoneError",
            Kind::ClusterRefused => "ClusterRefusedError",
            Kind::Transfer => "TransferError",
            Kind::Share => "ShareError",
            Kind::Dtype | Kind::Shape => "ViewError",
            Kind::Unsupported => "UnsupportedError",
            Kind::Export => "BufferError",
            Kind::BlobNotFound => "BlobNotFoundError",
            Kind::BlobName => "BlobNameError",
            Kind::BlobRange => "BlobRangeError",
            Kind::BlobSpace => "BlobSpaceError",
            Kind::BlobRuntime => "BlobRuntimeError",
            Kind::Blob => "BlobError",
            Kind::Status => "StatusError",
        }
    }
}

/// A failure on its way to Python.
#[derive(Debug)]
pub(crate) struct Error {
    kind: Kind,
    message: String,
}

impl Error {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// Its message: what the pool logs of a failure it cannot raise.
impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        Python::with_gil(|py| match class(py, e.kind) {
            Ok(class) => PyErr::from_type(class, e.message),
            // Only a broken install gets here (the package's own module
            // missing): the message still says what failed.
            Err(_) => PyRuntimeError::new_err(e.message),
        })
    }
}

fn class(py: Python<'_>, kind: Kind) -> PyResult<Bound<'_, PyType>> {
    if kind == Kind::Export {
        return Ok(py.get_type::<PyBufferError>());
    }
    Ok(py
        .import("tandem.errors")?
        .getattr(kind.class_name())?
        .downcast_into::<PyType>()?)
}

impl From<ShareError> for Error {
    fn from(e: ShareError) -> Self {
        let kind = match &e {
            ShareError::NoDaemon { .. } => Kind::NoDaemon,
            ShareError::DaemonGone(_) => Kind::DaemonGone,
            ShareError::CannotServe(_) | ShareError::Daemon { .. } => Kind::Share,
            ShareError::Refused(_) => Kind::Refused,
            ShareError::Busy(_) => Kind::Busy,
            ShareError::UnknownId(_) => Kind::UnknownId,
            ShareError::Deleted(_) => Kind::Deleted,
            ShareError::NotSealed { .. } => Kind::NotSealed,
            ShareError::NotWriter(_) => Kind::Sealed,
            ShareError::InvalidSize { .. } => Kind::InvalidSize,
            ShareError::OutOfRange { .. } => Kind::Argument,
            ShareError::NoDevice(_)
            | ShareError::NoPeerAccess { .. }
            | ShareError::GpuInForkedChild { .. } => Kind::NoDevice,
            ShareError::Gpu(_) => Kind::Device,
            ShareError::Protocol(_) => Kind::Protocol,
            ShareError::UnknownSet(_) => Kind::UnknownSet,
            ShareError::SetPublishing(_) => Kind::SetPublishing,
            ShareError::BadSetName(_) => Kind::SetName,
            ShareError::BadRemoteId(_) => Kind::Argument,
            ShareError::NoCluster(_) => Kind::NoCluster,
            ShareError::ClusterUnavailable(_) => Kind::ClusterUnavailable,
            ShareError::UnknownNode(_) => Kind::UnknownNode,
            ShareError::NotExported(_) => Kind::NotExported,
            ShareError::RemoteGone(_) => Kind::RemoteGone,
            ShareError::ClusterRefused(_) => Kind::ClusterRefused,
            ShareError::Transfer(_) => Kind::Transfer,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<CallError> for Error {
    fn from(e: CallError) -> Self {
        let kind = match &e {
            CallError::Blob(code::NOT_FOUND | code::UNKNOWN_TAG) => Kind::BlobNotFound,
            CallError::Blob(code::EMPTY_NAME | code::NAME_TOO_LONG | code::CONTROL_IN_NAME) => {
                Kind::BlobName
            }
            CallError::Blob(code::OUT_OF_RANGE | code::EMPTY_RANGE | code::TOO_LARGE) => {
                Kind::BlobRange
            }
            CallError::Blob(code::NO_SPACE) => Kind::BlobSpace,
            CallError::Blob(_) => Kind::Blob,
            CallError::Task(_) => Kind::BlobRuntime,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<TaskError> for Error {
    fn from(e: TaskError) -> Self {
        CallError::from(e).into()
    }
}

impl From<RuntimeError> for Error {
    fn from(e: RuntimeError) -> Self {
        Error::new(Kind::BlobRuntime, e.to_string())
    }
}

impl From<tandem_hal::GpuError> for Error {
    fn from(e: tandem_hal::GpuError) -> Self {
        Error::new(Kind::Device, e.to_string())
    }
}

/// Integer argument `name` (a size, id, device or offset), which must not be
/// negative. Taken from Python as an `i128` because PyO3's own conversion to
/// an unsigned type raises an `OverflowError` that names no argument; here a
/// negative or oversized value is an `ArgumentError` (a `ValueError`)
/// naming `name`.
pub(crate) fn non_negative<T: TryFrom<i128>>(name: &str, value: i128) -> Result<T, Error> {
    T::try_from(value).map_err(|_| {
        let why = if value < 0 {
            "is negative"
        } else {
            "is too large"
        };
        Error::new(Kind::Argument, format!("{name}: {value} {why}"))
    })
}

/// Why no single live runtime was found, for a call whose `segment=`
/// argument names one. The runtime's own words name the CLI's `--segment`
/// flag, which means nothing to a Python caller.
pub(crate) fn no_single_runtime(e: StatusError, kind: Kind) -> Error {
    let message = match &e {
        StatusError::NoLiveRuntime { stale } if stale.is_empty() => {
            "no live Tandem runtime segment in /dev/shm (start one with `tandem blob run` or \
             tandem.blob.fork(), or name one with segment=)"
                .to_owned()
        }
        StatusError::NoLiveRuntime { stale } => format!(
            "no live Tandem runtime segment in /dev/shm, only {} left by dead processes: {} \
             (tandem.status(segment=NAME) shows what one last published; `tandem clean` \
             removes them)",
            stale.len(),
            stale.join(", ")
        ),
        StatusError::Ambiguous(names) => format!(
            "several live Tandem runtimes; name one with segment=: {}",
            names.join(", ")
        ),
        _ => e.to_string(),
    };
    Error::new(kind, message)
}
