//! GPU benchmarks of the device kernels (`cargo bench -p tandem-tests --bench
//! device_kernels --features cuda`, or `cargo xtask bench --gpu`):
//!
//! * allocation in a kernel: every thread makes the same number of
//!   same-sized allocations from tandem's arena (one device-scope CAS per
//!   block to carve its share, one shared-memory atomic per thread to carve
//!   a ThreadArena from it, then plain arithmetic), allocation+free
//!   pairs from tandem's freeing allocator (through a per-thread cache) and
//!   from the device's malloc/free, in the same run, each Tandem row with its speed-up over malloc+free and its
//!   target (ThreadArena >= 1000x, freeing allocator >= 100x);
//! * MPMC ring push into mapped pinned host memory while host threads drain
//!   it (tandem/mpmc.h's device tickets against shm-core's MpmcRing), the
//!   consumers taking one record (`try_pop`) or a run (`try_pop_many`) per
//!   claim: records/s and GB/s, against the device-to-host copy bandwidth,
//!   and the targets (8 consumers >= 2, >= 200 M records/s;
//!   docs/perf/README.md, "Targets").
//!
//! Without a CUDA device (or without feature `cuda`) it prints
//! "skipped: no CUDA device", and fails instead under `TANDEM_REQUIRE_GPU=1`.

#[cfg(feature = "cuda")]
fn main() {
    type Api = tandem_hal_cuda::CudaApi;
    if let Some(device) = tandem_tests::gpu::device_or_skip::<Api>("device_kernels bench") {
        cuda::run(tandem_tests::cross_language::harness::Gpu::<Api>::new(
            device,
        ));
    }
}

#[cfg(not(feature = "cuda"))]
fn main() {
    let why = "no CUDA device (built without feature `cuda`)";
    if std::env::var(tandem_tests::gpu::REQUIRE_GPU_ENV).as_deref() == Ok("1") {
        panic!(
            "device_kernels bench: {why}, but {}=1 requires one",
            tandem_tests::gpu::REQUIRE_GPU_ENV
        );
    }
    println!("device_kernels bench: skipped: {why}");
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use tandem_device_kernels::names;
    use tandem_hal::{DeviceMemory, Dim3, EventFlags, GpuApi, GpuDevice, KernelArg};
    use tandem_shm_core::layout::{AllocatorId, ArenaHeader, SizeClassHeader};
    use tandem_shm_core::{block_size, HEAP_ALIGN};
    use tandem_shm_core::{ArenaAllocator, MpmcRing, SizeClassAllocator};

    use tandem_tests::cross_language::harness::{Gpu, Shared};
    use tandem_tests::cross_language::mpmc::{Claim, PushedRing};

    /// Runs every benchmark on `gpu`.
    pub fn run<A: GpuApi>(gpu: Gpu<A>) {
        let props = gpu.device.properties().expect("device properties");
        println!("device_kernels bench on {} ({})", props.name, props.arch);
        allocation(&gpu);
        ring_push(&gpu, props.multiprocessor_count.max(1));
    }

    /// Runs `launch` on a fresh stream between two timing events and returns
    /// the GPU time it took.
    fn timed<A: GpuApi>(
        gpu: &Gpu<A>,
        launch: impl FnOnce(&<A::Device as GpuDevice>::Stream),
    ) -> Duration {
        let flags = EventFlags {
            timing: true,
            interprocess: false,
        };
        let stream = gpu.stream();
        let start = gpu.device.create_event(flags).expect("event");
        let end = gpu.device.create_event(flags).expect("event");
        gpu.device.record_event(&start, &stream).expect("record");
        launch(&stream);
        gpu.device.record_event(&end, &stream).expect("record");
        gpu.sync(&stream);
        gpu.device.elapsed(&start, &end).expect("elapsed")
    }

    /// Zeroed host memory aligned like a region base, for building an
    /// allocator's header on the host (untouched pages of a zeroed
    /// allocation cost nothing) and for reading a heap back.
    struct HostImage {
        ptr: *mut u8,
        layout: Layout,
    }

    impl HostImage {
        fn new(len: usize) -> Self {
            let layout = Layout::from_size_align(len, 64).expect("layout");
            // SAFETY: a non-zero size with a valid alignment.
            let ptr = unsafe { alloc_zeroed(layout) };
            assert!(!ptr.is_null(), "host image of {len} bytes");
            Self { ptr, layout }
        }

        fn bytes_mut(&mut self) -> &mut [u8] {
            // SAFETY: `ptr` holds `layout.size()` initialised (zeroed) bytes,
            // borrowed mutably through `self`.
            unsafe { core::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
        }
    }

    impl Drop for HostImage {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout; no borrow remains.
            unsafe { dealloc(self.ptr, self.layout) };
        }
    }

    /// One allocator measured by `allocation`.
    struct Row<'a, A: GpuApi> {
        name: &'static str,
        /// The speed-up over device malloc+free it must reach.
        target: Option<f64>,
        run: &'a dyn Fn(&Shared<A>) -> Duration,
    }

    /// Per-thread allocation: tandem's arena and its freeing allocator
    /// against device malloc/free, with each Tandem row's speed-up over
    /// malloc+free and its target.
    fn allocation<A: GpuApi>(gpu: &Gpu<A>) {
        // 64 Ki threads each holding one 64-byte malloc at a time stay within
        // the device heap's default 8 MiB (this API cannot raise the limit).
        let (grid, block) = (Dim3::linear(256), Dim3::linear(256));
        let threads = 256 * 256u64;
        let (allocs, size) = (64u64, 64u64);
        let total = threads * allocs;

        // The arena lives in device memory; its header is initialised in a
        // host image and copied in before every run, which resets the cursor.
        // Each block's carve starts a cache line of its own: room for that.
        let len = (size_of::<ArenaHeader>() as u64 + total * size + 256 * 64) as usize;
        let arena = gpu.device.alloc_device(len).expect("arena memory");
        let mut image = HostImage::new(len);
        // SAFETY: `image` is ours, 64-aligned and `len` bytes long.
        unsafe { ArenaAllocator::init_in(image.ptr, len, AllocatorId::new(1, 1)) }
            .expect("arena init");
        let arena_header = image.bytes_mut()[..size_of::<ArenaHeader>()].to_vec();
        drop(image);

        // The freeing allocator's heap, in device memory too, reset the same
        // way. Each thread holds one block at a time (the thread cache keeps
        // the one it freed), so the heap needs a block per thread; twice
        // that leaves room to spare.
        let class = SizeClassAllocator::class_for(size, 8).expect("a size class");
        let heap_len = (HEAP_ALIGN + 2 * threads * block_size(class)) as usize;
        let heap = gpu.device.alloc_device(heap_len).expect("heap memory");
        let mut image = HostImage::new(heap_len);
        // SAFETY: as for the arena's image.
        unsafe { SizeClassAllocator::init_in(image.ptr, heap_len, AllocatorId::new(1, 2)) }
            .expect("heap init");
        let heap_header = image.bytes_mut()[..size_of::<SizeClassHeader>()].to_vec();
        drop(image);

        let arena_run = |stats: &Shared<A>| {
            gpu.device
                .copy_to_device(&arena, 0, &arena_header)
                .expect("arena header");
            timed(gpu, |stream| {
                // SAFETY: the arena covers every carve; `stats` two words.
                unsafe {
                    gpu.launch(
                        stream,
                        names::TANDEM_BENCH_THREAD_ARENA,
                        grid,
                        block,
                        &[
                            KernelArg::Ptr(arena.device_ptr()),
                            KernelArg::U64(allocs),
                            KernelArg::U64(size),
                            stats.arg(),
                        ],
                    )
                }
            })
        };
        let size_class_run = |stats: &Shared<A>| {
            gpu.device
                .copy_to_device(&heap, 0, &heap_header)
                .expect("heap header");
            let took = timed(gpu, |stream| {
                // SAFETY: the heap is `heap_len` bytes of device memory with
                // an initialised header; `stats` two words.
                unsafe {
                    gpu.launch(
                        stream,
                        names::TANDEM_BENCH_SIZE_CLASS,
                        grid,
                        block,
                        &[
                            KernelArg::Ptr(heap.device_ptr()),
                            KernelArg::U64(heap_len as u64),
                            KernelArg::U64(allocs),
                            KernelArg::U64(size),
                            stats.arg(),
                        ],
                    )
                }
            });
            // Untimed: every block must be back on its free list (the caches
            // flushed, nothing lost), as Rust sees the heap's bytes.
            let mut back = HostImage::new(heap_len);
            gpu.device
                .copy_from_device(back.bytes_mut(), &heap, 0)
                .expect("heap read back");
            // SAFETY: `back` is ours, 64-aligned, `heap_len` bytes holding a
            // copy of the heap, used only through this handle.
            let heap_stats = unsafe { SizeClassAllocator::attach(back.ptr, heap_len) }
                .and_then(|h| h.stats())
                .expect("a sound heap after the run");
            assert_eq!(
                heap_stats.free_bytes(),
                heap_stats.carved_bytes,
                "every block back on a free list"
            );
            took
        };
        let malloc_run = |stats: &Shared<A>| {
            timed(gpu, |stream| {
                // SAFETY: `stats` holds two words.
                unsafe {
                    gpu.launch(
                        stream,
                        names::TANDEM_BENCH_DEVICE_MALLOC,
                        grid,
                        block,
                        &[KernelArg::U64(allocs), KernelArg::U64(size), stats.arg()],
                    )
                }
            })
        };
        // No row for the shared free lists without the cache: 64 K threads
        // on one class head serialise every operation behind a round of
        // failed compare-and-swaps (minutes, not a measurement).
        let rows: [Row<'_, A>; 3] = [
            Row {
                name: "tandem ThreadArena",
                target: Some(1000.0),
                run: &arena_run,
            },
            Row {
                name: "tandem SizeClass+cache",
                target: Some(100.0),
                run: &size_class_run,
            },
            Row {
                name: "device malloc+free",
                target: None,
                run: &malloc_run,
            },
        ];

        println!(
            "\nper-thread allocation, {threads} threads x {allocs} allocations of {size} B \
             (freeing allocators: allocation+free pairs)"
        );
        // (row, best time, failed allocations) of every supported row.
        let mut measured = Vec::new();
        for row in &rows {
            (row.run)(&gpu.shared(2 * 8)); // warm-up: first launch, heap set-up
            let stats = gpu.shared(2 * 8);
            let best = (0..5).map(|_| (row.run)(&stats)).min().expect("runs");
            if stats.read::<u64>(1) != 0 {
                println!("  {:<24} unsupported on this backend", row.name);
                continue;
            }
            measured.push((row, best, stats.read::<u64>(0)));
        }
        let rate = |best: Duration| total as f64 / best.as_secs_f64();
        let malloc_rate = measured
            .iter()
            .find(|(row, ..)| row.name == "device malloc+free")
            .map(|&(_, best, _)| rate(best));
        for (row, best, failed) in &measured {
            let versus = match (row.target, malloc_rate) {
                (Some(target), Some(malloc)) => {
                    let ratio = rate(*best) / malloc;
                    let verdict = if ratio >= target { "met" } else { "NOT MET" };
                    format!("  {ratio:>8.1}x malloc+free (target >= {target:.0}x: {verdict})")
                }
                (Some(target), None) => {
                    format!("  (target >= {target:.0}x malloc+free: no malloc to compare)")
                }
                (None, _) => String::new(),
            };
            println!(
                "  {:<24} {:>9.3} ms  {:>9.1} M allocs/s  {:>7.3} ns/alloc  ({failed} failed over 5 runs){versus}",
                row.name,
                best.as_secs_f64() * 1e3,
                rate(*best) / 1e6,
                best.as_secs_f64() * 1e9 / total as f64,
            );
        }
    }

    /// Device-to-host copy bandwidth into pinned memory through GpuApi, in
    /// GB/s: the yardstick for what the ring pushes across the same link.
    fn copy_bandwidth<A: GpuApi>(gpu: &Gpu<A>) -> f64 {
        tandem_tests::measure::copy_bandwidth(&gpu.device, 64 << 20).expect("copy bandwidth")
    }

    /// How the bench's host consumers take records.
    #[derive(Clone, Copy)]
    enum Drain {
        /// `try_pop`: one compare-and-swap on the ring's head per record.
        Single,
        /// `try_pop_many`: one compare-and-swap per run of up to this many.
        Runs(usize),
    }

    impl std::fmt::Display for Drain {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Drain::Single => f.write_str("try_pop"),
                Drain::Runs(n) => write!(f, "try_pop_many({n})"),
            }
        }
    }

    /// Records drained by one host consumer until `done` is raised and the
    /// ring then answers empty.
    fn drain(ring: &MpmcRing<'_, u64>, how: Drain, done: &AtomicBool) -> u64 {
        let mut run = vec![0u64; if let Drain::Runs(n) = how { n } else { 0 }];
        let pop = |run: &mut [u64]| match how {
            Drain::Single => u64::from(ring.try_pop().is_some()),
            Drain::Runs(_) => ring.try_pop_many(run) as u64,
        };
        let mut mine = 0u64;
        loop {
            match pop(&mut run) {
                // Acquire: pairs with the Release after the kernel ended;
                // one more empty pop then means drained for good.
                0 if done.load(Ordering::Acquire) => match pop(&mut run) {
                    0 => return mine,
                    n => mine += n,
                },
                0 => core::hint::spin_loop(),
                n => mine += n,
            }
        }
    }

    /// Runs of each ring push (odd: the median is a run). With the GPU
    /// producing faster than even 2 consumers drain runs, the consumer
    /// counts' rates differ by little more than one run's noise, and a single
    /// run each read the 8 / 2 ratio on either side of 1
    /// (docs/perf/2026-11-25-h100.md).
    const RING_REPEATS: usize = 3;

    /// GPU threads push u64 records into a ring in mapped pinned memory (one
    /// device-memory fetch_add per record for the ticket, per-slot sequence
    /// stores to publish) while host threads drain it, one record or one run
    /// at a time; both ways in the same run, each consumer count
    /// RING_REPEATS times in turns, the median printed.
    fn ring_push<A: GpuApi>(gpu: &Gpu<A>, sms: u32) {
        let capacity = 1u32 << 16;
        let count = 1u64 << 24;
        let grid = Dim3::linear(sms * 2);
        let block = Dim3::linear(256);
        let copy = copy_bandwidth(gpu);
        println!(
            "\nMPMC ring push into pinned host memory (device tickets): {count} u64 records, \
             {capacity} slots, {} x 256 GPU threads; device-to-host copy through GpuApi: \
             {copy:.2} GB/s; median of {RING_REPEATS} runs",
            sms * 2
        );
        let consumer_counts = [2usize, 4, 8];
        for how in [Drain::Single, Drain::Runs(256)] {
            let mut rates = vec![Vec::with_capacity(RING_REPEATS); consumer_counts.len()];
            for _ in 0..RING_REPEATS {
                for (runs, &consumers) in rates.iter_mut().zip(&consumer_counts) {
                    let secs = ring_push_once(gpu, capacity, count, grid, block, consumers, how);
                    runs.push(count as f64 / secs);
                }
            }
            let mut medians = Vec::with_capacity(consumer_counts.len());
            for (runs, &consumers) in rates.iter_mut().zip(&consumer_counts) {
                runs.sort_by(f64::total_cmp);
                let rate = runs[RING_REPEATS / 2];
                medians.push(rate);
                let payload_gbs = rate * 8.0 / 1e9;
                println!(
                    "  {how:<18} {consumers} host consumers {:>8.2} M records/s ({:.2} - {:.2})  \
                     {payload_gbs:>6.3} GB/s payload ({:.1}% of the copy bandwidth)",
                    rate / 1e6,
                    runs[0] / 1e6,
                    runs[RING_REPEATS - 1] / 1e6,
                    payload_gbs / copy * 100.0,
                );
            }
            let best = medians.iter().copied().fold(0.0, f64::max);
            let scaling = medians[2] / medians[0];
            match how {
                // The "before": the targets are for consumers that take runs.
                Drain::Single => println!(
                    "  {how:<18} 8 / 2 consumers {scaling:.2}x; best {:.1} M records/s (one \
                     record a pop, for comparison)",
                    best / 1e6,
                ),
                Drain::Runs(_) => println!(
                    "  {how:<18} 8 / 2 consumers {scaling:.2}x (target >= 1: {}); best {:.1} M \
                     records/s (target >= 200: {})",
                    if scaling >= 1.0 { "meets" } else { "BELOW" },
                    best / 1e6,
                    if best >= 200e6 { "meets" } else { "BELOW" },
                ),
            }
        }
    }

    /// One ring push of `count` records drained by `consumers` host threads;
    /// the seconds from launch to the last record drained.
    fn ring_push_once<A: GpuApi>(
        gpu: &Gpu<A>,
        capacity: u32,
        count: u64,
        grid: Dim3,
        block: Dim3,
        consumers: usize,
        how: Drain,
    ) -> f64 {
        let pushed = PushedRing::new(gpu, capacity);
        let ring = pushed.ring();
        let stream = gpu.stream();
        let done = AtomicBool::new(false);
        let drained = AtomicU64::new(0);
        let started = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..consumers {
                s.spawn(|| drained.fetch_add(drain(&ring, how, &done), Ordering::Relaxed));
            }
            let claim = Claim::Probe {
                max_full_retries: u64::MAX,
            };
            // SAFETY: `pushed` outlives the kernel (synced below).
            unsafe { pushed.launch_push(gpu, &stream, (grid, block), (0, count), claim) };
            gpu.sync(&stream);
            done.store(true, Ordering::Release);
        });
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(
            drained.load(Ordering::Relaxed),
            count,
            "every record drained"
        );
        pushed.assert_no_failures();
        secs
    }
}
