//! A put's request: which blob, where in it, and how it is placed and kept. Every put of the
//! store ([`crate::BlobStore::put`], [`crate::BlobStore::put_with`]) and of a client
//! ([`crate::BlobCaller::put`], [`crate::BlobCaller::put_chunked`],
//! [`crate::BlobCaller::put_from`]) takes one, so an option is added here once rather than as
//! another spelling of each put.

use crate::context::PutContext;
use crate::types::{Score, TagId};

/// A put of blob `name` of `tag`: at `offset` (default 0), placed by `score` (default
/// [`Score::AUTO`]), in `context` (default: no compression, the class placement picks).
///
/// ```
/// # use tandem_blob::{BlobPut, PutContext, Score, TagId};
/// let put = BlobPut::new(TagId(1), "weights")
///     .at(4096)
///     .score(Score(1.0))
///     .context(PutContext::default());
/// assert_eq!((put.offset, put.name), (4096, "weights"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlobPut<'a> {
    /// The blob's tag.
    pub tag: TagId,
    /// The blob's name in it.
    pub name: &'a str,
    /// Where in the blob the bytes go.
    pub offset: u64,
    /// Where the blob is placed. See the crate docs, "Placement".
    pub score: Score,
    /// Compression and persistence. See the crate docs, "Put contexts".
    pub context: PutContext,
}

impl<'a> BlobPut<'a> {
    /// A put at the blob's start, placed automatically, in the default context.
    pub fn new(tag: TagId, name: &'a str) -> Self {
        Self {
            tag,
            name,
            offset: 0,
            score: Score::AUTO,
            context: PutContext::default(),
        }
    }

    /// At `offset` of the blob.
    #[must_use]
    pub fn at(self, offset: u64) -> Self {
        Self { offset, ..self }
    }

    /// Placed by `score`.
    #[must_use]
    pub fn score(self, score: Score) -> Self {
        Self { score, ..self }
    }

    /// In `context`.
    #[must_use]
    pub fn context(self, context: PutContext) -> Self {
        Self { context, ..self }
    }
}
