//! tandem/arena.h against tandem-shm-core's `ArenaAllocator` on the same
//! bytes: random operation sequences split between Rust and C++ leave exactly
//! the state an all-Rust run leaves; concurrent Rust and C++ allocations never
//! overlap; per-block contexts hand out disjoint, usable buffers.

use proptest::prelude::*;
use tandem_device_kernels::names;
use tandem_hal::{Dim3, GpuApi, GpuDevice, KernelArg};
use tandem_shm_core::layout::{AllocatorId, ThreadArena};
use tandem_shm_core::{AllocError, ArenaAllocator};

use super::harness::{check, Gpu, Shared};

const REGION: usize = 1 << 14;

/// An arena over all of `mem`, initialised from Rust.
fn init<A: GpuApi>(mem: &Shared<A>) -> ArenaAllocator<'_> {
    // SAFETY: the memory is ours, pinned (page-aligned) and `mem.len()` bytes
    // long; it is used only through arena handles and the kernels below,
    // which access it the way the arena's algorithm prescribes.
    unsafe { ArenaAllocator::init_in(mem.host(), mem.len(), AllocatorId::new(3, 9)) }
        .expect("arena init")
}

/// What an operation returned: alloc_status and offset, as the kernels
/// report them.
type Outcome = (u64, u64);

fn outcome(r: Result<u64, AllocError>) -> Outcome {
    match r {
        Ok(off) => (0, off),
        Err(AllocError::ZeroSize) => (1, 0),
        Err(AllocError::BadAlignment(_)) => (2, 0),
        Err(AllocError::TooLarge { .. }) => (3, 0),
        Err(AllocError::Exhausted { .. }) => (4, 0),
        Err(other) => panic!("an arena allocation cannot fail with {other:?}"),
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Allocate { size: u64, align: u64 },
    Carve { size: u64 },
    ThreadAllocate { size: u64, align: u64 },
}

/// One run of a sequence: its arena, once carved its current sub-arena, and
/// the kernels' result words, in memory both sides address.
struct Run<'m, A: GpuApi> {
    mem: &'m Shared<A>,
    arena: ArenaAllocator<'m>,
    sub: Option<Shared<A>>,
    result: Shared<A>,
}

impl<'m, A: GpuApi> Run<'m, A> {
    fn new(gpu: &Gpu<A>, mem: &'m Shared<A>) -> Self {
        Self {
            mem,
            arena: init(mem),
            sub: None,
            result: gpu.shared(2 * 8),
        }
    }

    /// The current sub-arena, if one was carved (no kernel may be running).
    fn sub(&self) -> Option<ThreadArena> {
        self.sub.as_ref().map(|t| t.read::<ThreadArena>(0))
    }

    /// Runs `op` in Rust or, with `in_cpp`, through the C++ kernel.
    fn apply(&mut self, gpu: &Gpu<A>, op: Op, in_cpp: bool) -> Outcome {
        let result = &self.result;
        let cpp_result = || (result.read::<u64>(0), result.read::<u64>(1));
        match op {
            Op::Allocate { size, align } if in_cpp => {
                // SAFETY: `mem` holds the arena and `result` two words.
                unsafe {
                    gpu.run_one(
                        names::TANDEM_ARENA_ALLOCATE,
                        &[
                            self.mem.arg(),
                            KernelArg::U64(size),
                            KernelArg::U64(align),
                            result.arg(),
                        ],
                    )
                };
                cpp_result()
            }
            Op::Allocate { size, align } => {
                outcome(self.arena.allocate(size, align).map(|p| p.off))
            }
            Op::Carve { size } if in_cpp => {
                let carved = gpu.shared(size_of::<ThreadArena>());
                // SAFETY: `mem` holds the arena, `carved` one ThreadArena and
                // `result` two words.
                unsafe {
                    gpu.run_one(
                        names::TANDEM_ARENA_CARVE,
                        &[
                            self.mem.arg(),
                            KernelArg::U64(size),
                            carved.arg(),
                            result.arg(),
                        ],
                    )
                };
                let (status, _) = cpp_result();
                if status != 0 {
                    return (status, 0);
                }
                let off = carved.read::<ThreadArena>(0).cursor;
                self.sub = Some(carved);
                (0, off)
            }
            Op::Carve { size } => match self.arena.carve(size) {
                Ok(t) => {
                    let carved = gpu.shared(size_of::<ThreadArena>());
                    // SAFETY: fresh pinned memory (page-aligned) of one
                    // ThreadArena that nothing else uses yet.
                    unsafe { carved.host().cast::<ThreadArena>().write(t) };
                    self.sub = Some(carved);
                    (0, t.cursor)
                }
                Err(e) => outcome(Err(e)),
            },
            Op::ThreadAllocate { size, align } => match &self.sub {
                None => (u64::MAX, 0),
                Some(t) if in_cpp => {
                    // SAFETY: `t` holds one ThreadArena and `result` two
                    // words.
                    unsafe {
                        gpu.run_one(
                            names::TANDEM_THREAD_ARENA_ALLOCATE,
                            &[
                                t.arg(),
                                KernelArg::U64(size),
                                KernelArg::U64(align),
                                result.arg(),
                            ],
                        )
                    };
                    cpp_result()
                }
                Some(t) => {
                    // SAFETY: `t` holds an initialised ThreadArena, aligned
                    // (pinned memory is page-aligned); no kernel runs, and
                    // this is the only reference to it.
                    let t = unsafe { &mut *t.host().cast::<ThreadArena>() };
                    outcome(t.allocate(size, align).map(|p| p.off))
                }
            },
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    // Mostly valid requests; zero sizes, odd alignments and huge sizes too.
    let size = prop_oneof![8 => 1u64..700, 1 => Just(0u64), 1 => Just(u64::MAX / 2)];
    let align =
        prop_oneof![8 => (0u32..7).prop_map(|s| 1u64 << s), 1 => Just(0u64), 1 => Just(24u64)];
    prop_oneof![
        (size.clone(), align.clone()).prop_map(|(size, align)| Op::Allocate { size, align }),
        size.clone().prop_map(|size| Op::Carve { size }),
        (size, align).prop_map(|(size, align)| Op::ThreadAllocate { size, align }),
    ]
}

/// Random operation sequences split between Rust and C++ leave exactly the
/// arena and sub-arena an all-Rust run leaves.
pub fn mixed_rust_and_cpp_sequences_match_all_rust<A: GpuApi>(gpu: &Gpu<A>) {
    let sequences = proptest::collection::vec((op(), any::<bool>()), 1..40);
    check(file!(), 24, sequences, |ops| {
        let (mixed_mem, rust_mem) = (gpu.shared(REGION), gpu.shared(REGION));
        let (mut mixed, mut rust) = (Run::new(gpu, &mixed_mem), Run::new(gpu, &rust_mem));
        for (i, &(op, in_cpp)) in ops.iter().enumerate() {
            let got = mixed.apply(gpu, op, in_cpp);
            let want = rust.apply(gpu, op, false);
            prop_assert_eq!(got, want, "op {} {:?} (in C++: {})", i, op, in_cpp);
        }
        prop_assert_eq!(mixed.arena.used(), rust.arena.used());
        prop_assert_eq!(mixed.sub(), rust.sub());
        Ok(())
    });
}

/// Rust threads and a kernel allocate from one arena: no two allocations
/// overlap. On a device whose RMWs on host memory are not atomic with respect
/// to the CPU's (no host-native atomics), Rust allocates right after the
/// kernel instead of during it, and says so.
pub fn concurrent_rust_and_cpp_allocations_never_overlap<A: GpuApi>(gpu: &Gpu<A>) {
    let mem = gpu.shared(REGION);
    let header = mem.host();
    let arena = init(&mem);
    let (grid, block) = (Dim3::new(2, 1, 2), Dim3::new(4, 2, 2));
    let threads = (grid.count().unwrap() * block.count().unwrap()) as usize;
    let result = gpu.shared(2 * 8 * threads);
    let stream = gpu.stream();
    let rust_side = || {
        (0..64)
            .filter_map(|_| arena.allocate(24, 8).ok())
            .map(|p| (p.off, p.off + 24))
            .collect::<Vec<_>>()
    };
    let together = gpu
        .device
        .properties()
        .expect("device properties")
        .host_native_atomics;
    let mut ranges: Vec<(u64, u64)> = std::thread::scope(|s| {
        let during = together.then(|| s.spawn(rust_side));
        // SAFETY: `mem` holds the arena and `result` two words per thread;
        // both outlive the launch (synchronized below).
        unsafe {
            gpu.launch(
                &stream,
                names::TANDEM_ARENA_ALLOCATE,
                grid,
                block,
                &[
                    mem.arg(),
                    KernelArg::U64(40),
                    KernelArg::U64(16),
                    result.arg(),
                ],
            )
        };
        gpu.sync(&stream);
        match during {
            Some(side) => side.join().unwrap(),
            None => {
                println!(
                    "arena: the device's atomics on host memory are not atomic with respect \
                     to the CPU's (no host-native atomics): Rust allocates after the kernel"
                );
                rust_side()
            }
        }
    });
    assert_eq!(
        ranges.len(),
        64,
        "the arena is large enough for every Rust request"
    );
    for thread in 0..threads {
        let (status, off) = (
            result.read::<u64>(2 * thread),
            result.read::<u64>(2 * thread + 1),
        );
        assert_eq!(status, 0, "every C++ request fits");
        assert_eq!((header as u64 + off) % 16, 0, "address alignment");
        ranges.push((off, off + 40));
    }
    ranges.sort_unstable();
    assert!(
        ranges.windows(2).all(|w| w[0].1 <= w[1].0),
        "overlapping allocations: {ranges:?}"
    );
    assert!(
        ranges.last().unwrap().1 <= 128 + arena.used(),
        "every range lies below the cursor"
    );
}

/// Each block carves a sub-arena and its threads allocate from it: blocks
/// serve exactly what fits, buffers are disjoint and hold what their thread
/// wrote, and each block made one carve.
pub fn block_contexts_hand_out_disjoint_usable_buffers<A: GpuApi>(gpu: &Gpu<A>) {
    for (grid, block) in [
        (Dim3::linear(3), Dim3::linear(20)),
        (Dim3::new(2, 2, 1), Dim3::new(4, 5, 1)),
        (Dim3::new(1, 2, 2), Dim3::new(2, 2, 5)),
    ] {
        let mem = gpu.shared(REGION);
        let header = mem.host();
        let arena = init(&mem);
        let per_block = block.count().unwrap();
        let threads = (grid.count().unwrap() * per_block) as usize;
        let (size, fit) = (32u64, 14u64); // each block's sub-arena holds 14 of its 20 threads' buffers
        let out = gpu.shared(8 * threads);
        let stream = gpu.stream();
        // SAFETY: `mem` holds the arena and `out` one word per thread; both
        // outlive the launch (synchronized below).
        unsafe {
            gpu.launch(
                &stream,
                names::TANDEM_BLOCK_ARENA_FILL,
                grid,
                block,
                &[
                    mem.arg(),
                    KernelArg::U64(fit * size),
                    KernelArg::U64(size),
                    out.arg(),
                ],
            )
        };
        gpu.sync(&stream);
        let mut served = vec![0u64; grid.count().unwrap() as usize];
        let mut ranges = Vec::new();
        for rank in 0..threads {
            let off = out.read::<u64>(rank);
            if off == u64::MAX {
                continue;
            }
            served[rank / per_block as usize] += 1;
            // SAFETY: `off` came from the arena in `mem`, `size` bytes,
            // 8-aligned; the kernel has finished.
            let words =
                unsafe { core::slice::from_raw_parts(header.add(off as usize).cast::<u64>(), 4) };
            assert!(
                words.iter().all(|&w| w == rank as u64),
                "buffer of rank {rank} holds its rank"
            );
            ranges.push((off, off + size));
        }
        assert!(
            served.iter().all(|&n| n == fit),
            "each block serves exactly what fits: {served:?}"
        );
        ranges.sort_unstable();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0));
        assert_eq!(
            arena.used(),
            grid.count().unwrap() * fit * size,
            "one cache-line-aligned carve per block"
        );
    }
}

/// One `#[test]` per behaviour above for backend `$api`, in a module
/// `arena`.
#[doc(hidden)]
#[macro_export]
macro_rules! cross_language_arena_tests {
    ($api:ty) => {
        mod arena {
            $crate::stamp_cross_language_tests!($api, arena: [
                mixed_rust_and_cpp_sequences_match_all_rust,
                concurrent_rust_and_cpp_allocations_never_overlap,
                block_contexts_hand_out_disjoint_usable_buffers,
            ]);
        }
    };
}
