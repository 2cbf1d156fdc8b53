//! What each request does: creates, opens (waiting for the seal), seals,
//! deletes, releases, stats and lists, against the books and the devices;
//! the named sets' requests are `sets`'s, the cluster's `fetch`'s.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use tandem_hal::{ErrorKind, EventFlags, GpuApi, GpuDevice, ShareableHandle};

use crate::transport;
use crate::wire::{BufferHandle, ErrorCode, HandleForm, ObjectId, Reply, Request};

use super::ledger::{Kept, Membership};
use super::metrics::Refusal;
use super::{error, lock, DaemonState};

/// How often an `Open` waiting for its seal checks that its opener is
/// still connected.
const HANG_UP_CHECK: Duration = Duration::from_millis(200);

impl<A: GpuApi> DaemonState<A> {
    pub(super) fn handle(
        &self,
        stream: &UnixStream,
        client: u64,
        inspect: bool,
        request: Request,
    ) -> (Reply, Option<OwnedFd>) {
        let mutating = matches!(
            request,
            Request::Create { .. }
                | Request::Open { .. }
                | Request::Seal { .. }
                | Request::Release { .. }
                | Request::Stage { .. }
                | Request::BindSet { .. }
        );
        if inspect && mutating {
            return (
                error(
                    ErrorCode::NotPermitted,
                    "an inspecting client cannot map or seal buffers",
                ),
                None,
            );
        }
        match request {
            Request::Hello { .. } => (error(ErrorCode::Protocol, "Hello twice"), None),
            Request::Create { device, bytes } => self.create(client, device, bytes),
            Request::Open { id, timeout_ms } => self.open(
                stream,
                client,
                id,
                Duration::from_millis(u64::from(timeout_ms)),
            ),
            Request::Seal { id } => (self.seal(client, id), None),
            Request::Release { id } => {
                let released = lock(&self.ledger).release(client, id, Some(1));
                self.changed.notify_all();
                if released {
                    (Reply::Done, None)
                } else {
                    (
                        error(ErrorCode::NoLease, format!("no lease on buffer {id}")),
                        None,
                    )
                }
            }
            Request::Delete { id } => (self.delete(id), None),
            Request::Stat { id } => match lock(&self.ledger).objects.get(&id) {
                Some(object) => (Reply::Info(object.info(id)), None),
                None => (error(ErrorCode::UnknownId, format!("no buffer {id}")), None),
            },
            Request::List => {
                let ledger = lock(&self.ledger);
                let infos = ledger.objects.iter().map(|(&id, o)| o.info(id)).collect();
                (Reply::List(infos), None)
            }
            Request::Status => (Reply::Status(self.status()), None),
            Request::Stage { id, name } => (self.stage(client, id, &name), None),
            Request::BindSet {
                name,
                manifest,
                buffers,
                tensors,
            } => (
                self.bind_set(client, name, manifest, buffers, tensors),
                None,
            ),
            Request::LookupSet { name, version } => (self.lookup_set(&name, version), None),
            Request::ListSets => (self.list_sets(), None),
            Request::DeleteSet { name } => (self.delete_set(&name), None),
            Request::Export { id } => (self.export(id), None),
            Request::Fetch { node, id, device } => self.fetch(stream, client, &node, id, device),
            Request::ClusterStatus => (self.cluster_status(), None),
            Request::ClusterList => (self.cluster_list(), None),
            Request::PeerHello { .. }
            | Request::PeerLease { .. }
            | Request::PeerRelease { .. }
            | Request::PeerList => (
                error(
                    ErrorCode::NotPermitted,
                    "only other nodes ask that, on the cluster listener",
                ),
                None,
            ),
        }
    }

    fn create(&self, client: u64, device: u32, bytes: u64) -> (Reply, Option<OwnedFd>) {
        let Some(gpu) = self.devices.get(device as usize) else {
            return (
                error(
                    ErrorCode::NoDevice,
                    format!("device {device} of {}", self.devices.len()),
                ),
                None,
            );
        };
        let made = match self.allocation_for(client, gpu, device, bytes) {
            Ok(made) => made,
            Err((code, message)) => return (error(code, message), None),
        };
        let creator_fd = match made.fd.as_ref().map(OwnedFd::try_clone).transpose() {
            Ok(copy) => copy,
            Err(e) => return (error(ErrorCode::Device, format!("dup: {e}")), None),
        };
        let mut ledger = lock(&self.ledger);
        if ledger.objects.len() >= self.limits.buffers {
            let (code, message) = self.at_buffer_limit();
            return (error(code, message), None);
        }
        let handle = made.handle;
        let id = ledger.insert_created(client, made);
        tracing::debug!(
            "created buffer {id}: {} bytes on device {device} (allocation {})",
            handle.size,
            handle.allocation
        );
        (Reply::Created { id, handle }, creator_fd)
    }

    /// The refusal of a new buffer at [`Limits::buffers`](super::Limits::buffers), counted.
    pub(super) fn at_buffer_limit(&self) -> (ErrorCode, String) {
        self.counters.refused(Refusal::Buffers);
        (
            ErrorCode::Busy,
            format!(
                "the daemon holds {} buffers, its limit",
                self.limits.buffers
            ),
        )
    }

    /// An allocation of `bytes` on `gpu` (the daemon's `device`) for a new
    /// buffer of `client`: one kept for that client first (nothing to
    /// allocate, export or import), else a fresh one. Kept allocations give
    /// way to the buffer limit and to a device out of memory.
    pub(super) fn allocation_for(
        &self,
        client: u64,
        gpu: &A::Device,
        device: u32,
        bytes: u64,
    ) -> Result<Kept<A>, (ErrorCode, String)> {
        if let Some(kept) = lock(&self.ledger).take_kept(client, device, bytes) {
            return Ok(kept);
        }
        // Checked before allocating (the cost) and again when inserting
        // (creates run on several threads at once).
        {
            let mut ledger = lock(&self.ledger);
            if ledger.held() >= self.limits.buffers {
                ledger.drop_kept();
                if ledger.held() >= self.limits.buffers {
                    return Err(self.at_buffer_limit());
                }
            }
        }
        match self.allocate(gpu, device, bytes) {
            Err((ErrorCode::Device, _)) if lock(&self.ledger).drop_kept() => {
                self.allocate(gpu, device, bytes)
            }
            made => made,
        }
    }

    /// A fresh allocation of `bytes` on `gpu` (the daemon's `device`), its
    /// seal event and its export.
    pub(super) fn allocate(
        &self,
        gpu: &A::Device,
        device: u32,
        bytes: u64,
    ) -> Result<Kept<A>, (ErrorCode, String)> {
        let bytes = usize::try_from(bytes)
            .map_err(|_| (ErrorCode::InvalidSize, format!("{bytes} bytes")))?;
        let buffer = gpu.alloc_shareable(bytes).map_err(|e| match e.kind {
            ErrorKind::InvalidSize { .. } => (ErrorCode::InvalidSize, e.to_string()),
            _ => (ErrorCode::Device, e.to_string()),
        })?;
        let device_error = |e: tandem_hal::GpuError| (ErrorCode::Device, e.to_string());
        let event = gpu
            .create_event(EventFlags {
                timing: false,
                interprocess: true,
            })
            .map_err(device_error)?;
        let event_handle = gpu.ipc_export_event(&event).map_err(device_error)?.0;
        let exported = gpu.export_shareable(&buffer).map_err(device_error)?;
        // Relaxed: only unique, ordered with nothing.
        let allocation = self.next_allocation.fetch_add(1, Ordering::Relaxed);
        let (handle, fd) = wire_handle(exported, allocation, event_handle);
        Ok(Kept {
            device,
            buffer,
            event,
            handle,
            fd,
        })
    }

    /// Opens `id` for `client`, waiting up to `timeout` for its seal while
    /// the opener stays connected on `stream`.
    fn open(
        &self,
        stream: &UnixStream,
        client: u64,
        id: ObjectId,
        timeout: Duration,
    ) -> (Reply, Option<OwnedFd>) {
        let deadline = Instant::now() + timeout;
        let mut ledger = lock(&self.ledger);
        loop {
            let Some(object) = ledger.objects.get(&id) else {
                return (error(ErrorCode::UnknownId, format!("no buffer {id}")), None);
            };
            if object.deleted {
                return (
                    error(ErrorCode::Deleted, format!("buffer {id} was deleted")),
                    None,
                );
            }
            // A staged buffer is opened once its set is bound.
            if object.writer.is_none() && !matches!(object.set, Some(Membership::Staged(_))) {
                break;
            }
            let now = Instant::now();
            if now >= deadline || self.stopping.load(Ordering::SeqCst) {
                return (
                    error(
                        ErrorCode::NotSealed,
                        format!("buffer {id} was not sealed (or its set bound) within {timeout:?}"),
                    ),
                    None,
                );
            }
            ledger = self
                .changed
                .wait_timeout(ledger, (deadline - now).min(HANG_UP_CHECK))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if transport::peer_hung_up(stream) {
                // Nobody to answer: the reply is only for the log's sake.
                return (
                    error(
                        ErrorCode::NotSealed,
                        format!("the opener of buffer {id} hung up"),
                    ),
                    None,
                );
            }
        }
        let Some(object) = ledger.objects.get(&id) else {
            return (error(ErrorCode::UnknownId, format!("no buffer {id}")), None);
        };
        let handle = object.handle;
        let fd = match object.fd.as_ref().map(OwnedFd::try_clone).transpose() {
            Ok(fd) => fd,
            Err(e) => return (error(ErrorCode::Device, format!("dup: {e}")), None),
        };
        ledger.lease(client, id);
        let Some(object) = ledger.objects.get(&id) else {
            return (error(ErrorCode::UnknownId, format!("no buffer {id}")), None);
        };
        // Answered here, a reader opens the event and makes its stream wait
        // on it only while the work still runs: a finished event orders
        // nothing, and each of those is a driver call. A query that fails
        // says "not done": the reader then waits itself.
        let seal_done = self
            .devices
            .get(object.device as usize)
            .is_some_and(|gpu| gpu.query_event(&object.event).unwrap_or(false));
        let reply = Reply::Opened {
            info: object.info(id),
            handle,
            seal_done,
        };
        (reply, fd)
    }

    fn seal(&self, client: u64, id: ObjectId) -> Reply {
        let mut ledger = lock(&self.ledger);
        let Some(object) = ledger.objects.get_mut(&id) else {
            return error(ErrorCode::UnknownId, format!("no buffer {id}"));
        };
        match object.writer {
            None => {
                return error(
                    ErrorCode::AlreadySealed,
                    format!("buffer {id} is sealed already"),
                )
            }
            Some(writer) if writer != client => {
                return error(
                    ErrorCode::NotWriter,
                    format!("buffer {id} has another writer"),
                )
            }
            // Nobody could open it: a deleted buffer is never sealed, so
            // its writer cannot get it back either.
            Some(_) if object.deleted => {
                return error(
                    ErrorCode::Deleted,
                    format!("buffer {id} was deleted before its seal"),
                )
            }
            Some(_) => object.writer = None,
        }
        drop(ledger);
        self.changed.notify_all();
        tracing::debug!("sealed buffer {id}");
        Reply::Done
    }

    fn delete(&self, id: ObjectId) -> Reply {
        let mut ledger = lock(&self.ledger);
        let Some(object) = ledger.objects.get_mut(&id) else {
            return error(ErrorCode::UnknownId, format!("no buffer {id}"));
        };
        if object.deleted {
            return error(
                ErrorCode::Deleted,
                format!("buffer {id} was deleted already"),
            );
        }
        if let Some(Membership::Staged(set) | Membership::Bound(set)) = &object.set {
            return error(
                ErrorCode::NotPermitted,
                format!("buffer {id} belongs to set {set:?}: delete the set"),
            );
        }
        object.deleted = true;
        let leases = object.leases;
        ledger.free_if_unheld(id);
        drop(ledger);
        self.changed.notify_all();
        tracing::debug!("deleted buffer {id} ({leases} lease(s) outstanding)");
        Reply::Done
    }
}

/// The wire form of an exported handle, and the descriptor to send beside it.
fn wire_handle(
    exported: ShareableHandle,
    allocation: u64,
    event: [u8; 64],
) -> (BufferHandle, Option<OwnedFd>) {
    match exported {
        ShareableHandle::Fd { fd, size, len } => (
            BufferHandle {
                form: HandleForm::Fd,
                size: size as u64,
                len: len as u64,
                allocation,
                event,
            },
            Some(fd),
        ),
        ShareableHandle::Ipc {
            handle,
            offset,
            len,
        } => (
            BufferHandle {
                form: HandleForm::Ipc {
                    handle: handle.0,
                    offset: offset as u64,
                },
                size: (offset + len) as u64,
                len: len as u64,
                allocation,
                event,
            },
            None,
        ),
    }
}
