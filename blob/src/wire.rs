//! The blob pool's wire format: its pool and method ids, the codes its
//! handlers answer with, and the limits a caller sizes its futures by.
//! Mirrored for kernels by `tandem/blob.h`; the `tandem_blob_wire` kernel
//! reports the header's values and `tests/kernels.rs` compares them with
//! these on every backend.

use tandem_runtime::{MethodId, PoolId};
use tandem_shm_core::{impl_serialize_fields, AllocatorId, ShmPtr};

/// The blob pool's id (built-in pools take the ids below 16, user pools
/// pick theirs above).
pub const POOL: PoolId = 16;

/// The blob pool's methods.
pub mod method {
    use super::MethodId;
    /// get_or_create_tag(name) -> tag id.
    pub const TAG: MethodId = 1;
    /// put(tag, name, offset, data, score, context) -> the blob's size after it.
    pub const PUT: MethodId = 2;
    /// get(tag, name, offset, out) -> bytes read (the whole range).
    pub const GET: MethodId = 3;
    /// stat(tag, name) -> size, class, targets, stored bytes, persistence
    /// level and codecs (`crate::pool::BlobInfo`).
    pub const STAT: MethodId = 4;
    /// delete(tag, name).
    pub const DELETE: MethodId = 5;
    /// list(tag, out): the names of the tag's blobs (tag 0: of the tags),
    /// written into `out` one after another, each a u32 length and its
    /// bytes -> bytes written.
    pub const LIST: MethodId = 6;
    /// identify() -> the store's identity (`crate::StoreIdentity`: its
    /// metadata file's device and inode), for a caller to check which store
    /// a runtime serves.
    pub const IDENTIFY: MethodId = 7;
    /// find_tag(name) -> tag id, 0 when there is no such tag (none is made).
    pub const FIND_TAG: MethodId = 8;
}

/// Return codes of the blob pool's handlers: [`crate::BlobError::code`] for the
/// store's errors, and one of the pool's own.
pub mod code {
    /// [`crate::BlobError::EmptyName`].
    pub const EMPTY_NAME: i32 = 1;
    /// [`crate::BlobError::NameTooLong`].
    pub const NAME_TOO_LONG: i32 = 2;
    /// [`crate::BlobError::UnknownTag`].
    pub const UNKNOWN_TAG: i32 = 3;
    /// [`crate::BlobError::NotFound`].
    pub const NOT_FOUND: i32 = 4;
    /// [`crate::BlobError::OutOfRange`].
    pub const OUT_OF_RANGE: i32 = 5;
    /// [`crate::BlobError::EmptyRange`].
    pub const EMPTY_RANGE: i32 = 6;
    /// [`crate::BlobError::TooLarge`].
    pub const TOO_LARGE: i32 = 7;
    /// [`crate::BlobError::NoSpace`].
    pub const NO_SPACE: i32 = 8;
    /// [`crate::BlobError::BadScore`].
    pub const BAD_SCORE: i32 = 9;
    /// [`crate::BlobError::Fill`]: copying from or to the caller failed.
    pub const FILL: i32 = 10;
    /// [`crate::BlobError::TargetCreate`].
    pub const TARGET_CREATE: i32 = 11;
    /// [`crate::BlobError::TargetSize`].
    pub const TARGET_SIZE: i32 = 12;
    /// [`crate::BlobError::TargetIo`].
    pub const TARGET_IO: i32 = 13;
    /// [`crate::BlobError::TargetMismatch`].
    pub const TARGET_MISMATCH: i32 = 14;
    /// [`crate::BlobError::Config`].
    pub const CONFIG: i32 = 15;
    /// [`crate::BlobError::Metadata`].
    pub const METADATA: i32 = 16;
    /// [`crate::BlobError::Corrupt`].
    pub const CORRUPT: i32 = 17;
    /// [`crate::BlobError::ControlInName`].
    pub const CONTROL_IN_NAME: i32 = 18;
    /// [`crate::BlobError::CorruptFrame`].
    pub const CORRUPT_FRAME: i32 = 19;
    /// [`crate::BlobError::BadContext`].
    pub const BAD_CONTEXT: i32 = 20;
    /// [`crate::BlobError::NoTargetFor`].
    pub const NO_TARGET_FOR: i32 = 21;
    /// [`crate::BlobError::ClassTooLow`].
    pub const CLASS_TOO_LOW: i32 = 22;
    /// The data pointer does not name the length's bytes of the caller's
    /// segment (`tandem_runtime::CallerMemoryError`).
    pub const BAD_POINTER: i32 = 32;
    /// A list did not fit the caller's buffer.
    pub const BUFFER_TOO_SMALL: i32 = 33;
}

/// Longest tag or blob name, in bytes (both limits of the store).
pub const MAX_NAME_BYTES: usize = crate::MAX_NAME_LEN;
const _: () = assert!(crate::MAX_NAME_LEN == crate::MAX_TAG_LEN);

/// Copy space a future needs for any blob task: the task header (16
/// bytes) and the largest arguments (a put: 8 + 4 + [`MAX_NAME_BYTES`] + 8 + 8 +
/// 16 + 4 + 4 = 307 bytes), rounded up.
pub const COPY_SPACE: u32 = 336;
const _: () = assert!(
    16 + 8 + 4 + MAX_NAME_BYTES + 8 + 8 + 16 + 4 + size_of::<PutContext>() <= COPY_SPACE as usize
);

/// A put's context as the wire carries it (`tandem/blob.h`'s `PutContext`): a
/// byte each, zero for the default (no compression, volatile at least). Its
/// fields go one after another, so the layout is the header's too.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PutContext {
    /// One of [`compress`].
    pub compress: u8,
    /// One of [`codec`] (ignored with [`compress::SKIP`]).
    pub codec: u8,
    /// One of [`preset`].
    pub preset: u8,
    /// One of [`persistence`].
    pub persistence: u8,
}
impl_serialize_fields!(PutContext {
    compress,
    codec,
    preset,
    persistence
});
const _: () = assert!(size_of::<PutContext>() == 4);
const _: () = assert!(std::mem::offset_of!(PutContext, compress) == 0);
const _: () = assert!(std::mem::offset_of!(PutContext, codec) == 1);
const _: () = assert!(std::mem::offset_of!(PutContext, preset) == 2);
const _: () = assert!(std::mem::offset_of!(PutContext, persistence) == 3);

/// [`PutContext::compress`]: whether a put compresses.
pub mod compress {
    /// Stores the bytes as they are.
    pub const SKIP: u8 = 0;
    /// Compresses every frame.
    pub const STATIC: u8 = 1;
    /// A sample of the bytes decides.
    pub const DYNAMIC: u8 = 2;
}

/// [`PutContext::codec`]: which library.
pub mod codec {
    /// LZ4.
    pub const LZ4: u8 = 1;
    /// Zstandard.
    pub const ZSTD: u8 = 2;
}

/// [`PutContext::preset`]: how hard it tries.
pub mod preset {
    /// The library's default trade.
    pub const BALANCED: u8 = 0;
    /// Fastest.
    pub const FAST: u8 = 1;
    /// Smallest.
    pub const BEST: u8 = 2;
}

/// [`PutContext::persistence`]: the blob's minimum persistence level.
pub mod persistence {
    /// Survives nothing.
    pub const VOLATILE: u8 = 0;
    /// Survives a process crash.
    pub const TEMPORARY: u8 = 1;
    /// Survives a power loss.
    pub const LONG_TERM: u8 = 2;
}

/// A caller's bytes by reference: a pointer into the segment its task goes
/// through (its id and offset), as the wire carries it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SharedRef {
    /// The segment's allocator id, major part.
    pub major: u32,
    /// The segment's allocator id, minor part.
    pub minor: u32,
    /// Offset in the segment.
    pub off: u64,
}
impl_serialize_fields!(SharedRef { major, minor, off });

impl SharedRef {
    /// The segment pointer it names.
    pub fn ptr(self) -> ShmPtr<u8> {
        ShmPtr::new(AllocatorId::new(self.major, self.minor), self.off)
    }
}

impl From<ShmPtr<u8>> for SharedRef {
    fn from(ptr: ShmPtr<u8>) -> Self {
        Self {
            major: ptr.alloc_id.major,
            minor: ptr.alloc_id.minor,
            off: ptr.off,
        }
    }
}
