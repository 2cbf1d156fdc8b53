//! tandem/size_class.h against tandem-shm-core's `SizeClassAllocator` on the
//! same bytes: what C++ allocates Rust frees and the reverse; operation
//! sequences split between Rust and C++ leave exactly the bytes an all-Rust
//! run leaves (the allocator is deterministic while one agent runs at a
//! time); the C++ thread cache hides blocks until it is flushed; racing
//! frees of one block have one winner; kernel threads and Rust threads
//! allocating and freeing at once overlap and lose nothing; both sides refuse
//! the same malformed heaps; a kernels' heap emptied of blocks of one size
//! serves a heap's worth of another.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use proptest::prelude::*;
use tandem_device_kernels::names;
use tandem_hal::{Dim3, GpuApi, GpuDevice, KernelArg};
use tandem_shm_core::layout::{AllocatorId, SizeClassHeader};
use tandem_shm_core::{block_size, HEAP_ALIGN};
use tandem_shm_core::{AllocError, ArenaAllocator, ShmPtr, SizeClassAllocator};

use super::harness::{check, Gpu, Shared};

/// `tandem::size_class_status` values.
mod status {
    pub const OK: u64 = 0;
    pub const ZERO_SIZE: u64 = 1;
    pub const BAD_ALIGNMENT: u64 = 2;
    pub const TOO_LARGE: u64 = 3;
    pub const EXHAUSTED: u64 = 4;
    pub const REGION_TOO_SMALL: u64 = 5;
    pub const BAD_REGION_BASE: u64 = 6;
    pub const BAD_MAGIC: u64 = 7;
    pub const CORRUPT_HEADER: u64 = 8;
    pub const CORRUPT_FREE_LIST: u64 = 9;
    pub const NOT_OWNED: u64 = 10;
    pub const DOUBLE_FREE: u64 = 11;
    pub const WRONG_ALLOCATOR: u64 = 12;
}

/// `tandem::SizeClassCache::BIN_CAPACITY`.
const BIN_CAPACITY: usize = 16;
/// `STRESS_SLOTS` of kernels/size_class.cu: live allocations per thread.
const STRESS_SLOTS: usize = 4;

const ID: AllocatorId = AllocatorId::new(6, 2);

/// What an operation returned, as the kernels report it: size_class_status
/// and `SizeClassResult::off`.
type Outcome = (u64, u64);

/// The outcome the C++ side reports for what Rust returned.
fn outcome(r: Result<u64, AllocError>) -> Outcome {
    use AllocError as E;
    match r {
        Ok(off) => (status::OK, off),
        Err(E::ZeroSize) => (status::ZERO_SIZE, 0),
        Err(E::BadAlignment(_)) => (status::BAD_ALIGNMENT, 0),
        Err(E::TooLarge { .. }) => (status::TOO_LARGE, 0),
        Err(E::Exhausted { .. }) => (status::EXHAUSTED, 0),
        Err(E::RegionTooSmall { .. }) => (status::REGION_TOO_SMALL, 0),
        Err(E::BadRegionBase { .. }) => (status::BAD_REGION_BASE, 0),
        Err(E::BadMagic { .. }) => (status::BAD_MAGIC, 0),
        Err(E::CorruptHeader) => (status::CORRUPT_HEADER, 0),
        Err(E::CorruptFreeList { off, .. }) => (status::CORRUPT_FREE_LIST, off),
        Err(E::NotOwned { off }) => (status::NOT_OWNED, off),
        Err(E::DoubleFree { off }) => (status::DOUBLE_FREE, off),
        Err(E::WrongAllocator { .. }) => (status::WRONG_ALLOCATOR, 0),
        Err(E::NullAllocatorId) => panic!("no operation here can meet a null allocator id"),
    }
}

/// Initialises an allocator in `mem` from Rust.
fn rust_init<A: GpuApi>(mem: &Shared<A>) -> SizeClassAllocator<'_> {
    // SAFETY: the memory is ours, pinned (page-aligned), and used only through
    // allocator handles, the size-class kernels and the allocations they hand
    // out.
    unsafe { SizeClassAllocator::init_in(mem.host(), mem.len(), ID) }.expect("allocator init")
}

/// Rust's `attach` on the `len` bytes at `mem` + `offset`.
fn rust_attach<A: GpuApi>(
    mem: &Shared<A>,
    offset: usize,
    len: usize,
) -> Result<SizeClassAllocator<'_>, AllocError> {
    assert!(offset + len <= mem.len(), "the region lies in the memory");
    // SAFETY: as in `rust_init`, for the `len` bytes at `offset`, which lie
    // in `mem`.
    unsafe { SizeClassAllocator::attach(mem.host().add(offset), len) }
}

/// `tandem_size_class_allocate` on one thread, on the heap at `mem` +
/// `offset` with a region of `len` bytes.
fn cpp_allocate_at<A: GpuApi>(
    gpu: &Gpu<A>,
    mem: &Shared<A>,
    (offset, len): (usize, usize),
    size: u64,
    align: u64,
) -> Outcome {
    let result = gpu.shared(2 * 8);
    // SAFETY: the header lies in `mem`; the kernel touches the heap only
    // after attaching, which checks the header against `len`, and `len` is
    // `mem`'s length unless a test expects the attach to refuse it.
    unsafe {
        gpu.run_one(
            names::TANDEM_SIZE_CLASS_ALLOCATE,
            &[
                mem.arg_at(offset),
                KernelArg::U64(len as u64),
                KernelArg::U64(size),
                KernelArg::U64(align),
                result.arg(),
            ],
        )
    };
    (result.read(0), result.read(1))
}

fn cpp_allocate<A: GpuApi>(gpu: &Gpu<A>, mem: &Shared<A>, size: u64, align: u64) -> Outcome {
    cpp_allocate_at(gpu, mem, (0, mem.len()), size, align)
}

/// `tandem_size_class_free` of `ptr` on `threads` threads at once: one
/// outcome per thread.
fn cpp_free_racing<A: GpuApi>(
    gpu: &Gpu<A>,
    mem: &Shared<A>,
    ptr: ShmPtr<u8>,
    (grid, block): (Dim3, Dim3),
) -> Vec<Outcome> {
    let threads = (grid.count().expect("grid") * block.count().expect("block")) as usize;
    let result = gpu.shared(2 * 8 * threads);
    let stream = gpu.stream();
    // SAFETY: `mem` holds an initialised heap of its length, `result` two
    // words per thread; synchronised below.
    unsafe {
        gpu.launch(
            &stream,
            names::TANDEM_SIZE_CLASS_FREE,
            grid,
            block,
            &[
                mem.arg(),
                KernelArg::U64(mem.len() as u64),
                KernelArg::U32(ptr.alloc_id.major),
                KernelArg::U32(ptr.alloc_id.minor),
                KernelArg::U64(ptr.off),
                result.arg(),
            ],
        )
    };
    gpu.sync(&stream);
    (0..threads)
        .map(|t| (result.read(2 * t), result.read(2 * t + 1)))
        .collect()
}

fn cpp_free<A: GpuApi>(gpu: &Gpu<A>, mem: &Shared<A>, ptr: ShmPtr<u8>) -> Outcome {
    let one = (Dim3::linear(1), Dim3::linear(1));
    cpp_free_racing(gpu, mem, ptr, one)[0]
}

/// One operation of a generated sequence.
#[derive(Clone, Copy, Debug)]
enum Op {
    Allocate {
        size: u64,
        align: u64,
    },
    /// Frees the live allocation this picks (modulo their number), or a wild
    /// offset when none is live.
    Free(usize),
    /// Frees an already freed pointer again (same choice rule).
    FreeAgain(usize),
    /// Frees an arbitrary offset.
    FreeWild(u64),
    /// Frees a live allocation's offset under another allocator's id.
    FreeForeign(usize),
}

/// Sequences of (operation, run it in C++) over a heap small enough to run
/// out, mixing sizes of every magnitude and every kind of alignment.
fn op_sequences() -> impl Strategy<Value = Vec<(Op, bool)>> {
    let size = prop_oneof![
        6 => 1u64..=48,
        4 => 49u64..=700,
        2 => 701u64..=6000,
        1 => Just(0u64),
        1 => Just(u64::MAX),
    ];
    let align = prop_oneof![
        Just(1u64),
        Just(8),
        Just(16),
        Just(32),
        Just(64),
        Just(256),
        Just(4096),
        Just(8192),
        Just(12),
    ];
    let op = prop_oneof![
        6 => (size, align).prop_map(|(size, align)| Op::Allocate { size, align }),
        5 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::FreeAgain),
        1 => (0u64..(MIXED_REGION as u64 / 16 + 4)).prop_map(|k| Op::FreeWild(k * 16)),
        1 => any::<u64>().prop_map(Op::FreeWild),
        1 => any::<usize>().prop_map(Op::FreeForeign),
    ];
    proptest::collection::vec((op, any::<bool>()), 1..64)
}

/// Bytes of each heap of a mixed-sequence run: small, so that sequences run
/// out of memory.
const MIXED_REGION: usize = 32 * 1024;

/// What a `Free`-like op frees: picks from `from` (modulo), or a wild offset
/// past every block when it is empty.
fn pick(from: &[u64], i: usize) -> u64 {
    if from.is_empty() {
        MIXED_REGION as u64 - 16
    } else {
        from[i % from.len()]
    }
}

/// Random operation sequences split between Rust and C++ leave exactly the
/// heap an all-Rust run leaves.
pub fn mixed_rust_and_cpp_sequences_match_all_rust<A: GpuApi>(gpu: &Gpu<A>) {
    check(file!(), 24, op_sequences(), |ops| {
        mixed_sequence_matches_all_rust(gpu, &ops)
    });
}

/// Applies `ops` to a heap, each in C++ or Rust as it says, and to an
/// all-Rust reference heap: every outcome and, at the end, every byte of the
/// two regions agree.
fn mixed_sequence_matches_all_rust<A: GpuApi>(
    gpu: &Gpu<A>,
    ops: &[(Op, bool)],
) -> Result<(), TestCaseError> {
    let mixed_mem = gpu.shared(MIXED_REGION);
    let reference_mem = gpu.shared(MIXED_REGION);
    let mixed = rust_init(&mixed_mem);
    let reference = rust_init(&reference_mem);
    let foreign = AllocatorId::new(ID.major, ID.minor + 1);
    let mut live: Vec<u64> = Vec::new();
    let mut freed: Vec<u64> = Vec::new();
    for (i, &(op, in_cpp)) in ops.iter().enumerate() {
        let (want, got) = match op {
            Op::Allocate { size, align } => (
                outcome(reference.allocate(size, align).map(|p| p.off)),
                if in_cpp {
                    cpp_allocate(gpu, &mixed_mem, size, align)
                } else {
                    outcome(mixed.allocate(size, align).map(|p| p.off))
                },
            ),
            Op::Free(_) | Op::FreeAgain(_) | Op::FreeWild(_) | Op::FreeForeign(_) => {
                let ptr = match op {
                    Op::Free(k) => ShmPtr::new(ID, pick(&live, k)),
                    Op::FreeAgain(k) => ShmPtr::new(ID, pick(&freed, k)),
                    Op::FreeForeign(k) => ShmPtr::new(foreign, pick(&live, k)),
                    Op::FreeWild(off) => ShmPtr::new(ID, off),
                    Op::Allocate { .. } => unreachable!("matched above"),
                };
                let want = outcome(reference.free(ptr).map(|()| ptr.off));
                let got = if in_cpp {
                    cpp_free(gpu, &mixed_mem, ptr)
                } else {
                    outcome(mixed.free(ptr).map(|()| ptr.off))
                };
                (want, got)
            }
        };
        prop_assert_eq!(got, want, "op {} {:?} (in C++: {})", i, op, in_cpp);
        if want.0 == status::OK {
            if let Op::Allocate { .. } = op {
                live.push(want.1);
            } else {
                live.retain(|&off| off != want.1);
                freed.push(want.1);
            }
        }
    }
    let (got, want) = (mixed_mem.bytes(), reference_mem.bytes());
    let first_difference = got.iter().zip(&want).position(|(g, w)| g != w);
    prop_assert_eq!(first_difference, None, "the regions' bytes differ");
    prop_assert_eq!(mixed.stats(), reference.stats());
    Ok(())
}

/// C++ allocates what Rust frees and the reverse; a block either side frees
/// is the one the other side allocates next; C++ refuses the frees Rust
/// refuses.
pub fn cpp_allocates_rust_frees_and_back<A: GpuApi>(gpu: &Gpu<A>) {
    let mem = gpu.shared(64 * 1024);
    let alloc = rust_init(&mem);
    let (st, plain) = cpp_allocate(gpu, &mem, 100, 8);
    assert_eq!(st, status::OK);
    let (st, aligned) = cpp_allocate(gpu, &mem, 100, 256);
    assert_eq!(st, status::OK);
    assert_eq!(aligned % 256, 0, "C++ honours the alignment");
    assert_eq!(alloc.free(ShmPtr::new(ID, plain)), Ok(()));
    assert_eq!(
        alloc.free(ShmPtr::new(ID, aligned - 256 + 16)),
        Err(AllocError::NotOwned {
            off: aligned - 256 + 16
        }),
        "the start of a block holding an aligned allocation is not one"
    );
    assert_eq!(alloc.free(ShmPtr::new(ID, aligned)), Ok(()));
    assert_eq!(
        cpp_allocate(gpu, &mem, 90, 16),
        (status::OK, plain),
        "C++ pops the block Rust freed"
    );

    let rust = alloc.allocate_full(500, 64).expect("Rust allocates");
    assert_eq!(cpp_free(gpu, &mem, rust.shm), (status::OK, rust.shm.off));
    assert_eq!(
        cpp_free(gpu, &mem, rust.shm),
        (status::DOUBLE_FREE, rust.shm.off)
    );
    assert_eq!(
        alloc.allocate(500, 64).map(|p| p.off),
        Ok(rust.shm.off),
        "Rust pops the block C++ freed"
    );
    assert_eq!(
        cpp_free(gpu, &mem, ShmPtr::new(AllocatorId::new(1, 1), plain)),
        (status::WRONG_ALLOCATOR, 0)
    );
    assert_eq!(
        cpp_free(gpu, &mem, ShmPtr::new(ID, plain + 16)),
        (status::NOT_OWNED, plain + 16)
    );
    assert_eq!(
        cpp_free(gpu, &mem, ShmPtr::new(ID, plain)),
        (status::OK, plain)
    );
}

/// `tandem_size_class_fill_and_free`: C++ allocates `size`-byte blocks until
/// the heap has none left (through a thread cache when `cached`), then frees
/// them all; returns how many it got.
fn cpp_fill_and_free<A: GpuApi>(gpu: &Gpu<A>, mem: &Shared<A>, size: u64, cached: bool) -> u64 {
    let capacity = mem.len() / 32;
    let offsets = gpu.shared(capacity * 8);
    let out = gpu.shared(3 * 8);
    // SAFETY: `mem` holds an initialised heap of its length, `offsets`
    // `capacity` words, `out` three.
    unsafe {
        gpu.run_one(
            names::TANDEM_SIZE_CLASS_FILL_AND_FREE,
            &[
                mem.arg(),
                KernelArg::U64(mem.len() as u64),
                KernelArg::U64(size),
                KernelArg::U32(cached.into()),
                offsets.arg(),
                KernelArg::U64(capacity as u64),
                out.arg(),
            ],
        )
    };
    assert_eq!(
        out.read::<u64>(1),
        status::EXHAUSTED,
        "ran until the heap was full"
    );
    assert_eq!(out.read::<u64>(2), 0, "every free succeeded");
    let count = out.read::<u64>(0);
    assert!(
        count < capacity as u64,
        "the heap ran out before the offsets"
    );
    count
}

/// A kernels' heap once filled with large blocks and emptied serves a heap's
/// worth of small ones, and the reverse, uncached and through a thread cache:
/// the C++ side splits and merges as Rust does, and Rust finds every byte
/// back on the lists.
pub fn a_heap_of_freed_blocks_of_one_size_serves_another<A: GpuApi>(gpu: &Gpu<A>) {
    const LEN: usize = 256 * 1024;
    let heap = (LEN as u64 - HEAP_ALIGN) / 4096 * 4096;
    for cached in [false, true] {
        let mem = gpu.shared(LEN);
        let alloc = rust_init(&mem);
        for (first, then) in [(60_000, 100), (100, 60_000), (2000, 30_000), (30_000, 2000)] {
            for size in [first, then] {
                let class = SizeClassAllocator::class_for(size, 16).expect("class");
                let got = cpp_fill_and_free(gpu, &mem, size, cached);
                assert_eq!(
                    got,
                    heap / block_size(class),
                    "cached {cached}, {first} then {then} bytes: every naturally aligned block"
                );
                let stats = alloc.stats().expect("the lists are sound");
                assert_eq!(stats.free_bytes(), stats.carved_bytes, "every byte back");
            }
        }
    }
}

/// `tandem_size_class_cache_cycle`: allocates `count` blocks of `size` through
/// a cache, frees them, allocates and frees again, double-frees the first of
/// the second round, and flushes if asked. Returns the two rounds' offsets.
fn cpp_cache_cycle<A: GpuApi>(
    gpu: &Gpu<A>,
    mem: &Shared<A>,
    size: u64,
    count: usize,
    flush: bool,
) -> (Vec<u64>, Vec<u64>) {
    let out = gpu.shared((2 * count + 2) * 8);
    // SAFETY: `mem` holds an initialised heap of its length, `out` 2 count + 2
    // words.
    unsafe {
        gpu.run_one(
            names::TANDEM_SIZE_CLASS_CACHE_CYCLE,
            &[
                mem.arg(),
                KernelArg::U64(mem.len() as u64),
                KernelArg::U64(size),
                KernelArg::U64(8),
                KernelArg::U64(count as u64),
                KernelArg::U32(flush.into()),
                out.arg(),
            ],
        )
    };
    assert_eq!(out.read::<u64>(2 * count), status::OK, "the cycle ran");
    assert_eq!(
        out.read::<u64>(2 * count + 1),
        status::DOUBLE_FREE,
        "a cached block is free: freeing it again is refused"
    );
    let first = (0..count).map(|i| out.read(i)).collect();
    let second = (count..2 * count).map(|i| out.read(i)).collect();
    (first, second)
}

/// A thread's cache serves its own frees back (last in, first out), sends
/// frees beyond its bin's capacity to the shared list, and hides its blocks
/// from Rust until flushed; after a flush every block is back on the lists.
pub fn cache_serves_own_frees_until_flushed<A: GpuApi>(gpu: &Gpu<A>) {
    let size = 40; // a 64-byte block (class 1)
    let block = block_size(1);

    let mem = gpu.shared(64 * 1024);
    let alloc = rust_init(&mem);
    let (first, second) = cpp_cache_cycle(gpu, &mem, size, 4, false);
    assert_eq!(
        second,
        first.iter().rev().copied().collect::<Vec<_>>(),
        "the cache hands back the last block freed first"
    );
    let stats = alloc.stats().expect("the lists are sound");
    assert_eq!(
        stats.carved_bytes - stats.free_bytes(),
        4 * block,
        "blocks in an unflushed cache are on no list"
    );
    assert_eq!(
        alloc.free(ShmPtr::new(ID, first[0])),
        Err(AllocError::DoubleFree { off: first[0] }),
        "Rust refuses to free a cached block"
    );
    let fresh = alloc.allocate(size, 8).expect("Rust allocates").off;
    assert!(!first.contains(&fresh), "cached blocks are not handed out");

    let count = BIN_CAPACITY + 4;
    let mem = gpu.shared(64 * 1024);
    let alloc = rust_init(&mem);
    let (first, second) = cpp_cache_cycle(gpu, &mem, size, count, true);
    // The bin took the first BIN_CAPACITY frees, the list the rest; both are
    // stacks.
    let want: Vec<u64> = first[..BIN_CAPACITY]
        .iter()
        .rev()
        .chain(first[BIN_CAPACITY..].iter().rev())
        .copied()
        .collect();
    assert_eq!(second, want);
    let stats = alloc.stats().expect("the lists are sound");
    assert_eq!(
        stats.free_bytes(),
        stats.carved_bytes,
        "a flush puts every block back"
    );
    assert_eq!(stats.carved_bytes, count as u64 * block);
    let again: HashSet<u64> = (0..count)
        .map(|_| alloc.allocate(size, 8).expect("Rust allocates").off)
        .collect();
    assert_eq!(
        again,
        first.iter().copied().collect(),
        "Rust reuses every flushed block"
    );
}

/// Every thread of a kernel frees one block Rust allocated, all at once:
/// exactly one succeeds, the others report a double free, and the block is
/// on its list once.
pub fn racing_frees_have_one_winner<A: GpuApi>(gpu: &Gpu<A>) {
    let launch = gpu.at_scale(
        (Dim3::linear(2), Dim3::new(16, 2, 1)),
        (Dim3::linear(8), Dim3::linear(256)),
    );
    let mem = gpu.shared(64 * 1024);
    let alloc = rust_init(&mem);
    for (size, align) in [(24, 8), (300, 128)] {
        let p = alloc.allocate(size, align).expect("Rust allocates").off;
        let outcomes = cpp_free_racing(gpu, &mem, ShmPtr::new(ID, p), launch);
        let won = outcomes.iter().filter(|o| **o == (status::OK, p)).count();
        let lost = outcomes
            .iter()
            .filter(|o| **o == (status::DOUBLE_FREE, p))
            .count();
        assert_eq!((won, lost), (1, outcomes.len() - 1), "{outcomes:?}");
    }
    let stats = alloc.stats().expect("the lists are sound");
    assert_eq!(stats.free_bytes(), stats.carved_bytes);
}

/// A tag pattern a Rust stress thread fills its allocations with (kernel
/// threads use their global rank; Rust threads use ranks above every
/// kernel thread's).
fn tag(owner: u64, round: u64) -> u64 {
    owner << 32 | (round & 0xFFFF_FFFF)
}

/// A live allocation of a Rust stress thread: its words, how many, the tag
/// they hold, the pointer to free.
type Held = (*mut u64, u64, u64, ShmPtr<u8>);

/// One Rust thread of the stress test: the kernel's schedule (STRESS_SLOTS
/// live allocations, checked before they are freed) with its own sizes, for
/// at least `rounds` rounds and until `done` is raised. Returns (failed
/// allocations, overwritten allocations, failed frees).
fn rust_stress(
    alloc: SizeClassAllocator<'_>,
    owner: u64,
    rounds: u64,
    done: &AtomicBool,
) -> [u64; 3] {
    let mut counts = [0; 3];
    let mut live: [Option<Held>; STRESS_SLOTS] = [None; STRESS_SLOTS];
    let release = |slot: &mut Option<Held>, counts: &mut [u64; 3]| {
        if let Some((data, words, tag, ptr)) = slot.take() {
            // SAFETY: the allocation is ours and `words` u64s long; volatile
            // because a faulty allocator could hand the bytes to a kernel
            // thread at the same time, which is what this checks.
            let intact = (0..words).all(|w| unsafe { data.add(w as usize).read_volatile() } == tag);
            counts[1] += u64::from(!intact);
            counts[2] += u64::from(alloc.free(ptr).is_err());
        }
    };
    // Relaxed: a stop signal only; the results travel through the join.
    for i in (0..).take_while(|&i| i < rounds || !done.load(Ordering::Relaxed)) {
        let slot = &mut live[i as usize % STRESS_SLOTS];
        release(slot, &mut counts);
        let size = 8 * (1 + (owner * 5 + i * 11) % 64);
        let align = if i % 3 == 0 { 32 } else { 16 };
        let Ok(p) = alloc.allocate_full(size, align) else {
            counts[0] += 1;
            continue;
        };
        let data = p.ptr.cast::<u64>();
        for w in 0..size / 8 {
            // SAFETY: the allocation is ours and `size` bytes long.
            unsafe { data.add(w as usize).write_volatile(tag(owner, i)) };
        }
        *slot = Some((data, size / 8, tag(owner, i), p.shm));
    }
    for slot in &mut live {
        release(slot, &mut counts);
    }
    counts
}

/// C++ and Rust threads allocate and free at once, with and without thread
/// caches, over a 1D and a 3D launch: allocations never overlap and nothing
/// is lost.
pub fn cpp_and_rust_threads_at_once_overlap_and_lose_nothing<A: GpuApi>(gpu: &Gpu<A>) {
    // (launch, rounds, Rust threads, thread caches). On a GPU every list
    // operation is a compare-and-swap across PCIe, and all contenders of a
    // word share the few the link completes: 256 threads on the shared lists
    // alone, 2 K through thread caches (which reach the lists on refills and
    // overflows only); the last run has a partial last warp and a 3D block.
    let runs = gpu.at_scale(
        [
            ((Dim3::linear(3), Dim3::linear(8)), 2000, 2, false),
            ((Dim3::linear(3), Dim3::linear(8)), 2000, 2, true),
            ((Dim3::new(2, 2, 1), Dim3::new(2, 2, 2)), 1000, 1, true),
        ],
        [
            ((Dim3::linear(4), Dim3::linear(64)), 64, 4, false),
            ((Dim3::linear(16), Dim3::linear(128)), 256, 4, true),
            ((Dim3::linear(5), Dim3::new(7, 3, 2)), 256, 2, true),
        ],
    );
    for (launch, rounds, rust_threads, cached) in runs {
        cpp_and_rust_threads_at_once(gpu, launch, rounds, rust_threads, cached);
    }
}

/// A kernel of `grid` x `block` threads (tandem_size_class_stress, through
/// thread caches with `cached`) and `rust_threads` Rust threads allocate,
/// fill, check and free on one heap at once: `rounds` rounds each, the Rust
/// threads going on until the kernel has finished. On a device whose RMWs on
/// host memory are not atomic with respect to the CPU's (no host-native
/// atomics: CUDA on x86 over PCIe), GPU and CPU must not share the heap's
/// words at the same time, so the Rust threads run right after the kernel
/// instead, and say so; the kernel threads still race each other. Halfway
/// through, each kernel thread frees a block Rust allocated for it before the
/// launch; afterwards Rust frees what the kernel left allocated. No
/// allocation is found overwritten, nothing fails, and at the end every
/// carved byte is back on a free list.
fn cpp_and_rust_threads_at_once<A: GpuApi>(
    gpu: &Gpu<A>,
    (grid, block): (Dim3, Dim3),
    rounds: u64,
    rust_threads: u64,
    cached: bool,
) {
    let threads = grid.count().expect("grid") * block.count().expect("block");
    // Per thread at most STRESS_SLOTS blocks of each of the six classes its
    // sizes fall in (a cache refills a class only when all its blocks of
    // that class are live), plus its block to free.
    let per_thread = STRESS_SLOTS as u64 * (block_size(6) - block_size(0)) + block_size(1);
    // Twice that: carving a block may skip as many bytes of padding, which
    // become blocks of other classes.
    let len = HEAP_ALIGN + 2 * (threads + rust_threads) * per_thread + (1 << 20);
    let mem = gpu.shared(len as usize);
    let alloc = rust_init(&mem);
    let to_free = gpu.shared(threads as usize * 8);
    let left = gpu.shared(threads as usize * STRESS_SLOTS * 8);
    let stats = gpu.shared(4 * 8);
    for t in 0..threads as usize {
        let p = alloc.allocate(24, 8).expect("Rust allocates");
        // SAFETY: `to_free` holds `threads` u64s; no kernel runs yet.
        unsafe { to_free.host().cast::<u64>().add(t).write(p.off) };
    }
    let stream = gpu.stream();
    // SAFETY: the heap, `to_free`, `left` and `stats` outlive the kernel
    // (synchronised below) and are as long as it reads and writes.
    unsafe {
        gpu.launch(
            &stream,
            names::TANDEM_SIZE_CLASS_STRESS,
            grid,
            block,
            &[
                mem.arg(),
                KernelArg::U64(len),
                KernelArg::U64(rounds),
                KernelArg::U32(cached.into()),
                to_free.arg(),
                left.arg(),
                stats.arg(),
            ],
        )
    };
    let together = gpu
        .device
        .properties()
        .expect("device properties")
        .host_native_atomics;
    if !together {
        gpu.sync(&stream);
        println!(
            "size_class stress: the device's atomics on host memory are not atomic with respect \
             to the CPU's (no host-native atomics): Rust threads run after the kernel, not during it"
        );
    }
    let done = AtomicBool::new(!together);
    let rust_counts: Vec<[u64; 3]> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..rust_threads)
            .map(|t| {
                let done = &done;
                s.spawn(move || rust_stress(alloc, threads + t, rounds, done))
            })
            .collect();
        if together {
            gpu.sync(&stream);
            done.store(true, Ordering::Relaxed);
        }
        workers
            .into_iter()
            .map(|w| w.join().expect("Rust stress thread"))
            .collect()
    });
    let cpp_counts = [0, 1, 2, 3].map(|i| stats.read::<u64>(i));
    assert_eq!(
        cpp_counts, [0; 4],
        "C++: failed allocs, overwritten, failed frees, attaches"
    );
    for counts in rust_counts {
        assert_eq!(
            counts, [0; 3],
            "Rust: failed allocs, overwritten, failed frees"
        );
    }
    free_what_the_kernel_left(&mem, alloc, &left, threads);
}

/// Frees what the kernel's `threads` threads left allocated in `mem`
/// (`left`: STRESS_SLOTS offsets a thread, `u64::MAX` for none), each found
/// intact, then finds every byte `alloc` carved back on a free list.
fn free_what_the_kernel_left<A: GpuApi>(
    mem: &Shared<A>,
    alloc: SizeClassAllocator<'_>,
    left: &Shared<A>,
    threads: u64,
) {
    for i in 0..threads as usize * STRESS_SLOTS {
        let off = left.read::<u64>(i);
        if off == u64::MAX {
            continue;
        }
        // SAFETY: the kernel left this allocation, inside the heap, to us;
        // it holds at least one word, tagged with the owner's rank in the
        // high half.
        let first = unsafe { mem.host().add(off as usize).cast::<u64>().read_volatile() };
        assert_eq!(
            first >> 32,
            (i / STRESS_SLOTS) as u64,
            "left allocation {i} intact"
        );
        assert_eq!(alloc.free(ShmPtr::new(ID, off)), Ok(()));
    }
    let stats = alloc.stats().expect("the lists are sound");
    assert_eq!(
        stats.free_bytes(),
        stats.carved_bytes,
        "every block is back on a free list"
    );
}

/// The C++ attach refuses what Rust's refuses, with the matching status, and
/// a corrupt free list is reported by both the same way.
pub fn malformed_heaps_are_refused_like_rust_refuses_them<A: GpuApi>(gpu: &Gpu<A>) {
    let len = 64 * 1024;
    let check = |mem: &Shared<A>, offset: usize, len: usize, want: u64| {
        let rust =
            outcome(rust_attach(mem, offset, len).and_then(|a| a.allocate(8, 8).map(|p| p.off)));
        let cpp = cpp_allocate_at(gpu, mem, (offset, len), 8, 8);
        assert_eq!(cpp, rust, "C++ and Rust on +{offset}, {len} bytes");
        assert_eq!(cpp.0, want, "+{offset}, {len} bytes");
    };
    let zeroed = gpu.shared(len);
    check(&zeroed, 0, len, status::BAD_MAGIC);

    let mem = gpu.shared(len);
    rust_init(&mem);
    check(&mem, 0, len - 1, status::REGION_TOO_SMALL);
    check(
        &mem,
        0,
        size_of::<SizeClassHeader>() - 1,
        status::REGION_TOO_SMALL,
    );
    check(&mem, 8, len - 8, status::BAD_REGION_BASE);

    let arena = gpu.shared(len);
    // SAFETY: `arena` is ours, page-aligned and `len` bytes long.
    unsafe { ArenaAllocator::init_in(arena.host(), len, ID) }.expect("arena init");
    check(&arena, 0, len, status::BAD_MAGIC);

    let corrupt = gpu.shared(len);
    rust_init(&corrupt);
    let header = corrupt.host().cast::<SizeClassHeader>();
    // SAFETY: no handle or kernel uses the header now; plain fields, written
    // as a scribbling peer would.
    unsafe { (*header).heap_begin += 16 };
    check(&corrupt, 0, len, status::CORRUPT_HEADER);

    let bad_list = gpu.shared(len);
    rust_init(&bad_list);
    let header = bad_list.host().cast::<SizeClassHeader>();
    // The class-3 head names an offset that is no class-3 block (offset / 16
    // in the low bits, tag 0).
    let bogus = HEAP_ALIGN + 16;
    // SAFETY: as above; the head is an atomic, written through it.
    unsafe { &(*header).free_lists[3].head }.store(bogus >> 4, Ordering::Relaxed);
    let cpp = cpp_allocate(gpu, &bad_list, 200, 8);
    assert_eq!(cpp, (status::CORRUPT_FREE_LIST, bogus));
    let rust = rust_attach(&bad_list, 0, len).expect("attach");
    assert_eq!(outcome(rust.allocate(200, 8).map(|p| p.off)), cpp);
    // Requests refused before the heap is touched agree too.
    for (size, align, want) in [
        (0, 8, status::ZERO_SIZE),
        (8, 3, status::BAD_ALIGNMENT),
        (8, 8192, status::BAD_ALIGNMENT),
        (u64::MAX - 8, 8, status::TOO_LARGE),
        (block_size(23), 8, status::TOO_LARGE),
        (len as u64, 8, status::EXHAUSTED),
    ] {
        let cpp = cpp_allocate(gpu, &mem, size, align);
        assert_eq!(cpp.0, want, "{size} bytes aligned to {align}");
    }
}

/// One `#[test]` per behaviour above for backend `$api`, in a module
/// `size_class`.
#[doc(hidden)]
#[macro_export]
macro_rules! cross_language_size_class_tests {
    ($api:ty) => {
        mod size_class {
            $crate::stamp_cross_language_tests!($api, size_class: [
                mixed_rust_and_cpp_sequences_match_all_rust,
                cpp_allocates_rust_frees_and_back,
                cache_serves_own_frees_until_flushed,
                racing_frees_have_one_winner,
                cpp_and_rust_threads_at_once_overlap_and_lose_nothing,
                malformed_heaps_are_refused_like_rust_refuses_them,
                a_heap_of_freed_blocks_of_one_size_serves_another,
            ]);
        }
    };
}
