//! Device queues of a client's own, for its own kernels: what a kernel is
//! launched against (`tandem_queue_segment`), and, on the CPU device, the
//! launch itself, since a CPU-device kernel runs on the host backend's
//! threads rather than through a vendor's launch.

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex, PoisonError};

use tandem_hal::host_abi::{HostKernel as HalHostKernel, HostKernelFn};
use tandem_hal::{
    ArgKind, Dim3 as HalDim3, GpuApi, GpuDevice, KernelArg, KernelSignature, LaunchConfig,
    ModuleArtifacts,
};
use tandem_runtime::{on_best_backend, Backend, Client, ClientDeviceQueues, OnBackend};

use crate::args;
use crate::client::{client, ClientHandle};
use crate::error::{guard, CapiError, CapiResult};
use crate::handles::Handles;
use crate::layout::{
    ArgKindCode, Dim3, HostKernel, QueueSegmentInfo, Status, TANDEM_ARG_F32, TANDEM_ARG_F64,
    TANDEM_ARG_I32, TANDEM_ARG_I64, TANDEM_ARG_PTR, TANDEM_ARG_U32, TANDEM_ARG_U64,
};

/// Device queues of a client on one device, for its own kernels.
/// Thread-safe.
pub struct DeviceQueuesHandle {
    _opaque: [u8; 0],
}

/// What the C calls need of a [`ClientDeviceQueues`], whatever its backend.
trait OpenQueues: Send + Sync {
    fn segment(&self) -> QueueSegmentInfo;
    fn raise_stop(&self);
    fn check_runtime(&self) -> CapiResult;
    /// Launches `kernel` and waits for it.
    ///
    /// # Safety
    /// `args` point at whatever `kernel` reads and writes, valid until it
    /// returns.
    unsafe fn launch_host(
        &self,
        kernel: &'static HalHostKernel,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> CapiResult;
}

impl<A: GpuApi> OpenQueues for ClientDeviceQueues<'static, A> {
    fn segment(&self) -> QueueSegmentInfo {
        QueueSegmentInfo {
            base: self.kernel_backend().base,
            len: self.queues().segment().len() as u64,
            stop: self.stop_flag_device_ptr(),
        }
    }

    fn raise_stop(&self) {
        self.queues().raise_stop();
    }

    fn check_runtime(&self) -> CapiResult {
        Ok(ClientDeviceQueues::check_runtime(self)?)
    }

    unsafe fn launch_host(
        &self,
        kernel: &'static HalHostKernel,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> CapiResult {
        if A::BACKEND != tandem_hal::Backend::Host {
            return Err(CapiError::new(
                Status::Unsupported,
                format!(
                    "these queues are on a {:?} device: launch its kernels with the vendor's own launch",
                    A::BACKEND
                ),
            ));
        }
        let signature = [KernelSignature {
            name: kernel.name,
            params: kernel.params,
        }];
        let table = [*kernel];
        let artifacts = ModuleArtifacts {
            name: kernel.name,
            signatures: &signature,
            host_table: Some(&table),
            cuda_source: None,
            nvrtc_options: &[],
            ptx: &[],
            cubins: &[],
            hip_code_objects: &[],
        };
        let device = self.device();
        let module = device.load_module(&artifacts)?;
        let launched = device.kernel(&module, kernel.name)?;
        let stream = device.create_stream()?;
        // SAFETY: the caller's contract: `args` are valid for the kernel
        // until the stream is synchronised below.
        unsafe { device.launch(&launched, config, args, &stream) }?;
        device.synchronize_stream(&stream)?;
        Ok(())
    }
}

/// Open queues and the client they borrow from.
struct Queues {
    /// Borrows `*_client`: declared first, so dropped first.
    open: Box<dyn OpenQueues>,
    _client: Arc<Client>,
}

static QUEUES: Handles<Queues> = Handles::new("tandem_device_queues", "queues");

/// `Client::device_queues` on the backend `on_best_backend` picks.
struct Open {
    client: &'static Client,
    ordinal: usize,
}

impl OnBackend for Open {
    type Output = CapiResult<Box<dyn OpenQueues>>;

    fn run<A: GpuApi>(self, api: A, _backend: Backend) -> Self::Output {
        let queues = self.client.device_queues(&api, self.ordinal)?;
        Ok(Box::new(queues))
    }
}

/// Asks the runtime of `client` to serve device queues of this process's
/// own on device `ordinal` (of the best backend present: CUDA when built
/// with it and a device answers, else the CPU device), for this process's
/// kernels; an `ordinal` that does not exist (here or in the runtime) is
/// `TANDEM_STATUS_NOT_FOUND`. Blocks until the runtime answers. The client
/// stays attached while they are open. Close with
/// `tandem_device_queues_close`.
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_device_queues_open(
    client: *const ClientHandle,
    ordinal: u32,
    out: *mut *mut DeviceQueuesHandle,
) -> Status {
    guard(|| {
        args::need_out(out, "out")?;
        let client = self::client(client)?;
        // SAFETY: the reference outlives nothing it is stored in: the
        // queues built from it live in a `Queues` beside this `Arc`, which
        // keeps the client at this address and drops after them.
        let borrowed: &'static Client = unsafe { &*Arc::as_ptr(&client) };
        let open = on_best_backend(Open {
            client: borrowed,
            ordinal: ordinal as usize,
        })??;
        let handle = QUEUES.insert(Queues {
            open,
            _client: client,
        });
        // SAFETY: checked non-null above; writable per the caller.
        unsafe { args::write_out(out, handle, "out") }
    })
}

/// Gives the queues back to the runtime (blocks until it stopped serving
/// them). Null is a no-op; a second close is `TANDEM_STATUS_CLOSED_HANDLE`.
#[no_mangle]
pub extern "C" fn tandem_device_queues_close(queues: *mut DeviceQueuesHandle) -> Status {
    guard(|| QUEUES.remove(queues))
}

/// What a kernel is launched against: the segment's device address and
/// length and its stop word's device address (`tandem/runtime.h`'s
/// `rt_init` and waits). Never blocks.
///
/// # Safety
/// `segment` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_device_queues_segment(
    queues: *const DeviceQueuesHandle,
    segment: *mut QueueSegmentInfo,
) -> Status {
    guard(|| {
        let queues = QUEUES.get(queues)?;
        // SAFETY: the caller's contract.
        unsafe { args::write_out(segment, queues.open.segment(), "segment") }
    })
}

/// Raises the queues' stop word: kernels waiting on it return `stopped`.
/// Never blocks.
#[no_mangle]
pub extern "C" fn tandem_device_queues_stop(queues: *const DeviceQueuesHandle) -> Status {
    guard(|| {
        QUEUES.get(queues)?.open.raise_stop();
        Ok(())
    })
}

/// `TANDEM_STATUS_RUNTIME_DEAD` once the runtime died (its stop word was
/// then raised, so kernels returned `stopped`): call it after a launch
/// whose threads stopped, to say why. Never blocks.
#[no_mangle]
pub extern "C" fn tandem_device_queues_check_runtime(queues: *const DeviceQueuesHandle) -> Status {
    guard(|| QUEUES.get(queues)?.open.check_runtime())
}

/// Runs `kernel`, compiled for the CPU device (`tandem_cpu_kernel.hpp`),
/// on a `grid` of `block`s with `shared_bytes` of dynamic shared memory, and
/// waits for it: the CPU device's `<<<grid, block>>>`. `args` holds one
/// pointer per parameter, each at its value (as `cudaLaunchKernel`'s).
/// `TANDEM_STATUS_UNSUPPORTED` when the queues are on a GPU. Blocks.
///
/// # Safety
/// `kernel` is null or a descriptor whose name is NUL-terminated, whose
/// entry is a CPU-device kernel entry taking exactly `param_count`
/// parameters of the kinds listed; `args` is null or holds `param_count`
/// pointers, each at a value of its parameter's kind; pointer arguments
/// address memory valid for what the kernel does until it returns.
#[no_mangle]
pub unsafe extern "C" fn tandem_device_queues_launch_cpu(
    queues: *const DeviceQueuesHandle,
    kernel: *const HostKernel,
    grid: Dim3,
    block: Dim3,
    shared_bytes: u32,
    args: *const *const c_void,
) -> Status {
    guard(|| {
        let queues = QUEUES.get(queues)?;
        if kernel.is_null() {
            return Err(CapiError::null("kernel"));
        }
        // SAFETY: non-null, a descriptor per the caller's contract.
        let kernel = unsafe { &*kernel };
        // SAFETY: the caller's contract on the descriptor.
        let interned = unsafe { intern(kernel) }?;
        // SAFETY: the caller's contract on `args`, for these kinds.
        let values = unsafe { kernel_args(interned.params, args) }?;
        let config = LaunchConfig {
            grid: HalDim3 {
                x: grid.x,
                y: grid.y,
                z: grid.z,
            },
            block: HalDim3 {
                x: block.x,
                y: block.y,
                z: block.z,
            },
            shared_mem_bytes: shared_bytes,
        };
        // SAFETY: the caller's contract: pointer arguments are valid for
        // the kernel until it returns, which the launch waits for.
        unsafe { queues.open.launch_host(interned, &config, &values) }
    })
}

/// The host backend's form of each CPU-device kernel launched so far,
/// made once per (entry, name, parameters) and kept for the process: a
/// module's table is `'static`, and a program has few kernels.
static INTERNED: Mutex<Option<HashMap<InternKey, &'static HalHostKernel>>> = Mutex::new(None);

/// A kernel's entry address, name and parameters.
type InternKey = (usize, String, Vec<ArgKind>);

/// The host backend's form of `kernel`.
///
/// # Safety
/// As [`tandem_device_queues_launch_cpu`]'s `kernel`.
unsafe fn intern(kernel: &HostKernel) -> CapiResult<&'static HalHostKernel> {
    let entry = kernel
        .entry
        .ok_or_else(|| CapiError::null("kernel->entry"))?;
    if kernel.name.is_null() {
        return Err(CapiError::null("kernel->name"));
    }
    // SAFETY: non-null and NUL-terminated per the caller.
    let name = unsafe { CStr::from_ptr(kernel.name) }
        .to_str()
        .map_err(|_| CapiError::invalid("kernel->name is not UTF-8"))?;
    let codes = {
        let bytes = kernel
            .param_count
            .checked_mul(std::mem::size_of::<ArgKindCode>())
            .ok_or_else(|| CapiError::invalid("kernel->param_count is too large"))?;
        if bytes > 0 && kernel.param_kinds.is_null() {
            return Err(CapiError::null("kernel->param_kinds"));
        }
        if kernel.param_count == 0 {
            &[][..]
        } else {
            // SAFETY: non-null, `param_count` kinds per the caller.
            unsafe { std::slice::from_raw_parts(kernel.param_kinds, kernel.param_count) }
        }
    };
    let params = codes
        .iter()
        .enumerate()
        .map(|(i, &code)| arg_kind(i, code))
        .collect::<CapiResult<Vec<ArgKind>>>()?;
    let mut interned = INTERNED.lock().unwrap_or_else(PoisonError::into_inner);
    let interned = interned.get_or_insert_with(HashMap::new);
    let key = (entry as usize, name.to_owned(), params);
    if let Some(found) = interned.get(&key) {
        return Ok(found);
    }
    // SAFETY: the two function types differ only in the pointee of `ctx`
    // (`c_void` in C, `HostThreadCtx` in Rust): the same C ABI, and the
    // entry reads a HostThreadCtx there, as the caller promised.
    let entry: HostKernelFn = unsafe { std::mem::transmute::<_, HostKernelFn>(entry) };
    let made: &'static HalHostKernel = Box::leak(Box::new(HalHostKernel {
        name: Box::leak(key.1.clone().into_boxed_str()),
        entry,
        params: Box::leak(key.2.clone().into_boxed_slice()),
    }));
    interned.insert(key, made);
    Ok(made)
}

/// The kind `kernel->param_kinds[i]` names.
fn arg_kind(i: usize, code: ArgKindCode) -> CapiResult<ArgKind> {
    Ok(match code {
        TANDEM_ARG_U32 => ArgKind::U32,
        TANDEM_ARG_I32 => ArgKind::I32,
        TANDEM_ARG_U64 => ArgKind::U64,
        TANDEM_ARG_I64 => ArgKind::I64,
        TANDEM_ARG_F32 => ArgKind::F32,
        TANDEM_ARG_F64 => ArgKind::F64,
        TANDEM_ARG_PTR => ArgKind::Ptr,
        other => {
            return Err(CapiError::invalid(format!(
                "kernel->param_kinds[{i}]: {other} is not a TANDEM_ARG_* kind"
            )))
        }
    })
}

/// The values `args` points at, one per parameter of `params`.
///
/// # Safety
/// As [`tandem_device_queues_launch_cpu`]'s `args`.
unsafe fn kernel_args(
    params: &[ArgKind],
    args: *const *const c_void,
) -> CapiResult<Vec<KernelArg<'static>>> {
    if params.is_empty() {
        return Ok(Vec::new());
    }
    if args.is_null() {
        return Err(CapiError::null("args"));
    }
    // SAFETY: `params.len()` pointers per the caller.
    let pointers = unsafe { std::slice::from_raw_parts(args, params.len()) };
    params
        .iter()
        .zip(pointers)
        .enumerate()
        .map(|(i, (kind, &at))| {
            if at.is_null() {
                return Err(CapiError::null(&format!("args[{i}]")));
            }
            let size = match kind {
                ArgKind::U32 | ArgKind::I32 | ArgKind::F32 => 4,
                ArgKind::U64 | ArgKind::I64 | ArgKind::F64 | ArgKind::Ptr => 8,
                other => {
                    return Err(CapiError::invalid(format!(
                        "args[{i}]: argument kind {other:?} is not one C passes"
                    )))
                }
            };
            let mut raw = [0u8; 8];
            // SAFETY: `at` points at a value of `kind`'s type (`size`
            // bytes) per the caller; copied bytewise, so it need not be
            // aligned for that type.
            unsafe { std::ptr::copy_nonoverlapping(at.cast::<u8>(), raw.as_mut_ptr(), size) };
            let four = [raw[0], raw[1], raw[2], raw[3]];
            Ok(match kind {
                ArgKind::U32 => KernelArg::U32(u32::from_ne_bytes(four)),
                ArgKind::I32 => KernelArg::I32(i32::from_ne_bytes(four)),
                ArgKind::F32 => KernelArg::F32(f32::from_ne_bytes(four)),
                ArgKind::U64 => KernelArg::U64(u64::from_ne_bytes(raw)),
                ArgKind::I64 => KernelArg::I64(i64::from_ne_bytes(raw)),
                ArgKind::F64 => KernelArg::F64(f64::from_ne_bytes(raw)),
                _ => KernelArg::Ptr(u64::from_ne_bytes(raw)),
            })
        })
        .collect()
}
