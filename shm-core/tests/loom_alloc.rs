//! Loom models of the size-class allocator's free list: two threads allocate
//! and free blocks of one class concurrently, one of them in the order that
//! makes an untagged Treiber stack hand the same block out twice (pop A, pop
//! B, push A while the other thread's pop holds A and A's stale `next`); and
//! a thread's `SizeClassCache` taking a run of blocks with one pop (a walk
//! along links another thread may be changing) and giving them back as one
//! chain, against a thread allocating and freeing uncached; and a cached
//! free, which marks its block with a store, refusing a second free that
//! another thread makes after it (ordered by a flag, not by the mark); and a
//! request that splits a larger free block, or merges free buddies, while
//! another thread pops and pushes the lists involved.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p tandem-shm-core --release --test loom_alloc`.
#![cfg(loom)]

use std::alloc::{alloc_zeroed, dealloc, Layout};

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use tandem_shm_core::layout::AllocatorId;
use tandem_shm_core::{block_size, HEAP_ALIGN};
use tandem_shm_core::{AllocError, FullPtr, ShmPtr, SizeClassAllocator, SizeClassCache};

const ID: AllocatorId = AllocatorId::new(1, 1);
const LEN: usize = 16 * 1024;
const SIZE: u64 = 8;

/// A page-aligned buffer standing in for the shared region.
struct Region(*mut u8);

// SAFETY: the buffer is only reached through allocator handles, which are
// themselves Send + Sync, and freed once, when the last Arc is dropped.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    fn layout() -> Layout {
        Layout::from_size_align(LEN, 4096).expect("valid layout")
    }

    fn new() -> Self {
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(Self::layout()) };
        assert!(!ptr.is_null());
        Region(ptr)
    }

    /// A new allocator in the buffer, fresh.
    fn init(&self) -> SizeClassAllocator<'_> {
        // SAFETY: a fresh buffer, used only through allocator handles.
        unsafe { SizeClassAllocator::init_in(self.0, LEN, ID) }.expect("init")
    }

    fn attach(&self) -> SizeClassAllocator<'_> {
        // SAFETY: the region outlives the handle and holds an initialised
        // allocator (see `model`).
        unsafe { SizeClassAllocator::attach(self.0, LEN) }.expect("attach")
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.0, Self::layout()) }
    }
}

/// A model builder with the preemption bound every model here runs under.
fn bounded() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder
}

/// Stamps a block just allocated with `tag`.
fn stamped(full: FullPtr<u8>, tag: u8) -> ShmPtr<u8> {
    // SAFETY: `SIZE` bytes that are ours.
    unsafe { full.ptr.write_bytes(tag, SIZE as usize) };
    full.shm
}

/// Checks the stamp of a block about to be freed (another owner of the same
/// block would have changed it).
fn check_stamp(alloc: &SizeClassAllocator<'_>, ptr: ShmPtr<u8>, tag: u8) {
    let full = alloc.to_full(ptr).expect("resolves");
    for i in 0..SIZE as usize {
        // SAFETY: the block is ours until the caller frees it.
        let byte = unsafe { full.ptr.add(i).read() };
        assert_eq!(byte, tag, "block handed out twice");
    }
}

/// Allocates one block and stamps it with `tag`.
fn take(alloc: &SizeClassAllocator<'_>, tag: u8) -> ShmPtr<u8> {
    stamped(alloc.allocate_full(SIZE, 8).expect("allocate"), tag)
}

/// Checks the stamp and frees the block.
fn give_back(alloc: &SizeClassAllocator<'_>, ptr: ShmPtr<u8>, tag: u8) {
    check_stamp(alloc, ptr, tag);
    alloc.free(ptr).expect("free");
}

#[test]
fn two_threads_share_a_free_list() {
    bounded().check(|| {
        let region = Arc::new(Region::new());
        let alloc = region.init();
        let class = SizeClassAllocator::class_for(SIZE, 8).expect("class");
        // Two blocks on the free list before the threads start.
        let (x, y) = (take(&alloc, 0), take(&alloc, 0));
        give_back(&alloc, x, 0);
        give_back(&alloc, y, 0);
        let carved = alloc.stats().expect("stats").carved_bytes;

        let other = Arc::clone(&region);
        let single = loom::thread::spawn(move || {
            let alloc = other.attach();
            let p = take(&alloc, 1);
            give_back(&alloc, p, 1);
        });
        let a = take(&alloc, 2);
        let b = take(&alloc, 3);
        give_back(&alloc, a, 2);
        give_back(&alloc, b, 3);
        single.join().expect("thread");

        // Three blocks are live at once when the other thread's allocation
        // falls between `a` and `b`; then one more block was carved.
        let stats = alloc.stats().expect("stats");
        let extra = (stats.carved_bytes - carved) / block_size(class);
        assert!(extra <= 1, "carved {extra} blocks for one missing");
        assert_eq!(
            stats.free_blocks[class],
            2 + extra,
            "every block back, once"
        );
        assert_eq!(stats.free_bytes(), stats.carved_bytes);
    });
}

/// `take` through a cache.
fn take_cached(cache: &mut SizeClassCache<'_>, tag: u8) -> ShmPtr<u8> {
    stamped(cache.allocate_full(SIZE, 8).expect("allocate"), tag)
}

/// `give_back` through a cache.
fn give_back_cached(cache: &mut SizeClassCache<'_>, ptr: ShmPtr<u8>, tag: u8) {
    check_stamp(&cache.allocator(), ptr, tag);
    cache.free(ptr).expect("free");
}

#[test]
fn a_cache_pops_runs_and_pushes_chains() {
    bounded().check(|| {
        let region = Arc::new(Region::new());
        let alloc = region.init();
        let class = SizeClassAllocator::class_for(SIZE, 8).expect("class");
        // Three blocks on the free list before the threads start.
        let (x, y, z) = (take(&alloc, 0), take(&alloc, 0), take(&alloc, 0));
        give_back(&alloc, x, 0);
        give_back(&alloc, y, 0);
        give_back(&alloc, z, 0);
        let carved = alloc.stats().expect("stats").carved_bytes;

        let other = Arc::clone(&region);
        let cached = loom::thread::spawn(move || {
            let alloc = other.attach();
            let mut cache = SizeClassCache::new(alloc);
            // The first miss pops what the list holds in one run (or carves
            // a run if the other thread holds every block).
            let p = take_cached(&mut cache, 1);
            let q = take_cached(&mut cache, 4);
            give_back_cached(&mut cache, p, 1);
            give_back_cached(&mut cache, q, 4);
            // Everything the cache holds goes back as one chain.
            cache.flush();
        });
        let a = take(&alloc, 2);
        give_back(&alloc, a, 2);
        let b = take(&alloc, 3);
        give_back(&alloc, b, 3);
        cached.join().expect("thread");

        let stats = alloc.stats().expect("stats");
        let extra = (stats.carved_bytes - carved) / block_size(class);
        assert_eq!(
            stats.free_blocks[class],
            3 + extra,
            "every block back, once"
        );
        assert_eq!(stats.free_bytes(), stats.carved_bytes);
    });
}

/// A cached free stores its mark (no compare-and-swap): a second free of the
/// pointer that happens after it, here through a flag another thread
/// acquires, must still find the mark, through a cache or not, and leave the
/// block where the first free put it.
#[test]
fn a_free_after_a_cached_free_is_refused() {
    loom::model(|| {
        let region = Arc::new(Region::new());
        let alloc = region.init();
        let p = take(&alloc, 1);
        let freed = Arc::new(AtomicBool::new(false));

        let (other, flag) = (Arc::clone(&region), Arc::clone(&freed));
        let first = loom::thread::spawn(move || {
            let mut cache = SizeClassCache::new(other.attach());
            give_back_cached(&mut cache, p, 1);
            // Release: the free happens before whatever acquires the flag.
            flag.store(true, Ordering::Release);
            cache.flush();
        });
        // Acquire: pairs with the store above.
        while !freed.load(Ordering::Acquire) {
            loom::thread::yield_now();
        }
        let refused = Err(AllocError::DoubleFree { off: p.off });
        let mut cache = SizeClassCache::new(alloc);
        assert_eq!(cache.free(p), refused, "through a cache");
        assert_eq!(alloc.free(p), refused, "uncached");
        drop(cache);
        first.join().expect("thread");

        let stats = alloc.stats().expect("stats");
        assert_eq!(stats.free_bytes(), stats.carved_bytes, "the block once");
    });
}

/// Bytes of the block a request of `SIZE` gets (loom's atomics make block
/// headers larger than in real builds, so the tests compute their sizes).
fn small_block() -> u64 {
    block_size(SizeClassAllocator::class_for(SIZE, 8).expect("class"))
}

/// Fills the region's 12 KiB heap: 4 KiB blocks only, or four small blocks
/// (`small_block`) at the start and then, up to the end, blocks each as
/// large as the offset where it starts allows (no carve skips padding).
/// Returns the blocks in allocation order.
fn fill_heap(alloc: &SizeClassAllocator<'_>, small_first: bool) -> Vec<ShmPtr<u8>> {
    const HEAP: u64 = LEN as u64 - HEAP_ALIGN;
    let mut ptrs = Vec::new();
    let mut carved = 0;
    if small_first {
        for _ in 0..4 {
            ptrs.push(take(alloc, 0));
        }
        carved = 4 * small_block();
    }
    while carved < HEAP {
        let block = match carved {
            0 => 4096,
            _ => 1 << carved.trailing_zeros().min(12),
        };
        // Half a block leaves room for any header.
        ptrs.push(take_sized(alloc, block / 2, 0));
        carved += block;
    }
    ptrs
}

/// `take` of `size` bytes (stamped over the first `SIZE`).
fn take_sized(alloc: &SizeClassAllocator<'_>, size: u64, tag: u8) -> ShmPtr<u8> {
    let full = alloc.allocate_full(size, 8).expect("allocate");
    // SAFETY: at least `SIZE` bytes that are ours.
    unsafe { full.ptr.write_bytes(tag, SIZE as usize) };
    full.shm
}

/// A request that finds its list empty and the heap carved splits the free
/// 4 KiB block while another thread frees a second one and allocates a
/// 4 KiB block (popping the list the split pops from): both are served, no
/// block twice, and every byte is accounted for afterwards.
#[test]
fn a_split_against_a_pop_and_a_push_of_its_class() {
    let mut builder = bounded();
    // The split path checks the lists of every larger class.
    builder.max_branches = 10_000;
    builder.check(|| {
        let region = Arc::new(Region::new());
        let alloc = region.init();
        let big = fill_heap(&alloc, false);
        give_back(&alloc, big[0], 0);
        let second = big[1];

        let other = Arc::clone(&region);
        let popper = loom::thread::spawn(move || {
            let alloc = other.attach();
            give_back(&alloc, second, 0);
            let p = take_sized(&alloc, 2048, 1);
            give_back(&alloc, p, 1);
        });
        let small = take(&alloc, 2);
        give_back(&alloc, small, 2);
        popper.join().expect("thread");

        let stats = alloc.stats().expect("stats");
        assert_eq!(stats.uncarved_bytes(), 0);
        assert_eq!(
            stats.free_bytes() + 4096,
            stats.carved_bytes,
            "all but big[2]"
        );
        assert_eq!(big.len(), 3);
    });
}

/// A request that can only be served by merging the four free small
/// blocks into one, while another thread allocates and frees a small
/// block (its pop may be on its way through the list the merge
/// takes, or hold a block the merge needs): whatever either gets is its
/// alone, a merge that cannot wait out a reader gives the blocks back, and
/// afterwards every byte is on a list and the merge succeeds.
#[test]
fn a_merge_against_a_pop_and_a_push_of_the_classes_below() {
    let mut builder = bounded();
    // The merge path checks the lists of every class.
    builder.max_branches = 10_000;
    builder.check(|| {
        let region = Arc::new(Region::new());
        let alloc = region.init();
        let blocks = fill_heap(&alloc, true);
        for &p in &blocks[..4] {
            give_back(&alloc, p, 0);
        }
        let live = blocks[4..].to_vec();

        let other = Arc::clone(&region);
        let small = loom::thread::spawn(move || {
            let alloc = other.attach();
            match alloc.allocate_full(SIZE, 8) {
                Ok(full) => {
                    // SAFETY: `SIZE` bytes that are ours.
                    unsafe { full.ptr.write_bytes(1, SIZE as usize) };
                    give_back(&alloc, full.shm, 1);
                }
                // The merge held every free small block.
                Err(AllocError::Exhausted { .. }) => {}
                Err(e) => panic!("unexpected {e:?}"),
            }
        });
        // Half of four small blocks: only their merge serves it.
        let request = 2 * small_block();
        let merged = match alloc.allocate_full(request, 8) {
            Ok(full) => {
                // SAFETY: `request` bytes that are ours.
                unsafe { full.ptr.write_bytes(2, request as usize) };
                Some(full.shm)
            }
            // The other thread held a block the merge needed, or its pop
            // outlasted the merge's patience.
            Err(AllocError::Exhausted { .. }) => None,
            Err(e) => panic!("unexpected {e:?}"),
        };
        small.join().expect("thread");
        if let Some(p) = merged {
            let full = alloc.to_full(p).expect("resolves");
            for i in 0..request as usize {
                // SAFETY: the block is ours until the free below.
                assert_eq!(unsafe { full.ptr.add(i).read() }, 2, "handed out twice");
            }
            alloc.free(p).expect("free");
        }

        let stats = alloc.stats().expect("stats");
        assert_eq!(
            stats.free_bytes(),
            4 * small_block(),
            "the four small blocks, merged or not"
        );
        let p = take_sized(&alloc, request, 3);
        assert!(
            p.off < HEAP_ALIGN + 4 * small_block(),
            "merged at the heap start"
        );
        for p in live {
            give_back(&alloc, p, 0);
        }
    });
}
