//! `tandem share`'s cluster side: the `[cluster]` section of `tandem share serve --config`,
//! `tandem share export`, `tandem share fetch`, `tandem share ls --cluster` and the cluster's
//! lines of `tandem share status`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tandem_share::{ClusterConfig, ClusterInfo, Inspector, NodeInfo, ObjectId};

use crate::progress::Progress;

/// `[cluster]` of `tandem share serve --config FILE` (docs/cluster.md): makes the daemon a
/// node of a cluster.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClusterSection {
    etcd: Vec<String>,
    node: String,
    listen: SocketAddr,
    token_file: PathBuf,
    lease_ttl_s: Option<u64>,
    fetch_timeout_s: Option<u64>,
    nixl_library: Option<PathBuf>,
}

/// The cluster `c` describes.
pub(crate) fn cluster_config(c: ClusterSection) -> Result<ClusterConfig, String> {
    if c.lease_ttl_s == Some(0) || c.fetch_timeout_s == Some(0) {
        return Err("`cluster`: lease_ttl_s and fetch_timeout_s must be at least 1".into());
    }
    Ok(ClusterConfig {
        etcd: c.etcd,
        node: c.node,
        listen: c.listen,
        token_file: c.token_file,
        lease_ttl: c
            .lease_ttl_s
            .map_or(ClusterConfig::DEFAULT_LEASE_TTL, Duration::from_secs),
        nixl_library: c.nixl_library,
        fetch_timeout: c
            .fetch_timeout_s
            .map_or(ClusterConfig::DEFAULT_FETCH_TIMEOUT, Duration::from_secs),
    })
}

/// `tandem share fetch NODE/ID`: the local copy's id on stdout; a bar on a terminal while
/// it takes over a second.
pub(crate) fn fetch(inspector: &Inspector, remote: &str, device: u32) -> Result<(), String> {
    let progress = Progress::new(&format!("fetching {remote}"), None, false);
    let info = std::thread::scope(|scope| {
        let fetching = scope.spawn(|| inspector.fetch(remote, device));
        while !fetching.is_finished() {
            progress.tick();
            std::thread::sleep(Duration::from_millis(100));
        }
        fetching.join()
    })
    .map_err(|_| "the fetch panicked".to_string())?
    .map_err(|e| e.to_string())?;
    drop(progress);
    println!("{}", info.id);
    Ok(())
}

/// `tandem share export ID`.
pub(crate) fn export(inspector: &Inspector, id: u64) -> Result<(), String> {
    inspector.export(ObjectId(id)).map_err(|e| e.to_string())
}

/// One node, as `tandem share ls --cluster` prints it.
#[derive(Serialize)]
struct NodeRow {
    node: String,
    address: String,
    /// Its exported buffers: id and bytes.
    exports: Vec<(u64, u64)>,
    /// Why it did not answer, if it did not.
    error: String,
}

/// `tandem share ls --cluster`.
pub(crate) fn ls(inspector: &Inspector, json: bool) -> Result<(), String> {
    let nodes: Vec<NodeRow> = inspector
        .cluster_nodes()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|n: NodeInfo| NodeRow {
            node: n.node,
            address: n.address,
            exports: n.exports.iter().map(|o| (o.id.0, o.len)).collect(),
            error: n.error,
        })
        .collect();
    if json {
        let text = serde_json::to_string_pretty(&nodes).map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(());
    }
    println!("{:<24} {:<22} exported (id:bytes)", "node", "address");
    for n in nodes {
        let exports: Vec<String> = n
            .exports
            .iter()
            .map(|(id, bytes)| format!("{id}:{bytes}"))
            .collect();
        let what = if n.error.is_empty() {
            exports.join(" ")
        } else {
            format!("(no answer: {})", n.error)
        };
        println!("{:<24} {:<22} {what}", n.node, n.address);
    }
    Ok(())
}

/// The cluster's state, as `tandem share status` shows it.
#[derive(Serialize)]
pub(crate) struct ClusterRow {
    node: String,
    listen: String,
    etcd: String,
    registered: bool,
    error: String,
    exported: u32,
    fetches: u64,
    fetched_bytes: u64,
    nixl: String,
}

/// The daemon's cluster state, `None` when it is in no cluster.
pub(crate) fn status(inspector: &Inspector) -> Result<Option<ClusterRow>, String> {
    match inspector.cluster_status() {
        Ok(c) => Ok(Some(row(c))),
        Err(tandem_share::ShareError::NoCluster(_)) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

fn row(c: ClusterInfo) -> ClusterRow {
    ClusterRow {
        node: c.node,
        listen: c.listen,
        etcd: c.etcd,
        registered: c.registered,
        error: c.error,
        exported: c.exported,
        fetches: c.fetches,
        fetched_bytes: c.fetched_bytes,
        nixl: c.nixl,
    }
}

/// The cluster's lines of `tandem share status`.
pub(crate) fn print_status(c: &ClusterRow) {
    let registered = if c.registered {
        "registered".to_owned()
    } else {
        format!("NOT registered ({})", c.error)
    };
    println!(
        "cluster   node {} on {}, etcd {}: {registered}",
        c.node, c.listen, c.etcd
    );
    println!(
        "exported  {}; fetched {} ({} bytes); NIXL {}",
        c.exported, c.fetches, c.fetched_bytes, c.nixl
    );
}
