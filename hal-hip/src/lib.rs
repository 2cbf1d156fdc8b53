//! The HIP/ROCm backend of Tandem's [`tandem_hal::GpuApi`].
//!
//! [`HipApi`] mirrors the CUDA backend call for call on the HIP runtime API:
//! `hipMalloc`ed device memory (exportable allocations rounded to
//! [`tandem_hal::IPC_ALLOC_GRANULARITY`]), mapped pinned, registered and
//! managed host memory, non-blocking streams, events, code objects chosen by
//! the device's gfx target and launched with `hipModuleLaunchKernel`, and
//! legacy IPC handles for memory and events, and shareable memory
//! ([`HipShareableBuffer`]: VMM allocations exported as fds where the
//! runtime allows, legacy IPC otherwise). Every resource is an RAII owner
//! released exactly once on drop; every check of [`tandem_hal::checks`] runs
//! before the runtime is asked, so misuse is the same typed error as on every
//! other backend, and every runtime failure is a [`tandem_hal::GpuError`] of
//! [`tandem_hal::Backend::Hip`] naming the `hip*` call and the runtime's error
//! name.
//!
//! Built against ROCm 5.2 (Debian's `libamdhip64-dev`). The bindings'
//! `hipError_t` is a Rust enum that lists every code the 5.2 runtime returns;
//! a newer runtime that adds codes needs regenerated bindings first.
//!
//! # Layers
//! Each module uses only those before it: `error` and `target`; `api` (the
//! backend type) and `context` (the thread's current device); `stream`;
//! `memory` (with the set of handles this process exported); `ipc`,
//! `module`, `shareable`; `device` (the `GpuApi` and `GpuDevice` impls).

mod api;
mod context;
mod device;
mod error;
mod ipc;
mod memory;
mod module;
mod shareable;
mod stream;
pub mod target;

pub use api::HipApi;
pub use device::HipDevice;
pub use ipc::HipIpcBuffer;
pub use memory::{HipDeviceBuffer, HipHostRegistration, HipManagedBuffer, HipPinnedBuffer};
pub use module::{HipKernel, HipModule};
pub use shareable::{HipShareableBuffer, SHARE_LEGACY_ENV};
pub use stream::{HipEvent, HipStream};
