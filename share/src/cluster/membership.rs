//! A node's record in etcd, kept alive under a lease, and the look-ups of other nodes'.
//!
//! A node is the key `/tandem/share/nodes/<name>`, its value a JSON object: the address its
//! daemon answers other nodes on, and its NIXL agent's connection metadata (base64). The key
//! lives under a lease of [`ClusterConfig::lease_ttl`](super::ClusterConfig) that a thread
//! renews three times per TTL: a node that dies (or stops answering for a TTL) disappears
//! by itself, and one whose lease expired while it lived (a pause, an etcd away for long)
//! registers again at its next renewal. A clean stop deletes the key and revokes the lease.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Value};

use super::etcd::{Etcd, EtcdError};

/// Where the nodes' records live in etcd.
pub(crate) const NODES_PREFIX: &str = "/tandem/share/nodes/";

/// What a node publishes about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeRecord {
    /// Its name.
    pub(crate) node: String,
    /// Where its daemon answers other nodes (`host:port`).
    pub(crate) address: String,
    /// Its NIXL agent's connection metadata.
    pub(crate) agent: Vec<u8>,
}

impl NodeRecord {
    fn encode(&self) -> Vec<u8> {
        json!({
            "node": self.node,
            "address": self.address,
            "agent": BASE64.encode(&self.agent),
        })
        .to_string()
        .into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let value: Value = serde_json::from_slice(bytes).ok()?;
        let field = |name: &str| value.get(name).and_then(Value::as_str).map(String::from);
        Some(Self {
            node: field("node")?,
            address: field("address")?,
            agent: BASE64.decode(field("agent")?).ok()?,
        })
    }

    fn key(node: &str) -> String {
        format!("{NODES_PREFIX}{node}")
    }
}

/// The record of node `node`, if it is in the cluster now.
pub(crate) fn lookup(etcd: &Etcd, node: &str) -> Result<Option<NodeRecord>, EtcdError> {
    Ok(etcd
        .get(&NodeRecord::key(node))?
        .and_then(|bytes| NodeRecord::decode(&bytes)))
}

/// Every node's record, by name.
pub(crate) fn nodes(etcd: &Etcd) -> Result<Vec<NodeRecord>, EtcdError> {
    Ok(etcd
        .get_prefix(NODES_PREFIX)?
        .into_iter()
        .filter_map(|(_, bytes)| NodeRecord::decode(&bytes))
        .collect())
}

/// Whether the record is in etcd, and what went wrong last if not.
#[derive(Clone, Debug, Default)]
pub(crate) struct MemberState {
    pub(crate) lease: Option<i64>,
    pub(crate) error: Option<String>,
}

struct Shared {
    etcd: Arc<Etcd>,
    record: NodeRecord,
    ttl: Duration,
    state: Mutex<MemberState>,
    /// Raised at leave; the renewals wait on it.
    stop: Mutex<bool>,
    wake: Condvar,
}

/// This node's membership: its record in etcd, renewed by a thread of its own until
/// [`leave`](Self::leave).
pub(crate) struct Membership {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new lease and the record under it.
    fn register(&self) -> Result<i64, EtcdError> {
        let ttl = self.ttl.as_secs().max(1);
        let lease = self.etcd.grant(ttl)?;
        self.etcd.put(
            &NodeRecord::key(&self.record.node),
            &self.record.encode(),
            lease,
        )?;
        Ok(lease)
    }

    /// One renewal: keeps the lease alive, or registers again if it expired or there was
    /// none.
    fn renew(&self) {
        let lease = self.state().lease;
        let renewed = match lease {
            Some(lease) => match self.etcd.keep_alive(lease) {
                Ok(ttl) if ttl > 0 => Ok(lease),
                Ok(_) => {
                    tracing::warn!(
                        "node {}: its etcd lease expired; registering again",
                        self.record.node
                    );
                    self.register()
                }
                Err(e) => Err(e),
            },
            None => self.register(),
        };
        let mut state = self.state();
        match renewed {
            Ok(lease) => {
                if state.error.take().is_some() {
                    tracing::info!("node {}: registered in etcd again", self.record.node);
                }
                state.lease = Some(lease);
            }
            Err(e) => {
                if state.error.is_none() {
                    tracing::warn!("node {}: {e}; retrying", self.record.node);
                }
                // The lease may outlive the outage; a renewal that finds it expired
                // registers anew.
                state.error = Some(e.to_string());
            }
        }
    }

    fn run(&self) {
        // Three renewals per TTL: one lost to a slow etcd still leaves time.
        let period = (self.ttl / 3).max(Duration::from_millis(100));
        let mut stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        while !*stop {
            stop = self
                .wake
                .wait_timeout(stop, period)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if *stop {
                break;
            }
            drop(stop);
            self.renew();
            stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Membership {
    /// Registers `record` under a lease of `ttl` and starts renewing it; an etcd that does
    /// not answer now is an error (the daemon does not start).
    pub(crate) fn join(
        etcd: Arc<Etcd>,
        record: NodeRecord,
        ttl: Duration,
    ) -> Result<Self, EtcdError> {
        let shared = Arc::new(Shared {
            etcd,
            record,
            ttl,
            state: Mutex::new(MemberState::default()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let lease = shared.register()?;
        shared.state().lease = Some(lease);
        let renewing = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("share-etcd".into())
            .spawn(move || renewing.run())
            .map_err(|e| EtcdError::Unavailable(format!("cannot start its thread: {e}")))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Whether the record is in etcd now, as the last renewal found.
    pub(crate) fn state(&self) -> MemberState {
        self.shared.state().clone()
    }

    /// Stops renewing, deletes the record and revokes the lease (best effort: an etcd
    /// that is away lets the lease expire instead).
    pub(crate) fn leave(mut self) {
        self.stop_renewing();
        let lease = self.shared.state().lease.take();
        let key = NodeRecord::key(&self.shared.record.node);
        if let Err(e) = self.shared.etcd.delete(&key) {
            tracing::warn!("node {}: leaving: {e}", self.shared.record.node);
        }
        if let Some(lease) = lease {
            let _ = self.shared.etcd.revoke(lease);
        }
    }

    fn stop_renewing(&mut self) {
        *self
            .shared
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_through_json() {
        let record = NodeRecord {
            node: "node-a".into(),
            address: "127.0.0.2:7300".into(),
            agent: vec![0, 1, 2, 255],
        };
        assert_eq!(NodeRecord::decode(&record.encode()), Some(record));
        assert_eq!(NodeRecord::decode(b"{\"node\": 1}"), None);
    }
}
