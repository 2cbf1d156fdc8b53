// C++ mirrors of every shared-memory type of tandem-shm-core
// (shm-core/src/layout.rs): same names, same field names, same bytes.
//
// Rust atomics (`AtomicU64`...) are plain words here, accessed only through
// the scoped operations of tandem/atomic.h. The static_asserts below repeat
// layout.rs's; bindgen's reading of this header (src/generated/, rewritten by
// `cargo xtask bindings` after an edit) is checked against the Rust types
// (src/layout_check.rs) and against this header by every C++ build, so a drift
// on either side fails the build naming the field.
#pragma once

#include "tandem/types.h"

namespace tandem {

/// Cache line size used for padding hot atomics apart.
constexpr u64 CACHE_LINE = 64;

/// Magic words identifying an initialised header.
namespace magic {
constexpr u64 ARENA = 0x544e444d41524e41ull;       // "TNDMARNA"
constexpr u64 SIZE_CLASS = 0x544e444d53434c53ull;  // "TNDMSCLS"
constexpr u32 RING = 0x54524e47u;                  // "TRNG"
constexpr u32 LANE_QUEUE = 0x544c4e51u;            // "TLNQ"
constexpr u32 BLOCK_ALLOCATED = 0xA110CA7Eu;
constexpr u32 BLOCK_FREE = 0x0F2EE0F2u;
}  // namespace magic

// ---------------------------------------------------------------------------
// Pointers
// ---------------------------------------------------------------------------

/// Names an allocator (and the memory backend it was initialised in).
struct AllocatorId {
  u32 major;
  u32 minor;
};

/// The id no allocator has (`AllocatorId::NULL`).
constexpr AllocatorId NULL_ALLOCATOR_ID = {0xFFFFFFFFu, 0xFFFFFFFFu};

/// `OffsetPtr::off` value meaning null.
constexpr i64 OFFSET_PTR_NULL = -0x7FFFFFFFFFFFFFFFll - 1;

/// A pointer relative to its own address.
template <typename T>
struct OffsetPtr {
  i64 off;
};

/// The portable pointer: allocator id and byte offset from its region's base.
/// Null is NULL_ALLOCATOR_ID with offset u64 max.
template <typename T>
struct ShmPtr {
  AllocatorId alloc_id;
  u64 off;
};

/// A local address together with the portable pointer it was made from.
template <typename T>
struct FullPtr {
  T* ptr;
  ShmPtr<T> shm;
};

/// `BackendKind` values, as stored in `MemoryBackend::kind`.
namespace backend_kind {
constexpr u32 HOST_SHM = 0;
constexpr u32 PINNED = 1;
constexpr u32 DEVICE = 2;
constexpr u32 MANAGED = 3;
}  // namespace backend_kind

/// One region allocators are placed in; `base` is the region's address for
/// whoever holds the descriptor (a kernel gets the device address).
struct MemoryBackend {
  AllocatorId id;
  u32 kind;
  u32 flags;
  u64 base;
  u64 capacity;
};

// ---------------------------------------------------------------------------
// Allocators
// ---------------------------------------------------------------------------

/// An atomic on a cache line of its own.
struct alignas(64) PaddedAtomicU64 {
  u64 value;
};

/// Header of the lock-free bump allocator at offset 0 of its region; offsets
/// are relative to the header.
struct alignas(64) ArenaHeader {
  u64 magic;
  AllocatorId id;
  u64 heap_begin;
  u64 heap_end;
  PaddedAtomicU64 cursor;
};

/// A sub-arena carved from an ArenaHeader; offsets relative to its header.
struct ThreadArena {
  AllocatorId id;
  u64 cursor;
  u64 end;
};

/// Number of size classes of the freeing allocator.
constexpr u64 SIZE_CLASSES = 24;
/// Smallest block, header included.
constexpr u64 MIN_BLOCK = 32;

/// One size class's free list (layout.rs: FreeList): the tagged head, and
/// the pops and walks of the list in progress.
struct alignas(64) FreeList {
  u64 head;
  u64 readers;
};

/// Header of the freeing (size-class) allocator.
struct alignas(64) SizeClassHeader {
  u64 magic;
  AllocatorId id;
  u64 heap_begin;
  u64 heap_end;
  PaddedAtomicU64 bump;
  FreeList free_lists[SIZE_CLASSES];
};

/// Precedes every block of the size-class allocator.
struct alignas(16) BlockHeader {
  /// magic::BLOCK_ALLOCATED or magic::BLOCK_FREE.
  u32 state;
  /// Rust's `class` (a C++ keyword).
  u32 class_;
  /// Next free block's header offset while on a free list.
  u64 next;
};

// ---------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------

/// `RingHeader::kind` values.
namespace ring_kind {
constexpr u32 SPSC = 1;
constexpr u32 MPMC = 2;
/// LlSlot rings (tandem/ll_ring.h).
constexpr u32 LL = 3;
}  // namespace ring_kind

/// Header of a bounded ring; `capacity` slots of `slot_stride` bytes follow
/// at RING_SLOTS_OFFSET. `head`/`tail` are the next positions to read/write
/// (MPMC: tickets) and each slot is a RingSlotHeader followed by the element.
struct alignas(64) RingHeader {
  u32 magic;
  u32 kind;
  u32 capacity;
  u32 elem_size;
  u32 elem_align;
  u32 slot_stride;
  PaddedAtomicU64 head;
  PaddedAtomicU64 tail;
};

/// Where a ring's slots start, relative to its header.
// One spare cache line after the header (see layout.rs: prefetch pairs).
constexpr u64 RING_SLOTS_OFFSET = sizeof(RingHeader) + CACHE_LINE;

/// Per-slot sequence number of both ring kinds: Vyukov's scheme with doubled
/// values (2t free for position t, 2t+1 full for position t; see layout.rs).
struct RingSlotHeader {
  u64 seq;
};

/// Data words an LlSlot carries besides its tagged length word.
constexpr u64 LL_RECORD_WORDS = 14;

/// Rings of fewer slots never count as nearly empty for direct claims
/// (tandem/mpmc.h claim_mode): keeping the device copy of the consumers'
/// counter that fresh would cost a PCIe read every few claims. Checked
/// against `tandem_device_kernels::NEARLY_EMPTY_MIN_CAPACITY`.
constexpr u64 NEARLY_EMPTY_MIN_CAPACITY = 256;

/// A slot of an LL ring (shm-core ll_ring.rs): the sequence number (written
/// by consumers only: 2t = free for position t), then 1 + LL_RECORD_WORDS
/// words `tag << 32 | data`; word 0's data is the record's length. Each word
/// is one 8-byte atomic store; position t's record is whole once every word
/// of it has tag (2t + 1) mod 2^32.
struct LlSlot {
  u64 seq;
  u64 words[1 + LL_RECORD_WORDS];
};

/// Header of the runtime's lane queue: `num_lanes` lanes of two LL rings.
struct alignas(64) LaneQueueHeader {
  u32 magic;
  u32 num_lanes;
  u32 depth;
  u32 elem_size;
  u64 ring_bytes;
};

/// Where a lane queue's first ring starts, relative to its header.
constexpr u64 LANE_QUEUE_RINGS_OFFSET = sizeof(LaneQueueHeader);

// ---------------------------------------------------------------------------
// Futures
// ---------------------------------------------------------------------------

/// `FutureShmHeader::flags` bits.
namespace future_flags {
constexpr u32 COMPLETE = 1u << 0;
constexpr u32 COPY_FROM_CLIENT = 1u << 1;
constexpr u32 POINTER = 1u << 2;
constexpr u32 SUCCEEDED = 1u << 3;
constexpr u32 USER_MASK = 0xFFFF0000u;
}  // namespace future_flags

/// A completion record, followed by `copy_space_size` bytes of copy space.
struct alignas(16) FutureShmHeader {
  u32 flags;
  i32 return_code;
  u32 copy_space_size;
  u32 input_len;
  u32 output_len;
  u32 notify;
  ShmPtr<u8> payload;
};

/// Where a future's copy space starts, relative to its header.
constexpr u64 FUTURE_COPY_SPACE_OFFSET = sizeof(FutureShmHeader);

// ---------------------------------------------------------------------------
// The numbers layout.rs asserts, asserted again on the C++ side.
// ---------------------------------------------------------------------------

static_assert(sizeof(AllocatorId) == 8, "AllocatorId");
TANDEM_ASSERT_OFFSET(AllocatorId, minor, 4);
static_assert(sizeof(OffsetPtr<u64>) == 8 && alignof(OffsetPtr<u64>) == 8, "OffsetPtr");
static_assert(sizeof(ShmPtr<u8>) == 16 && alignof(ShmPtr<u8>) == 8, "ShmPtr");
TANDEM_ASSERT_OFFSET(ShmPtr<u8>, off, 8);
static_assert(sizeof(FullPtr<u8>) == 24, "FullPtr");
TANDEM_ASSERT_OFFSET(FullPtr<u8>, shm, 8);
static_assert(sizeof(MemoryBackend) == 32, "MemoryBackend");
TANDEM_ASSERT_OFFSET(MemoryBackend, kind, 8);
TANDEM_ASSERT_OFFSET(MemoryBackend, flags, 12);
TANDEM_ASSERT_OFFSET(MemoryBackend, base, 16);
TANDEM_ASSERT_OFFSET(MemoryBackend, capacity, 24);
static_assert(sizeof(PaddedAtomicU64) == 64 && alignof(PaddedAtomicU64) == 64, "PaddedAtomicU64");
static_assert(sizeof(ArenaHeader) == 128, "ArenaHeader");
TANDEM_ASSERT_OFFSET(ArenaHeader, id, 8);
TANDEM_ASSERT_OFFSET(ArenaHeader, heap_begin, 16);
TANDEM_ASSERT_OFFSET(ArenaHeader, heap_end, 24);
TANDEM_ASSERT_OFFSET(ArenaHeader, cursor, 64);
static_assert(sizeof(ThreadArena) == 24, "ThreadArena");
TANDEM_ASSERT_OFFSET(ThreadArena, cursor, 8);
TANDEM_ASSERT_OFFSET(ThreadArena, end, 16);
static_assert(sizeof(SizeClassHeader) == 128 + 64 * SIZE_CLASSES, "SizeClassHeader");
TANDEM_ASSERT_OFFSET(SizeClassHeader, bump, 64);
TANDEM_ASSERT_OFFSET(SizeClassHeader, free_lists, 128);
static_assert(sizeof(FreeList) == 64 && alignof(FreeList) == 64, "FreeList");
TANDEM_ASSERT_OFFSET(FreeList, readers, 8);
static_assert(sizeof(BlockHeader) == 16, "BlockHeader");
TANDEM_ASSERT_OFFSET(BlockHeader, class_, 4);
TANDEM_ASSERT_OFFSET(BlockHeader, next, 8);
static_assert(sizeof(RingHeader) == 192, "RingHeader");
TANDEM_ASSERT_OFFSET(RingHeader, slot_stride, 20);
TANDEM_ASSERT_OFFSET(RingHeader, head, 64);
TANDEM_ASSERT_OFFSET(RingHeader, tail, 128);
static_assert(sizeof(RingSlotHeader) == 8, "RingSlotHeader");
static_assert(sizeof(LlSlot) == 128, "LlSlot");
TANDEM_ASSERT_OFFSET(LlSlot, words, 8);
static_assert(sizeof(LaneQueueHeader) == 64, "LaneQueueHeader");
TANDEM_ASSERT_OFFSET(LaneQueueHeader, ring_bytes, 16);
static_assert(sizeof(FutureShmHeader) == 48 && alignof(FutureShmHeader) == 16, "FutureShmHeader");
TANDEM_ASSERT_OFFSET(FutureShmHeader, input_len, 12);
TANDEM_ASSERT_OFFSET(FutureShmHeader, output_len, 16);
TANDEM_ASSERT_OFFSET(FutureShmHeader, payload, 24);

}  // namespace tandem
