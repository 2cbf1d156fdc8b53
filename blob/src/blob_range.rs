//! A get's request: which bytes of which blob. The store's streaming get
//! ([`crate::BlobStore::get_with`]) takes one, and so do the targets under it, so the four
//! values travel together rather than as four parameters of every layer.

use crate::types::TagId;

/// Bytes `offset..offset + len` of blob `name` of `tag`.
///
/// ```
/// # use tandem_blob::{BlobRange, TagId};
/// let range = BlobRange::new(TagId(1), "weights", 4096, 512);
/// assert_eq!(range.end(), Some(4608));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobRange<'a> {
    /// The blob's tag.
    pub tag: TagId,
    /// The blob's name in it.
    pub name: &'a str,
    /// The first byte.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
}

impl<'a> BlobRange<'a> {
    /// Bytes `offset..offset + len` of blob `name` of `tag`.
    pub fn new(tag: TagId, name: &'a str, offset: u64, len: u64) -> Self {
        Self {
            tag,
            name,
            offset,
            len,
        }
    }

    /// One past the last byte; `None` when that overflows a `u64`.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.len)
    }
}
