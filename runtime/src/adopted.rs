//! The client device segments a runtime serves besides its own: the
//! workers' poll set grows and shrinks while they run.
//!
//! The janitor (on the heartbeat thread) is the one writer: it replaces the
//! list under a mutex and then bumps a generation counter. A worker reads
//! the counter once per sweep, and takes the lock only when it moved, to
//! copy the list and rebuild its share of the lanes: the hot path pays one
//! load of a line that changes only when a client's segment comes or goes,
//! and in-process devices' lanes are untouched. A removed segment stays
//! mapped while any worker still holds it (its `Arc`), so a record a worker
//! popped before it refreshed is answered into live memory, where nobody
//! reads it any more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::segment::QueueSegment;

/// One client device segment the workers serve.
#[derive(Debug)]
pub(crate) struct Adopted {
    pub segment: Arc<QueueSegment>,
    /// The index of the served device (into the runtime's devices) whose
    /// workers take its lanes.
    pub device: usize,
    /// The client slot and its entry the segment was requested in.
    pub slot: u32,
    pub entry: u32,
    /// Records each worker took from it, by the runtime's worker index;
    /// each cell written by its worker alone.
    taken: Box<[TakenCount]>,
}

/// One worker's count of records taken from one adopted segment, on lines
/// of its own (as the workers' other counters).
#[derive(Debug, Default)]
#[repr(align(128))]
struct TakenCount(AtomicU64);

impl Adopted {
    pub(crate) fn new(
        segment: Arc<QueueSegment>,
        device: usize,
        slot: u32,
        entry: u32,
        workers: usize,
    ) -> Self {
        Self {
            segment,
            device,
            slot,
            entry,
            taken: (0..workers).map(|_| TakenCount::default()).collect(),
        }
    }

    /// Counts a record worker `worker` took. A load and a store: its one
    /// writer needs no read-modify-write (as `worker::bump`).
    pub(crate) fn count_taken(&self, worker: usize) {
        if let Some(cell) = self.taken.get(worker) {
            cell.0
                .store(cell.0.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }

    /// Records the workers took from it so far. Relaxed: statistics.
    pub(crate) fn taken(&self) -> u64 {
        self.taken.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
    }
}

/// The adopted segments and the generation that tells workers to look again.
#[derive(Debug, Default)]
pub(crate) struct AdoptedSegments {
    generation: Generation,
    list: Mutex<Vec<Arc<Adopted>>>,
}

/// The generation, on lines of its own: the heartbeat takes the list's lock
/// at every tick, which must not take the workers' copy of this line away.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Generation(AtomicU64);

impl AdoptedSegments {
    /// The generation now. Acquire: pairs with [`edit`](Self::edit)'s
    /// Release, so a worker that sees a new generation finds the list that
    /// made it (it reads the list under the lock anyway; the pair keeps it
    /// from refreshing to an older one).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.0.load(Ordering::Acquire)
    }

    /// A copy of the list, for a worker's refresh.
    pub(crate) fn snapshot(&self) -> Vec<Arc<Adopted>> {
        self.lock().clone()
    }

    /// Changes the list with `change`, then bumps the generation (Release,
    /// after the change: see [`generation`](Self::generation)).
    pub(crate) fn edit<T>(&self, change: impl FnOnce(&mut Vec<Arc<Adopted>>) -> T) -> T {
        let out = change(&mut self.lock());
        self.generation.0.fetch_add(1, Ordering::Release);
        out
    }

    /// The list as it is, for the heartbeat's reads.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Vec<Arc<Adopted>>> {
        // A panic while the lock was held left a whole list (each edit is a
        // push or a retain).
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }
}
