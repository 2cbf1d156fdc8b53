//! The blob store as a pool of the runtime: one task type per method, and
//! the handlers that run them on the CPU workers. Kernels (`tandem/blob.h`),
//! host code in the runtime's process and other processes' clients all send
//! these tasks; data goes by reference ([`SharedRef`] into the caller's
//! segment), never through the task itself.
//!
//! This is also the worked example of a module of one's own: it registers a
//! [`Pool`] through the runtime's front like any user pool would.

use crate::BlobPut;
use std::sync::Arc;

use tandem_runtime::{DuplicatePool, MethodId, Pool, PoolId, Registry, TaskContext};
use tandem_shm_core::impl_serialize_fields;
use tandem_shm_core::{Deserialize, Reader, SerError, Serialize, Writer};

use crate::wire::{self, code, SharedRef};
use crate::{
    BlobRange, BlobStore, Codec, FillError, Persistence, PutContext, Score, StoreIdentity, TagId,
};

/// `get_or_create_tag(name)`: the tag's id.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GetOrCreateTag {
    /// The tag's name.
    pub name: String,
}
impl_serialize_fields!(GetOrCreateTag { name });

/// `put(tag, name, offset, data, score, context)`: writes the `len` bytes at
/// `data` at `offset` of the blob, all or nothing, compressed and kept as
/// `context` says; the blob's size after it.
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
    /// Compression and persistence level ([`crate::PutContext::to_wire`]).
    pub context: wire::PutContext,
}
impl_serialize_fields!(Put {
    tag,
    name,
    offset,
    len,
    data,
    score,
    context
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

/// `stat(tag, name)`: the blob's size, class, targets, stored bytes, codecs
/// and persistence level ([`BlobInfo`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Stat {
    /// The blob's tag.
    pub tag: u64,
    /// The blob's name.
    pub name: String,
}
impl_serialize_fields!(Stat { tag, name });

/// `stat`'s answer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BlobInfo {
    /// The blob's size in bytes.
    pub size: u64,
    /// 1 when it lives on file or object targets (survives a restart of
    /// the store: long-term, or temporary), 0 on RAM.
    pub durable: u32,
    /// The targets holding its pages, as a bit per target index (the
    /// first 64 targets).
    pub targets: u64,
    /// Bytes of target pages it takes ([`crate::BlobStat::stored`]).
    pub stored: u64,
    /// Its persistence level, a [`wire::persistence`] value.
    pub persistence: u8,
    /// The codecs its compressed frames use, a bit `1 << c` per
    /// [`wire::codec`] value `c`; 0 when it is stored raw.
    pub codecs: u8,
}
impl_serialize_fields!(BlobInfo {
    size,
    durable,
    targets,
    stored,
    persistence,
    codecs
});

impl BlobInfo {
    /// What the store says of a blob, as the wire carries it.
    pub fn from_stat(stat: &crate::BlobStat) -> BlobInfo {
        BlobInfo {
            size: stat.size,
            durable: u32::from(stat.durable),
            targets: stat
                .targets
                .iter()
                .filter(|&&i| i < 64)
                .fold(0, |bits, &i| bits | 1 << i),
            stored: stat.stored,
            persistence: stat.persistence.to_wire(),
            codecs: stat
                .codecs
                .iter()
                .fold(0, |bits, codec| bits | 1 << codec.to_wire()),
        }
    }

    /// Its persistence level; `None` for a value no level has (a store
    /// newer than this caller).
    pub fn persistence(&self) -> Option<Persistence> {
        Persistence::from_wire(self.persistence)
    }

    /// The codecs of [`codecs`](Self::codecs)' bits, in wire order; bits no
    /// codec has are left out.
    pub fn codecs(&self) -> Vec<Codec> {
        (0..8)
            .filter(|&c| self.codecs & 1 << c != 0)
            .filter_map(Codec::from_wire)
            .collect()
    }
}

/// `list(tag, out)`: the names of the tag's blobs (tag 0: the tags' names),
/// written into `out` back to back, each a u32 length and its bytes; the
/// bytes written. [`code::BUFFER_TOO_SMALL`] when they do not fit.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct List {
    /// The tag, or 0 for the tags themselves.
    pub tag: u64,
    /// Bytes of `out`.
    pub len: u64,
    /// Where the names go, in the caller's segment.
    pub out: SharedRef,
}
impl_serialize_fields!(List { tag, len, out });

/// `delete(tag, name)`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Delete {
    /// The blob's tag.
    pub tag: u64,
    /// The blob's name.
    pub name: String,
}
impl_serialize_fields!(Delete { tag, name });

/// `find_tag(name)`: the tag's id, 0 when there is none (none is made).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FindTag {
    /// The tag's name.
    pub name: String,
}
impl_serialize_fields!(FindTag { name });

/// `identify()`: the store's [`StoreIdentity`] (no arguments).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Identify;

impl Serialize for Identify {
    fn serialize(&self, _: &mut Writer<'_>) -> Result<(), SerError> {
        Ok(())
    }
}
impl Deserialize<'_> for Identify {
    fn deserialize(_: &mut Reader<'_>) -> Result<Self, SerError> {
        Ok(Identify)
    }
}

impl_serialize_fields!(StoreIdentity { device, inode });

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
blob_task!(Stat, wire::method::STAT, BlobInfo);
blob_task!(Delete, wire::method::DELETE, u8);
blob_task!(List, wire::method::LIST, u64);
blob_task!(Identify, wire::method::IDENTIFY, StoreIdentity);
blob_task!(FindTag, wire::method::FIND_TAG, u64);

/// The blob pool serving `store`.
pub fn pool(store: Arc<BlobStore>) -> Pool {
    let (put_store, get_store, stat_store, delete_store, list_store, find_store) = (
        Arc::clone(&store),
        Arc::clone(&store),
        Arc::clone(&store),
        Arc::clone(&store),
        Arc::clone(&store),
        Arc::clone(&store),
    );
    let identity = store.identity();
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
                .map(|s| BlobInfo::from_stat(&s))
                .map_err(|e| e.code())
        })
        .task::<Delete, _>("delete", move |t| {
            delete_store
                .delete(TagId(t.tag), &t.name)
                .map(|()| 0)
                .map_err(|e| e.code())
        })
        .task_in_context::<List, _>("list", move |context, t| list(&list_store, context, &t))
        .task::<Identify, _>("identify", move |_| Ok(identity))
        .task::<FindTag, _>("find_tag", move |t| {
            find_store
                .tag(&t.name)
                .map(|tag| tag.map_or(0, |tag| tag.0))
                .map_err(|e| e.code())
        })
}

fn list(store: &BlobStore, context: &TaskContext<'_>, t: &List) -> Result<u64, i32> {
    let names: Vec<String> = if t.tag == 0 {
        store
            .list_tags()
            .map(|tags| tags.into_iter().map(|(_, name)| name).collect())
    } else {
        store
            .list_blobs(TagId(t.tag))
            .map(|blobs| blobs.into_iter().map(|b| b.name).collect())
    }
    .map_err(|e| e.code())?;
    let needed: u64 = names.iter().map(|n| 4 + n.len() as u64).sum();
    if needed > t.len {
        return Err(code::BUFFER_TOO_SMALL);
    }
    let out = context
        .caller_bytes(t.out.ptr(), needed)
        .map_err(|_| code::BAD_POINTER)?;
    let mut at = 0;
    for name in &names {
        // Names are at most MAX_NAME_BYTES long: the length fits a u32.
        out.copy_from(at, &(name.len() as u32).to_le_bytes());
        out.copy_from(at + 4, name.as_bytes());
        at += 4 + name.len();
    }
    Ok(needed)
}

/// Registers the blob pool serving `store` in `registry`.
pub fn register(registry: &mut Registry, store: Arc<BlobStore>) -> Result<(), DuplicatePool> {
    registry.register(pool(store))
}

fn put(store: &BlobStore, context: &TaskContext<'_>, t: &Put) -> Result<u64, i32> {
    let put_context =
        PutContext::from_wire(t.context).map_err(|why| crate::BlobError::BadContext(why).code())?;
    // An empty range is the store's error to name (after the name and tag).
    let data = context
        .caller_bytes(t.data.ptr(), t.len)
        .map_err(|_| code::BAD_POINTER)?;
    let mut fill = |at: u64, dst: &mut [u8]| copied(data.copy_to(to_usize(at)?, dst));
    store
        .put_with(
            &BlobPut::new(TagId(t.tag), &t.name)
                .at(t.offset)
                .score(Score(t.score))
                .context(put_context),
            t.len,
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
        .get_with(
            BlobRange::new(TagId(t.tag), &t.name, t.offset, t.len),
            &mut drain,
        )
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
        code::CONTROL_IN_NAME => "a new name holds a control character",
        code::CORRUPT_FRAME => "a compressed frame of the blob is corrupt",
        code::BAD_CONTEXT => "bad put context",
        code::NO_TARGET_FOR => "no configured target keeps the persistence level asked for",
        code::CLASS_TOO_LOW => "the blob's persistence level is below the one asked for",
        code::BAD_POINTER => "data pointer outside the caller's segment",
        code::BUFFER_TOO_SMALL => "the list does not fit the caller's buffer",
        _ => "not a blob pool code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BlobStat;

    #[test]
    fn stat_answers_cross_the_wire_whole() {
        let stat = BlobStat {
            tag: TagId(3),
            name: "b".into(),
            size: 1 << 20,
            stored: 8192,
            codecs: vec![Codec::Lz4, Codec::Zstd],
            durable: true,
            persistence: Persistence::LongTerm,
            targets: vec![0, 2, 70],
        };
        let info = BlobInfo::from_stat(&stat);
        assert_eq!((info.size, info.stored, info.durable), (1 << 20, 8192, 1));
        assert_eq!(info.targets, 0b101, "targets past 64 are left out");
        assert_eq!(info.persistence(), Some(Persistence::LongTerm));
        assert_eq!(info.codecs(), [Codec::Lz4, Codec::Zstd]);

        let mut bytes = [0u8; 64];
        let mut w = Writer::new(&mut bytes);
        info.serialize(&mut w).expect("fits");
        let len = w.position();
        let back = BlobInfo::deserialize(&mut Reader::new(&bytes[..len])).expect("reads back");
        assert_eq!(back, info);

        let raw = BlobInfo {
            codecs: 0,
            persistence: 9,
            ..info
        };
        assert!(raw.codecs().is_empty());
        assert_eq!(raw.persistence(), None, "a level this build does not know");
    }
}
