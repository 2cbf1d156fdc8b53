//! The daemon's wire format: one frame per request and per reply, on a
//! UNIX stream socket, a reply's file descriptor beside it (`SCM_RIGHTS`).
//!
//! # Frame (little-endian)
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0      | 4    | magic `b"TDSH"` |
//! | 4      | 2    | [`VERSION`] |
//! | 6      | 2    | opcode: a request's, or it with [`REPLY_BIT`] set, or [`ERROR_OP`] |
//! | 8      | 4    | payload bytes, at most [`MAX_PAYLOAD`] |
//! | 12     | ...  | payload: the fields of the message, in declaration order |
//!
//! Strings are a `u32` length and UTF-8 bytes; lists a `u32` count and the
//! items. A decoder takes nothing on trust: a frame that is short, long,
//! of another version, with an unknown opcode, with bytes left over, or
//! with a field out of range is a [`WireError`], and the daemon closes such
//! a connection (after saying why) and serves on.
//!
//! The same frames travel between the daemons of a cluster over TCP: the
//! `Peer*` requests, which only a daemon's cluster listener answers (and
//! the local socket refuses); `cluster` holds the messages of a cluster.

mod cluster;

use core::fmt;

pub use self::cluster::{ClusterInfo, LeasedRegion, NodeInfo, MAX_NODES};

/// First bytes of every frame.
pub const MAGIC: [u8; 4] = *b"TDSH";
/// Version of this format; a peer speaking another is refused. 2: an
/// open's reply says whether the seal's work had finished. 3: a daemon at
/// its limits refuses a connection with [`ErrorCode::Busy`]. 4: a handle
/// names its allocation, and the status counts the allocations kept for
/// reuse. 5: named sets (stage, bind, look up, list, delete). 6: a cluster
/// (export, fetch from another node, the cluster's state and nodes; the
/// requests between daemons), and an object says whether it is exported.
pub const VERSION: u16 = 6;
/// Bytes of a frame header.
pub const HEADER_BYTES: usize = 12;
/// Largest payload either side sends or accepts.
pub const MAX_PAYLOAD: u32 = 1 << 20;
/// Set in the opcode of a reply.
pub const REPLY_BIT: u16 = 0x8000;
/// Opcode of an error reply (to any request).
pub const ERROR_OP: u16 = 0xffff;
/// Most objects one [`Reply::List`] carries (it fits [`MAX_PAYLOAD`]).
pub const MAX_LISTED: usize = 8192;
/// Longest name of a set, in bytes.
pub const MAX_SET_NAME: usize = 255;
/// Most buffers one version of a set holds, its manifest aside: enough for
/// a model born in a pool (`tandem.torch.pool`), whose tensors sit in the
/// allocator's segments, one buffer each, and are published where they
/// are; a version of this many still fits one frame.
pub const MAX_SET_BUFFERS: usize = 1024;
/// Most set versions one [`Reply::Sets`] carries; it carries fewer where
/// their buffers' ids would not fit [`MAX_PAYLOAD`].
pub const MAX_LISTED_SETS: usize = 512;

/// Why `name` cannot name a set: empty, longer than [`MAX_SET_NAME`]
/// bytes, or with a control character (it is printed by `tandem share ls`).
pub fn check_set_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a set name is empty".into());
    }
    if name.len() > MAX_SET_NAME {
        return Err(format!(
            "a set name of {} bytes is longer than {MAX_SET_NAME}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("set name {name:?} has a control character"));
    }
    Ok(())
}

/// The name of a buffer the daemon holds; never reused by one daemon.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ObjectId(pub u64);

impl fmt::Display for ObjectId {
    /// The number, honouring width and alignment (`tandem share ls` aligns
    /// its id column with them).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Which backend a peer runs, as the wire says it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum WireBackend {
    /// A client that only inspects (stat, list, status, delete): `tandem share ls`.
    Inspect = 0,
    /// The CPU device.
    Host = 1,
    /// CUDA.
    Cuda = 2,
    /// HIP.
    Hip = 3,
}

impl WireBackend {
    /// The wire name of a GpuApi backend.
    pub fn of(backend: tandem_hal::Backend) -> Self {
        match backend {
            tandem_hal::Backend::Host => Self::Host,
            tandem_hal::Backend::Cuda => Self::Cuda,
            tandem_hal::Backend::Hip => Self::Hip,
        }
    }

    /// The GpuApi backend it names; `None` for an inspector.
    pub fn backend(self) -> Option<tandem_hal::Backend> {
        match self {
            Self::Inspect => None,
            Self::Host => Some(tandem_hal::Backend::Host),
            Self::Cuda => Some(tandem_hal::Backend::Cuda),
            Self::Hip => Some(tandem_hal::Backend::Hip),
        }
    }

    fn from_u8(value: u8) -> Result<Self, WireError> {
        Ok(match value {
            0 => Self::Inspect,
            1 => Self::Host,
            2 => Self::Cuda,
            3 => Self::Hip,
            _ => return Err(WireError::Malformed("backend")),
        })
    }
}

/// As users write it: `inspect`, or the backend's name (`host`, `cuda`,
/// `hip`).
impl core::fmt::Display for WireBackend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.backend() {
            Some(backend) => backend.fmt(f),
            None => f.write_str("inspect"),
        }
    }
}

/// How a buffer reaches its opener; a [`HandleForm::Fd`] reply carries the
/// descriptor beside the frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HandleForm {
    /// A descriptor of the allocation rides with the reply.
    Fd,
    /// A legacy IPC handle of a dedicated allocation, the buffer `offset`
    /// bytes into it.
    Ipc {
        /// The handle's bytes.
        handle: [u8; 64],
        /// Where the buffer starts in the allocation.
        offset: u64,
    },
}

/// Where and how big a buffer is, and how to map it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BufferHandle {
    /// The handle's form.
    pub form: HandleForm,
    /// Bytes the allocation spans.
    pub size: u64,
    /// Bytes the buffer offers.
    pub len: u64,
    /// The daemon's name for the allocation, never reused by one daemon: a
    /// create may hand its client an allocation of a buffer it deleted
    /// (kept for reuse), which a client that still maps it need not map
    /// again.
    pub allocation: u64,
    /// The interprocess event a writer records at seal and readers wait on.
    pub event: [u8; 64],
}

/// What the daemon says about one buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ObjectInfo {
    /// Its id.
    pub id: ObjectId,
    /// The device it lives on (the daemon's ordinal).
    pub device: u32,
    /// Bytes it offers.
    pub len: u64,
    /// Bytes its allocation spans.
    pub size: u64,
    /// Whether its writer sealed it (readers may open it).
    pub sealed: bool,
    /// Whether it was deleted and waits for its last lease to go.
    pub deleted: bool,
    /// Leases held on it, by every client (and by other nodes' fetches).
    pub leases: u32,
    /// Whether other nodes of the cluster may fetch it.
    pub exported: bool,
}

/// What the daemon holds, in total.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DaemonStatus {
    /// The daemon's process id.
    pub pid: u32,
    /// Its backend.
    pub backend: WireBackend,
    /// Its devices.
    pub devices: u32,
    /// Buffers held (deleted ones still leased included).
    pub objects: u32,
    /// Bytes of their allocations.
    pub bytes: u64,
    /// Leases held.
    pub leases: u32,
    /// Clients connected (processes, not connections).
    pub clients: u32,
    /// Allocations of deleted buffers kept for their creators' next creates.
    pub kept: u32,
    /// Bytes of those allocations.
    pub kept_bytes: u64,
    /// Named sets held.
    pub sets: u32,
    /// Versions those sets keep.
    pub set_versions: u32,
    /// Bytes of those versions' buffers, manifests included (what
    /// `ListSets` says of each, summed).
    pub set_bytes: u64,
}

/// One version of a named set: a sealed manifest and the sealed buffers it
/// describes, bound to a name at once.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SetInfo {
    /// The set's name.
    pub name: String,
    /// Its version: 1 for the first bind of the name, one more for each bind after.
    pub version: u64,
    /// The buffer holding its manifest (the publisher's format; the daemon
    /// never reads it).
    pub manifest: ObjectId,
    /// The buffers the manifest describes, in the publisher's order.
    pub buffers: Vec<ObjectId>,
    /// Tensors (or items) the manifest lists, as the publisher counted them.
    pub tensors: u32,
    /// Bytes of its buffers, the manifest's included.
    pub bytes: u64,
}

/// Why the daemon refused a request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u16)]
pub enum ErrorCode {
    /// No buffer has this id (never had, or freed).
    UnknownId = 1,
    /// The buffer was deleted; it lives on only for those who hold it.
    Deleted = 2,
    /// The buffer was not sealed before the opener's deadline.
    NotSealed = 3,
    /// Seal of a buffer that is sealed already.
    AlreadySealed = 4,
    /// Seal by a client that is not the buffer's writer.
    NotWriter = 5,
    /// A size of zero, or beyond the device.
    InvalidSize = 6,
    /// No such device.
    NoDevice = 7,
    /// The device refused (out of memory, driver error).
    Device = 8,
    /// A frame that is not this protocol; the connection is closed.
    Protocol = 9,
    /// A peer of another user, version or backend; the connection is closed.
    Refused = 10,
    /// Release of a lease the client does not hold.
    NoLease = 11,
    /// What an inspecting client may not do.
    NotPermitted = 12,
    /// The daemon is at a limit: its connections, a client's connections
    /// or its descriptors (the connection is then closed), the buffers it
    /// holds (a create), or the named sets (a bind of a new name). Try
    /// again later.
    Busy = 13,
    /// No set has this name (or it does not keep this version).
    UnknownSet = 14,
    /// The set has no version yet, but one is being published.
    SetPublishing = 15,
    /// A set name that is empty, too long or has a control character.
    BadSetName = 16,
    /// The daemon is in no cluster (its config has no `[cluster]`).
    NoCluster = 17,
    /// etcd, where the cluster's nodes are found, does not answer.
    ClusterUnavailable = 18,
    /// No node of this name is in the cluster (never joined, or its lease expired).
    UnknownNode = 19,
    /// The buffer exists on its node but was not exported.
    NotExported = 20,
    /// The node holding the buffer went away (or stopped answering) mid-fetch.
    RemoteGone = 21,
    /// The other node refused this one: a wrong cluster token.
    ClusterRefused = 22,
    /// NIXL failed to move the bytes.
    Transfer = 23,
}

impl ErrorCode {
    fn from_u16(value: u16) -> Result<Self, WireError> {
        Ok(match value {
            1 => Self::UnknownId,
            2 => Self::Deleted,
            3 => Self::NotSealed,
            4 => Self::AlreadySealed,
            5 => Self::NotWriter,
            6 => Self::InvalidSize,
            7 => Self::NoDevice,
            8 => Self::Device,
            9 => Self::Protocol,
            10 => Self::Refused,
            11 => Self::NoLease,
            12 => Self::NotPermitted,
            13 => Self::Busy,
            14 => Self::UnknownSet,
            15 => Self::SetPublishing,
            16 => Self::BadSetName,
            17 => Self::NoCluster,
            18 => Self::ClusterUnavailable,
            19 => Self::UnknownNode,
            20 => Self::NotExported,
            21 => Self::RemoteGone,
            22 => Self::ClusterRefused,
            23 => Self::Transfer,
            _ => return Err(WireError::Malformed("error code")),
        })
    }
}

/// A client's request.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Request {
    /// The first frame of every connection.
    Hello {
        /// The client's process id (for logs and status).
        pid: u32,
        /// The client's token: connections with one token are one client,
        /// whose leases go when the last of them closes.
        client: u64,
        /// The backend the client maps buffers with.
        backend: WireBackend,
    },
    /// A new buffer of `bytes` on `device`, writable by this client until sealed.
    Create {
        /// The daemon's device ordinal.
        device: u32,
        /// Bytes asked for.
        bytes: u64,
    },
    /// A lease on a sealed buffer and its handle; waits up to `timeout_ms`
    /// for the seal.
    Open {
        /// The buffer.
        id: ObjectId,
        /// How long to wait for an unsealed buffer's seal.
        timeout_ms: u32,
    },
    /// The writer is done: its event is recorded, readers may open.
    Seal {
        /// The buffer.
        id: ObjectId,
    },
    /// Gives back one lease.
    Release {
        /// The buffer.
        id: ObjectId,
    },
    /// Deletes the buffer (freed when its last lease goes).
    Delete {
        /// The buffer.
        id: ObjectId,
    },
    /// What the daemon knows of one buffer.
    Stat {
        /// The buffer.
        id: ObjectId,
    },
    /// Every buffer (up to `MAX_LISTED`).
    List,
    /// The daemon's totals.
    Status,
    /// Writer's buffer `id`, unsealed, is part of set `name`, which its
    /// writer is publishing: nobody may open it until the set is bound, and
    /// it is freed if its writer lets go of it before.
    Stage {
        /// The buffer.
        id: ObjectId,
        /// The set.
        name: String,
    },
    /// Binds a new version of set `name` to sealed buffers this client
    /// staged for it, all at once; older versions beyond those kept are
    /// deleted (alive for those who hold them).
    BindSet {
        /// The set.
        name: String,
        /// The buffer holding its manifest.
        manifest: ObjectId,
        /// The buffers the manifest describes.
        buffers: Vec<ObjectId>,
        /// How many tensors the manifest lists.
        tensors: u32,
    },
    /// A version of a set: the latest if `version` is `None`.
    LookupSet {
        /// The set.
        name: String,
        /// Which version.
        version: Option<u64>,
    },
    /// Every version of every set the daemon keeps (up to [`MAX_LISTED_SETS`]).
    ListSets,
    /// Deletes a set: every version it keeps, whose buffers live on only
    /// for those who hold them.
    DeleteSet {
        /// The set.
        name: String,
    },
    /// Lets other nodes of the cluster fetch sealed buffer `id`.
    Export {
        /// The buffer.
        id: ObjectId,
    },
    /// Copies sealed, exported buffer `id` of node `node` into a new local
    /// buffer on `device`, sealed, leased to this client: answered as an
    /// [`Reply::Opened`] of the copy.
    Fetch {
        /// The node holding it.
        node: String,
        /// Its id there.
        id: ObjectId,
        /// The local device to copy it to.
        device: u32,
    },
    /// The daemon's place in its cluster.
    ClusterStatus,
    /// The cluster's nodes and what each exports.
    ClusterList,
    /// A daemon of the cluster introduces itself (first frame on the
    /// cluster listener): its node name and the cluster's token.
    PeerHello {
        /// Its node.
        node: String,
        /// The cluster's shared token.
        token: String,
    },
    /// A lease on exported buffer `id` for the asking node, and where to
    /// read it ([`Reply::Leased`]); held until released or the connection closes.
    PeerLease {
        /// The buffer.
        id: ObjectId,
    },
    /// Gives back a [`Request::PeerLease`].
    PeerRelease {
        /// The buffer.
        id: ObjectId,
    },
    /// The exported buffers ([`Reply::List`]).
    PeerList,
}

/// The daemon's reply.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Reply {
    /// To [`Request::Hello`].
    Hello {
        /// The daemon's process id.
        pid: u32,
        /// The daemon's backend.
        backend: WireBackend,
        /// Its devices.
        devices: u32,
    },
    /// To [`Request::Create`]: the new buffer, with a lease for its writer.
    Created {
        /// Its id.
        id: ObjectId,
        /// How to map it.
        handle: BufferHandle,
    },
    /// To [`Request::Open`]: a lease and how to map.
    Opened {
        /// What the buffer is.
        info: ObjectInfo,
        /// How to map it.
        handle: BufferHandle,
        /// Whether the writer's work before its seal had finished when the
        /// daemon answered: the reader then needs no wait, nor the event.
        seal_done: bool,
    },
    /// To seal, release and delete.
    Done,
    /// To [`Request::Stat`].
    Info(ObjectInfo),
    /// To [`Request::List`].
    List(Vec<ObjectInfo>),
    /// To [`Request::Status`].
    Status(DaemonStatus),
    /// To [`Request::BindSet`] (the version bound) and [`Request::LookupSet`].
    Set(SetInfo),
    /// To [`Request::ListSets`].
    Sets(Vec<SetInfo>),
    /// To [`Request::ClusterStatus`].
    Cluster(ClusterInfo),
    /// To [`Request::ClusterList`].
    Nodes(Vec<NodeInfo>),
    /// To [`Request::PeerLease`].
    Leased(LeasedRegion),
    /// Refused.
    Error {
        /// Why, for code.
        code: ErrorCode,
        /// Why, for people.
        message: String,
    },
}

/// A frame that is not a valid message.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum WireError {
    /// Fewer bytes than the header or the message needs.
    Truncated,
    /// The first bytes are not [`MAGIC`].
    BadMagic,
    /// Another [`VERSION`].
    BadVersion(u16),
    /// An opcode this version does not know (or a reply where a request
    /// belongs, and the other way round).
    UnknownOp(u16),
    /// A payload longer than [`MAX_PAYLOAD`].
    TooLong(u32),
    /// Bytes after the message.
    TrailingBytes(usize),
    /// A field out of range.
    Malformed(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => write!(f, "truncated frame"),
            Self::BadMagic => write!(f, "not a tandem-share frame (bad magic)"),
            Self::BadVersion(v) => write!(f, "protocol version {v}, this side speaks {VERSION}"),
            Self::UnknownOp(op) => write!(f, "unknown opcode {op:#06x}"),
            Self::TooLong(n) => write!(f, "payload of {n} bytes exceeds {MAX_PAYLOAD}"),
            Self::TrailingBytes(n) => write!(f, "{n} bytes after the message"),
            Self::Malformed(field) => write!(f, "malformed field: {field}"),
        }
    }
}

impl std::error::Error for WireError {}

/// A frame header, checked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Header {
    /// The opcode.
    pub op: u16,
    /// Payload bytes that follow.
    pub payload: u32,
}

impl Header {
    /// Checks magic, version and length.
    pub fn decode(bytes: &[u8; HEADER_BYTES]) -> Result<Self, WireError> {
        if bytes[0..4] != MAGIC {
            return Err(WireError::BadMagic);
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != VERSION {
            return Err(WireError::BadVersion(version));
        }
        let op = u16::from_le_bytes([bytes[6], bytes[7]]);
        let payload = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if payload > MAX_PAYLOAD {
            return Err(WireError::TooLong(payload));
        }
        Ok(Self { op, payload })
    }
}

mod op {
    pub const HELLO: u16 = 1;
    pub const CREATE: u16 = 2;
    pub const OPEN: u16 = 3;
    pub const SEAL: u16 = 4;
    pub const RELEASE: u16 = 5;
    pub const DELETE: u16 = 6;
    pub const STAT: u16 = 7;
    pub const LIST: u16 = 8;
    pub const STATUS: u16 = 9;
    pub const STAGE: u16 = 10;
    pub const BIND_SET: u16 = 11;
    pub const LOOKUP_SET: u16 = 12;
    pub const LIST_SETS: u16 = 13;
    pub const DELETE_SET: u16 = 14;
    pub const EXPORT: u16 = 15;
    pub const FETCH: u16 = 16;
    pub const CLUSTER_STATUS: u16 = 17;
    pub const CLUSTER_LIST: u16 = 18;
    pub const PEER_HELLO: u16 = 0x20;
    pub const PEER_LEASE: u16 = 0x21;
    pub const PEER_RELEASE: u16 = 0x22;
    pub const PEER_LIST: u16 = 0x23;
    /// Reply opcodes that answer no single request.
    pub const DONE: u16 = 0x10;
}

/// Builds one frame.
#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn new(op: u16) -> Self {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&op.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        Self(bytes)
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes64(&mut self, v: &[u8; 64]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }
    fn str(&mut self, v: &str) -> &mut Self {
        // Messages are ours and short; cut at a char boundary to stay in bounds.
        let mut end = v.len().min(4096);
        while !v.is_char_boundary(end) {
            end -= 1;
        }
        self.u32(end as u32);
        self.0.extend_from_slice(&v.as_bytes()[..end]);
        self
    }
    fn info(&mut self, i: &ObjectInfo) -> &mut Self {
        self.u64(i.id.0)
            .u32(i.device)
            .u64(i.len)
            .u64(i.size)
            .u8(u8::from(i.sealed) | u8::from(i.deleted) << 1 | u8::from(i.exported) << 2)
            .u32(i.leases)
    }
    fn handle(&mut self, h: &BufferHandle) -> &mut Self {
        match h.form {
            HandleForm::Fd => self.u8(1),
            HandleForm::Ipc { handle, offset } => self.u8(2).bytes64(&handle).u64(offset),
        };
        self.u64(h.size)
            .u64(h.len)
            .u64(h.allocation)
            .bytes64(&h.event)
    }
    fn ids(&mut self, ids: &[ObjectId]) -> &mut Self {
        self.u32(ids.len() as u32);
        for id in ids {
            self.u64(id.0);
        }
        self
    }
    fn set(&mut self, s: &SetInfo) -> &mut Self {
        self.str(&s.name)
            .u64(s.version)
            .u64(s.manifest.0)
            .ids(&s.buffers)
            .u32(s.tensors)
            .u64(s.bytes)
    }
    fn finish(mut self) -> Vec<u8> {
        let payload = (self.0.len() - HEADER_BYTES) as u32;
        self.0[8..12].copy_from_slice(&payload.to_le_bytes());
        self.0
    }
}

/// Reads one message's fields.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().unwrap_or_default(),
        ))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    fn bytes64(&mut self) -> Result<[u8; 64], WireError> {
        Ok(self.take(64)?.try_into().unwrap_or([0; 64]))
    }
    fn flag(&mut self, what: &'static str) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Malformed(what)),
        }
    }
    fn str(&mut self) -> Result<String, WireError> {
        let len = self.u32()? as usize;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::Malformed("string"))
    }
    fn info(&mut self) -> Result<ObjectInfo, WireError> {
        let id = ObjectId(self.u64()?);
        let device = self.u32()?;
        let len = self.u64()?;
        let size = self.u64()?;
        let flags = self.u8()?;
        if flags > 7 {
            return Err(WireError::Malformed("object flags"));
        }
        if len > size {
            return Err(WireError::Malformed("object length"));
        }
        Ok(ObjectInfo {
            id,
            device,
            len,
            size,
            sealed: flags & 1 != 0,
            deleted: flags & 2 != 0,
            leases: self.u32()?,
            exported: flags & 4 != 0,
        })
    }
    fn handle(&mut self) -> Result<BufferHandle, WireError> {
        let form = match self.u8()? {
            1 => HandleForm::Fd,
            2 => HandleForm::Ipc {
                handle: self.bytes64()?,
                offset: self.u64()?,
            },
            _ => return Err(WireError::Malformed("handle form")),
        };
        let size = self.u64()?;
        let len = self.u64()?;
        if len == 0 || len > size {
            return Err(WireError::Malformed("handle length"));
        }
        Ok(BufferHandle {
            form,
            size,
            len,
            allocation: self.u64()?,
            event: self.bytes64()?,
        })
    }
    /// A set name: a string no longer than [`MAX_SET_NAME`] (the daemon
    /// checks the rest, to answer with a reason).
    fn name(&mut self) -> Result<String, WireError> {
        let name = self.str()?;
        if name.len() > MAX_SET_NAME {
            return Err(WireError::Malformed("set name"));
        }
        Ok(name)
    }
    fn ids(&mut self) -> Result<Vec<ObjectId>, WireError> {
        let count = self.u32()? as usize;
        if count > MAX_SET_BUFFERS {
            return Err(WireError::Malformed("set buffer count"));
        }
        (0..count).map(|_| self.u64().map(ObjectId)).collect()
    }
    fn set(&mut self) -> Result<SetInfo, WireError> {
        Ok(SetInfo {
            name: self.name()?,
            version: self.u64()?,
            manifest: ObjectId(self.u64()?),
            buffers: self.ids()?,
            tensors: self.u32()?,
            bytes: self.u64()?,
        })
    }
    fn end(self) -> Result<(), WireError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(WireError::TrailingBytes(n)),
        }
    }
}

/// Splits a whole frame into its checked header and payload.
fn split(frame: &[u8]) -> Result<(Header, &[u8]), WireError> {
    let header: &[u8; HEADER_BYTES] = frame
        .get(..HEADER_BYTES)
        .and_then(|h| h.try_into().ok())
        .ok_or(WireError::Truncated)?;
    let header = Header::decode(header)?;
    let payload = &frame[HEADER_BYTES..];
    match payload.len().cmp(&(header.payload as usize)) {
        core::cmp::Ordering::Less => Err(WireError::Truncated),
        core::cmp::Ordering::Greater => Err(WireError::TrailingBytes(
            payload.len() - header.payload as usize,
        )),
        core::cmp::Ordering::Equal => Ok((header, payload)),
    }
}

impl Request {
    /// The whole frame.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Hello {
                pid,
                client,
                backend,
            } => Writer::new(op::HELLO)
                .u32(*pid)
                .u64(*client)
                .u8(*backend as u8)
                .finish_ref(),
            Self::Create { device, bytes } => Writer::new(op::CREATE)
                .u32(*device)
                .u64(*bytes)
                .finish_ref(),
            Self::Open { id, timeout_ms } => Writer::new(op::OPEN)
                .u64(id.0)
                .u32(*timeout_ms)
                .finish_ref(),
            Self::Seal { id } => Writer::new(op::SEAL).u64(id.0).finish_ref(),
            Self::Release { id } => Writer::new(op::RELEASE).u64(id.0).finish_ref(),
            Self::Delete { id } => Writer::new(op::DELETE).u64(id.0).finish_ref(),
            Self::Stat { id } => Writer::new(op::STAT).u64(id.0).finish_ref(),
            Self::List => Writer::new(op::LIST).finish(),
            Self::Status => Writer::new(op::STATUS).finish(),
            Self::Stage { id, name } => Writer::new(op::STAGE).u64(id.0).str(name).finish_ref(),
            Self::BindSet {
                name,
                manifest,
                buffers,
                tensors,
            } => Writer::new(op::BIND_SET)
                .str(name)
                .u64(manifest.0)
                .ids(buffers)
                .u32(*tensors)
                .finish_ref(),
            Self::LookupSet { name, version } => Writer::new(op::LOOKUP_SET)
                .str(name)
                .u64(version.unwrap_or(0))
                .finish_ref(),
            Self::ListSets => Writer::new(op::LIST_SETS).finish(),
            Self::DeleteSet { name } => Writer::new(op::DELETE_SET).str(name).finish_ref(),
            Self::Export { id } => Writer::new(op::EXPORT).u64(id.0).finish_ref(),
            Self::Fetch { node, id, device } => Writer::new(op::FETCH)
                .str(node)
                .u64(id.0)
                .u32(*device)
                .finish_ref(),
            Self::ClusterStatus => Writer::new(op::CLUSTER_STATUS).finish(),
            Self::ClusterList => Writer::new(op::CLUSTER_LIST).finish(),
            Self::PeerHello { node, token } => Writer::new(op::PEER_HELLO)
                .str(node)
                .str(token)
                .finish_ref(),
            Self::PeerLease { id } => Writer::new(op::PEER_LEASE).u64(id.0).finish_ref(),
            Self::PeerRelease { id } => Writer::new(op::PEER_RELEASE).u64(id.0).finish_ref(),
            Self::PeerList => Writer::new(op::PEER_LIST).finish(),
        }
    }

    /// Decodes a whole frame.
    pub fn decode(frame: &[u8]) -> Result<Self, WireError> {
        let (header, payload) = split(frame)?;
        let mut r = Reader(payload);
        let request = match header.op {
            op::HELLO => Self::Hello {
                pid: r.u32()?,
                client: r.u64()?,
                backend: WireBackend::from_u8(r.u8()?)?,
            },
            op::CREATE => Self::Create {
                device: r.u32()?,
                bytes: r.u64()?,
            },
            op::OPEN => Self::Open {
                id: ObjectId(r.u64()?),
                timeout_ms: r.u32()?,
            },
            op::SEAL => Self::Seal {
                id: ObjectId(r.u64()?),
            },
            op::RELEASE => Self::Release {
                id: ObjectId(r.u64()?),
            },
            op::DELETE => Self::Delete {
                id: ObjectId(r.u64()?),
            },
            op::STAT => Self::Stat {
                id: ObjectId(r.u64()?),
            },
            op::LIST => Self::List,
            op::STATUS => Self::Status,
            op::STAGE => Self::Stage {
                id: ObjectId(r.u64()?),
                name: r.name()?,
            },
            op::BIND_SET => Self::BindSet {
                name: r.name()?,
                manifest: ObjectId(r.u64()?),
                buffers: r.ids()?,
                tensors: r.u32()?,
            },
            // Versions start at 1: 0 asks for the latest.
            op::LOOKUP_SET => Self::LookupSet {
                name: r.name()?,
                version: Some(r.u64()?).filter(|&v| v != 0),
            },
            op::LIST_SETS => Self::ListSets,
            op::DELETE_SET => Self::DeleteSet { name: r.name()? },
            op::EXPORT => Self::Export {
                id: ObjectId(r.u64()?),
            },
            op::FETCH => Self::Fetch {
                node: r.str()?,
                id: ObjectId(r.u64()?),
                device: r.u32()?,
            },
            op::CLUSTER_STATUS => Self::ClusterStatus,
            op::CLUSTER_LIST => Self::ClusterList,
            op::PEER_HELLO => Self::PeerHello {
                node: r.str()?,
                token: r.str()?,
            },
            op::PEER_LEASE => Self::PeerLease {
                id: ObjectId(r.u64()?),
            },
            op::PEER_RELEASE => Self::PeerRelease {
                id: ObjectId(r.u64()?),
            },
            op::PEER_LIST => Self::PeerList,
            other => return Err(WireError::UnknownOp(other)),
        };
        r.end()?;
        Ok(request)
    }
}

impl Reply {
    /// The whole frame.
    pub fn encode(&self) -> Vec<u8> {
        let reply = |op: u16| Writer::new(op | REPLY_BIT);
        match self {
            Self::Hello {
                pid,
                backend,
                devices,
            } => reply(op::HELLO)
                .u32(*pid)
                .u8(*backend as u8)
                .u32(*devices)
                .finish_ref(),
            Self::Created { id, handle } => reply(op::CREATE).u64(id.0).handle(handle).finish_ref(),
            Self::Opened {
                info,
                handle,
                seal_done,
            } => reply(op::OPEN)
                .info(info)
                .handle(handle)
                .u8(u8::from(*seal_done))
                .finish_ref(),
            Self::Done => reply(op::DONE).finish(),
            Self::Info(info) => reply(op::STAT).info(info).finish_ref(),
            Self::List(infos) => {
                let mut w = reply(op::LIST);
                let listed = &infos[..infos.len().min(MAX_LISTED)];
                w.u32(listed.len() as u32);
                for info in listed {
                    w.info(info);
                }
                w.finish()
            }
            Self::Status(s) => reply(op::STATUS)
                .u32(s.pid)
                .u8(s.backend as u8)
                .u32(s.devices)
                .u32(s.objects)
                .u64(s.bytes)
                .u32(s.leases)
                .u32(s.clients)
                .u32(s.kept)
                .u64(s.kept_bytes)
                .u32(s.sets)
                .u32(s.set_versions)
                .u64(s.set_bytes)
                .finish_ref(),
            Self::Set(set) => reply(op::LOOKUP_SET).set(set).finish_ref(),
            Self::Sets(sets) => {
                let mut w = reply(op::LIST_SETS);
                let listed = &sets[..listed_sets(sets)];
                w.u32(listed.len() as u32);
                for set in listed {
                    w.set(set);
                }
                w.finish()
            }
            Self::Cluster(info) => reply(op::CLUSTER_STATUS).cluster(info).finish_ref(),
            Self::Nodes(nodes) => {
                let mut w = reply(op::CLUSTER_LIST);
                let listed = &nodes[..nodes.len().min(MAX_NODES)];
                w.u32(listed.len() as u32);
                for node in listed {
                    w.node(node);
                }
                w.finish()
            }
            Self::Leased(region) => reply(op::PEER_LEASE).leased(region).finish_ref(),
            Self::Error { code, message } => Writer::new(ERROR_OP)
                .u16(*code as u16)
                .str(message)
                .finish_ref(),
        }
    }

    /// Decodes a whole frame.
    pub fn decode(frame: &[u8]) -> Result<Self, WireError> {
        let (header, payload) = split(frame)?;
        let mut r = Reader(payload);
        let reply = if header.op == ERROR_OP {
            Self::Error {
                code: ErrorCode::from_u16(r.u16()?)?,
                message: r.str()?,
            }
        } else {
            match header.op ^ REPLY_BIT {
                op::HELLO => Self::Hello {
                    pid: r.u32()?,
                    backend: WireBackend::from_u8(r.u8()?)?,
                    devices: r.u32()?,
                },
                op::CREATE => Self::Created {
                    id: ObjectId(r.u64()?),
                    handle: r.handle()?,
                },
                op::OPEN => Self::Opened {
                    info: r.info()?,
                    handle: r.handle()?,
                    seal_done: r.flag("seal done")?,
                },
                op::DONE => Self::Done,
                op::STAT => Self::Info(r.info()?),
                op::LIST => {
                    let count = r.u32()? as usize;
                    if count > MAX_LISTED {
                        return Err(WireError::Malformed("list count"));
                    }
                    let infos = (0..count).map(|_| r.info()).collect::<Result<_, _>>()?;
                    Self::List(infos)
                }
                op::STATUS => Self::Status(DaemonStatus {
                    pid: r.u32()?,
                    backend: WireBackend::from_u8(r.u8()?)?,
                    devices: r.u32()?,
                    objects: r.u32()?,
                    bytes: r.u64()?,
                    leases: r.u32()?,
                    clients: r.u32()?,
                    kept: r.u32()?,
                    kept_bytes: r.u64()?,
                    sets: r.u32()?,
                    set_versions: r.u32()?,
                    set_bytes: r.u64()?,
                }),
                op::LOOKUP_SET => Self::Set(r.set()?),
                op::LIST_SETS => {
                    let count = r.u32()? as usize;
                    if count > MAX_LISTED_SETS {
                        return Err(WireError::Malformed("set list count"));
                    }
                    Self::Sets((0..count).map(|_| r.set()).collect::<Result<_, _>>()?)
                }
                op::CLUSTER_STATUS => Self::Cluster(r.cluster()?),
                op::CLUSTER_LIST => {
                    let count = r.u32()? as usize;
                    if count > MAX_NODES {
                        return Err(WireError::Malformed("node count"));
                    }
                    Self::Nodes((0..count).map(|_| r.node()).collect::<Result<_, _>>()?)
                }
                op::PEER_LEASE => Self::Leased(r.leased()?),
                _ => return Err(WireError::UnknownOp(header.op)),
            }
        };
        r.end()?;
        Ok(reply)
    }

    /// Whether a descriptor rides with this reply.
    pub fn carries_fd(&self) -> bool {
        matches!(
            self,
            Self::Created { handle, .. } | Self::Opened { handle, .. }
                if handle.form == HandleForm::Fd
        )
    }
}

/// How many of `sets`, from the first, one [`Reply::Sets`] carries: at
/// most [`MAX_LISTED_SETS`], and no more than their encoding (as
/// `Writer::set` writes each) fits in [`MAX_PAYLOAD`] after the count.
fn listed_sets(sets: &[SetInfo]) -> usize {
    let mut room = MAX_PAYLOAD as usize - 4;
    sets.iter()
        .take(MAX_LISTED_SETS)
        .take_while(|set| {
            let bytes = 4 + set.name.len() + 8 + 8 + 4 + 8 * set.buffers.len() + 4 + 8;
            room = match room.checked_sub(bytes) {
                Some(left) => left,
                None => return false,
            };
            true
        })
        .count()
}

impl Writer {
    /// `finish` for a chain of `&mut` calls.
    fn finish_ref(&mut self) -> Vec<u8> {
        core::mem::take(self).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_id_honours_width_and_alignment() {
        assert_eq!(
            format!("{:>6}|{:<4}|{}", ObjectId(42), ObjectId(7), ObjectId(9)),
            "    42|7   |9"
        );
    }

    fn id() -> impl Strategy<Value = ObjectId> {
        any::<u64>().prop_map(ObjectId)
    }

    fn backend() -> impl Strategy<Value = WireBackend> {
        prop_oneof![
            Just(WireBackend::Inspect),
            Just(WireBackend::Host),
            Just(WireBackend::Cuda),
            Just(WireBackend::Hip)
        ]
    }

    fn request() -> impl Strategy<Value = Request> {
        prop_oneof![
            (any::<u32>(), any::<u64>(), backend()).prop_map(|(pid, client, backend)| {
                Request::Hello {
                    pid,
                    client,
                    backend,
                }
            }),
            (any::<u32>(), any::<u64>())
                .prop_map(|(device, bytes)| Request::Create { device, bytes }),
            (id(), any::<u32>()).prop_map(|(id, timeout_ms)| Request::Open { id, timeout_ms }),
            id().prop_map(|id| Request::Seal { id }),
            id().prop_map(|id| Request::Release { id }),
            id().prop_map(|id| Request::Delete { id }),
            id().prop_map(|id| Request::Stat { id }),
            Just(Request::List),
            Just(Request::Status),
            (id(), "[ -~]{1,40}").prop_map(|(id, name)| Request::Stage { id, name }),
            (
                "[ -~]{1,40}",
                id(),
                proptest::collection::vec(id(), 0..8),
                any::<u32>()
            )
                .prop_map(|(name, manifest, buffers, tensors)| Request::BindSet {
                    name,
                    manifest,
                    buffers,
                    tensors
                }),
            ("[ -~]{1,40}", proptest::option::of(1..u64::MAX))
                .prop_map(|(name, version)| Request::LookupSet { name, version }),
            Just(Request::ListSets),
            "[ -~]{1,40}".prop_map(|name| Request::DeleteSet { name }),
            id().prop_map(|id| Request::Export { id }),
            ("[a-z0-9.-]{1,20}", id(), any::<u32>())
                .prop_map(|(node, id, device)| Request::Fetch { node, id, device }),
            Just(Request::ClusterStatus),
            Just(Request::ClusterList),
            ("[a-z0-9]{1,20}", "[ -~]{0,64}")
                .prop_map(|(node, token)| Request::PeerHello { node, token }),
            id().prop_map(|id| Request::PeerLease { id }),
            id().prop_map(|id| Request::PeerRelease { id }),
            Just(Request::PeerList),
        ]
    }

    fn set() -> impl Strategy<Value = SetInfo> {
        (
            "[ -~]{1,40}",
            1..u64::MAX,
            id(),
            proptest::collection::vec(id(), 0..8),
            any::<u32>(),
            any::<u64>(),
        )
            .prop_map(
                |(name, version, manifest, buffers, tensors, bytes)| SetInfo {
                    name,
                    version,
                    manifest,
                    buffers,
                    tensors,
                    bytes,
                },
            )
    }

    fn info() -> impl Strategy<Value = ObjectInfo> {
        (
            id(),
            any::<u32>(),
            1..u64::MAX / 2,
            any::<bool>(),
            any::<bool>(),
            any::<u32>(),
            any::<bool>(),
        )
            .prop_map(
                |(id, device, len, sealed, deleted, leases, exported)| ObjectInfo {
                    id,
                    device,
                    len,
                    size: len * 2,
                    sealed,
                    deleted,
                    leases,
                    exported,
                },
            )
    }

    fn handle() -> impl Strategy<Value = BufferHandle> {
        let form = prop_oneof![
            Just(HandleForm::Fd),
            (any::<[u8; 32]>(), any::<u64>()).prop_map(|(half, offset)| {
                let mut handle = [0; 64];
                handle[..32].copy_from_slice(&half);
                HandleForm::Ipc { handle, offset }
            })
        ];
        (form, 1..u64::MAX / 2, any::<u64>(), any::<[u8; 32]>()).prop_map(
            |(form, len, allocation, half)| {
                let mut event = [7; 64];
                event[32..].copy_from_slice(&half);
                BufferHandle {
                    form,
                    size: len + 4096,
                    len,
                    allocation,
                    event,
                }
            },
        )
    }

    fn reply() -> impl Strategy<Value = Reply> {
        prop_oneof![
            (any::<u32>(), backend(), any::<u32>()).prop_map(|(pid, backend, devices)| {
                Reply::Hello {
                    pid,
                    backend,
                    devices,
                }
            }),
            (id(), handle()).prop_map(|(id, handle)| Reply::Created { id, handle }),
            (info(), handle(), any::<bool>()).prop_map(|(info, handle, seal_done)| {
                Reply::Opened {
                    info,
                    handle,
                    seal_done,
                }
            }),
            Just(Reply::Done),
            info().prop_map(Reply::Info),
            proptest::collection::vec(info(), 0..20).prop_map(Reply::List),
            (any::<u32>(), any::<u64>()).prop_map(|(n, bytes)| Reply::Status(DaemonStatus {
                pid: n,
                backend: WireBackend::Cuda,
                devices: 2,
                objects: n / 2,
                bytes,
                leases: n / 3,
                clients: 1,
                kept: n / 5,
                kept_bytes: bytes / 2,
                sets: n / 7,
                set_versions: n / 6,
                set_bytes: bytes / 3,
            })),
            set().prop_map(Reply::Set),
            proptest::collection::vec(set(), 0..6).prop_map(Reply::Sets),
            ("[a-z]{1,9}", "[ -~]{0,30}", any::<bool>(), any::<u64>()).prop_map(
                |(node, error, registered, fetches)| Reply::Cluster(ClusterInfo {
                    node,
                    listen: "127.0.0.1:7300".into(),
                    etcd: "http://127.0.0.1:2379".into(),
                    registered,
                    error,
                    exported: 3,
                    fetches,
                    fetched_bytes: fetches / 2,
                    nixl: "/lib/libnixl_capi.so".into(),
                })
            ),
            proptest::collection::vec(
                (
                    "[a-z]{1,9}",
                    proptest::collection::vec(info(), 0..4),
                    "[ -~]{0,20}"
                ),
                0..4
            )
            .prop_map(|nodes| Reply::Nodes(
                nodes
                    .into_iter()
                    .map(|(node, exports, error)| NodeInfo {
                        node,
                        address: "127.0.0.2:7300".into(),
                        exports,
                        error,
                    })
                    .collect()
            )),
            (
                1..u64::MAX,
                any::<u64>(),
                any::<bool>(),
                proptest::collection::vec(any::<u8>(), 0..5000)
            )
                .prop_map(|(len, addr, gpu, metadata)| Reply::Leased(LeasedRegion {
                    len,
                    addr,
                    device: 3,
                    gpu,
                    generation: len / 3,
                    metadata,
                })),
            ("[ -~]{0,80}", 1u16..=23).prop_map(|(message, code)| Reply::Error {
                code: ErrorCode::from_u16(code).unwrap(),
                message,
            }),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip(request in request()) {
            prop_assert_eq!(Request::decode(&request.encode()), Ok(request));
        }

        #[test]
        fn replies_round_trip(reply in reply()) {
            prop_assert_eq!(Reply::decode(&reply.encode()), Ok(reply));
        }

        /// Every proper prefix of a frame is refused, as is any extra byte.
        #[test]
        fn cut_or_padded_frames_are_refused(request in request(), reply in reply(), extra in any::<u8>()) {
            for frame in [request.encode(), reply.encode()] {
                for cut in 0..frame.len() {
                    prop_assert!(Request::decode(&frame[..cut]).is_err());
                    prop_assert!(Reply::decode(&frame[..cut]).is_err());
                }
                let mut padded = frame.clone();
                padded.push(extra);
                prop_assert!(Request::decode(&padded).is_err());
                prop_assert!(Reply::decode(&padded).is_err());
            }
        }

        /// Garbage never panics, whatever it decodes to.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Request::decode(&bytes);
            let _ = Reply::decode(&bytes);
        }

        /// A valid header over garbage payload never panics either.
        #[test]
        fn garbage_payloads_never_panic(op in any::<u16>(), payload in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut frame = Writer::new(op);
            frame.0.extend_from_slice(&payload);
            let frame = frame.finish();
            let _ = Request::decode(&frame);
            let _ = Reply::decode(&frame);
        }
    }

    #[test]
    fn set_names_are_checked() {
        assert!(check_set_name("llama-7b/v2 (fp16)").is_ok());
        assert!(check_set_name("").is_err());
        assert!(check_set_name(&"x".repeat(MAX_SET_NAME)).is_ok());
        assert!(check_set_name(&"x".repeat(MAX_SET_NAME + 1)).is_err());
        assert!(check_set_name("a\nb").is_err());
        // A name the wire cannot carry is malformed, not cut.
        let long = Request::DeleteSet {
            name: "x".repeat(MAX_SET_NAME + 1),
        };
        assert_eq!(
            Request::decode(&long.encode()),
            Err(WireError::Malformed("set name"))
        );
    }

    /// A listing of the largest versions is cut to what fits one frame, and
    /// what it carries decodes whole.
    #[test]
    fn a_listing_of_large_sets_fits_one_frame() {
        let largest = SetInfo {
            name: "x".repeat(MAX_SET_NAME),
            version: 1,
            manifest: ObjectId(1),
            buffers: (0..MAX_SET_BUFFERS as u64).map(ObjectId).collect(),
            tensors: 1,
            bytes: 1,
        };
        let sets = vec![largest; MAX_LISTED_SETS];
        let frame = Reply::Sets(sets.clone()).encode();
        assert!(frame.len() <= HEADER_BYTES + MAX_PAYLOAD as usize);
        let Ok(Reply::Sets(listed)) = Reply::decode(&frame) else {
            panic!("a listing decodes");
        };
        assert!(!listed.is_empty() && listed.len() < sets.len());
        assert_eq!(listed[..], sets[..listed.len()]);
        assert_eq!(listed_sets(&sets[..3]), 3);
    }

    #[test]
    fn headers_are_checked() {
        let frame = Request::Status.encode();
        let mut bad = frame.clone();
        bad[0] = b'X';
        assert_eq!(Request::decode(&bad), Err(WireError::BadMagic));
        let mut bad = frame.clone();
        bad[4] = 9;
        assert_eq!(Request::decode(&bad), Err(WireError::BadVersion(9)));
        let mut bad = frame.clone();
        bad[8..12].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
        assert_eq!(
            Request::decode(&bad),
            Err(WireError::TooLong(MAX_PAYLOAD + 1))
        );
        // A reply is not a request.
        assert!(matches!(
            Request::decode(&Reply::Done.encode()),
            Err(WireError::UnknownOp(_))
        ));
    }
}
