//! A share client and a held buffer whatever their backend: what a front
//! that is not generic (the C ABI, Python) holds, so that the backend is
//! chosen once, here, and not by each front.
//!
//! Both are enums with a variant per backend this build has: a front that
//! needs its backend's own calls (Python's DLPack and stream conventions)
//! matches on the variant, and every other call is made here.

use std::path::Path;
use std::time::Duration;

use tandem_backends::{AnyApi, Backend, BackendChoice};
use tandem_hal::GpuApi;

use crate::client::ShareClient;
use crate::connection::Inspector;
use crate::error::ShareError;
use crate::held::HeldBuffer;
use crate::wire::{ClusterInfo, DaemonStatus, ObjectId, ObjectInfo, SetInfo};

/// A [`ShareClient`] of the backend its daemon serves.
#[derive(Clone)]
#[non_exhaustive]
pub enum AnyShareClient {
    /// The CPU device's.
    Host(ShareClient<tandem_hal::HostApi>),
    /// CUDA's (the `cuda` feature).
    #[cfg(feature = "cuda")]
    Cuda(ShareClient<tandem_hal_cuda::CudaApi>),
    /// HIP's (the `hip` feature).
    #[cfg(feature = "hip")]
    Hip(ShareClient<tandem_hal_hip::HipApi>),
}

/// A [`HeldBuffer`] of one of [`AnyShareClient`]'s backends.
#[non_exhaustive]
pub enum AnyHeldBuffer {
    /// The CPU device's.
    Host(HeldBuffer<tandem_hal::HostApi>),
    /// CUDA's (the `cuda` feature).
    #[cfg(feature = "cuda")]
    Cuda(HeldBuffer<tandem_hal_cuda::CudaApi>),
    /// HIP's (the `hip` feature).
    #[cfg(feature = "hip")]
    Hip(HeldBuffer<tandem_hal_hip::HipApi>),
}

/// `$body` on every variant of `$value` (an [`AnyShareClient`] or an
/// [`AnyHeldBuffer`]), `$x` bound to what it holds.
macro_rules! on_each {
    ($enum:ident, $value:expr, $x:ident => $body:expr) => {
        match $value {
            $enum::Host($x) => $body,
            #[cfg(feature = "cuda")]
            $enum::Cuda($x) => $body,
            #[cfg(feature = "hip")]
            $enum::Hip($x) => $body,
        }
    };
}

/// [`on_each`] on an [`AnyShareClient`], `$body` a result of a
/// [`HeldBuffer`] of the same backend, made an [`AnyHeldBuffer`].
macro_rules! held_of_each {
    ($value:expr, $x:ident => $body:expr) => {
        match $value {
            AnyShareClient::Host($x) => $body.map(AnyHeldBuffer::Host),
            #[cfg(feature = "cuda")]
            AnyShareClient::Cuda($x) => $body.map(AnyHeldBuffer::Cuda),
            #[cfg(feature = "hip")]
            AnyShareClient::Hip($x) => $body.map(AnyHeldBuffer::Hip),
        }
    };
}

impl AnyShareClient {
    /// Connects to the daemon serving `socket`, on the backend it serves:
    /// [`ShareError::Refused`] where this build lacks that backend.
    pub fn connect(socket: &Path) -> Result<Self, ShareError> {
        let served = Inspector::connect(socket)?.status()?.backend;
        let backend = served
            .backend()
            .ok_or_else(|| ShareError::Protocol("the daemon serves no backend".to_owned()))?;
        if !BackendChoice::is_built(backend) {
            return Err(ShareError::Refused(format!(
                "the daemon serves the {backend} backend, which this build lacks (built without the {backend} feature)"
            )));
        }
        match AnyApi::load(BackendChoice::Only(backend))? {
            AnyApi::Host(api) => Ok(Self::Host(ShareClient::connect(api, socket)?)),
            #[cfg(feature = "cuda")]
            AnyApi::Cuda(api) => Ok(Self::Cuda(ShareClient::connect(api, socket)?)),
            #[cfg(feature = "hip")]
            AnyApi::Hip(api) => Ok(Self::Hip(ShareClient::connect(api, socket)?)),
            #[allow(
                unreachable_patterns,
                reason = "AnyApi may grow a backend this crate has not learnt"
            )]
            other => Err(not_served(other.backend())),
        }
    }

    /// Starts a daemon on the backend `choice` names, in a child process
    /// on a socket of its own, and connects
    /// ([`ShareClient::spawn_daemon_with`]); `exe` is the `tandem`
    /// executable (`None`: `$TANDEM_BIN`, else `tandem` beside this program).
    pub fn spawn(choice: BackendChoice, exe: Option<&Path>) -> Result<Self, ShareError> {
        fn spawn<A: GpuApi>(api: A, exe: Option<&Path>) -> Result<ShareClient<A>, ShareError> {
            match exe {
                Some(exe) => ShareClient::spawn_daemon_with(api, exe),
                None => ShareClient::spawn_daemon(api),
            }
        }
        match AnyApi::load(choice)? {
            AnyApi::Host(api) => Ok(Self::Host(spawn(api, exe)?)),
            #[cfg(feature = "cuda")]
            AnyApi::Cuda(api) => Ok(Self::Cuda(spawn(api, exe)?)),
            #[cfg(feature = "hip")]
            AnyApi::Hip(api) => Ok(Self::Hip(spawn(api, exe)?)),
            #[allow(
                unreachable_patterns,
                reason = "AnyApi may grow a backend this crate has not learnt"
            )]
            other => Err(not_served(other.backend())),
        }
    }

    /// The backend it maps buffers with (the daemon's).
    pub fn backend(&self) -> Backend {
        on_each!(AnyShareClient, self, _client => backend_of(_client))
    }

    /// Whether `other` is this client or a clone of it
    /// ([`ShareClient::same_client`]).
    pub fn same_client(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Host(a), Self::Host(b)) => a.same_client(b),
            #[cfg(feature = "cuda")]
            (Self::Cuda(a), Self::Cuda(b)) => a.same_client(b),
            #[cfg(feature = "hip")]
            (Self::Hip(a), Self::Hip(b)) => a.same_client(b),
            #[allow(
                unreachable_patterns,
                reason = "reached only in builds with more than one backend"
            )]
            _ => false,
        }
    }

    /// The daemon's process id.
    pub fn daemon_pid(&self) -> u32 {
        on_each!(AnyShareClient, self, client => client.daemon_pid())
    }

    /// The socket the daemon serves.
    pub fn socket_path(&self) -> &Path {
        on_each!(AnyShareClient, self, client => client.socket_path())
    }

    /// A new buffer of `bytes` on `device`, this process's to write until
    /// sealed ([`ShareClient::create_buffer`]).
    pub fn create(&self, device: usize, bytes: usize) -> Result<AnyHeldBuffer, ShareError> {
        held_of_each!(self, client => client
            .create_buffer(device, bytes)
            .map(|(_id, buffer)| HeldBuffer::writable(client.clone(), buffer)))
    }

    /// Sealed buffer `id`, read-only, mapped for `device` (`None`: the
    /// device holding it), waiting up to `wait` for its seal. The client's
    /// own stream of `device` ([`ShareClient::stream`]) waits for the
    /// writer's work; the host does not (see
    /// [`AnyHeldBuffer::wait_for_seal`]).
    pub fn get(
        &self,
        id: ObjectId,
        device: Option<usize>,
        wait: Duration,
    ) -> Result<AnyHeldBuffer, ShareError> {
        let device = match device {
            Some(device) => device,
            None => self.stat(id)?.device as usize,
        };
        held_of_each!(self, client => get(client, id, device, wait))
    }

    /// Deletes `id` ([`ShareClient::delete`]).
    pub fn delete(&self, id: ObjectId) -> Result<(), ShareError> {
        on_each!(AnyShareClient, self, client => client.delete(id))
    }

    /// What the daemon knows of `id`.
    pub fn stat(&self, id: ObjectId) -> Result<ObjectInfo, ShareError> {
        on_each!(AnyShareClient, self, client => client.stat(id))
    }

    /// Every buffer the daemon holds.
    pub fn list(&self) -> Result<Vec<ObjectInfo>, ShareError> {
        on_each!(AnyShareClient, self, client => client.list())
    }

    /// The daemon's totals.
    pub fn status(&self) -> Result<DaemonStatus, ShareError> {
        on_each!(AnyShareClient, self, client => client.status())
    }

    /// [`ShareClient::stage`].
    pub fn stage(&self, id: ObjectId, name: &str) -> Result<(), ShareError> {
        on_each!(AnyShareClient, self, client => client.stage(id, name))
    }

    /// [`ShareClient::bind_set`].
    pub fn bind_set(
        &self,
        name: &str,
        manifest: ObjectId,
        buffers: &[ObjectId],
        tensors: u32,
    ) -> Result<SetInfo, ShareError> {
        on_each!(AnyShareClient, self, client => client.bind_set(name, manifest, buffers, tensors))
    }

    /// [`ShareClient::lookup_set`].
    pub fn lookup_set(&self, name: &str, version: Option<u64>) -> Result<SetInfo, ShareError> {
        on_each!(AnyShareClient, self, client => client.lookup_set(name, version))
    }

    /// [`ShareClient::list_sets`].
    pub fn list_sets(&self) -> Result<Vec<SetInfo>, ShareError> {
        on_each!(AnyShareClient, self, client => client.list_sets())
    }

    /// [`ShareClient::delete_set`].
    pub fn delete_set(&self, name: &str) -> Result<(), ShareError> {
        on_each!(AnyShareClient, self, client => client.delete_set(name))
    }

    /// [`ShareClient::export`].
    pub fn export(&self, id: ObjectId) -> Result<(), ShareError> {
        on_each!(AnyShareClient, self, client => client.export(id))
    }

    /// [`ShareClient::fetch`]: the local copy, sealed.
    pub fn fetch(&self, remote: &str, device: usize) -> Result<AnyHeldBuffer, ShareError> {
        held_of_each!(self, client => client
            .fetch(remote, device)
            .map(|(_, buffer)| HeldBuffer::sealed(client.clone(), buffer)))
    }

    /// [`ShareClient::cluster_status`].
    pub fn cluster_status(&self) -> Result<ClusterInfo, ShareError> {
        on_each!(AnyShareClient, self, client => client.cluster_status())
    }
}

/// `A`'s name, for a client of it.
fn backend_of<A: GpuApi>(_client: &ShareClient<A>) -> Backend {
    A::BACKEND
}

fn not_served(backend: Backend) -> ShareError {
    ShareError::Refused(format!("no share client of the {backend} backend"))
}

/// [`AnyShareClient::get`] on one backend.
fn get<A: GpuApi>(
    client: &ShareClient<A>,
    id: ObjectId,
    device: usize,
    wait: Duration,
) -> Result<HeldBuffer<A>, ShareError> {
    // The client's own stream: one per device however many opens, and a
    // forked child gets one of its own. Threads opening at once share it,
    // so one may also wait for another's writer: never less than its own.
    let (_device, stream) = client.stream(device)?;
    let buffer = client.get_buffer_on(id, device, &stream, wait)?;
    Ok(HeldBuffer::sealed(client.clone(), buffer))
}

impl AnyHeldBuffer {
    /// The backend its memory is of.
    pub fn backend(&self) -> Backend {
        on_each!(AnyHeldBuffer, self, held => backend_of(held.client()))
    }

    /// Its id.
    pub fn id(&self) -> ObjectId {
        on_each!(AnyHeldBuffer, self, held => held.id())
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        on_each!(AnyHeldBuffer, self, held => held.len())
    }

    /// Whether it is empty (never: buffers hold at least a byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its address on the device it is mapped for (constant).
    pub fn device_ptr(&self) -> u64 {
        on_each!(AnyHeldBuffer, self, held => held.device_ptr())
    }

    /// The ordinal of the device it is mapped for.
    pub fn device(&self) -> usize {
        on_each!(AnyHeldBuffer, self, held => held.device())
    }

    /// Whether it is sealed (read-only).
    pub fn is_sealed(&self) -> bool {
        on_each!(AnyHeldBuffer, self, held => held.is_sealed())
    }

    /// [`HeldBuffer::write`].
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), ShareError> {
        on_each!(AnyHeldBuffer, self, held => held.write(offset, data))
    }

    /// [`HeldBuffer::read`].
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), ShareError> {
        on_each!(AnyHeldBuffer, self, held => held.read(offset, out))
    }

    /// [`HeldBuffer::to_vec`].
    pub fn to_vec(&self) -> Result<Vec<u8>, ShareError> {
        on_each!(AnyHeldBuffer, self, held => held.to_vec())
    }

    /// [`HeldBuffer::seal`]: for callers whose own work on it is complete.
    pub fn seal(&self) -> Result<(), ShareError> {
        on_each!(AnyHeldBuffer, self, held => held.seal())
    }

    /// [`HeldBuffer::wait_for_seal`]: the host waits for the writer's work.
    pub fn wait_for_seal(&self) -> Result<(), ShareError> {
        on_each!(AnyHeldBuffer, self, held => held.wait_for_seal())
    }
}
