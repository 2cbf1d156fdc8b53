//! A daemon's place in a cluster (`[cluster]` in `tandem share serve --config`), and the
//! names of buffers on other nodes (`NODE/ID`).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::wire::ObjectId;

/// Longest node name, in bytes (it is an etcd key's last part and a NIXL agent's name).
pub const MAX_NODE_NAME: usize = 63;

/// How a daemon joins a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// etcd's client URLs (`http://host:port`), tried in order.
    pub etcd: Vec<String>,
    /// This node's name: unique in the cluster; the `NODE` of `NODE/ID`.
    pub node: String,
    /// Where this daemon answers other nodes (their leases on its exported buffers): an
    /// address the other nodes reach.
    pub listen: SocketAddr,
    /// A file holding the cluster's shared token (readable by the daemon's user only):
    /// every request from another node must carry it.
    pub token_file: PathBuf,
    /// How long the node's record outlives the daemon's last keep-alive: a node that died
    /// disappears from etcd within this.
    pub lease_ttl: Duration,
    /// NIXL's `libnixl_capi.so`; `None`: found as `tandem_nixl::find_library` says.
    pub nixl_library: Option<PathBuf>,
    /// Longest a fetch may take before it is given up.
    pub fetch_timeout: Duration,
}

impl ClusterConfig {
    /// The lease's time to live unless configured.
    pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
    /// A fetch's deadline unless configured.
    pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(600);
}

/// Why `name` cannot name a node: empty, longer than [`MAX_NODE_NAME`], or with a byte
/// other than an ASCII letter, digit, `-`, `_` or `.`.
pub fn check_node_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NODE_NAME {
        return Err(format!(
            "node name {name:?} must be 1 to {MAX_NODE_NAME} bytes"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "node name {name:?} has {bad:?}: letters, digits, '-', '_' and '.' only"
        ));
    }
    Ok(())
}

/// A buffer on a node of the cluster: `NODE/ID`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteId {
    /// The node.
    pub node: String,
    /// The buffer's id on that node.
    pub id: ObjectId,
}

impl FromStr for RemoteId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (node, id) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not NODE/ID"))?;
        check_node_name(node)?;
        let id = id
            .parse::<u64>()
            .map_err(|_| format!("{s:?}: the id {id:?} is not a number"))?;
        Ok(Self {
            node: node.to_owned(),
            id: ObjectId(id),
        })
    }
}

impl fmt::Display for RemoteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.node, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_id_is_a_node_and_a_number() {
        let id: RemoteId = "node-a.1/42".parse().unwrap();
        assert_eq!(id.node, "node-a.1");
        assert_eq!(id.id, ObjectId(42));
        assert_eq!(id.to_string(), "node-a.1/42");
        for bad in ["42", "/42", "a/", "a/x", "a b/1", "a/1/2"] {
            assert!(bad.parse::<RemoteId>().is_err(), "{bad}");
        }
        let long = format!("{}/1", "n".repeat(MAX_NODE_NAME + 1));
        assert!(long.parse::<RemoteId>().is_err());
    }
}
