//! Submitting tasks from the host into a segment's queue and waiting for
//! them: what the in-process [`crate::Runtime`] and the out-of-process
//! [`crate::Client`] share.

use std::marker::PhantomData;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tandem_metrics::LatencyHistogram;
use tandem_shm_core::layout::{FUTURE_COPY_SPACE_OFFSET, LL_RECORD_WORDS};
use tandem_shm_core::FutureShm;
use tandem_shm_core::{ll_tag, FillError, FutureError, LlRecord, Priority, ShmPtr, WaitOutcome};
use tandem_shm_core::{serialized_len, Reader, Writer};

use crate::client_table::ClientLease;
use crate::host_inbox::HostInbox;
use crate::layout::{host_reply, task_record, HostReply, HOST_REPLY_BYTES, TASK_HEADER_BYTES};
use crate::liveness::LivenessWatch;
use crate::segment::QueueSegment;
use crate::task::{encode_task, Task, TaskError};

/// Where and how to submit.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    /// The lane (taken modulo the queue's lane count).
    pub lane: u32,
    /// Which of the lane's two rings: workers take high first, and low
    /// regularly, so steady high-priority work does not starve it.
    pub priority: Priority,
    /// Give up on a full queue at this time (`None`: retry while the runtime
    /// lives). Back-pressure never drops a task.
    pub deadline: Option<Instant>,
}

impl Route {
    /// Lane `lane`, high priority, no deadline.
    pub fn lane(lane: u32) -> Self {
        Self {
            lane,
            priority: Priority::High,
            deadline: None,
        }
    }
}

/// Where a submitter's futures and payloads come from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Heap<'s> {
    /// The segment's own heap: the in-process runtime's submits.
    Segment,
    /// An attached client's heap, its quota ([`crate::clients`]).
    Client(&'s ClientLease<'static>),
}

impl Heap<'_> {
    /// Allocates `bytes` (16-aligned), counted as a future when `future`.
    fn allocate(
        self,
        segment: &QueueSegment,
        bytes: usize,
        future: bool,
    ) -> Result<(ShmPtr<u8>, *mut u8), TaskError> {
        match self {
            Heap::Segment => segment
                .allocate(bytes)
                .map_err(|e| TaskError::OutOfMemory(e.to_string())),
            Heap::Client(lease) => lease.allocate(segment.id(), bytes, future),
        }
    }

    /// Frees what `allocate` returned for the same `bytes` and `future`.
    /// Frees of our own blocks fail only if the heap is corrupt; leaking is
    /// then the safe outcome, so callers may ignore the error.
    fn free(
        self,
        segment: &QueueSegment,
        ptr: ShmPtr<u8>,
        bytes: usize,
        future: bool,
    ) -> Result<(), crate::RuntimeError> {
        match self {
            Heap::Segment => segment.free(ptr),
            Heap::Client(lease) => lease.free(ptr, bytes, future),
        }
    }
}

/// A block of a submitter's heap in its segment, for data a task takes by
/// reference (its `ShmPtr`, which a handler resolves with
/// [`crate::TaskContext::caller_bytes`]). Freed when dropped; a client's
/// counts against its quota and is reclaimed with it if it dies.
///
/// Leave it alone while a task that names it is in flight: a wait that
/// ended without the task's completion (stop, deadline, dead runtime) must
/// [`leak`](Self::leak) it, as a worker may still copy into or out of it.
pub struct SharedBuffer<'s> {
    segment: &'s QueueSegment,
    heap: Heap<'s>,
    ptr: ShmPtr<u8>,
    at: *mut u8,
    len: usize,
}

impl<'s> SharedBuffer<'s> {
    pub(crate) fn allocate(
        segment: &'s QueueSegment,
        heap: Heap<'s>,
        len: usize,
    ) -> Result<Self, TaskError> {
        let (ptr, at) = heap.allocate(segment, len.max(1), false)?;
        Ok(Self {
            segment,
            heap,
            ptr,
            at,
            len,
        })
    }

    /// Its pointer in the segment, which a task carries.
    pub fn ptr(&self) -> ShmPtr<u8> {
        self.ptr
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` in at byte `at`; `false` (nothing copied) past the end.
    pub fn write(&mut self, at: usize, src: &[u8]) -> bool {
        if at.checked_add(src.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: [at, at + len) lies in the block (checked), which is ours
        // alone while no task naming it is in flight (`&mut self`).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.at.add(at), src.len()) };
        true
    }

    /// Copies out into `dst` from byte `at`; `false` (nothing copied) past
    /// the end.
    pub fn read(&self, at: usize, dst: &mut [u8]) -> bool {
        if at.checked_add(dst.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // SAFETY: as in `write`; a completed task's writes were acquired by
        // the wait that saw it complete.
        unsafe { std::ptr::copy_nonoverlapping(self.at.add(at), dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Gives the block up without freeing it: for a task that may still
    /// use it. A client's leaked blocks come back when the client ends.
    pub fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for SharedBuffer<'_> {
    fn drop(&mut self) {
        // Fails only on a corrupt heap, where leaking is the safe outcome.
        let _ = self
            .heap
            .free(self.segment, self.ptr, self.len.max(1), false);
    }
}

impl std::fmt::Debug for SharedBuffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// A submitted task: owns its future (and payload) until dropped.
///
/// Dropping it frees them, unless the task was published and neither
/// completed nor abandoned by a dead runtime: then a worker may still write
/// into the future, so it is deliberately leaked rather than freed. An
/// answered task of the host route gives its future back to the route's
/// pool instead, for the next submit.
pub struct Pending<'s, T: Task> {
    segment: &'s QueueSegment,
    heap: Heap<'s>,
    ptr: ShmPtr<u8>,
    future: FutureShm<'s>,
    /// The payload block and its length, for a pointer future.
    payload: Option<(ShmPtr<u8>, usize)>,
    /// Where the GPU service answers a task it got whole in its record
    /// (`submit_to_gpu`): the future's copy space, whose flags then never
    /// complete; and the tag of the record's position, which a tagged
    /// output's words carry.
    reply: Option<(&'s HostReply, u32)>,
    /// A host client's task: when it was submitted, and the client's round trips, where the
    /// wait that sees it complete counts it (`client_table::ClientRoundTrips` says why there).
    timed: Option<(Instant, &'s LatencyHistogram)>,
    published: bool,
    runtime_dead: bool,
    _task: PhantomData<fn() -> T>,
}

impl<T: Task> std::fmt::Debug for Pending<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("ptr", &self.ptr)
            .field("pointer_future", &self.payload.is_some())
            .field("complete", &self.is_complete())
            .finish()
    }
}

/// Allocates from `heap` and initialises a future with `copy_space` bytes of
/// copy space; also gives the future's address.
fn new_future<'s>(
    segment: &'s QueueSegment,
    heap: Heap<'_>,
    copy_space: u32,
) -> Result<(ShmPtr<u8>, *mut u8, FutureShm<'s>), TaskError> {
    let bytes = FutureShm::required_bytes(copy_space);
    let (ptr, at) = heap.allocate(segment, bytes, true)?;
    // SAFETY: a fresh heap block of `bytes` bytes, 16-aligned, ours alone
    // until published.
    match unsafe { FutureShm::init_in(at, bytes, copy_space) } {
        Ok(future) => Ok((ptr, at, future)),
        Err(e) => {
            // Freeing a block we just allocated cannot fail but for a bug;
            // the init error is the one to report.
            let _ = heap.free(segment, ptr, bytes, true);
            Err(TaskError::Future(e))
        }
    }
}

/// A reply future for the host route, of `reply_space` bytes of copy space:
/// one that `inbox` kept back, else a new one from the segment's heap.
#[inline]
fn reply_future<'s>(
    segment: &'s QueueSegment,
    inbox: &HostInbox,
    reply_space: u32,
) -> Result<(ShmPtr<u8>, *mut u8, FutureShm<'s>), TaskError> {
    let Some(off) = inbox.replies().take() else {
        return new_future(segment, Heap::Segment, reply_space);
    };
    let ptr = ShmPtr::new(segment.id(), off);
    let bytes = FutureShm::required_bytes(reply_space);
    // Fails only for a block the pool was never given, a bug; it then stays
    // where it is.
    let at = segment
        .resolve(ptr, bytes)
        .map_err(|e| TaskError::OutOfMemory(format!("a kept reply future: {e}")))?;
    // SAFETY: the pool holds futures of `reply_space` bytes of copy space
    // from the segment's heap (16-aligned), each given back by the `Pending`
    // whose task was answered; the take made it ours alone.
    let future =
        unsafe { FutureShm::init_in(at, bytes, reply_space) }.map_err(TaskError::Future)?;
    Ok((ptr, at, future))
}

/// Submits `task` as a copy future: its bytes go into the copy space of a new
/// future with the segment's configured copy space, from the segment's heap.
pub(crate) fn submit<'s, T: Task>(
    segment: &'s QueueSegment,
    route: Route,
    task: &T,
) -> Result<Pending<'s, T>, TaskError> {
    submit_from(segment, Heap::Segment, route, task)
}

/// [`submit`] with the future from `heap`.
pub(crate) fn submit_from<'s, T: Task>(
    segment: &'s QueueSegment,
    heap: Heap<'s>,
    route: Route,
    task: &T,
) -> Result<Pending<'s, T>, TaskError> {
    let submitted = Instant::now();
    let mut pending = copy_future(segment, heap, task, segment.header().copy_space)?;
    pending.publish(route)?;
    if let Heap::Client(lease) = heap {
        pending.timed = Some((submitted, lease.round_trips()));
    }
    Ok(pending)
}

/// Submits `task` to `segment`'s GPU inbox, served by the device's GPU
/// service kernel; a full inbox is retried until `deadline`. Arguments of at
/// most [`task_record::INLINE_ARGS_MAX`] bytes travel in the record itself
/// (tandem/runtime/host_route.h `rt_run_host_record`), which the service
/// reads in one PCIe round trip, and the answer comes back in the future's
/// [`HostReply`]; larger ones go through the future's copy space.
pub(crate) fn submit_to_gpu<'s, T: Task>(
    segment: &'s QueueSegment,
    task: &T,
    deadline: Option<Instant>,
) -> Result<Pending<'s, T>, TaskError> {
    let inbox = segment.inbox_from_host().ok_or(TaskError::NoGpuInbox)?;
    let args_len = serialized_len(task).map_err(TaskError::Ser)?;
    let reply_space = inbox
        .reply_space()
        .filter(|_| args_len <= task_record::INLINE_ARGS_MAX);
    let Some(reply_space) = reply_space else {
        let copy_space = segment.header().copy_space;
        let mut pending = copy_future(segment, Heap::Segment, task, copy_space)?;
        let record = pending.in_future_record()?;
        // Release: publishes the copy space, as in `publish`.
        fence(Ordering::Release);
        push_to_service(&mut pending, inbox, record, deadline)?;
        return Ok(pending);
    };
    // The reply before the output, so the output gets the configured room.
    let lengths = task_record::lengths(args_len as u32, reply_space);
    let heap = Heap::Segment;
    let (ptr, at, future) = reply_future(segment, inbox, reply_space)?;
    let mut pending = Pending::unpublished(segment, heap, ptr, future);
    let mut words = [0u32; LL_RECORD_WORDS];
    words[task_record::FUTURE] = pending.future_offset()?;
    words[task_record::POOL] = T::POOL;
    words[task_record::METHOD] = T::METHOD;
    words[task_record::LENGTHS] = lengths;
    let mut args = [0u8; task_record::INLINE_ARGS_MAX];
    Writer::new(&mut args).put(task).map_err(TaskError::Ser)?;
    for (word, bytes) in words[task_record::ARGS..]
        .iter_mut()
        .zip(args.chunks_exact(4))
    {
        *word = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    let record = LlRecord::new(&words[..task_record::ARGS + args_len.div_ceil(4)]).ok_or(
        TaskError::ArgsTooLarge {
            needed: args_len,
            available: task_record::INLINE_ARGS_MAX,
        },
    )?;
    // SAFETY: the copy space starts FUTURE_COPY_SPACE_OFFSET into the fresh
    // future, holds at least HOST_REPLY_BYTES (`lengths` gives it) and is
    // 16-aligned (futures and their header are); it lies in the segment,
    // which outlives 's, and is only accessed through the reply's atomics.
    let reply = unsafe { &*at.add(FUTURE_COPY_SPACE_OFFSET).cast::<HostReply>() };
    // Release (the fence below): the service stores its answer, and a
    // tagged output, at the address the record names, after reading the
    // record, so this clearing cannot land on them (rt_run_host_record).
    reply.answer.store(0, Ordering::Relaxed);
    let room = (reply_space as usize).saturating_sub(HOST_REPLY_BYTES);
    for word in 0..host_reply::TAGGED_WORDS.min(room / 8) {
        // SAFETY: `reply` heads the fresh future's copy space, of `room`
        // bytes past it, which the service reaches only atomically.
        unsafe { tagged_word(reply, word) }.store(0, Ordering::Relaxed);
    }
    // Release: the cleared answer before the record's words.
    fence(Ordering::Release);
    let ticket = push_to_service(&mut pending, inbox, record, deadline)?;
    pending.reply = Some((reply, ll_tag(ticket)));
    Ok(pending)
}

/// Publishes `record` in the host route's ring (retrying as
/// [`Pending::publish_with`] does) and returns the position it took. The
/// slot then leaves this core's caches: the service's host server polls it
/// across PCIe, and a read of a line this core holds modified would snoop
/// the core.
fn push_to_service<T: Task>(
    pending: &mut Pending<'_, T>,
    inbox: &HostInbox,
    record: LlRecord,
    deadline: Option<Instant>,
) -> Result<u64, TaskError> {
    let ticket = std::cell::Cell::new(0);
    pending.publish_with(deadline, |_| {
        inbox
            .ring()
            .try_push_ticket(record)
            .map(|t| ticket.set(t))
            .is_ok()
    })?;
    inbox.ring().demote_slot(ticket.get());
    Ok(ticket.get())
}

/// A new future from `heap` with `task` in its copy space of `copy_space`
/// bytes, unpublished.
fn copy_future<'s, T: Task>(
    segment: &'s QueueSegment,
    heap: Heap<'s>,
    task: &T,
    copy_space: u32,
) -> Result<Pending<'s, T>, TaskError> {
    let (ptr, _, future) = new_future(segment, heap, copy_space)?;
    let pending = Pending::unpublished(segment, heap, ptr, future);
    // SAFETY: the future is fresh and unpublished: we are its submitter.
    unsafe {
        pending
            .future
            .write_input(|buf| encode_task(T::POOL, T::METHOD, task, buf))
    }
    .map_err(|e| match e {
        FillError::Fill(e) => e,
        FillError::Future(e) => TaskError::Future(e),
    })?;
    Ok(pending)
}

/// Submits `task` as a pointer future: its bytes are written once into a
/// heap block the future's payload names (no copy into the copy space, which
/// only carries the output, `output_space` bytes).
pub(crate) fn submit_pointer<'s, T: Task>(
    segment: &'s QueueSegment,
    route: Route,
    task: &T,
    output_space: u32,
) -> Result<Pending<'s, T>, TaskError> {
    let task_bytes = TASK_HEADER_BYTES + serialized_len(task).map_err(TaskError::Ser)?;
    let heap = Heap::Segment;
    let (payload, at) = heap.allocate(segment, task_bytes, false)?;
    let (ptr, future) = match new_future(segment, heap, output_space) {
        Ok((ptr, _, future)) => (ptr, future),
        Err(e) => {
            let _ = heap.free(segment, payload, task_bytes, false);
            return Err(e);
        }
    };
    let mut pending = Pending::unpublished(segment, heap, ptr, future);
    pending.payload = Some((payload, task_bytes));
    // SAFETY: the block is fresh, `task_bytes` long, ours until published.
    let buf = unsafe { std::slice::from_raw_parts_mut(at, task_bytes) };
    encode_task(T::POOL, T::METHOD, task, buf)?;
    // SAFETY: unpublished future: we are its submitter.
    unsafe { pending.future.set_payload(payload) };
    pending.publish(route)?;
    Ok(pending)
}

impl<'s, T: Task> Pending<'s, T> {
    /// A fresh future `ptr` of `heap`, not yet queued: its submitter's.
    fn unpublished(
        segment: &'s QueueSegment,
        heap: Heap<'s>,
        ptr: ShmPtr<u8>,
        future: FutureShm<'s>,
    ) -> Self {
        Self {
            segment,
            heap,
            ptr,
            future,
            payload: None,
            reply: None,
            timed: None,
            published: false,
            runtime_dead: false,
            _task: PhantomData,
        }
    }

    /// Pushes the future's pointer, retrying while the lane is full until the
    /// deadline or the runtime's death.
    fn publish(&mut self, route: Route) -> Result<(), TaskError> {
        let queue = self.segment.queue();
        let lane = route.lane % queue.num_lanes();
        let record = self.in_future_record()?;
        // Release: the record's words carry no ordering (shm-core ll_ring);
        // this fence, with the worker's Acquire fence after its pop, makes
        // the future's input visible to it.
        fence(Ordering::Release);
        // The lane was reduced modulo the count, so only Full can come back.
        self.publish_with(route.deadline, |_| {
            queue.push(lane, route.priority, record).is_ok()
        })
    }

    /// The future's offset, as a task record names it. Segments are at most
    /// 4 GiB (SegmentGeometry).
    fn future_offset(&self) -> Result<u32, TaskError> {
        u32::try_from(self.ptr.off).map_err(|_| {
            TaskError::OutOfMemory(format!(
                "future at {:#x} lies past what a task record can name",
                self.ptr.off
            ))
        })
    }

    /// The record of a task in the future, with no notify word: host
    /// submitters wait on the future's flags.
    fn in_future_record(&self) -> Result<LlRecord, TaskError> {
        let mut words = [0; task_record::IN_FUTURE_WORDS];
        words[task_record::FUTURE] = self.future_offset()?;
        Ok(LlRecord::from_array(words))
    }

    /// Runs `push` (true when the pointer went in) until it succeeds, the
    /// deadline passes, or the runtime dies.
    fn publish_with(
        &mut self,
        deadline: Option<Instant>,
        push: impl Fn(ShmPtr<u8>) -> bool,
    ) -> Result<(), TaskError> {
        // The clock is read only once a push failed: a submit after a pause
        // then touches no timekeeping pages before its record is out.
        let mut watch = None;
        let mut spins = 0u32;
        loop {
            if push(self.ptr) {
                self.published = true;
                return Ok(());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(TaskError::QueueFull);
            }
            let watch = watch.get_or_insert_with(|| LivenessWatch::new(self.segment.header()));
            if !watch.alive() {
                return Err(TaskError::RuntimeDead { pid: watch.pid() });
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The future's segment pointer (what was queued).
    pub fn ptr(&self) -> ShmPtr<u8> {
        self.ptr
    }

    /// Whether a worker has completed it.
    pub fn is_complete(&self) -> bool {
        match self.reply {
            Some((reply, _)) => reply_code(reply).is_some(),
            None => self.future.is_complete(),
        }
    }

    /// Waits until completion, `stop` raised, `deadline` passed, or the
    /// runtime found dead: its process gone or shut down, checked every few
    /// milliseconds. A stopped or hung runtime is not dead: the wait goes on
    /// ([`crate::Client::runtime_liveness`] tells how long it has been silent).
    pub fn wait(
        &mut self,
        stop: &AtomicU32,
        deadline: Option<Instant>,
    ) -> Result<T::Output, TaskError> {
        let reply = self.reply;
        let answered = || reply.and_then(|(reply, _)| reply_code(reply));
        // A host-route answer mostly comes within the spin: the wait then
        // reads no liveness clock and runs no future wait, code a wait after
        // a pause would fetch for nothing.
        let spun = reply.and_then(|_| spin_for_answer(answered, stop));
        let mut dead = false;
        let outcome = match spun {
            Some(return_code) => WaitOutcome::Completed { return_code },
            None => {
                let mut watch = LivenessWatch::new(self.segment.header());
                // A reply's future never completes: its wait (the future's
                // backoff: spinning first, then yielding, then sleeping)
                // ends on the answer.
                let outcome = self.future.wait(stop, || {
                    if answered().is_some() || deadline.is_some_and(|d| Instant::now() >= d) {
                        return true;
                    }
                    dead = !watch.alive();
                    dead
                });
                match answered() {
                    Some(return_code) => {
                        dead = false;
                        WaitOutcome::Completed { return_code }
                    }
                    None => outcome,
                }
            }
        };
        if let (WaitOutcome::Completed { .. }, Some((submitted, round_trips))) =
            (&outcome, self.timed.take())
        {
            round_trips.observe(submitted.elapsed());
        }
        match outcome {
            WaitOutcome::Completed { return_code: 0 } => {
                let mut gathered = [0u8; host_reply::TAGGED_MAX as usize];
                let output = match reply {
                    Some((reply, tag)) => {
                        reply_output(reply, self.future.copy_space_size(), tag, &mut gathered)?
                    }
                    None => self.future.output().map_err(TaskError::Future)?,
                };
                let mut r = Reader::new(output);
                r.get::<T::Output>().map_err(TaskError::BadOutput)
            }
            WaitOutcome::Completed { return_code } => Err(TaskError::Failed { return_code }),
            WaitOutcome::Stopped => Err(TaskError::Stopped),
            WaitOutcome::TimedOut if dead => {
                self.runtime_dead = true;
                let pid = self.segment.header().owner().pid;
                Err(TaskError::RuntimeDead { pid })
            }
            WaitOutcome::TimedOut => Err(TaskError::TimedOut),
        }
    }
}

/// How long a host thread spins on a GPU service's answer before the
/// future's back-off, which soon sleeps. The answer takes the service's next
/// PCIe poll of the ring and the task's run, microseconds, while a sleep
/// costs the timer's slack (tens of microseconds): spinning through the
/// expected wait is both faster and, per task, no dearer in CPU time.
const ANSWER_SPIN: Duration = Duration::from_micros(50);

/// Spins until `answered` gives the return code, `stop` is raised or
/// [`ANSWER_SPIN`] passed; `None` leaves the wait to the caller.
fn spin_for_answer(answered: impl Fn() -> Option<i32>, stop: &AtomicU32) -> Option<i32> {
    let start = Instant::now();
    // Relaxed: only ends the spin early; the wait that follows reads the
    // flag with Acquire.
    while stop.load(Ordering::Relaxed) == 0 && start.elapsed() < ANSWER_SPIN {
        if let Some(return_code) = answered() {
            return Some(return_code);
        }
        std::hint::spin_loop();
    }
    None
}

/// The return code of an answered reply, or `None` before the answer.
/// Acquire: pairs with the service's fence before its store of the answer
/// (rt_run_host_record), so the output and its length are then visible.
fn reply_code(reply: &HostReply) -> Option<i32> {
    host_reply::return_code(reply.answer.load(Ordering::Acquire))
}

/// How long a tagged output's words may take to land after its answer: the
/// service stored them first, so they are at most a few writes behind.
/// Past this the reply is taken as corrupt.
const TAGGED_LANDING: Duration = Duration::from_secs(1);

/// The output after an answered reply in a copy space of `copy_space`
/// bytes: in the copy space, or gathered into `gathered` from the tagged
/// words of the record whose tag is `tag` ([`host_reply::TAGGED`]).
#[inline]
fn reply_output<'a>(
    reply: &'a HostReply,
    copy_space: u32,
    tag: u32,
    gathered: &'a mut [u8; host_reply::TAGGED_MAX as usize],
) -> Result<&'a [u8], TaskError> {
    // Relaxed: the answer was acquired (reply_code) and is final.
    let answer = reply.answer.load(Ordering::Relaxed);
    if !host_reply::has_output(answer) {
        return Ok(&[]);
    }
    let room = copy_space.saturating_sub(HOST_REPLY_BYTES as u32);
    if let Some(len) = host_reply::tagged_len(answer) {
        return gather_tagged(reply, len, room, tag, TAGGED_LANDING, gathered);
    }
    // Relaxed: ordered by the answer's Acquire (reply_code).
    let len = reply.output_len.load(Ordering::Relaxed);
    if len > room {
        return Err(TaskError::Future(FutureError::CorruptLength {
            len,
            copy_space: room,
        }));
    }
    // SAFETY: the output follows the reply in the future's copy space, `len`
    // bytes within it (checked); the service wrote them before the answer
    // (acquired) and nobody writes them again while the future is ours.
    Ok(unsafe {
        std::slice::from_raw_parts(
            std::ptr::from_ref(reply).cast::<u8>().add(HOST_REPLY_BYTES),
            len as usize,
        )
    })
}

/// A [`host_reply::TAGGED`] output of `len` bytes, in the words after
/// `reply` (a copy space of `room` bytes past it), into `gathered`: each word
/// is read until it carries `tag`, as the service stored the words before
/// the answer but behind no fence; one still without it after `landing` is
/// a corrupt reply. Relaxed: every word is single-copy atomic and says by
/// its tag whose it is. `reply` heads a future's copy space of `room` bytes
/// past it (the reply's own, or a test's likewise laid out).
fn gather_tagged<'a>(
    reply: &HostReply,
    len: u32,
    room: u32,
    tag: u32,
    landing: Duration,
    gathered: &'a mut [u8; host_reply::TAGGED_MAX as usize],
) -> Result<&'a [u8], TaskError> {
    let words = len.div_ceil(4) as usize;
    let corrupt = TaskError::Future(FutureError::CorruptLength {
        len,
        copy_space: room,
    });
    if len > host_reply::TAGGED_MAX || words * 8 > room as usize {
        return Err(corrupt);
    }
    let mut since: Option<Instant> = None;
    for (i, bytes) in gathered[..words * 4].chunks_exact_mut(4).enumerate() {
        // SAFETY: `reply` heads a copy space of `room` bytes past it (the
        // caller's), and `words * 8 <= room` (checked).
        let word = unsafe { tagged_word(reply, i) };
        let data = loop {
            let seen = word.load(Ordering::Relaxed);
            if (seen >> 32) as u32 == tag {
                break seen as u32;
            }
            let since = *since.get_or_insert_with(Instant::now);
            if since.elapsed() > landing {
                return Err(corrupt);
            }
            std::hint::spin_loop();
        };
        bytes.copy_from_slice(&data.to_le_bytes());
    }
    Ok(&gathered[..len as usize])
}

/// Word `i` of the tagged output after `reply`.
///
/// # Safety
/// `reply` heads a future's copy space (16-aligned) with at least
/// `8 * (i + 1)` bytes past the reply, whose words are only accessed
/// atomically.
unsafe fn tagged_word(reply: &HostReply, i: usize) -> &AtomicU64 {
    // SAFETY: the word lies in the copy space after the reply (the caller's
    // bound), 8-aligned, in memory that outlives the reply's borrow, and is
    // only accessed atomically (the caller's promise).
    unsafe {
        AtomicU64::from_ptr(
            std::ptr::from_ref(reply)
                .cast::<u8>()
                .add(HOST_REPLY_BYTES)
                .cast::<u64>()
                .cast_mut()
                .add(i),
        )
    }
}

impl<T: Task> Drop for Pending<'_, T> {
    fn drop(&mut self) {
        let answered = self.published && self.is_complete();
        if self.published && !answered && !self.runtime_dead {
            return;
        }
        // An answered reply future goes back to the host route's pool: the
        // service is done with it, and it stays a reply future, whose next
        // use clears its words and reads them under a new tag.
        let kept = answered
            && self.reply.is_some()
            && self
                .segment
                .inbox_from_host()
                .is_some_and(|inbox| inbox.replies().give(self.ptr.off).is_ok());
        if kept {
            return;
        }
        // Frees of our own blocks fail only if the heap is corrupt; a drop
        // has no one to report that to, and leaking is the safe outcome.
        let future_bytes = FutureShm::required_bytes(self.future.copy_space_size());
        let _ = self.heap.free(self.segment, self.ptr, future_bytes, true);
        if let Some((payload, bytes)) = self.payload {
            let _ = self.heap.free(self.segment, payload, bytes, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply and the copy space after it, as a future lays them out.
    #[repr(C, align(16))]
    struct ReplyCell {
        reply: HostReply,
        words: [AtomicU64; 8],
    }

    fn cell(answer: u64) -> ReplyCell {
        ReplyCell {
            reply: HostReply {
                answer: AtomicU64::new(answer),
                output_len: AtomicU32::new(0),
                reserved: 0,
            },
            words: Default::default(),
        }
    }

    const ROOM: u32 = 64;
    const TAG: u32 = 7;

    fn tagged(len: u32) -> u64 {
        host_reply::answer(0) | host_reply::TAGGED | u64::from(len) << host_reply::TAGGED_LEN_SHIFT
    }

    #[test]
    fn an_answer_without_output_has_none() {
        let c = cell(host_reply::answer(0) | host_reply::NO_OUTPUT);
        let mut gathered = [0; host_reply::TAGGED_MAX as usize];
        assert!(reply_output(&c.reply, ROOM, TAG, &mut gathered)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_tagged_output_is_gathered_from_its_words() {
        let c = cell(tagged(6));
        c.words[0].store(u64::from(TAG) << 32 | 0x0403_0201, Ordering::Relaxed);
        c.words[1].store(u64::from(TAG) << 32 | 0x0000_0605, Ordering::Relaxed);
        let mut gathered = [0; host_reply::TAGGED_MAX as usize];
        let output = reply_output(&c.reply, ROOM, TAG, &mut gathered).unwrap();
        assert_eq!(output, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn a_word_that_lands_late_is_waited_for() {
        let c = cell(tagged(4));
        // An earlier task's word, under another tag.
        c.words[0].store(u64::from(TAG - 2) << 32 | 0xdead, Ordering::Relaxed);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                c.words[0].store(u64::from(TAG) << 32 | 0x0403_0201, Ordering::Relaxed);
            });
            let mut gathered = [0; host_reply::TAGGED_MAX as usize];
            let output = reply_output(&c.reply, ROOM, TAG, &mut gathered).unwrap();
            assert_eq!(output, [1, 2, 3, 4]);
        });
    }

    #[test]
    fn a_word_that_never_lands_is_a_corrupt_reply() {
        let c = cell(tagged(4));
        let mut gathered = [0; host_reply::TAGGED_MAX as usize];
        let got = gather_tagged(
            &c.reply,
            4,
            ROOM,
            TAG,
            Duration::from_millis(10),
            &mut gathered,
        );
        assert!(matches!(
            got,
            Err(TaskError::Future(FutureError::CorruptLength { len: 4, .. }))
        ));
    }

    #[test]
    fn a_tagged_length_past_the_room_is_a_corrupt_reply() {
        // Three words do not fit 16 bytes; a length past TAGGED_MAX fits no
        // room.
        for (len, room) in [(9, 16), (host_reply::TAGGED_MAX + 1, ROOM)] {
            let c = cell(tagged(len));
            let mut gathered = [0; host_reply::TAGGED_MAX as usize];
            assert!(matches!(
                reply_output(&c.reply, room, TAG, &mut gathered),
                Err(TaskError::Future(FutureError::CorruptLength { .. }))
            ));
        }
    }

    #[test]
    fn an_output_in_bytes_is_read_in_place() {
        let c = cell(host_reply::answer(0));
        c.reply.output_len.store(3, Ordering::Relaxed);
        c.words[0].store(0x0030_2010, Ordering::Relaxed);
        let mut gathered = [0; host_reply::TAGGED_MAX as usize];
        let output = reply_output(&c.reply, ROOM, TAG, &mut gathered).unwrap();
        assert_eq!(output, [0x10, 0x20, 0x30]);
        c.reply.output_len.store(ROOM + 1, Ordering::Relaxed);
        assert!(reply_output(&c.reply, ROOM, TAG, &mut gathered).is_err());
    }
}
