//! Shared buffers: a daemon that owns GPU (and CPU device) memory and hands
//! it between processes by id, safely.
//!
//! The daemon (`tandem share serve`, or [`ShareClient::spawn_daemon`])
//! allocates every buffer with [`GpuDevice::alloc_shareable`] and sends
//! each opener a file descriptor of it over an owner-only UNIX socket
//! (`SCM_RIGHTS`); the opener maps it with
//! [`GpuDevice::import_shareable`]. Every mapping holds a lease; the daemon
//! frees a buffer only once it is deleted and the last lease is gone, and a
//! client's leases go when it drops its buffers, disconnects or dies.
//!
//! A buffer's memory lives on the device it was created on; a reader may
//! map it for another device ([`ShareClient::get_buffer_on`]) where that
//! device reaches it through peer access ([`Access`] says how a mapping
//! reaches its memory), or copy it across ([`GpuBuffer::copy_to`]).
//!
//! ```no_run
//! # use tandem_hal::{GpuApi, GpuDevice, HostApi};
//! # use tandem_share::{HostMirror, ShareClient};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = ShareClient::spawn_daemon(HostApi::load()?)?;
//! let device = client.device(0)?;
//! let stream = device.create_stream()?;
//! // A writer fills a buffer and seals it...
//! let (id, mut buffer) = client.create_buffer(0, 1 << 20)?;
//! HostMirror::new(&mut buffer, false)?.fill(7); // copied back on drop
//! let sealed = client.seal(buffer, &stream)?;
//! // ...and any process of the same user opens it by id.
//! let reader = client.get_buffer(id, &stream)?;
//! assert!(HostMirror::new(&reader, true)?.iter().all(|&b| b == 7));
//! # drop(sealed);
//! # Ok(())
//! # }
//! ```
//!
//! [`GpuDevice::alloc_shareable`]: tandem_hal::GpuDevice::alloc_shareable
//! [`GpuDevice::import_shareable`]: tandem_hal::GpuDevice::import_shareable

mod buffer;
mod client;
mod connection;
pub mod daemon;
mod error;
mod poll;
pub mod transport;
pub mod wire;

pub use buffer::{
    Access, GpuBuffer, HostMirror, MirrorAccess, MirrorSource, MutableGpuBuffer, ReadOnly,
    WriteBack,
};
pub use client::{ShareClient, DEFAULT_SEAL_WAIT};
pub use connection::Inspector;
pub use daemon::{Daemon, Limits, RunningDaemon};
pub use error::ShareError;
pub use poll::Polling;
pub use wire::{DaemonStatus, ObjectId, ObjectInfo};
