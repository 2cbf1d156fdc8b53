//! The blob store from kernel threads, against what a user does instead and
//! against the link (one run, ratios printed):
//!
//! * yardsticks: the device-to-host copy bandwidth into pinned memory, and
//!   sequential 1 MiB writes of a file beside the file target (`fio`-style:
//!   O_DIRECT when the filesystem takes it, then one fdatasync);
//! * kernel threads putting and getting 4 KiB blobs of their own (RAM
//!   target, file target): puts/gets per second and GB/s;
//! * blocks putting and getting 1 MiB blobs (filled by the block's threads,
//!   put by thread 0): GB/s. Put-only runs write their bytes once, in the
//!   first round: the figures are the puts (the worker's copy from the
//!   caller's buffer into the store), not the kernel's own stores across the
//!   link. The RAM target's first run, into pages never touched, is shown
//!   apart from the run the target is for (the same puts again);
//! * instead: end the kernel, copy its results to the host, write each item
//!   (memcpy into host memory, or pwrite to a file), launch again;
//! * on the host: a 4 KiB put and get through the task path, from the
//!   runtime's process; 4 KiB and 64 MiB puts and gets (RAM and file
//!   targets) from a client in another process (`tandem blob run`, found
//!   beside this binary or in `$TANDEM_BIN_DIR`), the 4 KiB durable put
//!   against redb's own write transaction of the same bytes. The Python
//!   bench (`python/bench/blob.py`) runs this section for its comparison.
//!
//! * compression (`blob/compression.rs`): host puts and gets with no compression, lz4, zstd
//!   at each preset and dynamic mode, on smooth float32 arrays and random bytes, beside the
//!   `zstd` and `lz4` command-line tools.
//!
//! An argument runs only the sections whose name holds it (`kernels`, `client`,
//! `compression`, `compression-dynamic`: the target's row alone); none runs them all.
//!
//! Runs on the CPU device always, and on CUDA when built with `--features
//! cuda` and a device is present (else "skipped: no CUDA device", or a
//! failure with TANDEM_REQUIRE_GPU=1). Targets (on the H100;
//! docs/perf/README.md, "Targets"): 4 KiB puts from a kernel at >= 1 M puts a second;
//! 1 MiB puts to the RAM target at >= 50% of the copy bandwidth; the file
//! target within 80% of the sequential writes.
//! The CPU device's rows show the same comparisons without a verdict: its
//! kernel threads (and 2 workers, for CI's 2 cores) are not what they are set for.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_blob::BlobPut;

use tandem_blob::demo::{BlobKernels, PutGetLaunch, PutGetMode};
use tandem_blob::{pool, BlobCaller, BlobStore, Score, StoreConfig, TagId};
use tandem_hal::{GpuApi, GpuDevice, HostApi};
use tandem_runtime::{Config, DeviceQueues, DeviceSelection, Registry, Runtime};

#[path = "blob/compression.rs"]
mod compression;

/// Sizes of one backend's run.
struct Scale {
    /// (blocks, threads) of the 4 KiB runs; rounds per thread.
    small_grid: (u32, u32),
    small_rounds: u64,
    /// (blocks, threads) of the 1 MiB runs (one blob per block); rounds.
    large_grid: (u32, u32),
    large_rounds: u64,
    /// Bytes of each target, and of the sequential-write yardstick.
    target_bytes: u64,
    /// Runtime workers.
    workers: usize,
    /// A GPU's run: the targets are kernel threads' on the H100.
    gpu: bool,
}

const SMALL: u64 = 4096;
const LARGE: u64 = 1 << 20;
const PUTS_PER_S_TARGET: f64 = 1e6;
const RAM_SHARE_TARGET: f64 = 0.5;
const FILE_SHARE_TARGET: f64 = 0.8;

/// Where a row stands against `target`: a verdict on a GPU; on the CPU
/// device, whose threads the targets are not set for, the comparison alone.
fn against(scale: &Scale, target: &str, met: bool) -> String {
    if scale.gpu {
        format!("target {target}: {}", verdict(met))
    } else {
        format!("the {target} target is a GPU's")
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "meets"
    } else {
        "BELOW"
    }
}

fn gbs(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

/// A RAM target (score 1.0) and a file target (score 0.5) in `dir`.
fn store(dir: &std::path::Path, bytes: u64) -> Result<Arc<BlobStore>, String> {
    let config = StoreConfig::ram_and_file(dir, bytes);
    BlobStore::open(&config)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// Sequential writes of `bytes` in 1 MiB requests to a new file in `dir`
/// (O_DIRECT when taken), then fdatasync: GB/s, and whether O_DIRECT held.
fn sequential_writes(dir: &std::path::Path, bytes: u64) -> Result<(f64, bool), String> {
    let path = dir.join("sequential.dat");
    let open = |direct: bool| {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(if direct { libc::O_DIRECT } else { 0 })
            .open(&path)
    };
    let (file, direct) = match open(true) {
        Ok(f) => (f, true),
        Err(_) => (open(false).map_err(|e| e.to_string())?, false),
    };
    // 4 KiB-aligned, as O_DIRECT needs.
    let mut block = vec![0u8; (LARGE + 4096) as usize];
    let offset = block.as_ptr().align_offset(4096);
    let chunk = &mut block[offset..offset + LARGE as usize];
    chunk.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    let start = Instant::now();
    for at in (0..bytes).step_by(LARGE as usize) {
        file.write_all_at(chunk, at).map_err(|e| e.to_string())?;
    }
    file.sync_data().map_err(|e| e.to_string())?;
    let elapsed = start.elapsed();
    let _ = std::fs::remove_file(&path);
    Ok((gbs(bytes, elapsed), direct))
}

/// What a user does instead: per launch, the kernel's results (`items` of
/// `item` bytes, produced in device memory: a device fill stands for the
/// kernel) copied to the host, then each written with `write(index,
/// bytes)`; `launches` times. Items per second.
fn instead<D: GpuDevice>(
    device: &D,
    items: usize,
    item: usize,
    launches: usize,
    mut write: impl FnMut(usize, &[u8]) -> Result<(), String>,
) -> Result<f64, String> {
    let results = device
        .alloc_device(items * item)
        .map_err(|e| e.to_string())?;
    let host = device
        .alloc_pinned_mapped(items * item)
        .map_err(|e| e.to_string())?;
    // SAFETY: pinned memory of that length, which no kernel touches here.
    let host = unsafe {
        std::slice::from_raw_parts_mut(tandem_hal::HostMemory::host_ptr(&host), items * item)
    };
    let start = Instant::now();
    for launch in 0..launches {
        device
            .fill(&results, 0, items * item, launch as u8)
            .map_err(|e| e.to_string())?;
        device
            .copy_from_device(host, &results, 0)
            .map_err(|e| e.to_string())?;
        for (i, bytes) in host.chunks_exact(item).enumerate() {
            write(i, bytes)?;
        }
    }
    Ok((items * launches) as f64 / start.elapsed().as_secs_f64())
}

struct Row {
    what: String,
    ops: u64,
    bytes: u64,
    elapsed: Duration,
}

impl Row {
    fn print(&self, versus: &str) {
        println!(
            "  {:<44} {:>10.0} ops/s {:>8.2} GB/s{versus}",
            self.what,
            self.ops as f64 / self.elapsed.as_secs_f64(),
            gbs(self.bytes, self.elapsed)
        );
    }
}

fn kernel_row<A: GpuApi>(
    kernels: &mut BlobKernels<'_, A>,
    what: &str,
    launch: PutGetLaunch,
) -> Result<Row, String> {
    let outcome = kernels.put_get(&launch).map_err(|e| e.to_string())?;
    if let Some((rank, status, code)) = outcome.first_failure() {
        return Err(format!(
            "{what}: thread {rank} failed (status {status}, code {code})"
        ));
    }
    let per_block = matches!(
        launch.mode,
        PutGetMode::BlockPut | PutGetMode::BlockGet | PutGetMode::BlockPutGetCheck
    );
    let blobs = if per_block {
        u64::from(launch.blocks)
    } else {
        u64::from(launch.blocks) * u64::from(launch.threads)
    };
    let ops = blobs * launch.rounds;
    Ok(Row {
        what: what.to_string(),
        ops,
        bytes: ops * launch.blob_bytes,
        elapsed: outcome.elapsed,
    })
}

fn bench<A: GpuApi>(api: A, label: &str, scale: &Scale) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = store(dir.path(), scale.target_bytes)?;
    let mut registry = Registry::with_builtins();
    pool::register(&mut registry, Arc::clone(&store)).map_err(|e| e.to_string())?;
    let (sb, st) = scale.small_grid;
    let (lb, lt) = scale.large_grid;
    let arena = |blocks: u32, threads: u32, per_block: u64, per_thread: u64| {
        u64::from(blocks) * (u64::from(threads) * (512 + per_thread) + per_block + 256)
    };
    // The kernel arena is half of what the heap and arena share.
    let segment = 2 * arena(sb, st, 0, 2 * SMALL).max(arena(lb, lt, 2 * LARGE, 0)) + (64 << 20);
    let config = Config {
        workers: scale.workers,
        queue_depth: 1024,
        gpu_segment_size: segment as usize,
        copy_space: tandem_blob::wire::COPY_SPACE,
        devices: DeviceSelection::Only(vec![0]),
        ..Config::default()
    };
    let runtime = Runtime::start_with(api, config, registry).map_err(|e| e.to_string())?;
    let queues: &DeviceQueues<A> = &runtime.devices()[0];
    let device = queues.device();
    let copy =
        tandem_tests::measure::copy_bandwidth(device, 64 << 20).map_err(|e| e.to_string())?;
    let (sequential, direct) = sequential_writes(dir.path(), scale.target_bytes / 2)?;
    let target = &store.targets()[1];
    println!(
        "\nblob store on {label}: {} workers; yardsticks: device-to-host copy {copy:.2} GB/s, \
         sequential 1 MiB writes {sequential:.2} GB/s ({}); file target O_DIRECT: {}, io_uring: {}",
        runtime.workers(),
        if direct {
            "O_DIRECT"
        } else {
            "buffered: O_DIRECT refused"
        },
        target.direct_io,
        target.io_uring,
    );
    let mut kernels = BlobKernels::load(queues).map_err(|e| e.to_string())?;
    let tag = |name: &str| store.get_or_create_tag(name).map_err(|e| e.to_string());
    let small = |tag: TagId, mode, score| PutGetLaunch {
        score,
        ..PutGetLaunch::new((sb, st), tag, SMALL, scale.small_rounds, mode)
    };
    let large = |tag: TagId, mode, score| PutGetLaunch {
        score,
        ..PutGetLaunch::new((lb, lt), tag, LARGE, scale.large_rounds, mode)
    };
    // Warm-up: module, workers, first pages of each target.
    let warm = tag("warm")?;
    kernel_row(
        &mut kernels,
        "warm-up",
        small(warm, PutGetMode::PutGetCheck, Score::AUTO),
    )?;

    println!(
        "  4 KiB blobs, {sb} x {st} kernel threads x {} rounds (one blob each):",
        scale.small_rounds
    );
    let (ram, file) = (tag("small-ram")?, tag("small-file")?);
    let put_ram = kernel_row(
        &mut kernels,
        "put, RAM target",
        small(ram, PutGetMode::Put, Score::AUTO),
    )?;
    let puts_per_s = put_ram.ops as f64 / put_ram.elapsed.as_secs_f64();
    put_ram.print(&format!(
        "  {}",
        against(scale, ">= 1 M puts/s", puts_per_s >= PUTS_PER_S_TARGET)
    ));
    kernel_row(
        &mut kernels,
        "get, RAM target",
        small(ram, PutGetMode::Get, Score::AUTO),
    )?
    .print("");
    kernel_row(
        &mut kernels,
        "put, file target",
        small(file, PutGetMode::Put, Score(0.5)),
    )?
    .print("");
    kernel_row(
        &mut kernels,
        "get, file target",
        small(file, PutGetMode::Get, Score(0.5)),
    )?
    .print("");

    println!(
        "  1 MiB blobs, {lb} blocks x {lt} threads x {} rounds (one blob per block):",
        scale.large_rounds
    );
    let (ram, file) = (tag("large-ram")?, tag("large-file")?);
    // A first run writes RAM-target pages never touched before: the kernel faults in and zeroes
    // each on a worker's first store, far slower than the same puts again
    // (docs/perf/2026-11-25-h100.md, "Why the CUDA 1 MiB RAM puts"). It gets its own row; the
    // target's row is the store's steady state, overwriting those blobs into pages it has used
    // before (its free lists hand out the lowest pages first), as the yardstick copies into
    // resident pages.
    kernel_row(
        &mut kernels,
        "put, RAM target, its pages' first writes",
        large(ram, PutGetMode::BlockPut, Score::AUTO),
    )?
    .print("");
    let put_ram = kernel_row(
        &mut kernels,
        "put, RAM target",
        large(ram, PutGetMode::BlockPut, Score::AUTO),
    )?;
    let share = gbs(put_ram.bytes, put_ram.elapsed) / copy;
    put_ram.print(&format!(
        "  {:.0}% of the copy bandwidth, {}",
        share * 100.0,
        against(scale, ">= 50%", share >= RAM_SHARE_TARGET)
    ));
    kernel_row(
        &mut kernels,
        "get, RAM target",
        large(ram, PutGetMode::BlockGet, Score::AUTO),
    )?
    .print("");
    let put_file = kernel_row(
        &mut kernels,
        "put, file target",
        large(file, PutGetMode::BlockPut, Score(0.5)),
    )?;
    let share = gbs(put_file.bytes, put_file.elapsed) / sequential;
    put_file.print(&format!(
        "  {:.0}% of sequential writes, {}",
        share * 100.0,
        against(scale, ">= 80%", share >= FILE_SHARE_TARGET)
    ));
    kernel_row(
        &mut kernels,
        "get, file target",
        large(file, PutGetMode::BlockGet, Score(0.5)),
    )?
    .print("");
    drop(kernels);

    // What a user does instead: end the kernel, copy, write each item, launch again.
    let out = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("instead.dat"))
        .map_err(|e| e.to_string())?;
    println!(
        "  instead: end the kernel, copy its results to the host, write each item, launch again:"
    );
    for (item, items, launches) in [
        (SMALL, (sb * st) as usize, scale.small_rounds as usize),
        (LARGE, lb as usize, scale.large_rounds as usize),
    ] {
        let mut ram = vec![0u8; items * item as usize];
        let memcpy = instead(device, items, item as usize, launches, |i, bytes| {
            let at = i * bytes.len();
            ram[at..at + bytes.len()].copy_from_slice(bytes);
            Ok(())
        })?;
        let pwrite = instead(device, items, item as usize, launches, |i, bytes| {
            out.write_all_at(bytes, (i * bytes.len()) as u64)
                .map_err(|e| e.to_string())
        })?;
        out.sync_data().map_err(|e| e.to_string())?;
        println!(
            "  {:<44} {memcpy:>10.0} items/s (memcpy), {pwrite:.0} items/s (pwrite, unsynced)",
            format!("{} KiB items, {items} per launch", item >> 10)
        );
    }

    // On the host: a 4 KiB put and get through the task path, against
    // redb's own write transaction of the same bytes.
    let blobs = BlobCaller::new(&runtime);
    let host = blobs.get_or_create_tag("host").map_err(|e| e.to_string())?;
    let bytes = vec![7u8; SMALL as usize];
    let mut back = vec![0u8; SMALL as usize];
    let rounds = 2000u32;
    let put_ram = mean(rounds, &mut |i| {
        blobs
            .put(&BlobPut::new(host, &format!("r{}", i % 64)), &bytes)
            .map(drop)
            .map_err(|e| e.to_string())
    })?;
    let get_ram = mean(rounds, &mut |i| {
        blobs
            .get(host, &format!("r{}", i % 64), 0, &mut back)
            .map_err(|e| e.to_string())
    })?;
    let put_file = mean(rounds / 4, &mut |i| {
        blobs
            .put(
                &BlobPut::new(host, &format!("f{}", i % 64)).score(Score(0.5)),
                &bytes,
            )
            .map(drop)
            .map_err(|e| e.to_string())
    })?;
    let redb = redb_write(&dir.path().join("redb-only.redb"), &bytes, rounds / 4)?;
    println!(
        "  host, 4 KiB through the task path: put {:.1} us (RAM), {:.1} us (file, durable), \
         get {:.1} us; redb's own durable write of the same bytes: {:.1} us ({:.2}x)",
        put_ram.as_secs_f64() * 1e6,
        put_file.as_secs_f64() * 1e6,
        get_ram.as_secs_f64() * 1e6,
        redb.as_secs_f64() * 1e6,
        put_file.as_secs_f64() / redb.as_secs_f64(),
    );
    let _ = std::io::stdout().flush();
    runtime.shutdown().map_err(|e| e.to_string())
}

/// Mean time of `rounds` calls of `f`.
fn mean(rounds: u32, f: &mut dyn FnMut(u32) -> Result<(), String>) -> Result<Duration, String> {
    let start = Instant::now();
    for i in 0..rounds {
        f(i)?;
    }
    Ok(start.elapsed() / rounds)
}

/// The client section's sizes and rounds, and its store and heap: what
/// `python/bench/blob.py` does from Python, which runs this section in the
/// same run and prints these figures beside its own (the binding's
/// overhead), so the two must stay alike.
const CLIENT_SIZES: [(&str, usize, u32); 2] = [("4 KiB", 4 << 10, 2000), ("64 MiB", 64 << 20, 5)];
const CLIENT_HEAP: usize = 16 << 20;
const CLIENT_RAM_BYTES: u64 = 512 << 20;
const CLIENT_FILE_BYTES: u64 = 1 << 30;

/// Puts and gets from a client in another process, a chunk at a time
/// through its heap (`put_chunked`, `get_chunked`): `tandem blob run`
/// serving a RAM and a file target, started through a script that names
/// the store (the fork client passes only the runtime's configuration).
fn client_latency() -> Result<(), String> {
    let tandem = match tandem_process::find_tandem_binary() {
        Ok(path) if path.is_file() => path,
        found => {
            let why = found.map_or_else(
                |e| e.to_string(),
                |p| format!("no `tandem` at {}", p.display()),
            );
            println!("  host, from a client in another process: skipped: {why}");
            return Ok(());
        }
    };
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = dir.path().join("store.toml");
    let d = dir.path().display();
    std::fs::write(
        &store,
        format!(
            "metadata = \"{d}/meta.redb\"\n\
             [[targets]]\nkind = \"ram\"\ncapacity = {CLIENT_RAM_BYTES}\nscore = 1.0\n\
             [[targets]]\nkind = \"file\"\npath = \"{d}/target0.dat\"\ncapacity = {CLIENT_FILE_BYTES}\nscore = 0.5\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let script = dir.path().join("tandem-blob-run");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nTANDEM_BLOB_CONFIG={:?} RUST_LOG=warn exec {:?} blob \"$@\"\n",
            store, tandem
        ),
    )
    .map_err(|e| e.to_string())?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
    }
    // The runtime `tandem.blob.fork` starts: CPU queues only, the default
    // lanes and heap beside eight clients' heaps.
    let defaults = Config::default();
    let config = Config {
        devices: DeviceSelection::Only(vec![]),
        client_heap_bytes: CLIENT_HEAP,
        max_clients: 8,
        cpu_segment_size: defaults.cpu_segment_size + 8 * (CLIENT_HEAP + 4096),
        ..defaults
    };
    let client =
        tandem_runtime::Client::fork_runtime_with(&script, &config).map_err(|e| e.to_string())?;
    let blobs = BlobCaller::new(&client);
    let tag = blobs
        .get_or_create_tag("client")
        .map_err(|e| e.to_string())?;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for (label, size, rounds) in CLIENT_SIZES {
        let bytes = vec![5u8; size];
        let mut back = vec![0u8; size];
        let put = |prefix: &str, score: Score| {
            mean(rounds, &mut |i| {
                blobs
                    .put_chunked(
                        &BlobPut::new(tag, &format!("{prefix}{}", i % 64)).score(score),
                        &bytes,
                    )
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
        };
        let put_ram = put("r", Score::AUTO)?;
        let put_file = put("f", Score(0.5))?;
        let mut get = |prefix: &str| {
            mean(rounds, &mut |i| {
                blobs
                    .get_chunked(tag, &format!("{prefix}{}", i % 64), 0, &mut back)
                    .map_err(|e| e.to_string())
            })
        };
        let get_ram = get("r")?;
        let get_file = get("f")?;
        print!(
            "  host, {label} from a client in another process: put {:.1} us (RAM), {:.1} us \
             (file, durable), get {:.1} us (RAM), {:.1} us (file)",
            us(put_ram),
            us(put_file),
            us(get_ram),
            us(get_file),
        );
        if size == SMALL as usize {
            let redb = redb_write(&dir.path().join("redb-only.redb"), &bytes, rounds / 4)?;
            print!(
                "; redb's own durable write: {:.1} us ({:.2}x)",
                us(redb),
                put_file.as_secs_f64() / redb.as_secs_f64()
            );
        }
        println!();
        for i in 0..rounds.min(64) {
            for prefix in ["r", "f"] {
                blobs
                    .delete(tag, &format!("{prefix}{i}"))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    drop(client);
    Ok(())
}

/// redb's own durable write transaction of `bytes`, `rounds` times: the mean.
fn redb_write(path: &std::path::Path, bytes: &[u8], rounds: u32) -> Result<Duration, String> {
    const TABLE: redb::TableDefinition<'_, &str, &[u8]> = redb::TableDefinition::new("bench");
    let db = redb::Database::create(path).map_err(|e| e.to_string())?;
    mean(rounds, &mut |i| {
        let txn = db.begin_write().map_err(|e| e.to_string())?;
        {
            let mut table = txn.open_table(TABLE).map_err(|e| e.to_string())?;
            table
                .insert(format!("f{}", i % 64).as_str(), bytes)
                .map_err(|e| e.to_string())?;
        }
        txn.commit().map_err(|e| e.to_string())
    })
}

/// Whether the command line asks for section `name`: an argument (not a flag, such as the
/// `--bench` cargo passes) that `name` holds, or no argument at all.
fn wanted(name: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
}

fn main() {
    if wanted("compression") {
        if let Err(e) = compression::run_table() {
            eprintln!("blob bench, compression: {e}");
            std::process::exit(1);
        }
    }
    if wanted("compression-dynamic") {
        if let Err(e) = compression::run_dynamic() {
            eprintln!("blob bench, compression's dynamic mode: {e}");
            std::process::exit(1);
        }
    }
    let host = Scale {
        small_grid: (4, 16),
        small_rounds: 50,
        large_grid: (4, 16),
        large_rounds: 8,
        target_bytes: 256 << 20,
        workers: 2,
        gpu: false,
    };
    if wanted("kernels") {
        if let Err(e) = bench(
            HostApi::with_devices(1),
            "the CPU device (host backend)",
            &host,
        ) {
            eprintln!("blob bench on the CPU device failed: {e}");
            std::process::exit(1);
        }
    }
    if wanted("client") {
        if let Err(e) = client_latency() {
            eprintln!("blob bench from another process failed: {e}");
            std::process::exit(1);
        }
    }
    if wanted("kernels") {
        cuda();
    }
}

#[cfg(feature = "cuda")]
fn cuda() {
    let gpu = Scale {
        small_grid: (132, 64),
        small_rounds: 20,
        large_grid: (64, 256),
        large_rounds: 8,
        target_bytes: 1 << 30,
        workers: 8,
        gpu: true,
    };
    if let Some(api) = tandem_tests::gpu::api_or_skip::<tandem_hal_cuda::CudaApi>("blob bench") {
        if let Err(e) = bench(api, "CUDA device 0", &gpu) {
            eprintln!("blob bench on CUDA failed: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda() {
    println!("blob bench on CUDA: skipped: built without the cuda feature");
}
