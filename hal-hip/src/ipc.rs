//! Inter-process sharing of device memory and events.
//!
//! As on CUDA: only dedicated, granularity-rounded allocations are exported;
//! a process never opens a handle it exported itself (refused as
//! `IpcSameProcess` before the runtime is asked, so every backend behaves
//! alike); and one process maps a handle once per device, shared through
//! [`IpcOpenCache`] and closed when the last [`HipIpcBuffer`] goes (HIP, unlike
//! CUDA, does not promise to count repeated opens itself).

use core::ffi::{c_char, c_void};
use core::ptr::{self, NonNull};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use hip_runtime_sys::{
    hipError_t, hipEvent_t, hipIpcCloseMemHandle, hipIpcEventHandle_t, hipIpcGetEventHandle,
    hipIpcGetMemHandle, hipIpcMemHandle_t, hipIpcMemLazyEnablePeerAccess, hipIpcOpenEventHandle,
    hipIpcOpenMemHandle, hipMemGetAddressRange,
};
use tandem_hal::IpcOpenCache;
use tandem_hal::{DeviceMemory, ErrorKind, GpuError, GpuResult, IpcEventHandle, IpcMemHandle};

use crate::api::HipApi;
use crate::context::{bind_device, release_when_idle};
use crate::error::{check, error_name, hip_error, vendor_kind};
use crate::memory::{is_exported, note_export, HipDeviceBuffer};
use crate::stream::HipEvent;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked while holding it;
    // the maps and export slots here are updated with single calls and stay
    // whole.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The open-mapping cache of device `ordinal`, shared by every `HipDevice`
/// opened for it in this process.
pub(crate) fn open_cache(ordinal: i32) -> Arc<IpcOpenCache<IpcMapping>> {
    static CACHES: OnceLock<Mutex<HashMap<i32, Arc<IpcOpenCache<IpcMapping>>>>> = OnceLock::new();
    lock(CACHES.get_or_init(Default::default))
        .entry(ordinal)
        .or_default()
        .clone()
}

/// The vendor's 64 handle bytes as Tandem's plain handle.
fn mem_handle_bytes(raw: &hipIpcMemHandle_t) -> IpcMemHandle {
    IpcMemHandle(raw.reserved.map(|b| b as u8))
}

/// `hipIpcGetMemHandle` on an exportable buffer (idempotent per buffer),
/// asked on device `ordinal`.
pub(crate) fn export_memory(ordinal: i32, buffer: &HipDeviceBuffer) -> GpuResult<IpcMemHandle> {
    let mut slot = lock(buffer.export_slot()?);
    if let Some(handle) = *slot {
        return Ok(handle);
    }
    bind_device(ordinal)?;
    let mut raw = hipIpcMemHandle_t::default();
    // SAFETY: the buffer is a live hipMalloc allocation (its base address);
    // `raw` is a valid out-pointer.
    check("hipIpcGetMemHandle", unsafe {
        hipIpcGetMemHandle(&mut raw, buffer.device_ptr() as *mut c_void)
    })?;
    let handle = mem_handle_bytes(&raw);
    note_export(handle);
    *slot = Some(handle);
    Ok(handle)
}

/// Statuses with which the runtime rejects the bytes of a handle (garbage,
/// another backend's, or from a runtime of another version).
fn rejects_handle(status: hipError_t) -> bool {
    matches!(
        status,
        hipError_t::hipErrorInvalidValue
            | hipError_t::hipErrorInvalidHandle
            | hipError_t::hipErrorInvalidDevicePointer
            | hipError_t::hipErrorMapFailed
            | hipError_t::hipErrorInvalidContext
    )
}

/// A failed IPC open: `InvalidIpcHandle` where the runtime rejected the
/// handle (keeping its code in the message), a vendor error otherwise.
fn open_error(call: &'static str, status: hipError_t) -> GpuError {
    if rejects_handle(status) {
        let why = format!("{} ({})", error_name(status), status as i64);
        hip_error(call, ErrorKind::InvalidIpcHandle(why))
    } else {
        hip_error(call, vendor_kind(status))
    }
}

/// Another process's memory mapped here; `hipIpcCloseMemHandle` on drop.
#[derive(Debug)]
pub struct IpcMapping {
    ptr: NonNull<c_void>,
    len: usize,
    ordinal: i32,
}

// SAFETY: the mapping is a device address owned by the runtime; HIP calls on
// it are thread-safe.
unsafe impl Send for IpcMapping {}
// SAFETY: shared access only reads the address.
unsafe impl Sync for IpcMapping {}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        let ptr = self.ptr.as_ptr() as usize;
        release_when_idle(self.ordinal, move || {
            // SAFETY: `ptr` came from hipIpcOpenMemHandle and, through the
            // cache, this is its only owner: closed once.
            let _ = unsafe { hipIpcCloseMemHandle(ptr as *mut c_void) };
        });
    }
}

/// `hipIpcOpenMemHandle` + the mapped size, on device `ordinal`.
fn open_mapping(handle: &IpcMemHandle, ordinal: i32) -> GpuResult<IpcMapping> {
    bind_device(ordinal)?;
    let raw = hipIpcMemHandle_t {
        reserved: handle.0.map(|b| b as c_char),
    };
    let mut ptr = ptr::null_mut();
    // SAFETY: `ptr` is a valid out-pointer; the runtime validates the handle.
    let status = unsafe { hipIpcOpenMemHandle(&mut ptr, raw, hipIpcMemLazyEnablePeerAccess) };
    if status != hipError_t::hipSuccess {
        return Err(open_error("hipIpcOpenMemHandle", status));
    }
    let ptr = NonNull::new(ptr).ok_or_else(|| {
        hip_error(
            "hipIpcOpenMemHandle",
            ErrorKind::InvalidIpcHandle("runtime mapped it at null".into()),
        )
    })?;
    // Owned from here on: an error below still closes it.
    let mut mapping = IpcMapping {
        ptr,
        len: 0,
        ordinal,
    };
    let mut base = ptr::null_mut();
    // SAFETY: `ptr` is a live mapping; both out-pointers are valid.
    check("hipMemGetAddressRange", unsafe {
        hipMemGetAddressRange(&mut base, &mut mapping.len, ptr.as_ptr())
    })?;
    Ok(mapping)
}

/// Another process's exported memory, opened in this one.
#[derive(Debug, Clone)]
pub struct HipIpcBuffer {
    mapping: Arc<IpcMapping>,
}

// SAFETY: the mapping is open, `len` bytes from `ptr` as the runtime reports
// its range, until the last buffer sharing it drops; it never changes.
unsafe impl DeviceMemory for HipIpcBuffer {
    type Api = HipApi;
    fn device_ptr(&self) -> u64 {
        self.mapping.ptr.as_ptr() as u64
    }
    fn len(&self) -> usize {
        self.mapping.len
    }
}

/// Opens `handle` on device `ordinal`, sharing a live mapping.
pub(crate) fn open_memory(
    cache: &IpcOpenCache<IpcMapping>,
    handle: &IpcMemHandle,
    ordinal: i32,
) -> GpuResult<HipIpcBuffer> {
    if is_exported(handle) {
        return Err(hip_error("hipIpcOpenMemHandle", ErrorKind::IpcSameProcess));
    }
    let mapping = cache.get_or_open(handle, || open_mapping(handle, ordinal))?;
    Ok(HipIpcBuffer { mapping })
}

/// `hipIpcGetEventHandle` for an interprocess event, on device `ordinal`.
pub(crate) fn export_event(ordinal: i32, event: &HipEvent) -> GpuResult<IpcEventHandle> {
    if !event.flags().interprocess {
        return Err(hip_error(
            "hipIpcGetEventHandle",
            ErrorKind::InvalidArgument("event was not created with interprocess: true".into()),
        ));
    }
    bind_device(ordinal)?;
    let mut raw = hipIpcEventHandle_t::default();
    // SAFETY: the event is live; `raw` is a valid out-pointer.
    check("hipIpcGetEventHandle", unsafe {
        hipIpcGetEventHandle(&mut raw, event.raw())
    })?;
    Ok(IpcEventHandle(raw.reserved.map(|b| b as u8)))
}

/// `hipIpcOpenEventHandle` on device `ordinal`.
pub(crate) fn open_event(handle: &IpcEventHandle, ordinal: i32) -> GpuResult<HipEvent> {
    let raw = hipIpcEventHandle_t {
        reserved: handle.0.map(|b| b as c_char),
    };
    let mut event: hipEvent_t = ptr::null_mut();
    // SAFETY: `event` is a valid out-pointer; the runtime validates the handle.
    let status = unsafe { hipIpcOpenEventHandle(&mut event, raw) };
    if status != hipError_t::hipSuccess {
        return Err(open_error("hipIpcOpenEventHandle", status));
    }
    Ok(HipEvent::from_ipc(event, ordinal))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejected_handles_are_typed_with_the_vendor_code() {
        let err = open_error("hipIpcOpenMemHandle", hipError_t::hipErrorInvalidValue);
        assert_eq!(
            err.kind,
            ErrorKind::InvalidIpcHandle("hipErrorInvalidValue (1)".into())
        );
        let err = open_error("hipIpcOpenMemHandle", hipError_t::hipErrorOutOfMemory);
        assert!(matches!(err.kind, ErrorKind::Vendor { code: 2, .. }));
    }

    #[test]
    fn an_exported_handle_is_refused_until_forgotten() {
        let handle = IpcMemHandle([0xA5; 64]);
        note_export(handle);
        let cache = IpcOpenCache::default();
        let err = open_memory(&cache, &handle, 0).unwrap_err();
        assert_eq!(err.kind, ErrorKind::IpcSameProcess);
        crate::memory::forget_export(&handle);
        assert!(!is_exported(&handle));
    }

    #[test]
    fn one_cache_per_device() {
        assert!(Arc::ptr_eq(&open_cache(3), &open_cache(3)));
        assert!(!Arc::ptr_eq(&open_cache(3), &open_cache(4)));
    }

    #[test]
    fn handle_bytes_round_trip() {
        let mut raw = hipIpcMemHandle_t::default();
        raw.reserved[0] = -1;
        raw.reserved[63] = 7;
        let handle = mem_handle_bytes(&raw);
        assert_eq!(handle.0[0], 0xFF);
        assert_eq!(handle.0[63], 7);
        assert_eq!(handle.0.map(|b| b as c_char), raw.reserved);
    }
}
