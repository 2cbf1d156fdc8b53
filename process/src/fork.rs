//! Handles made in one process and inherited by a forked child.
//!
//! `fork` copies a process's memory, so a child holds every handle its parent
//! made: connections whose sockets the parent still reads, leases and client
//! slots booked to the parent, a service child only its parent may stop. A
//! child that used them would interleave its frames with the parent's and give
//! back what the parent still holds. Each such handle records the process it
//! was made in and asks, before acting for it, whether this is that process.
//!
//! The question is asked on hot paths (a task's submit), so it is not a
//! `getpid` call: a `pthread_atfork` handler counts, in each child, the forks
//! its memory came through, and a handle compares that count with the one it
//! was made under, one load. A child made by a raw `clone` system call runs
//! no fork handlers; `fork` (Python's `os.fork`, `multiprocessing`) does.
//!
//! A child has only the thread that forked: a lock another thread held at
//! that moment stays held in the child for ever. Locks a child may take over
//! from its parent's handles are taken inside a [`ForkGuard`], which a fork
//! waits for: no such lock is held when the memory is copied.

use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, PoisonError};

/// How many forks this process's memory came through since the handler was
/// registered. Only the child's handler writes it, while the child has one
/// thread; threads it starts later see the write (thread creation orders
/// them after it), so Relaxed is enough.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// The fork gate: the number of [`ForkGuard`]s held, and [`FORKING`] while
/// a fork waits for them to go and copies the memory.
static GATE: AtomicU64 = AtomicU64::new(0);
const FORKING: u64 = 1 << 63;

thread_local! {
    /// Guards this thread holds: an inner one does not wait for a fork
    /// (the fork waits for the outer one, which would never go).
    static HELD: Cell<u32> = const { Cell::new(0) };
}

extern "C" fn before_fork() {
    // Acquire: the guards' releases happen before the copy.
    GATE.fetch_or(FORKING, Ordering::Acquire);
    while GATE.load(Ordering::Acquire) & !FORKING != 0 {
        std::thread::yield_now();
    }
}

extern "C" fn after_fork_in_parent() {
    GATE.fetch_and(!FORKING, Ordering::Release);
}

extern "C" fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
    // The child's only thread holds no guard (the fork waited for them all).
    GATE.store(0, Ordering::Release);
}

fn register_fork_handlers() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: the handlers touch atomics only (async-signal-safe, as a
        // child handler must be) and yield while guards are held.
        let failed = unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            )
        };
        // Only ENOMEM is possible: a process that cannot register one
        // handler cannot keep the promises of this module.
        assert_eq!(failed, 0, "pthread_atfork: out of memory");
    });
}

/// Held around a short critical section over state a forked child may take
/// over (a lock of a handle's): a fork waits until no guard is held, and a
/// guard waits while a fork is under way. Never hold one across blocking
/// I/O or a wait for another thread: a fork of any thread waits for it.
#[must_use = "the section it guards ends when it is dropped"]
pub struct ForkGuard {
    /// `!Send`: released on the thread that took it ([`HELD`]).
    _thread: std::marker::PhantomData<*const ()>,
}

impl ForkGuard {
    /// Enters a critical section, waiting while a fork copies the memory.
    pub fn enter() -> Self {
        register_fork_handlers();
        let nested = HELD.with(|held| {
            held.set(held.get() + 1);
            held.get() > 1
        });
        if nested {
            GATE.fetch_add(1, Ordering::Acquire);
        } else {
            let mut seen = GATE.load(Ordering::Relaxed);
            loop {
                if seen & FORKING != 0 {
                    std::thread::yield_now();
                    seen = GATE.load(Ordering::Relaxed);
                    continue;
                }
                // Acquire: what the section reads follows the fork's end.
                match GATE.compare_exchange_weak(
                    seen,
                    seen + 1,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => seen = now,
                }
            }
        }
        Self {
            _thread: std::marker::PhantomData,
        }
    }
}

impl Drop for ForkGuard {
    fn drop(&mut self) {
        HELD.with(|held| held.set(held.get() - 1));
        // Release: the section's writes happen before a fork's copy.
        GATE.fetch_sub(1, Ordering::Release);
    }
}

/// A mutex's guard taken inside a [`ForkGuard`] ([`lock_across_forks`]).
pub struct ForkSafeGuard<'a, T> {
    // Declared first, so dropped first: the lock is free before the fork
    // gate opens.
    lock: MutexGuard<'a, T>,
    _gate: ForkGuard,
}

/// Locks `mutex` inside a [`ForkGuard`], so that a fork never copies it
/// held; a poisoned mutex is taken as it is (its holders keep it consistent
/// at every step, as this crate's users do). Hold it briefly: a fork of
/// any thread waits for it.
pub fn lock_across_forks<T>(mutex: &Mutex<T>) -> ForkSafeGuard<'_, T> {
    let gate = ForkGuard::enter();
    ForkSafeGuard {
        lock: mutex.lock().unwrap_or_else(PoisonError::into_inner),
        _gate: gate,
    }
}

impl<T> Deref for ForkSafeGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.lock
    }
}

impl<T> DerefMut for ForkSafeGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.lock
    }
}

/// The process a handle was made in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadeIn {
    forks: u64,
    pid: u32,
}

impl MadeIn {
    /// The calling process.
    pub fn this_process() -> Self {
        register_fork_handlers();
        Self {
            forks: FORKS.load(Ordering::Relaxed),
            pid: std::process::id(),
        }
    }

    /// Whether the caller is that process, rather than a child forked from
    /// it. One atomic load.
    pub fn is_this_process(&self) -> bool {
        FORKS.load(Ordering::Relaxed) == self.forks
    }

    /// The id of the process it was made in (for messages).
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forks, runs `child` in the child, and returns what it returned.
    fn in_forked_child(child: impl FnOnce() -> bool) -> bool {
        register_fork_handlers();
        // SAFETY: the child runs `child`, which takes no lock a fork can
        // leave held (only guarded ones), and _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = if child() { 0 } else { 1 };
            // SAFETY: ends the child without running the parent's atexit
            // handlers or destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }

    #[test]
    fn a_forked_child_is_not_the_process_a_handle_was_made_in() {
        let made = MadeIn::this_process();
        assert!(made.is_this_process());
        assert!(in_forked_child(|| !made.is_this_process()));
        assert!(made.is_this_process(), "the parent is still its process");
    }

    #[test]
    fn a_fork_waits_for_the_guards_held_and_the_child_holds_none() {
        let held = std::sync::Arc::new(std::sync::Mutex::new(0u32));
        let (entered, release) = (
            std::sync::Arc::new(std::sync::Barrier::new(2)),
            std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
        let holder = {
            let (held, entered, release) = (held.clone(), entered.clone(), release.clone());
            std::thread::spawn(move || {
                let _guard = ForkGuard::enter();
                let mut value = held.lock().unwrap();
                entered.wait();
                while !release.load(Ordering::Relaxed) {
                    std::thread::yield_now();
                }
                *value += 1;
            })
        };
        entered.wait();
        let releaser = {
            let release = release.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                release.store(true, Ordering::Relaxed);
            })
        };
        // The fork waits for the holder's section to end, so the child can
        // take the lock it held and sees its write.
        let held_in_child = held.clone();
        assert!(in_forked_child(move || {
            let _guard = ForkGuard::enter();
            held_in_child.try_lock().is_ok_and(|value| *value == 1)
        }));
        holder.join().unwrap();
        releaser.join().unwrap();
        let _outer = ForkGuard::enter();
        let _inner = ForkGuard::enter();
    }

    #[test]
    fn a_handle_made_in_the_child_is_the_childs() {
        assert!(in_forked_child(|| {
            let made = MadeIn::this_process();
            made.is_this_process() && made.pid() != 0
        }));
    }
}
