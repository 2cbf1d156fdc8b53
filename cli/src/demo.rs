//! `tandem demo`: kernels on every device (or those `--devices` names) send
//! tasks to the CPU workers and to their devices' services at the same
//! time, and to another device's service over a peer route; the blob store's
//! kernels put and get; stop flags release every device's waiting kernels.
//! Per-device figures and a total, then one verdict line.
//!
//! `demo` drives the phases, each in its file: `workers`, `services` (with
//! the stop flags), `peers`, the blob store's part (`crate::blob`), then
//! `report`; `figures` are what they measure.

mod figures;
mod peers;
mod report;
mod services;
mod workers;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use tandem_blob::{BlobStore, StoreConfig};
use tandem_hal::GpuApi;
use tandem_runtime::kernels::{EchoLaunch, EchoOutcome, EchoPriority, EchoRoute, RuntimeKernels};
use tandem_runtime::{
    math, on_best_backend, Backend, Config, DeviceQueues, DeviceSelection, OnBackend, Registry,
    Runtime,
};
use tempfile::TempDir;

use crate::{blob, stdout};
use report::{Phases, Report};

/// `tandem demo`'s options.
#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Prints the figures as one JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// The devices to run on, by ordinal (`0,1`); default: every device.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    devices: Option<Vec<usize>>,
}

/// What names `tandem demo`'s temporary blob store
/// ([`tandem_runtime::owned_temp_prefix`]), which `tandem clean` removes
/// once its owner is gone.
pub(crate) const DEMO_STORE_KIND: &str = "demo-blob";

/// What the demo's phases share: the runtime and its devices, and the first launch.
struct Demo<'r, A: GpuApi> {
    runtime: &'r Runtime<A>,
    devices: &'r [DeviceQueues<A>],
    /// A GPU, not the CPU device.
    gpu: bool,
    json: bool,
    /// The launch to the CPU workers, which the other launches vary.
    launch: EchoLaunch,
}

impl<'r, A: GpuApi> Demo<'r, A> {
    fn new(runtime: &'r Runtime<A>, json: bool) -> Result<Self, String> {
        let devices = runtime.devices();
        if devices.is_empty() {
            return Err("no device to run the demo's kernels on".into());
        }
        let gpu = A::BACKEND != tandem_hal::Backend::Host;
        // Real GPUs take many threads; the CPU device runs the grid on a few
        // cores, so it gets a smaller grid.
        let launch = EchoLaunch {
            blocks: if gpu { 264 } else { 8 },
            threads: if gpu { 128 } else { 16 },
            tasks_per_thread: if gpu { 64 } else { 200 },
            method: math::ADD,
            priority: EchoPriority::Alternate,
            route: EchoRoute::CpuWorkers,
            spin_budget: 1 << 40,
        };
        Ok(Self {
            runtime,
            devices,
            gpu,
            json,
            launch,
        })
    }

    /// Prints a line of the text report.
    fn say(&self, line: String) {
        say(self.json, line);
    }

    /// What the device is called in the report. Words for what runs where: "GPU service" on a
    /// CPU device would say something that did not happen.
    fn device_word(&self) -> &'static str {
        if self.gpu {
            "GPU"
        } else {
            "CPU device"
        }
    }

    /// What runs the tasks sent to a device's service, in words.
    fn service(&self) -> &'static str {
        if self.gpu {
            "GPU service (a persistent kernel on the GPU)"
        } else {
            "device service (a persistent kernel on the CPU device)"
        }
    }
}

/// Prints `line` unless the report is JSON.
fn say(json: bool, line: String) {
    if !json {
        stdout::print_line(&line);
    }
}

/// Host round trips of `count` `math.add(i, b)` tasks through `submit`; the
/// failures (errors and wrong answers) are counted, the first one logged.
fn host_round_trips<E: std::fmt::Display>(
    count: u64,
    b: u64,
    what: &str,
    mut submit: impl FnMut(&math::Add) -> Result<u64, E>,
) -> (Vec<Duration>, u64) {
    let mut times = Vec::with_capacity(count as usize);
    let mut failed = 0;
    for a in 0..count {
        let start = Instant::now();
        let answer = submit(&math::Add { a, b });
        times.push(start.elapsed());
        let why = match answer {
            Ok(sum) if sum == a + b => continue,
            Ok(sum) => format!("returned {sum}"),
            Err(e) => e.to_string(),
        };
        if failed == 0 {
            tracing::warn!("{what}: add({a}, {b}) {why}");
        }
        failed += 1;
    }
    (times, failed)
}

/// Runs `launch` on every device's kernels at once; the outcomes in device
/// order and the time from before the first launch to after the last.
fn echo_on_every_device<A: GpuApi>(
    kernels: &mut [RuntimeKernels<'_, A>],
    launch: &EchoLaunch,
) -> Result<(Vec<EchoOutcome>, Duration), String> {
    let start = Instant::now();
    let outcomes = std::thread::scope(|s| {
        let running: Vec<_> = kernels
            .iter_mut()
            .map(|k| s.spawn(move || k.echo(launch)))
            .collect();
        running
            .into_iter()
            .map(|t| match t.join() {
                Ok(outcome) => outcome.map_err(|e| e.to_string()),
                Err(_) => Err("a launch thread panicked".to_string()),
            })
            .collect::<Result<Vec<_>, String>>()
    })?;
    Ok((outcomes, start.elapsed()))
}

/// "1 device", "2 devices".
fn devices_word(n: usize) -> String {
    if n == 1 {
        "1 device".into()
    } else {
        format!("{n} devices")
    }
}

impl OnBackend for DemoArgs {
    /// `Ok(false)`: it ran, and reported a failure itself.
    type Output = Result<bool, String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        demo(api, backend.describe(), &self)
    }
}

/// `tandem demo` on the best backend: its verdict line (text) or report
/// (JSON); exit 1 when anything failed.
pub(crate) fn demo_command(args: DemoArgs) -> ExitCode {
    let json = args.json;
    match on_best_backend(args).map_err(|e| e.to_string()) {
        Ok(Ok(true)) => ExitCode::SUCCESS,
        Ok(Ok(false)) => ExitCode::from(1),
        Ok(Err(why)) | Err(why) => {
            eprintln!("tandem: {why}");
            if !json {
                stdout::print_line(&format!("demo: FAILED: {why}"));
            }
            ExitCode::from(1)
        }
    }
}

/// The demo; `Ok(false)` when tasks failed (the report says so).
pub(crate) fn demo<A: GpuApi>(api: A, backend: &str, args: &DemoArgs) -> Result<bool, String> {
    let json = args.json;
    let config = config(&api, args)?;
    let (store_dir, store) = open_store()?;
    let mut registry = Registry::with_builtins();
    tandem_blob::pool::register(&mut registry, Arc::clone(&store)).map_err(|e| e.to_string())?;
    say(json, format!("tandem demo on {backend}"));
    // Kernels in flight cannot be interrupted: on SIGINT/SIGTERM, remove the
    // named segments and the store's folder, and exit.
    let folder = store_dir.path().to_owned();
    tandem_process::exit_on_termination(move || {
        let _ = std::fs::remove_dir_all(folder);
    })
    .map_err(|e| e.to_string())?;
    let runtime = Runtime::start_with(api, config, registry)
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let demo = Demo::new(&runtime, json)?;
    // Every module is loaded before any service starts: a service spinning
    // on its device would hold up a lazy load there.
    let mut kernels = demo
        .devices
        .iter()
        .map(RuntimeKernels::load)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let workers = workers::run(&demo, &mut kernels)?;
    let (running, services) = services::run(&demo, &mut kernels)?;
    let peers = peers::run(&demo, &mut kernels)?;
    // In this order: the services stop before the blob phase, and stop flags come last.
    let phases = Phases {
        workers,
        services,
        peers,
        served: services::stop(&demo, running)?,
        blob: blobs(&demo, &store)?,
        stop_flags: services::stop_flags(&demo, &mut kernels)?,
    };
    drop(kernels);
    let report = Report::of(&demo, backend, phases);
    runtime.shutdown().map_err(|e| e.to_string())?;
    report.print()
}

/// The runtime's configuration for the devices `args` names (all by default).
fn config<A: GpuApi>(api: &A, args: &DemoArgs) -> Result<Config, String> {
    let devices_asked = match &args.devices {
        Some(list) => list.len(),
        None => api.device_count().map_err(|e| e.to_string())?,
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(Config {
        devices: args
            .devices
            .clone()
            .map_or(DeviceSelection::All, DeviceSelection::Only),
        // The default worker count for each device, as far as the cores go:
        // more devices, more workers.
        workers_per_device: Some(
            (cores / devices_asked.max(1)).clamp(1, Config::default().workers),
        ),
        // The blob part's tasks carry names; its kernel threads' data
        // buffers live in the device segment.
        copy_space: tandem_blob::wire::COPY_SPACE,
        gpu_segment_size: 96 << 20,
        ..Config::default()
    })
}

/// The blob part's store: a RAM and a file target in a temporary folder,
/// removed at the end.
fn open_store() -> Result<(TempDir, Arc<BlobStore>), String> {
    let store_dir = tempfile::Builder::new()
        // Names its owner: `tandem clean` removes what a killed demo left.
        .prefix(&tandem_runtime::owned_temp_prefix(DEMO_STORE_KIND))
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let store = Arc::new(
        BlobStore::open(&StoreConfig::ram_and_file(store_dir.path(), 64 << 20))
            .map_err(|e| format!("opening the demo's blob store: {e}"))?,
    );
    Ok((store_dir, store))
}

/// The blob store, a pool of this runtime: kernel threads put and get
/// blobs of their own, the host checks them (after the services stopped:
/// it loads a module).
fn blobs<A: GpuApi>(demo: &Demo<'_, A>, store: &BlobStore) -> Result<blob::Tally, String> {
    demo.say("blob store (a pool of this runtime; RAM and file targets):".to_string());
    blob::demo_part(demo.runtime, store, demo.gpu, &|line| {
        demo.say(format!("  {line}"))
    })
}
