//! Model, stress and cross-mapping tests of the bump arena and the size-class
//! allocator.
#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::sync::mpsc::TrySendError;

use proptest::prelude::*;
use tandem_shm_core::layout::{AllocatorId, ShmPtr, SIZE_CLASSES};
use tandem_shm_core::{block_size, HEAP_ALIGN};
use tandem_shm_core::{AllocError, ArenaAllocator, SizeClassAllocator, SizeClassCache};

mod support;
use support::AlignedRegion;

const ID: AllocatorId = AllocatorId::new(7, 1);
/// Size of the arena header, where its heap starts.
const ARENA_HEAP_BEGIN: u64 = 128;

/// A zeroed, page-aligned heap buffer standing in for a shared region.
type Region = AlignedRegion;

impl AlignedRegion {
    fn size_class(&self) -> SizeClassAllocator<'_> {
        // SAFETY: the region outlives the handle (its lifetime is tied to
        // `self`) and is used only through allocator handles.
        unsafe { SizeClassAllocator::init_in(self.ptr(), self.len(), ID) }.expect("init")
    }

    fn arena(&self) -> ArenaAllocator<'_> {
        // SAFETY: as in `size_class`.
        unsafe { ArenaAllocator::init_in(self.ptr(), self.len(), ID) }.expect("init")
    }
}

/// Live ranges `[start, end)` by start; checks a new one overlaps none.
#[derive(Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    fn insert(&mut self, start: u64, len: u64) {
        let end = start + len;
        if let Some((&s, &e)) = self.0.range(..end).next_back() {
            assert!(
                e <= start,
                "[{start:#x}, {end:#x}) overlaps live [{s:#x}, {e:#x})"
            );
        }
        self.0.insert(start, end);
    }

    fn remove(&mut self, start: u64) {
        assert!(self.0.remove(&start).is_some());
    }
}

/// The reference a size-class heap is held to: the blocks handed out (start
/// and size, headers included), and whether a request of a block's size
/// can be served: by a naturally aligned range (from the heap start) that
/// no live block overlaps, inside the carved part of the heap (free blocks,
/// merged and split as far as they go) or wholly beyond it (a carve).
struct ReferenceHeap {
    heap_end: u64,
    live: BTreeMap<u64, u64>,
}

impl ReferenceHeap {
    fn new(heap_end: u64) -> Self {
        ReferenceHeap {
            heap_end,
            live: BTreeMap::new(),
        }
    }

    fn fits(&self, block: u64, carved_bytes: u64) -> bool {
        let carved_end = HEAP_ALIGN + carved_bytes;
        let overlaps = |start: u64| {
            self.live
                .range(..start + block)
                .next_back()
                .is_some_and(|(&at, &size)| at + size > start)
        };
        let free_in_carved = (HEAP_ALIGN..carved_end)
            .step_by(block as usize)
            .any(|start| start + block <= carved_end && !overlaps(start));
        let carvable = HEAP_ALIGN + carved_bytes.next_multiple_of(block) + block <= self.heap_end;
        free_in_carved || carvable
    }

    fn take(&mut self, start: u64, block: u64) {
        assert_eq!((start - HEAP_ALIGN) % block, 0, "naturally aligned");
        assert!(self.live.insert(start, block).is_none());
    }

    /// Forgets the block of the allocation whose data is at `data`.
    fn give_back(&mut self, data: u64) {
        let (&start, _) = self.live.range(..data).next_back().expect("a live block");
        self.live.remove(&start);
    }
}

/// Where an allocation's data starts in its block (size_class.rs).
fn data_offset(align: u64) -> u64 {
    align.max(16)
}

/// Fills `len` bytes at `ptr` with a pattern derived from `tag`.
///
/// # Safety
/// `ptr` is valid for writes of `len` bytes.
unsafe fn fill(ptr: *mut u8, len: u64, tag: u64) {
    for i in 0..len {
        // SAFETY: `i < len`.
        unsafe { ptr.add(i as usize).write(pattern(tag, i)) };
    }
}

/// Checks what [`fill`] wrote.
///
/// # Safety
/// `ptr` is valid for reads of `len` bytes.
unsafe fn check(ptr: *const u8, len: u64, tag: u64) {
    for i in 0..len {
        // SAFETY: `i < len`.
        let byte = unsafe { ptr.add(i as usize).read() };
        assert_eq!(byte, pattern(tag, i), "byte {i} of block tagged {tag:#x}");
    }
}

/// Takes entry `pick` (modulo their number) of `live`, blocks of `alloc`
/// and their [`fill`]s, out and checks its bytes: its pointer, to free.
fn take_checked(
    alloc: &SizeClassAllocator<'_>,
    live: &mut Vec<(ShmPtr<u8>, u64, u64)>,
    pick: usize,
) -> ShmPtr<u8> {
    let (ptr, size, tag) = live.swap_remove(pick % live.len());
    let full = alloc.to_full(ptr).expect("resolves");
    // SAFETY: a block in `live` is ours until it is freed, `size` bytes long.
    unsafe { check(full.ptr, size, tag) };
    ptr
}

fn pattern(tag: u64, i: u64) -> u8 {
    (tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8 ^ i as u8
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, align: u64 },
    Free { pick: usize },
}

fn align_strategy(max_log2: u32) -> impl Strategy<Value = u64> {
    (0..=max_log2).prop_map(|log2| 1u64 << log2)
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..300, align_strategy(12)).prop_map(|(size, align)| Op::Alloc { size, align }),
        1 => (1u64..40_000, align_strategy(6)).prop_map(|(size, align)| Op::Alloc { size, align }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random allocate/free sequences against a model of the live ranges
    /// and a reference buddy heap: a request succeeds exactly when the
    /// reference has a free naturally aligned block of its size (free lists
    /// split, merged and carved as far as they go).
    #[test]
    fn size_class_model(ops in prop::collection::vec(op_strategy(), 1..200)) {
        let region = Region::new(256 * 1024);
        let alloc = region.size_class();
        let base = region.ptr().addr() as u64;
        let heap_end = region.len() as u64;
        let mut reference = ReferenceHeap::new(heap_end);
        let mut ranges = Ranges::default();
        let mut live: Vec<(ShmPtr<u8>, u64, u64)> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            let tag = step as u64;
            match op {
                Op::Alloc { size, align } => {
                    let class = SizeClassAllocator::class_for(size, align).expect("valid request");
                    let before = alloc.stats().expect("stats");
                    let fits = reference.fits(block_size(class), before.carved_bytes);
                    let servable = alloc.largest_servable_block().expect("walk");
                    prop_assert_eq!(servable >= block_size(class), fits, "largest servable {}", servable);
                    match alloc.allocate_full(size, align) {
                        Ok(full) => {
                            let off = full.shm.off;
                            prop_assert_eq!(full.shm.alloc_id, ID);
                            prop_assert_eq!((base + off) % align, 0);
                            prop_assert_eq!(off % 16, 0);
                            prop_assert!(off >= HEAP_ALIGN && off + size <= heap_end);
                            prop_assert!(fits, "served where the reference has no free block");
                            reference.take(off - data_offset(align), block_size(class));
                            ranges.insert(off, size);
                            let after = alloc.stats().expect("stats");
                            if before.free_blocks[class] > 0 {
                                // Served from the free list: the heap did not grow.
                                prop_assert_eq!(after.carved_bytes, before.carved_bytes);
                                prop_assert_eq!(after.free_blocks[class], before.free_blocks[class] - 1);
                            }
                            // SAFETY: `full` is `size` bytes that are ours.
                            unsafe { fill(full.ptr, size, tag) };
                            live.push((full.shm, size, tag));
                        }
                        Err(AllocError::Exhausted { requested, .. }) => {
                            prop_assert_eq!(requested, size);
                            prop_assert!(!fits, "the reference has a free block of {} bytes", block_size(class));
                            // A free block of the class would have been used,
                            // and merging loses no byte.
                            prop_assert_eq!(before.free_blocks[class], 0);
                            let after = alloc.stats().expect("stats");
                            prop_assert_eq!(after.usable_bytes(size, align), Ok(0));
                            prop_assert_eq!(after.free_bytes(), before.free_bytes());
                            prop_assert_eq!(after.carved_bytes, before.carved_bytes);
                        }
                        Err(e) => prop_assert!(false, "unexpected error {e:?}"),
                    }
                }
                Op::Free { pick } => {
                    if live.is_empty() {
                        continue;
                    }
                    let ptr = take_checked(&alloc, &mut live, pick);
                    prop_assert_eq!(alloc.free(ptr), Ok(()));
                    prop_assert_eq!(alloc.free(ptr), Err(AllocError::DoubleFree { off: ptr.off }));
                    ranges.remove(ptr.off);
                    reference.give_back(ptr.off);
                }
            }
        }
        for (ptr, size, tag) in live {
            let full = alloc.to_full(ptr).expect("resolves");
            // SAFETY: as above.
            unsafe { check(full.ptr, size, tag) };
            prop_assert_eq!(alloc.free(ptr), Ok(()));
        }
        // Every carved byte is back on a free list.
        let stats = alloc.stats().expect("stats");
        prop_assert_eq!(stats.free_bytes(), stats.carved_bytes);
    }

    /// Random allocate/free sequences through a cache and uncached, mixed,
    /// with flushes, against a model of the live ranges: no two live
    /// allocations overlap, data survives, a double free is refused through
    /// either path, and after a flush every carved byte is on a list.
    #[test]
    fn size_class_cache_model(ops in prop::collection::vec((op_strategy(), any::<u8>()), 1..200)) {
        let region = Region::new(1 << 20);
        let alloc = region.size_class();
        let mut cache = SizeClassCache::new(alloc);
        let base = region.ptr().addr() as u64;
        let mut ranges = Ranges::default();
        let mut live: Vec<(ShmPtr<u8>, u64, u64)> = Vec::new();
        for (step, (op, path)) in ops.into_iter().enumerate() {
            let tag = step as u64;
            let cached = path % 4 != 0;
            if path % 16 == 1 {
                cache.flush();
                prop_assert_eq!(cache.cached_blocks(), [0; SIZE_CLASSES]);
            }
            match op {
                Op::Alloc { size, align } => {
                    let result = if cached {
                        cache.allocate_full(size, align)
                    } else {
                        alloc.allocate_full(size, align)
                    };
                    match result {
                        Ok(full) => {
                            let off = full.shm.off;
                            prop_assert_eq!((base + off) % align, 0);
                            prop_assert!(off >= HEAP_ALIGN && off + size <= region.len() as u64);
                            ranges.insert(off, size);
                            // SAFETY: `full` is `size` bytes that are ours.
                            unsafe { fill(full.ptr, size, tag) };
                            live.push((full.shm, size, tag));
                        }
                        // Blocks held in the cache can run an uncached
                        // allocation out of a 1 MiB heap.
                        Err(AllocError::Exhausted { .. }) => {}
                        Err(e) => prop_assert!(false, "unexpected error {e:?}"),
                    }
                }
                Op::Free { pick } => {
                    if live.is_empty() {
                        continue;
                    }
                    let ptr = take_checked(&alloc, &mut live, pick);
                    let double = Err(AllocError::DoubleFree { off: ptr.off });
                    if cached {
                        prop_assert_eq!(cache.free(ptr), Ok(()));
                        prop_assert_eq!(alloc.free(ptr), double);
                    } else {
                        prop_assert_eq!(alloc.free(ptr), Ok(()));
                        prop_assert_eq!(cache.free(ptr), double);
                    }
                    ranges.remove(ptr.off);
                }
            }
        }
        for (ptr, ..) in live {
            prop_assert_eq!(cache.free(ptr), Ok(()));
        }
        cache.flush();
        let stats = alloc.stats().expect("stats");
        prop_assert_eq!(stats.free_bytes(), stats.carved_bytes);
    }

    /// Random allocations and carves against a model of the handed-out ranges.
    #[test]
    fn arena_model(
        requests in prop::collection::vec(
            (1u64..1500, align_strategy(12), prop::option::of(prop::collection::vec((1u64..100, align_strategy(6)), 0..8))),
            1..80,
        )
    ) {
        let region = Region::new(32 * 1024);
        let arena = region.arena();
        let base = region.ptr().addr() as u64;
        let heap_end = region.len() as u64;
        let mut ranges = Ranges::default();
        for (size, align, sub_requests) in requests {
            let cursor = ARENA_HEAP_BEGIN + arena.used();
            match sub_requests {
                None => match arena.allocate(size, align) {
                    Ok(ptr) => {
                        prop_assert_eq!(ptr.alloc_id, ID);
                        prop_assert_eq!((base + ptr.off) % align, 0);
                        prop_assert!(ptr.off >= ARENA_HEAP_BEGIN && ptr.off + size <= heap_end);
                        ranges.insert(ptr.off, size);
                    }
                    Err(AllocError::Exhausted { requested, available }) => {
                        prop_assert_eq!(requested, size);
                        prop_assert_eq!(available, heap_end - cursor);
                        let start = (base + cursor).next_multiple_of(align) - base;
                        prop_assert!(start + size > heap_end, "{size} bytes would have fit");
                        prop_assert_eq!(ARENA_HEAP_BEGIN + arena.used(), cursor);
                    }
                    Err(e) => prop_assert!(false, "unexpected error {e:?}"),
                },
                Some(subs) => match arena.carve(size) {
                    Ok(mut sub) => {
                        prop_assert_eq!(sub.cursor % 64, 0);
                        prop_assert_eq!(sub.remaining(), size);
                        ranges.insert(sub.cursor, size);
                        let (begin, end) = (sub.cursor, sub.end);
                        let mut inner = Ranges::default();
                        for (sub_size, sub_align) in subs {
                            let remaining = sub.remaining();
                            match sub.allocate(sub_size, sub_align) {
                                Ok(ptr) => {
                                    prop_assert_eq!(ptr.alloc_id, ID);
                                    prop_assert_eq!(ptr.off % sub_align, 0);
                                    prop_assert!(ptr.off >= begin && ptr.off + sub_size <= end);
                                    inner.insert(ptr.off, sub_size);
                                }
                                Err(AllocError::Exhausted { available, .. }) => {
                                    prop_assert_eq!(available, remaining);
                                    prop_assert_eq!(sub.remaining(), remaining);
                                    let start = (end - remaining).next_multiple_of(sub_align);
                                    prop_assert!(start + sub_size > end);
                                }
                                Err(e) => prop_assert!(false, "unexpected error {e:?}"),
                            }
                        }
                    }
                    Err(AllocError::Exhausted { .. }) => {
                        let start = (base + cursor).next_multiple_of(64) - base;
                        prop_assert!(start + size > heap_end, "{size} bytes would have fit");
                    }
                    Err(e) => prop_assert!(false, "unexpected error {e:?}"),
                },
            }
        }
    }
}

/// A small deterministic generator for the stress threads.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn size_class_stress_four_threads() {
    const THREADS: u64 = 4;
    const ITERATIONS: u64 = 20_000;
    const LIVE: usize = 8;
    let region = Region::new(4 << 20);
    let alloc = region.size_class();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let alloc = &alloc;
            scope.spawn(move || {
                let mut rng = XorShift(0x1234_5678 + thread);
                let mut live: Vec<(ShmPtr<u8>, u64, u64)> = Vec::new();
                let release = |(ptr, size, tag): (ShmPtr<u8>, u64, u64)| {
                    let full = alloc.to_full(ptr).expect("resolves");
                    // SAFETY: the block is ours until the free below.
                    unsafe { check(full.ptr, size, tag) };
                    alloc.free(ptr).expect("free");
                };
                for iteration in 0..ITERATIONS {
                    if live.len() == LIVE || (!live.is_empty() && rng.next() % 3 == 0) {
                        let pick = rng.next() as usize % live.len();
                        release(live.swap_remove(pick));
                        continue;
                    }
                    let size = 1 + rng.next() % 2048;
                    let align = [8, 16, 64, 256][rng.next() as usize % 4];
                    let tag = thread << 32 | iteration;
                    let full = alloc.allocate_full(size, align).unwrap_or_else(|e| {
                        panic!(
                            "4 MiB is plenty: {e:?} with {} live blocks held here, heap {:?}",
                            live.len(),
                            alloc.stats()
                        )
                    });
                    assert_eq!(full.ptr.addr() as u64 % align, 0);
                    // SAFETY: `size` fresh bytes that are ours.
                    unsafe { fill(full.ptr, size, tag) };
                    live.push((full.shm, size, tag));
                }
                live.into_iter().for_each(release);
            });
        }
    });
    let stats = alloc.stats().expect("stats");
    assert!(stats.carved_bytes > 0);
    assert_eq!(stats.free_bytes(), stats.carved_bytes);
    assert_eq!(stats.free_blocks.len(), SIZE_CLASSES);
}

/// Threads allocating and freeing through their own caches, a third of the
/// frees made by the next thread (its pointers cross through a channel), some
/// uncached: no block is handed out twice (the stamps survive), and once the
/// caches are dropped with their threads every carved byte is on a list.
///
/// The channels are bounded, and a thread whose neighbour's channel is full
/// frees the block itself: with more threads than cores a descheduled
/// receiver would otherwise let its sender run a heap's worth of blocks
/// ahead into the channel, and the test would measure the scheduler instead
/// of the allocator. What the threads can hold at once (live blocks, their
/// caches' bins, the channels) is then far below the heap, so an exhausted
/// heap is a bug, reported with the allocator's stats.
#[test]
fn size_class_cached_stress_with_crossing_frees() {
    const THREADS: usize = 4;
    const ITERATIONS: u64 = 20_000;
    const LIVE: usize = 16;
    const IN_FLIGHT: usize = 64;
    let region = Region::new(8 << 20);
    let alloc = region.size_class();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS)
        .map(|_| std::sync::mpsc::sync_channel::<(ShmPtr<u8>, u64, u64)>(IN_FLIGHT))
        .unzip();
    std::thread::scope(|scope| {
        for (thread, incoming) in receivers.into_iter().enumerate() {
            let alloc = &alloc;
            // Thread i frees some of thread i - 1's allocations.
            let outgoing = senders[(thread + 1) % THREADS].clone();
            scope.spawn(move || {
                let mut cache = SizeClassCache::new(*alloc);
                let mut rng = XorShift(0x5eed_0000 + thread as u64);
                let mut live: Vec<(ShmPtr<u8>, u64, u64)> = Vec::new();
                let release = |cache: &mut SizeClassCache<'_>, (ptr, size, tag), uncached| {
                    let full = alloc.to_full(ptr).expect("resolves");
                    // SAFETY: the block is ours until the free below.
                    unsafe { check(full.ptr, size, tag) };
                    if uncached {
                        alloc.free(ptr).expect("free");
                    } else {
                        cache.free(ptr).expect("free");
                    }
                };
                for iteration in 0..ITERATIONS {
                    while let Ok(theirs) = incoming.try_recv() {
                        release(&mut cache, theirs, false);
                    }
                    if live.len() == LIVE || (!live.is_empty() && rng.next() % 3 == 0) {
                        let pick = rng.next() as usize % live.len();
                        let mine = live.swap_remove(pick);
                        match rng.next() % 6 {
                            0 | 1 => match outgoing.try_send(mine) {
                                Ok(()) => {}
                                Err(TrySendError::Full(mine)) => release(&mut cache, mine, false),
                                Err(TrySendError::Disconnected(_)) => {
                                    panic!("the next thread listens")
                                }
                            },
                            2 => release(&mut cache, mine, true),
                            _ => release(&mut cache, mine, false),
                        }
                        continue;
                    }
                    let size = 1 + rng.next() % 2048;
                    let align = [8, 16, 64, 256][rng.next() as usize % 4];
                    let tag = (thread as u64) << 32 | iteration;
                    let full = cache.allocate_full(size, align).unwrap_or_else(|e| {
                        panic!(
                            "8 MiB is plenty: {e:?} with {} live blocks held here, \
                             {:?} cached here, heap {:?}",
                            live.len(),
                            cache.cached_blocks(),
                            alloc.stats()
                        )
                    });
                    assert_eq!(full.ptr.addr() as u64 % align, 0);
                    // SAFETY: `size` fresh bytes that are ours.
                    unsafe { fill(full.ptr, size, tag) };
                    live.push((full.shm, size, tag));
                }
                for mine in live {
                    release(&mut cache, mine, false);
                }
                drop(outgoing);
                // Every sender of ours is gone once the previous thread ends.
                for theirs in incoming {
                    release(&mut cache, theirs, false);
                }
                // The cache is dropped, so flushed, as the thread ends.
            });
        }
        drop(senders);
    });
    let stats = alloc.stats().expect("stats");
    assert!(stats.carved_bytes > 0);
    assert_eq!(stats.free_bytes(), stats.carved_bytes);
}

/// Threads allocating blocks of sizes 16 bytes to 8 KiB from a heap they
/// carve to its end early, so that most requests split larger free blocks
/// or merge smaller ones while the others pop, push, split and merge (half
/// of the threads through caches): a request may fail while the others hold
/// memory, but no block is handed out twice (the stamps survive), and once
/// all is freed every byte is back and merges into the largest block.
#[test]
fn size_class_stress_splits_and_merges() {
    const THREADS: u64 = 4;
    const ITERATIONS: u64 = 20_000;
    const LIVE: usize = 8;
    const LEN: usize = 256 * 1024;
    let region = Region::new(LEN);
    let alloc = region.size_class();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let alloc = &alloc;
            scope.spawn(move || {
                let mut cache = (thread % 2 == 1).then(|| SizeClassCache::new(*alloc));
                let mut rng = XorShift(0xfeed_0000 + thread);
                let mut live: Vec<(ShmPtr<u8>, u64, u64)> = Vec::new();
                for iteration in 0..ITERATIONS {
                    if live.len() == LIVE || (!live.is_empty() && rng.next() % 2 == 0) {
                        let ptr = take_checked(alloc, &mut live, rng.next() as usize);
                        match cache.as_mut() {
                            Some(cache) => cache.free(ptr).expect("free"),
                            None => alloc.free(ptr).expect("free"),
                        }
                        continue;
                    }
                    let size = 16 << (rng.next() % 10);
                    let tag = thread << 32 | iteration;
                    let result = match cache.as_mut() {
                        Some(cache) => cache.allocate_full(size, 16),
                        None => alloc.allocate_full(size, 16),
                    };
                    match result {
                        Ok(full) => {
                            // SAFETY: `size` fresh bytes that are ours.
                            unsafe { fill(full.ptr, size, tag) };
                            live.push((full.shm, size, tag));
                        }
                        // The others hold the memory (or a merge holds
                        // the blocks it took) at this moment.
                        Err(AllocError::Exhausted { .. }) => {}
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                }
                for (ptr, size, tag) in live {
                    let full = alloc.to_full(ptr).expect("resolves");
                    // SAFETY: as above.
                    unsafe { check(full.ptr, size, tag) };
                    alloc.free(ptr).expect("free");
                }
            });
        }
    });
    let stats = alloc.stats().expect("stats");
    assert_eq!(stats.uncarved_bytes(), 0, "the heap was carved to its end");
    assert_eq!(stats.free_bytes(), stats.carved_bytes, "every byte back");
    // Everything free merges back: the heap's largest aligned block.
    let largest = 128 * 1024;
    let full = alloc.allocate(largest - 16, 16).expect("merged whole");
    assert_eq!(full.off, HEAP_ALIGN + 16);
}

/// Allocates blocks of `size` until the heap is exhausted, through `cache`
/// when given; returns them.
fn fill_heap(
    alloc: &SizeClassAllocator<'_>,
    mut cache: Option<&mut SizeClassCache<'_>>,
    size: u64,
) -> Vec<ShmPtr<u8>> {
    let mut ptrs = Vec::new();
    loop {
        let result = match cache.as_deref_mut() {
            Some(cache) => cache.allocate(size, 16),
            None => alloc.allocate(size, 16),
        };
        match result {
            Ok(ptr) => ptrs.push(ptr),
            Err(AllocError::Exhausted { .. }) => return ptrs,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
}

/// A heap once filled with large blocks and emptied serves a heap's worth of
/// small ones, and the reverse, uncached and through a cache: a block's class
/// is not fixed, free memory of one class serves another.
#[test]
fn a_heap_of_freed_blocks_of_one_size_serves_another() {
    const LEN: usize = 1 << 20;
    let heap = (LEN as u64 - HEAP_ALIGN) / 4096 * 4096;
    let region = Region::new(LEN);
    for cached in [false, true] {
        let alloc = region.size_class();
        let mut cache = cached.then(|| SizeClassCache::new(alloc));
        for (first, then) in [(60_000, 100), (100, 60_000), (2000, 30_000), (30_000, 2000)] {
            for size in [first, then] {
                let block = block_size(SizeClassAllocator::class_for(size, 16).expect("class"));
                let ptrs = fill_heap(&alloc, cache.as_mut(), size);
                // Every naturally aligned block of the heap was served.
                assert_eq!(
                    ptrs.len() as u64,
                    heap / block,
                    "cached {cached}, {first} then {then} bytes: {block}-byte blocks, {:?}",
                    alloc.stats()
                );
                for ptr in ptrs {
                    match cache.as_mut() {
                        Some(cache) => cache.free(ptr).expect("free"),
                        None => alloc.free(ptr).expect("free"),
                    }
                }
                if let Some(cache) = cache.as_mut() {
                    cache.flush();
                }
                let stats = alloc.stats().expect("stats");
                assert_eq!(stats.free_bytes(), stats.carved_bytes);
            }
        }
    }
}

/// A cache in a `thread_local!` (over a region kept for the process's life,
/// as a `'static` handle needs) is flushed by the thread-local destructor
/// when its thread exits.
#[test]
fn thread_exit_flushes_a_thread_local_cache() {
    use std::cell::RefCell;
    thread_local! {
        static CACHE: RefCell<Option<SizeClassCache<'static>>> = const { RefCell::new(None) };
    }
    let region: &'static Region = Box::leak(Box::new(Region::new(1 << 20)));
    // SAFETY: the region lives forever and is used only through handles.
    let alloc: SizeClassAllocator<'static> =
        unsafe { SizeClassAllocator::init_in(region.ptr(), region.len(), ID) }.expect("init");
    let class = SizeClassAllocator::class_for(100, 16).expect("class");
    std::thread::spawn(move || {
        CACHE.with_borrow_mut(|cache| {
            let cache = cache.get_or_insert_with(|| SizeClassCache::new(alloc));
            let ptrs: Vec<_> = (0..5)
                .map(|_| cache.allocate(100, 16).expect("allocate"))
                .collect();
            for ptr in ptrs {
                cache.free(ptr).expect("free");
            }
            assert!(cache.cached_blocks()[class] >= 5);
        });
        let stats = alloc.stats().expect("stats");
        assert!(stats.free_bytes() < stats.carved_bytes, "held in the cache");
    })
    .join()
    .expect("thread");
    let stats = alloc.stats().expect("stats");
    assert_eq!(
        stats.free_bytes(),
        stats.carved_bytes,
        "flushed at thread exit"
    );
}

#[test]
fn arena_concurrent_allocations_never_overlap() {
    const THREADS: u64 = 4;
    let region = Region::new(1 << 20);
    let arena = region.arena();
    let per_thread: Vec<Vec<(u64, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                let arena = &arena;
                scope.spawn(move || {
                    let mut rng = XorShift(0x9876 + thread);
                    let mut got = Vec::new();
                    loop {
                        let size = 1 + rng.next() % 512;
                        let align = 1 << (rng.next() % 8);
                        let result = if rng.next() % 4 == 0 {
                            arena.carve(size).map(|sub| ShmPtr::new(sub.id, sub.cursor))
                        } else {
                            arena.allocate(size, align)
                        };
                        match result {
                            Ok(ptr) => got.push((ptr.off, size)),
                            Err(AllocError::Exhausted { .. }) => break got,
                            Err(e) => panic!("unexpected error {e:?}"),
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let mut ranges = Ranges::default();
    let mut total = 0;
    for (off, size) in per_thread.into_iter().flatten() {
        assert!(off >= ARENA_HEAP_BEGIN && off + size <= region.len() as u64);
        ranges.insert(off, size);
        total += size;
    }
    assert!(total <= arena.used());
    assert!(
        arena.used() > arena.capacity() - 1024,
        "ran until nearly full"
    );
}

/// Two mappings of the same pages at different addresses, as two processes
/// would have: what one allocates and writes, the other resolves and reads.
#[cfg(unix)]
mod cross_mapping {
    use super::*;
    use tandem_shm_core::{Mapping, Segment};

    const LEN: usize = 1 << 20;

    fn two_mappings() -> (Segment, Mapping) {
        let segment = Segment::create_anonymous(LEN).expect("memfd segment");
        let again = segment.map_again().expect("second mapping");
        assert_ne!(segment.as_ptr(), again.as_ptr());
        (segment, again)
    }

    #[test]
    fn size_class_allocator_across_mappings() {
        let (segment, again) = two_mappings();
        // SAFETY: both mappings outlive the handles and are used only through
        // them.
        let (a, b) = unsafe {
            (
                SizeClassAllocator::init_in(segment.as_ptr(), LEN, ID).expect("init"),
                SizeClassAllocator::attach(again.as_ptr(), LEN).expect("attach"),
            )
        };
        let mut written = Vec::new();
        for (i, size) in [24u64, 100, 5000, 64].into_iter().enumerate() {
            let full = a.allocate_full(size, 64).expect("allocate");
            // SAFETY: `size` fresh bytes of ours.
            unsafe { fill(full.ptr, size, i as u64) };
            written.push((full.shm, size, i as u64));
        }
        for &(ptr, size, tag) in &written {
            let seen = b.to_full(ptr).expect("resolves in the second mapping");
            assert_ne!(seen.ptr, a.to_full(ptr).expect("resolves").ptr);
            // SAFETY: the same pages, another address.
            unsafe { check(seen.ptr, size, tag) };
        }
        // Freed through one mapping, reused through the other.
        let (first, ..) = written[0];
        b.free(first).expect("free through the second mapping");
        assert_eq!(
            a.free(first),
            Err(AllocError::DoubleFree { off: first.off })
        );
        assert_eq!(a.allocate(24, 64).expect("allocate"), first);
        // An allocation made by B is readable through A.
        let from_b = b.allocate_full(40, 16).expect("allocate");
        // SAFETY: 40 fresh bytes of ours.
        unsafe { fill(from_b.ptr, 40, 99) };
        // SAFETY: the same bytes through the first mapping.
        unsafe { check(a.to_full(from_b.shm).expect("resolves").ptr, 40, 99) };
    }

    /// Caches in two mappings (two processes' views): blocks allocated
    /// through one are freed through the other's cache and reused through the
    /// first once flushed; a cache that is never flushed (its process died)
    /// loses only its blocks, and the heap goes on working.
    #[test]
    fn size_class_caches_across_mappings() {
        let (segment, again) = two_mappings();
        // SAFETY: both mappings outlive the handles and are used only through
        // them.
        let (a, b) = unsafe {
            (
                SizeClassAllocator::init_in(segment.as_ptr(), LEN, ID).expect("init"),
                SizeClassAllocator::attach(again.as_ptr(), LEN).expect("attach"),
            )
        };
        let (mut cache_a, mut cache_b) = (SizeClassCache::new(a), SizeClassCache::new(b));
        let class = SizeClassAllocator::class_for(48, 16).expect("class");
        let from_a: Vec<_> = (0..8u64)
            .map(|tag| {
                let full = cache_a.allocate_full(48, 16).expect("allocate");
                // SAFETY: 48 fresh bytes of ours.
                unsafe { fill(full.ptr, 48, tag) };
                full.shm
            })
            .collect();
        for (tag, &ptr) in from_a.iter().enumerate() {
            // SAFETY: the same bytes through the second mapping.
            unsafe { check(b.to_full(ptr).expect("resolves").ptr, 48, tag as u64) };
            cache_b.free(ptr).expect("free through B's cache");
            assert_eq!(
                cache_a.free(ptr),
                Err(AllocError::DoubleFree { off: ptr.off })
            );
        }
        // A's cache still holds the rest of its refill; once it is empty,
        // A's next miss takes what B flushed.
        cache_a.flush();
        cache_b.flush();
        let stats = a.stats().expect("stats");
        assert_eq!(stats.free_bytes(), stats.carved_bytes);
        let carved = stats.carved_bytes;
        // Every block the class has (the first refill's run) comes back to
        // A, B's frees included, with nothing new carved.
        let on_list = stats.free_blocks[class];
        assert!(on_list >= from_a.len() as u64);
        let again_a: Vec<_> = (0..on_list)
            .map(|_| cache_a.allocate(48, 16).expect("allocate"))
            .collect();
        assert!(from_a.iter().all(|p| again_a.contains(p)));
        assert_eq!(a.stats().expect("stats").carved_bytes, carved, "reused");

        // "Process B dies" holding blocks in its cache: they are lost, and
        // only they.
        for &ptr in &again_a[..3] {
            cache_b.free(ptr).expect("free");
        }
        std::mem::forget(cache_b);
        for &ptr in &again_a[3..] {
            cache_a.free(ptr).expect("free");
        }
        cache_a.flush();
        let stats = a.stats().expect("stats");
        assert_eq!(
            stats.carved_bytes - stats.free_bytes(),
            3 * block_size(class)
        );
        let p = cache_a.allocate(48, 16).expect("the heap still works");
        cache_a.free(p).expect("free");
    }

    /// Two real processes (a fork) sharing a memfd segment, each with its
    /// own cache: the child frees the parent's blocks and allocates blocks
    /// the parent then frees, and dies holding blocks in its cache without a
    /// flush; the parent loses exactly those and goes on allocating.
    #[test]
    fn size_class_caches_across_a_fork() {
        let segment = Segment::create_anonymous(LEN).expect("memfd segment");
        // SAFETY: the segment outlives the handles and is used only through
        // them, in both processes.
        let alloc =
            unsafe { SizeClassAllocator::init_in(segment.as_ptr(), LEN, ID) }.expect("init");
        let class = SizeClassAllocator::class_for(48, 16).expect("class");
        // Where the child leaves the offsets of what it allocated (a block of
        // another class, so the counts below are the cached class's alone).
        let mailbox = alloc.allocate_full(64, 8).expect("allocate");
        let mut cache = SizeClassCache::new(alloc);
        let from_parent: Vec<_> = (0..8u64)
            .map(|tag| {
                let full = cache.allocate_full(48, 16).expect("allocate");
                // SAFETY: 48 fresh bytes of ours.
                unsafe { fill(full.ptr, 48, tag) };
                full.shm
            })
            .collect();
        // The parent's cache keeps the rest of its first refill; the child
        // cannot see those blocks.
        let parent_cached = u64::from(cache.cached_blocks()[class]);

        // SAFETY: the child runs only allocator code on the shared segment
        // and leaves with `_exit`, running no destructor of the parent's
        // state (its copy of `cache` included).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let child = std::panic::catch_unwind(|| {
                // SAFETY: the mapping is inherited, shared, at the same place.
                let alloc =
                    unsafe { SizeClassAllocator::attach(segment.as_ptr(), LEN) }.expect("attach");
                let mut mine = SizeClassCache::new(alloc);
                for (tag, &ptr) in from_parent.iter().enumerate() {
                    // SAFETY: the parent's block, handed to us.
                    unsafe { check(alloc.to_full(ptr).expect("resolves").ptr, 48, tag as u64) };
                    mine.free(ptr).expect("free the parent's block");
                }
                mine.flush();
                // One refill takes the 8 blocks back: 3 out, 5 stay cached.
                for i in 0..3u64 {
                    let full = mine.allocate_full(48, 16).expect("allocate");
                    // SAFETY: 48 fresh bytes of ours.
                    unsafe { fill(full.ptr, 48, 100 + i) };
                    // SAFETY: the mailbox has room for 3 offsets.
                    unsafe {
                        mailbox
                            .ptr
                            .cast::<u64>()
                            .add(i as usize)
                            .write(full.shm.off)
                    };
                }
                assert_eq!(mine.cached_blocks()[class], 5);
                // Dies without flushing: no destructor runs past `_exit`.
                std::mem::forget(mine);
            });
            // SAFETY: ends the child at once, as a crash would.
            unsafe { libc::_exit(i32::from(child.is_err())) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child failed: status {status:#x}"
        );
        for i in 0..3 {
            // SAFETY: the child wrote 3 offsets before exiting.
            let off = unsafe { mailbox.ptr.cast::<u64>().add(i).read() };
            let ptr = ShmPtr::new(ID, off);
            // SAFETY: the child's block, handed to us.
            unsafe {
                check(
                    alloc.to_full(ptr).expect("resolves").ptr,
                    48,
                    100 + i as u64,
                )
            };
            cache.free(ptr).expect("free the child's block");
            assert_eq!(alloc.free(ptr), Err(AllocError::DoubleFree { off }));
        }
        cache.flush();
        alloc.free(mailbox.shm).expect("free");
        let stats = alloc.stats().expect("stats");
        assert_eq!(stats.free_blocks[class], parent_cached + 3);
        assert_eq!(
            stats.carved_bytes - stats.free_bytes(),
            5 * block_size(class),
            "lost: the dead child's cached blocks, and only they"
        );
        let p = cache.allocate(48, 16).expect("the heap still works");
        cache.free(p).expect("free");
    }

    #[test]
    fn arena_across_mappings() {
        let (segment, again) = two_mappings();
        // SAFETY: as above.
        let (a, b) = unsafe {
            (
                ArenaAllocator::init_in(segment.as_ptr(), LEN, ID).expect("init"),
                ArenaAllocator::attach(again.as_ptr(), LEN).expect("attach"),
            )
        };
        let p = a.allocate_full(300, 4096).expect("allocate");
        let q = b.allocate_full(300, 4096).expect("allocate");
        assert!(q.shm.off >= p.shm.off + 300, "the cursor is shared");
        // Both mappings are page-aligned, so the alignment holds in both.
        assert_eq!(b.to_full(p.shm).expect("resolves").ptr.addr() % 4096, 0);
        // SAFETY: 300 fresh bytes of ours.
        unsafe { fill(p.ptr, 300, 5) };
        // SAFETY: the same bytes through the second mapping.
        unsafe { check(b.to_full(p.shm).expect("resolves").ptr, 300, 5) };
        assert_eq!(a.used(), b.used());
    }
}
