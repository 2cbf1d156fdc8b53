//! Running on the best backend at hand, and serving a runtime until told to
//! stop: what `tandem run` does, for any binary that registers pools of its
//! own (the blob store's `tandem blob run`).

use tandem_hal::{GpuApi, HostApi};
use tandem_process::{wake_on_stdin_eof, Termination, READY_PREFIX};

use crate::config::Config;
use crate::error::RuntimeError;
use crate::registry::Registry;
use crate::runtime::Runtime;

/// Which backend [`on_best_backend`] picked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Backend {
    /// An NVIDIA GPU (`tandem-hal-cuda`).
    Cuda,
    /// An AMD GPU (`tandem-hal-hip`).
    Hip,
    /// The CPU device (`tandem_hal::HostApi`).
    Host,
}

impl Backend {
    /// Whether it is a real GPU (kernels there take many more threads).
    pub fn is_gpu(self) -> bool {
        self != Backend::Host
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Cuda => "CUDA",
            Backend::Hip => "HIP",
            Backend::Host => "the CPU device (host backend)",
        })
    }
}

/// Logs to stderr through `tracing`, filtered by `RUST_LOG` (default
/// `info`), coloured on a terminal: what Tandem's binaries set up first.
pub fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// Work to run on one backend, chosen at run time: [`on_best_backend`]
/// calls [`run`](Self::run) with the backend it picked.
pub trait OnBackend {
    /// What the work returns.
    type Output;
    /// Runs the work on `api`, which is `backend`.
    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output;
}

/// A backend that loads and has at least one device.
#[cfg(any(feature = "cuda", feature = "hip"))]
fn usable<A: GpuApi>() -> Option<A> {
    let api = A::load().ok()?;
    (api.device_count().ok()? > 0).then_some(api)
}

/// Runs `work` on CUDA when this crate's `cuda` feature is on and a device
/// answers, else on HIP likewise (`hip`), else on the CPU device. An error
/// only when not even the host backend loads.
pub fn on_best_backend<W: OnBackend>(work: W) -> Result<W::Output, RuntimeError> {
    #[cfg(feature = "cuda")]
    if let Some(api) = usable::<tandem_hal_cuda::CudaApi>() {
        return Ok(work.run(api, Backend::Cuda));
    }
    #[cfg(feature = "hip")]
    if let Some(api) = usable::<tandem_hal_hip::HipApi>() {
        return Ok(work.run(api, Backend::Hip));
    }
    let api = HostApi::load()?;
    Ok(work.run(api, Backend::Host))
}

/// How [`serve`] tells the world it is up, and what else ends it.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServeOptions {
    /// Prints `ready <cpu segment> <pid>` on stdout once serving (what
    /// [`crate::Client::fork_runtime`] waits for); otherwise a line for people.
    pub announce: bool,
    /// Stops (cleanly) when stdin closes, e.g. when the parent dies.
    pub exit_on_stdin_eof: bool,
}

/// Starts a runtime on `api` with `config` and `registry` and serves it
/// until SIGINT/SIGTERM (or stdin's end, with
/// [`ServeOptions::exit_on_stdin_eof`]), then shuts it down, which removes
/// its named segment.
pub fn serve<A: GpuApi>(
    api: A,
    backend: Backend,
    config: Config,
    registry: Registry,
    options: ServeOptions,
) -> Result<(), RuntimeError> {
    // Caught before the runtime starts: a signal during setup still ends in
    // a clean shutdown.
    let mut termination = Termination::catch()?;
    tracing::info!("serving a runtime on {backend}");
    let runtime = Runtime::start_with(api, config, registry)?;
    let name = runtime.cpu_segment().name().unwrap_or_default().to_string();
    if options.announce {
        println!("{READY_PREFIX}{name} {}", std::process::id());
    } else {
        println!(
            "serving: CPU segment {name}, {} workers, {} device segment(s)",
            runtime.workers(),
            runtime.devices().len()
        );
    }
    if options.exit_on_stdin_eof {
        // Stop when the parent closes the pipe (or dies).
        wake_on_stdin_eof(termination.waker());
    }
    termination.wait();
    runtime.shutdown()
}
