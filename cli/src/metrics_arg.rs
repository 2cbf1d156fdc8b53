//! `--metrics ADDR`, which every service takes.

use std::net::SocketAddr;

use clap::Args;

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
