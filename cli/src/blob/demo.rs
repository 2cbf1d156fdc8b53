//! `tandem blob demo`: kernels putting and getting blobs through a runtime,
//! checked from the host; `tandem demo` runs its part too.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tandem_blob::demo::{pattern, BlobKernels, PutGetLaunch, PutGetMode};
use tandem_blob::{pool, BlobCaller, BlobStore, Score, StoreConfig};
use tandem_hal::GpuApi;
use tandem_runtime::{
    on_best_backend, owned_temp_prefix, Backend, Config, DeviceSelection, OnBackend, Registry,
    Runtime,
};

use super::config::{configs, with_copy_space};
use super::direct::open_store;
use super::ConfigArg;
use crate::stdout;

/// What names `tandem blob demo`'s temporary store
/// ([`tandem_runtime::owned_temp_prefix`]).
pub(crate) const DEMO_STORE_KIND: &str = "blob-demo";

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// A configuration as for `run`; default: a temporary store (a 64 MiB
    /// RAM target and a 64 MiB file target), removed at the end.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Runs the demo; its verdict line is printed either way.
pub(super) fn demo_command(args: DemoArgs) -> ExitCode {
    match demo(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(why) => {
            eprintln!("tandem blob: {why}");
            stdout::print_line(&format!("blob demo: FAILED: {why}"));
            ExitCode::from(1)
        }
    }
}

/// The demo's store: the configured one, or a temporary one (kept alive
/// by `dir` until the end).
fn demo(args: DemoArgs) -> Result<bool, String> {
    let (runtime, store, dir) = match &args.config {
        Some(path) => {
            let configs = configs(&ConfigArg {
                config: Some(path.clone()),
            })?;
            let runtime = with_copy_space(configs.runtime, configs.copy_space_set);
            (runtime, configs.store, None)
        }
        None => {
            let dir = tempfile::Builder::new()
                // Names its owner: `tandem clean` removes what a killed demo left.
                .prefix(&owned_temp_prefix(DEMO_STORE_KIND))
                .tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let store = StoreConfig::ram_and_file(dir.path(), 64 << 20);
            (with_copy_space(Config::default(), false), store, Some(dir))
        }
    };
    let store = Arc::new(open_store(&store)?);
    let config = Config {
        devices: DeviceSelection::Only(vec![0]),
        // Every kernel thread's data and result buffers live there.
        gpu_segment_size: runtime.gpu_segment_size.max(96 << 20),
        ..runtime
    };
    // Kernels in flight cannot be interrupted: on SIGINT/SIGTERM, remove the
    // named segments and the temporary store's folder, and exit.
    let folder = dir.as_ref().map(|d| d.path().to_owned());
    tandem_process::exit_on_termination(move || {
        if let Some(folder) = folder {
            let _ = std::fs::remove_dir_all(folder);
        }
    })
    .map_err(|e| e.to_string())?;
    let ok = on_best_backend(Demo {
        config,
        store: Arc::clone(&store),
    })
    .map_err(|e| e.to_string())??;
    Ok(ok)
}

/// The demo's work on the backend `on_best_backend` picks.
struct Demo {
    config: Config,
    store: Arc<BlobStore>,
}

/// What the demo counted.
#[derive(Default)]
pub(crate) struct Tally {
    /// Puts the kernels made.
    pub(crate) puts: u64,
    /// Gets the kernels and the host made.
    pub(crate) gets: u64,
    /// Threads that failed, and blobs the host found wrong.
    pub(crate) failed: u64,
}

impl OnBackend for Demo {
    type Output = Result<bool, String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        let store = self.store;
        stdout::print_line(&format!("tandem blob demo on {}", backend.describe()));
        let mut registry = Registry::with_builtins();
        pool::register(&mut registry, Arc::clone(&store)).map_err(|e| e.to_string())?;
        let runtime = Runtime::start_with(api, self.config, registry)
            .map_err(|e| format!("cannot start the runtime: {e}"))?;
        let tally = demo_part(&runtime, &store, backend.is_gpu(), &|line| {
            stdout::print_line(&line)
        });
        runtime.shutdown().map_err(|e| e.to_string())?;
        let tally = tally?;
        let ok = tally.failed == 0;
        stdout::print_line(&format!(
            "blob demo: {} puts, {} gets, {} failed: {}",
            tally.puts,
            tally.gets,
            tally.failed,
            if ok { "ok" } else { "FAILED" }
        ));
        Ok(ok)
    }
}

/// The blob part of a demo, on a runtime serving `store` through the blob
/// pool (device 0 served, a `copy_space` of at least
/// [`wire::COPY_SPACE`]): kernels put, get and compare blobs of their own
/// (RAM, then the 0.5 tier), then the host checks every blob's size and
/// reads a few back through the task path. `say` prints a line.
pub(crate) fn demo_part<A: GpuApi>(
    runtime: &Runtime<A>,
    store: &BlobStore,
    gpu: bool,
    say: &dyn Fn(String),
) -> Result<Tally, String> {
    let mut kernels = BlobKernels::load(&runtime.devices()[0]).map_err(|e| e.to_string())?;
    // The CPU device runs the grid on a few cores: a smaller grid.
    let (blocks, threads) = if gpu { (66, 64) } else { (4, 16) };
    let blob_bytes = 4096u64;
    let rounds = 3u64;
    let mut tally = Tally::default();
    let caller = BlobCaller::new(runtime).with_timeout(Duration::from_secs(30));
    for (tag_name, score, words) in [
        ("demo-auto", Score::AUTO, "auto"),
        ("demo-tier", Score(0.5), "0.5"),
    ] {
        let tag = store
            .get_or_create_tag(tag_name)
            .map_err(|e| e.to_string())?;
        let mode = PutGetMode::PutGetCheck;
        let mut launch = PutGetLaunch::new((blocks, threads), tag, blob_bytes, rounds, mode);
        launch.score = score;
        let n = u64::from(blocks * threads);
        say(format!(
            "kernel: {blocks} x {threads} threads x {rounds} rounds of put, get, compare; \
             {blob_bytes} B blobs, tag {tag_name} ({words})"
        ));
        let outcome = kernels.put_get(&launch).map_err(|e| e.to_string())?;
        let failed_threads = outcome.failed_threads() as u64;
        if let Some((rank, status, code)) = outcome.first_failure() {
            tracing::warn!(
                "thread {rank}: status {status}, code {code} ({})",
                pool::describe(code)
            );
        }
        let ops = n * rounds;
        let secs = outcome.elapsed.as_secs_f64();
        tally.puts += ops;
        tally.gets += ops;
        tally.failed += failed_threads;
        say(format!(
            "  {ops} puts + {ops} gets in {secs:.3} s: {:.0} puts/s, {:.3} GB/s; \
             {failed_threads} threads failed",
            ops as f64 / secs,
            (2 * ops * blob_bytes) as f64 / secs / 1e9
        ));
        // Every blob from the host: the store's index for all, the task
        // path (BlobCaller) for a few.
        let mut durable = 0;
        let mut read_back = 0;
        let mut back = vec![0u8; blob_bytes as usize];
        for rank in 0..n {
            let name = format!("k{rank}");
            match store.stat(tag, &name) {
                Ok(s) if s.size == blob_bytes => durable += u64::from(s.durable),
                Ok(s) => {
                    tracing::warn!("{tag_name}/{name}: size {} not {blob_bytes}", s.size);
                    tally.failed += 1;
                }
                Err(e) => {
                    tracing::warn!("{tag_name}/{name}: {e}");
                    tally.failed += 1;
                }
            }
            if rank % (n / 8).max(1) != 0 {
                continue;
            }
            tally.gets += 1;
            read_back += 1;
            let good = match caller.get(tag, &name, 0, &mut back) {
                Ok(()) => back
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern(rank, rounds - 1, i as u64)),
                Err(e) => {
                    tracing::warn!("host get {tag_name}/{name}: {e}");
                    false
                }
            };
            tally.failed += u64::from(!good);
        }
        say(format!(
            "  host: {n} blobs of {blob_bytes} bytes ({durable} durable), {read_back} gets \
             of them through the task path"
        ));
    }
    drop(kernels);
    Ok(tally)
}
