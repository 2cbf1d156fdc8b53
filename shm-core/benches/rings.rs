//! Ring throughput against the crates people would otherwise use, measured in
//! one run: SPSC ring vs `rtrb` and crossbeam's `ArrayQueue` (one producer
//! thread, one consumer thread), MPMC ring vs `ArrayQueue` at 1-1 and 2-2.
//! Items are `u64`; every run checks that the sum of what arrived matches.
//!
//! Run with `cargo bench -p tandem-shm-core --bench rings`.

mod harness;
#[path = "../tests/ring_support/mod.rs"]
mod ring_support;

use std::hint::spin_loop;
use std::thread;

use crossbeam_queue::ArrayQueue;
use ring_support::AlignedRegion;
use tandem_shm_core::{MpmcRing, SpscRing};

const ITEMS: u64 = 10_000_000;
const CAPACITY: u32 = 1024;
const REPS: usize = 5;
/// Ends a consumer in the multi-consumer runs (never a real item).
const STOP: u64 = u64::MAX;

/// Waits after a failed push or pop: spin briefly (the peer is usually a
/// few nanoseconds away), then yield (it may be descheduled when threads
/// outnumber cores). The same policy drives every queue compared.
struct Backoff(u32);

impl Backoff {
    fn new() -> Self {
        Self(0)
    }

    fn wait(&mut self) {
        if self.0 < 64 {
            self.0 += 1;
            spin_loop();
        } else {
            thread::yield_now();
        }
    }

    fn reset(&mut self) {
        self.0 = 0;
    }
}

fn push_until(mut push: impl FnMut(u64) -> bool, item: u64) {
    let mut backoff = Backoff::new();
    while !push(item) {
        backoff.wait();
    }
}

fn expected_sum(items: u64) -> u64 {
    items * (items - 1) / 2
}

/// One producer thread pushes `0..ITEMS`, the calling thread pops them all.
fn one_to_one(push: impl FnMut(u64) -> bool + Send, mut pop: impl FnMut() -> Option<u64>) {
    let mut push = push;
    thread::scope(|s| {
        s.spawn(move || {
            for i in 0..ITEMS {
                push_until(&mut push, i);
            }
        });
        let (mut sum, mut received) = (0u64, 0u64);
        let mut backoff = Backoff::new();
        while received < ITEMS {
            match pop() {
                Some(v) => {
                    sum += v;
                    received += 1;
                    backoff.reset();
                }
                None => backoff.wait(),
            }
        }
        assert_eq!(sum, expected_sum(ITEMS), "items lost or corrupted");
    });
}

/// `threads` producers share `0..ITEMS`; `threads` consumers pop until they
/// meet a `STOP`, which the main thread pushes once per consumer after the
/// producers are done.
fn many_to_many(
    threads: u64,
    push: impl Fn(u64) -> bool + Sync,
    pop: impl Fn() -> Option<u64> + Sync,
) {
    let per_producer = ITEMS / threads;
    let sum: u64 = thread::scope(|s| {
        let consumers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut sum = 0u64;
                    let mut backoff = Backoff::new();
                    loop {
                        match pop() {
                            Some(STOP) => return sum,
                            Some(v) => {
                                sum += v;
                                backoff.reset();
                            }
                            None => backoff.wait(),
                        }
                    }
                })
            })
            .collect();
        let producers: Vec<_> = (0..threads)
            .map(|p| {
                let push = &push;
                s.spawn(move || {
                    for i in p * per_producer..(p + 1) * per_producer {
                        push_until(push, i);
                    }
                })
            })
            .collect();
        for producer in producers {
            producer.join().unwrap();
        }
        for _ in 0..threads {
            push_until(&push, STOP);
        }
        consumers.into_iter().map(|c| c.join().unwrap()).sum()
    });
    assert_eq!(
        sum,
        expected_sum(per_producer * threads),
        "items lost or corrupted"
    );
}

/// Fills and drains the ring from one thread, `CAPACITY` items at a time:
/// the cost of the code path alone, without cache lines moving between cores.
fn same_thread(mut push: impl FnMut(u64) -> bool, mut pop: impl FnMut() -> Option<u64>) {
    let mut sum = 0u64;
    for lap in 0..ITEMS / u64::from(CAPACITY) {
        let base = lap * u64::from(CAPACITY);
        for i in base..base + u64::from(CAPACITY) {
            assert!(push(i), "ring full early");
        }
        for _ in 0..CAPACITY {
            sum += pop().expect("ring empty early");
        }
    }
    let items = ITEMS / u64::from(CAPACITY) * u64::from(CAPACITY);
    assert_eq!(sum, expected_sum(items), "items lost or corrupted");
}

fn main() {
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "rings: {ITEMS} u64 items per run, capacity {CAPACITY}, median of {REPS}, {cores} cores"
    );

    let spsc_region = AlignedRegion::new(SpscRing::<u64>::required_bytes(CAPACITY));
    let spsc = harness::rate(ITEMS, REPS, || {
        // SAFETY: the region is ours, sized for the ring, and outlives it;
        // one producer and one consumer per run.
        let ring =
            unsafe { SpscRing::<u64>::init_in(spsc_region.ptr(), spsc_region.len(), CAPACITY) }
                .unwrap();
        // SAFETY: the only producer and consumer of this ring.
        let (mut tx, mut rx) = unsafe { (ring.producer(), ring.consumer()) };
        one_to_one(move |v| tx.try_push(v).is_ok(), || rx.try_pop());
    });
    let rtrb = harness::rate(ITEMS, REPS, || {
        let (mut tx, mut rx) = rtrb::RingBuffer::<u64>::new(CAPACITY as usize);
        one_to_one(move |v| tx.push(v).is_ok(), || rx.pop().ok());
    });
    let array_queue_1_1 = harness::rate(ITEMS, REPS, || {
        let queue = ArrayQueue::<u64>::new(CAPACITY as usize);
        one_to_one(|v| queue.push(v).is_ok(), || queue.pop());
    });
    harness::compare("SPSC 1-1", spsc, "rtrb", rtrb, Some(1.0));
    let spsc_alone = harness::rate(ITEMS, REPS, || {
        // SAFETY: as above.
        let ring =
            unsafe { SpscRing::<u64>::init_in(spsc_region.ptr(), spsc_region.len(), CAPACITY) }
                .unwrap();
        // SAFETY: as above.
        let (mut tx, mut rx) = unsafe { (ring.producer(), ring.consumer()) };
        same_thread(|v| tx.try_push(v).is_ok(), || rx.try_pop());
    });
    let rtrb_alone = harness::rate(ITEMS, REPS, || {
        let (mut tx, mut rx) = rtrb::RingBuffer::<u64>::new(CAPACITY as usize);
        same_thread(|v| tx.push(v).is_ok(), || rx.pop().ok());
    });
    harness::compare(
        "SPSC one thread (code path)",
        spsc_alone,
        "rtrb",
        rtrb_alone,
        Some(1.0),
    );
    harness::compare(
        "SPSC 1-1",
        spsc,
        "crossbeam ArrayQueue",
        array_queue_1_1,
        Some(1.0),
    );

    let mpmc_region = AlignedRegion::new(MpmcRing::<u64>::required_bytes(CAPACITY));
    let new_mpmc = || {
        // SAFETY: the region is ours, sized for the ring, and outlives every
        // run; each run re-initialises it before any thread uses it.
        unsafe { MpmcRing::<u64>::init_in(mpmc_region.ptr(), mpmc_region.len(), CAPACITY) }.unwrap()
    };
    let mpmc_1_1 = harness::rate(ITEMS, REPS, || {
        let ring = new_mpmc();
        one_to_one(|v| ring.try_push(v).is_ok(), || ring.try_pop());
    });
    harness::compare(
        "MPMC 1-1",
        mpmc_1_1,
        "crossbeam ArrayQueue",
        array_queue_1_1,
        Some(1.0),
    );

    let mpmc_2_2 = harness::rate(ITEMS, REPS, || {
        let ring = new_mpmc();
        many_to_many(2, |v| ring.try_push(v).is_ok(), || ring.try_pop());
    });
    let array_queue_2_2 = harness::rate(ITEMS, REPS, || {
        let queue = ArrayQueue::<u64>::new(CAPACITY as usize);
        many_to_many(2, |v| queue.push(v).is_ok(), || queue.pop());
    });
    let label = if cores < 4 {
        format!("MPMC 2-2 (4 threads, {cores} cores)")
    } else {
        "MPMC 2-2".to_owned()
    };
    harness::compare(
        &label,
        mpmc_2_2,
        "crossbeam ArrayQueue",
        array_queue_2_2,
        Some(1.0),
    );
    if cores < 4 {
        println!("note: 2-2 oversubscribes this machine; it measures behaviour under preemption, not parallel scaling");
    }
}
