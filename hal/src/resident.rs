//! Kernels that stay resident until the host ends them (a persistent
//! service), and the releases that must wait for them.
//!
//! CUDA's and HIP's frees of device and pinned memory, unregistrations of
//! host memory and module unloads wait for the whole device to go idle:
//! with a resident kernel running, that is until the host tells it to end,
//! and a thread that frees a buffer before it does so never gets there.
//! [`ResidentKernels`] is one device's account of them: a backend routes
//! every release through [`ResidentKernels::release`], which runs it at once
//! when no resident kernel runs and otherwise keeps it until the last
//! [`ResidentKernel`] guard drops, once the kernels have ended. Memory so
//! kept stays allocated until then: nothing a released resource held is
//! reused while a kernel could still reach it.
//!
//! Under `--cfg loom` the model checker's lock and `Arc` replace std's, and
//! `loom_models` below explores the interleavings of releases and guards.

use std::sync::PoisonError;
#[cfg(not(loom))]
use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(loom)]
use loom::sync::{Arc, Mutex, MutexGuard};

use crate::error::ErrorKind;

/// A release kept for later: a backend's driver call on a handle it owns.
type Release = Box<dyn FnOnce() + Send>;

/// One device's resident kernels and the releases waiting for them.
pub struct ResidentKernels {
    state: Mutex<State>,
}

impl Default for ResidentKernels {
    fn default() -> Self {
        Self {
            state: Mutex::new(State::default()),
        }
    }
}

#[derive(Default)]
struct State {
    /// Live [`ResidentKernel`] guards.
    running: usize,
    /// Releases asked for while `running` was nonzero, in order.
    kept: Vec<Release>,
}

impl ResidentKernels {
    /// An account with no resident kernel.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A release that panicked left the state whole: counts and the list
        // are changed by single statements.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `release` now if no resident kernel runs, else once the last one
    /// has ended. Runs under the account's lock, so a resident kernel
    /// counted after this call started ([`ResidentKernels::hold`]) is
    /// launched only once a release that went ahead is done: it never waits
    /// for that kernel.
    pub fn release(&self, release: impl FnOnce() + Send + 'static) {
        let mut state = self.state();
        if state.running == 0 {
            release();
        } else {
            state.kept.push(Box::new(release));
        }
    }

    /// Counts one resident kernel on `account` until the returned guard
    /// drops: take it before the launch, and drop it once the kernel has
    /// ended (the releases kept meanwhile run then). An associated function,
    /// as loom's `Arc` (under `--cfg loom`) cannot be a receiver.
    pub fn hold(account: &Arc<Self>) -> ResidentKernel {
        account.state().running += 1;
        ResidentKernel {
            account: Some(Arc::clone(account)),
        }
    }

    /// Releases kept for the resident kernels, not yet run.
    pub fn kept(&self) -> usize {
        self.state().kept.len()
    }

    /// What a backend answers when the driver refuses to register `len`
    /// bytes at `ptr` as already registered while releases are kept: the
    /// range's last registration, dropped while a resident kernel ran, is
    /// unregistered only once the kernel has ended (reusing it could hand
    /// kernels the pages of a mapping since replaced). `None` when nothing is
    /// kept, so the driver's own error stands.
    pub fn still_registered(&self, ptr: *const u8, len: usize) -> Option<ErrorKind> {
        (self.kept() > 0).then(|| {
            ErrorKind::InvalidArgument(format!(
                "{len} bytes at {ptr:p} overlap a host registration dropped while a resident \
                 kernel runs on the device: it is unregistered once that kernel has ended"
            ))
        })
    }

    /// Runs every kept release, whatever still runs: for a backend's device
    /// context as it goes, when no handle of it is left to launch with.
    pub fn run_kept(&self) {
        let kept = std::mem::take(&mut self.state().kept);
        kept.into_iter().for_each(|release| release());
    }

    fn end_one(&self) {
        let mut state = self.state();
        state.running -= 1;
        if state.running == 0 {
            // Under the lock, as in `release`: a kernel counted next waits
            // for these to finish before its launch.
            std::mem::take(&mut state.kept)
                .into_iter()
                .for_each(|release| release());
        }
    }
}

/// A resident kernel counted on its device ([`crate::GpuDevice::resident_kernel`]):
/// while it lives, the device's releases that would wait for the kernel are
/// kept; dropping it (once the kernel has ended) runs them if it was the last.
#[must_use = "the kernel counts as resident only while the guard lives"]
pub struct ResidentKernel {
    /// None for a backend whose releases never wait for running kernels
    /// (the CPU device).
    account: Option<Arc<ResidentKernels>>,
}

impl ResidentKernel {
    /// A guard that keeps nothing: for a backend whose releases never wait
    /// for a running kernel.
    pub fn untracked() -> Self {
        Self { account: None }
    }
}

impl Drop for ResidentKernel {
    fn drop(&mut self) {
        if let Some(account) = self.account.take() {
            account.end_one();
        }
    }
}

impl std::fmt::Debug for ResidentKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResidentKernel")
            .field("tracked", &self.account.is_some())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counter() -> (Arc<AtomicUsize>, impl Fn() -> Box<dyn FnOnce() + Send>) {
        let ran = Arc::new(AtomicUsize::new(0));
        let ran2 = Arc::clone(&ran);
        let make = move || -> Box<dyn FnOnce() + Send> {
            let ran = Arc::clone(&ran2);
            Box::new(move || {
                ran.fetch_add(1, Ordering::Relaxed);
            })
        };
        (ran, make)
    }

    #[test]
    fn a_release_runs_at_once_with_no_resident_kernel() {
        let account = ResidentKernels::new();
        let (ran, release) = counter();
        account.release(release());
        assert_eq!(ran.load(Ordering::Relaxed), 1);
        assert_eq!(account.kept(), 0);
    }

    #[test]
    fn releases_wait_for_the_last_resident_kernel_in_order() {
        let account = ResidentKernels::new();
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = ResidentKernels::hold(&account);
        let second = ResidentKernels::hold(&account);
        for i in 0..3 {
            let order = Arc::clone(&order);
            account.release(move || order.lock().unwrap().push(i));
        }
        assert_eq!(account.kept(), 3);
        drop(first);
        assert!(order.lock().unwrap().is_empty(), "one kernel still runs");
        drop(second);
        assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
        assert_eq!(account.kept(), 0);
        // The account is back to running releases at once.
        let (ran, release) = counter();
        account.release(release());
        assert_eq!(ran.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn run_kept_runs_what_waits_even_while_a_kernel_is_counted() {
        let account = ResidentKernels::new();
        let (ran, release) = counter();
        let guard = ResidentKernels::hold(&account);
        account.release(release());
        account.run_kept();
        assert_eq!(ran.load(Ordering::Relaxed), 1);
        drop(guard);
        assert_eq!(ran.load(Ordering::Relaxed), 1, "nothing runs twice");
    }

    #[test]
    fn a_range_still_registered_is_named_only_while_releases_are_kept() {
        let account = ResidentKernels::new();
        assert!(account.still_registered(core::ptr::null(), 4096).is_none());
        let guard = ResidentKernels::hold(&account);
        account.release(|| {});
        let kind = account
            .still_registered(0x1000 as *const u8, 4096)
            .expect("kept");
        assert!(kind.to_string().contains("4096 bytes at 0x1000"), "{kind}");
        drop(guard);
        assert!(account.still_registered(core::ptr::null(), 4096).is_none());
    }

    #[test]
    fn an_untracked_guard_keeps_nothing() {
        let guard = ResidentKernel::untracked();
        assert!(format!("{guard:?}").contains("false"));
    }

    /// Threads releasing while others count kernels in and out: every
    /// release runs exactly once, and none runs while a kernel is counted.
    #[test]
    fn concurrent_releases_and_kernels_lose_nothing() {
        let account = ResidentKernels::new();
        let live = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        let bad = Arc::new(AtomicUsize::new(0));
        const THREADS: usize = 4;
        const EACH: usize = 2_000;
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (account, live, ran, bad) = (&account, &live, &ran, &bad);
                s.spawn(move || {
                    for i in 0..EACH {
                        if (i + t) % 7 == 0 {
                            let guard = ResidentKernels::hold(account);
                            live.fetch_add(1, Ordering::SeqCst);
                            std::thread::yield_now();
                            live.fetch_sub(1, Ordering::SeqCst);
                            drop(guard);
                        } else {
                            let (live, ran, bad) =
                                (Arc::clone(live), Arc::clone(ran), Arc::clone(bad));
                            account.release(move || {
                                if live.load(Ordering::SeqCst) != 0 {
                                    bad.fetch_add(1, Ordering::Relaxed);
                                }
                                ran.fetch_add(1, Ordering::Relaxed);
                            });
                        }
                    }
                });
            }
        });
        let releases = (0..THREADS)
            .map(|t| (0..EACH).filter(|i| (i + t) % 7 != 0).count())
            .sum::<usize>();
        assert_eq!(ran.load(Ordering::Relaxed), releases);
        assert_eq!(bad.load(Ordering::Relaxed), 0);
        assert_eq!(account.kept(), 0);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Arc;

    use super::ResidentKernels;

    /// A thread counts a kernel in and out while another releases: in every
    /// interleaving the release runs exactly once, never while the kernel is
    /// counted, and nothing is left kept.
    #[test]
    fn a_release_runs_once_and_never_while_a_kernel_is_counted() {
        loom::model(|| {
            let account = ResidentKernels::new();
            let counted = Arc::new(AtomicUsize::new(0));
            let ran = Arc::new(AtomicUsize::new(0));
            let kernel = {
                let (account, counted) = (Arc::clone(&account), Arc::clone(&counted));
                loom::thread::spawn(move || {
                    let guard = ResidentKernels::hold(&account);
                    counted.store(1, Ordering::SeqCst);
                    counted.store(0, Ordering::SeqCst);
                    drop(guard);
                })
            };
            let (seen, runs) = (Arc::clone(&counted), Arc::clone(&ran));
            account.release(move || {
                assert_eq!(
                    seen.load(Ordering::SeqCst),
                    0,
                    "ran while a kernel was counted"
                );
                runs.fetch_add(1, Ordering::SeqCst);
            });
            kernel.join().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), 1);
            assert_eq!(account.kept(), 0);
        });
    }

    /// Two kernels counted at once by two threads: a release made while
    /// either is counted runs once, after both guards are gone.
    #[test]
    fn kept_releases_run_once_after_the_last_of_two_kernels() {
        loom::model(|| {
            let account = ResidentKernels::new();
            let ran = Arc::new(AtomicUsize::new(0));
            let first = ResidentKernels::hold(&account);
            let other = {
                let account = Arc::clone(&account);
                loom::thread::spawn(move || drop(ResidentKernels::hold(&account)))
            };
            let runs = Arc::clone(&ran);
            account.release(move || {
                runs.fetch_add(1, Ordering::SeqCst);
            });
            assert_eq!(ran.load(Ordering::SeqCst), 0, "a kernel is still counted");
            drop(first);
            other.join().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), 1);
        });
    }
}
