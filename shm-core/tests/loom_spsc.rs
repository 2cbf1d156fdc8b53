//! Loom model of the SPSC ring: a producer and a consumer thread pass three
//! items through a ring of two slots (so a slot is reused), and every item
//! arrives once, in order and intact.
//!
//! What loom checks here: every interleaving of the index atomics, and —
//! because under `--cfg loom` each slot's element accesses go through a loom
//! cell (see `ring.rs`, `SlotShadow`) — that each slot read is ordered after
//! its write and each reuse after the previous read. A missing Release or
//! Acquire on `head`/`tail` shows up as a causality violation on that cell.
//! The limit: loom does not see the raw element bytes themselves (copied
//! with `ptr::read`/`ptr::write`), only the cell standing for them, so an
//! access that bypassed the slot accessors would go unnoticed; and it does
//! not model the magic-word publication (initialisation happens before the
//! threads are spawned). Checked by mutation: making any of the four
//! head/tail Release stores or Acquire loads Relaxed fails this model.
#![cfg(loom)]

mod support;

use loom::sync::Arc;
use loom::thread;
use support::{model, AlignedRegion};
use tandem_shm_core::SpscRing;

/// A payload whose every byte depends on the index, so a torn or stale
/// value cannot pass for a right one.
fn payload(i: u64) -> u64 {
    (i + 1).wrapping_mul(0x0101_0101_0101_0101)
}

#[test]
fn three_items_through_two_slots() {
    model(|| {
        let region = Arc::new(AlignedRegion::new(SpscRing::<u64>::required_bytes(2)));
        // SAFETY: the region outlives both threads (joined below, `Arc`
        // keeps it alive); one producer, one consumer.
        let ring = unsafe { SpscRing::<u64>::init_in(region.ptr(), region.len(), 2) }.unwrap();
        // SAFETY: the only producer.
        let mut tx = unsafe { ring.producer() };
        let keep_alive = Arc::clone(&region);
        let producer = thread::spawn(move || {
            for i in 0..3 {
                while tx.try_push(payload(i)).is_err() {
                    thread::yield_now();
                }
            }
            drop(keep_alive);
        });
        // SAFETY: the only consumer.
        let mut rx = unsafe { ring.consumer() };
        for i in 0..3 {
            let item = loop {
                match rx.try_pop() {
                    Some(item) => break item,
                    None => thread::yield_now(),
                }
            };
            assert_eq!(item, payload(i));
        }
        producer.join().unwrap();
        assert_eq!(rx.try_pop(), None);
    });
}
