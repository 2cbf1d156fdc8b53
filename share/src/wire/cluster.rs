//! The messages of a cluster: a daemon's place in it, its nodes, and a
//! leased buffer's region as another node reads it.

use super::{ObjectInfo, Reader, WireError, Writer, MAX_PAYLOAD};

/// Most nodes one [`super::Reply::Nodes`] carries.
pub const MAX_NODES: usize = 64;
/// Most exported buffers listed per node in a [`super::Reply::Nodes`] (all
/// nodes' fit [`MAX_PAYLOAD`]).
const MAX_NODE_EXPORTS: usize = 256;

/// A daemon's place in its cluster.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ClusterInfo {
    /// Its node name.
    pub node: String,
    /// Where it answers other nodes.
    pub listen: String,
    /// The etcd endpoints it registers with.
    pub etcd: String,
    /// Whether its record is in etcd now (its last keep-alive was answered).
    pub registered: bool,
    /// What went wrong with etcd last, if its record is not there.
    pub error: String,
    /// Buffers it exports.
    pub exported: u32,
    /// Fetches it completed, and bytes they brought.
    pub fetches: u64,
    /// Bytes those fetches brought.
    pub fetched_bytes: u64,
    /// The NIXL library it loaded.
    pub nixl: String,
}

/// One node of the cluster, as its record in etcd and its answer say.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NodeInfo {
    /// Its name.
    pub node: String,
    /// Where it answers other nodes.
    pub address: String,
    /// The buffers it exports (empty if it did not answer: see `error`).
    pub exports: Vec<ObjectInfo>,
    /// Why it did not answer, if it did not.
    pub error: String,
}

/// A buffer another node leased: where to read it, and what its NIXL
/// agent needs to (its part of the agent's metadata).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LeasedRegion {
    /// Bytes to read.
    pub len: u64,
    /// Its address in the owning daemon.
    pub addr: u64,
    /// NIXL's device of it (the GPU's ordinal, or a tag for host memory).
    pub device: u64,
    /// Whether it is GPU memory.
    pub gpu: bool,
    /// How many regions the owning agent had deregistered when it answered: a reader
    /// that loaded the owner's regions at another count forgets them first (a region
    /// freed since may share an address with this one).
    pub generation: u64,
    /// The owning agent's metadata of the region.
    pub metadata: Vec<u8>,
}

impl Writer {
    /// Bytes of any length the frame holds: a `u32` length and the bytes.
    pub(super) fn blob(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    pub(super) fn cluster(&mut self, c: &ClusterInfo) -> &mut Self {
        self.str(&c.node)
            .str(&c.listen)
            .str(&c.etcd)
            .u8(u8::from(c.registered))
            .str(&c.error)
            .u32(c.exported)
            .u64(c.fetches)
            .u64(c.fetched_bytes)
            .str(&c.nixl)
    }
    pub(super) fn node(&mut self, n: &NodeInfo) -> &mut Self {
        self.str(&n.node).str(&n.address);
        let listed = &n.exports[..n.exports.len().min(MAX_NODE_EXPORTS)];
        self.u32(listed.len() as u32);
        for info in listed {
            self.info(info);
        }
        self.str(&n.error)
    }
    pub(super) fn leased(&mut self, l: &LeasedRegion) -> &mut Self {
        self.u64(l.len)
            .u64(l.addr)
            .u64(l.device)
            .u8(u8::from(l.gpu))
            .u64(l.generation)
            .blob(&l.metadata)
    }
}

impl Reader<'_> {
    pub(super) fn blob(&mut self) -> Result<Vec<u8>, WireError> {
        let len = self.u32()?;
        if len > MAX_PAYLOAD {
            return Err(WireError::Malformed("blob length"));
        }
        Ok(self.take(len as usize)?.to_vec())
    }
    pub(super) fn cluster(&mut self) -> Result<ClusterInfo, WireError> {
        Ok(ClusterInfo {
            node: self.str()?,
            listen: self.str()?,
            etcd: self.str()?,
            registered: self.flag("registered")?,
            error: self.str()?,
            exported: self.u32()?,
            fetches: self.u64()?,
            fetched_bytes: self.u64()?,
            nixl: self.str()?,
        })
    }
    pub(super) fn node(&mut self) -> Result<NodeInfo, WireError> {
        let node = self.str()?;
        let address = self.str()?;
        let count = self.u32()? as usize;
        if count > MAX_NODE_EXPORTS {
            return Err(WireError::Malformed("export count"));
        }
        let exports = (0..count).map(|_| self.info()).collect::<Result<_, _>>()?;
        Ok(NodeInfo {
            node,
            address,
            exports,
            error: self.str()?,
        })
    }
    pub(super) fn leased(&mut self) -> Result<LeasedRegion, WireError> {
        let len = self.u64()?;
        if len == 0 {
            return Err(WireError::Malformed("leased length"));
        }
        Ok(LeasedRegion {
            len,
            addr: self.u64()?,
            device: self.u64()?,
            gpu: self.flag("gpu")?,
            generation: self.u64()?,
            metadata: self.blob()?,
        })
    }
}
