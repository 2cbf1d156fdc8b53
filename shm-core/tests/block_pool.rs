//! Stress test of the block pool (its model is `loom_block_pool.rs`): threads
//! take blocks, from the pool or else from a stand-in heap, hold them a
//! moment and give them back, the pool's refusals going to the heap, while
//! an owner flag per block catches a block handed to two threads at once.
//! Every block ends in the pool or the heap, once. Run in release too
//! (`cargo xtask test`): timing differs.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use tandem_shm_core::BlockPool;

const BLOCKS: u64 = 12;
const THREADS: usize = 4;
const ROUNDS: usize = 50_000;

#[test]
fn no_block_has_two_holders_and_none_is_lost() {
    let pool = BlockPool::<8>::new();
    let heap: Mutex<Vec<u64>> = Mutex::new((1..=BLOCKS).collect());
    let held: Vec<AtomicBool> = (0..=BLOCKS).map(|_| AtomicBool::new(false)).collect();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for round in 0..ROUNDS {
                    let block = pool.take().or_else(|| heap.lock().unwrap().pop());
                    let Some(block) = block else { continue };
                    assert!(
                        !held[block as usize].swap(true, Ordering::AcqRel),
                        "block {block} handed to two holders"
                    );
                    if round % 7 == 0 {
                        std::thread::yield_now();
                    }
                    held[block as usize].store(false, Ordering::Release);
                    if let Err(block) = pool.give(block) {
                        heap.lock().unwrap().push(block);
                    }
                }
            });
        }
    });
    let mut pool = pool;
    let mut all: Vec<u64> = pool.drain().chain(heap.into_inner().unwrap()).collect();
    all.sort();
    assert_eq!(all, (1..=BLOCKS).collect::<Vec<_>>());
}
