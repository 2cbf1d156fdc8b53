//! Allocation throughput of the bump arena, its per-thread sub-arenas and the
//! size-class allocator, against the system allocator in the same run, with
//! one and two threads. Allocation-only rows time allocations alone: frees
//! (the arena's reset, the system allocator's deallocs) run after the clock
//! stops. The size-class rows time allocate+free pairs on both sides, through
//! a per-thread `SizeClassCache` and uncached.

// Only `compare` and `machine` are used: allocation-only rows need frees
// outside the timed region, which `harness::interleaved_rates` cannot leave
// out, so `batch_rate` times them.
#[allow(dead_code)]
mod harness;

use std::alloc::{alloc, dealloc, Layout};
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use tandem_shm_core::layout::AllocatorId;
use tandem_shm_core::{ArenaAllocator, SizeClassAllocator, SizeClassCache};

/// Operations per thread per timed batch.
const OPS: u64 = 200_000;
const REPS: usize = 9;
const SIZE: u64 = 64;
const ALIGN: u64 = 16;
const ID: AllocatorId = AllocatorId::new(1, 0);

/// A page-aligned heap buffer standing in for a shared region.
struct Region {
    ptr: *mut u8,
    layout: Layout,
}

impl Region {
    fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len, 4096).expect("valid layout");
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Region { ptr, layout }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// Aggregate operations per second of `threads` threads that each build a
/// state with `setup` (untimed), run `batch` on it (timed; `OPS` operations)
/// and hand it to `teardown` once every thread has stopped its clock. The
/// slowest thread's time counts; the median over `REPS` batches is returned.
fn batch_rate<S: Send>(
    threads: usize,
    setup: impl Fn() -> S + Sync,
    batch: impl Fn(&mut S) + Sync,
    teardown: impl Fn(S),
) -> f64 {
    let mut times: Vec<Duration> = (0..=REPS)
        .map(|_| {
            let barrier = Barrier::new(threads);
            let results: Vec<(Duration, S)> = std::thread::scope(|scope| {
                let workers: Vec<_> = (0..threads)
                    .map(|_| {
                        scope.spawn(|| {
                            let mut state = setup();
                            barrier.wait();
                            let start = Instant::now();
                            batch(&mut state);
                            (start.elapsed(), state)
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|w| w.join().expect("benchmark thread"))
                    .collect()
            });
            let slowest = results.iter().map(|(time, _)| *time).max();
            results.into_iter().for_each(|(_, state)| teardown(state));
            slowest.expect("at least one thread")
        })
        .skip(1) // warm-up
        .collect();
    times.sort();
    (threads as u64 * OPS) as f64 / times[times.len() / 2].as_secs_f64()
}

/// Blocks from the system allocator, kept to be freed after the clock stops.
struct SystemBlocks(Vec<*mut u8>);

// SAFETY: the blocks are owned allocations of the global allocator, which may
// be freed from any thread; nothing else refers to them.
unsafe impl Send for SystemBlocks {}

fn system_alloc_only(threads: usize) -> f64 {
    let layout = Layout::from_size_align(SIZE as usize, ALIGN as usize).expect("valid layout");
    batch_rate(
        threads,
        || SystemBlocks(Vec::with_capacity(OPS as usize)),
        |blocks| {
            for _ in 0..OPS {
                // SAFETY: non-zero size.
                blocks.0.push(black_box(unsafe { alloc(layout) }));
            }
        },
        |blocks| {
            for ptr in blocks.0 {
                // SAFETY: allocated above with this layout.
                unsafe { dealloc(ptr, layout) };
            }
        },
    )
}

fn system_pairs(threads: usize) -> f64 {
    let layout = Layout::from_size_align(SIZE as usize, ALIGN as usize).expect("valid layout");
    batch_rate(
        threads,
        || (),
        |_| {
            for _ in 0..OPS {
                // SAFETY: non-zero size; freed right away with the same layout.
                unsafe { dealloc(black_box(alloc(layout)), layout) };
            }
        },
        drop,
    )
}

fn arena_alloc_only(arena: &ArenaAllocator<'_>, threads: usize) -> f64 {
    batch_rate(
        threads,
        || (),
        |_| {
            for _ in 0..OPS {
                black_box(
                    arena
                        .allocate(SIZE, ALIGN)
                        .expect("region sized for a batch"),
                );
            }
        },
        // SAFETY: every thread of the batch has finished; nothing is in use.
        |()| unsafe { arena.reset() },
    )
}

fn thread_arena_alloc_only(arena: &ArenaAllocator<'_>, threads: usize) -> f64 {
    batch_rate(
        threads,
        || arena.carve(OPS * SIZE).expect("region sized for a batch"),
        |sub| {
            for _ in 0..OPS {
                black_box(sub.allocate(SIZE, ALIGN).expect("carved for a batch"));
            }
        },
        // SAFETY: as above.
        |_| unsafe { arena.reset() },
    )
}

/// Allocate+free pairs through a per-thread cache, the designed host path;
/// the cache is built and flushed (dropped) outside the clock.
fn size_class_cached_pairs(alloc: &SizeClassAllocator<'_>, threads: usize) -> f64 {
    batch_rate(
        threads,
        || SizeClassCache::new(*alloc),
        |cache| {
            for _ in 0..OPS {
                let ptr = cache.allocate(SIZE, ALIGN).expect("allocate");
                cache.free(black_box(ptr)).expect("free");
            }
        },
        drop,
    )
}

fn size_class_pairs(alloc: &SizeClassAllocator<'_>, threads: usize) -> f64 {
    batch_rate(
        threads,
        || (),
        |_| {
            for _ in 0..OPS {
                let ptr = alloc.allocate(SIZE, ALIGN).expect("allocate");
                alloc.free(black_box(ptr)).expect("free");
            }
        },
        drop,
    )
}

fn main() {
    println!("machine: {} (rates in ops/s, M = 10^6)", harness::machine());
    println!(
        "{SIZE}-byte allocations aligned to {ALIGN}; {OPS} per thread per batch, median of {REPS}"
    );
    // Two threads' batches, with room for alignment and carve rounding.
    let region = Region::new((3 * OPS * SIZE) as usize + (1 << 20));
    let len = region.layout.size();
    for threads in [1, 2] {
        let system = system_alloc_only(threads);
        {
            // SAFETY: the region outlives the handle and is used only through it.
            let arena = unsafe { ArenaAllocator::init_in(region.ptr, len, ID) }.expect("init");
            // The designed allocation path: a sub-arena per thread.
            harness::compare(
                &format!("ThreadArena (per-thread), {threads} thr"),
                thread_arena_alloc_only(&arena, threads),
                "std::alloc::alloc",
                system,
                Some(5.0),
            );
            harness::compare(
                &format!("arena shared cursor, {threads} thr"),
                arena_alloc_only(&arena, threads),
                "std::alloc::alloc",
                system,
                None,
            );
        }
        // SAFETY: the arena handles above are gone; the region is reused.
        let sizes = unsafe { SizeClassAllocator::init_in(region.ptr, len, ID) }.expect("init");
        let system = system_pairs(threads);
        harness::compare(
            &format!("size-class alloc+free, {threads} thr"),
            size_class_cached_pairs(&sizes, threads),
            "std alloc+dealloc",
            system,
            Some(1.0),
        );
        harness::compare(
            &format!("size-class uncached, {threads} thr"),
            size_class_pairs(&sizes, threads),
            "std alloc+dealloc",
            system,
            None,
        );
    }
    println!(
        "note: the 5x target is for ThreadArena, the designed per-thread path (no shared atomic); \
         the shared-cursor row, ArenaAllocator::allocate, is information: a CAS loop on one cursor \
         whose cache line moves between cores on every allocation once threads share it"
    );
    println!(
        "note: the size-class alloc+free row goes through a SizeClassCache per thread (the \
         designed host path, 1x target); the uncached row is information: every allocate and \
         free a CAS on the class's one list head"
    );
}
