//! This backend's errors: every failure is a [`GpuError`] of [`Backend::Host`].

use tandem_shm_core::SegmentError;

use crate::error::{Backend, ErrorKind, GpuError};

/// An error of this backend.
pub(crate) fn host_error(call: &'static str, kind: ErrorKind) -> GpuError {
    GpuError::new(Backend::Host, call, kind)
}

/// A shared-memory failure of `call` as the error kind it amounts to.
pub(crate) fn segment_error(call: &'static str, error: SegmentError) -> GpuError {
    let kind = match error {
        SegmentError::InvalidName(why) => {
            ErrorKind::InvalidArgument(format!("segment name: {why}"))
        }
        SegmentError::ZeroLength => ErrorKind::InvalidSize { bytes: 0 },
        SegmentError::TooLarge { len } => ErrorKind::InvalidSize { bytes: len },
        // Exportable allocations get fresh names: an existing one is a clash.
        SegmentError::Exists { .. } => ErrorKind::Os {
            errno: libc::EEXIST,
        },
        SegmentError::Os { source, .. } => ErrorKind::Os {
            errno: source.raw_os_error().unwrap_or(libc::EIO),
        },
    };
    host_error(call, kind)
}
