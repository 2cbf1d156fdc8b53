//! `tandem`: Tandem's command-line entry point (`tandem --help`).
//!
//! * `tandem demo [--json] [--devices LIST]`: starts a runtime on the best
//!   backend (CUDA when compiled in and a device is present, else the CPU
//!   device), launches kernels on every device whose threads send tasks to
//!   the CPU workers and to the devices' services and wait, and reports
//!   tasks, errors, throughput and latency per device and in all, ending
//!   with one verdict line (`demo.rs`).
//! * `tandem run [--config FILE] [--announce] [--exit-on-stdin-eof]`: serves
//!   a runtime until SIGINT/SIGTERM (or until stdin closes), then removes its
//!   segments (`run.rs`). `--announce` prints
//!   `ready <cpu segment> <pid>` on stdout once serving (what
//!   `Client::fork_runtime` waits for).
//! * `tandem info [--json]`: lists backends and devices.
//! * `tandem status [--segment NAME] [--json]`: what a running runtime's
//!   status block says.
//! * `tandem clean [--dry-run]`: removes Tandem segments in `/dev/shm` whose
//!   owner process is gone.
//! * `tandem blob run|put|get|ls|stat|rm|demo ...`: the blob store's
//!   commands (`blob/`): a runtime serving the blob pool, a store looked
//!   at or changed (through the runtime serving it, or opened directly),
//!   kernels putting and getting blobs.
//!
//! Results go to stdout; logs (`tracing`, filtered by `RUST_LOG`, default
//! `info`) to stderr. Usage errors exit 2.

mod blob;
mod clean;
mod cluster;
mod demo;
mod info;
mod progress;
mod run;
mod service_args;
mod share;
mod share_config;
mod status;
mod stdout;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tandem_runtime::init_logging;

/// Tandem: host threads and GPU kernels sharing memory and work.
#[derive(Parser, Debug)]
#[command(name = "tandem", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// One variant per subcommand, and one file each.
#[derive(Subcommand, Debug)]
enum Command {
    /// Runs kernels that send tasks to CPU workers and to the device's
    /// service, and reports what happened.
    Demo(demo::DemoArgs),
    /// Serves a runtime that host clients attach to, until killed.
    Run(run::RunArgs),
    /// Lists the backends compiled in, their devices and properties.
    Info(info::InfoArgs),
    /// Asks a running runtime (through its CPU segment) what it is doing.
    Status(status::StatusArgs),
    /// Removes Tandem segments in /dev/shm whose owner process is gone, and
    /// the temporary folders of demos that were killed.
    Clean(clean::CleanArgs),
    /// The blob store: serve it, look at it, run its demo.
    #[command(subcommand)]
    Blob(blob::BlobCommand),
    /// Shared buffers between processes: the daemon and a look at it.
    #[command(subcommand)]
    Share(share::ShareCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    // Services and demos hold segments and folders that a SIGPIPE would
    // leave behind; the others print and exit.
    let holds_resources = matches!(
        &cli.command,
        Command::Demo(_)
            | Command::Run(_)
            | Command::Blob(blob::BlobCommand::Run(_) | blob::BlobCommand::Demo(_))
            | Command::Share(share::ShareCommand::Serve(_))
    );
    if !holds_resources {
        stdout::end_quietly_when_the_reader_leaves();
    }
    match cli.command {
        Command::Demo(args) => demo::demo_command(args),
        Command::Run(args) => report(run::run(args)),
        Command::Info(args) => report(info::info(args)),
        Command::Status(args) => report(status::status(args)),
        Command::Clean(args) => report(clean::clean(args)),
        Command::Blob(command) => blob::run(command),
        Command::Share(command) => share::run(command),
    }
}

/// `tandem: <why>` on stderr and exit 1 for a failed command.
fn report(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("tandem: {why}");
            ExitCode::from(1)
        }
    }
}
