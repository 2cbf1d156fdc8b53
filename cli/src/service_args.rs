//! The options every service takes: `--metrics ADDR` (all three), and `--announce` and
//! `--exit-on-stdin-eof` as the runtimes (`tandem run`, `tandem blob run`) spell them.

use std::net::SocketAddr;

use clap::Args;
use tandem_runtime::ServeOptions;

/// Where a service serves Prometheus metrics.
#[derive(Args, Debug, Clone, Copy)]
pub(crate) struct MetricsArg {
    /// Serves Prometheus metrics on GET /metrics: a port (on 127.0.0.1) or IP:PORT
    /// (docs/operations.md lists the series) [default: the config's `metrics`, else none]
    #[arg(long, value_name = "ADDR", value_parser = parse)]
    pub(crate) metrics: Option<SocketAddr>,
}

fn parse(text: &str) -> Result<SocketAddr, String> {
    tandem_metrics::parse_metrics_address(text).map_err(|e| e.to_string())
}

/// How a runtime service starts and stops, as `tandem_runtime::serve` takes it.
#[derive(Args, Debug, Clone, Copy)]
pub(crate) struct RuntimeServiceArgs {
    /// Prints `ready <cpu segment> <pid>` on stdout once serving.
    #[arg(long)]
    announce: bool,
    /// Stops (cleanly) when stdin closes, e.g. when the parent dies.
    #[arg(long)]
    exit_on_stdin_eof: bool,
    #[command(flatten)]
    metrics: MetricsArg,
}

impl RuntimeServiceArgs {
    pub(crate) fn options(self) -> ServeOptions {
        ServeOptions {
            announce: self.announce,
            exit_on_stdin_eof: self.exit_on_stdin_eof,
            metrics: self.metrics.metrics,
        }
    }
}
