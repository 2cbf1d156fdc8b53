//! A queue segment: the header, lane queue, heap and kernel arena of
//! [`crate::layout`], in one shared-memory [`Segment`], seen from the host.

use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use tandem_process::ProcessIdentity;
use tandem_shm_core::layout::{BackendKind, MemoryBackend};
use tandem_shm_core::FutureShm;
use tandem_shm_core::{
    AllocatorId, ArenaAllocator, LaneQueue, LlRing, Segment, ShmPtr, SizeClassAllocator,
};

use crate::client_table::{ClientLease, ClientTable, DeviceQueueLimits};
use crate::error::RuntimeError;
use crate::host_inbox::HostInbox;
use crate::layout::{
    runtime_state, SegmentHeader, ARENA_ID_MAJOR, HEAP_ID_MAJOR, SEGMENT_HEADER_RESERVED,
    SEGMENT_ID_MAJOR, SEGMENT_MAGIC, SEGMENT_VERSION,
};
use crate::liveness::monotonic_ns;

/// Page granularity of the regions inside a segment.
const REGION_ALIGN: usize = 4096;
/// The largest segment: lane records name futures by 32-bit offsets
/// ([`crate::layout::task_record`]).
pub(crate) const MAX_SEGMENT_BYTES: usize = 1 << 32;
/// The smallest heap (and arena) a segment is given.
const MIN_REGION: usize = 64 << 10;

fn align_up(n: usize) -> usize {
    n.next_multiple_of(REGION_ALIGN)
}

/// Bytes of the GPU service's from-host ring (`rt_inbox_ring_bytes` in
/// tandem/runtime/context.h): one LL ring of task records, rounded up to a
/// cache line.
pub(crate) fn inbox_ring_bytes(depth: u32) -> usize {
    LlRing::required_bytes(depth).next_multiple_of(64)
}

/// Bytes of the queue region: the lane queue, then room for the from-host
/// ring (every segment gets the room, so one size fits the configuration
/// check).
fn queue_region_bytes(lanes: u32, depth: u32) -> usize {
    let lane_queue = LaneQueue::required_bytes(lanes, depth).next_multiple_of(64);
    align_up(lane_queue + inbox_ring_bytes(depth))
}

/// Where the regions of a segment lie.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct SegmentGeometry {
    pub queue_offset: usize,
    pub queue_bytes: usize,
    /// The host clients' region ([`crate::clients`]); 0 bytes (and offset)
    /// in device segments.
    pub clients_offset: usize,
    pub clients_bytes: usize,
    pub heap_offset: usize,
    pub heap_bytes: usize,
    pub arena_offset: usize,
    pub arena_bytes: usize,
}

impl SegmentGeometry {
    /// The smallest segment that holds a queue of `lanes` x `depth`, a
    /// client region of `clients_bytes` (page-aligned) and the minimum heap
    /// and arena.
    pub fn min_bytes(lanes: u32, depth: u32, clients_bytes: usize) -> usize {
        SEGMENT_HEADER_RESERVED
            + queue_region_bytes(lanes, depth)
            + align_up(clients_bytes)
            + 2 * MIN_REGION
    }

    /// Lays out `total` bytes: header, queue, client region, then what is
    /// left split evenly between the heap and the kernel arena.
    pub fn plan(
        total: usize,
        lanes: u32,
        depth: u32,
        clients_bytes: usize,
    ) -> Result<Self, RuntimeError> {
        let queue_bytes = queue_region_bytes(lanes, depth);
        if total > MAX_SEGMENT_BYTES {
            return Err(RuntimeError::BadSegment(format!(
                "{total} bytes: segments hold at most {MAX_SEGMENT_BYTES} (task records carry 32-bit offsets)"
            )));
        }
        let needed = Self::min_bytes(lanes, depth, clients_bytes);
        if total < needed {
            return Err(RuntimeError::BadSegment(format!(
                "{total} bytes cannot hold the queue, client heaps and heaps ({needed} needed)"
            )));
        }
        let queue_offset = SEGMENT_HEADER_RESERVED;
        let clients_bytes = align_up(clients_bytes);
        let clients_offset = if clients_bytes == 0 {
            0
        } else {
            queue_offset + queue_bytes
        };
        let heap_offset = queue_offset + queue_bytes + clients_bytes;
        let rest = total - heap_offset;
        let heap_bytes = (rest / 2) & !(REGION_ALIGN - 1);
        Ok(Self {
            queue_offset,
            queue_bytes,
            clients_offset,
            clients_bytes,
            heap_offset,
            heap_bytes,
            arena_offset: heap_offset + heap_bytes,
            arena_bytes: rest - heap_bytes,
        })
    }

    /// Checks that every region lies inside `total` bytes, in order, aligned.
    fn check(&self, total: usize) -> Result<(), RuntimeError> {
        let regions = [
            (self.queue_offset, self.queue_bytes),
            (self.clients_offset, self.clients_bytes),
            (self.heap_offset, self.heap_bytes),
            (self.arena_offset, self.arena_bytes),
        ];
        let mut end_of_previous = SEGMENT_HEADER_RESERVED;
        // A segment without clients has an empty client region at offset 0.
        for (offset, bytes) in regions.into_iter().filter(|&(_, b)| b != 0) {
            let end = offset.checked_add(bytes);
            if offset < end_of_previous
                || offset % REGION_ALIGN != 0
                || end.is_none_or(|e| e > total)
            {
                return Err(RuntimeError::BadSegment(format!(
                    "region {offset:#x}+{bytes:#x} does not fit a {total}-byte segment"
                )));
            }
            end_of_previous = offset + bytes;
        }
        Ok(())
    }
}

/// What a new segment is for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SegmentSpec {
    /// A [`crate::layout::segment_kind`] value.
    pub kind: u32,
    /// 0 for the CPU segment, 1 + ordinal for a device's.
    pub index: u32,
    /// The device it serves, if any.
    pub device_ordinal: Option<usize>,
    pub lanes: u32,
    pub depth: u32,
    pub copy_space: u32,
    /// [`SegmentHeader::device_tickets`]: 0 for the CPU segment.
    pub device_tickets: u64,
    /// [`SegmentHeader::device_inbox`] and its slots: 0 and 0 for the CPU
    /// segment.
    pub device_inbox: u64,
    pub device_inbox_depth: u32,
    /// [`SegmentHeader::device_replies`] and its length: 0 and 0 for the
    /// CPU segment.
    pub device_replies: u64,
    pub device_replies_bytes: u64,
    /// Whether to set up the from-host ring of a GPU service (device
    /// segments).
    pub inbox: bool,
    /// Client slots ([`crate::clients`]); 0 for device segments, which host
    /// clients do not attach to.
    pub max_clients: u32,
    /// Bytes of each client's heap (a multiple of 4096).
    pub client_heap_bytes: usize,
    /// The device queues each client may hold (CPU segment).
    pub client_device_queues: DeviceQueueLimits,
}

/// A task pointer that does not name a future in this segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct ForeignPointer(pub ShmPtr<u8>);

impl std::fmt::Display for ForeignPointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "task pointer {:?} names no future in this segment",
            self.0
        )
    }
}

impl std::error::Error for ForeignPointer {}

/// A mapped queue segment and handles to everything in it.
pub struct QueueSegment {
    // The handles borrow the mapping: they are declared 'static but never
    // handed out for longer than `&self`, and none has drop glue, so the
    // mapping (dropped with `memory`) outlives every use.
    header: &'static SegmentHeader,
    queue: LaneQueue<'static>,
    /// The GPU service's from-host route, in device segments.
    inbox_from_host: Option<HostInbox>,
    heap: SizeClassAllocator<'static>,
    arena: ArenaAllocator<'static>,
    /// The host clients' table, in the CPU segment.
    clients: Option<ClientTable<'static>>,
    geometry: SegmentGeometry,
    id: AllocatorId,
    memory: Segment,
}

impl QueueSegment {
    /// Initialises a runtime segment in `memory` (whose pages the caller has
    /// already placed, e.g. bound to a NUMA node): everything but the magic,
    /// which [`publish`](Self::publish) writes once the caller is ready.
    pub(crate) fn init(memory: Segment, spec: SegmentSpec) -> Result<Self, RuntimeError> {
        let clients_bytes = if spec.max_clients == 0 {
            0
        } else {
            crate::client_table::region_bytes(
                spec.max_clients,
                spec.client_device_queues.per_client,
                spec.client_heap_bytes,
            )
        };
        let geometry = SegmentGeometry::plan(memory.len(), spec.lanes, spec.depth, clients_bytes)?;
        let base = memory.as_ptr();
        let id = AllocatorId::new(SEGMENT_ID_MAJOR, spec.index);
        let header = base.cast::<SegmentHeader>();
        // SAFETY: `memory` is a fresh mapping of at least min_bytes (plan
        // checked), page-aligned, and nobody else has it yet (the magic is
        // not published). Each structure gets a disjoint range of it.
        let (queue, inbox_from_host, heap, arena, clients) = unsafe {
            write_header(header, &spec, &geometry, id, memory.len());
            let (queue, inbox_from_host) = init_queues(base, header, &spec, &geometry)?;
            let (heap, arena, clients) = init_heaps(base, &spec, &geometry)?;
            (queue, inbox_from_host, heap, arena, clients)
        };
        Ok(Self {
            // SAFETY: initialised above; lives as long as `memory` (see the
            // struct's comment).
            header: unsafe { &*header },
            queue,
            inbox_from_host: inbox_from_host.map(|ring| HostInbox::new(ring, spec.copy_space)),
            heap,
            arena,
            clients,
            geometry,
            id,
            memory,
        })
    }

    /// Records the NUMA node found for the pages and publishes the segment
    /// (magic, `Release`), so attachers see everything written before.
    pub(crate) fn publish(&self, numa_node: Option<u32>) {
        let node = numa_node.and_then(|n| i32::try_from(n).ok()).unwrap_or(-1);
        // Relaxed: ordered before the Release of the magic below.
        self.header.numa_node.store(node, Ordering::Relaxed);
        self.header.magic.store(SEGMENT_MAGIC, Ordering::Release);
    }

    /// Attaches to a segment a runtime (perhaps in another process) published.
    pub(crate) fn attach(memory: Segment) -> Result<Self, RuntimeError> {
        let base = memory.as_ptr();
        if memory.len() < SEGMENT_HEADER_RESERVED {
            return Err(RuntimeError::BadSegment(format!(
                "{} bytes is smaller than the header",
                memory.len()
            )));
        }
        // SAFETY: the mapping holds the header (checked) and is page-aligned;
        // the header is read through atomics until the magic is seen.
        let header = unsafe { &*base.cast::<SegmentHeader>() };
        // Acquire pairs with `publish`'s Release: the plain fields are final.
        let magic = header.magic.load(Ordering::Acquire);
        if magic != SEGMENT_MAGIC {
            return Err(RuntimeError::BadSegment(format!(
                "magic {magic:#x} (runtime not ready, or not a runtime segment)"
            )));
        }
        if header.version != SEGMENT_VERSION {
            return Err(RuntimeError::BadSegment(format!(
                "layout version {} (this build speaks {SEGMENT_VERSION})",
                header.version
            )));
        }
        let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let geometry = SegmentGeometry {
            queue_offset: to_usize(header.queue_offset),
            queue_bytes: to_usize(header.queue_bytes),
            clients_offset: to_usize(header.clients_offset),
            clients_bytes: to_usize(header.clients_bytes),
            heap_offset: to_usize(header.heap_offset),
            heap_bytes: to_usize(header.heap_bytes),
            arena_offset: to_usize(header.arena_offset),
            arena_bytes: to_usize(header.arena_bytes),
        };
        geometry.check(memory.len())?;
        let inbox_offset = to_usize(header.inbox_offset);
        let ring_bytes = to_usize(header.inbox_ring_bytes);
        let inbox_end = ring_bytes.checked_add(inbox_offset);
        if inbox_offset != 0
            && (inbox_offset < geometry.queue_offset
                || inbox_end.is_none_or(|end| end > geometry.queue_offset + geometry.queue_bytes))
        {
            return Err(RuntimeError::BadSegment(format!(
                "GPU service's from-host ring at {inbox_offset:#x} lies outside the queue region"
            )));
        }
        // SAFETY: each region lies inside the mapping (checked) and holds a
        // structure the runtime initialised before publishing the magic; so
        // does the inbox (checked to lie in the queue region).
        let inbox_from_host = (inbox_offset != 0)
            .then(|| unsafe { LlRing::attach(base.add(inbox_offset), ring_bytes) })
            .transpose()?;
        // SAFETY: as above.
        let (queue, heap, arena) = unsafe {
            (
                LaneQueue::attach(base.add(geometry.queue_offset), geometry.queue_bytes)?,
                SizeClassAllocator::attach(base.add(geometry.heap_offset), geometry.heap_bytes)?,
                ArenaAllocator::attach(base.add(geometry.arena_offset), geometry.arena_bytes)?,
            )
        };
        // SAFETY: as above; the region is page-aligned (checked) and the
        // magic was acquired.
        let clients = (geometry.clients_bytes != 0)
            .then(|| unsafe {
                ClientTable::attach(
                    base.add(geometry.clients_offset),
                    geometry.clients_bytes,
                    geometry.clients_offset as u64,
                )
            })
            .transpose()?;
        Ok(Self {
            header,
            queue,
            inbox_from_host: inbox_from_host.map(|ring| HostInbox::new(ring, header.copy_space)),
            heap,
            arena,
            clients,
            geometry,
            id: header.id,
            memory,
        })
    }

    /// The header.
    pub fn header(&self) -> &SegmentHeader {
        self.header
    }

    /// The lane queue of task records ([`crate::layout::task_record`]).
    pub fn queue(&self) -> &LaneQueue<'_> {
        &self.queue
    }

    /// The GPU service's route from host threads (device segments only).
    pub(crate) fn inbox_from_host(&self) -> Option<&HostInbox> {
        self.inbox_from_host.as_ref()
    }

    /// The id every task pointer of this segment carries.
    pub fn id(&self) -> AllocatorId {
        self.id
    }

    /// Base address in this process.
    pub fn base(&self) -> *mut u8 {
        self.memory.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// Whether the segment is empty (never: a segment holds at least its header).
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty()
    }

    /// The shared-memory name, for a named segment.
    pub fn name(&self) -> Option<&str> {
        self.memory.name()
    }

    /// The descriptor kernels get: the whole segment at `base` (the device
    /// address of the mapping).
    pub(crate) fn backend_at(&self, base: u64, kind: BackendKind) -> MemoryBackend {
        MemoryBackend::new(self.id, kind, base as *mut u8, self.len() as u64)
    }

    /// The host clients' table ([`ClientTable`](crate::ClientTable)): the CPU segment's.
    pub fn clients(&self) -> Option<&ClientTable<'_>> {
        self.clients.as_ref()
    }

    /// Claims a client slot for this process (what [`crate::Client::attach`]
    /// holds while attached).
    pub(crate) fn claim_client(&self) -> Result<ClientLease<'static>, RuntimeError> {
        let table = self.clients.as_ref().ok_or_else(|| {
            RuntimeError::BadSegment("the segment has no client table (not a CPU segment)".into())
        })?;
        // The lease borrows the mapping as the handles above do: its holder
        // (a Client) keeps this segment alive for as long as it.
        table.claim(ProcessIdentity::current())
    }

    /// The heap's statistics (for leak checks).
    pub fn heap(&self) -> &SizeClassAllocator<'_> {
        &self.heap
    }

    /// Allocates `bytes` (16-aligned) from the heap; returns the
    /// segment-relative pointer and the host address.
    pub fn allocate(&self, bytes: usize) -> Result<(ShmPtr<u8>, *mut u8), RuntimeError> {
        let full = self.heap.allocate_full(bytes as u64, 16)?;
        let off = self.geometry.heap_offset as u64 + full.shm.off;
        Ok((ShmPtr::new(self.id, off), full.ptr))
    }

    /// Frees what [`allocate`](Self::allocate) returned.
    pub fn free(&self, ptr: ShmPtr<u8>) -> Result<(), RuntimeError> {
        let heap_off = ptr
            .off
            .checked_sub(self.geometry.heap_offset as u64)
            .filter(|_| ptr.alloc_id == self.id)
            .ok_or_else(|| RuntimeError::BadSegment(ForeignPointer(ptr).to_string()))?;
        Ok(self.heap.free(ShmPtr::new(self.heap.id(), heap_off))?)
    }

    /// The host address of `len` bytes at segment pointer `ptr`, if they lie
    /// inside the segment.
    #[inline]
    pub(crate) fn resolve(&self, ptr: ShmPtr<u8>, len: usize) -> Result<*mut u8, ForeignPointer> {
        let inside = ptr.alloc_id == self.id
            && ptr
                .off
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.len() as u64)
            && ptr.off >= SEGMENT_HEADER_RESERVED as u64;
        if !inside {
            return Err(ForeignPointer(ptr));
        }
        // SAFETY: off + len lies inside the mapping (checked).
        Ok(unsafe { self.base().add(ptr.off as usize) })
    }

    /// Attaches to the future at segment pointer `ptr` (as popped from the
    /// queue: its initialisation happened-before the pop).
    pub(crate) fn future(&self, ptr: ShmPtr<u8>) -> Result<FutureShm<'_>, RuntimeError> {
        let at = self
            .resolve(ptr, 0)
            .map_err(|e| RuntimeError::BadSegment(e.to_string()))?;
        let len = self.len() - ptr.off as usize;
        // SAFETY: [at, at + len) is the rest of the mapping (resolve checked
        // `off` is inside); the future's initialisation happened-before the
        // queue pop that delivered `ptr` (caller's contract, checked by attach
        // as far as bytes can be).
        Ok(unsafe { FutureShm::attach(at, len) }?)
    }

    /// Takes back every allocation of the kernel arena (where kernel threads'
    /// `rt_init` carves their futures) and of the reply region (where it
    /// carves their replies from GPU services), and the leases of the device
    /// inbox's slots to sending threads, by raising the kernel epoch those
    /// counts are tagged with (device memory the host does not touch): call
    /// it between launches of kernels that submit tasks, or the arena and
    /// the replies run out after a few (spent leases only make senders
    /// claim shared slots).
    ///
    /// # Safety
    /// No kernel may be running against this segment, no future a kernel
    /// allocated may still be queued or in a worker's hands, and no task a
    /// kernel sent to a GPU service (of any device) may still be unanswered.
    pub unsafe fn reset_kernel_arena(&self) {
        // Relaxed: no kernel runs (the contract); the next launch reads the
        // epoch after its launch, which orders this store before it. A
        // count of an earlier epoch counts none taken (rt_take_in_epoch).
        self.header.kernel_epoch.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { self.arena.reset() }
    }

    /// Sets the runtime state word (`Release`: a client that reads READY with
    /// `Acquire` sees the setup before it).
    pub(crate) fn set_state(&self, state: u32) {
        self.header.state.store(state, Ordering::Release);
    }
}

/// Writes the header of a segment laid out as `geometry`, all but the
/// from-host ring's fields ([`init_queues`] writes those): the magic 0 (not
/// published), state `STARTING`, this process its runtime.
///
/// # Safety
///
/// `h` is valid for writes of a whole, aligned [`SegmentHeader`] that nobody
/// else reads or writes yet.
unsafe fn write_header(
    h: *mut SegmentHeader,
    spec: &SegmentSpec,
    geometry: &SegmentGeometry,
    id: AllocatorId,
    segment_bytes: usize,
) {
    // SAFETY: `h` is the caller's. Header fields are written through raw
    // field pointers, atomics with `new`.
    unsafe {
        addr_of_mut!((*h).magic).write(AtomicU64::new(0));
        addr_of_mut!((*h).version).write(SEGMENT_VERSION);
        addr_of_mut!((*h).kind).write(spec.kind);
        addr_of_mut!((*h).id).write(id);
        let ordinal = spec.device_ordinal.map_or(-1, |o| o as i32);
        addr_of_mut!((*h).device_ordinal).write(ordinal);
        addr_of_mut!((*h).numa_node).write(AtomicI32::new(-1));
        addr_of_mut!((*h).segment_bytes).write(segment_bytes as u64);
        addr_of_mut!((*h).queue_offset).write(geometry.queue_offset as u64);
        addr_of_mut!((*h).queue_bytes).write(geometry.queue_bytes as u64);
        addr_of_mut!((*h).heap_offset).write(geometry.heap_offset as u64);
        addr_of_mut!((*h).heap_bytes).write(geometry.heap_bytes as u64);
        addr_of_mut!((*h).arena_offset).write(geometry.arena_offset as u64);
        addr_of_mut!((*h).arena_bytes).write(geometry.arena_bytes as u64);
        addr_of_mut!((*h).num_lanes).write(spec.lanes);
        addr_of_mut!((*h).copy_space).write(spec.copy_space);
        let owner = ProcessIdentity::current();
        addr_of_mut!((*h).runtime_pid).write(AtomicU32::new(owner.pid));
        addr_of_mut!((*h).runtime_start_time).write(owner.start_time);
        addr_of_mut!((*h).state).write(AtomicU32::new(runtime_state::STARTING));
        addr_of_mut!((*h).heartbeat).write(AtomicU64::new(monotonic_ns()));
        addr_of_mut!((*h).stop).write(AtomicU32::new(0));
        addr_of_mut!((*h).device_inbox_depth).write(spec.device_inbox_depth);
        addr_of_mut!((*h).device_tickets).write(spec.device_tickets);
        addr_of_mut!((*h).device_inbox).write(spec.device_inbox);
        addr_of_mut!((*h).device_replies).write(spec.device_replies);
        addr_of_mut!((*h).device_replies_bytes).write(spec.device_replies_bytes);
        addr_of_mut!((*h).reserved).write(0);
        addr_of_mut!((*h).kernel_epoch).write(AtomicU64::new(0));
        for counter in [
            addr_of_mut!((*h).service_kernel_tasks),
            addr_of_mut!((*h).service_kernel_failed),
            addr_of_mut!((*h).service_host_tasks),
            addr_of_mut!((*h).service_host_failed),
            addr_of_mut!((*h).service_skipped),
        ] {
            counter.write(AtomicU64::new(0));
        }
        addr_of_mut!((*h).clients_offset).write(geometry.clients_offset as u64);
        addr_of_mut!((*h).clients_bytes).write(geometry.clients_bytes as u64);
    }
}

/// Sets up the lane queue at the start of the queue region and, where
/// `spec` asks for one, the GPU service's from-host ring after it; writes
/// the ring's header fields.
///
/// # Safety
///
/// As [`write_header`] for `h`; `base` is a mapping laid out as `geometry`
/// whose queue region nobody else uses yet.
unsafe fn init_queues(
    base: *mut u8,
    h: *mut SegmentHeader,
    spec: &SegmentSpec,
    geometry: &SegmentGeometry,
) -> Result<(LaneQueue<'static>, Option<LlRing<'static>>), RuntimeError> {
    // SAFETY: the regions are the caller's, disjoint by `geometry`: the lane
    // queue first, then the ring. Header fields as in `write_header`.
    unsafe {
        let lane_queue_bytes =
            LaneQueue::required_bytes(spec.lanes, spec.depth).next_multiple_of(64);
        let queue = LaneQueue::init_in(
            base.add(geometry.queue_offset),
            lane_queue_bytes,
            spec.lanes,
            spec.depth,
        )?;
        let ring_bytes = inbox_ring_bytes(spec.depth);
        let (inbox_offset, inbox_from_host) = if spec.inbox {
            let offset = geometry.queue_offset + lane_queue_bytes;
            let at = base.add(offset);
            let from_host = LlRing::init_in(at, ring_bytes, spec.depth)?;
            (offset, Some(from_host))
        } else {
            (0, None)
        };
        addr_of_mut!((*h).inbox_offset).write(inbox_offset as u64);
        addr_of_mut!((*h).inbox_ring_bytes).write(ring_bytes as u64);
        addr_of_mut!((*h).inbox_depth).write(spec.depth);
        addr_of_mut!((*h).service_stop).write(AtomicU32::new(0));
        Ok((queue, inbox_from_host))
    }
}

/// Sets up the heap, the arena and, where `geometry` has room for one, the
/// client table, each in its region.
///
/// # Safety
///
/// `base` is a mapping laid out as `geometry` whose heap, arena and client
/// regions nobody else uses yet.
unsafe fn init_heaps(
    base: *mut u8,
    spec: &SegmentSpec,
    geometry: &SegmentGeometry,
) -> Result<
    (
        SizeClassAllocator<'static>,
        ArenaAllocator<'static>,
        Option<ClientTable<'static>>,
    ),
    RuntimeError,
> {
    // SAFETY: the regions are the caller's, disjoint by `geometry`.
    unsafe {
        let heap = SizeClassAllocator::init_in(
            base.add(geometry.heap_offset),
            geometry.heap_bytes,
            AllocatorId::new(HEAP_ID_MAJOR, spec.index),
        )?;
        let arena = ArenaAllocator::init_in(
            base.add(geometry.arena_offset),
            geometry.arena_bytes,
            AllocatorId::new(ARENA_ID_MAJOR, spec.index),
        )?;
        let clients = if geometry.clients_bytes == 0 {
            None
        } else {
            Some(ClientTable::init_in(
                base.add(geometry.clients_offset),
                geometry.clients_bytes,
                geometry.clients_offset as u64,
                spec.max_clients,
                spec.client_heap_bytes,
                spec.client_device_queues,
            )?)
        };
        Ok((heap, arena, clients))
    }
}

impl std::fmt::Debug for QueueSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueSegment")
            .field("id", &self.id)
            .field("len", &self.len())
            .field("geometry", &self.geometry)
            .finish()
    }
}

impl Drop for QueueSegment {
    /// Gives the reply futures the host route kept back to the heap, which
    /// other processes mapping the segment may go on using; the mapping
    /// itself goes after this, with the fields.
    fn drop(&mut self) {
        let kept: Vec<u64> = self
            .inbox_from_host
            .as_mut()
            .map(|inbox| inbox.drain_replies().collect())
            .unwrap_or_default();
        for off in kept {
            // Fails only on a corrupt heap, where leaking is the safe outcome.
            let _ = self.free(ShmPtr::new(self.id, off));
        }
    }
}
