//! `tandem share`: the shared-buffer daemon (`serve`) and a look at what it
//! holds (`ls`, `status`, `rm`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::service_args::MetricsArg;
use crate::share_config::ShareConfig;
use clap::{Args, Subcommand};
use serde::Serialize;
use tandem_hal::GpuApi;
use tandem_metrics::MetricsServer;
use tandem_process::{wake_on_stdin_eof, Termination, READY_PREFIX};
use tandem_runtime::{on_backend, Backend, BackendChoice, OnBackend};
use tandem_share::{
    default_socket_path, ClusterConfig, Daemon, Inspector, Limits, ObjectId, Polling,
};

use crate::cluster;

/// `tandem share`'s subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum ShareCommand {
    /// Serves shared buffers on a UNIX socket (mode 0600) until SIGINT or
    /// SIGTERM; frees every buffer and removes the socket when it stops.
    Serve(ServeArgs),
    /// Lists the buffers the daemon holds, with their leases, then its
    /// named sets.
    Ls(LsArgs),
    /// The daemon's totals: buffers, bytes, leases, clients, allocations kept for reuse,
    /// and its cluster state if it is a node of one.
    Status(LookArgs),
    /// Deletes a buffer, or a named set (`--set`), freed when the last
    /// lease goes.
    Rm(RmArgs),
    /// Lets the other nodes of the daemon's cluster fetch a sealed buffer
    /// (nothing leaves a node unless exported).
    Export(IdArgs),
    /// Copies buffer NODE/ID of another node of the daemon's cluster into a
    /// new sealed buffer here, and prints its local id.
    Fetch(FetchArgs),
}

/// A buffer of the daemon's.
#[derive(Args, Debug)]
pub(crate) struct IdArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// The buffer's id.
    id: u64,
}

/// `tandem share fetch`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct FetchArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// The buffer: its node's name and its id there.
    #[arg(value_name = "NODE/ID")]
    remote: String,
    /// The local device the copy lives on.
    #[arg(long, value_name = "N", default_value_t = 0)]
    device: u32,
}

#[derive(Args, Debug)]
pub(crate) struct SocketArg {
    /// The daemon's socket [default: $XDG_RUNTIME_DIR/tandem/share.sock, or
    /// /tmp/tandem-<uid>/share.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

/// A look at the daemon: where it is, and how to print what it says.
#[derive(Args, Debug)]
pub(crate) struct LookArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// Prints JSON: the fields of the text output (docs/shared-buffers.md).
    #[arg(long)]
    json: bool,
}

/// `tandem share ls`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct LsArgs {
    #[command(flatten)]
    look: LookArgs,
    /// Lists only the named sets (every version the daemon keeps): name,
    /// version, tensors, bytes and buffers.
    #[arg(long, conflicts_with = "cluster")]
    sets: bool,
    /// Lists the nodes of the daemon's cluster instead, each with the
    /// buffers it exports.
    #[arg(long)]
    cluster: bool,
}

impl SocketArg {
    fn path(&self) -> PathBuf {
        self.socket.clone().unwrap_or_else(default_socket_path)
    }
}

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// The backend the daemon allocates with: auto (CUDA, else HIP, else
    /// the CPU device: what this build has and finds), host, cuda or hip
    /// (a build with that feature). Clients use the same one.
    #[arg(long, default_value = "auto")]
    backend: BackendChoice,
    /// Prints `ready <socket> <pid>` on stdout once serving.
    #[arg(long)]
    announce: bool,
    /// Stops (cleanly) when stdin closes, e.g. when the parent dies.
    #[arg(long)]
    exit_on_stdin_eof: bool,
    /// How long after a request the connection threads poll for the next
    /// one instead of sleeping (a sleeping thread's wake-up is most of a
    /// request's round trip on hosts whose idle cores sleep); 0: never
    #[arg(long, value_name = "MICROSECONDS", default_value_t = DEFAULT_POLL_US)]
    poll_us: u64,
    /// How many threads may poll at once [default: a quarter of the cores,
    /// 1 to 4]
    #[arg(long, value_name = "N")]
    poll_threads: Option<usize>,
    /// Connections served at once, every client together (each is a
    /// thread); more are refused as busy
    #[arg(long, value_name = "N", default_value_t = Limits::DEFAULT_CONNECTIONS)]
    max_connections: usize,
    /// Connections one client process may hold at once; more are refused
    /// as busy
    #[arg(long, value_name = "N", default_value_t = Limits::DEFAULT_CLIENT_CONNECTIONS)]
    max_client_connections: usize,
    /// How long a new connection may take to say Hello, and a request
    /// that started to arrive whole, before the connection is closed
    #[arg(long, value_name = "MILLISECONDS", default_value_t = DEFAULT_FRAME_TIMEOUT_MS)]
    frame_timeout_ms: u64,
    /// Buffers held at once (each takes descriptors of the daemon); a
    /// create beyond is refused as busy
    #[arg(long, value_name = "N", default_value_t = Limits::DEFAULT_BUFFERS)]
    max_buffers: usize,
    /// Named sets held at once; a bind of a new name beyond is refused as
    /// busy
    #[arg(long, value_name = "N", default_value_t = Limits::DEFAULT_SETS)]
    max_sets: usize,
    /// Bytes of deleted buffers' allocations kept for one client's next
    /// creates of the same device and length (no allocation, export or
    /// import then); 0 keeps none
    #[arg(long, value_name = "BYTES", default_value_t = Limits::DEFAULT_KEPT_BYTES)]
    keep_bytes: u64,
    #[command(flatten)]
    metrics: MetricsArg,
    /// A TOML configuration (docs/configuration.md): its `metrics` key, and a `[cluster]`
    /// that makes the daemon a node of a cluster (docs/cluster.md)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

const DEFAULT_POLL_US: u64 = Polling::DEFAULT_WINDOW.as_micros() as u64;
const DEFAULT_FRAME_TIMEOUT_MS: u64 = Limits::DEFAULT_FRAME_TIMEOUT.as_millis() as u64;

impl ServeArgs {
    fn polling(&self) -> Result<Polling, String> {
        if self.poll_us == 0 {
            return Ok(Polling::OFF);
        }
        let mut polling = Polling::for_window(Duration::from_micros(self.poll_us));
        if let Some(threads) = self.poll_threads {
            if threads == 0 {
                return Err(
                    "--poll-threads must be at least 1 (--poll-us 0 turns polling off)".into(),
                );
            }
            polling.threads = threads;
        }
        Ok(polling)
    }

    fn limits(&self) -> Result<Limits, String> {
        if self.max_connections == 0 || self.max_client_connections == 0 || self.max_buffers == 0 {
            return Err(
                "--max-connections, --max-client-connections and --max-buffers must be at least 1"
                    .into(),
            );
        }
        if self.frame_timeout_ms == 0 {
            return Err("--frame-timeout-ms must be at least 1".into());
        }
        Ok(Limits {
            connections: self.max_connections,
            client_connections: self.max_client_connections,
            frame_timeout: Duration::from_millis(self.frame_timeout_ms),
            buffers: self.max_buffers,
            kept_bytes: self.keep_bytes,
            sets: self.max_sets,
        })
    }
}

#[derive(Args, Debug)]
pub(crate) struct RmArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// The buffer's id.
    #[arg(required_unless_present = "set", conflicts_with = "set")]
    id: Option<u64>,
    /// Deletes named set NAME, every version it keeps, instead of a buffer
    /// (each freed when its last lease goes)
    #[arg(long, value_name = "NAME")]
    set: Option<String>,
}

pub(crate) fn run(command: ShareCommand) -> ExitCode {
    let result = match command {
        ShareCommand::Serve(args) => serve(args),
        ShareCommand::Ls(args) => ls(&args),
        ShareCommand::Status(args) => status(&args),
        ShareCommand::Rm(args) => Inspector::connect(&args.socket.path())
            .and_then(|inspector| match (&args.set, args.id) {
                (Some(set), _) => inspector.delete_set(set),
                (None, id) => inspector.delete(ObjectId(id.unwrap_or_default())),
            })
            .map_err(|e| e.to_string()),
        ShareCommand::Export(args) => Inspector::connect(&args.socket.path())
            .map_err(|e| e.to_string())
            .and_then(|inspector| cluster::export(&inspector, args.id)),
        ShareCommand::Fetch(args) => Inspector::connect(&args.socket.path())
            .map_err(|e| e.to_string())
            .and_then(|inspector| cluster::fetch(&inspector, &args.remote, args.device)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("tandem share: {why}");
            ExitCode::from(1)
        }
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    let config = match &args.config {
        Some(path) => ShareConfig::from_file(path)?,
        None => ShareConfig::default(),
    };
    let work = Serve {
        cluster: config.cluster,
        polling: args.polling()?,
        limits: args.limits()?,
        socket: args.socket.path(),
        announce: args.announce,
        exit_on_stdin_eof: args.exit_on_stdin_eof,
        metrics: args.metrics.metrics.or(config.metrics),
    };
    on_backend(args.backend, work).map_err(|e| e.to_string())?
}

/// The daemon, on the backend chosen.
struct Serve {
    cluster: Option<ClusterConfig>,
    polling: Polling,
    limits: Limits,
    socket: PathBuf,
    announce: bool,
    exit_on_stdin_eof: bool,
    metrics: Option<SocketAddr>,
}

impl OnBackend for Serve {
    type Output = Result<(), String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        // Caught before binding: a signal during setup still cleans up.
        let mut termination = Termination::catch().map_err(|e| e.to_string())?;
        descriptors_for(&self.limits);
        let mut daemon = Daemon::bind_with(api, &self.socket, self.polling, self.limits)
            .map_err(|e| e.to_string())?;
        if let Some(cluster) = self.cluster {
            daemon.join_cluster(cluster).map_err(|e| e.to_string())?;
        }
        let running = daemon.start();
        // Up before the ready line, so that whoever waits for it can scrape at once.
        let _metrics = match self
            .metrics
            .map(|addr| MetricsServer::start(addr, running.metrics()))
        {
            Some(Err(e)) => {
                running.stop();
                return Err(e.to_string());
            }
            started => started.and_then(Result::ok),
        };
        if self.announce {
            println!(
                "{READY_PREFIX}{} {}",
                self.socket.display(),
                std::process::id()
            );
        } else {
            println!(
                "serving shared buffers on {} at {}",
                backend.describe(),
                self.socket.display()
            );
        }
        if self.exit_on_stdin_eof {
            wake_on_stdin_eof(termination.waker());
        }
        if let Some(signal) = termination.wait() {
            tracing::info!("signal {signal}: stopping");
        }
        running.stop();
        Ok(())
    }
}

/// Raises the soft descriptor limit toward what `limits` may need (up to
/// the hard limit), as servers do: the common soft default of 1024 would
/// run out well within the default limits. Says so if even the hard limit
/// is short: the daemon then refuses as busy, out of descriptors, sooner.
fn descriptors_for(limits: &Limits) {
    let want = limits.descriptors();
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the rlimit it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    if limit.rlim_cur < want {
        let raised = libc::rlimit {
            rlim_cur: want.min(limit.rlim_max),
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the rlimit it is given; raising the soft
        // limit up to the hard one is always allowed.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = raised.rlim_cur;
        }
    }
    if limit.rlim_cur < want {
        tracing::warn!(
            "the descriptor limit ({}) is below the {want} the connection and buffer limits \
             may need: clients will be refused as busy sooner",
            limit.rlim_cur
        );
    }
}

/// One buffer, as `tandem share ls` prints it (a row, or a JSON object).
#[derive(Serialize)]
struct BufferRow {
    id: u64,
    device: u32,
    /// The bytes it offers.
    bytes: u64,
    /// The bytes its allocation spans.
    allocated: u64,
    /// `writing`, `sealed` or `deleted` (waiting for its last lease).
    state: &'static str,
    leases: u32,
}

/// One version of a named set, as `tandem share ls` prints it.
#[derive(Serialize)]
struct SetRow {
    name: String,
    version: u64,
    tensors: u32,
    /// Bytes of its buffers, the manifest's included.
    bytes: u64,
    /// The manifest's buffer, then the others.
    manifest: u64,
    buffers: Vec<u64>,
}

/// The daemon's totals, as `tandem share status` prints them.
#[derive(Serialize)]
struct Totals {
    pid: u32,
    backend: String,
    devices: u32,
    buffers: u32,
    /// Bytes of the buffers' allocations.
    bytes: u64,
    leases: u32,
    clients: u32,
    /// Allocations of deleted buffers kept for reuse, and their bytes.
    kept: u32,
    kept_bytes: u64,
    /// Named sets, the versions they keep, and those versions' bytes.
    sets: u32,
    set_versions: u32,
    set_bytes: u64,
    /// Its place in a cluster, if it is a node of one.
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<cluster::ClusterRow>,
}

/// `value` as pretty JSON on stdout.
fn print_json(value: &impl Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
}

fn ls(args: &LsArgs) -> Result<(), String> {
    let inspector = Inspector::connect(&args.look.socket.path()).map_err(|e| e.to_string())?;
    if args.cluster {
        return cluster::ls(&inspector, args.look.json);
    }
    let sets: Vec<SetRow> = inspector
        .list_sets()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|s| SetRow {
            name: s.name,
            version: s.version,
            tensors: s.tensors,
            bytes: s.bytes,
            manifest: s.manifest.0,
            buffers: s.buffers.iter().map(|id| id.0).collect(),
        })
        .collect();
    if args.sets {
        return print_sets(&sets, args.look.json);
    }
    let rows: Vec<BufferRow> = inspector
        .list()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|o| BufferRow {
            id: o.id.0,
            device: o.device,
            bytes: o.len,
            allocated: o.size,
            state: match (o.sealed, o.deleted) {
                (_, true) => "deleted",
                (true, false) => "sealed",
                (false, false) => "writing",
            },
            leases: o.leases,
        })
        .collect();
    if args.look.json {
        return print_json(&rows);
    }
    println!(
        "{:>8} {:>6} {:>14} {:>14} {:>8} {:>6}",
        "id", "device", "bytes", "allocated", "state", "leases"
    );
    for r in rows {
        println!(
            "{:>8} {:>6} {:>14} {:>14} {:>8} {:>6}",
            r.id, r.device, r.bytes, r.allocated, r.state, r.leases
        );
    }
    if !sets.is_empty() {
        println!();
        print_sets(&sets, false)?;
    }
    Ok(())
}

/// The named sets' rows: a table, or a JSON array.
fn print_sets(sets: &[SetRow], json: bool) -> Result<(), String> {
    if json {
        return print_json(&sets);
    }
    println!(
        "{:<32} {:>7} {:>7} {:>14} buffers",
        "set", "version", "tensors", "bytes"
    );
    for s in sets {
        let buffers: Vec<String> = core::iter::once(s.manifest)
            .chain(s.buffers.iter().copied())
            .map(|id| id.to_string())
            .collect();
        println!(
            "{:<32} {:>7} {:>7} {:>14} {}",
            s.name,
            s.version,
            s.tensors,
            s.bytes,
            buffers.join(",")
        );
    }
    Ok(())
}

fn status(args: &LookArgs) -> Result<(), String> {
    let inspector = Inspector::connect(&args.socket.path()).map_err(|e| e.to_string())?;
    let s = inspector.status().map_err(|e| e.to_string())?;
    let t = Totals {
        pid: s.pid,
        backend: s.backend.to_string(),
        devices: s.devices,
        buffers: s.objects,
        bytes: s.bytes,
        leases: s.leases,
        clients: s.clients,
        kept: s.kept,
        kept_bytes: s.kept_bytes,
        sets: s.sets,
        set_versions: s.set_versions,
        set_bytes: s.set_bytes,
        cluster: cluster::status(&inspector)?,
    };
    if args.json {
        return print_json(&t);
    }
    println!(
        "daemon    pid {} ({}, {} device(s))",
        t.pid, t.backend, t.devices
    );
    println!("buffers   {} ({} bytes)", t.buffers, t.bytes);
    println!("leases    {}", t.leases);
    println!("clients   {}", t.clients);
    println!("kept      {} ({} bytes)", t.kept, t.kept_bytes);
    println!(
        "sets      {} ({} version(s), {} bytes)",
        t.sets, t.set_versions, t.set_bytes
    );
    if let Some(c) = &t.cluster {
        cluster::print_status(c);
    }
    Ok(())
}
