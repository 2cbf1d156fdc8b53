//! The blob store as a pool of the runtime: one task type per method, and
//! the handlers that run them on the CPU workers. Kernels (`tandem/blob.h`),
//! host code in the runtime's process and other processes' clients all send
//! these tasks; data goes by reference ([`SharedRef`] into the caller's
//! segment), never through the task itself.
//!
//! This is also the worked example of a module of one's own: it registers a
//! [`Pool`] through the runtime's front like any user pool would.

use std::sync::Arc;

use tandem_runtime::{DuplicatePool, MethodId, Pool, PoolId, Registry, TaskContext};
use tandem_shm_core::impl_serialize_fields;

use crate::wire::{self, code, SharedRef};
use crate::{BlobStore, FillError, Score, TagId};

/// `get_or_create_tag(name)`: the tag's id.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GetOrCreateTag {
    /// The tag's name.
    pub name: String,
}
impl_serialize_fields!(GetOrCreateTag { name });

/// `put(tag, name, offset, data, score)`: writes the `len` bytes at `data`
/// at `offset` of the blob, all or nothing; the blob's size after it.
#[derive(Clone, PartialEq, Debug)]
pub struct Put {
    /// The blob's tag.
    pub tag: u64,
    /// The blob's name.
    pub name: String,
    /// Where in the blob the bytes go.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
    /// The bytes, in the caller's segment.
    pub data: SharedRef,
    /// Placement: -1 automatic, or a tier in 0..=1.
    pub score: f32,
}
impl_serialize_fields!(Put {
    tag,
    name,
    offset,
    len,
    data,
    score
});

/// `get(tag, name, offset, out)`: reads `len` bytes at `offset` of the blob
/// into `out`; the bytes read (always `len`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Get {
    /// The blob's tag.
    pub tag: u64,
    /// The blob's name.
    pub name: String,
    /// First byte to read.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
    /// Where they go, in the caller's segment.
    pub out: SharedRef,
}
impl_serialize_fields!(Get {
    tag,
    name,
    offset,
    len,
    out
});

/// `stat(tag, name)`: the blob's size.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Stat {
    /// The blob's tag.
    pub tag: u64,
    /// The blob's name.
    pub name: String,
}
impl_serialize_fields!(Stat { tag, name });

/// `delete(tag, name)`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Delete {
    /// The blob's tag.
    pub tag: u64,
    /// The blob's name.
    pub name: String,
}
impl_serialize_fields!(Delete { tag, name });

macro_rules! blob_task {
    ($task:ty, $method:expr, $output:ty) => {
        impl tandem_runtime::Task for $task {
            const POOL: PoolId = wire::POOL;
            const METHOD: MethodId = $method;
            type Output = $output;
        }
    };
}
blob_task!(GetOrCreateTag, wire::method::TAG, u64);
blob_task!(Put, wire::method::PUT, u64);
blob_task!(Get, wire::method::GET, u64);
blob_task!(Stat, wire::method::STAT, u64);
blob_task!(Delete, wire::method::DELETE, u8);

/// The blob pool serving `store`.
pub fn pool(store: Arc<BlobStore>) -> Pool {
    let (put_store, get_store, stat_store, delete_store) = (
        Arc::clone(&store),
        Arc::clone(&store),
        Arc::clone(&store),
        Arc::clone(&store),
    );
    Pool::new(wire::POOL, "blob")
        .task::<GetOrCreateTag, _>("get_or_create_tag", move |t| {
            store
                .get_or_create_tag(&t.name)
                .map(|tag| tag.0)
                .map_err(|e| e.code())
        })
        .task_in_context::<Put, _>("put", move |context, t| put(&put_store, context, &t))
        .task_in_context::<Get, _>("get", move |context, t| get(&get_store, context, &t))
        .task::<Stat, _>("stat", move |t| {
            stat_store
                .stat(TagId(t.tag), &t.name)
                .map(|s| s.size)
                .map_err(|e| e.code())
        })
        .task::<Delete, _>("delete", move |t| {
            delete_store
                .delete(TagId(t.tag), &t.name)
                .map(|()| 0)
                .map_err(|e| e.code())
        })
}

/// Registers the blob pool serving `store` in `registry`.
pub fn register(registry: &mut Registry, store: Arc<BlobStore>) -> Result<(), DuplicatePool> {
    registry.register(pool(store))
}

fn put(store: &BlobStore, context: &TaskContext<'_>, t: &Put) -> Result<u64, i32> {
    // An empty range is the store's error to name (after the name and tag).
    let data = context
        .caller_bytes(t.data.ptr(), t.len)
        .map_err(|_| code::BAD_POINTER)?;
    let mut fill = |at: u64, dst: &mut [u8]| copied(data.copy_to(to_usize(at)?, dst));
    store
        .put_with(
            TagId(t.tag),
            &t.name,
            t.offset,
            t.len,
            Score(t.score),
            &mut fill,
        )
        .map(|info| info.size)
        .map_err(|e| e.code())
}

fn get(store: &BlobStore, context: &TaskContext<'_>, t: &Get) -> Result<u64, i32> {
    let out = context
        .caller_bytes(t.out.ptr(), t.len)
        .map_err(|_| code::BAD_POINTER)?;
    let mut drain = |at: u64, src: &[u8]| copied(out.copy_from(to_usize(at)?, src));
    store
        .get_with(TagId(t.tag), &t.name, t.offset, t.len, &mut drain)
        .map(|()| t.len)
        .map_err(|e| e.code())
}

fn to_usize(at: u64) -> Result<usize, FillError> {
    usize::try_from(at).map_err(|_| FillError(format!("offset {at} does not fit usize")))
}

fn copied(inside: bool) -> Result<(), FillError> {
    // The store asks only for ranges inside the length it was given, which
    // caller_bytes checked: this only fires on a store bug.
    inside
        .then_some(())
        .ok_or_else(|| FillError("range outside the caller's buffer".into()))
}

/// The [`crate::BlobError`] code `code` names, for callers that got a code back.
pub fn describe(code: i32) -> &'static str {
    match code {
        code::EMPTY_NAME => "empty name",
        code::NAME_TOO_LONG => "name too long",
        code::UNKNOWN_TAG => "unknown tag",
        code::NOT_FOUND => "no such blob",
        code::OUT_OF_RANGE => "range past the blob's end",
        code::EMPTY_RANGE => "empty range",
        code::TOO_LARGE => "range too large",
        code::NO_SPACE => "no space on any target the put may use",
        code::BAD_SCORE => "bad placement score",
        code::FILL => "copying the caller's bytes failed",
        code::TARGET_CREATE => "a target file could not be created",
        code::TARGET_SIZE => "a target file has the wrong size",
        code::TARGET_IO => "target I/O failed",
        code::TARGET_MISMATCH => "metadata and configured targets disagree",
        code::CONFIG => "bad store configuration",
        code::METADATA => "metadata database failed",
        code::CORRUPT => "metadata corrupt",
        code::BAD_POINTER => "data pointer outside the caller's segment",
        _ => "not a blob pool code",
    }
}
