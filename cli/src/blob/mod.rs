//! `tandem blob`: the blob store's commands (`tandem blob --help`), a file
//! each: `serve.rs` (`run`), `store.rs` (`put`, `get`, `ls`, `stat`, `rm` on
//! a store opened directly), `demo.rs`; `config.rs` reads the configurations.
//!
//! * `tandem blob run [--config FILE] [--announce] [--exit-on-stdin-eof]`:
//!   serves a runtime with the blob pool registered, like `tandem run` (same
//!   flags, same `ready <segment> <pid>` line, so
//!   `Client::fork_runtime_with` starts one through a script that runs
//!   `tandem blob run "$@"`).
//! * `tandem blob put FILE --tag TAG [--name NAME] [--offset N] [--score S]
//!   [--compress COMPRESSION] [--persistence LEVEL]`, `get NAME --tag TAG [-o OUT] [--offset N] [--len N]`, `ls [--tag TAG]`,
//!   `stat NAME --tag TAG`, `rm NAME --tag TAG`: open the store directly to
//!   look at it or change it. A store a runtime serves is locked (its
//!   metadata file is open there): these then fail and say so.
//! * `tandem blob demo [--config FILE]`: kernels putting and getting blobs
//!   through a runtime, checked from the host, ending with one verdict line.
//!
//! # Configuration
//!
//! `--config FILE` is the runtime's TOML file with a `[blob]` table holding
//! the store's configuration (`tandem_blob::StoreConfig`):
//!
//! ```toml
//! workers = 4
//! [blob]
//! metadata = "/var/lib/tandem/blob.redb"
//! [[blob.targets]]
//! kind = "file"
//! path = "/var/lib/tandem/blob0.dat"
//! capacity = 17179869184
//! score = 0.5
//! ```
//!
//! When the file has no `[blob]` table, or no `--config` is given, the store's
//! configuration comes from the file named by the environment variable
//! `TANDEM_BLOB_CONFIG` (a TOML file holding just a `StoreConfig`, or a
//! `[blob]` table). That is how a runtime started through
//! `Client::fork_runtime_with` (which writes a runtime-only configuration)
//! finds its store. A runtime serving the blob pool needs a `copy_space` of
//! at least `tandem_blob::wire::COPY_SPACE`; a lower one is raised.
//!
//! Results go to stdout; logs (`tracing`, filtered by `RUST_LOG`, default
//! `info`) to stderr; errors as `tandem blob: <error>`, exit 1. Usage errors
//! exit 2.

mod config;
mod demo;
mod serve;
mod store;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use demo::DemoArgs;
pub(crate) use demo::{demo_part, DEMO_STORE_KIND};
use serve::RunArgs;
use store::{GetArgs, LsArgs, NameArgs, PutArgs};

/// `tandem blob`'s subcommands: one variant and one function each.
#[derive(Subcommand, Debug)]
pub(crate) enum BlobCommand {
    /// Serves a runtime with the blob pool, until killed (like `tandem run`).
    ///
    /// The store's configuration is the `[blob]` table of `--config`, or
    /// else the file named by $TANDEM_BLOB_CONFIG (just a store
    /// configuration: metadata, [[targets]], [limits]).
    Run(RunArgs),
    /// Puts a file's bytes as a blob.
    Put(PutArgs),
    /// Writes a blob's bytes to stdout or a file.
    Get(GetArgs),
    /// Lists the tags, or the blobs of a tag.
    Ls(LsArgs),
    /// Describes a blob: size, class, targets.
    Stat(NameArgs),
    /// Deletes a blob.
    Rm(NameArgs),
    /// Runs kernels that put and get blobs, checks them, and reports.
    Demo(DemoArgs),
}

/// Where the configuration comes from.
#[derive(Args, Debug, Clone)]
pub(crate) struct ConfigArg {
    /// The runtime's TOML configuration with a [blob] table (else the store
    /// configuration comes from $TANDEM_BLOB_CONFIG).
    #[arg(long, value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
}

/// Runs `command`; errors print `tandem blob: <error>` and exit 1.
pub(crate) fn run(command: BlobCommand) -> ExitCode {
    let result = match command {
        BlobCommand::Run(args) => serve::serve_store(args),
        BlobCommand::Put(args) => store::put(args),
        BlobCommand::Get(args) => store::get(args),
        BlobCommand::Ls(args) => store::ls(args),
        BlobCommand::Stat(args) => store::stat(args),
        BlobCommand::Rm(args) => store::rm(args),
        BlobCommand::Demo(args) => return demo::demo_command(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("tandem blob: {why}");
            ExitCode::from(1)
        }
    }
}
