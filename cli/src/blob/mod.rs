//! `tandem blob`: the blob store's commands (`tandem blob --help`), a file
//! each: `serve.rs` (`run`), `store.rs` (`put`, `get`, `ls`, `stat`, `rm`),
//! `demo.rs`; `config.rs` reads the configurations. The store commands
//! reach the store through `access.rs`'s calls (failing with `error.rs`'s
//! errors): `find.rs` picks the way, `direct.rs` opens the store here,
//! `served.rs` goes through the runtime serving it, and `input.rs` reads a
//! put's file or stream.
//!
//! * `tandem blob run [--config FILE] [--announce] [--exit-on-stdin-eof]`:
//!   serves a runtime with the blob pool registered, like `tandem run` (same
//!   flags, same `ready <segment> <pid>` line, so
//!   `Client::fork_runtime_with` starts one through a script that runs
//!   `tandem blob run "$@"`).
//! * `tandem blob put FILE|- --tag TAG [--name NAME] [--offset N] [--score S]
//!   [--compress COMPRESSION] [--persistence LEVEL]`, `get NAME --tag TAG
//!   [-o OUT] [--offset N] [--len N]`, `ls [--tag TAG]`, `stat NAME --tag
//!   TAG`, `rm NAME --tag TAG`, each with `[--segment NAME]`: look at the
//!   store or change it, through the runtime serving it when one does (found
//!   by the store's identity, or named by `--segment`), else opened
//!   directly. A put of a stream (`-`, a pipe) goes in chunks, as does any
//!   put or get through a runtime (a chunk at a time through the client's
//!   heap): memory stays bounded.
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

mod access;
mod config;
mod demo;
mod direct;
mod error;
mod find;
mod input;
mod serve;
mod served;
mod store;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use demo::DemoArgs;
pub(crate) use demo::{demo_part, Tally, DEMO_STORE_KIND};
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

/// Which runtime serves the store.
#[derive(Args, Debug, Clone)]
pub(crate) struct SegmentArg {
    /// The CPU segment of the runtime serving the store (`tandem status`
    /// names it), which must serve this very store; default: the live
    /// runtime found serving it, else the store opened directly.
    #[arg(long, value_name = "NAME")]
    pub(super) segment: Option<String>,
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
