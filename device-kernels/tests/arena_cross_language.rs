//! tandem/arena.h against tandem-shm-core's ArenaAllocator on the same bytes:
//! random operation sequences split between Rust and C++ leave exactly the
//! state an all-Rust run leaves; concurrent Rust and C++ allocations never
//! overlap; per-block contexts hand out disjoint, usable buffers.

mod common;

use common::launch;
use proptest::prelude::*;
use tandem_device_kernels::names;
use tandem_hal::{Dim3, KernelArg};
use tandem_shm_core::layout::{AllocatorId, ThreadArena};
use tandem_shm_core::{AllocError, ArenaAllocator};

const REGION: usize = 1 << 14;

#[repr(C, align(4096))]
struct Region([u8; REGION]);

fn region() -> Box<Region> {
    Box::new(Region([0; REGION]))
}

fn init(r: &mut Region) -> ArenaAllocator<'_> {
    // SAFETY: the region is exclusively ours, 4096-aligned and REGION long;
    // it is used only through arena handles and the kernels below, which
    // access it the way the arena's algorithm prescribes.
    unsafe { ArenaAllocator::init_in(r.0.as_mut_ptr(), REGION, AllocatorId::new(3, 9)).unwrap() }
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

fn ptr_arg<T>(p: *mut T) -> KernelArg<'static> {
    KernelArg::Ptr(p as u64)
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Allocate { size: u64, align: u64 },
    Carve { size: u64 },
    ThreadAllocate { size: u64, align: u64 },
}

/// Runs `op` in Rust or, with `in_cpp`, through the C++ kernel on the arena
/// whose header is at `header` (unused for Rust), and the current sub-arena
/// `sub`.
fn apply(
    arena: &ArenaAllocator<'_>,
    header: *mut u8,
    sub: &mut Option<Box<ThreadArena>>,
    op: Op,
    in_cpp: bool,
) -> Outcome {
    let one = (Dim3::linear(1), Dim3::linear(1));
    let mut result = [u64::MAX; 2];
    match op {
        Op::Allocate { size, align } if in_cpp => {
            launch(
                names::TANDEM_ARENA_ALLOCATE,
                one.0,
                one.1,
                0,
                &[
                    ptr_arg(header),
                    KernelArg::U64(size),
                    KernelArg::U64(align),
                    ptr_arg(result.as_mut_ptr()),
                ],
            );
            (result[0], result[1])
        }
        Op::Allocate { size, align } => outcome(arena.allocate(size, align).map(|p| p.off)),
        Op::Carve { size } if in_cpp => {
            let mut carved = Box::new(ThreadArena {
                id: AllocatorId::NULL,
                cursor: 0,
                end: 0,
            });
            launch(
                names::TANDEM_ARENA_CARVE,
                one.0,
                one.1,
                0,
                &[
                    ptr_arg(header),
                    KernelArg::U64(size),
                    ptr_arg(&mut *carved),
                    ptr_arg(result.as_mut_ptr()),
                ],
            );
            if result[0] == 0 {
                let off = carved.cursor;
                *sub = Some(carved);
                (0, off)
            } else {
                (result[0], 0)
            }
        }
        Op::Carve { size } => outcome(arena.carve(size).map(|t| {
            let off = t.cursor;
            *sub = Some(Box::new(t));
            off
        })),
        Op::ThreadAllocate { size, align } => match sub {
            None => (u64::MAX, 0),
            Some(t) if in_cpp => {
                launch(
                    names::TANDEM_THREAD_ARENA_ALLOCATE,
                    one.0,
                    one.1,
                    0,
                    &[
                        ptr_arg(&mut **t),
                        KernelArg::U64(size),
                        KernelArg::U64(align),
                        ptr_arg(result.as_mut_ptr()),
                    ],
                );
                (result[0], result[1])
            }
            Some(t) => outcome(t.allocate(size, align).map(|p| p.off)),
        },
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn mixed_rust_and_cpp_sequences_match_all_rust(ops in proptest::collection::vec((op(), any::<bool>()), 1..40)) {
        let mut mixed_region = region();
        let mut rust_region = region();
        let header = mixed_region.0.as_mut_ptr();
        let mixed = init(&mut mixed_region);
        let rust = init(&mut rust_region);
        let (mut mixed_sub, mut rust_sub) = (None, None);
        for (i, &(op, in_cpp)) in ops.iter().enumerate() {
            let got = apply(&mixed, header, &mut mixed_sub, op, in_cpp);
            let want = apply(&rust, core::ptr::null_mut(), &mut rust_sub, op, false);
            prop_assert_eq!(got, want, "op {} {:?} (in C++: {})", i, op, in_cpp);
        }
        prop_assert_eq!(mixed.used(), rust.used());
        prop_assert_eq!(mixed_sub, rust_sub);
    }
}

#[test]
fn concurrent_rust_and_cpp_allocations_never_overlap() {
    let mut r = region();
    let header = r.0.as_mut_ptr();
    let arena = init(&mut r);
    let (grid, block) = (Dim3::new(2, 1, 2), Dim3::new(4, 2, 2));
    let threads = (grid.count().unwrap() * block.count().unwrap()) as usize;
    let mut result = vec![u64::MAX; 2 * threads];
    let result_ptr = result.as_mut_ptr() as u64;
    let mut ranges: Vec<(u64, u64)> = std::thread::scope(|s| {
        let rust_side = s.spawn(|| {
            (0..64)
                .filter_map(|_| arena.allocate(24, 8).ok())
                .map(|p| (p.off, p.off + 24))
                .collect::<Vec<_>>()
        });
        launch(
            names::TANDEM_ARENA_ALLOCATE,
            grid,
            block,
            0,
            &[
                KernelArg::Ptr(header as u64),
                KernelArg::U64(40),
                KernelArg::U64(16),
                KernelArg::Ptr(result_ptr),
            ],
        );
        rust_side.join().unwrap()
    });
    assert_eq!(
        ranges.len(),
        64,
        "the arena is large enough for every Rust request"
    );
    for pair in result.chunks_exact(2) {
        assert_eq!(pair[0], 0, "every C++ request fits");
        assert_eq!((header as u64 + pair[1]) % 16, 0, "address alignment");
        ranges.push((pair[1], pair[1] + 40));
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

#[test]
fn block_contexts_hand_out_disjoint_usable_buffers() {
    for (grid, block) in [
        (Dim3::linear(3), Dim3::linear(20)),
        (Dim3::new(2, 2, 1), Dim3::new(4, 5, 1)),
        (Dim3::new(1, 2, 2), Dim3::new(2, 2, 5)),
    ] {
        let mut r = region();
        let header = r.0.as_mut_ptr();
        let arena = init(&mut r);
        let per_block = block.count().unwrap();
        let threads = (grid.count().unwrap() * per_block) as usize;
        let (size, fit) = (32u64, 14u64); // each block's sub-arena holds 14 of its 20 threads' buffers
        let mut out = vec![0u64; threads];
        launch(
            names::TANDEM_BLOCK_ARENA_FILL,
            grid,
            block,
            0,
            &[
                KernelArg::Ptr(header as u64),
                KernelArg::U64(fit * size),
                KernelArg::U64(size),
                ptr_arg(out.as_mut_ptr()),
            ],
        );
        let mut served = vec![0u64; grid.count().unwrap() as usize];
        let mut ranges = Vec::new();
        for (rank, &off) in out.iter().enumerate() {
            if off == u64::MAX {
                continue;
            }
            served[rank / per_block as usize] += 1;
            // SAFETY: `off` came from the arena in `r`, `size` bytes, 8-aligned.
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
