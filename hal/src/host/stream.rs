//! Streams of the CPU device: an in-order FIFO of commands executed by one
//! worker thread per stream, so work on different streams overlaps and the
//! submitting thread never waits (like a GPU stream).
//!
//! A kernel failure is latched on the stream and returned (once) by its next
//! [`StreamShared::synchronize`]; later commands still run, so events
//! recorded after a failed launch still complete and nobody waiting on them
//! hangs. Dropping a stream returns at once; its worker finishes the queued
//! commands and exits (CUDA's `cuStreamDestroy` behaves the same).
//!
//! Both ends poll for a while before they block ([`POLL_FOR`]): the worker
//! for its next command, a synchronising caller for completion (as CUDA's
//! default scheduling spins in `cuStreamSynchronize`). A blocked thread is
//! woken by the kernel, and where idle cores sleep (a virtual machine's
//! halted vCPUs) each wake-up took tens of microseconds: an empty launch +
//! sync, two of them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::api::HostApi;
use super::event::{EventCore, EventWait};
use super::launch::{self, LaunchSpec};
use super::memory::{self, Region};
use crate::api::DeviceMemory;
use crate::error::GpuResult;

/// A raw address a command reads or writes; see [`Command`] for why the
/// memory behind it stays valid.
#[derive(Clone, Copy)]
pub(crate) struct Address(pub(crate) *mut u8);

// SAFETY: a plain address; the command that carries it keeps the memory
// alive (a `Region`) or runs under the caller's `unsafe` promise.
unsafe impl Send for Address {}

/// One unit of stream work. Device memory a command touches is kept alive by
/// the `Region`s it holds, so dropping a buffer with work pending is safe;
/// caller memory (async copies from and to host slices) is covered by the
/// `unsafe` contract of those calls.
pub(crate) enum Command {
    Copy {
        dst: Address,
        src: Address,
        len: usize,
        keep: Vec<Arc<Region>>,
    },
    Fill {
        dst: Address,
        len: usize,
        byte: u8,
        keep: Arc<Region>,
    },
    /// A kernel, and the regions its pointer arguments lie in (those the
    /// device knows of): as a GPU's frees and unmaps wait for the queued
    /// work, a buffer dropped while its kernel waits stays mapped for it.
    Launch {
        spec: Arc<LaunchSpec>,
        keep: Vec<Arc<Region>>,
    },
    Record {
        event: Arc<EventCore>,
        sequence: u64,
    },
    Wait(EventWait),
}

impl Command {
    /// A command copying host bytes into `dst`.
    ///
    /// # Safety
    /// The command reads `src` whenever it runs: `src` must stay valid and
    /// unchanged until then.
    pub(crate) unsafe fn copy_in(
        call: &'static str,
        dst: &impl DeviceMemory<Api = HostApi>,
        dst_offset: usize,
        src: &[u8],
    ) -> GpuResult<Self> {
        let (to, region) = memory::resolve(call, dst, dst_offset, src.len())?;
        Ok(Self::Copy {
            dst: Address(to),
            src: Address(src.as_ptr().cast_mut()),
            len: src.len(),
            keep: vec![region],
        })
    }

    /// A command copying from `src` into host bytes.
    ///
    /// # Safety
    /// The command writes `dst` whenever it runs: `dst` must stay valid and
    /// unused until then.
    pub(crate) unsafe fn copy_out(
        call: &'static str,
        dst: &mut [u8],
        src: &impl DeviceMemory<Api = HostApi>,
        src_offset: usize,
    ) -> GpuResult<Self> {
        let (from, region) = memory::resolve(call, src, src_offset, dst.len())?;
        Ok(Self::Copy {
            dst: Address(dst.as_mut_ptr()),
            src: Address(from),
            len: dst.len(),
            keep: vec![region],
        })
    }

    /// A command copying between two memory objects of the device.
    pub(crate) fn copy_between(
        call: &'static str,
        dst: &impl DeviceMemory<Api = HostApi>,
        dst_offset: usize,
        src: &impl DeviceMemory<Api = HostApi>,
        src_offset: usize,
        len: usize,
    ) -> GpuResult<Self> {
        let (to, dst_region) = memory::resolve(call, dst, dst_offset, len)?;
        let (from, src_region) = memory::resolve(call, src, src_offset, len)?;
        Ok(Self::Copy {
            dst: Address(to),
            src: Address(from),
            len,
            keep: vec![dst_region, src_region],
        })
    }

    /// A command setting `len` bytes of `dst` from `offset` to `byte`.
    pub(crate) fn fill(
        call: &'static str,
        dst: &impl DeviceMemory<Api = HostApi>,
        offset: usize,
        len: usize,
        byte: u8,
    ) -> GpuResult<Self> {
        let (to, region) = memory::resolve(call, dst, offset, len)?;
        Ok(Self::Fill {
            dst: Address(to),
            len,
            byte,
            keep: region,
        })
    }

    /// Runs the command on the stream's worker; `Err` is a kernel failure.
    pub(crate) fn execute(self) -> Result<(), String> {
        match self {
            Command::Copy {
                dst,
                src,
                len,
                keep,
                ..
            } => {
                // SAFETY: both ranges were bounds-checked against live memory
                // when enqueued and are kept alive by `keep` (device side) or
                // by the async call's contract (host side). `copy` tolerates
                // overlap, which a device-to-device copy within one buffer has.
                unsafe { core::ptr::copy(src.0.cast_const(), dst.0, len) };
                drop(keep);
                Ok(())
            }
            Command::Fill {
                dst,
                len,
                byte,
                keep,
            } => {
                // SAFETY: bounds-checked when enqueued; `keep` holds the memory.
                unsafe { dst.0.write_bytes(byte, len) };
                drop(keep);
                Ok(())
            }
            Command::Launch { spec, keep } => {
                let ran = launch::execute(spec);
                drop(keep);
                ran
            }
            Command::Record { event, sequence } => {
                event.complete(sequence);
                Ok(())
            }
            Command::Wait(wait) => {
                wait.wait();
                Ok(())
            }
        }
    }
}

struct StreamState {
    queue: VecDeque<Command>,
    /// Commands ever enqueued / finished; a sync waits for `completed` to
    /// reach the `submitted` it saw.
    submitted: u64,
    completed: u64,
    /// First kernel failure not yet reported.
    failure: Option<String>,
    /// The owner dropped the stream: drain and exit.
    closed: bool,
}

/// How long a stream's worker polls for its next command after finishing
/// one, and a synchronising caller for completion, before blocking (see the
/// module docs). Polls yield between looks, so runnable threads (the CPU
/// device's kernel threads among them) keep the core.
const POLL_FOR: Duration = Duration::from_micros(50);

/// The part of a stream its worker thread shares with its owner.
pub(crate) struct StreamShared {
    state: Mutex<StreamState>,
    /// Signalled when a command is enqueued or the stream closes.
    work: Condvar,
    /// Signalled when a command completes.
    progress: Condvar,
    /// `submitted` and `completed`, for the polls, which take no lock.
    submitted: AtomicU64,
    completed: AtomicU64,
}

/// Polls `done` (yielding between looks) until it is true or [`POLL_FOR`]
/// has passed; the caller then takes the lock either way.
fn poll(mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() && started.elapsed() < POLL_FOR {
        std::thread::yield_now();
    }
}

impl StreamShared {
    fn state(&self) -> MutexGuard<'_, StreamState> {
        // Every critical section leaves the state whole (a push, a pop, a
        // counter bump), so a poisoned lock's data is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn enqueue(&self, command: Command) {
        let mut state = self.state();
        state.queue.push_back(command);
        state.submitted += 1;
        // Release: a worker that polls this count and sees it then takes the
        // lock, which orders the queue itself.
        self.submitted.store(state.submitted, Ordering::Release);
        drop(state);
        self.work.notify_one();
    }

    /// Waits until everything enqueued so far has run; returns (and clears)
    /// the first kernel failure since the last synchronisation.
    pub(crate) fn synchronize(&self) -> Result<(), String> {
        // Acquire (both): what this thread enqueued is counted, and the
        // lock below orders everything else.
        let target = self.submitted.load(Ordering::Acquire);
        poll(|| self.completed.load(Ordering::Acquire) >= target);
        let mut state = self.state();
        let target = state.submitted;
        while state.completed < target {
            state = self
                .progress
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.failure.take().map_or(Ok(()), Err)
    }

    fn work_loop(&self) {
        let mut done = 0;
        loop {
            poll(|| self.submitted.load(Ordering::Acquire) > done);
            let mut state = self.state();
            let command = loop {
                if let Some(command) = state.queue.pop_front() {
                    break command;
                }
                if state.closed {
                    return;
                }
                state = self
                    .work
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            };
            drop(state);
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| command.execute()))
                    .unwrap_or_else(|_| Err("host stream worker panicked".to_owned()));
            let mut state = self.state();
            state.completed += 1;
            done = state.completed;
            if let Err(why) = outcome {
                state.failure.get_or_insert(why);
            }
            // Release: a caller that polls this count takes the lock next,
            // for the failure; the command's effects happened before.
            self.completed.store(done, Ordering::Release);
            drop(state);
            self.progress.notify_all();
        }
    }
}

/// An in-order, non-blocking stream of the CPU device.
pub struct HostStream {
    pub(crate) shared: Arc<StreamShared>,
}

impl core::fmt::Debug for HostStream {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let state = self.shared.state();
        f.debug_struct("HostStream")
            .field("submitted", &state.submitted)
            .field("completed", &state.completed)
            .finish()
    }
}

impl HostStream {
    /// Starts a stream and its worker thread.
    pub(crate) fn start() -> std::io::Result<Self> {
        let shared = Arc::new(StreamShared {
            state: Mutex::new(StreamState {
                queue: VecDeque::new(),
                submitted: 0,
                completed: 0,
                failure: None,
                closed: false,
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
        });
        let worker = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("tandem-host-stream".into())
            .spawn(move || worker.work_loop())?;
        Ok(Self { shared })
    }
}

impl Drop for HostStream {
    fn drop(&mut self) {
        self.shared.state().closed = true;
        self.shared.work.notify_one();
    }
}
