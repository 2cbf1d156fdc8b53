//! Loom model of the block pool: two threads take blocks, write into them and
//! give them back, twice each, from a pool of two slots holding two blocks;
//! a block the pool refuses is kept aside, as a caller would free it. A
//! block is never held by two threads at once, and a taker's writes are
//! ordered after the previous holder's (each block's contents are a loom
//! cell, so a write that races another is reported); every block ends in
//! the pool or aside, once. Checked by mutation: making `take`'s swap or `give`'s CAS
//! Relaxed fails this model (the next holder's write races the last one's).
#![cfg(loom)]

mod support;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use support::model;
use tandem_shm_core::BlockPool;

/// Blocks 1 and 2: how many times each was taken, written non-atomically.
struct Blocks {
    pool: BlockPool<2>,
    uses: [UnsafeCell<u32>; 2],
    takes: AtomicU32,
}

/// Takes, uses and gives back `rounds` times; returns the blocks the pool
/// refused.
fn use_blocks(blocks: &Blocks, rounds: usize) -> Vec<u64> {
    let mut refused = Vec::new();
    for _ in 0..rounds {
        if let Some(block) = blocks.pool.take() {
            let cell = &blocks.uses[block as usize - 1];
            // SAFETY: the pool hands a block to one taker at a time; loom
            // reports the access if that ever fails.
            cell.with_mut(|uses| unsafe { *uses += 1 });
            blocks.takes.fetch_add(1, Ordering::Relaxed);
            if let Err(block) = blocks.pool.give(block) {
                refused.push(block);
            }
        }
    }
    refused
}

#[test]
fn a_block_has_one_holder_at_a_time() {
    model(|| {
        let blocks = Arc::new(Blocks {
            pool: BlockPool::new(),
            uses: [UnsafeCell::new(0), UnsafeCell::new(0)],
            takes: AtomicU32::new(0),
        });
        blocks.pool.give(1).unwrap();
        blocks.pool.give(2).unwrap();
        let other = {
            let blocks = blocks.clone();
            thread::spawn(move || use_blocks(&blocks, 2))
        };
        let mut aside = use_blocks(&blocks, 2);
        aside.extend(other.join().unwrap());
        let mut blocks = Arc::try_unwrap(blocks).ok().expect("threads joined");
        let mut held: Vec<u64> = blocks.pool.drain().chain(aside).collect();
        held.sort();
        assert_eq!(held, [1, 2], "every block ends in the pool or aside, once");
        // SAFETY: both threads were joined.
        let uses: u32 = blocks.uses.iter().map(|c| c.with(|u| unsafe { *u })).sum();
        assert_eq!(uses, blocks.takes.load(Ordering::Relaxed));
    });
}
