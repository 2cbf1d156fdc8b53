//! Memory of the CPU device. Every kind of allocation is host memory in a
//! shared-memory segment, so its device address *is* its host address and
//! another process can map it (exportable buffers by name).
//!
//! # Validity of addresses
//! Copies and fills take any `impl DeviceMemory<Api = HostApi>`, whose
//! implementations promise (it is an `unsafe trait`) to name live memory of
//! this device. On this backend a device address is a host address, a bad
//! value of which would be undefined behaviour, and checking is cheap: every
//! live allocation, registration and IPC mapping is entered in a
//! process-wide registry of regions, and a copy or fill first finds the
//! region that contains the whole memory object (else `InvalidArgument`,
//! like a GPU driver rejecting an unknown pointer), so even a broken
//! promise cannot make a copy touch memory the device does not own. The region is reference-counted:
//! asynchronous commands hold it, so dropping a buffer with work still queued
//! is safe (the unmap waits for the work), as on CUDA.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use tandem_shm_core::Segment;

use super::api::HostApi;
use super::error::{host_error, segment_error};
use super::ipc::{self, HandleFields, HandleKind};
use super::wait::wait_until;
use crate::api::{DeviceMemory, HostMemory};
use crate::checks;
use crate::error::{Backend, ErrorKind, GpuResult};
use crate::ipc_cache::IpcOpenCache;
use crate::types::{IpcMemHandle, MemoryAccess, ShareableHandle, IPC_ALLOC_GRANULARITY};

/// A mapped range of host memory that kernels and copies may address.
pub(crate) struct Region {
    base: *mut u8,
    len: usize,
    /// The mapping, if this region owns one (registered regions do not).
    segment: Option<Segment>,
}

// SAFETY: `base` is the address of a shared mapping (or a registered region
// the caller keeps mapped); the region only hands the address out, and all
// accesses through it are the commands' and kernels' business.
unsafe impl Send for Region {}
// SAFETY: as above; `Region` has no interior mutability of its own.
unsafe impl Sync for Region {}

impl Region {
    fn of_segment(segment: Segment) -> Self {
        Self {
            base: segment.as_ptr(),
            len: segment.len(),
            segment: Some(segment),
        }
    }
}

type Registry = BTreeMap<usize, Arc<Region>>;

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    // Entries are inserted and removed whole; a poisoned map is consistent.
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The registered region that contains `[start, start + len)`, if any.
fn containing(registry: &Registry, start: usize, len: usize) -> Option<&Arc<Region>> {
    let (&base, region) = registry.range(..=start).next_back()?;
    let end = start.checked_add(len)?;
    (end <= base + region.len).then_some(region)
}

/// Enters a region; `InvalidArgument` if it overlaps a registered one.
fn register(call: &'static str, region: Region) -> GpuResult<Arc<Region>> {
    let mut registry = registry();
    let start = region.base as usize;
    let overlaps_before = registry
        .range(..=start)
        .next_back()
        .is_some_and(|(&base, r)| base + r.len > start);
    let overlaps_after = registry
        .range(start..)
        .next()
        .is_some_and(|(&base, _)| base < start + region.len);
    if overlaps_before || overlaps_after {
        return Err(host_error(
            call,
            ErrorKind::InvalidArgument(format!(
                "{:p}+{} overlaps memory already registered with the device",
                region.base, region.len
            )),
        ));
    }
    let region = Arc::new(region);
    registry.insert(start, Arc::clone(&region));
    Ok(region)
}

fn unregister(region: &Region) {
    registry().remove(&(region.base as usize));
}

/// The device's own mappings that `addresses` lie in, once each (a
/// kernel's pointer arguments). Registered host memory is left out: it is
/// its caller's mapping, which holding the region would not keep, and its
/// registration's drop waits for every holder (a resident kernel's too).
pub(crate) fn regions_holding(addresses: impl Iterator<Item = u64>) -> Vec<Arc<Region>> {
    let registry = registry();
    let mut held: Vec<Arc<Region>> = Vec::new();
    for address in addresses {
        let Ok(start) = usize::try_from(address) else {
            continue;
        };
        if let Some(region) = containing(&registry, start, 1) {
            if region.segment.is_some() && !held.iter().any(|r| Arc::ptr_eq(r, region)) {
                held.push(Arc::clone(region));
            }
        }
    }
    held
}

/// The address of `[offset, offset + len)` of `memory` after checking it is
/// in bounds and that `memory` lies in live memory of this backend, with the
/// region that keeps it alive.
pub(crate) fn resolve(
    call: &'static str,
    memory: &impl DeviceMemory<Api = HostApi>,
    offset: usize,
    len: usize,
) -> GpuResult<(*mut u8, Arc<Region>)> {
    let address = checks::address(Backend::Host, call, memory, offset, len)?;
    let start = usize::try_from(memory.device_ptr()).unwrap_or(usize::MAX);
    let registry = registry();
    let region = containing(&registry, start, memory.len()).ok_or_else(|| {
        host_error(
            call,
            ErrorKind::InvalidArgument(format!(
                "{start:#x}+{} is not live memory of the host device",
                memory.len()
            )),
        )
    })?;
    // In bounds of `memory` (checked), which is inside the region.
    Ok((address as usize as *mut u8, Arc::clone(region)))
}

/// What a [`HostBuffer`] was allocated as.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BufferKind {
    /// `alloc_device`: an anonymous segment.
    Device,
    /// `alloc_device_exportable`: a named segment, rounded up to
    /// [`IPC_ALLOC_GRANULARITY`].
    Exportable,
    /// `alloc_pinned_mapped`: an anonymous segment.
    Pinned,
    /// `alloc_managed`: an anonymous segment.
    Managed,
}

/// An allocation of the CPU device (device, pinned or managed memory are all
/// zeroed host memory in a shared-memory segment). Frees on drop, once the
/// stream work that uses it has run.
pub struct HostBuffer {
    region: Arc<Region>,
    len: usize,
    kind: BufferKind,
}

impl core::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("ptr", &self.region.base)
            .field("len", &self.len)
            .field("kind", &self.kind)
            .finish()
    }
}

impl HostBuffer {
    /// Allocates `bytes` of `kind`.
    pub(crate) fn allocate(call: &'static str, kind: BufferKind, bytes: usize) -> GpuResult<Self> {
        checks::allocation_size(Backend::Host, call, bytes)?;
        let segment = if kind == BufferKind::Exportable {
            // Cannot overflow: bytes <= MAX_ALLOCATION.
            ipc::create_named_segment(call, bytes.next_multiple_of(IPC_ALLOC_GRANULARITY))?
        } else {
            Segment::create_anonymous(bytes).map_err(|e| segment_error(call, e))?
        };
        Ok(Self {
            region: register(call, Region::of_segment(segment))?,
            len: bytes,
            kind,
        })
    }

    /// What this buffer was allocated as.
    pub fn kind(&self) -> BufferKind {
        self.kind
    }

    /// An IPC handle for an exportable buffer (`NotExportable` otherwise).
    pub(crate) fn export(&self) -> GpuResult<IpcMemHandle> {
        const CALL: &str = "ipc_export_memory";
        let name = match &self.region.segment {
            Some(segment) if self.kind == BufferKind::Exportable => segment.name(),
            _ => None,
        };
        let name = name.ok_or_else(|| host_error(CALL, ErrorKind::NotExportable))?;
        Ok(IpcMemHandle(
            HandleFields {
                kind: HandleKind::Memory,
                exporter_pid: ipc::own_pid(),
                len: self.len as u64,
                name: name.to_owned(),
            }
            .encode(),
        ))
    }
}

// SAFETY: the buffer's bytes are its region's mapping, which the `Arc` keeps
// mapped while `self` lives; base and length never change.
unsafe impl DeviceMemory for HostBuffer {
    type Api = HostApi;
    fn device_ptr(&self) -> u64 {
        self.region.base as u64
    }
    fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: on this device the host address is the device address.
unsafe impl HostMemory for HostBuffer {
    fn host_ptr(&self) -> *mut u8 {
        self.region.base
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // The mapping itself goes with the last `Arc` (queued commands may
        // still hold one); an exportable buffer's name is unlinked then too.
        unregister(&self.region);
    }
}

/// A host region registered with the CPU device (`register_host`). Dropping
/// it waits until no queued stream command still uses the region (a stream
/// blocked forever on an event would block the drop too).
pub struct HostRegistration {
    region: Arc<Region>,
}

impl core::fmt::Debug for HostRegistration {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostRegistration")
            .field("ptr", &self.region.base)
            .field("len", &self.region.len)
            .finish()
    }
}

impl HostRegistration {
    /// # Safety
    /// `[ptr, ptr + len)` must stay mapped until the registration is dropped.
    pub(crate) unsafe fn register(ptr: *mut u8, len: usize) -> GpuResult<Self> {
        const CALL: &str = "register_host";
        let invalid = |what: String| host_error(CALL, ErrorKind::InvalidArgument(what));
        checks::allocation_size(Backend::Host, CALL, len)?;
        if ptr.is_null() || (ptr as usize) % crate::numa::page_size() != 0 {
            return Err(invalid(format!("{ptr:p} is not a page-aligned address")));
        }
        if (ptr as usize).checked_add(len).is_none() {
            return Err(invalid(format!(
                "{ptr:p}+{len} wraps around the address space"
            )));
        }
        let region = Region {
            base: ptr,
            len,
            segment: None,
        };
        Ok(Self {
            region: register(CALL, region)?,
        })
    }
}

// SAFETY: the registered region stays mapped until the registration is
// dropped (`register_host`'s contract); base and length never change.
unsafe impl DeviceMemory for HostRegistration {
    type Api = HostApi;
    fn device_ptr(&self) -> u64 {
        self.region.base as u64
    }
    fn len(&self) -> usize {
        self.region.len
    }
}

// SAFETY: on this device the host address is the device address.
unsafe impl HostMemory for HostRegistration {
    fn host_ptr(&self) -> *mut u8 {
        self.region.base
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        unregister(&self.region);
        // The caller may unmap the region as soon as this returns, so wait
        // until no queued command holds it (CUDA's unregister also waits).
        // `get_mut` succeeding means every other `Arc` is gone, with Acquire
        // ordering against their release, so their accesses happened before.
        wait_until(|| Arc::get_mut(&mut self.region).is_some());
    }
}

/// A mapping of another process's exported memory, shared by every open of
/// the same handle in this process.
pub(crate) struct IpcMapping {
    region: Arc<Region>,
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        unregister(&self.region);
    }
}

/// Another process's exported memory, opened here; closed on drop (the
/// mapping goes with the last open of the same handle).
pub struct HostIpcBuffer {
    mapping: Arc<IpcMapping>,
    len: usize,
}

impl core::fmt::Debug for HostIpcBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostIpcBuffer")
            .field("ptr", &self.mapping.region.base)
            .field("len", &self.len)
            .finish()
    }
}

impl HostIpcBuffer {
    pub(crate) fn open(handle: &IpcMemHandle) -> GpuResult<Self> {
        const CALL: &str = "ipc_open_memory";
        static OPEN: OnceLock<IpcOpenCache<IpcMapping>> = OnceLock::new();
        let fields = HandleFields::decode(&handle.0, HandleKind::Memory)
            .map_err(|why| host_error(CALL, ErrorKind::InvalidIpcHandle(why)))?;
        let len = usize::try_from(fields.len).map_err(|_| {
            host_error(CALL, ErrorKind::InvalidIpcHandle("length overflows".into()))
        })?;
        let mapping = OPEN
            .get_or_init(IpcOpenCache::default)
            .get_or_open(handle, || {
                let segment = ipc::open_named_segment(CALL, &fields)?;
                Ok(IpcMapping {
                    region: register(CALL, Region::of_segment(segment))?,
                })
            })?;
        Ok(Self { mapping, len })
    }
}

// SAFETY: the shared mapping lives as long as any open of the handle, and
// `len` is the handle's length, which the opened segment was checked to hold.
unsafe impl DeviceMemory for HostIpcBuffer {
    type Api = HostApi;
    fn device_ptr(&self) -> u64 {
        self.mapping.region.base as u64
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// Memory of the CPU device that another process can map: a memfd segment,
/// whose descriptor is the handle ([`ShareableHandle::Fd`]). The pages live
/// while any descriptor or mapping of them does, in any process.
pub struct HostShareableBuffer {
    region: Arc<Region>,
    len: usize,
}

impl core::fmt::Debug for HostShareableBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostShareableBuffer")
            .field("ptr", &self.region.base)
            .field("len", &self.len)
            .field("size", &self.region.len)
            .finish()
    }
}

impl HostShareableBuffer {
    /// A new memfd segment of `bytes`, rounded up to the page size.
    pub(crate) fn allocate(bytes: usize, device_bytes: u64) -> GpuResult<Self> {
        const CALL: &str = "alloc_shareable";
        checks::allocation_size(Backend::Host, CALL, bytes)?;
        if bytes as u64 > device_bytes {
            return Err(host_error(
                CALL,
                ErrorKind::InvalidSize {
                    bytes: bytes as u64,
                },
            ));
        }
        let size = bytes.next_multiple_of(crate::numa::page_size());
        let segment = Segment::create_anonymous(size).map_err(|e| segment_error(CALL, e))?;
        Ok(Self {
            region: register(CALL, Region::of_segment(segment))?,
            len: bytes,
        })
    }

    /// A new descriptor of the segment.
    pub(crate) fn export(&self) -> GpuResult<ShareableHandle> {
        const CALL: &str = "export_shareable";
        let segment = self
            .region
            .segment
            .as_ref()
            .ok_or_else(|| host_error(CALL, ErrorKind::NotExportable))?;
        let fd = segment.fd().try_clone_to_owned().map_err(|e| {
            host_error(
                CALL,
                ErrorKind::Os {
                    errno: e.raw_os_error().unwrap_or(libc::EBADF),
                },
            )
        })?;
        Ok(ShareableHandle::Fd {
            fd,
            size: self.region.len,
            len: self.len,
        })
    }

    /// Maps a descriptor exported by [`HostShareableBuffer::export`], with
    /// `access` (a read-only mapping faults on a store, here as on a GPU).
    pub(crate) fn import(handle: ShareableHandle, access: MemoryAccess) -> GpuResult<Self> {
        const CALL: &str = "import_shareable";
        let invalid = |why: String| host_error(CALL, ErrorKind::InvalidIpcHandle(why));
        let (fd, size, len) = match handle {
            ShareableHandle::Fd { fd, size, len } => (fd, size, len),
            ShareableHandle::Ipc { .. } => {
                return Err(invalid(
                    "the CPU device shares memory as descriptors, not legacy IPC handles".into(),
                ))
            }
        };
        if len == 0 || len > size {
            return Err(invalid(format!("a buffer of {len} bytes in {size}")));
        }
        let segment = match access {
            MemoryAccess::ReadWrite => Segment::from_fd(fd),
            MemoryAccess::ReadOnly => Segment::from_fd_read_only(fd),
        }
        .map_err(|e| invalid(format!("cannot map it: {e}")))?;
        // A descriptor that is not a memory object (a socket, a pipe) fails
        // to map above; one smaller than claimed would fault on access.
        if segment.len() < size {
            return Err(invalid(format!(
                "the descriptor holds {} bytes, the handle says {size}",
                segment.len()
            )));
        }
        Ok(Self {
            region: register(CALL, Region::of_segment(segment))?,
            len,
        })
    }
}

// SAFETY: the bytes are the region's mapping, which the `Arc` keeps mapped
// while `self` lives, and `len` is at most the mapping's length (checked on
// import, by construction on allocation); neither changes.
unsafe impl DeviceMemory for HostShareableBuffer {
    type Api = HostApi;
    fn device_ptr(&self) -> u64 {
        self.region.base as u64
    }
    fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: on this device the host address is the device address.
unsafe impl HostMemory for HostShareableBuffer {
    fn host_ptr(&self) -> *mut u8 {
        self.region.base
    }
}

impl Drop for HostShareableBuffer {
    fn drop(&mut self) {
        // As for `HostBuffer`: the mapping goes with the last `Arc`.
        unregister(&self.region);
    }
}
