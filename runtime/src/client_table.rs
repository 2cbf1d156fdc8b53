//! Host clients cannot starve each other: each attached [`crate::Client`]
//! takes its futures and payloads from its own heap in the CPU segment, so a
//! client that leaks futures runs out of its own quota
//! ([`TaskError::ClientQuota`], or [`TaskError::ClientHeapFragmented`] when
//! it has the bytes but not in one piece), never the segment's, and what it held is
//! taken back when its process dies or it detaches.
//!
//! # Layout
//!
//! The CPU segment's client region ([`SegmentHeader::clients_offset`],
//! host-only, so no C++ mirror) holds a [`ClientTableHeader`], then
//! `max_clients` [`ClientSlot`]s of one cache line each, then
//! `client_device_queues` [`DeviceQueueEntry`]s per slot (a client's device
//! queues: `device_requests.rs`), then a [`ClientRoundTrips`] per slot (the
//! round trips its tasks took), then, from the next page, one heap of
//! `client_heap_bytes` per slot: a shm-core
//! `SizeClassAllocator`. A slot's heap *is* its quota, and taking back
//! everything a client held is re-initialising that allocator: no per-block
//! bookkeeping, no walk of the blocks a dead client left. The in-process
//! runtime's own submits keep the segment's main heap.
//!
//! # A slot's life
//!
//! The state word packs a [`ClientState`] (low 32 bits) with the owner's pid
//! (high 32 bits), so a claim names its claimer in the same CAS:
//!
//! * `Free -> Claiming` (CAS, by [`Client::attach`](crate::Client::attach)),
//!   then the claimer writes its start time, zeroes the counters and
//!   initialises the slot's heap, and moves `Claiming -> Attached` (CAS,
//!   Release). A claimer that dies while `Claiming` published no future; the
//!   janitor frees its slot once its pid is gone.
//! * `Attached -> Free` at detach when the client holds nothing: no future
//!   of it can be queued or in a worker's hands.
//! * `Attached -> Detaching` at detach with futures outstanding (a `Pending`
//!   dropped while its task was queued leaks its future on purpose).
//! * `Attached | Detaching -> Reclaiming` by the runtime's janitor
//!   (`janitor.rs`), when the owner ([`ProcessIdentity`], pid and start
//!   time) is gone or detaching; then `Reclaiming -> Free` once no worker
//!   can touch the slot's heap.
//!
//! # When is a heap no longer touched? (the quiescence barrier)
//!
//! A gone or detached client pushes nothing more, but its futures may still
//! sit in lane rings or in a worker's hands. Rather than count tasks in
//! flight per slot (a hot-path RMW on both sides, and a crash window between
//! the count and the push), the janitor waits for two things, checking
//! once per heartbeat, never blocking:
//!
//! 1. Every CPU lane ring's consumers have passed the position its producers
//!    had claimed when the owner was seen gone ([`LlRing::claimed`] then
//!    [`LlRing::taken`]): every record of the client has been popped.
//! 2. Every worker polling the CPU segment has ended a sweep since (its
//!    sweep counter moved): a worker counts a sweep after processing what
//!    it popped in it, so the tasks popped in step 1 are finished.
//!
//! Only then is the slot freed; the next claimer re-initialises the heap.
//! The cost is one store per worker sweep, on the worker's own line. A lane
//! whose producer died between claiming a position and writing its record
//! never drains: slots waiting on it are then never freed (safe, but held).
//!
//! [`SegmentHeader::clients_offset`]: crate::layout::SegmentHeader::clients_offset
//! [`LlRing::claimed`]: tandem_shm_core::LlRing::claimed
//! [`LlRing::taken`]: tandem_shm_core::LlRing::taken

use std::ptr::addr_of_mut;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use tandem_metrics::{HistogramSnapshot, LatencyHistogram};
use tandem_process::ProcessIdentity;
use tandem_shm_core::block_size;
use tandem_shm_core::{AllocError, AllocatorId, ShmPtr, SizeClassAllocator};

use crate::device_requests::{DeviceQueueEntry, DeviceQueueSnapshot};
use crate::error::RuntimeError;
use crate::task::TaskError;

/// `ClientTableHeader::magic` ("TNDMCLNT").
pub(crate) const CLIENT_TABLE_MAGIC: u64 = 0x544e_444d_434c_4e54;
/// `AllocatorId::major` of a client heap ("TNCH"); the minor is the slot.
pub(crate) const CLIENT_HEAP_ID_MAJOR: u32 = 0x544e_4348;
/// Page granularity of the client heaps (and of `client_heap_bytes`).
pub(crate) const CLIENT_HEAP_ALIGN: usize = 4096;

/// The client region's header. Written once before the segment is
/// published (its magic's Release orders these plain fields).
#[repr(C, align(64))]
#[derive(Debug)]
pub(crate) struct ClientTableHeader {
    /// [`CLIENT_TABLE_MAGIC`].
    pub magic: u64,
    /// Slots in the table.
    pub max_clients: u32,
    /// Device queue entries per slot: the device segments a client may
    /// hold at once.
    pub device_queues: u32,
    /// Bytes of each slot's heap (its quota).
    pub heap_bytes: u64,
    /// Where the first slot's heap starts, from the region's start; slot `i`'s
    /// is `i * heap_bytes` further.
    pub heaps_offset: u64,
    /// Where the first slot's device queue entries start, from the region's
    /// start; slot `i`'s are `i * device_queues` entries further.
    pub entries_offset: u64,
    /// Bytes of each client device segment, and lanes of its queue: what
    /// the runtime adopts.
    pub device_segment_bytes: u64,
    pub device_lanes: u32,
    pub reserved: u32,
}

/// One client's slot: a cache line, so clients' counters do not share one.
#[repr(C, align(64))]
#[derive(Debug)]
pub(crate) struct ClientSlot {
    /// A [`ClientState`] in the low 32 bits, the owner's pid in the high 32.
    pub state: AtomicU64,
    /// The owner's start time ([`ProcessIdentity::start_time`]), valid once
    /// the state is `Attached` (published by that state's Release).
    pub start_time: AtomicU64,
    /// Bytes of the slot's heap in use (whole blocks), for status and the
    /// quota message.
    pub bytes_in_use: AtomicU64,
    /// Futures allocated and not freed (queued, running, done but not yet
    /// dropped, or leaked).
    pub futures: AtomicU64,
    /// How many times the slot has been claimed.
    pub claims: AtomicU64,
    /// The runtime's heartbeat reading the slot's heap for the figures
    /// below (0 or 1): a claimer waits for it to leave before it
    /// re-initialises the heap ([`ClientTable::refresh_heap_figures`]).
    pub heap_readers: AtomicU64,
    /// Bytes of the slot's heap that were free (on its lists or never
    /// carved) when the heartbeat last read it.
    pub free_bytes: AtomicU64,
    /// The largest block a request could get from the heap then (header
    /// included; `SizeClassAllocator::largest_servable_block`).
    pub largest_servable_block: AtomicU64,
}

/// The round trips of the tasks a slot's clients submitted, one after another (never zeroed,
/// so the sum over the slots only grows, as a Prometheus counter must, however clients come
/// and go).
///
/// # Where a round trip is seen
///
/// From a host client's submit until its wait sees the task complete: only the submitter
/// holds both ends (a record carries no submit time, and the workers see only their part). So
/// the client counts it, in its own slot's lines in the CPU segment, where the runtime's
/// metrics endpoint sums every slot's at a scrape. A client's threads share its lines and no
/// other client's, so the two relaxed adds a task costs there are uncontended when each
/// thread has its client. Kernels' round trips are left out: their clock is not the host's.
#[repr(C, align(64))]
#[derive(Debug)]
pub(crate) struct ClientRoundTrips {
    pub histogram: LatencyHistogram,
}

const _: () = assert!(size_of::<ClientTableHeader>() == 64);
const _: () = assert!(size_of::<ClientRoundTrips>() == 192);
const _: () = assert!(std::mem::offset_of!(ClientTableHeader, max_clients) == 8);
const _: () = assert!(std::mem::offset_of!(ClientTableHeader, heap_bytes) == 16);
const _: () = assert!(std::mem::offset_of!(ClientTableHeader, heaps_offset) == 24);
const _: () = assert!(std::mem::offset_of!(ClientTableHeader, entries_offset) == 32);
const _: () = assert!(std::mem::offset_of!(ClientTableHeader, device_segment_bytes) == 40);
const _: () = assert!(std::mem::offset_of!(ClientTableHeader, device_lanes) == 48);
const _: () = assert!(size_of::<ClientSlot>() == 64 && align_of::<ClientSlot>() == 64);
const _: () = assert!(std::mem::offset_of!(ClientSlot, state) == 0);
const _: () = assert!(std::mem::offset_of!(ClientSlot, start_time) == 8);
const _: () = assert!(std::mem::offset_of!(ClientSlot, bytes_in_use) == 16);
const _: () = assert!(std::mem::offset_of!(ClientSlot, futures) == 24);
const _: () = assert!(std::mem::offset_of!(ClientSlot, claims) == 32);
const _: () = assert!(std::mem::offset_of!(ClientSlot, heap_readers) == 40);
const _: () = assert!(std::mem::offset_of!(ClientSlot, free_bytes) == 48);
const _: () = assert!(std::mem::offset_of!(ClientSlot, largest_servable_block) == 56);

/// Where a slot is in its life (module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub enum ClientState {
    /// Nobody holds it.
    Free = 0,
    /// A client is setting it up.
    Claiming = 1,
    /// A client holds it.
    Attached = 2,
    /// Its client detached with futures outstanding; the janitor frees it.
    Detaching = 3,
    /// The janitor waits until no worker can touch its heap.
    Reclaiming = 4,
}

impl ClientState {
    pub(crate) fn from_word(word: u64) -> Option<Self> {
        Some(match word as u32 {
            0 => Self::Free,
            1 => Self::Claiming,
            2 => Self::Attached,
            3 => Self::Detaching,
            4 => Self::Reclaiming,
            _ => return None,
        })
    }

    pub(crate) fn word(self, pid: u32) -> u64 {
        u64::from(pid) << 32 | self as u64
    }
}

pub(crate) fn pid_of(word: u64) -> u32 {
    (word >> 32) as u32
}

/// What a slot held when it was read (counters are read one by one:
/// a status, not a proof).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ClientSnapshot {
    /// The slot's index.
    pub slot: u32,
    /// Where the slot is in its life.
    pub state: ClientState,
    /// The owner's process id.
    pub pid: u32,
    /// Bytes of the slot's heap in use.
    pub bytes_in_use: u64,
    /// Futures allocated and not freed.
    pub futures: u64,
    /// How many times the slot has been claimed.
    pub claims: u64,
    /// Bytes of the slot's heap free at the runtime's last look (every
    /// status refresh): on its lists or never carved.
    pub free_bytes: u64,
    /// The largest block a request could get from the heap then, header
    /// included (a request of up to 16 bytes less fits): smaller than
    /// `free_bytes` when the free memory lies in pieces between live blocks.
    pub largest_servable_block: u64,
}

/// What each client may hold of device queues of its own: entries per
/// slot, and the size and lanes of each device segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct DeviceQueueLimits {
    pub per_client: u32,
    pub segment_bytes: usize,
    pub lanes: u32,
}

impl DeviceQueueLimits {
    /// No device queues for clients (and segments without a client table).
    pub(crate) const NONE: Self = Self {
        per_client: 0,
        segment_bytes: 0,
        lanes: 0,
    };
}

/// Bytes of a client region of `max_clients` heaps of `heap_bytes`, with
/// `device_queues` entries per slot.
pub(crate) fn region_bytes(max_clients: u32, device_queues: u32, heap_bytes: usize) -> usize {
    heaps_offset(max_clients, device_queues) + max_clients as usize * heap_bytes
}

fn entries_offset(max_clients: u32) -> usize {
    size_of::<ClientTableHeader>() + max_clients as usize * size_of::<ClientSlot>()
}

fn round_trips_offset(max_clients: u32, device_queues: u32) -> usize {
    let entries = max_clients as usize * device_queues as usize;
    (entries_offset(max_clients) + entries * size_of::<DeviceQueueEntry>())
        .next_multiple_of(align_of::<ClientRoundTrips>())
}

fn heaps_offset(max_clients: u32, device_queues: u32) -> usize {
    let round_trips = max_clients as usize * size_of::<ClientRoundTrips>();
    (round_trips_offset(max_clients, device_queues) + round_trips)
        .next_multiple_of(CLIENT_HEAP_ALIGN)
}

/// The client table of a CPU segment.
#[derive(Debug)]
pub struct ClientTable<'r> {
    header: &'r ClientTableHeader,
    pub(crate) slots: &'r [ClientSlot],
    /// Every slot's device queue entries, slot by slot.
    entries: &'r [DeviceQueueEntry],
    /// Every slot's round trips.
    round_trips: &'r [ClientRoundTrips],
    /// The region's start in this process.
    base: *mut u8,
    /// The region's offset in its segment.
    region_offset: u64,
}

// SAFETY: the header's fields are immutable once published, the slots are
// atomics, and `base` is only address arithmetic for the heaps, which are
// used through their allocators (Send + Sync) by the slot's claimer.
unsafe impl Send for ClientTable<'_> {}
// SAFETY: as for Send; every method takes `&self`.
unsafe impl Sync for ClientTable<'_> {}

impl<'r> ClientTable<'r> {
    /// Lays out an empty table of `max_clients` slots with heaps of
    /// `heap_bytes` and the device queue entries of `limits` in `len` bytes
    /// at `region` (segment offset `region_offset`).
    ///
    /// # Safety
    /// `region` must be page-aligned, valid for reads and writes of `len`
    /// bytes for `'r`, and nobody else's yet (the segment is unpublished).
    pub(crate) unsafe fn init_in(
        region: *mut u8,
        len: usize,
        region_offset: u64,
        max_clients: u32,
        heap_bytes: usize,
        limits: DeviceQueueLimits,
    ) -> Result<Self, RuntimeError> {
        let device_queues = limits.per_client;
        if region_bytes(max_clients, device_queues, heap_bytes) > len
            || heap_bytes % CLIENT_HEAP_ALIGN != 0
        {
            return Err(RuntimeError::BadSegment(format!(
                "{max_clients} client heaps of {heap_bytes} bytes do not fit {len} bytes"
            )));
        }
        let header = region.cast::<ClientTableHeader>();
        // SAFETY: the region holds the header and the slots (checked), is
        // page-aligned and ours alone (caller); atomics are written with new.
        unsafe {
            header.write(ClientTableHeader {
                magic: CLIENT_TABLE_MAGIC,
                max_clients,
                device_queues,
                heap_bytes: heap_bytes as u64,
                heaps_offset: heaps_offset(max_clients, device_queues) as u64,
                entries_offset: entries_offset(max_clients) as u64,
                device_segment_bytes: limits.segment_bytes as u64,
                device_lanes: limits.lanes,
                reserved: 0,
            });
            let slots = region
                .add(size_of::<ClientTableHeader>())
                .cast::<ClientSlot>();
            for i in 0..max_clients as usize {
                let slot = slots.add(i);
                addr_of_mut!((*slot).state).write(AtomicU64::new(0));
                addr_of_mut!((*slot).start_time).write(AtomicU64::new(0));
                addr_of_mut!((*slot).bytes_in_use).write(AtomicU64::new(0));
                addr_of_mut!((*slot).futures).write(AtomicU64::new(0));
                addr_of_mut!((*slot).claims).write(AtomicU64::new(0));
                addr_of_mut!((*slot).heap_readers).write(AtomicU64::new(0));
                addr_of_mut!((*slot).free_bytes).write(AtomicU64::new(0));
                addr_of_mut!((*slot).largest_servable_block).write(AtomicU64::new(0));
            }
            // All-zero is a free entry: every word an atomic integer.
            region.add(entries_offset(max_clients)).write_bytes(
                0,
                max_clients as usize * device_queues as usize * size_of::<DeviceQueueEntry>(),
            );
            // All-zero is an empty histogram: every word an atomic integer.
            region
                .add(round_trips_offset(max_clients, device_queues))
                .write_bytes(0, max_clients as usize * size_of::<ClientRoundTrips>());
            Self::attach(region, len, region_offset)
        }
    }

    /// Attaches to the table a runtime laid out at `region`.
    ///
    /// # Safety
    /// `region` must be page-aligned and valid for reads and writes of `len`
    /// bytes for `'r`, and the segment published (its header's magic seen
    /// with Acquire).
    pub(crate) unsafe fn attach(
        region: *mut u8,
        len: usize,
        region_offset: u64,
    ) -> Result<Self, RuntimeError> {
        let bad = |why: String| Err(RuntimeError::BadSegment(format!("client table: {why}")));
        if len < size_of::<ClientTableHeader>() {
            return bad(format!("{len} bytes hold no header"));
        }
        // SAFETY: the header lies in the region (checked), aligned (page);
        // its plain fields were written before the segment was published.
        let header = unsafe { &*region.cast::<ClientTableHeader>() };
        if header.magic != CLIENT_TABLE_MAGIC {
            return bad(format!("magic {:#x}", header.magic));
        }
        let heap_bytes = usize::try_from(header.heap_bytes).unwrap_or(usize::MAX);
        let heaps_at = heaps_offset(header.max_clients, header.device_queues);
        let needed = heaps_at.checked_add((header.max_clients as usize).saturating_mul(heap_bytes));
        if header.heaps_offset != heaps_at as u64
            || header.entries_offset != entries_offset(header.max_clients) as u64
            || heap_bytes % CLIENT_HEAP_ALIGN != 0
            || needed.is_none_or(|n| n > len)
        {
            return bad(format!(
                "{} heaps of {heap_bytes} bytes do not fit {len} bytes",
                header.max_clients
            ));
        }
        // SAFETY: the slots follow the header inside the region (checked),
        // initialised before publication, and are only used atomically.
        let slots = unsafe {
            std::slice::from_raw_parts(
                region
                    .add(size_of::<ClientTableHeader>())
                    .cast::<ClientSlot>(),
                header.max_clients as usize,
            )
        };
        // SAFETY: the entries lie between the slots and the heaps (checked
        // through heaps_offset), were zeroed before publication, and are
        // only used atomically.
        let entries = unsafe {
            std::slice::from_raw_parts(
                region
                    .add(entries_offset(header.max_clients))
                    .cast::<DeviceQueueEntry>(),
                header.max_clients as usize * header.device_queues as usize,
            )
        };
        // SAFETY: the round trips lie between the entries and the heaps
        // (checked through heaps_offset), 64-aligned, were zeroed before
        // publication, and are only used atomically.
        let round_trips = unsafe {
            std::slice::from_raw_parts(
                region
                    .add(round_trips_offset(header.max_clients, header.device_queues))
                    .cast::<ClientRoundTrips>(),
                header.max_clients as usize,
            )
        };
        Ok(Self {
            header,
            slots,
            entries,
            round_trips,
            base: region,
            region_offset,
        })
    }

    /// Slots in the table (the most clients attached at once).
    pub fn max_clients(&self) -> u32 {
        self.header.max_clients
    }

    /// Bytes of each client's heap: its quota.
    pub fn quota_bytes(&self) -> u64 {
        self.header.heap_bytes
    }

    /// What each client may hold of device queues of its own.
    pub(crate) fn device_queue_limits(&self) -> DeviceQueueLimits {
        DeviceQueueLimits {
            per_client: self.header.device_queues,
            segment_bytes: usize::try_from(self.header.device_segment_bytes).unwrap_or(0),
            lanes: self.header.device_lanes,
        }
    }

    /// Slot `index`'s device queue entries (empty for no such slot).
    pub(crate) fn entries(&self, index: u32) -> &'r [DeviceQueueEntry] {
        let per = self.header.device_queues as usize;
        let first = index as usize * per;
        self.entries.get(first..first + per).unwrap_or(&[])
    }

    /// Slot `index`'s device queues that are not free.
    pub fn device_queues(&self, index: u32) -> Vec<DeviceQueueSnapshot> {
        self.entries(index)
            .iter()
            .filter_map(DeviceQueueEntry::snapshot)
            .collect()
    }

    /// The round trips of every task the clients timed, all slots summed.
    pub(crate) fn round_trips(&self) -> HistogramSnapshot {
        let mut sum = HistogramSnapshot::empty();
        for slot in self.round_trips {
            sum.add(&slot.histogram.snapshot());
        }
        sum
    }

    /// Clients that attached since the runtime started: every slot's claims.
    pub(crate) fn claims(&self) -> u64 {
        // Relaxed: a statistic.
        self.slots
            .iter()
            .map(|s| s.claims.load(Ordering::Relaxed))
            .sum()
    }

    /// Slot `index` as it is now.
    pub fn slot(&self, index: u32) -> Option<ClientSnapshot> {
        let slot = self.slots.get(index as usize)?;
        // Acquire: pairs with the Release that set the state, so the
        // counters read after it are at least as new. The rest are Relaxed:
        // statistics.
        let word = slot.state.load(Ordering::Acquire);
        Some(ClientSnapshot {
            slot: index,
            // A state word nobody writes; shown as reclaiming, never reused.
            state: ClientState::from_word(word).unwrap_or(ClientState::Reclaiming),
            pid: pid_of(word),
            bytes_in_use: slot.bytes_in_use.load(Ordering::Relaxed),
            futures: slot.futures.load(Ordering::Relaxed),
            claims: slot.claims.load(Ordering::Relaxed),
            free_bytes: slot.free_bytes.load(Ordering::Relaxed),
            largest_servable_block: slot.largest_servable_block.load(Ordering::Relaxed),
        })
    }

    /// The heap of slot `index`.
    ///
    /// # Safety
    /// The caller keeps whoever could re-initialise the heap (a claimer)
    /// from doing so while the handle is used: it holds the slot, or is
    /// counted in its `heap_readers` and saw it claimed.
    unsafe fn heap(&self, index: usize) -> Result<SizeClassAllocator<'r>, AllocError> {
        let heap_offset = self.header.heaps_offset + index as u64 * self.header.heap_bytes;
        // SAFETY: the heap lies in the region (checked at attach), which
        // lives for 'r; the caller rules out a concurrent initialisation.
        unsafe {
            SizeClassAllocator::attach(
                self.base.add(heap_offset as usize),
                self.header.heap_bytes as usize,
            )
        }
    }

    /// Reads every claimed slot's heap and stores its free bytes and the
    /// largest block a request could get in the slot, for `tandem status`
    /// (the runtime's heartbeat calls it on each refresh). The reads walk
    /// the heap's free lists as a reader (shm-core's `stats`) while the
    /// client allocates and frees: figures, not a proof.
    ///
    /// A claimer re-initialises a heap it finds free, which must not happen
    /// under the walk: this counts itself in the slot's `heap_readers`, then
    /// (a SeqCst fence between) reads the state, and walks only a heap whose
    /// slot is held; a claimer moves the state to `Claiming`, then (a fence
    /// between) waits for `heap_readers` to read 0. Either the claimer sees
    /// this reader or this reader sees the claim (the store-buffering
    /// pattern, fences on both sides).
    pub(crate) fn refresh_heap_figures(&self) {
        for (index, slot) in self.slots.iter().enumerate() {
            slot.heap_readers.fetch_add(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            // Acquire: pairs with the claimer's Release of Attached, so the
            // initialised heap is visible.
            let state = ClientState::from_word(slot.state.load(Ordering::Acquire));
            let held = matches!(
                state,
                Some(ClientState::Attached | ClientState::Detaching | ClientState::Reclaiming)
            );
            // SAFETY: the slot is held and its heap initialised (Acquire
            // above); no claimer can re-initialise it before we leave
            // `heap_readers` (see above).
            let figures = held.then(|| unsafe { self.heap(index) }).and_then(|heap| {
                let heap = heap.ok()?;
                let stats = heap.stats().ok()?;
                Some((
                    stats.free_bytes() + stats.uncarved_bytes(),
                    heap.largest_servable_block().ok()?,
                ))
            });
            // Release: pairs with a claimer's Acquire load of
            // `heap_readers`, so our walk happens before its initialisation.
            slot.heap_readers.fetch_sub(1, Ordering::Release);
            if let Some((free, largest)) = figures {
                // Relaxed: figures for status.
                slot.free_bytes.store(free, Ordering::Relaxed);
                slot.largest_servable_block
                    .store(largest, Ordering::Relaxed);
            }
        }
    }

    /// Every slot that is not free: attached clients, and those being set up
    /// or taken back.
    pub fn attached(&self) -> Vec<ClientSnapshot> {
        (0..self.max_clients())
            .filter_map(|i| self.slot(i))
            .filter(|s| s.state != ClientState::Free)
            .collect()
    }

    /// Claims a free slot for `owner` and initialises its heap.
    pub(crate) fn claim(&self, owner: ProcessIdentity) -> Result<ClientLease<'r>, RuntimeError> {
        let claiming = ClientState::Claiming.word(owner.pid);
        for (index, slot) in self.slots.iter().enumerate() {
            // Acquire on success: pairs with the Release that freed the slot
            // (the janitor's, after its barrier, or a detach's), so every
            // access to the old heap happened-before our re-initialisation.
            // Relaxed on failure: we move on to the next slot.
            if slot
                .state
                .compare_exchange(
                    ClientState::Free.word(0),
                    claiming,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                continue;
            }
            // SeqCst: pairs with the fence of `refresh_heap_figures` (the
            // store-buffering pattern there): a heartbeat that did not see
            // our claim is counted in `heap_readers` below.
            fence(Ordering::SeqCst);
            if !heap_readers_left(slot) {
                // Release: hands the slot back as it was.
                slot.state
                    .store(ClientState::Free.word(0), Ordering::Release);
                continue;
            }
            // Relaxed: published by the Release of Attached below.
            slot.start_time.store(owner.start_time, Ordering::Relaxed);
            slot.bytes_in_use.store(0, Ordering::Relaxed);
            slot.futures.store(0, Ordering::Relaxed);
            slot.claims.fetch_add(1, Ordering::Relaxed);
            let heap_offset = self.header.heaps_offset + index as u64 * self.header.heap_bytes;
            let heap_bytes = self.header.heap_bytes as usize;
            // SAFETY: the heap lies in the region (checked at attach); the
            // slot is ours (CAS) and nobody touches its heap (the barrier
            // before it was freed, module docs).
            let heap = unsafe {
                SizeClassAllocator::init_in(
                    self.base.add(heap_offset as usize),
                    heap_bytes,
                    AllocatorId::new(CLIENT_HEAP_ID_MAJOR, index as u32),
                )
            };
            let heap = match heap {
                Ok(heap) => heap,
                Err(e) => {
                    // Release: hands the slot back as it was.
                    slot.state
                        .store(ClientState::Free.word(0), Ordering::Release);
                    return Err(e.into());
                }
            };
            // Relaxed: published by the Release of Attached below.
            slot.free_bytes.store(
                heap.stats().map_or(0, |s| s.uncarved_bytes()),
                Ordering::Relaxed,
            );
            slot.largest_servable_block.store(
                heap.largest_servable_block().unwrap_or(0),
                Ordering::Relaxed,
            );
            // Release: the start time and the heap are visible to whoever
            // sees Attached. A CAS, not a store: the janitor frees a Claiming
            // slot whose pid it finds gone, which cannot be ours unless our
            // pid was misread; then the slot is not ours any more.
            slot.state
                .compare_exchange(
                    claiming,
                    ClientState::Attached.word(owner.pid),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .map_err(|_| {
                    RuntimeError::Process(format!("client slot {index} was taken back mid-claim"))
                })?;
            return Ok(ClientLease {
                index: index as u32,
                slot,
                entries: self.entries(index as u32),
                round_trips: &self.round_trips[index].histogram,
                device_limits: self.device_queue_limits(),
                heap,
                heap_offset: self.region_offset + heap_offset,
                quota: self.header.heap_bytes,
                owner,
            });
        }
        Err(RuntimeError::TooManyClients {
            max: self.max_clients(),
        })
    }
}

/// How many times a claimer checks a slot's `heap_readers` before it takes
/// another slot (a heartbeat that died in its walk never leaves); it yields
/// between checks, so a walk descheduled on a busy machine gets to finish.
const HEAP_READERS_PATIENCE: u32 = 1 << 16;

/// Whether the slot's `heap_readers` were seen at 0 (the claimer's side of
/// `refresh_heap_figures`).
fn heap_readers_left(slot: &ClientSlot) -> bool {
    // Acquire: pairs with the heartbeat's Release decrement, so its walk of
    // the heap happens before our initialisation.
    (0..HEAP_READERS_PATIENCE).any(|_| {
        let left = slot.heap_readers.load(Ordering::Acquire) == 0;
        if !left {
            std::thread::yield_now();
        }
        left
    })
}

/// A claimed slot: where a [`crate::Client`] allocates its futures.
#[derive(Debug)]
pub(crate) struct ClientLease<'r> {
    index: u32,
    slot: &'r ClientSlot,
    /// The slot's device queue entries.
    entries: &'r [DeviceQueueEntry],
    /// Where the client times its tasks ([`ClientRoundTrips`]).
    round_trips: &'r LatencyHistogram,
    device_limits: DeviceQueueLimits,
    heap: SizeClassAllocator<'r>,
    /// The heap's offset in the segment: its pointers are relative to it.
    heap_offset: u64,
    quota: u64,
    owner: ProcessIdentity,
}

/// Bytes of the block serving a request of `bytes` (what the quota pays).
fn block_bytes(bytes: usize) -> u64 {
    SizeClassAllocator::class_for(bytes as u64, 16).map_or(bytes as u64, block_size)
}

impl ClientLease<'_> {
    /// The slot's index.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    /// The slot's device queue entries.
    pub(crate) fn entries(&self) -> &[DeviceQueueEntry] {
        self.entries
    }

    /// Where the client counts its tasks' round trips.
    pub(crate) fn round_trips(&self) -> &LatencyHistogram {
        self.round_trips
    }

    /// What the runtime lets a client hold of device queues.
    pub(crate) fn device_limits(&self) -> DeviceQueueLimits {
        self.device_limits
    }

    /// Allocates `bytes` (16-aligned) from the slot's heap, counted as a
    /// future when `future`; returns the segment pointer (segment id
    /// `segment`) and the address. A full heap is the client's quota error.
    pub(crate) fn allocate(
        &self,
        segment: AllocatorId,
        bytes: usize,
        future: bool,
    ) -> Result<(ShmPtr<u8>, *mut u8), TaskError> {
        match self.heap.allocate_full(bytes as u64, 16) {
            Ok(full) => {
                // Relaxed: statistics for status and the quota message.
                self.slot
                    .bytes_in_use
                    .fetch_add(block_bytes(bytes), Ordering::Relaxed);
                if future {
                    self.slot.futures.fetch_add(1, Ordering::Relaxed);
                }
                Ok((
                    ShmPtr::new(segment, self.heap_offset + full.shm.off),
                    full.ptr,
                ))
            }
            Err(AllocError::Exhausted { .. }) => Err(self.exhausted(bytes)),
            Err(e) => Err(TaskError::OutOfMemory(e.to_string())),
        }
    }

    /// The error for a request of `bytes` the heap could not serve: a
    /// fragmented heap when its free bytes would hold the request's block,
    /// else the quota used up. The heap's lists are walked while the
    /// client's other threads may use them: figures for a message.
    fn exhausted(&self, bytes: usize) -> TaskError {
        let needed = block_bytes(bytes);
        let free = self
            .heap
            .stats()
            .map(|s| s.free_bytes() + s.uncarved_bytes());
        match (free, self.heap.largest_servable_block()) {
            (Ok(free), Ok(largest)) if free >= needed => TaskError::ClientHeapFragmented {
                quota_bytes: self.quota,
                needed_bytes: needed,
                free_bytes: free,
                largest_free_block: largest,
            },
            _ => TaskError::ClientQuota {
                quota_bytes: self.quota,
                // Relaxed: a count for the message.
                futures: self.slot.futures.load(Ordering::Relaxed),
            },
        }
    }

    /// Frees what [`allocate`](Self::allocate) returned for `bytes`.
    pub(crate) fn free(
        &self,
        ptr: ShmPtr<u8>,
        bytes: usize,
        future: bool,
    ) -> Result<(), RuntimeError> {
        let off = ptr.off.checked_sub(self.heap_offset).ok_or_else(|| {
            RuntimeError::BadSegment(format!("{ptr:?} is not in client slot {}", self.index))
        })?;
        self.heap.free(ShmPtr::new(self.heap.id(), off))?;
        // Relaxed: statistics, as in allocate.
        self.slot
            .bytes_in_use
            .fetch_sub(block_bytes(bytes), Ordering::Relaxed);
        if future {
            self.slot.futures.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Gives the slot up: at once when nothing of it is outstanding, else
    /// marks it detaching for the janitor.
    pub(crate) fn detach(&self) {
        // Relaxed: our own counts; this thread's frees came before (every
        // Pending borrowed the client, so its drops happened-before this).
        let idle = self.slot.futures.load(Ordering::Relaxed) == 0
            && self.slot.bytes_in_use.load(Ordering::Relaxed) == 0;
        let next = if idle {
            ClientState::Free.word(0)
        } else {
            ClientState::Detaching.word(self.owner.pid)
        };
        // Release: our writes to the heap (and our pushes, for the janitor's
        // barrier) happen-before whoever acquires the new state. A failed CAS
        // means the janitor already took the slot back; nothing is left.
        let _ = self.slot.state.compare_exchange(
            ClientState::Attached.word(self.owner.pid),
            next,
            Ordering::Release,
            Ordering::Relaxed,
        );
    }
}
