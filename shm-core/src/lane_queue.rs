//! The runtime's task queue shape: `num_lanes` lanes, each a pair of LL
//! rings ([`LlRing`]: high and low priority) of `depth` slots, in one region.
//!
//! Producers push to a lane at a priority; consumers pop a lane high first
//! ([`LaneQueue::pop`]) or through a [`LaneCursor`], which takes low first
//! every k-th call so a steady stream of high-priority work cannot starve the
//! low ring.

use core::fmt;
use core::marker::PhantomData;
use core::mem::align_of;
use core::num::NonZeroU32;
use core::ptr::{addr_of, addr_of_mut, NonNull};

use crate::layout::{magic, LaneQueueHeader, CACHE_LINE, LANE_QUEUE_RINGS_OFFSET};
use crate::ll_ring::{LlRecord, LlRing};
use crate::ring::{check_capacity, check_region, publish_magic, read_magic, RingError};

/// A lane's two rings. Stored in shared memory as the ring index within the
/// lane (`High` = 0, `Low` = 1).
#[repr(u32)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Priority {
    /// Served first by [`LaneQueue::pop`].
    High = 0,
    /// Served when high is empty, and first every k-th [`LaneCursor`] pop.
    Low = 1,
}

/// A lane index that is not below [`LaneQueue::num_lanes`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct NoSuchLane {
    /// The index asked for.
    pub lane: u32,
    /// How many lanes the queue has.
    pub lanes: u32,
}

impl fmt::Display for NoSuchLane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no lane {} in a queue of {} lanes",
            self.lane, self.lanes
        )
    }
}

#[cfg(feature = "std")]
impl std::error::Error for NoSuchLane {}

/// Why [`LaneQueue::push`] refused an item; the item comes back either way.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PushError<T> {
    /// The lane's ring for that priority is full.
    Full(T),
    /// The lane does not exist.
    NoSuchLane {
        /// The lane asked for.
        lane: u32,
        /// Lanes the queue has.
        lanes: u32,
        /// The item, handed back.
        item: T,
    },
}

impl<T> PushError<T> {
    /// The item that was not pushed.
    pub fn into_inner(self) -> T {
        match self {
            Self::Full(item) | Self::NoSuchLane { item, .. } => item,
        }
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full(_) => f.write_str("lane ring is full"),
            Self::NoSuchLane { lane, lanes, .. } => NoSuchLane {
                lane: *lane,
                lanes: *lanes,
            }
            .fmt(f),
        }
    }
}

#[cfg(feature = "std")]
impl<T: fmt::Debug> std::error::Error for PushError<T> {}

/// A handle to a lane queue living in a region. Any number of handles, in
/// any number of threads and processes, may push and pop concurrently.
pub struct LaneQueue<'r> {
    /// Where ring 0 starts; ring `2 * lane + priority` is `ring_bytes` further
    /// on per index.
    rings: NonNull<u8>,
    num_lanes: u32,
    depth: u32,
    ring_bytes: usize,
    _region: PhantomData<&'r [u8]>,
}

// SAFETY: the handle holds only validated geometry (local copies) and
// operates through `LlRing`, which is Send + Sync for the same reasons.
unsafe impl Send for LaneQueue<'_> {}
// SAFETY: as for `Send`; all methods take `&self`.
unsafe impl Sync for LaneQueue<'_> {}

impl<'r> LaneQueue<'r> {
    /// Bytes between consecutive rings: one ring of `depth` slots, rounded up
    /// to a cache line so no two rings share one.
    fn ring_bytes(depth: u32) -> usize {
        LlRing::required_bytes(depth).saturating_add(CACHE_LINE - 1) & !(CACHE_LINE - 1)
    }

    /// Bytes of region a queue of `num_lanes` lanes of `depth` slots per
    /// priority needs (saturating at `usize::MAX`).
    pub fn required_bytes(num_lanes: u32, depth: u32) -> usize {
        Self::ring_bytes(depth)
            .saturating_mul(2 * num_lanes as usize)
            .saturating_add(LANE_QUEUE_RINGS_OFFSET)
    }

    /// Initialises an empty queue in place at `region`, which must be 64-byte
    /// aligned and at least [`required_bytes`](Self::required_bytes) long.
    /// `depth` (slots per lane and priority) must be a power of two.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`,
    /// and nobody may use it during this call. Re-initialising a queue others
    /// are attached to is undefined.
    pub unsafe fn init_in(
        region: *mut u8,
        len: usize,
        num_lanes: u32,
        depth: u32,
    ) -> Result<Self, RingError> {
        if num_lanes == 0 {
            return Err(RingError::ZeroLanes);
        }
        check_capacity(depth)?;
        let needed = Self::required_bytes(num_lanes, depth);
        check_region(region, len, align_of::<LaneQueueHeader>(), needed)?;
        let ring_bytes = Self::ring_bytes(depth);
        let header = region.cast::<LaneQueueHeader>();
        // SAFETY: the region is valid, aligned and large enough (checked).
        // Plain fields; the magic is published last, below.
        unsafe {
            addr_of_mut!((*header).num_lanes).write(num_lanes);
            addr_of_mut!((*header).depth).write(depth);
            addr_of_mut!((*header).elem_size).write(LlRing::SHAPE.elem_size);
            addr_of_mut!((*header).ring_bytes).write(ring_bytes as u64);
        }
        // SAFETY: header offset + 2 * num_lanes rings fit (checked).
        let rings = unsafe { NonNull::new_unchecked(region.add(LANE_QUEUE_RINGS_OFFSET)) };
        for index in 0..2 * num_lanes as usize {
            // SAFETY: ring `index` lies inside the region, 64-aligned, and is
            // ours alone during init (per the caller).
            unsafe {
                LlRing::init_in(rings.as_ptr().add(index * ring_bytes), ring_bytes, depth)?;
            }
        }
        // SAFETY: header and every ring are initialised.
        unsafe { publish_magic(addr_of_mut!((*header).magic), magic::LANE_QUEUE) };
        Ok(Self {
            rings,
            num_lanes,
            depth,
            ring_bytes,
            _region: PhantomData,
        })
    }

    /// Attaches to a queue another handle (perhaps in another process, at
    /// another address) initialised, after validating its header and every
    /// ring's.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`
    /// and must not be re-initialised while this handle is in use.
    pub unsafe fn attach(region: *mut u8, len: usize) -> Result<Self, RingError> {
        check_region(
            region,
            len,
            align_of::<LaneQueueHeader>(),
            LANE_QUEUE_RINGS_OFFSET,
        )?;
        let header = region.cast::<LaneQueueHeader>();
        // SAFETY: the header lies inside the region (checked).
        let found = unsafe { read_magic(addr_of_mut!((*header).magic)) };
        if found != magic::LANE_QUEUE {
            return Err(RingError::BadMagic { found });
        }
        // SAFETY: the magic was read with Acquire, so the fields written
        // before it are initialised and no longer written.
        let (num_lanes, depth, elem_size, ring_bytes) = unsafe {
            (
                addr_of!((*header).num_lanes).read(),
                addr_of!((*header).depth).read(),
                addr_of!((*header).elem_size).read(),
                addr_of!((*header).ring_bytes).read(),
            )
        };
        if num_lanes == 0 {
            return Err(RingError::ZeroLanes);
        }
        check_capacity(depth)?;
        if elem_size != LlRing::SHAPE.elem_size {
            // The lane header records only the size; ring 0's header has the
            // whole element layout, so let it report the mismatch.
            let ring_region_len = len - LANE_QUEUE_RINGS_OFFSET;
            // SAFETY: ring 0 starts right after the header, inside the region.
            unsafe {
                LlRing::attach(region.add(LANE_QUEUE_RINGS_OFFSET), ring_region_len)?;
            }
            return Err(RingError::HeaderMismatch {
                field: "elem_size",
                expected: u64::from(LlRing::SHAPE.elem_size),
                found: u64::from(elem_size),
            });
        }
        let expected_ring_bytes = Self::ring_bytes(depth);
        if ring_bytes != expected_ring_bytes as u64 {
            return Err(RingError::HeaderMismatch {
                field: "ring_bytes",
                expected: expected_ring_bytes as u64,
                found: ring_bytes,
            });
        }
        check_region(
            region,
            len,
            align_of::<LaneQueueHeader>(),
            Self::required_bytes(num_lanes, depth),
        )?;
        // SAFETY: the rings lie inside the region (checked above).
        let rings = unsafe { NonNull::new_unchecked(region.add(LANE_QUEUE_RINGS_OFFSET)) };
        for index in 0..2 * num_lanes as usize {
            // SAFETY: ring `index` lies inside the region, valid for 'r.
            let ring = unsafe {
                LlRing::attach(
                    rings.as_ptr().add(index * expected_ring_bytes),
                    expected_ring_bytes,
                )?
            };
            if ring.capacity() != depth as usize {
                return Err(RingError::HeaderMismatch {
                    field: "ring capacity",
                    expected: u64::from(depth),
                    found: ring.capacity() as u64,
                });
            }
        }
        Ok(Self {
            rings,
            num_lanes,
            depth,
            ring_bytes: expected_ring_bytes,
            _region: PhantomData,
        })
    }

    /// The ring of `lane` at `priority`.
    fn ring(&self, lane: u32, priority: Priority) -> Result<LlRing<'r>, NoSuchLane> {
        if lane >= self.num_lanes {
            return Err(NoSuchLane {
                lane,
                lanes: self.num_lanes,
            });
        }
        let index = 2 * lane as usize + priority as usize;
        // SAFETY: index < 2 * num_lanes, and every ring was validated (or
        // initialised) as an LL ring with `depth` slots.
        Ok(unsafe {
            LlRing::from_validated(self.rings.as_ptr().add(index * self.ring_bytes), self.depth)
        })
    }

    /// Appends `item` to `lane` at `priority`.
    pub fn push(
        &self,
        lane: u32,
        priority: Priority,
        item: LlRecord,
    ) -> Result<(), PushError<LlRecord>> {
        match self.ring(lane, priority) {
            Ok(ring) => ring.try_push(item).map_err(PushError::Full),
            Err(NoSuchLane { lane, lanes }) => Err(PushError::NoSuchLane { lane, lanes, item }),
        }
    }

    /// Takes the oldest item of `lane`, high priority first; `Ok(None)` when
    /// both of its rings are empty.
    pub fn pop(&self, lane: u32) -> Result<Option<(Priority, LlRecord)>, NoSuchLane> {
        self.pop_in_order(lane, [Priority::High, Priority::Low], false)
    }

    /// Pops from the first non-empty ring of `lane` in `order`; `sole`: the
    /// caller is the lane's only consumer ([`LlRing::try_pop_sole`]).
    fn pop_in_order(
        &self,
        lane: u32,
        order: [Priority; 2],
        sole: bool,
    ) -> Result<Option<(Priority, LlRecord)>, NoSuchLane> {
        for priority in order {
            let ring = self.ring(lane, priority)?;
            let item = if sole {
                ring.try_pop_sole()
            } else {
                ring.try_pop()
            };
            if let Some(item) = item {
                return Ok(Some((priority, item)));
            }
        }
        Ok(None)
    }

    /// The ring of `lane` at `priority`, e.g. for its positions
    /// ([`LlRing::claimed`], [`LlRing::taken`]).
    pub fn lane_ring(&self, lane: u32, priority: Priority) -> Result<LlRing<'r>, NoSuchLane> {
        self.ring(lane, priority)
    }

    /// The number of lanes.
    pub fn num_lanes(&self) -> u32 {
        self.num_lanes
    }

    /// Slots per lane and priority.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Items in `lane` at `priority`: an estimate, as [`LlRing::len`].
    pub fn lane_len(&self, lane: u32, priority: Priority) -> Result<usize, NoSuchLane> {
        Ok(self.ring(lane, priority)?.len())
    }
}

impl Clone for LaneQueue<'_> {
    fn clone(&self) -> Self {
        *self
    }
}
impl Copy for LaneQueue<'_> {}

impl fmt::Debug for LaneQueue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneQueue")
            .field("num_lanes", &self.num_lanes)
            .field("depth", &self.depth)
            .finish()
    }
}

/// A consumer's local (unshared) pop state: every `low_every`-th call takes
/// the low ring first when it is non-empty, so low-priority work keeps
/// draining while high-priority work never runs out. One cursor per consumer
/// thread; its counter spans all the lanes it pops.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LaneCursor {
    low_every: NonZeroU32,
    /// Calls since low was last put first.
    calls: u32,
    /// The cursor's consumer is the only one of the lanes it pops.
    sole: bool,
}

impl LaneCursor {
    /// The default period: one pop in 8 prefers low priority.
    pub const DEFAULT_LOW_EVERY: NonZeroU32 = match NonZeroU32::new(8) {
        Some(k) => k,
        None => unreachable!(),
    };

    /// A cursor that prefers low priority on every `low_every`-th call
    /// (1: always low first).
    pub fn new(low_every: NonZeroU32) -> Self {
        Self {
            low_every,
            calls: 0,
            sole: false,
        }
    }

    /// This cursor for a consumer that is the only one of every lane it
    /// pops (in any process): its pops move a ring's `head` with a store
    /// ([`LlRing::try_pop_sole`]). Were a lane popped by another consumer
    /// too, both could take one record.
    pub fn sole_consumer(self) -> Self {
        Self { sole: true, ..self }
    }

    /// The period given to [`new`](Self::new).
    pub fn low_every(&self) -> NonZeroU32 {
        self.low_every
    }

    /// Takes an item of `lane`: high priority first, except on every k-th
    /// call (counting every call that names an existing lane), which takes
    /// low first. `Ok(None)` when both rings are empty.
    pub fn pop(
        &mut self,
        queue: &LaneQueue<'_>,
        lane: u32,
    ) -> Result<Option<(Priority, LlRecord)>, NoSuchLane> {
        if lane >= queue.num_lanes() {
            return Err(NoSuchLane {
                lane,
                lanes: queue.num_lanes(),
            });
        }
        self.calls += 1;
        let order = if self.calls >= self.low_every.get() {
            self.calls = 0;
            [Priority::Low, Priority::High]
        } else {
            [Priority::High, Priority::Low]
        };
        queue.pop_in_order(lane, order, self.sole)
    }
}

impl Default for LaneCursor {
    fn default() -> Self {
        Self::new(Self::DEFAULT_LOW_EVERY)
    }
}
