//! `tandem blob`: the blob store's commands (`tandem blob --help`).
//!
//! * `tandem blob run [--config FILE] [--announce] [--exit-on-stdin-eof]`:
//!   serves a runtime with the blob pool registered, like `tandem run` (same
//!   flags, same `ready <segment> <pid>` line, so
//!   `Client::fork_runtime_with` starts one through a script that runs
//!   `tandem blob run "$@"`).
//! * `tandem blob put FILE --tag TAG [--name NAME] [--offset N] [--score S]`,
//!   `get NAME --tag TAG [-o OUT] [--offset N] [--len N]`, `ls [--tag TAG]`,
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

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tandem_blob::demo::{pattern, BlobKernels, PutGetLaunch, PutGetMode};
use tandem_blob::{
    pool, wire, BlobCaller, BlobError, BlobStore, FillError, Score, StoreConfig, TagId, TargetKind,
};
use tandem_hal::GpuApi;
use tandem_runtime::{
    on_best_backend, owned_temp_prefix, read_config_file, serve, Backend, Config, DeviceSelection,
    OnBackend, Registry, Runtime, ServeOptions,
};

/// What names `tandem blob demo`'s temporary store
/// ([`tandem_runtime::owned_temp_prefix`]).
pub(crate) const DEMO_STORE_KIND: &str = "blob-demo";

/// The environment variable naming a store configuration file, used when
/// the runtime configuration has no `[blob]` table.
const STORE_CONFIG_ENV: &str = "TANDEM_BLOB_CONFIG";

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
    config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Prints `ready <cpu segment> <pid>` on stdout once serving.
    #[arg(long)]
    announce: bool,
    /// Stops (cleanly) when stdin closes, e.g. when the parent dies.
    #[arg(long)]
    exit_on_stdin_eof: bool,
}

#[derive(Args, Debug)]
pub(crate) struct PutArgs {
    /// The file whose bytes to put.
    file: PathBuf,
    #[command(flatten)]
    config: ConfigArg,
    /// The tag (created if new).
    #[arg(long)]
    tag: String,
    /// The blob's name; default: FILE's file name.
    #[arg(long)]
    name: Option<String>,
    /// Where in the blob the bytes go.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// Placement: -1 automatic, or a tier in 0..=1 (higher = faster).
    #[arg(long, default_value_t = -1.0, allow_negative_numbers = true)]
    score: f32,
}

#[derive(Args, Debug)]
pub(crate) struct GetArgs {
    /// The blob's name.
    name: String,
    #[command(flatten)]
    config: ConfigArg,
    /// The blob's tag.
    #[arg(long)]
    tag: String,
    /// Where the bytes go; default: stdout.
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
    /// First byte to read.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// Bytes to read; default: to the blob's end.
    #[arg(long)]
    len: Option<u64>,
}

#[derive(Args, Debug)]
pub(crate) struct LsArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Lists this tag's blobs (default: the tags).
    #[arg(long)]
    tag: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct NameArgs {
    /// The blob's name.
    name: String,
    #[command(flatten)]
    config: ConfigArg,
    /// The blob's tag.
    #[arg(long)]
    tag: String,
}

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// A configuration as for `run`; default: a temporary store (a 64 MiB
    /// RAM target and a 64 MiB file target), removed at the end.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Runs `command`; errors print `tandem blob: <error>` and exit 1.
pub(crate) fn run(command: BlobCommand) -> ExitCode {
    let result = match command {
        BlobCommand::Run(args) => serve_store(args),
        BlobCommand::Put(args) => put(args),
        BlobCommand::Get(args) => get(args),
        BlobCommand::Ls(args) => ls(args),
        BlobCommand::Stat(args) => stat(args),
        BlobCommand::Rm(args) => rm(args),
        BlobCommand::Demo(args) => return demo_command(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("tandem blob: {why}");
            ExitCode::from(1)
        }
    }
}

/// The runtime's and the store's configurations.
struct Configs {
    runtime: Config,
    /// Whether the configuration file set `copy_space` (else it is the default).
    copy_space_set: bool,
    store: StoreConfig,
}

fn read_toml(path: &Path) -> Result<toml::Table, String> {
    let text = read_config_file(path).map_err(|e| e.to_string())?;
    text.parse::<toml::Table>()
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn store_config(table: toml::Table, path: &Path) -> Result<StoreConfig, String> {
    toml::Value::Table(table)
        .try_into()
        .map_err(|e| format!("{}: bad store configuration: {e}", path.display()))
}

/// The store configuration of $TANDEM_BLOB_CONFIG, if set: a file holding a
/// `StoreConfig`, or a `[blob]` table.
fn store_config_from_env() -> Result<Option<StoreConfig>, String> {
    let Some(path) = std::env::var_os(STORE_CONFIG_ENV) else {
        return Ok(None);
    };
    let path = PathBuf::from(path);
    let mut table = read_toml(&path).map_err(|e| format!("${STORE_CONFIG_ENV}: {e}"))?;
    let table = match table.remove("blob") {
        Some(toml::Value::Table(blob)) => blob,
        Some(_) => return Err(format!("{}: [blob] is not a table", path.display())),
        None => table,
    };
    store_config(table, &path).map(Some)
}

/// Reads `--config` (split into the runtime's part and `[blob]`), falling
/// back to $TANDEM_BLOB_CONFIG for the store.
fn configs(arg: &ConfigArg) -> Result<Configs, String> {
    let (runtime, copy_space_set, store) = match &arg.config {
        Some(path) => {
            let mut table = read_toml(path)?;
            let store = match table.remove("blob") {
                Some(toml::Value::Table(blob)) => store_config(blob, path)?,
                Some(_) => return Err(format!("{}: [blob] is not a table", path.display())),
                None => store_config_from_env()?.ok_or_else(|| {
                    format!(
                        "{} has no [blob] table (the store's configuration) and \
                         ${STORE_CONFIG_ENV} is not set",
                        path.display()
                    )
                })?,
            };
            let copy_space_set = table.contains_key("copy_space");
            let rest = toml::to_string(&table).map_err(|e| e.to_string())?;
            let runtime =
                Config::from_toml(&rest).map_err(|e| format!("{}: {e}", path.display()))?;
            (runtime, copy_space_set, store)
        }
        None => {
            let store = store_config_from_env()?.ok_or_else(|| {
                format!(
                    "no store configuration: pass --config FILE with a [blob] table, \
                     or set ${STORE_CONFIG_ENV} to a store configuration file"
                )
            })?;
            (Config::default(), false, store)
        }
    };
    Ok(Configs {
        runtime,
        copy_space_set,
        store,
    })
}

/// The runtime configuration of a runtime serving the blob pool: a copy
/// space that holds any blob task. Raising a `copy_space` the user set is
/// worth a warning; raising the default, a note.
fn with_copy_space(mut config: Config, user_set: bool) -> Config {
    if config.copy_space < wire::COPY_SPACE {
        let why = format!(
            "{} to {} bytes: blob tasks carry names up to {} bytes",
            config.copy_space,
            wire::COPY_SPACE,
            wire::MAX_NAME_BYTES
        );
        if user_set {
            tracing::warn!("copy_space raised from the configured {why}");
        } else {
            tracing::info!("copy_space raised from the default {why}");
        }
        config.copy_space = wire::COPY_SPACE;
    }
    config
}

/// Opens the store (creating it on first use), saying so when a runtime
/// probably holds it.
fn open_store(config: &StoreConfig) -> Result<BlobStore, String> {
    open_store_with(config, BlobStore::open)
}

/// Opens a store that exists, creating nothing: for the commands that only
/// look (or remove).
fn open_existing_store(config: &StoreConfig) -> Result<BlobStore, String> {
    open_store_with(config, BlobStore::open_existing)
}

fn open_store_with(
    config: &StoreConfig,
    open: fn(&StoreConfig) -> Result<BlobStore, BlobError>,
) -> Result<BlobStore, String> {
    open(config).map_err(|e| match &e {
        BlobError::Metadata(m) if m.to_lowercase().contains("already open") => format!(
            "the store's metadata file {} is in use: a runtime (tandem blob run) may be \
             serving this store; stop it, or go through it ({e})",
            config.metadata.display()
        ),
        _ => format!("opening the store ({}): {e}", config.metadata.display()),
    })
}

/// A store error in words, naming the tag by its name.
fn in_tag(e: BlobError, tag: &str) -> String {
    match e {
        BlobError::NotFound { name, .. } => format!("blob {name:?} not found in tag {tag:?}"),
        e => e.to_string(),
    }
}

/// An existing tag's id.
fn existing_tag(store: &BlobStore, name: &str) -> Result<TagId, String> {
    store
        .tag(name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("unknown tag {name:?}"))
}

fn class(durable: bool) -> &'static str {
    if durable {
        "durable"
    } else {
        "volatile"
    }
}

/// Targets by index, in words.
fn target_words(store: &BlobStore, indices: &[usize]) -> String {
    let targets = store.targets();
    let words: Vec<String> = indices
        .iter()
        .map(|&i| match targets.get(i) {
            Some(t) => match (t.kind, &t.path) {
                (TargetKind::File, Some(p)) => format!("{i}:file:{}", p.display()),
                (TargetKind::Object, _) => format!("{i}:object"),
                _ => format!("{i}:ram"),
            },
            None => format!("{i}:?"),
        })
        .collect();
    words.join(",")
}

/// `tandem blob run`.
fn serve_store(args: RunArgs) -> Result<(), String> {
    let configs = configs(&args.config)?;
    let store = Arc::new(open_store(&configs.store)?);
    let options = ServeOptions {
        announce: args.announce,
        exit_on_stdin_eof: args.exit_on_stdin_eof,
    };
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
        pool::register(&mut registry, self.store).map_err(|e| e.to_string())?;
        serve(api, backend, self.config, registry, self.options)
            .map_err(|e| format!("serving the runtime: {e}"))
    }
}

/// `tandem blob put`.
fn put(args: PutArgs) -> Result<(), String> {
    let configs = configs(&args.config)?;
    let name = match args.name {
        Some(n) => n,
        None => args
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| format!("{} has no file name: pass --name", args.file.display()))?,
    };
    // What a blob can take: its largest size, and without an object
    // target (which has no capacity) the targets' room.
    let targets = &configs.store.targets;
    let room = if targets.iter().any(|t| t.kind == TargetKind::Object) {
        u64::MAX
    } else {
        targets.iter().map(|t| t.capacity).sum()
    };
    let most = configs
        .store
        .limits
        .max_blob_size
        .saturating_sub(args.offset)
        .min(room);
    let file = readable_at(&args.file, most)?;
    let len = file
        .metadata()
        .map_err(|e| format!("{}: {e}", args.file.display()))?
        .len();
    let store = open_store(&configs.store)?;
    let tag = store
        .get_or_create_tag(&args.tag)
        .map_err(|e| e.to_string())?;
    // Streamed: a large file need not fit in memory.
    let mut fill = |at: u64, dst: &mut [u8]| {
        file.read_exact_at(dst, at)
            .map_err(|e| FillError(format!("reading {}: {e}", args.file.display())))
    };
    let info = store
        .put_with(tag, &name, args.offset, len, Score(args.score), &mut fill)
        .map_err(|e| e.to_string())?;
    if !info.durable {
        tracing::warn!(
            "{}/{name} went to RAM targets: it is gone when this command exits",
            args.tag
        );
    }
    println!(
        "put {}/{name}: {len} bytes at offset {}; size {}, {}, targets {}",
        args.tag,
        args.offset,
        info.size,
        class(info.durable),
        target_words(&store, &info.targets)
    );
    Ok(())
}

/// `path` opened for reads at any offset. A pipe, a socket or a character
/// device (`/dev/stdin` fed by a pipe) has no length and no offsets: it is
/// read whole into an unnamed temporary file first (gone when closed, even
/// if this process is killed), up to `most` bytes (what the blob can take:
/// `/dev/zero` must not fill the disk).
fn readable_at(path: &Path, most: u64) -> Result<File, String> {
    let mut file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let kind = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .file_type();
    if kind.is_file() {
        return Ok(file);
    }
    if kind.is_dir() {
        return Err(format!("{} is a directory", path.display()));
    }
    let mut spool = tempfile::tempfile()
        .map_err(|e| format!("cannot make a temporary file for {}: {e}", path.display()))?;
    let read = std::io::copy(&mut std::io::Read::take(&mut file, most + 1), &mut spool)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if read > most {
        return Err(format!(
            "{} holds more than the {most} bytes this blob can take",
            path.display()
        ));
    }
    Ok(spool)
}

/// `tandem blob get`.
fn get(args: GetArgs) -> Result<(), String> {
    if args.output.is_none() && crate::stdout::was_closed() {
        return Err("stdout is closed: nowhere to write the blob (pass -o OUT)".into());
    }
    let configs = configs(&args.config)?;
    let store = open_existing_store(&configs.store)?;
    let tag = existing_tag(&store, &args.tag)?;
    // Checked whole before the output is created: a get that cannot succeed
    // must not truncate OUT. (This process holds the store: nothing
    // changes the blob meanwhile.)
    let size = store
        .stat(tag, &args.name)
        .map_err(|e| in_tag(e, &args.tag))?
        .size;
    let len = args.len.unwrap_or_else(|| size.saturating_sub(args.offset));
    if len == 0 || args.offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(format!(
            "range {}+{len} is not within {}/{} (size {size})",
            args.offset, args.tag, args.name
        ));
    }
    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(
            File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    // Chunks come in order: written as they come.
    let mut drain = |_at: u64, src: &[u8]| {
        out.write_all(src)
            .map_err(|e| FillError(format!("writing the output: {e}")))
    };
    store
        .get_with(tag, &args.name, args.offset, len, &mut drain)
        .map_err(|e| in_tag(e, &args.tag))?;
    out.flush()
        .map_err(|e| format!("writing the output: {e}"))?;
    drop(out);
    if let Some(path) = &args.output {
        println!(
            "got {}/{}: {len} bytes at offset {} to {}",
            args.tag,
            args.name,
            args.offset,
            path.display()
        );
    }
    Ok(())
}

/// `tandem blob ls`.
fn ls(args: LsArgs) -> Result<(), String> {
    let configs = configs(&args.config)?;
    let store = open_existing_store(&configs.store)?;
    match &args.tag {
        Some(tag_name) => {
            let tag = existing_tag(&store, tag_name)?;
            let blobs = store.list_blobs(tag).map_err(|e| e.to_string())?;
            println!("{:>14} {:<8} {:<24} name", "size", "class", "targets");
            for b in &blobs {
                println!(
                    "{:>14} {:<8} {:<24} {}",
                    b.size,
                    class(b.durable),
                    target_words(&store, &b.targets),
                    b.name
                );
            }
        }
        None => {
            let tags = store.list_tags().map_err(|e| e.to_string())?;
            println!("{:>6} {:>8} {:>14} tag", "id", "blobs", "bytes");
            for (id, name) in &tags {
                let blobs = store.list_blobs(*id).map_err(|e| e.to_string())?;
                let bytes: u64 = blobs.iter().map(|b| b.size).sum();
                println!("{:>6} {:>8} {:>14} {name}", id.0, blobs.len(), bytes);
            }
        }
    }
    Ok(())
}

/// `tandem blob stat`.
fn stat(args: NameArgs) -> Result<(), String> {
    let configs = configs(&args.config)?;
    let store = open_existing_store(&configs.store)?;
    let tag = existing_tag(&store, &args.tag)?;
    let s = store
        .stat(tag, &args.name)
        .map_err(|e| in_tag(e, &args.tag))?;
    println!("tag      {} (id {})", args.tag, tag.0);
    println!("name     {}", s.name);
    println!("size     {}", s.size);
    println!("class    {}", class(s.durable));
    println!("targets  {}", target_words(&store, &s.targets));
    Ok(())
}

/// `tandem blob rm`.
fn rm(args: NameArgs) -> Result<(), String> {
    let configs = configs(&args.config)?;
    let store = open_existing_store(&configs.store)?;
    let tag = existing_tag(&store, &args.tag)?;
    store
        .delete(tag, &args.name)
        .map_err(|e| in_tag(e, &args.tag))?;
    println!("removed {}/{}", args.tag, args.name);
    Ok(())
}

/// Runs the demo; its verdict line is printed either way.
fn demo_command(args: DemoArgs) -> ExitCode {
    match demo(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(why) => {
            eprintln!("tandem blob: {why}");
            println!("blob demo: FAILED: {why}");
            ExitCode::from(1)
        }
    }
}

/// The demo's store: the configured one, or a temporary one (kept alive
/// by `dir` until the end).
fn demo(args: DemoArgs) -> Result<bool, String> {
    let (runtime, store, dir) = match &args.config {
        Some(path) => {
            let configs = configs(&ConfigArg {
                config: Some(path.clone()),
            })?;
            let runtime = with_copy_space(configs.runtime, configs.copy_space_set);
            (runtime, configs.store, None)
        }
        None => {
            let dir = tempfile::Builder::new()
                // Names its owner: `tandem clean` removes what a killed demo left.
                .prefix(&owned_temp_prefix(DEMO_STORE_KIND))
                .tempdir()
                .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
            let store = StoreConfig::ram_and_file(dir.path(), 64 << 20);
            (with_copy_space(Config::default(), false), store, Some(dir))
        }
    };
    let store = Arc::new(open_store(&store)?);
    let config = Config {
        devices: DeviceSelection::Only(vec![0]),
        // Every kernel thread's data and result buffers live there.
        gpu_segment_size: runtime.gpu_segment_size.max(96 << 20),
        ..runtime
    };
    // Kernels in flight cannot be interrupted: on SIGINT/SIGTERM, remove the
    // named segments and the temporary store's folder, and exit.
    let folder = dir.as_ref().map(|d| d.path().to_owned());
    tandem_process::exit_on_termination(move || {
        if let Some(folder) = folder {
            let _ = std::fs::remove_dir_all(folder);
        }
    })
    .map_err(|e| e.to_string())?;
    let ok = on_best_backend(Demo {
        config,
        store: Arc::clone(&store),
    })
    .map_err(|e| e.to_string())??;
    Ok(ok)
}

/// The demo's work on the backend `on_best_backend` picks.
struct Demo {
    config: Config,
    store: Arc<BlobStore>,
}

/// What the demo counted.
#[derive(Default)]
pub(crate) struct Tally {
    /// Puts the kernels made.
    pub(crate) puts: u64,
    /// Gets the kernels and the host made.
    pub(crate) gets: u64,
    /// Threads that failed, and blobs the host found wrong.
    pub(crate) failed: u64,
}

impl OnBackend for Demo {
    type Output = Result<bool, String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        let store = self.store;
        println!("tandem blob demo on {backend}");
        let mut registry = Registry::with_builtins();
        pool::register(&mut registry, Arc::clone(&store)).map_err(|e| e.to_string())?;
        let runtime = Runtime::start_with(api, self.config, registry)
            .map_err(|e| format!("cannot start the runtime: {e}"))?;
        let tally = demo_part(&runtime, &store, backend.is_gpu(), &|line| {
            println!("{line}")
        });
        runtime.shutdown().map_err(|e| e.to_string())?;
        let tally = tally?;
        let ok = tally.failed == 0;
        println!(
            "blob demo: {} puts, {} gets, {} failed: {}",
            tally.puts,
            tally.gets,
            tally.failed,
            if ok { "ok" } else { "FAILED" }
        );
        Ok(ok)
    }
}

/// The blob part of a demo, on a runtime serving `store` through the blob
/// pool (device 0 served, a `copy_space` of at least
/// [`wire::COPY_SPACE`]): kernels put, get and compare blobs of their own
/// (RAM, then the 0.5 tier), then the host checks every blob's size and
/// reads a few back through the task path. `say` prints a line.
pub(crate) fn demo_part<A: GpuApi>(
    runtime: &Runtime<A>,
    store: &BlobStore,
    gpu: bool,
    say: &dyn Fn(String),
) -> Result<Tally, String> {
    let mut kernels = BlobKernels::load(&runtime.devices()[0]).map_err(|e| e.to_string())?;
    // The CPU device runs the grid on a few cores: a smaller grid.
    let (blocks, threads) = if gpu { (66, 64) } else { (4, 16) };
    let blob_bytes = 4096u64;
    let rounds = 3u64;
    let mut tally = Tally::default();
    let caller = BlobCaller::new(runtime).with_timeout(Duration::from_secs(30));
    for (tag_name, score, words) in [
        ("demo-auto", Score::AUTO, "auto"),
        ("demo-tier", Score(0.5), "0.5"),
    ] {
        let tag = store
            .get_or_create_tag(tag_name)
            .map_err(|e| e.to_string())?;
        let launch = PutGetLaunch {
            blocks,
            threads,
            tag,
            blob_bytes,
            rounds,
            mode: PutGetMode::PutGetCheck,
            score,
            spin_budget: 1 << 40,
        };
        let n = u64::from(blocks * threads);
        say(format!(
            "kernel: {blocks} x {threads} threads x {rounds} rounds of put, get, compare; \
             {blob_bytes} B blobs, tag {tag_name} ({words})"
        ));
        let outcome = kernels.put_get(&launch).map_err(|e| e.to_string())?;
        let failed_threads = outcome.failed_threads() as u64;
        if let Some((rank, status, code)) = outcome.first_failure() {
            tracing::warn!(
                "thread {rank}: status {status}, code {code} ({})",
                pool::describe(code)
            );
        }
        let ops = n * rounds;
        let secs = outcome.elapsed.as_secs_f64();
        tally.puts += ops;
        tally.gets += ops;
        tally.failed += failed_threads;
        say(format!(
            "  {ops} puts + {ops} gets in {secs:.3} s: {:.0} puts/s, {:.3} GB/s; \
             {failed_threads} threads failed",
            ops as f64 / secs,
            (2 * ops * blob_bytes) as f64 / secs / 1e9
        ));
        // Every blob from the host: the store's index for all, the task
        // path (BlobCaller) for a few.
        let mut durable = 0;
        let mut read_back = 0;
        let mut back = vec![0u8; blob_bytes as usize];
        for rank in 0..n {
            let name = format!("k{rank}");
            match store.stat(tag, &name) {
                Ok(s) if s.size == blob_bytes => durable += u64::from(s.durable),
                Ok(s) => {
                    tracing::warn!("{tag_name}/{name}: size {} not {blob_bytes}", s.size);
                    tally.failed += 1;
                }
                Err(e) => {
                    tracing::warn!("{tag_name}/{name}: {e}");
                    tally.failed += 1;
                }
            }
            if rank % (n / 8).max(1) != 0 {
                continue;
            }
            tally.gets += 1;
            read_back += 1;
            let good = match caller.get(tag, &name, 0, &mut back) {
                Ok(()) => back
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern(rank, rounds - 1, i as u64)),
                Err(e) => {
                    tracing::warn!("host get {tag_name}/{name}: {e}");
                    false
                }
            };
            tally.failed += u64::from(!good);
        }
        say(format!(
            "  host: {n} blobs of {blob_bytes} bytes ({durable} durable), {read_back} gets \
             of them through the task path"
        ));
    }
    drop(kernels);
    Ok(tally)
}
