//! One HIP device: its properties, every [`GpuDevice`] operation, and the
//! [`GpuApi`] implementation of [`HipApi`] that hands devices out.
//!
//! Every call that acts on the device makes it current first
//! ([`bind_device`]). Argument checks come before that, so misuse is
//! reported as misuse even where the runtime would fail anyway.

use core::ffi::{c_char, c_int, c_void, CStr};
use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use hip_runtime_sys::{
    hipDeviceAttribute_t, hipDeviceCanAccessPeer, hipDeviceEnablePeerAccess, hipDeviceGetAttribute,
    hipDeviceGetPCIBusId, hipDeviceProp_t, hipDeviceSynchronize, hipDeviceptr_t, hipError_t,
    hipEventRecord, hipEventSynchronize, hipGetDeviceProperties, hipMemcpyDtoD, hipMemcpyDtoDAsync,
    hipMemcpyDtoH, hipMemcpyDtoHAsync, hipMemcpyHtoD, hipMemcpyHtoDAsync, hipMemcpyPeer,
    hipMemcpyPeerAsync, hipMemsetD8, hipMemsetD8Async, hipStreamSynchronize, hipStreamWaitEvent,
};
use tandem_hal::checks::{self, LaunchLimits};
use tandem_hal::numa::numa_node_of_pci;
use tandem_hal::IpcOpenCache;
use tandem_hal::{
    Backend, DeviceMemory, DeviceProperties, ErrorKind, EventFlags, GpuApi, GpuDevice, GpuResult,
    IpcEventHandle, IpcMemHandle, KernelArg, LaunchConfig, MemoryAccess, ModuleArtifacts,
    NumaSource, ResidentKernel, ResidentKernels, ShareableHandle,
};

use crate::api::HipApi;
use crate::context::bind_device;
use crate::error::{check, hip_error};
use crate::ipc::{self, HipIpcBuffer, IpcMapping};
use crate::memory::{
    self, HipDeviceBuffer, HipHostRegistration, HipManagedBuffer, HipPinnedBuffer,
};
use crate::module::{self, HipKernel, HipModule};
use crate::shareable::{self, HipShareableBuffer};
use crate::stream::{HipEvent, HipStream};
use crate::target::processor_of;

impl GpuApi for HipApi {
    const BACKEND: Backend = Backend::Hip;
    type Device = HipDevice;

    /// `hipInit(0)` then `hipGetDeviceCount`. With no GPU the ROCm 5.2
    /// runtime fails `hipInit` with a "no device" code; that is a loaded
    /// runtime with 0 devices, confirmed by the count.
    fn load() -> GpuResult<Self> {
        Self::open()
    }

    fn device_count(&self) -> GpuResult<usize> {
        Ok(self.devices())
    }

    fn device(&self, ordinal: usize) -> GpuResult<HipDevice> {
        let no_device = || {
            hip_error(
                "device",
                ErrorKind::NoDevice {
                    requested: Some(ordinal),
                    available: self.devices(),
                },
            )
        };
        if ordinal >= self.devices() {
            return Err(no_device());
        }
        HipDevice::open(i32::try_from(ordinal).map_err(|_| no_device())?)
    }
}

/// The text of a fixed-size, NUL-terminated C string field.
fn c_text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).collect();
    match CStr::from_bytes_until_nul(&bytes) {
        Ok(text) => text.to_string_lossy().into_owned(),
        // No terminator: the whole field is text.
        Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// A device count or limit the runtime reports as `int`; negative is 0.
fn non_negative(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// What a device is, read once when it is opened.
struct Description {
    properties: DeviceProperties,
    /// Full target id, e.g. `gfx90a:sramecc+:xnack-`.
    target_id: String,
    limits: LaunchLimits,
}

/// Whether device `ordinal`'s RMWs on host memory are atomic with respect to
/// the CPU's. ROCm marks the attribute "CUDA only"; where the runtime does not
/// answer, assume not: the cautious answer only makes GPU and CPU take turns.
fn host_native_atomics(ordinal: i32) -> bool {
    let mut value = 0;
    // SAFETY: a valid out-pointer; the attribute is a plain enum value.
    let answered = unsafe {
        hipDeviceGetAttribute(
            &mut value,
            hipDeviceAttribute_t::hipDeviceAttributeHostNativeAtomicSupported,
            ordinal,
        )
    } == hipError_t::hipSuccess;
    answered && value != 0
}

/// Reads the properties of device `ordinal` (current).
fn describe(ordinal: i32) -> GpuResult<Description> {
    let mut prop = hipDeviceProp_t::default();
    // SAFETY: `prop` is a valid out-pointer to a struct of the layout the
    // linked runtime writes (checked against the ROCm 5.2 header).
    check("hipGetDeviceProperties", unsafe {
        hipGetDeviceProperties(&mut prop, ordinal)
    })?;
    let mut bus_id: [c_char; 64] = [0; 64];
    // SAFETY: the buffer holds `len` bytes; the runtime NUL-terminates within it.
    check("hipDeviceGetPCIBusId", unsafe {
        hipDeviceGetPCIBusId(bus_id.as_mut_ptr(), bus_id.len() as i32, ordinal)
    })?;
    let pci_bus_id = c_text(&bus_id);
    // HIP 5.2 has no host-NUMA device attribute: sysfs it is.
    let host_numa_node = numa_node_of_pci(&pci_bus_id);
    let target_id = c_text(&prop.gcnArchName);
    let limits = LaunchLimits {
        max_threads_per_block: non_negative(prop.maxThreadsPerBlock),
        max_block_dim: prop.maxThreadsDim.map(non_negative),
        max_grid_dim: prop.maxGridSize.map(non_negative),
        max_shared_mem_per_block: u32::try_from(prop.sharedMemPerBlock).unwrap_or(u32::MAX),
    };
    let properties = DeviceProperties {
        ordinal: ordinal as usize,
        name: c_text(&prop.name),
        total_memory: prop.totalGlobalMem as u64,
        multiprocessor_count: non_negative(prop.multiProcessorCount),
        arch: processor_of(&target_id).to_owned(),
        warp_size: non_negative(prop.warpSize),
        max_threads_per_block: limits.max_threads_per_block,
        max_shared_mem_per_block: limits.max_shared_mem_per_block,
        can_map_host_memory: prop.canMapHostMemory != 0,
        host_native_atomics: host_native_atomics(ordinal),
        pci_bus_id: Some(pci_bus_id),
        host_numa_node,
        numa_source: if host_numa_node.is_some() {
            NumaSource::Sysfs
        } else {
            NumaSource::Unknown
        },
    };
    Ok(Description {
        properties,
        target_id,
        limits,
    })
}

/// The device address of `[offset, offset + len)` of `mem`, after the checks
/// of [`checks::address`] (bounds, null, wrap-around).
fn device_addr(
    call: &'static str,
    mem: &impl DeviceMemory<Api = HipApi>,
    offset: usize,
    len: usize,
) -> GpuResult<hipDeviceptr_t> {
    let address = checks::address(Backend::Hip, call, mem, offset, len)?;
    // A device address fits a pointer on the 64-bit hosts ROCm supports.
    Ok(address as usize as hipDeviceptr_t)
}

/// One HIP device of this process.
pub struct HipDevice {
    ordinal: i32,
    properties: DeviceProperties,
    target_id: String,
    limits: LaunchLimits,
    ipc_cache: Arc<IpcOpenCache<IpcMapping>>,
}

impl fmt::Debug for HipDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipDevice")
            .field("ordinal", &self.ordinal)
            .field("name", &self.properties.name)
            .field("target_id", &self.target_id)
            .finish_non_exhaustive()
    }
}

impl HipDevice {
    /// Opens device `ordinal`, which the caller checked exists.
    fn open(ordinal: i32) -> GpuResult<Self> {
        bind_device(ordinal)?;
        let Description {
            properties,
            target_id,
            limits,
        } = describe(ordinal)?;
        Ok(HipDevice {
            ordinal,
            properties,
            target_id,
            limits,
            ipc_cache: ipc::open_cache(ordinal),
        })
    }

    /// The full AMDGPU target id, e.g. `gfx90a:sramecc+:xnack-`
    /// ([`DeviceProperties::arch`] is its processor part, `gfx90a`).
    pub fn target_id(&self) -> &str {
        &self.target_id
    }

    /// Makes this device current on the calling thread.
    fn bind(&self) -> GpuResult<()> {
        bind_device(self.ordinal)
    }

    /// Runs a synchronous copy or fill on the null stream, then waits for
    /// that stream. HIP does not document when `hipMemcpyHtoD`,
    /// `hipMemcpyDtoD` or `hipMemsetD8` return (CUDA's equivalents may
    /// return before the data lands), and [`GpuDevice`] promises the bytes
    /// are in place when a synchronous call returns; the wait keeps that
    /// promise whatever the runtime does.
    fn run_sync(&self, call: &'static str, op: impl FnOnce() -> hipError_t) -> GpuResult<()> {
        self.bind()?;
        check(call, op())?;
        // SAFETY: the null stream of the current device; no pointers.
        check("hipStreamSynchronize", unsafe {
            hipStreamSynchronize(core::ptr::null_mut())
        })
    }
}

impl GpuDevice for HipDevice {
    type Api = HipApi;
    type DeviceBuffer = HipDeviceBuffer;
    type PinnedBuffer = HipPinnedBuffer;
    type HostRegistration = HipHostRegistration;
    type ManagedBuffer = HipManagedBuffer;
    type IpcBuffer = HipIpcBuffer;
    type ShareableBuffer = HipShareableBuffer;
    type Stream = HipStream;
    type Event = HipEvent;
    type Module = HipModule;
    type Kernel = HipKernel;

    fn ordinal(&self) -> usize {
        self.properties.ordinal
    }

    fn properties(&self) -> GpuResult<DeviceProperties> {
        Ok(self.properties.clone())
    }

    fn synchronize(&self) -> GpuResult<()> {
        self.bind()?;
        // SAFETY: waits for the current device; no pointers involved.
        check("hipDeviceSynchronize", unsafe { hipDeviceSynchronize() })
    }

    // --- memory -----------------------------------------------------------

    fn alloc_device(&self, bytes: usize) -> GpuResult<HipDeviceBuffer> {
        memory::alloc_device(self.ordinal, bytes, false)
    }

    fn alloc_device_exportable(&self, bytes: usize) -> GpuResult<HipDeviceBuffer> {
        memory::alloc_device(self.ordinal, bytes, true)
    }

    fn alloc_pinned_mapped(&self, bytes: usize) -> GpuResult<HipPinnedBuffer> {
        memory::alloc_pinned_mapped(self.ordinal, bytes)
    }

    unsafe fn register_host(&self, ptr: *mut u8, len: usize) -> GpuResult<HipHostRegistration> {
        // SAFETY: the caller keeps the region mapped (this fn's contract).
        unsafe { memory::register_host(self.ordinal, ptr, len) }
    }

    fn alloc_managed(&self, bytes: usize) -> GpuResult<HipManagedBuffer> {
        memory::alloc_managed(self.ordinal, bytes)
    }

    // --- copies and fills ---------------------------------------------------

    fn copy_to_device(
        &self,
        dst: &impl DeviceMemory<Api = HipApi>,
        dst_offset: usize,
        src: &[u8],
    ) -> GpuResult<()> {
        let to = device_addr("copy_to_device", dst, dst_offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: the destination range lies inside `dst`, device memory by
        // `DeviceMemory`'s contract; `src` is readable for its length (HIP
        // declares it mutable but only reads it) and the copy is complete,
        // so done with `src`, when `run_sync` returns.
        self.run_sync("hipMemcpyHtoD", || unsafe {
            hipMemcpyHtoD(to, src.as_ptr().cast_mut().cast::<c_void>(), src.len())
        })
    }

    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: &impl DeviceMemory<Api = HipApi>,
        src_offset: usize,
    ) -> GpuResult<()> {
        let from = device_addr("copy_from_device", src, src_offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: the source range lies inside `src` (device memory by the
        // contract); `dst` is writable for its length and the copy is
        // complete when `run_sync` returns.
        self.run_sync("hipMemcpyDtoH", || unsafe {
            hipMemcpyDtoH(dst.as_mut_ptr().cast(), from, dst.len())
        })
    }

    fn copy_device_to_device(
        &self,
        dst: &impl DeviceMemory<Api = HipApi>,
        dst_offset: usize,
        src: &impl DeviceMemory<Api = HipApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_device_to_device";
        let to = device_addr(CALL, dst, dst_offset, len)?;
        let from = device_addr(CALL, src, src_offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges lie inside their memory (device memory by the
        // contract).
        self.run_sync("hipMemcpyDtoD", || unsafe { hipMemcpyDtoD(to, from, len) })
    }

    fn fill(
        &self,
        dst: &impl DeviceMemory<Api = HipApi>,
        offset: usize,
        len: usize,
        byte: u8,
    ) -> GpuResult<()> {
        let to = device_addr("fill", dst, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the range lies inside `dst` (device memory by the contract).
        self.run_sync("hipMemsetD8", || unsafe { hipMemsetD8(to, byte, len) })
    }

    unsafe fn copy_to_device_async(
        &self,
        stream: &HipStream,
        dst: &impl DeviceMemory<Api = HipApi>,
        dst_offset: usize,
        src: &[u8],
    ) -> GpuResult<()> {
        let to = device_addr("copy_to_device_async", dst, dst_offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the destination range lies inside `dst` (device memory by
        // the contract); the caller keeps `src` valid and unchanged until
        // the stream passes the copy.
        check("hipMemcpyHtoDAsync", unsafe {
            hipMemcpyHtoDAsync(
                to,
                src.as_ptr().cast_mut().cast::<c_void>(),
                src.len(),
                stream.raw(),
            )
        })
    }

    unsafe fn copy_from_device_async(
        &self,
        stream: &HipStream,
        dst: &mut [u8],
        src: &impl DeviceMemory<Api = HipApi>,
        src_offset: usize,
    ) -> GpuResult<()> {
        let from = device_addr("copy_from_device_async", src, src_offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the source range lies inside `src` (device memory by the
        // contract); the caller keeps `dst` valid and unread until the
        // stream passes the copy.
        check("hipMemcpyDtoHAsync", unsafe {
            hipMemcpyDtoHAsync(dst.as_mut_ptr().cast(), from, dst.len(), stream.raw())
        })
    }

    fn copy_device_to_device_async(
        &self,
        stream: &HipStream,
        dst: &impl DeviceMemory<Api = HipApi>,
        dst_offset: usize,
        src: &impl DeviceMemory<Api = HipApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_device_to_device_async";
        let to = device_addr(CALL, dst, dst_offset, len)?;
        let from = device_addr(CALL, src, src_offset, len)?;
        if len == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: both ranges lie inside their memory (device memory by the
        // contract). Dropping a buffer before the stream passes the copy is
        // harmless: hipFree waits for the device's outstanding work first.
        check("hipMemcpyDtoDAsync", unsafe {
            hipMemcpyDtoDAsync(to, from, len, stream.raw())
        })
    }

    fn fill_async(
        &self,
        stream: &HipStream,
        dst: &impl DeviceMemory<Api = HipApi>,
        offset: usize,
        len: usize,
        byte: u8,
    ) -> GpuResult<()> {
        let to = device_addr("fill_async", dst, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the range lies inside `dst` (device memory by the
        // contract), and hipFree waits for queued work, as in
        // copy_device_to_device_async.
        check("hipMemsetD8Async", unsafe {
            hipMemsetD8Async(to, byte, len, stream.raw())
        })
    }

    // --- peer access -----------------------------------------------------------

    fn can_access_peer(&self, peer: &HipDevice) -> GpuResult<bool> {
        if peer.ordinal == self.ordinal {
            return Ok(true);
        }
        let mut can: c_int = 0;
        // SAFETY: valid out-pointer; the runtime validates both ordinals.
        check("hipDeviceCanAccessPeer", unsafe {
            hipDeviceCanAccessPeer(&mut can, self.ordinal, peer.ordinal)
        })?;
        Ok(can != 0)
    }

    fn enable_peer_access(&self, peer: &HipDevice) -> GpuResult<()> {
        if peer.ordinal == self.ordinal {
            return Ok(());
        }
        if !self.can_access_peer(peer)? {
            return Err(hip_error(
                "enable_peer_access",
                ErrorKind::PeerAccessUnsupported {
                    device: self.ordinal(),
                    peer: peer.ordinal(),
                },
            ));
        }
        self.bind()?;
        // SAFETY: enables access from the current (this) device to `peer`'s
        // memory; flags must be 0.
        match unsafe { hipDeviceEnablePeerAccess(peer.ordinal, 0) } {
            hipError_t::hipErrorPeerAccessAlreadyEnabled => Ok(()),
            status => check("hipDeviceEnablePeerAccess", status),
        }
    }

    fn copy_peer(
        &self,
        dst: &impl DeviceMemory<Api = HipApi>,
        dst_offset: usize,
        src_device: &HipDevice,
        src: &impl DeviceMemory<Api = HipApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_peer";
        let to = device_addr(CALL, dst, dst_offset, len)?;
        let from = device_addr(CALL, src, src_offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges lie inside their memory (device memory of the
        // named devices by the contract); the copy is complete when
        // `run_sync` has waited for this device's null stream.
        self.run_sync("hipMemcpyPeer", || unsafe {
            hipMemcpyPeer(to, self.ordinal, from.cast_const(), src_device.ordinal, len)
        })
    }

    fn copy_peer_async(
        &self,
        stream: &HipStream,
        dst: &impl DeviceMemory<Api = HipApi>,
        dst_offset: usize,
        src_device: &HipDevice,
        src: &impl DeviceMemory<Api = HipApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_peer_async";
        let to = device_addr(CALL, dst, dst_offset, len)?;
        let from = device_addr(CALL, src, src_offset, len)?;
        if len == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: as in `copy_device_to_device_async`: both ranges lie inside
        // their memory, and hipFree waits for queued work.
        check("hipMemcpyPeerAsync", unsafe {
            hipMemcpyPeerAsync(
                to,
                self.ordinal,
                from.cast_const(),
                src_device.ordinal,
                len,
                stream.raw(),
            )
        })
    }

    // --- streams and events -------------------------------------------------

    fn create_stream(&self) -> GpuResult<HipStream> {
        self.bind()?;
        HipStream::create(self.ordinal)
    }

    fn synchronize_stream(&self, stream: &HipStream) -> GpuResult<()> {
        self.bind()?;
        // SAFETY: the stream is live.
        check("hipStreamSynchronize", unsafe {
            hipStreamSynchronize(stream.raw())
        })
    }

    fn create_event(&self, flags: EventFlags) -> GpuResult<HipEvent> {
        self.bind()?;
        HipEvent::create(self.ordinal, flags)
    }

    fn record_event(&self, event: &HipEvent, stream: &HipStream) -> GpuResult<()> {
        self.bind()?;
        // SAFETY: event and stream are live.
        check("hipEventRecord", unsafe {
            hipEventRecord(event.raw(), stream.raw())
        })
    }

    fn synchronize_event(&self, event: &HipEvent) -> GpuResult<()> {
        self.bind()?;
        // SAFETY: the event is live.
        check("hipEventSynchronize", unsafe {
            hipEventSynchronize(event.raw())
        })
    }

    fn query_event(&self, event: &HipEvent) -> GpuResult<bool> {
        self.bind()?;
        event.query()
    }

    fn stream_wait_event(&self, stream: &HipStream, event: &HipEvent) -> GpuResult<()> {
        self.bind()?;
        // SAFETY: stream and event are live; flags must be 0.
        check("hipStreamWaitEvent", unsafe {
            hipStreamWaitEvent(stream.raw(), event.raw(), 0)
        })
    }

    fn elapsed(&self, start: &HipEvent, end: &HipEvent) -> GpuResult<Duration> {
        HipEvent::elapsed(self.ordinal, start, end)
    }

    // --- modules and launches -----------------------------------------------

    fn load_module(&self, artifacts: &ModuleArtifacts<'_>) -> GpuResult<HipModule> {
        module::load_module(self.ordinal, &self.target_id, artifacts)
    }

    fn kernel(&self, module: &HipModule, name: &str) -> GpuResult<HipKernel> {
        module::kernel(self.ordinal, module, name)
    }

    unsafe fn launch(
        &self,
        kernel: &HipKernel,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
        stream: &HipStream,
    ) -> GpuResult<()> {
        // SAFETY: the caller vouches for the kernel's pointer arguments
        // (this fn's contract).
        unsafe { module::launch(self.ordinal, &self.limits, kernel, config, args, stream) }
    }

    fn resident_kernel(&self) -> ResidentKernel {
        ResidentKernels::hold(&crate::context::resident(self.ordinal))
    }

    // --- IPC ----------------------------------------------------------------

    fn ipc_export_memory(&self, buffer: &HipDeviceBuffer) -> GpuResult<IpcMemHandle> {
        ipc::export_memory(self.ordinal, buffer)
    }

    fn ipc_open_memory(&self, handle: &IpcMemHandle) -> GpuResult<HipIpcBuffer> {
        ipc::open_memory(&self.ipc_cache, handle, self.ordinal)
    }

    /// A VMM allocation exported as fds, or a legacy exportable allocation
    /// (see [`HipShareableBuffer`] for which, and why).
    fn alloc_shareable(&self, bytes: usize) -> GpuResult<HipShareableBuffer> {
        const CALL: &str = "alloc_shareable";
        checks::allocation_size(Backend::Hip, CALL, bytes)?;
        if bytes as u64 > self.properties.total_memory {
            return Err(hip_error(
                CALL,
                ErrorKind::InvalidSize {
                    bytes: bytes as u64,
                },
            ));
        }
        shareable::allocate(self.ordinal, bytes)
    }

    fn export_shareable(&self, buffer: &HipShareableBuffer) -> GpuResult<ShareableHandle> {
        shareable::export(self.ordinal, buffer)
    }

    fn import_shareable(
        &self,
        handle: ShareableHandle,
        access: MemoryAccess,
    ) -> GpuResult<HipShareableBuffer> {
        shareable::import(self.ordinal, &self.ipc_cache, handle, access)
    }

    fn ipc_export_event(&self, event: &HipEvent) -> GpuResult<IpcEventHandle> {
        ipc::export_event(self.ordinal, event)
    }

    fn ipc_open_event(&self, handle: &IpcEventHandle) -> GpuResult<HipEvent> {
        self.bind()?;
        ipc::open_event(handle, self.ordinal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_hal::{ErrorKind, GpuError, KernelSignature};

    /// An ordinal no machine has: every runtime call on it fails, so each
    /// operation's path up to the runtime runs even where a GPU exists.
    const ABSENT: i32 = i32::MAX;

    /// A device handle for [`ABSENT`], as `open` would build for an MI200.
    fn absent_device() -> HipDevice {
        HipDevice {
            ordinal: ABSENT,
            properties: DeviceProperties {
                ordinal: ABSENT as usize,
                name: "absent".into(),
                total_memory: 0,
                multiprocessor_count: 0,
                arch: "gfx90a".into(),
                warp_size: 64,
                max_threads_per_block: 1024,
                max_shared_mem_per_block: 65536,
                can_map_host_memory: true,
                host_native_atomics: false,
                pci_bus_id: None,
                host_numa_node: None,
                numa_source: NumaSource::Unknown,
            },
            target_id: "gfx90a:sramecc+:xnack-".into(),
            limits: LaunchLimits {
                max_threads_per_block: 1024,
                max_block_dim: [1024; 3],
                max_grid_dim: [u32::MAX; 3],
                max_shared_mem_per_block: 65536,
            },
            ipc_cache: ipc::open_cache(ABSENT),
        }
    }

    /// Memory at an address no HIP call handed out. Safe code cannot make
    /// one (the trait is `unsafe`); the tests here need one because without
    /// a GPU there is no real memory to pass.
    struct ForeignMemory(usize);

    // SAFETY: the address is not HIP memory, which breaks the contract; no
    // copy or fill ever reaches it: every test below passes it to the
    // `ABSENT` device, whose calls fail a check or bind the device (which the
    // runtime refuses) before any copy or fill is issued.
    unsafe impl DeviceMemory for ForeignMemory {
        type Api = HipApi;
        fn device_ptr(&self) -> u64 {
            0x7f00_0000_0000
        }
        fn len(&self) -> usize {
            self.0
        }
    }

    /// The error of a call that reached the runtime: setting the device failed.
    fn assert_runtime_refused<T: fmt::Debug>(result: GpuResult<T>) {
        let err: GpuError = result.unwrap_err();
        assert_eq!(err.backend, Backend::Hip);
        assert_eq!(err.call, "hipSetDevice", "{err}");
        assert!(
            matches!(&err.kind, ErrorKind::Vendor { name, .. } if name.starts_with("hipError")),
            "{err}"
        );
    }

    #[test]
    fn allocations_check_sizes_first_then_fail_in_the_runtime() {
        let dev = absent_device();
        for bytes in [0, tandem_hal::checks::MAX_ALLOCATION + 1] {
            let expected = ErrorKind::InvalidSize {
                bytes: bytes as u64,
            };
            assert_eq!(dev.alloc_device(bytes).unwrap_err().kind, expected);
            assert_eq!(
                dev.alloc_device_exportable(bytes).unwrap_err().kind,
                expected
            );
            assert_eq!(dev.alloc_pinned_mapped(bytes).unwrap_err().kind, expected);
            assert_eq!(dev.alloc_managed(bytes).unwrap_err().kind, expected);
        }
        assert_runtime_refused(dev.alloc_device(16));
        assert_runtime_refused(dev.alloc_device_exportable(16));
        assert_runtime_refused(dev.alloc_pinned_mapped(16));
        assert_runtime_refused(dev.alloc_managed(16));
    }

    #[test]
    fn registration_needs_a_page_aligned_region() {
        let dev = absent_device();
        let mut region = vec![0u64; 4096];
        let page = page_aligned(&mut region);
        // SAFETY: `region` outlives every registration attempt (all fail).
        unsafe {
            let err = dev.register_host(page.add(1), 64).unwrap_err();
            assert!(matches!(err.kind, ErrorKind::InvalidArgument(_)), "{err}");
            let err = dev.register_host(page, 0).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidSize { bytes: 0 });
            assert_runtime_refused(dev.register_host(page, 4096));
        }
    }

    /// The first page boundary inside `region` (which spans more than a page).
    fn page_aligned(region: &mut [u64]) -> *mut u8 {
        let start = region.as_mut_ptr().cast::<u8>();
        // SAFETY: `region` is 32 KiB, more than a page past any start.
        unsafe { start.add(start.align_offset(memory::page_size())) }
    }

    #[test]
    fn copies_and_fills_are_bounds_checked_before_the_runtime() {
        let dev = absent_device();
        let mem = ForeignMemory(64);
        let mut host = [0u8; 16];
        let oob = |r: GpuResult<()>| {
            assert!(matches!(r.unwrap_err().kind, ErrorKind::OutOfBounds { .. }));
        };
        oob(dev.copy_to_device(&mem, 60, &host));
        oob(dev.copy_from_device(&mut host, &mem, usize::MAX));
        oob(dev.copy_device_to_device(&mem, 0, &mem, 63, 2));
        oob(dev.copy_device_to_device(&mem, 63, &mem, 0, 2));
        oob(dev.fill(&mem, 1, 64, 0));
        // Empty transfers in range are no-ops that never reach the runtime.
        assert_eq!(dev.copy_to_device(&mem, 64, &[]), Ok(()));
        assert_eq!(dev.copy_from_device(&mut [], &mem, 0), Ok(()));
        assert_eq!(dev.fill(&mem, 10, 0, 1), Ok(()));
        assert_runtime_refused(dev.copy_to_device(&mem, 48, &host));
        assert_runtime_refused(dev.copy_from_device(&mut host, &mem, 0));
        assert_runtime_refused(dev.copy_device_to_device(&mem, 0, &mem, 32, 32));
        assert_runtime_refused(dev.fill(&mem, 0, 64, 0xAB));
    }

    #[test]
    fn peer_calls_check_first_then_fail_in_the_runtime() {
        let dev = absent_device();
        let other = HipDevice {
            ordinal: ABSENT - 1,
            ..absent_device()
        };
        // A device and itself needs no runtime.
        assert_eq!(dev.can_access_peer(&dev), Ok(true));
        assert_eq!(dev.enable_peer_access(&dev), Ok(()));
        for err in [
            dev.can_access_peer(&other).unwrap_err(),
            dev.enable_peer_access(&other).unwrap_err(),
        ] {
            assert_eq!(err.call, "hipDeviceCanAccessPeer", "{err}");
            assert!(
                matches!(&err.kind, ErrorKind::Vendor { name, .. } if name.starts_with("hipError")),
                "{err}"
            );
        }
        let mem = ForeignMemory(64);
        let oob = |r: GpuResult<()>| {
            assert!(matches!(r.unwrap_err().kind, ErrorKind::OutOfBounds { .. }));
        };
        oob(dev.copy_peer(&mem, 0, &other, &mem, 63, 2));
        oob(dev.copy_peer(&mem, 63, &other, &mem, 0, 2));
        assert_eq!(dev.copy_peer(&mem, 64, &other, &mem, 0, 0), Ok(()));
        assert_runtime_refused(dev.copy_peer(&mem, 0, &other, &mem, 32, 32));
    }

    /// Memory at a fixed address and length, for the checks of
    /// [`checks::address`].
    struct Claimed(u64, usize);

    // SAFETY: breaks the contract in the two ways the trait documents as an
    // error (null, wrap-around), which every call refuses before the runtime.
    unsafe impl DeviceMemory for Claimed {
        type Api = HipApi;
        fn device_ptr(&self) -> u64 {
            self.0
        }
        fn len(&self) -> usize {
            self.1
        }
    }

    #[test]
    fn null_and_wrapping_memory_are_refused_before_the_runtime() {
        let dev = absent_device();
        let real = ForeignMemory(64);
        for forged in [Claimed(0, 64), Claimed(u64::MAX - 31, 64)] {
            let invalid = |r: GpuResult<()>| {
                let err = r.unwrap_err();
                assert!(matches!(err.kind, ErrorKind::InvalidArgument(_)), "{err}");
            };
            invalid(dev.copy_to_device(&forged, 0, &[1; 8]));
            invalid(dev.copy_from_device(&mut [0; 8], &forged, 0));
            invalid(dev.copy_device_to_device(&forged, 0, &real, 0, 8));
            invalid(dev.copy_device_to_device(&real, 0, &forged, 0, 8));
            invalid(dev.fill(&forged, 0, 0, 1));
        }
    }

    #[test]
    fn streams_events_and_sync_fail_in_the_runtime() {
        let dev = absent_device();
        assert_runtime_refused(dev.synchronize());
        assert_runtime_refused(dev.create_stream());
        assert_runtime_refused(dev.create_event(EventFlags::default()));
        assert_runtime_refused(dev.create_event(EventFlags {
            timing: false,
            interprocess: true,
        }));
    }

    #[test]
    fn modules_are_chosen_by_target_before_loading() {
        let dev = absent_device();
        const SIGNATURES: &[KernelSignature] = &[];
        let mut artifacts = ModuleArtifacts {
            name: "lib",
            signatures: SIGNATURES,
            host_table: None,
            cuda_source: Some("__global__ void k() {}"),
            nvrtc_options: &[],
            ptx: &[],
            cubins: &[],
            hip_code_objects: &[("gfx1030", b"\x7fELF")],
        };
        let err = dev.load_module(&artifacts).unwrap_err();
        let ErrorKind::UnsupportedArtifact(why) = &err.kind else {
            panic!("{err}");
        };
        assert!(why.contains("`lib`") && why.contains("gfx90a:sramecc+:xnack-"));
        assert!(why.contains("gfx1030"), "{why}");
        artifacts.hip_code_objects = &[("gfx90a", b"\x7fELF")];
        assert_runtime_refused(dev.load_module(&artifacts));
    }

    #[test]
    fn ipc_opens_fail_cleanly() {
        let dev = absent_device();
        assert_runtime_refused(dev.ipc_open_memory(&IpcMemHandle([0x5A; 64])));
        assert_runtime_refused(dev.ipc_open_event(&IpcEventHandle([0x5A; 64])));
    }

    #[test]
    fn properties_are_those_read_at_open() {
        let dev = absent_device();
        assert_eq!(dev.ordinal(), ABSENT as usize);
        assert_eq!(dev.properties().unwrap().arch, "gfx90a");
        assert_eq!(dev.target_id(), "gfx90a:sramecc+:xnack-");
    }

    #[test]
    fn c_text_stops_at_the_terminator() {
        let field: Vec<c_char> = b"gfx90a:xnack-\0junk"
            .iter()
            .map(|&b| b as c_char)
            .collect();
        assert_eq!(c_text(&field), "gfx90a:xnack-");
        let unterminated: Vec<c_char> = b"gfx90a".iter().map(|&b| b as c_char).collect();
        assert_eq!(c_text(&unterminated), "gfx90a");
    }
}
