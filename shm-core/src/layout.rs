//! Every type that lives in shared memory, in one place.
//!
//! These structs are read and written by several processes and by GPU kernels
//! (through the C++ mirrors in `device-kernels/include/tandem/layout.h`, whose
//! sizes and offsets `device-kernels` checks against these at build time).
//! Rules for everything in this file:
//!
//! * `#[repr(C)]`, no pointers that mean something only in one process (use
//!   offsets), no `bool` or Rust `enum` (any bit pattern another process writes
//!   must be a valid value, so small enums are `u32` with checked conversion);
//! * size, alignment and every field offset asserted right below the type;
//! * atomics are the only fields written after initialisation by more than one
//!   party; everything else is written once before the structure is published.
//!
//! Operations live in the module named after each concept (`ptr`, `arena`,
//! `size_class`, `ring`, `lane_queue`, `future`); this module only fixes bytes.

use core::marker::PhantomData;

use crate::sync::{AtomicI32, AtomicU32, AtomicU64};

/// Cache line size used for padding hot atomics apart (x86-64, Hopper L2 sector
/// groups and AMD's 64-byte lines all agree on 64).
pub const CACHE_LINE: usize = 64;

/// Magic words identifying an initialised header, so that attaching to garbage
/// or to the wrong structure is an error instead of undefined behaviour.
pub mod magic {
    /// [`ArenaHeader::magic`](super::ArenaHeader::magic): "TNDMARNA".
    pub const ARENA: u64 = 0x544e_444d_4152_4e41;
    /// [`SizeClassHeader::magic`](super::SizeClassHeader::magic): "TNDMSCLS".
    pub const SIZE_CLASS: u64 = 0x544e_444d_5343_4c53;
    /// [`RingHeader::magic`](super::RingHeader::magic): "TRNG".
    pub const RING: u32 = 0x5452_4e47;
    /// [`LaneQueueHeader::magic`](super::LaneQueueHeader::magic): "TLNQ".
    pub const LANE_QUEUE: u32 = 0x544c_4e51;
    /// [`BlockHeader::state`](super::BlockHeader::state) of a block handed out.
    pub const BLOCK_ALLOCATED: u32 = 0xA110_CA7E;
    /// [`BlockHeader::state`](super::BlockHeader::state) of a block on a free list.
    pub const BLOCK_FREE: u32 = 0x0F2E_E0F2;
}

// ---------------------------------------------------------------------------
// Pointers
// ---------------------------------------------------------------------------

/// Names an allocator (and the memory backend it was initialised in).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AllocatorId {
    /// What kind of allocator, by its owner's convention (tandem-runtime
    /// uses a tag per role: segment, heap, kernel arena).
    pub major: u32,
    /// Which one of that kind (tandem-runtime: the segment's index).
    pub minor: u32,
}

/// A pointer relative to its own address: valid wherever the segment holding
/// both it and its target is mapped. `off == OFFSET_PTR_NULL` is null.
#[repr(C)]
pub struct OffsetPtr<T> {
    pub(crate) off: i64,
    pub(crate) _target: PhantomData<*mut T>,
}

/// The value of `OffsetPtr::off` that means null (an offset of 0 would be a
/// pointer to itself, which is legitimate).
pub const OFFSET_PTR_NULL: i64 = i64::MIN;

/// The portable pointer: which allocator, and the byte offset from the base of
/// that allocator's region. Null is `AllocatorId::NULL` with offset `u64::MAX`.
#[repr(C)]
pub struct ShmPtr<T> {
    /// The allocator whose region the target lies in.
    pub alloc_id: AllocatorId,
    /// Bytes from the start of that region to the target.
    pub off: u64,
    pub(crate) _target: PhantomData<*mut T>,
}

// Manual impls: a derive would demand `T: Copy`, but copying a pointer never
// copies its target.
impl<T> Clone for ShmPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for ShmPtr<T> {}

/// A local address together with the portable pointer it was made from.
#[repr(C)]
pub struct FullPtr<T> {
    /// The target's address in this process (or kernel).
    pub ptr: *mut T,
    /// The portable pointer `ptr` was resolved from.
    pub shm: ShmPtr<T>,
}

impl<T> Clone for FullPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for FullPtr<T> {}

/// Where a memory backend's bytes live. Stored as `u32` in [`MemoryBackend`].
#[repr(u32)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BackendKind {
    /// A host shared-memory segment (memfd / shm_open).
    HostShm = 0,
    /// Page-locked host memory mapped into a device's address space.
    Pinned = 1,
    /// Device memory.
    Device = 2,
    /// Managed (unified) memory.
    Managed = 3,
}

/// Describes one region that allocators are placed in. `base` is the address
/// of the region *in the process or kernel holding this descriptor* (a kernel
/// gets the device address), so the descriptor is passed by value, never shared.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MemoryBackend {
    /// The allocator the region belongs to; pointers of another id are refused.
    pub id: AllocatorId,
    /// A [`BackendKind`] as `u32` (checked when read: the descriptor may
    /// come from a peer).
    pub kind: u32,
    /// Reserved; 0.
    pub flags: u32,
    /// The region's address for whoever holds this descriptor.
    pub base: u64,
    /// Bytes in the region.
    pub capacity: u64,
}

// ---------------------------------------------------------------------------
// Allocators
// ---------------------------------------------------------------------------

/// An atomic on a cache line of its own.
#[repr(C, align(64))]
pub struct PaddedAtomicU64 {
    /// The atomic itself; the rest of the line is padding.
    pub value: AtomicU64,
}

impl PaddedAtomicU64 {
    /// Initialises the padded atomic at `slot` in place to `value`, with its
    /// padding zeroed: writing a whole `PaddedAtomicU64` would copy 56 bytes
    /// of uninitialised stack into memory other processes read.
    ///
    /// # Safety
    /// `slot` must be valid for writes and aligned, and nobody may use it yet.
    pub(crate) unsafe fn init_at(slot: *mut Self, value: u64) {
        // SAFETY: the caller guarantees `slot` is writable, aligned, unshared.
        unsafe {
            core::ptr::write_bytes(slot.cast::<u8>(), 0, core::mem::size_of::<Self>());
            core::ptr::addr_of_mut!((*slot).value).write(AtomicU64::new(value));
        }
    }
}

/// Header of a lock-free bump allocator, placed at offset 0 of its region.
/// Offsets (`heap_begin`, `heap_end`, `cursor`) are relative to the header.
#[repr(C, align(64))]
pub struct ArenaHeader {
    /// [`magic::ARENA`] once initialised.
    pub magic: u64,
    /// The allocator's id, stamped into every pointer it hands out.
    pub id: AllocatorId,
    /// Offset of the first byte handed out.
    pub heap_begin: u64,
    /// Offset one past the last byte that may be handed out.
    pub heap_end: u64,
    /// Next free byte; only ever grows (until `reset`).
    pub cursor: PaddedAtomicU64,
}

/// A sub-arena carved from an [`ArenaHeader`] by one atomic, then used by one
/// thread (or one GPU block, from block-shared memory) with plain arithmetic.
/// Offsets are relative to the parent arena's header.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ThreadArena {
    /// The parent arena's id.
    pub id: AllocatorId,
    /// Offset of the next free byte.
    pub cursor: u64,
    /// Offset one past the sub-arena's last byte.
    pub end: u64,
}

/// Number of size classes of the freeing allocator: class `c` holds blocks of
/// `MIN_BLOCK << c` bytes including the block header (16 B .. 128 MiB).
pub const SIZE_CLASSES: usize = 24;
/// Smallest block, header included.
pub const MIN_BLOCK: u64 = 32;

/// One size class's free list of the freeing allocator, on a cache line of
/// its own.
#[repr(C, align(64))]
pub struct FreeList {
    /// The tagged head: a 24-bit ABA tag above a 40-bit (offset / 16);
    /// offset 0 means empty.
    pub head: AtomicU64,
    /// Pops and walks of this list in progress: they may still read the
    /// headers of blocks that left the list, so a merge waits for it to
    /// read 0 before it gives out memory that held such headers.
    pub readers: AtomicU64,
}

impl FreeList {
    /// Initialises the list at `slot` in place, empty (head `empty_head`) with
    /// no readers, its padding zeroed (as [`PaddedAtomicU64::init_at`]).
    ///
    /// # Safety
    /// As for [`PaddedAtomicU64::init_at`].
    pub(crate) unsafe fn init_at(slot: *mut Self, empty_head: u64) {
        // SAFETY: the caller guarantees `slot` is writable, aligned, unshared.
        unsafe {
            core::ptr::write_bytes(slot.cast::<u8>(), 0, core::mem::size_of::<Self>());
            core::ptr::addr_of_mut!((*slot).head).write(AtomicU64::new(empty_head));
            core::ptr::addr_of_mut!((*slot).readers).write(AtomicU64::new(0));
        }
    }
}

/// Header of the freeing (size-class) allocator, placed at offset 0 of its
/// region. Blocks are carved from `[heap_begin, heap_end)` by the bump cursor
/// and recycled through one lock-free free list per class.
#[repr(C, align(64))]
pub struct SizeClassHeader {
    /// [`magic::SIZE_CLASS`] once initialised.
    pub magic: u64,
    /// The allocator's id, stamped into every pointer it hands out.
    pub id: AllocatorId,
    /// Offset of the first block.
    pub heap_begin: u64,
    /// Offset one past the last byte blocks may use.
    pub heap_end: u64,
    /// Offset where the next never-used block is carved; only grows.
    pub bump: PaddedAtomicU64,
    /// Per class, its free list.
    pub free_lists: [FreeList; SIZE_CLASSES],
}

/// Precedes every block handed out by the size-class allocator.
#[repr(C, align(16))]
pub struct BlockHeader {
    /// `magic::BLOCK_ALLOCATED` or `magic::BLOCK_FREE`; a free of a block whose
    /// state is not `BLOCK_ALLOCATED` is refused (double free, wild pointer).
    pub state: AtomicU32,
    /// The block's size class (its size is `MIN_BLOCK << class`).
    pub class: u32,
    /// Next free block's header offset while on a free list.
    pub next: AtomicU64,
}

// ---------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------

/// `RingHeader::kind` values.
pub mod ring_kind {
    /// One producer, one consumer.
    pub const SPSC: u32 = 1;
    /// Any number of producers and consumers.
    pub const MPMC: u32 = 2;
    /// [`LlSlot`](super::LlSlot)s: records whose words carry their own tags.
    pub const LL: u32 = 3;
}

/// Header of a bounded ring placed in a region; `capacity` slots of
/// `slot_stride` bytes follow it at `RING_SLOTS_OFFSET`.
///
/// `head`/`tail` are the next positions to read and write (MPMC: the dequeue
/// and enqueue tickets); each slot is a [`RingSlotHeader`] followed by the
/// element, for both kinds.
#[repr(C, align(64))]
pub struct RingHeader {
    /// [`magic::RING`] once initialised.
    pub magic: u32,
    /// A [`ring_kind`] value.
    pub kind: u32,
    /// Slots in the ring.
    pub capacity: u32,
    /// Size of the element type, checked when a ring is attached to.
    pub elem_size: u32,
    /// Alignment of the element type, checked likewise.
    pub elem_align: u32,
    /// Bytes from one slot to the next.
    pub slot_stride: u32,
    /// Next position to read.
    pub head: PaddedAtomicU64,
    /// Next position to write.
    pub tail: PaddedAtomicU64,
}

/// Where a ring's slots start, relative to its header: one spare cache line
/// after the header, because x86 prefetches 64-byte lines in 128-byte pairs and
/// `tail` (offset 128) would otherwise share a pair with the first slots,
/// coupling the producer's index with the consumer's data.
pub const RING_SLOTS_OFFSET: usize = core::mem::size_of::<RingHeader>() + CACHE_LINE;

/// Per-slot sequence number of both ring kinds (Vyukov's scheme with doubled
/// sequence values, so that a capacity of 1 works): `seq == 2t` means the slot
/// is free for the producer of position `t`, `seq == 2t + 1` that it holds
/// position `t`'s element for its consumer, who frees it for the next lap with
/// `seq = 2(t + capacity)`. The element follows at `round_up(8, align)`.
#[repr(C)]
pub struct RingSlotHeader {
    /// The slot's sequence number, as above.
    pub seq: AtomicU64,
}

/// Data words an [`LlSlot`] carries (besides its tagged length word).
pub const LL_RECORD_WORDS: usize = 14;

/// A slot of an LL ring (`ll_ring`): the sequence number (written only by
/// consumers and the initialiser: "free for the producer of position t" =
/// 2t), then `1 + LL_RECORD_WORDS` words, each `tag << 32 | data`. Word 0's
/// data is the record's length in data words. A producer stores each word
/// with one 8-byte atomic store and no fence; the record is published for
/// position t once every word of it carries tag `(2t + 1) as u32`.
#[repr(C)]
pub struct LlSlot {
    /// The slot's sequence number, as above.
    pub seq: AtomicU64,
    /// The tagged length word, then the tagged data words.
    pub words: [AtomicU64; 1 + LL_RECORD_WORDS],
}

/// Header of the runtime's task queue shape: `num_lanes` lanes, each with two
/// LL rings (index 0: high priority, 1: low), `ring_bytes` apart, starting
/// at `LANE_QUEUE_RINGS_OFFSET`.
#[repr(C, align(64))]
pub struct LaneQueueHeader {
    /// [`magic::LANE_QUEUE`] once initialised.
    pub magic: u32,
    /// Lanes in the queue.
    pub num_lanes: u32,
    /// Slots of each ring.
    pub depth: u32,
    /// Size of the element type, checked when the queue is attached to.
    pub elem_size: u32,
    /// Bytes from one ring to the next.
    pub ring_bytes: u64,
}

/// Where a lane queue's first ring starts, relative to its header.
pub const LANE_QUEUE_RINGS_OFFSET: usize = core::mem::size_of::<LaneQueueHeader>();

// ---------------------------------------------------------------------------
// Futures
// ---------------------------------------------------------------------------

/// `FutureShmHeader::flags` bits.
pub mod future_flags {
    /// The result is published: return code and output are final.
    pub const COMPLETE: u32 = 1 << 0;
    /// The task's input was serialized into the copy space by the client.
    pub const COPY_FROM_CLIENT: u32 = 1 << 1;
    /// `payload` points at a task object (zero-copy, runtime-internal).
    pub const POINTER: u32 = 1 << 2;
    /// Set together with COMPLETE when the return code is 0: a waiter that
    /// reads the flags across PCIe learns the outcome without a second read.
    pub const SUCCEEDED: u32 = 1 << 3;
    /// Bits reserved for users of `FutureShm`.
    pub const USER_MASK: u32 = 0xFFFF_0000;
}

/// A completion record shared between a submitter and whoever completes it,
/// followed in memory by `copy_space_size` bytes of copy space.
#[repr(C, align(16))]
pub struct FutureShmHeader {
    /// [`future_flags`] bits.
    pub flags: AtomicU32,
    /// The task's result, final once `flags` has `COMPLETE`.
    pub return_code: AtomicI32,
    /// Bytes of copy space after the header.
    pub copy_space_size: u32,
    /// Bytes of input the submitter serialized into the copy space.
    pub input_len: AtomicU32,
    /// Bytes of output the completer serialized into the copy space.
    pub output_len: AtomicU32,
    /// 0, or where the completer also announces completion: a word the
    /// submitter polls more cheaply than `flags`. Written by the submitter
    /// before publishing; its meaning is the two parties' (tandem-runtime
    /// carries its notify words in lane records instead and leaves it 0).
    pub notify: u32,
    /// For pointer futures: the task object.
    pub payload: ShmPtr<u8>,
}

/// Where a future's copy space starts, relative to its header.
pub const FUTURE_COPY_SPACE_OFFSET: usize = core::mem::size_of::<FutureShmHeader>();

// ---------------------------------------------------------------------------
// Layout assertions. Loom's atomics differ in size, so these hold for real
// builds only; `device-kernels` checks the same numbers against the C++ side.
// ---------------------------------------------------------------------------

#[cfg(not(loom))]
mod asserts {
    use super::*;
    use memoffset::offset_of;
    use static_assertions::{assert_eq_align, assert_eq_size, const_assert_eq};

    assert_eq_size!(AllocatorId, [u8; 8]);
    const_assert_eq!(offset_of!(AllocatorId, major), 0);
    const_assert_eq!(offset_of!(AllocatorId, minor), 4);

    assert_eq_size!(OffsetPtr<u64>, [u8; 8]);
    assert_eq_align!(OffsetPtr<u64>, u64);

    assert_eq_size!(ShmPtr<u8>, [u8; 16]);
    assert_eq_align!(ShmPtr<u8>, u64);
    const_assert_eq!(offset_of!(ShmPtr<u8>, alloc_id), 0);
    const_assert_eq!(offset_of!(ShmPtr<u8>, off), 8);

    assert_eq_size!(FullPtr<u8>, [u8; 24]);
    const_assert_eq!(offset_of!(FullPtr<u8>, ptr), 0);
    const_assert_eq!(offset_of!(FullPtr<u8>, shm), 8);

    assert_eq_size!(MemoryBackend, [u8; 32]);
    const_assert_eq!(offset_of!(MemoryBackend, id), 0);
    const_assert_eq!(offset_of!(MemoryBackend, kind), 8);
    const_assert_eq!(offset_of!(MemoryBackend, flags), 12);
    const_assert_eq!(offset_of!(MemoryBackend, base), 16);
    const_assert_eq!(offset_of!(MemoryBackend, capacity), 24);

    assert_eq_size!(PaddedAtomicU64, [u8; 64]);
    const_assert_eq!(core::mem::align_of::<PaddedAtomicU64>(), 64);

    assert_eq_size!(ArenaHeader, [u8; 128]);
    const_assert_eq!(offset_of!(ArenaHeader, magic), 0);
    const_assert_eq!(offset_of!(ArenaHeader, id), 8);
    const_assert_eq!(offset_of!(ArenaHeader, heap_begin), 16);
    const_assert_eq!(offset_of!(ArenaHeader, heap_end), 24);
    const_assert_eq!(offset_of!(ArenaHeader, cursor), 64);

    assert_eq_size!(ThreadArena, [u8; 24]);
    const_assert_eq!(offset_of!(ThreadArena, id), 0);
    const_assert_eq!(offset_of!(ThreadArena, cursor), 8);
    const_assert_eq!(offset_of!(ThreadArena, end), 16);

    assert_eq_size!(SizeClassHeader, [u8; 128 + 64 * SIZE_CLASSES]);
    const_assert_eq!(offset_of!(SizeClassHeader, magic), 0);
    const_assert_eq!(offset_of!(SizeClassHeader, id), 8);
    const_assert_eq!(offset_of!(SizeClassHeader, heap_begin), 16);
    const_assert_eq!(offset_of!(SizeClassHeader, heap_end), 24);
    const_assert_eq!(offset_of!(SizeClassHeader, bump), 64);
    const_assert_eq!(offset_of!(SizeClassHeader, free_lists), 128);

    assert_eq_size!(FreeList, [u8; 64]);
    const_assert_eq!(core::mem::align_of::<FreeList>(), 64);
    const_assert_eq!(offset_of!(FreeList, head), 0);
    const_assert_eq!(offset_of!(FreeList, readers), 8);

    assert_eq_size!(BlockHeader, [u8; 16]);
    const_assert_eq!(offset_of!(BlockHeader, state), 0);
    const_assert_eq!(offset_of!(BlockHeader, class), 4);
    const_assert_eq!(offset_of!(BlockHeader, next), 8);

    assert_eq_size!(RingHeader, [u8; 192]);
    const_assert_eq!(offset_of!(RingHeader, magic), 0);
    const_assert_eq!(offset_of!(RingHeader, kind), 4);
    const_assert_eq!(offset_of!(RingHeader, capacity), 8);
    const_assert_eq!(offset_of!(RingHeader, elem_size), 12);
    const_assert_eq!(offset_of!(RingHeader, elem_align), 16);
    const_assert_eq!(offset_of!(RingHeader, slot_stride), 20);
    const_assert_eq!(offset_of!(RingHeader, head), 64);
    const_assert_eq!(offset_of!(RingHeader, tail), 128);

    assert_eq_size!(RingSlotHeader, [u8; 8]);

    assert_eq_size!(LlSlot, [u8; 128]);
    const_assert_eq!(offset_of!(LlSlot, seq), 0);
    const_assert_eq!(offset_of!(LlSlot, words), 8);

    assert_eq_size!(LaneQueueHeader, [u8; 64]);
    const_assert_eq!(offset_of!(LaneQueueHeader, magic), 0);
    const_assert_eq!(offset_of!(LaneQueueHeader, num_lanes), 4);
    const_assert_eq!(offset_of!(LaneQueueHeader, depth), 8);
    const_assert_eq!(offset_of!(LaneQueueHeader, elem_size), 12);
    const_assert_eq!(offset_of!(LaneQueueHeader, ring_bytes), 16);

    assert_eq_size!(FutureShmHeader, [u8; 48]);
    const_assert_eq!(core::mem::align_of::<FutureShmHeader>(), 16);
    const_assert_eq!(offset_of!(FutureShmHeader, flags), 0);
    const_assert_eq!(offset_of!(FutureShmHeader, return_code), 4);
    const_assert_eq!(offset_of!(FutureShmHeader, copy_space_size), 8);
    const_assert_eq!(offset_of!(FutureShmHeader, input_len), 12);
    const_assert_eq!(offset_of!(FutureShmHeader, output_len), 16);
    const_assert_eq!(offset_of!(FutureShmHeader, notify), 20);
    const_assert_eq!(offset_of!(FutureShmHeader, payload), 24);
}
