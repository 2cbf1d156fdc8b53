//! CUDA backend benchmark; prints one table.
//!
//! 1. Empty-kernel launch + stream sync through `GpuDevice::launch` vs raw
//!    cudarc (`cuLaunchKernel` + `cuStreamSynchronize` on the same kernel and
//!    stream), and launch-only throughput (1000 launches, one sync), both
//!    ways. Rounds alternate which path goes first to cancel drift; medians.
//! 2. Pinned vs pageable H2D/D2H bandwidth on 64 MiB, every transfer
//!    verified against a pattern (destinations poisoned first).
//! 3. IPC: cost of getting a handle, and of opening one in another process:
//!    this binary re-runs itself as the child (`--ipc-open-child HEX...`),
//!    which times first and cached opens, verifies the bytes, and prints a
//!    line the parent relays.
//!
//! Without a CUDA device it prints "skipped: no CUDA device" and exits 0,
//! or 1 when `TANDEM_REQUIRE_GPU=1`.

use std::error::Error;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use cudarc::driver::result;
use tandem_hal::{
    DeviceMemory, GpuApi, GpuDevice, HostMemory, IpcMemHandle, KernelSignature, LaunchConfig,
    ModuleArtifacts,
};
use tandem_hal_cuda::{CudaApi, CudaDevice};

type BenchResult<T> = Result<T, Box<dyn Error>>;

const CHILD_FLAG: &str = "--ipc-open-child";
const EMPTY_SOURCE: &str = r#"extern "C" __global__ void tandem_empty() {}"#;
const ROUNDS: usize = 15;
const LATENCY_ITERS: usize = 2000;
const BATCH: usize = 1000;
const COPY_BYTES: usize = 64 << 20;
const COPY_REPS: usize = 8;
const IPC_BUFFERS: usize = 8;
/// Bytes of each IPC buffer the child reads back and checks.
const IPC_CHECK_BYTES: usize = 64 << 10;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let outcome = match args.iter().position(|a| a == CHILD_FLAG) {
        Some(at) => ipc_child(&args[at + 1..]),
        None => parent(),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("benchmark failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Device 0, or the exit code for "no device".
fn device() -> Result<CudaDevice, ExitCode> {
    let why = match CudaApi::load() {
        Ok(api) => match api.device_count() {
            Ok(0) => "the driver reports 0 devices".to_owned(),
            Ok(_) => match api.device(0) {
                Ok(dev) => return Ok(dev),
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    };
    println!("skipped: no CUDA device ({why})");
    if std::env::var("TANDEM_REQUIRE_GPU").as_deref() == Ok("1") {
        Err(ExitCode::FAILURE)
    } else {
        Err(ExitCode::SUCCESS)
    }
}

fn parent() -> BenchResult<ExitCode> {
    let dev = match device() {
        Ok(dev) => dev,
        Err(code) => return Ok(code),
    };
    let props = dev.properties()?;
    println!(
        "CUDA backend benchmark on {} ({}, {} SMs)",
        props.name, props.arch, props.multiprocessor_count
    );
    println!(
        "{:<58} {:>12} {:>12} {:>8}",
        "measure", "tandem", "raw cudarc", "ratio"
    );
    launches(&dev)?;
    copies(&dev)?;
    ipc(&dev)?;
    Ok(ExitCode::SUCCESS)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Median microseconds per operation of `a` and `b` over `ROUNDS` rounds of
/// `iters` operations each, alternating which runs first.
fn compare(
    iters: usize,
    a: &mut dyn FnMut() -> BenchResult<()>,
    b: &mut dyn FnMut() -> BenchResult<()>,
) -> BenchResult<(f64, f64)> {
    let timed = |op: &mut dyn FnMut() -> BenchResult<()>| -> BenchResult<f64> {
        let start = Instant::now();
        for _ in 0..iters {
            op()?;
        }
        Ok(micros(start.elapsed()) / iters as f64)
    };
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            sa.push(timed(a)?);
            sb.push(timed(b)?);
        } else {
            sb.push(timed(b)?);
            sa.push(timed(a)?);
        }
    }
    Ok((median(sa), median(sb)))
}

fn row(what: &str, ours: f64, raw: f64, unit: &str) {
    let ratio = ours / raw;
    let verdict = if ratio <= 1.05 {
        ""
    } else {
        "  (above the 1.05 target)"
    };
    println!("{what:<58} {ours:>9.3} {unit} {raw:>9.3} {unit} {ratio:>8.3}{verdict}");
}

fn launches(dev: &CudaDevice) -> BenchResult<()> {
    let signatures = [KernelSignature {
        name: "tandem_empty",
        params: &[],
    }];
    let artifacts = ModuleArtifacts {
        name: "tandem_bench_empty",
        signatures: &signatures,
        host_table: None,
        cuda_source: Some(EMPTY_SOURCE),
        nvrtc_options: &[],
        ptx: &[],
        cubins: &[],
        hip_code_objects: &[],
    };
    let module = dev.load_module(&artifacts)?;
    let kernel = dev.kernel(&module, "tandem_empty")?;
    let stream = dev.create_stream()?;
    let config = LaunchConfig::linear(1, 1);
    // The raw path launches the very same function on the very same stream.
    let (function, raw_stream) = (kernel.as_raw(), stream.as_raw());

    let ours_launch = || -> BenchResult<()> {
        // SAFETY: the empty kernel touches no memory.
        unsafe { dev.launch(&kernel, &config, &[], &stream) }?;
        Ok(())
    };
    let raw_launch = || -> BenchResult<()> {
        // SAFETY: live function and stream of the context our calls made
        // current on this thread; the kernel takes no parameters.
        unsafe { result::launch_kernel(function, (1, 1, 1), (1, 1, 1), 0, raw_stream, &mut []) }?;
        Ok(())
    };
    let ours_sync = || -> BenchResult<()> { Ok(dev.synchronize_stream(&stream)?) };
    let raw_sync = || -> BenchResult<()> {
        // SAFETY: live stream.
        unsafe { result::stream::synchronize(raw_stream) }?;
        Ok(())
    };

    // Warm up both paths (module load, first-launch setup, clocks).
    for _ in 0..LATENCY_ITERS {
        ours_launch()?;
        ours_sync()?;
        raw_launch()?;
        raw_sync()?;
    }
    let (ours, raw) = compare(
        LATENCY_ITERS,
        &mut || {
            ours_launch()?;
            ours_sync()
        },
        &mut || {
            raw_launch()?;
            raw_sync()
        },
    )?;
    row(
        "empty kernel launch + stream sync (us/launch)",
        ours,
        raw,
        "us",
    );

    let (ours, raw) = compare(
        1,
        &mut || {
            for _ in 0..BATCH {
                ours_launch()?;
            }
            ours_sync()
        },
        &mut || {
            for _ in 0..BATCH {
                raw_launch()?;
            }
            raw_sync()
        },
    )?;
    row(
        &format!("{BATCH} launches, one sync (us/launch)"),
        ours / BATCH as f64,
        raw / BATCH as f64,
        "us",
    );
    Ok(())
}

/// The byte at `index` of a buffer seeded with `seed`.
fn pattern(seed: usize, index: usize) -> u8 {
    ((index.wrapping_mul(2_654_435_761) >> 13) ^ seed.wrapping_mul(0x9E37)) as u8
}

fn fill_pattern(seed: usize, bytes: &mut [u8]) {
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = pattern(seed, i);
    }
}

fn check_pattern(seed: usize, bytes: &[u8], what: &str) -> BenchResult<()> {
    match bytes
        .iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern(seed, i))
    {
        None => Ok(()),
        Some((i, b)) => Err(format!(
            "{what}: byte {i} is {b:#x}, expected {:#x}",
            pattern(seed, i)
        )
        .into()),
    }
}

fn gbps(bytes: usize, micros: f64) -> f64 {
    bytes as f64 / (micros * 1e-6) / 1e9
}

fn copies(dev: &CudaDevice) -> BenchResult<()> {
    let device_buffer = dev.alloc_device(COPY_BYTES)?;
    let pinned = dev.alloc_pinned_mapped(COPY_BYTES)?;
    // SAFETY: the pinned buffer holds COPY_BYTES bytes; only this slice and
    // the synchronous copies below touch it, one at a time.
    let pinned_host = unsafe { std::slice::from_raw_parts_mut(pinned.host_ptr(), COPY_BYTES) };
    let mut pageable = vec![0u8; COPY_BYTES];
    let mut check = vec![0u8; COPY_BYTES];
    let mut results = Vec::new();
    for (label, host) in [
        ("pageable", &mut pageable[..]),
        ("pinned", &mut pinned_host[..]),
    ] {
        let seed = label.len();
        fill_pattern(seed, host);
        dev.fill(&device_buffer, 0, COPY_BYTES, 0xEE)?;
        let mut h2d = Vec::new();
        for _ in 0..COPY_REPS {
            let start = Instant::now();
            dev.copy_to_device(&device_buffer, 0, host)?;
            h2d.push(micros(start.elapsed()));
        }
        check.fill(0x5A);
        dev.copy_from_device(&mut check, &device_buffer, 0)?;
        check_pattern(seed, &check, &format!("{label} H2D"))?;
        let mut d2h = Vec::new();
        for _ in 0..COPY_REPS {
            host.fill(0xC3);
            let start = Instant::now();
            dev.copy_from_device(host, &device_buffer, 0)?;
            d2h.push(micros(start.elapsed()));
            check_pattern(seed, host, &format!("{label} D2H"))?;
        }
        results.push((
            label,
            gbps(COPY_BYTES, median(h2d)),
            gbps(COPY_BYTES, median(d2h)),
        ));
    }
    for (label, h2d, d2h) in results {
        println!(
            "{:<58} {h2d:>9.2} GB/s",
            format!("{label} H2D copy, 64 MiB")
        );
        println!(
            "{:<58} {d2h:>9.2} GB/s",
            format!("{label} D2H copy, 64 MiB")
        );
    }
    Ok(())
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> BenchResult<IpcMemHandle> {
    if text.len() != 128 || !text.is_ascii() {
        return Err(format!("handle `{text}` is not 128 hex digits").into());
    }
    let mut bytes = [0u8; 64];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)?;
    }
    Ok(IpcMemHandle(bytes))
}

fn ipc(dev: &CudaDevice) -> BenchResult<()> {
    let mut buffers = Vec::new();
    let mut export_us = Vec::new();
    let mut handles = Vec::new();
    let mut payload = vec![0u8; IPC_CHECK_BYTES];
    for seed in 0..IPC_BUFFERS {
        let buffer = dev.alloc_device_exportable(IPC_CHECK_BYTES)?;
        fill_pattern(seed, &mut payload);
        dev.copy_to_device(&buffer, 0, &payload)?;
        // First export of a fresh allocation: the driver call, not the cache.
        let start = Instant::now();
        let handle = dev.ipc_export_memory(&buffer)?;
        export_us.push(micros(start.elapsed()));
        handles.push(to_hex(&handle.0));
        buffers.push(buffer);
    }
    println!(
        "{:<58} {:>9.3} us",
        "IPC get handle (cuIpcGetMemHandle, median)",
        median(export_us)
    );

    let exe = std::env::current_exe()?;
    // `output` waits for (reaps) the child; its failure fails the benchmark.
    let child = Command::new(exe).arg(CHILD_FLAG).args(&handles).output()?;
    let stdout = String::from_utf8_lossy(&child.stdout);
    if !child.status.success() {
        return Err(format!(
            "IPC child failed ({}): {stdout}{}",
            child.status,
            String::from_utf8_lossy(&child.stderr)
        )
        .into());
    }
    for line in stdout.lines().filter(|l| l.starts_with("ipc ")) {
        let (what, value) = line[4..].split_once('=').ok_or("malformed child line")?;
        println!(
            "{:<58} {:>9.3} us",
            format!("IPC {what} (other process, median)"),
            value.parse::<f64>()?
        );
    }
    // The child closed its mappings before exiting; the exporter frees now.
    drop(buffers);
    Ok(())
}

/// The child: opens each handle (timing the first open and a cached
/// re-open), checks the bytes, prints `ipc <what>=<us>` lines.
fn ipc_child(hex_handles: &[String]) -> BenchResult<ExitCode> {
    let dev = match device() {
        Ok(dev) => dev,
        Err(_) => return Err("the parent has a device, the child none".into()),
    };
    let (mut first, mut cached) = (Vec::new(), Vec::new());
    let mut check = vec![0u8; IPC_CHECK_BYTES];
    for (seed, hex) in hex_handles.iter().enumerate() {
        let handle = from_hex(hex)?;
        let start = Instant::now();
        let opened = dev.ipc_open_memory(&handle)?;
        first.push(micros(start.elapsed()));
        let start = Instant::now();
        let again = dev.ipc_open_memory(&handle)?;
        cached.push(micros(start.elapsed()));
        if again.device_ptr() != opened.device_ptr() || opened.len() < IPC_CHECK_BYTES {
            return Err("cached open differs from the first, or is too short".into());
        }
        check.fill(0x77);
        dev.copy_from_device(&mut check, &opened, 0)?;
        check_pattern(seed, &check, "IPC-opened memory")?;
    }
    if first.is_empty() {
        return Err("no handles given".into());
    }
    println!("ipc first open (cuIpcOpenMemHandle)={:.3}", median(first));
    println!("ipc cached re-open={:.3}", median(cached));
    Ok(ExitCode::SUCCESS)
}
