//! Loom models of the MPMC ring (two slots, three items, so a slot is
//! reused): two producers and one consumer, and one producer and two
//! consumers. Every item arrives exactly once and intact; one producer's
//! items arrive in its order.
//!
//! What loom checks and what it cannot see: as in `loom_spsc.rs` — slot
//! element accesses go through a loom cell under `--cfg loom`, so a missing
//! Release/Acquire on a slot's sequence number is a reported causality
//! violation; the raw element bytes themselves are invisible to loom.
#![cfg(loom)]

mod ring_support;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use ring_support::{model, AlignedRegion};
use tandem_shm_core::MpmcRing;

/// See `loom_spsc.rs`.
fn payload(i: u64) -> u64 {
    (i + 1).wrapping_mul(0x0101_0101_0101_0101)
}

fn push_until(ring: &MpmcRing<'_, u64>, item: u64) {
    while ring.try_push(item).is_err() {
        thread::yield_now();
    }
}

fn pop_until(ring: &MpmcRing<'_, u64>) -> u64 {
    loop {
        match ring.try_pop() {
            Some(item) => return item,
            None => thread::yield_now(),
        }
    }
}

/// A two-slot ring in a fresh region; the `Arc` must outlive every handle.
fn two_slot_ring() -> (Arc<AlignedRegion>, MpmcRing<'static, u64>) {
    let region = Arc::new(AlignedRegion::new(MpmcRing::<u64>::required_bytes(2)));
    // SAFETY: callers keep the region alive until every thread using the
    // ring has been joined.
    let ring = unsafe { MpmcRing::<u64>::init_in(region.ptr(), region.len(), 2) }.unwrap();
    (region, ring)
}

#[test]
fn two_producers_one_consumer() {
    model(|| {
        let (region, ring) = two_slot_ring();
        // Producer 0 sends items 0 and 1, producer 1 sends item 2.
        let producers: Vec<_> = [vec![0, 1], vec![2]]
            .into_iter()
            .map(|items| {
                thread::spawn(move || {
                    for i in items {
                        push_until(&ring, payload(i));
                    }
                })
            })
            .collect();
        let got: Vec<u64> = (0..3).map(|_| pop_until(&ring)).collect();
        for producer in producers {
            producer.join().unwrap();
        }
        let position = |i| got.iter().position(|&item| item == payload(i));
        assert!(position(0) < position(1), "producer order lost: {got:x?}");
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![payload(0), payload(1), payload(2)]);
        assert_eq!(ring.try_pop(), None);
        drop(region);
    });
}

#[test]
fn one_producer_two_consumers() {
    model(|| {
        let (region, ring) = two_slot_ring();
        let taken = Arc::new(AtomicUsize::new(0));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let taken = Arc::clone(&taken);
                thread::spawn(move || {
                    let mut got = Vec::new();
                    // Relaxed: only bounds the loop; items are checked after join.
                    while taken.load(Ordering::Relaxed) < 3 {
                        match ring.try_pop() {
                            Some(item) => {
                                got.push(item);
                                taken.fetch_add(1, Ordering::Relaxed);
                            }
                            None => thread::yield_now(),
                        }
                    }
                    got
                })
            })
            .collect();
        for i in 0..3 {
            push_until(&ring, payload(i));
        }
        let mut all: Vec<u64> = Vec::new();
        for consumer in consumers {
            let got = consumer.join().unwrap();
            assert!(got.windows(2).all(|w| w[0] < w[1]), "order lost: {got:x?}");
            all.extend(got);
        }
        all.sort_unstable();
        assert_eq!(all, vec![payload(0), payload(1), payload(2)]);
        drop(region);
    });
}
