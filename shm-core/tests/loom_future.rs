//! Loom models of FutureShm's completion protocol.
//!
//! Loom cannot see the copy space's raw bytes, so the completer also writes a
//! loom `UnsafeCell` standing for them before completing, and a waiter that
//! saw COMPLETE reads it. Loom tracks the happens-before relation of every
//! cell access, so unless completion is a `Release` and the waiter's check an
//! `Acquire`, it reports a causality violation (a data race) on that cell.
//! The cell is used rather than a `Relaxed` atomic because loom does not
//! explore stale values of a `Relaxed` atomic reliably once the completing
//! thread has loaded the flags (which `attach` and `complete` do); the cell's
//! check does not depend on which value a load returns.
//!
//! Waits are bounded (the `expired` closure counts polls) so every model
//! terminates; a timeout is an allowed outcome, a wrong value never is.
#![cfg(loom)]

use std::alloc::{alloc_zeroed, dealloc, Layout};

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use tandem_shm_core::{FutureShm, WaitOutcome};

/// Heap memory aligned for a future header, freed on drop.
struct Region {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the region is plain memory; the futures placed in it synchronise
// their own accesses.
unsafe impl Send for Region {}
// SAFETY: as for `Send`.
unsafe impl Sync for Region {}

impl Region {
    fn for_future(copy_space: u32) -> Self {
        let layout = Layout::from_size_align(FutureShm::required_bytes(copy_space), 64).unwrap();
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Region { ptr, layout }
    }

    /// A fresh future in this region.
    fn init(&self, copy_space: u32) -> FutureShm<'static> {
        // SAFETY: the region is live for as long as every handle on it (the
        // models keep an `Arc` in each thread); nobody uses it yet.
        unsafe { FutureShm::init_in(self.ptr, self.layout.size(), copy_space) }.unwrap()
    }

    /// Another view of the future, as a peer would attach.
    fn attach(&self) -> FutureShm<'static> {
        // SAFETY: as in `init`; initialisation happened before the spawn that
        // hands the region to the attaching thread.
        unsafe { FutureShm::attach(self.ptr, self.layout.size()) }.unwrap()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `for_future` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

/// An `expired` closure that gives up after `polls` polls.
fn after_polls(polls: u32) -> impl FnMut() -> bool {
    let mut left = polls;
    move || {
        left = left.saturating_sub(1);
        left == 0
    }
}

const PAYLOAD: u64 = 0xDEAD_BEEF;

/// Stands for the copy-space bytes, whose accesses loom cannot see.
struct Payload(UnsafeCell<u64>);

// SAFETY: accesses are ordered by the future's protocol, which is exactly
// what loom checks on the cell.
unsafe impl Sync for Payload {}

#[test]
fn waiter_sees_what_the_completer_wrote() {
    loom::model(|| {
        let region = Arc::new(Region::for_future(8));
        let waiter = region.init(8);
        let payload = Arc::new(Payload(UnsafeCell::new(0)));
        let stop = AtomicU32::new(0);

        let completer = {
            let region = Arc::clone(&region);
            let payload = Arc::clone(&payload);
            thread::spawn(move || {
                let future = region.attach();
                let write_output = |buf: &mut [u8]| {
                    // SAFETY: loom checks this write against every read.
                    payload.0.with_mut(|p| unsafe { *p = PAYLOAD });
                    buf[..4].copy_from_slice(&[1, 2, 3, 4]);
                    Ok::<_, ()>(4)
                };
                // SAFETY: this thread is the only completer.
                unsafe { future.complete(5, write_output) }.unwrap();
            })
        };

        match waiter.wait(&stop, after_polls(3)) {
            WaitOutcome::Completed { return_code } => {
                assert_eq!(return_code, 5);
                // SAFETY: loom checks this read against the write.
                assert_eq!(payload.0.with(|p| unsafe { *p }), PAYLOAD);
                assert_eq!(waiter.output(), Ok(&[1u8, 2, 3, 4][..]));
            }
            WaitOutcome::TimedOut => {}
            WaitOutcome::Stopped => panic!("nobody raised stop"),
        }
        completer.join().unwrap();
        assert_eq!(
            waiter.wait(&stop, after_polls(1)),
            WaitOutcome::Completed { return_code: 5 }
        );
    });
}

/// A thread that completes `region`'s future with `return_code` and no output, then runs
/// `then`; it is the future's only completer.
fn completing(
    region: &Arc<Region>,
    return_code: i32,
    then: impl FnOnce() + Send + 'static,
) -> thread::JoinHandle<()> {
    let region = Arc::clone(region);
    thread::spawn(move || {
        let future = region.attach();
        // SAFETY: the caller starts no other completer.
        unsafe { future.complete(return_code, |_| Ok::<_, ()>(0)) }.unwrap();
        then();
    })
}

#[test]
fn stop_raised_after_completion_reports_completion() {
    loom::model(|| {
        let region = Arc::new(Region::for_future(0));
        let waiter = region.init(0);
        let stop = Arc::new(AtomicU32::new(0));

        let completer = {
            let stop = Arc::clone(&stop);
            // Release: whoever sees the stop also sees the completion.
            completing(&region, 7, move || stop.store(1, Ordering::Release))
        };

        // Seeing the stop means the completion happened before it, so the
        // wait must report the completion, never `Stopped`.
        match waiter.wait(&stop, after_polls(3)) {
            WaitOutcome::Completed { return_code } => assert_eq!(return_code, 7),
            WaitOutcome::TimedOut => {}
            WaitOutcome::Stopped => panic!("completion lost to a later stop"),
        }
        completer.join().unwrap();
    });
}

#[test]
fn racing_stop_and_completion_agree_with_what_was_seen() {
    loom::model(|| {
        let region = Arc::new(Region::for_future(0));
        let waiter = region.init(0);
        let stop = Arc::new(AtomicU32::new(0));

        let completer = completing(&region, 9, || {});
        let stopper = {
            let stop = Arc::clone(&stop);
            thread::spawn(move || stop.store(1, Ordering::Release))
        };

        let outcome = waiter.wait(&stop, after_polls(2));
        if let WaitOutcome::Completed { return_code } = outcome {
            assert_eq!(return_code, 9);
        }
        completer.join().unwrap();
        stopper.join().unwrap();
        // Whatever the wait saw, the completion is not lost.
        assert_eq!(waiter.return_code(), Ok(9));
    });
}
