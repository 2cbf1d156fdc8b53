//! Memory owners: device, mapped pinned host, registered host and managed
//! memory, each freed exactly once when dropped.

use core::ffi::c_void;
use core::ptr::{self, NonNull};
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, OnceLock};

use hip_runtime_sys::{
    hipError_t, hipFree, hipHostFree, hipHostGetDevicePointer, hipHostMalloc, hipHostMallocMapped,
    hipHostMallocPortable, hipHostRegister, hipHostRegisterMapped, hipHostRegisterPortable,
    hipHostUnregister, hipMalloc, hipMallocManaged, hipMemAttachGlobal,
};
use tandem_hal::checks::allocation_size;
use tandem_hal::{
    Backend, DeviceMemory, ErrorKind, GpuResult, HostMemory, IpcMemHandle, IPC_ALLOC_GRANULARITY,
};

use crate::api::HipApi;
use crate::context::{bind_device, release_when_idle, resident};
use crate::error::{check, hip_error};

/// Which HIP call returns an [`Allocation`] to the runtime.
#[derive(Clone, Copy, Debug)]
enum Release {
    /// `hipMalloc`, `hipMallocManaged`: `hipFree`.
    Free,
    /// `hipHostMalloc`: `hipHostFree`.
    HostFree,
    /// `hipHostRegister`: `hipHostUnregister` (the memory itself is the caller's).
    Unregister,
}

/// One pointer the HIP runtime handed out (or registered), released once on drop.
#[derive(Debug)]
struct Allocation {
    ptr: NonNull<c_void>,
    release: Release,
    /// Device made current before the release call, as for every other call.
    ordinal: i32,
}

// SAFETY: the pointer is an address owned by the HIP runtime, not a Rust
// reference; HIP calls on it are thread-safe and may come from any thread.
unsafe impl Send for Allocation {}
// SAFETY: shared access only reads the address; see `Send`.
unsafe impl Sync for Allocation {}

impl Allocation {
    /// Takes ownership of `ptr` as returned by a successful HIP call.
    fn new(
        ptr: *mut c_void,
        release: Release,
        ordinal: i32,
        call: &'static str,
    ) -> GpuResult<Self> {
        NonNull::new(ptr)
            .map(|ptr| Allocation {
                ptr,
                release,
                ordinal,
            })
            .ok_or_else(|| hip_error(call, ErrorKind::Unsupported("runtime returned null".into())))
    }

    fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // The device is made current first (release_when_idle) because the
        // HIP runtime attributes frees to the calling thread's device.
        let (raw, release) = (self.ptr.as_ptr() as usize, self.release);
        release_when_idle(self.ordinal, move || {
            let raw = raw as *mut c_void;
            // SAFETY: `raw` came from the call matching `release` and is
            // released only here, once, since `Allocation` is neither Clone
            // nor Copy.
            let _ = unsafe {
                match release {
                    Release::Free => hipFree(raw),
                    Release::HostFree => hipHostFree(raw),
                    Release::Unregister => hipHostUnregister(raw),
                }
            };
        });
    }
}

/// Handles this process exported and still owns the memory of: `ipc` refuses
/// to open them here, and dropping their buffer forgets them.
fn exported() -> MutexGuard<'static, HashSet<IpcMemHandle>> {
    static EXPORTED: OnceLock<Mutex<HashSet<IpcMemHandle>>> = OnceLock::new();
    // A poisoned lock only means another thread panicked while holding it;
    // the set is updated with single calls and stays whole.
    EXPORTED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Adds `handle` to this process's exports.
pub(crate) fn note_export(handle: IpcMemHandle) {
    exported().insert(handle);
}

/// Whether this process exported `handle` and still owns its memory.
pub(crate) fn is_exported(handle: &IpcMemHandle) -> bool {
    exported().contains(handle)
}

/// Removes `handle` from this process's exports (its memory is being freed).
pub(crate) fn forget_export(handle: &IpcMemHandle) {
    exported().remove(handle);
}

/// Device memory from `hipMalloc`.
#[derive(Debug)]
pub struct HipDeviceBuffer {
    alloc: Allocation,
    len: usize,
    /// `Some` for exportable buffers: the handle once exported (exporting is
    /// idempotent and the process-wide export list forgets it on drop).
    export: Option<Mutex<Option<IpcMemHandle>>>,
}

impl HipDeviceBuffer {
    /// The export slot, or `NotExportable`.
    pub(crate) fn export_slot(&self) -> GpuResult<&Mutex<Option<IpcMemHandle>>> {
        self.export
            .as_ref()
            .ok_or_else(|| hip_error("hipIpcGetMemHandle", ErrorKind::NotExportable))
    }
}

impl Drop for HipDeviceBuffer {
    fn drop(&mut self) {
        // Forget the handle before the memory goes, so a later allocation that
        // happens to get the same handle bytes is not refused as our own.
        if let Some(slot) = &self.export {
            let handle = *slot.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(handle) = handle {
                forget_export(&handle);
            }
        }
        // `alloc` frees afterwards, as fields drop after `drop` returns.
    }
}

// SAFETY: `len` bytes from the `hipMalloc` this owner frees on drop; the
// fields never change.
unsafe impl DeviceMemory for HipDeviceBuffer {
    type Api = HipApi;
    fn device_ptr(&self) -> u64 {
        self.alloc.addr()
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// Page-locked host memory from `hipHostMalloc(Mapped | Portable)`.
#[derive(Debug)]
pub struct HipPinnedBuffer {
    alloc: Allocation,
    /// Where the buffer starts in `alloc`: its first page boundary.
    offset: usize,
    device_ptr: u64,
    len: usize,
}

// SAFETY: the runtime's device address of the buffer's first page boundary
// in the `hipHostMalloc` this owner frees on drop, with `len` bytes after it
// (see `alloc_pinned_mapped`); the fields never change.
unsafe impl DeviceMemory for HipPinnedBuffer {
    type Api = HipApi;
    fn device_ptr(&self) -> u64 {
        self.device_ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: the host side of the same bytes, allocated until drop.
unsafe impl HostMemory for HipPinnedBuffer {
    fn host_ptr(&self) -> *mut u8 {
        // SAFETY: `offset` < one page, inside the allocation (see
        // alloc_pinned_mapped).
        unsafe { self.alloc.ptr.as_ptr().cast::<u8>().add(self.offset) }
    }
}

/// A caller's host region registered with `hipHostRegister(Mapped | Portable)`.
#[derive(Debug)]
pub struct HipHostRegistration {
    alloc: Allocation,
    device_ptr: u64,
    len: usize,
}

// SAFETY: the runtime's device address of the `len` registered bytes,
// registered until drop; the caller keeps them mapped until then
// (`register_host`'s contract). The fields never change.
unsafe impl DeviceMemory for HipHostRegistration {
    type Api = HipApi;
    fn device_ptr(&self) -> u64 {
        self.device_ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: the caller's region itself, mapped until the registration drops.
unsafe impl HostMemory for HipHostRegistration {
    fn host_ptr(&self) -> *mut u8 {
        self.alloc.ptr.as_ptr().cast()
    }
}

/// Managed memory from `hipMallocManaged(hipMemAttachGlobal)`: one address
/// for host and device.
#[derive(Debug)]
pub struct HipManagedBuffer {
    alloc: Allocation,
    len: usize,
}

// SAFETY: `len` bytes from the `hipMallocManaged` this owner frees on drop;
// the fields never change.
unsafe impl DeviceMemory for HipManagedBuffer {
    type Api = HipApi;
    fn device_ptr(&self) -> u64 {
        self.alloc.addr()
    }
    fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: managed memory has one address on both sides, allocated until drop.
unsafe impl HostMemory for HipManagedBuffer {
    fn host_ptr(&self) -> *mut u8 {
        self.alloc.ptr.as_ptr().cast()
    }
}

/// `hipMalloc(bytes)` on device `ordinal`; `exportable` buffers
/// are dedicated allocations rounded up to [`IPC_ALLOC_GRANULARITY`] so an
/// importer never sees a neighbour's data.
pub(crate) fn alloc_device(
    ordinal: i32,
    bytes: usize,
    exportable: bool,
) -> GpuResult<HipDeviceBuffer> {
    let call = if exportable {
        "alloc_device_exportable"
    } else {
        "alloc_device"
    };
    allocation_size(Backend::Hip, call, bytes)?;
    let reserved = if exportable {
        // Cannot overflow: `bytes` is at most MAX_ALLOCATION (1 TiB).
        bytes.next_multiple_of(IPC_ALLOC_GRANULARITY)
    } else {
        bytes
    };
    bind_device(ordinal)?;
    let mut raw = ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer; the size was checked above.
    check("hipMalloc", unsafe { hipMalloc(&mut raw, reserved) })?;
    Ok(HipDeviceBuffer {
        alloc: Allocation::new(raw, Release::Free, ordinal, "hipMalloc")?,
        // The whole rounded allocation: the importer sees this size too (from
        // hipMemGetAddressRange), so both sides agree, as on CUDA.
        len: reserved,
        export: exportable.then(|| Mutex::new(None)),
    })
}

/// The device address of mapped host memory at `host`.
fn mapped_device_ptr(host: &Allocation) -> GpuResult<u64> {
    let mut device = ptr::null_mut();
    // SAFETY: `host` is live memory allocated or registered as mapped; the
    // flags argument must be 0.
    check("hipHostGetDevicePointer", unsafe {
        hipHostGetDevicePointer(&mut device, host.ptr.as_ptr(), 0)
    })?;
    Ok(device as u64)
}

/// `hipHostMalloc(Mapped | Portable)` + its device address.
pub(crate) fn alloc_pinned_mapped(ordinal: i32, bytes: usize) -> GpuResult<HipPinnedBuffer> {
    allocation_size(Backend::Hip, "alloc_pinned_mapped", bytes)?;
    bind_device(ordinal)?;
    // The trait promises page alignment; a pinned-memory pool need not give
    // it (CUDA's does not for small requests): one page more, and the buffer
    // starts at the first page boundary, host and device address alike.
    let page = page_size();
    let padded = bytes + page; // cannot overflow: bytes <= MAX_ALLOCATION
    let mut raw = ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer; the size was checked above.
    check("hipHostMalloc", unsafe {
        hipHostMalloc(
            &mut raw,
            padded,
            hipHostMallocMapped | hipHostMallocPortable,
        )
    })?;
    // Owned before the next call, so a failure below still frees it.
    let alloc = Allocation::new(raw, Release::HostFree, ordinal, "hipHostMalloc")?;
    let offset = alloc.ptr.as_ptr().cast::<u8>().align_offset(page);
    Ok(HipPinnedBuffer {
        // The mapping is one contiguous range: the device address moves with
        // the host one.
        device_ptr: mapped_device_ptr(&alloc)? + offset as u64,
        offset,
        alloc,
        len: bytes,
    })
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// `hipHostRegister(Mapped | Portable)` of a caller's page-aligned region.
///
/// # Safety
/// `ptr..ptr + len` must stay mapped until the registration is dropped.
pub(crate) unsafe fn register_host(
    ordinal: i32,
    ptr: *mut u8,
    len: usize,
) -> GpuResult<HipHostRegistration> {
    allocation_size(Backend::Hip, "register_host", len)?;
    if ptr.is_null() || (ptr as usize) % page_size() != 0 {
        return Err(hip_error(
            "register_host",
            ErrorKind::InvalidArgument(format!("{ptr:p} is not page-aligned")),
        ));
    }
    bind_device(ordinal)?;
    // SAFETY: the caller keeps the region mapped for the registration's life.
    let registered = unsafe {
        hipHostRegister(
            ptr.cast(),
            len,
            hipHostRegisterMapped | hipHostRegisterPortable,
        )
    };
    if registered == hipError_t::hipErrorHostMemoryAlreadyRegistered {
        if let Some(kind) = resident(ordinal).still_registered(ptr, len) {
            return Err(hip_error("hipHostRegister", kind));
        }
    }
    check("hipHostRegister", registered)?;
    let alloc = Allocation::new(ptr.cast(), Release::Unregister, ordinal, "hipHostRegister")?;
    Ok(HipHostRegistration {
        device_ptr: mapped_device_ptr(&alloc)?,
        alloc,
        len,
    })
}

/// `hipMallocManaged(hipMemAttachGlobal)`.
pub(crate) fn alloc_managed(ordinal: i32, bytes: usize) -> GpuResult<HipManagedBuffer> {
    allocation_size(Backend::Hip, "alloc_managed", bytes)?;
    bind_device(ordinal)?;
    let mut raw = ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer; the size was checked above.
    check("hipMallocManaged", unsafe {
        hipMallocManaged(&mut raw, bytes, hipMemAttachGlobal)
    })?;
    Ok(HipManagedBuffer {
        alloc: Allocation::new(raw, Release::Free, ordinal, "hipMallocManaged")?,
        len: bytes,
    })
}
