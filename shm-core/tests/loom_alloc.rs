//! Loom models of the size-class allocator's free list: two threads allocate
//! and free blocks of one class concurrently, one of them in the order that
//! makes an untagged Treiber stack hand the same block out twice (pop A, pop
//! B, push A while the other thread's pop holds A and A's stale `next`); and
//! a thread's `SizeClassCache` taking a run of blocks with one pop (a walk
//! along links another thread may be changing) and giving them back as one
//! chain, against a thread allocating and freeing uncached; and a cached
//! free, which marks its block with a store, refusing a second free that
//! another thread makes after it (ordered by a flag, not by the mark).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p tandem-shm-core --release --test loom_alloc`.
#![cfg(loom)]

use std::alloc::{alloc_zeroed, dealloc, Layout};

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use tandem_shm_core::layout::AllocatorId;
use tandem_shm_core::size_class::block_size;
use tandem_shm_core::{AllocError, ShmPtr, SizeClassAllocator, SizeClassCache};

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

/// Allocates one block and stamps it with `tag`.
fn take(alloc: &SizeClassAllocator<'_>, tag: u8) -> ShmPtr<u8> {
    let full = alloc.allocate_full(SIZE, 8).expect("allocate");
    // SAFETY: `SIZE` bytes that are ours.
    unsafe { full.ptr.write_bytes(tag, SIZE as usize) };
    full.shm
}

/// Checks the stamp (another owner of the same block would have changed it)
/// and frees the block.
fn give_back(alloc: &SizeClassAllocator<'_>, ptr: ShmPtr<u8>, tag: u8) {
    let full = alloc.to_full(ptr).expect("resolves");
    for i in 0..SIZE as usize {
        // SAFETY: the block is ours until the free below.
        let byte = unsafe { full.ptr.add(i).read() };
        assert_eq!(byte, tag, "block handed out twice");
    }
    alloc.free(ptr).expect("free");
}

#[test]
fn two_threads_share_a_free_list() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let region = Arc::new(Region::new());
        // SAFETY: a fresh buffer, used only through allocator handles.
        let alloc = unsafe { SizeClassAllocator::init_in(region.0, LEN, ID) }.expect("init");
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
    let full = cache.allocate_full(SIZE, 8).expect("allocate");
    // SAFETY: `SIZE` bytes that are ours.
    unsafe { full.ptr.write_bytes(tag, SIZE as usize) };
    full.shm
}

/// `give_back` through a cache.
fn give_back_cached(cache: &mut SizeClassCache<'_>, ptr: ShmPtr<u8>, tag: u8) {
    let full = cache.allocator().to_full(ptr).expect("resolves");
    for i in 0..SIZE as usize {
        // SAFETY: the block is ours until the free below.
        let byte = unsafe { full.ptr.add(i).read() };
        assert_eq!(byte, tag, "block handed out twice");
    }
    cache.free(ptr).expect("free");
}

#[test]
fn a_cache_pops_runs_and_pushes_chains() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let region = Arc::new(Region::new());
        // SAFETY: a fresh buffer, used only through allocator handles.
        let alloc = unsafe { SizeClassAllocator::init_in(region.0, LEN, ID) }.expect("init");
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
        // SAFETY: a fresh buffer, used only through allocator handles.
        let alloc = unsafe { SizeClassAllocator::init_in(region.0, LEN, ID) }.expect("init");
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
