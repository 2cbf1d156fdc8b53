//! Tandem's hardware abstraction: the vendor-neutral [`GpuApi`] / [`GpuDevice`]
//! traits and the `host` backend, a CPU "device" that runs the same kernels on
//! threads.
//!
//! # Design
//! Like wgpu-hal, one trait family with backends side by side (`host` here,
//! `tandem-hal-cuda` and `tandem-hal-hip` in their own crates behind the `cuda`
//! and `hip` features of the crates above). Resources are associated types, not
//! opaque handles in a shared table: the compiler rejects a buffer of one
//! backend passed to another, every call is statically dispatched (the launch
//! path is measured against raw cudarc), and each resource frees itself on drop
//! exactly once. What every backend must check before it calls its vendor lives
//! in [`checks`], so misuse is the same typed [`GpuError`] everywhere. Memory
//! arguments are generic over [`DeviceMemory`], an `unsafe trait` whose
//! contract the backends rely on when they hand its addresses to a driver
//! (its docs say why it is not sealed, and how wgpu-hal differs).
//!
//! Kernels come as [`ModuleArtifacts`]: one library compiled several ways
//! (host table, CUDA source/PTX/cubin, HIP code objects) with declared
//! signatures that every launch is checked against.
//!
//! # The front
//! The traits and their types are re-exported here, at the crate root, and
//! their modules are private. Four modules are public, each as a namespace a
//! caller needs whole:
//!
//! * [`host`]: the CPU-device backend, beside the others as wgpu-hal keeps
//!   its backends (`HostApi` is also at the root: it is the default).
//! * [`checks`]: what every backend checks before it calls its vendor, for
//!   the backend crates (`tandem-hal-cuda`, `tandem-hal-hip`).
//! * [`host_abi`]: the C ABI of kernels compiled for the CPU device, which
//!   `device-kernels` builds its kernel tables against.
//! * [`numa`]: the host's NUMA facts (nodes, a PCI device's CPUs, the CPUs
//!   a process may use) and placing memory and threads on them.
//!
//! Each item at the root is here for one job: the traits a backend
//! implements and a caller uses ([`GpuApi`], [`GpuDevice`], [`DeviceMemory`],
//! [`HostMemory`]); what a call takes ([`Dim3`], [`LaunchConfig`],
//! [`KernelArg`] and [`ArgKind`] checked by [`check_args`] up to
//! [`MAX_KERNEL_ARGS`], [`EventFlags`], [`IpcMemHandle`], [`IpcEventHandle`],
//! [`ShareableHandle`], [`IPC_ALLOC_GRANULARITY`]); what a device is
//! ([`DeviceProperties`], [`NumaSource`]); kernels as [`ModuleArtifacts`]
//! with their [`KernelSignature`]s; every failure a [`GpuError`]
//! ([`ErrorKind`], [`Backend`], [`GpuResult`]); [`IpcOpenCache`], the
//! cache of opened IPC handles every backend keeps so a handle opened twice
//! maps once; and [`ResidentKernels`], the account of a device's resident
//! kernels through which a backend keeps the releases that would wait for
//! them, with the [`ResidentKernel`] guard [`GpuDevice::resident_kernel`]
//! hands out.
//!
//! # Layers
//! Each module uses only those before it: `error`, `types`; `host_abi` (the
//! CPU device's kernel ABI), `ipc_cache`, `numa`, `resident`; `artifacts`; `api`; `checks`;
//! `host`. Inside `host`: `error`, `api` (the backend type), `wait`, `ipc`;
//! `launch`, `event`, `memory`, `module`; `stream` (commands over memory,
//! events and launches); `device` (the `GpuApi` and `GpuDevice` impls).

mod api;
mod artifacts;
pub mod checks;
mod error;
pub mod host;
pub mod host_abi;
mod ipc_cache;
pub mod numa;
mod resident;
mod types;

pub use api::{DeviceMemory, GpuApi, GpuDevice, HostMemory};
pub use artifacts::{KernelSignature, ModuleArtifacts};
pub use error::{Backend, ErrorKind, GpuError, GpuResult};
pub use host::HostApi;
pub use ipc_cache::IpcOpenCache;
pub use resident::{ResidentKernel, ResidentKernels};
pub use types::{
    check_args, ArgKind, DeviceProperties, Dim3, EventFlags, IpcEventHandle, IpcMemHandle,
    KernelArg, LaunchConfig, MemoryAccess, NumaSource, ShareableHandle, IPC_ALLOC_GRANULARITY,
    MAX_KERNEL_ARGS,
};
