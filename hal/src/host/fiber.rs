//! A block's threads as fibers: stackful coroutines that one OS thread runs
//! in turns, switching only where a GPU thread could wait for another: at the
//! block barrier and in wait loops (`tandem_host_yield`, which the C++
//! portability header's `spin_pause`, `sleep_for` and `Backoff::idle` call).
//!
//! One core thus runs a whole block, a launch costs no thread per kernel
//! thread, and a block barrier is a counter: every thread of the block runs
//! on the same OS thread, so program order already makes everything a thread
//! wrote before the barrier visible to the others after it (a fiber switch is
//! an opaque call, which the compiler cannot move memory accesses across).
//!
//! Fibers never move between OS threads, so a thread-local of the OS thread
//! is shared by the block's fibers: state kept per GPU thread in one (the C++
//! `thread_state`, [`YIELDER`]) is saved and restored around every switch.

use core::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

/// Stack of each kernel thread. Address space only until touched (a guard
/// page below catches an overflow); GPU threads get 1 KiB by default, so this
/// leaves room for the host compiler's larger frames and for a Rust panic's
/// unwinding in [`super::catch_kernel_panic`].
pub const FIBER_STACK_BYTES: usize = 256 * 1024;

/// Stacks an OS thread keeps for its next fibers: a whole block's.
const CACHED_STACKS: usize = 1024;

/// Why a fiber gave its OS thread back.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pause {
    /// A wait loop's turn: resume it after the others had theirs.
    Spin,
    /// Waiting in the block barrier.
    Barrier,
}

type Fiber = Coroutine<(), Pause, (), DefaultStack>;

thread_local! {
    /// The yielder of the fiber this OS thread is running; null between
    /// fibers and on threads that run none.
    static YIELDER: Cell<*const Yielder<(), Pause>> = const { Cell::new(core::ptr::null()) };
    /// Stacks of finished fibers, reused by this OS thread's next ones: a new
    /// stack costs an mmap and an mprotect.
    static STACKS: RefCell<Vec<DefaultStack>> = const { RefCell::new(Vec::new()) };
}

/// Gives the OS thread to the block's other fibers until they had their
/// turn, or, outside a fiber, yields the OS thread.
fn pause(why: Pause) {
    let yielder = YIELDER.get();
    if yielder.is_null() {
        std::thread::yield_now();
        return;
    }
    // SAFETY: YIELDER is non-null only while this OS thread runs the fiber
    // that set it (`run_block` clears it whenever a fiber gives the thread
    // back), and a yielder lives on its fiber's stack for the fiber's life.
    // `run_block` resumes every fiber until it ends, so `suspend` returns
    // rather than unwinding (a forced unwind happens only on drop).
    unsafe { &*yielder }.suspend(why);
    // The fibers that ran meanwhile set their own.
    YIELDER.set(yielder);
}

/// A kernel thread's turn in a wait loop (`tandem::spin_pause()`,
/// `sleep_for` and `Backoff::idle` in tandem/atomic.h): the CPU device runs
/// a block's threads as fibers of one OS thread, and this lets the block's
/// other threads run before the caller polls again (once they all wait, the
/// OS thread is yielded). Outside a kernel it yields the OS thread. A Rust
/// kernel's wait loop calls it too: one that spins without it never lets the
/// thread it waits for run. Never unwinds.
#[no_mangle]
pub extern "C" fn tandem_host_yield() {
    pause(Pause::Spin);
}

/// The barrier of the block a lane is running. Its fibers share one OS
/// thread, so plain cells suffice and no ordering is needed (module docs).
pub(crate) struct BlockBarrier<'a> {
    threads: u32,
    /// Threads waiting in the current phase.
    arrived: Cell<u32>,
    /// Completed phases; waiters leave when it changes.
    generation: Cell<u32>,
    /// The launch failed: waits return at once (the GPU trap semantics of
    /// `super::launch`).
    broken: &'a AtomicBool,
}

impl BlockBarrier<'_> {
    fn is_broken(&self) -> bool {
        // Relaxed: the flag only releases waiters; a broken barrier orders nothing.
        self.broken.load(Ordering::Relaxed)
    }

    /// Returns once all `threads` have called it (or the launch failed).
    pub(crate) fn wait(&self) {
        if self.is_broken() {
            return;
        }
        let arrived = self.arrived.get() + 1;
        if arrived == self.threads {
            self.arrived.set(0);
            self.generation.set(self.generation.get().wrapping_add(1));
            return;
        }
        self.arrived.set(arrived);
        let phase = self.generation.get();
        while self.generation.get() == phase && !self.is_broken() {
            pause(Pause::Barrier);
        }
    }
}

/// A fiber running `thread(index, barrier)`, on a cached stack if there is one.
///
/// # Safety
/// The fiber borrows `thread` and `barrier`: the caller resumes it until it
/// ends before either goes away.
unsafe fn spawn<'a, F>(
    index: u32,
    thread: &'a F,
    barrier: &'a BlockBarrier<'a>,
) -> std::io::Result<Fiber>
where
    F: Fn(u32, &BlockBarrier<'_>),
{
    let stack = match STACKS.with_borrow_mut(Vec::pop) {
        Some(stack) => stack,
        None => DefaultStack::new(FIBER_STACK_BYTES)?,
    };
    let body = move |yielder: &Yielder<(), Pause>, ()| {
        YIELDER.set(yielder);
        thread(index, barrier);
    };
    // SAFETY: the borrows outlive the fiber by the caller's contract.
    Ok(unsafe { Coroutine::with_stack_unchecked(stack, body) })
}

/// Runs `thread(i, barrier)` for every `i < threads` as fibers of the calling
/// OS thread, to the end of every one. `barrier` is the block's; `broken`
/// breaks it. When the block cannot go on (every live thread waits in the
/// barrier for threads that have returned, or no stack can be had), `fail`
/// is called with why, and must raise `broken`.
///
/// `thread` must not unwind (kernel entries cannot), and must not call
/// [`BlockBarrier::wait`] on another barrier than the one it is given.
pub(crate) fn run_block(
    threads: u32,
    broken: &AtomicBool,
    fail: impl Fn(String),
    thread: impl Fn(u32, &BlockBarrier<'_>),
) {
    let barrier = BlockBarrier {
        threads,
        arrived: Cell::new(0),
        generation: Cell::new(0),
        broken,
    };
    // Live fibers that gave the thread back, in turn order.
    let mut waiting: VecDeque<Fiber> = VecDeque::new();
    let mut next = 0;
    // Turns left in the current round over `waiting`, and whether one of the
    // round's fibers was in a wait loop. If so, the block is waiting for
    // another agent (a host thread, another block), which may need this
    // core: the OS thread is given away once per round, not once per waiting
    // fiber (a yield is a system call; a fiber switch is a few nanoseconds).
    let (mut round_left, mut spun) = (0usize, false);
    loop {
        let started = next < threads;
        let mut fiber = if started {
            // SAFETY: every fiber is resumed below until it ends, before
            // `thread` and `barrier` go out of scope.
            match unsafe { spawn(next, &thread, &barrier) } {
                Ok(fiber) => fiber,
                Err(e) => {
                    fail(format!(
                        "no {FIBER_STACK_BYTES}-byte stack for kernel thread {next}: {e}"
                    ));
                    // The started threads still run to their end.
                    next = threads;
                    continue;
                }
            }
        } else if let Some(fiber) = waiting.pop_front() {
            fiber
        } else {
            return;
        };
        next += u32::from(started);
        let outcome = fiber.resume(());
        YIELDER.set(core::ptr::null());
        match outcome {
            CoroutineResult::Yield(why) => {
                spun |= why == Pause::Spin;
                waiting.push_back(fiber);
            }
            CoroutineResult::Return(()) => STACKS.with_borrow_mut(|stacks| {
                if stacks.len() < CACHED_STACKS {
                    stacks.push(fiber.into_stack());
                }
            }),
        }
        // Everybody started and every live thread waits in the barrier: the
        // missing ones have returned, so none will ever arrive. (On a GPU
        // this is undefined; here it fails the launch instead of hanging.)
        let stuck = next == threads
            && barrier.arrived.get() != 0
            && barrier.arrived.get() as usize == waiting.len()
            && !barrier.is_broken();
        if stuck {
            fail(format!(
                "{} of {threads} threads wait in a block barrier that the others returned without reaching",
                waiting.len()
            ));
        }
        if !started {
            round_left = round_left.saturating_sub(1);
            if round_left == 0 {
                if spun {
                    std::thread::yield_now();
                }
                (round_left, spun) = (waiting.len(), false);
            }
        }
    }
}
