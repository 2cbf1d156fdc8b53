//! The CUDA backend of Tandem's [`tandem_hal::GpuApi`], on the CUDA driver API
//! through cudarc's raw bindings, loaded with `dlopen` at run time.
//!
//! # Design
//! - **Loading.** cudarc panics when `libcuda` or one of its symbols is
//!   missing, so [`CudaApi::load`](tandem_hal::GpuApi::load) first probes the library without
//!   panicking and resolves every symbol this crate calls; a machine without
//!   the driver gets `LibraryUnavailable`, one with the driver but no GPU
//!   loads with 0 devices.
//! - **Contexts.** A device is its primary context, retained while any
//!   device handle or resource made on it lives (each holds an `Arc`), and
//!   made current on the calling thread by every call that needs it.
//! - **Memory.** Device memory is plain `cuMemAlloc` (the stream-ordered
//!   pool's memory cannot be exported); exportable memory is a dedicated
//!   allocation rounded up to [`tandem_hal::IPC_ALLOC_GRANULARITY`]; pinned
//!   and registered host memory are device-mapped and portable.
//! - **Peer access.** `cuDeviceCanAccessPeer`, `cuCtxEnablePeerAccess`
//!   (already enabled is success) and `cuMemcpyPeer`/`cuMemcpyPeerAsync`
//!   between two devices' primary contexts.
//! - **Modules.** A cubin for the device's exact architecture, else the
//!   newest suitable PTX, else the CUDA source compiled by NVRTC (once per
//!   process and architecture) — see [`select_artifact`].
//! - **Launches** are checked (dimensions, shared memory, argument types)
//!   and then go straight to `cuLaunchKernel` with a stack parameter array.
//! - **IPC.** Legacy handles; own handles are refused as `IpcSameProcess`
//!   before the driver sees them, and opens share one mapping per handle.
//! - **Shareable memory** ([`CudaShareableBuffer`]) is a VMM allocation
//!   (`cuMemCreate`) exported as a POSIX fd, which outlives its exporter;
//!   where the device refuses fd handles, or [`SHARE_LEGACY_ENV`] is `1`,
//!   an exportable allocation behind a legacy IPC handle.
//!
//! Synchronous copies and fills return once the data is in place (they wait
//! for the legacy default stream they run on); they do not wait for work on
//! this crate's streams, which are non-blocking: synchronize those first.
//!
//! # Layers
//! Each module uses only those before it: `driver` (loading, errors) and
//! `artifact`; `api` (the backend type) and `nvrtc`; `context` (a device's
//! primary context); `ipc`, `memory`, `shareable`, `stream`, `module`; `device` (the
//! `GpuApi` and `GpuDevice` impls).

mod api;
mod artifact;
mod context;
mod device;
mod driver;
mod ipc;
mod memory;
mod module;
mod nvrtc;
mod shareable;
mod stream;

pub use api::CudaApi;
pub use artifact::{select_artifact, ArtifactChoice, SmArch};
pub use device::CudaDevice;
pub use memory::{
    CudaDeviceBuffer, CudaHostRegistration, CudaIpcBuffer, CudaManagedBuffer, CudaPinnedBuffer,
};
pub use module::{CudaKernel, CudaModule};
pub use shareable::{CudaShareableBuffer, SHARE_LEGACY_ENV};
pub use stream::{CudaEvent, CudaStream};

#[cfg(test)]
mod test_support {
    use std::collections::BTreeSet;

    /// This crate's sources, compiled in so the check runs wherever the test
    /// binary is carried (the GPU machine has no checkout at the build path).
    const SOURCES: &[&str] = &[
        include_str!("api.rs"),
        include_str!("artifact.rs"),
        include_str!("context.rs"),
        include_str!("device.rs"),
        include_str!("driver.rs"),
        include_str!("ipc.rs"),
        include_str!("lib.rs"),
        include_str!("memory.rs"),
        include_str!("module.rs"),
        include_str!("nvrtc.rs"),
        include_str!("shareable.rs"),
        include_str!("stream.rs"),
    ];

    /// Names `start…` called as `prefix` `start…` `(` anywhere in `src/`,
    /// where the character after `start` is uppercase (so `sys::cuInit(` is
    /// a driver call and `sys::culib()` is not).
    pub(crate) fn calls_in_sources(prefix: &str, start: &str) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for text in SOURCES {
            let needle = format!("{prefix}{start}");
            for (at, _) in text.match_indices(&needle) {
                let name: String = text[at + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let follows_upper =
                    name[start.len()..].starts_with(|c: char| c.is_ascii_uppercase());
                let is_call = text[at + prefix.len() + name.len()..].starts_with('(');
                if follows_upper && is_call {
                    found.insert(name);
                }
            }
        }
        found
    }
}
