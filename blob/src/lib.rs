//! Tandem's blob store: named byte blobs grouped by tags, kept on RAM and file targets, with
//! crash-safe metadata in redb. This crate is the storage core; the runtime routes kernel and
//! client requests to it.
//!
//! # Concepts
//!
//! * A **tag** is a named group of blobs with a [`TagId`] (a `u64`, which kernels pass as is),
//!   from [`BlobStore::get_or_create_tag`]. Tags are always durable and never deleted.
//! * A **blob** is a name within a tag and a byte string with a size.
//! * A **target** is where bytes live: a RAM target (one anonymous mapping, volatile) or a file
//!   target (a preallocated file, durable). Space is accounted in pages of [`PAGE_SIZE`] bytes.
//! * A **score** ([`Score`]) says where a put should go.
//!
//! # Names and limits
//!
//! Blob names are non-empty UTF-8 of at most [`MAX_NAME_LEN`] bytes, tag names at most
//! [`MAX_TAG_LEN`] bytes ([`BlobError::EmptyName`], [`BlobError::NameTooLong`]); a new one holds
//! no control character ([`BlobError::ControlInName`]: listings print a name a line). A blob may grow
//! to [`Limits::max_blob_size`] bytes; a range whose end overflows or passes it is
//! [`BlobError::TooLarge`], checked before anything is allocated.
//!
//! # Placement
//!
//! [`Score::AUTO`] (-1.0) tries the targets fastest first (highest score; ties in configuration
//! order). A score `s` in `0.0..=1.0` tries first the targets whose score is at or below `s`,
//! nearest first (highest first), then, if those are full, the targets above `s`, nearest first
//! (lowest first). A put may spill over several targets of the candidate list. When no target it
//! may use has room: [`BlobError::NoSpace`] with the bytes requested and those available.
//! Other scores are [`BlobError::BadScore`]. Because puts are copy-on-write, a put needs free
//! pages for every page its range touches, even when it overwrites existing bytes; the replaced
//! pages are freed when it completes. Concurrent puts reserve space independently, so a put may
//! see `NoSpace` while another put's reservation is still held.
//!
//! # Durability and volatility
//!
//! Each blob has one class for its whole life, **durable** (all its pages on file targets) or
//! **volatile** (all its pages on RAM targets), so that no blob can be half-lost at a restart.
//! The first put of a blob fixes the class: the class of the first candidate target (in the
//! placement order above) through which the whole put fits, trying classes in the order they
//! appear among the candidates. Later puts to the blob use only targets of its class (the score
//! orders them) and fail with [`BlobError::NoSpace`] if those are full. Deleting a blob ends its
//! class; a new put of the name starts a new blob. Volatile blobs are never written to the
//! metadata: after a restart they are gone. Durable blobs survive any crash once their put
//! returned.
//!
//! # Operations
//!
//! * **Put** ([`BlobStore::put`], [`BlobStore::put_with`]) writes `len` bytes at `offset`,
//!   creating the blob if needed. Past the end it extends the blob; a hole (bytes never written
//!   below the size) reads as zeros. A put is all-or-nothing: a reader sees the whole old or the
//!   whole new content, never a mix and never another blob's bytes. A failed put (any error,
//!   including a failing `fill`) leaves the blob and the free space as they were.
//! * **Get** ([`BlobStore::get`], [`BlobStore::get_with`]) reads `len` bytes at `offset`; a range
//!   past the end is [`BlobError::OutOfRange`], which states the size.
//! * A put or get of zero bytes is [`BlobError::EmptyRange`] (checked after the name and tag,
//!   and for a get after the blob's existence).
//! * **Delete** removes a blob; a get racing a delete returns the old bytes or
//!   [`BlobError::NotFound`].
//! * Unknown tag ids are [`BlobError::UnknownTag`], unknown blobs [`BlobError::NotFound`].
//!
//! # How a put works (copy-on-write)
//!
//! A put never writes pages that a reader may see. It allocates new pages for every page its
//! range touches, writes them (the untouched head and tail of the first and last page are copied
//! from the old version; bytes past the new size are zeros), for a durable blob has the target
//! files `fdatasync`ed and the new extent map committed to redb, then publishes the new version
//! in the in-memory index under the blob's lock for writing (which waits out every get still
//! copying from the old version), and only then frees the replaced pages. Gets never touch redb:
//! the in-memory index, rebuilt from redb at open, is the read path. Puts to one blob are
//! serialised by a per-blob mutex; puts to different blobs write their data in parallel and meet
//! only in the group committer, which takes every metadata change that arrived during the
//! previous commit, `fdatasync`s the files their data went to (once per file for the whole
//! batch), then commits them in one redb transaction. A put returns after its transaction
//! committed.
//!
//! Free space is never stored: at open it is derived from the committed extent maps, so pages of
//! puts that were in flight at a crash (written but not committed) are free again. Space is
//! reserved in memory only, and pages are freed in memory only after the metadata that stopped
//! referencing them committed, so a committed map never points at reused pages.
//!
//! After a crash the store reopens with every acknowledged put intact. A put in flight at the
//! crash is either wholly visible (its transaction committed before the crash) or not at all.
//!
//! # Why redb
//!
//! The metadata is a small, write-heavy index (one key per blob) that must commit atomically and
//! survive a crash. redb is pure Rust (no C toolchain), ACID, one file, with copy-on-write
//! B-trees whose commit switches a root pointer after an fsync, so a crash leaves either the old
//! or the new tree. fjall is an LSM tree with a journal: good for large write-heavy data, but it
//! adds compaction and write amplification for an index this small, and its several files and
//! background threads are more to manage. heed wraps LMDB, which is proven but needs a C build
//! and a map size fixed in advance. redb's cost, one fsync'd commit per write transaction, is
//! what group commit amortises.
//!
//! # File targets
//!
//! A file target is a file of exactly its capacity, created and preallocated (`posix_fallocate`)
//! on first start under a temporary name and renamed into place when complete; a file that
//! exists with another size is [`BlobError::TargetSize`]. Data moves in whole aligned pages
//! through aligned buffers, so every request qualifies for `O_DIRECT`; where the filesystem
//! refuses `O_DIRECT` (tmpfs before Linux 6.6), the store uses a buffered descriptor and says so
//! through `tracing`. Reads and writes go through io_uring where the kernel allows it (probed
//! at open; a refusal is logged), with up to [`Limits::io_uring_depth`] 1 MiB requests of one
//! put or get in flight (the next chunk composed, or the previous one handed to the caller,
//! meanwhile); else `pwrite` and `pread`. The metadata names file targets by
//! their configured path string; a metadata file that knows a path whose file has vanished, or
//! whose blobs reference a target no longer configured, is [`BlobError::TargetMismatch`].

//!
//! # The object tier
//!
//! A target of kind `object` ([`ObjectConfig`]) keeps blobs in a bucket of S3-compatible object
//! storage (AWS, MinIO, Ceph RGW, Garage), through the `object_store` crate; every store
//! configured with the same bucket and prefix (a runtime per node) shares them. It is the
//! slowest tier: a score of 0.0 by default, and after local targets of equal score. A first put
//! goes there when placement puts it first, when the local targets its score allows have no
//! room, or when the bucket already has a blob of that name; later puts follow the blob. Gets,
//! stats, lists and deletes look in the local index first, then in the bucket, so kernels and
//! host code reach bucket blobs through the same calls (`tandem/blob.h` is unchanged; a failed
//! request is `TARGET_IO` to a kernel). Tags are shared by name; each store gives a tag it
//! learns from the bucket its own local id. Blobs in the bucket are durable and have no local
//! metadata; their layout, the conditional manifest writes and the part cache are described
//! in the `object` module's source.
//!
//! What is consistent across stores (nodes), given an object store with read-after-write
//! consistency (AWS S3, Garage's default): a get, stat or list sees every put acknowledged
//! before it began, anywhere; a reader sees a blob whole at one version, never parts of two
//! (a version is one manifest object); a put that fails or whose process dies leaves the old
//! version. What is not: on a store that honours conditional writes (If-Match/If-None-Match;
//! `TargetStat::conditional_writes`), concurrent puts to one blob from several stores each
//! keep their bytes (a put that lost the race re-reads the manifest and merges); on a store
//! that ignores them (Garage 2.5) the last manifest written wins, and another put's bytes may
//! be lost. Tag creation is not atomic across stores (it is idempotent). A get that overlaps a
//! put elsewhere may fail with [`BlobError::ObjectConflict`] rather than wait. Local blobs (RAM
//! and file targets) are never seen by other stores.

#![warn(missing_docs)]

mod caller;
mod config;
pub mod demo;
mod error;
pub mod pool;
pub mod wire;

/// The blob store's kernels (`kernels.toml`): `kernels::library()` is what
/// `GpuDevice::load_module` takes; `kernels::names` names them.
pub mod kernels {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}
mod meta;
mod object;
mod target;
mod uring;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub use caller::{BlobCaller, CallError, Submitter};
pub use config::{Limits, ObjectConfig, StoreConfig, TargetConfig, TargetKind};
pub use error::{BlobError, FillError, NameKind};
/// The `object_store` crate the object tier is built on, for
/// [`BlobStore::open_with_object_store`].
pub use object_store;

use meta::{Committer, MetaOp, StoredExtent};
use object::ObjectTier;
use target::{AlignedBuf, Area, FreePages, Target};
use uring::{Pipeline, Rings};

/// Bytes per page: the unit of allocation on every target and of file I/O.
pub const PAGE_SIZE: u64 = 4096;
/// Longest blob name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Longest tag name, in bytes.
pub const MAX_TAG_LEN: usize = 255;

/// Pages moved per file I/O (and per `fill`/`drain` call): 1 MiB.
const CHUNK_PAGES: u64 = 256;

/// A put's data source: `fill(offset_within_data, dst)` writes the bytes of `dst`, which
/// start at `offset_within_data` of the put's range.
pub type Fill<'a> = dyn FnMut(u64, &mut [u8]) -> Result<(), FillError> + 'a;
/// A get's data sink: `drain(offset_within_range, src)` takes the bytes of `src`, which start at
/// `offset_within_range` of the get's range.
pub type Drain<'a> = dyn FnMut(u64, &[u8]) -> Result<(), FillError> + 'a;
pub(crate) type Sink<'a> = dyn FnMut(u64, &[u8]) -> Result<(), BlobError> + 'a;

/// A tag's id. Ids start at 1 and are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagId(pub u64);

/// A placement score: [`Score::AUTO`] or a tier in `0.0..=1.0` (higher = faster). See the crate
/// docs, "Placement".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score(pub f32);

impl Score {
    /// Automatic placement: the fastest target with room.
    pub const AUTO: Score = Score(-1.0);

    fn check(self) -> Result<Option<f32>, BlobError> {
        if self.0 == -1.0 {
            Ok(None)
        } else if (0.0..=1.0).contains(&self.0) {
            Ok(Some(self.0))
        } else {
            Err(BlobError::BadScore(self.0))
        }
    }
}

/// What a put did.
#[derive(Debug, Clone, PartialEq)]
pub struct PutInfo {
    /// The blob's size after the put.
    pub size: u64,
    /// Whether the blob is durable (file targets) or volatile (RAM targets). A first put whose
    /// score prefers file targets lands in RAM when those are full (see the crate docs,
    /// "Placement"): a caller that needs durability checks this.
    pub durable: bool,
    /// Indices (into [`BlobStore::targets`]) of the targets this put's pages went to.
    pub targets: Vec<usize>,
}

/// A blob's description.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobStat {
    /// The blob's tag.
    pub tag: TagId,
    /// The blob's name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Whether the blob is durable (file targets) or volatile (RAM targets).
    pub durable: bool,
    /// Indices (into [`BlobStore::targets`]) of the targets holding its pages, ascending.
    pub targets: Vec<usize>,
}

/// A target's description.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetStat {
    /// Position in the configuration (and in [`BlobStore::targets`]).
    pub index: usize,
    /// RAM or file.
    pub kind: TargetKind,
    /// The file's path (file targets).
    pub path: Option<PathBuf>,
    /// Capacity in bytes (whole pages).
    pub capacity: u64,
    /// Bytes allocated, including those of puts in progress.
    pub used: u64,
    /// The target's score.
    pub score: f32,
    /// Whether the file target uses O_DIRECT (false: buffered I/O, or a RAM target).
    pub direct_io: bool,
    /// Whether the file target's reads and writes go through io_uring (false: pread and pwrite,
    /// or a RAM target).
    pub io_uring: bool,
    /// Whether the object target's store honours conditional writes, which keep two writers
    /// of one blob from losing each other's bytes (false for the other targets).
    pub conditional_writes: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Extent {
    lpage: u64,
    npages: u64,
    target: usize,
    ppage: u64,
}

/// One published version of a blob. Its pages are never written while it is published.
#[derive(Debug)]
struct Version {
    size: u64,
    durable: bool,
    /// Sorted by `lpage`, non-overlapping; missing pages are holes.
    extents: Vec<Extent>,
}

struct BlobEntry {
    /// Serialises puts and deletes of the blob; `true` once the entry left the index.
    writer: Mutex<bool>,
    /// The published version; gets hold the read lock while copying, which keeps its pages from
    /// being freed. `None` while a first put is in progress.
    state: RwLock<Option<Arc<Version>>>,
}

#[derive(Default)]
struct Tags {
    by_name: HashMap<String, TagId>,
    by_id: BTreeMap<TagId, String>,
    next: u64,
}

type TagIndex = HashMap<TagId, BTreeMap<String, Arc<BlobEntry>>>;

/// The blob store. `Send + Sync`: share it (`Arc`) between any number of threads.
pub struct BlobStore {
    targets: Vec<Target>,
    index: RwLock<TagIndex>,
    tags: RwLock<Tags>,
    tag_create: Mutex<()>,
    limits: Limits,
    /// io_uring rings for file reads and writes; `None`: pread and pwrite.
    rings: Option<Rings>,
    /// The object target: its index in `targets` and the tier.
    object: Option<(usize, ObjectTier)>,
    // Declared last: dropped after the index, joining the committer thread.
    committer: Committer,
}

/// Checks a name looked up: not empty, within its limit.
fn check_name(name: &str, kind: NameKind) -> Result<(), BlobError> {
    let max = match kind {
        NameKind::Tag => MAX_TAG_LEN,
        NameKind::Blob => MAX_NAME_LEN,
    };
    if name.is_empty() {
        Err(BlobError::EmptyName(kind))
    } else if name.len() > max {
        Err(BlobError::NameTooLong {
            kind,
            len: name.len(),
            max,
        })
    } else {
        Ok(())
    }
}

/// Checks a name about to be created: [`check_name`], and no control
/// characters (listings print one name a line).
fn check_new_name(name: &str, kind: NameKind) -> Result<(), BlobError> {
    check_name(name, kind)?;
    if name.chars().any(char::is_control) {
        return Err(BlobError::ControlInName {
            kind,
            name: name.to_owned(),
        });
    }
    Ok(())
}

static ZEROS: [u8; 65536] = [0; 65536];

impl BlobStore {
    /// Opens the store, creating the metadata file and target files on first start, and
    /// rebuilds the in-memory index and free space from the committed metadata. An open that
    /// fails removes what it created.
    pub fn open(config: &StoreConfig) -> Result<BlobStore, BlobError> {
        Self::open_inner(config, None, Opening::CreateMissing)
    }

    /// Like [`BlobStore::open`], but creates nothing: for a look at a store, which a store that
    /// was never made has nothing to show. A missing metadata file is [`BlobError::Metadata`],
    /// a missing file target [`BlobError::TargetMismatch`]. A store with an object target is
    /// the exception: its blobs live in the bucket, which other nodes share, so a node that
    /// never opened it still has them to show, and its look opens the store as
    /// [`BlobStore::open`] does.
    pub fn open_existing(config: &StoreConfig) -> Result<BlobStore, BlobError> {
        let in_a_bucket = config.targets.iter().any(|t| t.kind == TargetKind::Object);
        let opening = if in_a_bucket {
            Opening::CreateMissing
        } else {
            Opening::ExistingOnly
        };
        Self::open_inner(config, None, opening)
    }

    /// Like [`BlobStore::open`], with the object target on `store` (any `object_store`
    /// backend: S3 built by the caller, a local folder, memory) instead of the S3 client its
    /// configuration describes; the rest of its `[object]` settings (prefix, part size,
    /// concurrency, cache, `require_conditional_writes`) apply. The configuration must have an
    /// object target.
    pub fn open_with_object_store(
        config: &StoreConfig,
        store: Arc<dyn object_store::ObjectStore>,
    ) -> Result<BlobStore, BlobError> {
        Self::open_inner(config, Some(store), Opening::CreateMissing)
    }

    fn open_inner(
        config: &StoreConfig,
        object_store: Option<Arc<dyn object_store::ObjectStore>>,
        opening: Opening,
    ) -> Result<BlobStore, BlobError> {
        let mut created = Created::default();
        let opened = Self::open_creating(config, object_store, opening, &mut created);
        if opened.is_err() {
            created.remove();
        }
        opened
    }

    /// [`BlobStore::open_inner`]'s work, noting in `created` each file and folder it made.
    fn open_creating(
        config: &StoreConfig,
        object_store: Option<Arc<dyn object_store::ObjectStore>>,
        opening: Opening,
        created: &mut Created,
    ) -> Result<BlobStore, BlobError> {
        if config.targets.is_empty() {
            return Err(BlobError::Config("no targets".into()));
        }
        let mut paths = Vec::new();
        for (i, t) in config.targets.iter().enumerate() {
            if !(0.0..=1.0).contains(&t.score) {
                return Err(BlobError::Config(format!(
                    "target {i}: score {} not in 0.0..=1.0",
                    t.score
                )));
            }
            if (t.kind == TargetKind::Object) != t.object.is_some() {
                return Err(BlobError::Config(format!(
                    "target {i}: an object target needs an [object] table, and only it takes one"
                )));
            }
            match (t.kind, &t.path) {
                (TargetKind::Object, Some(_)) => {
                    return Err(BlobError::Config(format!(
                        "target {i}: an object target takes no path"
                    )))
                }
                (TargetKind::Object, None) if t.capacity != 0 => {
                    return Err(BlobError::Config(format!(
                        "target {i}: an object target takes no capacity (its bucket's quota is \
                         the limit)"
                    )))
                }
                (TargetKind::Object, None) => {}
                (TargetKind::File, None) => {
                    return Err(BlobError::Config(format!(
                        "target {i}: a file target needs a path"
                    )))
                }
                (TargetKind::Ram, Some(_)) => {
                    return Err(BlobError::Config(format!(
                        "target {i}: a RAM target takes no path"
                    )))
                }
                (TargetKind::File, Some(p)) => {
                    let s = p.to_string_lossy().into_owned();
                    if paths.contains(&s) {
                        return Err(BlobError::Config(format!(
                            "target {i}: path {s} listed twice"
                        )));
                    }
                    paths.push(s);
                }
                (TargetKind::Ram, None) => {}
            }
            if t.kind != TargetKind::Object && t.capacity < PAGE_SIZE {
                return Err(BlobError::Config(format!(
                    "target {i}: a capacity of {} bytes holds no page of {PAGE_SIZE} bytes",
                    t.capacity
                )));
            }
        }
        if opening == Opening::ExistingOnly && !config.metadata.try_exists().map_err(meta_io)? {
            return Err(BlobError::Metadata(format!(
                "{} does not exist: nothing was ever put in this store",
                config.metadata.display()
            )));
        }
        if let Some(dir) = config
            .metadata
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            created.dirs_of(dir).map_err(meta_io)?;
        }
        if !config.metadata.try_exists().map_err(meta_io)? {
            created.files.push(config.metadata.clone());
        }
        let db = open_metadata(&config.metadata)?;
        // Which paths the metadata already knows (and so must exist) is read before registering.
        let known_before: std::collections::HashSet<String> = {
            let (known, fresh) = meta::register_targets(&db, &[])?;
            debug_assert!(fresh.is_empty());
            known.into_keys().collect()
        };
        let objects: Vec<&ObjectConfig> = config
            .targets
            .iter()
            .filter_map(|t| t.object.as_ref())
            .collect();
        let mut tier = match (objects.as_slice(), object_store) {
            ([], None) => None,
            ([], Some(_)) => {
                return Err(BlobError::Config(
                    "an object store was given but no target is of kind object".into(),
                ))
            }
            ([one], None) => Some(ObjectTier::open(one)?),
            ([one], Some(store)) => Some(ObjectTier::with_store(store, one)?),
            _ => return Err(BlobError::Config("at most one object target".into())),
        };
        let mut object = None;
        let mut targets = Vec::new();
        let mut next_pid = 0u32;
        let mut pending = Vec::new();
        for t in &config.targets {
            let pages = t.capacity / PAGE_SIZE;
            match t.kind {
                TargetKind::Object => {
                    object = tier.take().map(|tier| (targets.len(), tier));
                    targets.push(Target::object(t.score));
                }
                TargetKind::Ram => targets.push(Target::ram(pages, t.score)?),
                TargetKind::File => {
                    let path = t.path.as_ref().expect("checked above");
                    let s = path.to_string_lossy().into_owned();
                    if known_before.contains(&s) && !path.exists() {
                        return Err(BlobError::TargetMismatch {
                            path: path.clone(),
                            reason: "the metadata knows this target but its file is gone".into(),
                        });
                    }
                    if !path.exists() {
                        if opening == Opening::ExistingOnly {
                            return Err(BlobError::TargetMismatch {
                                path: path.clone(),
                                reason: "configured, but its file was never made".into(),
                            });
                        }
                        created.files.push(path.clone());
                    }
                    // The file is created before its path is committed, so a known path always
                    // had a file.
                    targets.push(Target::file(path, pages, t.score, next_pid)?);
                    pending.push((targets.len() - 1, s));
                    next_pid += 1;
                }
            }
        }
        let (known, _) = meta::register_targets(&db, &paths)?;
        let mut pid_index = HashMap::new();
        for (i, s) in pending {
            let pid = known[&s];
            targets[i].pid = Some(pid);
            pid_index.insert(pid, i);
        }
        let pid_path: HashMap<u32, &String> = known.iter().map(|(p, id)| (*id, p)).collect();

        let loaded = meta::load(&db)?;
        let mut tags = Tags {
            next: 1,
            ..Tags::default()
        };
        let mut index: TagIndex = HashMap::new();
        for (name, id) in loaded.tags {
            tags.by_name.insert(name.clone(), TagId(id));
            tags.by_id.insert(TagId(id), name);
            tags.next = tags.next.max(id + 1);
            index.insert(TagId(id), BTreeMap::new());
        }
        let mut used: Vec<Vec<(u64, u64)>> = vec![Vec::new(); targets.len()];
        for (tag, name, value) in loaded.blobs {
            let corrupt =
                |why: &str| BlobError::Corrupt(format!("blob {name:?} of tag {tag}: {why}"));
            let (size, stored) =
                meta::decode(&value).ok_or_else(|| corrupt("undecodable extent map"))?;
            let mut extents = Vec::with_capacity(stored.len());
            let mut next_lpage = 0;
            for e in stored {
                let Some(&ti) = pid_index.get(&e.pid) else {
                    let path = pid_path.get(&e.pid).map(|p| PathBuf::from(p.as_str()));
                    return Err(BlobError::TargetMismatch {
                        path: path.unwrap_or_default(),
                        reason: format!(
                            "blob {name:?} of tag {tag} lives on it but it is not configured"
                        ),
                    });
                };
                if e.lpage < next_lpage || e.npages == 0 {
                    return Err(corrupt("extents out of order"));
                }
                next_lpage = e.lpage + e.npages;
                used[ti].push((e.ppage, e.npages));
                extents.push(Extent {
                    lpage: e.lpage,
                    npages: e.npages,
                    target: ti,
                    ppage: e.ppage,
                });
            }
            if next_lpage > size.div_ceil(PAGE_SIZE) {
                return Err(corrupt("extents past the size"));
            }
            let Some(blobs) = index.get_mut(&TagId(tag)) else {
                return Err(corrupt("unknown tag"));
            };
            let version = Version {
                size,
                durable: true,
                extents,
            };
            blobs.insert(
                name,
                Arc::new(BlobEntry {
                    writer: Mutex::new(false),
                    state: RwLock::new(Some(Arc::new(version))),
                }),
            );
        }
        for (t, used) in targets.iter_mut().zip(used) {
            t.free = FreePages::from_used(t.pages, used).map_err(|why| {
                BlobError::Corrupt(format!(
                    "target {}: {why}",
                    t.path()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default()
                ))
            })?;
        }
        let db = Arc::new(db);
        let mut syncers = Vec::with_capacity(targets.len());
        for t in &targets {
            syncers.push(match &t.area {
                Area::File(f) => Some(f.sync_handle()?),
                Area::Ram(_) | Area::Object => None,
            });
        }
        if let Some((_, tier)) = &object {
            // Tags made before the object target was configured become visible to other stores.
            let shared = tier.tags()?;
            for name in tags.by_name.keys().filter(|n| !shared.contains(n)) {
                tier.put_tag(name)?;
            }
        }
        Ok(BlobStore {
            object,
            targets,
            index: RwLock::new(index),
            tags: RwLock::new(tags),
            tag_create: Mutex::new(()),
            limits: config.limits.clone(),
            rings: Rings::probe(config.limits.io_uring_depth),
            committer: Committer::start(db, config.limits.max_commit_batch, syncers),
        })
    }

    /// The id of tag `name`, creating (and durably committing) it if it does not exist.
    pub fn get_or_create_tag(&self, name: &str) -> Result<TagId, BlobError> {
        check_new_name(name, NameKind::Tag)?;
        if let Some(&id) = self.tags.read().by_name.get(name) {
            return Ok(id);
        }
        if let Some((_, tier)) = &self.object {
            tier.put_tag(name)?;
        }
        self.local_tag(name)
    }

    /// The local id of tag `name`, creating it in the metadata (not in the bucket).
    fn local_tag(&self, name: &str) -> Result<TagId, BlobError> {
        let _one = self.tag_create.lock();
        if let Some(&id) = self.tags.read().by_name.get(name) {
            return Ok(id);
        }
        let id = TagId(self.tags.read().next);
        self.committer.commit(MetaOp::CreateTag {
            name: name.to_owned(),
            id: id.0,
        })?;
        self.index.write().insert(id, BTreeMap::new());
        let mut tags = self.tags.write();
        tags.by_name.insert(name.to_owned(), id);
        tags.by_id.insert(id, name.to_owned());
        tags.next = id.0 + 1;
        Ok(id)
    }

    /// The id of tag `name`, if it exists (here, or in the object target's bucket: another
    /// store made it; it then gets an id here).
    pub fn tag(&self, name: &str) -> Result<Option<TagId>, BlobError> {
        check_name(name, NameKind::Tag)?;
        if let Some(&id) = self.tags.read().by_name.get(name) {
            return Ok(Some(id));
        }
        match &self.object {
            Some((_, tier)) if tier.has_tag(name)? => self.local_tag(name).map(Some),
            _ => Ok(None),
        }
    }

    /// All tags, by id: with an object target, those other stores made as well (they get ids
    /// here).
    pub fn list_tags(&self) -> Result<Vec<(TagId, String)>, BlobError> {
        if let Some((_, tier)) = &self.object {
            for name in tier.tags()? {
                self.local_tag(&name)?;
            }
        }
        Ok(self
            .tags
            .read()
            .by_id
            .iter()
            .map(|(id, n)| (*id, n.clone()))
            .collect())
    }

    fn check_tag(&self, tag: TagId) -> Result<(), BlobError> {
        self.tag_name(tag).map(drop)
    }

    fn tag_name(&self, tag: TagId) -> Result<String, BlobError> {
        self.tags
            .read()
            .by_id
            .get(&tag)
            .cloned()
            .ok_or(BlobError::UnknownTag(tag))
    }

    /// Whether `entry` holds a published local version.
    fn has_local(&self, tag: TagId, name: &str) -> bool {
        self.lookup(tag, name)
            .is_some_and(|e| e.state.read().is_some())
    }

    fn lookup(&self, tag: TagId, name: &str) -> Option<Arc<BlobEntry>> {
        self.index.read().get(&tag)?.get(name).cloned()
    }

    fn lookup_or_insert(&self, tag: TagId, name: &str) -> Result<Arc<BlobEntry>, BlobError> {
        if let Some(e) = self.lookup(tag, name) {
            return Ok(e);
        }
        let mut index = self.index.write();
        let blobs = index.get_mut(&tag).ok_or(BlobError::UnknownTag(tag))?;
        Ok(blobs
            .entry(name.to_owned())
            .or_insert_with(|| {
                Arc::new(BlobEntry {
                    writer: Mutex::new(false),
                    state: RwLock::new(None),
                })
            })
            .clone())
    }

    fn remove_entry(&self, tag: TagId, name: &str, entry: &Arc<BlobEntry>) {
        let mut index = self.index.write();
        if let Some(blobs) = index.get_mut(&tag) {
            if blobs.get(name).is_some_and(|e| Arc::ptr_eq(e, entry)) {
                blobs.remove(name);
            }
        }
    }

    /// Writes `data` at `offset` of blob `name` in `tag`, creating or extending it. See the
    /// crate docs for placement, atomicity and errors.
    pub fn put(
        &self,
        tag: TagId,
        name: &str,
        offset: u64,
        data: &[u8],
        score: Score,
    ) -> Result<PutInfo, BlobError> {
        self.put_with(
            tag,
            name,
            offset,
            data.len() as u64,
            score,
            &mut |at, dst| {
                dst.copy_from_slice(&data[at as usize..at as usize + dst.len()]);
                Ok(())
            },
        )
    }

    /// Like [`BlobStore::put`], but the `len` bytes are produced by `fill(offset_within_data,
    /// dst)`, called with consecutive chunks that together cover `0..len`, writing straight
    /// into the target's memory (RAM target) or an aligned bounce buffer (file target). A fill
    /// error aborts the put, which then leaves nothing behind.
    ///
    /// `fill` runs while the put holds the blob's put lock: it must not put to or delete the
    /// same blob (that would wait on itself); gets of the blob, and anything on other blobs,
    /// are fine.
    pub fn put_with(
        &self,
        tag: TagId,
        name: &str,
        offset: u64,
        len: u64,
        score: Score,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        check_new_name(name, NameKind::Blob)?;
        let score = score.check()?;
        self.check_tag(tag)?;
        if len == 0 {
            return Err(BlobError::EmptyRange);
        }
        let max = self.limits.max_blob_size;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= max)
            .ok_or(BlobError::TooLarge { offset, len, max })?;
        if let Some((index, tier)) = &self.object {
            // A blob that has no local version goes to the bucket when placement puts the
            // object target first, or when the bucket already has it (one name, one blob).
            if !self.has_local(tag, name) {
                let tag_name = self.tag_name(tag)?;
                let first = self.candidates(score).first() == Some(index);
                if first || tier.size(&tag_name, name)?.is_some() {
                    return self.put_object(&tag_name, name, offset, end, fill);
                }
                return match self.put_local(tag, name, offset, end, score, fill) {
                    // The object target takes what no local target has room for.
                    Err(BlobError::NoSpace { .. }) if !self.has_local(tag, name) => {
                        self.put_object(&tag_name, name, offset, end, fill)
                    }
                    other => other,
                };
            }
        }
        self.put_local(tag, name, offset, end, score, fill)
    }

    fn put_object(
        &self,
        tag_name: &str,
        name: &str,
        offset: u64,
        end: u64,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        let (index, tier) = self.object.as_ref().expect("called with an object target");
        let size = tier.put(tag_name, name, offset, end, fill)?;
        Ok(PutInfo {
            size,
            durable: true,
            targets: vec![*index],
        })
    }

    fn put_local(
        &self,
        tag: TagId,
        name: &str,
        offset: u64,
        end: u64,
        score: Option<f32>,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        loop {
            let entry = self.lookup_or_insert(tag, name)?;
            let mut dead = entry.writer.lock();
            if *dead {
                continue; // deleted between lookup and lock: start over with the new entry
            }
            let result = self.put_locked(&entry, tag, name, offset, end, score, fill);
            if result.is_err() && entry.state.read().is_none() {
                *dead = true;
                self.remove_entry(tag, name, &entry);
            }
            return result;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn put_locked(
        &self,
        entry: &BlobEntry,
        tag: TagId,
        name: &str,
        offset: u64,
        end: u64,
        score: Option<f32>,
        fill: &mut Fill<'_>,
    ) -> Result<PutInfo, BlobError> {
        let old = entry.state.read().clone();
        let p0 = offset / PAGE_SIZE;
        let p1 = end.div_ceil(PAGE_SIZE);
        let (durable, runs) = self.allocate(p1 - p0, score, old.as_ref().map(|v| v.durable))?;
        let mut fresh = Vec::with_capacity(runs.len());
        let mut lp = p0;
        for (target, ppage, npages) in runs {
            fresh.push(Extent {
                lpage: lp,
                npages,
                target,
                ppage,
            });
            lp += npages;
        }
        let undo = |fresh: &[Extent]| {
            for e in fresh {
                self.targets[e.target].free.give(e.ppage, e.npages);
            }
        };
        let new_size = old.as_ref().map_or(0, |v| v.size).max(end);
        if let Err(e) = self.write_fresh(&fresh, old.as_deref(), offset, end, new_size, fill) {
            undo(&fresh);
            return Err(e);
        }
        let mut put_targets: Vec<usize> = fresh.iter().map(|e| e.target).collect();
        put_targets.sort_unstable();
        put_targets.dedup();
        let (mut extents, replaced) = cut(old.as_ref().map_or(&[][..], |v| &v.extents), p0, p1);
        extents.extend_from_slice(&fresh);
        extents.sort_unstable_by_key(|e| e.lpage);
        let extents = merge(extents);
        if durable {
            let stored: Vec<StoredExtent> = extents
                .iter()
                .map(|e| StoredExtent {
                    lpage: e.lpage,
                    npages: e.npages,
                    pid: self.targets[e.target]
                        .pid
                        .expect("durable blobs live on file targets"),
                    ppage: e.ppage,
                })
                .collect();
            let op = MetaOp::PutBlob {
                tag: tag.0,
                name: name.to_owned(),
                value: meta::encode(new_size, &stored),
                // The committer fdatasyncs these before the transaction that points at them.
                sync: put_targets.clone(),
            };
            if let Err(e) = self.committer.commit(op) {
                undo(&fresh);
                return Err(e);
            }
        }
        // Publishing waits for gets of the old version to finish; after it none can start.
        *entry.state.write() = Some(Arc::new(Version {
            size: new_size,
            durable,
            extents,
        }));
        undo(&replaced);
        Ok(PutInfo {
            size: new_size,
            durable,
            targets: put_targets,
        })
    }

    /// Target indices in placement order for `score` (see the crate docs).
    fn candidates(&self, score: Option<f32>) -> Vec<usize> {
        let mut all: Vec<usize> = (0..self.targets.len()).collect();
        let sc = |i: usize| self.targets[i].score;
        // On equal scores the object target comes last: it is the slowest tier.
        let obj = |i: usize| self.targets[i].kind == TargetKind::Object;
        match score {
            None => {
                all.sort_by(|&a, &b| sc(b).total_cmp(&sc(a)).then(obj(a).cmp(&obj(b))));
                all
            }
            Some(s) => {
                let (mut below, mut above): (Vec<usize>, Vec<usize>) =
                    all.into_iter().partition(|&i| sc(i) <= s);
                below.sort_by(|&a, &b| sc(b).total_cmp(&sc(a)).then(obj(a).cmp(&obj(b))));
                above.sort_by(|&a, &b| sc(a).total_cmp(&sc(b)).then(obj(a).cmp(&obj(b))));
                below.extend(above);
                below
            }
        }
    }

    /// Reserves `npages` pages on targets of one class: the blob's class if it has one, else
    /// the first class (in placement order) that can hold them all. All or nothing.
    #[allow(clippy::type_complexity)]
    fn allocate(
        &self,
        npages: u64,
        score: Option<f32>,
        class: Option<bool>,
    ) -> Result<(bool, Vec<(usize, u64, u64)>), BlobError> {
        let mut cands = self.candidates(score);
        cands.retain(|&i| self.targets[i].kind != TargetKind::Object);
        let mut classes = Vec::new();
        for &i in &cands {
            let d = self.targets[i].durable();
            if class.is_none_or(|c| c == d) && !classes.contains(&d) {
                classes.push(d);
            }
        }
        let mut available = 0;
        for durable in classes {
            let mut runs = Vec::new();
            let mut need = npages;
            let class = || {
                cands
                    .iter()
                    .filter(|&&i| self.targets[i].durable() == durable)
            };
            for &i in class() {
                if need == 0 {
                    break;
                }
                for (start, n) in self.targets[i].free.take(need) {
                    need -= n;
                    runs.push((i, start, n));
                }
            }
            if need == 0 {
                return Ok((durable, runs));
            }
            for (i, start, n) in runs {
                self.targets[i].free.give(start, n);
            }
            // Counted only for the error: every shard's lock, once.
            let free: u64 = class().map(|&i| self.targets[i].free.free_pages()).sum();
            available = available.max(free * PAGE_SIZE);
        }
        Err(BlobError::NoSpace {
            requested: npages.saturating_mul(PAGE_SIZE),
            available,
        })
    }

    /// Writes the fresh pages: fill for `offset..end`, the old content around it, zeros past
    /// `new_size`.
    fn write_fresh(
        &self,
        fresh: &[Extent],
        old: Option<&Version>,
        offset: u64,
        end: u64,
        new_size: u64,
        fill: &mut Fill<'_>,
    ) -> Result<(), BlobError> {
        let mut bounce: Option<AlignedBuf> = None;
        let mut pipe: Option<Pipeline<'_>> = None;
        let mut no_ring = false;
        for e in fresh {
            let mut done = 0;
            while done < e.npages {
                let n = (e.npages - done).min(CHUNK_PAGES);
                let lstart = (e.lpage + done) * PAGE_SIZE;
                let ppage = e.ppage + done;
                match &self.targets[e.target].area {
                    Area::Object => unreachable!("no extent lies on the object target"),
                    Area::Ram(ram) => {
                        // SAFETY: these pages were just allocated to this put and are not
                        // published, so no one else reads or writes them.
                        let dst = unsafe { ram.pages_mut(ppage, n) };
                        self.compose(dst, lstart, old, offset, end, new_size, fill)?;
                    }
                    Area::File(file) => {
                        let bytes = (n * PAGE_SIZE) as usize;
                        if pipe.is_none() && !no_ring {
                            pipe = self.rings.as_ref().and_then(Pipeline::new);
                            no_ring = pipe.is_none();
                        }
                        if let Some(p) = pipe.as_mut() {
                            // Compose this chunk while earlier ones are being written.
                            let slot = p.free_slot(bytes)?;
                            let buf = p.buf(slot, bytes);
                            self.compose(buf, lstart, old, offset, end, new_size, fill)?;
                            p.submit(slot, file, ppage, bytes)?;
                        } else {
                            if bounce.as_ref().is_none_or(|b| b.len() < bytes) {
                                bounce = Some(AlignedBuf::new(bytes));
                            }
                            let buf = &mut bounce.as_mut().expect("set above")[..bytes];
                            self.compose(buf, lstart, old, offset, end, new_size, fill)?;
                            file.write_pages(ppage, buf)?;
                        }
                    }
                }
                done += n;
            }
        }
        // Early returns above drop the pipeline, which waits for its writes before its buffers go.
        match pipe.as_mut() {
            Some(p) => p.finish(),
            None => Ok(()),
        }
    }

    /// Fills `dst`, the bytes of logical positions `lstart..`, with the new content.
    #[allow(clippy::too_many_arguments)]
    fn compose(
        &self,
        dst: &mut [u8],
        lstart: u64,
        old: Option<&Version>,
        offset: u64,
        end: u64,
        new_size: u64,
        fill: &mut Fill<'_>,
    ) -> Result<(), BlobError> {
        let lend = lstart + dst.len() as u64;
        let a = offset.clamp(lstart, lend);
        let b = end.clamp(lstart, lend);
        let rel = |x: u64| (x - lstart) as usize;
        // Head and tail come from the old version (zeros where it has none).
        self.old_bytes(old, lstart, &mut dst[..rel(a)])?;
        if b > a {
            fill(a - offset, &mut dst[rel(a)..rel(b)])?;
        }
        let tail_end = new_size.clamp(b, lend);
        self.old_bytes(old, b, &mut dst[rel(b)..rel(tail_end)])?;
        dst[rel(tail_end)..].fill(0);
        Ok(())
    }

    fn old_bytes(&self, old: Option<&Version>, pos: u64, dst: &mut [u8]) -> Result<(), BlobError> {
        if dst.is_empty() {
            return Ok(());
        }
        let Some(v) = old else {
            dst.fill(0);
            return Ok(());
        };
        let have = v.size.saturating_sub(pos).min(dst.len() as u64) as usize;
        dst[have..].fill(0);
        if have > 0 {
            let (head, _) = dst.split_at_mut(have);
            self.read_version(v, pos, have as u64, &mut |at, src| {
                head[at as usize..at as usize + src.len()].copy_from_slice(src);
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Streams the bytes `pos..pos+len` of `v` (within its size) to `sink(offset_within, bytes)`
    /// in order. The caller keeps `v`'s pages from being freed.
    fn read_version(
        &self,
        v: &Version,
        pos: u64,
        len: u64,
        sink: &mut Sink<'_>,
    ) -> Result<(), BlobError> {
        let end = pos + len;
        let mut at = pos;
        let mut bounce: Option<AlignedBuf> = None;
        // File chunks go through io_uring when it is there, several reads in flight, handed
        // to `sink` in order (a sink may write a stream).
        let mut reads = self.rings.as_ref().and_then(Pipeline::new).map(Reads::new);
        let mut i = v
            .extents
            .partition_point(|e| (e.lpage + e.npages) * PAGE_SIZE <= pos);
        while at < end {
            let ext = v.extents.get(i).filter(|e| e.lpage * PAGE_SIZE < end);
            let hole_end = ext.map_or(end, |e| (e.lpage * PAGE_SIZE).max(at));
            if at < hole_end {
                if let Some(r) = reads.as_mut() {
                    r.flush(sink)?;
                }
            }
            while at < hole_end {
                let n = (hole_end - at).min(ZEROS.len() as u64);
                sink(at - pos, &ZEROS[..n as usize])?;
                at += n;
            }
            let Some(e) = ext else { break };
            let e_end = ((e.lpage + e.npages) * PAGE_SIZE).min(end);
            while at < e_end {
                let page_in = at / PAGE_SIZE - e.lpage;
                let n_pages = (e_end.div_ceil(PAGE_SIZE) - at / PAGE_SIZE).min(CHUNK_PAGES);
                let skip = (at % PAGE_SIZE) as usize;
                let take = (e_end - at).min(n_pages * PAGE_SIZE - skip as u64) as usize;
                match &self.targets[e.target].area {
                    Area::Object => unreachable!("no extent lies on the object target"),
                    Area::Ram(ram) => {
                        if let Some(r) = reads.as_mut() {
                            r.flush(sink)?;
                        }
                        // SAFETY: the pages belong to a published version the caller holds, and
                        // published pages are never written.
                        let src = unsafe { ram.pages(e.ppage + page_in, n_pages) };
                        sink(at - pos, &src[skip..skip + take])?;
                    }
                    Area::File(file) => {
                        let bytes = (n_pages * PAGE_SIZE) as usize;
                        let chunk = ReadChunk {
                            at: at - pos,
                            skip,
                            take,
                            bytes,
                        };
                        if let Some(r) = reads.as_mut() {
                            r.read(file, e.ppage + page_in, chunk, sink)?;
                        } else {
                            if bounce.as_ref().is_none_or(|b| b.len() < bytes) {
                                bounce = Some(AlignedBuf::new(bytes));
                            }
                            let buf = &mut bounce.as_mut().expect("set above")[..bytes];
                            file.read_pages(e.ppage + page_in, buf)?;
                            sink(at - pos, &buf[skip..skip + take])?;
                        }
                    }
                }
                at += take as u64;
            }
            i += 1;
        }
        if let Some(r) = reads.as_mut() {
            r.flush(sink)?;
        }
        Ok(())
    }

    fn published(&self, tag: TagId, name: &str) -> Result<Arc<BlobEntry>, BlobError> {
        check_name(name, NameKind::Blob)?;
        self.check_tag(tag)?;
        self.lookup(tag, name).ok_or_else(|| BlobError::NotFound {
            tag,
            name: name.to_owned(),
        })
    }

    /// Reads `out.len()` bytes at `offset` of blob `name` into `out`.
    pub fn get(
        &self,
        tag: TagId,
        name: &str,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), BlobError> {
        let len = out.len() as u64;
        self.get_with(tag, name, offset, len, &mut |at, src| {
            out[at as usize..at as usize + src.len()].copy_from_slice(src);
            Ok(())
        })
    }

    /// Reads `len` bytes at `offset` of blob `name`, handing them to `drain(offset_within,
    /// bytes)` in consecutive chunks, straight from the target's memory (RAM target) or from a
    /// bounce buffer (file target). A drain error aborts the get.
    ///
    /// `drain` runs while the get holds the blob's read lock: it must not put to or delete the
    /// same blob (the put would wait for this get to finish).
    pub fn get_with(
        &self,
        tag: TagId,
        name: &str,
        offset: u64,
        len: u64,
        drain: &mut Drain<'_>,
    ) -> Result<(), BlobError> {
        if let Some(tag_name) = self.in_bucket_only(tag, name)? {
            if len == 0 {
                return Err(BlobError::EmptyRange);
            }
            let (_, tier) = self.object.as_ref().expect("in_bucket_only found a tier");
            let found = tier.get(&tag_name, name, offset, len, &mut |at, src| {
                drain(at, src).map_err(BlobError::Fill)
            })?;
            return if found {
                Ok(())
            } else {
                Err(BlobError::NotFound {
                    tag,
                    name: name.to_owned(),
                })
            };
        }
        let entry = self.published(tag, name)?;
        if len == 0 {
            return Err(BlobError::EmptyRange);
        }
        // The read lock is held while copying: the version's pages cannot be freed meanwhile.
        let state = entry.state.read();
        let Some(v) = state.as_ref() else {
            return Err(BlobError::NotFound {
                tag,
                name: name.to_owned(),
            });
        };
        if offset.checked_add(len).is_none_or(|e| e > v.size) {
            return Err(BlobError::OutOfRange {
                size: v.size,
                offset,
                len,
            });
        }
        self.read_version(v, offset, len, &mut |at, src| {
            drain(at, src).map_err(BlobError::Fill)
        })
    }

    /// With an object target, and no local version of the blob: the tag's name, for the
    /// bucket (names and tag checked). `None`: the blob is local, or there is no object target.
    fn in_bucket_only(&self, tag: TagId, name: &str) -> Result<Option<String>, BlobError> {
        if self.object.is_none() {
            return Ok(None);
        }
        check_name(name, NameKind::Blob)?;
        let tag_name = self.tag_name(tag)?;
        Ok((!self.has_local(tag, name)).then_some(tag_name))
    }

    /// Size, class and targets of blob `name`.
    pub fn stat(&self, tag: TagId, name: &str) -> Result<BlobStat, BlobError> {
        if let Some(tag_name) = self.in_bucket_only(tag, name)? {
            let (index, tier) = self.object.as_ref().expect("in_bucket_only found a tier");
            return match tier.size(&tag_name, name)? {
                Some(size) => Ok(BlobStat {
                    tag,
                    name: name.to_owned(),
                    size,
                    durable: true,
                    targets: vec![*index],
                }),
                None => Err(BlobError::NotFound {
                    tag,
                    name: name.to_owned(),
                }),
            };
        }
        let entry = self.published(tag, name)?;
        let state = entry.state.read();
        match state.as_ref() {
            Some(v) => Ok(describe(tag, name, v)),
            None => Err(BlobError::NotFound {
                tag,
                name: name.to_owned(),
            }),
        }
    }

    /// Removes blob `name`; its pages are freed once no get is reading them.
    pub fn delete(&self, tag: TagId, name: &str) -> Result<(), BlobError> {
        if let Some(tag_name) = self.in_bucket_only(tag, name)? {
            let (_, tier) = self.object.as_ref().expect("in_bucket_only found a tier");
            return if tier.delete(&tag_name, name)? {
                Ok(())
            } else {
                Err(BlobError::NotFound {
                    tag,
                    name: name.to_owned(),
                })
            };
        }
        let entry = self.published(tag, name)?;
        let not_found = || BlobError::NotFound {
            tag,
            name: name.to_owned(),
        };
        let mut dead = entry.writer.lock();
        if *dead {
            return Err(not_found());
        }
        let Some(old) = entry.state.read().clone() else {
            return Err(not_found());
        };
        if old.durable {
            self.committer.commit(MetaOp::DeleteBlob {
                tag: tag.0,
                name: name.to_owned(),
            })?;
        }
        *entry.state.write() = None;
        *dead = true;
        self.remove_entry(tag, name, &entry);
        for e in &old.extents {
            self.targets[e.target].free.give(e.ppage, e.npages);
        }
        Ok(())
    }

    /// The blobs of `tag`, by name.
    pub fn list_blobs(&self, tag: TagId) -> Result<Vec<BlobStat>, BlobError> {
        self.check_tag(tag)?;
        let entries: Vec<(String, Arc<BlobEntry>)> = match self.index.read().get(&tag) {
            Some(b) => b.iter().map(|(n, e)| (n.clone(), e.clone())).collect(),
            None => Vec::new(),
        };
        let mut blobs: Vec<BlobStat> = entries
            .into_iter()
            .filter_map(|(n, e)| e.state.read().as_ref().map(|v| describe(tag, &n, v)))
            .collect();
        if let Some((index, tier)) = &self.object {
            for (name, size) in tier.list(&self.tag_name(tag)?)? {
                if !blobs.iter().any(|b| b.name == name) {
                    blobs.push(BlobStat {
                        tag,
                        name,
                        size,
                        durable: true,
                        targets: vec![*index],
                    });
                }
            }
            blobs.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(blobs)
    }

    /// The targets, in configuration order.
    pub fn targets(&self) -> Vec<TargetStat> {
        self.targets
            .iter()
            .enumerate()
            .map(|(index, t)| TargetStat {
                index,
                kind: t.kind,
                path: t.path().map(|p| p.to_path_buf()),
                capacity: t.pages * PAGE_SIZE,
                used: (t.pages - t.free.free_pages()) * PAGE_SIZE,
                score: t.score,
                direct_io: matches!(&t.area, Area::File(f) if f.direct_io()),
                io_uring: t.kind == TargetKind::File && self.rings.is_some(),
                conditional_writes: self
                    .object
                    .as_ref()
                    .is_some_and(|(i, tier)| *i == index && tier.conditional_writes()),
            })
            .collect()
    }
}

/// Whether an open may create what is missing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opening {
    CreateMissing,
    ExistingOnly,
}

/// What an open created, to remove again if it fails: files, and folders
/// (deepest first).
#[derive(Default)]
struct Created {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Created {
    /// Creates `dir` and its missing parents, noting each made.
    fn dirs_of(&mut self, dir: &std::path::Path) -> std::io::Result<()> {
        let mut missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(PathBuf::from)
            .collect();
        std::fs::create_dir_all(dir)?;
        self.dirs.append(&mut missing);
        Ok(())
    }

    fn remove(self) {
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
        // Only if empty: a folder something else wrote to meanwhile stays.
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn meta_io(e: std::io::Error) -> BlobError {
    BlobError::Metadata(e.to_string())
}

/// Opens the redb metadata at `path`, first making it whole elsewhere when there is none
/// ([`target::create_whole`]): a first start killed while redb laid the file out would leave
/// one that redb then refuses to open ("invalid data"), and the store with it.
///
/// The database made whole is the one returned (its descriptor follows the rename): opening
/// the fresh file a second time made 1 MiB puts to a file target about half as fast, with the
/// same syscalls (the blob bench on the CPU device; docs/perf/2026-11-25-dev-vm-2core.md,
/// "The metadata database opened twice").
fn open_metadata(path: &std::path::Path) -> Result<redb::Database, BlobError> {
    if path.try_exists().map_err(meta_io)? {
        return redb::Database::create(path).map_err(error::meta_err);
    }
    target::create_whole(path, |tmp| {
        let fresh = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
        let _ = std::fs::remove_file(tmp);
        let db = redb::Database::create(tmp).map_err(|e| fresh(&e))?;
        // One durable (fsynced) commit: the file is complete before it is renamed.
        db.begin_write()
            .map_err(|e| fresh(&e))?
            .commit()
            .map_err(|e| fresh(&e))?;
        Ok(db)
    })
    .map_err(meta_io)
}

fn describe(tag: TagId, name: &str, v: &Version) -> BlobStat {
    let mut targets: Vec<usize> = v.extents.iter().map(|e| e.target).collect();
    targets.sort_unstable();
    targets.dedup();
    BlobStat {
        tag,
        name: name.to_owned(),
        size: v.size,
        durable: v.durable,
        targets,
    }
}

/// Splits `extents` around logical pages `p0..p1`: (the extents outside, the pieces inside).
fn cut(extents: &[Extent], p0: u64, p1: u64) -> (Vec<Extent>, Vec<Extent>) {
    let mut keep = Vec::with_capacity(extents.len() + 1);
    let mut gone = Vec::new();
    for &e in extents {
        let e_end = e.lpage + e.npages;
        if e_end <= p0 || e.lpage >= p1 {
            keep.push(e);
            continue;
        }
        if e.lpage < p0 {
            keep.push(Extent {
                npages: p0 - e.lpage,
                ..e
            });
        }
        let a = e.lpage.max(p0);
        let b = e_end.min(p1);
        gone.push(Extent {
            lpage: a,
            npages: b - a,
            target: e.target,
            ppage: e.ppage + (a - e.lpage),
        });
        if e_end > p1 {
            keep.push(Extent {
                lpage: p1,
                npages: e_end - p1,
                target: e.target,
                ppage: e.ppage + (p1 - e.lpage),
            });
        }
    }
    (keep, gone)
}

/// Joins extents that continue each other logically and physically on one target.
fn merge(sorted: Vec<Extent>) -> Vec<Extent> {
    let mut out: Vec<Extent> = Vec::with_capacity(sorted.len());
    for e in sorted {
        if let Some(last) = out.last_mut() {
            if last.target == e.target
                && last.lpage + last.npages == e.lpage
                && last.ppage + last.npages == e.ppage
            {
                last.npages += e.npages;
                continue;
            }
        }
        out.push(e);
    }
    out
}

#[cfg(test)]
mod tests;

/// A file chunk of a get: `bytes` of whole pages read, of which `take` from `skip` go to the
/// sink at offset `at`.
#[derive(Clone, Copy)]
struct ReadChunk {
    at: u64,
    skip: usize,
    take: usize,
    bytes: usize,
}

/// A get's file reads through io_uring: several in flight, handed to the sink in the order
/// they were asked for.
struct Reads<'a> {
    pipe: Pipeline<'a>,
    /// Submitted, not yet sunk: slot and chunk, oldest first.
    queue: std::collections::VecDeque<(usize, ReadChunk)>,
    /// Slots whose read completed but that are not yet sunk.
    done: Vec<usize>,
}

impl<'a> Reads<'a> {
    fn new(pipe: Pipeline<'a>) -> Self {
        Reads {
            pipe,
            queue: std::collections::VecDeque::new(),
            done: Vec::new(),
        }
    }

    /// Starts reading `chunk` at page `page` of `file`, sinking the oldest reads first when
    /// every buffer is in use.
    fn read(
        &mut self,
        file: &'a target::FileArea,
        page: u64,
        chunk: ReadChunk,
        sink: &mut Sink<'_>,
    ) -> Result<(), BlobError> {
        let slot = loop {
            if let Some(slot) = self.pipe.read_slot(chunk.bytes) {
                break slot;
            }
            self.sink_oldest(sink)?;
        };
        self.pipe.submit_read(slot, file, page, chunk.bytes)?;
        self.queue.push_back((slot, chunk));
        Ok(())
    }

    /// Waits for the oldest read and hands its bytes to `sink`.
    fn sink_oldest(&mut self, sink: &mut Sink<'_>) -> Result<(), BlobError> {
        let Some(&(slot, chunk)) = self.queue.front() else {
            return Ok(());
        };
        while !self.done.contains(&slot) {
            let finished = self.pipe.wait_read()?;
            self.done.push(finished);
        }
        self.done.retain(|&s| s != slot);
        self.queue.pop_front();
        let buf = self.pipe.read_buf(slot, chunk.bytes);
        let sunk = sink(chunk.at, &buf[chunk.skip..chunk.skip + chunk.take]);
        self.pipe.release_read(slot);
        sunk
    }

    /// Sinks every read still queued, in order.
    fn flush(&mut self, sink: &mut Sink<'_>) -> Result<(), BlobError> {
        while !self.queue.is_empty() {
            self.sink_oldest(sink)?;
        }
        Ok(())
    }
}
