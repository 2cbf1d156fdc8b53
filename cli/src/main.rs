//! `tandem`: Tandem's command-line entry point (`tandem --help`).
//!
//! * `tandem demo [--json] [--devices LIST]`: starts a runtime on the best
//!   backend (CUDA when compiled in and a device is present, else the CPU
//!   device), launches kernels on every device whose threads send tasks to
//!   the CPU workers and to the devices' services and wait, and reports
//!   tasks, errors, throughput and latency per device and in all, ending
//!   with one verdict line (`demo.rs`).
//! * `tandem run [--config FILE] [--announce] [--exit-on-stdin-eof]`: serves
//!   a runtime until SIGINT/SIGTERM (or until stdin closes), then removes its
//!   segments. `--announce` prints
//!   `ready <cpu segment> <pid>` on stdout once serving (what
//!   `Client::fork_runtime` waits for).
//! * `tandem info [--json]`: lists backends and devices.
//! * `tandem status [--segment NAME] [--json]`: what a running runtime's
//!   status block says.
//! * `tandem clean [--dry-run]`: removes Tandem segments in `/dev/shm` whose
//!   owner process is gone.
//! * `tandem blob run|put|get|ls|stat|rm|demo ...`: the blob store's
//!   commands (`blob.rs`): a runtime serving the blob pool, a store looked
//!   at directly, kernels putting and getting blobs.
//!
//! Results go to stdout; logs (`tracing`, filtered by `RUST_LOG`, default
//! `info`) to stderr. Usage errors exit 2.

mod blob;
mod demo;
mod share;
mod stdout;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use tandem_hal::{GpuApi, GpuDevice, HostApi};
use tandem_runtime::status::{read_status, single_live_runtime, StatusSnapshot};
use tandem_runtime::{
    clean_stale_segments, clean_stale_temp_folders, init_logging, on_best_backend, serve, Backend,
    Config, OnBackend, Registry, ServeOptions,
};

/// Tandem: host threads and GPU kernels sharing memory and work.
#[derive(Parser, Debug)]
#[command(name = "tandem", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// One variant and one function per subcommand.
#[derive(Subcommand, Debug)]
enum Command {
    /// Runs kernels that send tasks to CPU workers and to the device's
    /// service, and reports what happened.
    Demo(demo::DemoArgs),
    /// Serves a runtime that host clients attach to, until killed.
    Run(RunArgs),
    /// Lists the backends compiled in, their devices and properties.
    Info(InfoArgs),
    /// Asks a running runtime (through its CPU segment) what it is doing.
    Status(StatusArgs),
    /// Removes Tandem segments in /dev/shm whose owner process is gone, and
    /// the temporary folders of demos that were killed.
    Clean(CleanArgs),
    /// The blob store: serve it, look at it, run its demo.
    #[command(subcommand)]
    Blob(blob::BlobCommand),
    /// Shared buffers between processes: the daemon and a look at it.
    #[command(subcommand)]
    Share(share::ShareCommand),
}

/// `tandem run`'s options.
#[derive(Args, Debug)]
struct RunArgs {
    /// A TOML configuration (see tandem.example.toml); defaults otherwise.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Prints `ready <cpu segment> <pid>` on stdout once serving.
    #[arg(long)]
    announce: bool,
    /// Stops (cleanly) when stdin closes, e.g. when the parent dies.
    #[arg(long)]
    exit_on_stdin_eof: bool,
}

#[derive(Args, Debug)]
struct InfoArgs {
    /// Prints the backends and devices as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// The runtime's CPU segment (in /dev/shm); default: the one live runtime.
    #[arg(long, value_name = "NAME")]
    segment: Option<String>,
    /// Prints the status as JSON (the schema in docs/status.md).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct CleanArgs {
    /// Lists what would be removed, and removes nothing.
    #[arg(long)]
    dry_run: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    // Services and demos hold segments and folders that a SIGPIPE would
    // leave behind; the others print and exit.
    let holds_resources = matches!(
        &cli.command,
        Command::Demo(_)
            | Command::Run(_)
            | Command::Blob(blob::BlobCommand::Run(_) | blob::BlobCommand::Demo(_))
            | Command::Share(share::ShareCommand::Serve(_))
    );
    if !holds_resources {
        stdout::end_quietly_when_the_reader_leaves();
    }
    match cli.command {
        Command::Demo(args) => demo_command(args),
        Command::Run(args) => report(run_on_best_backend(BackendCommand::Run(args)).map(drop)),
        Command::Info(args) => report(info(args)),
        Command::Status(args) => report(status(args)),
        Command::Clean(args) => report(clean(args)),
        Command::Blob(command) => blob::run(command),
        Command::Share(command) => share::run(command),
    }
}

fn report(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("tandem: {why}");
            ExitCode::from(1)
        }
    }
}

/// `tandem clean`: one line per stale segment and per temporary folder of a
/// killed demo, then counts.
fn clean(args: CleanArgs) -> Result<(), String> {
    let stale = clean_stale_segments(args.dry_run).map_err(|e| e.to_string())?;
    let folders = clean_stale_temp_folders(
        &[demo::DEMO_STORE_KIND, blob::DEMO_STORE_KIND],
        args.dry_run,
    )
    .map_err(|e| format!("cleaning {}: {e}", std::env::temp_dir().display()))?;
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for segment in &stale {
        println!("{verb} /dev/shm/{segment}");
    }
    for folder in &folders {
        println!("{verb} {} (a killed demo's store)", folder.display());
    }
    println!(
        "{verb} {} stale segment(s), {} stale folder(s)",
        stale.len(),
        folders.len()
    );
    Ok(())
}

enum BackendCommand {
    Demo(demo::DemoArgs),
    Run(RunArgs),
}

impl OnBackend for BackendCommand {
    /// `Ok(false)`: it ran, and reported a failure itself.
    type Output = Result<bool, String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        match self {
            BackendCommand::Demo(args) => demo::demo(api, &backend.to_string(), &args),
            BackendCommand::Run(args) => {
                let config = match &args.config {
                    Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
                    None => Config::default(),
                };
                let options = ServeOptions {
                    announce: args.announce,
                    exit_on_stdin_eof: args.exit_on_stdin_eof,
                };
                serve(api, backend, config, Registry::with_builtins(), options)
                    .map_err(|e| format!("serving the runtime: {e}"))?;
                Ok(true)
            }
        }
    }
}

/// Runs `command` on the best backend; `Ok(false)`: it ran, and reported a
/// failure itself.
fn run_on_best_backend(command: BackendCommand) -> Result<bool, String> {
    on_best_backend(command).map_err(|e| e.to_string())?
}

/// Runs the demo and prints its verdict line (text) or report (JSON);
/// exit 1 when anything failed.
fn demo_command(args: demo::DemoArgs) -> ExitCode {
    let json = args.json;
    match run_on_best_backend(BackendCommand::Demo(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(why) => {
            eprintln!("tandem: {why}");
            if !json {
                println!("demo: FAILED: {why}");
            }
            ExitCode::from(1)
        }
    }
}

/// One backend in `tandem info --json`.
#[derive(Serialize)]
struct BackendInfo {
    backend: &'static str,
    compiled_in: bool,
    /// Why it could not be used, if so.
    error: Option<String>,
    devices: Vec<DeviceInfo>,
}

/// One device in `tandem info --json`.
#[derive(Serialize)]
struct DeviceInfo {
    ordinal: usize,
    /// Why it could not be opened; the other fields are then empty.
    error: Option<String>,
    name: String,
    arch: String,
    total_memory: u64,
    multiprocessors: u32,
    warp_size: u32,
    can_map_host_memory: bool,
    host_native_atomics: bool,
    pci_bus_id: Option<String>,
    host_numa_node: Option<u32>,
    numa_source: String,
}

fn list_devices<A: GpuApi>(backend: &'static str) -> BackendInfo {
    let mut info = BackendInfo {
        backend,
        compiled_in: true,
        error: None,
        devices: Vec::new(),
    };
    match A::load().and_then(|api| Ok((api.device_count()?, api))) {
        Err(e) => info.error = Some(e.to_string()),
        Ok((count, api)) => {
            for ordinal in 0..count {
                let device = match api.device(ordinal).and_then(|d| d.properties()) {
                    Ok(p) => DeviceInfo {
                        ordinal,
                        error: None,
                        name: p.name,
                        arch: p.arch,
                        total_memory: p.total_memory,
                        multiprocessors: p.multiprocessor_count,
                        warp_size: p.warp_size,
                        can_map_host_memory: p.can_map_host_memory,
                        host_native_atomics: p.host_native_atomics,
                        pci_bus_id: p.pci_bus_id,
                        host_numa_node: p.host_numa_node,
                        numa_source: format!("{:?}", p.numa_source),
                    },
                    Err(e) => DeviceInfo {
                        ordinal,
                        error: Some(e.to_string()),
                        name: String::new(),
                        arch: String::new(),
                        total_memory: 0,
                        multiprocessors: 0,
                        warp_size: 0,
                        can_map_host_memory: false,
                        host_native_atomics: false,
                        pci_bus_id: None,
                        host_numa_node: None,
                        numa_source: String::new(),
                    },
                };
                info.devices.push(device);
            }
        }
    }
    info
}

/// A backend left out of this build.
#[cfg(not(all(feature = "cuda", feature = "hip")))]
fn not_compiled(backend: &'static str, feature: &str) -> BackendInfo {
    BackendInfo {
        backend,
        compiled_in: false,
        error: Some(format!("not compiled in (build with --features {feature})")),
        devices: Vec::new(),
    }
}

fn info(args: InfoArgs) -> Result<(), String> {
    let backends = [
        list_devices::<HostApi>("host"),
        #[cfg(feature = "cuda")]
        list_devices::<tandem_hal_cuda::CudaApi>("cuda"),
        #[cfg(not(feature = "cuda"))]
        not_compiled("cuda", "cuda"),
        #[cfg(feature = "hip")]
        list_devices::<tandem_hal_hip::HipApi>("hip"),
        #[cfg(not(feature = "hip"))]
        not_compiled("hip", "hip"),
    ];
    if args.json {
        let text = serde_json::to_string_pretty(&backends).map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(());
    }
    for b in &backends {
        let label = match b.backend {
            "host" => "host (CPU device)",
            "cuda" => "CUDA",
            _ => "HIP",
        };
        match &b.error {
            Some(why) if !b.compiled_in => println!("{label}: {why}"),
            Some(why) => println!("{label}: unavailable ({why})"),
            None => println!("{label}: {} device(s)", b.devices.len()),
        }
        for d in &b.devices {
            if let Some(why) = &d.error {
                println!("  [{}] cannot open: {why}", d.ordinal);
                continue;
            }
            println!(
                "  [{}] {} ({}), {} MiB, {} SMs/CUs/threads, warp {}",
                d.ordinal,
                d.name,
                d.arch,
                d.total_memory >> 20,
                d.multiprocessors,
                d.warp_size
            );
            println!(
                "      maps host memory: {}, host-native atomics: {}, PCI {}, host NUMA node {} ({})",
                d.can_map_host_memory,
                d.host_native_atomics,
                d.pci_bus_id.as_deref().unwrap_or("-"),
                d.host_numa_node
                    .map_or("unknown".to_string(), |n| n.to_string()),
                d.numa_source
            );
        }
    }
    Ok(())
}

fn status(args: StatusArgs) -> Result<(), String> {
    let name = match args.segment {
        Some(name) => name,
        None => single_live_runtime().map_err(|e| e.to_string())?,
    };
    let status = read_status(&name).map_err(|e| e.to_string())?;
    if args.json {
        let text = serde_json::to_string_pretty(&status).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print_status(&status);
    }
    if status.runtime.process == "gone" {
        return Err(format!(
            "the runtime of segment {name} (pid {}) is gone: killed or crashed; the figures \
             are the last it published. `tandem clean` removes its segment",
            status.runtime.pid
        ));
    }
    Ok(())
}

fn print_status(s: &StatusSnapshot) {
    let r = &s.runtime;
    let c = &s.config;
    println!("segment   {}", s.segment);
    let gone = r.process == "gone";
    if gone {
        println!(
            "runtime   pid {} (gone; it last said {}), {} backend, up {:.1} s when it last wrote",
            r.pid, r.state, r.backend, r.uptime_s
        );
    } else {
        println!(
            "runtime   pid {} ({}, {}), {} backend, up {:.1} s",
            r.pid, r.process, r.state, r.backend, r.uptime_s
        );
    }
    let capped = if s.workers.running < c.workers {
        format!(" ({} configured, capped by the cores)", c.workers)
    } else {
        String::new()
    };
    if gone {
        println!(
            "workers   none running (it ran {}{capped})",
            s.workers.running
        );
    } else {
        println!(
            "workers   {} running{capped}, {} busy",
            s.workers.running, s.workers.busy
        );
    }
    println!(
        "queues    {} lanes ({} on a GPU's segments) x {} slots, copy space {} bytes",
        c.lanes, c.gpu_lanes, c.queue_depth, c.copy_space
    );
    let t = &s.tasks;
    println!(
        "tasks     {} completed, {} failed ({:.0} /s); {} bad pointers, {} double completions",
        t.completed, t.failed, t.per_second, t.bad_pointers, t.double_completions
    );
    match s.clients_attached {
        Some(n) => println!("clients   {n} attached"),
        None => println!("clients   unknown (not counted by this runtime)"),
    }
    // A heap whose largest request is well below its free bytes is
    // fragmented (its free memory lies between live blocks), not full.
    for c in &s.clients {
        println!(
            "  slot {} pid {} {}: {} futures; heap {} bytes, {} in use, {} free, \
             largest request {} bytes",
            c.slot,
            c.pid,
            c.state,
            c.futures,
            c.heap_bytes,
            c.in_use_bytes,
            c.free_bytes,
            c.largest_request
        );
    }
    println!();
    println!(
        "{:>6}  {:<24} {:>12} {:>10}",
        "pool", "name", "completed", "failed"
    );
    for p in &s.pools {
        println!(
            "{:>6}  {:<24} {:>12} {:>10}",
            p.id, p.name, p.completed, p.failed
        );
    }
    if s.other.completed > 0 {
        println!(
            "{:>6}  {:<24} {:>12} {:>10}",
            "-", "(other)", s.other.completed, s.other.failed
        );
    }
    println!();
    println!(
        "{:<8} {:>6} {:>6} {:>10} {:>6} {:>8} {:>8} {:>12}",
        "segment", "device", "NUMA", "MiB", "lanes", "queued", "workers", "tasks"
    );
    let or_dash = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    for seg in &s.segments {
        println!(
            "{:<8} {:>6} {:>6} {:>10} {:>6} {:>8} {:>8} {:>12}",
            seg.kind,
            or_dash(seg.device),
            or_dash(seg.numa_node),
            seg.bytes >> 20,
            seg.lanes,
            seg.queued,
            seg.workers,
            seg.tasks
        );
    }
    if (s.segments.len() as u32) < s.segments_total {
        println!(
            "(and {} more device segments)",
            s.segments_total - s.segments.len() as u32
        );
    }
}
