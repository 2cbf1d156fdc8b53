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
//! One thread per connection, all under one lock: requests are a few
//! microseconds of bookkeeping, and an `Open` waiting for its seal sleeps
//! on the condition variable, not holding the lock. While the daemon is
//! busy, connection threads poll for their next request rather than sleep
//! in `recv` ([`Polling`]).

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// How openers map it. Exported once: a fresh export is slow on CUDA
    /// (`cuMemExportToShareableHandle` measured ~0.6 ms on an H100), a
    /// duplicate of the descriptor names the same allocation for ~1 us.
    handle: BufferHandle,
    fd: Option<OwnedFd>,
    /// The client that may seal it; `None` once sealed.
    writer: Option<u64>,
    deleted: bool,
    leases: u32,
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

struct State<A: GpuApi> {
    objects: BTreeMap<ObjectId, Object<A>>,
    clients: HashMap<u64, ClientEntry>,
    next_id: u64,
}

impl<A: GpuApi> State<A> {
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
            if let Some(object) = object {
                tracing::info!(
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
            }
        }
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

/// What the connection threads share.
struct Shared<A: GpuApi> {
    backend: WireBackend,
    devices: Vec<A::Device>,
    uid: u32,
    state: Mutex<State<A>>,
    /// Signalled on every seal, delete, free and stop (opens wait on it).
    changed: Condvar,
    stopping: AtomicBool,
    poller: RequestPoller,
    /// A clone of every open connection, to shut them at stop.
    connections: Mutex<HashMap<u64, UnixStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
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
    shared: Arc<Shared<A>>,
    listener: UnixListener,
    path: PathBuf,
}

/// A daemon serving on its own threads; [`RunningDaemon::stop`] ends it.
pub struct RunningDaemon<A: GpuApi> {
    shared: Arc<Shared<A>>,
    accept: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl<A: GpuApi> Daemon<A> {
    /// Opens every device of `api` and binds `socket` owner-only (see
    /// [`transport::bind_owner_only`]); polls as [`Polling::default`].
    pub fn bind(api: A, socket: &Path) -> Result<Self, ShareError> {
        Self::bind_polling(api, socket, Polling::default())
    }

    /// [`bind`](Self::bind), polling for requests as `polling` says.
    pub fn bind_polling(api: A, socket: &Path, polling: Polling) -> Result<Self, ShareError> {
        let count = api.device_count()?;
        let devices = (0..count)
            .map(|i| api.device(i))
            .collect::<Result<Vec<_>, _>>()?;
        let listener = transport::bind_owner_only(socket)
            .map_err(|e| ShareError::CannotServe(format!("{}: {e}", socket.display())))?;
        Ok(Self {
            shared: Arc::new(Shared {
                backend: WireBackend::of(A::BACKEND),
                devices,
                uid: transport::own_uid(),
                state: Mutex::new(State {
                    objects: BTreeMap::new(),
                    clients: HashMap::new(),
                    next_id: 1,
                }),
                changed: Condvar::new(),
                stopping: AtomicBool::new(false),
                poller: RequestPoller::new(polling),
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
        let shared = Arc::clone(&self.shared);
        let listener = self.listener;
        let accept = std::thread::Builder::new()
            .name("share-accept".into())
            .spawn(move || accept_loop(&shared, &listener))
            .ok();
        let polling = self.shared.poller.polling();
        tracing::info!(
            "share daemon serving {} on {} device(s) of {:?}; polling for {:?} after a request on up to {} thread(s)",
            self.path.display(),
            self.shared.devices.len(),
            self.shared.backend,
            polling.window,
            polling.threads
        );
        RunningDaemon {
            shared: self.shared,
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
        self.shared.status()
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
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which sees `stopping`.
        drop(UnixStream::connect(&self.path));
        let _ = accept.join();
        for stream in lock(&self.shared.connections).values() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        self.shared.changed.notify_all();
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for thread in threads {
            let _ = thread.join();
        }
        let status = self.shared.status();
        lock(&self.shared.state).objects.clear();
        let _ = std::fs::remove_file(&self.path);
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

fn accept_loop<A: GpuApi>(shared: &Arc<Shared<A>>, listener: &UnixListener) {
    let mut next_connection = 0u64;
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        next_connection += 1;
        let connection = next_connection;
        if let Ok(clone) = stream.try_clone() {
            lock(&shared.connections).insert(connection, clone);
        }
        let worker = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name(format!("share-conn-{connection}"))
            .spawn(move || {
                worker.serve_connection(&stream);
                lock(&worker.connections).remove(&connection);
            });
        let mut threads = lock(&shared.threads);
        threads.retain(|t| !t.is_finished());
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(e) => tracing::warn!("cannot start a connection thread: {e}"),
        }
    }
}

impl<A: GpuApi> Shared<A> {
    fn status(&self) -> DaemonStatus {
        let state = lock(&self.state);
        DaemonStatus {
            pid: std::process::id(),
            backend: self.backend,
            devices: self.devices.len() as u32,
            objects: state.objects.len() as u32,
            bytes: state.objects.values().map(|o| o.size).sum(),
            leases: state.objects.values().map(|o| o.leases).sum(),
            clients: state.clients.len() as u32,
        }
    }

    fn reply(stream: &UnixStream, reply: &Reply, fd: Option<&OwnedFd>) -> bool {
        use std::os::fd::AsFd;
        transport::send_frame(stream, &reply.encode(), fd.map(|f| f.as_fd())).is_ok()
    }

    /// Serves one connection until it closes or breaks the protocol.
    fn serve_connection(&self, stream: &UnixStream) {
        match transport::peer_uid(stream) {
            Ok(uid) if uid == self.uid => {}
            Ok(uid) => {
                tracing::warn!("refused a connection from uid {uid}");
                Self::reply(
                    stream,
                    &error(
                        ErrorCode::Refused,
                        format!("uid {uid} is not the daemon's user"),
                    ),
                    None,
                );
                return;
            }
            Err(e) => {
                tracing::warn!("cannot read a connection's credentials: {e}");
                return;
            }
        }
        let (client, backend) = match transport::recv_frame(stream) {
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
                    let mut state = lock(&self.state);
                    let entry = state.clients.entry(client).or_insert_with(|| ClientEntry {
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
            let received = match transport::recv_frame(stream) {
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
            let (reply, fd) = self.handle(client, inspect, request);
            if !Self::reply(stream, &reply, fd.as_ref()) {
                return;
            }
        }
    }

    fn report_recv(&self, stream: &UnixStream, e: RecvError) {
        match e {
            RecvError::Closed => {}
            RecvError::Io(e) => tracing::debug!("connection ended: {e}"),
            RecvError::Wire(e) => {
                tracing::warn!("closing a connection: {e}");
                Self::reply(stream, &error(ErrorCode::Protocol, e.to_string()), None);
            }
        }
    }

    /// The client's connection closed: with its last one, its leases go.
    fn disconnect(&self, client: u64) {
        let mut state = lock(&self.state);
        let Some(entry) = state.clients.get_mut(&client) else {
            return;
        };
        entry.connections -= 1;
        if entry.connections > 0 {
            return;
        }
        let pid = entry.pid;
        let held: Vec<(ObjectId, u32)> = entry.leases.iter().map(|(&id, &n)| (id, n)).collect();
        for &(id, _) in &held {
            state.release(client, id, None);
        }
        state.clients.remove(&client);
        drop(state);
        self.changed.notify_all();
        let leases: u32 = held.iter().map(|&(_, n)| n).sum();
        if leases > 0 {
            tracing::info!("client of pid {pid} went away: released its {leases} lease(s)");
        }
    }

    fn handle(&self, client: u64, inspect: bool, request: Request) -> (Reply, Option<OwnedFd>) {
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
            Request::Open { id, timeout_ms } => {
                self.open(client, id, Duration::from_millis(u64::from(timeout_ms)))
            }
            Request::Seal { id } => (self.seal(client, id), None),
            Request::Release { id } => {
                let released = lock(&self.state).release(client, id, Some(1));
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
            Request::Stat { id } => match lock(&self.state).objects.get(&id) {
                Some(object) => (Reply::Info(object.info(id)), None),
                None => (error(ErrorCode::UnknownId, format!("no buffer {id}")), None),
            },
            Request::List => {
                let state = lock(&self.state);
                let infos = state.objects.iter().map(|(&id, o)| o.info(id)).collect();
                (Reply::List(infos), None)
            }
            Request::Status => (Reply::Status(self.status()), None),
        }
    }

    fn create(&self, client: u64, device: u32, bytes: u64) -> (Reply, Option<OwnedFd>) {
        let Some(gpu) = self.devices.get(device as usize) else {
            return (
                error(
                    ErrorCode::NoDevice,
                    format!("device {device} of {}", self.devices.len()),
                ),
                None,
            );
        };
        let made = (|| {
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
            Ok::<_, (ErrorCode, String)>((buffer, event, event_handle, exported))
        })();
        let (buffer, event, event_handle, exported) = match made {
            Ok(made) => made,
            Err((code, message)) => return (error(code, message), None),
        };
        let (handle, fd) = wire_handle(exported, event_handle);
        let creator_fd = match fd.as_ref().map(OwnedFd::try_clone).transpose() {
            Ok(copy) => copy,
            Err(e) => return (error(ErrorCode::Device, format!("dup: {e}")), None),
        };
        let mut state = lock(&self.state);
        let id = ObjectId(state.next_id);
        state.next_id += 1;
        state.objects.insert(
            id,
            Object {
                device,
                len: handle.len,
                size: handle.size,
                _buffer: buffer,
                event,
                handle,
                fd,
                writer: Some(client),
                deleted: false,
                leases: 0,
            },
        );
        state.lease(client, id);
        tracing::info!(
            "created buffer {id}: {} bytes on device {device}",
            handle.size
        );
        (Reply::Created { id, handle }, creator_fd)
    }

    fn open(&self, client: u64, id: ObjectId, timeout: Duration) -> (Reply, Option<OwnedFd>) {
        let deadline = Instant::now() + timeout;
        let mut state = lock(&self.state);
        loop {
            let Some(object) = state.objects.get(&id) else {
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
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let Some(object) = state.objects.get(&id) else {
            return (error(ErrorCode::UnknownId, format!("no buffer {id}")), None);
        };
        let handle = object.handle;
        let fd = match object.fd.as_ref().map(OwnedFd::try_clone).transpose() {
            Ok(fd) => fd,
            Err(e) => return (error(ErrorCode::Device, format!("dup: {e}")), None),
        };
        state.lease(client, id);
        let Some(object) = state.objects.get(&id) else {
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
        let mut state = lock(&self.state);
        let Some(object) = state.objects.get_mut(&id) else {
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
            Some(_) => object.writer = None,
        }
        drop(state);
        self.changed.notify_all();
        tracing::debug!("sealed buffer {id}");
        Reply::Done
    }

    fn delete(&self, id: ObjectId) -> Reply {
        let mut state = lock(&self.state);
        let Some(object) = state.objects.get_mut(&id) else {
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
        state.free_if_unheld(id);
        drop(state);
        self.changed.notify_all();
        tracing::info!("deleted buffer {id} ({leases} lease(s) outstanding)");
        Reply::Done
    }
}

/// The wire form of an exported handle, and the descriptor to send beside it.
fn wire_handle(exported: ShareableHandle, event: [u8; 64]) -> (BufferHandle, Option<OwnedFd>) {
    match exported {
        ShareableHandle::Fd { fd, size, len } => (
            BufferHandle {
                form: HandleForm::Fd,
                size: size as u64,
                len: len as u64,
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
                event,
            },
            None,
        ),
    }
}
