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
//! way; how long a new connection may take to say Hello and
//! a started frame to finish; and an `Open` waiting for its seal ends when
//! its opener hangs up. Out of descriptors, the accept loop sheds the
//! waiting connections with a spare descriptor kept for it, backs off, and
//! logs once per [`QUIET_LOG`].

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tandem_hal::{ErrorKind, EventFlags, GpuApi, GpuDevice, ShareableHandle};

use crate::error::ShareError;
use crate::poll::{Polling, RequestPoller};
use crate::transport::{self, RecvError};
use crate::wire::{
    BufferHandle, DaemonStatus, ErrorCode, HandleForm, ObjectId, ObjectInfo, Reply, Request,
    WireBackend,
};

type Buffer<A> = <<A as GpuApi>::Device as GpuDevice>::ShareableBuffer;
type Event<A> = <<A as GpuApi>::Device as GpuDevice>::Event;

/// One buffer the daemon holds.
struct Object<A: GpuApi> {
    device: u32,
    len: u64,
    size: u64,
    /// The daemon's own mapping: the allocation lives at least as long.
    _buffer: Buffer<A>,
    /// Recorded by the writer at seal (it opened the handle), waited on by
    /// readers. The daemon owns it so it outlives the writer, and queries
    /// it for each open: an interprocess event's state is shared by every
    /// process that opened it.
    event: Event<A>,
    /// How openers map it. Exported once: a fresh export
    /// (`cuMemExportToShareableHandle`) is slow on CUDA, a duplicate of the
    /// descriptor names the same allocation at a small fraction of that
    /// (docs/perf/2026-11-24-h100.md, "Exporting a shareable buffer").
    handle: BufferHandle,
    fd: Option<OwnedFd>,
    /// The client that may seal it; `None` once sealed.
    writer: Option<u64>,
    /// The client that created it, which gets its allocation back once it
    /// is freed (see the module docs, "Reuse").
    creator: u64,
    deleted: bool,
    leases: u32,
}

/// A freed buffer's allocation, kept for its creator's next create of the
/// same device and length.
struct Kept<A: GpuApi> {
    device: u32,
    buffer: Buffer<A>,
    event: Event<A>,
    handle: BufferHandle,
    fd: Option<OwnedFd>,
}

impl<A: GpuApi> Object<A> {
    fn info(&self, id: ObjectId) -> ObjectInfo {
        ObjectInfo {
            id,
            device: self.device,
            len: self.len,
            size: self.size,
            sealed: self.writer.is_none(),
            deleted: self.deleted,
            leases: self.leases,
        }
    }
}

/// A client: its connections and the leases it holds.
struct ClientEntry {
    pid: u32,
    connections: u32,
    leases: HashMap<ObjectId, u32>,
}

/// The daemon's books, under one lock: every buffer it holds, every
/// client with the leases it holds on them, and the allocations kept for
/// reuse.
struct Ledger<A: GpuApi> {
    objects: BTreeMap<ObjectId, Object<A>>,
    clients: HashMap<u64, ClientEntry>,
    next_id: u64,
    /// Freed allocations kept for their creators, oldest first, by client.
    kept: HashMap<u64, Vec<Kept<A>>>,
    /// Bytes one client's kept allocations may span (0: none are kept).
    kept_bytes: u64,
}

impl<A: GpuApi> Ledger<A> {
    /// Frees `id` if nothing keeps it: deleted with no lease, or abandoned
    /// by its writer before the seal.
    fn free_if_unheld(&mut self, id: ObjectId) {
        let Some(object) = self.objects.get(&id) else {
            return;
        };
        let writer_holds = object.writer.is_some_and(|w| {
            self.clients
                .get(&w)
                .is_some_and(|c| c.leases.contains_key(&id))
        });
        let abandoned = object.writer.is_some() && !writer_holds;
        if (object.deleted && object.leases == 0) || abandoned {
            let object = self.objects.remove(&id);
            if let Some(mut object) = object {
                // Per buffer: debug, so a daemon's log at info is its life, not its traffic.
                tracing::debug!(
                    "freed buffer {id} ({} bytes on device {}{})",
                    object.size,
                    object.device,
                    if abandoned {
                        ", abandoned before its seal"
                    } else {
                        ""
                    }
                );
                // Other holders were leases; an abandoned buffer can still
                // have readers' leases only if they never got one (an open
                // waits for the seal), so none are left dangling.
                for client in self.clients.values_mut() {
                    client.leases.remove(&id);
                }
                if self.clients.contains_key(&object.creator) {
                    let kept = Kept {
                        device: object.device,
                        buffer: object._buffer,
                        event: object.event,
                        handle: object.handle,
                        fd: object.fd.take(),
                    };
                    self.keep(object.creator, kept);
                }
            }
        }
    }

    /// Keeps `kept` for `client`, dropping its oldest kept allocations
    /// beyond [`Limits::kept_bytes`] (this one too, if it alone is larger).
    fn keep(&mut self, client: u64, kept: Kept<A>) {
        let list = self.kept.entry(client).or_default();
        list.push(kept);
        let mut total: u64 = list.iter().map(|k| k.handle.size).sum();
        while total > self.kept_bytes {
            let dropped = list.remove(0);
            total -= dropped.handle.size;
        }
        if list.is_empty() {
            self.kept.remove(&client);
        }
    }

    /// Takes back an allocation kept for `client` of `device` and `len`
    /// bytes, if there is one.
    fn take_kept(&mut self, client: u64, device: u32, len: u64) -> Option<Kept<A>> {
        let list = self.kept.get_mut(&client)?;
        let at = list
            .iter()
            .rposition(|k| k.device == device && k.handle.len == len)?;
        let kept = list.remove(at);
        if list.is_empty() {
            self.kept.remove(&client);
        }
        Some(kept)
    }

    /// Drops every kept allocation; whether there were any.
    fn drop_kept(&mut self) -> bool {
        let any = !self.kept.is_empty();
        self.kept.clear();
        any
    }

    /// Buffers held and allocations kept: each takes descriptors.
    fn held(&self) -> usize {
        self.objects.len() + self.kept.values().map(Vec::len).sum::<usize>()
    }

    /// A new buffer of `client`'s from `made`, leased to it, and its id.
    fn insert_created(&mut self, client: u64, made: Kept<A>) -> ObjectId {
        let id = ObjectId(self.next_id.max(micros_since_epoch()));
        self.next_id = id.0 + 1;
        self.objects.insert(
            id,
            Object {
                device: made.device,
                len: made.handle.len,
                size: made.handle.size,
                _buffer: made.buffer,
                event: made.event,
                handle: made.handle,
                fd: made.fd,
                writer: Some(client),
                creator: client,
                deleted: false,
                leases: 0,
            },
        );
        self.lease(client, id);
        id
    }

    /// Takes one lease of `client` on `id`.
    fn lease(&mut self, client: u64, id: ObjectId) {
        if let Some(object) = self.objects.get_mut(&id) {
            object.leases += 1;
        }
        if let Some(entry) = self.clients.get_mut(&client) {
            *entry.leases.entry(id).or_insert(0) += 1;
        }
    }

    /// Gives back `count` leases of `client` on `id` (all it has if `None`).
    fn release(&mut self, client: u64, id: ObjectId, count: Option<u32>) -> bool {
        let Some(entry) = self.clients.get_mut(&client) else {
            return false;
        };
        let Some(held) = entry.leases.get_mut(&id) else {
            return false;
        };
        let n = count.unwrap_or(*held).min(*held);
        *held -= n;
        if *held == 0 {
            entry.leases.remove(&id);
        }
        if let Some(object) = self.objects.get_mut(&id) {
            object.leases -= n;
        }
        self.free_if_unheld(id);
        true
    }
}

/// Bounds on what clients may hold (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once, every client together: each is a thread
    /// and two descriptors of the daemon.
    pub connections: usize,
    /// Connections one client process may hold at once.
    pub client_connections: usize,
    /// How long a new connection may take to say Hello, and a frame whose
    /// first byte came to arrive whole.
    pub frame_timeout: Duration,
    /// Buffers the daemon holds at once (each a descriptor of the daemon,
    /// and on the CPU device a segment in `/dev/shm`); a create beyond is
    /// refused as busy.
    pub buffers: usize,
    /// Bytes of freed allocations kept for one client's next creates (see
    /// the module docs, "Reuse"); 0 keeps none.
    pub kept_bytes: u64,
}

impl Limits {
    /// [`Limits::connections`] unless configured.
    pub const DEFAULT_CONNECTIONS: usize = 1024;
    /// [`Limits::client_connections`] unless configured.
    pub const DEFAULT_CLIENT_CONNECTIONS: usize = 256;
    /// [`Limits::frame_timeout`] unless configured.
    pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(10);
    /// [`Limits::buffers`] unless configured.
    pub const DEFAULT_BUFFERS: usize = 4096;
    /// [`Limits::kept_bytes`] unless configured.
    pub const DEFAULT_KEPT_BYTES: u64 = 256 << 20;

    /// Descriptors the daemon may need at these limits: two per
    /// connection, two per buffer (its export and its event), and a few of
    /// its own.
    pub fn descriptors(&self) -> u64 {
        (2 * self.connections as u64) + (2 * self.buffers as u64) + 64
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: Self::DEFAULT_CONNECTIONS,
            client_connections: Self::DEFAULT_CLIENT_CONNECTIONS,
            frame_timeout: Self::DEFAULT_FRAME_TIMEOUT,
            buffers: Self::DEFAULT_BUFFERS,
            kept_bytes: Self::DEFAULT_KEPT_BYTES,
        }
    }
}

/// How often the accept loop logs a recurring condition (out of
/// descriptors, connections refused): a client that hammers the daemon
/// must not fill the disk with its log.
pub const QUIET_LOG: Duration = Duration::from_secs(10);

/// How often an `Open` waiting for its seal checks that its opener is
/// still connected.
const HANG_UP_CHECK: Duration = Duration::from_millis(200);

/// Longest pause of the accept loop out of descriptors (it starts at a
/// millisecond and doubles while the shortage lasts): how long a new
/// connection may wait to be refused.
const MAX_BACKOFF: Duration = Duration::from_millis(100);

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

/// A bound daemon, not yet serving.
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
                ledger: Mutex::new(Ledger {
                    objects: BTreeMap::new(),
                    clients: HashMap::new(),
                    next_id: 1,
                    kept: HashMap::new(),
                    kept_bytes: limits.kept_bytes,
                }),
                next_allocation: AtomicU64::new(1),
                changed: Condvar::new(),
                stopping: AtomicBool::new(false),
                poller: RequestPoller::new(polling),
                limits,
                connections: Mutex::new(HashMap::new()),
                threads: Mutex::new(Vec::new()),
            }),
            listener,
            path: socket.to_path_buf(),
        })
    }

    /// The socket it listens on.
    pub fn socket_path(&self) -> &Path {
        &self.path
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
        let polling = self.daemon.poller.polling();
        let limits = self.daemon.limits;
        tracing::info!(
            "share daemon serving {} on {} device(s) of {:?}; polling for {:?} after a request on up to {} thread(s); \
             at most {} connection(s), {} per client process, and {} buffer(s)",
            self.path.display(),
            self.daemon.devices.len(),
            self.daemon.backend,
            polling.window,
            polling.threads,
            limits.connections,
            limits.client_connections,
            limits.buffers
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
        transport::shut_listener(&self.listener);
        let _ = accept.join();
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

/// Logs a recurring condition at most once per [`QUIET_LOG`], counting the
/// times it kept quiet.
struct QuietLog {
    last: Option<Instant>,
    quiet: u64,
}

impl QuietLog {
    const fn new() -> Self {
        Self {
            last: None,
            quiet: 0,
        }
    }

    fn warn(&mut self, what: impl FnOnce() -> String) {
        if self.last.is_some_and(|last| last.elapsed() < QUIET_LOG) {
            self.quiet += 1;
            return;
        }
        let quiet = std::mem::take(&mut self.quiet);
        if quiet > 0 {
            tracing::warn!("{} ({quiet} more time(s) since the last such line)", what());
        } else {
            tracing::warn!("{}", what());
        }
        self.last = Some(Instant::now());
    }
}

/// A descriptor held in reserve: given back when the process runs out, so
/// that the accept loop can still take a waiting connection to refuse it.
fn spare_descriptor() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// Whether `e` says this process (or the system) is out of descriptors.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Refuses `stream` with `code`, without waiting on its peer.
fn refuse(stream: &UnixStream, code: ErrorCode, message: String) {
    // A new connection's send buffer is empty: the frame fits, unless the
    // peer is already gone, which is no reason to wait.
    let _ = stream.set_nonblocking(true);
    let _ = transport::send_frame(stream, &error(code, message).encode(), None);
}

fn accept_loop<A: GpuApi>(daemon: &Arc<DaemonState<A>>, listener: &UnixListener) {
    let mut next_connection = 0u64;
    let mut spare = spare_descriptor();
    let mut backoff = Duration::ZERO;
    let mut short_log = QuietLog::new();
    let mut refused_log = QuietLog::new();
    let mut failed_log = QuietLog::new();
    while !daemon.stopping.load(Ordering::SeqCst) {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            // The stop shut the listener: every accept fails from then on.
            Err(_) if daemon.stopping.load(Ordering::SeqCst) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if out_of_descriptors(&e) {
                    shed_waiting(listener, &mut spare);
                    short_log.warn(|| {
                        format!(
                            "out of file descriptors ({e}): refusing new connections as busy \
                             until some close"
                        )
                    });
                } else {
                    failed_log.warn(|| format!("accept failed: {e}"));
                }
                // Retrying at once would spin on the same error.
                backoff = (backoff * 2).clamp(Duration::from_millis(1), MAX_BACKOFF);
                std::thread::sleep(backoff);
                continue;
            }
        };
        backoff = Duration::ZERO;
        if daemon.stopping.load(Ordering::SeqCst) {
            break;
        }
        next_connection += 1;
        daemon.admit(stream, next_connection, &mut refused_log);
    }
}

/// Out of descriptors: frees the spare, takes each connection waiting on
/// `listener` to refuse it with a reason (rather than leave it hanging),
/// and takes the spare back.
fn shed_waiting(listener: &UnixListener, spare: &mut Option<std::fs::File>) {
    drop(spare.take());
    if listener.set_nonblocking(true).is_ok() {
        while let Ok((stream, _)) = listener.accept() {
            refuse(
                &stream,
                ErrorCode::Busy,
                "the daemon is out of file descriptors".into(),
            );
        }
        let _ = listener.set_nonblocking(false);
    }
    *spare = spare_descriptor();
}

impl<A: GpuApi> DaemonState<A> {
    /// Serves `stream` on a thread of its own, or refuses it: another
    /// user's, or over a limit.
    fn admit(self: &Arc<Self>, stream: UnixStream, connection: u64, refused_log: &mut QuietLog) {
        let peer = match transport::peer_credentials(&stream) {
            Ok(peer) => peer,
            Err(e) => {
                refused_log.warn(|| format!("cannot read a connection's credentials: {e}"));
                return;
            }
        };
        if peer.uid != self.uid {
            refused_log.warn(|| format!("refused a connection from uid {}", peer.uid));
            refuse(
                &stream,
                ErrorCode::Refused,
                format!("uid {} is not the daemon's user", peer.uid),
            );
            return;
        }
        let clone = match stream.try_clone() {
            Ok(clone) => clone,
            Err(e) => {
                refused_log.warn(|| format!("cannot serve a connection: {e}"));
                let why = if out_of_descriptors(&e) {
                    "the daemon is out of file descriptors".into()
                } else {
                    format!("the daemon cannot serve it: {e}")
                };
                refuse(&stream, ErrorCode::Busy, why);
                return;
            }
        };
        {
            let mut connections = lock(&self.connections);
            let limits = self.limits;
            let of_client = connections
                .values()
                .filter(|(pid, _)| *pid == peer.pid)
                .count();
            let over = if connections.len() >= limits.connections {
                Some(format!(
                    "{} connections open, the daemon's limit",
                    connections.len()
                ))
            } else if of_client >= limits.client_connections {
                Some(format!(
                    "process {} holds {of_client} connections, the limit per client process",
                    peer.pid
                ))
            } else {
                None
            };
            if let Some(why) = over {
                drop(connections);
                refused_log.warn(|| format!("refused a connection: {why}"));
                refuse(&stream, ErrorCode::Busy, why);
                return;
            }
            connections.insert(connection, (peer.pid, clone));
        }
        let worker = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("share-conn-{connection}"))
            .spawn(move || {
                worker.serve_connection(&stream);
                lock(&worker.connections).remove(&connection);
            });
        let mut threads = lock(&self.threads);
        threads.retain(|t| !t.is_finished());
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(e) => {
                // The closure, and the stream with it, is gone: so is the
                // connection.
                lock(&self.connections).remove(&connection);
                refused_log.warn(|| format!("cannot start a connection thread: {e}"));
            }
        }
    }

    /// Shuts every open connection: their threads see them close.
    fn shut_connections(&self) {
        for (_, stream) in lock(&self.connections).values() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn status(&self) -> DaemonStatus {
        let ledger = lock(&self.ledger);
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
        }
    }

    fn reply(stream: &UnixStream, reply: &Reply, fd: Option<&OwnedFd>) -> bool {
        use std::os::fd::AsFd;
        transport::send_frame(stream, &reply.encode(), fd.map(|f| f.as_fd())).is_ok()
    }

    /// Serves one connection until it closes or breaks the protocol.
    fn serve_connection(&self, stream: &UnixStream) {
        // A connection that says nothing holds a slot for nothing.
        let frame_timeout = Some(self.limits.frame_timeout);
        if stream.set_read_timeout(frame_timeout).is_err() {
            return;
        }
        let hello = transport::recv_frame(stream, frame_timeout);
        if stream.set_read_timeout(None).is_err() {
            return;
        }
        let (client, backend) = match hello {
            Ok(received) => match Request::decode(&received.frame) {
                Ok(Request::Hello {
                    pid,
                    client,
                    backend,
                }) => {
                    if backend != self.backend && backend != WireBackend::Inspect {
                        Self::reply(
                            stream,
                            &error(
                                ErrorCode::Refused,
                                format!(
                                    "the daemon runs {:?}, the client {backend:?}",
                                    self.backend
                                ),
                            ),
                            None,
                        );
                        return;
                    }
                    let mut ledger = lock(&self.ledger);
                    let entry = ledger.clients.entry(client).or_insert_with(|| ClientEntry {
                        pid,
                        connections: 0,
                        leases: HashMap::new(),
                    });
                    entry.connections += 1;
                    (client, backend)
                }
                Ok(_) => {
                    Self::reply(
                        stream,
                        &error(ErrorCode::Protocol, "the first frame must be Hello"),
                        None,
                    );
                    return;
                }
                Err(e) => {
                    tracing::warn!("closing a connection: {e}");
                    Self::reply(stream, &error(ErrorCode::Protocol, e.to_string()), None);
                    return;
                }
            },
            Err(e) => {
                self.report_recv(stream, e);
                return;
            }
        };
        let hello = Reply::Hello {
            pid: std::process::id(),
            backend: self.backend,
            devices: self.devices.len() as u32,
        };
        if Self::reply(stream, &hello, None) {
            self.serve_requests(stream, client, backend == WireBackend::Inspect);
        }
        self.disconnect(client);
    }

    fn serve_requests(&self, stream: &UnixStream, client: u64, inspect: bool) {
        loop {
            self.poller.await_request(stream, &self.stopping);
            let received = match transport::recv_frame(stream, Some(self.limits.frame_timeout)) {
                Ok(received) => received,
                Err(e) => return self.report_recv(stream, e),
            };
            self.poller.saw_request();
            if received.fd.is_some() {
                tracing::warn!("closing a connection: a client sent a descriptor");
                Self::reply(
                    stream,
                    &error(ErrorCode::Protocol, "clients send no descriptors"),
                    None,
                );
                return;
            }
            let request = match Request::decode(&received.frame) {
                Ok(request) => request,
                Err(e) => {
                    tracing::warn!("closing a connection: {e}");
                    Self::reply(stream, &error(ErrorCode::Protocol, e.to_string()), None);
                    return;
                }
            };
            let (reply, fd) = self.handle(stream, client, inspect, request);
            if !Self::reply(stream, &reply, fd.as_ref()) {
                return;
            }
        }
    }

    fn report_recv(&self, stream: &UnixStream, e: RecvError) {
        match e {
            RecvError::Closed => {}
            RecvError::Io(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                tracing::debug!("closing a connection: {e}")
            }
            RecvError::Io(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tracing::debug!("closing a connection that said no Hello in time")
            }
            RecvError::Io(e) => tracing::debug!("connection ended: {e}"),
            RecvError::Wire(e) => {
                tracing::warn!("closing a connection: {e}");
                Self::reply(stream, &error(ErrorCode::Protocol, e.to_string()), None);
            }
        }
    }

    /// The client's connection closed: with its last one, its leases go.
    fn disconnect(&self, client: u64) {
        let mut ledger = lock(&self.ledger);
        let Some(entry) = ledger.clients.get_mut(&client) else {
            return;
        };
        entry.connections -= 1;
        if entry.connections > 0 {
            return;
        }
        let pid = entry.pid;
        let held: Vec<(ObjectId, u32)> = entry.leases.iter().map(|(&id, &n)| (id, n)).collect();
        for &(id, _) in &held {
            ledger.release(client, id, None);
        }
        ledger.clients.remove(&client);
        ledger.kept.remove(&client);
        drop(ledger);
        self.changed.notify_all();
        let leases: u32 = held.iter().map(|&(_, n)| n).sum();
        if leases > 0 {
            tracing::info!("client of pid {pid} went away: released its {leases} lease(s)");
        }
    }

    fn handle(
        &self,
        stream: &UnixStream,
        client: u64,
        inspect: bool,
        request: Request,
    ) -> (Reply, Option<OwnedFd>) {
        let mutating = matches!(
            request,
            Request::Create { .. }
                | Request::Open { .. }
                | Request::Seal { .. }
                | Request::Release { .. }
        );
        if inspect && mutating {
            return (
                error(
                    ErrorCode::NotPermitted,
                    "an inspecting client cannot map or seal buffers",
                ),
                None,
            );
        }
        match request {
            Request::Hello { .. } => (error(ErrorCode::Protocol, "Hello twice"), None),
            Request::Create { device, bytes } => self.create(client, device, bytes),
            Request::Open { id, timeout_ms } => self.open(
                stream,
                client,
                id,
                Duration::from_millis(u64::from(timeout_ms)),
            ),
            Request::Seal { id } => (self.seal(client, id), None),
            Request::Release { id } => {
                let released = lock(&self.ledger).release(client, id, Some(1));
                self.changed.notify_all();
                if released {
                    (Reply::Done, None)
                } else {
                    (
                        error(ErrorCode::NoLease, format!("no lease on buffer {id}")),
                        None,
                    )
                }
            }
            Request::Delete { id } => (self.delete(id), None),
            Request::Stat { id } => match lock(&self.ledger).objects.get(&id) {
                Some(object) => (Reply::Info(object.info(id)), None),
                None => (error(ErrorCode::UnknownId, format!("no buffer {id}")), None),
            },
            Request::List => {
                let ledger = lock(&self.ledger);
                let infos = ledger.objects.iter().map(|(&id, o)| o.info(id)).collect();
                (Reply::List(infos), None)
            }
            Request::Status => (Reply::Status(self.status()), None),
        }
    }

    fn create(&self, client: u64, device: u32, bytes: u64) -> (Reply, Option<OwnedFd>) {
        let at_limit = || {
            error(
                ErrorCode::Busy,
                format!(
                    "the daemon holds {} buffers, its limit",
                    self.limits.buffers
                ),
            )
        };
        let Some(gpu) = self.devices.get(device as usize) else {
            return (
                error(
                    ErrorCode::NoDevice,
                    format!("device {device} of {}", self.devices.len()),
                ),
                None,
            );
        };
        // An allocation kept for this client first: nothing to allocate,
        // export or import.
        let kept = lock(&self.ledger).take_kept(client, device, bytes);
        let made = match kept {
            Some(kept) => kept,
            None => {
                // Checked before allocating (the cost) and again when
                // inserting (creates run on several threads at once); kept
                // allocations give way first.
                {
                    let mut ledger = lock(&self.ledger);
                    if ledger.held() >= self.limits.buffers {
                        ledger.drop_kept();
                        if ledger.held() >= self.limits.buffers {
                            return (at_limit(), None);
                        }
                    }
                }
                let fresh = match self.allocate(gpu, device, bytes) {
                    Err((ErrorCode::Device, _)) if lock(&self.ledger).drop_kept() => {
                        self.allocate(gpu, device, bytes)
                    }
                    made => made,
                };
                match fresh {
                    Ok(made) => made,
                    Err((code, message)) => return (error(code, message), None),
                }
            }
        };
        let creator_fd = match made.fd.as_ref().map(OwnedFd::try_clone).transpose() {
            Ok(copy) => copy,
            Err(e) => return (error(ErrorCode::Device, format!("dup: {e}")), None),
        };
        let mut ledger = lock(&self.ledger);
        if ledger.objects.len() >= self.limits.buffers {
            return (at_limit(), None);
        }
        let handle = made.handle;
        let id = ledger.insert_created(client, made);
        tracing::debug!(
            "created buffer {id}: {} bytes on device {device} (allocation {})",
            handle.size,
            handle.allocation
        );
        (Reply::Created { id, handle }, creator_fd)
    }

    /// A fresh allocation of `bytes` on `gpu` (the daemon's `device`), its
    /// seal event and its export.
    fn allocate(
        &self,
        gpu: &A::Device,
        device: u32,
        bytes: u64,
    ) -> Result<Kept<A>, (ErrorCode, String)> {
        let bytes = usize::try_from(bytes)
            .map_err(|_| (ErrorCode::InvalidSize, format!("{bytes} bytes")))?;
        let buffer = gpu.alloc_shareable(bytes).map_err(|e| match e.kind {
            ErrorKind::InvalidSize { .. } => (ErrorCode::InvalidSize, e.to_string()),
            _ => (ErrorCode::Device, e.to_string()),
        })?;
        let device_error = |e: tandem_hal::GpuError| (ErrorCode::Device, e.to_string());
        let event = gpu
            .create_event(EventFlags {
                timing: false,
                interprocess: true,
            })
            .map_err(device_error)?;
        let event_handle = gpu.ipc_export_event(&event).map_err(device_error)?.0;
        let exported = gpu.export_shareable(&buffer).map_err(device_error)?;
        // Relaxed: only unique, ordered with nothing.
        let allocation = self.next_allocation.fetch_add(1, Ordering::Relaxed);
        let (handle, fd) = wire_handle(exported, allocation, event_handle);
        Ok(Kept {
            device,
            buffer,
            event,
            handle,
            fd,
        })
    }

    /// Opens `id` for `client`, waiting up to `timeout` for its seal while
    /// the opener stays connected on `stream`.
    fn open(
        &self,
        stream: &UnixStream,
        client: u64,
        id: ObjectId,
        timeout: Duration,
    ) -> (Reply, Option<OwnedFd>) {
        let deadline = Instant::now() + timeout;
        let mut ledger = lock(&self.ledger);
        loop {
            let Some(object) = ledger.objects.get(&id) else {
                return (error(ErrorCode::UnknownId, format!("no buffer {id}")), None);
            };
            if object.deleted {
                return (
                    error(ErrorCode::Deleted, format!("buffer {id} was deleted")),
                    None,
                );
            }
            if object.writer.is_none() {
                break;
            }
            let now = Instant::now();
            if now >= deadline || self.stopping.load(Ordering::SeqCst) {
                return (
                    error(
                        ErrorCode::NotSealed,
                        format!("buffer {id} was not sealed within {timeout:?}"),
                    ),
                    None,
                );
            }
            ledger = self
                .changed
                .wait_timeout(ledger, (deadline - now).min(HANG_UP_CHECK))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if transport::peer_hung_up(stream) {
                // Nobody to answer: the reply is only for the log's sake.
                return (
                    error(
                        ErrorCode::NotSealed,
                        format!("the opener of buffer {id} hung up"),
                    ),
                    None,
                );
            }
        }
        let Some(object) = ledger.objects.get(&id) else {
            return (error(ErrorCode::UnknownId, format!("no buffer {id}")), None);
        };
        let handle = object.handle;
        let fd = match object.fd.as_ref().map(OwnedFd::try_clone).transpose() {
            Ok(fd) => fd,
            Err(e) => return (error(ErrorCode::Device, format!("dup: {e}")), None),
        };
        ledger.lease(client, id);
        let Some(object) = ledger.objects.get(&id) else {
            return (error(ErrorCode::UnknownId, format!("no buffer {id}")), None);
        };
        // Answered here, a reader opens the event and makes its stream wait
        // on it only while the work still runs: a finished event orders
        // nothing, and each of those is a driver call. A query that fails
        // says "not done": the reader then waits itself.
        let seal_done = self
            .devices
            .get(object.device as usize)
            .is_some_and(|gpu| gpu.query_event(&object.event).unwrap_or(false));
        let reply = Reply::Opened {
            info: object.info(id),
            handle,
            seal_done,
        };
        (reply, fd)
    }

    fn seal(&self, client: u64, id: ObjectId) -> Reply {
        let mut ledger = lock(&self.ledger);
        let Some(object) = ledger.objects.get_mut(&id) else {
            return error(ErrorCode::UnknownId, format!("no buffer {id}"));
        };
        match object.writer {
            None => {
                return error(
                    ErrorCode::AlreadySealed,
                    format!("buffer {id} is sealed already"),
                )
            }
            Some(writer) if writer != client => {
                return error(
                    ErrorCode::NotWriter,
                    format!("buffer {id} has another writer"),
                )
            }
            // Nobody could open it: a deleted buffer is never sealed, so
            // its writer cannot get it back either.
            Some(_) if object.deleted => {
                return error(
                    ErrorCode::Deleted,
                    format!("buffer {id} was deleted before its seal"),
                )
            }
            Some(_) => object.writer = None,
        }
        drop(ledger);
        self.changed.notify_all();
        tracing::debug!("sealed buffer {id}");
        Reply::Done
    }

    fn delete(&self, id: ObjectId) -> Reply {
        let mut ledger = lock(&self.ledger);
        let Some(object) = ledger.objects.get_mut(&id) else {
            return error(ErrorCode::UnknownId, format!("no buffer {id}"));
        };
        if object.deleted {
            return error(
                ErrorCode::Deleted,
                format!("buffer {id} was deleted already"),
            );
        }
        object.deleted = true;
        let leases = object.leases;
        ledger.free_if_unheld(id);
        drop(ledger);
        self.changed.notify_all();
        tracing::debug!("deleted buffer {id} ({leases} lease(s) outstanding)");
        Reply::Done
    }
}

/// The wire form of an exported handle, and the descriptor to send beside it.
fn wire_handle(
    exported: ShareableHandle,
    allocation: u64,
    event: [u8; 64],
) -> (BufferHandle, Option<OwnedFd>) {
    match exported {
        ShareableHandle::Fd { fd, size, len } => (
            BufferHandle {
                form: HandleForm::Fd,
                size: size as u64,
                len: len as u64,
                allocation,
                event,
            },
            Some(fd),
        ),
        ShareableHandle::Ipc {
            handle,
            offset,
            len,
        } => (
            BufferHandle {
                form: HandleForm::Ipc {
                    handle: handle.0,
                    offset: offset as u64,
                },
                size: (offset + len) as u64,
                len: len as u64,
                allocation,
                event,
            },
            None,
        ),
    }
}
