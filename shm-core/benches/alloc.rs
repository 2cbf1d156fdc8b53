//! Allocation throughput of the bump arena, its per-thread sub-arenas and the
//! size-class allocator, against the system allocator in the same run, with
//! one and two threads. Allocation-only rows time allocations alone: frees
//! (the arena's reset, the system allocator's deallocs) run after the clock
//! stops. The size-class rows time allocate+free pairs on both sides, through
//! a per-thread `SizeClassCache` and uncached; with two threads, hand-off
//! rows also time blocks that one thread allocates and the other frees. The
//! split rows time uncached allocations that split a larger free block (every
//! other one) against allocations that pop, from heaps carved to their end.
//!
//! Fairness on a shared or many-core host: the runs a row compares take turns
//! within each repetition (`harness::interleaved_times`), so load from
//! elsewhere hits both sides alike, and every run's threads are pinned to the
//! same CPUs (`harness::cpus`).

// `interleaved_rates` is unused here: a batch's setup and teardown (the
// frees of allocation-only rows) must stay outside its clock, so each run
// times itself and `interleaved_times` takes the times.
#[allow(dead_code, reason = "interleaved_rates is for the other benches")]
mod harness;
#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use std::alloc::{alloc, dealloc, Layout};

use harness::cpus::Pinning;
use support::AlignedRegion;
use tandem_shm_core::layout::AllocatorId;
use tandem_shm_core::{ArenaAllocator, SizeClassAllocator, SizeClassCache};

/// Operations per thread per timed batch.
const OPS: u64 = 200_000;
const REPS: usize = 9;
const SIZE: u64 = 64;
const ALIGN: u64 = 16;
const ID: AllocatorId = AllocatorId::new(1, 0);

/// A page-aligned heap buffer standing in for a shared region.
type Region = AlignedRegion;

/// The threads of one row and where they run.
struct Threads {
    count: usize,
    pins: Pinning,
}

impl Threads {
    fn new(count: usize) -> Self {
        Threads {
            count,
            pins: Pinning::choose(count),
        }
    }

    /// One timed batch: thread `i` builds a state with `setup(i)` (untimed),
    /// runs `batch` on it (timed; `OPS` operations) and hands it to
    /// `teardown` once every thread has stopped its clock. Returns the
    /// slowest thread's time.
    fn batch<S: Send>(
        &self,
        setup: impl Fn(usize) -> S + Sync,
        batch: impl Fn(&mut S) + Sync,
        teardown: impl Fn(S),
    ) -> Duration {
        let barrier = Barrier::new(self.count);
        let results: Vec<(Duration, S)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..self.count)
                .map(|index| {
                    let (barrier, setup, batch) = (&barrier, &setup, &batch);
                    scope.spawn(move || {
                        self.pins.pin_current(index);
                        let mut state = setup(index);
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
    }

    /// Aggregate operations per second of each of `runs` (each one timed
    /// batch per call), taking turns: the median over `REPS` rounds.
    fn rates<const N: usize>(&self, runs: [&mut dyn FnMut() -> Duration; N]) -> [f64; N] {
        harness::interleaved_times(REPS, runs)
            .map(|time| (self.count as u64 * OPS) as f64 / time.as_secs_f64())
    }
}

/// Blocks from the system allocator, kept to be freed after the clock stops.
struct SystemBlocks(Vec<*mut u8>);

// SAFETY: the blocks are owned allocations of the global allocator, which may
// be freed from any thread; nothing else refers to them.
unsafe impl Send for SystemBlocks {}

fn system_alloc_only(threads: &Threads) -> Duration {
    let layout = Layout::from_size_align(SIZE as usize, ALIGN as usize).expect("valid layout");
    threads.batch(
        |_| SystemBlocks(Vec::with_capacity(OPS as usize)),
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

fn system_pairs(threads: &Threads) -> Duration {
    let layout = Layout::from_size_align(SIZE as usize, ALIGN as usize).expect("valid layout");
    threads.batch(
        |_| (),
        |_| {
            for _ in 0..OPS {
                // SAFETY: non-zero size; freed right away with the same layout.
                unsafe { dealloc(black_box(alloc(layout)), layout) };
            }
        },
        drop,
    )
}

fn arena_alloc_only(arena: &ArenaAllocator<'_>, threads: &Threads) -> Duration {
    threads.batch(
        |_| (),
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

fn thread_arena_alloc_only(arena: &ArenaAllocator<'_>, threads: &Threads) -> Duration {
    threads.batch(
        |_| arena.carve(OPS * SIZE).expect("region sized for a batch"),
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
fn size_class_cached_pairs(alloc: &SizeClassAllocator<'_>, threads: &Threads) -> Duration {
    threads.batch(
        |_| SizeClassCache::new(*alloc),
        |cache| {
            for _ in 0..OPS {
                let ptr = cache.allocate(SIZE, ALIGN).expect("allocate");
                cache.free(black_box(ptr)).expect("free");
            }
        },
        drop,
    )
}

fn size_class_pairs(alloc: &SizeClassAllocator<'_>, threads: &Threads) -> Duration {
    threads.batch(
        |_| (),
        |_| {
            for _ in 0..OPS {
                let ptr = alloc.allocate(SIZE, ALIGN).expect("allocate");
                alloc.free(black_box(ptr)).expect("free");
            }
        },
        drop,
    )
}

/// Requests of the split rows: each takes a 2 KiB block, header included.
const SPLIT_SIZE: u64 = 2048 - 16;
/// Requests per split-row batch (fewer than `OPS`: each batch needs a heap of
/// its own, a block of it per request).
const SPLIT_OPS: u64 = 20_000;

/// A heap in `region` carved to its end into blocks of `block` bytes, all
/// freed: a request of another class finds only those on the lists.
fn freed_heap(region: &Region, block: u64) -> SizeClassAllocator<'_> {
    // SAFETY: the region outlives the handle and is used only through it;
    // the previous batch's handle is gone.
    let alloc =
        unsafe { SizeClassAllocator::init_in(region.ptr(), region.len(), ID) }.expect("init");
    let mut blocks = Vec::new();
    while let Ok(ptr) = alloc.allocate(block - 16, ALIGN) {
        blocks.push(ptr);
    }
    for ptr in blocks {
        alloc.free(ptr).expect("free");
    }
    alloc
}

/// `SPLIT_OPS` uncached 2 KiB allocations from a heap of freed blocks of
/// `block` bytes (timed; the setup and the frees are not): from freed 2 KiB
/// blocks every one is a pop; from freed 4 KiB blocks every other one splits
/// a block (a pop of the 4 KiB list, a push of the upper half on the 2 KiB
/// list) and the next pops that half.
fn size_class_allocations_from(region: &Region, block: u64, threads: &Threads) -> Duration {
    threads.batch(
        |_| freed_heap(region, block),
        |alloc| {
            for _ in 0..SPLIT_OPS {
                black_box(alloc.allocate(SPLIT_SIZE, ALIGN).expect("allocate"));
            }
        },
        drop,
    )
}

/// A system-allocator block on its way from the thread that allocated it to
/// the one that frees it.
struct SystemBlock(*mut u8);

// SAFETY: an owned allocation of the global allocator, which may be freed
// from any thread; only the thread holding the value frees it, once.
unsafe impl Send for SystemBlock {}

/// Slots of the ring that carries blocks in the hand-off runs.
const HANDOFF_RING: usize = 1024;

/// One thread's end of a hand-off run.
enum End<T> {
    Allocates(rtrb::Producer<T>),
    Frees(rtrb::Consumer<T>),
}

/// Waits after a full push or an empty pop: spin briefly (the other side is
/// usually nanoseconds away), then yield (it may be descheduled on a
/// machine with as many cores as threads, or shared). Every allocator's
/// hand-off runs wait alike.
fn wait(spins: &mut u32) {
    if *spins < 64 {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// One timed batch of `OPS` blocks allocated by thread 0 and freed by thread
/// 1, handed over through a ring (the same one for every allocator): the
/// pattern of a host thread that builds task payloads another one retires.
/// Each thread allocates or frees through its own state `C` (a cache, or
/// nothing), built by `new` and given to `done` after the clock stops.
fn handoff<C: Send, T: Send>(
    threads: &Threads,
    new: impl Fn() -> C + Sync,
    allocate: impl Fn(&mut C) -> T + Sync,
    free: impl Fn(&mut C, T) + Sync,
    done: impl Fn(C),
) -> Duration {
    assert_eq!(threads.count, 2, "one thread allocates, one frees");
    let (tx, rx) = rtrb::RingBuffer::new(HANDOFF_RING);
    let ends = std::sync::Mutex::new((Some(tx), Some(rx)));
    threads.batch(
        |index| {
            let mut ends = ends.lock().expect("ends");
            let end = match index {
                0 => End::Allocates(ends.0.take().expect("one allocating thread")),
                _ => End::Frees(ends.1.take().expect("one freeing thread")),
            };
            (end, new())
        },
        |(end, state)| {
            let mut spins = 0;
            match end {
                End::Allocates(tx) => {
                    for _ in 0..OPS {
                        let mut block = allocate(state);
                        while let Err(rtrb::PushError::Full(back)) = tx.push(block) {
                            block = back;
                            wait(&mut spins);
                        }
                        spins = 0;
                    }
                }
                End::Frees(rx) => {
                    for _ in 0..OPS {
                        let block = loop {
                            match rx.pop() {
                                Ok(block) => break block,
                                Err(_) => wait(&mut spins),
                            }
                        };
                        spins = 0;
                        free(state, block);
                    }
                }
            }
        },
        |(_, state)| done(state),
    )
}

fn system_handoff(threads: &Threads) -> Duration {
    let layout = Layout::from_size_align(SIZE as usize, ALIGN as usize).expect("valid layout");
    handoff(
        threads,
        || (),
        // SAFETY: non-zero size.
        |_| SystemBlock(unsafe { alloc(layout) }),
        // SAFETY: allocated above with this layout, freed once.
        |_, block| unsafe { dealloc(block.0, layout) },
        drop,
    )
}

/// Hand-off through a cache on each side: the allocating thread's refills
/// and the freeing thread's full bins meet on the class's list head.
fn size_class_cached_handoff(alloc: &SizeClassAllocator<'_>, threads: &Threads) -> Duration {
    handoff(
        threads,
        || SizeClassCache::new(*alloc),
        |cache| cache.allocate(SIZE, ALIGN).expect("allocate"),
        |cache, ptr| cache.free(ptr).expect("free"),
        drop,
    )
}

fn size_class_handoff(alloc: &SizeClassAllocator<'_>, threads: &Threads) -> Duration {
    handoff(
        threads,
        || (),
        |_| alloc.allocate(SIZE, ALIGN).expect("allocate"),
        |_, ptr| alloc.free(ptr).expect("free"),
        drop,
    )
}

fn main() {
    println!("machine: {} (rates in ops/s, M = 10^6)", harness::machine());
    println!(
        "{SIZE}-byte allocations aligned to {ALIGN}; {OPS} per thread per batch, median of {REPS}, \
         the runs a row compares taking turns"
    );
    // Two threads' batches, with room for alignment and carve rounding.
    let region = Region::new((3 * OPS * SIZE) as usize + (1 << 20));
    let len = region.len();
    for count in [1, 2] {
        let threads = Threads::new(count);
        let roles = ["thread 0", "thread 1"];
        println!("{count} thr: {}", threads.pins.describe(&roles[..count]));
        {
            // SAFETY: the region outlives the handle and is used only through it.
            let arena = unsafe { ArenaAllocator::init_in(region.ptr(), len, ID) }.expect("init");
            let [per_thread, shared, system] = threads.rates([
                &mut || thread_arena_alloc_only(&arena, &threads),
                &mut || arena_alloc_only(&arena, &threads),
                &mut || system_alloc_only(&threads),
            ]);
            // The designed allocation path: a sub-arena per thread.
            harness::compare(
                &format!("ThreadArena (per-thread), {count} thr"),
                per_thread,
                "std::alloc::alloc",
                system,
                Some(5.0),
            );
            harness::compare(
                &format!("arena shared cursor, {count} thr"),
                shared,
                "std::alloc::alloc",
                system,
                None,
            );
        }
        // SAFETY: the arena handles above are gone; the region is reused.
        let sizes = unsafe { SizeClassAllocator::init_in(region.ptr(), len, ID) }.expect("init");
        let [cached, uncached, system] = threads.rates([
            &mut || size_class_cached_pairs(&sizes, &threads),
            &mut || size_class_pairs(&sizes, &threads),
            &mut || system_pairs(&threads),
        ]);
        harness::compare(
            &format!("size-class alloc+free, {count} thr"),
            cached,
            "std alloc+dealloc",
            system,
            Some(1.0),
        );
        harness::compare(
            &format!("size-class uncached, {count} thr"),
            uncached,
            "std alloc+dealloc",
            system,
            None,
        );
        if count == 2 {
            let [cached, uncached, system] = harness::interleaved_times(
                REPS,
                [
                    &mut || size_class_cached_handoff(&sizes, &threads),
                    &mut || size_class_handoff(&sizes, &threads),
                    &mut || system_handoff(&threads),
                ],
            )
            .map(|time| OPS as f64 / time.as_secs_f64());
            harness::compare(
                "size-class hand-off, 2 thr",
                cached,
                "std alloc / dealloc",
                system,
                None,
            );
            harness::compare(
                "size-class hand-off uncached",
                uncached,
                "std alloc / dealloc",
                system,
                None,
            );
        }
    }
    // The split path, one thread: allocations that split against plain pops.
    let split_region = Region::new((SPLIT_OPS * 2048 + 2 * 4096) as usize);
    let threads = Threads::new(1);
    let [popping, splitting] = harness::interleaved_times(
        REPS,
        [
            &mut || size_class_allocations_from(&split_region, 2048, &threads),
            &mut || size_class_allocations_from(&split_region, 4096, &threads),
        ],
    )
    .map(|time| SPLIT_OPS as f64 / time.as_secs_f64());
    harness::compare(
        "size-class half split, 1 thr",
        splitting,
        "all pops",
        popping,
        None,
    );
    // Half the allocations split: each split costs the difference twice.
    let split_ns = 2.0 * (1e9 / splitting - 1e9 / popping);
    println!(
        "size-class split path: {:.1} ns per allocation that splits, {:.1} ns per pop",
        1e9 / popping + split_ns,
        1e9 / popping
    );
    println!(
        "note: the 5x target is for ThreadArena, the designed per-thread path (no shared atomic); \
         the shared-cursor row, ArenaAllocator::allocate, is information: a CAS loop on one cursor \
         whose cache line moves between cores on every allocation once threads share it"
    );
    println!(
        "note: the size-class alloc+free row goes through a SizeClassCache per thread (the \
         designed host path, 1x target); the uncached row is information: every allocate and \
         free a CAS on the class's one list head, whose cache line, with two threads, crosses \
         cores on nearly every call (each thread mostly gets its own block back: the head line \
         is the one written line they share)"
    );
    println!(
        "note: hand-off rows (information): thread 0 allocates, thread 1 frees what it receives \
         through a ring; rates in blocks per second; through caches, refills and full bins meet \
         on the class's list head once per run of blocks"
    );
}
