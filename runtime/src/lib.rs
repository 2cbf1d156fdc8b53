//! Tandem's runtime: GPU kernels and host clients submit tasks to CPU workers
//! through queues in shared memory, and wait for the answers, with no kernel
//! launch per request.
//!
//! * [`Runtime`] (generic over the GPU backend) creates one queue segment per
//!   device in pinned host memory mapped into it (NUMA-bound to the device's
//!   node), one named CPU segment for host clients, and N worker threads.
//! * A task names a pool and a method ([`Registry`], [`Pool`], [`Task`]);
//!   its arguments are serialized into a future's copy space (a copy future,
//!   usable from kernels, see `tandem/runtime.h`) or into a heap block (a
//!   pointer future, zero copy, host-only).
//! * [`Client`] attaches to a runtime's CPU segment from another process, or
//!   starts one in a child process ([`Client::fork_runtime`]); each client
//!   allocates from its own heap there and is taken back when it dies or
//!   detaches ([`clients`]).
//!
//! Segment layouts: [`layout`]; the status block a runtime publishes for
//! `tandem status`: [`status`]. [`exchange`] is the earlier two-process
//! shm-core exchange (`tandem exchange`).
//!
//! # Module layers
//!
//! A module uses only modules of the layers below its own, so none depends
//! on itself through others. Bottom up:
//!
//! 1. `error` and `process`: leaves, naming no other module's types.
//! 2. `layout`, the wire format (every constant and layout kernels share);
//!    then `task`, `liveness`, `signals`.
//! 3. `registry`; `clients` (the client table), then `segment` (a queue
//!    segment seen from the host).
//! 4. `config` (checked against the segment's geometry), `worker`, `stale`.
//! 5. `submit`, `janitor` (takes back dead clients' slots), `status`.
//! 6. `runtime` and `client`, then `kernels`.
//!
//! `exchange` sits on `stale`, which still reads an exchange segment's
//! header to find its owner: the one pair that uses each other.

pub mod client;
pub mod clients;
pub mod config;
pub mod error;
pub mod exchange;
mod janitor;
pub mod kernels;
pub mod layout;
pub mod liveness;
pub mod process;
pub mod registry;
pub mod runtime;
pub mod segment;
pub mod signals;
pub mod stale;
pub mod status;
pub mod submit;
pub mod task;
pub mod worker;

pub use client::Client;
pub use config::{Config, DeviceSelection};
pub use error::{ConfigError, RuntimeError};
pub use liveness::{Liveness, HEARTBEAT_PERIOD, HEARTBEAT_STALE};
pub use process::{ProcessIdentity, ProcessState};
pub use registry::{Handler, HandlerReply, Pool, Registry};
pub use runtime::{DeviceQueues, NumaPlacement, Runtime};
pub use segment::QueueSegment;
pub use status::StatusSnapshot;
pub use submit::{Pending, Route};
pub use task::{MethodId, PoolId, Task, TaskError};
pub use worker::StatsSnapshot;
