//! Ring throughput against the crates people would otherwise use, measured in
//! one run: SPSC ring vs `rtrb` and crossbeam's `ArrayQueue` (one producer
//! thread, one consumer thread), MPMC ring vs `ArrayQueue` at 1-1 and 2-2.
//! Items are `u64`; every run checks that the sum of what arrived matches.
//!
//! Fairness, which matters most on many-core hosts: every thread is pinned
//! (`harness::cpus`), all queues of a comparison run on the same CPUs and take
//! turns within each repetition, and each side's state sits alone in its
//! cache lines (`Padded`).
//!
//! Run with `cargo bench -p tandem-shm-core --bench rings`.

mod harness;
#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::spin_loop;
use std::ops::AddAssign;
use std::thread;

use crossbeam_queue::ArrayQueue;
use harness::cpus::Pinning;
use support::AlignedRegion;
use tandem_shm_core::{MpmcRing, SpscRing};

const ITEMS: u64 = 10_000_000;
const CAPACITY: u32 = 1024;
const REPS: usize = 7;
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

/// One side's state (its queue handle, inside the benchmark's closure) alone
/// in a 128-byte block, the pair of cache lines x86 fetches together: the
/// producer's and the consumer's per-item writes to their local indices must
/// not share a line, and without this where they land is up to the stack and
/// heap layout, which differs from queue to queue.
#[repr(align(128))]
struct Padded<T>(T);

/// How often the sides of 1-1 runs backed off: pops that found the queue
/// empty (the consumer caught up) and pushes that found it full (the producer
/// did). They show the regime a run was in, which sets 1-1 throughput more
/// than the code path does: a consumer at the producer's heels pulls the
/// index and the slot line being written across cores item by item, so a
/// faster pop can mean a slower run (slowing the SPSC consumer by a few
/// stores per item flipped it to the producer-ahead regime and nearly doubled
/// throughput, for Tandem and rtrb alike).
#[derive(Clone, Copy, Default)]
struct Stalls {
    runs: u64,
    empty_pops: u64,
    full_pushes: u64,
}

impl AddAssign for Stalls {
    fn add_assign(&mut self, other: Self) {
        self.runs += other.runs;
        self.empty_pops += other.empty_pops;
        self.full_pushes += other.full_pushes;
    }
}

/// Pushes `item`, backing off while the queue is full; returns how many
/// attempts failed.
fn push_until(mut push: impl FnMut(u64) -> bool, item: u64) -> u64 {
    let mut backoff = Backoff::new();
    let mut failures = 0;
    while !push(item) {
        failures += 1;
        backoff.wait();
    }
    failures
}

fn expected_sum(items: u64) -> u64 {
    items * (items - 1) / 2
}

/// A producer thread (`pins`' thread 0) pushes `0..ITEMS`, a consumer thread
/// (thread 1) pops them all.
fn one_to_one(
    pins: &Pinning,
    push: impl FnMut(u64) -> bool + Send,
    pop: impl FnMut() -> Option<u64> + Send,
) -> Stalls {
    let (mut push, mut pop) = (Padded(push), Padded(pop));
    let (push, pop) = (&mut push, &mut pop);
    thread::scope(|s| {
        let producer = s.spawn(move || {
            pins.pin_current(0);
            (0..ITEMS).map(|i| push_until(&mut push.0, i)).sum()
        });
        let consumer = s.spawn(move || {
            pins.pin_current(1);
            let (mut sum, mut received, mut empty_pops) = (0u64, 0u64, 0u64);
            let mut backoff = Backoff::new();
            while received < ITEMS {
                match (pop.0)() {
                    Some(v) => {
                        sum += v;
                        received += 1;
                        backoff.reset();
                    }
                    None => {
                        empty_pops += 1;
                        backoff.wait();
                    }
                }
            }
            assert_eq!(sum, expected_sum(ITEMS), "items lost or corrupted");
            empty_pops
        });
        Stalls {
            runs: 1,
            full_pushes: producer.join().unwrap(),
            empty_pops: consumer.join().unwrap(),
        }
    })
}

/// `threads` producers (`pins`' threads `0..threads`) share `0..ITEMS`;
/// `threads` consumers (the next `threads`) pop until they meet a `STOP`,
/// which the calling thread pushes once per consumer after the producers are
/// done.
fn many_to_many(
    pins: &Pinning,
    threads: usize,
    push: impl Fn(u64) -> bool + Sync,
    pop: impl Fn() -> Option<u64> + Sync,
) {
    let per_producer = ITEMS / threads as u64;
    let sum: u64 = thread::scope(|s| {
        let consumers: Vec<_> = (0..threads)
            .map(|c| {
                let pop = &pop;
                s.spawn(move || {
                    pins.pin_current(threads + c);
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
                    pins.pin_current(p);
                    let first = p as u64 * per_producer;
                    for i in first..first + per_producer {
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
        expected_sum(per_producer * threads as u64),
        "items lost or corrupted"
    );
}

/// Fills and drains the ring from one thread (`pins`' thread 0), `CAPACITY`
/// items at a time: the cost of the code path alone, without cache lines
/// moving between cores.
fn same_thread(
    pins: &Pinning,
    mut push: impl FnMut(u64) -> bool + Send,
    mut pop: impl FnMut() -> Option<u64> + Send,
) {
    thread::scope(|s| {
        s.spawn(|| {
            pins.pin_current(0);
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
        });
    });
}

fn print_stalls(rows: &[(&str, Stalls)]) {
    println!("1-1 backoffs per 1000 items, over all runs (empty pops: consumer caught up; full pushes: producer did):");
    for (name, stalls) in rows {
        let per_thousand = |n: u64| n as f64 * 1000.0 / (stalls.runs * ITEMS) as f64;
        println!(
            "  {name:<22} empty pops {:>8.1} | full pushes {:>8.1}",
            per_thousand(stalls.empty_pops),
            per_thousand(stalls.full_pushes),
        );
    }
}

fn main() {
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    println!("machine: {}", harness::machine());
    println!("rings: {ITEMS} u64 items per run, capacity {CAPACITY}, median of {REPS} rounds, queues interleaved");
    let pair = Pinning::choose(2);
    println!(
        "1-1 runs: {}; one-thread runs on the producer's CPU",
        pair.describe(&["producer", "consumer"])
    );
    let quad = Pinning::choose(4);
    println!(
        "2-2 runs: {}",
        quad.describe(&["producer 0", "producer 1", "consumer 0", "consumer 1"])
    );

    let spsc_region = AlignedRegion::new(SpscRing::<u64>::required_bytes(CAPACITY));
    let new_spsc = || {
        // SAFETY: the region is ours, sized for the ring, and outlives every
        // run; each run re-initialises it before any thread uses it.
        unsafe { SpscRing::<u64>::init_in(spsc_region.ptr(), spsc_region.len(), CAPACITY) }.unwrap()
    };
    let mpmc_region = AlignedRegion::new(MpmcRing::<u64>::required_bytes(CAPACITY));
    let new_mpmc = || {
        // SAFETY: as for `new_spsc`.
        unsafe { MpmcRing::<u64>::init_in(mpmc_region.ptr(), mpmc_region.len(), CAPACITY) }.unwrap()
    };

    let mut stalls = [Stalls::default(); 4];
    let [spsc_stalls, rtrb_stalls, array_queue_stalls, mpmc_stalls] = &mut stalls;
    let [spsc, rtrb, array_queue_1_1, mpmc_1_1] = harness::interleaved_rates(
        ITEMS,
        REPS,
        [
            &mut || {
                let ring = new_spsc();
                // SAFETY: the only producer and consumer of this ring.
                let (mut tx, mut rx) = unsafe { (ring.producer(), ring.consumer()) };
                *spsc_stalls +=
                    one_to_one(&pair, move |v| tx.try_push(v).is_ok(), move || rx.try_pop());
            },
            &mut || {
                let (mut tx, mut rx) = rtrb::RingBuffer::<u64>::new(CAPACITY as usize);
                *rtrb_stalls +=
                    one_to_one(&pair, move |v| tx.push(v).is_ok(), move || rx.pop().ok());
            },
            &mut || {
                let queue = ArrayQueue::<u64>::new(CAPACITY as usize);
                *array_queue_stalls += one_to_one(&pair, |v| queue.push(v).is_ok(), || queue.pop());
            },
            &mut || {
                let ring = new_mpmc();
                *mpmc_stalls += one_to_one(&pair, |v| ring.try_push(v).is_ok(), || ring.try_pop());
            },
        ],
    );
    let [spsc_alone, rtrb_alone] = harness::interleaved_rates(
        ITEMS,
        REPS,
        [
            &mut || {
                let ring = new_spsc();
                // SAFETY: the only producer and consumer of this ring.
                let (mut tx, mut rx) = unsafe { (ring.producer(), ring.consumer()) };
                same_thread(&pair, |v| tx.try_push(v).is_ok(), || rx.try_pop());
            },
            &mut || {
                let (mut tx, mut rx) = rtrb::RingBuffer::<u64>::new(CAPACITY as usize);
                same_thread(&pair, |v| tx.push(v).is_ok(), || rx.pop().ok());
            },
        ],
    );
    let [mpmc_2_2, array_queue_2_2] = harness::interleaved_rates(
        ITEMS,
        REPS,
        [
            &mut || {
                let ring = new_mpmc();
                many_to_many(&quad, 2, |v| ring.try_push(v).is_ok(), || ring.try_pop());
            },
            &mut || {
                let queue = ArrayQueue::<u64>::new(CAPACITY as usize);
                many_to_many(&quad, 2, |v| queue.push(v).is_ok(), || queue.pop());
            },
        ],
    );

    harness::compare("SPSC 1-1", spsc, "rtrb", rtrb, Some(1.0));
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
    harness::compare(
        "MPMC 1-1",
        mpmc_1_1,
        "crossbeam ArrayQueue",
        array_queue_1_1,
        Some(1.0),
    );
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
    print_stalls(&[
        ("tandem SPSC", stalls[0]),
        ("rtrb", stalls[1]),
        ("crossbeam ArrayQueue", stalls[2]),
        ("tandem MPMC", stalls[3]),
    ]);
}
