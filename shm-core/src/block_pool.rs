//! A few free blocks of one size kept back from an allocator for a hot path
//! that allocates and frees one block per request, shared by the threads of
//! one process.
//!
//! A request that follows a pause finds every line and page it touches
//! evicted from the caches and the TLB: then each distinct page costs a walk
//! of the page tables and each line a trip to memory, and a heap allocation
//! walks the allocator's code, its class's list head and the block's header
//! on pages of their own. A pool hands back the block the last request gave
//! it, in a line the pool keeps to itself, with one swap: the request then
//! touches the pool's line and the block, which it touches anyway.

use crate::sync::{AtomicU64, Ordering};

/// Up to `N` blocks, named by values the caller picks (offsets, addresses),
/// none of them 0, which marks an empty slot.
///
/// Taken with [`take`](Self::take) and given back with
/// [`give`](Self::give), the first slot first in both, so a lone thread
/// reuses one block and its lines. Both are best effort: each skips slots
/// that look full (or empty) to a plain load before its one atomic exchange,
/// and a slot another thread changed just now may still look so. A give can
/// then be refused, or a take find nothing, while the pool has room or
/// blocks; either only sends the caller to its allocator.
///
/// A pool only holds values: what the blocks are, who allocated them and who
/// frees what it refuses or still holds when it goes (see
/// [`drain`](Self::drain)) are the caller's. Eight slots fill one cache
/// line.
#[repr(C, align(64))]
pub struct BlockPool<const N: usize> {
    slots: [AtomicU64; N],
}

impl<const N: usize> BlockPool<N> {
    /// An empty pool.
    pub fn new() -> Self {
        Self {
            slots: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// A block given back earlier, if the pool holds one; the caller then
    /// owns it alone.
    pub fn take(&self) -> Option<u64> {
        self.slots.iter().find_map(|slot| {
            // Relaxed: only skips slots that look empty; the swap decides.
            if slot.load(Ordering::Relaxed) == 0 {
                return None;
            }
            // Acquire: pairs with the Release of the `give` that put the
            // value there, so the giver's last uses of the block happen
            // before the taker's first. The swap takes the value whole or
            // finds 0 (another taker won it), never a value two takers get.
            match slot.swap(0, Ordering::Acquire) {
                0 => None,
                block => Some(block),
            }
        })
    }

    /// Keeps `block` for a later [`take`](Self::take); gives it back as
    /// `Err` when every slot looked full (or `block` is 0), for the caller
    /// to free.
    ///
    /// The caller must own `block` alone and be done with it: the pool hands
    /// it to the next taker, on any thread.
    pub fn give(&self, block: u64) -> Result<(), u64> {
        if block == 0 {
            return Err(block);
        }
        let kept = self.slots.iter().any(|slot| {
            // Relaxed: only skips slots that look full; the CAS decides.
            // Release on success: everything the giver did with the block
            // happens before a taker's Acquire swap reads the value.
            slot.load(Ordering::Relaxed) == 0
                && slot
                    .compare_exchange(0, block, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
        });
        if kept {
            Ok(())
        } else {
            Err(block)
        }
    }

    /// Empties the pool, yielding every block it held, for the caller to
    /// free. Exclusive (`&mut`): no one can give or take meanwhile.
    pub fn drain(&mut self) -> impl Iterator<Item = u64> + '_ {
        self.slots.iter_mut().filter_map(|slot| {
            // Relaxed: `&mut self` orders every earlier give and take
            // before this (whoever handed the pool over synchronised).
            match slot.swap(0, Ordering::Relaxed) {
                0 => None,
                block => Some(block),
            }
        })
    }
}

impl<const N: usize> Default for BlockPool<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> core::fmt::Debug for BlockPool<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let held = self
            .slots
            .iter()
            .filter(|slot| slot.load(Ordering::Relaxed) != 0)
            .count();
        f.debug_struct("BlockPool")
            .field("slots", &N)
            .field("held", &held)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_lone_thread_gets_back_the_block_it_gave_last() {
        let pool = BlockPool::<8>::new();
        assert_eq!(pool.take(), None);
        pool.give(0x40).unwrap();
        assert_eq!(pool.take(), Some(0x40));
        pool.give(0x80).unwrap();
        assert_eq!(pool.take(), Some(0x80));
        assert_eq!(pool.take(), None);
    }

    #[test]
    fn a_full_pool_refuses_and_zero_is_never_held() {
        let pool = BlockPool::<2>::new();
        assert_eq!(pool.give(0), Err(0));
        pool.give(1).unwrap();
        pool.give(2).unwrap();
        assert_eq!(pool.give(3), Err(3));
        let mut taken = [pool.take().unwrap(), pool.take().unwrap()];
        taken.sort();
        assert_eq!(taken, [1, 2]);
        assert_eq!(pool.take(), None);
    }

    #[test]
    fn drain_yields_what_is_held_and_empties() {
        let mut pool = BlockPool::<4>::new();
        for block in [7, 9, 11] {
            pool.give(block).unwrap();
        }
        assert_eq!(pool.take(), Some(7));
        let mut drained: Vec<u64> = pool.drain().collect();
        drained.sort();
        assert_eq!(drained, [9, 11]);
        assert_eq!(pool.take(), None);
    }

    #[test]
    fn eight_slots_fill_one_cache_line() {
        assert_eq!(core::mem::size_of::<BlockPool<8>>(), 64);
        assert_eq!(core::mem::align_of::<BlockPool<8>>(), 64);
    }
}
