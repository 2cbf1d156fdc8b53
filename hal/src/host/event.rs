//! Events of the CPU device: a pair of counters. Recording bumps `recorded`
//! and enqueues a command that raises `completed` to that sequence when the
//! stream reaches it; an event is complete when `completed >= recorded`.
//!
//! Interprocess events keep the counters in a small named shared-memory
//! segment, so another process that opens the handle can query, synchronise,
//! record and make its streams wait exactly like the exporter. Waiting on
//! them sleep-polls (see [`super::wait`]); local events use the same path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tandem_shm_core::Segment;

use super::error::host_error;
use super::ipc::{self, HandleFields, HandleKind};
use super::wait::wait_until;
use crate::error::{ErrorKind, GpuResult};
use crate::types::{EventFlags, IpcEventHandle};

/// `b"TDMEVNT1"`: the first word of an interprocess event segment.
const EVENT_MAGIC: u64 = u64::from_le_bytes(*b"TDMEVNT1");

/// The counters, at offset 0 of an interprocess event's segment.
#[repr(C)]
struct EventCounters {
    magic: AtomicU64,
    /// Sequence of the latest record.
    recorded: AtomicU64,
    /// Highest sequence a stream has reached.
    completed: AtomicU64,
}

impl EventCounters {
    const fn new() -> Self {
        Self {
            magic: AtomicU64::new(EVENT_MAGIC),
            recorded: AtomicU64::new(0),
            completed: AtomicU64::new(0),
        }
    }
}

enum CounterHome {
    Local(EventCounters),
    /// Counters at the start of the segment (page-aligned, at least
    /// `size_of::<EventCounters>()` long, initialised or magic-checked).
    Shared(Segment),
}

/// An event's state, shared by its handle and the stream commands that
/// complete it (so a dropped event's pending records still run safely).
pub(crate) struct EventCore {
    home: CounterHome,
    timing: bool,
    /// Sequence and time of the latest completed record (timing events).
    stamp: Mutex<Option<(u64, Instant)>>,
}

impl EventCore {
    fn counters(&self) -> &EventCounters {
        match &self.home {
            CounterHome::Local(counters) => counters,
            // SAFETY: the segment starts with initialised counters (see
            // `CounterHome::Shared`), is page-aligned, and lives as long as self.
            CounterHome::Shared(segment) => unsafe { &*segment.as_ptr().cast::<EventCounters>() },
        }
    }

    /// Starts a record; the returned sequence is completed by the stream.
    pub(crate) fn begin_record(&self) -> u64 {
        // Relaxed suffices for the counter itself: readers pair their
        // Acquire on `completed` with the stream's Release in `complete`.
        self.counters().recorded.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Called by the stream when it reaches the record of `sequence`.
    pub(crate) fn complete(&self, sequence: u64) {
        if self.timing {
            let now = Instant::now();
            let mut stamp = self.stamp.lock().unwrap_or_else(PoisonError::into_inner);
            if stamp.is_none_or(|(latest, _)| latest < sequence) {
                *stamp = Some((sequence, now));
            }
        }
        // Release: everything the stream did before this record (copies,
        // kernels, whose threads' writes it acquired) happens-before a waiter
        // that sees the new value with Acquire, in this or another process.
        self.counters()
            .completed
            .fetch_max(sequence, Ordering::Release);
    }

    fn reached(&self, target: u64) -> bool {
        self.counters().completed.load(Ordering::Acquire) >= target
    }

    fn latest_record(&self) -> u64 {
        self.counters().recorded.load(Ordering::Acquire)
    }
}

/// A stream command that blocks the stream until an event reaches a sequence.
pub(crate) struct EventWait {
    event: Arc<EventCore>,
    target: u64,
}

impl EventWait {
    pub(crate) fn wait(&self) {
        wait_until(|| self.event.reached(self.target));
    }
}

/// An event of the CPU device.
pub struct HostEvent {
    pub(crate) core: Arc<EventCore>,
    flags: EventFlags,
}

impl core::fmt::Debug for HostEvent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let counters = self.core.counters();
        f.debug_struct("HostEvent")
            .field("flags", &self.flags)
            .field("recorded", &counters.recorded.load(Ordering::Relaxed))
            .field("completed", &counters.completed.load(Ordering::Relaxed))
            .finish()
    }
}

impl HostEvent {
    /// Creates an event. Interprocess events cannot be timing events (the
    /// vendor rule: CUDA demands `DISABLE_TIMING` with `INTERPROCESS`).
    pub(crate) fn create(flags: EventFlags) -> GpuResult<Self> {
        const CALL: &str = "create_event";
        let home = if flags.interprocess {
            if flags.timing {
                return Err(host_error(
                    CALL,
                    ErrorKind::InvalidArgument("an interprocess event cannot record timing".into()),
                ));
            }
            let segment = ipc::create_named_segment(CALL, core::mem::size_of::<EventCounters>())?;
            // SAFETY: a fresh, page-aligned, writable mapping of at least the
            // counters' size, not yet visible to anyone else.
            unsafe {
                segment
                    .as_ptr()
                    .cast::<EventCounters>()
                    .write(EventCounters::new())
            };
            CounterHome::Shared(segment)
        } else {
            CounterHome::Local(EventCounters::new())
        };
        Ok(Self {
            core: Arc::new(EventCore {
                home,
                timing: flags.timing,
                stamp: Mutex::new(None),
            }),
            flags,
        })
    }

    /// Whether the latest record has completed (true if never recorded).
    pub(crate) fn query(&self) -> bool {
        self.core.reached(self.core.latest_record())
    }

    /// Waits for the latest record to complete.
    pub(crate) fn synchronize(&self) {
        let target = self.core.latest_record();
        wait_until(|| self.core.reached(target));
    }

    /// The wait a stream must do to follow this event's latest record, or
    /// `None` if that record has already completed.
    pub(crate) fn wait_command(&self) -> Option<EventWait> {
        let target = self.core.latest_record();
        (!self.core.reached(target)).then(|| EventWait {
            event: Arc::clone(&self.core),
            target,
        })
    }

    /// Time from `start`'s latest record to `end`'s.
    pub(crate) fn elapsed(start: &Self, end: &Self) -> GpuResult<Duration> {
        const CALL: &str = "elapsed";
        let invalid = |what: &str| host_error(CALL, ErrorKind::InvalidArgument(what.into()));
        if !start.flags.timing || !end.flags.timing {
            return Err(invalid("both events must be created with timing"));
        }
        if !start.query() || !end.query() {
            return Err(invalid("an event has not completed yet"));
        }
        let stamp = |e: &Self| *e.core.stamp.lock().unwrap_or_else(PoisonError::into_inner);
        match (stamp(start), stamp(end)) {
            (Some((_, t0)), Some((_, t1))) => t1
                .checked_duration_since(t0)
                .ok_or_else(|| invalid("the end event completed before the start event")),
            _ => Err(invalid("an event was never recorded")),
        }
    }

    pub(crate) fn export(&self) -> GpuResult<IpcEventHandle> {
        const CALL: &str = "ipc_export_event";
        let CounterHome::Shared(segment) = &self.core.home else {
            return Err(host_error(
                CALL,
                ErrorKind::InvalidArgument("the event was not created interprocess".into()),
            ));
        };
        let name = segment.name().ok_or_else(|| {
            host_error(
                CALL,
                ErrorKind::InvalidArgument("the event was opened, not created, here".into()),
            )
        })?;
        Ok(IpcEventHandle(
            HandleFields {
                kind: HandleKind::Event,
                exporter_pid: ipc::own_pid(),
                len: segment.len() as u64,
                name: name.to_owned(),
            }
            .encode(),
        ))
    }

    pub(crate) fn open(handle: &IpcEventHandle) -> GpuResult<Self> {
        const CALL: &str = "ipc_open_event";
        let fields = HandleFields::decode(&handle.0, HandleKind::Event)
            .map_err(|why| host_error(CALL, ErrorKind::InvalidIpcHandle(why)))?;
        let segment = ipc::open_named_segment(CALL, &fields)?;
        if segment.len() < core::mem::size_of::<EventCounters>() {
            return Err(host_error(
                CALL,
                ErrorKind::InvalidIpcHandle("event segment too small".into()),
            ));
        }
        // SAFETY: page-aligned mapping at least the counters' size; the
        // exporter initialised them before it could hand out the handle.
        let magic = unsafe { &*segment.as_ptr().cast::<EventCounters>() }
            .magic
            .load(Ordering::Relaxed);
        if magic != EVENT_MAGIC {
            return Err(host_error(
                CALL,
                ErrorKind::InvalidIpcHandle("not an event segment".into()),
            ));
        }
        Ok(Self {
            core: Arc::new(EventCore {
                home: CounterHome::Shared(segment),
                timing: false,
                stamp: Mutex::new(None),
            }),
            flags: EventFlags {
                timing: false,
                interprocess: true,
            },
        })
    }
}
