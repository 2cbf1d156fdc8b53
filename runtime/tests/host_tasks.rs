//! Host-side task paths of an in-process runtime on the CPU device: typed
//! tasks, copy and pointer futures, error codes, back-pressure, no leaks.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_hal::HostApi;
use tandem_runtime::layout::notify_word;
use tandem_runtime::{
    math, Config, DeviceSelection, Pool, QueueSegment, Registry, Route, Runtime, Task, TaskError,
    RC_BAD_ARGS, RC_BAD_TASK, RC_HANDLER_PANICKED, RC_UNKNOWN_METHOD, RC_UNKNOWN_POOL,
};
use tandem_shm_core::impl_serialize_fields;
use tandem_shm_core::{AllocatorId, LlRecord, Priority, ShmPtr, WaitOutcome};
use tandem_shm_core::{FutureShm, RC_OUTPUT_TOO_LARGE};

fn config(workers: usize, depth: u32) -> Config {
    Config {
        workers,
        queue_depth: depth,
        lanes: 2,
        cpu_segment_size: 2 << 20,
        devices: DeviceSelection::Only(vec![]),
        ..Config::default()
    }
}

/// `echo(bytes) -> bytes`, and tasks naming pools/methods nobody serves.
#[derive(Debug)]
struct Echo {
    bytes: Vec<u8>,
}
impl_serialize_fields!(Echo { bytes });
impl Task for Echo {
    const POOL: u32 = 5;
    const METHOD: u32 = 0;
    type Output = Vec<u8>;
}

/// Panics in its handler.
struct Explode;
impl_serialize_fields!(Explode {});
impl Task for Explode {
    const POOL: u32 = 5;
    const METHOD: u32 = 1;
    type Output = u64;
}

/// Same pool, a method that is not registered.
struct Missing;
impl_serialize_fields!(Missing {});
impl Task for Missing {
    const POOL: u32 = 5;
    const METHOD: u32 = 9;
    type Output = u64;
}

/// A pool nobody registered.
struct Nowhere;
impl_serialize_fields!(Nowhere {});
impl Task for Nowhere {
    const POOL: u32 = 77;
    const METHOD: u32 = 0;
    type Output = u64;
}

/// `math.add` with the wrong argument shape (one u64 instead of two).
struct ShortAdd(u64);
impl tandem_shm_core::Serialize for ShortAdd {
    fn serialize(
        &self,
        w: &mut tandem_shm_core::Writer<'_>,
    ) -> Result<(), tandem_shm_core::SerError> {
        w.put_u64(self.0)
    }
}
impl Task for ShortAdd {
    const POOL: u32 = math::POOL;
    const METHOD: u32 = math::ADD;
    type Output = u64;
}

fn registry() -> Registry {
    let mut registry = Registry::with_builtins();
    registry
        .register(
            Pool::new(5, "test")
                .task::<Echo, _>("echo", |e| Ok(e.bytes))
                .task::<Explode, _>("explode", |_| panic!("handler panics on purpose")),
        )
        .expect("register");
    registry
}

fn start(workers: usize, depth: u32, registry: Registry) -> Runtime<HostApi> {
    Runtime::start_with(HostApi::with_devices(0), config(workers, depth), registry).expect("start")
}

/// A fresh future with 64 bytes of copy space in `segment`'s heap, and its
/// segment offset (as a record names it).
fn future_in(segment: &QueueSegment) -> (u32, FutureShm<'_>) {
    let bytes = FutureShm::required_bytes(64);
    let (ptr, at) = segment.allocate(bytes).expect("allocate");
    // SAFETY: a fresh heap block of `bytes` bytes, ours until pushed.
    let future = unsafe { FutureShm::init_in(at, bytes, 64) }.expect("future");
    (u32::try_from(ptr.off).expect("32-bit offset"), future)
}

/// What a kernel thread has in a segment for the tests that act as one: a
/// notify word, and records it pushes to lane 0 naming that word.
struct KernelThread<'a> {
    segment: &'a QueueSegment,
    word: &'a AtomicU32,
    word_offset: u32,
}

impl<'a> KernelThread<'a> {
    fn new(segment: &'a QueueSegment) -> Self {
        let (ptr, at) = segment.allocate(4).expect("allocate");
        // SAFETY: a fresh, 16-aligned heap block of 4 bytes, only accessed
        // atomically (here and by the worker), as long as the segment.
        let word = unsafe { AtomicU32::from_ptr(at.cast()) };
        word.store(0, Ordering::Relaxed);
        Self {
            segment,
            word,
            word_offset: u32::try_from(ptr.off).expect("32-bit offset"),
        }
    }

    /// Pushes `record` to lane 0 at high priority.
    fn push(&self, record: &[u32]) {
        self.segment
            .queue()
            .push(0, Priority::High, LlRecord::new(record).unwrap())
            .expect("push");
    }

    /// Waits (up to 10 s) for the notify word to read `expected`.
    fn answered(&self, expected: u32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.word.load(Ordering::Acquire) != expected {
            assert!(Instant::now() < deadline, "no answer {expected:#x}");
            std::thread::yield_now();
        }
    }
}

fn assert_no_leak(runtime: &Runtime<HostApi>) {
    let stats = runtime.cpu_segment().heap().stats().expect("stats");
    assert_eq!(stats.free_bytes(), stats.carved_bytes, "heap blocks leaked");
}

#[test]
fn copy_and_pointer_futures_round_trip() {
    let runtime = start(2, 64, registry());
    let stop = AtomicU32::new(0);
    for len in [0usize, 1, 100, 200] {
        let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let echo = Echo {
            bytes: bytes.clone(),
        };
        let copied = runtime
            .submit(Route::lane(0), &echo)
            .and_then(|mut p| p.wait(&stop, None));
        let pointed = runtime
            .submit_pointer(Route::lane(1), &echo, 512)
            .and_then(|mut p| p.wait(&stop, None));
        assert_eq!(pointed.expect("pointer future"), bytes);
        // The copy space (256 bytes by default) holds the task header, the
        // 4-byte length and up to 236 bytes.
        assert_eq!(copied.expect("copy future"), bytes);
    }
    assert_no_leak(&runtime);
}

#[test]
fn errors_complete_with_codes_and_workers_live_on() {
    let runtime = start(1, 64, registry());
    let stop = AtomicU32::new(0);
    let call = |r: Result<u64, TaskError>| match r {
        Err(TaskError::Failed { return_code }) => return_code,
        other => panic!("expected a failure code, got {other:?}"),
    };
    let route = Route::lane(0);
    assert_eq!(
        call(
            runtime
                .submit(route, &Nowhere)
                .and_then(|mut p| p.wait(&stop, None))
        ),
        RC_UNKNOWN_POOL
    );
    assert_eq!(
        call(
            runtime
                .submit(route, &Missing)
                .and_then(|mut p| p.wait(&stop, None))
        ),
        RC_UNKNOWN_METHOD
    );
    assert_eq!(
        call(
            runtime
                .submit(route, &ShortAdd(3))
                .and_then(|mut p| p.wait(&stop, None))
        ),
        RC_BAD_ARGS
    );
    assert_eq!(
        call(
            runtime
                .submit(route, &Explode)
                .and_then(|mut p| p.wait(&stop, None))
        ),
        RC_HANDLER_PANICKED
    );
    // Output larger than the copy space: never truncated.
    let big = Echo {
        bytes: vec![7; 200],
    };
    match runtime
        .submit_pointer(route, &big, 64)
        .and_then(|mut p| p.wait(&stop, None))
    {
        Err(TaskError::Failed { return_code }) => assert_eq!(return_code, RC_OUTPUT_TOO_LARGE),
        other => panic!("expected RC_OUTPUT_TOO_LARGE, got {other:?}"),
    }
    // Arguments larger than the copy space are refused at submission.
    match runtime.submit(
        route,
        &Echo {
            bytes: vec![1; 1000],
        },
    ) {
        Err(TaskError::ArgsTooLarge { needed, available }) => {
            assert_eq!(needed, 16 + 4 + 1000);
            assert_eq!(available, 256);
        }
        other => panic!("expected ArgsTooLarge, got {other:?}"),
    }
    // The single worker is still alive.
    let mut p = runtime
        .submit(route, &math::Add { a: 1, b: 2 })
        .expect("submit");
    assert_eq!(p.wait(&stop, None).expect("add"), 3);
    drop(p);
    let stats = runtime.stats_when(|s| s.completed == 6, SETTLE);
    assert_eq!(stats.completed, 6);
    assert_eq!(stats.failed, 5);
    assert_no_leak(&runtime);
}

/// A full queue pushes back: submission waits (or gives up at its
/// deadline) and nothing is dropped.
#[test]
fn full_queue_is_back_pressure_not_loss() {
    let release = Arc::new(AtomicBool::new(false));
    let gate = Arc::clone(&release);
    let mut registry = Registry::new();
    registry
        .register(
            Pool::new(math::POOL, "gated math").task::<math::Add, _>("add", move |t| {
                let deadline = Instant::now() + Duration::from_secs(20);
                while !gate.load(Ordering::Acquire) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(t.a + t.b)
            }),
        )
        .expect("register");
    // One worker, lanes of depth 2 per priority.
    let runtime = start(1, 2, registry);
    let stop = AtomicU32::new(0);
    let route = Route {
        lane: 0,
        priority: Priority::High,
        deadline: Some(Instant::now() + Duration::from_millis(300)),
    };
    let mut pending = Vec::new();
    let mut refused = 0;
    for i in 0..6u64 {
        match runtime.submit(route, &math::Add { a: i, b: 100 }) {
            Ok(p) => pending.push((i, p)),
            Err(TaskError::QueueFull) => refused += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    // The worker holds one task, the ring two more: the rest are refused
    // at the deadline, none taken and lost.
    assert_eq!(pending.len(), 3, "accepted");
    assert_eq!(refused, 3);
    release.store(true, Ordering::Release);
    for (i, mut p) in pending {
        assert_eq!(p.wait(&stop, None).expect("wait"), i + 100);
    }
    // With no deadline, submission rides out the back-pressure.
    let blocking = Route::lane(0);
    let all: Vec<_> = (0..20u64)
        .map(|i| {
            runtime
                .submit(blocking, &math::Add { a: i, b: 1 })
                .expect("submit")
        })
        .collect::<Vec<_>>();
    for (i, mut p) in all.into_iter().enumerate() {
        assert_eq!(p.wait(&stop, None).expect("wait"), i as u64 + 1);
    }
    assert_no_leak(&runtime);
}

/// Low priority work is served while high priority work is waiting: with
/// the worker held up, one low task queued behind 100 high ones runs among
/// the first few (the cursor takes low first every 8th pop).
#[test]
fn low_priority_is_not_starved() {
    let release = Arc::new(AtomicBool::new(false));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (gate, log) = (Arc::clone(&release), Arc::clone(&order));
    let mut registry = Registry::new();
    registry
        .register(
            Pool::new(math::POOL, "logged").task::<math::Add, _>("add", move |t| {
                while t.a == u64::MAX && !gate.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                log.lock().map_err(|_| 1)?.push(t.a);
                Ok(t.a.wrapping_add(t.b))
            }),
        )
        .expect("register");
    let runtime = start(1, 1024, registry);
    let stop = AtomicU32::new(0);
    let mut blocker = runtime
        .submit(Route::lane(0), &math::Add { a: u64::MAX, b: 0 })
        .expect("blocker");
    // Wait until the worker holds the blocker, so everything below queues.
    while runtime
        .cpu_segment()
        .queue()
        .lane_len(0, Priority::High)
        .expect("lane")
        != 0
    {
        std::thread::yield_now();
    }
    let mut highs: Vec<_> = (0..100u64)
        .map(|i| {
            runtime
                .submit(Route::lane(0), &math::Add { a: i, b: 0 })
                .expect("high")
        })
        .collect();
    let low = Route {
        priority: Priority::Low,
        ..Route::lane(0)
    };
    let mut low_task = runtime
        .submit(low, &math::Add { a: 1000, b: 0 })
        .expect("low");
    release.store(true, Ordering::Release);
    blocker.wait(&stop, None).expect("blocker");
    assert_eq!(low_task.wait(&stop, None).expect("low"), 1000);
    for h in &mut highs {
        h.wait(&stop, None).expect("high");
    }
    let order = order.lock().expect("log").clone();
    let position = order.iter().position(|&a| a == 1000).expect("low ran");
    assert!(position <= 9, "low task ran {position}th: {order:?}");
}

/// A stop flag or deadline ends a wait; the task completes anyway and the
/// future can be waited on again.
#[test]
fn stop_and_deadline_end_waits_without_losing_the_task() {
    let release = Arc::new(AtomicBool::new(false));
    let gate = Arc::clone(&release);
    let mut registry = Registry::new();
    registry
        .register(
            Pool::new(math::POOL, "gated").task::<math::Add, _>("add", move |t| {
                while !gate.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(t.a + t.b)
            }),
        )
        .expect("register");
    let runtime = start(1, 64, registry);
    let mut p = runtime
        .submit(Route::lane(0), &math::Add { a: 2, b: 3 })
        .expect("submit");
    let stop = AtomicU32::new(1);
    assert_eq!(p.wait(&stop, None).err(), Some(TaskError::Stopped));
    let go = AtomicU32::new(0);
    let deadline = Some(Instant::now() + Duration::from_millis(50));
    assert_eq!(p.wait(&go, deadline).err(), Some(TaskError::TimedOut));
    release.store(true, Ordering::Release);
    assert_eq!(p.wait(&go, None).expect("completes"), 5);
}

#[test]
fn config_parses_defaults_and_refuses_bad_values() {
    let d = Config::from_toml("").expect("empty");
    assert_eq!(d, Config::default());
    assert_eq!(
        (d.workers, d.lanes, d.queue_depth, d.gpu_segment_size),
        (4, 16, 1024, 64 << 20)
    );
    let c = Config::from_toml("workers = 2\ndevices = [0, 1]\nqueue_depth = 64").expect("parse");
    assert_eq!(c.devices, DeviceSelection::Only(vec![0, 1]));
    assert_eq!(Config::from_toml(&c.to_toml()).expect("round trip"), c);
    for bad in [
        "workers = 0",
        "queue_depth = 1000",
        "devices = \"some\"",
        "unknown_field = 1",
        "lanes = 0",
        "gpu_segment_size = 4096",
        "workers = \"four\"",
    ] {
        assert!(Config::from_toml(bad).is_err(), "{bad} accepted");
    }
}

/// The CPU device's device segments take `lanes`, not `gpu_lanes`
/// (docs/design/pcie.md, "Many lanes"), and the status block records each segment's lanes.
#[test]
fn host_device_segments_take_lanes() {
    let config = Config {
        lanes: 3,
        gpu_lanes: 5,
        gpu_segment_size: 16 << 20,
        devices: DeviceSelection::Only(vec![0]),
        ..config(1, 64)
    };
    let runtime = Runtime::start_with(HostApi::with_devices(1), config, Registry::with_builtins())
        .expect("start");
    assert_eq!(runtime.cpu_segment().queue().num_lanes(), 3);
    assert_eq!(runtime.devices()[0].segment().queue().num_lanes(), 3);
    let name = runtime.cpu_segment().name().expect("a named CPU segment");
    let status = tandem_runtime::status::read_status(name).expect("status");
    assert_eq!((status.config.lanes, status.config.gpu_lanes), (3, 5));
    let lanes: Vec<u32> = status.segments.iter().map(|s| s.lanes).collect();
    assert_eq!(lanes, [3, 3]);
    runtime.shutdown().expect("shutdown");
}

/// A queue record that names no future of the segment is counted and
/// skipped; the worker serves the next task.
#[test]
fn garbage_task_record_does_not_kill_the_worker() {
    let runtime = start(1, 64, Registry::with_builtins());
    let queue = runtime.cpu_segment().queue();
    for garbage in [
        // Past the segment, in its header, and no future word at all.
        LlRecord::from_array([u32::MAX - 4, 0, 0]),
        LlRecord::from_array([0, 0, 0]),
        LlRecord::from_array([]),
    ] {
        queue.push(0, Priority::High, garbage).expect("push");
    }
    let stop = AtomicU32::new(0);
    let mut p = runtime
        .submit(Route::lane(0), &math::Add { a: 5, b: 6 })
        .expect("submit");
    assert_eq!(p.wait(&stop, None).expect("served"), 11);
    assert_eq!(
        runtime
            .stats_when(|s| s.bad_pointers == 3, SETTLE)
            .bad_pointers,
        3
    );
}

/// An inline record, as a kernel sends a small task, runs from its words
/// alone (the future is re-armed by the worker); one whose argument words
/// disagree with its length completes its future with RC_BAD_TASK.
#[test]
fn inline_records_run_and_malformed_ones_fail() {
    let runtime = start(1, 64, Registry::with_builtins());
    let segment = runtime.cpu_segment();
    let stop = AtomicU32::new(0);
    // add(5, 6): 16 bytes of arguments, as four little-endian words.
    let (off, added) = future_in(segment);
    let record = [off, 0, 0, math::POOL, math::ADD, 16, 5, 0, 6, 0];
    segment
        .queue()
        .push(0, Priority::High, LlRecord::new(&record).unwrap())
        .expect("push");
    let outcome = added.wait_timeout(&stop, Duration::from_secs(10));
    assert_eq!(outcome, WaitOutcome::Completed { return_code: 0 });
    assert_eq!(added.read_output::<u64>(), Ok(11));
    // The length says 16 bytes, one word follows.
    let (off, bad) = future_in(segment);
    let record = [off, 0, 0, math::POOL, math::ADD, 16, 5];
    segment
        .queue()
        .push(0, Priority::High, LlRecord::new(&record).unwrap())
        .expect("push");
    let outcome = bad.wait_timeout(&stop, Duration::from_secs(10));
    assert_eq!(
        outcome,
        WaitOutcome::Completed {
            return_code: RC_BAD_TASK
        }
    );
    assert_eq!(runtime.stats_when(|s| s.failed == 1, SETTLE).failed, 1);
}

/// A kernel thread's answer, as a worker stores it in the record's notify
/// word (layout.rs `notify_word`): a status-only inline task (no-op) is
/// answered by the word alone, the future left as it was; a task with
/// output completes its future first; a notify offset outside the segment
/// still completes the future, and is counted.
#[test]
fn notify_words_answer_kernel_records() {
    let runtime = start(1, 64, Registry::with_builtins());
    let segment = runtime.cpu_segment();
    let stop = AtomicU32::new(0);
    let kernel = KernelThread::new(segment);
    let word_off = kernel.word_offset;
    // A no-op with token 7: the word alone, SUCCEEDED | NO_OUTPUT.
    let (off, noop) = future_in(segment);
    kernel.push(&[off, word_off, 7, math::POOL, math::NOOP, 0]);
    kernel.answered(notify_word::answer(7, true, true));
    assert!(!noop.is_complete(), "the future was left as it was");
    // add(5, 6) with token 8: completed, then the word (SUCCEEDED).
    let (off, added) = future_in(segment);
    kernel.push(&[off, word_off, 8, math::POOL, math::ADD, 16, 5, 0, 6, 0]);
    kernel.answered(notify_word::answer(8, true, false));
    assert_eq!(added.read_output::<u64>(), Ok(11));
    // A no-op whose notify word lies past the segment: its future completes.
    let (off, stray) = future_in(segment);
    kernel.push(&[off, u32::MAX - 4, 9, math::POOL, math::NOOP, 0]);
    let outcome = stray.wait_timeout(&stop, Duration::from_secs(10));
    assert_eq!(outcome, WaitOutcome::Completed { return_code: 0 });
    let stats = runtime.stats_when(|s| (s.completed, s.bad_pointers) == (3, 1), SETTLE);
    assert_eq!((stats.completed, stats.bad_pointers), (3, 1));
}

/// Records that give their future's copy space (layout.rs
/// `task_record::lengths`, as kernels send them): a no-op is answered
/// through the notify word without the future being read at all (here its
/// offset names none); a task with output completes its future; one whose
/// record gives another copy space than its future has fails with
/// RC_BAD_TASK (its handler sized its output by the record).
#[test]
fn records_with_their_copy_space_leave_the_future_alone() {
    use tandem_runtime::layout::task_record;
    let runtime = start(1, 64, Registry::with_builtins());
    let segment = runtime.cpu_segment();
    let stop = AtomicU32::new(0);
    let kernel = KernelThread::new(segment);
    let word_off = kernel.word_offset;
    // Offset 8 lies in the segment's header: no future there.
    kernel.push(&[
        8,
        word_off,
        3,
        math::POOL,
        math::NOOP,
        task_record::lengths(0, 64),
    ]);
    kernel.answered(notify_word::answer(3, true, true));
    let (off, added) = future_in(segment);
    let add = task_record::lengths(16, 64);
    kernel.push(&[off, word_off, 4, math::POOL, math::ADD, add, 5, 0, 6, 0]);
    kernel.answered(notify_word::answer(4, true, false));
    assert_eq!(added.read_output::<u64>(), Ok(11));
    let (off, misread) = future_in(segment);
    let add = task_record::lengths(16, 128);
    kernel.push(&[off, word_off, 5, math::POOL, math::ADD, add, 5, 0, 6, 0]);
    kernel.answered(notify_word::answer(5, false, false));
    let outcome = misread.wait_timeout(&stop, Duration::from_secs(10));
    assert_eq!(
        outcome,
        WaitOutcome::Completed {
            return_code: RC_BAD_TASK
        }
    );
    let stats = runtime.stats_when(|s| (s.completed, s.failed) == (3, 1), SETTLE);
    assert_eq!(
        (stats.completed, stats.failed, stats.bad_pointers),
        (3, 1, 0)
    );
    assert_eq!(task_record::copy_space(task_record::lengths(16, 0)), None);
    assert_eq!(
        task_record::copy_space(task_record::lengths(16, task_record::COPY_SPACE_MAX + 1)),
        None
    );
    assert_eq!(task_record::args_len(task_record::lengths(16, 64)), 16);
}

/// `reverse(data, len)`: reverses `len` bytes the caller passed by
/// reference, in place, and returns their sum; `BAD_POINTER` when they are
/// not inside the caller's segment.
#[derive(Debug)]
struct Reverse {
    data: u64,
    major: u32,
    minor: u32,
    len: u64,
}
impl_serialize_fields!(Reverse {
    data,
    major,
    minor,
    len
});
impl Task for Reverse {
    const POOL: u32 = 6;
    const METHOD: u32 = 0;
    type Output = u64;
}
/// How long a test waits for the workers' counts to settle.
const SETTLE: Duration = Duration::from_secs(10);

const BAD_POINTER: i32 = 77;

fn reverse_registry() -> Registry {
    let mut registry = Registry::with_builtins();
    let pool =
        Pool::new(6, "by-reference").task_in_context::<Reverse, _>("reverse", |context, t| {
            let ptr = ShmPtr::new(AllocatorId::new(t.major, t.minor), t.data);
            let bytes = context.caller_bytes(ptr, t.len).map_err(|_| BAD_POINTER)?;
            let mut data = vec![0; bytes.len()];
            assert!(bytes.copy_to(0, &mut data));
            data.reverse();
            assert!(bytes.copy_from(0, &data));
            assert!(
                !bytes.copy_to(1, &mut data),
                "a range past the end is refused"
            );
            Ok(data.iter().map(|&b| u64::from(b)).sum())
        });
    registry.register(pool).expect("register");
    registry
}

#[test]
fn handlers_reach_data_passed_by_reference_inside_the_callers_segment_only() {
    let runtime = start(2, 64, reverse_registry());
    let segment = runtime.cpu_segment();
    let (ptr, at) = segment.allocate(1000).expect("allocate");
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    // SAFETY: a fresh block of 1000 bytes, ours until the task runs.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len()) };
    let stop = AtomicU32::new(0);
    let call = |data: u64, id: AllocatorId, len: u64| {
        let task = Reverse {
            data,
            major: id.major,
            minor: id.minor,
            len,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        runtime
            .submit(Route::lane(0), &task)
            .expect("submit")
            .wait(&stop, Some(deadline))
    };
    let id = segment.id();
    let other = AllocatorId::new(id.major, id.minor + 1);
    let sum = call(ptr.off, id, 1000).expect("reverse");
    assert_eq!(sum, data.iter().map(|&b| u64::from(b)).sum::<u64>());
    let mut back = vec![0; 1000];
    // SAFETY: the task completed: the block is ours again.
    unsafe { std::ptr::copy_nonoverlapping(at, back.as_mut_ptr(), 1000) };
    assert!(back.iter().eq(data.iter().rev()));

    // Past the segment's end, another segment's id, the header, a length
    // that overflows: each refused with the handler's code, and the runtime
    // lives on.
    let len = segment.len() as u64;
    for (data, segment_id, bytes) in [
        (ptr.off, id, len),
        (ptr.off, other, 8),
        (0, id, 8),
        (ptr.off, id, u64::MAX),
    ] {
        assert_eq!(
            call(data, segment_id, bytes).err(),
            Some(TaskError::Failed {
                return_code: BAD_POINTER
            }),
            "{data} {segment_id:?} {bytes}"
        );
    }
    assert_eq!(
        call(ptr.off, id, 10).ok(),
        Some(back[..10].iter().map(|&b| u64::from(b)).sum())
    );
    segment.free(ptr).expect("free");
    assert_no_leak(&runtime);
    runtime.shutdown().expect("shutdown");
}
