//! Launching the runtime's own kernels (`kernels/runtime.cu`) on a served
//! device: the echo kernel whose threads send tasks to the CPU workers or a
//! GPU service, the no-op kernel whose threads only send no-op tasks to the
//! workers (what the roundtrip bench times), the ping-pong floors (pinned
//! memory, device memory, peer memory), and an empty kernel for the cost of
//! a launch and its synchronisation.
//! Generic over the backend, so the host backend's tests exercise exactly
//! the code the GPU runs.
//!
//! Support for `tandem demo`, the roundtrip bench and the end-to-end tests,
//! not API: a user launching kernels of their own needs none of it
//! (`examples/user_pool.rs`). It is compiled only with the `demo-kernels`
//! feature (on by default, and required by the `tandem` binary); it lives in
//! this crate because it resets the kernel arena between launches, a segment
//! internal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tandem_hal::{DeviceMemory, GpuApi, GpuDevice, HostMemory, KernelArg, LaunchConfig};

use tandem_shm_core::ShmPtr;

use crate::error::RuntimeError;
use crate::runtime::{DeviceQueues, PeerRoute};
use crate::segment::QueueSegment;
use crate::task::MethodId;

/// Which priority the echo kernel's tasks use.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EchoPriority {
    /// Every task on the high-priority rings.
    High = 0,
    /// Every task on the low-priority rings.
    Low = 1,
    /// Alternating, task by task.
    Alternate = 2,
}

/// One launch of `tandem_rt_echo_tasks`.
#[derive(Clone, Copy, Debug)]
pub struct EchoLaunch {
    /// Blocks of the grid.
    pub blocks: u32,
    /// Threads per block.
    pub threads: u32,
    /// Tasks each thread sends, one after another.
    pub tasks_per_thread: u64,
    /// `math::ADD`, `math::SUM` (odd tasks through the copy space, same
    /// answers as ADD; on the CPU route, each even task followed by a no-op
    /// whose output must be empty), `math::NOOP`, [`ECHO_MIXED`] (or any
    /// other method id, to test error codes).
    pub method: MethodId,
    /// Which priority its tasks use.
    pub priority: EchoPriority,
    /// Who runs the tasks.
    pub route: EchoRoute,
    /// Spin rounds a full lane or a wait may take before the thread gives up.
    pub spin_budget: u64,
}

/// Where the echo kernel sends its tasks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EchoRoute {
    /// To the CPU workers through the device's lane queue (`rt_send_to_cpu`).
    CpuWorkers = 0,
    /// To the device's GPU service (`rt_send_to_gpu`); one must be running
    /// ([`crate::GpuService`]).
    GpuService = 1,
}

/// One launch of `tandem_rt_noop_tasks`: every thread sends no-op tasks
/// one after another (to the CPU workers at high priority, or to the GPU
/// service), waiting for each, and does nothing else.
#[derive(Clone, Copy, Debug)]
pub struct NoopLaunch {
    /// Blocks of the grid.
    pub blocks: u32,
    /// Threads per block.
    pub threads: u32,
    /// Tasks each thread sends.
    pub tasks_per_thread: u64,
    /// Where they go.
    pub route: EchoRoute,
    /// Spin rounds a full lane or a wait may take before the thread gives up.
    pub spin_budget: u64,
}

/// `rt_status::ok` and the echo kernel's "task failed" status.
pub const ECHO_OK: u32 = 0;
/// Status of a thread whose task completed with a nonzero return code.
pub const ECHO_TASK_FAILED: u32 = 0x100;
/// `rt_status::no_peer_access`: the status of every thread of an echo over
/// an unreachable [`PeerRoute`].
pub const ECHO_NO_PEER_ACCESS: u32 = 11;
/// The echo kernel's [`EchoLaunch::method`] for a mix of tasks (its
/// `ECHO_MIXED`): task i of global rank r is, by i mod 6, a no-op (0, 1, 5),
/// an add without arguments (2, 3), whose answer must be
/// [`crate::RC_BAD_ARGS`], or add(r, i) (4). A result is the sum of the adds
/// plus 1 a task answered as expected. On the GPU route a task repeating
/// its last one's method without arguments travels as a repeat of it,
/// which this mix tells apart from a task that only looks alike.
pub const ECHO_MIXED: MethodId = u32::MAX;

/// What an echo or no-op launch did, per thread (global rank order).
#[derive(Clone, Debug)]
pub struct EchoOutcome {
    /// Sum of the answers (add), completion count (noop, and every task of
    /// a no-op launch), or the return code of a failed task.
    pub results: Vec<u64>,
    /// `rt_status` per thread, or [`ECHO_TASK_FAILED`].
    pub status: Vec<u32>,
    /// Launch to synchronisation.
    pub elapsed: Duration,
}

impl EchoOutcome {
    /// Threads whose status is not ok.
    pub fn failed_threads(&self) -> usize {
        self.status.iter().filter(|&&s| s != ECHO_OK).count()
    }

    /// Whether every thread of an echo launch of `tasks` add tasks a thread
    /// ([`math::ADD`](crate::math::ADD)) ended ok with the sum of its
    /// answers ([`expected_add_sum`]); else the first thread that did not.
    pub fn check_added(&self, tasks: u64) -> Result<(), String> {
        for (rank, (&sum, &status)) in self.results.iter().zip(&self.status).enumerate() {
            let want = expected_add_sum(rank as u64, tasks);
            if status != ECHO_OK || sum != want {
                return Err(format!(
                    "thread {rank}: status {status}, sum {sum} (want {want})"
                ));
            }
        }
        Ok(())
    }
}

/// Where one thread of a no-op launch spent it
/// ([`RuntimeKernels::noop_tasks_with_spans`]), as the device's timer saw
/// it (`tandem::timer_ns`), from the earliest start of any of the
/// launch's threads.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadSpan {
    /// When it started.
    pub started: Duration,
    /// When its block's context and its future were set up (`rt_init`,
    /// `rt_future_alloc`).
    pub set_up: Duration,
    /// When its first task was answered (its end if it had none).
    pub first_answered: Duration,
    /// When it ended.
    pub ended: Duration,
    /// The multiprocessor it ran on (0 on the CPU device).
    pub multiprocessor: u32,
}

/// Words of a thread's span in the no-op kernel's `span_ns`.
const SPAN_WORDS: usize = 5;

/// Where global rank 0's round trips went, per task, as the kernel's own
/// clock saw them (`tandem::timer_ns`).
#[derive(Clone, Copy, Debug, Default)]
pub struct EchoPhases {
    /// Tasks timed.
    pub tasks: u64,
    /// `rt_make_task`: initialising the future, serializing the task.
    pub make: Duration,
    /// `rt_send_to_cpu` / `rt_send_to_gpu`: the queue push.
    pub send: Duration,
    /// `rt_wait`: from the push to the answer seen.
    pub wait: Duration,
    /// Reading the output (the echo kernel's `add` only).
    pub output: Duration,
}

/// Words of the echo and no-op kernels' `phase_ns` argument.
const PHASE_WORDS: usize = 5;

/// The expected `results[r]` of an `add` echo: sum over i < n of r + i.
pub fn expected_add_sum(rank: u64, tasks: u64) -> u64 {
    rank.wrapping_mul(tasks)
        .wrapping_add(tasks.wrapping_mul(tasks.wrapping_sub(1)) / 2)
}

/// The runtime kernels, loaded on one served device.
pub struct RuntimeKernels<'q, A: GpuApi> {
    queues: &'q DeviceQueues<A>,
    // Declared before the module they come from.
    echo: <A::Device as GpuDevice>::Kernel,
    noop: <A::Device as GpuDevice>::Kernel,
    pingpong: <A::Device as GpuDevice>::Kernel,
    device_pingpong: <A::Device as GpuDevice>::Kernel,
    peer_pingpong: <A::Device as GpuDevice>::Kernel,
    empty: <A::Device as GpuDevice>::Kernel,
    stream: <A::Device as GpuDevice>::Stream,
    _module: <A::Device as GpuDevice>::Module,
    /// Whether every task of the last launch that used this device's kernel
    /// arena or reply region was answered, so both can be reset before the
    /// next one.
    arena_reusable: bool,
}

impl<'q, A: GpuApi> RuntimeKernels<'q, A> {
    /// Loads the device-kernels library on `queues`' device.
    pub fn load(queues: &'q DeviceQueues<A>) -> Result<Self, RuntimeError> {
        let device = queues.device();
        let module = device.load_module(&tandem_device_kernels::library())?;
        Ok(Self {
            echo: device.kernel(&module, "tandem_rt_echo_tasks")?,
            noop: device.kernel(&module, "tandem_rt_noop_tasks")?,
            pingpong: device.kernel(&module, "tandem_rt_pingpong")?,
            device_pingpong: device.kernel(&module, "tandem_rt_device_pingpong")?,
            peer_pingpong: device.kernel(&module, "tandem_rt_peer_pingpong")?,
            empty: device.kernel(&module, "tandem_empty")?,
            stream: device.create_stream()?,
            _module: module,
            queues,
            arena_reusable: true,
        })
    }

    /// Launches the echo kernel and waits for it. Kernel threads wait with
    /// the segment's stop word, so [`DeviceQueues::raise_stop`] from another
    /// thread releases them.
    pub fn echo(&mut self, launch: &EchoLaunch) -> Result<EchoOutcome, RuntimeError> {
        self.run_echo(launch, None, None)
    }

    /// Launches the echo kernel on this device with its tasks routed to
    /// `peer`'s device's GPU service over `route` ([`crate::Runtime::peer_route`]
    /// from this device to the peer's), and waits for it: the kernel's
    /// blocks set up with `rt_init_peer` on the peer's segment, whose kernel
    /// arena their futures come from, and `launch.route` must be
    /// [`EchoRoute::GpuService`] (a service must run on the peer). Borrowing
    /// the peer's kernels keeps them from launching (and resetting that
    /// arena) meanwhile. Over an unreachable route every thread stops with
    /// [`ECHO_NO_PEER_ACCESS`], having touched nothing of the peer's.
    pub fn echo_via_peer(
        &mut self,
        peer: &mut RuntimeKernels<'q, A>,
        route: &PeerRoute,
        launch: &EchoLaunch,
    ) -> Result<EchoOutcome, RuntimeError> {
        self.run_echo_via_peer(peer, route, launch, None)
    }

    /// [`echo_via_peer`](Self::echo_via_peer), timing global rank 0's
    /// phases as well.
    pub fn echo_via_peer_with_phases(
        &mut self,
        peer: &mut RuntimeKernels<'q, A>,
        route: &PeerRoute,
        launch: &EchoLaunch,
    ) -> Result<(EchoOutcome, EchoPhases), RuntimeError> {
        self.with_phases(|kernels, phase_ns| {
            kernels.run_echo_via_peer(peer, route, launch, Some(phase_ns))
        })
    }

    fn run_echo_via_peer(
        &mut self,
        peer: &mut RuntimeKernels<'q, A>,
        route: &PeerRoute,
        launch: &EchoLaunch,
        phase_ns: Option<&SegmentBlock<'_>>,
    ) -> Result<EchoOutcome, RuntimeError> {
        let used = (
            self.queues.device().ordinal(),
            peer.queues.device().ordinal(),
        );
        if (route.from, route.to) != used {
            return Err(RuntimeError::PeerRouteMismatch {
                route: (route.from, route.to),
                used,
            });
        }
        let target = Target {
            queues: peer.queues,
            arena_reusable: &mut peer.arena_reusable,
            peer_word: route.access.kernel_word(),
        };
        self.run_echo(launch, phase_ns, Some(target))
    }

    /// [`echo`](Self::echo), timing global rank 0's phases as well.
    pub fn echo_with_phases(
        &mut self,
        launch: &EchoLaunch,
    ) -> Result<(EchoOutcome, EchoPhases), RuntimeError> {
        self.with_phases(|kernels, phase_ns| kernels.run_echo(launch, Some(phase_ns), None))
    }

    /// Launches the no-op kernel and waits for it (stop word as
    /// [`echo`](Self::echo)).
    pub fn noop_tasks(&mut self, launch: &NoopLaunch) -> Result<EchoOutcome, RuntimeError> {
        self.run_noop(launch, None, None)
    }

    /// [`noop_tasks`](Self::noop_tasks), timing global rank 0's phases as
    /// well (its `output` stays zero: a no-op has none).
    pub fn noop_tasks_with_phases(
        &mut self,
        launch: &NoopLaunch,
    ) -> Result<(EchoOutcome, EchoPhases), RuntimeError> {
        self.with_phases(|kernels, phase_ns| kernels.run_noop(launch, Some(phase_ns), None))
    }

    /// [`noop_tasks`](Self::noop_tasks), with where each thread spent the
    /// launch ([`ThreadSpan`], by global rank).
    pub fn noop_tasks_with_spans(
        &mut self,
        launch: &NoopLaunch,
    ) -> Result<(EchoOutcome, Vec<ThreadSpan>), RuntimeError> {
        let threads = launch.blocks as usize * launch.threads as usize;
        let span_ns = SegmentBlock::new(self.queues, threads.max(1) * SPAN_WORDS * 8)?;
        let outcome = self.run_noop(launch, None, Some(&span_ns))?;
        // SAFETY: the kernel finished (the launch synchronised); each of its
        // threads wrote its SPAN_WORDS words.
        let words =
            unsafe { std::slice::from_raw_parts(span_ns.host.cast::<u64>(), threads * SPAN_WORDS) };
        let origin = words
            .chunks_exact(SPAN_WORDS)
            .map(|w| w[0])
            .min()
            .unwrap_or(0);
        let since = |ns: u64| Duration::from_nanos(ns.saturating_sub(origin));
        let spans = words
            .chunks_exact(SPAN_WORDS)
            .map(|w| ThreadSpan {
                started: since(w[0]),
                set_up: since(w[1]),
                first_answered: since(w[2]),
                ended: since(w[3]),
                multiprocessor: w[4] as u32,
            })
            .collect();
        Ok((outcome, spans))
    }

    /// Runs `launch` with a fresh `phase_ns` block and reads it back.
    fn with_phases(
        &mut self,
        launch: impl FnOnce(&mut Self, &SegmentBlock<'_>) -> Result<EchoOutcome, RuntimeError>,
    ) -> Result<(EchoOutcome, EchoPhases), RuntimeError> {
        let phase_ns = SegmentBlock::new(self.queues, PHASE_WORDS * 8)?;
        // SAFETY: a fresh block of PHASE_WORDS u64s, no kernel uses it yet.
        unsafe { phase_ns.host.write_bytes(0, PHASE_WORDS * 8) };
        let outcome = launch(self, &phase_ns)?;
        // SAFETY: the kernel finished (the launch synchronised); it wrote the words.
        let words = unsafe { std::slice::from_raw_parts(phase_ns.host.cast::<u64>(), PHASE_WORDS) };
        let tasks = words[4];
        let per_task = |ns: u64| Duration::from_nanos(ns.checked_div(tasks).unwrap_or(0));
        let phases = EchoPhases {
            tasks,
            make: per_task(words[0]),
            send: per_task(words[1]),
            wait: per_task(words[2]),
            output: per_task(words[3]),
        };
        Ok((outcome, phases))
    }

    fn run_echo(
        &mut self,
        launch: &EchoLaunch,
        phase_ns: Option<&SegmentBlock<'_>>,
        target: Option<Target<'_, 'q, A>>,
    ) -> Result<EchoOutcome, RuntimeError> {
        let config = LaunchConfig::linear(launch.blocks, launch.threads);
        self.run_task_kernel(TaskKernel::Echo, config, phase_ns, target, |at| {
            vec![
                KernelArg::Ptr(at.own_segment),
                KernelArg::U64(at.own_len),
                KernelArg::Ptr(at.segment),
                KernelArg::U64(at.len),
                KernelArg::U32(at.peer),
                KernelArg::U64(launch.tasks_per_thread),
                KernelArg::U32(launch.method),
                KernelArg::U32(launch.priority as u32),
                KernelArg::U32(launch.route as u32),
                KernelArg::Ptr(at.stop),
                KernelArg::U64(launch.spin_budget),
                KernelArg::Ptr(at.results),
                KernelArg::Ptr(at.status),
                KernelArg::Ptr(at.phase_ns),
            ]
        })
    }

    fn run_noop(
        &mut self,
        launch: &NoopLaunch,
        phase_ns: Option<&SegmentBlock<'_>>,
        span_ns: Option<&SegmentBlock<'_>>,
    ) -> Result<EchoOutcome, RuntimeError> {
        let config = LaunchConfig::linear(launch.blocks, launch.threads);
        let span_ns = span_ns.map_or(0, |block| block.device);
        self.run_task_kernel(TaskKernel::Noop, config, phase_ns, None, |at| {
            vec![
                KernelArg::Ptr(at.segment),
                KernelArg::U64(at.len),
                KernelArg::U64(launch.tasks_per_thread),
                KernelArg::U32(launch.route as u32),
                KernelArg::Ptr(at.stop),
                KernelArg::U64(launch.spin_budget),
                KernelArg::Ptr(at.results),
                KernelArg::Ptr(at.status),
                KernelArg::Ptr(at.phase_ns),
                KernelArg::Ptr(span_ns),
            ]
        })
    }

    /// Launches `kernel` (one future per thread from the kernel arena of
    /// `target`'s segment, or of this device's own, and one reply from this
    /// device's reply region) with the arguments `args` makes of the device
    /// addresses it needs, and waits for it.
    fn run_task_kernel(
        &mut self,
        kernel: TaskKernel,
        config: LaunchConfig,
        phase_ns: Option<&SegmentBlock<'_>>,
        target: Option<Target<'_, 'q, A>>,
        args: impl FnOnce(&TaskKernelAddresses) -> Vec<KernelArg<'static>>,
    ) -> Result<EchoOutcome, RuntimeError> {
        let device = self.queues.device();
        let threads = config.grid.x as usize * config.block.x as usize;
        // From the segment's heap, not the driver: freeing pinned memory
        // synchronises the whole device, which would wait forever for a
        // running GpuService.
        let results = SegmentBlock::new(self.queues, threads.max(1) * 8)?;
        let status = SegmentBlock::new(self.queues, threads.max(1) * 4)?;
        // The segments whose arena or reply region the launch uses: the
        // target's (futures) and this device's (replies), or this device's
        // for both; each with its flag.
        let (futures_from, peer, mut used) = match target {
            Some(t) => (
                t.queues,
                t.peer_word,
                [
                    Some((t.queues, t.arena_reusable)),
                    Some((self.queues, &mut self.arena_reusable)),
                ],
            ),
            None => (
                self.queues,
                0,
                [Some((self.queues, &mut self.arena_reusable)), None],
            ),
        };
        for (queues, reusable) in used.iter_mut().flatten() {
            if **reusable {
                // SAFETY: the previous launch over this segment's arena and
                // reply region (if any) was synchronised and every one of
                // its tasks answered (the flag), so nothing uses them;
                // launches over them are serialised by `&mut` on the kernels
                // that own them.
                unsafe { queues.segment().reset_kernel_arena() };
            }
        }
        let own = self.queues.kernel_backend();
        let args = args(&TaskKernelAddresses {
            own_segment: own.base,
            own_len: self.queues.segment().len() as u64,
            segment: futures_from.kernel_backend().base,
            len: futures_from.segment().len() as u64,
            peer,
            stop: self.queues.stop_flag_device_ptr(),
            results: results.device,
            status: status.device,
            phase_ns: phase_ns.map_or(0, |block| block.device),
        });
        let kernel = match kernel {
            TaskKernel::Echo => &self.echo,
            TaskKernel::Noop => &self.noop,
        };
        let start = Instant::now();
        // SAFETY: the segment stays mapped and registered while `self`
        // borrows its queues; results/status hold one entry per thread and
        // live until after the synchronisation below.
        unsafe { device.launch(kernel, &config, &args, &self.stream) }?;
        device.synchronize_stream(&self.stream)?;
        let elapsed = start.elapsed();
        // SAFETY: the kernel finished (synchronised); the buffers hold
        // `threads` u64s / u32s, written by it.
        let (results, status) = unsafe {
            (
                std::slice::from_raw_parts(results.host.cast::<u64>(), threads).to_vec(),
                std::slice::from_raw_parts(status.host.cast::<u32>(), threads).to_vec(),
            )
        };
        // A thread that stopped or ran out of budget may have left its
        // future queued and its reply awaited: keep the arena and the reply
        // region until the runtime is gone.
        let answered = status
            .iter()
            .all(|&s| s == ECHO_OK || s == ECHO_TASK_FAILED);
        for (_, reusable) in used.iter_mut().flatten() {
            **reusable = answered;
        }
        Ok(EchoOutcome {
            results,
            status,
            elapsed,
        })
    }

    /// The raw round-trip floor: one kernel thread and one host thread
    /// exchange `rounds` values through two words of mapped pinned memory.
    /// Returns the time per round trip.
    pub fn pingpong(&self, rounds: u64) -> Result<Duration, RuntimeError> {
        let (elapsed, _) = self.run_pingpong(rounds, None)?;
        Ok(elapsed / rounds.max(1) as u32)
    }

    /// The floor's first round trip after the host thread sat out `pause`,
    /// the kernel thread polling meanwhile: the host thread answers the
    /// kernel's first value `pause` late and its next value comes back, as a
    /// host thread's task after the same pause goes out and its answer
    /// comes back. What that pause costs any host code (its lines, its
    /// pages' translations) beside what it costs a route.
    pub fn pingpong_after(&self, pause: Duration) -> Result<Duration, RuntimeError> {
        let (_, after_pause) = self.run_pingpong(2, Some(pause))?;
        after_pause.ok_or_else(|| {
            RuntimeError::Process("ping-pong: the kernel gave up before its second round".into())
        })
    }

    /// Runs the ping-pong kernel for `rounds` rounds; with `pause`, the host
    /// thread sleeps that long before its first answer and times the round
    /// trip from that answer to the kernel's next value. Returns the whole
    /// run's time and that round trip.
    fn run_pingpong(
        &self,
        rounds: u64,
        pause: Option<Duration>,
    ) -> Result<(Duration, Option<Duration>), RuntimeError> {
        let device = self.queues.device();
        let words = device.alloc_pinned_mapped(16)?;
        let done = device.alloc_pinned_mapped(8)?;
        // SAFETY: 16 fresh bytes, 8-aligned; only accessed atomically by
        // both sides from here on.
        let (request, answer) = unsafe {
            let p = words.host_ptr().cast::<u64>();
            p.write(0);
            p.add(1).write(0);
            (AtomicU64::from_ptr(p), AtomicU64::from_ptr(p.add(1)))
        };
        let spin_budget = 1u64 << 32;
        let args = [
            KernelArg::Ptr(words.device_ptr()),
            KernelArg::U64(rounds),
            KernelArg::U64(spin_budget),
            KernelArg::Ptr(done.device_ptr()),
        ];
        let start = Instant::now();
        // SAFETY: words/done live until after the synchronisation.
        unsafe {
            device.launch(
                &self.pingpong,
                &LaunchConfig::linear(1, 1),
                &args,
                &self.stream,
            )
        }?;
        let deadline = start + Duration::from_secs(60) + pause.unwrap_or_default();
        let (mut seen, mut answered_at, mut after_pause) = (0, None, None);
        while seen < rounds && Instant::now() < deadline {
            // Acquire pairs with the kernel's system-scope release.
            let value = request.load(Ordering::Acquire);
            if value != seen {
                seen = value;
                if let Some(at) = answered_at.take() {
                    after_pause = Some(Instant::now().duration_since(at));
                }
                if let (1, Some(pause)) = (value, pause) {
                    std::thread::sleep(pause);
                    answered_at = Some(Instant::now());
                }
                // Release pairs with the kernel's system-scope acquire.
                answer.store(value, Ordering::Release);
            } else {
                std::hint::spin_loop();
            }
        }
        device.synchronize_stream(&self.stream)?;
        Ok((start.elapsed(), after_pause))
    }

    /// The floor of a kernel thread's round trip to its device's GPU
    /// service: two blocks of one launch exchange `rounds` values through two
    /// words of device memory (`tandem_rt_device_pingpong`, device-scope
    /// release and acquire). It allocates and frees device memory, which
    /// waits for the device to go idle: not while a [`crate::GpuService`]
    /// runs. Returns the time per round trip.
    pub fn device_pingpong(&self, rounds: u64) -> Result<Duration, RuntimeError> {
        let device = self.queues.device();
        // The two words, then block 0's count of rounds done.
        let words = device.alloc_device(24)?;
        device.fill(&words, 0, 24, 0)?;
        let spin_budget = 1u64 << 32;
        let args = [
            KernelArg::Ptr(words.device_ptr()),
            KernelArg::U64(rounds),
            KernelArg::U64(spin_budget),
            KernelArg::Ptr(words.device_ptr() + 16),
        ];
        let start = Instant::now();
        // SAFETY: the words live until after the synchronisation; the kernel
        // touches only them.
        unsafe {
            device.launch(
                &self.device_pingpong,
                &LaunchConfig::linear(2, 1),
                &args,
                &self.stream,
            )
        }?;
        device.synchronize_stream(&self.stream)?;
        let elapsed = start.elapsed();
        let mut done = [0u8; 8];
        device.copy_from_device(&mut done, &words, 16)?;
        let done = u64::from_ne_bytes(done);
        if done != rounds {
            return Err(RuntimeError::Process(format!(
                "device ping-pong: {done} of {rounds} rounds before a block gave up"
            )));
        }
        Ok(elapsed / rounds.max(1) as u32)
    }

    /// The raw round-trip floor between two devices: a kernel thread on
    /// this device and one on `peer`'s exchange `rounds` values, each polling
    /// a word of its own device's memory that the other writes through peer
    /// memory (`tandem_rt_peer_pingpong`). Both devices must reach each
    /// other's memory (enabled here both ways; `PeerAccessUnsupported`
    /// where the hardware has none). It allocates and frees device memory,
    /// which waits for the devices to go idle: not while a
    /// [`crate::GpuService`] runs on either. Returns the time per round
    /// trip.
    pub fn peer_pingpong(
        &self,
        peer: &RuntimeKernels<'_, A>,
        rounds: u64,
    ) -> Result<Duration, RuntimeError> {
        let (here, there) = (self.queues.device(), peer.queues.device());
        for (from, to) in [(here, there), (there, here)] {
            if !from.can_access_peer(to)? {
                return Err(RuntimeError::Gpu(tandem_hal::GpuError::new(
                    A::BACKEND,
                    "peer_pingpong",
                    tandem_hal::ErrorKind::PeerAccessUnsupported {
                        device: from.ordinal(),
                        peer: to.ordinal(),
                    },
                )));
            }
            from.enable_peer_access(to)?;
        }
        // Each device's word and its `done`, zeroed.
        let words = [here.alloc_device(16)?, there.alloc_device(16)?];
        here.fill(&words[0], 0, 16, 0)?;
        there.fill(&words[1], 0, 16, 0)?;
        let spin_budget = 1u64 << 32;
        let args = |mine: u64, theirs: u64, leader: u32| {
            [
                KernelArg::Ptr(mine),
                KernelArg::Ptr(theirs),
                KernelArg::U64(rounds),
                KernelArg::U32(leader),
                KernelArg::U64(spin_budget),
                KernelArg::Ptr(mine + 8),
            ]
        };
        let (mine, theirs) = (words[0].device_ptr(), words[1].device_ptr());
        let one = LaunchConfig::linear(1, 1);
        let start = Instant::now();
        // SAFETY: both words live until after both streams are synchronised;
        // each kernel writes only its own `done` and the other's word.
        unsafe {
            there.launch(
                &peer.peer_pingpong,
                &one,
                &args(theirs, mine, 0),
                &peer.stream,
            )?;
            here.launch(
                &self.peer_pingpong,
                &one,
                &args(mine, theirs, 1),
                &self.stream,
            )?;
        }
        here.synchronize_stream(&self.stream)?;
        there.synchronize_stream(&peer.stream)?;
        let elapsed = start.elapsed();
        let mut done = [0u8; 8];
        here.copy_from_device(&mut done, &words[0], 8)?;
        let done = u64::from_ne_bytes(done);
        if done != rounds {
            return Err(RuntimeError::Process(format!(
                "peer ping-pong: {done} of {rounds} rounds before a side gave up"
            )));
        }
        Ok(elapsed / rounds.max(1) as u32)
    }

    /// One empty-kernel launch + stream synchronisation per request, `n`
    /// times: the per-request cost without a runtime. Returns time per request.
    pub fn launch_and_sync(&self, n: u32) -> Result<Duration, RuntimeError> {
        let device = self.queues.device();
        let start = Instant::now();
        for _ in 0..n {
            // SAFETY: the empty kernel touches no memory.
            unsafe { device.launch(&self.empty, &LaunchConfig::linear(1, 1), &[], &self.stream) }?;
            device.synchronize_stream(&self.stream)?;
        }
        Ok(start.elapsed() / n.max(1))
    }
}

/// The kernels [`RuntimeKernels::run_task_kernel`] launches.
#[derive(Clone, Copy)]
enum TaskKernel {
    Echo,
    Noop,
}

/// A task kernel's futures from another device's segment: that device's
/// queues, the flag saying whether its kernel arena may be reset, and the
/// kernel's `peer` word (a `tandem::rt_peer`).
struct Target<'a, 'q, A: GpuApi> {
    queues: &'q DeviceQueues<A>,
    arena_reusable: &'a mut bool,
    peer_word: u32,
}

/// What a task kernel's arguments point at, as the device sees it.
struct TaskKernelAddresses {
    /// This device's queue segment (its reply region), and its length.
    own_segment: u64,
    own_len: u64,
    /// The queue segment its futures come from, and its length.
    segment: u64,
    len: u64,
    /// 0 when that segment is the kernel's own device's, else a
    /// `tandem::rt_peer`.
    peer: u32,
    /// The segment's stop word.
    stop: u64,
    /// One u64 result and one u32 status per thread.
    results: u64,
    status: u64,
    /// Rank 0's phase sums, or 0 for none.
    phase_ns: u64,
}

/// A block of a device segment's heap (pinned, mapped into the device),
/// freed on drop: kernel result buffers that cost no driver call.
struct SegmentBlock<'q> {
    segment: &'q QueueSegment,
    ptr: ShmPtr<u8>,
    host: *mut u8,
    device: u64,
}

impl<'q> SegmentBlock<'q> {
    fn new<A: GpuApi>(queues: &'q DeviceQueues<A>, bytes: usize) -> Result<Self, RuntimeError> {
        let segment = queues.segment();
        let (ptr, host) = segment.allocate(bytes)?;
        Ok(Self {
            segment,
            ptr,
            host,
            device: queues.kernel_backend().base + ptr.off,
        })
    }
}

impl Drop for SegmentBlock<'_> {
    fn drop(&mut self) {
        // Cannot fail: the pointer came from this segment's heap.
        let _ = self.segment.free(self.ptr);
    }
}
