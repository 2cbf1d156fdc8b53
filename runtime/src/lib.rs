//! Tandem's runtime: GPU kernels and host clients submit tasks to CPU workers
//! through queues in shared memory, and wait for the answers, with no kernel
//! launch per request.
//!
//! # The front
//!
//! What a user writes against is re-exported here, at the crate root; every
//! other module is private to the crate, so segment internals (how a segment
//! is laid out and published, how a task is encoded, the workers, the client
//! table's records) can change without breaking a user. Each public item is
//! here for one of these jobs:
//!
//! * **Running a runtime.** [`Runtime`] (generic over the GPU backend) creates
//!   one queue segment per device in pinned host memory mapped into it
//!   (NUMA-bound to the device's node, [`NumaPlacement`]), one named CPU
//!   segment for host clients, and N worker threads; [`Config`] (with
//!   [`DeviceSelection`], refused as a [`ConfigError`]) sizes it, and every
//!   failure is a [`RuntimeError`]. [`StatsSnapshot`] is what its workers
//!   counted.
//! * **Serving a module.** A task names a pool and a method: a module
//!   registers a [`Pool`] of [`Handler`]s (answering a [`HandlerReply`]) in a
//!   [`Registry`] under its [`PoolId`], and its callers use a [`Task`] type
//!   per method ([`MethodId`]); a duplicate id is a [`DuplicatePool`]. The
//!   built-in [`math`] pool is public because clients call it like any
//!   other pool. This is the one way in for a user module, the same as for
//!   Tandem's own pools. A handler that takes data by reference (a `ShmPtr`
//!   into its caller's segment) reaches it through its [`TaskContext`]
//!   ([`Pool::task_in_context`], [`SharedBytes`], [`CallerMemoryError`]);
//!   its callers pass a [`SharedBuffer`] of their heap
//!   ([`Runtime::allocate_shared`], [`Client::allocate_shared`],
//!   [`DeviceQueues::allocate_shared`] for a kernel's buffers).
//! * **Submitting.** [`Runtime::submit`] and [`Client::submit`] take a
//!   [`Route`] (lane, priority, deadline) and give a [`Pending`] future;
//!   [`Runtime::submit_to_gpu`] routes to a device's service
//!   ([`GpuService`]); a kernel on one device reaches another device's
//!   service over a [`PeerRoute`] ([`Runtime::peer_route`], whose
//!   [`PeerAccess`] says whether the hardware allows it). A failed task is a [`TaskError`], whose
//!   return codes the runtime sets are the `RC_*` constants.
//! * **Host clients.** [`Client`] attaches to a runtime's CPU segment from
//!   another process, or starts one in a child process
//!   ([`Client::fork_runtime`]); each client allocates from its own heap there
//!   and is taken back when it dies or detaches. It tells whether the runtime
//!   still answers ([`Liveness`], [`HEARTBEAT_PERIOD`], [`HEARTBEAT_STALE`]);
//!   the runtime's owner sees the client slots through [`ClientTable`]
//!   ([`ClientSnapshot`], [`ClientState`]).
//! * **Kernels of host clients.** A client's own kernels submit to the
//!   runtime through device queues of its own ([`Client::device_queues`]):
//!   a [`ClientDeviceQueues`] derefs to the [`DeviceQueues`] its kernels are
//!   launched against, as the runtime's own kernels are, with the same
//!   `tandem/runtime.h` and `tandem/blob.h` calls; their GPU route is
//!   served by a [`GpuService`] the client starts on them. How the segment is
//!   shared, isolated and taken back when either side dies is that type's
//!   module's docs (`client_queues.rs`); a slot's queues show in
//!   [`ClientTable::device_queues`] ([`DeviceQueueSnapshot`],
//!   [`DeviceQueueState`]) and in `tandem status`.
//! * **Kernels of one's own.** A kernel that submits tasks is launched
//!   against a device's [`DeviceQueues`]: its [`QueueSegment`]'s base and
//!   length, and its stop flag. [`layout`] holds the segment and task layouts
//!   that the C++ mirror (`tandem/runtime/layout.h`) is checked against.
//! * **Operating a service.** [`status`] reads the status block a runtime
//!   publishes (`tandem status`); [`clean_stale_segments`] removes the
//!   segments of dead owners (`tandem clean`, [`StaleSegment`],
//!   [`StaleWhy`]), [`clean_stale_temp_folders`] the temporary folders
//!   of dead owners ([`owned_temp_prefix`]); [`serve`] is `tandem run` for a
//!   binary with pools of its own, on the backend [`on_best_backend`] picks
//!   ([`OnBackend`], [`ServeOptions`]), stopping cleanly on SIGINT/SIGTERM, with a
//!   Prometheus endpoint if asked ([`serve_with_metrics`] adds a module's series to it).
//!   A named segment of one's own format gets the same care through
//!   [`create_owned_segment`] and an [`OwnerRecord`] at its start
//!   ([`remove_stale_segment`] for a peer that saw it die):
//!   `examples/exchange.rs` is one.
//!
//! Processes themselves (who owns a segment and whether it lives, service
//! children, termination signals) are tandem-process's, which the share
//! daemon and the host backend use too. Of its items only [`StaleSegment`]
//! and [`StaleWhy`] are re-exported here, because this crate's
//! [`clean_stale_segments`] and [`remove_stale_segment`] return them.
//!
//! [`OwnerRecord`]: tandem_process::OwnerRecord
//!
//! One module is public as support rather than API, and only with the
//! `demo-kernels` feature (on by default): [`kernels`] launches Tandem's own
//! echo, ping-pong and empty kernels, which `tandem demo`, the benches and
//! the end-to-end tests run.
//!
//! # Module layers
//!
//! A module uses only modules of the layers below its own, so none depends
//! on itself through others. Bottom up:
//!
//! 1. `error`: a leaf, naming no other module's types.
//! 2. `layout`, the wire format (every constant and layout kernels share);
//!    then `task` and `liveness`.
//! 3. `device_requests` (a client's device queue entries) and
//!    `client_table` (the client table), then `segment` (a queue segment
//!    seen from the host), `adopted` (the client device segments the
//!    workers poll), `context` (a handler's view of its caller's segment)
//!    and `registry`.
//! 4. `config` (checked against the segment's geometry), `worker`, `stale`.
//! 5. `submit`, `janitor` (takes back dead clients' slots, answers their
//!    device queue requests), `status`.
//! 6. `runtime`, `client_queues` (a client's side of its device queues)
//!    and `host_client`, then `gpu_service`, `metrics` (the status block's series),
//!    `serve` and `kernels`.

mod adopted;
mod client_queues;
mod client_table;
mod config;
mod context;
mod device_requests;
mod error;
mod gpu_service;
mod host_client;
mod host_inbox;
mod janitor;
#[cfg(feature = "demo-kernels")]
pub mod kernels;
pub mod layout;
mod liveness;
mod metrics;
mod registry;
mod runtime;
mod segment;
mod serve;
mod stale;
pub mod status;
mod submit;
mod task;
mod worker;

pub use client_queues::ClientDeviceQueues;
pub use client_table::{ClientSnapshot, ClientState, ClientTable};
pub use config::{read_config_file, Config, DeviceSelection, MAX_CONFIG_BYTES};
pub use context::{CallerMemoryError, SharedBytes, TaskContext};
pub use device_requests::{DeviceQueueRefusal, DeviceQueueSnapshot, DeviceQueueState};
pub use error::{ConfigError, RuntimeError};
pub use gpu_service::{GpuService, ServiceStats};
pub use host_client::Client;
pub use liveness::{Liveness, HEARTBEAT_PERIOD, HEARTBEAT_STALE};
pub use registry::{DuplicatePool, Handler, HandlerReply, Pool, Registry};
pub use runtime::{DeviceQueues, NumaPlacement, PeerAccess, PeerRoute, Runtime};
pub use segment::QueueSegment;
pub use serve::{init_logging, serve, serve_with_metrics, ServeOptions};
pub use stale::{
    clean_stale_segments, clean_stale_temp_folders, create_owned_segment, owned_temp_prefix,
    remove_stale_segment,
};
pub use submit::{Pending, Route, SharedBuffer};
/// The backend choice, re-exported so that a binary serving a runtime
/// needs no second crate to pick the backend it serves on.
pub use tandem_backends::{on_backend, on_best_backend, Backend, BackendChoice, OnBackend};
pub use tandem_process::{StaleSegment, StaleWhy};
pub use task::{
    math, MethodId, PoolId, Task, TaskError, RC_BAD_ARGS, RC_BAD_TASK, RC_HANDLER_PANICKED,
    RC_UNKNOWN_METHOD, RC_UNKNOWN_POOL,
};
pub use worker::StatsSnapshot;
