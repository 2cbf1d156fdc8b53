//! `tandem blob put`, `get`, `ls`, `stat` and `rm`: the store opened
//! directly, to look at it or change it.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use clap::Args;
use tandem_blob::{
    BlobError, BlobStat, BlobStore, Compression, FillError, Persistence, PutContext, Score,
    StoreConfig, TagId, TargetKind,
};

use super::config::configs;
use super::ConfigArg;

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
    /// Compression: none, or [dynamic:]CODEC[:PRESET] with CODEC zstd or lz4 and PRESET fast,
    /// balanced or best (dynamic: a sample decides; what does not compress is stored raw).
    #[arg(long, default_value = "none", value_name = "COMPRESSION")]
    compress: Compression,
    /// The least the blob must survive: volatile (placement decides, as without this flag),
    /// temporary (a crash of the process, not a reboot) or long-term (a power loss).
    #[arg(long, default_value = "volatile", value_name = "LEVEL")]
    persistence: Persistence,
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

/// Opens the store (creating it on first use), saying so when a runtime
/// probably holds it.
pub(super) fn open_store(config: &StoreConfig) -> Result<BlobStore, String> {
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

/// The bytes a blob takes on its targets, and its codecs ("raw" for none).
fn stored_words(s: &BlobStat) -> String {
    let codecs: Vec<String> = s.codecs.iter().map(ToString::to_string).collect();
    let codecs = if codecs.is_empty() {
        "raw".to_owned()
    } else {
        codecs.join("+")
    };
    format!("{} bytes, {codecs}", s.stored)
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

/// `tandem blob put`.
pub(super) fn put(args: PutArgs) -> Result<(), String> {
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
    let context = PutContext {
        compression: args.compress,
        persistence: args.persistence,
    };
    let info = store
        .put_with_ctx(
            tag,
            &name,
            args.offset,
            len,
            Score(args.score),
            &context,
            &mut fill,
        )
        .map_err(|e| e.to_string())?;
    if !info.durable {
        tracing::warn!(
            "{}/{name} went to RAM targets: it is gone when this command exits",
            args.tag
        );
    }
    let stat = store.stat(tag, &name).map_err(|e| e.to_string())?;
    println!(
        "put {}/{name}: {len} bytes at offset {}; size {}, {} ({}), stored {}, targets {}",
        args.tag,
        args.offset,
        info.size,
        class(info.durable),
        info.persistence,
        stored_words(&stat),
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
pub(super) fn get(args: GetArgs) -> Result<(), String> {
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
pub(super) fn ls(args: LsArgs) -> Result<(), String> {
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
pub(super) fn stat(args: NameArgs) -> Result<(), String> {
    let configs = configs(&args.config)?;
    let store = open_existing_store(&configs.store)?;
    let tag = existing_tag(&store, &args.tag)?;
    let s = store
        .stat(tag, &args.name)
        .map_err(|e| in_tag(e, &args.tag))?;
    println!("tag      {} (id {})", args.tag, tag.0);
    println!("name     {}", s.name);
    println!("size     {}", s.size);
    println!("class    {} ({})", class(s.durable), s.persistence);
    println!("stored   {}", stored_words(&s));
    println!("targets  {}", target_words(&store, &s.targets));
    Ok(())
}

/// `tandem blob rm`.
pub(super) fn rm(args: NameArgs) -> Result<(), String> {
    let configs = configs(&args.config)?;
    let store = open_existing_store(&configs.store)?;
    let tag = existing_tag(&store, &args.tag)?;
    store
        .delete(tag, &args.name)
        .map_err(|e| in_tag(e, &args.tag))?;
    println!("removed {}/{}", args.tag, args.name);
    Ok(())
}
