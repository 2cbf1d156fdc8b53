//! `tandem run`: serves a runtime that host clients attach to, until
//! SIGINT/SIGTERM (or until stdin closes), then removes its segments.

use std::path::PathBuf;

use crate::service_args::RuntimeServiceArgs;
use clap::Args;
use tandem_hal::GpuApi;
use tandem_runtime::{on_best_backend, serve, Backend, Config, OnBackend, Registry};

/// `tandem run`'s options.
#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// A TOML configuration (see tandem.example.toml); defaults otherwise.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    service: RuntimeServiceArgs,
}

impl OnBackend for RunArgs {
    type Output = Result<(), String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        let config = match &self.config {
            Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
            None => Config::default(),
        };
        serve(
            api,
            backend,
            config,
            Registry::with_builtins(),
            self.service.options(),
        )
        .map_err(|e| format!("serving the runtime: {e}"))
    }
}

/// `tandem run` on the best backend.
pub(crate) fn run(args: RunArgs) -> Result<(), String> {
    on_best_backend(args).map_err(|e| e.to_string())?
}
