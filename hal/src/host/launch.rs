//! Kernel launches on the CPU device: the process-wide thread pool, the block
//! barrier and the trampoline that calls a kernel entry.
//!
//! # Execution model
//! A launch of `grid` blocks of `block` threads runs as `resident` *lanes*
//! (see [`resident_blocks`]); each lane is `block.count()` pool threads that
//! run blocks `lane, lane + resident, lane + 2 * resident, ...` one after the
//! other. All threads of a block run concurrently on their own OS threads,
//! because a block barrier (`__syncthreads`) needs every thread of the block
//! to reach it. Between two blocks of a lane, every thread of the lane meets
//! at the lane's barrier and the last to arrive zeroes the block's shared
//! memory, so each block starts from zeroed shared memory.
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
//! threads: the pool grows so every submitted thread starts at once.
//!
//! # Failures
//! Kernels are `extern "C"` and must not unwind (C++ kernels cannot throw
//! into Rust here; a Rust `extern "C"` function that panics aborts the
//! process). A Rust-defined kernel that wants a panic to become a launch
//! failure wraps its body in [`catch_kernel_panic`]. A failure stops the
//! launch like a GPU trap: barriers of every block release at once and become
//! no-ops, no further block starts, and the stream reports `KernelFailed` at
//! its next synchronisation.

use core::ffi::c_void;
use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::Thread;

use crate::host_abi::{HostKernelFn, HostThreadCtx, HOST_STATIC_SHARED_BYTES};
use crate::types::{Dim3, KernelArg};

/// Most pool threads one launch keeps busy at once; bounds [`resident_blocks`]
/// on machines with many cores and big blocks.
pub const MAX_RESIDENT_THREADS: u32 = 16 * 1024;

/// CPUs available to the process, read once: `available_parallelism` reads
/// the cgroup quota files and the affinity mask on every call, which cost
/// most of an empty launch (~55 us measured on a 2-core VM).
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
// one block, which order their accesses with the block barrier as on a GPU,
// and by `zero`, which runs while all of them wait in that barrier.
unsafe impl Sync for SharedMemory {}

/// Zeroed buffers of finished launches, for the next ones. A fresh buffer
/// costs a page fault per 4 KiB touched once the allocator has returned its
/// pages to the OS: measured, that was most of an empty launch (~57 us of
/// ~95 us on a 2-core VM).
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
    /// No thread may access it meanwhile (the caller holds the lane's barrier
    /// open: every other thread of the lane is waiting in it).
    unsafe fn zero(&self) {
        // SAFETY: exclusive access by the caller's contract; the range is ours.
        unsafe { self.as_ptr().write_bytes(0, self.chunks.len() * 16) };
    }
}

/// A reusable barrier for the threads of one lane. It can be broken: a failed
/// launch releases every waiter and turns later waits into no-ops, so the
/// surviving threads of a block finish instead of waiting for one that left.
struct BlockBarrier {
    threads: u32,
    /// Threads arrived in the current phase.
    arrived: AtomicU32,
    /// Completed phases; waiters leave when it changes.
    generation: AtomicU32,
    broken: AtomicBool,
    /// Whether waiters spin before sleeping: only when every thread of the
    /// launch can have a core, else spinning steals the core a late thread needs.
    spin: bool,
    lock: Mutex<()>,
    released: Condvar,
}

/// Spins before a barrier waiter sleeps on the condition variable.
const BARRIER_SPINS: u32 = 256;

impl BlockBarrier {
    fn new(threads: u32, spin: bool) -> Self {
        Self {
            threads,
            arrived: AtomicU32::new(0),
            generation: AtomicU32::new(0),
            broken: AtomicBool::new(false),
            spin,
            lock: Mutex::new(()),
            released: Condvar::new(),
        }
    }

    fn locked(&self) -> MutexGuard<'_, ()> {
        // The mutex guards no data (only the sleep/wake handshake), so a
        // poisoned lock is as good as a clean one.
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until all `threads` have arrived; the last to arrive runs
    /// `last` before releasing the others. Never panics.
    fn wait_then(&self, last: impl FnOnce()) {
        // Acquire pairs with `break_all`'s Release: a broken barrier is final.
        if self.broken.load(Ordering::Acquire) {
            return;
        }
        // The phase cannot advance before this thread arrives, so this is the
        // current phase; Relaxed suffices (this thread saw the last bump).
        let phase = self.generation.load(Ordering::Relaxed);
        // AcqRel: every arrival releases its thread's writes before the barrier
        // and the RMW chain lets the last arriver acquire all of them.
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            // Nobody arrives for the next phase before seeing the bump below,
            // which this store is ordered before.
            self.arrived.store(0, Ordering::Relaxed);
            last();
            {
                let _guard = self.locked();
                // Release: publishes all arrivals' writes (acquired above),
                // `last`'s effects and the reset to the waiters' Acquire loads.
                self.generation.fetch_add(1, Ordering::Release);
            }
            self.released.notify_all();
            return;
        }
        let released = || {
            self.generation.load(Ordering::Acquire) != phase || self.broken.load(Ordering::Acquire)
        };
        if self.spin {
            for _ in 0..BARRIER_SPINS {
                if released() {
                    return;
                }
                core::hint::spin_loop();
            }
        }
        // Checked under the lock the releaser bumps under: no lost wake-up.
        let mut guard = self.locked();
        while !released() {
            guard = self
                .released
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Releases every waiter now and makes later waits return at once.
    fn break_all(&self) {
        self.broken.store(true, Ordering::Release);
        let _guard = self.locked();
        self.released.notify_all();
    }
}

/// The threads of one lane share a barrier and a block's shared memory.
struct Lane {
    barrier: BlockBarrier,
    shared: SharedMemory,
}

/// A launch being executed: its lanes, the count of pool threads still
/// running it, and its first failure.
struct LaunchRun {
    spec: Arc<LaunchSpec>,
    resident: u32,
    lanes: Box<[Lane]>,
    /// Pool threads that have not finished; the last one wakes `waiter`.
    pending: AtomicUsize,
    waiter: Thread,
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
}

impl Drop for LaunchRun {
    /// Recycles the lanes' shared memory. Every block ended in the lane
    /// barrier that zeroes it, unless the launch failed (broken barriers run
    /// nothing): then it is zeroed here. Nothing else holds the run, so no
    /// thread touches the memory any more.
    fn drop(&mut self) {
        let failed = *self.failed.get_mut();
        for lane in core::mem::take(&mut self.lanes) {
            if failed {
                // SAFETY: the run is being dropped: no task of it is left.
                unsafe { lane.shared.zero() };
            }
            lane.shared.recycle();
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
        // Relaxed: the flag only stops new blocks early; the failure text is
        // read by the waiter after `pending` reaches 0 (Acquire), which orders it.
        self.failed.store(true, Ordering::Relaxed);
        for lane in self.lanes.iter() {
            lane.barrier.break_all();
        }
    }
}

thread_local! {
    /// The launch whose kernel this pool thread is running, for
    /// [`catch_kernel_panic`]. Null outside a kernel call.
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
    // SAFETY: CURRENT_RUN is set only while this thread executes a task of
    // that launch, and the task holds an `Arc` of it.
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
    // `barrier_state` is the thread's `Lane`, alive while the kernel runs.
    let lane = unsafe { &*(*ctx).barrier_state.cast::<Lane>() };
    lane.barrier.wait_then(|| ());
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

/// One pool thread's share of a launch: thread `thread` of lane `lane`.
struct Task {
    run: Arc<LaunchRun>,
    lane: u32,
    thread: u32,
}

impl Task {
    fn execute(self) {
        let run = &*self.run;
        CURRENT_RUN.set(run);
        // Catches panics of this Rust code only: a kernel entry is `extern "C"`
        // and cannot unwind into it.
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.run_blocks())) {
            run.fail(format!(
                "host backend thread panicked: {}",
                panic_message(&*panic)
            ));
        }
        CURRENT_RUN.set(core::ptr::null());
        // AcqRel: releases this thread's kernel writes; the waiter's Acquire
        // load of 0 then sees the writes of every thread of the launch.
        if run.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            run.waiter.unpark();
        }
    }

    fn run_blocks(&self) {
        let run = &*self.run;
        let spec = &*run.spec;
        let lane = &run.lanes[self.lane as usize];
        // Validated at launch: the counts fit (the grid fits u64, blocks u32).
        let blocks = spec.grid.count().unwrap_or(0);
        let mut block = u64::from(self.lane);
        let thread_idx = unlinearize(u64::from(self.thread), spec.block);
        while block < blocks && !run.failed.load(Ordering::Relaxed) {
            let ctx = HostThreadCtx {
                thread_idx,
                block_idx: unlinearize(block, spec.grid),
                block_dim: spec.block,
                grid_dim: spec.grid,
                shared_mem: lane.shared.as_ptr(),
                dynamic_shared_bytes: spec.dynamic_shared_bytes,
                _reserved: 0,
                barrier: block_barrier,
                barrier_state: (lane as *const Lane).cast(),
            };
            // SAFETY: `launch`'s caller promised the arguments are valid for
            // what the kernel does; the context and argument array outlive
            // the call, and the entry matches the declared signature.
            unsafe { (spec.entry)(&ctx, spec.args.pointers.as_ptr()) };
            // SAFETY: the last arriver zeroes while every other thread of the
            // lane waits in this barrier, so nobody touches the memory.
            lane.barrier.wait_then(|| unsafe { lane.shared.zero() });
            block += u64::from(run.resident);
        }
    }
}

/// The process-wide pool of block threads. Threads are kept between launches
/// so a launch costs a queue push and a wake-up, not thread creation.
struct Pool {
    state: Mutex<PoolState>,
    work: Condvar,
    /// Serialises submissions so the thread count computed by one is not
    /// consumed by another before its tasks are queued.
    submit: Mutex<()>,
}

struct PoolState {
    queue: VecDeque<Task>,
    /// Threads not running a task (idle, or just spawned).
    available: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(PoolState {
            queue: VecDeque::new(),
            available: 0,
        }),
        work: Condvar::new(),
        submit: Mutex::new(()),
    })
}

impl Pool {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        // Tasks are pushed and popped whole and the counter is updated in the
        // same critical sections, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `tasks` after making sure an available thread exists for each
    /// queued task, so all of them start at once.
    fn submit(&'static self, tasks: Vec<Task>) -> std::io::Result<()> {
        let _serial = self.submit.lock().unwrap_or_else(PoisonError::into_inner);
        let missing = {
            let state = self.state();
            (state.queue.len() + tasks.len()).saturating_sub(state.available)
        };
        for _ in 0..missing {
            std::thread::Builder::new()
                .name("tandem-host-block".into())
                .spawn(move || self.work_loop())?;
            self.state().available += 1;
        }
        let count = tasks.len();
        self.state().queue.extend(tasks);
        // One wake-up per task, not `notify_all`: the pool keeps every thread
        // it ever started, and waking all of them for each launch cost ~2 ms
        // (measured) once a 4 x 256 launch had grown it past 1000.
        for _ in 0..count {
            self.work.notify_one();
        }
        Ok(())
    }

    fn work_loop(&self) {
        let mut state = self.state();
        loop {
            if let Some(task) = state.queue.pop_front() {
                state.available -= 1;
                drop(state);
                task.execute();
                state = self.state();
                state.available += 1;
            } else {
                state = self
                    .work
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }
}

/// Runs a launch to completion on the pool; returns the kernel's failure.
/// Called by a stream's worker thread, which sleeps meanwhile.
pub(crate) fn execute(spec: Arc<LaunchSpec>) -> Result<(), String> {
    let block_threads = u32::try_from(spec.block.count().unwrap_or(0)).unwrap_or(u32::MAX);
    let blocks = spec.grid.count().unwrap_or(0);
    let resident = u64::from(resident_blocks(block_threads)).min(blocks) as u32;
    let spin = (block_threads as usize).saturating_mul(resident as usize) <= cpus();
    let lanes = (0..resident)
        .map(|_| Lane {
            barrier: BlockBarrier::new(block_threads, spin),
            shared: SharedMemory::take(spec.dynamic_shared_bytes),
        })
        .collect();
    let total = resident as usize * block_threads as usize;
    let run = Arc::new(LaunchRun {
        spec,
        resident,
        lanes,
        pending: AtomicUsize::new(total),
        waiter: std::thread::current(),
        failed: AtomicBool::new(false),
        failure: Mutex::new(None),
    });
    let tasks = (0..resident)
        .flat_map(|lane| (0..block_threads).map(move |thread| (lane, thread)))
        .map(|(lane, thread)| Task {
            run: Arc::clone(&run),
            lane,
            thread,
        })
        .collect();
    if let Err(e) = pool().submit(tasks) {
        return Err(format!(
            "could not start {total} threads for `{}`: {e}",
            run.spec.kernel
        ));
    }
    // Acquire pairs with the tasks' AcqRel decrements (see `Task::execute`).
    while run.pending.load(Ordering::Acquire) != 0 {
        std::thread::park();
    }
    let failure = run
        .failure
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    failure.map_or(Ok(()), Err)
}
