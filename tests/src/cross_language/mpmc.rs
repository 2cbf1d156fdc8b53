//! tandem/mpmc.h against tandem-shm-core's `MpmcRing` on the same bytes:
//! operation sequences split between Rust and C++ leave exactly the bytes an
//! all-Rust run leaves; C++ producers with Rust consumers (and the reverse)
//! lose and duplicate nothing; producers waiting on their tickets measure
//! their consumers' pace; both sides refuse the same malformed rings.

use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tandem_device_kernels::{names, DEVICE_TICKETS_BYTES, DEVICE_TICKETS_PACE_OFFSET};
use tandem_hal::{Dim3, GpuApi, GpuDevice, KernelArg};
use tandem_shm_core::layout::{RingHeader, RING_SLOTS_OFFSET};
use tandem_shm_core::{MpmcRing, SpscRing};

use super::harness::{check, DeviceWords, Gpu, Shared};

/// `tandem::ring_status` values the tests expect.
mod ring_status {
    pub const OK: u64 = 0;
    pub const MISALIGNED: u64 = 2;
    pub const REGION_TOO_SMALL: u64 = 3;
    pub const BAD_MAGIC: u64 = 4;
    pub const WRONG_KIND: u64 = 5;
    pub const CAPACITY_NOT_POWER_OF_TWO: u64 = 6;
    pub const ZERO_CAPACITY: u64 = 7;
    pub const ELEMENT_MISMATCH: u64 = 8;
}

/// One ring operation of a generated sequence.
#[derive(Clone, Copy, Debug)]
enum RingOp {
    Push(u64),
    Pop,
}

/// Sequences of (operation, run it in C++) biased towards filling the ring.
fn op_sequences() -> impl Strategy<Value = Vec<(RingOp, bool)>> {
    let op = prop_oneof![3 => any::<u64>().prop_map(RingOp::Push), 2 => Just(RingOp::Pop)];
    proptest::collection::vec((op, any::<bool>()), 1..48)
}

/// A ring of u64 with `capacity` slots in zeroed pinned memory.
fn ring_memory<A: GpuApi>(gpu: &Gpu<A>, capacity: u32) -> Shared<A> {
    gpu.shared(MpmcRing::<u64>::required_bytes(capacity))
}

/// The bytes of a ring that carry its state: the header's fields (not the
/// padding of its cache-line-sized atomics, which Rust's in-place
/// initialisation fills from its stack) and every slot.
fn state_bytes<A: GpuApi>(mem: &Shared<A>) -> Vec<u8> {
    let head = offset_of!(RingHeader, head);
    let tail = offset_of!(RingHeader, tail);
    let bytes = mem.bytes();
    [
        &bytes[..head],
        &bytes[head..head + 8],
        &bytes[tail..tail + 8],
        &bytes[RING_SLOTS_OFFSET..],
    ]
    .concat()
}

/// Initialises the ring in `mem` from Rust.
fn rust_init<A: GpuApi>(mem: &Shared<A>, capacity: u32) -> MpmcRing<'_, u64> {
    // SAFETY: the memory is ours, pinned (64-aligned), as long as the ring
    // needs, and used only through ring handles and the ring kernels.
    unsafe { MpmcRing::init_in(mem.host(), mem.len(), capacity) }.expect("ring init")
}

/// How `tandem_mpmc_push_u64` claims its tickets (tandem/mpmc.h
/// `claim_mode`).
#[derive(Clone, Copy, Debug)]
pub enum Claim {
    /// Probe first: a full ring is retried, a value given up after this many
    /// consecutive full rounds.
    Probe { max_full_retries: u64 },
    /// Claim at once: every push waits for its slot, however full the ring.
    Direct,
}

/// A u64 ring (initialised from Rust) in mapped pinned memory, with what
/// `tandem_mpmc_push_u64` needs beside it: its producers' device tickets and
/// the kernel's three failure counters. Used by this suite and the GPU ring
/// bench.
pub struct PushedRing<A: GpuApi> {
    mem: Shared<A>,
    tickets: DeviceWords<A>,
    stats: Shared<A>,
}

impl<A: GpuApi> PushedRing<A> {
    /// An empty ring of `capacity` slots.
    pub fn new(gpu: &Gpu<A>, capacity: u32) -> Self {
        let mem = ring_memory(gpu, capacity);
        rust_init(&mem, capacity);
        Self {
            mem,
            tickets: gpu.device_words(DEVICE_TICKETS_BYTES / 8),
            stats: gpu.shared(3 * 8),
        }
    }

    /// A Rust handle to the ring.
    pub fn ring(&self) -> MpmcRing<'_, u64> {
        // SAFETY: the memory holds the ring `new` initialised and lives as
        // long as the handle's borrow of `self`.
        unsafe { MpmcRing::attach(self.mem.host(), self.mem.len()) }.expect("ring attach")
    }

    /// Launches `tandem_mpmc_push_u64` on `stream`: `grid` x `block` threads
    /// push the values `base..base + count`, claiming as `claim` says.
    ///
    /// # Safety
    /// `self` must outlive the kernel: synchronize `stream` before dropping it.
    pub unsafe fn launch_push(
        &self,
        gpu: &Gpu<A>,
        stream: &<A::Device as GpuDevice>::Stream,
        (grid, block): (Dim3, Dim3),
        (base, count): (u64, u64),
        claim: Claim,
    ) {
        let (max_full_retries, direct) = match claim {
            Claim::Probe { max_full_retries } => (max_full_retries, 0),
            Claim::Direct => (0, 1),
        };
        // SAFETY: the ring, tickets and stats outlive the kernel (the caller's
        // contract).
        unsafe {
            gpu.launch(
                stream,
                names::TANDEM_MPMC_PUSH_U64,
                grid,
                block,
                &[
                    self.mem.arg(),
                    KernelArg::U64(self.mem.len() as u64),
                    self.tickets.arg(),
                    KernelArg::U64(count),
                    KernelArg::U64(base),
                    KernelArg::U64(max_full_retries),
                    KernelArg::U32(direct),
                    self.stats.arg(),
                ],
            )
        }
    }

    /// The producers' measure of the consumers' pace, in nanoseconds an item
    /// (0: none yet; no kernel may be running).
    pub fn consumers_pace(&self, gpu: &Gpu<A>) -> u32 {
        let bytes = self.tickets.bytes(gpu);
        let at = DEVICE_TICKETS_PACE_OFFSET;
        u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
    }

    /// Panics unless the last push (synchronized) attached the ring in every
    /// thread, gave no value up and met no foreign ticket.
    pub fn assert_no_failures(&self) {
        assert_eq!(self.stats.read::<u64>(1), 0, "every C++ thread attached");
        assert_eq!(self.stats.read::<u64>(0), 0, "no value given up");
        assert_eq!(self.stats.read::<u64>(2), 0, "no foreign ticket");
    }
}

/// Initialises the ring in `mem` with the C++ `mpmc_init`, and attaches Rust.
fn cpp_init<'m, A: GpuApi>(gpu: &Gpu<A>, mem: &'m Shared<A>, capacity: u32) -> MpmcRing<'m, u64> {
    let status = gpu.shared(8);
    // SAFETY: `mem` holds the ring's bytes and `status` one u32.
    unsafe {
        gpu.run_one(
            names::TANDEM_MPMC_INIT_U64,
            &[
                mem.arg(),
                KernelArg::U64(mem.len() as u64),
                KernelArg::U32(capacity),
                status.arg(),
            ],
        )
    };
    assert_eq!(status.read::<u32>(0), 0, "C++ init succeeds");
    // SAFETY: as in `rust_init`; the kernel's release store of the magic is
    // ordered before us by the stream synchronisation.
    unsafe { MpmcRing::attach(mem.host(), mem.len()) }.expect("Rust attaches to a C++ ring")
}

/// Runs `op` on the ring in `mem` through the C++ kernels. Returns what a
/// Rust `try_push` (`Some(v)` = given back) or `try_pop` returned, in one
/// shape: `(succeeded, value)`.
fn cpp_op<A: GpuApi>(gpu: &Gpu<A>, mem: &Shared<A>, result: &Shared<A>, op: RingOp) -> (bool, u64) {
    let len = KernelArg::U64(mem.len() as u64);
    // SAFETY: `mem` holds an initialised ring of `len` bytes, `result` three u64.
    unsafe {
        match op {
            RingOp::Push(v) => gpu.run_one(
                names::TANDEM_MPMC_TRY_PUSH_U64,
                &[mem.arg(), len, KernelArg::U64(v), result.arg()],
            ),
            RingOp::Pop => gpu.run_one(
                names::TANDEM_MPMC_TRY_POP_U64,
                &[mem.arg(), len, result.arg()],
            ),
        }
    }
    assert_eq!(
        result.read::<u64>(0),
        ring_status::OK,
        "C++ attaches to the ring"
    );
    let value = match op {
        RingOp::Push(v) => v,
        RingOp::Pop => result.read::<u64>(2),
    };
    (result.read::<u64>(1) == 1, value)
}

fn rust_op(ring: &MpmcRing<'_, u64>, op: RingOp) -> (bool, u64) {
    match op {
        RingOp::Push(v) => (ring.try_push(v).is_ok(), v),
        RingOp::Pop => ring.try_pop().map_or((false, 0), |v| (true, v)),
    }
}

/// Random operation sequences split between Rust and C++ on rings of 1 to 8
/// slots (initialised by either side) leave what an all-Rust run leaves.
pub fn mixed_rust_and_cpp_sequences_match_all_rust<A: GpuApi>(gpu: &Gpu<A>) {
    let runs = (
        op_sequences(),
        prop_oneof![Just(1u32), Just(2), Just(4), Just(8)],
        any::<bool>(),
    );
    check(file!(), 16, runs, |(ops, capacity, init_in_cpp)| {
        mixed_sequence_matches_all_rust(gpu, capacity, init_in_cpp, &ops)
    });
}

/// Applies `ops` to a ring of `capacity` slots, each in C++ or Rust as it
/// says, and to an all-Rust reference ring: every outcome and, at the end,
/// every byte of the two regions agree. With `init_in_cpp` the mixed ring is
/// initialised by the C++ `mpmc_init`.
fn mixed_sequence_matches_all_rust<A: GpuApi>(
    gpu: &Gpu<A>,
    capacity: u32,
    init_in_cpp: bool,
    ops: &[(RingOp, bool)],
) -> Result<(), TestCaseError> {
    let mixed_mem = ring_memory(gpu, capacity);
    let reference_mem = ring_memory(gpu, capacity);
    let result = gpu.shared(3 * 8);
    let mixed = if init_in_cpp {
        cpp_init(gpu, &mixed_mem, capacity)
    } else {
        rust_init(&mixed_mem, capacity)
    };
    let reference = rust_init(&reference_mem, capacity);
    prop_assert_eq!(
        state_bytes(&mixed_mem),
        state_bytes(&reference_mem),
        "initialised rings differ"
    );
    for (i, &(op, in_cpp)) in ops.iter().enumerate() {
        let got = if in_cpp {
            cpp_op(gpu, &mixed_mem, &result, op)
        } else {
            rust_op(&mixed, op)
        };
        let want = rust_op(&reference, op);
        prop_assert_eq!(got, want, "op {} {:?} (in C++: {})", i, op, in_cpp);
    }
    prop_assert_eq!(
        state_bytes(&mixed_mem),
        state_bytes(&reference_mem),
        "ring states differ"
    );
    Ok(())
}

/// Most consecutive full (empty) rounds a kernel thread waits before giving
/// a value up: far more than any test needs, so a give-up is a failure
/// report rather than a hang.
const MAX_RETRIES: u64 = 1 << 22;

/// C++ producers and Rust consumers lose and duplicate nothing, over a 1D and
/// a 3D launch (on a GPU: a million records from 16 K threads through 1024
/// slots; a partial last warp and a small ring).
pub fn cpp_producers_rust_consumers_lose_and_duplicate_nothing<A: GpuApi>(gpu: &Gpu<A>) {
    let runs = gpu.at_scale(
        [
            ((Dim3::linear(3), Dim3::linear(8)), 16, 6000, 2),
            ((Dim3::new(2, 2, 1), Dim3::new(2, 2, 2)), 16, 6000, 2),
        ],
        [
            ((Dim3::linear(64), Dim3::linear(256)), 1024, 1 << 20, 4),
            ((Dim3::linear(5), Dim3::new(7, 3, 2)), 64, 100_003, 2),
        ],
    );
    for (launch, capacity, count, consumers) in runs {
        cpp_producers_rust_consumers(gpu, launch, capacity, count, consumers, 1);
    }
}

/// The same with Rust consumers taking runs (`try_pop_many`, up to 5 and 64
/// values per claim) while the C++ threads push one value per ticket.
pub fn cpp_producers_rust_run_consumers_lose_and_duplicate_nothing<A: GpuApi>(gpu: &Gpu<A>) {
    let runs = gpu.at_scale(
        [
            ((Dim3::linear(3), Dim3::linear(8)), 16, 6000, 2, 5),
            ((Dim3::new(2, 2, 1), Dim3::new(2, 2, 2)), 4, 6001, 3, 64),
        ],
        [
            ((Dim3::linear(64), Dim3::linear(256)), 1024, 1 << 20, 4, 64),
            ((Dim3::linear(5), Dim3::new(7, 3, 2)), 64, 100_003, 2, 5),
        ],
    );
    for (launch, capacity, count, consumers, room) in runs {
        cpp_producers_rust_consumers(gpu, launch, capacity, count, consumers, room);
    }
}

/// A kernel of `grid` x `block` threads pushes `count` values (from `base`)
/// into a ring of `capacity`, with device tickets, while `consumers` Rust
/// threads drain it, up to `room` values per pop: every value arrives
/// exactly once.
fn cpp_producers_rust_consumers<A: GpuApi>(
    gpu: &Gpu<A>,
    (grid, block): (Dim3, Dim3),
    capacity: u32,
    count: u64,
    consumers: usize,
    room: usize,
) {
    let base = 1_000_000;
    let pushed = PushedRing::new(gpu, capacity);
    let ring = pushed.ring();
    let stream = gpu.stream();
    let done = AtomicBool::new(false);
    let mut got: Vec<u64> = std::thread::scope(|s| {
        let drains: Vec<_> = (0..consumers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    let mut popped = vec![0; room];
                    let mut pop = |mine: &mut Vec<u64>| {
                        let n = if room == 1 {
                            ring.try_pop().map(|v| popped[0] = v).is_some().into()
                        } else {
                            ring.try_pop_many(&mut popped)
                        };
                        mine.extend_from_slice(&popped[..n]);
                        n
                    };
                    loop {
                        match pop(&mut mine) {
                            // Acquire: pairs with the Release below, after
                            // the kernel finished: then one more empty pop
                            // means the ring is drained for good.
                            0 if done.load(Ordering::Acquire) && pop(&mut mine) == 0 => {
                                return mine
                            }
                            0 => std::thread::yield_now(),
                            _ => {}
                        }
                    }
                })
            })
            .collect();
        let claim = Claim::Probe {
            max_full_retries: MAX_RETRIES,
        };
        // SAFETY: `pushed` outlives the kernel (synced below).
        unsafe { pushed.launch_push(gpu, &stream, (grid, block), (base, count), claim) };
        gpu.sync(&stream);
        done.store(true, Ordering::Release);
        drains
            .into_iter()
            .flat_map(|d| d.join().expect("consumer"))
            .collect()
    });
    pushed.assert_no_failures();
    got.sort_unstable();
    let want: Vec<u64> = (base..base + count).collect();
    assert!(
        got == want,
        "{} values arrived, {count} pushed; lost or duplicated",
        got.len()
    );
    assert_eq!(ring.try_pop(), None, "nothing left behind");
}

/// Producers waiting on their tickets measure how fast the consumers move
/// (tandem/mpmc.h `DeviceTickets::ns_per_item`): producers that claim
/// without probing, on a small ring whose one Rust consumer spends at least
/// 5 us on each item, measure it, and never as faster than that (a pace
/// measured over 256 items or more, so one item's slack is within the 10%
/// allowed). On the CPU device, run under load, it caught a first
/// measurement taken from the zeroed base (1 ns an item) and spans that a
/// preempted thread pushed past a GPU's 4 ms window (no measurement).
pub fn waiting_producers_measure_their_consumers_pace<A: GpuApi>(gpu: &Gpu<A>) {
    const PER_ITEM: Duration = Duration::from_micros(5);
    let (launch, count) = gpu.at_scale(
        ((Dim3::linear(4), Dim3::linear(16)), 8192),
        ((Dim3::linear(8), Dim3::linear(128)), 8192),
    );
    let pushed = PushedRing::new(gpu, 16);
    let ring = pushed.ring();
    let stream = gpu.stream();
    std::thread::scope(|s| {
        let consumer = s.spawn(|| {
            for _ in 0..count {
                let deadline = Instant::now() + PER_ITEM;
                while ring.try_pop().is_none() {
                    std::hint::spin_loop();
                }
                while Instant::now() < deadline {
                    std::hint::spin_loop();
                }
            }
        });
        // SAFETY: `pushed` outlives the kernel (synced below).
        unsafe { pushed.launch_push(gpu, &stream, launch, (0, count), Claim::Direct) };
        gpu.sync(&stream);
        consumer.join().expect("consumer");
    });
    pushed.assert_no_failures();
    let pace = pushed.consumers_pace(gpu);
    let floor = PER_ITEM.as_nanos() as u32 / 10 * 9;
    assert!(pace != 0, "the producers measured no pace");
    assert!(
        pace >= floor,
        "measured {pace} ns an item; the consumer took at least {PER_ITEM:?}"
    );
}

/// Rust producers and C++ consumers lose and duplicate nothing.
pub fn rust_producers_cpp_consumers_lose_and_duplicate_nothing<A: GpuApi>(gpu: &Gpu<A>) {
    let (launch, capacity, count, producers) = gpu.at_scale(
        ((Dim3::linear(2), Dim3::new(3, 2, 1)), 8, 5000, 2),
        ((Dim3::linear(16), Dim3::linear(128)), 1024, 200_000, 4),
    );
    rust_producers_cpp_consumers(gpu, launch, capacity, count, producers);
}

/// `producers` Rust threads push `count` values (from `base`) into a ring of
/// `capacity` while a kernel of `grid` x `block` threads pops them with
/// device tickets: the kernel sees every value exactly once.
fn rust_producers_cpp_consumers<A: GpuApi>(
    gpu: &Gpu<A>,
    (grid, block): (Dim3, Dim3),
    capacity: u32,
    count: u64,
    producers: u64,
) {
    let base = 7u64 << 40;
    let mem = ring_memory(gpu, capacity);
    let ring = rust_init(&mem, capacity);
    let tickets = gpu.device_words(DEVICE_TICKETS_BYTES / 8);
    let seen = gpu.shared(count as usize * 4);
    let stats = gpu.shared(5 * 8);
    let stream = gpu.stream();
    // SAFETY: the ring, `seen` and `stats` stay allocated until after `sync`.
    unsafe {
        gpu.launch(
            &stream,
            names::TANDEM_MPMC_POP_SUM_U64,
            grid,
            block,
            &[
                mem.arg(),
                KernelArg::U64(mem.len() as u64),
                tickets.arg(),
                KernelArg::U64(count),
                KernelArg::U64(base),
                KernelArg::U64(MAX_RETRIES),
                seen.arg(),
                stats.arg(),
            ],
        )
    };
    std::thread::scope(|s| {
        for p in 0..producers {
            let ring = &ring;
            s.spawn(move || {
                for v in (p..count).step_by(producers as usize) {
                    while ring.try_push(base + v).is_err() {
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
    gpu.sync(&stream);
    assert_eq!(stats.read::<u64>(2), 0, "every C++ thread attached");
    assert_eq!(stats.read::<u64>(1), 0, "no pop given up");
    assert_eq!(stats.read::<u64>(3), 0, "no value outside the pushed range");
    assert_eq!(stats.read::<u64>(4), 0, "no foreign ticket");
    let twice: Vec<usize> = (0..count as usize)
        .filter(|&i| seen.read::<u32>(i) != 1)
        .collect();
    assert!(twice.is_empty(), "values not seen exactly once: {twice:?}");
    let sum = (base..base + count).fold(0u64, u64::wrapping_add);
    assert_eq!(stats.read::<u64>(0), sum);
    assert_eq!(
        ring.try_push(0),
        Ok(()),
        "every slot was freed for the next lap"
    );
}

/// What `tandem_mpmc_try_push_u64` reports for the ring at `mem` + `offset`
/// with a region of `len` bytes.
fn cpp_attach_status<A: GpuApi>(gpu: &Gpu<A>, mem: &Shared<A>, offset: usize, len: usize) -> u64 {
    let result = gpu.shared(3 * 8);
    // SAFETY: `len` bytes from `offset` lie inside `mem` (or the kernel
    // refuses before touching more than the header); `result` holds 3 u64.
    unsafe {
        gpu.run_one(
            names::TANDEM_MPMC_TRY_PUSH_U64,
            &[
                mem.arg_at(offset),
                KernelArg::U64(len as u64),
                KernelArg::U64(1),
                result.arg(),
            ],
        )
    };
    result.read(0)
}

/// What `tandem_mpmc_init_u64` reports for `capacity` slots at `mem` +
/// `offset` in `len` bytes.
fn cpp_init_status<A: GpuApi>(
    gpu: &Gpu<A>,
    mem: &Shared<A>,
    offset: usize,
    len: usize,
    capacity: u32,
) -> u32 {
    let status = gpu.shared(8);
    // SAFETY: as in `cpp_attach_status`; init writes only after its checks.
    unsafe {
        gpu.run_one(
            names::TANDEM_MPMC_INIT_U64,
            &[
                mem.arg_at(offset),
                KernelArg::U64(len as u64),
                KernelArg::U32(capacity),
                status.arg(),
            ],
        )
    };
    status.read(0)
}

/// The C++ side refuses what Rust's `attach`/`init_in` refuse, with the
/// matching `RingError` variant.
pub fn malformed_rings_are_refused_like_rust_refuses_them<A: GpuApi>(gpu: &Gpu<A>) {
    let capacity = 8;
    let len = MpmcRing::<u64>::required_bytes(capacity);
    let zeroed = ring_memory(gpu, capacity);
    assert_eq!(
        cpp_attach_status(gpu, &zeroed, 0, len),
        ring_status::BAD_MAGIC
    );

    let mem = ring_memory(gpu, capacity);
    rust_init(&mem, capacity);
    assert_eq!(cpp_attach_status(gpu, &mem, 0, len), ring_status::OK);
    assert_eq!(
        cpp_attach_status(gpu, &mem, 0, len - 1),
        ring_status::REGION_TOO_SMALL
    );
    assert_eq!(
        cpp_attach_status(gpu, &mem, 8, len - 8),
        ring_status::MISALIGNED
    );

    let of_u32 = gpu.shared(MpmcRing::<u32>::required_bytes(capacity));
    // SAFETY: as in `rust_init`, for a ring of u32.
    unsafe { MpmcRing::<u32>::init_in(of_u32.host(), of_u32.len(), capacity) }.expect("init");
    assert_eq!(
        cpp_attach_status(gpu, &of_u32, 0, of_u32.len()),
        ring_status::ELEMENT_MISMATCH
    );

    let spsc = gpu.shared(SpscRing::<u64>::required_bytes(capacity));
    // SAFETY: as in `rust_init`, for an SPSC ring.
    unsafe { SpscRing::<u64>::init_in(spsc.host(), spsc.len(), capacity) }.expect("init");
    assert_eq!(
        cpp_attach_status(gpu, &spsc, 0, spsc.len()),
        ring_status::WRONG_KIND
    );

    let fresh = ring_memory(gpu, 16);
    let fresh_len = fresh.len();
    let refused = [
        (0, fresh_len, 0, ring_status::ZERO_CAPACITY),
        (0, fresh_len, 12, ring_status::CAPACITY_NOT_POWER_OF_TWO),
        (0, fresh_len, 32, ring_status::REGION_TOO_SMALL),
        (64, fresh_len - 64, 8, ring_status::OK),
        (8, fresh_len - 8, 8, ring_status::MISALIGNED),
    ];
    for (offset, len, capacity, want) in refused {
        let got = cpp_init_status(gpu, &fresh, offset, len, capacity);
        assert_eq!(
            u64::from(got),
            want,
            "C++ init of {capacity} slots at +{offset} in {len} bytes"
        );
    }
}

/// One `#[test]` per behaviour above for backend `$api`, in a module
/// `mpmc`.
#[doc(hidden)]
#[macro_export]
macro_rules! cross_language_mpmc_tests {
    ($api:ty) => {
        mod mpmc {
            $crate::stamp_cross_language_tests!($api, mpmc: [
                mixed_rust_and_cpp_sequences_match_all_rust,
                cpp_producers_rust_consumers_lose_and_duplicate_nothing,
                cpp_producers_rust_run_consumers_lose_and_duplicate_nothing,
                waiting_producers_measure_their_consumers_pace,
                rust_producers_cpp_consumers_lose_and_duplicate_nothing,
                malformed_rings_are_refused_like_rust_refuses_them,
            ]);
        }
    };
}
