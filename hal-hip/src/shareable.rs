//! Shareable memory ([`tandem_hal::ShareableHandle`]), as on CUDA: the
//! virtual memory management (VMM) API where the runtime offers it, legacy
//! IPC handles where it does not.
//!
//! # Two paths
//! - **Fd**: `hipMemCreate` makes a physical allocation that may be exported
//!   as a POSIX file descriptor, mapped with `hipMemAddressReserve` +
//!   `hipMemMap` + `hipMemSetAccess`. `hipMemExportToShareableHandle` hands
//!   out a new fd per call; `hipMemImportFromShareableHandle` turns one back
//!   into an allocation handle, mapped the same way, and the fd is closed.
//!   The memory lives while any handle or mapping of it does, so an importer
//!   keeps it when the exporter frees it or dies. ROCm's limit: an fd names
//!   one allocation handle (the whole allocation, never a range of it), and
//!   every export is a new fd that the caller must close or pass on.
//! - **Legacy**: a dedicated `hipMalloc` rounded to
//!   [`tandem_hal::IPC_ALLOC_GRANULARITY`], exported as a legacy IPC handle,
//!   which dies with the exporter's allocation and is refused in the
//!   exporting process (`IpcSameProcess`). Taken when [`SHARE_LEGACY_ENV`]
//!   is `1`, when the device reports
//!   `hipDeviceAttributeVirtualMemoryManagementSupported` as 0, when the
//!   runtime answers VMM calls with `hipErrorNotSupported`, and when the
//!   runtime is not ROCm 5.2 (see below).
//!
//! [`HipShareableBuffer::is_legacy`] says which path a buffer took.
//!
//! # ROCm 5.2's `hipMemAllocationProp`
//! The bindings declare `hipMemAllocationProp` as later ROCm headers do
//! (`type`, `requestedHandleType`, `location`, `win32HandleMetaData`,
//! `allocFlags`); ROCm 5.2, the runtime this crate links
//! (`libamdhip64.so.5`), lays it out differently (`compressionType`,
//! `location`, `requestedHandleType`, `type`, `usage`,
//! `win32HandleMetaData`). Passing the bindings' struct would hand the
//! runtime a garbled request, so the two calls that take it are declared
//! here with the 5.2 layout ([`AllocationProp52`], checked against the 5.2
//! header's `sizeof`/`offsetof`), and the fd path is only taken on a 5.2
//! runtime; another 5.x runtime gets the legacy path until its layout is
//! checked. ROCm 5.2 also has no VMM device attribute (the bindings'
//! value, 89, is past its last one): the query then fails and the first
//! VMM call decides.

use core::ffi::{c_int, c_uchar, c_ulonglong, c_ushort, c_void};
use core::ptr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use hip_runtime_sys::{
    hipDeviceAttribute_t, hipDeviceGetAttribute, hipDeviceSynchronize, hipError_t,
    hipMemAccessDesc, hipMemAccessFlags, hipMemAddressFree, hipMemAddressReserve,
    hipMemAllocationGranularity_flags, hipMemAllocationHandleType, hipMemAllocationType,
    hipMemExportToShareableHandle, hipMemGenericAllocationHandle_t,
    hipMemImportFromShareableHandle, hipMemLocation, hipMemLocationType, hipMemMap, hipMemRelease,
    hipMemSetAccess, hipMemUnmap, hipRuntimeGetVersion,
};
use tandem_hal::IpcOpenCache;
use tandem_hal::{DeviceMemory, ErrorKind, GpuResult, IpcMemHandle, MemoryAccess, ShareableHandle};

use crate::api::HipApi;
use crate::context::{bind_device, release_when_idle};
use crate::error::{check, error_name, hip_error, vendor_kind};
use crate::ipc::{self, HipIpcBuffer, IpcMapping};
use crate::memory::{self, HipDeviceBuffer};

/// Set to `1` to make `alloc_shareable` take the legacy path even where the
/// runtime offers fd handles.
pub const SHARE_LEGACY_ENV: &str = "TANDEM_HIP_SHARE_LEGACY";

const POSIX_FD: hipMemAllocationHandleType =
    hipMemAllocationHandleType::hipMemHandleTypePosixFileDescriptor;

/// `hipMemAllocationProp` as ROCm 5.2's `hip_runtime_api.h` declares it
/// (see the module docs).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct AllocationProp52 {
    compression_type: c_uchar,
    location: hipMemLocation,
    requested_handle_type: hipMemAllocationHandleType,
    type_: hipMemAllocationType,
    usage: c_ushort,
    win32_handle_meta_data: *mut c_void,
}

// The 5.2 header's layout (sizeof 32, location at 4, type at 16), as a C
// compiler reports it on x86-64.
const _: () = {
    assert!(core::mem::size_of::<AllocationProp52>() == 32);
    assert!(core::mem::offset_of!(AllocationProp52, location) == 4);
    assert!(core::mem::offset_of!(AllocationProp52, requested_handle_type) == 12);
    assert!(core::mem::offset_of!(AllocationProp52, type_) == 16);
    assert!(core::mem::offset_of!(AllocationProp52, usage) == 20);
    assert!(core::mem::offset_of!(AllocationProp52, win32_handle_meta_data) == 24);
};

// The two VMM calls that take an allocation property struct, declared with
// the 5.2 layout (the library is linked by hip-runtime-sys).
extern "C" {
    #[link_name = "hipMemCreate"]
    fn hip_mem_create(
        handle: *mut hipMemGenericAllocationHandle_t,
        size: usize,
        prop: *const AllocationProp52,
        flags: c_ulonglong,
    ) -> hipError_t;
    #[link_name = "hipMemGetAllocationGranularity"]
    fn hip_mem_get_allocation_granularity(
        granularity: *mut usize,
        prop: *const AllocationProp52,
        option: hipMemAllocationGranularity_flags,
    ) -> hipError_t;
}

/// Memory another process can map (see [`tandem_hal::ShareableHandle`]):
/// allocated here by `alloc_shareable`, or imported by `import_shareable`.
/// Unmapped on drop; the physical memory goes with the last handle or
/// mapping of it, in any process.
#[derive(Debug)]
pub struct HipShareableBuffer {
    inner: Inner,
    len: usize,
}

#[derive(Debug)]
enum Inner {
    /// A VMM allocation (made here or imported from an fd), mapped here.
    Vmm(VmmMapping),
    /// A dedicated `hipMalloc`, exported as a legacy IPC handle.
    LegacyOwned(HipDeviceBuffer),
    /// Another process's legacy handle, opened here; the buffer starts
    /// `offset` bytes into the mapping.
    LegacyOpened {
        buffer: HipIpcBuffer,
        handle: IpcMemHandle,
        offset: usize,
    },
}

impl HipShareableBuffer {
    /// Whether this buffer took the legacy path (a legacy IPC handle, which
    /// dies with its exporter's allocation) rather than the fd one.
    pub fn is_legacy(&self) -> bool {
        !matches!(self.inner, Inner::Vmm(_))
    }
}

/// `alloc_shareable` on device `ordinal` (the caller checked the size
/// against the device's memory).
pub(crate) fn allocate(ordinal: i32, bytes: usize) -> GpuResult<HipShareableBuffer> {
    if !use_legacy(ordinal) {
        match allocate_vmm(ordinal, bytes) {
            Err(e) if is_not_supported(&e.kind) => {}
            other => return other,
        }
    }
    Ok(HipShareableBuffer {
        inner: Inner::LegacyOwned(memory::alloc_device(ordinal, bytes, true)?),
        len: bytes,
    })
}

/// `export_shareable` on device `ordinal`.
pub(crate) fn export(ordinal: i32, buffer: &HipShareableBuffer) -> GpuResult<ShareableHandle> {
    match &buffer.inner {
        Inner::Vmm(vmm) => {
            bind_device(ordinal)?;
            let mut fd: c_int = -1;
            // SAFETY: for POSIX-fd handles the runtime writes an `int`
            // through the pointer; `vmm.handle` is a live allocation handle.
            check("hipMemExportToShareableHandle", unsafe {
                hipMemExportToShareableHandle(
                    (&mut fd as *mut c_int).cast(),
                    vmm.handle,
                    POSIX_FD,
                    0,
                )
            })?;
            if fd < 0 {
                return Err(hip_error(
                    "hipMemExportToShareableHandle",
                    ErrorKind::Unsupported(format!("the runtime returned descriptor {fd}")),
                ));
            }
            // SAFETY: the runtime created the descriptor for the caller, who
            // owns it from here.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            Ok(ShareableHandle::Fd {
                fd,
                size: vmm.size,
                len: buffer.len,
            })
        }
        Inner::LegacyOwned(owned) => Ok(ShareableHandle::Ipc {
            handle: ipc::export_memory(ordinal, owned)?,
            offset: 0,
            len: buffer.len,
        }),
        // The handle of the exporter's allocation: a third process can open it too.
        Inner::LegacyOpened { handle, offset, .. } => Ok(ShareableHandle::Ipc {
            handle: *handle,
            offset: *offset,
            len: buffer.len,
        }),
    }
}

/// `import_shareable` on device `ordinal`, consuming `handle`.
pub(crate) fn import(
    ordinal: i32,
    cache: &IpcOpenCache<IpcMapping>,
    handle: ShareableHandle,
    access: MemoryAccess,
) -> GpuResult<HipShareableBuffer> {
    const CALL: &str = "import_shareable";
    let invalid = |why: String| hip_error(CALL, ErrorKind::InvalidIpcHandle(why));
    match handle {
        ShareableHandle::Fd { fd, size, len } => {
            if len == 0 || len > size {
                return Err(invalid(format!("a buffer of {len} bytes in {size}")));
            }
            let minimum = granularity(
                ordinal,
                hipMemAllocationGranularity_flags::hipMemAllocationGranularityMinimum,
            )?;
            if size % minimum != 0 {
                return Err(invalid(format!(
                    "{size} bytes is no multiple of the {minimum}-byte granularity"
                )));
            }
            bind_device(ordinal)?;
            let mut raw: hipMemGenericAllocationHandle_t = ptr::null_mut();
            // SAFETY: valid out-pointer; for POSIX-fd handles the fd is
            // passed by value in the pointer argument (HIP's convention, as
            // CUDA's); the runtime validates it and does not take it.
            let status = unsafe {
                hipMemImportFromShareableHandle(
                    &mut raw,
                    fd.as_raw_fd() as usize as *mut c_void,
                    POSIX_FD,
                )
            };
            drop(fd);
            match status {
                hipError_t::hipSuccess => {}
                hipError_t::hipErrorOutOfMemory
                | hipError_t::hipErrorNotSupported
                | hipError_t::hipErrorNotInitialized => {
                    return Err(hip_error(
                        "hipMemImportFromShareableHandle",
                        vendor_kind(status),
                    ))
                }
                _ => {
                    return Err(invalid(format!(
                        "the runtime rejected the descriptor ({} = {})",
                        error_name(status),
                        status as i64
                    )))
                }
            }
            Ok(HipShareableBuffer {
                inner: Inner::Vmm(VmmMapping::map(ordinal, raw, size, Some(access))?),
                len,
            })
        }
        ShareableHandle::Ipc {
            handle,
            offset,
            len,
        } => {
            let buffer = ipc::open_memory(cache, &handle, ordinal)?;
            match offset.checked_add(len) {
                Some(end) if len > 0 && end <= buffer.len() => {}
                _ => {
                    return Err(invalid(format!(
                        "{len} bytes at {offset} in an allocation of {}",
                        buffer.len()
                    )))
                }
            }
            Ok(HipShareableBuffer {
                inner: Inner::LegacyOpened {
                    buffer,
                    handle,
                    offset,
                },
                len,
            })
        }
    }
}

/// Whether device `ordinal` must share memory the legacy way (see the
/// module docs); `false` may still fall back when a VMM call is refused.
fn use_legacy(ordinal: i32) -> bool {
    if std::env::var(SHARE_LEGACY_ENV).as_deref() == Ok("1") {
        return true;
    }
    let mut version: c_int = 0;
    // SAFETY: valid out-pointer.
    let answered = unsafe { hipRuntimeGetVersion(&mut version) } == hipError_t::hipSuccess;
    // HIP_VERSION: major * 10^7 + minor * 10^5 + patch.
    if !answered || (version / 10_000_000, version / 100_000 % 100) != (5, 2) {
        return true;
    }
    let mut value: c_int = 0;
    // SAFETY: valid out-pointer; the runtime validates the attribute (5.2
    // does not know it and fails, which leaves the decision to hipMemCreate).
    let status = unsafe {
        hipDeviceGetAttribute(
            &mut value,
            hipDeviceAttribute_t::hipDeviceAttributeVirtualMemoryManagementSupported,
            ordinal,
        )
    };
    status == hipError_t::hipSuccess && value == 0
}

fn is_not_supported(kind: &ErrorKind) -> bool {
    matches!(kind, ErrorKind::Vendor { code, .. } if *code == hipError_t::hipErrorNotSupported as i64)
}

/// Pinned device memory on device `ordinal` that may be exported as an fd.
fn allocation_prop(ordinal: i32) -> AllocationProp52 {
    AllocationProp52 {
        compression_type: 0,
        location: device_location(ordinal),
        requested_handle_type: POSIX_FD,
        type_: hipMemAllocationType::hipMemAllocationTypePinned,
        usage: 0,
        win32_handle_meta_data: ptr::null_mut(),
    }
}

fn device_location(ordinal: i32) -> hipMemLocation {
    hipMemLocation {
        type_: hipMemLocationType::hipMemLocationTypeDevice,
        id: ordinal,
    }
}

/// The allocation granularity of device `ordinal` (never 0).
fn granularity(ordinal: i32, option: hipMemAllocationGranularity_flags) -> GpuResult<usize> {
    let prop = allocation_prop(ordinal);
    let mut granularity: usize = 0;
    // SAFETY: valid out-pointer; `prop` has the layout the 5.2 runtime reads
    // (`use_legacy` keeps other runtimes off this path).
    check("hipMemGetAllocationGranularity", unsafe {
        hip_mem_get_allocation_granularity(&mut granularity, &prop, option)
    })?;
    if granularity == 0 {
        return Err(hip_error(
            "hipMemGetAllocationGranularity",
            ErrorKind::Unsupported("the runtime reported a granularity of 0".into()),
        ));
    }
    Ok(granularity)
}

/// A new VMM allocation of at least `bytes`, mapped read/write for device
/// `ordinal`.
fn allocate_vmm(ordinal: i32, bytes: usize) -> GpuResult<HipShareableBuffer> {
    let granularity = granularity(
        ordinal,
        hipMemAllocationGranularity_flags::hipMemAllocationGranularityRecommended,
    )?;
    // `allocation_size` capped `bytes` at 1 TiB: no overflow.
    let size = bytes.next_multiple_of(granularity);
    bind_device(ordinal)?;
    let prop = allocation_prop(ordinal);
    let mut handle: hipMemGenericAllocationHandle_t = ptr::null_mut();
    // SAFETY: valid out-pointer; `prop` has the layout the 5.2 runtime reads
    // (`use_legacy` keeps other runtimes off this path); flags must be 0.
    check("hipMemCreate", unsafe {
        hip_mem_create(&mut handle, size, &prop, 0)
    })?;
    Ok(HipShareableBuffer {
        inner: Inner::Vmm(VmmMapping::map(ordinal, handle, size, None)?),
        len: bytes,
    })
}

/// A VMM allocation handle mapped at a reserved range of `size` bytes.
/// Dropping unmaps, frees the range and releases the handle, in that order,
/// with the device current.
#[derive(Debug)]
struct VmmMapping {
    ordinal: i32,
    handle: hipMemGenericAllocationHandle_t,
    size: usize,
    /// The reserved range; null until reserved.
    ptr: *mut c_void,
    /// Whether `handle` is mapped at `ptr`.
    mapped: bool,
}

impl VmmMapping {
    /// Takes ownership of `handle`, an allocation of at least `size` bytes
    /// (a multiple of the granularity), and maps it for device `ordinal`:
    /// read/write for an allocation of this process (`imported` is `None`),
    /// with the asked access for an imported one; errors release what was
    /// done (through `Drop`). For an imported handle a failed map is
    /// `InvalidIpcHandle`: the allocation is smaller than the size the
    /// handle came with.
    fn map(
        ordinal: i32,
        handle: hipMemGenericAllocationHandle_t,
        size: usize,
        imported: Option<MemoryAccess>,
    ) -> GpuResult<Self> {
        let mut mapping = Self {
            ordinal,
            handle,
            size,
            ptr: ptr::null_mut(),
            mapped: false,
        };
        bind_device(ordinal)?;
        let mut reserved: *mut c_void = ptr::null_mut();
        // SAFETY: valid out-pointer; alignment 0 (the granularity), no
        // requested address, flags must be 0.
        check("hipMemAddressReserve", unsafe {
            hipMemAddressReserve(&mut reserved, size, 0, ptr::null_mut(), 0)
        })?;
        mapping.ptr = reserved;
        // SAFETY: a fresh reservation of `size` bytes and a live allocation
        // handle; offset and flags must be 0. The runtime checks that the
        // allocation spans `size` bytes.
        let status = unsafe { hipMemMap(reserved, size, 0, handle, 0) };
        if status != hipError_t::hipSuccess {
            return Err(if imported.is_some() {
                hip_error(
                    "import_shareable",
                    ErrorKind::InvalidIpcHandle(format!(
                        "cannot map {size} bytes of it ({} = {})",
                        error_name(status),
                        status as i64
                    )),
                )
            } else {
                hip_error("hipMemMap", vendor_kind(status))
            });
        }
        mapping.mapped = true;
        let access = hipMemAccessDesc {
            location: device_location(ordinal),
            flags: match imported {
                Some(MemoryAccess::ReadOnly) => hipMemAccessFlags::hipMemAccessFlagsProtRead,
                None | Some(MemoryAccess::ReadWrite) => {
                    hipMemAccessFlags::hipMemAccessFlagsProtReadWrite
                }
            },
        };
        // SAFETY: the range is mapped; one valid access descriptor.
        check("hipMemSetAccess", unsafe {
            hipMemSetAccess(reserved, size, &access, 1)
        })?;
        Ok(mapping)
    }
}

impl Drop for VmmMapping {
    fn drop(&mut self) {
        // As plain numbers: the closure may run on another thread.
        let (ptr, size, handle, mapped) = (
            self.ptr as usize,
            self.size,
            self.handle as usize,
            self.mapped,
        );
        // `hipMemUnmap`, unlike `hipFree`, does not wait for the work queued
        // on the range (a DLPack consumer's kernel, whose tensor went before
        // its stream ran): the device is waited for first, as a free would,
        // and kept until a resident kernel has ended for the same reason.
        // Errors cannot be reported from drop; a failed release leaks.
        release_when_idle(self.ordinal, move || {
            let (ptr, handle) = (
                ptr as *mut c_void,
                handle as hipMemGenericAllocationHandle_t,
            );
            // SAFETY: no arguments; the device is current (release_when_idle).
            let _ = unsafe { hipDeviceSynchronize() };
            if mapped {
                // SAFETY: `handle` is mapped at `ptr` for `size` bytes by
                // this owner, unmapped only here, once the device's queued
                // work (all that could use the range) is done.
                let _ = unsafe { hipMemUnmap(ptr, size) };
            }
            if !ptr.is_null() {
                // SAFETY: this owner's reservation, freed only here, after
                // the unmap above.
                let _ = unsafe { hipMemAddressFree(ptr, size) };
            }
            // SAFETY: this owner's allocation handle, released only here; the
            // memory lives on while another handle, mapping or fd refers to it.
            let _ = unsafe { hipMemRelease(handle) };
        });
    }
}

// SAFETY: the buffer holds runtime handles and device addresses, not Rust
// references; HIP calls on them are thread-safe and may come from any thread.
unsafe impl Send for VmmMapping {}
// SAFETY: shared access only reads them; see `Send`.
unsafe impl Sync for VmmMapping {}

// SAFETY: the address is that of a live mapping of at least `len` bytes
// owned by `self`: a VMM range mapped until drop (`len <= size`, checked on
// import), an owned `hipMalloc`, or an open IPC mapping held by the buffer
// (`offset + len` within it, checked on import). Nothing changes after
// construction.
unsafe impl DeviceMemory for HipShareableBuffer {
    type Api = HipApi;
    fn device_ptr(&self) -> u64 {
        match &self.inner {
            Inner::Vmm(vmm) => vmm.ptr as u64,
            Inner::LegacyOwned(buffer) => buffer.device_ptr(),
            Inner::LegacyOpened { buffer, offset, .. } => buffer.device_ptr() + *offset as u64,
        }
    }
    fn len(&self) -> usize {
        self.len
    }
}
