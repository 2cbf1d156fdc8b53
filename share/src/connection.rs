//! A client's side of the socket: a pool of connections under one client
//! token, one request and its reply at a time on each.
//!
//! A pool, not one connection: an `Open` that waits for its seal holds its
//! connection, and the seal it waits for may come from this same process.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tandem_process::{lock_across_forks, ForkSafeGuard, MadeIn};

use crate::cluster::RemoteId;
use crate::error::ShareError;
use crate::transport::{self, RecvError};
use crate::wire::{
    check_set_name, BufferHandle, ClusterInfo, DaemonStatus, NodeInfo, ObjectId, ObjectInfo, Reply,
    Request, SetInfo, WireBackend,
};

/// A client token no other live client has: the pid (unique among live
/// processes) beside a per-process counter and the clock.
fn new_token() -> u64 {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let low = COUNTER.fetch_add(1, Ordering::Relaxed) ^ (nanos << 12);
    (u64::from(std::process::id()) << 32) | u64::from(low)
}

/// Connections to one daemon, as one client.
#[derive(Debug)]
pub(crate) struct Connections {
    socket: PathBuf,
    backend: WireBackend,
    /// The process of the daemon that answered last.
    daemon_pid: AtomicU32,
    /// How many times a new connection found another daemon on the socket
    /// than the one before: the daemon was restarted, and what this client
    /// maps of the old one's buffers is not the new one's.
    restarts: AtomicU64,
    devices: u32,
    pool: Mutex<Pool>,
}

/// The connections of one process, and the token the daemon knows it by.
#[derive(Debug)]
struct Pool {
    made_in: MadeIn,
    token: u64,
    /// Idle connections, each with the process of the daemon it reached.
    idle: Vec<(UnixStream, u32)>,
}

impl Pool {
    /// In a child forked from the process the pool was made in, starts the
    /// child's own: the inherited sockets are the parent's, which reads its
    /// replies on them, and the token names the parent's leases. Closing
    /// the child's copies leaves the parent's connections open.
    fn for_this_process(&mut self) {
        if !self.made_in.is_this_process() {
            self.idle.clear();
            self.token = new_token();
            self.made_in = MadeIn::this_process();
        }
    }
}

impl Connections {
    /// Connects once (which checks that a daemon answers and accepts us).
    pub(crate) fn connect(socket: &Path, backend: WireBackend) -> Result<Self, ShareError> {
        let token = new_token();
        // Nobody reached yet: no daemon, rather than a daemon gone.
        let stream = UnixStream::connect(socket).map_err(|e| ShareError::NoDaemon {
            socket: socket.to_path_buf(),
            why: e.to_string(),
        })?;
        let (stream, hello) = Self::hello(stream, token, backend)?;
        let Reply::Hello { pid, devices, .. } = hello else {
            return Err(ShareError::Protocol(format!(
                "expected Hello, got {hello:?}"
            )));
        };
        Ok(Self {
            socket: socket.to_path_buf(),
            backend,
            daemon_pid: AtomicU32::new(pid),
            restarts: AtomicU64::new(0),
            devices,
            pool: Mutex::new(Pool {
                made_in: MadeIn::this_process(),
                token,
                idle: vec![(stream, pid)],
            }),
        })
    }

    /// Another connection to the daemon serving the socket this client
    /// reached before, as the client `token`; with the daemon's process.
    fn open(&self, token: u64) -> Result<(UnixStream, u32), ShareError> {
        let stream = UnixStream::connect(&self.socket).map_err(|e| {
            ShareError::DaemonGone(format!("cannot connect to {}: {e}", self.socket.display()))
        })?;
        let (stream, hello) = Self::hello(stream, token, self.backend)?;
        let Reply::Hello { pid, .. } = hello else {
            return Err(ShareError::Protocol(format!(
                "expected Hello, got {hello:?}"
            )));
        };
        if self.daemon_pid.swap(pid, Ordering::AcqRel) != pid {
            self.restarts.fetch_add(1, Ordering::AcqRel);
        }
        Ok((stream, pid))
    }

    /// Says Hello on a new connection; returns it with the daemon's answer.
    fn hello(
        stream: UnixStream,
        token: u64,
        backend: WireBackend,
    ) -> Result<(UnixStream, Reply), ShareError> {
        let hello = Request::Hello {
            pid: std::process::id(),
            client: token,
            backend,
        };
        let gone = |e: std::io::Error| ShareError::DaemonGone(e.to_string());
        // A socket that is not a daemon's may never answer.
        stream.set_read_timeout(Some(HELLO_TIMEOUT)).map_err(gone)?;
        let answer = exchange(&stream, &hello);
        stream.set_read_timeout(None).map_err(gone)?;
        let (reply, _) = answer?;
        match reply {
            Reply::Error { code, message } => Err(ShareError::from_reply(code, message, None)),
            reply => Ok((stream, reply)),
        }
    }

    fn pool(&self) -> ForkSafeGuard<'_, Pool> {
        lock_across_forks(&self.pool)
    }

    pub(crate) fn daemon_pid(&self) -> u32 {
        self.daemon_pid.load(Ordering::Acquire)
    }

    /// How many times the daemon was found restarted (see the field).
    pub(crate) fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Acquire)
    }

    pub(crate) fn devices(&self) -> u32 {
        self.devices
    }

    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sends `request` and returns the reply (an error reply as an error,
    /// naming `id`), with the descriptor that came with it.
    pub(crate) fn call(
        &self,
        request: &Request,
        id: Option<ObjectId>,
    ) -> Result<(Reply, Option<OwnedFd>), ShareError> {
        let (idle, token) = {
            let mut pool = self.pool();
            pool.for_this_process();
            (pool.idle.pop(), pool.token)
        };
        let ((stream, daemon), pooled) = match idle {
            Some(idle) => (idle, true),
            None => (self.open(token)?, false),
        };
        // A broken connection is dropped, not returned to the pool.
        let (reply, fd, stream, daemon) = match exchange(&stream, request) {
            Ok((reply, fd)) => (reply, fd, stream, daemon),
            Err(ShareError::DaemonGone(why)) if pooled => {
                // An idle connection to a daemon that died since. If another
                // daemon serves the socket now (it was restarted), the request
                // goes to it: the dead one's state died with it, and so did
                // whatever it did of the request. The same daemon closing the
                // connection is an error, as it may have acted on the request.
                let (fresh, now) = self
                    .open(token)
                    .map_err(|_| ShareError::DaemonGone(why.clone()))?;
                if now == daemon {
                    return Err(ShareError::DaemonGone(why));
                }
                self.pool().idle.retain(|(_, pid)| *pid == now);
                let (reply, fd) = exchange(&fresh, request)?;
                (reply, fd, fresh, now)
            }
            Err(e) => return Err(e),
        };
        self.pool().idle.push((stream, daemon));
        match reply {
            Reply::Error { code, message } => Err(ShareError::from_reply(code, message, id)),
            reply => Ok((reply, fd)),
        }
    }

    /// What the daemon knows of `id`.
    pub(crate) fn stat(&self, id: ObjectId) -> Result<ObjectInfo, ShareError> {
        match self.call(&Request::Stat { id }, Some(id))?.0 {
            Reply::Info(info) => Ok(info),
            other => Err(unexpected(&other)),
        }
    }

    /// Every buffer the daemon holds.
    pub(crate) fn list(&self) -> Result<Vec<ObjectInfo>, ShareError> {
        match self.call(&Request::List, None)?.0 {
            Reply::List(infos) => Ok(infos),
            other => Err(unexpected(&other)),
        }
    }

    /// The daemon's totals.
    pub(crate) fn status(&self) -> Result<DaemonStatus, ShareError> {
        match self.call(&Request::Status, None)?.0 {
            Reply::Status(status) => Ok(status),
            other => Err(unexpected(&other)),
        }
    }

    /// Deletes `id`.
    pub(crate) fn delete(&self, id: ObjectId) -> Result<(), ShareError> {
        self.call(&Request::Delete { id }, Some(id)).map(drop)
    }

    /// Sends a set's `request`, its name checked first (the wire cannot
    /// carry a long one), and returns the set the reply names, if any.
    pub(crate) fn set_call(
        &self,
        name: &str,
        request: &Request,
    ) -> Result<Option<SetInfo>, ShareError> {
        check_set_name(name).map_err(ShareError::BadSetName)?;
        match self.call(request, None)?.0 {
            Reply::Set(info) => Ok(Some(info)),
            Reply::Done => Ok(None),
            other => Err(unexpected(&other)),
        }
    }

    /// Version `version` of set `name` (`None`: the latest).
    pub(crate) fn lookup_set(
        &self,
        name: &str,
        version: Option<u64>,
    ) -> Result<SetInfo, ShareError> {
        // The wire's 0 asks for the latest.
        if version == Some(0) {
            return Err(ShareError::UnknownSet(format!(
                "set {name:?} has no version 0: versions start at 1"
            )));
        }
        let request = Request::LookupSet {
            name: name.to_owned(),
            version,
        };
        self.set_call(name, &request)?
            .ok_or_else(|| ShareError::Protocol("no set in the reply".into()))
    }

    /// Every version of every set.
    pub(crate) fn list_sets(&self) -> Result<Vec<SetInfo>, ShareError> {
        match self.call(&Request::ListSets, None)?.0 {
            Reply::Sets(sets) => Ok(sets),
            other => Err(unexpected(&other)),
        }
    }

    /// Deletes set `name`.
    pub(crate) fn delete_set(&self, name: &str) -> Result<(), ShareError> {
        let request = Request::DeleteSet {
            name: name.to_owned(),
        };
        self.set_call(name, &request).map(drop)
    }

    pub(crate) fn export(&self, id: ObjectId) -> Result<(), ShareError> {
        self.call(&Request::Export { id }, Some(id)).map(drop)
    }

    /// Fetches `remote` to device `device`: the local copy (leased to this
    /// client), how to map it, and its descriptor.
    pub(crate) fn fetch(
        &self,
        remote: &str,
        device: u32,
    ) -> Result<(ObjectInfo, BufferHandle, Option<OwnedFd>), ShareError> {
        let remote: RemoteId = remote.parse().map_err(ShareError::BadRemoteId)?;
        let request = Request::Fetch {
            node: remote.node.clone(),
            id: remote.id,
            device,
        };
        // No id: the error names the remote buffer, not a local one.
        match self.call(&request, None)? {
            (Reply::Opened { info, handle, .. }, fd) => Ok((info, handle, fd)),
            (reply, _) => Err(unexpected(&reply)),
        }
    }

    pub(crate) fn cluster_status(&self) -> Result<ClusterInfo, ShareError> {
        match self.call(&Request::ClusterStatus, None)?.0 {
            Reply::Cluster(info) => Ok(info),
            reply => Err(unexpected(&reply)),
        }
    }

    pub(crate) fn cluster_nodes(&self) -> Result<Vec<NodeInfo>, ShareError> {
        match self.call(&Request::ClusterList, None)?.0 {
            Reply::Nodes(nodes) => Ok(nodes),
            reply => Err(unexpected(&reply)),
        }
    }
}

/// How long a new connection waits for the daemon's Hello: it answers at
/// once unless the socket is not a share daemon's.
const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A reply that does not answer the request.
pub(crate) fn unexpected(reply: &Reply) -> ShareError {
    ShareError::Protocol(format!("unexpected reply {reply:?}"))
}

/// One request and its reply on `stream`.
/// How long a caller spins for its reply before it sleeps: a daemon thread
/// woken by the request answers an open or a stat within it.
const REPLY_SPIN: std::time::Duration = std::time::Duration::from_micros(200);

fn exchange(
    stream: &UnixStream,
    request: &Request,
) -> Result<(Reply, Option<OwnedFd>), ShareError> {
    let gone = |e: std::io::Error| ShareError::DaemonGone(e.to_string());
    let sent = transport::send_frame(stream, &request.encode(), None);
    if sent.is_ok() {
        transport::spin_until_readable(stream, REPLY_SPIN);
    }
    // A daemon that refuses a connection says why and closes it, maybe
    // before the request lands: read its reason before calling it gone.
    let received = transport::recv_frame(stream, None);
    if let Err(e) = sent {
        return match received.map(|r| Reply::decode(&r.frame)) {
            Ok(Ok(Reply::Error { code, message })) => {
                Err(ShareError::from_reply(code, message, None))
            }
            _ => Err(gone(e)),
        };
    }
    let received = received.map_err(|e| match e {
        RecvError::Closed => ShareError::DaemonGone("it closed the connection".into()),
        // Only a Hello waits with a timeout.
        RecvError::Io(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            ShareError::Protocol(format!(
                "no answer to Hello within {HELLO_TIMEOUT:?}: not a share daemon's socket?"
            ))
        }
        RecvError::Io(e) => gone(e),
        RecvError::Wire(e) => ShareError::Protocol(e.to_string()),
    })?;
    let reply = Reply::decode(&received.frame)?;
    if reply.carries_fd() != received.fd.is_some() {
        return Err(ShareError::Protocol(
            "a reply's descriptor is missing or unexpected".into(),
        ));
    }
    Ok((reply, received.fd))
}

/// A client that only looks: stat, list, status and delete (buffers and
/// named sets), with no backend of its own (`tandem share ls`).
#[derive(Debug)]
pub struct Inspector {
    connections: Connections,
}

impl Inspector {
    /// Connects to the daemon on `socket`.
    pub fn connect(socket: &Path) -> Result<Self, ShareError> {
        Ok(Self {
            connections: Connections::connect(socket, WireBackend::Inspect)?,
        })
    }

    /// What the daemon knows of `id`.
    pub fn stat(&self, id: ObjectId) -> Result<ObjectInfo, ShareError> {
        self.connections.stat(id)
    }

    /// Every buffer the daemon holds.
    pub fn list(&self) -> Result<Vec<ObjectInfo>, ShareError> {
        self.connections.list()
    }

    /// The daemon's totals.
    pub fn status(&self) -> Result<DaemonStatus, ShareError> {
        self.connections.status()
    }

    /// Deletes `id` (freed when its last lease goes).
    pub fn delete(&self, id: ObjectId) -> Result<(), ShareError> {
        self.connections.delete(id)
    }

    /// Version `version` of named set `name` (`None`: the latest).
    pub fn lookup_set(&self, name: &str, version: Option<u64>) -> Result<SetInfo, ShareError> {
        self.connections.lookup_set(name, version)
    }

    /// Every version of every named set the daemon keeps.
    pub fn list_sets(&self) -> Result<Vec<SetInfo>, ShareError> {
        self.connections.list_sets()
    }

    /// Deletes named set `name` (its buffers freed when their last leases go).
    pub fn delete_set(&self, name: &str) -> Result<(), ShareError> {
        self.connections.delete_set(name)
    }

    /// Lets the other nodes of the daemon's cluster fetch sealed buffer `id`.
    pub fn export(&self, id: ObjectId) -> Result<(), ShareError> {
        self.connections.export(id)
    }

    /// Fetches `remote` (`NODE/ID`) into a new sealed buffer on the
    /// daemon's device `device`, which outlives this inspector (a local
    /// buffer like any other: `tandem share fetch`); what it is.
    pub fn fetch(&self, remote: &str, device: u32) -> Result<ObjectInfo, ShareError> {
        self.connections
            .fetch(remote, device)
            .map(|(info, ..)| info)
    }

    /// The daemon's place in its cluster.
    pub fn cluster_status(&self) -> Result<ClusterInfo, ShareError> {
        self.connections.cluster_status()
    }

    /// The cluster's nodes, each with what it exports.
    pub fn cluster_nodes(&self) -> Result<Vec<NodeInfo>, ShareError> {
        self.connections.cluster_nodes()
    }
}
