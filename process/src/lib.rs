//! Tandem's process lifecycle, in one place for every crate: which process
//! owns what, whether it still lives, what it left behind, and the service
//! processes Tandem starts and stops.
//!
//! # Why a crate of its own
//!
//! The runtime, the share daemon's client and the host backend (`tandem-hal`)
//! all start, watch or clean up after processes. Here they share one answer
//! to each question, below all of them: this crate names no Tandem crate but
//! shm-core, so `tandem-hal` can use it and `tandem-share` needs no runtime.
//!
//! # The front
//!
//! Every module is private; what other crates use is re-exported here, each
//! item for one of these jobs:
//!
//! * **Who a process is, and whether it lives.** A pid alone names a process
//!   only while it lives; a [`ProcessIdentity`] (pid and start time) names it
//!   for good, and its [`state`](ProcessIdentity::state) ([`ProcessState`]) is
//!   the one reading of `/proc` that every "is this owner alive" question
//!   ends in.
//! * **Who owns a segment.** A named segment of one's own format starts with
//!   an [`OwnerRecord`] ([`OWNED_SEGMENT_MAGIC`]); the runtime's segments
//!   record their owner in their header.
//! * **Segments left behind.** [`staleness`] decides, for a segment and the
//!   [`SegmentOwner`] it names, whether it is stale ([`Staleness`],
//!   [`StaleSegment`], [`StaleWhy`]): `tandem clean`, the runtime's reclaiming
//!   of a name, and the cleanup after a killed service all ask it.
//! * **The CPU device's IPC segments.** [`host_ipc_segment_name`] writes the
//!   name the host backend gives each segment it exports,
//!   [`host_ipc_exporter`] reads the exporter back, and
//!   [`remove_host_ipc_segments_of`] removes a dead exporter's.
//! * **Service children.** [`ServiceChild`] starts a Tandem service (`tandem
//!   run`, `tandem share serve`) from [`find_tandem_binary`] (or
//!   [`TANDEM_BIN_ENV`]) and waits for its ready line ([`READY_PREFIX`]); the
//!   service stops when its stdin closes ([`wake_on_stdin_eof`]).
//! * **Forked children.** [`MadeIn`] records the process a handle was made
//!   in, so that a child forked from it (Python's default start method, a
//!   data loader's workers) neither uses nor gives back what its parent holds;
//!   a [`ForkGuard`] keeps a fork from copying a lock while it is held
//!   ([`lock_across_forks`], [`ForkSafeGuard`]).
//! * **Termination signals.** [`Termination`] (with its
//!   [`TerminationWaker`]) and [`exit_on_termination`] turn SIGINT and
//!   SIGTERM into a clean stop; failures are a [`ProcessError`].
//!
//! # Module layers
//!
//! Bottom up: `error`, `identity` and `fork` (leaves); `owner`, `stale` and
//! `signals`; `host_ipc` (uses `stale`) and `child` (uses `signals` and
//! `fork`).

mod child;
mod error;
mod fork;
mod host_ipc;
mod identity;
mod owner;
mod signals;
mod stale;

pub use child::{
    find_tandem_binary, wake_on_stdin_eof, ServiceChild, READY_PREFIX, TANDEM_BIN_ENV,
};
pub use error::ProcessError;
pub use fork::{lock_across_forks, ForkGuard, ForkSafeGuard, MadeIn};
pub use host_ipc::{host_ipc_exporter, host_ipc_segment_name, remove_host_ipc_segments_of};
pub use identity::{ProcessIdentity, ProcessState};
pub use owner::{OwnerRecord, OWNED_SEGMENT_MAGIC};
pub use signals::{exit_on_termination, Termination, TerminationWaker};
pub use stale::{staleness, SegmentOwner, StaleSegment, StaleWhy, Staleness};
