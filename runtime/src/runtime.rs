//! The runtime: per-device pinned queue segments, the CPU segment host
//! clients attach to, worker threads, and a heartbeat.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tandem_hal::numa::{
    allowed_cpus, bind_to_node, cpus_by_core, format_cpu_list, local_cpus_of_pci, node_of_address,
    pin_current_thread,
};
use tandem_hal::{DeviceMemory, DeviceProperties, GpuApi, GpuDevice};
use tandem_shm_core::layout::{BackendKind, MemoryBackend};
use tandem_shm_core::Segment;

use crate::adopted::AdoptedSegments;
use crate::client_table::DeviceQueueLimits;
use crate::config::{Config, DeviceSelection};
use crate::error::RuntimeError;
use crate::janitor::{ClientDevices, Janitor};
use crate::layout::{
    device_inbox, device_ticket, peer_access, runtime_state, segment_kind, SegmentHeader,
};
use crate::liveness::{monotonic_ns, HEARTBEAT_PERIOD};
use crate::registry::Registry;
use crate::segment::{QueueSegment, SegmentSpec};
use crate::status::StatusPublisher;
use crate::submit::{self, Pending, Route, SharedBuffer};
use crate::task::{Task, TaskError};
use crate::worker::{self, Source, StatsSnapshot, WorkerStats};

/// Where a device segment's pages ended up.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum NumaPlacement {
    /// Bound to the device's host node and found there after first touch.
    Verified {
        /// The node.
        node: u32,
    },
    /// Bound, but the first page was found elsewhere (or not placed).
    Mismatch {
        /// The device's node.
        wanted: u32,
        /// Where the first page was found, if the kernel said.
        found: Option<u32>,
    },
    /// Binding failed (e.g. no NUMA support in the kernel); pages are wherever
    /// the OS put them.
    BindFailed {
        /// The device's node.
        wanted: u32,
        /// The binding call's error.
        error: String,
    },
    /// The device reports no host NUMA node: nothing to bind to.
    Unknown,
}

impl std::fmt::Display for NumaPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Verified { node } => write!(f, "NUMA node {node} (bound, verified)"),
            Self::Mismatch { wanted, found } => {
                write!(f, "bound to NUMA node {wanted} but found on {found:?}")
            }
            Self::BindFailed { wanted, error } => {
                write!(f, "binding to NUMA node {wanted} failed: {error}")
            }
            Self::Unknown => f.write_str("no NUMA information for the device"),
        }
    }
}

/// How kernels on one served device reach another's GPU service
/// ([`Runtime::peer_route`]): the two devices' ordinals and whether the
/// first addresses the second's memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PeerRoute {
    /// The ordinal of the device whose kernels send.
    pub from: usize,
    /// The ordinal of the device whose service runs the tasks.
    pub to: usize,
    /// Whether they can.
    pub access: PeerAccess,
}

/// Whether a device's kernels reach another device's segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PeerAccess {
    /// Peer access is enabled both ways: kernels reach the peer's device
    /// memory (its inbox and tickets) directly and its segment through the
    /// portable pinned mapping, and the peer's service reaches their reply
    /// words.
    Direct,
    /// The hardware gives no peer access between the two (either way): a kernel handed
    /// this route gets `no_peer_access` from `rt_init_peer` and touches
    /// nothing of the peer's.
    Unreachable,
}

impl PeerAccess {
    /// The word a kernel hands `tandem::rt_init_peer` (a `tandem::rt_peer`).
    pub fn kernel_word(self) -> u32 {
        match self {
            Self::Direct => peer_access::REACHABLE,
            Self::Unreachable => peer_access::UNREACHABLE,
        }
    }
}

/// One device's queue segment and its registration with the device.
pub struct DeviceQueues<A: GpuApi> {
    // Declared before `segment`: the registration must be dropped (the pages
    // unregistered) before the mapping can go.
    registration: <A::Device as GpuDevice>::HostRegistration,
    /// The device tickets and the device inbox
    /// ([`SegmentHeader::device_tickets`], [`SegmentHeader::device_inbox`]),
    /// and the reply region ([`SegmentHeader::device_replies`]): held for
    /// the kernels, which find them through the header.
    _tickets: <A::Device as GpuDevice>::DeviceBuffer,
    _replies: <A::Device as GpuDevice>::DeviceBuffer,
    segment: Arc<QueueSegment>,
    device: A::Device,
    properties: DeviceProperties,
    placement: NumaPlacement,
    /// The CPUs its workers run on: its NUMA node's that this process may
    /// use; empty where that is unknown (then they run anywhere).
    worker_cpus: Vec<u32>,
    /// Worker threads serving its lanes alone.
    workers: usize,
    /// Whether a [`crate::GpuService`] runs on it: one at a time, as the
    /// service's threads split the device inbox's slots among themselves.
    pub(crate) service_running: AtomicBool,
}

/// The shape of a device segment, the runtime's own or a client's: both
/// carry a GPU service's route (the device inbox and the reply region in
/// device memory of the process that creates it, and the from-host ring),
/// so a [`crate::GpuService`] can serve either.
pub(crate) struct DeviceSegmentPlan {
    /// [`SegmentSpec::index`]: the segment id's minor.
    pub index: u32,
    pub lanes: u32,
    pub depth: u32,
    pub copy_space: u32,
}

impl<A: GpuApi> DeviceQueues<A> {
    /// Creates, places, registers and initialises `device`'s segment.
    fn create(device: A::Device, config: &Config, index: u32) -> Result<Self, RuntimeError> {
        let memory = Segment::create_anonymous(config.gpu_segment_size)?;
        let plan = DeviceSegmentPlan {
            index,
            // The lanes depend on the backend (docs/design/pcie.md, "Many lanes").
            lanes: config.device_lanes(A::BACKEND),
            depth: config.queue_depth,
            copy_space: config.copy_space,
        };
        Self::create_in(device, memory, &plan)
    }

    /// Places `memory` on `device`'s NUMA node, registers it with the
    /// device (in this process), allocates the device memory the plan needs
    /// and initialises and publishes the segment. A client's device queues
    /// are made here too, over a named segment of its own.
    pub(crate) fn create_in(
        device: A::Device,
        memory: Segment,
        plan: &DeviceSegmentPlan,
    ) -> Result<Self, RuntimeError> {
        let properties = device.properties()?;
        // Bind before anything touches the pages (registration pins them).
        let wanted = properties.host_numa_node;
        let bind = wanted.map(|node| (node, bind_to_node(memory.as_ptr(), memory.len(), node)));
        // SAFETY: the mapping is owned by the segment, which this struct keeps
        // until after the registration is dropped (field order).
        let registration = unsafe { device.register_host(memory.as_ptr(), memory.len()) }?;
        let lanes = plan.lanes;
        // One device allocation, zeroed: the tickets, then the device inbox
        // (zeroed, its slots are free and no service has sized it). Aligned
        // as the inbox's header and slots must be: the allocation is, and the
        // tickets fill whole slots' worth of lines.
        let ticket_bytes = (device_ticket::count(lanes) as usize
            * tandem_device_kernels::DEVICE_TICKETS_BYTES)
            .next_multiple_of(device_inbox::SLOT_BYTES);
        let inbox_bytes = device_inbox::bytes(device_inbox::DEPTH);
        let tickets = device.alloc_device(ticket_bytes + inbox_bytes)?;
        device.fill(&tickets, 0, ticket_bytes + inbox_bytes, 0)?;
        // As many bytes as the segment: the arena's futures and the replies
        // grow with the same threads, and both are reset together.
        let replies = device.alloc_device(memory.len())?;
        let segment_bytes = memory.len() as u64;
        let segment = QueueSegment::init(
            memory,
            SegmentSpec {
                kind: segment_kind::DEVICE,
                index: plan.index,
                device_ordinal: Some(device.ordinal()),
                lanes,
                depth: plan.depth,
                copy_space: plan.copy_space,
                device_tickets: tickets.device_ptr(),
                device_inbox: tickets.device_ptr() + ticket_bytes as u64,
                device_inbox_depth: device_inbox::DEPTH,
                device_replies: replies.device_ptr(),
                device_replies_bytes: segment_bytes,
                inbox: true,
                max_clients: 0,
                client_heap_bytes: 0,
                client_device_queues: DeviceQueueLimits::NONE,
            },
        )?;
        // init wrote the header page: its node is where the binding put it.
        let found = node_of_address(segment.base());
        let placement = match bind {
            None => NumaPlacement::Unknown,
            Some((wanted, Err(e))) => NumaPlacement::BindFailed {
                wanted,
                error: e.to_string(),
            },
            Some((wanted, Ok(()))) if found == Some(wanted) => {
                NumaPlacement::Verified { node: wanted }
            }
            Some((wanted, Ok(()))) => NumaPlacement::Mismatch { wanted, found },
        };
        segment.publish(found);
        let worker_cpus = properties
            .pci_bus_id
            .as_deref()
            .map_or_else(Vec::new, local_worker_cpus);
        Ok(Self {
            registration,
            _tickets: tickets,
            _replies: replies,
            segment: Arc::new(segment),
            device,
            properties,
            placement,
            worker_cpus,
            workers: 0,
            service_running: AtomicBool::new(false),
        })
    }

    /// The device.
    pub fn device(&self) -> &A::Device {
        &self.device
    }

    /// Its properties, read at start.
    pub fn properties(&self) -> &DeviceProperties {
        &self.properties
    }

    /// The segment, host side.
    pub fn segment(&self) -> &QueueSegment {
        &self.segment
    }

    /// The segment, shared (a client's watcher raises its stop word).
    pub(crate) fn segment_arc(&self) -> Arc<QueueSegment> {
        Arc::clone(&self.segment)
    }

    /// Where the segment's pages are.
    pub fn placement(&self) -> &NumaPlacement {
        &self.placement
    }

    /// The CPUs this device's workers run on (its NUMA node's, among those
    /// the process may use); empty where the node is unknown and they run
    /// anywhere.
    pub fn worker_cpus(&self) -> &[u32] {
        &self.worker_cpus
    }

    /// Worker threads serving this device's lanes (and no other device's).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The segment descriptor a kernel is launched with (device address).
    pub fn kernel_backend(&self) -> MemoryBackend {
        self.segment
            .backend_at(self.registration.device_ptr(), BackendKind::Pinned)
    }

    /// A block of `len` bytes of the segment's heap (pinned host memory
    /// the device maps, no driver call): a kernel's result or data buffer,
    /// at device address [`device_address`](Self::device_address).
    pub fn allocate_shared(&self, len: usize) -> Result<SharedBuffer<'_>, TaskError> {
        SharedBuffer::allocate(&self.segment, submit::Heap::Segment, len)
    }

    /// The device address of a block of this segment's heap; `None` for a
    /// block of another segment.
    pub fn device_address(&self, buffer: &SharedBuffer<'_>) -> Option<u64> {
        (buffer.ptr().alloc_id == self.segment.id())
            .then(|| self.registration.device_ptr() + buffer.ptr().off)
    }

    /// The device address of the segment's stop word (what
    /// [`raise_stop`](Self::raise_stop) raises), for kernels' waits.
    pub fn stop_flag_device_ptr(&self) -> u64 {
        self.registration.device_ptr() + memoffset::offset_of!(SegmentHeader, stop) as u64
    }

    /// Raises the segment's stop word: every kernel waiting with it returns
    /// `stopped`. `Release`, pairing with the kernels' acquire loads.
    pub fn raise_stop(&self) {
        self.segment.header().stop.store(1, Ordering::Release);
    }

    /// Lowers the stop word again (before launching new waiters).
    pub fn clear_stop(&self) {
        self.segment.header().stop.store(0, Ordering::Release);
    }

    /// Submits a task from this process's host code to the segment's GPU
    /// inbox, where a [`crate::GpuService`] on these queues runs it (what
    /// [`Runtime::submit_to_gpu`] does for the runtime's own devices; a
    /// client's queues take it the same way). Nothing serves the inbox
    /// while no service runs: the task then waits there. A full inbox is
    /// retried until `deadline` (back-pressure; nothing is dropped).
    pub fn submit_to_gpu<T: Task>(
        &self,
        task: &T,
        deadline: Option<Instant>,
    ) -> Result<Pending<'_, T>, TaskError> {
        submit::submit_to_gpu(&self.segment, task, deadline)
    }
}

/// The CPUs local to the PCI device `bus_id` that this process may use;
/// empty where the kernel does not say or none is allowed (the device's
/// workers then run anywhere rather than nowhere).
fn local_worker_cpus(bus_id: &str) -> Vec<u32> {
    let allowed = allowed_cpus();
    local_cpus_of_pci(bus_id)
        .unwrap_or_default()
        .into_iter()
        .filter(|cpu| allowed.binary_search(cpu).is_ok())
        .collect()
}

/// The ordinals of the devices `selection` names among `count`.
fn selected_devices(selection: &DeviceSelection, count: usize) -> Result<Vec<usize>, RuntimeError> {
    match selection {
        DeviceSelection::All => Ok((0..count).collect()),
        DeviceSelection::Only(list) => match list.iter().find(|&&o| o >= count) {
            Some(bad) => Err(RuntimeError::Config(crate::error::ConfigError::Invalid {
                field: "devices",
                why: format!("device {bad} does not exist ({count} present)"),
            })),
            None => Ok(list.clone()),
        },
    }
}

/// The CPUs of the next worker of a device whose node has CPUs `node`: one
/// of them, the next in cpus_by_core's order, counted in `turns` per set of
/// CPUs so that devices of one node take turns: a worker polls without
/// pause, and two sharing a core (or the scheduler moving one onto
/// another's) each drain their lanes at a fraction of the rate. Where
/// workers share cores anyway, each keeps the node's set and the scheduler
/// places them.
fn next_worker_cpus(
    node: &[u32],
    share_cores: bool,
    turns: &mut HashMap<Vec<u32>, (Vec<u32>, usize)>,
) -> Vec<u32> {
    if share_cores || node.is_empty() {
        return node.to_vec();
    }
    let (ordered, used) = turns
        .entry(node.to_vec())
        .or_insert_with(|| (cpus_by_core(node), 0));
    let cpu = ordered[*used % ordered.len()];
    *used += 1;
    vec![cpu]
}

/// Starts worker thread `w`, pinned to `cpus` (unpinned when there are
/// none), running `work`.
fn spawn_worker(
    w: usize,
    cpus: Vec<u32>,
    work: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, RuntimeError> {
    std::thread::Builder::new()
        .name(format!("tandem-worker-{w}"))
        .spawn(move || {
            if !cpus.is_empty() {
                match pin_current_thread(&cpus) {
                    Ok(()) => tracing::debug!("worker {w}: on CPUs {}", format_cpu_list(&cpus)),
                    Err(e) => tracing::warn!("worker {w}: staying unpinned: {e}"),
                }
            }
            work()
        })
        .map_err(RuntimeError::Thread)
}

/// `tandem-<pid>-<n>`: unique among the runtimes of this process.
fn default_segment_name() -> String {
    static STARTED: AtomicU32 = AtomicU32::new(0);
    // Relaxed: only uniqueness matters, which the RMW gives.
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    format!("tandem-{}-{n}", std::process::id())
}

/// `requested` workers capped by the cores available, with a warning when
/// that clamps: each worker spins on its queues for a while before it naps,
/// so more workers than cores take turns on them, burning system time
/// without completing more tasks.
fn capped_workers(requested: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if requested > cores {
        // The default is no one's choice to warn about.
        if requested == Config::default().workers {
            tracing::info!(
                "workers: running {cores}, one per core available (the default is {requested}; \
                 more workers than cores would only take turns on them)"
            );
        } else {
            tracing::warn!(
                "workers: {requested} configured but {cores} cores available: running {cores} \
                 (more workers than cores would only take turns on them, costing system time)"
            );
        }
    }
    requested.min(cores)
}

/// The running runtime on backend `A`. Dropping it stops the workers after
/// they drain the queues, and marks every segment STOPPED.
pub struct Runtime<A: GpuApi> {
    workers: Vec<JoinHandle<()>>,
    heartbeat: Option<JoinHandle<()>>,
    shutdown: Arc<AtomicBool>,
    /// One per worker (each writes only its own).
    stats: Vec<Arc<WorkerStats>>,
    /// Worker threads running: `config.workers` capped by the cores.
    workers_running: usize,
    // Dropped after the threads are joined (in Drop), in this order:
    // devices (registrations first), then the CPU segment.
    devices: Vec<DeviceQueues<A>>,
    /// Client device segments the workers serve besides the devices' own.
    adopted: Arc<AdoptedSegments>,
    cpu: Arc<QueueSegment>,
    registry: Arc<Registry>,
    config: Config,
    notes: Vec<String>,
    api: A,
}

impl<A: GpuApi> Runtime<A> {
    /// Loads backend `A` and starts a runtime on it.
    pub fn start(config: Config, registry: Registry) -> Result<Self, RuntimeError> {
        Self::start_with(A::load()?, config, registry)
    }

    /// Starts a runtime on an already loaded backend.
    pub fn start_with(api: A, config: Config, registry: Registry) -> Result<Self, RuntimeError> {
        config.validate()?;
        let mut notes = Vec::new();
        let ordinals = selected_devices(&config.devices, api.device_count()?)?;
        if ordinals.is_empty() {
            notes.push(format!(
                "{:?} backend: no devices in use; serving CPU queues only",
                A::BACKEND
            ));
        }
        let mut devices = Self::open_devices(&api, &config, &ordinals, &mut notes)?;
        let workers_running = Self::assign_workers(&mut devices, &config, &mut notes);
        let cpu = Arc::new(Self::init_cpu_segment(
            &config,
            !devices.is_empty(),
            &mut notes,
        )?);
        let stats: Vec<Arc<WorkerStats>> = (0..workers_running)
            .map(|_| Arc::new(WorkerStats::new(registry.pools().len(), 1 + devices.len())))
            .collect();
        // The status block is written before the segment is published.
        let status = StatusPublisher::new(
            A::BACKEND,
            &config,
            workers_running,
            &registry,
            std::iter::once(&cpu)
                .chain(devices.iter().map(|d| &d.segment))
                .cloned()
                .collect(),
            &std::iter::once(workers_running)
                .chain(devices.iter().map(|d| d.workers))
                .collect::<Vec<_>>(),
            stats.clone(),
        );
        cpu.publish(None);

        let mut runtime = Self {
            workers: Vec::new(),
            heartbeat: None,
            shutdown: Arc::new(AtomicBool::new(false)),
            stats,
            workers_running,
            devices,
            adopted: Arc::default(),
            cpu,
            registry: Arc::new(registry),
            config,
            notes,
            api,
        };
        runtime.spawn_threads(status)?;
        for segment in runtime.segments() {
            segment.set_state(runtime_state::READY);
        }
        runtime.log_start();
        Ok(runtime)
    }

    /// Opens device `ordinals` (in that order) and each one's queues.
    fn open_devices(
        api: &A,
        config: &Config,
        ordinals: &[usize],
        notes: &mut Vec<String>,
    ) -> Result<Vec<DeviceQueues<A>>, RuntimeError> {
        let mut devices = Vec::with_capacity(ordinals.len());
        for (i, &ordinal) in ordinals.iter().enumerate() {
            let device = api.device(ordinal)?;
            let queues = DeviceQueues::create(device, config, 1 + i as u32)?;
            notes.push(format!(
                "device {ordinal} ({}): {} MiB pinned segment, {} lanes, {}",
                queues.properties.name,
                config.gpu_segment_size >> 20,
                queues.segment.queue().num_lanes(),
                queues.placement
            ));
            devices.push(queues);
        }
        Ok(devices)
    }

    /// Splits the workers among `devices`; the workers running in all.
    fn assign_workers(
        devices: &mut [DeviceQueues<A>],
        config: &Config,
        notes: &mut Vec<String>,
    ) -> usize {
        let workers_running = capped_workers(config.workers_for(devices.len()));
        let per_device = worker::split_among_devices(workers_running, devices.len());
        for (queues, &count) in devices.iter_mut().zip(&per_device) {
            queues.workers = count;
            let cpus = if queues.worker_cpus.is_empty() {
                "any CPU (NUMA node unknown)".to_string()
            } else {
                format!("CPUs {}", format_cpu_list(&queues.worker_cpus))
            };
            let ordinal = GpuDevice::ordinal(&queues.device);
            let workers = if count == 1 { "worker" } else { "workers" };
            notes.push(format!("device {ordinal}: {count} {workers} on {cpus}"));
        }
        // Devices with fewer cores than one worker each still get one.
        per_device.iter().sum::<usize>().max(workers_running)
    }

    /// Creates and initialises the CPU segment (not yet published); with
    /// `serves_devices`, its clients may hold device queues.
    fn init_cpu_segment(
        config: &Config,
        serves_devices: bool,
        notes: &mut Vec<String>,
    ) -> Result<QueueSegment, RuntimeError> {
        let name = config
            .cpu_segment_name
            .clone()
            .unwrap_or_else(default_segment_name);
        let cpu_memory = crate::stale::create_owned_segment(&name, config.cpu_segment_size)?;
        let cpu = QueueSegment::init(
            cpu_memory,
            SegmentSpec {
                kind: segment_kind::CPU,
                index: 0,
                device_ordinal: None,
                lanes: config.lanes,
                depth: config.queue_depth,
                copy_space: config.copy_space,
                device_tickets: 0,
                device_inbox: 0,
                device_inbox_depth: 0,
                device_replies: 0,
                device_replies_bytes: 0,
                inbox: false,
                max_clients: config.max_clients,
                client_heap_bytes: config.client_heap_bytes,
                client_device_queues: DeviceQueueLimits {
                    // None where no device is served: nothing could adopt them.
                    per_client: if serves_devices {
                        config.client_device_queues
                    } else {
                        0
                    },
                    segment_bytes: config.client_device_segment_size,
                    lanes: config.device_lanes(A::BACKEND),
                },
            },
        )?;
        notes.push(format!(
            "CPU segment /dev/shm/{name}: not NUMA-bound (shared by host clients anywhere)"
        ));
        Ok(cpu)
    }

    /// Logs the configuration the runtime started with, then its notes.
    fn log_start(&self) {
        let c = &self.config;
        tracing::info!(
            backend = %A::BACKEND,
            workers = self.workers_running,
            lanes = c.lanes,
            device_lanes = c.device_lanes(A::BACKEND),
            queue_depth = c.queue_depth,
            copy_space = c.copy_space,
            cpu_segment_size = c.cpu_segment_size,
            gpu_segment_size = c.gpu_segment_size,
            devices = self.devices.len(),
            "runtime started"
        );
        for note in &self.notes {
            tracing::info!("{note}");
        }
    }

    /// Every segment: the CPU one first, then the devices'.
    fn segments(&self) -> impl Iterator<Item = &Arc<QueueSegment>> {
        std::iter::once(&self.cpu).chain(self.devices.iter().map(|d| &d.segment))
    }

    /// Starts the workers and the heartbeat (which refreshes `status`); on
    /// failure, stops what started (Drop joins them).
    fn spawn_threads(&mut self, status: StatusPublisher) -> Result<(), RuntimeError> {
        let (cpu_workers, workers) = self.spawn_workers()?;
        self.spawn_heartbeat(status, cpu_workers, workers)
    }

    /// Every lane the workers serve: the CPU segment's (slot 0), and each
    /// device segment's (slot 1 + its index).
    fn lanes(&self) -> (Vec<Source>, Vec<Vec<Source>>) {
        let lanes_of = |segment: &Arc<QueueSegment>, slot: usize| -> Vec<Source> {
            (0..segment.queue().num_lanes())
                .map(|lane| Source {
                    segment: Arc::clone(segment),
                    slot,
                    lane,
                    sole: false,
                })
                .collect()
        };
        let cpu_lanes = lanes_of(&self.cpu, 0);
        let device_lanes = self
            .devices
            .iter()
            .enumerate()
            .map(|(d, queues)| lanes_of(&queues.segment, 1 + d))
            .collect();
        (cpu_lanes, device_lanes)
    }

    /// Starts the workers as [`worker::plan`] lays them out over the lanes;
    /// the stats of those that serve the CPU segment, and how many started.
    fn spawn_workers(&mut self) -> Result<(Vec<Arc<WorkerStats>>, usize), RuntimeError> {
        let (cpu_lanes, device_lanes) = self.lanes();
        let per_device: Vec<usize> = self.devices.iter().map(|d| d.workers).collect();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let share_cores = worker::shares_cores(A::BACKEND, self.workers_running, cores);
        // The workers whose sweeps the clients' janitor waits for.
        let mut cpu_workers = Vec::new();
        let plans = worker::plan(&cpu_lanes, &device_lanes, &per_device, self.workers_running);
        let workers = plans.len();
        // Each device's workers so far: the next one's rank among them.
        let mut ranks = vec![0usize; self.devices.len()];
        let mut cpu_turns = HashMap::new();
        for (w, planned) in plans.into_iter().enumerate() {
            let adopted = planned.device.map(|d| {
                let rank = ranks[d];
                ranks[d] += 1;
                worker::AdoptedShare {
                    segments: Arc::clone(&self.adopted),
                    device: d,
                    rank,
                    count: per_device[d],
                    worker: w,
                }
            });
            let registry = Arc::clone(&self.registry);
            let stats = Arc::clone(&self.stats[w]);
            if planned.sources.iter().any(|s| s.slot == 0) {
                cpu_workers.push(Arc::clone(&stats));
            }
            let cpus = planned.device.map_or_else(Vec::new, |d| {
                next_worker_cpus(&self.devices[d].worker_cpus, share_cores, &mut cpu_turns)
            });
            let shutdown = Arc::clone(&self.shutdown);
            let handle = spawn_worker(w, cpus, move || {
                worker::run(
                    planned.sources,
                    adopted,
                    registry,
                    stats,
                    shutdown,
                    share_cores,
                )
            })?;
            self.workers.push(handle);
        }
        Ok((cpu_workers, workers))
    }

    /// Starts the heartbeat thread, which refreshes the segments' heartbeats
    /// and `status`, and whose janitor takes back the slots of dead or
    /// detached clients once the `workers` (`cpu_workers` among them serve
    /// the CPU segment) have let go of them.
    fn spawn_heartbeat(
        &mut self,
        mut status: StatusPublisher,
        cpu_workers: Vec<Arc<WorkerStats>>,
        workers: usize,
    ) -> Result<(), RuntimeError> {
        let segments: Vec<Arc<QueueSegment>> = self.segments().cloned().collect();
        let shutdown = Arc::clone(&self.shutdown);
        let ordinals = self.devices.iter().map(|d| d.device.ordinal()).collect();
        let mut janitor = Janitor::new(
            Arc::clone(&self.cpu),
            cpu_workers,
            ClientDevices {
                adopted: Arc::clone(&self.adopted),
                ordinals,
                workers,
            },
        );
        let heartbeat = std::thread::Builder::new()
            .name("tandem-heartbeat".into())
            .spawn(move || {
                // Relaxed: the shutdown flag only ends the loop.
                while !shutdown.load(Ordering::Relaxed) {
                    let now = monotonic_ns();
                    for segment in &segments {
                        // Relaxed: readers only compare the time with theirs.
                        segment.header().heartbeat.store(now, Ordering::Relaxed);
                    }
                    // Takes back the slots of dead or detached clients.
                    if let Some(janitor) = janitor.as_mut() {
                        janitor.tick();
                    }
                    status.tick(janitor.as_ref().map(Janitor::reclaimed));
                    std::thread::park_timeout(HEARTBEAT_PERIOD);
                }
            })
            .map_err(RuntimeError::Thread)?;
        self.heartbeat = Some(heartbeat);
        Ok(())
    }

    /// The backend.
    pub fn api(&self) -> &A {
        &self.api
    }

    /// The configuration it was started with (`workers` as requested; see
    /// [`workers`](Self::workers)).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Worker threads running: the configured `workers`, capped by the cores
    /// available.
    pub fn workers(&self) -> usize {
        self.workers_running
    }

    /// What setup found worth saying (devices, NUMA placement, no devices).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The served devices.
    pub fn devices(&self) -> &[DeviceQueues<A>] {
        &self.devices
    }

    /// The CPU segment host clients attach to.
    pub fn cpu_segment(&self) -> &QueueSegment {
        &self.cpu
    }

    /// The registry the workers dispatch through.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The workers' counters, added up.
    pub fn stats(&self) -> StatsSnapshot {
        StatsSnapshot::sum(self.stats.iter().map(|w| &**w))
    }

    /// [`stats`](Self::stats) once `settled` holds of them, or when `timeout` has passed: a
    /// worker counts a task just after its submitter can see it complete, so counts read at
    /// once after the last completion may lag it.
    pub fn stats_when(
        &self,
        settled: impl Fn(&StatsSnapshot) -> bool,
        timeout: Duration,
    ) -> StatsSnapshot {
        let deadline = Instant::now() + timeout;
        loop {
            let stats = self.stats();
            if settled(&stats) || Instant::now() >= deadline {
                return stats;
            }
            std::thread::yield_now();
        }
    }

    /// Submits a copy-future task to the CPU queues from this process.
    pub fn submit<T: Task>(&self, route: Route, task: &T) -> Result<Pending<'_, T>, TaskError> {
        submit::submit(&self.cpu, route, task)
    }

    /// A block of `len` bytes of the CPU segment's heap, for data a task
    /// takes by reference.
    pub fn allocate_shared(&self, len: usize) -> Result<SharedBuffer<'_>, TaskError> {
        SharedBuffer::allocate(&self.cpu, submit::Heap::Segment, len)
    }

    /// Submits a pointer-future task (zero copy of the arguments) to the CPU
    /// queues; its output may use `output_space` bytes.
    pub fn submit_pointer<T: Task>(
        &self,
        route: Route,
        task: &T,
        output_space: u32,
    ) -> Result<Pending<'_, T>, TaskError> {
        submit::submit_pointer(&self.cpu, route, task, output_space)
    }

    /// Submits a task to device `device`'s GPU inbox (an index into
    /// [`devices`](Self::devices)): [`DeviceQueues::submit_to_gpu`] on it.
    pub fn submit_to_gpu<T: Task>(
        &self,
        device: usize,
        task: &T,
        deadline: Option<Instant>,
    ) -> Result<Pending<'_, T>, TaskError> {
        let queues = self.devices.get(device).ok_or(TaskError::NoSuchDevice {
            device,
            devices: self.devices.len(),
        })?;
        queues.submit_to_gpu(task, deadline)
    }

    /// The route from device `from`'s kernels to device `to`'s GPU service
    /// (indices into [`devices`](Self::devices)), enabling peer access
    /// between the two, both ways, where the hardware has it (idempotent). A kernel sends
    /// over it with `tandem::rt_init_peer` on `to`'s segment and
    /// `rt_send_to_gpu`; where the devices have no peer access the route
    /// says so and the kernel gets `no_peer_access`. A device and itself:
    /// [`PeerAccess::Direct`].
    pub fn peer_route(&self, from: usize, to: usize) -> Result<PeerRoute, RuntimeError> {
        let devices = self.devices.len();
        let queues = |device| {
            self.devices
                .get(device)
                .ok_or(RuntimeError::NoSuchDevice { device, devices })
        };
        let (sender, server) = (queues(from)?, queues(to)?);
        // Both ways: the sender writes the server's inbox, and the server
        // answers in the sender's reply words, in the sender's memory.
        let (there, back) = (&server.device, &sender.device);
        let access = if back.can_access_peer(there)? && there.can_access_peer(back)? {
            back.enable_peer_access(there)?;
            there.enable_peer_access(back)?;
            PeerAccess::Direct
        } else {
            PeerAccess::Unreachable
        };
        Ok(PeerRoute {
            from: sender.device.ordinal(),
            to: server.device.ordinal(),
            access,
        })
    }

    /// Stops the runtime: marks the segments STOPPED, lets the workers drain
    /// the queues and joins every thread. Also what Drop does.
    pub fn shutdown(mut self) -> Result<(), RuntimeError> {
        self.stop_threads()
    }

    fn stop_threads(&mut self) -> Result<(), RuntimeError> {
        // Release pairs with the workers' Acquire: they drain what was
        // pushed before and exit.
        self.shutdown.store(true, Ordering::Release);
        let mut panicked = 0;
        let running = self.heartbeat.is_some();
        for handle in self.workers.drain(..).chain(self.heartbeat.take()) {
            handle.thread().unpark();
            if handle.join().is_err() {
                panicked += 1;
            }
        }
        for segment in self.segments() {
            segment.set_state(runtime_state::STOPPED);
        }
        // Once: `shutdown` stops the threads, then Drop finds none.
        if running {
            let stats = self.stats();
            // The workers' count: tasks a device's service ran are not in it,
            // and every task a pool's kernels sent is.
            tracing::info!(
                completed = stats.completed,
                failed = stats.failed,
                "runtime stopped; its CPU workers ran the tasks counted"
            );
        }
        if panicked > 0 {
            return Err(RuntimeError::Process(format!(
                "{panicked} runtime threads panicked"
            )));
        }
        Ok(())
    }
}

impl<A: GpuApi> Drop for Runtime<A> {
    fn drop(&mut self) {
        // Errors (a panicked thread) have no one to go to here.
        let _ = self.stop_threads();
    }
}
