//! The host backend: the CPU as a [`GpuApi`](crate::GpuApi) device, running the same kernels
//! (compiled for the host, see [`crate::host_abi`]) on threads.
//!
//! | GPU notion | CPU device |
//! |---|---|
//! | device memory, pinned, managed | host memory in shared-memory segments; device address = host address |
//! | stream | a FIFO of commands run by one worker thread (module `stream`) |
//! | event | recorded/completed counters, in shared memory when interprocess (module `event`) |
//! | block | `block.count()` fibers taking turns on one OS thread, with a barrier and zeroed shared memory (modules `launch`, `fiber`) |
//! | multiprocessor | a lane: the stream's worker or a pool thread (module `pool`), running blocks one after another |
//! | IPC handle | the name of a POSIX shared-memory segment (module `ipc`) |
//!
//! Properties: `multiprocessor_count` is the number of CPUs available to the
//! process (also how many blocks run at once, see [`resident_blocks`]);
//! `warp_size` is 1, because every thread runs on its own (fiber) stack and
//! switches on its own, at barriers and wait loops: there is no lockstep and
//! no warp-synchronous shortcut is valid;
//! `max_shared_mem_per_block` is the *dynamic* limit (48 KiB), on top of the
//! [`crate::host_abi::HOST_STATIC_SHARED_BYTES`] reserved for static shared
//! variables.
//!
//! `HostApi::load` reports one device, or `TANDEM_HOST_DEVICES=N` devices
//! (all the same CPU; for tests of multi-device layouts). Every device has
//! peer access to every other, and a peer copy is a copy like any other.

mod api;
mod countdown;
mod device;
mod error;
mod event;
mod fiber;
mod ipc;
mod launch;
mod memory;
mod module;
mod pool;
mod stream;
mod wait;

pub use api::{HostApi, DEVICES_ENV};
pub use device::{HostDevice, HOST_LAUNCH_LIMITS, HOST_MAX_DYNAMIC_SHARED_BYTES};
pub use event::HostEvent;
pub use fiber::{tandem_host_yield, FIBER_STACK_BYTES};
pub use ipc::VERSION as IPC_HANDLE_VERSION;
pub use launch::{catch_kernel_panic, resident_blocks, MAX_RESIDENT_THREADS};
pub use memory::{BufferKind, HostBuffer, HostIpcBuffer, HostRegistration, HostShareableBuffer};
pub use module::{HostKernelEntry, HostModule};
pub use stream::HostStream;

#[cfg(test)]
mod tests;
