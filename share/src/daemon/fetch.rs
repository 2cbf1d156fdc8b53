//! The cluster's requests on the local socket: export a buffer, fetch one from another
//! node, the cluster's state and its nodes.
//!
//! A fetch: take a link kept open to the node (`links`), or look the node up in etcd and
//! connect to it with the token; lease the buffer there, allocate the local copy (one kept
//! for the fetching client first), register it with this node's agent, and have NIXL READ
//! the bytes through the remote agent; then send the release of the remote lease (its
//! answer is read by the link's next request), keep the link, and seal the copy, a local
//! buffer like any other, leased to the fetching client. While the bytes move, the thread
//! watches the fetching client (gone: the fetch is given up) and the remote node's
//! connection (gone: [`ErrorCode::RemoteGone`]). Nothing is in the books until the bytes are
//! all there: a fetch that fails frees its allocation on the way out and closes its link,
//! and the remote node releases its lease when the connection closes, whatever happened
//! here.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tandem_hal::{Backend, DeviceMemory, GpuApi};
use tandem_nixl::{Memory, Region};

use crate::cluster::etcd::EtcdError;
use crate::cluster::membership::{self, NodeRecord};
use crate::cluster::peer_link::{LinkError, PeerLink};
use crate::transport;
use crate::wire::{ErrorCode, LeasedRegion, NodeInfo, ObjectId, Reply};

use super::ledger::{Export, Kept};
use super::links::NodeLink;
use super::node::ClusterNode;
use super::{error, lock, DaemonState};

/// How long a fetch spins on the transfer's status before it sleeps between looks: a small
/// buffer's bytes come within it, and a sleep's wake-up would be most of their latency.
const SPIN: Duration = Duration::from_micros(200);
/// The sleep between looks after [`SPIN`].
const NAP: Duration = Duration::from_micros(50);
/// How long a failed transfer waits for the remote node's connection to close, which says
/// the node died rather than the transfer failed.
const REMOTE_GONE_WAIT: Duration = Duration::from_secs(1);

/// A fetch that failed: the reply that says why.
type Failed = (ErrorCode, String);

/// A transfer that did not bring the bytes: why, and whether NIXL may still write into the
/// local copy (a READ cancelled in flight), which then must not be freed.
type Unfinished = (Failed, bool);

fn etcd_failed(e: EtcdError) -> Failed {
    match e {
        EtcdError::Unavailable(why) => (ErrorCode::ClusterUnavailable, why),
        EtcdError::Refused(why) => (
            ErrorCode::ClusterUnavailable,
            format!("etcd refused: {why}"),
        ),
    }
}

fn link_failed(node: &str, e: LinkError) -> Failed {
    match e {
        LinkError::Gone(why) => (ErrorCode::RemoteGone, why),
        LinkError::Refused {
            code: ErrorCode::ClusterRefused,
            message,
        } => (ErrorCode::ClusterRefused, format!("node {node}: {message}")),
        LinkError::Refused { code, message } => (code, format!("node {node}: {message}")),
    }
}

impl<A: GpuApi> DaemonState<A> {
    fn cluster(&self) -> Result<&ClusterNode, Failed> {
        self.cluster.as_ref().ok_or((
            ErrorCode::NoCluster,
            "this daemon is in no cluster (its config has no [cluster])".into(),
        ))
    }

    /// NIXL's name of a region of this daemon's device `device` at `addr`: GPU memory by
    /// its ordinal, host memory by `tag` (an allocation's name, so that no two regions
    /// ever registered by one agent look the same to a peer).
    fn region(&self, addr: u64, len: u64, device: u32, tag: u64) -> Region {
        let gpu = A::BACKEND != Backend::Host;
        Region {
            addr,
            len: len as usize,
            device: if gpu { u64::from(device) } else { tag },
            memory: if gpu { Memory::Device } else { Memory::Host },
        }
    }

    /// Lets other nodes fetch sealed buffer `id`: registers it with the agent.
    pub(super) fn export(&self, id: ObjectId) -> Reply {
        let cluster = match self.cluster() {
            Ok(cluster) => cluster,
            Err((code, why)) => return error(code, why),
        };
        let mut ledger = lock(&self.ledger);
        let Some(object) = ledger.objects.get_mut(&id) else {
            return error(ErrorCode::UnknownId, format!("no buffer {id}"));
        };
        if object.deleted {
            return error(ErrorCode::Deleted, format!("buffer {id} was deleted"));
        }
        if object.writer.is_some() {
            return error(
                ErrorCode::NotSealed,
                format!("buffer {id} is not sealed: seal it, then export it"),
            );
        }
        if object.export.is_some() {
            return Reply::Done;
        }
        let region = self.region(
            object._buffer.device_ptr(),
            object.len,
            object.device,
            object.handle.allocation,
        );
        // SAFETY: the daemon's own mapping of the buffer, which the object keeps mapped
        // until its export (its first field) has dropped, deregistering it.
        let registration = match unsafe { cluster.agent.register(region) } {
            Ok(registration) => registration,
            Err(e) => return error(ErrorCode::Transfer, e.to_string()),
        };
        let metadata = match cluster.agent.region_metadata(&region) {
            Ok(metadata) => metadata,
            Err(e) => return error(ErrorCode::Transfer, e.to_string()),
        };
        object.export = Some(Export {
            _registration: registration,
            region: LeasedRegion {
                len: object.len,
                addr: region.addr,
                device: region.device,
                gpu: region.memory == Memory::Device,
                generation: 0,
                metadata,
            },
            deregistered: std::sync::Arc::clone(&cluster.deregistered),
        });
        tracing::debug!("exported buffer {id}");
        Reply::Done
    }

    /// The cluster's state, with the buffers this node exports.
    pub(super) fn cluster_status(&self) -> Reply {
        match self.cluster() {
            Ok(cluster) => {
                let exported = lock(&self.ledger)
                    .objects
                    .values()
                    .filter(|o| o.export.is_some())
                    .count();
                Reply::Cluster(cluster.info(exported as u32))
            }
            Err((code, why)) => error(code, why),
        }
    }

    /// Every node in etcd, with what it exports (asked of each).
    pub(super) fn cluster_list(&self) -> Reply {
        let cluster = match self.cluster() {
            Ok(cluster) => cluster,
            Err((code, why)) => return error(code, why),
        };
        let records = match membership::nodes(&cluster.etcd) {
            Ok(records) => records,
            Err(e) => {
                let (code, why) = etcd_failed(e);
                return error(code, why);
            }
        };
        let nodes = records
            .into_iter()
            .map(|record| {
                let exports = PeerLink::connect(
                    &record.node,
                    &record.address,
                    &cluster.config.node,
                    &cluster.token,
                )
                .and_then(|mut link| link.list());
                let (exports, error) = match exports {
                    Ok(exports) => (exports, String::new()),
                    Err(e) => (Vec::new(), e.to_string()),
                };
                NodeInfo {
                    node: record.node,
                    address: record.address,
                    exports,
                    error,
                }
            })
            .collect();
        Reply::Nodes(nodes)
    }

    /// Fetches `node`'s buffer `id` into a new sealed buffer on `device`, leased to
    /// `client` (who asked on `stream`).
    pub(super) fn fetch(
        &self,
        stream: &UnixStream,
        client: u64,
        node: &str,
        id: ObjectId,
        device: u32,
    ) -> (Reply, Option<OwnedFd>) {
        let started = Instant::now();
        // A span per step (debug): a subscriber that times spans shows where a fetch's time goes.
        let _fetch = tracing::debug_span!("fetch", node, id = id.0).entered();
        let fetched = self.fetch_bytes(stream, client, node, id, device);
        let made = match fetched {
            Ok(made) => made,
            Err((code, why)) => {
                tracing::debug!("fetch of {node}/{id} failed: {why}");
                return (error(code, why), None);
            }
        };
        let fd = match made.fd.as_ref().map(OwnedFd::try_clone).transpose() {
            Ok(fd) => fd,
            Err(e) => return (error(ErrorCode::Device, format!("dup: {e}")), None),
        };
        let handle = made.handle;
        let seal = tracing::debug_span!("seal").entered();
        let mut ledger = lock(&self.ledger);
        if ledger.objects.len() >= self.limits.buffers {
            let (code, why) = self.at_buffer_limit();
            return (error(code, why), None);
        }
        let local = ledger.insert_created(client, made);
        let Some(object) = ledger.objects.get_mut(&local) else {
            return (
                error(ErrorCode::UnknownId, format!("no buffer {local}")),
                None,
            );
        };
        // Sealed as it is entered: the bytes are all there, and nobody saw it before.
        object.writer = None;
        let info = object.info(local);
        drop(ledger);
        self.changed.notify_all();
        drop(seal);
        if let Some(cluster) = &self.cluster {
            // Relaxed: counters, read for show.
            cluster.fetches.fetch_add(1, Ordering::Relaxed);
            cluster.fetched_bytes.fetch_add(info.len, Ordering::Relaxed);
        }
        tracing::debug!(
            "fetched {node}/{id} as buffer {local}: {} bytes in {:?}",
            info.len,
            started.elapsed()
        );
        let reply = Reply::Opened {
            info,
            handle,
            seal_done: true,
        };
        (reply, fd)
    }

    /// The bytes of `node`'s buffer `id` in an allocation on `device` for `client`.
    fn fetch_bytes(
        &self,
        stream: &UnixStream,
        client: u64,
        node: &str,
        id: ObjectId,
        device: u32,
    ) -> Result<Kept<A>, Failed> {
        let cluster = self.cluster()?;
        let gpu = self.devices.get(device as usize).ok_or_else(|| {
            (
                ErrorCode::NoDevice,
                format!("device {device} of {}", self.devices.len()),
            )
        })?;
        let (mut peer, remote) = self.lease_remote(cluster, node, id)?;
        let step = tracing::debug_span!("allocate").entered();
        let made = self.allocation_for(client, gpu, device, remote.len)?;
        drop(step);
        let local = self.region(
            made.buffer.device_ptr(),
            remote.len,
            device,
            made.handle.allocation,
        );
        let registration = tracing::debug_span!("register")
            .in_scope(|| {
                // SAFETY: `made` owns the memory and outlives the registration (dropped
                // below, before `made` is returned or dropped).
                unsafe { cluster.agent.register(local) }
            })
            .map_err(|e| (ErrorCode::Transfer, e.to_string()))?;
        let moved = self.transfer(cluster, stream, &peer, &local, &remote);
        if let Err((failed, true)) = moved {
            // NIXL may still be writing into the copy: unmapping or deregistering it under
            // the transfer would crash the daemon, so both are kept for the daemon's life.
            tracing::warn!(
                "a READ from node {node} still in flight when given up: its {} bytes stay \
                 allocated",
                remote.len
            );
            std::mem::forget(registration);
            std::mem::forget(made);
            return Err(failed);
        }
        tracing::debug_span!("deregister").in_scope(|| drop(registration));
        // Failed: the link closes with `peer`, which releases the lease on the node.
        moved.map_err(|(failed, _)| failed)?;
        // Not awaited: the copy is whole and the node answers in order; a link that cannot
        // take the release is closed, which releases the lease as well.
        if tracing::debug_span!("release")
            .in_scope(|| peer.link.release_later(id))
            .is_ok()
        {
            cluster.links.keep(peer);
        }
        Ok(made)
    }

    /// A lease on `node`'s buffer `id`, over a link kept to the node if one is open, else
    /// over a new one to where etcd says the node is now; the link with the lease.
    fn lease_remote(
        &self,
        cluster: &ClusterNode,
        node: &str,
        id: ObjectId,
    ) -> Result<(NodeLink, LeasedRegion), Failed> {
        if let Some(mut peer) = cluster.links.take(node) {
            let leased = tracing::debug_span!("lease").in_scope(|| peer.link.lease(id));
            match leased {
                Ok(remote) => return Ok((peer, remote)),
                // The node went away (or restarted) since the link's last fetch: etcd
                // says where it is now, if anywhere.
                Err(LinkError::Gone(why)) => {
                    tracing::debug!("a kept link to node {node}: {why}; looking it up again");
                    cluster.forget(node);
                }
                Err(refused) => {
                    cluster.links.keep(peer);
                    return Err(link_failed(node, refused));
                }
            }
        }
        let step = tracing::debug_span!("lookup").entered();
        let record: NodeRecord = membership::lookup(&cluster.etcd, node)
            .map_err(etcd_failed)?
            .ok_or_else(|| {
                (
                    ErrorCode::UnknownNode,
                    format!("no node {node} in the cluster (never joined, or its lease expired)"),
                )
            })?;
        drop(step);
        let step = tracing::debug_span!("connect").entered();
        let link = PeerLink::connect(node, &record.address, &cluster.config.node, &cluster.token)
            .map_err(|e| link_failed(node, e))?;
        drop(step);
        let mut peer = NodeLink { link, record };
        let leased = tracing::debug_span!("lease").in_scope(|| peer.link.lease(id));
        match leased {
            Ok(remote) => Ok((peer, remote)),
            Err(e) => {
                if matches!(e, LinkError::Refused { .. }) {
                    // A refusal leaves the link as good as it was.
                    cluster.links.keep(peer);
                }
                Err(link_failed(node, e))
            }
        }
    }

    /// Reads `remote` (leased over `peer`) into `local`, watching the asking client on
    /// `stream` and the remote node on `peer`'s link. A client that hangs up does not end
    /// the READ: it runs to its end (or failure) first, so that `local` is freed only once
    /// nothing writes into it; only the fetch's deadline and the daemon's stop cancel one in
    /// flight.
    fn transfer(
        &self,
        cluster: &ClusterNode,
        stream: &UnixStream,
        peer: &NodeLink,
        local: &Region,
        remote: &LeasedRegion,
    ) -> Result<(), Unfinished> {
        let NodeLink { link, record } = peer;
        let node = record.node.as_str();
        let nixl_failed = |e: tandem_nixl::NixlError| ((ErrorCode::Transfer, e.to_string()), false);
        tracing::debug_span!("metadata")
            .in_scope(|| cluster.prepare_remote(node, &record.agent, remote))
            .map_err(nixl_failed)?;
        let from = Region {
            addr: remote.addr,
            len: local.len,
            device: remote.device,
            memory: if remote.gpu {
                Memory::Device
            } else {
                Memory::Host
            },
        };
        let _read = tracing::debug_span!("read").entered();
        let mut transfer = cluster
            .agent
            .read(local, &from, node)
            .map_err(nixl_failed)?;
        let started = Instant::now();
        let deadline = started + cluster.config.fetch_timeout;
        // Set once the asking client hung up: the READ still runs to its end.
        let mut abandoned = false;
        let hung_up = || {
            (
                (ErrorCode::RemoteGone, "the fetching client hung up".into()),
                false,
            )
        };
        loop {
            let done = transfer.poll();
            // A node that died shows on NIXL's side, or on the link's: whichever first. A
            // failed transfer waits a moment for the link to say which it was.
            let wait = if done.is_err() {
                REMOTE_GONE_WAIT
            } else {
                Duration::ZERO
            };
            let remote_gone = transport::peer_hung_up_within(link.stream(), wait);
            match done {
                Ok(true) if abandoned => return Err(hung_up()),
                Ok(true) => return Ok(()),
                Err(_) | Ok(false) if remote_gone => {
                    drop(transfer);
                    cluster.forget(node);
                    return Err((
                        (
                            ErrorCode::RemoteGone,
                            format!("node {node} went away mid-fetch"),
                        ),
                        false,
                    ));
                }
                Err(_) if abandoned => return Err(hung_up()),
                Err(e) => return Err(nixl_failed(e)),
                Ok(false) => {}
            }
            if !abandoned && transport::peer_hung_up(stream) {
                tracing::debug!(
                    "the client fetching from node {node} hung up: letting the READ end"
                );
                abandoned = true;
            }
            if Instant::now() > deadline || self.stopping.load(Ordering::SeqCst) {
                return Err((
                    (
                        ErrorCode::Transfer,
                        format!(
                            "the fetch from node {node} did not finish within {:?}",
                            cluster.config.fetch_timeout
                        ),
                    ),
                    true,
                ));
            }
            if started.elapsed() > SPIN {
                std::thread::sleep(NAP);
            } else {
                std::hint::spin_loop();
            }
        }
    }
}
