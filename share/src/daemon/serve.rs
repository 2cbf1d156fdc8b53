//! Serving connections: the accept loop, which admits a connection within
//! the limits, and the thread per connection, which checks its Hello and
//! answers its requests until it closes; a closed client's leases go back.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_hal::GpuApi;

use crate::transport::{self, RecvError};
use crate::wire::{ErrorCode, ObjectId, Reply, Request, WireBackend};

use super::ledger::ClientEntry;
use super::limits::QUIET_LOG;
use super::metrics::Refusal;
use super::{error, lock, DaemonState};

/// Longest pause of the accept loop out of descriptors (it starts at a
/// millisecond and doubles while the shortage lasts): how long a new
/// connection may wait to be refused.
const MAX_BACKOFF: Duration = Duration::from_millis(100);

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

pub(super) fn accept_loop<A: GpuApi>(daemon: &Arc<DaemonState<A>>, listener: &UnixListener) {
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
                    daemon.counters.refused(Refusal::Descriptors);
                    shed_waiting(daemon, listener, &mut spare);
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
fn shed_waiting<A: GpuApi>(
    daemon: &DaemonState<A>,
    listener: &UnixListener,
    spare: &mut Option<std::fs::File>,
) {
    drop(spare.take());
    if listener.set_nonblocking(true).is_ok() {
        while let Ok((stream, _)) = listener.accept() {
            daemon.counters.refused(Refusal::Descriptors);
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
            self.counters.refused(Refusal::OtherUser);
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
                    self.counters.refused(Refusal::Descriptors);
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
                self.counters.refused(Refusal::Connections);
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
    pub(super) fn shut_connections(&self) {
        for (_, stream) in lock(&self.connections).values() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
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
            let arrived = Instant::now();
            if received.fd.is_some() {
                self.counters.refused(Refusal::BadFrame);
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
                    self.counters.refused(Refusal::BadFrame);
                    tracing::warn!("closing a connection: {e}");
                    Self::reply(stream, &error(ErrorCode::Protocol, e.to_string()), None);
                    return;
                }
            };
            let (reply, fd) = self.handle(stream, client, inspect, request);
            let sent = Self::reply(stream, &reply, fd.as_ref());
            self.counters.answered(arrived.elapsed());
            if !sent {
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
                self.counters.refused(Refusal::BadFrame);
                tracing::warn!("closing a connection: {e}");
                Self::reply(stream, &error(ErrorCode::Protocol, e.to_string()), None);
            }
        }
    }

    /// The client's connection closed: with its last one, its leases go.
    pub(super) fn disconnect(&self, client: u64) {
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
}
