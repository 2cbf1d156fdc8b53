//! Every type whose bytes C sees: the status codes, the device queue
//! segment a kernel is launched against, a CPU-device kernel's descriptor.
//! Their C mirror is `include/tandem.h`, generated from this module by
//! cbindgen (`cargo xtask capi-header`) and checked for drift by the `capi`
//! test leg; the asserts below pin the sizes that header states.

use core::ffi::{c_char, c_void};

/// What every call returns. `TANDEM_STATUS_OK` is zero; any other code
/// leaves a message for the calling thread (`tandem_last_error_message`).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// A pointer argument that must not be null was null, a handle
    /// included (except to a close call, where null is a no-op).
    NullPointer = 1,
    /// An argument is out of range: a zero or oversized size, a name that is
    /// not UTF-8 or no segment can have, an unknown argument kind, an output
    /// buffer too small.
    InvalidArgument = 2,
    /// The handle, not null, was closed, or is of another kind, or was
    /// never one.
    ClosedHandle = 3,
    /// No such thing: a runtime segment, a blob, a tag, a shared buffer id,
    /// a device ordinal.
    NotFound = 4,
    /// The runtime (or the share daemon) is gone or shut down.
    RuntimeDead = 5,
    /// The timeout passed before the answer came.
    TimedOut = 6,
    /// A task completed with a nonzero code (the message names it).
    TaskFailed = 7,
    /// The runtime or daemon refused: full quota, too many clients or
    /// queues, busy, not the writer.
    Refused = 8,
    /// A device or driver call failed.
    Device = 9,
    /// Not possible on this backend (a CPU-device launch on a GPU).
    Unsupported = 10,
    /// Any other failure (the message says what).
    Failed = 11,
    /// Tandem panicked inside the call; the panic was caught at the boundary.
    Panic = 12,
    /// Another node of the share daemon's cluster, or the cluster's etcd,
    /// went away or did not answer (a fetch).
    Unreachable = 13,
}

/// Three dimensions of a grid or block, as CUDA's `dim3`.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Dim3 {
    /// X extent.
    pub x: u32,
    /// Y extent.
    pub y: u32,
    /// Z extent.
    pub z: u32,
}

/// What a kernel needs of its device queues: `tandem/runtime.h`'s
/// `rt_init` takes the segment's base and length, its waits the stop word.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct QueueSegmentInfo {
    /// The segment's device address (`u8* segment` of the kernel).
    pub base: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The device address of its stop word (`const u32* stop`), raised
    /// when the runtime dies or the queues close.
    pub stop: u64,
}

/// One version of a named set, as `tandem_share_lookup_set` and
/// `tandem_share_bind_set` say it: the buffer ids themselves go to an
/// array of the caller's.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SetVersion {
    /// The version (from 1, rising with each bind of the name).
    pub version: u64,
    /// The manifest buffer's id.
    pub manifest: u64,
    /// Bytes of the manifest and buffers together.
    pub bytes: u64,
    /// The publisher's tensor count.
    pub tensors: u32,
    /// How many buffers it holds, the manifest aside.
    pub buffer_count: u32,
}

/// A kernel's parameter kind: `TANDEM_ARG_*`.
pub type ArgKindCode = u32;
/// `uint32_t`.
pub const TANDEM_ARG_U32: ArgKindCode = 0;
/// `int32_t`.
pub const TANDEM_ARG_I32: ArgKindCode = 1;
/// `uint64_t`.
pub const TANDEM_ARG_U64: ArgKindCode = 2;
/// `int64_t`.
pub const TANDEM_ARG_I64: ArgKindCode = 3;
/// `float`.
pub const TANDEM_ARG_F32: ArgKindCode = 4;
/// `double`.
pub const TANDEM_ARG_F64: ArgKindCode = 5;
/// A device address (any `T*`).
pub const TANDEM_ARG_PTR: ArgKindCode = 6;

/// A kernel compiled for the CPU device, as `tandem_cpu_kernel.hpp`'s
/// `TANDEM_CPU_KERNEL` describes it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HostKernel {
    /// The kernel's name (NUL-terminated).
    pub name: *const c_char,
    /// Its entry (`tandem_hal::host_abi`'s): called once per GPU thread
    /// with the host backend's `HostThreadCtx` (`tandem/host_abi.h`) and
    /// one pointer per parameter, each at its value.
    pub entry: Option<unsafe extern "C" fn(ctx: *const c_void, args: *const *const c_void)>,
    /// `param_count` kinds, `TANDEM_ARG_*`.
    pub param_kinds: *const ArgKindCode,
    /// How many parameters it takes.
    pub param_count: usize,
}

mod asserts {
    use super::*;
    use static_assertions::const_assert_eq;

    const_assert_eq!(core::mem::size_of::<Status>(), 4);
    const_assert_eq!(core::mem::size_of::<Dim3>(), 12);
    const_assert_eq!(core::mem::size_of::<QueueSegmentInfo>(), 24);
    const_assert_eq!(core::mem::size_of::<HostKernel>(), 32);
    const_assert_eq!(core::mem::size_of::<SetVersion>(), 32);
}
