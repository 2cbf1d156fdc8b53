//! Past one node: what a daemon needs to be one node of a cluster.
//!
//! `config` is the `[cluster]` section and the `NODE/ID` names; `etcd` speaks to etcd
//! through its JSON gateway; `membership` keeps this node's record there under a lease and
//! looks up the others'; `peer_link` carries frames between daemons over TCP. The daemon's
//! side of it all (its listener for other nodes, export, fetch) is in `daemon`.

mod config;
pub(crate) mod etcd;
pub(crate) mod membership;
pub(crate) mod peer_link;

pub use config::{check_node_name, ClusterConfig, RemoteId, MAX_NODE_NAME};
