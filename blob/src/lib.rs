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
//! # Durability and persistence
//!
//! Each blob has one class for its whole life: **volatile** (all its pages on RAM targets),
//! **temporary** or **long-term** (all its pages on file targets), so that no blob can be
//! half-lost at a restart. A put asks for a minimum [`Persistence`] level in its
//! [`PutContext`]; what each level means:
//!
//! * [`Persistence::Volatile`]: survives nothing. A RAM target or any other: a volatile put
//!   that placement sends to a file target makes a long-term blob, as every put did before
//!   levels existed. Volatile blobs are never written to the metadata: after a restart they are
//!   gone.
//! * [`Persistence::Temporary`]: survives a crash of the process (kill -9), not a power loss. A
//!   file target, its data written but not synced per put; its metadata committed stamped with
//!   the boot's id (`/proc/sys/kernel/random/boot_id`). The first open after a reboot, which a
//!   power loss may have come with, drops it and frees its pages (so does every open where the
//!   kernel does not tell its boot id).
//! * [`Persistence::LongTerm`]: survives a power loss. A file target, acknowledged only once its
//!   data is synced and its metadata committed; or the object tier.
//!
//! Placement honours the level before the score: it considers only the targets that keep it
//! (every target for volatile, file and object targets for the others), in the order the
//! score gives them. A level no configured target keeps is [`BlobError::NoTargetFor`]; when
//! those that keep it are full, [`BlobError::NoSpace`]. The first put of a blob fixes the
//! class: the class of the first candidate target (in that order) through which the whole put
//! fits, trying classes in the order they appear among the candidates. Later puts to the blob
//! use only targets of its class (the score orders them) and fail with [`BlobError::NoSpace`]
//! if those are full; a later put asking for a level above a volatile blob's is
//! [`BlobError::ClassTooLow`], one asking long-term of a temporary blob makes it long-term
//! (its files synced before the put commits). Deleting a blob ends its class; a new put of the
//! name starts a new blob.
//!
//! # Put contexts
//!
//! A [`PutContext`] goes with a put: in its [`BlobPut`] request ([`BlobPut::context`]), which
//! every put of the store and of a client takes, or `tandem/blob.h`'s `put` taking a
//! `PutContext`; the default one (a request without a context, a kernel's `put` without one)
//! compresses nothing and asks for
//! [`Persistence::Volatile`]: the store's behaviour before contexts. Besides the level it says
//! whether to compress ([`Compression`]): not at all, always (static), or as a sample of the
//! data decides (dynamic: the put's first 4 KiB compressed with the codec's fastest setting; a
//! put whose sample does not shrink by an eighth is stored raw), with zstd or lz4 ([`Codec`])
//! at a [`Preset`].
//!
//! A compressed blob's bytes are cut into independent frames of 64 KiB of logical bytes; each
//! is stored in the pages its compressed bytes need, with its codec, compressed length and
//! CRC-32 in the blob's extent map (a frame that would not save a page is stored raw). A get
//! decompresses the frames its range covers; a frame that fails its checksum or does not
//! decompress to its size is [`BlobError::CorruptFrame`], naming the blob: never wrong bytes. A
//! compressing put rewrites the whole frames its range touches (their other bytes come from the
//! old version) and any put rewrites whole the compressed frames its range touches, so frames
//! a put does not touch are not read or written, and holes in them stay holes. A compressing
//! put reserves pages for its range uncompressed, before asking its `fill` for anything, and
//! gives back what the frames did not need: it may see [`BlobError::NoSpace`] where its
//! compressed bytes would have fitted. [`BlobStat`] gives a blob's logical `size`, the
//! `stored` bytes of its pages and its `codecs`. The object tier stores bytes raw.
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
//! # Crash safety
//!
//! A put never writes pages that a reader may see (copy-on-write), and a long-term blob's new
//! version is committed to the metadata, after its data reached the target files (a temporary
//! blob's, after its data was written), before the put returns: after a crash the store reopens with every acknowledged put intact, and a put in
//! flight at the crash is either wholly visible (its transaction committed before the crash) or
//! not at all. Free space is derived from the committed metadata at open, never stored. How a
//! put works is told in `local/put.rs`, the recovery in `local/recover.rs`, and why the
//! metadata is in redb (not fjall or heed) in `meta/mod.rs`.
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
//!
//! # The front
//!
//! What a user writes against is re-exported here, at the crate root; every other module is
//! private to the crate, so the store's internals (extent maps, placement, the metadata's
//! tables, the object tier's bucket layout) can change without breaking a user. Each public
//! item is here for one of these jobs:
//!
//! * **Running a store.** [`BlobStore`] is the store, opened from a [`StoreConfig`] (its
//!   [`TargetConfig`]s of a [`TargetKind`], an object target's [`ObjectConfig`], the
//!   [`Limits`]); every failure is a [`BlobError`], whose [`NameKind`] says which name was
//!   refused. [`object_store`] is the crate the object tier is built on, re-exported for
//!   [`BlobStore::open_with_object_store`], whose caller builds the backend.
//! * **Calling it from host code in its process.** A put is asked for with a [`BlobPut`]: its
//!   blob (a [`TagId`] and a name), offset, placement [`Score`], and compression and
//!   persistence in a [`PutContext`] (of a [`Compression`] with a [`Codec`] and [`Preset`],
//!   and a [`Persistence`]); a put says what it did in a [`PutInfo`], and a blob and a target
//!   are described by a [`BlobStat`] and a [`TargetStat`]. Data comes from a [`Fill`] and goes to
//!   a [`Drain`] (each failing with a [`FillError`]), so a caller moves bytes without a copy of
//!   its own; a streaming get names its bytes with a [`BlobRange`]. [`PAGE_SIZE`], [`MAX_NAME_LEN`] and [`MAX_TAG_LEN`] are the limits a caller sizes
//!   by.
//! * **Serving it to kernels and other processes.** [`pool`] makes the store a pool of the
//!   runtime (`pool::register`) and holds its task types; [`wire`] is its wire format (pool and
//!   method ids, return codes, limits), which `tandem/blob.h` mirrors for kernels. Host code
//!   calls that pool through a [`BlobCaller`] over a [`Submitter`] (a runtime in its process,
//!   or a client of one in another), failing with a [`CallError`]. A store open in one process
//!   is [`BlobError::InUse`] to an open in another; a [`StoreIdentity`] (its metadata file)
//!   tells a process which runtime serves the store it was configured with. [`BlobStore`] is
//!   a `tandem_metrics::Source`: what `tandem blob run --metrics` shows of it.
//!
//! Two modules are public as support rather than API, and only with the `demo` feature (on by
//! default): [`demo`] launches the store's own put/get kernels and the wire check, and
//! [`kernels`] is their library; `tandem blob demo`, `tandem demo`, the blob bench and the
//! kernel tests run them. A kernel of one's own includes `tandem/blob.h` and needs neither.
//!
//! # Module layers
//!
//! A module uses only modules of its own layer or the layers below. Bottom up:
//!
//! 1. `types`, `context`, `error`, `wire` and `config`: the values, put contexts, errors, wire
//!    codes and settings, which name only one another; `blob_put` and `blob_range`, the
//!    requests made of them.
//! 2. `compress` (frames and codecs), `extent` (extent maps and versions), `target` (RAM and file areas, free pages), `uring`
//!    (the file data path's rings), `meta` (the redb tables, the version encoding, the group
//!    committer).
//! 3. `placement` (the order of targets for a score, reservations), then `local`, the local
//!    store: its index and tags, `put`, `get` and `recover`.
//! 4. `object`, the object tier, which the store reaches through `ObjectTarget` alone; it asks
//!    `local` only for a tag's name and whether it holds a blob.
//! 5. `open` (checks the configuration, makes or finds the files, recovers), `metrics` (what
//!    the store's calls did, and its series), then `store`
//!    ([`BlobStore`]: checks each call's arguments and routes it to `local` or `object`).
//! 6. `pool` (the store as a runtime pool), then `caller`, `demo` and `kernels`.

#![warn(missing_docs)]

mod blob_put;
mod blob_range;
mod caller;
mod compress;
mod config;
mod context;
#[cfg(feature = "demo")]
pub mod demo;
mod error;
mod extent;
/// The blob store's kernels (`kernels.toml`): `kernels::library()` is what
/// `GpuDevice::load_module` takes; `kernels::names` names them.
#[cfg(feature = "demo")]
pub mod kernels {
    include!(concat!(env!("OUT_DIR"), "/kernels.rs"));
}
mod local;
mod meta;
mod metrics;
mod object;
mod open;
mod placement;
pub mod pool;
mod store;
mod target;
mod types;
mod uring;
pub mod wire;

pub use blob_put::BlobPut;
pub use blob_range::BlobRange;
pub use caller::{BlobCaller, CallError, Submitter};
pub use config::{Limits, ObjectConfig, StoreConfig, TargetConfig, TargetKind};
pub use context::{Codec, Compression, Persistence, Preset, PutContext};
pub use error::{BlobError, FillError, NameKind};
pub use object_store;
pub use store::BlobStore;
pub use types::{
    BlobStat, Drain, Fill, PutInfo, Score, StoreIdentity, TagId, TargetStat, MAX_NAME_LEN,
    MAX_TAG_LEN, PAGE_SIZE,
};
