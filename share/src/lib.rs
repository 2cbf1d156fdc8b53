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
//! # The front
//!
//! Every module is private; what a user writes against is re-exported here,
//! each item for one of these jobs:
//!
//! * **Using shared buffers.** [`ShareClient`] connects to a daemon
//!   ([`ShareClient::connect`]) or starts one in a child process
//!   ([`ShareClient::spawn_daemon`]), creates, seals, opens (waiting up to
//!   [`DEFAULT_SEAL_WAIT`] for the seal) and deletes buffers; a writer holds
//!   a [`MutableGpuBuffer`], readers a [`GpuBuffer`] ([`Access`] says how its
//!   mapping reaches the memory). [`HostMirror`] copies one to the host
//!   ([`MirrorSource`] says of what, [`MirrorAccess`] with [`ReadOnly`] or
//!   [`WriteBack`] whether it copies back). A front that orders its work on
//!   no stream of its own uses the client's ([`ShareClient::stream`], a
//!   [`DeviceStream`]). A front holding a buffer whatever its state (the C
//!   ABI, Python) holds a [`HeldBuffer`]. A front that is not generic over
//!   the backend holds an [`AnyShareClient`] (connected on the backend its
//!   daemon serves, or started on the one a
//!   [`BackendChoice`](tandem_backends::BackendChoice) names) and its
//!   [`AnyHeldBuffer`]s. Every failure is a
//!   [`ShareError`]; a refusal the client library has no variant for keeps
//!   the daemon's [`ErrorCode`].
//! * **Named sets.** A publisher stages buffers for a set name
//!   ([`ShareClient::stage`]), seals them and binds them, with a manifest
//!   buffer, as the set's next version ([`ShareClient::bind_set`]): a
//!   reader looks the name up ([`ShareClient::lookup_set`], a [`SetInfo`])
//!   and opens the buffers by id. A name is checked by [`check_set_name`]
//!   (at most [`MAX_SET_NAME`] bytes; a version holds at most
//!   [`MAX_SET_BUFFERS`] buffers besides its manifest).
//! * **Looking at a daemon.** [`Inspector`] stats, lists and deletes
//!   buffers and sets without a backend (`tandem share ls`): [`ObjectId`],
//!   [`ObjectInfo`], [`SetInfo`], [`DaemonStatus`] (with the [`WireBackend`]
//!   it serves).
//! * **Running a daemon.** [`Daemon`] binds a socket
//!   ([`default_socket_path`], in the user's private [`runtime_dir`]) and
//!   serves it as a [`RunningDaemon`], within [`Limits`], polling for
//!   requests as [`Polling`] says (`tandem share serve`); its
//!   [`RunningDaemon::metrics`] are what `--metrics` serves to Prometheus.
//!
//! With the `testing` feature, `testing` speaks the wire by hand: for the
//! tests of a daemon against clients that misbehave, which no client of this
//! crate can be made to do. It is not API.
//!
//! # Module layers
//!
//! A module uses only modules of the layers below its own. Bottom up:
//!
//! 1. `wire`: the frames.
//! 2. `transport` (the socket) and `error`.
//! 3. `poll` and `connection` (a client's connections to the daemon).
//! 4. `daemon` (its books, its connection serving and its requests, each a
//!    file of its own); `mapping` (a process's mappings, their leases, and the
//!    client state they hold).
//! 5. `buffer`, then `client`, then `held`; `testing` over `wire` and
//!    `transport`.
//! 6. `any`: a client and a held buffer whatever their backend.
//!
//! [`GpuDevice::alloc_shareable`]: tandem_hal::GpuDevice::alloc_shareable
//! [`GpuDevice::import_shareable`]: tandem_hal::GpuDevice::import_shareable

mod any;
mod buffer;
mod client;
mod cluster;
mod connection;
mod daemon;
mod error;
mod held;
mod mapping;
mod poll;
#[cfg(feature = "testing")]
pub mod testing;
mod transport;
mod wire;

pub use any::{AnyHeldBuffer, AnyShareClient};
pub use buffer::{
    GpuBuffer, HostMirror, MirrorAccess, MirrorSource, MutableGpuBuffer, ReadOnly, WriteBack,
};
pub use client::{DeviceStream, ShareClient, DEFAULT_SEAL_WAIT};
pub use cluster::{check_node_name, ClusterConfig, RemoteId, MAX_NODE_NAME};
pub use connection::Inspector;
pub use daemon::{Daemon, Limits, RunningDaemon};
pub use error::ShareError;
pub use held::HeldBuffer;
pub use mapping::Access;
pub use poll::Polling;
pub use transport::{default_socket_path, runtime_dir};
pub use wire::{
    check_set_name, ClusterInfo, DaemonStatus, ErrorCode, NodeInfo, ObjectId, ObjectInfo, SetInfo,
    WireBackend, MAX_SET_BUFFERS, MAX_SET_NAME,
};
