//! What the store commands ask of a store, however they reach it: opened
//! in this process (`direct.rs`) or through the runtime serving it
//! (`served.rs`).

use std::io::Write;

use tandem_blob::{BlobPut, BlobRange, Codec, Persistence, TagId};

use super::error::{AccessError, PutError};
use super::input::Input;

/// A blob as the commands print it.
pub(super) struct Blob {
    pub(super) name: String,
    pub(super) size: u64,
    pub(super) durable: bool,
    /// Indices of the configured targets holding its pages.
    pub(super) targets: Vec<usize>,
    /// How it is kept; `None` only where a runtime's answer names a
    /// persistence level this command does not know.
    pub(super) storage: Option<Storage>,
}

/// A blob's persistence level and what it takes on its targets.
pub(super) struct Storage {
    pub(super) persistence: Persistence,
    /// The bytes it takes and its codecs, in words ("4096 bytes, zstd").
    pub(super) stored: String,
}

impl Storage {
    /// A blob at `persistence` taking `stored` bytes of `codecs` frames
    /// (none: raw), however the store was reached.
    pub(super) fn new(persistence: Persistence, stored: u64, codecs: &[Codec]) -> Storage {
        let codecs = if codecs.is_empty() {
            "raw".to_owned()
        } else {
            let words: Vec<String> = codecs.iter().map(ToString::to_string).collect();
            words.join("+")
        };
        Storage {
            persistence,
            stored: format!("{stored} bytes, {codecs}"),
        }
    }
}

/// A store the commands reach.
pub(super) trait StoreAccess {
    /// Tag `name`'s id, `None` when there is none (none is made).
    fn tag(&self, name: &str) -> Result<Option<TagId>, AccessError>;
    /// Tag `name`'s id, the tag made if new.
    fn get_or_create_tag(&self, name: &str) -> Result<TagId, AccessError>;
    /// The tags, ids and names.
    fn list_tags(&self) -> Result<Vec<(TagId, String)>, AccessError>;
    /// The blobs of `tag`.
    fn list_blobs(&self, tag: TagId) -> Result<Vec<Blob>, AccessError>;
    /// Blob `name` of `tag`.
    fn stat(&self, tag: TagId, name: &str) -> Result<Blob, AccessError>;
    /// Deletes blob `name` of `tag`.
    fn delete(&self, tag: TagId, name: &str) -> Result<(), AccessError>;
    /// Writes `input` as `put` says (its offset where `input` starts); the
    /// bytes written.
    fn put(&self, put: &BlobPut<'_>, input: &mut Input) -> Result<u64, PutError>;
    /// Writes the bytes of `range` to `out`, in order.
    fn get(&self, range: BlobRange<'_>, out: &mut dyn Write) -> Result<(), AccessError>;
    /// Whether a volatile (RAM) blob outlives this command: a runtime keeps
    /// it, a store opened by the command drops it at exit.
    fn keeps_volatile_blobs(&self) -> bool;
}
