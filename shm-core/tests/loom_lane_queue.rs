//! Loom model of the lane queue: one producer pushes high, low, high items to
//! a lane of depth 2 while a consumer drains it with a `LaneCursor` that
//! prefers low every second call. Every item arrives exactly once, intact,
//! in order within its priority. Loom's reach is as in `loom_spsc.rs`.
#![cfg(loom)]

mod ring_support;

use std::num::NonZeroU32;

use loom::sync::Arc;
use loom::thread;
use ring_support::{model, AlignedRegion};
use tandem_shm_core::{LaneCursor, LaneQueue, Priority, PushError};

#[test]
fn cursor_drains_both_priorities() {
    model(|| {
        let region = Arc::new(AlignedRegion::new(LaneQueue::<u64>::required_bytes(1, 2)));
        // SAFETY: the region outlives the producer thread (joined below).
        let queue: LaneQueue<'static, u64> =
            unsafe { LaneQueue::init_in(region.ptr(), region.len(), 1, 2) }.unwrap();
        let sent = [(Priority::High, 0x11), (Priority::Low, 0x22), (Priority::High, 0x33)];
        let producer = thread::spawn(move || {
            for (priority, item) in sent {
                let mut item = item;
                while let Err(PushError::Full(back)) = queue.push(0, priority, item) {
                    item = back;
                    thread::yield_now();
                }
            }
        });
        let mut cursor = LaneCursor::new(NonZeroU32::new(2).unwrap());
        let mut got = Vec::new();
        while got.len() < 3 {
            match cursor.pop(&queue, 0).unwrap() {
                Some(entry) => got.push(entry),
                None => thread::yield_now(),
            }
        }
        producer.join().unwrap();
        let high: Vec<u64> = got.iter().filter(|e| e.0 == Priority::High).map(|e| e.1).collect();
        assert_eq!(high, vec![0x11, 0x33]);
        assert!(got.contains(&(Priority::Low, 0x22)));
        assert_eq!(queue.pop(0), Ok(None));
        drop(region);
    });
}
