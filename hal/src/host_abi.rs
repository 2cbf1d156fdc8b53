//! The C ABI between the host backend and kernels compiled for the CPU device.
//!
//! `device-kernels` compiles its C++ kernels with the host compiler into
//! functions of type [`HostKernelFn`] and lists them in a table of
//! [`HostKernel`]s. The host backend runs the threads of a block as fibers of
//! one OS thread, which switch at the block barrier and in wait loops
//! (`tandem_host_yield`, which the host backend exports), and hands each one a [`HostThreadCtx`]; the C++
//! portability header reads `threadIdx`, `blockIdx`, block-shared memory and
//! the barrier from it.
//! The C++ mirror is `device-kernels/include/tandem/host_abi.h`, checked
//! against these asserts when device-kernels builds.

use core::ffi::c_void;

use crate::types::{ArgKind, Dim3};

/// Bytes at the start of each block's shared memory reserved for statically
/// declared block-shared variables (`TANDEM_SHARED` in C++); dynamic shared
/// memory (`LaunchConfig::shared_mem_bytes`) follows. 48 KiB matches the
/// static limit of CUDA and HIP.
pub const HOST_STATIC_SHARED_BYTES: u32 = 48 * 1024;

/// What one CPU-device thread knows about itself. Valid for the duration of
/// the kernel call it is passed to.
#[repr(C)]
pub struct HostThreadCtx {
    /// This thread's index in its block (`threadIdx`).
    pub thread_idx: Dim3,
    /// This thread's block's index in the grid (`blockIdx`).
    pub block_idx: Dim3,
    /// Threads per block (`blockDim`).
    pub block_dim: Dim3,
    /// Blocks in the grid (`gridDim`).
    pub grid_dim: Dim3,
    /// Start of this block's shared memory: `HOST_STATIC_SHARED_BYTES` of
    /// static space, then `dynamic_shared_bytes` of dynamic space. 16-aligned.
    pub shared_mem: *mut u8,
    /// Bytes of dynamic shared memory after the static space.
    pub dynamic_shared_bytes: u32,
    /// Padding that keeps `barrier` 8-aligned in C as in Rust; zero.
    pub _reserved: u32,
    /// Block barrier (`__syncthreads`): returns when every thread of the block
    /// has called it. Never unwinds.
    pub barrier: unsafe extern "C" fn(ctx: *const HostThreadCtx),
    /// Backend state the barrier needs; opaque to kernels.
    pub barrier_state: *const c_void,
}

/// A kernel entry compiled for the CPU device. `args` points at one pointer per
/// parameter, each pointing at the argument's value (the same convention as
/// `cuLaunchKernel`'s `kernelParams`). Must not unwind.
pub type HostKernelFn = unsafe extern "C" fn(ctx: *const HostThreadCtx, args: *const *const c_void);

/// One entry of a host kernel table.
#[derive(Clone, Copy, Debug)]
pub struct HostKernel {
    /// The kernel's name, as in the C++ source and its signature.
    pub name: &'static str,
    /// The compiled entry point.
    pub entry: HostKernelFn,
    /// Its parameters as the table lists them (checked against the
    /// declared signature when a module loads).
    pub params: &'static [ArgKind],
}

/// The CPU device's clock for kernels (`tandem::timer_ns()` in
/// tandem/atomic.h; GPUs read their global timers instead): monotonic
/// nanoseconds since the first call in the process. Never unwinds.
#[no_mangle]
pub extern "C" fn tandem_host_timer_ns() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

mod asserts {
    use super::*;
    use memoffset::offset_of;
    use static_assertions::const_assert_eq;

    const_assert_eq!(core::mem::size_of::<Dim3>(), 12);
    const_assert_eq!(offset_of!(HostThreadCtx, thread_idx), 0);
    const_assert_eq!(offset_of!(HostThreadCtx, block_idx), 12);
    const_assert_eq!(offset_of!(HostThreadCtx, block_dim), 24);
    const_assert_eq!(offset_of!(HostThreadCtx, grid_dim), 36);
    const_assert_eq!(offset_of!(HostThreadCtx, shared_mem), 48);
    const_assert_eq!(offset_of!(HostThreadCtx, dynamic_shared_bytes), 56);
    const_assert_eq!(offset_of!(HostThreadCtx, barrier), 64);
    const_assert_eq!(offset_of!(HostThreadCtx, barrier_state), 72);
    const_assert_eq!(core::mem::size_of::<HostThreadCtx>(), 80);
}
