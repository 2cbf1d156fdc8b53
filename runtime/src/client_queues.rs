//! Device queues of a host client's own: its kernels submit to the runtime
//! of another process exactly as the runtime's own kernels do.
//!
//! # The sharing
//!
//! The client creates the device segment itself, in named shared memory
//! (`tandem-<pid>-q<n>`, its header naming the client as owner, so
//! `tandem clean` knows it), registers it with its own device context,
//! allocates the lanes' tickets, the device inbox and the reply region in
//! its own device memory and initialises it as the runtime lays out a
//! device's segment. A kernel pointer is only valid in the process that
//! registered or allocated it, so the memory a kernel touches must be the
//! client's: the runtime never maps the segment into a device, and holds no
//! device memory for a client, so a dead client leaves nothing on a GPU.
//!
//! It then asks the runtime to serve it through an entry of its client slot
//! (`device_requests.rs`); the runtime's janitor opens the segment by name
//! (host pages only), checks it, and adds it to the workers' poll set
//! ([`crate::adopted`]), where the device's workers take its lanes as they
//! take the device's own. Task records carry segment offsets, and blob data
//! travels in buffers of the segment's heap, so both processes read the
//! same bytes at their own addresses.
//!
//! # The GPU route
//!
//! The GPU route (`rt_send_to_gpu`, [`DeviceQueues::submit_to_gpu`]) is
//! served by a [`crate::GpuService`] the client starts on these queues, in
//! its own process, as the runtime's process starts one on its own. Its
//! tasks never leave the device, and a service of the runtime's process
//! could not keep up: it would have to run at the same time as the
//! client's kernels, and kernels of two processes share a GPU at once only
//! under MPS. Without MPS the driver gives each process's context the
//! device in turns, so every answer would wait for a turn. A service of
//! the client's own shares the client's context with its kernels, so a
//! client's route is as fast as the runtime's; its inbox and replies are in
//! the client's memory, so no other process can reach them; and the
//! service dies with the client. The service runs the same device handlers
//! (the device-side pools that `tandem_rt_gpu_service` is built with).
//!
//! # Isolation and faults
//!
//! Each client's kernels use a segment of its own: their lanes, futures and
//! buffers are in it, and only its owner's slot may have it adopted (its
//! header must name the slot's process, its id the slot's entry), so one
//! client's kernels cannot reach another's futures through the queues.
//! How many segments a client holds, and their size, are the runtime's
//! configuration (`client_device_queues`, `client_device_segment_size`).
//!
//! A client that dies: the janitor drops its segments from the poll set
//! (queued records are discarded, answers to records in a worker's hands
//! land in memory nobody reads) and removes their names. A runtime that
//! dies: a watcher thread of the client sees it and raises the segment's
//! stop word, so waiting kernels return `stopped` (on either route: the
//! client's GPU service goes on until the client stops it, but its waiters
//! read the same word); [`ClientDeviceQueues::check_runtime`] then says
//! [`RuntimeError::RuntimeDead`].

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tandem_hal::GpuApi;

use crate::client_table::ClientLease;
use crate::device_requests::{
    client_segment_index, DeviceQueueEntry, DeviceQueueRefusal, DeviceQueueState, ENTRY_NAME_BYTES,
};
use crate::error::RuntimeError;
use crate::layout::runtime_state;
use crate::liveness::{Liveness, HEARTBEAT_PERIOD};
use crate::runtime::{DeviceQueues, DeviceSegmentPlan};
use crate::segment::QueueSegment;

/// How long a client waits for the runtime to answer a request or a
/// release: its janitor answers at every heartbeat.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// A host client's device queues on one device: a [`DeviceQueues`] (deref)
/// that its kernels are launched against as the runtime's own are, served
/// by the runtime's workers. Dropping it gives the queues back.
pub struct ClientDeviceQueues<'c, A: GpuApi> {
    queues: DeviceQueues<A>,
    entry: &'c DeviceQueueEntry,
    watch: Option<JoinHandle<()>>,
    watched: Arc<RuntimeWatch>,
    runtime_pid: u32,
}

/// What the client's watcher thread and its owner share.
#[derive(Default)]
struct RuntimeWatch {
    /// Raised by the owner to end the watch.
    done: AtomicBool,
    /// Raised by the watcher once the runtime is dead.
    runtime_dead: AtomicBool,
}

impl<'c, A: GpuApi> ClientDeviceQueues<'c, A> {
    /// Creates the device segment of the client holding `lease` in the
    /// CPU segment `cpu`, on `api`'s device `ordinal`, and has the runtime
    /// serve it (module docs).
    pub(crate) fn request(
        cpu: Arc<QueueSegment>,
        lease: &'c ClientLease<'static>,
        api: &A,
        ordinal: usize,
    ) -> Result<Self, RuntimeError> {
        let limits = lease.device_limits();
        let entries = lease.entries();
        let (k, entry) = entries
            .iter()
            .enumerate()
            .find(|(_, e)| e.advance(DeviceQueueState::Free, DeviceQueueState::Filling))
            .ok_or(RuntimeError::TooManyDeviceQueues {
                max: limits.per_client,
            })?;
        let filled = Self::fill(&cpu, lease, api, ordinal, k as u32, entry);
        let queues = match filled {
            Ok(queues) => queues,
            Err(e) => {
                entry.set_state(DeviceQueueState::Free);
                return Err(e);
            }
        };
        entry.set_state(DeviceQueueState::Requested);
        let runtime_pid = cpu.header().owner().pid;
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            match entry.state() {
                Some(DeviceQueueState::Adopted) => break,
                Some(DeviceQueueState::Refused) => {
                    // Relaxed: published by the Refused Release (state()).
                    let why = DeviceQueueRefusal::from_word(entry.refusal.load(Ordering::Relaxed));
                    entry.set_state(DeviceQueueState::Free);
                    return Err(RuntimeError::DeviceQueuesRefused {
                        device: ordinal,
                        why: why.to_string(),
                    });
                }
                _ => {}
            }
            let dead = Liveness::of(cpu.header()).is_dead();
            if dead || Instant::now() > deadline {
                // Taken back unless the runtime adopted it meanwhile.
                if entry.advance(DeviceQueueState::Requested, DeviceQueueState::Free) {
                    return Err(if dead {
                        RuntimeError::RuntimeDead { pid: runtime_pid }
                    } else {
                        RuntimeError::Process(format!(
                            "the runtime (pid {runtime_pid}) did not answer a device queue request within {ANSWER_TIMEOUT:?}"
                        ))
                    });
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let watched = Arc::new(RuntimeWatch::default());
        let watch = match spawn_watch(cpu, queues.segment_arc(), Arc::clone(&watched)) {
            Ok(watch) => watch,
            Err(e) => {
                // Given back: nothing of this client will use it.
                entry.advance(DeviceQueueState::Adopted, DeviceQueueState::Releasing);
                return Err(e);
            }
        };
        Ok(Self {
            queues,
            entry,
            watch: Some(watch),
            watched,
            runtime_pid,
        })
    }

    /// Makes the segment entry `k` will name, and writes the request.
    fn fill(
        cpu: &QueueSegment,
        lease: &ClientLease<'static>,
        api: &A,
        ordinal: usize,
        k: u32,
        entry: &DeviceQueueEntry,
    ) -> Result<DeviceQueues<A>, RuntimeError> {
        static CREATED: AtomicU32 = AtomicU32::new(0);
        let limits = lease.device_limits();
        // Relaxed: only uniqueness matters, which the RMW gives.
        let n = CREATED.fetch_add(1, Ordering::Relaxed);
        let name = format!("tandem-{}-q{n}", std::process::id());
        debug_assert!(name.len() < ENTRY_NAME_BYTES);
        let memory = crate::stale::create_owned_segment(&name, limits.segment_bytes)?;
        let plan = DeviceSegmentPlan {
            index: client_segment_index(lease.index(), k, limits.per_client),
            lanes: limits.lanes,
            depth: cpu.queue().depth(),
            copy_space: cpu.header().copy_space,
        };
        let queues = DeviceQueues::create_in(api.device(ordinal)?, memory, &plan)?;
        queues.segment().set_state(runtime_state::READY);
        // Relaxed: published by the Requested Release.
        entry
            .device_ordinal
            .store(ordinal as u32, Ordering::Relaxed);
        entry.write_name(&name);
        Ok(queues)
    }

    /// The queues, as [`Deref`] gives them.
    pub fn queues(&self) -> &DeviceQueues<A> {
        &self.queues
    }

    /// Whether the client has seen the runtime die (or shut down): then its
    /// kernels' stop word was raised and nothing more is served.
    pub fn runtime_dead(&self) -> bool {
        // Acquire: pairs with the watcher's Release, after it raised stop.
        self.watched.runtime_dead.load(Ordering::Acquire)
    }

    /// [`RuntimeError::RuntimeDead`] once the runtime died or shut down
    /// (after a launch whose threads returned `stopped`, say why).
    pub fn check_runtime(&self) -> Result<(), RuntimeError> {
        if self.runtime_dead() {
            return Err(RuntimeError::RuntimeDead {
                pid: self.runtime_pid,
            });
        }
        Ok(())
    }
}

impl<A: GpuApi> Deref for ClientDeviceQueues<'_, A> {
    type Target = DeviceQueues<A>;

    fn deref(&self) -> &DeviceQueues<A> {
        &self.queues
    }
}

impl<A: GpuApi> Drop for ClientDeviceQueues<'_, A> {
    fn drop(&mut self) {
        self.watched.done.store(true, Ordering::Relaxed);
        if let Some(watch) = self.watch.take() {
            watch.thread().unpark();
            // A watcher that panicked has nothing left to stop.
            let _ = watch.join();
        }
        if self.runtime_dead() {
            // Nobody answers: the entry goes with the runtime's segment.
            return;
        }
        // The runtime stops serving the segment before this process unmaps
        // and unlinks it (the queues' drop), so a slot is free again for
        // this client's next request once the drop returns.
        if self
            .entry
            .advance(DeviceQueueState::Adopted, DeviceQueueState::Releasing)
        {
            let deadline = Instant::now() + ANSWER_TIMEOUT;
            while self.entry.state() == Some(DeviceQueueState::Releasing)
                && Instant::now() < deadline
                && !self.watched.runtime_dead.load(Ordering::Relaxed)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Starts the thread that raises `device`'s stop word once the runtime of
/// `cpu` is dead (process gone or shut down), checking every heartbeat
/// period until `watched.done`.
fn spawn_watch(
    cpu: Arc<QueueSegment>,
    device: Arc<QueueSegment>,
    watched: Arc<RuntimeWatch>,
) -> Result<JoinHandle<()>, RuntimeError> {
    std::thread::Builder::new()
        .name("tandem-client-watch".into())
        .spawn(move || {
            // Relaxed: `done` only ends the loop.
            while !watched.done.load(Ordering::Relaxed) {
                let liveness = Liveness::of(cpu.header());
                if liveness.is_dead() {
                    // Release: pairs with the kernels' acquire loads of the
                    // stop word (as DeviceQueues::raise_stop).
                    device.header().stop.store(1, Ordering::Release);
                    // Release: the stop raised happens-before whoever sees
                    // the runtime dead.
                    watched.runtime_dead.store(true, Ordering::Release);
                    tracing::warn!(
                        "runtime pid {} {liveness}: stopped this client's kernels",
                        cpu.header().owner().pid
                    );
                    return;
                }
                std::thread::park_timeout(HEARTBEAT_PERIOD);
            }
        })
        .map_err(RuntimeError::Thread)
}
