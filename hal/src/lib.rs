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
//! # Layers
//! Each module uses only those before it: `error`, `types`; `host_abi` (the
//! CPU device's kernel ABI), `ipc_cache`, `numa`; `artifacts`; `api`; `checks`;
//! `host`. Inside `host`: `error`, `api` (the backend type), `wait`, `ipc`;
//! `launch`, `event`, `memory`, `module`; `stream` (commands over memory,
//! events and launches); `device` (the `GpuApi` and `GpuDevice` impls).

pub mod api;
pub mod artifacts;
pub mod checks;
pub mod error;
pub mod host_abi;
pub mod ipc_cache;
pub mod types;

pub use api::{DeviceMemory, GpuApi, GpuDevice, HostMemory};
pub use artifacts::{KernelSignature, ModuleArtifacts};
pub use error::{Backend, ErrorKind, GpuError, GpuResult};
pub use types::{
    check_args, ArgKind, DeviceProperties, Dim3, EventFlags, IpcEventHandle, IpcMemHandle,
    KernelArg, LaunchConfig, NumaSource, ShareableHandle, IPC_ALLOC_GRANULARITY, MAX_KERNEL_ARGS,
};

pub mod host;
pub mod numa;

pub use host::HostApi;
