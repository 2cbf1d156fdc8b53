//! [`HostDevice`]: the [`GpuDevice`] implementation of the CPU device, and
//! the [`GpuApi`] implementation of [`HostApi`] that hands devices out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use tandem_process::{lock_across_forks, MadeIn};

use super::api::HostApi;
use super::error::host_error;
use super::event::HostEvent;
use super::launch::LaunchSpec;
use super::memory::{
    regions_holding, BufferKind, HostBuffer, HostIpcBuffer, HostRegistration, HostShareableBuffer,
};
use super::module::{HostKernelEntry, HostModule};
use super::stream::{Command, HostStream, StreamShared};
use crate::api::{DeviceMemory, GpuApi, GpuDevice};
use crate::artifacts::ModuleArtifacts;
use crate::checks::{self, LaunchLimits};
use crate::error::{Backend, ErrorKind, GpuResult};
use crate::resident::ResidentKernel;
use crate::types::{
    check_args, DeviceProperties, EventFlags, IpcEventHandle, IpcMemHandle, KernelArg,
    LaunchConfig, MemoryAccess, NumaSource, ShareableHandle,
};

/// Most dynamic shared memory per block (the static reservation comes on top).
pub const HOST_MAX_DYNAMIC_SHARED_BYTES: u32 = 48 * 1024;

/// Launch limits of the CPU device (those of current NVIDIA GPUs, so a launch
/// valid here is valid there).
pub const HOST_LAUNCH_LIMITS: LaunchLimits = LaunchLimits {
    max_threads_per_block: 1024,
    max_block_dim: [1024, 1024, 64],
    max_grid_dim: [(1 << 31) - 1, 65535, 65535],
    max_shared_mem_per_block: HOST_MAX_DYNAMIC_SHARED_BYTES,
};

impl GpuApi for HostApi {
    const BACKEND: Backend = Backend::Host;
    type Device = HostDevice;

    /// One device, or as many as [`DEVICES_ENV`](super::DEVICES_ENV) says; a
    /// value that is not a number is `InvalidArgument`.
    fn load() -> GpuResult<Self> {
        Self::from_env()
    }

    fn device_count(&self) -> GpuResult<usize> {
        Ok(self.devices())
    }

    fn device(&self, ordinal: usize) -> GpuResult<HostDevice> {
        if ordinal >= self.devices() {
            return Err(host_error(
                "device",
                ErrorKind::NoDevice {
                    requested: Some(ordinal),
                    available: self.devices(),
                },
            ));
        }
        Ok(HostDevice::open(ordinal))
    }
}

/// State of one device ordinal shared by every [`HostDevice`] opened on it
/// (like a GPU's primary context): the streams `synchronize` waits for.
#[derive(Default)]
struct DeviceState {
    streams: Mutex<Vec<Weak<StreamShared>>>,
}

/// The device states of one process, by ordinal ([`HostDevice::open`]).
type ProcessStates = (MadeIn, HashMap<usize, Arc<DeviceState>>);

/// One (pretend) device of the CPU backend.
#[derive(Clone)]
pub struct HostDevice {
    ordinal: usize,
    state: Arc<DeviceState>,
}

impl core::fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostDevice")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

impl HostDevice {
    pub(crate) fn open(ordinal: usize) -> Self {
        /// Each device's state, of the process that made it: a forked child
        /// starts its own, as the streams its parent's lists are served by
        /// threads that did not come along (synchronizing the device would
        /// wait for them for ever).
        static STATES: OnceLock<Mutex<ProcessStates>> = OnceLock::new();
        // Entries are inserted whole; a poisoned map is consistent.
        let mut states = lock_across_forks(
            STATES.get_or_init(|| Mutex::new((MadeIn::this_process(), HashMap::new()))),
        );
        if !states.0.is_this_process() {
            // The parent's, forgotten: dropping them would touch its streams.
            std::mem::forget(std::mem::replace(
                &mut *states,
                (MadeIn::this_process(), HashMap::new()),
            ));
        }
        let state = states.1.entry(ordinal).or_default().clone();
        Self { ordinal, state }
    }

    fn kernel_failed(call: &'static str, why: String) -> crate::GpuError {
        host_error(call, ErrorKind::KernelFailed(why))
    }
}

/// Total memory in bytes, from `/proc/meminfo`.
fn total_memory() -> GpuResult<u64> {
    const CALL: &str = "properties";
    let meminfo = std::fs::read_to_string("/proc/meminfo").map_err(|e| {
        host_error(
            CALL,
            ErrorKind::Os {
                errno: e.raw_os_error().unwrap_or(libc::EIO),
            },
        )
    })?;
    meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| {
            host_error(
                CALL,
                ErrorKind::Unsupported("/proc/meminfo has no MemTotal".into()),
            )
        })
}

impl GpuDevice for HostDevice {
    type Api = HostApi;
    type DeviceBuffer = HostBuffer;
    type PinnedBuffer = HostBuffer;
    type HostRegistration = HostRegistration;
    type ManagedBuffer = HostBuffer;
    type IpcBuffer = HostIpcBuffer;
    type ShareableBuffer = HostShareableBuffer;
    type Stream = HostStream;
    type Event = HostEvent;
    type Module = HostModule;
    type Kernel = HostKernelEntry;

    fn ordinal(&self) -> usize {
        self.ordinal
    }

    fn properties(&self) -> GpuResult<DeviceProperties> {
        let cpus = super::launch::cpus();
        let host_numa_node = crate::numa::node_of_current_cpus();
        Ok(DeviceProperties {
            ordinal: self.ordinal,
            name: "Tandem CPU device".into(),
            total_memory: total_memory()?,
            multiprocessor_count: u32::try_from(cpus).unwrap_or(u32::MAX),
            arch: format!("host-{}", std::env::consts::ARCH),
            warp_size: 1,
            max_threads_per_block: HOST_LAUNCH_LIMITS.max_threads_per_block,
            max_shared_mem_per_block: HOST_LAUNCH_LIMITS.max_shared_mem_per_block,
            can_map_host_memory: true,
            // The CPU device's atomics are the CPU's.
            host_native_atomics: true,
            pci_bus_id: None,
            host_numa_node,
            numa_source: if host_numa_node.is_some() {
                NumaSource::Sysfs
            } else {
                NumaSource::Unknown
            },
        })
    }

    /// Waits for every live stream of this device ordinal; returns the first
    /// kernel failure among them.
    fn synchronize(&self) -> GpuResult<()> {
        let streams: Vec<_> = {
            let mut streams = self
                .state
                .streams
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            streams.retain(|s| s.strong_count() > 0);
            streams.iter().filter_map(Weak::upgrade).collect()
        };
        let mut first = Ok(());
        for stream in streams {
            if let (Err(why), Ok(())) = (stream.synchronize(), &first) {
                first = Err(Self::kernel_failed("synchronize", why));
            }
        }
        first
    }

    fn alloc_device(&self, bytes: usize) -> GpuResult<HostBuffer> {
        HostBuffer::allocate("alloc_device", BufferKind::Device, bytes)
    }

    fn alloc_device_exportable(&self, bytes: usize) -> GpuResult<HostBuffer> {
        HostBuffer::allocate("alloc_device_exportable", BufferKind::Exportable, bytes)
    }

    fn alloc_pinned_mapped(&self, bytes: usize) -> GpuResult<HostBuffer> {
        HostBuffer::allocate("alloc_pinned_mapped", BufferKind::Pinned, bytes)
    }

    unsafe fn register_host(&self, ptr: *mut u8, len: usize) -> GpuResult<HostRegistration> {
        // SAFETY: forwarded contract: the region stays mapped until dropped.
        unsafe { HostRegistration::register(ptr, len) }
    }

    fn alloc_managed(&self, bytes: usize) -> GpuResult<HostBuffer> {
        HostBuffer::allocate("alloc_managed", BufferKind::Managed, bytes)
    }

    fn copy_to_device(
        &self,
        dst: &impl DeviceMemory<Api = HostApi>,
        dst_offset: usize,
        src: &[u8],
    ) -> GpuResult<()> {
        const CALL: &str = "copy_to_device";
        // SAFETY: the command runs right here, while `src` is borrowed.
        let command = unsafe { Command::copy_in(CALL, dst, dst_offset, src) }?;
        command
            .execute()
            .map_err(|why| Self::kernel_failed(CALL, why))
    }

    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: &impl DeviceMemory<Api = HostApi>,
        src_offset: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_from_device";
        // SAFETY: the command runs right here, while `dst` is borrowed.
        let command = unsafe { Command::copy_out(CALL, dst, src, src_offset) }?;
        command
            .execute()
            .map_err(|why| Self::kernel_failed(CALL, why))
    }

    fn copy_device_to_device(
        &self,
        dst: &impl DeviceMemory<Api = HostApi>,
        dst_offset: usize,
        src: &impl DeviceMemory<Api = HostApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_device_to_device";
        Command::copy_between(CALL, dst, dst_offset, src, src_offset, len)?
            .execute()
            .map_err(|why| Self::kernel_failed(CALL, why))
    }

    fn fill(
        &self,
        dst: &impl DeviceMemory<Api = HostApi>,
        offset: usize,
        len: usize,
        byte: u8,
    ) -> GpuResult<()> {
        const CALL: &str = "fill";
        Command::fill(CALL, dst, offset, len, byte)?
            .execute()
            .map_err(|why| Self::kernel_failed(CALL, why))
    }

    unsafe fn copy_to_device_async(
        &self,
        stream: &HostStream,
        dst: &impl DeviceMemory<Api = HostApi>,
        dst_offset: usize,
        src: &[u8],
    ) -> GpuResult<()> {
        // SAFETY: forwarded contract: `src` outlives the stream's copy.
        let command = unsafe { Command::copy_in("copy_to_device_async", dst, dst_offset, src) }?;
        stream.shared.enqueue(command);
        Ok(())
    }

    unsafe fn copy_from_device_async(
        &self,
        stream: &HostStream,
        dst: &mut [u8],
        src: &impl DeviceMemory<Api = HostApi>,
        src_offset: usize,
    ) -> GpuResult<()> {
        // SAFETY: forwarded contract: `dst` outlives the stream's copy.
        let command = unsafe { Command::copy_out("copy_from_device_async", dst, src, src_offset) }?;
        stream.shared.enqueue(command);
        Ok(())
    }

    fn copy_device_to_device_async(
        &self,
        stream: &HostStream,
        dst: &impl DeviceMemory<Api = HostApi>,
        dst_offset: usize,
        src: &impl DeviceMemory<Api = HostApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        let command = Command::copy_between(
            "copy_device_to_device_async",
            dst,
            dst_offset,
            src,
            src_offset,
            len,
        )?;
        stream.shared.enqueue(command);
        Ok(())
    }

    fn fill_async(
        &self,
        stream: &HostStream,
        dst: &impl DeviceMemory<Api = HostApi>,
        offset: usize,
        len: usize,
        byte: u8,
    ) -> GpuResult<()> {
        stream
            .shared
            .enqueue(Command::fill("fill_async", dst, offset, len, byte)?);
        Ok(())
    }

    /// Every device of the CPU backend is the same memory: each reaches
    /// every other.
    fn can_access_peer(&self, _peer: &HostDevice) -> GpuResult<bool> {
        Ok(true)
    }

    /// Nothing to enable: every device already reaches every other.
    fn enable_peer_access(&self, _peer: &HostDevice) -> GpuResult<()> {
        Ok(())
    }

    fn copy_peer(
        &self,
        dst: &impl DeviceMemory<Api = HostApi>,
        dst_offset: usize,
        _src_device: &HostDevice,
        src: &impl DeviceMemory<Api = HostApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        const CALL: &str = "copy_peer";
        Command::copy_between(CALL, dst, dst_offset, src, src_offset, len)?
            .execute()
            .map_err(|why| Self::kernel_failed(CALL, why))
    }

    fn copy_peer_async(
        &self,
        stream: &HostStream,
        dst: &impl DeviceMemory<Api = HostApi>,
        dst_offset: usize,
        _src_device: &HostDevice,
        src: &impl DeviceMemory<Api = HostApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()> {
        let command =
            Command::copy_between("copy_peer_async", dst, dst_offset, src, src_offset, len)?;
        stream.shared.enqueue(command);
        Ok(())
    }

    fn create_stream(&self) -> GpuResult<HostStream> {
        let stream = HostStream::start().map_err(|e| {
            host_error(
                "create_stream",
                ErrorKind::Os {
                    errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
                },
            )
        })?;
        let mut streams = self
            .state
            .streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        streams.retain(|s| s.strong_count() > 0);
        streams.push(Arc::downgrade(&stream.shared));
        Ok(stream)
    }

    fn synchronize_stream(&self, stream: &HostStream) -> GpuResult<()> {
        stream
            .shared
            .synchronize()
            .map_err(|why| Self::kernel_failed("synchronize_stream", why))
    }

    fn create_event(&self, flags: EventFlags) -> GpuResult<HostEvent> {
        HostEvent::create(flags)
    }

    fn record_event(&self, event: &HostEvent, stream: &HostStream) -> GpuResult<()> {
        let sequence = event.core.begin_record();
        stream.shared.enqueue(Command::Record {
            event: Arc::clone(&event.core),
            sequence,
        });
        Ok(())
    }

    fn synchronize_event(&self, event: &HostEvent) -> GpuResult<()> {
        event.synchronize();
        Ok(())
    }

    fn query_event(&self, event: &HostEvent) -> GpuResult<bool> {
        Ok(event.query())
    }

    fn stream_wait_event(&self, stream: &HostStream, event: &HostEvent) -> GpuResult<()> {
        if let Some(wait) = event.wait_command() {
            stream.shared.enqueue(Command::Wait(wait));
        }
        Ok(())
    }

    fn elapsed(&self, start: &HostEvent, end: &HostEvent) -> GpuResult<Duration> {
        HostEvent::elapsed(start, end)
    }

    fn load_module(&self, artifacts: &ModuleArtifacts<'_>) -> GpuResult<HostModule> {
        HostModule::load(artifacts)
    }

    fn kernel(&self, module: &HostModule, name: &str) -> GpuResult<HostKernelEntry> {
        module.kernel(name)
    }

    unsafe fn launch(
        &self,
        kernel: &HostKernelEntry,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
        stream: &HostStream,
    ) -> GpuResult<()> {
        checks::launch_config(Backend::Host, config, &HOST_LAUNCH_LIMITS)?;
        check_args(kernel.name, kernel.params, args).map_err(|detail| {
            host_error(
                "launch",
                ErrorKind::ArgumentMismatch {
                    kernel: kernel.name.to_owned(),
                    detail,
                },
            )
        })?;
        let spec = LaunchSpec::new(
            kernel.name,
            kernel.entry,
            config.grid,
            config.block,
            config.shared_mem_bytes,
            args,
        );
        let keep = regions_holding(args.iter().filter_map(|arg| match arg {
            KernelArg::Ptr(ptr) => Some(*ptr),
            _ => None,
        }));
        stream.shared.enqueue(Command::Launch {
            spec: Arc::new(spec),
            keep,
        });
        Ok(())
    }

    fn resident_kernel(&self) -> ResidentKernel {
        // The CPU device's frees are the allocator's: none waits for a
        // running kernel.
        ResidentKernel::untracked()
    }

    fn ipc_export_memory(&self, buffer: &HostBuffer) -> GpuResult<IpcMemHandle> {
        buffer.export()
    }

    fn ipc_open_memory(&self, handle: &IpcMemHandle) -> GpuResult<HostIpcBuffer> {
        HostIpcBuffer::open(handle)
    }

    fn alloc_shareable(&self, bytes: usize) -> GpuResult<HostShareableBuffer> {
        // Read once: an allocation is not the place to parse /proc.
        static TOTAL: OnceLock<u64> = OnceLock::new();
        let total = match TOTAL.get() {
            Some(&total) => total,
            None => *TOTAL.get_or_init(|| total_memory().unwrap_or(u64::MAX)),
        };
        HostShareableBuffer::allocate(bytes, total)
    }

    fn export_shareable(&self, buffer: &HostShareableBuffer) -> GpuResult<ShareableHandle> {
        buffer.export()
    }

    fn import_shareable(
        &self,
        handle: ShareableHandle,
        access: MemoryAccess,
    ) -> GpuResult<HostShareableBuffer> {
        HostShareableBuffer::import(handle, access)
    }

    fn ipc_export_event(&self, event: &HostEvent) -> GpuResult<IpcEventHandle> {
        event.export()
    }

    fn ipc_open_event(&self, handle: &IpcEventHandle) -> GpuResult<HostEvent> {
        HostEvent::open(handle)
    }
}
