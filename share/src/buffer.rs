//! Shared buffers as a process sees them: mapped once per device, handed
//! out as [`MutableGpuBuffer`] (the writer's, until sealed) and
//! [`GpuBuffer`] (read-only), both [`DeviceMemory`] of their backend, so
//! they go straight into copies and kernel launches; and [`HostMirror`], a
//! host copy that a writer's mirror copies back when dropped.
//!
//! A buffer's memory lives on one device, its holder (where it was
//! created). A reader may map it for another device ([`Access::Peer`]) where
//! that device reaches the holder's memory, or copy it across
//! ([`GpuBuffer::copy_to`]).

use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use std::sync::Arc;

use tandem_hal::{DeviceMemory, GpuApi, GpuDevice};

use crate::error::ShareError;
use crate::mapping::{Access, Mapping};
use crate::wire::ObjectId;

/// A sealed shared buffer, read-only by contract: kernels may read it (the
/// type cannot stop a kernel writing through a pointer; nothing but its
/// writer's work may change it). Clones share one mapping.
pub struct GpuBuffer<A: GpuApi> {
    mapping: Arc<Mapping<A>>,
}

impl<A: GpuApi> Clone for GpuBuffer<A> {
    fn clone(&self) -> Self {
        Self {
            mapping: Arc::clone(&self.mapping),
        }
    }
}

impl<A: GpuApi> GpuBuffer<A> {
    pub(crate) fn new(mapping: Arc<Mapping<A>>) -> Self {
        Self { mapping }
    }

    /// Its id.
    pub fn id(&self) -> ObjectId {
        self.mapping.id()
    }

    /// The device it is mapped on.
    pub fn device(&self) -> &A::Device {
        self.mapping.device()
    }

    /// Whether two handles share one mapping (the per-process cache).
    pub fn same_mapping(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.mapping, &other.mapping)
    }

    /// How this mapping reaches the buffer's memory: on its own device, or
    /// through peer access to the device holding it.
    pub fn access(&self) -> Access {
        self.mapping.access()
    }

    /// Blocks until the writer's work is done: what host code reads through
    /// a mapping that is host memory (the CPU device) waits for first.
    pub fn wait_for_seal(&self) -> Result<(), ShareError> {
        self.mapping.wait_for_seal()
    }

    /// The seal's event while the writer's work may still run (`None` once
    /// it is known done), for ordering a stream this crate does not own
    /// (another library's, through the backend's own calls) after it.
    pub fn pending_seal(&self) -> Result<Option<&<A::Device as GpuDevice>::Event>, ShareError> {
        self.mapping.pending_seal()
    }

    /// Copies the whole buffer into `dst`, memory of `device` (any device of
    /// the backend), at `dst_offset`, after the writer's work; complete on
    /// return. Device to device where `device` and this mapping's device
    /// have peer access, else staged by the driver: what a reader does whose
    /// device cannot map the buffer ([`ShareError::NoPeerAccess`]), with the
    /// buffer opened on the device holding it.
    pub fn copy_to(
        &self,
        device: &A::Device,
        dst: &impl DeviceMemory<Api = A>,
        dst_offset: usize,
    ) -> Result<(), ShareError> {
        self.mapping.wait_for_seal()?;
        Ok(device.copy_peer(dst, dst_offset, self.device(), self, 0, self.len())?)
    }

    /// [`copy_to`](Self::copy_to) on `stream`, a stream of `device`, which
    /// is made to wait for the writer's work first.
    pub fn copy_to_async(
        &self,
        device: &A::Device,
        stream: &<A::Device as GpuDevice>::Stream,
        dst: &impl DeviceMemory<Api = A>,
        dst_offset: usize,
    ) -> Result<(), ShareError> {
        self.mapping.order_after_seal(device, stream)?;
        Ok(device.copy_peer_async(stream, dst, dst_offset, self.device(), self, 0, self.len())?)
    }
}

impl<A: GpuApi> core::fmt::Debug for GpuBuffer<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GpuBuffer")
            .field("id", &self.id())
            .field("len", &self.len())
            .field("access", &self.access())
            .finish()
    }
}

// SAFETY: the range is the backend's own shareable buffer's, kept mapped
// by the `Arc` while `self` lives; both values are the buffer's, constant.
unsafe impl<A: GpuApi> DeviceMemory for GpuBuffer<A> {
    type Api = A;
    fn device_ptr(&self) -> u64 {
        self.mapping.buffer.device_ptr()
    }
    fn len(&self) -> usize {
        self.mapping.buffer.len()
    }
}

/// A shared buffer its writer has not sealed yet: the only handle that may
/// change it. [`crate::ShareClient::seal`] turns it into a [`GpuBuffer`].
pub struct MutableGpuBuffer<A: GpuApi> {
    mapping: Arc<Mapping<A>>,
}

impl<A: GpuApi> MutableGpuBuffer<A> {
    pub(crate) fn new(mapping: Arc<Mapping<A>>) -> Self {
        Self { mapping }
    }

    pub(crate) fn into_mapping(self) -> Arc<Mapping<A>> {
        self.mapping
    }

    /// Its id.
    pub fn id(&self) -> ObjectId {
        self.mapping.id()
    }

    /// The device it is mapped on.
    pub fn device(&self) -> &A::Device {
        self.mapping.device()
    }
}

impl<A: GpuApi> core::fmt::Debug for MutableGpuBuffer<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MutableGpuBuffer")
            .field("id", &self.id())
            .field("len", &self.len())
            .finish()
    }
}

// SAFETY: as for `GpuBuffer`.
unsafe impl<A: GpuApi> DeviceMemory for MutableGpuBuffer<A> {
    type Api = A;
    fn device_ptr(&self) -> u64 {
        self.mapping.buffer.device_ptr()
    }
    fn len(&self) -> usize {
        self.mapping.buffer.len()
    }
}

/// Whether a mirror copies back when dropped.
pub trait MirrorAccess {
    /// Copies back on drop (and may be written).
    const WRITE_BACK: bool;
}

/// A mirror of a [`GpuBuffer`]: read-only.
#[derive(Debug)]
pub enum ReadOnly {}
/// A mirror of a [`MutableGpuBuffer`]: written back on drop.
#[derive(Debug)]
pub enum WriteBack {}

impl MirrorAccess for ReadOnly {
    const WRITE_BACK: bool = false;
}
impl MirrorAccess for WriteBack {
    const WRITE_BACK: bool = true;
}

mod sealed {
    /// Only this crate's buffer borrows are mirror sources.
    pub trait Sealed {}
}

impl<A: GpuApi> sealed::Sealed for &GpuBuffer<A> {}
impl<A: GpuApi> sealed::Sealed for &mut MutableGpuBuffer<A> {}

/// What a [`HostMirror`] can be made of: `&GpuBuffer` (read-only) or
/// `&mut MutableGpuBuffer` (copied back). Sealed.
pub trait MirrorSource<'a, A: GpuApi>: sealed::Sealed {
    /// How the mirror treats its bytes.
    type Access: MirrorAccess;
    #[doc(hidden)]
    fn mapping(self) -> &'a Mapping<A>;
    #[doc(hidden)]
    fn ready(mapping: &Mapping<A>) -> Result<(), ShareError>;
}

impl<'a, A: GpuApi> MirrorSource<'a, A> for &'a GpuBuffer<A> {
    type Access = ReadOnly;
    fn mapping(self) -> &'a Mapping<A> {
        &self.mapping
    }
    /// The writer's work must be done before the host reads.
    fn ready(mapping: &Mapping<A>) -> Result<(), ShareError> {
        mapping.wait_for_seal()
    }
}

impl<'a, A: GpuApi> MirrorSource<'a, A> for &'a mut MutableGpuBuffer<A> {
    type Access = WriteBack;
    fn mapping(self) -> &'a Mapping<A> {
        &self.mapping
    }
    /// The writer orders its own streams.
    fn ready(_: &Mapping<A>) -> Result<(), ShareError> {
        Ok(())
    }
}

/// A host copy of a shared buffer (RAII, as the design notes have it):
/// made with the buffer's bytes or zeroes, and, for a writer's buffer,
/// copied back when dropped (or by [`finish`](Self::finish), which reports
/// errors a drop can only log). The buffer stays borrowed meanwhile.
pub struct HostMirror<'a, A: GpuApi, M: MirrorAccess> {
    mapping: &'a Mapping<A>,
    bytes: Vec<u8>,
    pending: bool,
    _access: PhantomData<M>,
}

impl<'a, A: GpuApi, M: MirrorAccess> HostMirror<'a, A, M> {
    /// Mirrors `buffer`: its bytes if `copy_in` (after the writer's work,
    /// for a sealed buffer), else zeroes.
    pub fn new<S: MirrorSource<'a, A, Access = M>>(
        buffer: S,
        copy_in: bool,
    ) -> Result<Self, ShareError> {
        let mapping = buffer.mapping();
        let mut bytes = vec![0u8; mapping.buffer.len()];
        if copy_in {
            S::ready(mapping)?;
            mapping
                .device()
                .copy_from_device(&mut bytes, &*mapping.buffer, 0)?;
        }
        Ok(Self {
            mapping,
            bytes,
            pending: M::WRITE_BACK,
            _access: PhantomData,
        })
    }

    /// Copies a writer's mirror back now (complete on return); a read-only
    /// mirror has nothing to do.
    pub fn finish(mut self) -> Result<(), ShareError> {
        self.write_back()
    }

    fn write_back(&mut self) -> Result<(), ShareError> {
        if !std::mem::take(&mut self.pending) {
            return Ok(());
        }
        Ok(self
            .mapping
            .device()
            .copy_to_device(&*self.mapping.buffer, 0, &self.bytes)?)
    }
}

impl<A: GpuApi, M: MirrorAccess> Deref for HostMirror<'_, A, M> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl<A: GpuApi> DerefMut for HostMirror<'_, A, WriteBack> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl<A: GpuApi, M: MirrorAccess> Drop for HostMirror<'_, A, M> {
    fn drop(&mut self) {
        if let Err(e) = self.write_back() {
            tracing::error!(
                "host mirror of shared buffer {} was not copied back: {e}",
                self.mapping.id()
            );
        }
    }
}
