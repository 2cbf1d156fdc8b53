//! The status block a runtime publishes in its CPU segment, and
//! `tandem status`'s reader of it.
//!
//! The block is host-only (no kernel reads it, so no C++ mirror) and lives
//! in the CPU segment's header page, at `STATUS_BLOCK_OFFSET`, after the
//! [`SegmentHeader`] (asserted below). The runtime writes its static part
//! (configuration, pools, segments) before it publishes the segment, and the
//! heartbeat thread refreshes the counters every `STATUS_PERIOD` (100 ms): nothing
//! on a worker's path beyond the per-pool counters the workers keep anyway,
//! each in its own lines.
//!
//! A reader never sees a torn snapshot: the heartbeat thread is the block's
//! one writer (the runtime's own setup wrote it before the thread started),
//! and every write is a sequence lock (`StatusBlock::seq`) around
//! `Relaxed` atomic stores; a reader that finds the sequence odd, or changed
//! across its reads, reads again (see `StatusBlock::write` and
//! `StatusBlock::read` for the orderings). Every field is an atomic, so a
//! racing read is no data race, only a retry.

use std::sync::atomic::{fence, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tandem_hal::Backend;
use tandem_metrics::HistogramSnapshot;
use tandem_process::{ProcessIdentity, ProcessState};
use tandem_shm_core::{Priority, Segment};

use crate::client_table::{ClientState, ClientTable};
use crate::config::Config;
use crate::janitor::Reclaimed;
use crate::layout::{
    runtime_state, segment_kind, SegmentHeader, SEGMENT_HEADER_RESERVED, SEGMENT_MAGIC,
    SEGMENT_VERSION,
};
use crate::registry::Registry;
use crate::segment::QueueSegment;
use crate::worker::WorkerStats;

/// Where the status block lies in the CPU segment's header page.
pub(crate) const STATUS_BLOCK_OFFSET: usize = 2048;
/// [`StatusBlock::magic`] once the block is written ("TNDMSTAT").
pub(crate) const STATUS_MAGIC: u64 = 0x544e_444d_5354_4154;
/// [`StatusBlock::version`]; bumped on any change to the block's layout or
/// to what a word means (2: the reserved words of the block and of each
/// segment's line hold `gpu_lanes` and the segment's lanes; 3: each
/// segment's line counts its workers and the records they took; 4: the
/// client slots the janitor took back, at the end; 5: each segment's line
/// counts its failed tasks and its GPU services' tasks).
pub(crate) const STATUS_VERSION: u32 = 5;
/// Segments the block lists (the CPU one, then the first devices').
pub const MAX_STATUS_SEGMENTS: usize = 9;
/// Pools the block lists one by one (by the registry's dense index); the
/// rest are summed in [`StatusSnapshot::other`].
pub const MAX_STATUS_POOLS: usize = 16;
/// Bytes of a pool's name kept in the block (UTF-8, cut at a character
/// boundary, zero-padded).
pub(crate) const POOL_NAME_BYTES: usize = 24;
/// How often the heartbeat thread refreshes the block.
pub(crate) const STATUS_PERIOD: Duration = Duration::from_millis(100);
/// How often the runtime logs its throughput (at info, when tasks were
/// completed since the last time).
pub(crate) const THROUGHPUT_LOG_PERIOD: Duration = Duration::from_secs(10);
/// [`StatusBlock::clients_attached`] of a segment without a client table
/// (and before the first refresh).
pub(crate) const CLIENTS_UNKNOWN: u32 = u32::MAX;

/// One segment's line of the block.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct StatusSegment {
    /// A [`segment_kind`] value.
    pub kind: AtomicU32,
    /// The device it serves; -1 for the CPU segment.
    pub device_ordinal: AtomicI32,
    /// Where its pages were found; -1 if unknown.
    pub numa_node: AtomicI32,
    /// Lanes of its queue: device segments of a GPU have `gpu_lanes`, the
    /// others `lanes` ([`Config::device_lanes`]).
    pub lanes: AtomicU32,
    /// Its length.
    pub bytes: AtomicU64,
    /// Records waiting in its lanes (both priorities). Kernels take their
    /// tickets in device memory, so a device segment counts only what host
    /// threads pushed.
    pub queued: AtomicU64,
    /// Workers polling its lanes: every worker for the CPU segment, a
    /// device's own workers for its segment.
    pub workers: AtomicU32,
    pub reserved: AtomicU32,
    /// Records the workers took from its lanes (tasks sent to the CPU
    /// through it).
    pub tasks: AtomicU64,
    /// Of those, tasks that completed with a nonzero return code.
    pub failed: AtomicU64,
    /// The segment header's counts of its GPU services
    /// ([`SegmentHeader::service_kernel_tasks`] and the four after it),
    /// copied at every refresh; 0 for the CPU segment.
    pub service_kernel_tasks: AtomicU64,
    pub service_kernel_failed: AtomicU64,
    pub service_host_tasks: AtomicU64,
    pub service_host_failed: AtomicU64,
    pub service_skipped: AtomicU64,
}

/// One pool's line of the block.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct StatusPool {
    /// The pool id tasks name.
    pub id: AtomicU32,
    pub reserved: AtomicU32,
    /// Its name, [`POOL_NAME_BYTES`] of UTF-8, little-endian in the words.
    pub name: [AtomicU64; POOL_NAME_BYTES / 8],
    /// Its tasks the workers completed, and of those, failed.
    pub completed: AtomicU64,
    pub failed: AtomicU64,
}

/// The status block, at [`STATUS_BLOCK_OFFSET`] of the CPU segment.
#[repr(C, align(64))]
#[derive(Debug)]
pub(crate) struct StatusBlock {
    /// [`STATUS_MAGIC`] once written (`Release` after the first write).
    pub magic: AtomicU64,
    /// [`STATUS_VERSION`].
    pub version: AtomicU32,
    /// 0 host (the CPU device), 1 CUDA, 2 HIP.
    pub backend: AtomicU32,
    /// The sequence lock: odd while the writer is in the middle of a write.
    pub seq: AtomicU64,
    /// The runtime process's start time (clock ticks after boot), which with
    /// [`SegmentHeader::runtime_pid`] names it for good ([`ProcessIdentity`]).
    pub runtime_start_time: AtomicU64,
    /// `workers` as configured, and as running (capped by the cores).
    pub workers_requested: AtomicU32,
    pub workers_effective: AtomicU32,
    /// Workers that completed a task during the last refresh period.
    pub workers_busy: AtomicU32,
    /// The configuration's `lanes`, `queue_depth` and `copy_space` (its
    /// `gpu_lanes` is [`Self::gpu_lanes`]; what each segment has is in its
    /// line).
    pub lanes: AtomicU32,
    pub queue_depth: AtomicU32,
    pub copy_space: AtomicU32,
    /// Host clients attached (client slots in state Attached, counted at
    /// every refresh); [`CLIENTS_UNKNOWN`] before the first.
    pub clients_attached: AtomicU32,
    /// Segments the runtime has (the block lists [`MAX_STATUS_SEGMENTS`]).
    pub segments_total: AtomicU32,
    /// Milliseconds since the runtime started, at the last refresh.
    pub uptime_ms: AtomicU64,
    /// The workers' counters, summed (as [`crate::StatsSnapshot`]).
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    pub bad_pointers: AtomicU64,
    pub double_completions: AtomicU64,
    /// Tasks completed during the last refresh period, and its length.
    pub period_completed: AtomicU64,
    pub period_ms: AtomicU64,
    /// The configuration's segment sizes.
    pub cpu_segment_size: AtomicU64,
    pub gpu_segment_size: AtomicU64,
    /// Pools the registry has (the block lists [`MAX_STATUS_POOLS`]).
    pub pools_total: AtomicU32,
    /// The configuration's `gpu_lanes` (in what was a reserved word, so
    /// the layout stays as it was).
    pub gpu_lanes: AtomicU32,
    /// Tasks of the pools past the list, and tasks no registered pool ran
    /// (unknown pool, malformed task).
    pub other_completed: AtomicU64,
    pub other_failed: AtomicU64,
    /// `segments_total.min(MAX_STATUS_SEGMENTS)` of them are filled.
    pub segments: [StatusSegment; MAX_STATUS_SEGMENTS],
    /// `pools_total.min(MAX_STATUS_POOLS)` of them are filled.
    pub pools: [StatusPool; MAX_STATUS_POOLS],
    /// Client slots the janitor took back since the start: their client
    /// gone, or detached with futures outstanding.
    pub clients_reclaimed_gone: AtomicU64,
    pub clients_reclaimed_detached: AtomicU64,
}

static_assertions::assert_eq_size!(StatusSegment, [u8; 96]);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusSegment, kind), 0);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusSegment, device_ordinal), 4);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusSegment, numa_node), 8);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusSegment, lanes), 12);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusSegment, bytes), 16);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusSegment, queued), 24);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusSegment, workers), 32);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusSegment, tasks), 40);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusSegment, failed), 48);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusSegment, service_skipped), 88);
static_assertions::assert_eq_size!(StatusPool, [u8; 48]);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusPool, id), 0);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusPool, name), 8);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusPool, completed), 32);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusPool, failed), 40);
static_assertions::assert_eq_size!(StatusBlock, [u8; 1856]);
static_assertions::const_assert_eq!(core::mem::align_of::<StatusBlock>(), 64);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, magic), 0);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, version), 8);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, backend), 12);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, seq), 16);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, runtime_start_time), 24);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, workers_requested), 32);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, workers_effective), 36);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, workers_busy), 40);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, lanes), 44);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, queue_depth), 48);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, copy_space), 52);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, clients_attached), 56);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, segments_total), 60);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, uptime_ms), 64);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, completed), 72);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, failed), 80);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, bad_pointers), 88);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, double_completions), 96);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, period_completed), 104);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, period_ms), 112);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, cpu_segment_size), 120);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, gpu_segment_size), 128);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, pools_total), 136);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, gpu_lanes), 140);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, other_completed), 144);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, other_failed), 152);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, segments), 160);
static_assertions::const_assert_eq!(memoffset::offset_of!(StatusBlock, pools), 1024);
static_assertions::const_assert_eq!(
    memoffset::offset_of!(StatusBlock, clients_reclaimed_gone),
    1792
);
static_assertions::const_assert_eq!(
    memoffset::offset_of!(StatusBlock, clients_reclaimed_detached),
    1800
);
// The block lies in the header page, after the segment header, aligned.
static_assertions::const_assert!(core::mem::size_of::<SegmentHeader>() <= STATUS_BLOCK_OFFSET);
static_assertions::const_assert!(
    STATUS_BLOCK_OFFSET + core::mem::size_of::<StatusBlock>() <= SEGMENT_HEADER_RESERVED
);
static_assertions::const_assert_eq!(STATUS_BLOCK_OFFSET % 64, 0);

/// Relaxed stores and loads inside the sequence lock: the lock's fences
/// order them.
const R: Ordering = Ordering::Relaxed;

fn backend_code(backend: Backend) -> u32 {
    match backend {
        Backend::Host => 0,
        Backend::Cuda => 1,
        Backend::Hip => 2,
    }
}

fn backend_name(code: u32) -> String {
    match code {
        0 => "host".into(),
        1 => "cuda".into(),
        2 => "hip".into(),
        other => format!("unknown ({other})"),
    }
}

impl StatusBlock {
    /// The block of a CPU segment mapped at `base` with `len` bytes.
    ///
    /// # Safety
    /// `base` must be the page-aligned start of a mapping of `len` bytes
    /// that outlives `'a`.
    unsafe fn at<'a>(base: *mut u8, len: usize) -> Option<&'a Self> {
        if len < SEGMENT_HEADER_RESERVED {
            return None;
        }
        // SAFETY: the block lies inside the header page (asserted above),
        // which the mapping holds (checked), at a 64-aligned offset of a
        // page-aligned base; every field is an atomic, valid for any bytes
        // (a fresh segment's are zero), and only ever accessed atomically.
        Some(unsafe { &*base.add(STATUS_BLOCK_OFFSET).cast::<Self>() })
    }

    /// Runs `f`, the block's writer, inside the sequence lock. The caller is
    /// the block's one writer at a time (the runtime's setup, then its
    /// heartbeat thread, which the setup spawns afterwards).
    fn write(&self, f: impl FnOnce(&Self)) {
        // Relaxed: only this writer stores the sequence.
        let seq = self.seq.load(R);
        self.seq.store(seq.wrapping_add(1), R);
        // Release fence: a reader whose loads see any store of `f` (after
        // the fence) and who then fences with Acquire also sees the odd
        // sequence above, so its second read of `seq` differs from its first.
        fence(Ordering::Release);
        f(self);
        // Release: a reader that acquires this even value sees all of `f`.
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// Reads with `f` until a read is not torn (the sequence even and
    /// unchanged across it); None after `tries` torn reads.
    fn read<T>(&self, tries: u32, f: impl Fn(&Self) -> T) -> Option<T> {
        for _ in 0..tries {
            // Acquire pairs with the writer's closing Release store.
            let before = self.seq.load(Ordering::Acquire);
            if before % 2 == 0 {
                let value = f(self);
                // Acquire fence pairs with the writer's Release fence (see
                // `write`): a load in `f` that saw a newer write makes the
                // load below see the newer sequence.
                fence(Ordering::Acquire);
                if self.seq.load(R) == before {
                    return Some(value);
                }
            }
            std::thread::yield_now();
        }
        None
    }
}

/// The CPU segment's block.
fn block_of(segment: &QueueSegment) -> &StatusBlock {
    // SAFETY: a QueueSegment's base is its page-aligned mapping of `len()`
    // bytes, which lives as long as the borrow of `segment`; `init` refused
    // anything shorter than the header page.
    unsafe { StatusBlock::at(segment.base(), segment.len()) }
        .expect("a queue segment holds its header page")
}

/// The runtime's side: writes the block and refreshes it from the heartbeat
/// thread ([`tick`](Self::tick)), and logs the throughput.
pub(crate) struct StatusPublisher {
    cpu: Arc<QueueSegment>,
    segments: Vec<Arc<QueueSegment>>,
    workers: Vec<Arc<WorkerStats>>,
    /// Pools in the registry (dense indices `0..pools`).
    pools: usize,
    started: Instant,
    last_refresh: Instant,
    /// Each worker's completed count at the last refresh.
    last_worker_completed: Vec<u64>,
    last_log: Instant,
    last_log_completed: u64,
}

impl StatusPublisher {
    /// Writes the static part of the block (before the CPU segment is
    /// published, so nobody reads it yet) and publishes its magic.
    /// `segments`: the CPU segment first, then the devices'.
    pub(crate) fn new(
        backend: Backend,
        config: &Config,
        workers_effective: usize,
        registry: &Registry,
        segments: Vec<Arc<QueueSegment>>,
        segment_workers: &[usize],
        workers: Vec<Arc<WorkerStats>>,
    ) -> Self {
        let cpu = Arc::clone(&segments[0]);
        let block = block_of(&cpu);
        let mut pools: Vec<_> = registry.pools();
        pools.sort_by_key(|p| registry.pool_index(p.id()));
        let clamp_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        block.write(|b| {
            b.version.store(STATUS_VERSION, R);
            b.backend.store(backend_code(backend), R);
            b.runtime_start_time
                .store(ProcessIdentity::current().start_time, R);
            b.workers_requested
                .store(clamp_u32(config.workers_for(segments.len() - 1)), R);
            b.workers_effective.store(clamp_u32(workers_effective), R);
            b.lanes.store(config.lanes, R);
            b.gpu_lanes.store(config.gpu_lanes, R);
            b.queue_depth.store(config.queue_depth, R);
            b.copy_space.store(config.copy_space, R);
            b.clients_attached.store(CLIENTS_UNKNOWN, R);
            b.cpu_segment_size.store(config.cpu_segment_size as u64, R);
            b.gpu_segment_size.store(config.gpu_segment_size as u64, R);
            b.segments_total.store(clamp_u32(segments.len()), R);
            for ((line, segment), &count) in b.segments.iter().zip(&segments).zip(segment_workers) {
                line.workers.store(clamp_u32(count), R);
                let h = segment.header();
                line.kind.store(h.kind, R);
                line.device_ordinal.store(h.device_ordinal, R);
                // Relaxed: written once before the segment was published.
                line.numa_node.store(h.numa_node.load(R), R);
                line.lanes.store(segment.queue().num_lanes(), R);
                line.bytes.store(segment.len() as u64, R);
            }
            b.pools_total.store(clamp_u32(pools.len()), R);
            for (line, pool) in b.pools.iter().zip(&pools) {
                line.id.store(pool.id(), R);
                let mut name = [0u8; POOL_NAME_BYTES];
                let mut cut = pool.name().len().min(POOL_NAME_BYTES);
                while !pool.name().is_char_boundary(cut) {
                    cut -= 1;
                }
                name[..cut].copy_from_slice(&pool.name().as_bytes()[..cut]);
                for (word, bytes) in line.name.iter().zip(name.chunks_exact(8)) {
                    let bytes: [u8; 8] = bytes.try_into().unwrap_or_default();
                    word.store(u64::from_le_bytes(bytes), R);
                }
            }
        });
        // Release: a reader that sees the magic with Acquire sees the
        // version it checks (the sequence lock covers the rest).
        block.magic.store(STATUS_MAGIC, Ordering::Release);
        let now = Instant::now();
        Self {
            cpu,
            last_worker_completed: vec![0; workers.len()],
            segments,
            workers,
            pools: registry.pools().len(),
            started: now,
            last_refresh: now,
            last_log: now,
            last_log_completed: 0,
        }
    }

    /// Called by the heartbeat thread every beat: refreshes the block every
    /// [`STATUS_PERIOD`] and logs the throughput every
    /// [`THROUGHPUT_LOG_PERIOD`]. `reclaimed`: what the janitor took back
    /// (None without a client table).
    pub(crate) fn tick(&mut self, reclaimed: Option<Reclaimed>) {
        let now = Instant::now();
        let period = now.duration_since(self.last_refresh);
        if period < STATUS_PERIOD {
            return;
        }
        self.last_refresh = now;
        let mut busy = 0u32;
        let mut completed = 0u64;
        for (worker, last) in self.workers.iter().zip(&mut self.last_worker_completed) {
            let now_completed = worker.completed();
            busy += u32::from(now_completed != *last);
            completed += now_completed - *last;
            *last = now_completed;
        }
        let totals = crate::worker::StatsSnapshot::sum(self.workers.iter().map(|w| &**w));
        let pool_sums = |index: Option<usize>| {
            self.workers
                .iter()
                .map(|w| w.pool_counts(index))
                .fold((0, 0), |(c, f), (wc, wf)| (c + wc, f + wf))
        };
        let (mut other_completed, mut other_failed) = pool_sums(None);
        for index in MAX_STATUS_POOLS..self.pools {
            let (c, f) = pool_sums(Some(index));
            other_completed += c;
            other_failed += f;
        }
        if let Some(table) = self.cpu.clients() {
            table.refresh_heap_figures();
        }
        let block = block_of(&self.cpu);
        block.write(|b| {
            b.uptime_ms
                .store(now.duration_since(self.started).as_millis() as u64, R);
            b.workers_busy.store(busy, R);
            b.completed.store(totals.completed, R);
            b.failed.store(totals.failed, R);
            b.bad_pointers.store(totals.bad_pointers, R);
            b.double_completions.store(totals.double_completions, R);
            b.period_completed.store(completed, R);
            b.period_ms.store(period.as_millis() as u64, R);
            b.other_completed.store(other_completed, R);
            b.other_failed.store(other_failed, R);
            for (index, line) in b.pools.iter().enumerate().take(self.pools) {
                let (c, f) = pool_sums(Some(index));
                line.completed.store(c, R);
                line.failed.store(f, R);
            }
            for (slot, (line, segment)) in b.segments.iter().zip(&self.segments).enumerate() {
                line.queued.store(queued(segment), R);
                let (tasks, failed) = self
                    .workers
                    .iter()
                    .map(|w| w.segment_tasks(slot))
                    .fold((0, 0), |(t, f), (wt, wf)| (t + wt, f + wf));
                line.tasks.store(tasks, R);
                line.failed.store(failed, R);
                let h = segment.header();
                // Relaxed: statistics the services add to now and then.
                for (to, from) in [
                    (&line.service_kernel_tasks, &h.service_kernel_tasks),
                    (&line.service_kernel_failed, &h.service_kernel_failed),
                    (&line.service_host_tasks, &h.service_host_tasks),
                    (&line.service_host_failed, &h.service_host_failed),
                    (&line.service_skipped, &h.service_skipped),
                ] {
                    to.store(from.load(R), R);
                }
            }
            let reclaimed = reclaimed.unwrap_or_default();
            b.clients_reclaimed_gone.store(reclaimed.gone, R);
            b.clients_reclaimed_detached.store(reclaimed.detached, R);
            if let Some(table) = self.cpu.clients() {
                let attached = table
                    .attached()
                    .iter()
                    .filter(|c| c.state == crate::client_table::ClientState::Attached)
                    .count();
                b.clients_attached
                    .store(u32::try_from(attached).unwrap_or(u32::MAX - 1), R);
            }
        });
        let since_log = now.duration_since(self.last_log);
        if since_log >= THROUGHPUT_LOG_PERIOD {
            let done = totals.completed - self.last_log_completed;
            if done > 0 {
                tracing::info!(
                    tasks = done,
                    per_second = done as f64 / since_log.as_secs_f64(),
                    failed = totals.failed,
                    workers_busy = busy,
                    "throughput over the last {:.0} s",
                    since_log.as_secs_f64()
                );
            }
            self.last_log = now;
            self.last_log_completed = totals.completed;
        }
    }
}

/// Records waiting in every lane of `segment`, both priorities (estimates).
fn queued(segment: &QueueSegment) -> u64 {
    let queue = segment.queue();
    (0..queue.num_lanes())
        .flat_map(|lane| [(lane, Priority::High), (lane, Priority::Low)])
        .map(|(lane, priority)| queue.lane_len(lane, priority).unwrap_or(0) as u64)
        .sum()
}

/// `tandem status`'s view of a runtime: what its CPU segment's status block
/// said at one instant. Its JSON form (serde) is the schema docs/status.md
/// documents; fields are only ever added.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct StatusSnapshot {
    /// The CPU segment's name (in `/dev/shm`).
    pub segment: String,
    /// The runtime's process and state.
    pub runtime: RuntimeStatus,
    /// The configuration it runs with.
    pub config: ConfigStatus,
    /// Its worker threads.
    pub workers: WorkersStatus,
    /// Its workers' task counters, summed.
    pub tasks: TasksStatus,
    /// Pools listed one by one (at most [`MAX_STATUS_POOLS`]), by
    /// registration order.
    pub pools: Vec<PoolStatus>,
    /// Tasks of pools past the list, and tasks no registered pool ran.
    pub other: TaskCounts,
    /// Host clients attached; `None` (JSON `null`): not counted by this
    /// runtime.
    pub clients_attached: Option<u32>,
    /// The segments, CPU first (at most [`MAX_STATUS_SEGMENTS`]).
    pub segments: Vec<SegmentStatus>,
    /// How many segments the runtime has.
    pub segments_total: u32,
    /// The client slots in use (attached, or being set up or taken back),
    /// by slot, each with its heap (its quota); read from the segment's
    /// client table, whose heap figures the heartbeat refreshes. Absent
    /// from the JSON of runtimes from before it (read as empty).
    #[serde(default)]
    pub clients: Vec<ClientStatus>,
    /// Clients over the runtime's life: attached, and taken back. Absent
    /// from the JSON of runtimes from before it (read as zeros).
    #[serde(default)]
    pub client_totals: ClientTotals,
}

/// Host clients since the runtime started.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct ClientTotals {
    /// Clients that attached (claims of a slot).
    pub attached: u64,
    /// Slots the runtime took back from clients whose process was gone.
    pub reclaimed_gone: u64,
    /// Slots it took back from clients that detached with futures
    /// outstanding.
    pub reclaimed_detached: u64,
}

/// A client slot in use and its heap.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ClientStatus {
    /// The slot's index.
    pub slot: u32,
    /// The owner's process id.
    pub pid: u32,
    /// "claiming", "attached", "detaching" or "reclaiming".
    pub state: String,
    /// Futures it holds.
    pub futures: u64,
    /// Bytes of its heap (its quota, `client_heap_bytes`).
    pub heap_bytes: u64,
    /// Bytes of its heap in use (whole blocks).
    pub in_use_bytes: u64,
    /// Bytes of its heap free, at the heartbeat's last look.
    pub free_bytes: u64,
    /// The largest request (in bytes, 16-aligned) its heap could serve
    /// then: below `free_bytes` by more than a block's header when the free
    /// memory lies in pieces between live blocks (fragmented); 0 when none.
    pub largest_request: u64,
    /// Its device queues ([`crate::Client::device_queues`]): segments its
    /// kernels submit through, served by the runtime's workers. Absent from
    /// the JSON of runtimes from before them (read as empty).
    #[serde(default)]
    pub device_queues: Vec<ClientDeviceQueueStatus>,
}

/// A client's device queues, as its slot's entry says.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ClientDeviceQueueStatus {
    /// The device ordinal.
    pub device: u32,
    /// "requested", "serving", "refused" or "releasing" (or "filling").
    pub state: String,
    /// Lanes of its queue.
    pub lanes: u32,
    /// Records the workers took from its lanes (tasks its kernels sent).
    pub tasks: u64,
    /// Its segment's name in `/dev/shm`.
    pub segment: String,
}

/// The runtime process.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct RuntimeStatus {
    /// Its process id.
    pub pid: u32,
    /// "running", "stopped" (SIGSTOP) or "gone".
    pub process: String,
    /// The segment's state: "starting", "ready" or "stopped".
    pub state: String,
    /// "host" (the CPU device), "cuda" or "hip".
    pub backend: String,
    /// Seconds since it started, at the last refresh.
    pub uptime_s: f64,
}

/// The configuration it runs with.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ConfigStatus {
    /// `workers`, as configured (before the cap to the cores).
    pub workers: u32,
    /// `lanes`: the CPU segment's, and the CPU device's device segments'.
    pub lanes: u32,
    /// `gpu_lanes`: a GPU's device segments' (0 in the JSON of a version
    /// that did not publish it).
    #[serde(default)]
    pub gpu_lanes: u32,
    /// `queue_depth`.
    pub queue_depth: u32,
    /// `copy_space`.
    pub copy_space: u32,
    /// `cpu_segment_size`.
    pub cpu_segment_size: u64,
    /// `gpu_segment_size`.
    pub gpu_segment_size: u64,
}

/// Its workers.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct WorkersStatus {
    /// Running (the configured count, capped by the cores).
    pub running: u32,
    /// Of those, how many completed a task during the last refresh period.
    pub busy: u32,
}

/// The workers' counters, summed.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct TasksStatus {
    /// Tasks completed, failed ones included.
    pub completed: u64,
    /// Tasks completed with a nonzero return code.
    pub failed: u64,
    /// Records naming no future of their segment, skipped.
    pub bad_pointers: u64,
    /// Futures found already complete when a worker took them.
    pub double_completions: u64,
    /// Tasks completed per second over the last refresh period.
    pub per_second: f64,
}

/// Completed and failed tasks.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct TaskCounts {
    /// Tasks completed, failed ones included.
    pub completed: u64,
    /// Tasks completed with a nonzero return code.
    pub failed: u64,
}

/// One pool's counts.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct PoolStatus {
    /// The pool's id.
    pub id: u32,
    /// Its name, as registered (cut to the block's 24 bytes).
    pub name: String,
    /// Its tasks completed, failed ones included.
    pub completed: u64,
    /// Its tasks completed with a nonzero return code.
    pub failed: u64,
}

/// One segment.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct SegmentStatus {
    /// "cpu" or "device".
    pub kind: String,
    /// The device's ordinal; `None` for the CPU segment.
    pub device: Option<u32>,
    /// Where its pages were found; `None` if unknown.
    pub numa_node: Option<u32>,
    /// Its size in bytes.
    pub bytes: u64,
    /// Lanes of its queue (`lanes`, or `gpu_lanes` on a GPU; 0 in the JSON
    /// of a version that did not publish it).
    #[serde(default)]
    pub lanes: u32,
    /// Records waiting in its lanes (a device segment counts only the host's).
    pub queued: u64,
    /// Workers polling its lanes: every worker for the CPU segment, the
    /// device's own for a device segment (0 in the JSON of a version that
    /// did not publish it).
    #[serde(default)]
    pub workers: u32,
    /// Records its workers took from its lanes: tasks sent through it
    /// (0 in the JSON of a version that did not publish it).
    #[serde(default)]
    pub tasks: u64,
    /// Of those, tasks completed with a nonzero return code.
    #[serde(default)]
    pub failed: u64,
    /// What the GPU services on a device segment did (all zero for the CPU
    /// segment, or while none has run).
    #[serde(default)]
    pub gpu_service: ServiceCounts,
}

/// A device segment's GPU services' tasks, summed over every service that
/// ran on it. They lag a busy service by a few thousand tasks a service
/// thread.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct ServiceCounts {
    /// Tasks kernels sent (`rt_send_to_gpu`), run and answered.
    pub kernel_tasks: u64,
    /// Of those, answered with a nonzero return code.
    pub kernel_failed: u64,
    /// Tasks host threads sent ([`crate::Runtime::submit_to_gpu`]), run and
    /// answered.
    pub host_tasks: u64,
    /// Of those, answered with a nonzero return code.
    pub host_failed: u64,
    /// Entries of either route that named no future of the segment
    /// (skipped: nothing could be answered).
    pub skipped: u64,
}

/// Why no status could be read.
#[derive(Debug)]
pub enum StatusError {
    /// The segment could not be opened.
    Open {
        /// The segment's name.
        name: String,
        /// Why it could not be opened.
        error: String,
    },
    /// It is not a published runtime CPU segment of this layout version.
    NotARuntime {
        /// The segment's name.
        name: String,
        /// What it lacks or holds instead.
        why: String,
    },
    /// A runtime's CPU segment not yet published (its magic unwritten):
    /// its runtime is starting, or died while starting.
    NotReady {
        /// The segment's name.
        name: String,
        /// The pid its runtime wrote while setting it up; `None` before it
        /// got that far.
        pid: Option<u32>,
        /// Whether that process is gone.
        gone: bool,
    },
    /// Its runtime publishes no status block of this version (an older or
    /// newer build).
    NoStatus {
        /// The segment's name.
        name: String,
    },
    /// The block kept changing under every read.
    Torn {
        /// The segment's name.
        name: String,
    },
    /// `/dev/shm` holds no live runtime segment; these are left by dead
    /// ones (`tandem clean` removes them).
    NoLiveRuntime {
        /// Names of the stale segments found.
        stale: Vec<String>,
    },
    /// Several live runtimes: one must be named.
    Ambiguous(Vec<String>),
    /// `/dev/shm` could not be listed.
    List(String),
}

impl std::fmt::Display for StatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Open { name, error } => write!(f, "cannot open segment {name}: {error}"),
            Self::NotARuntime { name, why } => {
                write!(
                    f,
                    "segment {name} is not a Tandem runtime's CPU segment: {why}"
                )
            }
            Self::NotReady {
                name,
                pid: Some(pid),
                gone: true,
            } => write!(
                f,
                "segment {name} was never published: its runtime (pid {pid}) died while \
                 starting. `tandem clean` removes it"
            ),
            Self::NotReady {
                name,
                pid: Some(pid),
                gone: false,
            } => write!(
                f,
                "segment {name} is not ready: its runtime (pid {pid}) is still starting; \
                 try again"
            ),
            Self::NotReady { name, pid: None, .. } => write!(
                f,
                "segment {name} is not ready: no runtime has published it (one is starting, \
                 or died while starting)"
            ),
            Self::NoStatus { name } => write!(
                f,
                "the runtime of segment {name} publishes no status of this version (an older or newer build?)"
            ),
            Self::Torn { name } => write!(
                f,
                "the status of segment {name} changed under every read; try again"
            ),
            Self::NoLiveRuntime { stale } if stale.is_empty() => f.write_str(
                "no live Tandem runtime segment in /dev/shm (start one with `tandem run`, \
                 or name one with --segment)",
            ),
            Self::NoLiveRuntime { stale } => write!(
                f,
                "no live Tandem runtime segment in /dev/shm, only {} left by dead processes: \
                 {} (`tandem status --segment NAME` shows what one last published; `tandem \
                 clean` removes them)",
                stale.len(),
                stale.join(", ")
            ),
            Self::Ambiguous(names) => write!(
                f,
                "several live Tandem runtimes; name one with --segment: {}",
                names.join(", ")
            ),
            Self::List(why) => write!(f, "cannot list /dev/shm: {why}"),
        }
    }
}

impl std::error::Error for StatusError {}

/// Reads the status of the runtime whose CPU segment is `name`. Only reads
/// the segment.
pub fn read_status(name: &str) -> Result<StatusSnapshot, StatusError> {
    read_runtime(name).map(|(status, _)| status)
}

/// [`read_status`], with the round trips the host clients timed, summed
/// over their slots (empty without a client table): what the metrics
/// endpoint shows.
pub(crate) fn read_runtime(name: &str) -> Result<(StatusSnapshot, HistogramSnapshot), StatusError> {
    let memory = Segment::open_named(name).map_err(|e| StatusError::Open {
        name: name.into(),
        error: e.to_string(),
    })?;
    let not_runtime = |why: String| StatusError::NotARuntime {
        name: name.into(),
        why,
    };
    let header = runtime_header(&memory, name)?;
    // SAFETY: `memory` is a page-aligned mapping of `len()` bytes that lives
    // until the end of this function, past every use of the block.
    let block = unsafe { StatusBlock::at(memory.as_ptr(), memory.len()) }
        .ok_or_else(|| not_runtime("shorter than its header page".into()))?;
    // Acquire pairs with the publisher's Release of the magic.
    if block.magic.load(Ordering::Acquire) != STATUS_MAGIC
        || block.version.load(R) != STATUS_VERSION
    {
        return Err(StatusError::NoStatus { name: name.into() });
    }
    let pid = header.runtime_pid.load(R);
    // Acquire pairs with the runtime's Release of each state.
    let state = match header.state.load(Ordering::Acquire) {
        runtime_state::STARTING => "starting",
        runtime_state::READY => "ready",
        runtime_state::STOPPED => "stopped",
        _ => "unknown",
    };
    let snapshot = block.read(10_000, |b| snapshot_of(b, name, pid, state));
    let mut snapshot = snapshot.ok_or_else(|| StatusError::Torn { name: name.into() })?;
    let Some(table) = client_table(&memory, header) else {
        return Ok((snapshot, HistogramSnapshot::empty()));
    };
    snapshot.clients = client_statuses(&table);
    snapshot.client_totals.attached = table.claims();
    Ok((snapshot, table.round_trips()))
}

/// What one read of the status block `b` says (the clients are read apart,
/// from the client table).
fn snapshot_of(b: &StatusBlock, name: &str, pid: u32, state: &str) -> StatusSnapshot {
    let period_ms = b.period_ms.load(R);
    let segments_total = b.segments_total.load(R);
    StatusSnapshot {
        segment: name.into(),
        runtime: runtime_status(b, pid, state),
        config: ConfigStatus {
            workers: b.workers_requested.load(R),
            lanes: b.lanes.load(R),
            gpu_lanes: b.gpu_lanes.load(R),
            queue_depth: b.queue_depth.load(R),
            copy_space: b.copy_space.load(R),
            cpu_segment_size: b.cpu_segment_size.load(R),
            gpu_segment_size: b.gpu_segment_size.load(R),
        },
        workers: WorkersStatus {
            running: b.workers_effective.load(R),
            busy: b.workers_busy.load(R),
        },
        tasks: TasksStatus {
            completed: b.completed.load(R),
            failed: b.failed.load(R),
            bad_pointers: b.bad_pointers.load(R),
            double_completions: b.double_completions.load(R),
            per_second: if period_ms == 0 {
                0.0
            } else {
                b.period_completed.load(R) as f64 * 1e3 / period_ms as f64
            },
        },
        pools: pool_statuses(b),
        other: TaskCounts {
            completed: b.other_completed.load(R),
            failed: b.other_failed.load(R),
        },
        clients_attached: Some(b.clients_attached.load(R)).filter(|&n| n != CLIENTS_UNKNOWN),
        segments: segment_statuses(b, segments_total),
        segments_total,
        clients: Vec::new(),
        client_totals: ClientTotals {
            attached: 0,
            reclaimed_gone: b.clients_reclaimed_gone.load(R),
            reclaimed_detached: b.clients_reclaimed_detached.load(R),
        },
    }
}

/// The runtime's part of the status block `b`; `pid` and `state` are its
/// segment header's.
fn runtime_status(b: &StatusBlock, pid: u32, state: &str) -> RuntimeStatus {
    let identity = ProcessIdentity {
        pid,
        start_time: b.runtime_start_time.load(R),
    };
    RuntimeStatus {
        pid,
        process: match identity.state() {
            ProcessState::Running => "running",
            ProcessState::Stopped => "stopped",
            ProcessState::Gone => "gone",
        }
        .into(),
        state: state.into(),
        backend: backend_name(b.backend.load(R)),
        uptime_s: b.uptime_ms.load(R) as f64 / 1e3,
    }
}

/// The pools the status block `b` counts, in its order.
fn pool_statuses(b: &StatusBlock) -> Vec<PoolStatus> {
    let pools_total = b.pools_total.load(R) as usize;
    b.pools
        .iter()
        .take(pools_total)
        .map(|p| {
            let bytes: Vec<u8> = p
                .name
                .iter()
                .flat_map(|w| w.load(R).to_le_bytes())
                .collect();
            let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
            PoolStatus {
                id: p.id.load(R),
                name: String::from_utf8_lossy(&bytes[..end]).into_owned(),
                completed: p.completed.load(R),
                failed: p.failed.load(R),
            }
        })
        .collect()
}

/// The first `total` segments of the status block `b` (as many as it
/// holds).
fn segment_statuses(b: &StatusBlock, total: u32) -> Vec<SegmentStatus> {
    b.segments
        .iter()
        .take(total as usize)
        .map(|s| SegmentStatus {
            kind: match s.kind.load(R) {
                segment_kind::CPU => "cpu".into(),
                segment_kind::DEVICE => "device".into(),
                other => format!("unknown ({other})"),
            },
            device: u32::try_from(s.device_ordinal.load(R)).ok(),
            numa_node: u32::try_from(s.numa_node.load(R)).ok(),
            bytes: s.bytes.load(R),
            lanes: s.lanes.load(R),
            queued: s.queued.load(R),
            workers: s.workers.load(R),
            tasks: s.tasks.load(R),
            failed: s.failed.load(R),
            gpu_service: ServiceCounts {
                kernel_tasks: s.service_kernel_tasks.load(R),
                kernel_failed: s.service_kernel_failed.load(R),
                host_tasks: s.service_host_tasks.load(R),
                host_failed: s.service_host_failed.load(R),
                skipped: s.service_skipped.load(R),
            },
        })
        .collect()
}

/// The client table of the CPU segment `memory` with header `header`;
/// None when it has none (or a malformed one).
fn client_table<'m>(memory: &'m Segment, header: &SegmentHeader) -> Option<ClientTable<'m>> {
    let (offset, bytes) = (header.clients_offset, header.clients_bytes);
    let fits = offset
        .checked_add(bytes)
        .is_some_and(|end| end <= memory.len() as u64);
    if bytes == 0 || !fits || offset % 4096 != 0 {
        return None;
    }
    // SAFETY: the region lies in the mapping (checked), page-aligned (its
    // offset is, and so is the mapping), and the segment is published
    // (`runtime_header` saw its magic with Acquire); only its slots'
    // atomics are read.
    unsafe { ClientTable::attach(memory.as_ptr().add(offset as usize), bytes as usize, offset) }
        .ok()
}

/// The client slots in use in `table`.
fn client_statuses(table: &ClientTable<'_>) -> Vec<ClientStatus> {
    table
        .attached()
        .into_iter()
        .map(|c| ClientStatus {
            slot: c.slot,
            pid: c.pid,
            state: match c.state {
                ClientState::Free => "free",
                ClientState::Claiming => "claiming",
                ClientState::Attached => "attached",
                ClientState::Detaching => "detaching",
                ClientState::Reclaiming => "reclaiming",
            }
            .into(),
            futures: c.futures,
            heap_bytes: table.quota_bytes(),
            in_use_bytes: c.bytes_in_use,
            free_bytes: c.free_bytes,
            largest_request: c.largest_servable_block.saturating_sub(16),
            device_queues: table
                .device_queues(c.slot)
                .into_iter()
                .map(|q| ClientDeviceQueueStatus {
                    device: q.device,
                    state: q.state.as_str().into(),
                    lanes: q.lanes,
                    tasks: q.tasks,
                    segment: q.name.unwrap_or_default(),
                })
                .collect(),
        })
        .collect()
}

/// The published runtime CPU segment header of `memory` (the segment
/// `name`), or why not.
fn runtime_header<'m>(memory: &'m Segment, name: &str) -> Result<&'m SegmentHeader, StatusError> {
    let not_runtime = |why: String| StatusError::NotARuntime {
        name: name.into(),
        why,
    };
    if memory.len() < SEGMENT_HEADER_RESERVED {
        return Err(not_runtime(format!(
            "{} bytes is smaller than a header",
            memory.len()
        )));
    }
    // SAFETY: the mapping holds the header page (checked) and is
    // page-aligned; the header is only read, its live fields atomically,
    // its plain fields after the magic's Acquire below.
    let header = unsafe { &*memory.as_ptr().cast::<SegmentHeader>() };
    // Acquire pairs with the runtime's Release of the magic at publishing.
    let magic = header.magic.load(Ordering::Acquire);
    if magic == 0 {
        // A runtime writes its pid (an atomic) while it sets the segment up,
        // before the magic; zero until then. Its start time is a plain field
        // that may be being written: the pid alone says whether it lives.
        let pid = Some(header.runtime_pid.load(R)).filter(|&pid| pid != 0);
        return Err(StatusError::NotReady {
            name: name.into(),
            pid,
            gone: pid.is_some_and(|pid| ProcessIdentity::of(pid).is_none()),
        });
    }
    if magic != SEGMENT_MAGIC {
        return Err(not_runtime(format!("magic {magic:#x}")));
    }
    if header.version != SEGMENT_VERSION {
        return Err(not_runtime(format!(
            "layout version {} (this build speaks {SEGMENT_VERSION})",
            header.version
        )));
    }
    if header.kind != segment_kind::CPU {
        return Err(not_runtime("a device segment".into()));
    }
    Ok(header)
}

/// The CPU segments in `/dev/shm` whose runtime process is still there and
/// not stopped (state READY or STARTING), sorted by name.
pub fn live_runtime_segments() -> Result<Vec<String>, StatusError> {
    let entries = std::fs::read_dir("/dev/shm").map_err(|e| StatusError::List(e.to_string()))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| is_live_runtime(name))
        .collect();
    names.sort();
    Ok(names)
}

fn is_live_runtime(name: &str) -> bool {
    let Ok(memory) = Segment::open_named(name) else {
        return false;
    };
    let Ok(header) = runtime_header(&memory, name) else {
        return false;
    };
    // Acquire pairs with the runtime's Release of STOPPED.
    if header.state.load(Ordering::Acquire) == runtime_state::STOPPED {
        return false;
    }
    // SAFETY: as in `read_status`; `memory` outlives the block's use.
    let start_time = unsafe { StatusBlock::at(memory.as_ptr(), memory.len()) }
        .filter(|b| b.magic.load(Ordering::Acquire) == STATUS_MAGIC)
        .map(|b| b.runtime_start_time.load(R));
    let pid = header.runtime_pid.load(R);
    match start_time {
        Some(start_time) => ProcessIdentity { pid, start_time }.is_alive(),
        // An older runtime: its pid alone.
        None => ProcessIdentity::of(pid).is_some(),
    }
}

/// The one live runtime segment in `/dev/shm` (what `tandem status` reads
/// when no segment is named), or an error naming the candidates.
pub fn single_live_runtime() -> Result<String, StatusError> {
    let mut names = live_runtime_segments()?;
    match names.len() {
        0 => Err(StatusError::NoLiveRuntime {
            // Only to name them: a listing that fails names none.
            stale: crate::stale::clean_stale_segments(true)
                .map(|found| found.into_iter().map(|s| s.name).collect())
                .unwrap_or_default(),
        }),
        1 => Ok(names.remove(0)),
        _ => Err(StatusError::Ambiguous(names)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    #[test]
    fn no_live_runtime_names_the_stale_segments() {
        let none = StatusError::NoLiveRuntime { stale: vec![] }.to_string();
        assert!(none.contains("tandem run"), "{none}");
        let stale = StatusError::NoLiveRuntime {
            stale: vec!["tandem-12-0".into(), "tandem-13-0".into()],
        }
        .to_string();
        assert!(
            stale.contains("tandem-12-0, tandem-13-0") && stale.contains("`tandem clean`"),
            "{stale}"
        );
    }

    #[test]
    fn a_reader_never_sees_a_torn_write() {
        let memory = Segment::create_anonymous(SEGMENT_HEADER_RESERVED).expect("segment");
        // SAFETY: a fresh page-aligned mapping that outlives the block's use.
        let block = unsafe { StatusBlock::at(memory.as_ptr(), memory.len()) }.expect("block");
        let done = AtomicBool::new(false);
        let mut consistent = 0u64;
        // Every write stores one value in many fields; a torn read would
        // find two values.
        let fields = |b: &StatusBlock| -> Vec<u64> {
            let pools = b.pools.iter().flat_map(|p| [&p.completed, &p.failed]);
            [&b.completed, &b.failed, &b.uptime_ms]
                .into_iter()
                .chain(pools)
                .map(|f| f.load(R))
                .collect()
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..=20_000u64 {
                    block.write(|b| {
                        let pools = b.pools.iter().flat_map(|p| [&p.completed, &p.failed]);
                        for field in [&b.completed, &b.failed, &b.uptime_ms]
                            .into_iter()
                            .chain(pools)
                        {
                            field.store(i, R);
                        }
                    });
                }
                // Relaxed: only ends the reader's loop.
                done.store(true, Ordering::Relaxed);
            });
            while !done.load(Ordering::Relaxed) {
                let values = block.read(u32::MAX, fields).expect("a read succeeds");
                assert!(
                    values.iter().all(|&v| v == values[0]),
                    "torn read: {values:?}"
                );
                consistent += 1;
            }
        });
        assert!(consistent > 0);
        assert_eq!(block.seq.load(R), 40_000, "every write left it even");
    }
}
