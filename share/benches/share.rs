//! Handing buffers between processes through the share daemon, against what
//! a user does by hand (one run, one table per backend, ratios printed):
//!
//! * raw legacy IPC through `GpuApi`: `alloc_device_exportable`, a kernel
//!   filling it, a stream sync (a raw handle carries no ordering) and
//!   `ipc_export_memory` in this process; in a consumer process the first
//!   `ipc_open_memory` of the handle, the first kernel reading it, and a
//!   re-open of the handle already open there;
//! * the same through the daemon: `create_buffer` (after the first round,
//!   the producer's freed allocation handed back, as the daemon does for a
//!   creator: docs/shared-buffers.md, "Reuse"; what a fresh one costs is
//!   printed beside, call by call), the same kernel and
//!   sync, `seal`, then the consumer's first `get_buffer` of the id, the
//!   same reading kernel, and a cached `get_buffer`. Targets: a first open
//!   within 1.5x of raw IPC's, a cached re-open under 5 us; and the
//!   same rounds, in turn, through a second daemon whose threads sleep in
//!   `recv` between requests (`--poll-us 0`, tandem_share::Polling);
//! * a large buffer handed over (1 GiB on a GPU, 256 MiB on the CPU device
//!   to keep CI memory sane): from the producer's data being ready to the
//!   consumer's kernel over it done, through the daemon against copying it
//!   through a shared host segment (device to host here, host to device
//!   there).
//!
//! With 2 or more CUDA devices, one row more: a device-to-device copy of
//! a shared buffer of device 0's memory, opened on device 1
//! ([`ShareClient::get_buffer_on`]) and copied into device 1's memory
//! ([`tandem_share::GpuBuffer::copy_to`]), against the floor of a raw
//! `copy_peer` (`cuMemcpyPeer`) of the same bytes between plain allocations
//! of the two devices: best of several runs, target >= 0.95x its bandwidth.
//!
//! Both producers write by kernel, as users do: on a GPU, the consumer's
//! first kernel after another process's work then waits for the GPU to
//! switch contexts, on both paths (a producer with no GPU work at all, as
//! this bench had before, let raw IPC skip that switch and the daemon's
//! seal, which records an event, pay it).
//!
//! The consumer is this executable run again as `--share-child <backend>
//! <socket>`; it answers one stdout line per stdin command. The daemon is
//! `tandem share serve`, found in `$TANDEM_BIN_DIR` or beside the bench
//! (`cargo build --release -p tandem-cli`). Runs on the CPU device always,
//! and on CUDA when built with `--features cuda` and a device is present
//! (else "skipped: no CUDA device", or a failure with TANDEM_REQUIRE_GPU=1).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tandem_hal::{
    Backend, DeviceMemory, EventFlags, GpuApi, GpuDevice, HostApi, IpcMemHandle, KernelArg,
    LaunchConfig,
};
use tandem_share::{ObjectId, Polling, ShareClient};
use tandem_shm_core::Segment;
use tandem_tests::ipc::{from_hex, to_hex, Child};
use tandem_tests::support::{fill_u32, kernels, launch};

/// The first argument that makes this executable the consumer.
const CHILD_FLAG: &str = "--share-child";
/// How long the producer waits for one answer of the consumer (a large
/// hand-off on the CPU device takes a while; the first kernel load may
/// compile).
const CHILD_TIMEOUT: Duration = Duration::from_secs(120);
/// Each small buffer: one IPC allocation granule, so raw IPC and the daemon
/// map the same amount.
const SMALL: usize = 2 << 20;
const FIRST_OPEN_RATIO_TARGET: f64 = 1.5;
/// A producer's create + fill + seal against alloc + fill + sync + export.
const HANDLE_RATIO_TARGET: f64 = 1.5;
const CACHED_OPEN_TARGET: Duration = Duration::from_micros(5);

/// Sizes of one backend's run.
struct Scale {
    /// Iterations of the small-buffer rows (the median is printed).
    small_rounds: usize,
    /// Bytes of the large hand-off, why that size, and its iterations.
    large: usize,
    large_note: &'static str,
    large_rounds: usize,
    /// The grid (blocks, threads) of the producer's writing kernel and the
    /// consumer's reading one, `tandem_block_sum_u32`: the CPU device runs
    /// each thread on the CPU, where a GPU-sized grid would drown what the
    /// rows measure.
    touch_grid: (u32, u32),
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(CHILD_FLAG) {
        let grid = (args.get(4), args.get(5));
        let (Some(backend), Some(socket), (Some(Ok(blocks)), Some(Ok(threads)))) = (
            args.get(2),
            args.get(3),
            (grid.0.map(|b| b.parse()), grid.1.map(|t| t.parse())),
        ) else {
            eprintln!("usage: {CHILD_FLAG} <backend> <socket> <blocks> <threads>");
            std::process::exit(2);
        };
        if let Err(e) = child(backend, Path::new(socket), (blocks, threads)) {
            eprintln!("share bench consumer: {e}");
            std::process::exit(1);
        }
        return;
    }
    let host = Scale {
        small_rounds: 100,
        large: 256 << 20,
        large_note: "256 MiB on the CPU device, to keep CI memory sane",
        large_rounds: 8,
        touch_grid: (1, 1),
    };
    bench::<HostApi>("the CPU device (host backend)", &host);
    cuda();
}

#[cfg(feature = "cuda")]
fn cuda() {
    let gpu = Scale {
        small_rounds: 200,
        large: 1 << 30,
        large_note: "1 GiB",
        large_rounds: 10,
        touch_grid: (264, 256),
    };
    bench::<tandem_hal_cuda::CudaApi>("CUDA device 0", &gpu);
    peer::peer_copy::<tandem_hal_cuda::CudaApi>("CUDA", <tandem_hal_cuda::CudaApi as GpuApi>::load);
}

#[cfg(not(feature = "cuda"))]
fn cuda() {
    println!("\nshare bench on CUDA: skipped: built without the cuda feature");
}

/// The consumer side for backend `backend`.
fn child(backend: &str, socket: &Path, grid: (u32, u32)) -> Result<(), String> {
    match backend {
        "host" => Consumer::<HostApi>::serve(socket, grid),
        #[cfg(feature = "cuda")]
        "cuda" => Consumer::<tandem_hal_cuda::CudaApi>::serve(socket, grid),
        other => Err(format!("no backend {other} in this build")),
    }
}

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Host => "host",
        Backend::Cuda => "cuda",
        Backend::Hip => "hip",
    }
}

/// The `tandem` binary (see `find_tandem_binary`).
fn tandem_binary() -> Result<PathBuf, String> {
    tandem_process::find_tandem_binary().map_err(|e| e.to_string())
}

/// Runs one backend's table; a device-less GPU backend is skipped (or
/// fails, with TANDEM_REQUIRE_GPU=1) by `api_or_skip`.
fn bench<A: GpuApi>(label: &str, scale: &Scale) {
    let Some(api) = tandem_tests::gpu::api_or_skip::<A>(&format!("share bench on {label}")) else {
        return;
    };
    if let Err(e) = run(api, label, scale) {
        eprintln!("share bench on {label} failed: {e}");
        std::process::exit(1);
    }
}

fn run<A: GpuApi>(api: A, label: &str, scale: &Scale) -> Result<(), String> {
    let client = ShareClient::spawn_daemon_with(api, &tandem_binary()?)
        .map_err(|e| format!("starting the daemon: {e}"))?;
    let device = client.device(0).map_err(|e| e.to_string())?;
    let mut consumer = Producer::spawn::<A>(client.socket_path(), scale.touch_grid)?;
    let copy =
        tandem_tests::measure::copy_bandwidth(&*device, 64 << 20).map_err(|e| e.to_string())?;
    println!(
        "\nshare bench on {label}: {} KiB buffers, median of {} (large: median of {}); \
         yardstick: device-to-host copy {copy:.2} GB/s",
        SMALL >> 10,
        scale.small_rounds,
        scale.large_rounds,
    );
    let producer = Writer {
        module: kernels(&*device),
        stream: device.create_stream().map_err(|e| e.to_string())?,
        device: &*device,
        grid: scale.touch_grid,
    };
    // The same hand-offs through a daemon whose threads sleep between
    // requests, its own producer and consumer beside them.
    let asleep = ShareClient::spawn_daemon_polling(
        A::load().map_err(|e| e.to_string())?,
        &tandem_binary()?,
        Polling::OFF,
    )
    .map_err(|e| format!("starting the second daemon: {e}"))?;
    let asleep_device = asleep.device(0).map_err(|e| e.to_string())?;
    let mut asleep_consumer = Producer::spawn::<A>(asleep.socket_path(), scale.touch_grid)?;
    let asleep_producer = Writer {
        module: kernels(&*asleep_device),
        stream: asleep_device.create_stream().map_err(|e| e.to_string())?,
        device: &*asleep_device,
        grid: scale.touch_grid,
    };
    // Warm-up: the consumer's first launch loads the module, the daemon's
    // first buffer opens its device.
    raw_round(&producer, &mut consumer)?;
    daemon_round(&client, &producer, &mut consumer)?;
    daemon_round(&asleep, &asleep_producer, &mut asleep_consumer)?;

    let mut raw = Samples::default();
    let mut shared = Samples::default();
    let mut sleeping = Samples::default();
    for _ in 0..scale.small_rounds {
        raw.push(raw_round(&producer, &mut consumer)?);
        shared.push(daemon_round(&client, &producer, &mut consumer)?);
        sleeping.push(daemon_round(
            &asleep,
            &asleep_producer,
            &mut asleep_consumer,
        )?);
    }
    print_small(
        &raw.medians(),
        &shared.medians(),
        &sleeping.medians(),
        A::BACKEND != Backend::Host,
    );
    print_create_parts(&*device, scale.small_rounds);
    asleep_consumer.finish()?;

    let through_daemon = median(
        (0..scale.large_rounds)
            .map(|_| large_through_daemon(&client, &device, &mut consumer, scale.large))
            .collect::<Result<_, _>>()?,
    );
    let through_host =
        large_through_host(&*device, &mut consumer, scale.large, scale.large_rounds)?;
    println!(
        "  hand over a large buffer ({}), data ready -> consumer's kernel done:\n  \
         {:<42} {:>9.2} ms\n  {:<42} {:>9.2} ms   copy / daemon: {:.2}x",
        scale.large_note,
        "copy through host memory (d2h, h2d)",
        ms(through_host),
        "through the daemon (seal, get_buffer)",
        ms(through_daemon),
        through_host.as_secs_f64() / through_daemon.as_secs_f64(),
    );
    consumer.finish()
}

/// The peer copy row: CUDA only (the CPU device's devices are one memory).
#[cfg(feature = "cuda")]
mod peer {
    use super::*;

    /// Bytes of the peer copy row.
    const PEER_COPY_BYTES: usize = 256 << 20;
    /// Runs of each copy; the best is kept (a copy's floor is its fastest run).
    const PEER_COPY_RUNS: usize = 10;
    /// The shared buffer's copy against the raw one, as a ratio of bandwidths.
    const PEER_COPY_RATIO_TARGET: f64 = 0.95;

    /// The peer copy row on backend `A` (`load`), or a skip below 2 devices.
    pub(super) fn peer_copy<A: GpuApi>(label: &str, load: fn() -> tandem_hal::GpuResult<A>) {
        let title = format!("share bench, device-to-device copy of a shared buffer on {label}");
        if tandem_tests::gpu::api_with_devices_or_skip(&title, 2, load).is_none() {
            return;
        }
        if let Err(e) = peer_copy_row(load, &title) {
            eprintln!("{title} failed: {e}");
            std::process::exit(1);
        }
    }

    fn peer_copy_row<A: GpuApi>(
        load: fn() -> tandem_hal::GpuResult<A>,
        title: &str,
    ) -> Result<(), String> {
        let text = |e: &dyn std::fmt::Display| e.to_string();
        let api = load().map_err(|e| text(&e))?;
        let client = ShareClient::spawn_daemon_with(api, &tandem_binary()?)
            .map_err(|e| format!("starting the daemon: {e}"))?;
        let (first, second) = (
            client.device(0).map_err(|e| text(&e))?,
            client.device(1).map_err(|e| text(&e))?,
        );
        let peers = second.can_access_peer(&first).map_err(|e| text(&e))?;
        if peers {
            second.enable_peer_access(&first).map_err(|e| text(&e))?;
        }
        let best = |copy: &dyn Fn() -> Result<(), String>| -> Result<Duration, String> {
            copy()?; // warm-up: first use of the mapping and of the copy engines
            let mut best = Duration::MAX;
            for _ in 0..PEER_COPY_RUNS {
                let start = Instant::now();
                copy()?;
                best = best.min(start.elapsed());
            }
            Ok(best)
        };

        let src = first.alloc_device(PEER_COPY_BYTES).map_err(|e| text(&e))?;
        let dst = second.alloc_device(PEER_COPY_BYTES).map_err(|e| text(&e))?;
        first
            .fill(&src, 0, PEER_COPY_BYTES, 0x5a)
            .map_err(|e| text(&e))?;
        let raw = best(&|| {
            second
                .copy_peer(&dst, 0, &first, &src, 0, PEER_COPY_BYTES)
                .map_err(|e| text(&e))
        })?;

        let stream = first.create_stream().map_err(|e| text(&e))?;
        let (id, buffer) = client
            .create_buffer(0, PEER_COPY_BYTES)
            .map_err(|e| text(&e))?;
        first
            .fill(&buffer, 0, PEER_COPY_BYTES, 0xa5)
            .map_err(|e| text(&e))?;
        let sealed = client.seal(buffer, &stream).map_err(|e| text(&e))?;
        let second_stream = second.create_stream().map_err(|e| text(&e))?;
        let opened = client.get_buffer_on(id, 1, &second_stream, CHILD_TIMEOUT);
        let shared = match opened {
            Ok(on_second) => best(&|| on_second.copy_to(&second, &dst, 0).map_err(|e| text(&e)))?,
            Err(e @ tandem_share::ShareError::NoPeerAccess { .. }) => {
                println!(
                    "
    {title}: skipped: {e}"
                );
                return Ok(());
            }
            Err(e) => return Err(text(&e)),
        };
        drop(sealed);
        let gbps = |t: Duration| PEER_COPY_BYTES as f64 / t.as_secs_f64() / 1e9;
        let ratio = gbps(shared) / gbps(raw);
        println!(
            "
    {title} ({} MiB, best of {PEER_COPY_RUNS}; peer access {}):
               {:<58} {:>9.3} ms {:>8.1} GB/s
               {:<58} {:>9.3} ms {:>8.1} GB/s   {ratio:.2}x  target >= {PEER_COPY_RATIO_TARGET}x: {}",
            PEER_COPY_BYTES >> 20,
            if peers {
                "on"
            } else {
                "none: staged by the driver"
            },
            "raw copy_peer, device 0 -> device 1 (cuMemcpyPeer)",
            ms(raw),
            gbps(raw),
            "shared buffer opened on device 1, copy_to device 1",
            ms(shared),
            gbps(shared),
            verdict(ratio >= PEER_COPY_RATIO_TARGET),
        );
        Ok(())
    }
}

/// One small hand-off: the producer's time to a handle, the consumer's
/// first open, first open + kernel, and cached re-open.
struct Round {
    handle: Duration,
    /// `handle`'s parts: the allocation (raw) or create (daemon), the fill
    /// and sync, the export (raw) or seal (daemon).
    phases: [Duration; 3],
    open: Duration,
    touched: Duration,
    reopen: Duration,
}

#[derive(Default)]
struct Samples(Vec<Round>);

impl Samples {
    fn push(&mut self, round: Round) {
        self.0.push(round);
    }

    fn medians(&self) -> Round {
        let of = |field: fn(&Round) -> Duration| median(self.0.iter().map(field).collect());
        Round {
            handle: of(|r| r.handle),
            phases: [0, 1, 2].map(|i| median(self.0.iter().map(|r| r.phases[i]).collect())),
            open: of(|r| r.open),
            touched: of(|r| r.touched),
            reopen: of(|r| r.reopen),
        }
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn us(t: Duration) -> f64 {
    t.as_secs_f64() * 1e6
}

fn ms(t: Duration) -> f64 {
    t.as_secs_f64() * 1e3
}

fn verdict(met: bool) -> &'static str {
    if met {
        "target met"
    } else {
        "target missed"
    }
}

/// The small hand-offs' table; the first open's target is for GPUs (`gpu`;
/// docs/perf/README.md, "Targets"), the CPU device's row is the same
/// figure for memfd buffers.
fn print_small(raw: &Round, shared: &Round, sleeping: &Round, gpu: bool) {
    let ratio = |d: Duration, r: Duration| d.as_secs_f64() / r.as_secs_f64();
    println!(
        "  {:<58} {:>12} {:>12} {:>8}",
        "", "raw IPC", "daemon", "ratio"
    );
    let row = |what: &str, r: Duration, d: Duration, note: String| {
        println!(
            "  {what:<58} {:>9.1} us {:>9.1} us {:>7.2}x{note}",
            us(r),
            us(d),
            ratio(d, r)
        );
    };
    let handle = ratio(shared.handle, raw.handle);
    row(
        "get a handle (alloc+fill+sync+export / create+fill+seal)",
        raw.handle,
        shared.handle,
        if gpu {
            format!(
                "  target <= {HANDLE_RATIO_TARGET}x: {}",
                verdict(handle <= HANDLE_RATIO_TARGET)
            )
        } else {
            format!("  (the {HANDLE_RATIO_TARGET}x target is a GPU's)")
        },
    );
    for (i, part) in [
        "  of which alloc / create",
        "  of which fill + sync",
        "  of which export / seal",
    ]
    .into_iter()
    .enumerate()
    {
        row(part, raw.phases[i], shared.phases[i], String::new());
    }
    let first = ratio(shared.open, raw.open);
    row(
        "first open in another process",
        raw.open,
        shared.open,
        if gpu {
            format!(
                "  target <= {FIRST_OPEN_RATIO_TARGET}x: {}",
                verdict(first <= FIRST_OPEN_RATIO_TARGET)
            )
        } else {
            format!("  (the {FIRST_OPEN_RATIO_TARGET}x target is a GPU's)")
        },
    );
    row(
        "first open + first kernel access",
        raw.touched,
        shared.touched,
        String::new(),
    );
    row(
        "first open, daemon threads asleep (--poll-us 0)",
        raw.open,
        sleeping.open,
        String::new(),
    );
    row(
        "first open + first kernel access, daemon threads asleep",
        raw.touched,
        sleeping.touched,
        String::new(),
    );
    row(
        "cached re-open",
        raw.reopen,
        shared.reopen,
        format!(
            "  target < {} us: {}",
            CACHED_OPEN_TARGET.as_micros(),
            verdict(shared.reopen < CACHED_OPEN_TARGET)
        ),
    );
}

/// The driver calls of a daemon's create and of its creator's mapping, each
/// timed alone in this process (median of `rounds`): where a create's time
/// goes. A call the backend refuses here prints its error instead.
fn print_create_parts<D: GpuDevice>(device: &D, rounds: usize) {
    let mut parts: [Vec<Duration>; 4] = Default::default();
    let mut refused = None;
    for _ in 0..rounds {
        let timed = (|| {
            let start = Instant::now();
            let buffer = device.alloc_shareable(SMALL)?;
            let allocated = start.elapsed();
            let event = device.create_event(EventFlags {
                timing: false,
                interprocess: true,
            })?;
            device.ipc_export_event(&event)?;
            let evented = start.elapsed();
            let handle = device.export_shareable(&buffer)?;
            let exported = start.elapsed();
            let imported = device.import_shareable(handle, tandem_hal::MemoryAccess::ReadWrite)?;
            let mapped = start.elapsed();
            drop((imported, event, buffer));
            Ok::<_, tandem_hal::GpuError>([
                allocated,
                evented - allocated,
                exported - evented,
                mapped - exported,
            ])
        })();
        match timed {
            Ok(times) => {
                for (part, t) in parts.iter_mut().zip(times) {
                    part.push(t);
                }
            }
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    if let Some(e) = refused {
        println!("  a create's parts, timed here: not measured ({e})");
        return;
    }
    println!("  a create's parts, each timed alone in this process (median of {rounds}):");
    for (what, times) in [
        "alloc_shareable (the daemon)",
        "interprocess event, created and exported (the daemon)",
        "export_shareable (the daemon)",
        "import_shareable, mapped (the creator)",
    ]
    .into_iter()
    .zip(parts)
    {
        println!("    {what:<58} {:>9.1} us", us(median(times)));
    }
}

/// The producer's device, kernels and stream.
struct Writer<'a, A: GpuApi> {
    device: &'a A::Device,
    module: <A::Device as GpuDevice>::Module,
    stream: <A::Device as GpuDevice>::Stream,
    /// The grid of its kernels: the consumer's.
    grid: (u32, u32),
}

impl<A: GpuApi> Writer<'_, A> {
    /// Queues a kernel writing all of `memory`, as a producer does.
    fn fill(&self, memory: &impl DeviceMemory<Api = A>) {
        let config = LaunchConfig::linear(self.grid.0, self.grid.1);
        let target = (memory.device_ptr(), memory.len() / 4);
        fill_u32(self.device, &self.module, config, target, 7, &self.stream);
    }
}

/// Raw IPC: fill a fresh allocation, wait for it, export it; have the
/// consumer open and read it.
fn raw_round<A: GpuApi>(
    producer: &Writer<'_, A>,
    consumer: &mut Producer,
) -> Result<Round, String> {
    let device = producer.device;
    let start = Instant::now();
    let buffer = device
        .alloc_device_exportable(SMALL)
        .map_err(|e| e.to_string())?;
    let allocated = start.elapsed();
    producer.fill(&buffer);
    device
        .synchronize_stream(&producer.stream)
        .map_err(|e| e.to_string())?;
    let filled = start.elapsed();
    let handle = device
        .ipc_export_memory(&buffer)
        .map_err(|e| e.to_string())?;
    let handle_time = start.elapsed();
    let [open, touched, reopen] = consumer.ask(&format!("raw {}", to_hex(&handle.0)))?;
    // `buffer` lives until the consumer has closed its mappings.
    drop(buffer);
    Ok(Round {
        handle: handle_time,
        phases: [allocated, filled - allocated, handle_time - filled],
        open,
        touched,
        reopen,
    })
}

/// Through the daemon: create, fill, wait and seal a buffer (finished data,
/// as raw IPC hands over: the seal's event could order readers after an
/// unfinished fill, but then the consumer's times would hold the fill's),
/// have the consumer open and read it, then delete it.
fn daemon_round<A: GpuApi>(
    client: &ShareClient<A>,
    producer: &Writer<'_, A>,
    consumer: &mut Producer,
) -> Result<Round, String> {
    let start = Instant::now();
    let (id, buffer) = client.create_buffer(0, SMALL).map_err(|e| e.to_string())?;
    let created = start.elapsed();
    producer.fill(&buffer);
    producer
        .device
        .synchronize_stream(&producer.stream)
        .map_err(|e| e.to_string())?;
    let filled = start.elapsed();
    let sealed = client
        .seal(buffer, &producer.stream)
        .map_err(|e| e.to_string())?;
    let handle = start.elapsed();
    let [open, touched, reopen] = consumer.ask(&format!("daemon {id}"))?;
    client.delete(id).map_err(|e| e.to_string())?;
    drop(sealed);
    Ok(Round {
        handle,
        phases: [created, filled - created, handle - filled],
        open,
        touched,
        reopen,
    })
}

/// A large buffer through the daemon: filled and sealed here, opened and
/// read there; timed from the seal's return.
fn large_through_daemon<A: GpuApi>(
    client: &ShareClient<A>,
    device: &A::Device,
    consumer: &mut Producer,
    bytes: usize,
) -> Result<Duration, String> {
    let stream = device.create_stream().map_err(|e| e.to_string())?;
    let (id, buffer) = client.create_buffer(0, bytes).map_err(|e| e.to_string())?;
    device
        .fill_async(&stream, &buffer, 0, bytes, 3)
        .map_err(|e| e.to_string())?;
    // The fill is done before the clock starts, as the copy path's data is:
    // both measure the hand-over, not the producing.
    device
        .synchronize_stream(&stream)
        .map_err(|e| e.to_string())?;
    let sealed = client.seal(buffer, &stream).map_err(|e| e.to_string())?;
    let start = Instant::now();
    consumer.ask::<0>(&format!("large {id}"))?;
    let elapsed = start.elapsed();
    client.delete(id).map_err(|e| e.to_string())?;
    drop(sealed);
    Ok(elapsed)
}

/// A large buffer copied through a shared host segment: device to host
/// here, host to device into the consumer's own buffer there, then the same
/// kernel. The segment (registered with the device on both sides, as a user
/// after speed would) and the consumer's buffer are set up once, untimed:
/// the baseline at its best.
fn large_through_host<D: GpuDevice>(
    device: &D,
    consumer: &mut Producer,
    bytes: usize,
    rounds: usize,
) -> Result<Duration, String> {
    let name = format!("tandem-share-bench-{}", std::process::id());
    let segment = Segment::create_named(&name, bytes).map_err(|e| e.to_string())?;
    // SAFETY: the segment is mapped, page-aligned and `bytes` long, and
    // outlives the registration (dropped first, declared later).
    let registration =
        unsafe { device.register_host(segment.as_ptr(), bytes) }.map_err(|e| e.to_string())?;
    // SAFETY: the mapping is `bytes` long and lives as long as `segment`;
    // the consumer reads it only while this process waits for its answer.
    let host = unsafe { std::slice::from_raw_parts_mut(segment.as_ptr(), bytes) };
    let source = device.alloc_device(bytes).map_err(|e| e.to_string())?;
    device
        .fill(&source, 0, bytes, 3)
        .map_err(|e| e.to_string())?;
    consumer.ask::<0>(&format!("copy-setup {name}"))?;
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        device
            .copy_from_device(host, &source, 0)
            .map_err(|e| e.to_string())?;
        consumer.ask::<0>("copy")?;
        samples.push(start.elapsed());
    }
    consumer.ask::<0>("copy-teardown")?;
    drop(registration);
    Ok(median(samples))
}

/// The producer's end of the consumer process.
struct Producer {
    child: Child,
}

impl Producer {
    fn spawn<A: GpuApi>(socket: &Path, (blocks, threads): (u32, u32)) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let args = [
            CHILD_FLAG.to_owned(),
            backend_name(A::BACKEND).to_owned(),
            socket.display().to_string(),
            blocks.to_string(),
            threads.to_string(),
        ];
        let child = Child::spawn(&exe, &args).map_err(|e| format!("starting the consumer: {e}"))?;
        let producer = Self { child };
        producer.answer::<0>()?;
        Ok(producer)
    }

    /// Sends `command`; the answer's `N` durations (nanoseconds on the line).
    fn ask<const N: usize>(&mut self, command: &str) -> Result<[Duration; N], String> {
        self.child
            .send_line(command)
            .map_err(|e| format!("telling the consumer {command:?}: {e}"))?;
        self.answer()
    }

    fn answer<const N: usize>(&self) -> Result<[Duration; N], String> {
        let line = self.child.next_line(CHILD_TIMEOUT)?;
        let values: Vec<Duration> = line
            .split_whitespace()
            .skip(1)
            .map(|n| n.parse().map(Duration::from_nanos))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("consumer said {line:?}: {e}"))?;
        match (line.split_whitespace().next(), values.try_into()) {
            (Some("ok"), Ok(values)) => Ok(values),
            _ => Err(format!(
                "consumer said {line:?}, expected ok and {N} numbers"
            )),
        }
    }

    fn finish(mut self) -> Result<(), String> {
        match self.child.wait(CHILD_TIMEOUT)? {
            status if status.success() => Ok(()),
            status => Err(format!("the consumer exited with {status}")),
        }
    }
}

/// The consumer process: its own client of the daemon, a stream, the
/// kernels, and the host copy path's state while it is set up.
struct Consumer<A: GpuApi> {
    client: ShareClient<A>,
    device: std::sync::Arc<A::Device>,
    stream: <A::Device as GpuDevice>::Stream,
    module: <A::Device as GpuDevice>::Module,
    /// The reading kernel's grid, and one block sum per block of it.
    grid: (u32, u32),
    sums: <A::Device as GpuDevice>::DeviceBuffer,
    copy: Option<CopyTarget<A>>,
}

/// The consumer's half of the host copy path. Fields drop in order: the
/// registration goes before the segment it covers.
struct CopyTarget<A: GpuApi> {
    /// Held, not read: it makes the device's copies from the segment fast.
    _registration: <A::Device as GpuDevice>::HostRegistration,
    segment: Segment,
    buffer: <A::Device as GpuDevice>::DeviceBuffer,
}

impl<A: GpuApi> Consumer<A> {
    /// Answers the producer's commands until its stdin closes.
    fn serve(socket: &Path, grid: (u32, u32)) -> Result<(), String> {
        let api = A::load().map_err(|e| e.to_string())?;
        let client = ShareClient::connect(api, socket).map_err(|e| e.to_string())?;
        let device = client.device(0).map_err(|e| e.to_string())?;
        let mut consumer = Self {
            stream: device.create_stream().map_err(|e| e.to_string())?,
            module: kernels(&*device),
            sums: device
                .alloc_device(grid.0 as usize * 4)
                .map_err(|e| e.to_string())?,
            grid,
            copy: None,
            device,
            client,
        };
        println!("ok");
        for line in std::io::stdin().lines() {
            let line = line.map_err(|e| e.to_string())?;
            let answer = consumer.command(&line)?;
            let nanos: Vec<String> = answer.iter().map(|t| t.as_nanos().to_string()).collect();
            println!("ok {}", nanos.join(" "));
        }
        Ok(())
    }

    fn command(&mut self, line: &str) -> Result<Vec<Duration>, String> {
        let (verb, argument) = line.split_once(' ').unwrap_or((line, ""));
        match verb {
            "raw" => self.raw(argument),
            "daemon" => self.daemon(argument),
            "large" => {
                let buffer = self.open(argument)?;
                self.touch(&buffer)?;
                Ok(vec![])
            }
            "copy-setup" => self.copy_setup(argument),
            "copy" => self.copy_in(),
            "copy-teardown" => {
                self.copy = None;
                Ok(vec![])
            }
            _ => Err(format!("unknown command {line:?}")),
        }
    }

    /// Raw IPC: first open, first open + kernel, cached re-open.
    fn raw(&self, hex: &str) -> Result<Vec<Duration>, String> {
        let handle = IpcMemHandle(from_hex(hex).ok_or("malformed handle")?);
        let start = Instant::now();
        let memory = self
            .device
            .ipc_open_memory(&handle)
            .map_err(|e| e.to_string())?;
        let open = start.elapsed();
        self.touch(&memory)?;
        let touched = start.elapsed();
        let start = Instant::now();
        let again = self
            .device
            .ipc_open_memory(&handle)
            .map_err(|e| e.to_string())?;
        let reopen = start.elapsed();
        drop((again, memory));
        Ok(vec![open, touched, reopen])
    }

    /// The daemon: first get_buffer, + kernel, cached get_buffer.
    fn daemon(&self, id: &str) -> Result<Vec<Duration>, String> {
        let start = Instant::now();
        let buffer = self.open(id)?;
        let open = start.elapsed();
        self.touch(&buffer)?;
        let touched = start.elapsed();
        let start = Instant::now();
        let again = self.open(id)?;
        let reopen = start.elapsed();
        drop((again, buffer));
        Ok(vec![open, touched, reopen])
    }

    fn open(&self, id: &str) -> Result<tandem_share::GpuBuffer<A>, String> {
        let id = id.parse().map_err(|_| format!("malformed id {id:?}"))?;
        self.client
            .get_buffer(ObjectId(id), &self.stream)
            .map_err(|e| e.to_string())
    }

    fn copy_setup(&mut self, name: &str) -> Result<Vec<Duration>, String> {
        let segment = Segment::open_named(name).map_err(|e| e.to_string())?;
        // SAFETY: the segment is mapped and page-aligned, and `CopyTarget`
        // drops the registration before the segment.
        let registration = unsafe { self.device.register_host(segment.as_ptr(), segment.len()) }
            .map_err(|e| e.to_string())?;
        let buffer = self
            .device
            .alloc_device(segment.len())
            .map_err(|e| e.to_string())?;
        self.copy = Some(CopyTarget {
            _registration: registration,
            segment,
            buffer,
        });
        Ok(vec![])
    }

    /// Host to device from the shared segment, then the reading kernel.
    fn copy_in(&self) -> Result<Vec<Duration>, String> {
        let copy = self.copy.as_ref().ok_or("copy before copy-setup")?;
        // SAFETY: the producer wrote the segment and waits for this answer,
        // so nothing changes it while the slice lives.
        let host = unsafe {
            std::slice::from_raw_parts(copy.segment.as_ptr().cast_const(), copy.segment.len())
        };
        self.device
            .copy_to_device(&copy.buffer, 0, host)
            .map_err(|e| e.to_string())?;
        self.touch(&copy.buffer)?;
        Ok(vec![])
    }

    /// The first kernel access: a block sum over all of `memory`, waited for.
    fn touch(&self, memory: &impl DeviceMemory<Api = A>) -> Result<(), String> {
        let config = LaunchConfig::linear(self.grid.0, self.grid.1);
        let args = [
            KernelArg::Ptr(memory.device_ptr()),
            KernelArg::Ptr(self.sums.device_ptr()),
            KernelArg::U64((memory.len() / 4) as u64),
        ];
        launch(
            &*self.device,
            &self.module,
            "tandem_block_sum_u32",
            config,
            &args,
            &self.stream,
        );
        self.device
            .synchronize_stream(&self.stream)
            .map_err(|e| e.to_string())
    }
}
