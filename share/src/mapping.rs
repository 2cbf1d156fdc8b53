//! A process's mappings of shared buffers, the leases that keep them, and
//! the client state both hold on to: one module, because each of them holds
//! the others (a mapping its lease, a lease its client, a client its cache
//! of mappings), and what uses them (the buffer handles, the client)
//! depends on this module, never the reverse.

use std::collections::{HashMap, VecDeque};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use tandem_hal::{DeviceMemory, GpuApi, GpuDevice, GpuResult, IpcEventHandle};
use tandem_process::{lock_across_forks, remove_host_ipc_segments_of, MadeIn, ServiceChild};

use crate::connection::Connections;
use crate::error::ShareError;
use crate::transport;
use crate::wire::{ObjectId, Request};

/// What every handle of one client shares: its connections to the daemon,
/// its devices, the buffers it maps, and the daemon if it started it.
pub(crate) struct ClientInner<A: GpuApi> {
    pub(crate) api: A,
    pub(crate) connections: Connections,
    pub(crate) devices: Mutex<HashMap<usize, Arc<A::Device>>>,
    /// One stream of each device a caller asked for one of
    /// ([`ShareClient::stream`](crate::ShareClient::stream)).
    pub(crate) streams: Mutex<HashMap<usize, Arc<<A::Device as GpuDevice>::Stream>>>,
    /// Buffers this process maps, by id, one mapping per device it is
    /// mapped for: a second open for the same device shares the mapping.
    pub(crate) cache: Mutex<HashMap<ObjectId, Vec<Weak<Mapping<A>>>>>,
    /// The daemon, if this client started it: stopped with the last user.
    pub(crate) daemon: Mutex<Option<ServiceChild>>,
    /// Mappings of this client's own freed buffers, oldest first, kept for
    /// a create that the daemon answers with their allocation (the
    /// daemon's docs, "Reuse"): at most [`RETIRED_MAPPINGS`] of them,
    /// [`RETIRED_BYTES`] in all. Their memory stays mapped, and so alive,
    /// while they are here.
    pub(crate) retired: Mutex<VecDeque<Retired<A>>>,
    /// The process the state above belongs to: a child forked from it
    /// starts its own ([`ClientInner::for_this_process`]).
    pub(crate) made_in: Mutex<MadeIn>,
    /// The process this client was inherited from, once a forked child
    /// has used it (0 until then): a GPU backend's device calls are refused
    /// there ([`ShareError::GpuInForkedChild`]).
    pub(crate) inherited_from: AtomicU32,
    /// The daemon restarts (`Connections::restarts`) the cache and the kept
    /// mappings are of: after another, both are the old daemon's, whose ids
    /// and allocations the new one knows nothing of.
    pub(crate) restarts_seen: AtomicU64,
}

/// Most mappings a client keeps for reuse ([`ClientInner::retired`]).
pub(crate) const RETIRED_MAPPINGS: usize = 16;
/// Most bytes they may span: the daemon's default for what it keeps per
/// client, so that neither side keeps what the other gave up on by much.
pub(crate) const RETIRED_BYTES: usize = 256 << 20;

/// A mapping kept for reuse: the memory, for its device, with the seal's
/// event if it was opened.
pub(crate) struct Retired<A: GpuApi> {
    pub(crate) allocation: u64,
    pub(crate) device: Arc<A::Device>,
    pub(crate) buffer: <A::Device as GpuDevice>::ShareableBuffer,
    pub(crate) event: Option<<A::Device as GpuDevice>::Event>,
    pub(crate) event_handle: IpcEventHandle,
}

impl<A: GpuApi> Drop for ClientInner<A> {
    fn drop(&mut self) {
        self.for_this_process();
        let daemon = self
            .daemon
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(daemon) = daemon {
            // A daemon that stops cleanly removes its socket; one that was
            // killed could not, and nobody else will. Nothing to tell
            // anyone in a drop.
            if !daemon.stop().is_ok_and(|status| status.success()) {
                transport::remove_socket(self.connections.socket());
                // Its CPU device events too (named segments).
                remove_host_ipc_segments_of(self.connections.daemon_pid());
            }
        }
    }
}

impl<A: GpuApi> ClientInner<A> {
    /// In a child forked from the process this client was made in, drops
    /// what the parent holds before the child acts: the cache of the
    /// parent's mappings (whose leases are the parent's, so the daemon may
    /// free them under the child), the mappings kept for reuse, the devices
    /// and streams (the CPU device's stream threads, a GPU context, do not
    /// live on in a child) and the daemon the parent started (the parent's
    /// to stop).
    /// They are forgotten, not dropped: their drops would unmap or release
    /// through device state that is the parent's. The connections renew
    /// themselves on their next call.
    pub(crate) fn for_this_process(&self) {
        let mut made_in = lock_across_forks(&self.made_in);
        if made_in.is_this_process() {
            return;
        }
        self.inherited_from.store(made_in.pid(), Ordering::Relaxed);
        *made_in = MadeIn::this_process();
        lock_across_forks(&self.cache).clear();
        std::mem::forget(std::mem::take(&mut *lock_across_forks(&self.retired)));
        std::mem::forget(std::mem::take(&mut *lock_across_forks(&self.devices)));
        std::mem::forget(std::mem::take(&mut *lock_across_forks(&self.streams)));
        std::mem::forget(lock_across_forks(&self.daemon).take());
    }

    /// Forgets the cache and the kept mappings if the daemon was restarted
    /// since they were made (their memory stays mapped for whoever holds
    /// it).
    pub(crate) fn for_this_daemon(&self) {
        let restarts = self.connections.restarts();
        if self.restarts_seen.swap(restarts, Ordering::AcqRel) != restarts {
            lock_across_forks(&self.cache).clear();
            lock_across_forks(&self.retired).clear();
        }
    }

    /// Keeps `retired` for reuse, dropping the oldest kept beyond the
    /// bounds.
    fn retire(&self, retired: Retired<A>) {
        let mut kept = lock_across_forks(&self.retired);
        kept.push_back(retired);
        let mut bytes: usize = kept.iter().map(|r| r.buffer.len()).sum();
        while kept.len() > RETIRED_MAPPINGS || bytes > RETIRED_BYTES {
            let Some(oldest) = kept.pop_front() else {
                break;
            };
            bytes -= oldest.buffer.len();
        }
    }

    /// Takes back the kept mapping of `allocation` for device `ordinal`.
    pub(crate) fn take_retired(&self, allocation: u64, ordinal: usize) -> Option<Retired<A>> {
        let mut kept = lock_across_forks(&self.retired);
        let at = kept
            .iter()
            .position(|r| r.allocation == allocation && r.device.ordinal() == ordinal)?;
        kept.remove(at)
    }

    /// Gives back one lease on `id` (a buffer unmapped); a gone daemon, or
    /// one restarted since (which knows no such id), has taken it back
    /// already.
    pub(crate) fn release(&self, id: ObjectId) {
        {
            let mut cache = lock_across_forks(&self.cache);
            if let Some(mappings) = cache.get_mut(&id) {
                mappings.retain(|mapping| mapping.strong_count() > 0);
                if mappings.is_empty() {
                    cache.remove(&id);
                }
            }
        }
        match self.connections.call(&Request::Release { id }, Some(id)) {
            Ok(_) | Err(ShareError::DaemonGone(_) | ShareError::UnknownId(_)) => {}
            Err(e) => tracing::warn!("releasing shared buffer {id}: {e}"),
        }
    }
}

/// How a mapping reaches the buffer's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Mapped on the device that holds the memory.
    Local,
    /// Mapped for another device than the holder, through peer access:
    /// kernels of the mapping's device read the holder's memory directly
    /// (a VMM mapping with access granted to that device, or a legacy IPC
    /// handle opened there with peer access to the holder enabled).
    Peer {
        /// The ordinal of the device whose memory it is.
        holder: usize,
    },
}

/// A lease on a buffer, given back to the daemon on drop by the process
/// that took it (a forked child's copy is the parent's lease).
pub(crate) struct Lease<A: GpuApi> {
    id: ObjectId,
    client: Arc<ClientInner<A>>,
    made_in: MadeIn,
}

impl<A: GpuApi> Lease<A> {
    pub(crate) fn new(id: ObjectId, client: Arc<ClientInner<A>>) -> Self {
        Self {
            id,
            client,
            made_in: MadeIn::this_process(),
        }
    }

    /// Whether the calling process took it (not a child forked since).
    fn is_this_process(&self) -> bool {
        self.made_in.is_this_process()
    }

    pub(crate) fn id(&self) -> ObjectId {
        self.id
    }
}

impl<A: GpuApi> Drop for Lease<A> {
    fn drop(&mut self) {
        if self.is_this_process() {
            self.client.release(self.id);
        }
    }
}

/// One mapping of a shared buffer in this process (public only so the
/// sealed [`MirrorSource`](crate::MirrorSource) can name it; not reachable
/// from outside).
pub struct Mapping<A: GpuApi> {
    // Taken in drop, which unmaps them (or retires them, `keep`) before
    // the lease goes, so the daemon never frees what this process still
    // maps unless the driver keeps it alive for this process (an fd
    // import).
    pub(crate) buffer: ManuallyDrop<<A::Device as GpuDevice>::ShareableBuffer>,
    /// The seal's interprocess event, opened on first need (on the holder,
    /// where it was made): a reader that the daemon told the work was done
    /// never needs it.
    event: ManuallyDrop<OnceLock<<A::Device as GpuDevice>::Event>>,
    event_handle: IpcEventHandle,
    /// The daemon's name for the allocation.
    allocation: u64,
    /// Whether the mapping is retired for reuse when it goes, not unmapped:
    /// the creator's own mapping of an fd handle (whose import keeps the
    /// memory alive whatever the daemon does with it).
    keep: bool,
    /// Whether the writer's work before the seal is known finished.
    /// Release/Acquire: a thread that reads `true` skips the wait, so it
    /// must see what the thread that learned it saw.
    seal_done: AtomicBool,
    /// The device it is mapped for.
    device: Arc<A::Device>,
    /// The device whose memory it is (`device` itself for local access).
    holder: Arc<A::Device>,
    access: Access,
    lease: Lease<A>,
}

impl<A: GpuApi> Mapping<A> {
    /// A mapping of `buffer` for `device`; `holder` is the device whose
    /// memory it is (for `Access::Local`, the same device).
    #[expect(
        clippy::too_many_arguments,
        reason = "one per field a mapping is made of; a struct of them would only rename them"
    )]
    pub(crate) fn new(
        device: Arc<A::Device>,
        holder: Arc<A::Device>,
        access: Access,
        buffer: <A::Device as GpuDevice>::ShareableBuffer,
        event_handle: IpcEventHandle,
        (allocation, keep): (u64, bool),
        seal_done: bool,
        lease: Lease<A>,
    ) -> Self {
        Self {
            buffer: ManuallyDrop::new(buffer),
            event: ManuallyDrop::new(OnceLock::new()),
            event_handle,
            allocation,
            keep,
            seal_done: AtomicBool::new(seal_done),
            device,
            holder,
            access,
            lease,
        }
    }

    pub(crate) fn id(&self) -> ObjectId {
        self.lease.id()
    }

    /// A mapping of `retired`, kept from a buffer of this client's that
    /// the daemon freed, for the buffer it now created of the same
    /// allocation under `lease`; its event, if open, is the same.
    pub(crate) fn reused(retired: Retired<A>, lease: Lease<A>) -> Self {
        let mapping = Self::new(
            Arc::clone(&retired.device),
            retired.device,
            Access::Local,
            retired.buffer,
            retired.event_handle,
            (retired.allocation, true),
            false,
            lease,
        );
        if let Some(event) = retired.event {
            // A fresh OnceLock: the set cannot fail.
            let _ = mapping.event.set(event);
        }
        mapping
    }

    pub(crate) fn device(&self) -> &A::Device {
        &self.device
    }

    pub(crate) fn access(&self) -> Access {
        self.access
    }

    /// Opens the seal's event if it is not open yet.
    pub(crate) fn open_event(&self) -> Result<(), ShareError> {
        self.event().map(drop)
    }

    /// The seal's event, opened the first time it is needed (two threads
    /// racing both open it; one keeps its copy).
    fn event(&self) -> Result<&<A::Device as GpuDevice>::Event, ShareError> {
        if let Some(event) = self.event.get() {
            return Ok(event);
        }
        let opened = self.holder.ipc_open_event(&self.event_handle)?;
        Ok(self.event.get_or_init(|| opened))
    }

    /// The writer's seal: `record` records the event (given the holder and
    /// the event) on a stream whose work so far completes it. The writer's
    /// mapping is local, so that is a stream of the holder.
    pub(crate) fn record_seal(
        &self,
        record: impl FnOnce(&A::Device, &<A::Device as GpuDevice>::Event) -> GpuResult<()>,
    ) -> Result<(), ShareError> {
        Ok(record(&self.holder, self.event()?)?)
    }

    /// Orders later work on `stream` (a stream of `device`) after the
    /// writer's: nothing when that work is known done (a finished event
    /// orders nothing, and a stream wait on an interprocess event is not
    /// free), else a stream wait, which may cross devices.
    pub(crate) fn order_after_seal(
        &self,
        device: &A::Device,
        stream: &<A::Device as GpuDevice>::Stream,
    ) -> Result<(), ShareError> {
        if let Some(event) = self.pending_seal()? {
            device.stream_wait_event(stream, event)?;
        }
        Ok(())
    }

    /// The seal's event while the writer's work may still run; `None` once
    /// it is known done (then nothing needs ordering after it).
    pub(crate) fn pending_seal(
        &self,
    ) -> Result<Option<&<A::Device as GpuDevice>::Event>, ShareError> {
        if self.seal_done.load(Ordering::Acquire) {
            return Ok(None);
        }
        let event = self.event()?;
        if self.holder.query_event(event)? {
            self.seal_done.store(true, Ordering::Release);
            return Ok(None);
        }
        Ok(Some(event))
    }

    /// Blocks until the writer's work is done, for host reads.
    pub(crate) fn wait_for_seal(&self) -> Result<(), ShareError> {
        if !self.seal_done.load(Ordering::Acquire) {
            self.holder.synchronize_event(self.event()?)?;
            self.seal_done.store(true, Ordering::Release);
        }
        Ok(())
    }
}

impl<A: GpuApi> Drop for Mapping<A> {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and never used again: the fields are
        // not read after this, and ManuallyDrop does not drop them.
        let (buffer, event) = unsafe {
            (
                ManuallyDrop::take(&mut self.buffer),
                ManuallyDrop::take(&mut self.event),
            )
        };
        if !self.lease.is_this_process() {
            // A forked child's copy: unmapping would go through device state
            // that is the parent's (a GPU context does not survive a fork),
            // and the memory is the parent's to keep.
            std::mem::forget((buffer, event));
            return;
        }
        if self.keep {
            self.lease.client.retire(Retired {
                allocation: self.allocation,
                device: Arc::clone(&self.device),
                buffer,
                event: event.into_inner(),
                event_handle: self.event_handle,
            });
        }
        // Otherwise unmapped here, before the lease (a field) goes.
    }
}
