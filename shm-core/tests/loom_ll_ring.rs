//! Loom models of the LL ring (two slots, three records, so a slot is
//! reused): two producers and one consumer (popping with `try_pop`, and as
//! the ring's only consumer with `try_pop_sole`), and one producer and two
//! consumers. Every record a push accepted arrives exactly once and whole
//! (never words of two laps), and one producer's records arrive in its order.
//!
//! The records' words are loom atomics, so loom sees a consumer read a
//! record while its producer is midway: that must read as "not yet", never
//! as a record. As in `loom_mpmc.rs`, threads make a fixed number of `try_`
//! calls and the main thread drains after joining. Checked by mutation:
//! making the consumer's `seq` store Relaxed (in `try_pop` or in
//! `try_pop_sole`) fails these models (a producer of the next lap may then
//! overwrite words still being read).
#![cfg(loom)]

mod support;

use loom::sync::Arc;
use loom::thread;
use support::{model, AlignedRegion};
use tandem_shm_core::{LlRecord, LlRing};

/// Record i: three words derived from i, so a mix of two records shows.
fn record(i: u32) -> LlRecord {
    LlRecord::new(&[i, i.wrapping_mul(0x0101_0101), !i]).unwrap()
}

/// The i of a whole record; panics on a torn one.
fn index(r: LlRecord) -> u32 {
    let i = r.words()[0];
    assert_eq!(r, record(i), "torn record");
    i
}

fn two_slot_ring() -> (Arc<AlignedRegion>, LlRing<'static>) {
    let region = Arc::new(AlignedRegion::new(LlRing::required_bytes(2)));
    // SAFETY: callers keep the region alive until every thread using the
    // ring has been joined.
    let ring = unsafe { LlRing::init_in(region.ptr(), region.len(), 2) }.unwrap();
    (region, ring)
}

fn push_each(ring: &LlRing<'_>, items: &[u32]) -> Vec<u32> {
    items
        .iter()
        .copied()
        .filter(|&i| ring.try_push(record(i)).is_ok())
        .collect()
}

fn pop_times(ring: &LlRing<'_>, attempts: usize) -> Vec<u32> {
    (0..attempts)
        .filter_map(|_| ring.try_pop().map(index))
        .collect()
}

fn pop_sole_times(ring: &LlRing<'_>, attempts: usize) -> Vec<u32> {
    (0..attempts)
        .filter_map(|_| ring.try_pop_sole().map(index))
        .collect()
}

fn assert_conserved(accepted: &[u32], popped: &[u32]) {
    let mut accepted = accepted.to_vec();
    let mut popped = popped.to_vec();
    accepted.sort_unstable();
    popped.sort_unstable();
    assert_eq!(popped, accepted, "records lost or duplicated");
}

#[test]
fn two_producers_one_consumer() {
    two_producers_then(pop_times);
}

#[test]
fn two_producers_one_sole_consumer() {
    two_producers_then(pop_sole_times);
}

/// Two producers and one consumer popping with `pop`; the main thread
/// drains with it after joining (then the only consumer).
fn two_producers_then(pop: fn(&LlRing<'_>, usize) -> Vec<u32>) {
    model(move || {
        let (region, ring) = two_slot_ring();
        let consumer = thread::spawn(move || pop(&ring, 3));
        let other = thread::spawn(move || push_each(&ring, &[2]));
        let mut accepted = push_each(&ring, &[0, 1]);
        let mut popped = consumer.join().unwrap();
        accepted.extend(other.join().unwrap());
        popped.extend(pop(&ring, 3));
        let zeros: Vec<u32> = popped.iter().copied().filter(|&i| i < 2).collect();
        assert!(
            zeros.windows(2).all(|w| w[0] < w[1]),
            "one producer's order broken"
        );
        assert_conserved(&accepted, &popped);
        drop(region);
    });
}

#[test]
fn one_producer_two_consumers() {
    model(|| {
        let (region, ring) = two_slot_ring();
        let first = thread::spawn(move || pop_times(&ring, 2));
        let second = thread::spawn(move || pop_times(&ring, 2));
        let accepted = push_each(&ring, &[0, 1, 2]);
        let mut popped = first.join().unwrap();
        popped.extend(second.join().unwrap());
        popped.extend(pop_times(&ring, 3));
        assert_conserved(&accepted, &popped);
        drop(region);
    });
}
