//! Loom model of the lane queue: the main thread offers high, low, high
//! items to a lane of depth 2 while a consumer thread pops it three times
//! with a `LaneCursor` that prefers low every second call; after joining,
//! the lane is drained with the same cursor. Every accepted item arrives exactly once, intact,
//! in order within its priority. Threads make a fixed number of `try` calls
//! instead of spinning, for the reason given in `loom_mpmc.rs`; loom's reach
//! is as described in `loom_spsc.rs`.
#![cfg(loom)]

mod support;

use std::num::NonZeroU32;

use loom::sync::Arc;
use loom::thread;
use support::{model, AlignedRegion};
use tandem_shm_core::{LaneCursor, LaneQueue, LlRecord, Priority};

fn record(item: u32) -> LlRecord {
    LlRecord::new(&[item, !item]).unwrap()
}

/// The item of a whole record; panics on a torn one.
fn item(r: LlRecord) -> u32 {
    let i = r.words()[0];
    assert_eq!(r, record(i), "torn record");
    i
}

#[test]
fn cursor_and_producer_race_on_both_priorities() {
    model(|| {
        let region = Arc::new(AlignedRegion::new(LaneQueue::required_bytes(1, 2)));
        // SAFETY: the region outlives the consumer thread (joined below).
        let queue: LaneQueue<'static> =
            unsafe { LaneQueue::init_in(region.ptr(), region.len(), 1, 2) }.unwrap();
        // The consumer is spawned first and the main thread pushes, so loom's
        // first schedule runs the pushes before the pops (see `loom_mpmc.rs`
        // on why the direction matters) and backtracking explores the rest.
        let consumer = thread::spawn(move || {
            let mut cursor = LaneCursor::new(NonZeroU32::new(2).unwrap());
            let popped: Vec<(Priority, u32)> = (0..3)
                .filter_map(|_| cursor.pop(&queue, 0).unwrap().map(|(p, r)| (p, item(r))))
                .collect();
            (cursor, popped)
        });
        let offered = [
            (Priority::High, 0x1111),
            (Priority::Low, 0x2222),
            (Priority::High, 0x3333),
        ];
        let accepted: Vec<(Priority, u32)> = offered
            .into_iter()
            .filter(|&(priority, i)| queue.push(0, priority, record(i)).is_ok())
            .collect();
        let (mut cursor, mut popped) = consumer.join().unwrap();
        popped.extend(
            (0..3).filter_map(|_| cursor.pop(&queue, 0).unwrap().map(|(p, r)| (p, item(r)))),
        );
        assert_eq!(queue.pop(0), Ok(None));
        for priority in [Priority::High, Priority::Low] {
            let of = |items: &[(Priority, u32)]| -> Vec<u32> {
                items
                    .iter()
                    .filter(|e| e.0 == priority)
                    .map(|e| e.1)
                    .collect()
            };
            assert_eq!(
                of(&popped),
                of(&accepted),
                "{priority:?} items lost, duplicated or reordered"
            );
        }
        drop(region);
    });
}
