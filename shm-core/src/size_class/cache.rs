//! A thread's cache of free blocks above a shared [`SizeClassAllocator`]
//! (like glibc's tcache, or the kernels' `SizeClassCache`).

use crate::alloc_error::AllocError;
use crate::layout::{FullPtr, ShmPtr, SIZE_CLASSES};
use crate::sync::Ordering;

use super::{block_size, Claim, SizeClassAllocator};

/// Most blocks a bin holds; a free into a full bin sends the whole bin back
/// to the class's list as one chain.
pub const BIN_CAPACITY: u32 = 32;
/// Most bytes (headers included) a bin holds: bins of larger blocks hold
/// fewer, and classes whose blocks are larger are not cached.
pub const BIN_BYTES: u64 = 64 * 1024;

/// Blocks a bin of `class` holds at most; 0 for uncached classes.
const fn bin_capacity(class: usize) -> u32 {
    let fit = BIN_BYTES / block_size(class);
    if fit < BIN_CAPACITY as u64 {
        fit as u32
    } else {
        BIN_CAPACITY
    }
}

/// Blocks a miss of `class` takes from the shared heap at once: half a bin,
/// so a thread that then frees as much does not overflow it at once.
const fn refill_count(class: usize) -> u32 {
    let half = bin_capacity(class) / 2;
    if half == 0 {
        1
    } else {
        half
    }
}

/// One class's cached blocks: a stack linked through the blocks' `next`
/// words, `first` on top; `last` is its bottom, where a flush attaches the
/// list. Only `count` links are meaningful: `last`'s is stale.
#[derive(Clone, Copy, Default)]
struct Bin {
    first: u64,
    last: u64,
    count: u32,
}

/// A thread's cache of free blocks of one [`SizeClassAllocator`]: allocate
/// and free through it instead of through the allocator (the sections
/// below say why). Flushed back to the shared lists when dropped.
///
/// # Why
///
/// Every uncached allocation and free is a compare-and-swap on its class's
/// list head, one word every thread and process shares: threads that
/// allocate one size serialise on its cache line. A [`SizeClassCache`] keeps
/// a small stack of free blocks per class in the thread's own memory, so a
/// thread that frees what it allocates never touches a shared head, and the
/// rest goes in batches: a miss takes a run of blocks off the list (or
/// carves a run) with one compare-and-swap, and a full bin goes back to the
/// list as one chain with one compare-and-swap.
///
/// # What stays shared
///
/// The cache is process-local memory (the struct itself); the blocks stay in
/// the shared region and the shared free lists stay the authority. A cached
/// free validates the block exactly as [`SizeClassAllocator::free`] does and
/// marks it free in its header, so a double free is refused whichever
/// process, thread or cache frees it second, and a block allocated through a
/// cache can be freed by any handle, cached or not, in any process (and the
/// reverse).
///
/// # Racing frees
///
/// The uncached free marks the block with a compare-and-swap, so that of two
/// frees of one pointer that race (neither ordered before the other) exactly
/// one wins. A cached free stores the mark after the load that found the
/// block allocated, as glibc's tcache checks its key with a load: a second
/// free that happens after the first sees the mark, but two that race can
/// both pass, and the block then sits in two places. Racing frees of one
/// pointer are the caller's data race, the bug a double free is; refereeing
/// them takes a locked instruction, which on an Emerald Rapids Xeon (the
/// H100's host) costs more than the system allocator's whole allocate+free
/// pair (docs/design/pcie.md, "The size-class cache frees with a store").
/// Free through the allocator
/// itself where frees of one pointer may race.
///
/// Blocks in a cache are marked free but are on no list: no one else can
/// allocate them, and [`SizeClassAllocator::stats`] counts them neither as
/// free nor as allocated, until the cache gives them back: when a bin fills,
/// on [`flush`](SizeClassCache::flush), and when the cache is dropped. A
/// bin holds at most [`CACHE_BIN_CAPACITY`](crate::CACHE_BIN_CAPACITY) blocks and at most
/// [`CACHE_BIN_BYTES`](crate::CACHE_BIN_BYTES) bytes (classes above that are not cached at
/// all), so a cache hides a
/// bounded amount of the heap. Flush before a check that expects every block
/// back on the lists (a leak check) and before the heap runs low for others.
///
/// # Thread and process exit
///
/// Dropping the cache flushes it, so a cache held by a thread, on its stack
/// or in a `thread_local!` (which needs a `'static` allocator handle, as a
/// mapping kept for the process's life gives), is flushed when the thread
/// ends. The cache is a value rather than a hidden per-thread table inside
/// the allocator because a region can be unmapped (its handle's lifetime
/// `'r` ends) before a thread that used it exits; the borrow ties the cache
/// to the mapping. A process that dies with blocks in a cache loses those
/// blocks (at most `BIN_CAPACITY` per class and `BIN_BYTES` per bin), as it
/// loses the blocks it had allocated: the heap is still consistent, they
/// are just never reused, until the whole heap is re-initialised (the
/// runtime does that to a dead client's heap when it reclaims its slot, so a
/// dead client's cached blocks come back with the rest of its heap).
///
/// A cache must not outlive its heap's initialisation: drop (or, in a process
/// that is going away, forget) every cache of a heap before the heap is
/// re-initialised with [`SizeClassAllocator::init_in`], since flushing blocks
/// of the old heap into the new one would corrupt its lists.
pub struct SizeClassCache<'r> {
    alloc: SizeClassAllocator<'r>,
    bins: [Bin; SIZE_CLASSES],
}

impl<'r> SizeClassCache<'r> {
    /// An empty cache above `alloc`.
    pub fn new(alloc: SizeClassAllocator<'r>) -> Self {
        SizeClassCache {
            alloc,
            bins: [Bin::default(); SIZE_CLASSES],
        }
    }

    /// The allocator this cache serves.
    pub fn allocator(&self) -> SizeClassAllocator<'r> {
        self.alloc
    }

    /// [`SizeClassAllocator::allocate`], served from this cache's bin for the
    /// request's class; an empty bin first takes a run of blocks off the
    /// class's list (or carves one) in one compare-and-swap.
    #[inline]
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<ShmPtr<u8>, AllocError> {
        let (class, pad) = self.alloc.request(size, align)?;
        let bin = &mut self.bins[class];
        let block = if bin.count > 0 {
            let block = bin.first;
            bin.count -= 1;
            if bin.count > 0 {
                // Relaxed: this thread wrote the link, or took it from a
                // list with an acquire (`pop_run`), or carved the block.
                // SAFETY: `block` is a block of the heap that the bin owns.
                bin.first = unsafe { self.alloc.next(block) }.load(Ordering::Relaxed);
            }
            block
        } else {
            self.refill(class, size)?
        };
        // SAFETY: the block came out of this cache's bin (or a refill) and
        // is marked free: ours alone.
        Ok(unsafe { self.alloc.hand_out(block, class, pad) })
    }

    /// [`allocate`](Self::allocate), also returning the local address.
    pub fn allocate_full(&mut self, size: u64, align: u64) -> Result<FullPtr<u8>, AllocError> {
        let shm = self.allocate(size, align)?;
        Ok(FullPtr {
            ptr: self.alloc.base.wrapping_add(shm.off as usize),
            shm,
        })
    }

    /// Fills the empty bin of `class` with a run off the class's list, or
    /// freshly carved blocks when the list is empty, and returns one block
    /// of it; `requested` is the user's size, for the error. A heap too
    /// full for a run of new blocks gives one block the way an uncached
    /// allocation would (carved, split or merged).
    #[cold]
    fn refill(&mut self, class: usize, requested: u64) -> Result<u64, AllocError> {
        let want = refill_count(class);
        let (first, last, count) = match self.alloc.pop_run(class, want)? {
            Some(run) => (run.first, run.last, run.count as u32),
            None => match self.alloc.carve(class, want, requested) {
                Ok(first) => (first, first + u64::from(want - 1) * block_size(class), want),
                Err(AllocError::Exhausted { .. }) => {
                    let first = self.alloc.take_fresh(class, requested)?;
                    (first, first, 1)
                }
                Err(e) => return Err(e),
            },
        };
        if count > 1 {
            // Relaxed: `pop_run`'s acquire ordered the links, and `carve`
            // wrote them itself.
            // SAFETY: `first` is a block of the run, which is ours.
            let second = unsafe { self.alloc.next(first) }.load(Ordering::Relaxed);
            self.bins[class] = Bin {
                first: second,
                last,
                count: count - 1,
            };
        }
        Ok(first)
    }

    /// [`SizeClassAllocator::free`] into this cache: the same checks (a
    /// second free of the pointer, through any handle or cache, is a
    /// `DoubleFree`, unless the two race: see [Racing frees](SizeClassCache#racing-frees)),
    /// then the block goes on the bin of its class. A full bin first goes
    /// back to the class's list as one chain; a block of an uncached class
    /// goes straight to its list.
    #[inline]
    pub fn free(&mut self, ptr: ShmPtr<u8>) -> Result<(), AllocError> {
        let (class, block) = self.alloc.claim(ptr, Claim::Store)?;
        let capacity = bin_capacity(class);
        let bin = &mut self.bins[class];
        if bin.count == capacity {
            if capacity == 0 {
                self.alloc.push_chain(class, block, block);
                return Ok(());
            }
            self.alloc.push_chain(class, bin.first, bin.last);
            bin.count = 0;
        }
        if bin.count == 0 {
            bin.last = block;
        } else {
            // Relaxed: only this thread follows the link until a flush
            // publishes it with its release; it is an atomic store because a
            // stale pop elsewhere may still read this block's link.
            // SAFETY: `block` is ours since the claim.
            unsafe { self.alloc.next(block) }.store(bin.first, Ordering::Relaxed);
        }
        bin.first = block;
        bin.count += 1;
        Ok(())
    }

    /// Gives every cached block back to its class's list (one
    /// compare-and-swap per non-empty bin) and empties the cache.
    pub fn flush(&mut self) {
        for (class, bin) in self.bins.iter_mut().enumerate() {
            if bin.count > 0 {
                self.alloc.push_chain(class, bin.first, bin.last);
                bin.count = 0;
            }
        }
    }

    /// Blocks this cache holds in each class.
    pub fn cached_blocks(&self) -> [u32; SIZE_CLASSES] {
        self.bins.map(|bin| bin.count)
    }
}

impl Drop for SizeClassCache<'_> {
    fn drop(&mut self) {
        self.flush();
    }
}

impl core::fmt::Debug for SizeClassCache<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SizeClassCache")
            .field("alloc", &self.alloc)
            .field("cached_blocks", &self.cached_blocks())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::layout::{AllocatorId, MIN_BLOCK};

    const ID: AllocatorId = AllocatorId::new(6, 0);
    const LEN: usize = 512 * 1024;

    #[repr(C, align(4096))]
    struct Region([u8; LEN]);

    fn region() -> Box<Region> {
        Box::new(Region([0; LEN]))
    }

    #[test]
    fn capacities() {
        assert_eq!(bin_capacity(0), BIN_CAPACITY);
        assert_eq!(refill_count(0), BIN_CAPACITY / 2);
        let largest_cached = (BIN_BYTES / MIN_BLOCK).trailing_zeros() as usize;
        assert_eq!(bin_capacity(largest_cached), 1);
        assert_eq!(refill_count(largest_cached), 1);
        assert_eq!(bin_capacity(largest_cached + 1), 0);
        assert_eq!(refill_count(largest_cached + 1), 1);
    }

    #[test]
    fn refills_in_runs_and_flushes_back() {
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), LEN, ID).unwrap() };
        let class = SizeClassAllocator::class_for(64, 16).unwrap();
        let mut cache = SizeClassCache::new(alloc);
        // A miss with an empty list carves a run: one block out, the rest
        // cached.
        let a = cache.allocate(64, 16).unwrap();
        assert_eq!(cache.cached_blocks()[class], refill_count(class) - 1);
        let stats = alloc.stats().unwrap();
        assert_eq!(
            stats.carved_bytes,
            u64::from(refill_count(class)) * block_size(class)
        );
        assert_eq!(stats.free_blocks[class], 0, "cached blocks are on no list");
        // A free goes to the bin and comes back first.
        cache.free(a).unwrap();
        assert_eq!(cache.free(a), Err(AllocError::DoubleFree { off: a.off }));
        assert_eq!(alloc.free(a), Err(AllocError::DoubleFree { off: a.off }));
        assert_eq!(cache.allocate(100, 8).unwrap(), a);
        // Freed uncached, taken by the cache once its bin runs dry.
        alloc.free(a).unwrap();
        let held: Vec<_> = (0..refill_count(class) - 1)
            .map(|_| cache.allocate(64, 16).unwrap())
            .collect();
        assert!(!held.contains(&a));
        assert_eq!(cache.cached_blocks()[class], 0);
        assert_eq!(cache.allocate(64, 16).unwrap(), a, "refilled from the list");
        cache.free(a).unwrap();
        for &p in &held {
            cache.free(p).unwrap();
        }
        cache.flush();
        assert_eq!(cache.cached_blocks(), [0; SIZE_CLASSES]);
        let stats = alloc.stats().unwrap();
        assert_eq!(stats.free_blocks[class], u64::from(refill_count(class)));
        assert_eq!(stats.free_bytes(), stats.carved_bytes);
    }

    #[test]
    fn full_bins_go_back_as_one_chain() {
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), LEN, ID).unwrap() };
        let class = SizeClassAllocator::class_for(8, 8).unwrap();
        let n = 2 * BIN_CAPACITY as usize + 3;
        let ptrs: Vec<_> = (0..n).map(|_| alloc.allocate(8, 8).unwrap()).collect();
        {
            let mut cache = SizeClassCache::new(alloc);
            for &p in &ptrs {
                cache.free(p).unwrap();
                assert!(cache.cached_blocks()[class] <= BIN_CAPACITY);
            }
            let on_list = alloc.stats().unwrap().free_blocks[class];
            assert_eq!(on_list, 2 * u64::from(BIN_CAPACITY));
            assert_eq!(cache.cached_blocks()[class], 3);
            // Dropping the cache flushes it.
        }
        let stats = alloc.stats().unwrap();
        assert_eq!(stats.free_blocks[class], n as u64);
        assert_eq!(stats.free_bytes(), stats.carved_bytes);
        // Every block comes back once through a fresh cache.
        let mut cache = SizeClassCache::new(alloc);
        let mut again: Vec<_> = (0..n).map(|_| cache.allocate(8, 8).unwrap()).collect();
        let mut expected = ptrs.clone();
        again.sort_by_key(|p| p.off);
        expected.sort_by_key(|p| p.off);
        assert_eq!(again, expected);
    }

    #[test]
    fn aligned_and_uncached_classes() {
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), LEN, ID).unwrap() };
        let mut cache = SizeClassCache::new(alloc);
        let p = cache.allocate_full(100, 256).unwrap();
        assert_eq!(p.ptr.addr() % 256, 0);
        assert_eq!(
            cache.free(ShmPtr::new(ID, p.shm.off - 256 + 16)),
            Err(AllocError::NotOwned {
                off: p.shm.off - 256 + 16
            })
        );
        cache.free(p.shm).unwrap();
        // The same block serves an ordinary request of its class next.
        assert_eq!(cache.allocate(400, 8).unwrap().off, p.shm.off - 256 + 16);

        // Blocks above BIN_BYTES bypass the cache.
        let big = cache.allocate(BIN_BYTES, 8).unwrap();
        let class = SizeClassAllocator::class_for(BIN_BYTES, 8).unwrap();
        assert_eq!(bin_capacity(class), 0);
        cache.free(big).unwrap();
        assert_eq!(cache.cached_blocks()[class], 0);
        assert_eq!(alloc.stats().unwrap().free_blocks[class], 1);
    }

    /// A full heap is reported as exhausted even while blocks sit in a
    /// cache, which keeps working; a flush makes them allocatable by others.
    #[test]
    fn exhaustion_with_blocks_held_in_another_cache() {
        const SMALL: usize = 8192;
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), SMALL, ID).unwrap() };
        let class = SizeClassAllocator::class_for(64, 16).unwrap();
        // 4 KiB of heap is exactly a bin of these blocks: two refills' runs.
        let blocks = 4096 / block_size(class);
        assert_eq!(blocks, u64::from(bin_capacity(class)));
        let mut holder = SizeClassCache::new(alloc);
        let ptrs: Vec<_> = (0..blocks)
            .map(|_| holder.allocate(64, 16).unwrap())
            .collect();
        let exhausted = AllocError::Exhausted {
            requested: 64,
            available: 0,
        };
        assert_eq!(holder.allocate(64, 16), Err(exhausted));
        for &p in &ptrs {
            holder.free(p).unwrap();
        }
        assert_eq!(holder.cached_blocks()[class], bin_capacity(class));
        let mut other = SizeClassCache::new(alloc);
        assert_eq!(other.allocate(64, 16), Err(exhausted), "held in the cache");
        // The holder still serves from its bin after its failed refill.
        let p = holder.allocate(64, 16).unwrap();
        holder.free(p).unwrap();
        holder.flush();
        let q = other.allocate(64, 16).unwrap();
        assert!(ptrs.contains(&q));
        assert_eq!(other.cached_blocks()[class], refill_count(class) - 1);
        other.free(q).unwrap();
        drop(other);
        let stats = alloc.stats().unwrap();
        assert_eq!(stats.free_blocks[class], blocks);
        assert_eq!(stats.free_bytes(), stats.carved_bytes);
    }

    #[test]
    fn a_run_that_does_not_fit_falls_back_to_one_block() {
        const SMALL: usize = 8192;
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), SMALL, ID).unwrap() };
        let mut cache = SizeClassCache::new(alloc);
        // 4 KiB of heap: a run of 1 KiB blocks is 32 KiB, one block fits.
        let class = SizeClassAllocator::class_for(1000, 8).unwrap();
        assert!(u64::from(refill_count(class)) * block_size(class) > 4096);
        let p = cache.allocate(1000, 8).unwrap();
        assert_eq!(cache.cached_blocks()[class], 0);
        cache.free(p).unwrap();
    }
}
