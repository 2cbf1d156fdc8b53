//! The client library: create, seal, open, mirror and delete shared
//! buffers, each mapped once per process however often it is opened.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tandem_hal::{
    GpuApi, GpuDevice, GpuResult, IpcEventHandle, IpcMemHandle, MemoryAccess, ShareableHandle,
};
use tandem_process::{find_tandem_binary, lock_across_forks, ForkSafeGuard, MadeIn, ServiceChild};

use crate::buffer::{GpuBuffer, MutableGpuBuffer};
use crate::connection::{unexpected, Connections};
use crate::error::ShareError;
use crate::mapping::{Access, ClientInner, Lease, Mapping};
use crate::poll::Polling;
use crate::transport;
use crate::wire::{
    BufferHandle, ClusterInfo, DaemonStatus, HandleForm, ObjectId, ObjectInfo, Reply, Request,
    SetInfo, WireBackend, MAX_SET_BUFFERS,
};

/// A device and a stream of it ([`ShareClient::stream`]).
pub type DeviceStream<A> = (
    Arc<<A as GpuApi>::Device>,
    Arc<<<A as GpuApi>::Device as GpuDevice>::Stream>,
);

/// How long [`ShareClient::get_buffer`] waits for an unsealed buffer's seal.
pub const DEFAULT_SEAL_WAIT: Duration = Duration::from_secs(30);

/// A connection to the share daemon, as one client of backend `A`. Cheap to
/// clone; a process should share one (its cache of mapped buffers is per
/// client). Buffers keep the client alive.
///
/// A child forked from the process that made it may go on using it: on its
/// first call there it connects as a client of its own, with its own
/// leases, and maps what it opens anew; nothing the parent holds changes.
/// Buffers the child inherited stay the parent's (their leases, and their
/// memory only while the parent holds them): the child opens its own by
/// id. On a GPU backend a forked child cannot use the device at all (a rule
/// of the CUDA and HIP drivers): there the calls that need it fail with
/// [`ShareError::GpuInForkedChild`], and those that do not still work.
pub struct ShareClient<A: GpuApi> {
    inner: Arc<ClientInner<A>>,
}

impl<A: GpuApi> Clone for ShareClient<A> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

static SPAWNED: AtomicU32 = AtomicU32::new(0);

impl<A: GpuApi> ShareClient<A> {
    /// Connects to the daemon serving `socket` (see
    /// [`default_socket_path`](crate::default_socket_path)). A daemon of
    /// another backend
    /// refuses the client.
    pub fn connect(api: A, socket: &Path) -> Result<Self, ShareError> {
        let connections = Connections::connect(socket, WireBackend::of(A::BACKEND))?;
        Ok(Self::with(api, connections, None))
    }

    /// Starts a daemon (`tandem share serve`, see
    /// [`find_tandem_binary`]) in a child process on a socket of its own and
    /// connects to it; it serves when this returns, and stops when the
    /// last clone of this client and its buffers are gone.
    pub fn spawn_daemon(api: A) -> Result<Self, ShareError> {
        let exe = find_tandem_binary()
            .map_err(|e| ShareError::CannotServe(format!("cannot start a daemon: {e}")))?;
        Self::spawn_daemon_with(api, &exe)
    }

    /// [`spawn_daemon`](Self::spawn_daemon) with an explicit executable.
    pub fn spawn_daemon_with(api: A, exe: &Path) -> Result<Self, ShareError> {
        Self::spawn_daemon_polling(api, exe, Polling::default())
    }

    /// [`spawn_daemon_with`](Self::spawn_daemon_with), the daemon polling
    /// for requests as `polling` says.
    pub fn spawn_daemon_polling(api: A, exe: &Path, polling: Polling) -> Result<Self, ShareError> {
        let socket = transport::runtime_dir().join(format!(
            "share-{}-{}.sock",
            std::process::id(),
            SPAWNED.fetch_add(1, Ordering::Relaxed)
        ));
        // `tandem share serve --backend` takes the names Backend displays.
        let backend = A::BACKEND.to_string();
        let poll_us = polling.window.as_micros().to_string();
        let poll_threads = polling.threads.to_string();
        let args: [&OsStr; 12] = [
            "share".as_ref(),
            "serve".as_ref(),
            "--socket".as_ref(),
            socket.as_os_str(),
            "--backend".as_ref(),
            backend.as_ref(),
            "--poll-us".as_ref(),
            poll_us.as_ref(),
            "--poll-threads".as_ref(),
            poll_threads.as_ref(),
            "--announce".as_ref(),
            "--exit-on-stdin-eof".as_ref(),
        ];
        let daemon = ServiceChild::spawn(exe, &args)
            .map_err(|e| ShareError::CannotServe(format!("cannot start a daemon: {e}")))?;
        let socket = PathBuf::from(daemon.ready());
        match Connections::connect(&socket, WireBackend::of(A::BACKEND)) {
            Ok(connections) => Ok(Self::with(api, connections, Some(daemon))),
            Err(e) => {
                let _ = daemon.stop();
                Err(e)
            }
        }
    }

    fn with(api: A, connections: Connections, daemon: Option<ServiceChild>) -> Self {
        Self {
            inner: Arc::new(ClientInner {
                api,
                connections,
                devices: Mutex::new(HashMap::new()),
                streams: Mutex::new(HashMap::new()),
                cache: Mutex::new(HashMap::new()),
                daemon: Mutex::new(daemon),
                retired: Mutex::new(VecDeque::new()),
                made_in: Mutex::new(MadeIn::this_process()),
                inherited_from: AtomicU32::new(0),
                restarts_seen: AtomicU64::new(0),
            }),
        }
    }

    /// Whether `other` is this client or a clone of it: one token with the
    /// daemon, so a buffer one creates is the other's to stage and bind.
    pub fn same_client(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The daemon's process id.
    pub fn daemon_pid(&self) -> u32 {
        self.inner.connections.daemon_pid()
    }

    /// The socket the daemon serves.
    pub fn socket_path(&self) -> &Path {
        self.inner.connections.socket()
    }

    /// Device `ordinal` of this client's backend (opened once).
    pub fn device(&self, ordinal: usize) -> Result<Arc<A::Device>, ShareError> {
        self.inner.for_this_process();
        let mut devices = lock_across_forks(&self.inner.devices);
        if let Some(device) = devices.get(&ordinal) {
            return Ok(Arc::clone(device));
        }
        let parent = self.inner.inherited_from.load(Ordering::Relaxed);
        if parent != 0 && A::BACKEND != tandem_hal::Backend::Host {
            return Err(ShareError::GpuInForkedChild { parent });
        }
        let available = self.inner.connections.devices();
        if ordinal >= available as usize {
            return Err(ShareError::NoDevice(format!(
                "device {ordinal}: the daemon has {available}"
            )));
        }
        let device = Arc::new(self.inner.api.device(ordinal)?);
        devices.insert(ordinal, Arc::clone(&device));
        Ok(device)
    }

    /// The client's own stream of device `ordinal`, made on first use: for
    /// callers that order their copies and seals on a stream of no library
    /// of their own (the C and Python fronts). Shared by every caller of
    /// this client, so work queued on it runs in the order queued.
    pub fn stream(&self, ordinal: usize) -> Result<DeviceStream<A>, ShareError> {
        let device = self.device(ordinal)?;
        let mut streams = lock_across_forks(&self.inner.streams);
        if let Some(stream) = streams.get(&ordinal) {
            return Ok((device, Arc::clone(stream)));
        }
        let stream = Arc::new(device.create_stream()?);
        streams.insert(ordinal, Arc::clone(&stream));
        Ok((device, stream))
    }

    /// A new buffer of `bytes` on `device`, which this client alone may
    /// write until it seals it. Dropping it unsealed abandons it (the
    /// daemon frees it).
    pub fn create_buffer(
        &self,
        device: usize,
        bytes: usize,
    ) -> Result<(ObjectId, MutableGpuBuffer<A>), ShareError> {
        if bytes == 0 {
            return Err(ShareError::InvalidSize { bytes: 0 });
        }
        let gpu = self.device(device)?;
        let request = Request::Create {
            device: device as u32,
            bytes: bytes as u64,
        };
        let (reply, fd) = self
            .inner
            .connections
            .call(&request, None)
            .map_err(|e| match e {
                ShareError::Daemon {
                    code: crate::wire::ErrorCode::InvalidSize,
                    ..
                } => ShareError::InvalidSize {
                    bytes: bytes as u64,
                },
                e => e,
            })?;
        let Reply::Created { id, handle } = reply else {
            return Err(unexpected(&reply));
        };
        let lease = Lease::new(id, Arc::clone(&self.inner));
        // Kept mappings of a daemon since restarted name none of this one's
        // allocations.
        self.inner.for_this_daemon();
        // An allocation of a buffer of ours that the daemon kept, which we
        // still map: nothing to map (the descriptor names the same memory).
        let retired = matches!(handle.form, HandleForm::Fd)
            .then(|| self.inner.take_retired(handle.allocation, gpu.ordinal()))
            .flatten()
            .filter(|r| r.event_handle.0 == handle.event);
        let mapping = match retired {
            Some(retired) => Mapping::reused(retired, lease),
            None => self.map(lease, &gpu, &gpu, handle, fd, MapFor::Creator)?,
        };
        // The writer opens the seal's event now, before it queues work, so
        // that its seal makes no driver call but the record: on CUDA, set-up
        // calls made while kernels ran were seen to wait for them
        // (docs/shared-buffers.md, "What the H100 showed"), and a seal must
        // not wait for the work it orders readers after.
        mapping.open_event()?;
        Ok((id, MutableGpuBuffer::new(Arc::new(mapping))))
    }

    /// Seals `buffer`: records its event on `stream` (so readers' work waits
    /// for what was queued there before) and lets readers open it. Returns
    /// it read-only. The record runs with the stream's work: a writer that
    /// exits before it has run (synchronise the stream first) leaves the
    /// event pending for ever, and readers waiting on it.
    pub fn seal(
        &self,
        buffer: MutableGpuBuffer<A>,
        stream: &<A::Device as GpuDevice>::Stream,
    ) -> Result<GpuBuffer<A>, ShareError> {
        self.try_seal(buffer, stream).map_err(|(e, _)| e)
    }

    /// [`seal`](Self::seal), giving the buffer back, still the writer's and
    /// mapped, when the seal fails: for callers that lent its memory out
    /// (a DLPack consumer) and must keep it mapped whatever happens.
    pub fn try_seal(
        &self,
        buffer: MutableGpuBuffer<A>,
        stream: &<A::Device as GpuDevice>::Stream,
    ) -> Result<GpuBuffer<A>, (ShareError, MutableGpuBuffer<A>)> {
        self.try_seal_with(buffer, |device, event| device.record_event(event, stream))
    }

    /// [`try_seal`](Self::try_seal) where `record` records the seal's event
    /// (given the device holding the buffer, and the event) on a stream that
    /// is no Tandem stream: another library's, named by its raw handle
    /// (`CudaDevice::foreign_stream_record_event`).
    pub fn try_seal_with(
        &self,
        buffer: MutableGpuBuffer<A>,
        record: impl FnOnce(&A::Device, &<A::Device as GpuDevice>::Event) -> GpuResult<()>,
    ) -> Result<GpuBuffer<A>, (ShareError, MutableGpuBuffer<A>)> {
        let mapping = buffer.into_mapping();
        let id = mapping.id();
        let sealed = mapping.record_seal(record).and_then(|()| {
            self.inner
                .connections
                .call(&Request::Seal { id }, Some(id))
                .map(drop)
        });
        if let Err(e) = sealed {
            return Err((e, MutableGpuBuffer::new(mapping)));
        }
        self.cache()
            .entry(id)
            .or_default()
            .push(Arc::downgrade(&mapping));
        Ok(GpuBuffer::new(mapping))
    }

    /// Opens sealed buffer `id` read-only on the device that holds it (see
    /// [`ObjectInfo::device`]), making `stream`, a stream of that device,
    /// wait for the writer's work; waits up to [`DEFAULT_SEAL_WAIT`] for the
    /// seal.
    pub fn get_buffer(
        &self,
        id: ObjectId,
        stream: &<A::Device as GpuDevice>::Stream,
    ) -> Result<GpuBuffer<A>, ShareError> {
        self.get_buffer_within(id, stream, DEFAULT_SEAL_WAIT)
    }

    /// [`get_buffer`](Self::get_buffer), waiting up to `wait` for the seal
    /// (`NotSealed` after it).
    pub fn get_buffer_within(
        &self,
        id: ObjectId,
        stream: &<A::Device as GpuDevice>::Stream,
        wait: Duration,
    ) -> Result<GpuBuffer<A>, ShareError> {
        self.get(id, None, stream, wait)
    }

    /// Opens sealed buffer `id` read-only, mapped for device `device`, which
    /// may be another device than the one holding its memory: then the
    /// mapping reaches that memory through peer access
    /// ([`GpuBuffer::access`] says [`Access::Peer`]), or, where `device`
    /// cannot reach it, the open fails with [`ShareError::NoPeerAccess`]
    /// (open it on its holder and copy it with [`GpuBuffer::copy_to`]).
    /// `stream`, a stream of `device`, is made to wait for the writer's
    /// work. Waits up to `wait` for the seal (`NotSealed` after it).
    pub fn get_buffer_on(
        &self,
        id: ObjectId,
        device: usize,
        stream: &<A::Device as GpuDevice>::Stream,
        wait: Duration,
    ) -> Result<GpuBuffer<A>, ShareError> {
        self.get(id, Some(device), stream, wait)
    }

    /// A mapping of `id` for `device` (`None`: its holder), from the cache
    /// or opened now, with `stream` (of that device) ordered after the seal.
    fn get(
        &self,
        id: ObjectId,
        device: Option<usize>,
        stream: &<A::Device as GpuDevice>::Stream,
        wait: Duration,
    ) -> Result<GpuBuffer<A>, ShareError> {
        let wanted = |mapping: &Mapping<A>| match device {
            Some(ordinal) => mapping.device().ordinal() == ordinal,
            None => mapping.access() == Access::Local,
        };
        let cached = self.cache().get(&id).and_then(|mappings| {
            mappings
                .iter()
                .filter_map(Weak::upgrade)
                .find(|mapping| wanted(mapping))
        });
        let mapping = match cached {
            Some(mapping) => mapping,
            None => {
                let mapping = Arc::new(self.open(id, device, wait)?);
                self.cache()
                    .entry(id)
                    .or_default()
                    .push(Arc::downgrade(&mapping));
                mapping
            }
        };
        mapping.order_after_seal(mapping.device(), stream)?;
        Ok(GpuBuffer::new(mapping))
    }

    fn open(
        &self,
        id: ObjectId,
        device: Option<usize>,
        wait: Duration,
    ) -> Result<Mapping<A>, ShareError> {
        let started = Instant::now();
        let timeout_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        let request = Request::Open { id, timeout_ms };
        let (reply, fd) = self
            .inner
            .connections
            .call(&request, Some(id))
            .map_err(|e| match e {
                ShareError::Daemon {
                    code: crate::wire::ErrorCode::NotSealed,
                    ..
                } => ShareError::NotSealed {
                    id,
                    waited: started.elapsed(),
                },
                e => e,
            })?;
        let Reply::Opened {
            info,
            handle,
            seal_done,
        } = reply
        else {
            return Err(unexpected(&reply));
        };
        // The daemon took a lease for this open: given back if anything
        // below fails.
        let lease = Lease::new(id, Arc::clone(&self.inner));
        let holder = self.device(info.device as usize)?;
        let gpu = match device {
            Some(ordinal) => self.device(ordinal)?,
            None => Arc::clone(&holder),
        };
        self.map(
            lease,
            &gpu,
            &holder,
            handle,
            fd,
            MapFor::Reader { seal_done },
        )
    }

    /// Maps what the daemon handed out, under `lease` (given back if mapping
    /// fails), for `gpu`, the buffer's memory being `holder`'s, for its
    /// creator (kept for reuse when it goes, if an fd import) or a reader.
    /// The seal's event is opened later, if ever (`seal_done`: the daemon
    /// saw the writer's work finished).
    fn map(
        &self,
        lease: Lease<A>,
        gpu: &Arc<A::Device>,
        holder: &Arc<A::Device>,
        handle: BufferHandle,
        fd: Option<std::os::fd::OwnedFd>,
        map_for: MapFor,
    ) -> Result<Mapping<A>, ShareError> {
        let id = lease.id();
        let access = if gpu.ordinal() == holder.ordinal() {
            Access::Local
        } else {
            if !gpu.can_access_peer(holder)? {
                return Err(ShareError::NoPeerAccess {
                    id,
                    device: gpu.ordinal(),
                    holder: holder.ordinal(),
                });
            }
            // A VMM import grants `gpu` access itself; a legacy IPC handle
            // maps the holder's allocation, which `gpu` reaches once peer
            // access is on.
            if matches!(handle.form, HandleForm::Ipc { .. }) {
                gpu.enable_peer_access(holder)?;
            }
            Access::Peer {
                holder: holder.ordinal(),
            }
        };
        let len = usize::try_from(handle.len)
            .map_err(|_| ShareError::Protocol("buffer length overflows".into()))?;
        let size = usize::try_from(handle.size)
            .map_err(|_| ShareError::Protocol("buffer size overflows".into()))?;
        let shareable = match (handle.form, fd) {
            (HandleForm::Fd, Some(fd)) => ShareableHandle::Fd { fd, size, len },
            (HandleForm::Ipc { handle, offset }, None) => ShareableHandle::Ipc {
                handle: IpcMemHandle(handle),
                offset: usize::try_from(offset)
                    .map_err(|_| ShareError::Protocol("offset overflows".into()))?,
                len,
            },
            _ => {
                return Err(ShareError::Protocol(
                    "handle form and descriptor disagree".into(),
                ))
            }
        };
        let keep = matches!(map_for, MapFor::Creator) && matches!(handle.form, HandleForm::Fd);
        let seal_done = matches!(map_for, MapFor::Reader { seal_done: true });
        // Readers map it read-only where the backend can enforce that (see
        // `MemoryAccess`): a reader's store must not change what every
        // other reader sees.
        let allowed = match map_for {
            MapFor::Creator => MemoryAccess::ReadWrite,
            MapFor::Reader { .. } => MemoryAccess::ReadOnly,
        };
        let buffer = gpu.import_shareable(shareable, allowed)?;
        let event = IpcEventHandle(handle.event);
        Ok(Mapping::new(
            Arc::clone(gpu),
            Arc::clone(holder),
            access,
            buffer,
            event,
            (handle.allocation, keep),
            seal_done,
            lease,
        ))
    }

    /// Deletes `id`: nobody can open it any more, and the daemon frees it
    /// when its last lease goes (a process that maps it keeps it).
    pub fn delete(&self, id: ObjectId) -> Result<(), ShareError> {
        self.cache().remove(&id);
        self.inner.connections.delete(id)
    }

    /// What the daemon knows of `id`.
    pub fn stat(&self, id: ObjectId) -> Result<ObjectInfo, ShareError> {
        self.inner.connections.stat(id)
    }

    /// Stages this client's unsealed buffer `id` for named set `name`, the
    /// first step of publishing a set: nobody can open it until the set is
    /// bound ([`bind_set`](Self::bind_set)), and it is freed if this client
    /// lets go of it, or dies, before.
    pub fn stage(&self, id: ObjectId, name: &str) -> Result<(), ShareError> {
        let request = Request::Stage {
            id,
            name: name.to_owned(),
        };
        self.inner.connections.set_call(name, &request).map(drop)
    }

    /// Binds the next version of named set `name` to the sealed `manifest`
    /// and `buffers`, which this client staged for it, all at once (a
    /// reader sees the whole version or none); `tensors` is what `ls`
    /// shows. The set outlives this client; its versions beyond those the
    /// daemon keeps are deleted (alive for those who hold them).
    ///
    /// It first waits for the work the seals of those buffers wait for (those
    /// this client maps): a set bound before its data is written, whose
    /// publisher then dies, would hold buffers whose readers wait for
    /// events nobody will record.
    pub fn bind_set(
        &self,
        name: &str,
        manifest: ObjectId,
        buffers: &[ObjectId],
        tensors: u32,
    ) -> Result<SetInfo, ShareError> {
        if buffers.len() > MAX_SET_BUFFERS {
            return Err(ShareError::Protocol(format!(
                "a set of {} buffers: at most {MAX_SET_BUFFERS}",
                buffers.len()
            )));
        }
        self.wait_for_seals(core::iter::once(&manifest).chain(buffers))?;
        let request = Request::BindSet {
            name: name.to_owned(),
            manifest,
            buffers: buffers.to_vec(),
            tensors,
        };
        self.inner
            .connections
            .set_call(name, &request)?
            .ok_or_else(|| ShareError::Protocol("no set in the reply".into()))
    }

    /// Version `version` of named set `name` (`None`: the latest); open
    /// its buffers by id.
    pub fn lookup_set(&self, name: &str, version: Option<u64>) -> Result<SetInfo, ShareError> {
        self.inner.connections.lookup_set(name, version)
    }

    /// Every version of every named set the daemon keeps.
    pub fn list_sets(&self) -> Result<Vec<SetInfo>, ShareError> {
        self.inner.connections.list_sets()
    }

    /// Deletes named set `name`: nobody can look it up any more, and its
    /// buffers are freed when their last leases go.
    pub fn delete_set(&self, name: &str) -> Result<(), ShareError> {
        self.inner.connections.delete_set(name)
    }

    /// Lets the other nodes of the daemon's cluster fetch sealed buffer
    /// `id` (nothing leaves a node unless exported).
    pub fn export(&self, id: ObjectId) -> Result<(), ShareError> {
        self.inner.connections.export(id)
    }

    /// Copies buffer `remote` (`NODE/ID`: sealed and exported on node
    /// `NODE` of the daemon's cluster) into a new sealed buffer on this
    /// daemon's device `device`, and opens it: its local id and the
    /// buffer, an ordinary local buffer from then on. The remote buffer
    /// cannot be freed while the copy is made; a fetch that fails leaves
    /// nothing behind on either node.
    pub fn fetch(
        &self,
        remote: &str,
        device: usize,
    ) -> Result<(ObjectId, GpuBuffer<A>), ShareError> {
        let gpu = self.device(device)?;
        let (info, handle, fd) = self.inner.connections.fetch(remote, device as u32)?;
        // The daemon took a lease for this client: given back if mapping fails.
        let lease = Lease::new(info.id, Arc::clone(&self.inner));
        self.inner.for_this_daemon();
        let mapping = Arc::new(self.map(
            lease,
            &gpu,
            &gpu,
            handle,
            fd,
            MapFor::Reader { seal_done: true },
        )?);
        self.cache()
            .entry(info.id)
            .or_default()
            .push(Arc::downgrade(&mapping));
        Ok((info.id, GpuBuffer::new(mapping)))
    }

    /// The daemon's place in its cluster.
    pub fn cluster_status(&self) -> Result<ClusterInfo, ShareError> {
        self.inner.connections.cluster_status()
    }

    /// Every buffer the daemon holds.
    pub fn list(&self) -> Result<Vec<ObjectInfo>, ShareError> {
        self.inner.connections.list()
    }

    /// The daemon's totals.
    pub fn status(&self) -> Result<DaemonStatus, ShareError> {
        self.inner.connections.status()
    }

    /// Blocks until the writers' work behind the seals of `ids` is done,
    /// for those of them this client maps.
    fn wait_for_seals<'i>(
        &self,
        ids: impl Iterator<Item = &'i ObjectId>,
    ) -> Result<(), ShareError> {
        // Taken out of the cache first: the waits must not hold its lock.
        let mapped: Vec<Arc<Mapping<A>>> = {
            let cache = self.cache();
            ids.filter_map(|id| cache.get(id))
                .flatten()
                .filter_map(Weak::upgrade)
                .collect()
        };
        mapped
            .iter()
            .try_for_each(|mapping| mapping.wait_for_seal())
    }

    fn cache(&self) -> ForkSafeGuard<'_, HashMap<ObjectId, Vec<Weak<Mapping<A>>>>> {
        self.inner.for_this_process();
        self.inner.for_this_daemon();
        lock_across_forks(&self.inner.cache)
    }
}

/// Whom [`ShareClient::map`] maps for.
#[derive(Clone, Copy)]
enum MapFor {
    /// The buffer's creator, whose mapping of an fd handle is kept for reuse
    /// when it goes.
    Creator,
    /// A reader; `seal_done`: the daemon saw the writer's work finished.
    Reader { seal_done: bool },
}
