//! The daemon as a node of a cluster: its NIXL agent, its record in etcd, its listener for
//! other nodes, the token they must show, the remote agents and regions it has loaded, and
//! the links to other nodes it keeps.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tandem_nixl::{Agent, Nixl};

use crate::cluster::etcd::Etcd;
use crate::cluster::membership::{Membership, NodeRecord};
use crate::cluster::{check_node_name, ClusterConfig};
use crate::error::ShareError;
use crate::wire::{ClusterInfo, LeasedRegion};

use super::links::KeptLinks;
use super::lock;

/// Regions' metadata remembered as loaded per remote agent; past it, the set starts over
/// (reloading one costs a load, not a failure).
const LOADED_REGIONS: usize = 1024;

/// What a remote agent was loaded from: its connection metadata, and the owner's count of
/// deregistrations then (past it, regions this agent knows of that node may be stale).
struct LoadedRemote {
    connection: Vec<u8>,
    generation: u64,
    /// The regions' metadata loaded since: each still describes a registration of that
    /// node's agent (it deregistered nothing since), so loading it again is skipped.
    regions: HashSet<Vec<u8>>,
}

/// A daemon's cluster side (see the module docs).
pub(super) struct ClusterNode {
    pub(super) config: ClusterConfig,
    pub(super) token: String,
    pub(super) etcd: Arc<Etcd>,
    pub(super) agent: Agent,
    nixl: String,
    /// Taken at stop, which leaves the cluster.
    membership: Mutex<Option<Membership>>,
    pub(super) listener: Arc<TcpListener>,
    /// The other nodes' agents this one has loaded, by node.
    remotes: Mutex<HashMap<String, LoadedRemote>>,
    /// Links to other nodes, open between fetches.
    pub(super) links: KeptLinks,
    /// Regions of this node's agent deregistered so far (told to fetching nodes).
    pub(super) deregistered: Arc<AtomicU64>,
    pub(super) fetches: AtomicU64,
    pub(super) fetched_bytes: AtomicU64,
}

/// The cluster's token, from a file only its owner may read.
fn read_token(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} has mode {:o}: a token file must be readable by its owner only (chmod 600)",
            path.display(),
            meta.mode() & 0o777
        ));
    }
    let token = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let token = token.trim();
    if token.is_empty() || token.len() > 4096 || token.contains(char::is_control) {
        return Err(format!(
            "{}: the token must be one line of 1 to 4096 printable bytes",
            path.display()
        ));
    }
    Ok(token.to_owned())
}

/// Whether two tokens are equal, in a time that does not say where they differ.
pub(super) fn tokens_match(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    let mut differ = u8::from(a.len() != b.len());
    for (i, &byte) in b.iter().enumerate() {
        differ |= byte ^ a.get(i).copied().unwrap_or(0);
    }
    differ == 0
}

impl ClusterNode {
    /// Joins the cluster `config` describes: loads NIXL and makes this node's agent, binds
    /// the listener for other nodes, and registers in etcd. Every failure says which step.
    pub(super) fn join(config: ClusterConfig) -> Result<Self, ShareError> {
        let cannot = |why: String| ShareError::CannotServe(format!("cluster: {why}"));
        check_node_name(&config.node).map_err(cannot)?;
        let token = read_token(&config.token_file).map_err(cannot)?;
        let nixl = Nixl::load(config.nixl_library.as_deref()).map_err(|e| cannot(e.to_string()))?;
        let nixl_path = nixl.path().display().to_string();
        let agent = Agent::new(nixl, &config.node).map_err(|e| cannot(e.to_string()))?;
        let connection = agent
            .connection_metadata()
            .map_err(|e| cannot(e.to_string()))?;
        let listener = TcpListener::bind(config.listen)
            .map_err(|e| cannot(format!("listening on {}: {e}", config.listen)))?;
        let address = listener
            .local_addr()
            .map_err(|e| cannot(e.to_string()))?
            .to_string();
        let etcd = Arc::new(Etcd::new(&config.etcd).map_err(cannot)?);
        let record = NodeRecord {
            node: config.node.clone(),
            address,
            agent: connection,
        };
        let membership = Membership::join(Arc::clone(&etcd), record, config.lease_ttl)
            .map_err(|e| cannot(e.to_string()))?;
        tracing::info!(
            "node {} joined the cluster (etcd {}), answering other nodes on {}, NIXL from {nixl_path}",
            config.node,
            config.etcd.join(","),
            config.listen
        );
        Ok(Self {
            config,
            token,
            etcd,
            agent,
            nixl: nixl_path,
            membership: Mutex::new(Some(membership)),
            listener: Arc::new(listener),
            remotes: Mutex::new(HashMap::new()),
            links: KeptLinks::default(),
            deregistered: Arc::new(AtomicU64::new(0)),
            fetches: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
        })
    }

    /// Leaves etcd (deregisters) and closes the links kept to other nodes; the listener is
    /// shut by the daemon's stop.
    pub(super) fn leave(&self) {
        self.links.clear();
        if let Some(membership) = lock(&self.membership).take() {
            membership.leave();
            tracing::info!("node {} left the cluster", self.config.node);
        }
    }

    /// Its state, `exported` buffers counted by the caller.
    pub(super) fn info(&self, exported: u32) -> ClusterInfo {
        let state = lock(&self.membership)
            .as_ref()
            .map(Membership::state)
            .unwrap_or_default();
        ClusterInfo {
            node: self.config.node.clone(),
            listen: self
                .listener
                .local_addr()
                .map_or_else(|_| self.config.listen.to_string(), |a| a.to_string()),
            etcd: self.config.etcd.join(","),
            registered: state.lease.is_some() && state.error.is_none(),
            error: state.error.unwrap_or_default(),
            exported,
            // Relaxed: counters, read for show.
            fetches: self.fetches.load(Ordering::Relaxed),
            fetched_bytes: self.fetched_bytes.load(Ordering::Relaxed),
            nixl: self.nixl.clone(),
        }
    }

    /// Makes this node's agent able to read `region` of node `node` (whose record's agent
    /// metadata is `connection`): loads the node's agent if it is new, or changed (restarted),
    /// or deregistered regions since it was loaded, then the region's metadata unless it was
    /// loaded since.
    pub(super) fn prepare_remote(
        &self,
        node: &str,
        connection: &[u8],
        region: &LeasedRegion,
    ) -> Result<(), tandem_nixl::NixlError> {
        let mut remotes = lock(&self.remotes);
        let stale = remotes.get(node).is_some_and(|loaded| {
            loaded.connection != connection || loaded.generation != region.generation
        });
        if stale {
            remotes.remove(node);
            // Its old regions may name memory now registered anew.
            let _ = self.agent.forget_remote(node);
        }
        let loaded = match remotes.entry(node.to_owned()) {
            Entry::Occupied(loaded) => loaded.into_mut(),
            Entry::Vacant(entry) => {
                self.agent.load_remote(connection)?;
                entry.insert(LoadedRemote {
                    connection: connection.to_vec(),
                    generation: region.generation,
                    regions: HashSet::new(),
                })
            }
        };
        if loaded.regions.contains(&region.metadata) {
            return Ok(());
        }
        if let Err(e) = self.agent.load_remote(&region.metadata) {
            // NIXL dropped what it knew of the node with the failed load.
            remotes.remove(node);
            let _ = self.agent.forget_remote(node);
            return Err(e);
        }
        if loaded.regions.len() >= LOADED_REGIONS {
            loaded.regions.clear();
        }
        loaded.regions.insert(region.metadata.clone());
        Ok(())
    }

    /// Forgets node `node`'s agent and closes the links kept to it (it went away mid-fetch:
    /// its next incarnation is another).
    pub(super) fn forget(&self, node: &str) {
        self.links.forget(node);
        if lock(&self.remotes).remove(node).is_some() {
            let _ = self.agent.forget_remote(node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(tokens_match("secret", "secret"));
        assert!(!tokens_match("secreT", "secret"));
        assert!(!tokens_match("secret2", "secret"));
        assert!(!tokens_match("", "secret"));
    }

    #[test]
    fn a_token_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abc\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_token(&path).unwrap_err().contains("chmod 600"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token(&path).unwrap(), "abc");
    }
}
