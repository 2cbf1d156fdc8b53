//! Typed errors: which call failed, and why, in vendor terms where there is one.

use core::fmt;

/// Which implementation of [`crate::GpuApi`] produced a value or an error.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Backend {
    /// The CPU device (always available).
    Host,
    /// NVIDIA CUDA through the driver API.
    Cuda,
    /// AMD ROCm/HIP.
    Hip,
}

impl Backend {
    /// Whether it is a real GPU (kernels there take many more threads).
    pub fn is_gpu(self) -> bool {
        self != Backend::Host
    }

    /// Its name in a sentence for people: "tandem demo on CUDA".
    pub fn describe(self) -> &'static str {
        match self {
            Backend::Cuda => "CUDA",
            Backend::Hip => "HIP",
            Backend::Host => "the CPU device (host backend)",
        }
    }
}

/// Its name as users write it (`--backend cuda`).
impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Host => "host",
            Backend::Cuda => "cuda",
            Backend::Hip => "hip",
        })
    }
}

/// Why a call failed.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ErrorKind {
    /// The vendor library returned an error code.
    Vendor {
        /// The numeric code (`CUresult`, `hipError_t`).
        code: i64,
        /// The vendor's name for it, e.g. `CUDA_ERROR_INVALID_VALUE`.
        name: String,
    },
    /// The vendor library (driver or runtime) could not be loaded.
    LibraryUnavailable(String),
    /// The backend loaded, but there is no device (or none with this ordinal).
    NoDevice {
        /// The ordinal asked for, if one was.
        requested: Option<usize>,
        /// How many devices the backend has.
        available: usize,
    },
    /// A size of zero, or one too large to be real.
    InvalidSize {
        /// The size asked for.
        bytes: u64,
    },
    /// An access past the end of a buffer.
    OutOfBounds {
        /// Where the access starts, in bytes from the start of the memory.
        offset: u64,
        /// Bytes accessed.
        len: u64,
        /// Bytes the memory has.
        capacity: u64,
    },
    /// An argument that makes no sense (launch dimensions, alignment, flags...).
    InvalidArgument(String),
    /// Bytes that are not an IPC handle of this backend (garbage, wrong backend).
    InvalidIpcHandle(String),
    /// The exporting process tried to open its own handle (CUDA forbids it;
    /// every backend refuses it alike).
    IpcSameProcess,
    /// The exported memory or event no longer exists (the exporter freed it).
    IpcStale(String),
    /// This buffer was not allocated as exportable.
    NotExportable,
    /// The module has no kernel by this name.
    KernelNotFound(String),
    /// Launch arguments do not match the kernel's parameters.
    ArgumentMismatch {
        /// The kernel launched.
        kernel: String,
        /// Which argument is wrong, and how.
        detail: String,
    },
    /// The backend cannot load this kind of module artifact.
    UnsupportedArtifact(String),
    /// The backend does not implement this operation on this system.
    Unsupported(String),
    /// Kernels on `device` cannot address memory of `peer` (no peer access
    /// between the two; see [`crate::GpuDevice::can_access_peer`]).
    PeerAccessUnsupported {
        /// The ordinal of the device that asked for access.
        device: usize,
        /// The ordinal of the device whose memory it asked for.
        peer: usize,
    },
    /// A kernel running on the CPU device panicked or a backend thread died.
    KernelFailed(String),
    /// An OS call failed (host backend: shared memory, threads).
    Os {
        /// The OS error number.
        errno: i32,
    },
}

/// An error from a [`crate::GpuApi`] call.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GpuError {
    /// The backend whose call failed.
    pub backend: Backend,
    /// The API call that failed, e.g. `"alloc_device"` or `"cuIpcOpenMemHandle"`.
    pub call: &'static str,
    /// Why it failed.
    pub kind: ErrorKind,
}

impl GpuError {
    /// An error of `backend`'s `call`.
    pub fn new(backend: Backend, call: &'static str, kind: ErrorKind) -> Self {
        Self {
            backend,
            call,
            kind,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Vendor { code, name } => write!(f, "vendor error {name} ({code})"),
            ErrorKind::LibraryUnavailable(why) => write!(f, "library unavailable: {why}"),
            ErrorKind::NoDevice {
                requested: Some(i),
                available,
            } => write!(f, "no device {i} ({available} available)"),
            ErrorKind::NoDevice {
                requested: None, ..
            } => write!(f, "no device"),
            ErrorKind::InvalidSize { bytes } => write!(f, "invalid size {bytes} bytes"),
            ErrorKind::OutOfBounds {
                offset,
                len,
                capacity,
            } => write!(
                f,
                "access of {len} bytes at offset {offset} exceeds capacity {capacity}"
            ),
            ErrorKind::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            ErrorKind::InvalidIpcHandle(why) => write!(f, "invalid IPC handle: {why}"),
            ErrorKind::IpcSameProcess => {
                write!(f, "IPC handle opened in the process that exported it")
            }
            ErrorKind::IpcStale(why) => write!(f, "IPC handle no longer valid: {why}"),
            ErrorKind::NotExportable => write!(f, "buffer was not allocated as exportable"),
            ErrorKind::KernelNotFound(name) => write!(f, "kernel `{name}` not found"),
            ErrorKind::ArgumentMismatch { kernel, detail } => {
                write!(f, "arguments do not match kernel `{kernel}`: {detail}")
            }
            ErrorKind::UnsupportedArtifact(what) => {
                write!(f, "unsupported module artifact: {what}")
            }
            ErrorKind::Unsupported(what) => write!(f, "unsupported: {what}"),
            ErrorKind::PeerAccessUnsupported { device, peer } => write!(
                f,
                "device {device} cannot access the memory of device {peer} (no peer access)"
            ),
            ErrorKind::KernelFailed(why) => write!(f, "kernel failed: {why}"),
            ErrorKind::Os { errno } => {
                write!(f, "{}", std::io::Error::from_raw_os_error(*errno))
            }
        }
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} backend: {} failed: {}",
            self.backend, self.call, self.kind
        )
    }
}

impl std::error::Error for GpuError {}

/// Result of a [`crate::GpuApi`] call.
pub type GpuResult<T> = Result<T, GpuError>;
