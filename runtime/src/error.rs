//! The runtime's error types. A leaf: they name no other module's types,
//! so every module may return them.

use std::fmt;

use tandem_hal::GpuError;
use tandem_shm_core::SHM_DIR;
use tandem_shm_core::{AllocError, FutureError, RingError, SegmentError};

/// Why a configuration was refused.
#[derive(Debug)]
pub enum ConfigError {
    /// The file could not be read.
    Io {
        /// The file.
        path: String,
        /// Why it could not be read.
        error: std::io::Error,
    },
    /// The text is not valid TOML for this schema.
    Parse(String),
    /// A value is out of range.
    Invalid {
        /// The key, as the TOML file spells it.
        field: &'static str,
        /// What is wrong with its value.
        why: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, error } => write!(f, "cannot read config {path}: {error}"),
            Self::Parse(why) => write!(f, "bad config: {why}"),
            Self::Invalid { field, why } => write!(f, "bad config value `{field}`: {why}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why the runtime, a segment or a client could not be set up or used.
#[derive(Debug)]
pub enum RuntimeError {
    /// The configuration was refused.
    Config(ConfigError),
    /// Creating, opening or mapping shared memory failed.
    Segment(SegmentError),
    /// A segment's allocator could not be set up or attached.
    Alloc(AllocError),
    /// A segment's queue could not be set up or attached.
    Queue(RingError),
    /// A future could not be set up.
    Future(FutureError),
    /// The GPU backend refused a call.
    Gpu(GpuError),
    /// A segment's header is not a runtime segment of this version, or its
    /// geometry does not fit the mapping.
    BadSegment(String),
    /// A worker or heartbeat thread could not be started.
    Thread(std::io::Error),
    /// Starting or talking to a runtime process failed.
    Process(String),
    /// A named segment could not be created: a live process owns the name
    /// (`owner_pid`, when its header names it) or holds it right now.
    SegmentInUse {
        /// The segment's name.
        name: String,
        /// The owner's process id, when the header names it.
        owner_pid: Option<u32>,
    },
    /// A named segment could not be created: the name is taken by a file
    /// that is not a Tandem segment, which is left alone.
    NotTandemSegment {
        /// The file's name in the shared-memory directory.
        name: String,
    },
    /// Every client slot of the CPU segment is taken.
    TooManyClients {
        /// The segment's client slots (`max_clients`).
        max: u32,
    },
    /// No served device has this index.
    NoSuchDevice {
        /// The index asked for.
        device: usize,
        /// How many devices the runtime serves.
        devices: usize,
    },
    /// A peer route used between devices other than the ones it was made
    /// for (ordinals).
    PeerRouteMismatch {
        /// The route's devices.
        route: (usize, usize),
        /// The devices it was used between.
        used: (usize, usize),
    },
    /// A GPU service of more blocks than the device has multiprocessors:
    /// its blocks might not all be resident, and a task whose ticket a
    /// block not yet running owns would wait forever.
    ServiceTooLarge {
        /// The blocks asked for.
        blocks: u32,
        /// The device's multiprocessors.
        multiprocessors: u32,
    },
    /// A GPU service already runs on the device (its threads own the
    /// device inbox's slots: one service a device).
    ServiceRunning {
        /// The device's ordinal.
        device: usize,
    },
    /// A client asked for more device queues than the runtime lets one
    /// client hold at once (`client_device_queues`).
    TooManyDeviceQueues {
        /// Device queues a client may hold.
        max: u32,
    },
    /// The runtime refused a client's device queues.
    DeviceQueuesRefused {
        /// The device ordinal asked for.
        device: usize,
        /// The runtime's reason.
        why: String,
    },
    /// The runtime a client's device queues were served by shut down or
    /// died: its kernels' waits were stopped, and nothing more is served.
    RuntimeDead {
        /// The runtime's process id.
        pid: u32,
    },
    /// The client was made in another process, which this one was forked
    /// from ([`TaskError::ForkedClient`](crate::TaskError::ForkedClient)).
    ForkedClient {
        /// The process the client was made in.
        pid: u32,
    },
    /// The metrics endpoint could not start ([`crate::ServeOptions::metrics`]).
    Metrics(tandem_metrics::MetricsError),
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => e.fmt(f),
            Self::Segment(e) => write!(f, "shared memory: {e}"),
            Self::Alloc(e) => write!(f, "segment allocator: {e}"),
            Self::Queue(e) => write!(f, "segment queue: {e}"),
            Self::Future(e) => write!(f, "future: {e}"),
            Self::Gpu(e) => write!(f, "GPU backend: {e}"),
            Self::BadSegment(why) => write!(f, "not a usable runtime segment: {why}"),
            Self::Thread(e) => write!(f, "cannot start a runtime thread: {e}"),
            Self::Process(why) => write!(f, "runtime process: {why}"),
            Self::SegmentInUse {
                name,
                owner_pid: Some(pid),
            } => write!(
                f,
                "segment {SHM_DIR}/{name} is in use by pid {pid}, which is alive: stop that process, or pick another segment name (`cpu_segment_name` in the runtime's config)"
            ),
            Self::SegmentInUse {
                name,
                owner_pid: None,
            } => write!(
                f,
                "segment {SHM_DIR}/{name} is held by another process (starting, or reclaiming it now): retry, or pick another segment name (`cpu_segment_name` in the runtime's config)"
            ),
            Self::NotTandemSegment { name } => write!(
                f,
                "{SHM_DIR}/{name} exists and is not a Tandem segment: remove it, or pick another segment name (`cpu_segment_name` in the runtime's config)"
            ),
            Self::TooManyClients { max } => write!(
                f,
                "all {max} client slots of the segment are taken: detach a client or raise max_clients"
            ),
            Self::NoSuchDevice { device, devices } => {
                write!(f, "no device {device}: the runtime serves {devices}")
            }
            Self::PeerRouteMismatch { route, used } => write!(
                f,
                "a peer route from device {} to {} used from device {} to {}",
                route.0, route.1, used.0, used.1
            ),
            Self::ServiceTooLarge {
                blocks,
                multiprocessors,
            } => write!(
                f,
                "a GPU service of {blocks} blocks on a device of {multiprocessors} multiprocessors: every block must be resident at once, so at most one a multiprocessor"
            ),
            Self::ServiceRunning { device } => write!(
                f,
                "a GPU service already runs on device {device}: stop it before starting another"
            ),
            Self::TooManyDeviceQueues { max } => write!(
                f,
                "a client holds at most {max} device queues at once: drop one, or raise client_device_queues in the runtime's config"
            ),
            Self::Metrics(e) => e.fmt(f),
            Self::DeviceQueuesRefused { device, why } => {
                write!(f, "the runtime refused device queues on device {device}: {why}")
            }
            Self::RuntimeDead { pid } => write!(
                f,
                "the runtime (pid {pid}) shut down or died: its client's kernels were stopped"
            ),
            Self::ForkedClient { pid } => crate::TaskError::ForkedClient { pid: *pid }.fmt(f),
        }
    }
}

impl std::error::Error for RuntimeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            Self::Segment(e) => Some(e),
            Self::Alloc(e) => Some(e),
            Self::Queue(e) => Some(e),
            Self::Future(e) => Some(e),
            Self::Gpu(e) => Some(e),
            Self::Thread(e) => Some(e),
            Self::Metrics(e) => Some(e),
            Self::BadSegment(_)
            | Self::Process(_)
            | Self::SegmentInUse { .. }
            | Self::NotTandemSegment { .. }
            | Self::TooManyClients { .. }
            | Self::NoSuchDevice { .. }
            | Self::PeerRouteMismatch { .. }
            | Self::ServiceTooLarge { .. }
            | Self::ServiceRunning { .. }
            | Self::TooManyDeviceQueues { .. }
            | Self::DeviceQueuesRefused { .. }
            | Self::RuntimeDead { .. }
            | Self::ForkedClient { .. } => None,
        }
    }
}

macro_rules! from_error {
    ($($source:ty => $variant:ident),* $(,)?) => {
        $(impl From<$source> for RuntimeError {
            fn from(e: $source) -> Self {
                Self::$variant(e)
            }
        })*
    };
}

/// A forked runtime's child, the `tandem` executable or the signals `tandem
/// run` waits for: starting or talking to a runtime process.
impl From<tandem_process::ProcessError> for RuntimeError {
    fn from(e: tandem_process::ProcessError) -> Self {
        Self::Process(e.to_string())
    }
}

from_error! {
    ConfigError => Config,
    SegmentError => Segment,
    AllocError => Alloc,
    RingError => Queue,
    FutureError => Future,
    GpuError => Gpu,
}
