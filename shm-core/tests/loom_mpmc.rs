//! Loom models of the MPMC ring, two slots and three items (so a slot can be
//! reused): two producers and one consumer, and one producer and two
//! consumers. Every item a push accepted arrives exactly once and intact,
//! and one producer's items arrive in its order.
//!
//! Each thread makes a fixed number of `try_` calls, which may legitimately
//! report full or empty (even spuriously, while a peer is mid-operation);
//! after joining, the main thread drains what is left, when nothing is in
//! flight and the ring answers exactly. No thread spins: loom cannot bound a
//! model in which two threads yield-spin while a third is mid-operation (the
//! schedule that keeps picking the spinners is infinite).
//!
//! What loom checks and what it cannot see: as in `loom_spsc.rs` — slot
//! element accesses go through a loom cell under `--cfg loom`, so a missing
//! Release/Acquire on a slot's sequence number is a reported causality
//! violation; the raw element bytes themselves are invisible to loom. Loom's
//! DPOR remembers only the last access to each atomic, so it can miss the
//! race between a load and a later store when the storing thread loaded the
//! same atomic in between; the models are therefore arranged so that the
//! default schedule already runs each hand-off in the direction under test
//! (pushes before pops in the first model, the one producer first in the
//! second). Checked by mutation: making either `seq` store Relaxed fails
//! these models, and so does making `try_pop_many`'s `seq` load or store
//! Relaxed fail the third (a run consumer beside a single one).
#![cfg(loom)]

mod support;

use loom::sync::Arc;
use loom::thread;
use support::{model, AlignedRegion};
use tandem_shm_core::MpmcRing;

/// See `loom_spsc.rs`.
fn payload(i: u64) -> u64 {
    (i + 1).wrapping_mul(0x0101_0101_0101_0101)
}

/// A two-slot ring in a fresh region; the `Arc` must outlive every handle.
fn two_slot_ring() -> (Arc<AlignedRegion>, MpmcRing<'static, u64>) {
    let region = Arc::new(AlignedRegion::new(MpmcRing::<u64>::required_bytes(2)));
    // SAFETY: callers keep the region alive until every thread using the
    // ring has been joined.
    let ring = unsafe { MpmcRing::<u64>::init_in(region.ptr(), region.len(), 2) }.unwrap();
    (region, ring)
}

/// Tries to push each item once; returns those accepted, in order.
fn push_each(ring: &MpmcRing<'_, u64>, items: &[u64]) -> Vec<u64> {
    items
        .iter()
        .copied()
        .filter(|&item| ring.try_push(item).is_ok())
        .collect()
}

/// Tries to pop `attempts` times; returns what came out, in order.
fn pop_times(ring: &MpmcRing<'_, u64>, attempts: usize) -> Vec<u64> {
    (0..attempts).filter_map(|_| ring.try_pop()).collect()
}

/// Everything popped (concurrently, then by the final drain) is exactly the
/// multiset of accepted pushes, and a refused push means the ring was full
/// at some point (so it accepted at least its capacity of items).
fn assert_conserved(accepted: &[u64], popped: &[u64], refused: usize) {
    let mut accepted = accepted.to_vec();
    let mut popped = popped.to_vec();
    accepted.sort_unstable();
    popped.sort_unstable();
    assert_eq!(popped, accepted, "items lost or duplicated");
    assert!(
        refused == 0 || accepted.len() >= 2,
        "refused a push into a non-full ring"
    );
}

#[test]
fn two_producers_one_consumer() {
    model(|| {
        let (region, ring) = two_slot_ring();
        // Producer 0 offers items 0 and 1, producer 1 offers item 2. All
        // three parties are spawned threads, producers first, so loom's
        // first schedule runs pushes before pops and the publication edge is
        // exercised before backtracking explores the other orders.
        let offers = [vec![payload(0), payload(1)], vec![payload(2)]];
        let producers: Vec<_> = offers
            .iter()
            .cloned()
            .map(|items| thread::spawn(move || push_each(&ring, &items)))
            .collect();
        let consumer = thread::spawn(move || pop_times(&ring, 2));
        let accepted: Vec<Vec<u64>> = producers.into_iter().map(|p| p.join().unwrap()).collect();
        let mut popped = consumer.join().unwrap();
        popped.extend(pop_times(&ring, 3));
        assert_eq!(ring.try_pop(), None);
        let all_accepted: Vec<u64> = accepted.concat();
        assert_conserved(&all_accepted, &popped, 3 - all_accepted.len());
        // Producer 0's accepted items come out in its order.
        let order: Vec<u64> = popped
            .iter()
            .copied()
            .filter(|i| accepted[0].contains(i))
            .collect();
        assert_eq!(order, accepted[0]);
        drop(region);
    });
}

#[test]
fn one_producer_two_consumers() {
    model(|| {
        let (region, ring) = two_slot_ring();
        let consumers: Vec<_> = (0..2)
            .map(|_| thread::spawn(move || pop_times(&ring, 2)))
            .collect();
        let offered = [payload(0), payload(1), payload(2)];
        let accepted = push_each(&ring, &offered);
        let mut popped = Vec::new();
        for consumer in consumers {
            let got = consumer.join().unwrap();
            // Each consumer sees the producer's items in order.
            assert!(got.windows(2).all(|w| w[0] < w[1]), "order lost: {got:x?}");
            popped.extend(got);
        }
        popped.extend(pop_times(&ring, 3));
        assert_eq!(ring.try_pop(), None);
        assert_conserved(&accepted, &popped, offered.len() - accepted.len());
        drop(region);
    });
}

/// `try_pop_many` against a plain consumer: one producer offers three items
/// to a two-slot ring while one consumer takes runs of two and the other
/// single items. A run is claimed by one CAS after its slots were seen full,
/// so neither consumer may get an item the other got, or one not yet
/// published.
#[test]
fn a_run_consumer_beside_a_single_consumer() {
    model(|| {
        let (region, ring) = two_slot_ring();
        let runs = thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..2 {
                let mut out = [0; 2];
                let n = ring.try_pop_many(&mut out);
                got.extend_from_slice(&out[..n]);
            }
            got
        });
        let single = thread::spawn(move || pop_times(&ring, 1));
        let offered = [payload(0), payload(1), payload(2)];
        let accepted = push_each(&ring, &offered);
        let mut popped = Vec::new();
        for consumer in [runs, single] {
            let got = consumer.join().unwrap();
            assert!(got.windows(2).all(|w| w[0] < w[1]), "order lost: {got:x?}");
            popped.extend(got);
        }
        let mut rest = [0; 4];
        let n = ring.try_pop_many(&mut rest);
        popped.extend_from_slice(&rest[..n]);
        assert_eq!(ring.try_pop(), None);
        assert_conserved(&accepted, &popped, offered.len() - accepted.len());
        drop(region);
    });
}
