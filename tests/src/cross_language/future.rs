//! tandem/future.h against tandem-shm-core's `FutureShm` on the same bytes:
//! C++ completes futures Rust waits on (every failure path included), and a
//! kernel's blocks wait on futures Rust completes or stops.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tandem_device_kernels::names;
use tandem_hal::{Dim3, GpuApi, KernelArg};
use tandem_shm_core::impl_serialize_fields;
use tandem_shm_core::{FutureShm, WaitOutcome};
use tandem_shm_core::{RC_OUTPUT_FAILED, RC_OUTPUT_TOO_LARGE, RC_RESERVED_MAX};

use super::harness::{check, Gpu, Shared};

/// `tandem::future_status` values the tests expect.
mod future_status {
    pub const OK: u32 = 0;
    pub const COPY_SPACE_TOO_SMALL: u32 = 5;
    pub const ALREADY_COMPLETE: u32 = 7;
    pub const FILL_FAILED: u32 = 9;
}

/// `complete_mode` of kernels/future.cu.
mod complete_mode {
    pub const ANSWER: u32 = 0;
    pub const OVERSIZED: u32 = 1;
    pub const FAIL: u32 = 2;
}

/// `tandem::wait_outcome` values.
mod wait_outcome {
    pub const COMPLETED: u64 = 0;
    pub const STOPPED: u64 = 1;
    pub const BUDGET_EXHAUSTED: u64 = 2;
}

/// The task `tandem_future_complete` answers.
#[derive(Debug, PartialEq)]
struct Task<'a> {
    a: u64,
    b: u64,
    payload: &'a [u8],
}
impl_serialize_fields!(Task<'a> { a, b, payload });

/// Its answer.
#[derive(Debug, PartialEq)]
struct Answer<'a> {
    sum: u64,
    xor: u64,
    reversed: &'a [u8],
    nonempty: bool,
}
impl_serialize_fields!(Answer<'a> { sum, xor, reversed, nonempty });

/// Bytes of copy space of the tests' futures (the kernel answers payloads of
/// up to 256 bytes).
const COPY_SPACE: u32 = 512;

/// A fresh future in the pinned memory `mem` (of `future_memory`).
fn init_future<A: GpuApi>(mem: &Shared<A>) -> FutureShm<'_> {
    // SAFETY: the memory is ours, pinned (page-aligned), large enough, used
    // only through future handles and the future kernels, and borrowed for
    // as long as the handle lives.
    unsafe { FutureShm::init_in(mem.host(), mem.len(), COPY_SPACE) }.expect("init")
}

/// Zeroed pinned memory for one future.
fn future_memory<A: GpuApi>(gpu: &Gpu<A>) -> Shared<A> {
    gpu.shared(FutureShm::required_bytes(COPY_SPACE))
}

/// Launches `tandem_future_complete` on its own stream (so a Rust waiter
/// runs concurrently) and returns once `wait` returned and the kernel ended:
/// (what `wait` saw, status words of the kernel).
fn complete_in_cpp<A: GpuApi>(
    gpu: &Gpu<A>,
    mem: &Shared<A>,
    future: &FutureShm<'_>,
    return_code: i32,
    mode: u32,
) -> (WaitOutcome, [u32; 2]) {
    let status = gpu.shared(8);
    let stream = gpu.stream();
    let never = AtomicU32::new(0);
    // SAFETY: the future's `len` bytes and two status words stay allocated
    // until after `sync`.
    unsafe {
        gpu.launch(
            &stream,
            names::TANDEM_FUTURE_COMPLETE,
            Dim3::linear(1),
            Dim3::linear(2),
            &[
                mem.arg(),
                KernelArg::U64(mem.len() as u64),
                KernelArg::I32(return_code),
                KernelArg::U32(mode),
                status.arg(),
            ],
        )
    };
    let seen = future.wait_timeout(&never, Duration::from_secs(60));
    gpu.sync(&stream);
    (seen, [status.read(0), status.read(1)])
}

/// Rust submits random tasks, C++ completes each with a random user return
/// code while Rust waits: the return code and the answer arrive intact.
pub fn cpp_completes_what_rust_waits_on<A: GpuApi>(gpu: &Gpu<A>) {
    let tasks = (
        any::<u64>(),
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..=256),
        (RC_RESERVED_MAX + 1)..=i32::MAX,
    );
    check(file!(), 16, tasks, |(a, b, payload, return_code)| {
        complete_one(
            gpu,
            &Task {
                a,
                b,
                payload: &payload,
            },
            return_code,
        );
        Ok(())
    });
}

/// One task of [`cpp_completes_what_rust_waits_on`].
fn complete_one<A: GpuApi>(gpu: &Gpu<A>, task: &Task<'_>, return_code: i32) {
    let mem = future_memory(gpu);
    let future = init_future(&mem);
    // SAFETY: we own the unpublished future; the launch publishes it.
    unsafe { future.write_input_value(task) }.expect("input fits");
    let (seen, status) = complete_in_cpp(gpu, &mem, &future, return_code, complete_mode::ANSWER);
    assert_eq!(status, [future_status::OK, 0], "C++ completion status");
    assert_eq!(seen, WaitOutcome::Completed { return_code });
    let reversed: Vec<u8> = task.payload.iter().rev().copied().collect();
    let want = Answer {
        sum: task.a.wrapping_add(task.b),
        xor: task.a ^ task.b,
        reversed: &reversed,
        nonempty: !task.payload.is_empty(),
    };
    assert_eq!(future.read_output::<Answer>().expect("answer"), want);
}

/// Every failing completion still releases the waiter, with Rust's reserved
/// return codes and an empty output; a second completion is refused.
pub fn cpp_completion_failures_release_rust_waiters<A: GpuApi>(gpu: &Gpu<A>) {
    let task = Task {
        a: 1,
        b: 2,
        payload: b"abc",
    };
    for (mode, rc, status) in [
        (
            complete_mode::OVERSIZED,
            RC_OUTPUT_TOO_LARGE,
            future_status::COPY_SPACE_TOO_SMALL,
        ),
        (
            complete_mode::FAIL,
            RC_OUTPUT_FAILED,
            future_status::FILL_FAILED,
        ),
    ] {
        let mem = future_memory(gpu);
        let future = init_future(&mem);
        // SAFETY: as in `cpp_completes_what_rust_waits_on`.
        unsafe { future.write_input_value(&task) }.expect("input fits");
        let (seen, got) = complete_in_cpp(gpu, &mem, &future, 5, mode);
        assert_eq!(got, [status, 0], "mode {mode}");
        assert_eq!(seen, WaitOutcome::Completed { return_code: rc });
        assert_eq!(future.output(), Ok(&[][..]), "no partial output");
        let (again, got) = complete_in_cpp(gpu, &mem, &future, 5, complete_mode::ANSWER);
        assert_eq!(got[0], future_status::ALREADY_COMPLETE, "second completion");
        assert_eq!(
            again,
            WaitOutcome::Completed { return_code: rc },
            "first result kept"
        );
    }

    // An input that is not a task: C++ cannot read it and completes with
    // RC_OUTPUT_FAILED, reporting the reader's unexpected_end (2).
    let mem = future_memory(gpu);
    let future = init_future(&mem);
    // SAFETY: as above.
    unsafe { future.write_input_value(&7u32) }.expect("input fits");
    let (seen, got) = complete_in_cpp(gpu, &mem, &future, 5, complete_mode::ANSWER);
    assert_eq!(got, [future_status::FILL_FAILED, 2]);
    assert_eq!(
        seen,
        WaitOutcome::Completed {
            return_code: RC_OUTPUT_FAILED
        }
    );
}

/// A Rust waiter with its stop flag raised returns Stopped while nobody
/// completes; once C++ completed, the same wait reports completion even with
/// the stop flag still raised (completion wins).
pub fn rust_stop_flag_ends_a_wait_and_completion_wins<A: GpuApi>(gpu: &Gpu<A>) {
    let mem = future_memory(gpu);
    let future = init_future(&mem);
    let stop = AtomicU32::new(0);
    let seen = std::thread::scope(|s| {
        let waiter = s.spawn(|| future.wait_timeout(&stop, Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(20));
        stop.store(1, Ordering::Release);
        waiter.join().expect("waiter")
    });
    assert_eq!(seen, WaitOutcome::Stopped);
    let task = Task {
        a: 3,
        b: 4,
        payload: &[],
    };
    // SAFETY: the waiter has returned; we own the unpublished future again.
    unsafe { future.write_input_value(&task) }.expect("input fits");
    let (_, status) = complete_in_cpp(gpu, &mem, &future, 9, complete_mode::ANSWER);
    assert_eq!(status, [future_status::OK, 0]);
    assert_eq!(
        future.wait_timeout(&stop, Duration::ZERO),
        WaitOutcome::Completed { return_code: 9 }
    );
}

/// Launches `tandem_future_wait` over `grid` x `block` with its stop word in
/// `stop` and returns the per-thread (outcome, return code, first output
/// word) after `during` ran concurrently with the kernel.
fn wait_in_cpp<A: GpuApi>(
    gpu: &Gpu<A>,
    mem: &Shared<A>,
    stop: &Shared<A>,
    (grid, block): (Dim3, Dim3),
    spin_budget: u64,
    during: impl FnOnce(),
) -> Vec<(u64, u32, u64)> {
    let threads = (grid.count().expect("grid") * block.count().expect("block")) as usize;
    let out = gpu.shared(threads * 3 * 8);
    let stream = gpu.stream();
    // SAFETY: the future, the stop word and `out` (three words per thread)
    // stay allocated until after `sync`.
    unsafe {
        gpu.launch(
            &stream,
            names::TANDEM_FUTURE_WAIT,
            grid,
            block,
            &[
                mem.arg(),
                KernelArg::U64(mem.len() as u64),
                stop.arg(),
                KernelArg::U64(spin_budget),
                out.arg(),
            ],
        )
    };
    during();
    gpu.sync(&stream);
    (0..threads)
        .map(|t| {
            (
                out.read(3 * t),
                out.read::<u64>(3 * t + 1) as u32,
                out.read(3 * t + 2),
            )
        })
        .collect()
}

/// The stop word of a kernel, in pinned memory, as the atomic Rust raises.
fn stop_flag<A: GpuApi>(stop: &Shared<A>) -> &AtomicU32 {
    // SAFETY: the first 4 bytes of the pinned buffer, 4-aligned, accessed
    // only atomically (by this handle and the kernel) while it lives.
    unsafe { AtomicU32::from_ptr(stop.host().cast()) }
}

/// Every block of a kernel waits (thread 0 spinning, the others at the
/// barrier): Rust completing the future releases all with its return code
/// and output; Rust raising the stop flag releases all with Stopped; a
/// budget of a few rounds runs out, unless the flag is already raised. Over
/// a 1D and a 3D launch.
pub fn cpp_blocks_wait_on_futures_rust_completes_or_stops<A: GpuApi>(gpu: &Gpu<A>) {
    let launches = gpu.at_scale(
        [
            (Dim3::linear(2), Dim3::linear(8)),
            (Dim3::new(1, 2, 1), Dim3::new(2, 2, 3)),
        ],
        [
            (Dim3::linear(8), Dim3::linear(256)),
            (Dim3::new(2, 2, 1), Dim3::new(8, 4, 2)),
        ],
    );
    for launch in launches {
        blocks_wait_on_rust(gpu, launch);
    }
}

/// One launch of [`cpp_blocks_wait_on_futures_rust_completes_or_stops`].
fn blocks_wait_on_rust<A: GpuApi>(gpu: &Gpu<A>, launch: (Dim3, Dim3)) {
    let forever = u64::MAX;
    let token = 0x5EED_F00D_u64;

    let mem = future_memory(gpu);
    let future = init_future(&mem);
    let stop = gpu.shared(4);
    let got = wait_in_cpp(gpu, &mem, &stop, launch, forever, || {
        std::thread::sleep(Duration::from_millis(20));
        // SAFETY: the completer role is ours (the kernel only waits).
        unsafe { future.complete_value(-3, &token) }.expect("output fits");
    });
    assert!(
        got.iter()
            .all(|&t| t == (wait_outcome::COMPLETED, -3i32 as u32, token)),
        "completion seen by every thread: {got:?}"
    );

    let mem = future_memory(gpu);
    init_future(&mem);
    let got = wait_in_cpp(gpu, &mem, &stop, launch, forever, || {
        std::thread::sleep(Duration::from_millis(20));
        stop_flag(&stop).store(1, Ordering::Release);
    });
    assert!(
        got.iter()
            .all(|&(outcome, _, _)| outcome == wait_outcome::STOPPED),
        "stop seen by every thread: {got:?}"
    );

    let idle = gpu.shared(4);
    let got = wait_in_cpp(gpu, &mem, &idle, launch, 8, || {});
    assert!(
        got.iter()
            .all(|&(outcome, _, _)| outcome == wait_outcome::BUDGET_EXHAUSTED),
        "budget exhausted for every thread: {got:?}"
    );

    // A flag already raised ends a wait whose budget is shorter than the
    // stop-poll period: the last round of the budget checks it too.
    let got = wait_in_cpp(gpu, &mem, &stop, launch, 3, || {});
    assert!(
        got.iter()
            .all(|&(outcome, _, _)| outcome == wait_outcome::STOPPED),
        "raised stop seen within a 3-round budget: {got:?}"
    );
}

/// One `#[test]` per behaviour above for backend `$api`, in a module
/// `future`.
#[doc(hidden)]
#[macro_export]
macro_rules! cross_language_future_tests {
    ($api:ty) => {
        mod future {
            $crate::stamp_cross_language_tests!($api, future: [
                cpp_completes_what_rust_waits_on,
                cpp_completion_failures_release_rust_waiters,
                rust_stop_flag_ends_a_wait_and_completion_wins,
                cpp_blocks_wait_on_futures_rust_completes_or_stops,
            ]);
        }
    };
}
