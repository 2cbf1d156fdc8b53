//! Waiting for a condition another thread or process makes true, without a
//! futex: shared-memory counters of interprocess events have no waker.

use std::time::Duration;

/// Busy-spins before the first yield: covers work that finishes within a
/// few hundred nanoseconds without a system call.
const SPINS: u32 = 64;
/// `yield_now` rounds before sleeping: cheap when other threads are runnable.
const YIELDS: u32 = 16;
/// First and longest sleep of the polling phase. The cap bounds the latency
/// a waiter adds once the condition holds (at most 200 µs late) while a long
/// wait costs a few thousand wake-ups per second, not a core.
const FIRST_SLEEP: Duration = Duration::from_micros(10);
const MAX_SLEEP: Duration = Duration::from_micros(200);

/// Returns once `done()` is true: spins briefly, then yields, then
/// sleep-polls with doubling sleeps up to [`MAX_SLEEP`].
pub(crate) fn wait_until(mut done: impl FnMut() -> bool) {
    for _ in 0..SPINS {
        if done() {
            return;
        }
        core::hint::spin_loop();
    }
    for _ in 0..YIELDS {
        if done() {
            return;
        }
        std::thread::yield_now();
    }
    let mut sleep = FIRST_SLEEP;
    while !done() {
        std::thread::sleep(sleep);
        sleep = (sleep * 2).min(MAX_SLEEP);
    }
}
