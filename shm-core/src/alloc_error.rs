//! The error type shared by the bump arena and the size-class allocator.

use core::fmt;

use crate::layout::AllocatorId;

/// Why an allocator could not be placed, attached to, or could not serve or
/// take back a block. Every value that can come from a peer (a header, a
/// pointer handed over from another process) is checked and reported here
/// instead of being trusted.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AllocError {
    /// The region cannot hold the allocator's header and a usable heap, or an
    /// attached header claims more bytes than the region has.
    RegionTooSmall {
        /// Bytes the structure needs.
        needed: u64,
        /// Bytes there are.
        available: u64,
    },
    /// The region's base address is null or not aligned to
    /// [`REGION_ALIGN`](crate::REGION_ALIGN) bytes.
    BadRegionBase {
        /// The base address given.
        addr: u64,
    },
    /// `attach` found no initialised header of this allocator's kind.
    BadMagic {
        /// The word found where the magic belongs.
        found: u64,
    },
    /// An attached header's geometry is inconsistent (corrupted or written
    /// by something that is not this allocator).
    CorruptHeader,
    /// A free list holds an offset that is not a block of its class:
    /// the shared memory was overwritten.
    CorruptFreeList {
        /// The size class whose list is broken.
        class: usize,
        /// The offset found on it.
        off: u64,
    },
    /// No memory left for this request; `available` is the number of bytes
    /// not yet handed out by the bump cursor.
    Exhausted {
        /// Bytes asked for.
        requested: u64,
        /// Bytes the bump cursor has left.
        available: u64,
    },
    /// The alignment is zero, not a power of two, or above what this
    /// allocator (or the mapping's base address) can guarantee.
    BadAlignment(u64),
    /// Zero-byte requests are refused: they would have no address of their own.
    ZeroSize,
    /// The request can never be served, whatever is freed.
    TooLarge {
        /// Bytes asked for.
        requested: u64,
        /// The most this allocator can ever serve at once.
        max: u64,
    },
    /// `AllocatorId::NULL` cannot name an allocator: pointers into it would be null.
    NullAllocatorId,
    /// A free of an offset outside the heap, or not the start of a block's
    /// user data.
    NotOwned {
        /// The offset freed.
        off: u64,
    },
    /// A free of a block that is already free.
    DoubleFree {
        /// The offset freed.
        off: u64,
    },
    /// A free of a pointer that belongs to another allocator.
    WrongAllocator {
        /// This allocator's id.
        expected: AllocatorId,
        /// The pointer's.
        found: AllocatorId,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::RegionTooSmall { needed, available } => write!(
                f,
                "region too small: {needed} bytes needed, {available} available"
            ),
            Self::BadRegionBase { addr } => {
                write!(f, "region base {addr:#x} is null or not 64-byte aligned")
            }
            Self::BadMagic { found } => {
                write!(f, "no allocator header here (magic {found:#018x})")
            }
            Self::CorruptHeader => write!(f, "allocator header geometry is inconsistent"),
            Self::CorruptFreeList { class, off } => write!(
                f,
                "free list of class {class} holds {off:#x}, which is not a block of that class"
            ),
            Self::Exhausted {
                requested,
                available,
            } => write!(
                f,
                "allocator exhausted: {requested} bytes requested, {available} left"
            ),
            Self::BadAlignment(align) => write!(f, "unsupported alignment {align}"),
            Self::ZeroSize => write!(f, "zero-byte allocation"),
            Self::TooLarge { requested, max } => {
                write!(f, "{requested} bytes requested, at most {max} possible")
            }
            Self::NullAllocatorId => write!(f, "the null allocator id cannot name an allocator"),
            Self::NotOwned { off } => write!(f, "offset {off:#x} is not a block of this allocator"),
            Self::DoubleFree { off } => write!(f, "block at offset {off:#x} is already free"),
            Self::WrongAllocator { expected, found } => write!(
                f,
                "pointer of allocator {}.{} given to allocator {}.{}",
                found.major, found.minor, expected.major, expected.minor
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AllocError {}
