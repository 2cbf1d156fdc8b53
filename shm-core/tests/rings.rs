//! Rings and the lane queue: model tests against `VecDeque`, header
//! validation errors, multi-thread stress, and use through a second mapping
//! of the same memory at another address.

mod support;

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;

use proptest::prelude::*;
use support::AlignedRegion;
use tandem_shm_core::layout::{LANE_QUEUE_RINGS_OFFSET, RING_SLOTS_OFFSET};
use tandem_shm_core::{
    LaneCursor, LaneQueue, LlRecord, LlRing, MpmcRing, NoSuchLane, Priority, PushError, RingError,
    SpscRing,
};

/// A lane queue carrying u64s (as two-word records), so its tests read like
/// the rings'.
#[derive(Clone, Copy, Debug)]
struct U64Lanes<'r>(LaneQueue<'r>);

fn record(item: u64) -> LlRecord {
    LlRecord::new(&[item as u32, (item >> 32) as u32]).unwrap()
}

fn item(record: LlRecord) -> u64 {
    match *record.words() {
        [lo, hi] => u64::from(hi) << 32 | u64::from(lo),
        _ => panic!("not a u64 record: {record:?}"),
    }
}

impl U64Lanes<'_> {
    unsafe fn init_in(
        region: *mut u8,
        len: usize,
        lanes: u32,
        depth: u32,
    ) -> Result<Self, RingError> {
        // SAFETY: forwarded to the caller.
        unsafe { LaneQueue::init_in(region, len, lanes, depth) }.map(Self)
    }

    unsafe fn attach(region: *mut u8, len: usize) -> Result<Self, RingError> {
        // SAFETY: forwarded to the caller.
        unsafe { LaneQueue::attach(region, len) }.map(Self)
    }

    fn push(&self, lane: u32, priority: Priority, v: u64) -> Result<(), PushError<u64>> {
        self.0.push(lane, priority, record(v)).map_err(|e| match e {
            PushError::Full(r) => PushError::Full(item(r)),
            PushError::NoSuchLane {
                lane,
                lanes,
                item: r,
            } => PushError::NoSuchLane {
                lane,
                lanes,
                item: item(r),
            },
        })
    }

    fn pop(&self, lane: u32) -> Result<Option<(Priority, u64)>, NoSuchLane> {
        self.0.pop(lane).map(|o| o.map(|(p, r)| (p, item(r))))
    }

    fn cursor_pop(
        &self,
        cursor: &mut LaneCursor,
        lane: u32,
    ) -> Result<Option<(Priority, u64)>, NoSuchLane> {
        cursor
            .pop(&self.0, lane)
            .map(|o| o.map(|(p, r)| (p, item(r))))
    }

    fn lane_len(&self, lane: u32, priority: Priority) -> Result<usize, NoSuchLane> {
        self.0.lane_len(lane, priority)
    }
}

fn spsc_region(capacity: u32) -> AlignedRegion {
    AlignedRegion::new(SpscRing::<u64>::required_bytes(capacity))
}

fn mpmc_region(capacity: u32) -> AlignedRegion {
    AlignedRegion::new(MpmcRing::<u64>::required_bytes(capacity))
}

fn lane_region(lanes: u32, depth: u32) -> AlignedRegion {
    AlignedRegion::new(LaneQueue::required_bytes(lanes, depth))
}

/// Capacities 1, 2, 4 .. 64.
fn capacity() -> impl Strategy<Value = u32> {
    (0u32..=6).prop_map(|shift| 1 << shift)
}

// ---------------------------------------------------------------------------
// Model tests
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum RingOp {
    Push(u64),
    Pop,
    PushSlice(Vec<u64>),
    PopSlice(usize),
}

fn ring_op() -> impl Strategy<Value = RingOp> {
    prop_oneof![
        4 => any::<u64>().prop_map(RingOp::Push),
        4 => Just(RingOp::Pop),
        1 => prop::collection::vec(any::<u64>(), 0..20).prop_map(RingOp::PushSlice),
        1 => (0usize..20).prop_map(RingOp::PopSlice),
    ]
}

/// Which handle an MPMC op goes through: the initialising one or one
/// attached later to the same region.
#[derive(Clone, Debug)]
enum MpmcOp {
    Push {
        via_attached: bool,
        item: u64,
    },
    Pop {
        via_attached: bool,
    },
    /// `try_pop_many` into a buffer of `room` items.
    PopMany {
        via_attached: bool,
        room: usize,
    },
}

fn mpmc_op() -> impl Strategy<Value = MpmcOp> {
    prop_oneof![
        (any::<bool>(), any::<u64>())
            .prop_map(|(via_attached, item)| MpmcOp::Push { via_attached, item }),
        any::<bool>().prop_map(|via_attached| MpmcOp::Pop { via_attached }),
        (any::<bool>(), 0usize..20)
            .prop_map(|(via_attached, room)| MpmcOp::PopMany { via_attached, room }),
    ]
}

#[derive(Clone, Debug)]
enum LaneOp {
    /// `lane` may be out of range on purpose.
    Push {
        lane: u32,
        low: bool,
        item: u64,
    },
    Pop {
        lane: u32,
    },
    CursorPop {
        lane: u32,
    },
}

fn lane_op(lanes: u32) -> impl Strategy<Value = LaneOp> {
    let lane = 0..lanes + 1;
    prop_oneof![
        3 => (lane.clone(), any::<bool>(), any::<u64>())
            .prop_map(|(lane, low, item)| LaneOp::Push { lane, low, item }),
        1 => lane.clone().prop_map(|lane| LaneOp::Pop { lane }),
        2 => lane.prop_map(|lane| LaneOp::CursorPop { lane }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn spsc_matches_vecdeque(cap in capacity(), ops in prop::collection::vec(ring_op(), 1..300)) {
        let region = spsc_region(cap);
        // SAFETY: the region is ours, sized by required_bytes, and outlives
        // the ring; one producer and one consumer.
        let ring = unsafe { SpscRing::<u64>::init_in(region.ptr(), region.len(), cap) }.unwrap();
        // SAFETY: the only producer and consumer.
        let (mut tx, mut rx) = unsafe { (ring.producer(), ring.consumer()) };
        let mut model = VecDeque::new();
        for op in ops {
            match op {
                RingOp::Push(item) => {
                    let result = tx.try_push(item);
                    if model.len() == cap as usize {
                        prop_assert_eq!(result, Err(item));
                    } else {
                        prop_assert_eq!(result, Ok(()));
                        model.push_back(item);
                    }
                }
                RingOp::Pop => prop_assert_eq!(rx.try_pop(), model.pop_front()),
                RingOp::PushSlice(items) => {
                    let pushed = tx.push_slice(&items);
                    prop_assert_eq!(pushed, items.len().min(cap as usize - model.len()));
                    model.extend(&items[..pushed]);
                }
                RingOp::PopSlice(n) => {
                    let mut out = vec![0; n];
                    let popped = rx.pop_slice(&mut out);
                    let expected: Vec<u64> = model.drain(..n.min(model.len())).collect();
                    prop_assert_eq!(&out[..popped], &expected[..]);
                }
            }
            prop_assert_eq!(tx.len(), model.len());
            prop_assert_eq!(rx.len(), model.len());
            prop_assert_eq!(ring.len(), model.len());
            prop_assert_eq!(rx.is_empty(), model.is_empty());
        }
    }

    #[test]
    fn mpmc_matches_vecdeque(cap in capacity(), ops in prop::collection::vec(mpmc_op(), 1..300)) {
        let region = mpmc_region(cap);
        // SAFETY: the region is ours, sized by required_bytes, outlives both.
        let ring = unsafe { MpmcRing::<u64>::init_in(region.ptr(), region.len(), cap) }.unwrap();
        // SAFETY: as above; attached after init.
        let attached = unsafe { MpmcRing::<u64>::attach(region.ptr(), region.len()) }.unwrap();
        let mut model = VecDeque::new();
        for op in ops {
            match op {
                MpmcOp::Push { via_attached, item } => {
                    let handle = if via_attached { &attached } else { &ring };
                    let result = handle.try_push(item);
                    if model.len() == cap as usize {
                        prop_assert_eq!(result, Err(item));
                    } else {
                        prop_assert_eq!(result, Ok(()));
                        model.push_back(item);
                    }
                }
                MpmcOp::Pop { via_attached } => {
                    let handle = if via_attached { &attached } else { &ring };
                    prop_assert_eq!(handle.try_pop(), model.pop_front());
                }
                MpmcOp::PopMany { via_attached, room } => {
                    let handle = if via_attached { &attached } else { &ring };
                    let mut out = vec![0; room];
                    let popped = handle.try_pop_many(&mut out);
                    let expected: Vec<u64> = model.drain(..room.min(model.len())).collect();
                    prop_assert_eq!(&out[..popped], &expected[..]);
                }
            }
            prop_assert_eq!(ring.len(), model.len());
            prop_assert_eq!(attached.is_empty(), model.is_empty());
        }
    }

    #[test]
    fn ll_ring_matches_vecdeque(
        cap in capacity(),
        ops in prop::collection::vec(
            prop_oneof![
                prop::collection::vec(any::<u32>(), 0..=tandem_shm_core::layout::LL_RECORD_WORDS)
                    .prop_map(Some),
                Just(None),
            ],
            1..300,
        ),
    ) {
        let region = AlignedRegion::new(LlRing::required_bytes(cap));
        // SAFETY: the region is ours, sized by required_bytes, outlives both.
        let ring = unsafe { LlRing::init_in(region.ptr(), region.len(), cap) }.unwrap();
        // SAFETY: as above; attached after init.
        let attached = unsafe { LlRing::attach(region.ptr(), region.len()) }.unwrap();
        let mut model = VecDeque::new();
        for (i, op) in ops.into_iter().enumerate() {
            let handle = if i % 3 == 0 { &attached } else { &ring };
            match op {
                Some(words) => {
                    let record = LlRecord::new(&words).unwrap();
                    let result = handle.try_push(record);
                    if model.len() == cap as usize {
                        prop_assert_eq!(result, Err(record));
                    } else {
                        prop_assert_eq!(result, Ok(()));
                        model.push_back(record);
                    }
                }
                // One consumer here, so its pops may be either kind.
                None if i % 2 == 0 => prop_assert_eq!(handle.try_pop(), model.pop_front()),
                None => prop_assert_eq!(handle.try_pop_sole(), model.pop_front()),
            }
            prop_assert_eq!(ring.len(), model.len());
        }
    }

    #[test]
    fn lane_queue_matches_model(
        lanes in 1u32..4,
        depth in capacity(),
        low_every in 1u32..5,
        sole in any::<bool>(),
        ops in prop::collection::vec(lane_op(3), 1..300),
    ) {
        let region = lane_region(lanes, depth);
        // SAFETY: the region is ours, sized by required_bytes, outlives the queue.
        let queue = unsafe { U64Lanes::init_in(region.ptr(), region.len(), lanes, depth) }.unwrap();
        // The model has one consumer, so a sole-consumer cursor pops alike.
        let cursor = LaneCursor::new(NonZeroU32::new(low_every).unwrap());
        let mut cursor = if sole { cursor.sole_consumer() } else { cursor };
        let mut model: Vec<[VecDeque<u64>; 2]> = (0..lanes).map(|_| Default::default()).collect();
        // Calls since the cursor last put low first (the fairness rule).
        let mut cursor_calls = 0;
        let pop_model = |rings: &mut [VecDeque<u64>; 2], order: [Priority; 2]| {
            order.into_iter().find_map(|p| rings[p as usize].pop_front().map(|item| (p, item)))
        };
        for op in ops {
            match op {
                LaneOp::Push { lane, low, item } => {
                    let priority = if low { Priority::Low } else { Priority::High };
                    let result = queue.push(lane, priority, item);
                    match model.get_mut(lane as usize) {
                        None => prop_assert_eq!(result, Err(PushError::NoSuchLane { lane, lanes, item })),
                        Some(rings) if rings[priority as usize].len() == depth as usize => {
                            prop_assert_eq!(result, Err(PushError::Full(item)));
                        }
                        Some(rings) => {
                            prop_assert_eq!(result, Ok(()));
                            rings[priority as usize].push_back(item);
                        }
                    }
                }
                LaneOp::Pop { lane } => {
                    let expected = match model.get_mut(lane as usize) {
                        None => Err(NoSuchLane { lane, lanes }),
                        Some(rings) => Ok(pop_model(rings, [Priority::High, Priority::Low])),
                    };
                    prop_assert_eq!(queue.pop(lane), expected);
                }
                LaneOp::CursorPop { lane } => {
                    let expected = match model.get_mut(lane as usize) {
                        None => Err(NoSuchLane { lane, lanes }),
                        Some(rings) => {
                            cursor_calls += 1;
                            let order = if cursor_calls == low_every {
                                cursor_calls = 0;
                                [Priority::Low, Priority::High]
                            } else {
                                [Priority::High, Priority::Low]
                            };
                            Ok(pop_model(rings, order))
                        }
                    };
                    prop_assert_eq!(queue.cursor_pop(&mut cursor, lane), expected);
                }
            }
            for (lane, rings) in model.iter().enumerate() {
                for priority in [Priority::High, Priority::Low] {
                    prop_assert_eq!(
                        queue.lane_len(lane as u32, priority),
                        Ok(rings[priority as usize].len())
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Validation errors
// ---------------------------------------------------------------------------

#[test]
fn init_rejects_bad_arguments() {
    let region = mpmc_region(8);
    let (ptr, len) = (region.ptr(), region.len());
    // SAFETY: (every call below) `ptr` is valid for `len` bytes; the calls
    // that pass other pointers must fail before touching them.
    unsafe {
        assert_eq!(
            MpmcRing::<u64>::init_in(ptr, len, 0).unwrap_err(),
            RingError::ZeroCapacity
        );
        assert_eq!(
            SpscRing::<u64>::init_in(ptr, len, 6).unwrap_err(),
            RingError::CapacityNotPowerOfTwo(6)
        );
        assert_eq!(
            MpmcRing::<u64>::init_in(ptr, len, 16).unwrap_err(),
            RingError::RegionTooSmall {
                needed: MpmcRing::<u64>::required_bytes(16),
                available: len
            }
        );
        assert_eq!(
            MpmcRing::<u64>::init_in(std::ptr::null_mut(), len, 8).unwrap_err(),
            RingError::NullRegion
        );
        assert_eq!(
            MpmcRing::<u64>::init_in(ptr.add(8), len - 8, 1).unwrap_err(),
            RingError::Misaligned {
                address: ptr as usize + 8,
                required: 64
            }
        );
        assert_eq!(
            U64Lanes::init_in(ptr, len, 0, 1).unwrap_err(),
            RingError::ZeroLanes
        );
        assert_eq!(
            U64Lanes::init_in(ptr, len, 1, 3).unwrap_err(),
            RingError::CapacityNotPowerOfTwo(3)
        );
    }
}

#[test]
fn attach_validates_header() {
    let region = mpmc_region(8);
    let (ptr, len) = (region.ptr(), region.len());
    // SAFETY: (every call below) `ptr` is valid for `len` bytes and only
    // this thread uses it.
    unsafe {
        assert_eq!(
            MpmcRing::<u64>::attach(ptr, len).unwrap_err(),
            RingError::BadMagic { found: 0 }
        );
        assert_eq!(
            MpmcRing::<u64>::attach(ptr, 100).unwrap_err(),
            RingError::RegionTooSmall {
                needed: RING_SLOTS_OFFSET,
                available: 100
            }
        );
        MpmcRing::<u64>::init_in(ptr, len, 8).unwrap();
        assert_eq!(
            SpscRing::<u64>::attach(ptr, len).unwrap_err(),
            RingError::WrongKind {
                expected: 1,
                found: 2
            }
        );
        assert_eq!(
            MpmcRing::<u32>::attach(ptr, len).unwrap_err(),
            RingError::ElementMismatch {
                expected_size: 4,
                found_size: 8,
                expected_align: 4,
                found_align: 8
            }
        );
        // The handle's capacity comes from the header: a region cut short
        // for it is refused.
        assert_eq!(
            MpmcRing::<u64>::attach(ptr, MpmcRing::<u64>::required_bytes(4)).unwrap_err(),
            RingError::RegionTooSmall {
                needed: len,
                available: MpmcRing::<u64>::required_bytes(4)
            }
        );
        // Corrupt header fields (offsets fixed by `layout`).
        ptr.add(20).cast::<u32>().write(24);
        assert_eq!(
            MpmcRing::<u64>::attach(ptr, len).unwrap_err(),
            RingError::HeaderMismatch {
                field: "slot_stride",
                expected: 16,
                found: 24
            }
        );
        ptr.add(20).cast::<u32>().write(16);
        ptr.add(8).cast::<u32>().write(5);
        assert_eq!(
            MpmcRing::<u64>::attach(ptr, len).unwrap_err(),
            RingError::CapacityNotPowerOfTwo(5)
        );
        ptr.add(8).cast::<u32>().write(8);
        let ring = MpmcRing::<u64>::attach(ptr, len).unwrap();
        assert_eq!(ring.capacity(), 8);
    }
}

#[test]
fn lane_queue_attach_validates_header() {
    let region = lane_region(2, 4);
    let (ptr, len) = (region.ptr(), region.len());
    // SAFETY: (every call below) `ptr` is valid for `len` bytes and only
    // this thread uses it.
    unsafe {
        assert_eq!(
            U64Lanes::attach(ptr, len).unwrap_err(),
            RingError::BadMagic { found: 0 }
        );
        let queue = U64Lanes::init_in(ptr, len, 2, 4).unwrap();
        queue.push(1, Priority::Low, 7).unwrap();
        // Its rings are LL rings: an MPMC handle refuses them.
        assert_eq!(
            MpmcRing::<u64>::attach(
                ptr.add(LANE_QUEUE_RINGS_OFFSET),
                len - LANE_QUEUE_RINGS_OFFSET
            )
            .unwrap_err(),
            RingError::WrongKind {
                expected: tandem_shm_core::layout::ring_kind::MPMC,
                found: tandem_shm_core::layout::ring_kind::LL
            }
        );
        assert!(matches!(
            U64Lanes::attach(ptr, len - 64).unwrap_err(),
            RingError::RegionTooSmall { .. }
        ));
        // A ring magic overwritten: the lane queue refuses to attach.
        let second_ring =
            ptr.add(LANE_QUEUE_RINGS_OFFSET + LlRing::required_bytes(4).next_multiple_of(64));
        second_ring.cast::<u32>().write(0xdead);
        assert_eq!(
            U64Lanes::attach(ptr, len).unwrap_err(),
            RingError::BadMagic { found: 0xdead }
        );
        second_ring
            .cast::<u32>()
            .write(tandem_shm_core::layout::magic::RING);
        let attached = U64Lanes::attach(ptr, len).unwrap();
        assert_eq!((attached.0.num_lanes(), attached.0.depth()), (2, 4));
        assert_eq!(attached.pop(1), Ok(Some((Priority::Low, 7))));
    }
}

#[test]
fn lane_queue_refuses_missing_lanes() {
    let region = lane_region(2, 2);
    // SAFETY: the region is ours and outlives the queue.
    let queue = unsafe { U64Lanes::init_in(region.ptr(), region.len(), 2, 2) }.unwrap();
    let missing = NoSuchLane { lane: 2, lanes: 2 };
    let err = queue.push(2, Priority::High, 5).unwrap_err();
    assert_eq!(
        err,
        PushError::NoSuchLane {
            lane: 2,
            lanes: 2,
            item: 5
        }
    );
    assert_eq!(err.into_inner(), 5);
    assert_eq!(queue.pop(2), Err(missing));
    assert_eq!(queue.lane_len(2, Priority::Low), Err(missing));
    assert_eq!(LaneCursor::default().pop(&queue.0, 7).unwrap_err().lane, 7);
    assert_eq!(
        LaneCursor::default().low_every(),
        LaneCursor::DEFAULT_LOW_EVERY
    );
}

#[test]
fn errors_display_their_numbers() {
    let shown = RingError::RegionTooSmall {
        needed: 320,
        available: 100,
    }
    .to_string();
    assert!(shown.contains("320") && shown.contains("100"), "{shown}");
    assert!(RingError::CapacityNotPowerOfTwo(6)
        .to_string()
        .contains('6'));
    let lane = PushError::NoSuchLane {
        lane: 9,
        lanes: 2,
        item: 0u64,
    };
    assert!(lane.to_string().contains('9'));
    let _: &dyn std::error::Error = &lane;
}

// ---------------------------------------------------------------------------
// Stress
// ---------------------------------------------------------------------------

/// Pushes with `push` until it accepts, yielding meanwhile (the machine may
/// have fewer cores than threads).
fn push_until<T>(mut push: impl FnMut(T) -> Result<(), T>, mut item: T) {
    while let Err(back) = push(item) {
        item = back;
        thread::yield_now();
    }
}

/// Drives a producer on `tx_region` and a consumer on `rx_region` (the same
/// memory, possibly at two addresses): `count` items arrive in order.
fn spsc_transfer(tx_region: *mut u8, rx_region: *mut u8, len: usize, count: u64) {
    // SAFETY: both pointers map the same `len` bytes for the whole function;
    // one producer, one consumer.
    let ring = unsafe { SpscRing::<u64>::init_in(tx_region, len, 64) }.unwrap();
    // SAFETY: as above, after init.
    let attached = unsafe { SpscRing::<u64>::attach(rx_region, len) }.unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: the only producer.
            let mut tx = unsafe { ring.producer() };
            for i in 0..count {
                push_until(|v| tx.try_push(v), i);
            }
        });
        // SAFETY: the only consumer.
        let mut rx = unsafe { attached.consumer() };
        let mut expected = 0;
        while expected < count {
            match rx.try_pop() {
                Some(v) => {
                    assert_eq!(v, expected, "SPSC out of order");
                    expected += 1;
                }
                None => thread::yield_now(),
            }
        }
        assert_eq!(rx.try_pop(), None);
    });
}

#[test]
fn spsc_stress_in_order() {
    let region = spsc_region(64);
    spsc_transfer(region.ptr(), region.ptr(), region.len(), 1_000_000);
}

/// `producers` threads each push `per_producer` items `(producer << 32) | i`
/// through `push`; `consumers` threads pop with a popper each from
/// `new_popper`. Every item must arrive exactly once, and each consumer must
/// see each producer's items in increasing order.
fn mpmc_exactly_once<P: FnMut() -> Option<u64>>(
    producers: u64,
    consumers: usize,
    per_producer: u64,
    push: impl Fn(u64) -> Result<(), u64> + Sync,
    new_popper: impl Fn() -> P + Sync,
) {
    let total = producers * per_producer;
    let seen: Vec<AtomicU64> = (0..total.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
    let received = AtomicU64::new(0);
    thread::scope(|s| {
        for p in 0..producers {
            let push = &push;
            s.spawn(move || {
                for i in 0..per_producer {
                    push_until(push, (p << 32) | i);
                }
            });
        }
        for _ in 0..consumers {
            s.spawn(|| {
                let mut pop = new_popper();
                let mut last = vec![None::<u64>; producers as usize];
                while received.load(Ordering::Relaxed) < total {
                    let Some(item) = pop() else {
                        thread::yield_now();
                        continue;
                    };
                    let (p, i) = (item >> 32, item & 0xffff_ffff);
                    assert!(p < producers && i < per_producer, "corrupt item {item:#x}");
                    let previous = last[p as usize].replace(i);
                    assert!(previous < Some(i), "producer {p}: {i} after {previous:?}");
                    let bit = p * per_producer + i;
                    let mask = 1 << (bit % 64);
                    let was = seen[(bit / 64) as usize].fetch_or(mask, Ordering::Relaxed);
                    assert_eq!(was & mask, 0, "item {item:#x} delivered twice");
                    received.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let delivered: u64 = seen
        .iter()
        .map(|word| u64::from(word.load(Ordering::Relaxed).count_ones()))
        .sum();
    assert_eq!(delivered, total);
    assert_eq!(new_popper()(), None);
}

#[test]
fn mpmc_stress_2x2() {
    let region = mpmc_region(64);
    // SAFETY: the region is ours and outlives the ring.
    let ring = unsafe { MpmcRing::<u64>::init_in(region.ptr(), region.len(), 64) }.unwrap();
    mpmc_exactly_once(2, 2, 200_000, |v| ring.try_push(v), || || ring.try_pop());
}

#[test]
fn mpmc_stress_4x4_small_ring() {
    let region = mpmc_region(8);
    // SAFETY: the region is ours and outlives the ring.
    let ring = unsafe { MpmcRing::<u64>::init_in(region.ptr(), region.len(), 8) }.unwrap();
    mpmc_exactly_once(4, 4, 50_000, |v| ring.try_push(v), || || ring.try_pop());
}

/// A popper that takes runs of up to `room` items with `try_pop_many` and
/// hands them out one by one (plain `try_pop` for a room of 1).
fn batch_popper<'a>(ring: &'a MpmcRing<'_, u64>, room: usize) -> impl FnMut() -> Option<u64> + 'a {
    let mut run = vec![0; room];
    let (mut next, mut end) = (0, 0);
    move || {
        if room == 1 {
            return ring.try_pop();
        }
        if next == end {
            (next, end) = (0, ring.try_pop_many(&mut run));
        }
        (next < end).then(|| {
            next += 1;
            run[next - 1]
        })
    }
}

#[test]
fn mpmc_stress_runs_and_single_pops_mixed() {
    let region = mpmc_region(16);
    // SAFETY: the region is ours and outlives the ring.
    let ring = unsafe { MpmcRing::<u64>::init_in(region.ptr(), region.len(), 16) }.unwrap();
    // Consumers take runs of 1 (try_pop), 3, 16 and 64 (more than the ring holds).
    let rooms = AtomicU64::new(0);
    mpmc_exactly_once(
        3,
        4,
        100_000,
        |v| ring.try_push(v),
        || {
            let room = [1, 3, 16, 64][rooms.fetch_add(1, Ordering::Relaxed) as usize % 4];
            batch_popper(&ring, room)
        },
    );
}

#[test]
fn ll_ring_stress_exactly_once() {
    let region = AlignedRegion::new(LlRing::required_bytes(8));
    // SAFETY: the region is ours and outlives the ring.
    let ring = unsafe { LlRing::init_in(region.ptr(), region.len(), 8) }.unwrap();
    // Records of 2 to 14 words, every word derived from the item: a torn
    // record (words of two laps) fails `item`'s check.
    let long = |v: u64| {
        let n = 2 + (v % 13) as usize;
        let words: Vec<u32> = (0..n)
            .map(|i| {
                if i < 2 {
                    [v as u32, (v >> 32) as u32][i]
                } else {
                    (v as u32).rotate_left(i as u32)
                }
            })
            .collect();
        LlRecord::new(&words).unwrap()
    };
    let check = |r: LlRecord| {
        let w = r.words();
        let v = u64::from(w[1]) << 32 | u64::from(w[0]);
        assert_eq!(r, long(v), "torn record");
        v
    };
    mpmc_exactly_once(
        3,
        3,
        30_000,
        |v| ring.try_push(long(v)).map_err(check),
        || || ring.try_pop().map(check),
    );
}

/// Three producers and one consumer popping as the only one
/// (`try_pop_sole`): everything once, each producer's records in order.
#[test]
fn ll_ring_stress_sole_consumer() {
    let region = AlignedRegion::new(LlRing::required_bytes(8));
    // SAFETY: the region is ours and outlives the ring.
    let ring = unsafe { LlRing::init_in(region.ptr(), region.len(), 8) }.unwrap();
    mpmc_exactly_once(
        3,
        1,
        50_000,
        |v| ring.try_push(record(v)).map_err(item),
        || || ring.try_pop_sole().map(item),
    );
}

#[test]
fn lane_queue_stress_everything_once() {
    const LANES: u32 = 3;
    let region = lane_region(LANES, 16);
    // SAFETY: the region is ours and outlives the queue.
    let queue = unsafe { U64Lanes::init_in(region.ptr(), region.len(), LANES, 16) }.unwrap();
    // Producer p sends to lane p % LANES at priority p % 2 (so lane 0 gets
    // both), keeping each producer's items in one FIFO ring; consumers poll
    // the lanes round robin, each with its own cursor.
    mpmc_exactly_once(
        4,
        3,
        30_000,
        |item| {
            let producer = item >> 32;
            let lane = (producer % u64::from(LANES)) as u32;
            let priority = if producer % 2 == 0 {
                Priority::High
            } else {
                Priority::Low
            };
            queue
                .push(lane, priority, item)
                .map_err(PushError::into_inner)
        },
        || {
            let mut cursor = LaneCursor::default();
            let mut lane = 0;
            let queue = &queue;
            move || {
                (0..LANES).find_map(|_| {
                    lane = (lane + 1) % LANES;
                    queue
                        .cursor_pop(&mut cursor, lane)
                        .unwrap()
                        .map(|(_, item)| item)
                })
            }
        },
    );
}

#[test]
fn low_priority_drains_while_high_stays_full() {
    let region = lane_region(1, 8);
    // SAFETY: the region is ours and outlives the queue.
    let queue = unsafe { U64Lanes::init_in(region.ptr(), region.len(), 1, 8) }.unwrap();
    let refill_high = || while queue.push(0, Priority::High, 0).is_ok() {};
    for i in 0..8 {
        queue.push(0, Priority::Low, i).unwrap();
    }
    let mut cursor = LaneCursor::new(NonZeroU32::new(4).unwrap());
    let mut low = Vec::new();
    let mut pops = 0;
    while low.len() < 8 {
        refill_high();
        pops += 1;
        assert!(pops <= 8 * 4, "low starved: {low:?} after {pops} pops");
        if let Some((Priority::Low, item)) = queue.cursor_pop(&mut cursor, 0).unwrap() {
            low.push(item);
        }
    }
    assert_eq!(low, (0..8).collect::<Vec<_>>());
    assert_eq!(pops, 8 * 4, "one low pop per period, no more");
    // Plain `pop` is strictly high first.
    assert_eq!(queue.pop(0).unwrap().map(|(p, _)| p), Some(Priority::High));
}

#[test]
fn low_priority_drains_under_concurrent_high_flood() {
    let region = lane_region(1, 16);
    // SAFETY: the region is ours and outlives the queue.
    let queue = unsafe { U64Lanes::init_in(region.ptr(), region.len(), 1, 16) }.unwrap();
    const LOW: u64 = 10_000;
    let done = AtomicBool::new(false);
    let start = Barrier::new(2);
    thread::scope(|s| {
        s.spawn(|| {
            start.wait();
            while !done.load(Ordering::Relaxed) {
                if queue.push(0, Priority::High, u64::MAX).is_err() {
                    thread::yield_now();
                }
            }
        });
        s.spawn(|| {
            start.wait();
            for i in 0..LOW {
                push_until(
                    |v| {
                        queue
                            .push(0, Priority::Low, v)
                            .map_err(PushError::into_inner)
                    },
                    i,
                );
            }
        });
        let mut cursor = LaneCursor::default();
        let mut next_low = 0;
        while next_low < LOW {
            match queue.cursor_pop(&mut cursor, 0).unwrap() {
                Some((Priority::Low, item)) => {
                    assert_eq!(item, next_low);
                    next_low += 1;
                }
                Some((Priority::High, item)) => assert_eq!(item, u64::MAX),
                None => thread::yield_now(),
            }
        }
        done.store(true, Ordering::Relaxed);
    });
}

// ---------------------------------------------------------------------------
// Two mappings of the same memory, as two processes would see it
// ---------------------------------------------------------------------------

#[cfg(target_os = "linux")]
mod two_mappings {
    use super::*;
    use support::DoubleMapping;

    #[test]
    fn spsc_across_mappings() {
        let map = DoubleMapping::new(SpscRing::<u64>::required_bytes(64));
        assert_ne!(map.first(), map.second());
        spsc_transfer(map.first(), map.second(), map.len(), 200_000);
    }

    #[test]
    fn mpmc_across_mappings() {
        let map = DoubleMapping::new(MpmcRing::<u64>::required_bytes(16));
        // SAFETY: both mappings cover the same `len` bytes and outlive the
        // handles.
        let (tx, rx) = unsafe {
            let tx = MpmcRing::<u64>::init_in(map.first(), map.len(), 16).unwrap();
            (
                tx,
                MpmcRing::<u64>::attach(map.second(), map.len()).unwrap(),
            )
        };
        mpmc_exactly_once(2, 2, 50_000, |v| tx.try_push(v), || || rx.try_pop());
    }

    #[test]
    fn lane_queue_across_mappings() {
        let map = DoubleMapping::new(LaneQueue::required_bytes(2, 8));
        // SAFETY: as above.
        let (tx, rx) = unsafe {
            let tx = U64Lanes::init_in(map.first(), map.len(), 2, 8).unwrap();
            (tx, U64Lanes::attach(map.second(), map.len()).unwrap())
        };
        tx.push(1, Priority::Low, 11).unwrap();
        tx.push(1, Priority::High, 12).unwrap();
        assert_eq!(rx.lane_len(1, Priority::Low), Ok(1));
        assert_eq!(rx.pop(1), Ok(Some((Priority::High, 12))));
        assert_eq!(rx.pop(1), Ok(Some((Priority::Low, 11))));
        assert_eq!(tx.pop(1), Ok(None));
    }
}
