//! Kernel launches on the CPU device: lanes, the per-lane shared memory and
//! the trampoline that calls a kernel entry.
//!
//! # Execution model
//! A launch of `grid` blocks of `block` threads runs as `resident` *lanes*
//! (see [`resident_blocks`]), each on one OS thread: lane 0 on the stream's
//! worker, the others on the process-wide pool (module `pool`). Lane `l` runs
//! blocks `l, l + resident, l + 2 * resident, ...` one after the other, and
//! a block's threads as fibers taking turns on the lane's thread (module
//! `fiber`): they switch at the block barrier (`__syncthreads`) and in wait
//! loops ([`crate::host::tandem_host_yield`]), so a kernel thread that
//! waits for another thread of its block must wait in such a loop, as the
//! spinning rule of tandem/atomic.h asks of every kernel anyway. After each
//! block the lane zeroes its shared memory, so each block starts from zeroed
//! shared memory.
//!
//! # Forward progress
//! As on a GPU, blocks of one launch may or may not run at the same time.
//! This backend guarantees it only for the first `resident` blocks: a grid of
//! at most [`resident_blocks`] blocks is fully resident (every block is
//! running at once), so a persistent kernel whose blocks wait on each other
//! works if it sizes its grid that way (`multiprocessor_count` is the value
//! for blocks of up to `MAX_RESIDENT_THREADS / multiprocessor_count` threads).
//! A larger grid whose early blocks wait for later ones deadlocks, exactly as
//! it may on a GPU. Launches on different streams never wait for each other's
//! lanes: the pool grows so every submitted lane starts at once.
//!
//! # Failures
//! Kernels are `extern "C"` and must not unwind (C++ kernels cannot throw
//! into Rust here; a Rust `extern "C"` function that panics aborts the
//! process). A Rust-defined kernel that wants a panic to become a launch
//! failure wraps its body in [`catch_kernel_panic`]. A failure stops the
//! launch like a GPU trap: barriers of every block release at once and become
//! no-ops, no further block starts, and the stream reports `KernelFailed` at
//! its next synchronisation. A block whose live threads all wait in a barrier
//! that its other threads returned without reaching fails the same way
//! (undefined on a GPU; here it would hang).

use core::ffi::c_void;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::countdown::Countdown;
use super::fiber::{self, BlockBarrier};
use super::pool;

use crate::host_abi::{HostKernelFn, HostThreadCtx, HOST_STATIC_SHARED_BYTES};
use crate::types::{Dim3, KernelArg};

/// Most kernel threads (fibers, each with a [`super::FIBER_STACK_BYTES`]
/// stack) one launch has alive at once; bounds [`resident_blocks`] on
/// machines with many cores and big blocks.
pub const MAX_RESIDENT_THREADS: u32 = 16 * 1024;

/// CPUs available to the process, read once: `available_parallelism` reads
/// the cgroup quota files and the affinity mask on every call, which cost
/// most of an empty launch (docs/perf/2026-11-24-dev-vm-2core.md).
pub(crate) fn cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Blocks of `block_threads` threads that run at the same time in one launch:
/// one per available CPU, as long as they need at most
/// [`MAX_RESIDENT_THREADS`] threads together (always at least one).
pub fn resident_blocks(block_threads: u32) -> u32 {
    let cpus = u32::try_from(cpus()).unwrap_or(u32::MAX);
    cpus.min(MAX_RESIDENT_THREADS / block_threads.max(1)).max(1)
}

/// 16 bytes, 16-aligned: the unit of argument and shared-memory storage, so
/// every value a kernel reads from either is suitably aligned.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Chunk([u8; 16]);

/// Owned copies of a launch's argument values and the `void**` array that
/// points at them (the `kernelParams` convention).
struct ArgBlock {
    // Read through `pointers` only; kept for ownership. Boxed slices never
    // move their contents, so the pointers stay valid.
    _storage: Box<[Chunk]>,
    pointers: Box<[*const c_void]>,
}

impl ArgBlock {
    fn new(args: &[KernelArg<'_>]) -> Self {
        let size_of = |arg: &KernelArg<'_>| match arg {
            KernelArg::U32(_) | KernelArg::I32(_) | KernelArg::F32(_) => 4,
            KernelArg::U64(_) | KernelArg::I64(_) | KernelArg::F64(_) | KernelArg::Ptr(_) => 8,
            KernelArg::Bytes(b) => b.len(),
        };
        let chunks = |bytes: usize| bytes.div_ceil(16).max(1);
        let total = args.iter().map(|a| chunks(size_of(a))).sum::<usize>();
        let mut storage = vec![Chunk([0; 16]); total].into_boxed_slice();
        let base = storage.as_mut_ptr().cast::<u8>();
        let mut pointers = Vec::with_capacity(args.len());
        let mut at = 0;
        for arg in args {
            let size = size_of(arg);
            // SAFETY: `at * 16 + size` is within `storage` (sized from the same
            // sums above) and `value_ptr` points at `size` readable bytes.
            unsafe {
                let dst = base.add(at * 16);
                core::ptr::copy_nonoverlapping(arg.value_ptr().cast::<u8>(), dst, size);
                pointers.push(dst.cast_const().cast::<c_void>());
            }
            at += chunks(size);
        }
        Self {
            _storage: storage,
            pointers: pointers.into_boxed_slice(),
        }
    }
}

/// Everything a launch needs, captured when it is enqueued.
pub(crate) struct LaunchSpec {
    pub(crate) kernel: &'static str,
    pub(crate) entry: HostKernelFn,
    pub(crate) grid: Dim3,
    pub(crate) block: Dim3,
    pub(crate) dynamic_shared_bytes: u32,
    args: ArgBlock,
}

// SAFETY: the raw pointers of `args` point into its own boxed storage, which
// moves with it and is only read; `entry` is a plain function pointer.
unsafe impl Send for LaunchSpec {}
// SAFETY: as above; every access after construction is a read.
unsafe impl Sync for LaunchSpec {}

impl LaunchSpec {
    /// Captures a launch. `grid` and `block` must already be validated
    /// (non-empty, within limits), so their counts do not overflow.
    pub(crate) fn new(
        kernel: &'static str,
        entry: HostKernelFn,
        grid: Dim3,
        block: Dim3,
        dynamic_shared_bytes: u32,
        args: &[KernelArg<'_>],
    ) -> Self {
        Self {
            kernel,
            entry,
            grid,
            block,
            dynamic_shared_bytes,
            args: ArgBlock::new(args),
        }
    }
}

/// A block's shared memory: zeroed, 16-aligned, `HOST_STATIC_SHARED_BYTES`
/// of static space followed by the launch's dynamic space.
struct SharedMemory {
    chunks: Box<[core::cell::UnsafeCell<Chunk>]>,
}

// SAFETY: the bytes are only reached through raw pointers: by the threads of
// one block, fibers of one OS thread, which order their accesses with the
// block barrier as on a GPU, and by `zero`, which that OS thread runs between
// blocks.
unsafe impl Sync for SharedMemory {}

/// Zeroed buffers of finished launches, for the next ones. A fresh buffer
/// costs a page fault per 4 KiB touched once the allocator has returned its
/// pages to the OS: measured, that was most of an empty launch
/// (docs/perf/2026-11-24-dev-vm-2core.md).
static SHARED_POOL: Mutex<Vec<SharedMemory>> = Mutex::new(Vec::new());

/// Most buffers [`SHARED_POOL`] keeps (each at least 48 KiB).
const SHARED_POOL_MAX: usize = 64;

impl SharedMemory {
    /// A zeroed buffer for `dynamic_bytes` of dynamic shared memory: a pooled
    /// one if one is large enough, else a new one.
    fn take(dynamic_bytes: u32) -> Self {
        let chunks = (HOST_STATIC_SHARED_BYTES + dynamic_bytes).div_ceil(16) as usize;
        let mut pool = SHARED_POOL.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = pool.iter().position(|m| m.chunks.len() >= chunks) {
            return pool.swap_remove(at);
        }
        drop(pool);
        Self {
            chunks: (0..chunks)
                .map(|_| core::cell::UnsafeCell::new(Chunk([0; 16])))
                .collect(),
        }
    }

    /// Gives a zeroed buffer back to [`SHARED_POOL`] (or frees it if full).
    fn recycle(self) {
        let mut pool = SHARED_POOL.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < SHARED_POOL_MAX {
            pool.push(self);
        }
    }

    fn as_ptr(&self) -> *mut u8 {
        // UnsafeCell<Chunk> has Chunk's layout, so the slice is one
        // contiguous, writable byte range.
        self.chunks.as_ptr().cast_mut().cast()
    }

    /// Zeroes the memory.
    ///
    /// # Safety
    /// No thread may access it meanwhile (no block of the lane is running).
    unsafe fn zero(&self) {
        // SAFETY: exclusive access by the caller's contract; the range is ours.
        unsafe { self.as_ptr().write_bytes(0, self.chunks.len() * 16) };
    }
}

/// A launch being executed: the shared memory of each lane, the count of
/// pool lanes still running, and its first failure.
struct LaunchRun {
    spec: Arc<LaunchSpec>,
    resident: u32,
    lanes: Box<[SharedMemory]>,
    /// Lanes the pool runs, counted down as they finish.
    pool_lanes: Countdown,
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
}

impl Drop for LaunchRun {
    /// Recycles the lanes' shared memory, which each lane zeroed after each
    /// block, unless a panic of the backend's own code (which fails the
    /// launch) cut a block short: then it is zeroed here.
    fn drop(&mut self) {
        let failed = *self.failed.get_mut();
        for shared in core::mem::take(&mut self.lanes) {
            if failed {
                // SAFETY: the run is being dropped, so no lane is running.
                unsafe { shared.zero() };
            }
            shared.recycle();
        }
    }
}

impl LaunchRun {
    /// Records the first failure and stops the launch (see the module docs).
    fn fail(&self, why: String) {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(why);
        // Relaxed: the flag only stops new blocks and breaks barriers; the
        // failure text is read by the waiter after every lane has finished
        // (`Countdown::wait`, or program order for the waiter's own lane).
        self.failed.store(true, Ordering::Relaxed);
    }

    /// Runs lane `lane`: blocks `lane, lane + resident, ...`, each one's
    /// threads as fibers of this OS thread (module `fiber`), each on zeroed
    /// shared memory. Never panics.
    fn run_lane(&self, lane: u32) {
        CURRENT_RUN.set(self);
        // Catches panics of this Rust code only: a kernel entry is `extern "C"`
        // and cannot unwind into it.
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.run_blocks(lane))) {
            self.fail(format!(
                "host backend thread panicked: {}",
                panic_message(&*panic)
            ));
        }
        CURRENT_RUN.set(core::ptr::null());
    }

    fn run_blocks(&self, lane: u32) {
        let spec = &*self.spec;
        let shared = &self.lanes[lane as usize];
        // Validated at launch: the counts fit (the grid fits u64, blocks u32).
        let blocks = spec.grid.count().unwrap_or(0);
        let threads = u32::try_from(spec.block.count().unwrap_or(0)).unwrap_or(u32::MAX);
        let mut block = u64::from(lane);
        while block < blocks && !self.failed.load(Ordering::Relaxed) {
            let block_idx = unlinearize(block, spec.grid);
            fiber::run_block(
                threads,
                &self.failed,
                |why| self.fail(why),
                |thread, barrier| {
                    let ctx = HostThreadCtx {
                        thread_idx: unlinearize(u64::from(thread), spec.block),
                        block_idx,
                        block_dim: spec.block,
                        grid_dim: spec.grid,
                        shared_mem: shared.as_ptr(),
                        dynamic_shared_bytes: spec.dynamic_shared_bytes,
                        _reserved: 0,
                        barrier: block_barrier,
                        barrier_state: (barrier as *const BlockBarrier<'_>).cast(),
                    };
                    // SAFETY: `launch`'s caller promised the arguments are
                    // valid for what the kernel does; the context and argument
                    // array outlive the call, and the entry matches the
                    // declared signature.
                    unsafe { (spec.entry)(&ctx, spec.args.pointers.as_ptr()) };
                },
            );
            // SAFETY: every thread of the block has returned, and the lane's
            // next block starts after this.
            unsafe { shared.zero() };
            block += u64::from(self.resident);
        }
    }
}

thread_local! {
    /// The launch whose kernel this OS thread is running, for
    /// [`catch_kernel_panic`]. Null outside a lane.
    static CURRENT_RUN: Cell<*const LaunchRun> = const { Cell::new(core::ptr::null()) };
}

/// Runs the body of a Rust-defined host kernel, turning a panic into a
/// failure of the launch (reported as `KernelFailed` by the stream's next
/// synchronisation) instead of an abort at the `extern "C"` boundary.
///
/// C++ kernels cannot use this and must not throw. Outside a kernel launched
/// by this backend, a panic of `body` continues unwinding.
pub fn catch_kernel_panic(body: impl FnOnce()) {
    let Err(panic) = catch_unwind(AssertUnwindSafe(body)) else {
        return;
    };
    let run = CURRENT_RUN.get();
    if run.is_null() {
        resume_unwind(panic);
    }
    // SAFETY: CURRENT_RUN is set only while this OS thread runs a lane of
    // that launch, which is alive until every lane has finished.
    unsafe { &*run }.fail(panic_message(&*panic));
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "kernel panicked".to_owned())
}

/// `HostThreadCtx::barrier` of every kernel thread.
unsafe extern "C" fn block_barrier(ctx: *const HostThreadCtx) {
    // SAFETY: kernels pass the context they were called with; its
    // `barrier_state` is the barrier of the block `run_blocks` is running,
    // alive while the kernel runs.
    let barrier = unsafe { &*(*ctx).barrier_state.cast::<BlockBarrier<'_>>() };
    barrier.wait();
}

/// `index`-th element of a `dims`-shaped grid, x fastest.
fn unlinearize(index: u64, dims: Dim3) -> Dim3 {
    let (x, y) = (u64::from(dims.x), u64::from(dims.y));
    // Each coordinate is below its u32 dimension, so the casts are exact.
    Dim3::new(
        (index % x) as u32,
        (index / x % y) as u32,
        (index / (x * y)) as u32,
    )
}

/// Runs a launch to completion; returns the kernel's failure. Called by a
/// stream's worker thread, which runs lane 0 itself (a one-block launch
/// involves no other thread) and sleeps until the pool has run the others.
pub(crate) fn execute(spec: Arc<LaunchSpec>) -> Result<(), String> {
    let block_threads = u32::try_from(spec.block.count().unwrap_or(0)).unwrap_or(u32::MAX);
    let blocks = spec.grid.count().unwrap_or(0);
    let resident = u64::from(resident_blocks(block_threads)).min(blocks) as u32;
    let lanes = (0..resident)
        .map(|_| SharedMemory::take(spec.dynamic_shared_bytes))
        .collect();
    let run = Arc::new(LaunchRun {
        spec,
        resident,
        lanes,
        pool_lanes: Countdown::new(resident.saturating_sub(1) as usize),
        failed: AtomicBool::new(false),
        failure: Mutex::new(None),
    });
    let jobs = (1..resident)
        .map(|lane| {
            let run = Arc::clone(&run);
            Box::new(move || {
                run.run_lane(lane);
                run.pool_lanes.arrive();
            }) as pool::Job
        })
        .collect();
    if let Err(e) = pool::submit(jobs) {
        return Err(format!(
            "could not start {} threads for `{}`: {e}",
            resident - 1,
            run.spec.kernel
        ));
    }
    run.run_lane(0);
    // Every lane's kernel writes are visible after this (module `countdown`).
    run.pool_lanes.wait();
    let failure = run
        .failure
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    failure.map_or(Ok(()), Err)
}
