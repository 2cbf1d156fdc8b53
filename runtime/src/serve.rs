//! Serving a runtime until told to stop: what `tandem run` does, for any
//! binary that registers pools of its own (the blob store's `tandem blob
//! run`), on the backend `tandem_backends` chose.

use std::net::SocketAddr;
use std::sync::Arc;

use tandem_backends::Backend;
use tandem_hal::GpuApi;
use tandem_metrics::{MetricsServer, Scrape, Source};
use tandem_process::{wake_on_stdin_eof, Termination, READY_PREFIX};

use crate::config::Config;
use crate::error::RuntimeError;
use crate::metrics::RuntimeSource;
use crate::registry::Registry;
use crate::runtime::Runtime;

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

/// How [`serve`] tells the world it is up, and what else ends it.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServeOptions {
    /// Prints `ready <cpu segment> <pid>` on stdout once serving (what
    /// [`crate::Client::fork_runtime`] waits for); otherwise a line for people.
    pub announce: bool,
    /// Stops (cleanly) when stdin closes, e.g. when the parent dies.
    pub exit_on_stdin_eof: bool,
    /// Serves Prometheus metrics on `GET /metrics` there, read from the status block at each
    /// scrape (docs/operations.md lists them); `None`: where [`Config::metrics`] says, if
    /// anywhere.
    pub metrics: Option<SocketAddr>,
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
    let nothing_more = |_: &mut Scrape| {};
    serve_with_metrics(
        api,
        backend,
        config,
        registry,
        options,
        Arc::new(nothing_more),
    )
}

/// [`serve`], whose metrics endpoint shows `more`'s series beside the runtime's own: those of
/// the modules its pools serve (the blob store's).
pub fn serve_with_metrics<A: GpuApi>(
    api: A,
    backend: Backend,
    config: Config,
    registry: Registry,
    options: ServeOptions,
    more: Arc<dyn Source>,
) -> Result<(), RuntimeError> {
    // Caught before the runtime starts: a signal during setup still ends in
    // a clean shutdown.
    let mut termination = Termination::catch()?;
    tracing::info!("serving a runtime on {}", backend.describe());
    let config_metrics = config.metrics;
    let runtime = Runtime::start_with(api, config, registry)?;
    let name = runtime.cpu_segment().name().unwrap_or_default().to_string();
    // Up before the ready line, so that whoever waits for it can scrape at once.
    let metrics = match options.metrics.or(config_metrics) {
        Some(addr) => {
            let own = RuntimeSource {
                segment: name.clone(),
            };
            let both = move |scrape: &mut Scrape| {
                own.collect(scrape);
                more.collect(scrape);
            };
            match MetricsServer::start(addr, Arc::new(both)) {
                Ok(server) => Some(server),
                Err(e) => {
                    let _ = runtime.shutdown();
                    return Err(RuntimeError::Metrics(e));
                }
            }
        }
        None => None,
    };
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
    // Stopped first: a scrape during the shutdown would find the segment half gone.
    drop(metrics);
    runtime.shutdown()
}
