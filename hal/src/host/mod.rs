//! The host backend: the CPU as a [`GpuApi`] device, running the same kernels
//! (compiled for the host, see [`crate::host_abi`]) on threads.
//!
//! | GPU notion | CPU device |
//! |---|---|
//! | device memory, pinned, managed | host memory in shared-memory segments; device address = host address |
//! | stream | a FIFO of commands run by one worker thread (module `stream`) |
//! | event | recorded/completed counters, in shared memory when interprocess (module `event`) |
//! | block | `block.count()` pool threads running concurrently, with a barrier and zeroed shared memory (module `launch`) |
//! | IPC handle | the name of a POSIX shared-memory segment (module `ipc`) |
//!
//! Properties: `multiprocessor_count` is the number of CPUs available to the
//! process (also how many blocks run at once, see [`resident_blocks`]);
//! `warp_size` is 1, because every thread runs independently on its own OS
//! thread: there is no lockstep and no warp-synchronous shortcut is valid;
//! `max_shared_mem_per_block` is the *dynamic* limit (48 KiB), on top of the
//! [`crate::host_abi::HOST_STATIC_SHARED_BYTES`] reserved for static shared
//! variables.
//!
//! `HostApi::load` reports one device, or `TANDEM_HOST_DEVICES=N` devices
//! (all the same CPU; for tests of multi-device layouts).

mod device;
mod event;
mod ipc;
mod launch;
mod memory;
mod module;
mod stream;
mod wait;

pub use device::HostDevice;
pub use event::HostEvent;
pub use ipc::VERSION as IPC_HANDLE_VERSION;
pub use launch::{catch_kernel_panic, resident_blocks, MAX_RESIDENT_THREADS};
pub use memory::{BufferKind, HostBuffer, HostIpcBuffer, HostRegistration};
pub use module::{HostKernelEntry, HostModule};
pub use stream::HostStream;

use tandem_shm_core::segment::SegmentError;

use crate::api::GpuApi;
use crate::checks::LaunchLimits;
use crate::error::{Backend, ErrorKind, GpuError, GpuResult};

/// Environment variable that sets how many devices [`HostApi::load`] reports.
pub const DEVICES_ENV: &str = "TANDEM_HOST_DEVICES";

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

/// The CPU device backend. Always loads.
#[derive(Clone, Copy, Debug)]
pub struct HostApi {
    devices: usize,
}

impl HostApi {
    /// A backend that pretends to have `devices` devices (0 is allowed: a
    /// machine without devices).
    pub fn with_devices(devices: usize) -> Self {
        Self { devices }
    }
}

impl GpuApi for HostApi {
    const BACKEND: Backend = Backend::Host;
    type Device = HostDevice;

    /// One device, or as many as [`DEVICES_ENV`] says; a value that is not a
    /// number is `InvalidArgument`.
    fn load() -> GpuResult<Self> {
        let devices = match std::env::var(DEVICES_ENV) {
            Err(std::env::VarError::NotPresent) => 1,
            Ok(text) => text.trim().parse().map_err(|_| {
                host_error(
                    "load",
                    ErrorKind::InvalidArgument(format!(
                        "{DEVICES_ENV}={text:?} is not a device count"
                    )),
                )
            })?,
            Err(std::env::VarError::NotUnicode(text)) => {
                return Err(host_error(
                    "load",
                    ErrorKind::InvalidArgument(format!(
                        "{DEVICES_ENV}={text:?} is not a device count"
                    )),
                ))
            }
        };
        Ok(Self::with_devices(devices))
    }

    fn device_count(&self) -> GpuResult<usize> {
        Ok(self.devices)
    }

    fn device(&self, ordinal: usize) -> GpuResult<HostDevice> {
        if ordinal >= self.devices {
            return Err(host_error(
                "device",
                ErrorKind::NoDevice {
                    requested: Some(ordinal),
                    available: self.devices,
                },
            ));
        }
        Ok(HostDevice::open(ordinal))
    }
}

/// An error of this backend.
pub(crate) fn host_error(call: &'static str, kind: ErrorKind) -> GpuError {
    GpuError::new(Backend::Host, call, kind)
}

/// A shared-memory failure of `call` as the error kind it amounts to.
pub(crate) fn segment_error(call: &'static str, error: SegmentError) -> GpuError {
    let kind = match error {
        SegmentError::InvalidName(why) => {
            ErrorKind::InvalidArgument(format!("segment name: {why}"))
        }
        SegmentError::ZeroLength => ErrorKind::InvalidSize { bytes: 0 },
        SegmentError::TooLarge { len } => ErrorKind::InvalidSize { bytes: len },
        // Exportable allocations get fresh names: an existing one is a clash.
        SegmentError::Exists { .. } => ErrorKind::Os {
            errno: libc::EEXIST,
        },
        SegmentError::Os { source, .. } => ErrorKind::Os {
            errno: source.raw_os_error().unwrap_or(libc::EIO),
        },
    };
    host_error(call, kind)
}

#[cfg(test)]
mod tests;
