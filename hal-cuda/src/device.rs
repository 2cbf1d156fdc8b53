//! [`CudaDevice`]: every `GpuDevice` operation on one device's primary context,
//! and the `GpuApi` implementation of [`CudaApi`] that hands devices out.

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::time::Duration;
use std::sync::{Arc, PoisonError};

use cudarc::driver::sys::{
    self, CUdevice_attribute, CUdeviceptr, CUevent, CUevent_flags, CUipcEventHandle,
    CUipcMemHandle, CUmemAttach_flags, CUresult, CUstream, CUstream_flags,
};
use tandem_hal::checks::{self, LaunchLimits};
use tandem_hal::{
    check_args, numa, Backend, DeviceMemory, DeviceProperties, ErrorKind, EventFlags, GpuApi,
    GpuDevice, GpuResult, IpcEventHandle, IpcMemHandle, KernelArg, LaunchConfig, MemoryAccess,
    ModuleArtifacts, NumaSource, ResidentKernel, ResidentKernels, ShareableHandle,
    IPC_ALLOC_GRANULARITY, MAX_KERNEL_ARGS,
};

use crate::api::CudaApi;
use crate::context::Context;
use crate::driver::{check, error, vendor_error};
use crate::ipc::{self, IpcMapping};
use crate::memory::{
    CudaDeviceBuffer, CudaHostRegistration, CudaIpcBuffer, CudaManagedBuffer, CudaPinnedBuffer,
};
use crate::module::{self, CudaKernel, CudaModule};
use crate::shareable::{self, CudaShareableBuffer};
use crate::stream::{CudaEvent, CudaStream};

const CUDA: Backend = Backend::Cuda;

impl GpuApi for CudaApi {
    const BACKEND: Backend = CUDA;
    type Device = CudaDevice;

    /// Loads `libcuda` and runs `cuInit(0)`. A driver without devices
    /// (`CUDA_ERROR_NO_DEVICE`) loads with 0 devices; any other failure of
    /// `cuInit` is returned as the vendor error.
    fn load() -> GpuResult<Self> {
        Self::open()
    }

    fn device_count(&self) -> GpuResult<usize> {
        Ok(self.devices())
    }

    fn device(&self, ordinal: usize) -> GpuResult<CudaDevice> {
        if ordinal >= self.devices() {
            return Err(error(
                "device",
                ErrorKind::NoDevice {
                    requested: Some(ordinal),
                    available: self.devices(),
                },
            ));
        }
        Ok(CudaDevice::new(Context::open(ordinal)?))
    }
}

/// One CUDA device, through its primary context (the context the CUDA
/// runtime and most libraries share). Every call makes that context current
/// on the calling thread first, so a device may be used from any thread.
pub struct CudaDevice {
    ctx: Arc<Context>,
}

impl CudaDevice {
    fn new(ctx: Arc<Context>) -> Self {
        Self { ctx }
    }

    /// The primary context's driver handle, for interoperating with other
    /// CUDA code (it stays retained by `self`).
    pub fn as_raw_context(&self) -> sys::CUcontext {
        self.ctx.raw
    }

    /// The limits launches are checked against (read when the device opened).
    pub fn launch_limits(&self) -> LaunchLimits {
        self.ctx.limits
    }

    /// Makes a stream that other CUDA code queues work on (PyTorch's,
    /// CuPy's), named by its raw handle's value, wait for `event`: how that
    /// code's work is ordered after Tandem's without a host wait.
    ///
    /// # Safety
    /// `raw_stream` must be a live stream of this device's primary context,
    /// or one of the driver's special handles (`CU_STREAM_LEGACY`,
    /// `CU_STREAM_PER_THREAD`), which then name this context's.
    pub unsafe fn foreign_stream_wait_event(
        &self,
        raw_stream: usize,
        event: &CudaEvent,
    ) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: the caller vouches for the stream, and this device's
        // context is current for the special handles; `event` is live;
        // flags must be 0.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(raw_stream as sys::CUstream, event.raw, 0)
        })
    }

    /// Records `event` on a stream that other CUDA code queues work on,
    /// named by its raw handle's value: the event completes once the work
    /// queued there so far has, with no host wait (how a writer's seal
    /// follows PyTorch's or CuPy's work).
    ///
    /// # Safety
    /// As for [`foreign_stream_wait_event`](Self::foreign_stream_wait_event).
    pub unsafe fn foreign_stream_record_event(
        &self,
        raw_stream: usize,
        event: &CudaEvent,
    ) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: as in `foreign_stream_wait_event`.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(event.raw, raw_stream as sys::CUstream)
        })
    }

    /// Runs a synchronous operation's driver call, then waits for the legacy
    /// default stream it ran on: host-to-device, device-to-device copies and
    /// fills may return before the data lands, and the trait promises the
    /// data is in place when a synchronous call returns.
    fn run_sync(&self, call: &'static str, op: impl FnOnce() -> CUresult) -> GpuResult<()> {
        self.ctx.bind()?;
        check(call, op())?;
        // SAFETY: the null stream is the context's legacy default stream.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(core::ptr::null_mut())
        })
    }

    /// Binds the context and checks that `stream` belongs to it.
    #[inline]
    fn on_stream(&self, call: &'static str, stream: &CudaStream) -> GpuResult<CUstream> {
        self.ctx.expect_same(call, &stream.ctx)?;
        self.ctx.bind()?;
        Ok(stream.raw)
    }

    fn alloc(
        &self,
        call: &'static str,
        bytes: usize,
        exportable: bool,
    ) -> GpuResult<CudaDeviceBuffer> {
        checks::allocation_size(CUDA, call, bytes)?;
        // Exportable memory is a dedicated allocation padded to the IPC
        // granularity: a legacy handle exposes the whole underlying block.
        // `allocation_size` capped `bytes` at 1 TiB, so this cannot overflow.
        let len = if exportable {
            bytes.next_multiple_of(IPC_ALLOC_GRANULARITY)
        } else {
            bytes
        };
        self.ctx.bind()?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: valid out-pointer; plain cuMemAlloc (not the async pool,
        // whose memory legacy IPC cannot export).
        check("cuMemAlloc_v2", unsafe {
            sys::cuMemAlloc_v2(&mut ptr, len)
        })?;
        Ok(CudaDeviceBuffer::new(
            Arc::clone(&self.ctx),
            ptr,
            len,
            exportable,
        ))
    }

    /// Bytes of memory the device has.
    fn total_memory(&self) -> GpuResult<usize> {
        let mut total: usize = 0;
        // SAFETY: valid out-pointer and device handle.
        check("cuDeviceTotalMem_v2", unsafe {
            sys::cuDeviceTotalMem_v2(&mut total, self.ctx.device)
        })?;
        Ok(total)
    }

    /// The device address of mapped host memory at `host`.
    fn mapped_device_ptr(&self, host: *mut u8) -> GpuResult<CUdeviceptr> {
        let mut device: CUdeviceptr = 0;
        // SAFETY: `host` is pinned or registered with DEVICEMAP; flags must be 0.
        check("cuMemHostGetDevicePointer_v2", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut device, host.cast(), 0)
        })?;
        Ok(device)
    }

    fn host_numa(&self, pci_bus_id: &str) -> (Option<u32>, NumaSource) {
        // CUDA 12.2+ reports the host NUMA node (-1: none); older drivers
        // reject the attribute. Either way, fall back to sysfs.
        let driver = self
            .ctx
            .raw_attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID)
            .ok()
            .and_then(|node| u32::try_from(node).ok());
        if let Some(node) = driver {
            return (Some(node), NumaSource::Driver);
        }
        match numa::numa_node_of_pci(pci_bus_id) {
            Some(node) => (Some(node), NumaSource::Sysfs),
            None => (None, NumaSource::Unknown),
        }
    }
}

/// A string the driver writes into a fixed buffer, up to its NUL.
fn driver_string(
    call: &'static str,
    fill: impl FnOnce(*mut c_char, c_int) -> CUresult,
) -> GpuResult<String> {
    let mut buf = [0u8; 256];
    check(call, fill(buf.as_mut_ptr().cast(), buf.len() as c_int))?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

impl GpuDevice for CudaDevice {
    type Api = CudaApi;
    type DeviceBuffer = CudaDeviceBuffer;
    type PinnedBuffer = CudaPinnedBuffer;
    type HostRegistration = CudaHostRegistration;
    type ManagedBuffer = CudaManagedBuffer;
    type IpcBuffer = CudaIpcBuffer;
    type ShareableBuffer = CudaShareableBuffer;
    type Stream = CudaStream;
    type Event = CudaEvent;
    type Module = CudaModule;
    type Kernel = CudaKernel;

    fn ordinal(&self) -> usize {
        self.ctx.ordinal
    }

    fn properties(&self) -> GpuResult<DeviceProperties> {
        let device = self.ctx.device;
        let name = driver_string("cuDeviceGetName", |buf, len| {
            // SAFETY: `buf` holds `len` bytes; the device handle is valid.
            unsafe { sys::cuDeviceGetName(buf, len, device) }
        })?;
        let pci_bus_id = driver_string("cuDeviceGetPCIBusId", |buf, len| {
            // SAFETY: `buf` holds `len` bytes; the device handle is valid.
            unsafe { sys::cuDeviceGetPCIBusId(buf, len, device) }
        })?;
        let total_memory = self.total_memory()?;
        let attr = |a| self.ctx.attribute(a);
        let (host_numa_node, numa_source) = self.host_numa(&pci_bus_id);
        Ok(DeviceProperties {
            ordinal: self.ctx.ordinal,
            name,
            total_memory: total_memory as u64,
            multiprocessor_count: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )?,
            arch: self.ctx.arch.to_string(),
            warp_size: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
            max_threads_per_block: self.ctx.limits.max_threads_per_block,
            max_shared_mem_per_block: self.ctx.limits.max_shared_mem_per_block,
            can_map_host_memory: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)?
                != 0,
            host_native_atomics: attr(
                CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED,
            )? != 0,
            pci_bus_id: Some(pci_bus_id),
            host_numa_node,
            numa_source,
        })
    }

    fn synchronize(&self) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: a context is current.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    // --- memory -----------------------------------------------------------

    fn alloc_device(&self, bytes: usize) -> GpuResult<CudaDeviceBuffer> {
        self.alloc("alloc_device", bytes, false)
    }

    fn alloc_device_exportable(&self, bytes: usize) -> GpuResult<CudaDeviceBuffer> {
        self.alloc("alloc_device_exportable", bytes, true)
    }

    fn alloc_pinned_mapped(&self, bytes: usize) -> GpuResult<CudaPinnedBuffer> {
        checks::allocation_size(CUDA, "alloc_pinned_mapped", bytes)?;
        self.ctx.bind()?;
        // cuMemHostAlloc suballocates small requests (a small buffer may start
        // mid-page), but the trait promises
        // page alignment: what an allocator region in the buffer accepts
        // (a 4096-aligned request) must not depend on where the pool put it.
        // One page more, and the buffer starts at the first page boundary.
        let page = numa::page_size();
        let padded = bytes + page; // cannot overflow: bytes <= MAX_ALLOCATION
        let mut base: *mut c_void = core::ptr::null_mut();
        // SAFETY: valid out-pointer; portable so every context may use it,
        // device-mapped so kernels can address it.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(
                &mut base,
                padded,
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
            )
        })?;
        let base = base.cast::<u8>();
        // SAFETY: at most page - 1 bytes into the `padded`-byte allocation,
        // which leaves `bytes` after it.
        let host = unsafe { base.add(base.align_offset(page)) };
        // Owned from here: a failure below frees it.
        let mut buffer = CudaPinnedBuffer::new(Arc::clone(&self.ctx), base, host, bytes);
        buffer.set_device_ptr(self.mapped_device_ptr(host)?);
        Ok(buffer)
    }

    unsafe fn register_host(&self, ptr: *mut u8, len: usize) -> GpuResult<CudaHostRegistration> {
        checks::allocation_size(CUDA, "register_host", len)?;
        let page = numa::page_size();
        if ptr.is_null() || (ptr as usize) % page != 0 {
            return Err(error(
                "register_host",
                ErrorKind::InvalidArgument(format!(
                    "{ptr:p} is not aligned to the {page}-byte page"
                )),
            ));
        }
        self.ctx.bind()?;
        // SAFETY: the caller keeps `len` bytes at `ptr` mapped until the
        // registration (which unregisters on drop) is gone.
        let registered = unsafe {
            sys::cuMemHostRegister_v2(
                ptr.cast(),
                len,
                sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE,
            )
        };
        if registered == CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED {
            if let Some(kind) = self.ctx.resident.still_registered(ptr, len) {
                return Err(error("cuMemHostRegister_v2", kind));
            }
        }
        check("cuMemHostRegister_v2", registered)?;
        // Owned from here: a failure below unregisters.
        let mut registration = CudaHostRegistration::new(Arc::clone(&self.ctx), ptr, len);
        registration.set_device_ptr(self.mapped_device_ptr(ptr)?);
        Ok(registration)
    }

    fn alloc_managed(&self, bytes: usize) -> GpuResult<CudaManagedBuffer> {
        checks::allocation_size(CUDA, "alloc_managed", bytes)?;
        self.ctx.bind()?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: valid out-pointer; GLOBAL: any stream may touch it.
        check("cuMemAllocManaged", unsafe {
            sys::cuMemAllocManaged(
                &mut ptr,
                bytes,
                CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as c_uint,
            )
        })?;
        Ok(CudaManagedBuffer::new(Arc::clone(&self.ctx), ptr, bytes))
    }

    // --- copies and fills ---------------------------------------------------

    fn copy_to_device(
        &self,
        dst: &impl DeviceMemory<Api = CudaApi>,
        dst_offset: usize,
        src: &[u8],
    ) -> GpuResult<()> {
        let to = checks::address(CUDA, "copy_to_device", dst, dst_offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: the destination range lies inside `dst`, device memory by
        // `DeviceMemory`'s contract; `src` is a live slice.
        self.run_sync("cuMemcpyHtoD_v2", || unsafe {
            sys::cuMemcpyHtoD_v2(to, src.as_ptr().cast(), src.len())
        })
    }

    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: &impl DeviceMemory<Api = CudaApi>,
        src_offset: usize,
    ) -> GpuResult<()> {
        let from = checks::address(CUDA, "copy_from_device", src, src_offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: the source range lies inside `src` (device memory by the
        // contract); `dst` is a live slice. Device-to-host copies return
        // only once the data has arrived, which keeps the trait's rule with
        // no wait of our own.
        check("cuMemcpyDtoH_v2", unsafe {
            sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), from, dst.len())
        })
    }

    fn copy_device_to_device(
        &self,
        dst: &impl DeviceMemory<Api = CudaApi>,
        dst_offset: usize,
        src: &impl DeviceMemory<Api = CudaApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_device_to_device";
        let to = checks::address(CUDA, CALL, dst, dst_offset, len)?;
        let from = checks::address(CUDA, CALL, src, src_offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges lie inside their memory (device memory by the
        // contract).
        self.run_sync("cuMemcpyDtoD_v2", || unsafe {
            sys::cuMemcpyDtoD_v2(to, from, len)
        })
    }

    fn fill(
        &self,
        dst: &impl DeviceMemory<Api = CudaApi>,
        offset: usize,
        len: usize,
        byte: u8,
    ) -> GpuResult<()> {
        let to = checks::address(CUDA, "fill", dst, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the range lies inside `dst` (device memory by the contract).
        self.run_sync("cuMemsetD8_v2", || unsafe {
            sys::cuMemsetD8_v2(to, byte, len)
        })
    }

    unsafe fn copy_to_device_async(
        &self,
        stream: &CudaStream,
        dst: &impl DeviceMemory<Api = CudaApi>,
        dst_offset: usize,
        src: &[u8],
    ) -> GpuResult<()> {
        const CALL: &str = "copy_to_device_async";
        let to = checks::address(CUDA, CALL, dst, dst_offset, src.len())?;
        let raw = self.on_stream(CALL, stream)?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: the destination range lies inside `dst` (device memory by
        // the contract); the caller keeps `src` valid until the stream
        // passes the copy.
        check("cuMemcpyHtoDAsync_v2", unsafe {
            sys::cuMemcpyHtoDAsync_v2(to, src.as_ptr().cast(), src.len(), raw)
        })
    }

    unsafe fn copy_from_device_async(
        &self,
        stream: &CudaStream,
        dst: &mut [u8],
        src: &impl DeviceMemory<Api = CudaApi>,
        src_offset: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_from_device_async";
        let from = checks::address(CUDA, CALL, src, src_offset, dst.len())?;
        let raw = self.on_stream(CALL, stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: the source range lies inside `src` (device memory by the
        // contract); the caller keeps `dst` valid and unread until the
        // stream passes the copy.
        check("cuMemcpyDtoHAsync_v2", unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), from, dst.len(), raw)
        })
    }

    fn copy_device_to_device_async(
        &self,
        stream: &CudaStream,
        dst: &impl DeviceMemory<Api = CudaApi>,
        dst_offset: usize,
        src: &impl DeviceMemory<Api = CudaApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_device_to_device_async";
        let to = checks::address(CUDA, CALL, dst, dst_offset, len)?;
        let from = checks::address(CUDA, CALL, src, src_offset, len)?;
        let raw = self.on_stream(CALL, stream)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges lie inside their memory (device memory by the
        // contract), which stays allocated while borrowed (freeing waits for
        // nothing, but the borrow checker keeps the owners alive across this
        // call, and the trait's contract makes the caller order frees after
        // the stream).
        check("cuMemcpyDtoDAsync_v2", unsafe {
            sys::cuMemcpyDtoDAsync_v2(to, from, len, raw)
        })
    }

    fn fill_async(
        &self,
        stream: &CudaStream,
        dst: &impl DeviceMemory<Api = CudaApi>,
        offset: usize,
        len: usize,
        byte: u8,
    ) -> GpuResult<()> {
        let to = checks::address(CUDA, "fill_async", dst, offset, len)?;
        let raw = self.on_stream("fill_async", stream)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the range lies inside `dst` (device memory by the contract).
        check("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(to, byte, len, raw)
        })
    }

    // --- peer access -----------------------------------------------------------

    fn can_access_peer(&self, peer: &CudaDevice) -> GpuResult<bool> {
        if peer.ctx.device == self.ctx.device {
            return Ok(true);
        }
        let mut can: c_int = 0;
        // SAFETY: valid out-pointer and device handles.
        check("cuDeviceCanAccessPeer", unsafe {
            sys::cuDeviceCanAccessPeer(&mut can, self.ctx.device, peer.ctx.device)
        })?;
        Ok(can != 0)
    }

    fn enable_peer_access(&self, peer: &CudaDevice) -> GpuResult<()> {
        if peer.ctx.device == self.ctx.device {
            return Ok(());
        }
        if !self.can_access_peer(peer)? {
            return Err(error(
                "enable_peer_access",
                ErrorKind::PeerAccessUnsupported {
                    device: self.ctx.ordinal,
                    peer: peer.ctx.ordinal,
                },
            ));
        }
        self.ctx.bind()?;
        // SAFETY: this device's context is current; `peer`'s is retained by
        // `peer`. Flags must be 0. Access stays enabled until a context is
        // destroyed; primary contexts live while any handle retains them.
        match unsafe { sys::cuCtxEnablePeerAccess(peer.ctx.raw, 0) } {
            CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
            result => check("cuCtxEnablePeerAccess", result),
        }
    }

    fn copy_peer(
        &self,
        dst: &impl DeviceMemory<Api = CudaApi>,
        dst_offset: usize,
        src_device: &CudaDevice,
        src: &impl DeviceMemory<Api = CudaApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_peer";
        let to = checks::address(CUDA, CALL, dst, dst_offset, len)?;
        let from = checks::address(CUDA, CALL, src, src_offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let (dst_ctx, src_ctx) = (self.ctx.raw, src_device.ctx.raw);
        // SAFETY: both ranges lie inside their memory (device memory by the
        // contract) and both contexts are retained by their devices. The
        // copy is queued on the current (this) context's legacy stream,
        // which `run_sync` waits for.
        self.run_sync("cuMemcpyPeer", || unsafe {
            sys::cuMemcpyPeer(to, dst_ctx, from, src_ctx, len)
        })
    }

    fn copy_peer_async(
        &self,
        stream: &CudaStream,
        dst: &impl DeviceMemory<Api = CudaApi>,
        dst_offset: usize,
        src_device: &CudaDevice,
        src: &impl DeviceMemory<Api = CudaApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_peer_async";
        let to = checks::address(CUDA, CALL, dst, dst_offset, len)?;
        let from = checks::address(CUDA, CALL, src, src_offset, len)?;
        let raw = self.on_stream(CALL, stream)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: as in `copy_device_to_device_async`; `stream` belongs to
        // this context (checked) and `src_device`'s context is retained.
        check("cuMemcpyPeerAsync", unsafe {
            sys::cuMemcpyPeerAsync(to, self.ctx.raw, from, src_device.ctx.raw, len, raw)
        })
    }

    // --- streams and events -----------------------------------------------

    fn create_stream(&self) -> GpuResult<CudaStream> {
        self.ctx.bind()?;
        let mut raw: CUstream = core::ptr::null_mut();
        // SAFETY: valid out-pointer; a context is current.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut raw, CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint)
        })?;
        Ok(CudaStream {
            ctx: Arc::clone(&self.ctx),
            raw,
        })
    }

    fn synchronize_stream(&self, stream: &CudaStream) -> GpuResult<()> {
        let raw = self.on_stream("synchronize_stream", stream)?;
        // SAFETY: a live stream of this context.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(raw)
        })
    }

    fn create_event(&self, flags: EventFlags) -> GpuResult<CudaEvent> {
        // Interprocess events must not time (driver rule).
        let timing = flags.timing && !flags.interprocess;
        let mut raw_flags = CUevent_flags::CU_EVENT_DEFAULT as c_uint;
        if !timing {
            raw_flags |= CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
        }
        if flags.interprocess {
            raw_flags |= CUevent_flags::CU_EVENT_INTERPROCESS as c_uint;
        }
        self.ctx.bind()?;
        let mut raw: CUevent = core::ptr::null_mut();
        // SAFETY: valid out-pointer; a context is current.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut raw, raw_flags)
        })?;
        let flags = EventFlags {
            timing,
            interprocess: flags.interprocess,
        };
        Ok(CudaEvent::new(Arc::clone(&self.ctx), raw, flags))
    }

    fn record_event(&self, event: &CudaEvent, stream: &CudaStream) -> GpuResult<()> {
        let raw = self.on_stream("record_event", stream)?;
        // SAFETY: live event and stream.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(event.raw, raw)
        })
    }

    fn synchronize_event(&self, event: &CudaEvent) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: live event.
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(event.raw)
        })
    }

    fn query_event(&self, event: &CudaEvent) -> GpuResult<bool> {
        self.ctx.bind()?;
        // SAFETY: live event.
        match unsafe { sys::cuEventQuery(event.raw) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(vendor_error("cuEventQuery", other)),
        }
    }

    fn stream_wait_event(&self, stream: &CudaStream, event: &CudaEvent) -> GpuResult<()> {
        // The event may come from another device or process: CUDA allows it.
        let raw = self.on_stream("stream_wait_event", stream)?;
        // SAFETY: live stream and event; flags must be 0.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(raw, event.raw, 0)
        })
    }

    fn elapsed(&self, start: &CudaEvent, end: &CudaEvent) -> GpuResult<Duration> {
        if !start.flags.timing || !end.flags.timing {
            return Err(error(
                "elapsed",
                ErrorKind::InvalidArgument("both events must be created with timing".to_owned()),
            ));
        }
        self.ctx.bind()?;
        let mut millis: f32 = 0.0;
        // SAFETY: valid out-pointer; live events.
        check("cuEventElapsedTime_v2", unsafe {
            sys::cuEventElapsedTime_v2(&mut millis, start.raw, end.raw)
        })?;
        // Events recorded in either order give a signed time; the trait
        // reports a duration, and `end` before `start` means none elapsed.
        Duration::try_from_secs_f64(f64::from(millis.max(0.0)) / 1e3).map_err(|_| {
            error(
                "cuEventElapsedTime_v2",
                ErrorKind::Unsupported(format!("driver reported {millis} ms")),
            )
        })
    }

    // --- modules and launches ---------------------------------------------

    fn load_module(&self, artifacts: &ModuleArtifacts<'_>) -> GpuResult<CudaModule> {
        module::load(&self.ctx, artifacts)
    }

    fn kernel(&self, module: &CudaModule, name: &str) -> GpuResult<CudaKernel> {
        module::kernel(module, name)
    }

    #[inline]
    unsafe fn launch(
        &self,
        kernel: &CudaKernel,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
        stream: &CudaStream,
    ) -> GpuResult<()> {
        checks::launch_config(CUDA, config, &self.ctx.limits)?;
        let signature = &kernel.signature;
        check_args(signature.name, signature.params, args).map_err(|detail| {
            error(
                "launch",
                ErrorKind::ArgumentMismatch {
                    kernel: signature.name.to_owned(),
                    detail,
                },
            )
        })?;
        self.ctx.expect_same("launch", &kernel.module.ctx)?;
        let raw_stream = self.on_stream("launch", stream)?;
        // The parameter array lives on the stack: no allocation per launch.
        // `check_args` bounded `args.len()` by MAX_KERNEL_ARGS.
        let mut params = [core::ptr::null_mut::<c_void>(); MAX_KERNEL_ARGS];
        for (slot, arg) in params.iter_mut().zip(args) {
            *slot = arg.value_ptr().cast_mut();
        }
        let (grid, block) = (config.grid, config.block);
        // SAFETY: dimensions and shared memory were checked against the
        // device's limits and the arguments against the kernel's declared
        // signature; each parameter pointer addresses a value in `args`,
        // which outlives this call (the driver copies the values before
        // returning). What the kernel does with pointer arguments is the
        // caller's contract.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                kernel.raw,
                grid.x,
                grid.y,
                grid.z,
                block.x,
                block.y,
                block.z,
                config.shared_mem_bytes,
                raw_stream,
                params.as_mut_ptr(),
                core::ptr::null_mut(),
            )
        })
    }

    fn resident_kernel(&self) -> ResidentKernel {
        ResidentKernels::hold(&self.ctx.resident)
    }

    // --- IPC ----------------------------------------------------------------

    fn ipc_export_memory(&self, buffer: &CudaDeviceBuffer) -> GpuResult<IpcMemHandle> {
        let state = buffer
            .export_state()
            .ok_or_else(|| error("ipc_export_memory", ErrorKind::NotExportable))?;
        self.ctx
            .expect_same("ipc_export_memory", buffer.context())?;
        // A poisoned lock only means a panic elsewhere; the slot is set whole.
        let mut exported = state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(handle) = *exported {
            return Ok(handle);
        }
        self.ctx.bind()?;
        let mut raw = CUipcMemHandle { reserved: [0; 64] };
        // SAFETY: valid out-pointer; the buffer is a live plain cuMemAlloc.
        check("cuIpcGetMemHandle", unsafe {
            sys::cuIpcGetMemHandle(&mut raw, buffer.device_ptr())
        })?;
        let handle = IpcMemHandle(ipc::handle_bytes(&raw.reserved));
        ipc::EXPORTED_MEMORY.note(handle.0);
        *exported = Some(handle);
        Ok(handle)
    }

    fn ipc_open_memory(&self, handle: &IpcMemHandle) -> GpuResult<CudaIpcBuffer> {
        IpcMapping::open_cached(&self.ctx, handle).map(CudaIpcBuffer::new)
    }

    /// A VMM allocation exported as fds, or, where the device refuses fd
    /// handles or `TANDEM_CUDA_SHARE_LEGACY=1`, an exportable allocation
    /// exported as a legacy IPC handle (see [`CudaShareableBuffer`]).
    fn alloc_shareable(&self, bytes: usize) -> GpuResult<CudaShareableBuffer> {
        const CALL: &str = "alloc_shareable";
        checks::allocation_size(CUDA, CALL, bytes)?;
        if bytes > self.total_memory()? {
            return Err(error(
                CALL,
                ErrorKind::InvalidSize {
                    bytes: bytes as u64,
                },
            ));
        }
        if shareable::use_legacy(&self.ctx) {
            let buffer = self.alloc(CALL, bytes, true)?;
            return Ok(CudaShareableBuffer::legacy_owned(buffer, bytes));
        }
        CudaShareableBuffer::allocate_vmm(&self.ctx, bytes)
    }

    fn export_shareable(&self, buffer: &CudaShareableBuffer) -> GpuResult<ShareableHandle> {
        self.ctx.expect_same("export_shareable", buffer.context())?;
        match buffer.as_legacy_owned() {
            Some(owned) => Ok(ShareableHandle::Ipc {
                handle: self.ipc_export_memory(owned)?,
                offset: 0,
                len: buffer.len(),
            }),
            None => buffer.export(),
        }
    }

    fn import_shareable(
        &self,
        handle: ShareableHandle,
        access: MemoryAccess,
    ) -> GpuResult<CudaShareableBuffer> {
        CudaShareableBuffer::import(&self.ctx, handle, access)
    }

    fn ipc_export_event(&self, event: &CudaEvent) -> GpuResult<IpcEventHandle> {
        if !event.flags.interprocess {
            return Err(error(
                "ipc_export_event",
                ErrorKind::InvalidArgument("event was not created interprocess".to_owned()),
            ));
        }
        let mut exported = event
            .exported
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(handle) = *exported {
            return Ok(handle);
        }
        self.ctx.bind()?;
        let mut raw = CUipcEventHandle { reserved: [0; 64] };
        // SAFETY: valid out-pointer; live interprocess event.
        check("cuIpcGetEventHandle", unsafe {
            sys::cuIpcGetEventHandle(&mut raw, event.raw)
        })?;
        let handle = IpcEventHandle(ipc::handle_bytes(&raw.reserved));
        ipc::EXPORTED_EVENTS.note(handle.0);
        *exported = Some(handle);
        Ok(handle)
    }

    fn ipc_open_event(&self, handle: &IpcEventHandle) -> GpuResult<CudaEvent> {
        if ipc::EXPORTED_EVENTS.contains(handle.0) {
            return Err(error("cuIpcOpenEventHandle", ErrorKind::IpcSameProcess));
        }
        self.ctx.bind()?;
        let raw_handle = CUipcEventHandle {
            reserved: ipc::handle_chars(&handle.0),
        };
        let mut raw: CUevent = core::ptr::null_mut();
        // SAFETY: valid out-pointer; the driver validates the handle.
        ipc::check_open("cuIpcOpenEventHandle", unsafe {
            sys::cuIpcOpenEventHandle(&mut raw, raw_handle)
        })?;
        // Opened events behave as created with DISABLE_TIMING (driver docs).
        let flags = EventFlags {
            timing: false,
            interprocess: true,
        };
        Ok(CudaEvent::new(Arc::clone(&self.ctx), raw, flags))
    }
}
