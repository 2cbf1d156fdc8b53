//! Serving other nodes: the cluster listener's accept loop, and a thread per node's
//! connection that checks its token and answers its leases, releases and listings. A
//! connection is a client of the daemon like any other: its leases hold their buffers, and
//! go when it closes (the fetching node finished, gave up, or died).

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tandem_hal::GpuApi;

use crate::cluster::peer_link::{read_frame, write_frame};
use crate::wire::{ErrorCode, ObjectId, Reply, Request};

use super::ledger::ClientEntry;
use super::node::tokens_match;
use super::{error, lock, DaemonState};

/// Marks a client token as a node's connection: local clients' tokens start with their pid
/// ([`crate::connection`]), which leaves this bit clear.
const PEER_CLIENT: u64 = 1 << 63;

impl<A: GpuApi> DaemonState<A> {
    /// Accepts other nodes' connections until the stop shuts `listener`.
    pub(super) fn accept_peers(self: &Arc<Self>, listener: &TcpListener) {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        while !self.stopping.load(Ordering::SeqCst) {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(_) if self.stopping.load(Ordering::SeqCst) => break,
                Err(e) => {
                    tracing::warn!("cluster listener: accept failed: {e}");
                    // Retrying at once would spin on the same error.
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
            };
            // Relaxed: only unique.
            let client = PEER_CLIENT | NEXT.fetch_add(1, Ordering::Relaxed);
            let Ok(clone) = stream.try_clone() else {
                continue;
            };
            lock(&self.peer_streams).insert(client, clone);
            let worker = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name(format!("share-peer-{}", client & !PEER_CLIENT))
                .spawn(move || {
                    worker.serve_peer(&stream, client);
                    lock(&worker.peer_streams).remove(&client);
                });
            match spawned {
                Ok(thread) => lock(&self.threads).push(thread),
                Err(e) => {
                    lock(&self.peer_streams).remove(&client);
                    tracing::warn!("cannot start a thread for a node's connection: {e}");
                }
            }
        }
    }

    /// Checks a node's hello (its token), then answers its requests until it closes.
    fn serve_peer(&self, stream: &TcpStream, client: u64) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        let _ = stream.set_nodelay(true);
        if stream
            .set_read_timeout(Some(self.limits.frame_timeout))
            .is_err()
        {
            return;
        }
        let node = match read_frame(stream).map(|f| f.map(|f| Request::decode(&f))) {
            Ok(Some(Ok(Request::PeerHello { node, token }))) => {
                if !tokens_match(&token, &cluster.token) {
                    tracing::warn!("refused node {node:?}: a wrong cluster token");
                    let refusal = error(ErrorCode::ClusterRefused, "a wrong cluster token");
                    let _ = write_frame(stream, &refusal.encode());
                    return;
                }
                node
            }
            _ => {
                let refusal = error(ErrorCode::Protocol, "the first frame must be PeerHello");
                let _ = write_frame(stream, &refusal.encode());
                return;
            }
        };
        lock(&self.ledger).clients.insert(
            client,
            ClientEntry {
                pid: 0,
                connections: 1,
                leases: HashMap::new(),
            },
        );
        if write_frame(stream, &Reply::Done.encode()).is_ok()
            && stream.set_read_timeout(None).is_ok()
        {
            self.serve_peer_requests(stream, client, &node);
        }
        self.disconnect(client);
    }

    fn serve_peer_requests(&self, stream: &TcpStream, client: u64, node: &str) {
        loop {
            let frame = match read_frame(stream) {
                Ok(Some(frame)) => frame,
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!("node {node}'s connection ended: {e}");
                    return;
                }
            };
            let reply = match Request::decode(&frame) {
                Ok(Request::PeerLease { id }) => self.peer_lease(client, id),
                Ok(Request::PeerRelease { id }) => {
                    let released = lock(&self.ledger).release(client, id, Some(1));
                    self.changed.notify_all();
                    if released {
                        Reply::Done
                    } else {
                        error(ErrorCode::NoLease, format!("no lease on buffer {id}"))
                    }
                }
                Ok(Request::PeerList) => {
                    let ledger = lock(&self.ledger);
                    let exported = ledger
                        .objects
                        .iter()
                        .filter(|(_, o)| o.export.is_some() && !o.deleted)
                        .map(|(&id, o)| o.info(id))
                        .collect();
                    Reply::List(exported)
                }
                Ok(other) => {
                    let refusal = error(
                        ErrorCode::Protocol,
                        format!("another node may not ask {other:?}"),
                    );
                    let _ = write_frame(stream, &refusal.encode());
                    return;
                }
                Err(e) => {
                    let _ =
                        write_frame(stream, &error(ErrorCode::Protocol, e.to_string()).encode());
                    return;
                }
            };
            if write_frame(stream, &reply.encode()).is_err() {
                return;
            }
        }
    }

    /// A lease for node connection `client` on exported buffer `id`, and where to read it.
    fn peer_lease(&self, client: u64, id: ObjectId) -> Reply {
        let mut ledger = lock(&self.ledger);
        let Some(object) = ledger.objects.get(&id) else {
            return error(ErrorCode::UnknownId, format!("no buffer {id}"));
        };
        if object.deleted {
            return error(ErrorCode::Deleted, format!("buffer {id} was deleted"));
        }
        let Some(export) = &object.export else {
            return error(
                ErrorCode::NotExported,
                format!("buffer {id} is not exported"),
            );
        };
        let mut region = export.region.clone();
        // Relaxed: a count; the lease below is what keeps this region registered.
        region.generation = self
            .cluster
            .as_ref()
            .map_or(0, |c| c.deregistered.load(Ordering::Relaxed));
        ledger.lease(client, id);
        Reply::Leased(region)
    }
}
