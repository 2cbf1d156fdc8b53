//! The runtime's janitor: takes back the client slots of clients that died
//! or detached, once no worker can touch their heaps (the slot's life and
//! the quiescence barrier are in [`crate::clients`]). Above the segment and
//! the workers, whose lane rings and sweep counters it watches; run by the
//! runtime's heartbeat thread.
//!
//! It also answers clients' requests for device queues of their own
//! (`device_requests.rs`): it adopts a requested segment into the workers'
//! poll set ([`crate::adopted`]) once it checked that the segment is a
//! device segment of the size, lanes and id the runtime set, owned by the
//! slot's client, for a served device; it drops a segment from the set when
//! its client releases it or dies, and then removes a dead client's
//! segment name.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_process::{ProcessIdentity, ProcessState};
use tandem_shm_core::{Priority, Segment};

use crate::adopted::{Adopted, AdoptedSegments};
use crate::client_table::{pid_of, ClientSlot, ClientState, ClientTable};
use crate::device_requests::{
    client_segment_index, DeviceQueueEntry, DeviceQueueRefusal, DeviceQueueState,
};
use crate::layout::{segment_kind, SEGMENT_ID_MAJOR};
use crate::segment::QueueSegment;
use crate::worker::WorkerStats;

/// How often the janitor checks whether attached owners still live (a read
/// of `/proc` each); reclaims under way advance at every heartbeat.
pub(crate) const OWNER_CHECK_PERIOD: Duration = Duration::from_millis(50);

/// Why a slot is being taken back.
#[derive(Clone, Copy, Debug)]
enum Why {
    Gone,
    Detached,
}

/// A reclaim under way.
#[derive(Debug)]
enum Phase {
    /// Waiting until the consumers pass these ring positions (every CPU
    /// lane ring, high then low per lane).
    Draining(Vec<u64>),
    /// Waiting until every worker's sweep counter leaves these values.
    Finishing(Vec<u64>),
}

#[derive(Debug)]
struct Reclaim {
    pid: u32,
    why: Why,
    phase: Phase,
}

/// Slots the janitor took back since the runtime started, by why: for status and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reclaimed {
    /// Their client's process was gone (died attached, or while attaching).
    pub gone: u64,
    /// Their client detached with futures outstanding.
    pub detached: u64,
}

/// What the janitor needs to serve clients' device queues.
pub(crate) struct ClientDevices {
    /// The workers' poll set of client device segments.
    pub adopted: Arc<AdoptedSegments>,
    /// The served devices' ordinals, by the runtime's device index.
    pub ordinals: Vec<usize>,
    /// The runtime's workers (each adopted segment counts per worker).
    pub workers: usize,
}

/// Takes back the slots of clients that died or detached (module docs);
/// run by the runtime's heartbeat thread.
pub(crate) struct Janitor {
    segment: Arc<QueueSegment>,
    /// The workers that poll the CPU segment.
    workers: Vec<Arc<WorkerStats>>,
    devices: ClientDevices,
    reclaims: Vec<Option<Reclaim>>,
    /// Per slot, the claim count last logged as attached: a claim seen
    /// anew is a client that attached since.
    announced: Vec<u64>,
    reclaimed: Reclaimed,
    last_owner_check: Option<Instant>,
    /// Dead clients' device segments that were still held when their slot
    /// was taken back (a dying process keeps its mappings until its GPU
    /// context is torn down, which on a GPU can outlast the kill), with
    /// when they were first tried: tried again every round, for
    /// [`UNLINK_PATIENCE`].
    unlinks: Vec<(String, Instant)>,
}

/// How long the janitor keeps trying to remove a dead client's device
/// segment that is still held; after that, `tandem clean` can.
const UNLINK_PATIENCE: Duration = Duration::from_secs(60);

impl Janitor {
    /// A janitor for `segment`'s client table (None when it has none).
    pub(crate) fn new(
        segment: Arc<QueueSegment>,
        workers: Vec<Arc<WorkerStats>>,
        devices: ClientDevices,
    ) -> Option<Self> {
        let slots = segment.clients()?.max_clients() as usize;
        Some(Self {
            segment,
            workers,
            devices,
            reclaims: (0..slots).map(|_| None).collect(),
            announced: vec![0; slots],
            reclaimed: Reclaimed::default(),
            last_owner_check: None,
            unlinks: Vec::new(),
        })
    }

    /// One round: starts reclaims of slots whose owner is gone (every
    /// [`OWNER_CHECK_PERIOD`]) or detaching, and advances those under way;
    /// answers device queue requests and releases, and refreshes the
    /// adopted segments' task counts.
    pub(crate) fn tick(&mut self) {
        let check_owners = self
            .last_owner_check
            .is_none_or(|t| t.elapsed() >= OWNER_CHECK_PERIOD);
        if check_owners {
            self.last_owner_check = Some(Instant::now());
        }
        for index in 0..self.reclaims.len() {
            self.tend(index, check_owners);
            self.tend_device_queues(index as u32);
        }
        self.unlinks.retain(|(name, since)| match remove_if_stale(name) {
            Ok(false) if since.elapsed() < UNLINK_PATIENCE => true,
            Ok(false) => {
                tracing::warn!(
                    "a dead client's device queues {name} are still held after {UNLINK_PATIENCE:?}; \
                     left to `tandem clean`"
                );
                false
            }
            Ok(true) => false,
            Err(e) => {
                tracing::warn!("removing a dead client's device queues {name}: {e}");
                false
            }
        });
        // The adopted segments' counts, for status.
        if let Some(table) = self.segment.clients() {
            for adopted in self.devices.adopted.lock().iter() {
                if let Some(entry) = table.entries(adopted.slot).get(adopted.entry as usize) {
                    // Relaxed: a figure for status.
                    entry.tasks.store(adopted.taken(), Ordering::Relaxed);
                }
            }
        }
    }

    /// The slots taken back so far.
    pub(crate) fn reclaimed(&self) -> Reclaimed {
        self.reclaimed
    }

    /// Answers slot `index`'s device queue requests and releases.
    fn tend_device_queues(&self, index: u32) {
        let segment = Arc::clone(&self.segment);
        let Some(table) = segment.clients() else {
            return;
        };
        for (k, entry) in table.entries(index).iter().enumerate() {
            match entry.state() {
                Some(DeviceQueueState::Requested) => self.answer(table, index, k as u32, entry),
                Some(DeviceQueueState::Releasing) => {
                    self.drop_adopted(index, k as u32);
                    entry.set_state(DeviceQueueState::Free);
                }
                _ => {}
            }
        }
    }

    /// Adopts the segment entry `k` of slot `index` requests, or refuses it.
    fn answer(&self, table: &ClientTable<'_>, index: u32, k: u32, entry: &DeviceQueueEntry) {
        let Some(slot) = table.slots.get(index as usize) else {
            return;
        };
        // Acquire: the owner's start time was published by Attached's Release.
        let word = slot.state.load(Ordering::Acquire);
        let owner = ProcessIdentity {
            pid: pid_of(word),
            // Relaxed: published by the Acquire above.
            start_time: slot.start_time.load(Ordering::Relaxed),
        };
        let per_client = table.device_queue_limits().per_client;
        let adopted = match ClientState::from_word(word) {
            Some(ClientState::Attached) => self.open_requested(table, index, k, entry, owner),
            _ => Err(DeviceQueueRefusal::NotOwner),
        };
        match adopted {
            Ok(adopted) => {
                let lanes = adopted.segment.queue().num_lanes();
                // Relaxed: published by the state's Release below.
                entry.lanes.store(lanes, Ordering::Relaxed);
                entry.tasks.store(0, Ordering::Relaxed);
                tracing::info!(
                    "client pid {}: serving its device queues {} on device {} ({lanes} lanes, segment {:#x})",
                    owner.pid,
                    entry.name().unwrap_or_default(),
                    entry.device_ordinal.load(Ordering::Relaxed),
                    client_segment_index(index, k, per_client),
                );
                self.devices
                    .adopted
                    .edit(|list| list.push(Arc::new(adopted)));
                entry.set_state(DeviceQueueState::Adopted);
            }
            Err(refusal) => {
                tracing::warn!(
                    "client pid {}: refused its device queues {}: {refusal}",
                    owner.pid,
                    entry.name().unwrap_or_default()
                );
                // Relaxed: published by the state's Release below.
                entry.refusal.store(refusal as u32, Ordering::Relaxed);
                entry.set_state(DeviceQueueState::Refused);
            }
        }
    }

    /// Opens and checks the segment entry `k` of slot `index` names (module
    /// docs): what the workers may poll.
    fn open_requested(
        &self,
        table: &ClientTable<'_>,
        index: u32,
        k: u32,
        entry: &DeviceQueueEntry,
        owner: ProcessIdentity,
    ) -> Result<Adopted, DeviceQueueRefusal> {
        let limits = table.device_queue_limits();
        // Relaxed: published by the Requested Release the caller acquired.
        let ordinal = entry.device_ordinal.load(Ordering::Relaxed) as usize;
        let device = self
            .devices
            .ordinals
            .iter()
            .position(|&o| o == ordinal)
            .ok_or(DeviceQueueRefusal::NoSuchDevice)?;
        let name = entry.name().ok_or(DeviceQueueRefusal::BadSegment)?;
        let memory = Segment::open_named(&name).map_err(|_| DeviceQueueRefusal::BadSegment)?;
        if memory.len() != limits.segment_bytes {
            return Err(DeviceQueueRefusal::BadSegment);
        }
        let segment = QueueSegment::attach(memory).map_err(|_| DeviceQueueRefusal::BadSegment)?;
        let header = segment.header();
        let id = client_segment_index(index, k, limits.per_client);
        if header.kind != segment_kind::DEVICE
            || header.device_ordinal != ordinal as i32
            || (header.id.major, header.id.minor) != (SEGMENT_ID_MAJOR, id)
            || segment.queue().num_lanes() != limits.lanes
        {
            return Err(DeviceQueueRefusal::BadSegment);
        }
        if header.owner() != owner {
            return Err(DeviceQueueRefusal::NotOwner);
        }
        Ok(Adopted::new(
            Arc::new(segment),
            device,
            index,
            k,
            self.devices.workers,
        ))
    }

    /// Drops the segment of entry `k` of slot `index` from the workers'
    /// poll set (if it is there).
    fn drop_adopted(&self, index: u32, k: u32) {
        let dropped = self.devices.adopted.edit(|list| {
            let before = list.len();
            list.retain(|a| (a.slot, a.entry) != (index, k));
            before != list.len()
        });
        if dropped {
            tracing::info!("client slot {index}: stopped serving its device queues {k}");
        }
    }

    /// Takes back every device queue of slot `index`, whose client is gone
    /// or detached: out of the poll set, names of dead owners removed,
    /// entries freed.
    /// Drops slot `index`'s device queues from the workers' poll set and
    /// removes their segments; those of a client that is `gone` and still
    /// held are tried again later ([`Janitor::unlinks`]).
    fn drop_device_queues(&mut self, index: u32, gone: bool) {
        let segment = Arc::clone(&self.segment);
        let Some(table) = segment.clients() else {
            return;
        };
        for (k, entry) in table.entries(index).iter().enumerate() {
            if entry.state().is_none_or(|s| s == DeviceQueueState::Free) {
                continue;
            }
            self.drop_adopted(index, k as u32);
            if let Some(name) = entry.name() {
                // Only a stale name goes: a live client's is its own.
                match remove_if_stale(&name) {
                    Ok(true) => {
                        tracing::info!("client slot {index}: removed its device queues {name}");
                    }
                    Ok(false) if gone => self.unlinks.push((name, Instant::now())),
                    Ok(false) => {}
                    Err(e) => tracing::warn!("client slot {index}: removing {name}: {e}"),
                }
            }
            entry.set_state(DeviceQueueState::Free);
        }
    }

    fn tend(&mut self, index: usize, check_owners: bool) {
        let segment = Arc::clone(&self.segment);
        let Some(table) = segment.clients() else {
            return;
        };
        let Some(slot) = table.slots.get(index) else {
            return;
        };
        // Acquire: pairs with the Release of the state's writer (Attached
        // publishes the start time; Detaching, the client's last pushes).
        let word = slot.state.load(Ordering::Acquire);
        let pid = pid_of(word);
        let why = match ClientState::from_word(word) {
            Some(ClientState::Reclaiming) => {
                self.advance(index, slot);
                return;
            }
            Some(ClientState::Detaching) => Why::Detached,
            Some(ClientState::Attached) if check_owners => {
                let owner = ProcessIdentity {
                    pid,
                    // Relaxed: published by Attached's Release (above).
                    start_time: slot.start_time.load(Ordering::Relaxed),
                };
                if owner.state() != ProcessState::Gone {
                    // Relaxed: a statistic; a claim seen a round late is
                    // logged a round late.
                    let claims = slot.claims.load(Ordering::Relaxed);
                    if self.announced[index] != claims {
                        self.announced[index] = claims;
                        tracing::info!("client pid {pid} attached: slot {index}");
                    }
                    return;
                }
                Why::Gone
            }
            Some(ClientState::Claiming) if check_owners => {
                // A claimer that died before Attached published no future.
                if ProcessIdentity::of(pid).is_none() {
                    // Release: as any free (nothing of the claimer's is
                    // visible to workers, so no barrier is needed).
                    let freed = slot.state.compare_exchange(
                        word,
                        ClientState::Free.word(0),
                        Ordering::Release,
                        Ordering::Relaxed,
                    );
                    if freed.is_ok() {
                        self.reclaimed.gone += 1;
                        tracing::info!("client pid {pid} died attaching: freed slot {index}");
                    }
                }
                return;
            }
            _ => return,
        };
        // AcqRel: the claim of the slot for reclaiming; a failed CAS means
        // the client detached meanwhile (Attached -> Free or Detaching):
        // look again next round.
        if slot
            .state
            .compare_exchange(
                word,
                ClientState::Reclaiming.word(pid),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return;
        }
        // Its kernels' queues first: the workers stop taking their lanes.
        self.drop_device_queues(index as u32, matches!(why, Why::Gone));
        // The owner is gone (its process exit went through the kernel, which
        // orders its memory accesses before /proc says so) or detached (its
        // Release, acquired above): its pushes have all claimed positions
        // below what `claimed` reads now.
        self.reclaims[index] = Some(Reclaim {
            pid,
            why,
            phase: Phase::Draining(self.claimed_positions()),
        });
        self.advance(index, slot);
    }

    /// Where the producers of every CPU lane ring are (high, then low, per
    /// lane).
    fn claimed_positions(&self) -> Vec<u64> {
        let queue = self.segment.queue();
        (0..queue.num_lanes())
            .flat_map(|lane| [Priority::High, Priority::Low].map(|p| (lane, p)))
            .map(|(lane, p)| queue.lane_ring(lane, p).map_or(0, |r| r.claimed()))
            .collect()
    }

    /// Moves a reclaim on as far as it can go now.
    fn advance(&mut self, index: usize, slot: &ClientSlot) {
        if self.reclaims[index].is_none() {
            // A Reclaiming slot this janitor did not start (cannot happen in
            // one runtime): start its barrier from the current positions.
            self.reclaims[index] = Some(Reclaim {
                pid: pid_of(slot.state.load(Ordering::Relaxed)),
                why: Why::Gone,
                phase: Phase::Draining(self.claimed_positions()),
            });
        }
        let queue = self.segment.queue();
        let Some(reclaim) = self.reclaims[index].as_mut() else {
            return;
        };
        if let Phase::Draining(claimed) = &reclaim.phase {
            let rings = (0..queue.num_lanes())
                .flat_map(|lane| [Priority::High, Priority::Low].map(|p| (lane, p)));
            // `taken` is Acquire: the pops that moved it (a release sequence
            // of CASes) happened-before the sweep counters read below.
            let drained = rings.zip(claimed).all(|((lane, p), &claimed)| {
                queue
                    .lane_ring(lane, p)
                    .is_ok_and(|r| r.taken().wrapping_sub(claimed) as i64 >= 0)
            });
            if !drained {
                return;
            }
            reclaim.phase = Phase::Finishing(self.workers.iter().map(|w| w.sweeps()).collect());
        }
        if let Phase::Finishing(sweeps) = &reclaim.phase {
            // Every worker ended a sweep after it popped what it held (module
            // docs); `sweeps` is Acquire, so its accesses to the futures
            // happened-before the Release below.
            if !self
                .workers
                .iter()
                .zip(sweeps)
                .all(|(w, &s)| w.sweeps() != s)
            {
                return;
            }
            // Relaxed: statistics, published by the Release below.
            let bytes = slot.bytes_in_use.swap(0, Ordering::Relaxed);
            let futures = slot.futures.swap(0, Ordering::Relaxed);
            // Release: pairs with the next claimer's Acquire CAS (claim).
            slot.state
                .store(ClientState::Free.word(0), Ordering::Release);
            let (pid, why) = (reclaim.pid, reclaim.why);
            self.reclaims[index] = None;
            match why {
                Why::Gone => self.reclaimed.gone += 1,
                Why::Detached => self.reclaimed.detached += 1,
            }
            match why {
                Why::Gone => tracing::info!(
                    "client pid {pid} gone: reclaimed slot {index} ({bytes} bytes, {futures} futures)"
                ),
                Why::Detached => tracing::info!(
                    "client pid {pid} detached: reclaimed slot {index} ({bytes} bytes, {futures} futures)"
                ),
            }
        }
    }
}

/// Removes segment `name` if its owner is gone and no process holds it;
/// whether it is gone now (removed, or not there).
fn remove_if_stale(name: &str) -> Result<bool, crate::error::RuntimeError> {
    if crate::stale::remove_stale_segment(name)?.is_some() {
        return Ok(true);
    }
    Ok(!std::path::Path::new(tandem_shm_core::SHM_DIR)
        .join(name)
        .exists())
}
