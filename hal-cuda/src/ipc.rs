//! Legacy CUDA IPC: what this process exported, and the memory it opened.
//!
//! The driver refuses to open a handle in the process that exported it
//! (`CUDA_ERROR_INVALID_CONTEXT`, seen on the H100); the backends agree to
//! report that as `IpcSameProcess`, so exports are remembered in a process
//! global set and opens consult it before calling the driver. Opened memory
//! goes through `tandem_hal::ipc_cache` (one cache per device ordinal: a
//! mapping belongs to the context it was opened in), so two opens of one
//! handle share a mapping and the last drop closes it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::sys::{self, CUdeviceptr, CUipcMemHandle, CUipcMem_flags, CUresult};
use tandem_hal::IpcOpenCache;
use tandem_hal::{ErrorKind, GpuResult, IpcMemHandle};

use crate::context::Context;
use crate::driver::{check, error, error_name};

/// Handles this process exported and whose exporter is still alive, with
/// how many live owners produced each (normally one).
pub(crate) struct ExportRegistry {
    live: Mutex<BTreeMap<[u8; 64], usize>>,
}

impl ExportRegistry {
    const fn new() -> Self {
        Self {
            live: Mutex::new(BTreeMap::new()),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<[u8; 64], usize>> {
        // A poisoned lock only means a panic elsewhere; entries change whole.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one export of `handle`.
    pub(crate) fn note(&self, handle: [u8; 64]) {
        *self.live().entry(handle).or_insert(0) += 1;
    }

    /// Forgets one export of `handle` (its owner is being destroyed).
    pub(crate) fn forget(&self, handle: [u8; 64]) {
        let mut live = self.live();
        if let Some(count) = live.get_mut(&handle) {
            *count -= 1;
            if *count == 0 {
                live.remove(&handle);
            }
        }
    }

    /// Whether this process exported `handle` and still owns it.
    pub(crate) fn contains(&self, handle: [u8; 64]) -> bool {
        self.live().contains_key(&handle)
    }
}

/// Memory handles exported by this process.
pub(crate) static EXPORTED_MEMORY: ExportRegistry = ExportRegistry::new();
/// Event handles exported by this process (the driver refuses to open
/// those in their own process too: `CUDA_ERROR_INVALID_CONTEXT`, checked on
/// the H100).
pub(crate) static EXPORTED_EVENTS: ExportRegistry = ExportRegistry::new();

/// One open cache per device ordinal, shared by every `CudaDevice` of it.
static OPEN_CACHES: Mutex<BTreeMap<usize, Arc<IpcOpenCache<IpcMapping>>>> =
    Mutex::new(BTreeMap::new());

/// The open cache of device `ordinal`.
fn open_cache(ordinal: usize) -> Arc<IpcOpenCache<IpcMapping>> {
    let mut caches = OPEN_CACHES.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(caches.entry(ordinal).or_default())
}

/// Bytes of a driver handle, as the vendor-neutral type carries them.
pub(crate) fn handle_bytes(reserved: &[core::ffi::c_char; 64]) -> [u8; 64] {
    reserved.map(|b| b as u8)
}

/// The driver's handle type for `bytes`.
pub(crate) fn handle_chars(bytes: &[u8; 64]) -> [core::ffi::c_char; 64] {
    bytes.map(|b| b as core::ffi::c_char)
}

/// Maps the driver's answer to a foreign handle: garbage and memory its
/// exporter already freed both give `CUDA_ERROR_INVALID_VALUE` (both checked
/// on the H100), so neither can be told apart; it is reported as
/// `InvalidIpcHandle`, with the code.
pub(crate) fn check_open(call: &'static str, result: CUresult) -> GpuResult<()> {
    match result {
        CUresult::CUDA_ERROR_INVALID_VALUE => Err(error(
            call,
            ErrorKind::InvalidIpcHandle(format!(
                "the driver rejected it ({} = {}): not a CUDA IPC handle, or its exporter freed it",
                error_name(result),
                result as i64
            )),
        )),
        _ => check(call, result),
    }
}

/// Another process's allocation mapped into one context; closed on drop.
pub(crate) struct IpcMapping {
    ctx: Arc<Context>,
    pub(crate) ptr: CUdeviceptr,
    pub(crate) len: usize,
}

impl IpcMapping {
    /// Opens `handle` in `ctx` through its device's cache.
    pub(crate) fn open_cached(ctx: &Arc<Context>, handle: &IpcMemHandle) -> GpuResult<Arc<Self>> {
        if EXPORTED_MEMORY.contains(handle.0) {
            return Err(error("cuIpcOpenMemHandle_v2", ErrorKind::IpcSameProcess));
        }
        // The cache is looked up here rather than held by the context, which
        // each mapping holds: opens are rare and talk to the driver anyway.
        open_cache(ctx.ordinal).get_or_open(handle, || Self::open(ctx, handle))
    }

    /// The context the mapping was opened in.
    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }

    fn open(ctx: &Arc<Context>, handle: &IpcMemHandle) -> GpuResult<Self> {
        ctx.bind()?;
        let raw = CUipcMemHandle {
            reserved: handle_chars(&handle.0),
        };
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: valid out-pointer; the handle is passed by value and the
        // driver validates it (garbage is an error, checked on the H100).
        check_open("cuIpcOpenMemHandle_v2", unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut ptr,
                raw,
                CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
            )
        })?;
        // Owned from here: an error below closes it through `Drop`.
        let mut mapping = Self {
            ctx: Arc::clone(ctx),
            ptr,
            len: 0,
        };
        let mut base: CUdeviceptr = 0;
        let mut len: usize = 0;
        // SAFETY: valid out-pointers; `ptr` is a live mapping.
        check("cuMemGetAddressRange_v2", unsafe {
            sys::cuMemGetAddressRange_v2(&mut base, &mut len, ptr)
        })?;
        mapping.len = len;
        Ok(mapping)
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        let ptr = self.ptr;
        // SAFETY: `ptr` came from cuIpcOpenMemHandle in this context and is
        // closed exactly once, here (the cache shares one mapping per handle).
        self.ctx
            .release_when_idle(move || unsafe { sys::cuIpcCloseMemHandle(ptr) });
    }
}

// SAFETY: the mapping is a device address and a context handle, both usable
// from any thread through the thread-safe driver API.
unsafe impl Send for IpcMapping {}
// SAFETY: as above; shared access only reads the address and length.
unsafe impl Sync for IpcMapping {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_counts_exports_per_handle() {
        let registry = ExportRegistry::new();
        let (a, b) = ([1u8; 64], [2u8; 64]);
        assert!(!registry.contains(a));
        registry.note(a);
        registry.note(a);
        registry.note(b);
        registry.forget(a);
        assert!(registry.contains(a), "one of two owners of `a` remains");
        registry.forget(a);
        assert!(!registry.contains(a));
        assert!(registry.contains(b));
        registry.forget(a); // unknown: ignored
        registry.forget(b);
        assert!(!registry.contains(b));
    }

    #[test]
    fn handle_bytes_round_trip() {
        let bytes: [u8; 64] = core::array::from_fn(|i| (i * 37 + 200) as u8);
        assert_eq!(handle_bytes(&handle_chars(&bytes)), bytes);
    }

    #[test]
    fn open_errors_map_garbage_to_invalid_handle() {
        let e =
            check_open("cuIpcOpenMemHandle_v2", CUresult::CUDA_ERROR_INVALID_VALUE).unwrap_err();
        match e.kind {
            ErrorKind::InvalidIpcHandle(why) => {
                assert!(why.contains("CUDA_ERROR_INVALID_VALUE = 1"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        let e = check_open(
            "cuIpcOpenMemHandle_v2",
            CUresult::CUDA_ERROR_INVALID_CONTEXT,
        )
        .unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Vendor { code: 201, .. }), "{e}");
        assert!(check_open("cuIpcOpenMemHandle_v2", CUresult::CUDA_SUCCESS).is_ok());
    }
}
