//! The finish line of a launch's lanes: the stream worker runs lane 0 itself,
//! then waits for the lanes the pool runs, and must see everything their
//! kernels wrote once it stops waiting (the stream's next command, or the
//! synchronising thread, reads those writes).
//!
//! A counter and a park/unpark pair, no lock: the last lane to arrive wakes
//! the waiter. Under `--cfg loom` the model checker's atomics and threads
//! replace std's, and `loom_models` below explores every interleaving of it.

#[cfg(not(loom))]
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::thread::{current, park, Thread};

#[cfg(loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(loom)]
use loom::thread::{current, park, Thread};

/// `count` lanes to wait for, and the thread that waits.
pub(crate) struct Countdown {
    pending: AtomicUsize,
    waiter: Thread,
}

impl Countdown {
    /// A countdown of `count` arrivals, waited for by the calling thread.
    pub(crate) fn new(count: usize) -> Self {
        Self {
            pending: AtomicUsize::new(count),
            waiter: current(),
        }
    }

    /// One lane has finished. AcqRel: releases this lane's writes, and the
    /// RMW chain carries every earlier arrival's to the last one's unpark.
    pub(crate) fn arrive(&self) {
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.waiter.unpark();
        }
    }

    /// Returns once every lane has arrived, with all their writes visible.
    /// Only the thread that made the countdown may call it.
    pub(crate) fn wait(&self) {
        // Acquire pairs with the arrivals' AcqRel (the last one's load of 1
        // heads a release sequence holding all of them). An unpark that comes
        // before the park makes it return at once, so no wake-up is lost; a
        // spurious return re-checks.
        while self.pending.load(Ordering::Acquire) != 0 {
            park();
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    use super::Countdown;

    /// Two lanes write their "kernel output" (a loom cell, whose accesses
    /// loom checks for happens-before) and arrive; the waiter reads both
    /// after `wait`. A lost wake-up would deadlock the model, a missing
    /// Release/Acquire pair would be reported as a causality violation.
    #[test]
    fn the_waiter_sees_every_lane_and_is_always_woken() {
        loom::model(|| {
            let countdown = Arc::new(Countdown::new(2));
            let outputs = Arc::new([UnsafeCell::new(0u32), UnsafeCell::new(0u32)]);
            let lanes: Vec<_> = (0..2)
                .map(|lane| {
                    let (countdown, outputs) = (Arc::clone(&countdown), Arc::clone(&outputs));
                    loom::thread::spawn(move || {
                        // SAFETY: each lane writes only its own cell, and the
                        // waiter reads it only after `wait`.
                        outputs[lane].with_mut(|cell| unsafe { *cell = lane as u32 + 1 });
                        countdown.arrive();
                    })
                })
                .collect();
            countdown.wait();
            for (lane, output) in outputs.iter().enumerate() {
                // SAFETY: every lane arrived; `wait` ordered their writes first.
                let value = output.with(|cell| unsafe { *cell });
                assert_eq!(value, lane as u32 + 1);
            }
            for lane in lanes {
                lane.join().unwrap();
            }
        });
    }
}
