//! Every kernel on the CPU device against a CPU reference, launched through
//! the raw C ABI (tests/common), in 1D, 2D and 3D shapes.

mod common;

use common::launch;
use proptest::prelude::*;
use tandem_device_kernels::names;
use tandem_hal::{Dim3, KernelArg};

fn ptr<T>(v: &mut [T]) -> KernelArg<'static> {
    KernelArg::Ptr(v.as_mut_ptr() as u64)
}

/// (grid, block) shapes covering each dimensionality, ragged sizes and the
/// 1024-thread maximum.
fn shapes() -> Vec<(Dim3, Dim3)> {
    vec![
        (Dim3::linear(3), Dim3::linear(37)),
        (Dim3::new(2, 3, 1), Dim3::new(8, 4, 1)),
        (Dim3::new(2, 2, 2), Dim3::new(4, 3, 5)),
        (Dim3::linear(1), Dim3::linear(1024)),
        (Dim3::new(1, 2, 1), Dim3::new(16, 8, 8)),
    ]
}

fn grid_threads(grid: Dim3, block: Dim3) -> u64 {
    grid.count().unwrap() * block.count().unwrap()
}

/// What `tandem_block_sum_u32` must produce: block b sums the elements its
/// threads visit in a grid-stride loop, i.e. those with `(i % G) / B == b`.
fn block_sums(input: &[u32], grid: Dim3, block: Dim3) -> Vec<u32> {
    let threads = grid_threads(grid, block);
    let per_block = block.count().unwrap();
    let mut sums = vec![0u32; grid.count().unwrap() as usize];
    for (i, v) in input.iter().enumerate() {
        let b = (i as u64 % threads) / per_block;
        sums[b as usize] = sums[b as usize].wrapping_add(*v);
    }
    sums
}

/// Launches `name`, a kernel of (data, n, value), over the first `n` u32s of `data`.
fn launch_over_u32s(name: &str, grid: Dim3, block: Dim3, data: &mut [u32], n: usize, value: u32) {
    launch(
        name,
        grid,
        block,
        0,
        &[ptr(data), KernelArg::U64(n as u64), KernelArg::U32(value)],
    );
}

fn run_fill(grid: Dim3, block: Dim3, n: usize, value: u32) {
    const SENTINEL: u32 = 0xDEAD_BEEF;
    let mut data = vec![SENTINEL; n + 5];
    launch_over_u32s(names::TANDEM_FILL_U32, grid, block, &mut data, n, value);
    assert!(
        data[..n].iter().all(|&v| v == value),
        "every element below n is filled"
    );
    assert!(
        data[n..].iter().all(|&v| v == SENTINEL),
        "nothing at or past n is written"
    );
}

fn run_add(grid: Dim3, block: Dim3, n: usize, delta: u32) {
    let mut data: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let expected: Vec<u32> = data.iter().map(|v| v.wrapping_add(delta)).collect();
    launch_over_u32s(names::TANDEM_ADD_U32, grid, block, &mut data, n, delta);
    assert_eq!(data, expected);
}

fn run_block_sum(grid: Dim3, block: Dim3, input: &[u32]) {
    let mut input = input.to_vec();
    let mut out = vec![u32::MAX; grid.count().unwrap() as usize];
    let n = input.len() as u64;
    launch(
        names::TANDEM_BLOCK_SUM_U32,
        grid,
        block,
        0,
        &[ptr(&mut input), ptr(&mut out), KernelArg::U64(n)],
    );
    assert_eq!(out, block_sums(&input, grid, block));
}

#[test]
fn fill_every_shape() {
    for (grid, block) in shapes() {
        let threads = grid_threads(grid, block) as usize;
        for n in [0, 1, threads - 1, threads, 3 * threads + 7] {
            run_fill(grid, block, n, 0x1234_5678);
        }
    }
}

#[test]
fn add_every_shape_wraps() {
    for (grid, block) in shapes() {
        let threads = grid_threads(grid, block) as usize;
        run_add(grid, block, 2 * threads + 3, u32::MAX - 2);
    }
}

#[test]
fn block_sum_every_shape() {
    for (grid, block) in shapes() {
        let threads = grid_threads(grid, block) as usize;
        let input: Vec<u32> = (0..(2 * threads + 11) as u32)
            .map(|i| i.wrapping_mul(0x9E37_79B9))
            .collect();
        run_block_sum(grid, block, &input);
    }
}

#[test]
fn block_sum_leaves_idle_blocks_zero() {
    // Fewer elements than threads: most blocks see nothing and must write 0.
    run_block_sum(Dim3::new(2, 2, 1), Dim3::linear(64), &[7, 8, 9]);
}

#[test]
fn empty_runs() {
    launch(
        names::TANDEM_EMPTY,
        Dim3::new(2, 1, 2),
        Dim3::new(3, 2, 1),
        0,
        &[],
    );
}

fn check_tickets(owner: &[u64], threads: u64, per_thread: u32) {
    let mut taken = vec![0u32; threads as usize];
    for &o in owner {
        assert!(o < threads, "ticket owned by rank {o} of {threads}");
        taken[o as usize] += 1;
    }
    assert!(
        taken.iter().all(|&t| t == per_thread),
        "each thread owns exactly its tickets: {taken:?}"
    );
}

#[test]
fn tickets_u32_are_unique() {
    let (grid, block, per_thread) = (Dim3::new(2, 1, 2), Dim3::new(16, 2, 1), 40u32);
    let threads = grid_threads(grid, block);
    let total = threads * per_thread as u64;
    let mut counter = [5u32];
    let mut owner = vec![u64::MAX; total as usize + 5];
    launch(
        names::TANDEM_TICKETS_U32,
        grid,
        block,
        0,
        &[
            ptr(&mut counter),
            ptr(&mut owner),
            KernelArg::U32(per_thread),
        ],
    );
    assert_eq!(counter[0] as u64, 5 + total);
    assert!(
        owner[..5].iter().all(|&o| o == u64::MAX),
        "tickets below the start are never handed out"
    );
    check_tickets(&owner[5..], threads, per_thread);
}

#[test]
fn tickets_u64_are_unique() {
    let (grid, block, per_thread) = (Dim3::linear(3), Dim3::new(4, 4, 4), 25u32);
    let threads = grid_threads(grid, block);
    let total = threads * per_thread as u64;
    let mut counter = [0u64];
    let mut owner = vec![u64::MAX; total as usize];
    launch(
        names::TANDEM_TICKETS_U64,
        grid,
        block,
        0,
        &[
            ptr(&mut counter),
            ptr(&mut owner),
            KernelArg::U32(per_thread),
        ],
    );
    assert_eq!(counter[0], total);
    check_tickets(&owner, threads, per_thread);
}

fn dim(max: u32) -> impl Strategy<Value = Dim3> {
    (1..=max, 1..=max, 1..=max).prop_map(|(x, y, z)| Dim3::new(x, y, z))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn random_launches_match_reference(
        grid in dim(3),
        block in dim(4),
        input in proptest::collection::vec(any::<u32>(), 0..400),
        value in any::<u32>(),
    ) {
        run_fill(grid, block, input.len(), value);
        run_add(grid, block, input.len(), value);
        run_block_sum(grid, block, &input);
    }
}
