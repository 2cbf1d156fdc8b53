//! The daemon: owns every shared buffer, lends them out by id, and frees
//! one only when it is deleted and the last lease on it is gone.
//!
//! # Leases
//! A client is a token (one per [`crate::ShareClient`]) with any number of
//! connections. Every buffer a client maps holds one lease, taken by
//! `Create` (the writer's) or `Open`, given back by `Release`, or all at
//! once when the client's last connection closes, which is also what
//! happens when its process dies: the kernel closes its sockets. A buffer
//! whose writer lets go before sealing is abandoned and freed (nobody can
//! ever read it); a deleted one is freed at its last release. A freed
//! buffer's device memory stays mapped wherever a client still maps it (the
//! driver counts those mappings); the daemon only drops its own.
//!
//! # Ids
//! An id is the daemon's wall clock in microseconds when it made the buffer,
//! or one past the previous id if that is later: ids rise, and a daemon
//! restarted on the same socket gives out none its predecessor did (unless
//! the clock stepped back past them), so a client that still maps an old
//! buffer never takes a new buffer for it by id.
//!
//! # Reuse
//! A deleted buffer's allocation, once freed, is kept for its creator while
//! that client stays connected, up to [`Limits::kept_bytes`] a client: the
//! creator's next create of the same device and length gets it back (with
//! its seal event), and the handle names the allocation, so a client that
//! still maps it maps nothing anew. A fresh allocation costs its export and
//! the creator's import, which on CUDA are driver calls of hundreds of
//! microseconds each. The memory goes back to its creator only, so no
//! client ever sees another's data; kept allocations are dropped when the
//! client disconnects, before a create is refused at the buffer limit, and
//! before a fresh allocation fails for want of device memory.
//!
//! One thread per connection, all under one lock: requests are a few
//! microseconds of bookkeeping, and an `Open` waiting for its seal sleeps
//! on the condition variable, not holding the lock. While the daemon is
//! busy, connection threads poll for their next request rather than sleep
//! in `recv` ([`Polling`]).
//!
//! # Limits
//! What one client can take is bounded ([`Limits`]): the connections (and
//! so the threads) in all and per client process, refused beyond with
//! [`ErrorCode::Busy`]; the buffers held, a create beyond refused the same
//! way; the sets held, a bind of a new name beyond refused too; how long a
//! new connection may take to say Hello and a started frame to finish; and an `Open` waiting for its seal ends when
//! its opener hangs up. Out of descriptors, the accept loop sheds the
//! waiting connections with a spare descriptor kept for it, backs off, and
//! logs once per [`QUIET_LOG`](limits::QUIET_LOG).
//!
//! # Named sets
//! A set name maps to a few versions ([`KEPT_VERSIONS`](sets::KEPT_VERSIONS)),
//! each a manifest buffer and the buffers it describes, all sealed. The
//! daemon keeps the record (name, version, the ids, the publisher's tensor
//! count, bytes) and never reads the manifest: its format is the
//! publisher's. A publisher stages each buffer for the set before sealing
//! it (`Stage`): nobody can open a staged buffer, and it is freed like an
//! unsealed one if its creator lets go of it (or dies) before the bind.
//! `BindSet` checks that every buffer is staged for that name by that
//! client and sealed, then makes them the set's next version under the
//! lock: a reader sees the whole version or none. Bound buffers outlive
//! their publisher and are deleted only with their set, or when newer
//! versions retire theirs; like any deleted buffer, they live on for those
//! who hold leases on them.
//!
//! # A cluster
//! With a [`ClusterConfig`] ([`Daemon::join_cluster`]) the daemon is a node:
//! it registers in etcd, answers other nodes on a TCP listener (those that
//! show the cluster's token), lets them lease the buffers its clients
//! exported, and fetches theirs for its own clients through NIXL
//! (docs/cluster.md). The local socket stays owner-only, and refuses the
//! requests only other nodes may make.
//!
//! # Files
//! `ledger` keeps the books: buffers, leases, clients, kept allocations;
//! `metrics` shows them, and the refusals, to Prometheus.
//! `serve` is the accept loop and a thread per connection, reading requests
//! and writing replies; `requests` is what each request does to the books
//! and the devices; `sets` is what the named sets' requests do; `limits`
//! holds the bounds above. `node` is the daemon's cluster side (agent,
//! etcd record, listener, token); `peers` serves other nodes; `links` keeps
//! the links to them open between fetches; `fetch` is what export, fetch
//! and the cluster's listings do.

mod fetch;
mod ledger;
mod limits;
mod links;
mod metrics;
mod node;
mod peers;
mod requests;
mod serve;
mod sets;

use std::collections::HashMap;
use std::net::TcpStream;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use tandem_hal::{GpuApi, GpuDevice};

use crate::cluster::ClusterConfig;
use crate::error::ShareError;
use crate::poll::{Polling, RequestPoller};
use crate::transport;
use crate::wire::{DaemonStatus, ErrorCode, Reply, WireBackend};

use self::ledger::Ledger;
pub use self::limits::Limits;
use self::metrics::DaemonCounters;
use self::node::ClusterNode;
use self::serve::accept_loop;

type Buffer<A> = <<A as GpuApi>::Device as GpuDevice>::ShareableBuffer;
type Event<A> = <<A as GpuApi>::Device as GpuDevice>::Event;

/// The daemon's state, which its accept loop and connection threads share:
/// its devices, its books, its limits, its open connections.
struct DaemonState<A: GpuApi> {
    backend: WireBackend,
    devices: Vec<A::Device>,
    uid: u32,
    ledger: Mutex<Ledger<A>>,
    /// The next allocation's name ([`BufferHandle::allocation`]).
    next_allocation: AtomicU64,
    /// Signalled on every seal, delete, free and stop (opens wait on it).
    changed: Condvar,
    stopping: AtomicBool,
    poller: RequestPoller,
    limits: Limits,
    /// Every open connection: its peer's pid (for the per-client limit) and
    /// a clone, to shut it at stop.
    connections: Mutex<HashMap<u64, (u32, UnixStream)>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Refusals and requests, for its metrics.
    counters: DaemonCounters,
    /// Its cluster side, if it is a node of one.
    cluster: Option<ClusterNode>,
    /// Other nodes' open connections, to shut at stop.
    peer_streams: Mutex<HashMap<u64, TcpStream>>,
}

impl<A: GpuApi> DaemonState<A> {
    fn status(&self) -> DaemonStatus {
        let ledger = lock(&self.ledger);
        let versions = ledger.sets.values().flat_map(|set| &set.versions);
        DaemonStatus {
            pid: std::process::id(),
            backend: self.backend,
            devices: self.devices.len() as u32,
            objects: ledger.objects.len() as u32,
            bytes: ledger.objects.values().map(|o| o.size).sum(),
            leases: ledger.objects.values().map(|o| o.leases).sum(),
            clients: ledger.clients.len() as u32,
            kept: ledger.kept.values().map(Vec::len).sum::<usize>() as u32,
            kept_bytes: ledger.kept.values().flatten().map(|k| k.handle.size).sum(),
            sets: ledger.sets.len() as u32,
            set_versions: versions.clone().count() as u32,
            set_bytes: versions.map(|v| v.bytes).sum(),
        }
    }
}
/// The wall clock in microseconds (ids: see the module docs, "Ids").
fn micros_since_epoch() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state consistent before anything
    // that can panic; a poisoned lock only says another thread died.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn error(code: ErrorCode, message: impl Into<String>) -> Reply {
    Reply::Error {
        code,
        message: message.into(),
    }
}

pub struct Daemon<A: GpuApi> {
    daemon: Arc<DaemonState<A>>,
    listener: UnixListener,
    path: PathBuf,
}

/// A daemon serving on its own threads; [`RunningDaemon::stop`] ends it.
pub struct RunningDaemon<A: GpuApi> {
    daemon: Arc<DaemonState<A>>,
    /// Shared with the accept loop, which the stop wakes through it.
    listener: Arc<UnixListener>,
    accept: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl<A: GpuApi> Daemon<A> {
    /// Opens every device of `api` and binds `socket` owner-only (mode 0600
    /// in a directory only the user may enter); polls as [`Polling::default`],
    /// within [`Limits::default`].
    pub fn bind(api: A, socket: &Path) -> Result<Self, ShareError> {
        Self::bind_with(api, socket, Polling::default(), Limits::default())
    }

    /// [`bind`](Self::bind), polling for requests as `polling` says and
    /// within `limits`.
    pub fn bind_with(
        api: A,
        socket: &Path,
        polling: Polling,
        limits: Limits,
    ) -> Result<Self, ShareError> {
        if limits.connections == 0 || limits.client_connections == 0 || limits.buffers == 0 {
            return Err(ShareError::CannotServe(
                "the connection and buffer limits must be at least 1".into(),
            ));
        }
        let count = api.device_count()?;
        let devices = (0..count)
            .map(|i| api.device(i))
            .collect::<Result<Vec<_>, _>>()?;
        let listener = transport::bind_owner_only(socket)
            .map_err(|e| ShareError::CannotServe(format!("{}: {e}", socket.display())))?;
        Ok(Self {
            daemon: Arc::new(DaemonState {
                backend: WireBackend::of(A::BACKEND),
                devices,
                uid: transport::own_uid(),
                ledger: Mutex::new(Ledger::new(limits.kept_bytes)),
                next_allocation: AtomicU64::new(1),
                changed: Condvar::new(),
                stopping: AtomicBool::new(false),
                poller: RequestPoller::new(polling),
                limits,
                connections: Mutex::new(HashMap::new()),
                threads: Mutex::new(Vec::new()),
                counters: DaemonCounters::default(),
                cluster: None,
                peer_streams: Mutex::new(HashMap::new()),
            }),
            listener,
            path: socket.to_path_buf(),
        })
    }

    /// The socket it listens on.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// Makes the daemon a node of the cluster `config` describes: loads NIXL,
    /// binds the listener for other nodes and registers in etcd (left at
    /// stop). Fails, saying which step, if any of that cannot be done.
    pub fn join_cluster(&mut self, config: ClusterConfig) -> Result<(), ShareError> {
        let node = ClusterNode::join(config)?;
        match Arc::get_mut(&mut self.daemon) {
            Some(daemon) => {
                daemon.cluster = Some(node);
                Ok(())
            }
            None => {
                node.leave();
                Err(ShareError::CannotServe("the daemon serves already".into()))
            }
        }
    }

    /// Serves on a thread of its own (one more per connection).
    pub fn start(self) -> RunningDaemon<A> {
        let daemon = Arc::clone(&self.daemon);
        let listener = Arc::new(self.listener);
        let accepting = Arc::clone(&listener);
        let accept = std::thread::Builder::new()
            .name("share-accept".into())
            .spawn(move || accept_loop(&daemon, &accepting))
            .ok();
        if let Some(cluster) = &self.daemon.cluster {
            let daemon = Arc::clone(&self.daemon);
            let listener = Arc::clone(&cluster.listener);
            let peers = std::thread::Builder::new()
                .name("share-peers".into())
                .spawn(move || daemon.accept_peers(&listener));
            match peers {
                Ok(thread) => lock(&self.daemon.threads).push(thread),
                Err(e) => tracing::warn!("cannot serve other nodes: {e}"),
            }
        }
        let polling = self.daemon.poller.polling();
        let limits = self.daemon.limits;
        tracing::info!(
            "share daemon serving {} on {} device(s) of {:?}; polling for {:?} after a request on up to {} thread(s); \
             at most {} connection(s), {} per client process, {} buffer(s) and {} named set(s)",
            self.path.display(),
            self.daemon.devices.len(),
            self.daemon.backend,
            polling.window,
            polling.threads,
            limits.connections,
            limits.client_connections,
            limits.buffers,
            limits.sets
        );
        RunningDaemon {
            daemon: self.daemon,
            listener,
            accept,
            path: self.path,
        }
    }
}

impl<A: GpuApi> RunningDaemon<A> {
    /// The socket it listens on.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// What it holds now.
    pub fn status(&self) -> DaemonStatus {
        self.daemon.status()
    }

    /// Its Prometheus series, read at each scrape (`tandem share serve --metrics`).
    pub fn metrics(&self) -> Arc<dyn tandem_metrics::Source> {
        Arc::clone(&self.daemon) as Arc<dyn tandem_metrics::Source>
    }

    /// Stops: closes every connection (their leases go), frees every
    /// buffer, and removes the socket file.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        // SeqCst: stored before the listener is shut below, so the accept
        // loop, whose load follows the accept that the shutdown failed,
        // sees it.
        self.daemon.stopping.store(true, Ordering::SeqCst);
        // Wakes the accept loop through the listening socket itself, not by
        // connecting to its file: that file may have been deleted under the
        // daemon, and a connect needs a descriptor the daemon may be out of.
        transport::shut_listener(&*self.listener);
        let _ = accept.join();
        if let Some(cluster) = &self.daemon.cluster {
            cluster.leave();
            transport::shut_listener(&*cluster.listener);
            for stream in lock(&self.daemon.peer_streams).values() {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
        self.daemon.shut_connections();
        self.daemon.changed.notify_all();
        let threads = std::mem::take(&mut *lock(&self.daemon.threads));
        for thread in threads {
            let _ = thread.join();
        }
        let status = self.daemon.status();
        lock(&self.daemon.ledger).objects.clear();
        transport::remove_socket(&self.path);
        tracing::info!(
            "share daemon stopped: freed {} buffer(s), {} bytes",
            status.objects,
            status.bytes
        );
    }
}

impl<A: GpuApi> Drop for RunningDaemon<A> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
