//! The process-wide pool of lane threads. Threads are kept between launches,
//! so a launch costs a queue push and a wake-up per lane, not thread creation.
//!
//! The pool grows so that every submitted job starts at once: the lanes of a
//! launch may wait on each other (a persistent kernel's resident blocks), and
//! launches on different streams never wait for each other's threads.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use tandem_process::MadeIn;

/// One lane of a launch, run by a pool thread. Must not unwind.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    /// A forked child has none of the pool's threads: it makes its own pool.
    made_in: MadeIn,
    state: Mutex<PoolState>,
    work: Condvar,
    /// Serialises submissions so the thread count computed by one is not
    /// consumed by another before its jobs are queued.
    submit: Mutex<()>,
}

struct PoolState {
    queue: VecDeque<Job>,
    /// Threads not running a job (idle, or just spawned).
    available: usize,
}

/// This process's pool, made on first use, and made anew in a child forked
/// from the process that made it (the inherited one, whose threads did not
/// come along, is left as it is: its jobs and threads are the parent's).
fn pool() -> &'static Pool {
    static POOL: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());
    let current = POOL.load(Ordering::Acquire);
    // SAFETY: non-null only as a leaked `Box`, never freed.
    if let Some(pool) = unsafe { current.as_ref() } {
        if pool.made_in.is_this_process() {
            return pool;
        }
    }
    let fresh: &'static Pool = Box::leak(Box::new(Pool {
        made_in: MadeIn::this_process(),
        state: Mutex::new(PoolState {
            queue: VecDeque::new(),
            available: 0,
        }),
        work: Condvar::new(),
        submit: Mutex::new(()),
    }));
    let fresh_ptr = std::ptr::from_ref(fresh).cast_mut();
    match POOL.compare_exchange(current, fresh_ptr, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => fresh,
        Err(won) => {
            // SAFETY: `fresh` was leaked above and never shared.
            drop(unsafe { Box::from_raw(fresh_ptr) });
            // SAFETY: another thread's pool, a leaked `Box`, never freed.
            unsafe { &*won }
        }
    }
}

/// Queues `jobs` after making sure an available thread exists for each
/// queued job, so all of them start at once.
pub(crate) fn submit(jobs: Vec<Job>) -> std::io::Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    let pool = pool();
    let _serial = pool.submit.lock().unwrap_or_else(PoisonError::into_inner);
    let missing = {
        let state = pool.state();
        (state.queue.len() + jobs.len()).saturating_sub(state.available)
    };
    for _ in 0..missing {
        std::thread::Builder::new()
            .name("tandem-host-lane".into())
            .spawn(move || pool.work_loop())?;
        pool.state().available += 1;
    }
    let count = jobs.len();
    pool.state().queue.extend(jobs);
    // One wake-up per job, not `notify_all`: the pool keeps every thread it
    // ever started, and waking all of them for each launch cost more than
    // the launch once it had grown past 1000
    // (docs/perf/2026-11-24-dev-vm-2core.md).
    for _ in 0..count {
        pool.work.notify_one();
    }
    Ok(())
}

impl Pool {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        // Jobs are pushed and popped whole and the counter is updated in the
        // same critical sections, so a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn work_loop(&self) {
        let mut state = self.state();
        loop {
            if let Some(job) = state.queue.pop_front() {
                state.available -= 1;
                drop(state);
                job();
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
