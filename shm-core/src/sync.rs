//! The one place shm-core takes its atomics from.
//!
//! Under `--cfg loom` the loom model checker's atomics replace the core ones so
//! that the concurrency tests explore every interleaving. Loom's atomics are
//! not layout-compatible with the real ones, so layout assertions are compiled
//! only without `loom`, and in-place initialisation always writes each atomic
//! with `Atomic*::new` (never by zeroing memory) so that both builds work.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64, Ordering};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Spin-loop hint; under loom a yield so the model can schedule other threads.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Gives up the processor for a moment where there is a scheduler to give it
/// to (a wait for another thread that may be descheduled); a spin-loop hint
/// without `std`, a yield under loom.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(all(feature = "std", not(loom)))]
    std::thread::yield_now();
    #[cfg(all(not(feature = "std"), not(loom)))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}
