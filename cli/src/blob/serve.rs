//! `tandem blob run`: a runtime serving the blob pool, like `tandem run`.

use std::sync::Arc;

use clap::Args;
use tandem_blob::{pool, BlobStore};
use tandem_hal::GpuApi;
use tandem_runtime::{
    on_best_backend, serve_with_metrics, Backend, Config, OnBackend, Registry, ServeOptions,
};

use super::config::{configs, with_copy_space};
use super::direct::open_store;
use super::ConfigArg;
use crate::service_args::RuntimeServiceArgs;

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    service: RuntimeServiceArgs,
}

/// `tandem blob run`.
pub(super) fn serve_store(args: RunArgs) -> Result<(), String> {
    let configs = configs(&args.config)?;
    let store = Arc::new(open_store(&configs.store)?);
    let options = args.service.options();
    on_best_backend(Serve {
        config: with_copy_space(configs.runtime, configs.copy_space_set),
        store,
        options,
    })
    .map_err(|e| e.to_string())?
}

/// `run`'s work on the backend `on_best_backend` picks.
struct Serve {
    config: Config,
    store: Arc<BlobStore>,
    options: ServeOptions,
}

impl OnBackend for Serve {
    type Output = Result<(), String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        let mut registry = Registry::with_builtins();
        let metrics = Arc::clone(&self.store);
        pool::register(&mut registry, self.store).map_err(|e| e.to_string())?;
        serve_with_metrics(api, backend, self.config, registry, self.options, metrics)
            .map_err(|e| format!("serving the runtime: {e}"))
    }
}
