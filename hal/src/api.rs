//! The vendor-neutral traits every backend implements.

use core::time::Duration;

use crate::artifacts::ModuleArtifacts;
use crate::error::{Backend, GpuResult};
use crate::resident::ResidentKernel;
use crate::types::{
    DeviceProperties, EventFlags, IpcEventHandle, IpcMemHandle, KernelArg, LaunchConfig,
    MemoryAccess, ShareableHandle,
};

/// A loaded GPU programming interface (driver or runtime library).
///
/// Backends are types, and every resource a backend hands out is an associated
/// type of its [`GpuDevice`]: a CUDA buffer cannot be passed to a HIP call, and
/// no call pays for dynamic dispatch (the launch path must stay within a few
/// percent of raw vendor calls). Code that picks a backend at run time does so
/// once, at the top, and is generic below (see `tandem-runtime`).
pub trait GpuApi: Send + Sync + Sized + 'static {
    /// Which backend this is, as errors and properties name it.
    const BACKEND: Backend;
    /// The backend's device, which every resource comes from.
    type Device: GpuDevice<Api = Self>;

    /// Loads the vendor library. `LibraryUnavailable` if it is not installed;
    /// a machine with the library but no device loads fine and reports 0 devices
    /// (or `NoDevice`, where the vendor reports that as an error).
    fn load() -> GpuResult<Self>;

    /// Number of devices this backend can use.
    fn device_count(&self) -> GpuResult<usize>;

    /// Opens device `ordinal` (its context is made current on the calling
    /// thread by every call that needs it).
    fn device(&self, ordinal: usize) -> GpuResult<Self::Device>;
}

/// Memory a kernel of backend `Api` can address.
///
/// Every backend hands `device_ptr()` and `len()` of what it is given to its
/// vendor's copy and fill calls, which write wherever they are told. So
/// implementing this trait is a promise the backends build on, and only code
/// that makes the promise with `unsafe impl` can implement it: safe code
/// cannot make a copy or fill reach an address it made up. The backends'
/// own memory types (the associated types of [`GpuDevice`]) are the
/// implementations; user code passes those.
///
/// # Safety
/// An implementation guarantees, for as long as `self` is alive:
/// - `device_ptr()..device_ptr() + len()` is memory that backend `Api`'s
///   devices address (an allocation, registration or IPC mapping the backend
///   made, or a part of one), readable and writable by them;
/// - both methods return the same values every time they are called, since
///   backends check `len()` and use `device_ptr()` in separate calls.
///
/// Backends still refuse, as [`crate::ErrorKind::InvalidArgument`], what they
/// can check cheaply ([`crate::checks::address`]: a null address, a range
/// that wraps around the address space; the host backend also any range that
/// is not memory it has live), so such memory is an error, not undefined
/// behaviour.
///
/// # Why an `unsafe trait`
/// wgpu-hal, whose design this crate follows, makes every resource an
/// associated type of its `Api` and has its commands take `&A::Buffer`, the
/// backend's own type, so a foreign buffer never reaches a backend; it can
/// because its entry points are `unsafe fn`s that validate nothing (wgpu-core,
/// above it, does), and its dynamic layer downcasts to the backend's type,
/// refusing anything else. Here copies and fills are safe, checked calls that
/// take any of the five kinds of memory a device hands out (device, pinned,
/// registered, managed, IPC: five types), so they are generic over a trait,
/// and the trait is what must be closed to forgery. A *sealed* trait cannot
/// do it across crates: a seal private to `tandem-hal` would shut out the
/// CUDA and HIP crates too, and a public `#[doc(hidden)]` seal is a
/// convention any crate can implement in safe code. An `unsafe trait` does:
/// the compiler refuses a plain `impl` (error E0200), so forging needs an
/// `unsafe impl` whose author answers for the contract above, while a new
/// backend crate, or a view of part of a buffer, can still implement it.
/// The conformance suite checks both halves on every backend
/// (`tandem_tests::conformance::memory::forged_memory_is_refused`).
pub unsafe trait DeviceMemory: Send + Sync {
    /// The backend whose devices address this memory.
    type Api: GpuApi;
    /// The address kernels use.
    fn device_ptr(&self) -> u64;
    /// Bytes usable from `device_ptr`.
    fn len(&self) -> usize;
    /// Whether `len()` is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Memory the host can also address directly (pinned, registered, managed).
///
/// # Safety
/// Beyond [`DeviceMemory`]'s contract: `host_ptr()..host_ptr() + len()` is
/// host memory holding the same bytes as the device range, mapped for as long
/// as `self` is alive, and `host_ptr()` returns the same value every time.
/// Callers build slices from it on the strength of this promise.
pub unsafe trait HostMemory: DeviceMemory {
    /// The address host code uses (differs from `device_ptr` in general).
    fn host_ptr(&self) -> *mut u8;
}

/// One device of a backend. Every allocation it returns is an RAII owner that
/// frees exactly once, on drop, and keeps the device's context alive.
pub trait GpuDevice: Send + Sync + Sized {
    /// The backend this device belongs to.
    type Api: GpuApi<Device = Self>;
    /// Device memory (`cuMemAlloc`, `hipMalloc`).
    type DeviceBuffer: DeviceMemory<Api = Self::Api>;
    /// Page-locked host memory mapped into the device.
    type PinnedBuffer: HostMemory<Api = Self::Api>;
    /// An existing host region (e.g. a shared-memory segment) made reachable
    /// from kernels; unregistered on drop.
    type HostRegistration: HostMemory<Api = Self::Api>;
    /// Managed (unified) memory.
    type ManagedBuffer: HostMemory<Api = Self::Api>;
    /// Another process's exported memory, opened here; closed on drop.
    type IpcBuffer: DeviceMemory<Api = Self::Api>;
    /// Memory another process can map through a [`ShareableHandle`]: made
    /// here by [`GpuDevice::alloc_shareable`] or imported by
    /// [`GpuDevice::import_shareable`]; unmapped (and, for the last holder,
    /// freed) on drop, once the work queued on the device before the drop
    /// is done, as a free waits for it.
    type ShareableBuffer: DeviceMemory<Api = Self::Api>;
    /// An in-order stream of work that does not synchronise with the
    /// synchronous calls (CUDA's and HIP's non-blocking streams).
    type Stream: Send + Sync;
    /// A marker recorded on a stream, to wait for, query or time work up to it.
    type Event: Send + Sync;
    /// A loaded kernel library (see [`GpuDevice::load_module`]).
    type Module: Send + Sync;
    /// One kernel of a module, with its declared signature.
    type Kernel: Send + Sync;

    /// This device's ordinal in its backend, as passed to [`GpuApi::device`].
    fn ordinal(&self) -> usize;
    /// What the device is: name, architecture, limits, NUMA placement.
    fn properties(&self) -> GpuResult<DeviceProperties>;
    /// Waits for all work on the device.
    fn synchronize(&self) -> GpuResult<()>;

    // --- memory -----------------------------------------------------------

    /// Device memory. Zero or absurd sizes are `InvalidSize`.
    fn alloc_device(&self, bytes: usize) -> GpuResult<Self::DeviceBuffer>;
    /// Device memory that [`GpuDevice::ipc_export_memory`] accepts: a
    /// dedicated allocation rounded up to [`crate::IPC_ALLOC_GRANULARITY`].
    fn alloc_device_exportable(&self, bytes: usize) -> GpuResult<Self::DeviceBuffer>;
    /// Page-locked host memory, mapped into the device (portable,
    /// device-mapped), starting on a page boundary (host and device address).
    /// Pinned and mapped for every device of the backend, not only this one:
    /// its device pointer is valid in kernels of every device (one unified
    /// address space), with no peer access needed.
    fn alloc_pinned_mapped(&self, bytes: usize) -> GpuResult<Self::PinnedBuffer>;
    /// Registers `len` bytes at `ptr` (page-aligned) so kernels can reach
    /// them: kernels of every device of the backend, like
    /// [`GpuDevice::alloc_pinned_mapped`] (the device pointer is valid on
    /// every device).
    ///
    /// # Safety
    /// The region must stay mapped until the registration is dropped.
    unsafe fn register_host(&self, ptr: *mut u8, len: usize) -> GpuResult<Self::HostRegistration>;
    /// Managed memory, reachable by host and device.
    fn alloc_managed(&self, bytes: usize) -> GpuResult<Self::ManagedBuffer>;

    // --- copies and fills (bounds-checked) ---------------------------------
    //
    // Every copy and fill checks its ranges against the memory's `len()`
    // (`OutOfBounds`) and the memory itself ([`crate::checks::address`])
    // before the vendor is called. Memory arguments are the device's own
    // memory types, or anything else that keeps [`DeviceMemory`]'s contract.
    //
    // Synchronous copies and fills are complete when they return `Ok`:
    // every byte has landed, so the host sees it through
    // [`HostMemory::host_ptr`], work queued afterwards on any stream sees
    // it, and the caller's slice is no longer used. They are *not* ordered
    // after work already queued on streams: synchronise a stream (or record
    // and wait for an event) before copying what it writes. Each backend
    // keeps the rule its own way (CUDA and HIP wait for the null stream after
    // the driver call, since their drivers may return before the data lands;
    // the host device copies on the calling thread), and the conformance
    // suite checks it on every backend.

    /// Copies `src` into `dst` from `dst_offset`; complete on return.
    fn copy_to_device(
        &self,
        dst: &impl DeviceMemory<Api = Self::Api>,
        dst_offset: usize,
        src: &[u8],
    ) -> GpuResult<()>;
    /// Fills `dst` from `src` at `src_offset`; complete on return.
    fn copy_from_device(
        &self,
        dst: &mut [u8],
        src: &impl DeviceMemory<Api = Self::Api>,
        src_offset: usize,
    ) -> GpuResult<()>;
    /// Copies `len` bytes from `src` at `src_offset` to `dst` at
    /// `dst_offset`; complete on return.
    fn copy_device_to_device(
        &self,
        dst: &impl DeviceMemory<Api = Self::Api>,
        dst_offset: usize,
        src: &impl DeviceMemory<Api = Self::Api>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()>;
    /// Sets `len` bytes of `dst` from `offset` to `byte`; complete on return.
    fn fill(
        &self,
        dst: &impl DeviceMemory<Api = Self::Api>,
        offset: usize,
        len: usize,
        byte: u8,
    ) -> GpuResult<()>;

    /// Host to device on `stream`.
    ///
    /// # Safety
    /// `src` must stay valid and unchanged until the stream has passed this copy.
    unsafe fn copy_to_device_async(
        &self,
        stream: &Self::Stream,
        dst: &impl DeviceMemory<Api = Self::Api>,
        dst_offset: usize,
        src: &[u8],
    ) -> GpuResult<()>;
    /// Device to host on `stream`.
    ///
    /// # Safety
    /// `dst` must stay valid and unread until the stream has passed this copy.
    unsafe fn copy_from_device_async(
        &self,
        stream: &Self::Stream,
        dst: &mut [u8],
        src: &impl DeviceMemory<Api = Self::Api>,
        src_offset: usize,
    ) -> GpuResult<()>;
    /// Device to device on `stream`.
    fn copy_device_to_device_async(
        &self,
        stream: &Self::Stream,
        dst: &impl DeviceMemory<Api = Self::Api>,
        dst_offset: usize,
        src: &impl DeviceMemory<Api = Self::Api>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()>;
    /// A fill on `stream`.
    fn fill_async(
        &self,
        stream: &Self::Stream,
        dst: &impl DeviceMemory<Api = Self::Api>,
        offset: usize,
        len: usize,
        byte: u8,
    ) -> GpuResult<()>;

    // --- peer access between devices -----------------------------------------
    //
    // Devices of one backend in one process share one virtual address space
    // (UVA on CUDA and HIP), so memory of one device has the same address
    // everywhere; whether another device's kernels may dereference it is
    // what peer access decides. Pinned and registered host memory needs no
    // peer access: it is mapped for every device of the backend.

    /// Whether kernels on this device can address memory of `peer` (its
    /// device allocations) directly once [`GpuDevice::enable_peer_access`]
    /// has been called, and copies between the two go device to device. A
    /// device and itself: `true`. The answer is the hardware's and does not
    /// change while the process runs.
    fn can_access_peer(&self, peer: &Self) -> GpuResult<bool>;
    /// Lets kernels on this device address `peer`'s memory (one direction:
    /// `peer`'s kernels reaching this device's memory needs the call the
    /// other way round). Idempotent: access already enabled is `Ok`, and so
    /// is a device and itself. Where [`GpuDevice::can_access_peer`] is
    /// false: [`crate::ErrorKind::PeerAccessUnsupported`], naming both
    /// ordinals.
    fn enable_peer_access(&self, peer: &Self) -> GpuResult<()>;
    /// Copies `len` bytes of `src` (memory of `src_device`) from
    /// `src_offset` into `dst` (memory of this device) at `dst_offset`;
    /// complete on return, like the other synchronous copies (and, like
    /// them, not promised to wait for work already queued on streams of
    /// either device: synchronise those first). Works
    /// between any two devices of the backend, and a device and itself:
    /// device to device where they have peer access, else the driver may
    /// stage the bytes through host memory. Ranges are checked as for every
    /// copy (`OutOfBounds`, `InvalidArgument`).
    fn copy_peer(
        &self,
        dst: &impl DeviceMemory<Api = Self::Api>,
        dst_offset: usize,
        src_device: &Self,
        src: &impl DeviceMemory<Api = Self::Api>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()>;
    /// [`GpuDevice::copy_peer`] on `stream`, a stream of this device: it
    /// runs in the stream's order and does not wait for `src_device`'s
    /// streams (record an event there and make `stream` wait for it first).
    #[allow(
        clippy::too_many_arguments,
        reason = "copy_peer's arguments and the stream, in the order of the other async copies"
    )]
    fn copy_peer_async(
        &self,
        stream: &Self::Stream,
        dst: &impl DeviceMemory<Api = Self::Api>,
        dst_offset: usize,
        src_device: &Self,
        src: &impl DeviceMemory<Api = Self::Api>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<()>;

    // --- streams and events -----------------------------------------------

    /// A new stream of this device; destroyed on drop.
    fn create_stream(&self) -> GpuResult<Self::Stream>;
    /// Waits until all work queued on `stream` has completed.
    fn synchronize_stream(&self, stream: &Self::Stream) -> GpuResult<()>;
    /// A new event; `flags` choose timing and sharing with other processes.
    fn create_event(&self, flags: EventFlags) -> GpuResult<Self::Event>;
    /// Records `event` on `stream`: it completes when the work queued on
    /// `stream` before it has.
    fn record_event(&self, event: &Self::Event, stream: &Self::Stream) -> GpuResult<()>;
    /// Waits until the work captured by the event's last record has completed.
    fn synchronize_event(&self, event: &Self::Event) -> GpuResult<()>;
    /// Whether all work captured by the event's last record has completed.
    fn query_event(&self, event: &Self::Event) -> GpuResult<bool>;
    /// Makes future work on `stream` wait for `event`.
    fn stream_wait_event(&self, stream: &Self::Stream, event: &Self::Event) -> GpuResult<()>;
    /// Time between two recorded timing events.
    fn elapsed(&self, start: &Self::Event, end: &Self::Event) -> GpuResult<Duration>;

    // --- modules and launches ---------------------------------------------

    /// Loads the artifact of `artifacts` this backend understands (compiling
    /// CUDA source at most once per process and device).
    fn load_module(&self, artifacts: &ModuleArtifacts<'_>) -> GpuResult<Self::Module>;
    /// Looks up a kernel; `KernelNotFound` if absent from the module or from
    /// the declared signatures.
    fn kernel(&self, module: &Self::Module, name: &str) -> GpuResult<Self::Kernel>;
    /// Launches `kernel` on `stream` after checking dimensions, shared memory
    /// and `args` against its declared signature.
    ///
    /// # Safety
    /// The kernel reads and writes whatever its pointer arguments address:
    /// they must be valid for what the kernel does, until the stream passes it.
    unsafe fn launch(
        &self,
        kernel: &Self::Kernel,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
        stream: &Self::Stream,
    ) -> GpuResult<()>;
    /// Counts a kernel that stays resident until the host ends it (a
    /// persistent service) as running on this device, until the guard drops:
    /// take it before the launch and drop it once the kernel has ended.
    /// Meanwhile the device's resources release late, not at once: the
    /// drivers' frees of device and pinned memory, unregistrations and module
    /// unloads wait for the whole device to go idle, which a resident kernel
    /// never is, so each is kept until the last guard drops (the memory stays
    /// allocated until then), and a host range whose registration is kept
    /// cannot be registered again until then (`InvalidArgument`). Loading a
    /// module, and a kernel's first launch that loads its code or sets up
    /// `printf`, still wait for the kernel: do them before.
    fn resident_kernel(&self) -> ResidentKernel;

    // --- IPC ----------------------------------------------------------------

    /// Exports an allocation made by [`GpuDevice::alloc_device_exportable`].
    fn ipc_export_memory(&self, buffer: &Self::DeviceBuffer) -> GpuResult<IpcMemHandle>;
    /// Opens another process's exported memory. Opening the same handle twice
    /// in one process shares one mapping (a per-process cache with a count);
    /// opening a handle this process exported is `IpcSameProcess`.
    fn ipc_open_memory(&self, handle: &IpcMemHandle) -> GpuResult<Self::IpcBuffer>;
    // --- shareable memory ---------------------------------------------------
    //
    // Memory handed between processes as a file descriptor (see
    // `ShareableHandle`): what a daemon that owns buffers and lends them out
    // needs. Unlike the IPC handles above, an fd keeps the physical memory
    // alive for its holder and for every mapping made from it, so a lender
    // can free its own mapping, or die, without pulling memory out from
    // under a borrower.

    /// Device memory that [`GpuDevice::export_shareable`] can hand out,
    /// rounded up to the device's granularity for such allocations. Zero or
    /// absurd sizes, and sizes beyond the device's memory, are
    /// `InvalidSize` (a size that fits the device but not what is free now
    /// is the vendor's out-of-memory error).
    fn alloc_shareable(&self, bytes: usize) -> GpuResult<Self::ShareableBuffer>;
    /// A handle another process can import; every call makes a new one (a
    /// new fd, which the caller owns).
    fn export_shareable(&self, buffer: &Self::ShareableBuffer) -> GpuResult<ShareableHandle>;
    /// Maps a handle, consuming it, into this device's address space, with
    /// `access` for this device ([`MemoryAccess::ReadOnly`] is kept for the
    /// fd form only). A handle of the fd form may
    /// come from this process; one of the legacy form may not
    /// (`IpcSameProcess`). A descriptor that names no such allocation, or
    /// one smaller than the handle says, is `InvalidIpcHandle`.
    fn import_shareable(
        &self,
        handle: ShareableHandle,
        access: MemoryAccess,
    ) -> GpuResult<Self::ShareableBuffer>;

    /// Exports an event created with `interprocess: true`.
    fn ipc_export_event(&self, event: &Self::Event) -> GpuResult<IpcEventHandle>;
    /// Opens another process's exported event.
    fn ipc_open_event(&self, handle: &IpcEventHandle) -> GpuResult<Self::Event>;
}
