//! `tandem blob put`, `get`, `ls`, `stat` and `rm`: the store looked at or
//! changed, through the runtime serving it or opened directly
//! (`find.rs`).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use tandem_blob::{
    BlobPut, BlobRange, Compression, Persistence, PutContext, Score, TagId, TargetConfig,
    TargetKind,
};

use super::access::StoreAccess;
use super::config::{configs, Configs};
use super::error::{AccessError, PutError};
use super::find::{reach, Opening};
use super::input::{Input, STDIN};
use super::{ConfigArg, SegmentArg};
use crate::progress::{Counted, Progress};

#[derive(Args, Debug)]
pub(crate) struct PutArgs {
    /// The file whose bytes to put.
    /// `-` reads standard input (a pipe is read in chunks, never whole).
    file: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
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
    #[command(flatten)]
    quiet: QuietArg,
}

/// Which store, reached how: what every command on a store takes.
#[derive(Args, Debug)]
pub(crate) struct StoreArgs {
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    runtime: SegmentArg,
}

/// `--quiet`, which put and get take.
#[derive(Args, Debug)]
pub(crate) struct QuietArg {
    /// No progress bar (otherwise one shows on a terminal's stderr once a transfer has taken
    /// a second: bytes, rate, time left)
    #[arg(short, long)]
    quiet: bool,
}

#[derive(Args, Debug)]
pub(crate) struct GetArgs {
    #[command(flatten)]
    blob: NameArgs,
    /// Where the bytes go; default: stdout.
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
    /// First byte to read.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// Bytes to read; default: to the blob's end.
    #[arg(long)]
    len: Option<u64>,
    #[command(flatten)]
    quiet: QuietArg,
}

#[derive(Args, Debug)]
pub(crate) struct LsArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Lists this tag's blobs (default: the tags).
    #[arg(long)]
    tag: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct NameArgs {
    /// The blob's name.
    name: String,
    #[command(flatten)]
    store: StoreArgs,
    /// The blob's tag.
    #[arg(long)]
    tag: String,
}

/// A store error in words, naming the tag by its name.
fn in_tag(e: AccessError, tag: &str, name: &str) -> String {
    if e.is_not_found() {
        format!("blob {name:?} not found in tag {tag:?}")
    } else {
        e.to_string()
    }
}

/// The store `args` names, which must exist, reached as [`reach`] decides
/// (through the runtime it names, if it names one), and its configurations.
fn existing_store(args: &StoreArgs) -> Result<(Configs, Box<dyn StoreAccess>), String> {
    let configs = configs(&args.config)?;
    let store = reach(
        &configs.store,
        args.runtime.segment.as_deref(),
        Opening::Existing,
    )?;
    Ok((configs, store))
}

/// An existing tag's id.
fn existing_tag(store: &dyn StoreAccess, name: &str) -> Result<TagId, String> {
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

/// Targets by index (of the configuration's), in words.
fn target_words(targets: &[TargetConfig], indices: &[usize]) -> String {
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
    let configs = configs(&args.store.config)?;
    let name = match args.name {
        Some(n) => n,
        None if args.file == Path::new(STDIN) => {
            return Err("standard input has no file name: pass --name".into())
        }
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
    let input = Input::open(&args.file, most)?;
    let shown = format!("put {}/{name}", args.tag);
    let progress = Progress::new(&shown, input.len(), args.quiet.quiet);
    let mut input = input.with_progress(progress);
    let store = reach(
        &configs.store,
        args.store.runtime.segment.as_deref(),
        Opening::MayCreate,
    )?;
    let store = &*store;
    let tag = store
        .get_or_create_tag(&args.tag)
        .map_err(|e| e.to_string())?;
    let existed = match store.stat(tag, &name) {
        Ok(_) => true,
        Err(e) if e.is_not_found() => false,
        Err(e) => return Err(e.to_string()),
    };
    let context = PutContext {
        compression: args.compress,
        persistence: args.persistence,
    };
    let put = BlobPut::new(tag, &name)
        .at(args.offset)
        .score(Score(args.score))
        .context(context);
    let len = store
        .put(&put, &mut input)
        .map_err(|failure| failed_put(store, tag, &name, existed, failure))?;
    // The bar leaves its line before the result's.
    drop(input);
    let blob = store.stat(tag, &name).map_err(|e| e.to_string())?;
    if !blob.durable && !store.keeps_volatile_blobs() {
        tracing::warn!(
            "{}/{name} went to RAM targets: it is gone when this command exits",
            args.tag
        );
    }
    let class = match &blob.storage {
        Some(storage) => format!(
            "{} ({}), stored {}",
            class(blob.durable),
            storage.persistence,
            storage.stored
        ),
        None => class(blob.durable).to_owned(),
    };
    println!(
        "put {}/{name}: {len} bytes at offset {}; size {}, {class}, targets {}",
        args.tag,
        args.offset,
        blob.size,
        target_words(targets, &blob.targets)
    );
    Ok(())
}

/// A failed put in words. A put in chunks that failed after some made a
/// blob that did not exist: that blob is removed, so a failed put leaves
/// no new blob behind; an existing blob keeps the chunks written.
fn failed_put(
    store: &dyn StoreAccess,
    tag: TagId,
    name: &str,
    existed: bool,
    failure: PutError,
) -> String {
    let PutError { written, error } = failure;
    if written == 0 {
        return error.to_string();
    }
    if existed {
        return format!(
            "{error}; the blob holds the input's first {written} bytes, which were put before"
        );
    }
    match store.delete(tag, name) {
        Ok(()) => format!(
            "{error}; the new blob, which the input's first {written} bytes had made, \
             was removed"
        ),
        Err(e) => format!(
            "{error}; the blob holds the input's first {written} bytes, and removing it \
             failed: {e}"
        ),
    }
}

/// `tandem blob get`.
pub(super) fn get(args: GetArgs) -> Result<(), String> {
    if args.output.is_none() && crate::stdout::was_closed() {
        return Err("stdout is closed: nowhere to write the blob (pass -o OUT)".into());
    }
    let (_, store) = existing_store(&args.blob.store)?;
    let tag = existing_tag(&*store, &args.blob.tag)?;
    // Checked whole before the output is created: a get that cannot succeed
    // must not truncate OUT. (A store opened here stays as it is meanwhile;
    // through a runtime, a put or a delete meanwhile may fail the get
    // midway.)
    let size = store
        .stat(tag, &args.blob.name)
        .map_err(|e| in_tag(e, &args.blob.tag, &args.blob.name))?
        .size;
    let len = args.len.unwrap_or_else(|| size.saturating_sub(args.offset));
    if len == 0 || args.offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(format!(
            "range {}+{len} is not within {}/{} (size {size})",
            args.offset, args.blob.tag, args.blob.name
        ));
    }
    let shown = format!("get {}/{}", args.blob.tag, args.blob.name);
    let progress = Progress::new(&shown, Some(len), args.quiet.quiet);
    let out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(
            File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = Counted {
        inner: out,
        progress: &progress,
    };
    store
        .get(
            BlobRange::new(tag, &args.blob.name, args.offset, len),
            &mut out,
        )
        .map_err(|e| in_tag(e, &args.blob.tag, &args.blob.name))?;
    out.flush()
        .map_err(|e| format!("writing the output: {e}"))?;
    drop(out);
    drop(progress);
    if let Some(path) = &args.output {
        println!(
            "got {}/{}: {len} bytes at offset {} to {}",
            args.blob.tag,
            args.blob.name,
            args.offset,
            path.display()
        );
    }
    Ok(())
}

/// `tandem blob ls`.
pub(super) fn ls(args: LsArgs) -> Result<(), String> {
    let (configs, store) = existing_store(&args.store)?;
    let targets = &configs.store.targets;
    match &args.tag {
        Some(tag_name) => {
            let tag = existing_tag(&*store, tag_name)?;
            let blobs = store.list_blobs(tag).map_err(|e| e.to_string())?;
            println!("{:>14} {:<8} {:<24} name", "size", "class", "targets");
            for b in &blobs {
                println!(
                    "{:>14} {:<8} {:<24} {}",
                    b.size,
                    class(b.durable),
                    target_words(targets, &b.targets),
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
    let (configs, store) = existing_store(&args.store)?;
    let tag = existing_tag(&*store, &args.tag)?;
    let s = store
        .stat(tag, &args.name)
        .map_err(|e| in_tag(e, &args.tag, &args.name))?;
    println!("tag      {} (id {})", args.tag, tag.0);
    println!("name     {}", s.name);
    println!("size     {}", s.size);
    match &s.storage {
        Some(storage) => {
            println!("class    {} ({})", class(s.durable), storage.persistence);
            println!("stored   {}", storage.stored);
        }
        None => println!("class    {}", class(s.durable)),
    }
    println!(
        "targets  {}",
        target_words(&configs.store.targets, &s.targets)
    );
    Ok(())
}

/// `tandem blob rm`.
pub(super) fn rm(args: NameArgs) -> Result<(), String> {
    let (_, store) = existing_store(&args.store)?;
    let tag = existing_tag(&*store, &args.tag)?;
    store
        .delete(tag, &args.name)
        .map_err(|e| in_tag(e, &args.tag, &args.name))?;
    println!("removed {}/{}", args.tag, args.name);
    Ok(())
}
