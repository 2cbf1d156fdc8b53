//! The store's typed errors.

use std::fmt;
use std::path::PathBuf;

use crate::context::Persistence;
use crate::TagId;

/// Why a `fill` or `drain` callback failed; it aborts the operation that called it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FillError(pub String);

impl fmt::Display for FillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FillError {}

/// Which kind of name an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A tag's name.
    Tag,
    /// A blob's name.
    Blob,
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Tag => "tag name",
            NameKind::Blob => "blob name",
        })
    }
}

/// Every way a store operation can fail. The store stays usable after any of them.
#[derive(Debug)]
pub enum BlobError {
    /// A tag or blob name is empty.
    EmptyName(NameKind),
    /// A tag or blob name is longer than its limit ([`crate::MAX_NAME_LEN`],
    /// [`crate::MAX_TAG_LEN`]).
    NameTooLong {
        /// Which name.
        kind: NameKind,
        /// Length of the name given, in bytes.
        len: usize,
        /// The limit, in bytes.
        max: usize,
    },
    /// A new tag or blob name holds a control character (a newline, a tab,
    /// ...): listings print one name a line.
    ControlInName {
        /// Which name.
        kind: NameKind,
        /// The name given.
        name: String,
    },
    /// No tag has this id.
    UnknownTag(TagId),
    /// The tag has no blob of this name.
    NotFound {
        /// The tag searched.
        tag: TagId,
        /// The blob name searched.
        name: String,
    },
    /// A get asked for bytes past the end of the blob.
    OutOfRange {
        /// The blob's size in bytes.
        size: u64,
        /// First byte asked for.
        offset: u64,
        /// Number of bytes asked for.
        len: u64,
    },
    /// A put or get of zero bytes.
    EmptyRange,
    /// `offset + len` overflows or exceeds the largest blob size the store allows.
    TooLarge {
        /// First byte of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// The largest blob size allowed ([`crate::Limits::max_blob_size`]).
        max: u64,
    },
    /// No target that the put may use has room for it.
    NoSpace {
        /// Bytes the put needed to allocate (whole pages).
        requested: u64,
        /// Free bytes on the targets the put could have used.
        available: u64,
    },
    /// A score that is neither [`crate::Score::AUTO`] nor within `0.0..=1.0`.
    BadScore(f32),
    /// The put's `fill` or the get's `drain` callback failed.
    Fill(FillError),
    /// A target file could not be created, opened or preallocated.
    TargetCreate {
        /// The target's path.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A target file exists with a size other than its configured capacity.
    TargetSize {
        /// The target's path.
        path: PathBuf,
        /// Configured capacity in bytes.
        expected: u64,
        /// The file's size in bytes.
        actual: u64,
    },
    /// Reading, writing or syncing a target file failed.
    TargetIo {
        /// The target's path.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The metadata references a file target that the configuration no longer lists,
    /// or lists with a different capacity.
    TargetMismatch {
        /// The target's path.
        path: PathBuf,
        /// What differs.
        reason: String,
    },
    /// The configuration is invalid.
    Config(String),
    /// The metadata database failed (open, transaction, commit).
    Metadata(String),
    /// Another open store holds the metadata file (its lock): a runtime serving the store, or
    /// another process with it open. Its blobs are reached through that runtime
    /// ([`crate::BlobCaller`]), or once it closes.
    InUse {
        /// The metadata file.
        metadata: PathBuf,
    },
    /// The metadata database holds something the store cannot have written.
    Corrupt(String),
    /// A compressed frame of a blob did not check or decompress: its stored bytes are damaged.
    /// The get (or the put that needed the frame's old bytes) returned no bytes of it.
    CorruptFrame {
        /// The blob's tag.
        tag: TagId,
        /// The blob's name.
        name: String,
        /// Where the frame starts in the blob.
        offset: u64,
    },
    /// A put's context, as the wire carried it, holds a value no context has.
    BadContext(String),
    /// No configured target can keep a blob at the persistence level a put asked for (a
    /// temporary or long-term put with RAM targets only).
    NoTargetFor(Persistence),
    /// A put asked for a persistence level above the blob's own: the blob is volatile (in RAM),
    /// and a blob keeps its class for its life (delete it first).
    ClassTooLow {
        /// The blob's tag.
        tag: TagId,
        /// The blob's name.
        name: String,
        /// The blob's level.
        class: Persistence,
        /// The level the put asked for.
        wanted: Persistence,
    },
    /// The object target's store failed a request, after its retries (unreachable, too slow,
    /// credentials refused, ...).
    ObjectStore {
        /// The target, as `s3://bucket/prefix`.
        target: String,
        /// What the store was asked to do.
        op: String,
        /// What `object_store` said.
        source: object_store::Error,
    },
    /// Other writers kept replacing a blob on the object target while a put or get was using
    /// it (see the crate docs, "The object tier").
    ObjectConflict {
        /// The target, as `s3://bucket/prefix`.
        target: String,
        /// The blob, as `tag/name`.
        name: String,
        /// How many times the operation started over.
        attempts: u32,
    },
}

impl BlobError {
    /// The code the blob pool's handlers answer this error with (a
    /// kernel gets codes, not typed errors): one per variant, stable, named
    /// in [`crate::wire::code`] and `tandem/blob.h`. 0 is left for success.
    pub fn code(&self) -> i32 {
        use crate::wire::code;
        match self {
            BlobError::EmptyName(_) => code::EMPTY_NAME,
            BlobError::NameTooLong { .. } => code::NAME_TOO_LONG,
            BlobError::ControlInName { .. } => code::CONTROL_IN_NAME,
            BlobError::UnknownTag(_) => code::UNKNOWN_TAG,
            BlobError::NotFound { .. } => code::NOT_FOUND,
            BlobError::OutOfRange { .. } => code::OUT_OF_RANGE,
            BlobError::EmptyRange => code::EMPTY_RANGE,
            BlobError::TooLarge { .. } => code::TOO_LARGE,
            BlobError::NoSpace { .. } => code::NO_SPACE,
            BlobError::BadScore(_) => code::BAD_SCORE,
            BlobError::Fill(_) => code::FILL,
            BlobError::TargetCreate { .. } => code::TARGET_CREATE,
            BlobError::TargetSize { .. } => code::TARGET_SIZE,
            BlobError::TargetIo { .. } => code::TARGET_IO,
            BlobError::TargetMismatch { .. } => code::TARGET_MISMATCH,
            BlobError::Config(_) => code::CONFIG,
            BlobError::Metadata(_) | BlobError::InUse { .. } => code::METADATA,
            BlobError::Corrupt(_) => code::CORRUPT,
            BlobError::CorruptFrame { .. } => code::CORRUPT_FRAME,
            BlobError::BadContext(_) => code::BAD_CONTEXT,
            BlobError::NoTargetFor(_) => code::NO_TARGET_FOR,
            BlobError::ClassTooLow { .. } => code::CLASS_TOO_LOW,
            // To a kernel, the object target is one more target whose I/O failed.
            BlobError::ObjectStore { .. } | BlobError::ObjectConflict { .. } => code::TARGET_IO,
        }
    }
}

impl fmt::Display for BlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlobError::EmptyName(kind) => write!(f, "empty {kind}"),
            BlobError::NameTooLong { kind, len, max } => {
                write!(f, "{kind} of {len} bytes is longer than the limit of {max}")
            }
            BlobError::ControlInName { kind, name } => {
                write!(f, "{kind} {name:?} holds a control character")
            }
            BlobError::UnknownTag(t) => write!(f, "unknown tag {}", t.0),
            BlobError::NotFound { tag, name } => {
                write!(f, "blob {name:?} not found in tag {}", tag.0)
            }
            BlobError::OutOfRange { size, offset, len } => write!(
                f,
                "range {offset}+{len} is past the end of the blob (size {size})"
            ),
            BlobError::EmptyRange => write!(f, "zero-length range"),
            BlobError::TooLarge { offset, len, max } => {
                write!(
                    f,
                    "range {offset}+{len} exceeds the largest blob size {max}"
                )
            }
            BlobError::NoSpace {
                requested,
                available,
            } => write!(
                f,
                "no space: {requested} bytes requested, {available} available"
            ),
            BlobError::BadScore(s) => write!(f, "bad score {s}: use -1.0 (automatic) or 0.0..=1.0"),
            BlobError::Fill(e) => write!(f, "data callback failed: {e}"),
            BlobError::TargetCreate { path, source } => {
                write!(f, "cannot create target {}: {source}", path.display())
            }
            BlobError::TargetSize {
                path,
                expected,
                actual,
            } => write!(
                f,
                "target {} is {actual} bytes, configured capacity is {expected}",
                path.display()
            ),
            BlobError::TargetIo { path, source } => {
                write!(f, "I/O on target {}: {source}", path.display())
            }
            BlobError::TargetMismatch { path, reason } => {
                write!(f, "target {}: {reason}", path.display())
            }
            BlobError::Config(m) => write!(f, "bad configuration: {m}"),
            BlobError::Metadata(m) => write!(f, "metadata database: {m}"),
            BlobError::InUse { metadata } => write!(
                f,
                "metadata file {} is in use: another process has this store open",
                metadata.display()
            ),
            BlobError::Corrupt(m) => write!(f, "corrupt metadata: {m}"),
            BlobError::CorruptFrame { tag, name, offset } => write!(
                f,
                "blob {name:?} of tag {}: the compressed frame at offset {offset} is corrupt",
                tag.0
            ),
            BlobError::BadContext(m) => write!(f, "bad put context: {m}"),
            BlobError::NoTargetFor(level) => {
                write!(f, "no configured target keeps a {level} blob")
            }
            BlobError::ClassTooLow {
                tag,
                name,
                class,
                wanted,
            } => write!(
                f,
                "blob {name:?} of tag {} is {class}; a put to it cannot ask for {wanted}",
                tag.0
            ),
            BlobError::ObjectStore { target, op, source } => {
                write!(f, "object target {target}: {op}: {source}")
            }
            BlobError::ObjectConflict {
                target,
                name,
                attempts,
            } => write!(
                f,
                "object target {target}: blob {name} kept changing under this operation \
                 (other writers; {attempts} attempts)"
            ),
        }
    }
}

impl std::error::Error for BlobError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BlobError::TargetCreate { source, .. } | BlobError::TargetIo { source, .. } => {
                Some(source)
            }
            BlobError::Fill(e) => Some(e),
            BlobError::ObjectStore { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<FillError> for BlobError {
    fn from(e: FillError) -> Self {
        BlobError::Fill(e)
    }
}

/// Converts any redb error into [`BlobError::Metadata`]; redb's types stay out of the API.
pub(crate) fn meta_err(e: impl fmt::Display) -> BlobError {
    BlobError::Metadata(e.to_string())
}
