//! The daemon's books: every buffer it holds, its leases, the clients
//! holding them, the allocations kept for their creators, and the named
//! sets. Bookkeeping only: the callers hold the daemon's lock and do the
//! devices' work.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::OwnedFd;

use tandem_hal::GpuApi;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::wire::{BufferHandle, LeasedRegion, ObjectId, ObjectInfo, SetInfo};

use super::{micros_since_epoch, Buffer, Event};

/// One buffer the daemon holds.
pub(super) struct Object<A: GpuApi> {
    /// Its registration with the node's NIXL agent, once exported: other
    /// nodes may then fetch it. The first field, so dropped (deregistered)
    /// before the memory is freed or kept.
    pub(super) export: Option<Export>,
    pub(super) device: u32,
    pub(super) len: u64,
    pub(super) size: u64,
    /// The daemon's own mapping: the allocation lives at least as long.
    pub(super) _buffer: Buffer<A>,
    /// Recorded by the writer at seal (it opened the handle), waited on by
    /// readers. The daemon owns it so it outlives the writer, and queries
    /// it for each open: an interprocess event's state is shared by every
    /// process that opened it.
    pub(super) event: Event<A>,
    /// How openers map it. Exported once: a fresh export
    /// (`cuMemExportToShareableHandle`) is slow on CUDA, a duplicate of the
    /// descriptor names the same allocation at a small fraction of that
    /// (docs/perf/2026-11-24-h100.md, "Exporting a shareable buffer").
    pub(super) handle: BufferHandle,
    pub(super) fd: Option<OwnedFd>,
    /// The client that may seal it; `None` once sealed.
    pub(super) writer: Option<u64>,
    /// The client that created it, which gets its allocation back once it
    /// is freed (see the module docs, "Reuse").
    pub(super) creator: u64,
    pub(super) deleted: bool,
    pub(super) leases: u32,
    /// The set it belongs to, if any.
    pub(super) set: Option<Membership>,
}

/// An exported buffer: registered with the node's agent, and what a
/// fetching node is told to read it.
pub(super) struct Export {
    pub(super) _registration: tandem_nixl::Registration,
    pub(super) region: LeasedRegion,
    /// Counts the deregistration when dropped (see [`LeasedRegion::generation`]).
    pub(super) deregistered: Arc<AtomicU64>,
}

impl Drop for Export {
    fn drop(&mut self) {
        // Relaxed: a count, read with no other data.
        self.deregistered.fetch_add(1, Ordering::Relaxed);
    }
}

/// How a buffer belongs to a named set.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) enum Membership {
    /// Its creator is publishing the set: nobody opens it until the bind,
    /// and it is freed if its creator lets go of it first.
    Staged(String),
    /// A version of the set holds it: only deleting the set deletes it.
    Bound(String),
}

/// A named set: the versions it keeps, oldest first, and the next one's number.
pub(super) struct NamedSet {
    pub(super) versions: VecDeque<SetInfo>,
    pub(super) next_version: u64,
}

/// A freed buffer's allocation, kept for its creator's next create of the
/// same device and length.
pub(super) struct Kept<A: GpuApi> {
    pub(super) device: u32,
    pub(super) buffer: Buffer<A>,
    pub(super) event: Event<A>,
    pub(super) handle: BufferHandle,
    pub(super) fd: Option<OwnedFd>,
}

impl<A: GpuApi> Object<A> {
    pub(super) fn info(&self, id: ObjectId) -> ObjectInfo {
        ObjectInfo {
            id,
            device: self.device,
            len: self.len,
            size: self.size,
            sealed: self.writer.is_none(),
            deleted: self.deleted,
            leases: self.leases,
            exported: self.export.is_some(),
        }
    }
}

/// A client: its connections and the leases it holds.
pub(super) struct ClientEntry {
    pub(super) pid: u32,
    pub(super) connections: u32,
    pub(super) leases: HashMap<ObjectId, u32>,
}

/// The daemon's books, under one lock: every buffer it holds, every
/// client with the leases it holds on them, and the allocations kept for
/// reuse.
pub(super) struct Ledger<A: GpuApi> {
    pub(super) objects: BTreeMap<ObjectId, Object<A>>,
    pub(super) clients: HashMap<u64, ClientEntry>,
    pub(super) next_id: u64,
    /// Freed allocations kept for their creators, oldest first, by client.
    pub(super) kept: HashMap<u64, Vec<Kept<A>>>,
    /// Bytes one client's kept allocations may span (0: none are kept).
    pub(super) kept_bytes: u64,
    /// The named sets, by name.
    pub(super) sets: BTreeMap<String, NamedSet>,
}

impl<A: GpuApi> Ledger<A> {
    /// Empty books, keeping up to `kept_bytes` of freed allocations a client.
    pub(super) fn new(kept_bytes: u64) -> Self {
        Self {
            objects: BTreeMap::new(),
            clients: HashMap::new(),
            next_id: 1,
            kept: HashMap::new(),
            kept_bytes,
            sets: BTreeMap::new(),
        }
    }

    /// Frees `id` if nothing keeps it: deleted with no lease, or abandoned
    /// by its creator before the seal or, staged for a set, before the bind.
    pub(super) fn free_if_unheld(&mut self, id: ObjectId) {
        let Some(object) = self.objects.get(&id) else {
            return;
        };
        let staged = matches!(object.set, Some(Membership::Staged(_)));
        // The writer is the creator until the seal.
        let creator_holds = self
            .clients
            .get(&object.creator)
            .is_some_and(|c| c.leases.contains_key(&id));
        let abandoned = (object.writer.is_some() || staged) && !creator_holds;
        if (object.deleted && object.leases == 0) || abandoned {
            let object = self.objects.remove(&id);
            if let Some(mut object) = object {
                // Deregistered while the memory is still mapped.
                drop(object.export.take());
                // Per buffer: debug, so a daemon's log at info is its life, not its traffic.
                tracing::debug!(
                    "freed buffer {id} ({} bytes on device {}{})",
                    object.size,
                    object.device,
                    if abandoned {
                        ", abandoned before its seal or bind"
                    } else {
                        ""
                    }
                );
                // Other holders were leases; an abandoned buffer can still
                // have readers' leases only if they never got one (an open
                // waits for the seal, and for a staged buffer's bind), so
                // none are left dangling.
                for client in self.clients.values_mut() {
                    client.leases.remove(&id);
                }
                if self.clients.contains_key(&object.creator) {
                    let kept = Kept {
                        device: object.device,
                        buffer: object._buffer,
                        event: object.event,
                        handle: object.handle,
                        fd: object.fd.take(),
                    };
                    self.keep(object.creator, kept);
                }
            }
        }
    }

    /// Keeps `kept` for `client`, dropping its oldest kept allocations
    /// beyond [`Limits::kept_bytes`](super::Limits::kept_bytes) (this one too, if it alone is larger).
    pub(super) fn keep(&mut self, client: u64, kept: Kept<A>) {
        let list = self.kept.entry(client).or_default();
        list.push(kept);
        let mut total: u64 = list.iter().map(|k| k.handle.size).sum();
        while total > self.kept_bytes {
            let dropped = list.remove(0);
            total -= dropped.handle.size;
        }
        if list.is_empty() {
            self.kept.remove(&client);
        }
    }

    /// Takes back an allocation kept for `client` of `device` and `len`
    /// bytes, if there is one.
    pub(super) fn take_kept(&mut self, client: u64, device: u32, len: u64) -> Option<Kept<A>> {
        let list = self.kept.get_mut(&client)?;
        let at = list
            .iter()
            .rposition(|k| k.device == device && k.handle.len == len)?;
        let kept = list.remove(at);
        if list.is_empty() {
            self.kept.remove(&client);
        }
        Some(kept)
    }

    /// Drops every kept allocation; whether there were any.
    pub(super) fn drop_kept(&mut self) -> bool {
        let any = !self.kept.is_empty();
        self.kept.clear();
        any
    }

    /// Buffers held and allocations kept: each takes descriptors.
    pub(super) fn held(&self) -> usize {
        self.objects.len() + self.kept.values().map(Vec::len).sum::<usize>()
    }

    /// A new buffer of `client`'s from `made`, leased to it, and its id.
    pub(super) fn insert_created(&mut self, client: u64, made: Kept<A>) -> ObjectId {
        let id = ObjectId(self.next_id.max(micros_since_epoch()));
        self.next_id = id.0 + 1;
        self.objects.insert(
            id,
            Object {
                export: None,
                device: made.device,
                len: made.handle.len,
                size: made.handle.size,
                _buffer: made.buffer,
                event: made.event,
                handle: made.handle,
                fd: made.fd,
                writer: Some(client),
                creator: client,
                deleted: false,
                leases: 0,
                set: None,
            },
        );
        self.lease(client, id);
        id
    }

    /// Takes one lease of `client` on `id`.
    pub(super) fn lease(&mut self, client: u64, id: ObjectId) {
        if let Some(object) = self.objects.get_mut(&id) {
            object.leases += 1;
        }
        if let Some(entry) = self.clients.get_mut(&client) {
            *entry.leases.entry(id).or_insert(0) += 1;
        }
    }

    /// Gives back `count` leases of `client` on `id` (all it has if `None`).
    pub(super) fn release(&mut self, client: u64, id: ObjectId, count: Option<u32>) -> bool {
        let Some(entry) = self.clients.get_mut(&client) else {
            return false;
        };
        let Some(held) = entry.leases.get_mut(&id) else {
            return false;
        };
        let n = count.unwrap_or(*held).min(*held);
        *held -= n;
        if *held == 0 {
            entry.leases.remove(&id);
        }
        if let Some(object) = self.objects.get_mut(&id) {
            object.leases -= n;
        }
        self.free_if_unheld(id);
        true
    }
}
