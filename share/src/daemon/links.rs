//! The links this node keeps open to the nodes it fetched from, each with the node record it
//! was opened from: a fetch that finds one skips the etcd look-up, the connect and the
//! hello.
//!
//! A link is kept only between fetches, holding no lease (its release sent). A record is
//! trusted only with its link: the link still open says that incarnation of the node lives,
//! and a node's address and agent do not change within one. A link whose node died or
//! restarted is found out by its next request, and the fetch starts over from etcd; a new
//! link is always opened from a record just read.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::cluster::membership::NodeRecord;
use crate::cluster::peer_link::PeerLink;
use crate::transport;

use super::lock;

/// Links kept per node: as many as fetches from it ran at once, up to this.
const KEPT_PER_NODE: usize = 4;

/// A link to a node, and the record it was opened from.
pub(super) struct NodeLink {
    pub(super) link: PeerLink,
    pub(super) record: NodeRecord,
}

/// The links kept between fetches, by node.
#[derive(Default)]
pub(super) struct KeptLinks {
    idle: Mutex<HashMap<String, Vec<NodeLink>>>,
}

impl KeptLinks {
    /// A kept link to `node` whose other end has not hung up, if there is one (those that
    /// did are closed).
    pub(super) fn take(&self, node: &str) -> Option<NodeLink> {
        let mut idle = lock(&self.idle);
        let links = idle.get_mut(node)?;
        while let Some(kept) = links.pop() {
            if !transport::peer_hung_up(kept.link.stream()) {
                return Some(kept);
            }
        }
        idle.remove(node);
        None
    }

    /// Keeps `link` for the next fetch from its node. Links opened from another record of
    /// that node (an earlier incarnation) are closed; beyond [`KEPT_PER_NODE`], this one is.
    pub(super) fn keep(&self, link: NodeLink) {
        let mut idle = lock(&self.idle);
        let links = idle.entry(link.record.node.clone()).or_default();
        links.retain(|kept| kept.record == link.record);
        if links.len() < KEPT_PER_NODE {
            links.push(link);
        }
    }

    /// Closes the links kept to `node` (it went away).
    pub(super) fn forget(&self, node: &str) {
        lock(&self.idle).remove(node);
    }

    /// Closes every kept link (this node leaves the cluster).
    pub(super) fn clear(&self) {
        lock(&self.idle).clear();
    }
}
