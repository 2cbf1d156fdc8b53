//! Worker threads: each polls its share of the (segment, lane) pairs, one
//! task at a time, and completes the futures it takes.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_hal::Backend;
use tandem_shm_core::layout::FUTURE_COPY_SPACE_OFFSET;
use tandem_shm_core::FutureShm;
use tandem_shm_core::{demote_lines, FillError, FutureError, LaneCursor, LlRecord, ShmPtr};

use crate::adopted::{Adopted, AdoptedSegments};
use crate::context::TaskContext;
use crate::layout::{notify_word, task_record, TaskHeader, RC_BAD_TASK, TASK_HEADER_BYTES};
use crate::registry::{HandlerReply, Registry};
use crate::segment::QueueSegment;
use crate::task::decode_task;

/// One worker's counters, which only it writes (`Relaxed`: statistics,
/// ordered with nothing). Workers do not share a counter: on a line that
/// several cores add to, every task would wait for the line to come back.
/// Aligned to two cache lines, so neighbours' counters (and the adjacent-line
/// prefetcher) stay off each other's lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct WorkerStats {
    completed: AtomicU64,
    failed: AtomicU64,
    bad_pointers: AtomicU64,
    double_completions: AtomicU64,
    /// Per pool, by the registry's dense pool index, then one slot for tasks
    /// no registered pool ran (unknown pool, malformed task).
    pools: Box<[PoolCounts]>,
    /// Sweeps ended: a sweep ends after the tasks popped in it are done, so
    /// the clients' janitor waits for this to move (crate::clients).
    sweeps: AtomicU64,
    /// Records taken per segment, by the runtime's segment order (the CPU
    /// segment, then the devices'): what `tandem status` shows per device.
    segments: Box<[SegmentCount]>,
}

/// One worker's count of records taken from one segment, and of those
/// that failed; two cache lines, for the reason [`PoolCounts`] is.
#[derive(Debug, Default)]
#[repr(align(128))]
struct SegmentCount {
    taken: AtomicU64,
    failed: AtomicU64,
}

/// One worker's counts for one pool (or the no-pool slot). Two cache lines
/// each, for the reason [`WorkerStats`] is: another worker's slots may sit
/// right after this worker's allocation.
#[derive(Debug, Default)]
#[repr(align(128))]
struct PoolCounts {
    completed: AtomicU64,
    failed: AtomicU64,
}

impl WorkerStats {
    /// Counters for a registry of `pools` pools and a runtime of
    /// `segments` segments.
    pub(crate) fn new(pools: usize, segments: usize) -> Self {
        Self {
            pools: (0..=pools).map(|_| PoolCounts::default()).collect(),
            segments: (0..segments).map(|_| SegmentCount::default()).collect(),
            ..Self::default()
        }
    }

    /// Records this worker took from segment `slot` (the runtime's segment
    /// order), and of their tasks those that failed; 0 for a slot it does
    /// not have. `Relaxed`: statistics.
    pub(crate) fn segment_tasks(&self, slot: usize) -> (u64, u64) {
        self.segments.get(slot).map_or((0, 0), |c| {
            (
                c.taken.load(Ordering::Relaxed),
                c.failed.load(Ordering::Relaxed),
            )
        })
    }

    /// Tasks completed and failed that pool `index` ran (the registry's
    /// dense index; `None`: no registered pool), by this worker. `Relaxed`:
    /// statistics, as the other counters.
    pub(crate) fn pool_counts(&self, index: Option<usize>) -> (u64, u64) {
        let slot = index.unwrap_or(self.pools.len().saturating_sub(1));
        self.pools.get(slot).map_or((0, 0), |c| {
            (
                c.completed.load(Ordering::Relaxed),
                c.failed.load(Ordering::Relaxed),
            )
        })
    }

    /// Counts a completed task of pool `index` (see [`pool_counts`](Self::pool_counts)).
    fn count_pool(&self, index: Option<usize>, succeeded: bool) {
        let last = self.pools.len().saturating_sub(1);
        if let Some(c) = self.pools.get(index.map_or(last, |i| i.min(last))) {
            bump(&c.completed);
            if !succeeded {
                bump(&c.failed);
            }
        }
    }

    /// Futures this worker completed, for the status block's busy count.
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// Sweeps this worker has ended. `Acquire`: pairs with the Release that
    /// ended each, so the work done in it happened-before the caller's next
    /// steps.
    pub(crate) fn sweeps(&self) -> u64 {
        self.sweeps.load(Ordering::Acquire)
    }
}

/// A copy of the counters, summed over the workers.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct StatsSnapshot {
    /// Futures completed (successfully or not).
    pub completed: u64,
    /// Of those, completed with a nonzero return code.
    pub failed: u64,
    /// Queue entries that named no future of their segment (dropped: there is
    /// nothing to complete).
    pub bad_pointers: u64,
    /// Futures found already complete when a worker took them.
    pub double_completions: u64,
}

impl StatsSnapshot {
    /// The counts of `workers`, added up.
    pub(crate) fn sum<'a>(workers: impl IntoIterator<Item = &'a WorkerStats>) -> Self {
        workers.into_iter().fold(Self::default(), |total, w| Self {
            completed: total.completed + w.completed.load(Ordering::Relaxed),
            failed: total.failed + w.failed.load(Ordering::Relaxed),
            bad_pointers: total.bad_pointers + w.bad_pointers.load(Ordering::Relaxed),
            double_completions: total.double_completions
                + w.double_completions.load(Ordering::Relaxed),
        })
    }
}

/// Adds one to a counter of the calling worker's own [`WorkerStats`]. A
/// load and a store, not a read-modify-write: its one writer needs no
/// atomicity, and on x86 an atomic add is a locked instruction, which first
/// waits for the worker's earlier stores (the last notify word, on a line a
/// GPU keeps reading) to leave its store buffer.
fn bump(counter: &AtomicU64) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// One lane of one segment a worker polls.
#[derive(Clone)]
pub(crate) struct Source {
    pub segment: Arc<QueueSegment>,
    /// The segment's place in the runtime's segment order (the CPU segment,
    /// then the devices'), which its per-segment counts use.
    pub slot: usize,
    pub lane: u32,
    /// The worker is the lane's only consumer (set by [`assign`]): it pops
    /// with a store instead of a compare-and-swap
    /// ([`LaneCursor::sole_consumer`]).
    pub sole: bool,
}

/// A worker's share of the client device segments the runtime adopted
/// ([`crate::adopted`]): those of its device, whose lanes it splits with
/// that device's other workers as [`assign`] splits the device's own.
pub(crate) struct AdoptedShare {
    pub segments: Arc<AdoptedSegments>,
    /// The device (an index into the runtime's devices) it serves.
    pub device: usize,
    /// Its rank among that device's workers, and their count.
    pub rank: usize,
    pub count: usize,
    /// Its index among all the runtime's workers (its counters' cell).
    pub worker: usize,
}

/// One lane of an adopted segment a worker polls, and the segment it counts
/// its records in.
struct AdoptedLane {
    lane: PolledLane,
    adopted: Arc<Adopted>,
}

/// One lane as a worker polls it: where it is, the worker's cursor in it
/// and how often it is polled.
struct PolledLane {
    source: Source,
    cursor: LaneCursor,
    pace: LanePace,
}

/// What one sweep's poll of a lane did.
enum Poll {
    /// Not polled: the lane is quiet and the worker busy ([`LanePace`]).
    Passed,
    Empty,
    Took(LlRecord),
}

impl PolledLane {
    fn new(source: Source) -> Self {
        let cursor = LaneCursor::default();
        Self {
            cursor: if source.sole {
                cursor.sole_consumer()
            } else {
                cursor
            },
            source,
            pace: LanePace::default(),
        }
    }

    /// Polls the lane in sweep `sweep` if it is due, the worker being `busy`.
    #[inline]
    fn poll(&mut self, busy: bool, sweep: u64) -> Poll {
        if !self.pace.due(busy, sweep) {
            return Poll::Passed;
        }
        // A lane index from the worker's assignment always exists.
        let popped = self
            .cursor
            .pop(self.source.segment.queue(), self.source.lane);
        let taken = popped.ok().flatten();
        self.pace.polled(taken.is_some());
        taken.map_or(Poll::Empty, |(_, record)| Poll::Took(record))
    }
}

impl AdoptedShare {
    /// The lanes this worker polls of the adopted segments now.
    fn lanes(&self) -> Vec<AdoptedLane> {
        let mut lanes = Vec::new();
        for adopted in self.segments.snapshot() {
            if adopted.device != self.device {
                continue;
            }
            let count = adopted.segment.queue().num_lanes();
            let mine = assignment(count as usize, self.count.max(1));
            for &(lane, sole) in mine.get(self.rank).map_or(&[][..], Vec::as_slice) {
                lanes.push(AdoptedLane {
                    lane: PolledLane::new(Source {
                        segment: Arc::clone(&adopted.segment),
                        // No slot of the runtime's own segment order: its
                        // count is the adopted segment's.
                        slot: usize::MAX,
                        lane: lane as u32,
                        sole,
                    }),
                    adopted: Arc::clone(&adopted),
                });
            }
        }
        lanes
    }
}

/// Splits `sources` among `workers`: worker w gets every source whose index
/// is w modulo the count, so each lane has at least one poller and, with more
/// workers than lanes, extra workers share lanes (the rings are MPMC). A
/// source that only one worker got is marked `sole`.
pub(crate) fn assign(sources: &[Source], workers: usize) -> Vec<Vec<Source>> {
    assignment(sources.len(), workers)
        .into_iter()
        .map(|mine| {
            mine.into_iter()
                .map(|(i, sole)| Source {
                    sole,
                    ..sources[i].clone()
                })
                .collect()
        })
        .collect()
}

/// One worker of a [`plan`]: the lanes it polls, and the device (an index
/// into the runtime's devices) whose lanes it serves, whose NUMA node's CPUs
/// it runs on.
pub(crate) struct WorkerPlan {
    pub sources: Vec<Source>,
    pub device: Option<usize>,
}

/// Workers for a runtime: `per_device[d]` workers serve device d's lanes
/// (`devices[d]`) and no other device's, so a device's records are taken by
/// threads that can run on its NUMA node and one device's load does not
/// slow another's sweeps; the CPU segment's lanes (`cpu`, host clients'
/// records) are spread over every worker. Without devices,
/// `cpu_only_workers` serve the CPU lanes alone.
pub(crate) fn plan(
    cpu: &[Source],
    devices: &[Vec<Source>],
    per_device: &[usize],
    cpu_only_workers: usize,
) -> Vec<WorkerPlan> {
    let mut workers: Vec<WorkerPlan> = Vec::new();
    if devices.is_empty() {
        workers.extend((0..cpu_only_workers).map(|_| WorkerPlan {
            sources: Vec::new(),
            device: None,
        }));
    }
    for (d, (lanes, &count)) in devices.iter().zip(per_device).enumerate() {
        workers.extend(assign(lanes, count).into_iter().map(|sources| WorkerPlan {
            sources,
            device: Some(d),
        }));
    }
    let cpu_shares = assign(cpu, workers.len().max(1));
    for (worker, cpu_lanes) in workers.iter_mut().zip(cpu_shares) {
        // The CPU lanes first: a host client's round trip should not wait
        // behind a sweep of a device's many lanes.
        let device_lanes = std::mem::replace(&mut worker.sources, cpu_lanes);
        worker.sources.extend(device_lanes);
    }
    workers
}

/// `total` workers split among `devices` devices as evenly as possible,
/// the first devices taking the remainder; at least one each, so every
/// device's lanes have a poller.
pub(crate) fn split_among_devices(total: usize, devices: usize) -> Vec<usize> {
    (0..devices)
        .map(|d| (total / devices + usize::from(d < total % devices)).max(1))
        .collect()
}

/// [`assign`] by index: each worker's source indices, each with whether no
/// other worker got it.
fn assignment(sources: usize, workers: usize) -> Vec<Vec<(usize, bool)>> {
    let indices: Vec<Vec<usize>> = (0..workers)
        .map(|w| {
            let mine: Vec<usize> = (0..sources).filter(|i| i % workers == w).collect();
            if mine.is_empty() && sources > 0 {
                vec![w % sources]
            } else {
                mine
            }
        })
        .collect();
    let mut pollers = vec![0usize; sources];
    for &i in indices.iter().flatten() {
        pollers[i] += 1;
    }
    indices
        .into_iter()
        .map(|mine| mine.into_iter().map(|i| (i, pollers[i] == 1)).collect())
        .collect()
}

/// Whether `workers` workers on `cores` cores must yield while they spin
/// (see [`IdleBackoff`]): when they fill the cores, a host submitter has
/// none; on the CPU device ([`Backend::Host`]) once they take more than half,
/// as its kernel threads are threads of this process too, and a launch runs
/// one on each core it gets. With cores to spare the yields only cost: a
/// record that lands during a `sched_yield` waits it out, which lengthens
/// the CPU device's round trip (docs/cpu-device.md; the A/B is in
/// docs/perf/2026-11-27-h200.md).
pub(crate) fn shares_cores(backend: Backend, workers: usize, cores: usize) -> bool {
    match backend {
        Backend::Host => 2 * workers > cores,
        _ => workers >= cores,
    }
}

/// How often a worker polls one lane. A lane that has been empty for
/// [`QUIET_AFTER`] polls in a row is quiet: while the worker is busy (its
/// previous sweep took a record), it polls a quiet lane only every
/// [`QUIET_EVERY`]-th sweep; after a sweep that found nothing it polls every
/// lane, so an idle worker finds a record in any lane as soon as before.
///
/// Why: a worker's sweep polls both rings of each of its lanes, and lanes
/// nobody sends on (a runtime's own device lanes while only client processes'
/// kernels send, or all but a few lanes while few kernel threads do) cost a
/// busy worker those polls between every two records, a share of its rate.
/// The price is latency for a lane that wakes while others keep the worker
/// busy: its first record waits up to `QUIET_EVERY - 1` sweeps more.
#[derive(Default)]
struct LanePace {
    empty_polls: u32,
}

/// Empty polls in a row that make a lane quiet: many more than a lane that a
/// lone thread sends on is empty for between its records (its round trip's
/// worth of sweeps), so such a lane never turns quiet, and few enough that a
/// lane nobody sends on soon does.
const QUIET_AFTER: u32 = 4096;
/// A busy worker polls a quiet lane in one sweep of this many, so a waking
/// lane's first record waits at most `QUIET_EVERY - 1` sweeps more.
const QUIET_EVERY: u64 = 4;

impl LanePace {
    /// Whether to poll the lane in sweep `sweep`, the worker being `busy`.
    #[inline]
    fn due(&self, busy: bool, sweep: u64) -> bool {
        !busy || self.empty_polls < QUIET_AFTER || sweep % QUIET_EVERY == 0
    }

    /// Counts a poll that took a record (`took`) or found the lane empty.
    #[inline]
    fn polled(&mut self, took: bool) {
        self.empty_polls = if took {
            0
        } else {
            self.empty_polls.saturating_add(1)
        };
    }
}

/// Idle back-off: spin (a completion round trip stays in the microseconds),
/// then yield, then park for short, growing naps. With `share_cores`, it
/// also yields every [`YIELD_EVERY`] sweeps while spinning: when the
/// submitter is a thread on the same core (a host client, or the CPU
/// device's kernel threads), a worker that only spins would hold the core for
/// its whole time slice while the submitter waits to push the next task.
/// Without it (cores to spare: [`shares_cores`]) the worker spins unbroken
/// for up to [`SPIN_FOR`]: a record landing during a yield's system call
/// waits that call out.
struct IdleBackoff {
    share_cores: bool,
    idle_since: Option<Instant>,
    sweeps: u32,
    nap: Duration,
}

const YIELD_EVERY: u32 = 16;
const SPIN_FOR: Duration = Duration::from_micros(50);
const YIELD_FOR: Duration = Duration::from_millis(2);
const FIRST_NAP: Duration = Duration::from_micros(20);
const LONGEST_NAP: Duration = Duration::from_micros(500);

impl IdleBackoff {
    fn new(share_cores: bool) -> Self {
        Self {
            share_cores,
            idle_since: None,
            sweeps: 0,
            nap: FIRST_NAP,
        }
    }

    fn busy(&mut self) {
        self.idle_since = None;
        self.nap = FIRST_NAP;
    }

    fn idle(&mut self) {
        let idle = self.idle_since.get_or_insert_with(Instant::now).elapsed();
        self.sweeps = self.sweeps.wrapping_add(1);
        if idle < SPIN_FOR && (!self.share_cores || self.sweeps % YIELD_EVERY != 0) {
            std::hint::spin_loop();
        } else if idle < YIELD_FOR {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(self.nap);
            self.nap = (self.nap * 2).min(LONGEST_NAP);
        }
    }
}

/// A worker's loop: sweeps its sources, taking at most one task from each per
/// sweep (fair between CPU and device queues; the cursor keeps the low
/// priority ring draining; quiet lanes less often while busy, [`LanePace`]),
/// until `shutdown` is raised and a sweep that polled every lane finds
/// nothing. `share_cores`: submitters may need this worker's core while it
/// spins (see [`IdleBackoff`]). With `adopted`, it also sweeps its share of
/// the client device segments, refreshed whenever their list changes.
pub(crate) fn run(
    sources: Vec<Source>,
    adopted: Option<AdoptedShare>,
    registry: Arc<Registry>,
    stats: Arc<WorkerStats>,
    shutdown: Arc<AtomicBool>,
    share_cores: bool,
) {
    // A cursor per source: one shared cursor counts pops of every lane, so
    // with an even number of sources its every-8th low-first pop can always
    // land on the same (perhaps empty) lane and starve another's low ring.
    let mut lanes: Vec<PolledLane> = sources.into_iter().map(PolledLane::new).collect();
    let mut backoff = IdleBackoff::new(share_cores);
    let mut scratch = Scratch::default();
    let mut sweeps = 0u64;
    let mut adopted_lanes: Vec<AdoptedLane> = Vec::new();
    let mut adopted_seen = None;
    let mut busy = false;
    loop {
        let mut found = false;
        // Some quiet lane was passed over: this sweep's finding nothing does
        // not say the lanes are empty.
        let mut passed = false;
        if let Some(share) = &adopted {
            let generation = share.segments.generation();
            if adopted_seen != Some(generation) {
                adopted_seen = Some(generation);
                adopted_lanes = share.lanes();
            }
        }
        for lane in &mut lanes {
            match lane.poll(busy, sweeps) {
                Poll::Passed => passed = true,
                Poll::Empty => {}
                Poll::Took(record) => {
                    let source = &lane.source;
                    let count = stats.segments.get(source.slot);
                    if let Some(count) = count {
                        bump(&count.taken);
                    }
                    if process(&source.segment, record, &registry, &stats, &mut scratch) {
                        if let Some(count) = count {
                            bump(&count.failed);
                        }
                    }
                    found = true;
                }
            }
        }
        for adopted_lane in &mut adopted_lanes {
            match adopted_lane.lane.poll(busy, sweeps) {
                Poll::Passed => passed = true,
                Poll::Empty => {}
                Poll::Took(record) => {
                    if let Some(share) = &adopted {
                        adopted_lane.adopted.count_taken(share.worker);
                    }
                    let segment = &adopted_lane.lane.source.segment;
                    process(segment, record, &registry, &stats, &mut scratch);
                    found = true;
                }
            }
        }
        busy = found;
        // Release: what this sweep did to the futures it took happens-before
        // the janitor's Acquire of the new count. Our own line, a plain store.
        sweeps = sweeps.wrapping_add(1);
        stats.sweeps.store(sweeps, Ordering::Release);
        if found {
            backoff.busy();
        } else if passed {
            // The next sweep, not busy, polls every lane.
        } else if shutdown.load(Ordering::Acquire) {
            // Acquire pairs with the Release in Runtime::shutdown; everything
            // pushed before the runtime was stopped has been drained.
            return;
        } else {
            backoff.idle();
        }
    }
}

/// Worker-local buffers: the input copied out of a copy future (its copy
/// space is overwritten by the output) or an inline record's argument bytes,
/// and the output before it is copied in.
#[derive(Default)]
struct Scratch {
    input: Vec<u8>,
    output: Vec<u8>,
}

/// Runs the inline task of a record (`task_record`), its argument bytes
/// gathered into `args`; RC_BAD_TASK when the words do not make one. Returns
/// the pool's dense index with the reply, as [`Registry::call_indexed`].
fn run_inline_task(
    context: &TaskContext<'_>,
    words: &[u32],
    registry: &Registry,
    args: &mut Vec<u8>,
    out: &mut [u8],
) -> (Option<usize>, HandlerReply) {
    let (Some(&pool), Some(&method), Some(&lengths), Some(arg_words)) = (
        words.get(task_record::POOL),
        words.get(task_record::METHOD),
        words.get(task_record::LENGTHS),
        words.get(task_record::ARGS..),
    ) else {
        return (None, HandlerReply::code(RC_BAD_TASK));
    };
    let args_len = task_record::args_len(lengths);
    if arg_words.len() != args_len.div_ceil(4) {
        return (None, HandlerReply::code(RC_BAD_TASK));
    }
    args.clear();
    args.extend(
        arg_words
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .take(args_len),
    );
    registry.call_indexed(context, (pool, method), args, out)
}

/// Runs the task of one lane record and answers it: through its future and
/// then its submitter's notify word, or, for an inline task answered with
/// return code 0 and no output whose submitter has a notify word, through
/// the word alone (layout.rs `notify_word::NO_OUTPUT`). Returns whether
/// the task completed with a nonzero return code (the caller counts those
/// by segment).
fn process(
    segment: &QueueSegment,
    record: LlRecord,
    registry: &Registry,
    stats: &WorkerStats,
    scratch: &mut Scratch,
) -> bool {
    let words = record.words();
    let head = RecordHead::of(segment, words);
    let Some((pool, reply, attached)) = run_task(segment, words, head, registry, stats, scratch)
    else {
        return false;
    };
    if head.inline && answer_without_future(segment, head.notify, head.token, &reply) {
        bump(&stats.completed);
        stats.count_pool(pool, true);
        return false;
    }
    let future = match attached {
        Some(future) => future,
        None => match segment.future(head.ptr) {
            Ok(future) => future,
            Err(_) => {
                bump(&stats.bad_pointers);
                return false;
            }
        },
    };
    // The handler saw an output buffer of the record's size: only the
    // future's own may hold its output.
    let reply = match head.given {
        Some(copy_space) if copy_space != future.copy_space_size() as usize => {
            HandlerReply::code(RC_BAD_TASK)
        }
        _ => reply,
    };
    if head.inline {
        // SAFETY: the record's submitter does not touch the future until it
        // sees it answered (which we do after completing it), and this worker
        // popped the record: nobody else uses the future meanwhile.
        unsafe { future.reset() };
    }
    let Some(succeeded) = complete(&future, reply, &scratch.output) else {
        bump(&stats.double_completions);
        return false;
    };
    notify_and_count(segment, head, &future, pool, succeeded, stats);
    !succeeded
}

/// What a lane record says of its task besides the task itself: where its
/// future is and how to answer it.
#[derive(Clone, Copy)]
struct RecordHead {
    ptr: ShmPtr<u8>,
    /// The submitter's notify word (0: none), and the token to write there.
    notify: u32,
    token: u32,
    /// The task's arguments are in the record, not in its future.
    inline: bool,
    /// The copy space an inline record gives, if it does.
    given: Option<usize>,
}

impl RecordHead {
    #[inline]
    fn of(segment: &QueueSegment, words: &[u32]) -> Self {
        let word = |i: usize| words.get(i).copied().unwrap_or(0);
        let inline = words.len() > task_record::IN_FUTURE_WORDS;
        Self {
            ptr: ShmPtr::new(segment.id(), u64::from(word(task_record::FUTURE))),
            notify: word(task_record::NOTIFY),
            token: word(task_record::TOKEN),
            inline,
            given: task_record::copy_space(word(task_record::LENGTHS)).filter(|_| inline),
        }
    }
}

/// Runs a record's task, its output into `scratch.output`: the pool that
/// ran it, the handler's reply and the future if it was attached, or `None`
/// when the task cannot run (counted in `stats`).
#[inline]
fn run_task<'s>(
    segment: &'s QueueSegment,
    words: &[u32],
    head: RecordHead,
    registry: &Registry,
    stats: &WorkerStats,
    scratch: &mut Scratch,
) -> Option<(Option<usize>, HandlerReply, Option<FutureShm<'s>>)> {
    let context = TaskContext::of(segment);
    // An inline task whose record gives its copy space runs before the
    // future is looked at: answered with no output, it never is.
    let mut attached = None;
    let output_len = match head.given {
        Some(copy_space) => copy_space,
        None => match segment.future(head.ptr) {
            Ok(future) => attached.insert(future).copy_space_size() as usize,
            Err(_) => {
                bump(&stats.bad_pointers);
                return None;
            }
        },
    };
    scratch.output.resize(output_len, 0);
    let (pool, reply) = match (head.inline, &attached) {
        (true, _) => run_inline_task(
            &context,
            words,
            registry,
            &mut scratch.input,
            &mut scratch.output,
        ),
        (false, Some(future)) => {
            match run_in_future(segment, future, &context, registry, scratch) {
                Some(ran) => ran,
                None => {
                    bump(&stats.double_completions);
                    return None;
                }
            }
        }
        // Not reached: only inline records give a copy space, so the
        // future of any other was attached above.
        (false, None) => {
            bump(&stats.bad_pointers);
            return None;
        }
    };
    Some((pool, reply, attached))
}

/// Tells a completed future's submitter through its notify word, if it
/// gave one, and counts the task.
#[inline]
fn notify_and_count(
    segment: &QueueSegment,
    head: RecordHead,
    future: &FutureShm<'_>,
    pool: Option<usize>,
    succeeded: bool,
    stats: &WorkerStats,
) {
    if head.notify != 0 {
        // What the kernel reads once it sees the word: the header, and the
        // output after it.
        let read_next = FUTURE_COPY_SPACE_OFFSET + future.output().map_or(0, <[u8]>::len);
        if let Ok(at) = segment.resolve(head.ptr, read_next) {
            demote_lines(at, read_next);
        }
    }
    // After completing: a kernel that sees the word may reuse the future.
    let notified = head.notify == 0
        || notify_submitter(
            segment,
            head.notify,
            notify_word::answer(head.token, succeeded, false),
        );
    bump(&stats.completed);
    stats.count_pool(pool, succeeded);
    if !succeeded {
        bump(&stats.failed);
    }
    if !notified {
        bump(&stats.bad_pointers);
    }
}

/// Answers an inline task through its submitter's notify word alone when
/// there is nothing for the future to carry: return code 0, no output (the
/// kernel then reads no output, and it polls the word, never the flags). A
/// word outside the segment answers nothing: the future is completed then.
fn answer_without_future(
    segment: &QueueSegment,
    notify: u32,
    token: u32,
    reply: &HandlerReply,
) -> bool {
    notify != 0
        && reply.return_code == 0
        && reply.output_len == 0
        && notify_submitter(segment, notify, notify_word::answer(token, true, true))
}

/// Runs the task a future holds: its payload block's for a pointer future,
/// else its copy space's input (copied out first: the output overwrites
/// it). None when someone had completed the future already.
fn run_in_future(
    segment: &QueueSegment,
    future: &FutureShm<'_>,
    context: &TaskContext<'_>,
    registry: &Registry,
    scratch: &mut Scratch,
) -> Option<(Option<usize>, HandlerReply)> {
    if let Some(payload) = future.payload() {
        return Some(run_pointer_task(
            segment,
            payload,
            registry,
            &mut scratch.output,
        ));
    }
    // SAFETY: this worker popped the future, so it is its single completer;
    // the slice is dropped before completing.
    match unsafe { future.input() } {
        Ok(input) => {
            scratch.input.clear();
            scratch.input.extend_from_slice(input);
            Some(registry.dispatch_indexed(context, &scratch.input, &mut scratch.output))
        }
        Err(FutureError::AlreadyComplete) => None,
        Err(_) => Some((None, HandlerReply::code(RC_BAD_TASK))),
    }
}

/// Runs the task of a pointer future, whose bytes lie in the payload block
/// (the pool's dense index with the reply, as [`Registry::dispatch_indexed`]).
fn run_pointer_task(
    segment: &QueueSegment,
    payload: ShmPtr<u8>,
    registry: &Registry,
    output: &mut [u8],
) -> (Option<usize>, HandlerReply) {
    let Ok(header_at) = segment.resolve(payload, TASK_HEADER_BYTES) else {
        return (None, HandlerReply::code(RC_BAD_TASK));
    };
    // SAFETY: resolve checked the header's bytes lie in the segment; the
    // submitter wrote them before publishing the future (queue Release/Acquire)
    // and leaves them alone until completion.
    let header = unsafe { std::slice::from_raw_parts(header_at, TASK_HEADER_BYTES) };
    let Some(header) = TaskHeader::read(header) else {
        return (None, HandlerReply::code(RC_BAD_TASK));
    };
    let total = TASK_HEADER_BYTES + header.args_len as usize;
    let Ok(at) = segment.resolve(payload, total) else {
        return (None, HandlerReply::code(RC_BAD_TASK));
    };
    // SAFETY: as above, for the whole task (resolve checked the length).
    let bytes = unsafe { std::slice::from_raw_parts(at, total) };
    if decode_task(bytes).is_none() {
        return (None, HandlerReply::code(RC_BAD_TASK));
    }
    registry.dispatch_indexed(&TaskContext::of(segment), bytes, output)
}

/// Completes `future` with `reply`, copying the output into the copy space.
/// Returns whether it succeeded (return code 0), or None when someone had
/// already completed it.
fn complete(future: &FutureShm<'_>, reply: HandlerReply, output: &[u8]) -> Option<bool> {
    // SAFETY: this worker popped the future: the single completer, holding no
    // input slice any more.
    let result = unsafe {
        future.complete(reply.return_code, |buf: &mut [u8]| {
            // A length past the copy space makes `complete` store
            // RC_OUTPUT_TOO_LARGE with no output.
            if let (Some(src), Some(dst)) = (
                output.get(..reply.output_len),
                buf.get_mut(..reply.output_len),
            ) {
                dst.copy_from_slice(src);
            }
            Ok::<usize, std::convert::Infallible>(reply.output_len)
        })
    };
    match result {
        Ok(()) => Some(reply.return_code == 0),
        Err(FillError::Future(FutureError::AlreadyComplete)) => None,
        Err(_) => Some(false),
    }
}

/// Stores `answer` (layout.rs `notify_word`) at the submitter's notify word,
/// segment offset `at` (nonzero), which a kernel thread polls instead of the
/// future's flags; its warp's neighbours keep their words in the same cache
/// line (tandem/runtime/cpu_route.h, rt_notified). False when `at` names no
/// word of the segment.
fn notify_submitter(segment: &QueueSegment, at: u32, answer: u32) -> bool {
    let word = segment
        .resolve(ShmPtr::new(segment.id(), u64::from(at)), size_of::<u32>())
        .ok()
        .filter(|w| w.align_offset(align_of::<AtomicU32>()) == 0);
    let Some(word) = word else {
        return false;
    };
    // SAFETY: resolve checked the 4 bytes lie in the segment, alignment is
    // checked; the word is only ever accessed atomically (the kernel polls it
    // with atomic loads).
    let word = unsafe { AtomicU32::from_ptr(word.cast()) };
    // Release: pairs with the kernel's acquire after it sees the token, so
    // the completion (flags, return code, output) is visible to it.
    word.store(answer, Ordering::Release);
    demote_lines(word.as_ptr().cast(), size_of::<u32>());
    true
}

#[cfg(test)]
mod tests {
    use super::{assignment, shares_cores, split_among_devices, Backend, LanePace, QUIET_AFTER};

    #[test]
    fn a_quiet_lane_is_passed_over_only_while_the_worker_is_busy() {
        let mut pace = LanePace::default();
        for _ in 0..QUIET_AFTER - 1 {
            pace.polled(false);
        }
        assert!((0..16).all(|sweep| pace.due(true, sweep)), "not quiet yet");
        pace.polled(false);
        let due: Vec<u64> = (0..16).filter(|&sweep| pace.due(true, sweep)).collect();
        assert_eq!(due, [0, 4, 8, 12], "quiet: every QUIET_EVERY-th busy sweep");
        assert!(
            (0..16).all(|sweep| pace.due(false, sweep)),
            "idle: every sweep"
        );
        pace.polled(true);
        assert!(
            (0..16).all(|sweep| pace.due(true, sweep)),
            "a record wakes it"
        );
    }

    #[test]
    fn workers_yield_only_where_cores_are_short() {
        // A GPU's submitters need a core beside the workers.
        assert!(!shares_cores(Backend::Cuda, 4, 16));
        assert!(!shares_cores(Backend::Cuda, 4, 5));
        assert!(shares_cores(Backend::Cuda, 4, 4));
        // The CPU device's kernel threads need half of them.
        assert!(!shares_cores(Backend::Host, 4, 16));
        assert!(!shares_cores(Backend::Host, 4, 8));
        assert!(shares_cores(Backend::Host, 4, 7));
        assert!(shares_cores(Backend::Host, 4, 2));
        assert!(shares_cores(Backend::Host, 1, 1));
    }

    #[test]
    fn every_lane_has_a_poller_and_only_unshared_ones_are_sole() {
        // Fewer workers than lanes: each lane to one worker, all sole.
        assert_eq!(
            assignment(5, 2),
            vec![
                vec![(0, true), (2, true), (4, true)],
                vec![(1, true), (3, true)]
            ]
        );
        // More workers than lanes: the extra ones share, and what they share
        // is no longer sole.
        assert_eq!(
            assignment(2, 3),
            vec![vec![(0, false)], vec![(1, true)], vec![(0, false)]]
        );
        assert_eq!(assignment(0, 2), vec![Vec::new(), Vec::new()]);
    }

    #[test]
    fn workers_split_evenly_among_devices_and_every_device_gets_one() {
        assert_eq!(split_among_devices(8, 2), vec![4, 4]);
        assert_eq!(split_among_devices(7, 3), vec![3, 2, 2]);
        assert_eq!(split_among_devices(2, 4), vec![1, 1, 1, 1]);
        assert_eq!(split_among_devices(4, 0), Vec::<usize>::new());
    }
}
