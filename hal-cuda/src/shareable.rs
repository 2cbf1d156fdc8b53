//! Shareable memory ([`tandem_hal::ShareableHandle`]): what a process that
//! owns buffers and lends them to others allocates.
//!
//! # Two paths
//! - **Fd** (the normal one): the virtual memory management (VMM) API.
//!   `cuMemCreate` makes a physical allocation that may be exported as a
//!   POSIX file descriptor; it is mapped with `cuMemAddressReserve` +
//!   `cuMemMap` + `cuMemSetAccess`. `cuMemExportToShareableHandle` hands out
//!   a new fd per export; `cuMemImportFromShareableHandle` turns one back
//!   into an allocation handle, mapped the same way. The physical memory
//!   lives while any handle or mapping of it does, in any process, so an
//!   importer keeps its memory when the exporter frees it or dies.
//! - **Legacy**: where the device supports no VMM or no POSIX-fd handles
//!   (`CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` or
//!   `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED` is 0),
//!   or when [`SHARE_LEGACY_ENV`] is `1` (to exercise this path on a device
//!   that has both), the memory is an exportable allocation
//!   (`alloc_device_exportable`) and the handle a legacy CUDA IPC handle.
//!   Such a handle only lives as long as the exporter's allocation, and may
//!   not be opened in the exporting process (`IpcSameProcess`).
//!
//! [`CudaShareableBuffer::is_legacy`] says which path a buffer took.

use core::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys::{
    self, CUdevice_attribute, CUdeviceptr, CUmemAccessDesc, CUmemAccess_flags,
    CUmemAllocationGranularity_flags, CUmemAllocationHandleType, CUmemAllocationProp,
    CUmemAllocationProp_st__bindgen_ty_1, CUmemAllocationType, CUmemGenericAllocationHandle,
    CUmemLocation, CUmemLocationType, CUresult,
};
use tandem_hal::{DeviceMemory, ErrorKind, GpuResult, IpcMemHandle, MemoryAccess, ShareableHandle};

use crate::api::CudaApi;
use crate::context::Context;
use crate::driver::{check, error, error_name, vendor_error};
use crate::ipc::IpcMapping;
use crate::memory::CudaDeviceBuffer;

/// Set to `1` to make `alloc_shareable` take the legacy path (a dedicated
/// allocation exported as a legacy IPC handle) even where the device
/// supports fd handles.
pub const SHARE_LEGACY_ENV: &str = "TANDEM_CUDA_SHARE_LEGACY";

/// The only fd handle type this crate asks for or accepts.
const POSIX_FD: CUmemAllocationHandleType =
    CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

/// Memory another process can map (see [`tandem_hal::ShareableHandle`]):
/// allocated here by `alloc_shareable`, or imported by `import_shareable`.
/// Unmapped on drop; the physical memory goes with the last handle or
/// mapping of it, in any process.
pub struct CudaShareableBuffer {
    inner: Inner,
    len: usize,
}

enum Inner {
    /// A VMM allocation (made here or imported from an fd), mapped here.
    Vmm(VmmMapping),
    /// A dedicated `cuMemAlloc`, exported as a legacy IPC handle.
    LegacyOwned(CudaDeviceBuffer),
    /// Another process's legacy handle, opened here; the buffer starts
    /// `offset` bytes into the mapping.
    LegacyOpened {
        mapping: Arc<IpcMapping>,
        handle: IpcMemHandle,
        offset: usize,
    },
}

impl CudaShareableBuffer {
    /// Whether this buffer took the legacy path (a legacy IPC handle, which
    /// dies with its exporter's allocation) rather than the fd one.
    pub fn is_legacy(&self) -> bool {
        !matches!(self.inner, Inner::Vmm(_))
    }

    /// The context the buffer lives in, to check it against the device.
    pub(crate) fn context(&self) -> &Context {
        match &self.inner {
            Inner::Vmm(vmm) => &vmm.ctx,
            Inner::LegacyOwned(buffer) => buffer.context(),
            Inner::LegacyOpened { mapping, .. } => mapping.context(),
        }
    }

    /// A legacy-path buffer: `buffer` was allocated exportable for `len` bytes.
    pub(crate) fn legacy_owned(buffer: CudaDeviceBuffer, len: usize) -> Self {
        Self {
            inner: Inner::LegacyOwned(buffer),
            len,
        }
    }

    /// The owned legacy allocation, if this is one.
    pub(crate) fn as_legacy_owned(&self) -> Option<&CudaDeviceBuffer> {
        match &self.inner {
            Inner::LegacyOwned(buffer) => Some(buffer),
            _ => None,
        }
    }

    /// A new VMM allocation of at least `bytes` (already checked against the
    /// device's memory), mapped read/write for the context's device.
    pub(crate) fn allocate_vmm(ctx: &Arc<Context>, bytes: usize) -> GpuResult<Self> {
        let prop = allocation_prop(ctx);
        let granularity = granularity(
            &prop,
            CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )?;
        // `allocation_size` capped `bytes` at 1 TiB: no overflow.
        let size = bytes.next_multiple_of(granularity);
        ctx.bind()?;
        let mut handle: CUmemGenericAllocationHandle = 0;
        // SAFETY: valid out-pointer and property struct; flags must be 0.
        check("cuMemCreate", unsafe {
            sys::cuMemCreate(&mut handle, size, &prop, 0)
        })?;
        let mapping = VmmMapping::map(ctx, handle, size, None)?;
        Ok(Self {
            inner: Inner::Vmm(mapping),
            len: bytes,
        })
    }

    /// A new handle of this buffer: a new fd for VMM memory, the legacy
    /// handle (of the exporter's allocation) for an opened legacy one. Owned
    /// legacy memory is exported by the device (`ipc_export_memory`, see
    /// [`Self::as_legacy_owned`]), which remembers the handle.
    pub(crate) fn export(&self) -> GpuResult<ShareableHandle> {
        match &self.inner {
            Inner::Vmm(vmm) => {
                vmm.ctx.bind()?;
                let mut fd: c_int = -1;
                // SAFETY: for POSIX-fd handles the driver writes an `int`
                // through the pointer; `vmm.handle` is a live allocation handle.
                check("cuMemExportToShareableHandle", unsafe {
                    sys::cuMemExportToShareableHandle(
                        (&mut fd as *mut c_int).cast::<c_void>(),
                        vmm.handle,
                        POSIX_FD,
                        0,
                    )
                })?;
                if fd < 0 {
                    return Err(error(
                        "cuMemExportToShareableHandle",
                        ErrorKind::Unsupported(format!("the driver returned descriptor {fd}")),
                    ));
                }
                // SAFETY: the driver created the descriptor for the caller,
                // who owns it from here.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                Ok(ShareableHandle::Fd {
                    fd,
                    size: vmm.size,
                    len: self.len,
                })
            }
            Inner::LegacyOpened { handle, offset, .. } => Ok(ShareableHandle::Ipc {
                handle: *handle,
                offset: *offset,
                len: self.len,
            }),
            Inner::LegacyOwned(_) => Err(error(
                "export_shareable",
                ErrorKind::InvalidArgument("owned legacy memory is exported by the device".into()),
            )),
        }
    }

    /// Maps `handle` into `ctx`, consuming it (an fd is closed once
    /// imported: the allocation handle keeps the memory).
    pub(crate) fn import(
        ctx: &Arc<Context>,
        handle: ShareableHandle,
        access: MemoryAccess,
    ) -> GpuResult<Self> {
        const CALL: &str = "import_shareable";
        let invalid = |why: String| error(CALL, ErrorKind::InvalidIpcHandle(why));
        match handle {
            ShareableHandle::Fd { fd, size, len } => {
                if len == 0 || len > size {
                    return Err(invalid(format!("a buffer of {len} bytes in {size}")));
                }
                let minimum = granularity(
                    &allocation_prop(ctx),
                    CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )?;
                if size % minimum != 0 {
                    return Err(invalid(format!(
                        "{size} bytes is no multiple of the {minimum}-byte granularity"
                    )));
                }
                ctx.bind()?;
                let mut raw: CUmemGenericAllocationHandle = 0;
                // SAFETY: valid out-pointer; for POSIX-fd handles the fd is
                // passed by value in the pointer argument (driver
                // convention); the driver validates it and does not take it.
                check_import("cuMemImportFromShareableHandle", unsafe {
                    sys::cuMemImportFromShareableHandle(
                        &mut raw,
                        fd.as_raw_fd() as usize as *mut c_void,
                        POSIX_FD,
                    )
                })?;
                drop(fd);
                // Mapping more than the allocation holds fails here: the
                // handle claimed a larger size than the descriptor has.
                let mapping = VmmMapping::map(ctx, raw, size, Some(access))?;
                Ok(Self {
                    inner: Inner::Vmm(mapping),
                    len,
                })
            }
            ShareableHandle::Ipc {
                handle,
                offset,
                len,
            } => {
                let mapping = IpcMapping::open_cached(ctx, &handle)?;
                match offset.checked_add(len) {
                    Some(end) if len > 0 && end <= mapping.len => {}
                    _ => {
                        return Err(invalid(format!(
                            "{len} bytes at {offset} in an allocation of {}",
                            mapping.len
                        )))
                    }
                }
                Ok(Self {
                    inner: Inner::LegacyOpened {
                        mapping,
                        handle,
                        offset,
                    },
                    len,
                })
            }
        }
    }
}

/// Whether `ctx`'s device must share memory the legacy way: it lacks VMM or
/// fd handles, or [`SHARE_LEGACY_ENV`] asks for it.
pub(crate) fn use_legacy(ctx: &Context) -> bool {
    if std::env::var(SHARE_LEGACY_ENV).as_deref() == Ok("1") {
        return true;
    }
    for attribute in [
        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
    ] {
        // An attribute the driver does not know means no support.
        if ctx.raw_attribute(attribute).unwrap_or(0) == 0 {
            return true;
        }
    }
    false
}

/// Pinned device memory on `ctx`'s device that may be exported as an fd.
fn allocation_prop(ctx: &Context) -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: POSIX_FD,
        location: CUmemLocation {
            type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ctx.device,
        },
        win32HandleMetaData: core::ptr::null_mut(),
        allocFlags: CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// The allocation granularity for `prop` (a power of two, never 0).
fn granularity(
    prop: &CUmemAllocationProp,
    option: CUmemAllocationGranularity_flags,
) -> GpuResult<usize> {
    let mut granularity: usize = 0;
    // SAFETY: valid out-pointer and property struct.
    check("cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(&mut granularity, prop, option)
    })?;
    if granularity == 0 {
        return Err(error(
            "cuMemGetAllocationGranularity",
            ErrorKind::Unsupported("the driver reported a granularity of 0".into()),
        ));
    }
    Ok(granularity)
}

/// What the driver says of a descriptor it cannot import. A pipe, a file
/// or a closed descriptor are not allocations; the driver's code for that
/// is not documented, so every code that is not about the driver or the
/// context itself is reported as `InvalidIpcHandle`, with the code.
fn check_import(call: &'static str, result: CUresult) -> GpuResult<()> {
    match result {
        CUresult::CUDA_SUCCESS => Ok(()),
        CUresult::CUDA_ERROR_OUT_OF_MEMORY
        | CUresult::CUDA_ERROR_NOT_INITIALIZED
        | CUresult::CUDA_ERROR_DEINITIALIZED
        | CUresult::CUDA_ERROR_INVALID_CONTEXT => check(call, result),
        _ => Err(error(
            call,
            ErrorKind::InvalidIpcHandle(format!(
                "the driver rejected the descriptor ({} = {})",
                error_name(result),
                result as i64
            )),
        )),
    }
}

/// A VMM allocation handle mapped at a reserved address range of `size`
/// bytes in one context. Dropping unmaps, frees the range and releases the
/// handle, in that order, with the context bound.
struct VmmMapping {
    ctx: Arc<Context>,
    handle: CUmemGenericAllocationHandle,
    size: usize,
    /// The reserved range; 0 until reserved.
    ptr: CUdeviceptr,
    /// Whether `handle` is mapped at `ptr`.
    mapped: bool,
}

impl VmmMapping {
    /// Takes ownership of `handle`, an allocation of at least `size` bytes
    /// (a multiple of the granularity), and maps it for the context's device:
    /// read/write for an allocation of this process (`imported` is `None`),
    /// with the asked access for an imported one. Errors release whatever
    /// was done (through `Drop`). For an imported handle a failed map is
    /// `InvalidIpcHandle`: the allocation is smaller than the size the
    /// handle came with.
    fn map(
        ctx: &Arc<Context>,
        handle: CUmemGenericAllocationHandle,
        size: usize,
        imported: Option<MemoryAccess>,
    ) -> GpuResult<Self> {
        let mut mapping = Self {
            ctx: Arc::clone(ctx),
            handle,
            size,
            ptr: 0,
            mapped: false,
        };
        ctx.bind()?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: valid out-pointer; alignment 0 (the granularity), no
        // fixed address, flags must be 0.
        check("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0)
        })?;
        mapping.ptr = ptr;
        // SAFETY: `ptr` is a fresh reservation of `size` bytes and `handle`
        // a live allocation handle; offset and flags must be 0. The driver
        // checks that the allocation spans `size` bytes.
        let mapped = unsafe { sys::cuMemMap(ptr, size, 0, handle, 0) };
        if mapped != CUresult::CUDA_SUCCESS {
            return Err(if imported.is_some() {
                error(
                    "import_shareable",
                    ErrorKind::InvalidIpcHandle(format!(
                        "cannot map {size} bytes of it ({} = {})",
                        error_name(mapped),
                        mapped as i64
                    )),
                )
            } else {
                vendor_error("cuMemMap", mapped)
            });
        }
        mapping.mapped = true;
        let access = CUmemAccessDesc {
            location: CUmemLocation {
                type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: ctx.device,
            },
            flags: match imported {
                Some(MemoryAccess::ReadOnly) => CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READ,
                None | Some(MemoryAccess::ReadWrite) => {
                    CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                }
            },
        };
        // SAFETY: the range is mapped; one valid access descriptor.
        check("cuMemSetAccess", unsafe {
            sys::cuMemSetAccess(ptr, size, &access, 1)
        })?;
        Ok(mapping)
    }
}

impl Drop for VmmMapping {
    fn drop(&mut self) {
        let (handle, ptr, size, mapped) = (self.handle, self.ptr, self.size, self.mapped);
        // Unlike `cuMemFree`, `cuMemUnmap` does not wait for the work queued
        // on the range: a kernel still reading it (a DLPack consumer's, whose
        // tensor went before its stream ran) would fault and poison the
        // context. So the device is waited for first, as a free would, and
        // kept until a resident kernel has ended for the same reason.
        self.ctx.release_when_idle(move || {
            // SAFETY: no arguments; the closure runs with the context bound.
            let _ = unsafe { sys::cuCtxSynchronize() };
            if mapped {
                // SAFETY: `handle` is mapped at `ptr` for `size` bytes by
                // this owner, unmapped only here, once the device's queued
                // work (all that could use the range) is done.
                let _ = unsafe { sys::cuMemUnmap(ptr, size) };
            }
            if ptr != 0 {
                // SAFETY: this owner's reservation, freed only here, after
                // the unmap above.
                let _ = unsafe { sys::cuMemAddressFree(ptr, size) };
            }
            // SAFETY: this owner's allocation handle, released only here;
            // the memory itself lives on while another handle, mapping or
            // exported fd refers to it.
            unsafe { sys::cuMemRelease(handle) }
        });
    }
}

// SAFETY: the buffer holds driver handles and addresses and a context
// handle, all usable from any thread through the thread-safe driver API.
unsafe impl Send for CudaShareableBuffer {}
// SAFETY: as above; shared access only reads them.
unsafe impl Sync for CudaShareableBuffer {}

// SAFETY: the address is that of a live mapping of at least `len` bytes
// owned by `self`: a VMM range mapped until drop (`len <= size`, checked on
// import), an owned `cuMemAlloc`, or an open IPC mapping held by the `Arc`
// (`offset + len` within it, checked on import). Nothing changes after
// construction.
unsafe impl DeviceMemory for CudaShareableBuffer {
    type Api = CudaApi;
    #[inline]
    fn device_ptr(&self) -> u64 {
        match &self.inner {
            Inner::Vmm(vmm) => vmm.ptr,
            Inner::LegacyOwned(buffer) => buffer.device_ptr(),
            Inner::LegacyOpened {
                mapping, offset, ..
            } => mapping.ptr + *offset as u64,
        }
    }
    #[inline]
    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_errors_are_invalid_handles_unless_about_the_driver() {
        for code in [
            CUresult::CUDA_ERROR_INVALID_VALUE,
            CUresult::CUDA_ERROR_INVALID_HANDLE,
            CUresult::CUDA_ERROR_OPERATING_SYSTEM,
        ] {
            let e = check_import("cuMemImportFromShareableHandle", code).unwrap_err();
            assert!(matches!(e.kind, ErrorKind::InvalidIpcHandle(_)), "{e}");
        }
        let e = check_import(
            "cuMemImportFromShareableHandle",
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        )
        .unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Vendor { code: 2, .. }), "{e}");
        assert!(check_import("cuMemImportFromShareableHandle", CUresult::CUDA_SUCCESS).is_ok());
    }
}
