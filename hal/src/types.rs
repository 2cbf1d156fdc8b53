//! Plain values passed to and returned by [`crate::GpuApi`] calls.

use core::ffi::c_void;

use tandem_shm_core::ShmSafe;

/// Grid or block dimensions.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Dim3 {
    /// Extent along x.
    pub x: u32,
    /// Extent along y.
    pub y: u32,
    /// Extent along z.
    pub z: u32,
}

impl Dim3 {
    /// `x` by `y` by `z`.
    pub const fn new(x: u32, y: u32, z: u32) -> Self {
        Self { x, y, z }
    }
    /// `x` by 1 by 1.
    pub const fn linear(x: u32) -> Self {
        Self { x, y: 1, z: 1 }
    }
    /// `x * y * z`, or `None` on overflow.
    pub fn count(&self) -> Option<u64> {
        (self.x as u64)
            .checked_mul(self.y as u64)?
            .checked_mul(self.z as u64)
    }
}

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in each block.
    pub block: Dim3,
    /// Dynamic shared memory of each block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// A 1D launch of `blocks` blocks of `threads` threads.
    pub const fn linear(blocks: u32, threads: u32) -> Self {
        Self {
            grid: Dim3::linear(blocks),
            block: Dim3::linear(threads),
            shared_mem_bytes: 0,
        }
    }
}

/// The type of one kernel parameter, as declared in a
/// [`KernelSignature`](crate::KernelSignature).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ArgKind {
    /// `uint32_t`.
    U32,
    /// `int32_t`.
    I32,
    /// `uint64_t`.
    U64,
    /// `int64_t`.
    I64,
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// A device address (`T*` in the kernel).
    Ptr,
    /// A struct passed by value, of this many bytes (e.g. a `MemoryBackend`).
    Bytes(u32),
}

/// One launch argument. The value lives inside the enum, so a slice of
/// arguments can be turned into the `void**` array every backend launches with.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum KernelArg<'a> {
    /// For an [`ArgKind::U32`] parameter.
    U32(u32),
    /// For an [`ArgKind::I32`] parameter.
    I32(i32),
    /// For an [`ArgKind::U64`] parameter.
    U64(u64),
    /// For an [`ArgKind::I64`] parameter.
    I64(i64),
    /// For an [`ArgKind::F32`] parameter.
    F32(f32),
    /// For an [`ArgKind::F64`] parameter.
    F64(f64),
    /// A device address ([`crate::DeviceMemory::device_ptr`], plus an
    /// offset) for an [`ArgKind::Ptr`] parameter. Launches are `unsafe`
    /// because nothing checks what it points at.
    Ptr(u64),
    /// A struct's bytes for an [`ArgKind::Bytes`] parameter of this length
    /// (see [`KernelArg::value_of`]).
    Bytes(&'a [u8]),
}

impl<'a> KernelArg<'a> {
    /// A by-value struct argument.
    pub fn value_of<T: ShmSafe>(value: &'a T) -> Self {
        // SAFETY: `T: ShmSafe` is plain `repr(C)` data, so viewing its bytes is
        // sound; the slice borrows `value` for 'a.
        let bytes = unsafe {
            core::slice::from_raw_parts((value as *const T).cast::<u8>(), core::mem::size_of::<T>())
        };
        KernelArg::Bytes(bytes)
    }

    /// The parameter type this argument fits.
    pub fn kind(&self) -> ArgKind {
        match self {
            KernelArg::U32(_) => ArgKind::U32,
            KernelArg::I32(_) => ArgKind::I32,
            KernelArg::U64(_) => ArgKind::U64,
            KernelArg::I64(_) => ArgKind::I64,
            KernelArg::F32(_) => ArgKind::F32,
            KernelArg::F64(_) => ArgKind::F64,
            KernelArg::Ptr(_) => ArgKind::Ptr,
            KernelArg::Bytes(b) => ArgKind::Bytes(b.len() as u32),
        }
    }

    /// Address of the argument's value, as a kernel parameter array wants it.
    /// Valid while `self` is neither moved nor dropped.
    pub fn value_ptr(&self) -> *const c_void {
        match self {
            KernelArg::U32(v) => (v as *const u32).cast(),
            KernelArg::I32(v) => (v as *const i32).cast(),
            KernelArg::U64(v) | KernelArg::Ptr(v) => (v as *const u64).cast(),
            KernelArg::I64(v) => (v as *const i64).cast(),
            KernelArg::F32(v) => (v as *const f32).cast(),
            KernelArg::F64(v) => (v as *const f64).cast(),
            KernelArg::Bytes(b) => b.as_ptr().cast(),
        }
    }
}

/// Most parameters a kernel may take; lets backends build the parameter
/// array on the stack.
pub const MAX_KERNEL_ARGS: usize = 16;

/// Checks `args` against a declared parameter list. Backends call this before
/// every launch, so a wrong count or type is an error instead of a kernel
/// reading garbage.
pub fn check_args(kernel: &str, params: &[ArgKind], args: &[KernelArg<'_>]) -> Result<(), String> {
    if args.len() > MAX_KERNEL_ARGS {
        return Err(format!(
            "{} arguments exceed the limit of {MAX_KERNEL_ARGS}",
            args.len()
        ));
    }
    if params.len() != args.len() {
        return Err(format!(
            "`{kernel}` takes {} arguments, {} given",
            params.len(),
            args.len()
        ));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        if *p != a.kind() {
            return Err(format!(
                "argument {i} of `{kernel}`: expected {p:?}, given {:?}",
                a.kind()
            ));
        }
    }
    Ok(())
}

/// Where a device's host NUMA node came from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NumaSource {
    /// The vendor driver reported it (CUDA's host-NUMA-id attribute, HIP's equivalent).
    Driver,
    /// Read from `/sys/bus/pci/devices/<bus id>/numa_node`.
    Sysfs,
    /// Not known (no NUMA on this machine, or the device is the CPU itself).
    Unknown,
}

/// What a device is.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DeviceProperties {
    /// The device's ordinal in its backend.
    pub ordinal: usize,
    /// The vendor's name for the device, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Device memory in bytes (host memory for the CPU device).
    pub total_memory: u64,
    /// Streaming multiprocessors (CUDA), compute units (HIP), worker threads (host).
    pub multiprocessor_count: u32,
    /// `sm_90`, `gfx90a`, `host-x86_64`.
    pub arch: String,
    /// Threads that run in lock step (32 on NVIDIA, 32 or 64 on AMD).
    pub warp_size: u32,
    /// Most threads in one block.
    pub max_threads_per_block: u32,
    /// Most shared memory one block may use, in bytes.
    pub max_shared_mem_per_block: u32,
    /// Whether kernels can address mapped host memory (pinned, registered).
    pub can_map_host_memory: bool,
    /// Whether the device's atomic read-modify-writes on host memory are
    /// atomic with respect to the CPU's (CUDA's hostNativeAtomicSupported:
    /// false on x86 hosts over PCIe). When false, a word in host memory must
    /// never be RMW'd by GPU and CPU threads at the same time: a kernel and
    /// host threads may share a structure in mapped memory only by taking
    /// turns, or through protocols where each word has one RMW side (plain
    /// loads and stores across the link are fine).
    pub host_native_atomics: bool,
    /// The device's PCI address (`0000:3b:00.0`), where it has one.
    pub pci_bus_id: Option<String>,
    /// The host NUMA node closest to the device.
    pub host_numa_node: Option<u32>,
    /// Where `host_numa_node` came from.
    pub numa_source: NumaSource,
}

/// How an event is created.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct EventFlags {
    /// Record timestamps (for [`crate::GpuDevice::elapsed`]).
    pub timing: bool,
    /// Shareable with other processes; implies no timing (vendor rule).
    pub interprocess: bool,
}

/// A memory IPC handle: 64 plain bytes that can cross a pipe or a file.
/// It names a whole exportable allocation.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct IpcMemHandle(pub [u8; 64]);

/// An event IPC handle: 64 plain bytes.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct IpcEventHandle(pub [u8; 64]);

/// What an importer may do with shared memory
/// ([`crate::GpuDevice::import_shareable`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MemoryAccess {
    /// Loads and stores.
    ReadWrite,
    /// Loads only: a store through the mapping faults (an illegal address
    /// on a GPU, which ends the context; `SIGSEGV` on the CPU device), so a
    /// reader cannot change what every other reader sees. The fd form only:
    /// a legacy IPC handle maps read-write whatever is asked (its API has
    /// no access flags).
    ReadOnly,
}

/// How memory from [`crate::GpuDevice::alloc_shareable`] travels to another
/// process (or back into this one): what
/// [`crate::GpuDevice::export_shareable`] returns and
/// [`crate::GpuDevice::import_shareable`] takes.
///
/// The fd form is the one to prefer: it names the physical allocation, so
/// it keeps the memory alive for whoever holds it or maps it (the exporter
/// may free or exit), and it crosses a UNIX socket with `SCM_RIGHTS`, where
/// the socket's owner checks decide who may receive it. The legacy form is
/// a CUDA IPC handle, which only lives as long as the exporter's allocation.
#[derive(Debug)]
pub enum ShareableHandle {
    /// A file descriptor for the allocation: a POSIX-fd handle of the
    /// virtual memory API (`cuMemExportToShareableHandle`,
    /// `hipMemExportToShareableHandle`), or the CPU device's memfd.
    Fd {
        /// The descriptor; importing consumes it.
        fd: std::os::fd::OwnedFd,
        /// Bytes the allocation spans (rounded up to its granularity).
        size: usize,
        /// Bytes the buffer offers (what was asked for).
        len: usize,
    },
    /// A legacy IPC handle of a dedicated allocation, where the driver
    /// refuses fd handles; the buffer starts `offset` bytes into it.
    Ipc {
        /// The handle of the whole allocation.
        handle: IpcMemHandle,
        /// Where the buffer starts in the allocation.
        offset: usize,
        /// Bytes the buffer offers.
        len: usize,
    },
}

impl ShareableHandle {
    /// Bytes the buffer offers.
    pub fn len(&self) -> usize {
        match self {
            Self::Fd { len, .. } | Self::Ipc { len, .. } => *len,
        }
    }

    /// Whether the buffer offers no bytes (never true of an exported one).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Granularity exportable allocations are rounded up to, so that an importer
/// never sees a neighbouring allocation (a legacy CUDA handle exposes the whole
/// underlying block).
pub const IPC_ALLOC_GRANULARITY: usize = 2 << 20;
