//! Worker threads: each polls its share of the (segment, lane) pairs, one
//! task at a time, and completes the futures it takes.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_shm_core::future::FutureShm;
use tandem_shm_core::{FillError, FutureError, LaneCursor, LlRecord, ShmPtr};

use crate::layout::{task_record, TASK_HEADER_BYTES};
use crate::registry::{HandlerReply, Registry};
use crate::segment::QueueSegment;
use crate::task::{decode_task, RC_BAD_TASK};

/// Counters every worker adds to (`Relaxed`: statistics, ordered with nothing).
#[derive(Debug, Default)]
pub struct WorkerStats {
    completed: AtomicU64,
    failed: AtomicU64,
    bad_pointers: AtomicU64,
    double_completions: AtomicU64,
}

/// A copy of the counters.
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

impl WorkerStats {
    /// The current counts.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            completed: self.completed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            bad_pointers: self.bad_pointers.load(Ordering::Relaxed),
            double_completions: self.double_completions.load(Ordering::Relaxed),
        }
    }
}

/// One lane of one segment a worker polls.
#[derive(Clone)]
pub(crate) struct Source {
    pub segment: Arc<QueueSegment>,
    pub lane: u32,
}

/// Splits `sources` among `workers`: worker w gets every source whose index
/// is w modulo the count, so each lane has at least one poller and, with more
/// workers than lanes, extra workers share lanes (the rings are MPMC).
pub(crate) fn assign(sources: &[Source], workers: usize) -> Vec<Vec<Source>> {
    (0..workers)
        .map(|w| {
            let mine: Vec<Source> = sources
                .iter()
                .enumerate()
                .filter(|(i, _)| i % workers == w)
                .map(|(_, s)| s.clone())
                .collect();
            if mine.is_empty() && !sources.is_empty() {
                vec![sources[w % sources.len()].clone()]
            } else {
                mine
            }
        })
        .collect()
}

/// Idle back-off: spin (a completion round trip stays in the microseconds),
/// then yield, then park for short, growing naps. With `share_cores`, it
/// also yields every [`YIELD_EVERY`] sweeps while spinning: when the
/// submitter is a thread on the same core (a host client, or the CPU
/// device's kernel threads), a worker that only spins would hold the core for
/// its whole time slice while the submitter waits to push the next task.
/// Without it (GPU submitters, cores to spare) the worker spins unbroken: a
/// record landing during a yield's system call waits that call out.
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
/// priority ring draining), until `shutdown` is raised and a sweep finds
/// nothing. `share_cores`: submitters may need this worker's core while it
/// spins (see [`IdleBackoff`]).
pub(crate) fn run(
    sources: Vec<Source>,
    registry: Arc<Registry>,
    stats: Arc<WorkerStats>,
    shutdown: Arc<AtomicBool>,
    share_cores: bool,
) {
    // A cursor per source: one shared cursor counts pops of every lane, so
    // with an even number of sources its every-8th low-first pop can always
    // land on the same (perhaps empty) lane and starve another's low ring.
    let mut cursors = vec![LaneCursor::default(); sources.len()];
    let mut backoff = IdleBackoff::new(share_cores);
    let mut scratch = Scratch::default();
    loop {
        let mut found = false;
        for (source, cursor) in sources.iter().zip(&mut cursors) {
            // A lane index from our own assignment always exists.
            if let Ok(Some((_, record))) = cursor.pop(source.segment.queue(), source.lane) {
                process(&source.segment, record, &registry, &stats, &mut scratch);
                found = true;
            }
        }
        if found {
            backoff.busy();
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
/// gathered into `args`; RC_BAD_TASK when the words do not make one.
fn run_inline_task(
    words: &[u32],
    registry: &Registry,
    args: &mut Vec<u8>,
    out: &mut [u8],
) -> HandlerReply {
    let (Some(&pool), Some(&method), Some(&args_len), Some(arg_words)) = (
        words.get(task_record::POOL),
        words.get(task_record::METHOD),
        words.get(task_record::ARGS_LEN),
        words.get(task_record::ARGS..),
    ) else {
        return HandlerReply::code(RC_BAD_TASK);
    };
    let args_len = args_len as usize;
    if arg_words.len() != args_len.div_ceil(4) {
        return HandlerReply::code(RC_BAD_TASK);
    }
    args.clear();
    args.extend(
        arg_words
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .take(args_len),
    );
    registry.call(pool, method, args, out)
}

/// Runs the task of one lane record and completes its future.
fn process(
    segment: &QueueSegment,
    record: LlRecord,
    registry: &Registry,
    stats: &WorkerStats,
    scratch: &mut Scratch,
) {
    let words = record.words();
    let ptr = ShmPtr::new(
        segment.id(),
        u64::from(words.get(task_record::FUTURE).copied().unwrap_or(0)),
    );
    let Ok(future) = segment.future(ptr) else {
        stats.bad_pointers.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let capacity = future.copy_space_size() as usize;
    scratch.output.resize(capacity, 0);
    let reply = if words.len() > task_record::IN_FUTURE_WORDS {
        // SAFETY: the record's submitter does not touch the future until it
        // sees it answered (which we do after completing it), and this worker
        // popped the record: nobody else uses the future meanwhile.
        unsafe { future.reset() };
        run_inline_task(words, registry, &mut scratch.input, &mut scratch.output)
    } else {
        match future.payload() {
            Some(payload) => run_pointer_task(segment, payload, registry, &mut scratch.output),
            None => {
                // SAFETY: this worker popped the future, so it is its single
                // completer; the slice is dropped before completing.
                match unsafe { future.input() } {
                    Ok(input) => {
                        scratch.input.clear();
                        scratch.input.extend_from_slice(input);
                        registry.dispatch(&scratch.input, &mut scratch.output)
                    }
                    Err(FutureError::AlreadyComplete) => {
                        stats.double_completions.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Err(_) => HandlerReply::code(RC_BAD_TASK),
                }
            }
        }
    };
    if complete(&future, reply, &scratch.output, stats) {
        let notify = words.get(task_record::NOTIFY).copied().unwrap_or(0);
        let token = words.get(task_record::TOKEN).copied().unwrap_or(0);
        notify_submitter(segment, &future, notify, token, stats);
    }
}

/// Runs the task of a pointer future, whose bytes lie in the payload block.
fn run_pointer_task(
    segment: &QueueSegment,
    payload: ShmPtr<u8>,
    registry: &Registry,
    output: &mut [u8],
) -> HandlerReply {
    let Ok(header_at) = segment.resolve(payload, TASK_HEADER_BYTES) else {
        return HandlerReply::code(RC_BAD_TASK);
    };
    // SAFETY: resolve checked the header's bytes lie in the segment; the
    // submitter wrote them before publishing the future (queue Release/Acquire)
    // and leaves them alone until completion.
    let header = unsafe { std::slice::from_raw_parts(header_at, TASK_HEADER_BYTES) };
    let Some(args_len) = header
        .get(8..12)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
    else {
        return HandlerReply::code(RC_BAD_TASK);
    };
    let total = TASK_HEADER_BYTES + args_len as usize;
    let Ok(at) = segment.resolve(payload, total) else {
        return HandlerReply::code(RC_BAD_TASK);
    };
    // SAFETY: as above, for the whole task (resolve checked the length).
    let bytes = unsafe { std::slice::from_raw_parts(at, total) };
    if decode_task(bytes).is_none() {
        return HandlerReply::code(RC_BAD_TASK);
    }
    registry.dispatch(bytes, output)
}

/// Completes `future` with `reply`, copying the output into the copy space.
/// Returns whether this call completed it (false: someone already had).
fn complete(
    future: &FutureShm<'_>,
    reply: HandlerReply,
    output: &[u8],
    stats: &WorkerStats,
) -> bool {
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
        Ok(()) if reply.return_code == 0 => {
            stats.completed.fetch_add(1, Ordering::Relaxed);
        }
        Err(FillError::Future(FutureError::AlreadyComplete)) => {
            stats.double_completions.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        Ok(()) | Err(_) => {
            stats.completed.fetch_add(1, Ordering::Relaxed);
            stats.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    true
}

/// Announces the completed `future` at its submitter's notify word (the
/// record's `NOTIFY` offset, if not 0): `token << 1`, bit 0 set when it
/// succeeded. A kernel thread polls that word, which its warp's neighbours
/// keep in the same cache line, instead of the future's flags (tandem/
/// runtime.h, rt_wait).
fn notify_submitter(
    segment: &QueueSegment,
    future: &FutureShm<'_>,
    at: u32,
    token: u32,
    stats: &WorkerStats,
) {
    if at == 0 {
        return;
    }
    let word = segment
        .resolve(ShmPtr::new(segment.id(), u64::from(at)), size_of::<u32>())
        .ok()
        .filter(|w| w.align_offset(align_of::<AtomicU32>()) == 0);
    let Some(word) = word else {
        stats.bad_pointers.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let succeeded = future.return_code() == Ok(0);
    // SAFETY: resolve checked the 4 bytes lie in the segment, alignment is
    // checked; the word is only ever accessed atomically (the kernel polls it
    // with atomic loads).
    let word = unsafe { AtomicU32::from_ptr(word.cast()) };
    // Release: pairs with the kernel's acquire after it sees the token, so
    // the completion (flags, return code, output) is visible to it.
    word.store(token << 1 | u32::from(succeeded), Ordering::Release);
}
