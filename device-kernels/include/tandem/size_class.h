// Device-side operations of tandem-shm-core's freeing allocator
// (shm-core/src/size_class.rs) over the SizeClassHeader and BlockHeader of
// tandem/layout.h: the same bytes and the same algorithm, so a block a kernel
// allocates can be freed by Rust and the reverse, while both run.
//
//   * Class c blocks are MIN_BLOCK << c bytes, header included, naturally
//     aligned from the heap start, carved from the bump cursor; the padding a
//     carve skips is cut into smaller naturally aligned blocks and freed.
//   * A request whose list is empty and whose class the cursor can no longer
//     carve splits the smallest larger free block (the upper halves go to
//     their lists), else merges free buddies of the smaller classes (the
//     lists taken whole, sorted, paired), so it fails only when no free
//     memory, merged as far as it goes, holds its block (size_class.rs,
//     `take_fresh`).
//   * Each class has a Treiber stack of free blocks whose head packs a 24-bit
//     ABA tag above (offset / 16) in 40 bits; offset 0 means empty. Every
//     successful push or pop bumps the tag. Every pop (and Rust's stats walk)
//     counts itself in the list's `readers` while it may read block headers,
//     so that a merge can wait until no one reads a header it absorbs.
//   * User data follows the block's header (16-aligned); an alignment above
//     16 puts the data `align` bytes (at least two headers) into the block,
//     with a second header right before it, and marks the block's own header
//     BLOCK_HOLDS_ALIGNED.
//
// Scope S: scope::system (the default) for a heap in memory the CPU or other
// devices use too (mapped pinned memory, shared memory); scope::device for a
// heap only this GPU's kernels use (device memory).
//
// Waiting: every loop here is lock-free. A failed compare-and-swap means some
// other agent's operation succeeded, so no lane ever waits for another lane of
// its warp (AMD has no independent thread scheduling, see tandem/atomic.h).
//
// Throughput: every shared operation is a compare-and-swap on one word per
// class, so thousands of GPU threads allocating one size serialise on it
// (every success costs a round of failed attempts).
// The thread cache at the end of this file (SizeClassCache, like glibc's
// tcache) sits above the shared heap and serves a thread's frees back to its
// own allocations without touching the class heads, and the lanes of a warp
// that miss their caches or flush them at once pool the shared work: one run
// popped, one run carved, one chain pushed per warp and class (tandem/warp.h).
#pragma once

#include "tandem/atomic.h"
#include "tandem/layout.h"
#include "tandem/portability.h"
#include "tandem/warp.h"

namespace tandem {

/// Why a size-class operation failed: shm-core's `AllocError` as a u32 a
/// kernel can report through memory. The first five values are those of
/// alloc_status (tandem/arena.h). `NullAllocatorId` has no counterpart: it
/// is an `init_in` error, and kernels only attach.
enum class size_class_status : u32 {
  ok = 0,
  zero_size = 1,
  bad_alignment = 2,
  too_large = 3,
  exhausted = 4,
  region_too_small = 5,
  bad_region_base = 6,
  bad_magic = 7,
  corrupt_header = 8,
  corrupt_free_list = 9,
  not_owned = 10,
  double_free = 11,
  wrong_allocator = 12,
};

/// Outcome of an allocation or a free: on success the allocation's offset
/// (its data, relative to the header); on failure the offset Rust's error
/// carries (`CorruptFreeList`: the bad list entry; `NotOwned` and
/// `DoubleFree`: the freed offset), 0 for the other errors.
struct SizeClassResult {
  size_class_status status;
  u64 off;
};

/// A validated size-class heap: the header's immutable fields read once by
/// size_class_attach, so a peer scribbling over the header later cannot move
/// an operation outside the region.
struct SizeClassHeap {
  SizeClassHeader* header;
  AllocatorId id;
  u64 heap_begin;
  u64 heap_end;

  /// The block header at offset `off`.
  TANDEM_DEVICE BlockHeader* block(u64 off) const {
    return reinterpret_cast<BlockHeader*>(reinterpret_cast<u8*>(header) + off);
  }
  /// The local address of offset `off`.
  TANDEM_DEVICE u8* address(u64 off) const { return reinterpret_cast<u8*>(header) + off; }
};

/// Constants of size_class.rs.
namespace size_class {
/// Offset of the heap from the region base (and the largest alignment).
constexpr u64 HEAP_ALIGN = 4096;
constexpr u64 MAX_ALIGN = HEAP_ALIGN;
/// The largest block, header included.
constexpr u64 MAX_BLOCK = MIN_BLOCK << (SIZE_CLASSES - 1);
/// Bytes a block header occupies before user data.
constexpr u64 HEADER = sizeof(BlockHeader);
/// Alignment every allocation gets without asking.
constexpr u64 MIN_DATA_ALIGN = 16;
/// BlockHeader::state of a block whose allocation's header is inside it.
constexpr u32 BLOCK_HOLDS_ALIGNED = 0;
/// Free-list head packing.
constexpr u32 OFFSET_SHIFT = 4;
constexpr u32 OFFSET_BITS = 40;
constexpr u64 OFFSET_MASK = (1ull << OFFSET_BITS) - 1;
constexpr u64 TAG_MASK = (1ull << (64 - OFFSET_BITS)) - 1;
/// Offsets must fit a head's 40 bits after division by 16 (16 TiB).
constexpr u64 MAX_HEAP_END = 1ull << (OFFSET_BITS + OFFSET_SHIFT);
/// How many times a merge checks a list's readers before it gives up on
/// them (Rust's DRAIN_PATIENCE): a reader that died in a pop never leaves,
/// and on AMD a lane must not wait without end for a lane of its own warp.
constexpr u32 DRAIN_PATIENCE = 1u << 14;
/// REGION_ALIGN of region.rs: the header's alignment.
constexpr u64 REGION_ALIGN = CACHE_LINE;

static_assert(HEADER == MIN_DATA_ALIGN, "a block header is 16 bytes, as in Rust");
static_assert(HEADER <= MIN_BLOCK, "the smallest block holds a header");
/// log2(MIN_BLOCK), for class arithmetic.
constexpr u32 MIN_BLOCK_SHIFT = 5;
static_assert(MIN_BLOCK == 1ull << MIN_BLOCK_SHIFT, "MIN_BLOCK_SHIFT is log2(MIN_BLOCK)");
}  // namespace size_class

namespace detail {

/// `u64::trailing_zeros` for v != 0.
TANDEM_DEVICE u32 trailing_zeros(u64 v) { return log2_floor(v & (~v + 1)); }

/// `block_size`: bytes of a class-`cls` block.
TANDEM_HOST_DEVICE u64 sc_block_size(u64 cls) { return MIN_BLOCK << cls; }

/// `data_offset`: where user data starts in a block for `align`.
TANDEM_HOST_DEVICE u64 sc_data_offset(u64 align) {
  using namespace size_class;
  if (align <= MIN_DATA_ALIGN) {
    return HEADER;
  }
  // `align` is at least 2 * HEADER here: room for the block's header and the
  // allocation's own one, as Rust's `(2 * HEADER).next_multiple_of(align)`.
  return align;
}

TANDEM_HOST_DEVICE u64 sc_pack_head(u64 off, u64 tag) {
  using namespace size_class;
  return ((tag & TAG_MASK) << OFFSET_BITS) | (off >> OFFSET_SHIFT);
}
TANDEM_HOST_DEVICE u64 sc_head_offset(u64 head) {
  using namespace size_class;
  return (head & OFFSET_MASK) << OFFSET_SHIFT;
}
TANDEM_HOST_DEVICE u64 sc_head_tag(u64 head) { return head >> size_class::OFFSET_BITS; }

/// A request turned into its class and data offset (`class_for` plus the
/// base-alignment check of `allocate`).
struct SizeClassRequest {
  size_class_status status;
  u32 cls;
  u64 pad;
};

/// `SizeClassAllocator::class_for` and the check of `allocate` that the
/// mapping's base is aligned at least as far as the request.
TANDEM_DEVICE SizeClassRequest sc_request(const SizeClassHeap& heap, u64 size, u64 align) {
  using namespace size_class;
  SizeClassRequest r{size_class_status::ok, 0, 0};
  if (size == 0) {
    r.status = size_class_status::zero_size;
    return r;
  }
  if (align == 0 || (align & (align - 1)) != 0 || align > MAX_ALIGN) {
    r.status = size_class_status::bad_alignment;
    return r;
  }
  r.pad = sc_data_offset(align);
  const u64 need = size + r.pad;
  // The block is the next power of two of `need`: above MAX_BLOCK (or past
  // u64) exactly when `need` is.
  if (need < size || need > MAX_BLOCK) {
    r.status = size_class_status::too_large;
    return r;
  }
  // ceil(log2(need)) - log2(MIN_BLOCK), at least 0.
  r.cls = need <= MIN_BLOCK ? 0 : log2_floor(need - 1) + 1 - MIN_BLOCK_SHIFT;
  const u64 base = reinterpret_cast<u64>(heap.header);
  if (align > (1ull << trailing_zeros(base))) {
    r.status = size_class_status::bad_alignment;
  }
  return r;
}

/// `is_block`: whether `off` is a whole class-`cls` block inside the heap.
TANDEM_DEVICE bool sc_is_block(const SizeClassHeap& heap, u64 cls, u64 off) {
  const u64 size = sc_block_size(cls);
  return off >= heap.heap_begin && ((off - heap.heap_begin) & (size - 1)) == 0 &&
         off + size >= off && off + size <= heap.heap_end;
}

/// `write_header`: a whole header at `off`, which the caller owns and no one
/// else reads (freshly carved memory, or inside the caller's block): plain
/// stores, published later by a release (a push) or by handing the pointer on.
TANDEM_DEVICE void sc_write_header(const SizeClassHeap& heap, u64 off, u64 cls, u32 state) {
  *heap.block(off) = BlockHeader{state, static_cast<u32>(cls), 0};
}

/// `push`, generalised to a chain: puts the blocks `first` -> ... -> `last`
/// (linked through `next`, all already marked free, all of class `cls`) on
/// the class's free list with one compare-and-swap. With first == last this is
/// Rust's push; a longer chain is what any number of single pushes could have
/// built, and it bumps the tag once, which keeps the ABA argument (every
/// successful change of the head moves the tag).
template <scope S>
TANDEM_DEVICE void sc_push_chain(const SizeClassHeap& heap, u64 cls, u64 first, u64 last) {
  u64* const head = &heap.header->free_lists[cls].head;
  u64* const link = &heap.block(last)->next;
  Backoff backoff = Backoff::for_races<S>();
  // Relaxed: the value only seeds the CAS, which checks it.
  u64 current = load_relaxed<S>(head);
  for (;;) {
    // Relaxed: `next` is an atomic word only because a stale pop may read it;
    // the release CAS below publishes it.
    store_relaxed<S>(link, sc_head_offset(current));
    // Release pairs with the acquire in pop (C++ and Rust) and in Rust's
    // stats: the links just stored, and everything done with the blocks
    // before they were freed, happen before the next owner sees them.
    const u64 replacement = sc_pack_head(first, sc_head_tag(current) + 1);
    const u64 seen = cas<S, order::release>(head, current, replacement);
    if (seen == current) {
      return;
    }
    // After a sleep, reload: see Backoff::contended.
    current = backoff.contended() ? load_relaxed<S>(head) : seen;
  }
}

/// Up to `want` blocks taken off a class's free list in one compare-and-swap:
/// `taken` of them, linked from `first` through their `next` words.
struct SizeClassRun {
  size_class_status status;
  /// The first block; on corrupt_free_list, the bad entry.
  u64 first;
  u64 taken;
};

/// sc_pop_run's work, between the reader's enter and leave.
template <scope S>
TANDEM_DEVICE SizeClassRun sc_pop_run_counted(const SizeClassHeap& heap, u64 cls, u64 want) {
  u64* const head = &heap.header->free_lists[cls].head;
  Backoff backoff = Backoff::for_races<S>();
  // Acquire (the load and both outcomes of the CAS) pairs with the release
  // of the push that put the first block on the list; the pushes of the
  // blocks under it came earlier, and every later change of the head is an
  // RMW continuing their release sequences: so their links and their
  // previous owners' writes happen before we read or reuse them.
  u64 current = load_acquire<S>(head);
  for (;;) {
    const u64 first = sc_head_offset(current);
    if (first == 0) {
      return SizeClassRun{size_class_status::ok, 0, 0};
    }
    if (!sc_is_block(heap, cls, first)) {
      return SizeClassRun{size_class_status::corrupt_free_list, first, 0};
    }
    u64 taken = 1;
    // Relaxed: `next` is only ever written atomically, and a link of a block
    // popped and reused since our load comes with a moved tag, so the CAS
    // fails and the stale value is never installed.
    u64 after = load_relaxed<S>(&heap.block(first)->next);
    for (u64 last = first; taken < want && after != 0 && sc_is_block(heap, cls, after); ++taken) {
      last = after;
      after = load_relaxed<S>(&heap.block(last)->next);
    }
    const u64 replacement = sc_pack_head(after, sc_head_tag(current) + 1);
    const u64 seen = cas<S, order::acquire>(head, current, replacement);
    if (seen == current) {
      return SizeClassRun{size_class_status::ok, first, taken};
    }
    // After a sleep, reload: see Backoff::contended.
    current = backoff.contended() ? load_acquire<S>(head) : seen;
  }
}

/// Rust's ListReader::enter: counts a reader of the class's list before the
/// caller loads its head.
template <scope S>
TANDEM_DEVICE void sc_enter_reader(const SizeClassHeap& heap, u64 cls) {
  // Relaxed increment, then a seq_cst fence before the caller's load of the
  // head: with the fence between a merge's take of the list and its load of
  // `readers` (sc_readers_drained), the store-buffering pattern, so either
  // the merge sees this reader or this reader's load sees the take.
  fetch_add<S, order::relaxed>(&heap.header->free_lists[cls].readers, u64{1});
  fence_seq_cst<S>();
}

/// Rust's ListReader drop: the reader is done with the list's headers.
template <scope S>
TANDEM_DEVICE void sc_leave_reader(const SizeClassHeap& heap, u64 cls) {
  // Release pairs with the merge's acquire load of `readers`: what this
  // reader read happens before the merge gives the bytes out.
  fetch_add<S, order::release>(&heap.header->free_lists[cls].readers, ~u64{0});
}

/// `pop`, generalised to a run: takes up to `want` (>= 1) blocks off the
/// class's free list with one compare-and-swap; none when it is empty. With
/// want 1 this is Rust's pop; more is what as many pops in a row would have
/// taken. The walk along the list may read links of blocks that others pop
/// and reuse meanwhile, which only happens if the head moved, and then the
/// compare-and-swap (tag included) fails and the walk is redone: so each
/// link is checked to be a block before it is followed, and a bad one ends
/// the run there (installed as the new head only if the head did not move,
/// that is, if the list really holds it, which is what pops in a row would
/// have installed).
///
/// The pop counts itself in the list's readers from before its load of the
/// head until its last read of a link.
template <scope S>
TANDEM_DEVICE SizeClassRun sc_pop_run(const SizeClassHeap& heap, u64 cls, u64 want) {
  sc_enter_reader<S>(heap, cls);
  const SizeClassRun run = sc_pop_run_counted<S>(heap, cls, want);
  sc_leave_reader<S>(heap, cls);
  return run;
}

/// `recycle_padding`: cuts `[from, to)`, padding a carve skipped, into
/// naturally aligned blocks and frees them.
template <scope S>
TANDEM_DEVICE void sc_recycle_padding(const SizeClassHeap& heap, u64 from, u64 to) {
  for (u64 at = from; at < to;) {
    // at > heap_begin: the heap start is aligned for every class, so a carve
    // from it skips nothing.
    const u64 size = 1ull << trailing_zeros(at - heap.heap_begin);
    const u64 cls = trailing_zeros(size / MIN_BLOCK);
    sc_write_header(heap, at, cls, magic::BLOCK_FREE);
    sc_push_chain<S>(heap, cls, at, at);
    at += size;
  }
}

/// `carve`: `count` new class-`cls` blocks, consecutive, from the bump
/// cursor in one compare-and-swap; returns the first. With count 1 this is
/// Rust's carve; more is what as many carves in a row would have made (the
/// first is aligned for the class, so each following one is too).
template <scope S>
TANDEM_DEVICE SizeClassResult sc_carve(const SizeClassHeap& heap, u64 cls, u64 count = 1) {
  const u64 size = sc_block_size(cls);
  u64* const bump = &heap.header->bump.value;
  Backoff backoff = Backoff::for_races<S>();
  // Relaxed throughout: the cursor only hands out disjoint ranges, which
  // needs the CAS's atomicity and no ordering; blocks reach other threads
  // through pushes (release) or through the caller.
  u64 current = load_relaxed<S>(bump);
  for (;;) {
    if (current < heap.heap_begin || (current - heap.heap_begin) % MIN_BLOCK != 0) {
      return SizeClassResult{size_class_status::corrupt_header, 0};
    }
    const u64 start = heap.heap_begin + ((current - heap.heap_begin + size - 1) & ~(size - 1));
    // count <= 64 lanes and size <= MAX_BLOCK: no overflow of the product.
    const u64 end = start + count * size;
    if (start < current || end < start || end > heap.heap_end) {
      return SizeClassResult{size_class_status::exhausted, 0};
    }
    const u64 seen = cas<S, order::relaxed>(bump, current, end);
    if (seen == current) {
      sc_recycle_padding<S>(heap, current, start);
      return SizeClassResult{size_class_status::ok, start};
    }
    // After a sleep, reload: see Backoff::contended.
    current = backoff.contended() ? load_relaxed<S>(bump) : seen;
  }
}

/// `set_class`: records `cls` in the header of a block the caller holds
/// (split or merged). Relaxed: only its owner reads the field, or a free of a
/// wild pointer (the checks of sc_claim are a guard, not a proof).
template <scope S>
TANDEM_DEVICE void sc_set_class(const SizeClassHeap& heap, u64 off, u64 cls) {
  store_relaxed<S>(&heap.block(off)->class_, static_cast<u32>(cls));
}

/// `split_larger`: pops a block of the smallest larger class that has one and
/// splits it down to `cls`, each upper half pushed on its class's list;
/// returns the last lower half (ok with off 0: no larger block is free). The
/// halves' headers go into the popped block's interior, which no pop can be
/// on its way to: no list holds a block there, and a merge that absorbed one
/// waited for its readers.
template <scope S>
TANDEM_DEVICE SizeClassResult sc_split_larger(const SizeClassHeap& heap, u64 cls) {
  for (u64 larger = cls + 1; larger < SIZE_CLASSES; ++larger) {
    // Relaxed: a hint that skips empty lists; the pop decides.
    if (sc_head_offset(load_relaxed<S>(&heap.header->free_lists[larger].head)) == 0) {
      continue;
    }
    const SizeClassRun popped = sc_pop_run<S>(heap, larger, 1);
    if (popped.status != size_class_status::ok) {
      return SizeClassResult{popped.status, popped.first};
    }
    if (popped.taken == 0) {
      continue;
    }
    for (u64 half = larger; half-- > cls;) {
      const u64 upper = popped.first + sc_block_size(half);
      sc_write_header(heap, upper, half, magic::BLOCK_FREE);
      // The push's release publishes the header to the next owner.
      sc_push_chain<S>(heap, half, upper, upper);
    }
    sc_set_class<S>(heap, popped.first, cls);
    return SizeClassResult{size_class_status::ok, popped.first};
  }
  return SizeClassResult{size_class_status::ok, 0};
}

/// Blocks of the caller's linked through `next` from `first` to `last` (the
/// last link 0): Rust's `Chain`, what a merge sorts and pairs.
struct SizeClassChain {
  u64 first;
  u64 last;
  u64 count;
};

/// `take_list`: takes the class's whole list with one compare-and-swap (the
/// head to empty, the tag moved) and checks it: every link a block of the
/// class, no longer than the heap holds. On a bad list, status
/// corrupt_free_list with the bad entry in `off` and `*out` empty.
template <scope S>
TANDEM_DEVICE SizeClassResult sc_take_list(const SizeClassHeap& heap, u64 cls,
                                           SizeClassChain* out) {
  u64* const head = &heap.header->free_lists[cls].head;
  *out = SizeClassChain{0, 0, 0};
  // Relaxed: the value only seeds the CAS, which checks it.
  u64 current = load_relaxed<S>(head);
  u64 first = 0;
  for (;;) {
    first = sc_head_offset(current);
    if (first == 0) {
      return SizeClassResult{size_class_status::ok, 0};
    }
    // Acquire pairs with the pushes' release (the head's release sequence,
    // as in sc_pop_run): the links and the blocks' earlier owners' writes
    // happen before our use.
    const u64 seen = cas<S, order::acquire>(head, current, sc_pack_head(0, sc_head_tag(current) + 1));
    if (seen == current) {
      break;
    }
    current = seen;
  }
  const u64 most = (heap.heap_end - heap.heap_begin) / sc_block_size(cls);
  SizeClassChain chain{first, first, 0};
  for (u64 off = first; off != 0;) {
    if (!sc_is_block(heap, cls, off) || chain.count == most) {
      return SizeClassResult{size_class_status::corrupt_free_list, off};
    }
    chain.last = off;
    ++chain.count;
    // Relaxed: ordered by the acquire above.
    off = load_relaxed<S>(&heap.block(off)->next);
  }
  *out = chain;
  return SizeClassResult{size_class_status::ok, 0};
}

/// `readers_drained`: whether every list below `cls` was seen without
/// readers after the merge took them.
template <scope S>
TANDEM_DEVICE bool sc_readers_drained(const SizeClassHeap& heap, u64 cls) {
  // seq_cst: pairs with the fence of sc_enter_reader (store-buffering): a
  // reader that loaded a head from before our take counted itself before
  // its fence, and this fence follows the take, so the loads below see it.
  fence_seq_cst<S>();
  for (u64 below = 0; below < cls; ++below) {
    u32 checks = 0;
    // Acquire pairs with the readers' release decrements.
    while (load_acquire<S>(&heap.header->free_lists[below].readers) != 0) {
      if (++checks == size_class::DRAIN_PATIENCE) {
        return false;
      }
      spin_pause();
    }
  }
  return true;
}

/// `append`: `block` (ours) at the end of the chain, its link set to 0.
/// Relaxed: links of the caller's own chains, published by a push's release.
template <scope S>
TANDEM_DEVICE void sc_append(const SizeClassHeap& heap, SizeClassChain& chain, u64 block) {
  if (chain.count == 0) {
    chain.first = block;
  } else {
    store_relaxed<S>(&heap.block(chain.last)->next, block);
  }
  store_relaxed<S>(&heap.block(block)->next, u64{0});
  chain.last = block;
  ++chain.count;
}

/// `cut_after`: cuts the chain at `first` after `count` blocks; returns the
/// block after the cut, 0 if the chain is not longer (or `first` is 0).
template <scope S>
TANDEM_DEVICE u64 sc_cut_after(const SizeClassHeap& heap, u64 first, u64 count) {
  if (first == 0) {
    return 0;
  }
  u64 last = first;
  for (u64 i = 1; i < count; ++i) {
    const u64 after = load_relaxed<S>(&heap.block(last)->next);
    if (after == 0) {
      return 0;
    }
    last = after;
  }
  const u64 after = load_relaxed<S>(&heap.block(last)->next);
  store_relaxed<S>(&heap.block(last)->next, u64{0});
  return after;
}

/// `merge_sorted`: two sorted chains of ours (last links 0) merged into one.
template <scope S>
TANDEM_DEVICE SizeClassChain sc_merge_sorted(const SizeClassHeap& heap, u64 a, u64 b) {
  SizeClassChain merged{0, 0, 0};
  while (a != 0 || b != 0) {
    const bool take_a = b == 0 || (a != 0 && a < b);
    const u64 block = take_a ? a : b;
    const u64 after = load_relaxed<S>(&heap.block(block)->next);
    if (take_a) {
      a = after;
    } else {
      b = after;
    }
    sc_append<S>(heap, merged, block);
  }
  return merged;
}

/// `sort_chain`: the chain (ours) sorted by offset, relinked: a bottom-up
/// merge sort, no memory beyond the links and no recursion.
template <scope S>
TANDEM_DEVICE SizeClassChain sc_sort_chain(const SizeClassHeap& heap, SizeClassChain chain) {
  SizeClassChain sorted = chain;
  for (u64 width = 1; width < chain.count; width *= 2) {
    u64 rest = sorted.first;
    sorted = SizeClassChain{0, 0, 0};
    while (rest != 0) {
      const u64 a = rest;
      const u64 b = sc_cut_after<S>(heap, a, width);
      rest = sc_cut_after<S>(heap, b, width);
      const SizeClassChain merged = sc_merge_sorted<S>(heap, a, b);
      if (sorted.count == 0) {
        sorted = merged;
      } else {
        store_relaxed<S>(&heap.block(sorted.last)->next, merged.first);
        sorted.last = merged.last;
        sorted.count += merged.count;
      }
    }
  }
  return sorted;
}

/// `pair_buddies`: walks the sorted chain at `first` of class-`cls` blocks
/// (ours) and merges each lower buddy with the upper one when that follows
/// it; `*unpaired` gets the blocks left alone, `*merged` the merged blocks of
/// the next class, both sorted.
template <scope S>
TANDEM_DEVICE void sc_pair_buddies(const SizeClassHeap& heap, u64 cls, u64 first,
                                   SizeClassChain* unpaired, SizeClassChain* merged) {
  const u64 size = sc_block_size(cls);
  *unpaired = SizeClassChain{0, 0, 0};
  *merged = SizeClassChain{0, 0, 0};
  for (u64 block = first; block != 0;) {
    const u64 after = load_relaxed<S>(&heap.block(block)->next);
    const bool lower = ((block - heap.heap_begin) & size) == 0;
    if (lower && after == block + size) {
      const u64 beyond = load_relaxed<S>(&heap.block(after)->next);
      // The upper buddy's header is now inside the merged block, which no
      // reader will read (sc_merge_below drained them).
      sc_set_class<S>(heap, block, cls + 1);
      sc_append<S>(heap, *merged, block);
      block = beyond;
    } else {
      sc_append<S>(heap, *unpaired, block);
      block = after;
    }
  }
}

/// `give_back`: pushes the first `classes` chains a merge took (chain `c` of
/// class `c`), unmerged, back on their lists.
template <scope S>
TANDEM_DEVICE void sc_give_back(const SizeClassHeap& heap, const SizeClassChain* taken,
                                u64 classes) {
  for (u64 cls = 0; cls < classes; ++cls) {
    if (taken[cls].count > 0) {
      sc_push_chain<S>(heap, cls, taken[cls].first, taken[cls].last);
    }
  }
}

/// `merge_below`: merges the free blocks of every class below `cls` with
/// their free buddies as far as they go and returns one merged block of
/// `cls` (ok with off 0: none), the rest pushed on their lists. The lists are
/// taken whole, then the merge waits until no pop is left on them (a pop
/// that loaded a head before the take may still read a taken block's
/// header, which a merge puts inside a larger block), or gives the blocks
/// back unmerged when one outlasts size_class::DRAIN_PATIENCE checks; then
/// from the smallest class up it sorts the blocks with those merged from
/// below, pairs buddies, and pushes the unpaired ones back. See Rust's
/// `merge_below` for why concurrent merges need no lock.
template <scope S>
TANDEM_DEVICE SizeClassResult sc_merge_below(const SizeClassHeap& heap, u64 cls) {
  SizeClassChain taken[SIZE_CLASSES];
  u64 any = 0;
  for (u64 below = 0; below < cls; ++below) {
    const SizeClassResult took = sc_take_list<S>(heap, below, &taken[below]);
    if (took.status != size_class_status::ok) {
      sc_give_back<S>(heap, taken, below);
      return took;
    }
    any += taken[below].count;
  }
  if (any == 0) {
    return SizeClassResult{size_class_status::ok, 0};
  }
  if (!sc_readers_drained<S>(heap, cls)) {
    sc_give_back<S>(heap, taken, cls);
    return SizeClassResult{size_class_status::ok, 0};
  }
  SizeClassChain carried{0, 0, 0};
  for (u64 below = 0; below < cls; ++below) {
    const SizeClassChain sorted = sc_sort_chain<S>(heap, taken[below]);
    const SizeClassChain all = sc_merge_sorted<S>(heap, sorted.first, carried.first);
    SizeClassChain unpaired;
    sc_pair_buddies<S>(heap, below, all.first, &unpaired, &carried);
    if (unpaired.count > 0) {
      sc_push_chain<S>(heap, below, unpaired.first, unpaired.last);
    }
  }
  if (carried.count > 1) {
    const u64 second = load_relaxed<S>(&heap.block(carried.first)->next);
    sc_push_chain<S>(heap, cls, second, carried.last);
  }
  return SizeClassResult{size_class_status::ok, carried.first};
}

/// `take_fresh`: a free block of `cls` for a request whose list was empty:
/// carved, else split from a larger free block, else merged from free
/// buddies below; its header marks it free and of `cls`, the caller's.
/// Exhausted only when none of the three finds the memory.
template <scope S>
TANDEM_DEVICE SizeClassResult sc_take_fresh(const SizeClassHeap& heap, u64 cls) {
  SizeClassResult got = sc_carve<S>(heap, cls);
  if (got.status == size_class_status::ok) {
    sc_write_header(heap, got.off, cls, magic::BLOCK_FREE);
    return got;
  }
  if (got.status != size_class_status::exhausted) {
    return got;
  }
  got = sc_split_larger<S>(heap, cls);
  if (got.status != size_class_status::ok || got.off != 0) {
    return got;
  }
  got = sc_merge_below<S>(heap, cls);
  if (got.status != size_class_status::ok || got.off != 0) {
    return got;
  }
  return SizeClassResult{size_class_status::exhausted, 0};
}

/// The tail of `allocate`: marks `block` (class `cls`, exclusively the
/// caller's, its header marked free) allocated for data at `block + pad`, and
/// returns the data offset.
template <scope S>
TANDEM_DEVICE SizeClassResult sc_hand_out(const SizeClassHeap& heap, u64 block, u64 cls, u64 pad) {
  // The header existed before we got the block: a pop that loaded it as a
  // list head just before we took it may still read its `next`, so the
  // header is updated field by field, atomically, never rewritten whole.
  // Relaxed: whoever frees the block received the pointer through its own
  // synchronisation, which orders these stores before it.
  u32* const state = &heap.block(block)->state;
  if (pad == size_class::HEADER) {
    store_relaxed<S>(state, magic::BLOCK_ALLOCATED);
  } else {
    store_relaxed<S>(state, size_class::BLOCK_HOLDS_ALIGNED);
    // Inside our block past its own header, where only its owner writes.
    sc_write_header(heap, block + pad - size_class::HEADER, cls, magic::BLOCK_ALLOCATED);
  }
  return SizeClassResult{size_class_status::ok, block + pad};
}

/// A block a free has claimed: checked and marked free, not yet on a list.
struct SizeClassClaim {
  SizeClassResult result;
  u64 block;
  u64 cls;
};

/// `free` up to its push: validates `ptr` exactly as Rust does and claims the
/// block by a compare-and-swap of its state.
template <scope S>
TANDEM_DEVICE SizeClassClaim sc_claim(const SizeClassHeap& heap, ShmPtr<u8> ptr) {
  using namespace size_class;
  SizeClassClaim c{{size_class_status::ok, ptr.off}, 0, 0};
  if (ptr.alloc_id.major != heap.id.major || ptr.alloc_id.minor != heap.id.minor) {
    c.result = SizeClassResult{size_class_status::wrong_allocator, 0};
    return c;
  }
  const u64 data = ptr.off;
  const SizeClassResult not_owned{size_class_status::not_owned, data};
  if (data % MIN_DATA_ALIGN != 0 || data < heap.heap_begin + HEADER || data >= heap.heap_end) {
    c.result = not_owned;
    return c;
  }
  const u64 header_off = data - HEADER;
  u32* const state = &heap.block(header_off)->state;
  // Relaxed: an early check only; the CAS below decides.
  const u32 seen_state = load_relaxed<S>(state);
  if (seen_state == magic::BLOCK_FREE) {
    c.result = SizeClassResult{size_class_status::double_free, data};
    return c;
  }
  if (seen_state != magic::BLOCK_ALLOCATED) {
    c.result = not_owned;
    return c;
  }
  // Relaxed (Rust reads it plainly): the class is written before the header
  // is handed out and never changes while the block is allocated; an atomic
  // load only keeps a GPU from reading a stale cached copy.
  const u64 cls = load_relaxed<S>(&heap.block(header_off)->class_);
  if (cls >= SIZE_CLASSES) {
    c.result = not_owned;
    return c;
  }
  const u64 size = sc_block_size(cls);
  const u64 block = heap.heap_begin + ((header_off - heap.heap_begin) & ~(size - 1));
  // Relaxed: the block was carved before the pointer reached us, so the
  // cursor we read is at least past it if the pointer is genuine.
  const u64 carved_end = load_relaxed<S>(&heap.header->bump.value);
  if (block + size < block || block + size > carved_end) {
    c.result = not_owned;
    return c;
  }
  const bool aligned = data - block != HEADER;
  if (aligned) {
    // Relaxed, as the loads above: checks of fields the block's owner wrote
    // before the pointer reached us.
    BlockHeader* const outer = heap.block(block);
    if (data - block < 2 * HEADER || load_relaxed<S>(&outer->state) != BLOCK_HOLDS_ALIGNED ||
        load_relaxed<S>(&outer->class_) != cls) {
      c.result = not_owned;
      return c;
    }
  }
  // Relaxed: atomicity alone makes one of two racing frees win; the block's
  // contents are handed on by the push's release.
  if (cas<S, order::relaxed>(state, magic::BLOCK_ALLOCATED, magic::BLOCK_FREE) !=
      magic::BLOCK_ALLOCATED) {
    c.result = SizeClassResult{size_class_status::double_free, data};
    return c;
  }
  if (aligned) {
    // Relaxed: we own the block until it is pushed (release).
    store_relaxed<S>(&heap.block(block)->state, magic::BLOCK_FREE);
  }
  c.block = block;
  c.cls = cls;
  return c;
}

}  // namespace detail

/// `SizeClassAllocator::attach`: validates the allocator header at `header`
/// (offset 0 of a region of `len` bytes) and fills `*out`. Nothing is written.
template <scope S = scope::system>
TANDEM_DEVICE size_class_status size_class_attach(SizeClassHeader* header, u64 len,
                                                  SizeClassHeap* out) {
  using namespace size_class;
  const u64 addr = reinterpret_cast<u64>(header);
  if (addr == 0 || addr % REGION_ALIGN != 0) {
    return size_class_status::bad_region_base;
  }
  if (len < sizeof(SizeClassHeader)) {
    return size_class_status::region_too_small;
  }
  // Acquire: pairs with the initialiser's release store of the magic word
  // (Rust's publish_magic), so the plain fields read below are the
  // initialised ones; they are never written again.
  if (load_acquire<S>(&header->magic) != magic::SIZE_CLASS) {
    return size_class_status::bad_magic;
  }
  const u64 heap_begin = header->heap_begin;
  const u64 heap_end = header->heap_end;
  const AllocatorId id = header->id;
  if (heap_end > len) {
    return size_class_status::region_too_small;
  }
  const bool null_id = id.major == NULL_ALLOCATOR_ID.major && id.minor == NULL_ALLOCATOR_ID.minor;
  if (null_id || heap_begin < sizeof(SizeClassHeader) || heap_begin % HEAP_ALIGN != 0 ||
      heap_begin > heap_end || heap_end > MAX_HEAP_END) {
    return size_class_status::corrupt_header;
  }
  *out = SizeClassHeap{header, id, heap_begin, heap_end};
  return size_class_status::ok;
}

namespace detail {

/// `allocate` after its checks: a block of the request's class from the free
/// list, else carved, split or merged (sc_take_fresh), handed out.
template <scope S>
TANDEM_DEVICE SizeClassResult sc_allocate(const SizeClassHeap& heap, const SizeClassRequest& req) {
  const SizeClassRun popped = sc_pop_run<S>(heap, req.cls, 1);
  SizeClassResult got{popped.status, popped.first};
  if (got.status != size_class_status::ok) {
    return got;
  }
  if (got.off == 0) {
    got = sc_take_fresh<S>(heap, req.cls);
    if (got.status != size_class_status::ok) {
      return got;
    }
  }
  return sc_hand_out<S>(heap, got.off, req.cls, req.pad);
}

/// sc_allocate for the lanes of `group` (led by `leader`), which all need a
/// block of the request's class at once: the leader takes one run off the
/// free list and carves the rest in one more run, so the group pays two
/// shared compare-and-swaps however many lanes it has, and hands the blocks
/// out lane by lane. Every lane of `group` must call it. A lane left without
/// a block (the carve found the heap too short for the whole rest) goes on
/// alone, as sc_allocate would, so exhaustion is reported only when a
/// single block cannot be had either.
template <scope S>
TANDEM_DEVICE SizeClassResult sc_allocate_group(const SizeClassHeap& heap,
                                                const SizeClassRequest& req, lane_mask group,
                                                u32 leader) {
  const u32 lane = lane_id();
  const u64 lanes = lane_count(group);
  const u64 rank = lane_count(group & lanes_below(lane));
  SizeClassRun popped{size_class_status::ok, 0, 0};
  u64 carved = 0;
  if (lane == leader) {
    popped = sc_pop_run<S>(heap, req.cls, lanes);
    if (popped.status == size_class_status::ok && popped.taken < lanes) {
      const SizeClassResult c = sc_carve<S>(heap, req.cls, lanes - popped.taken);
      carved = c.status == size_class_status::ok ? c.off : 0;
    }
  }
  const auto status = static_cast<size_class_status>(
      broadcast(group, static_cast<u64>(popped.status), leader));
  if (status != size_class_status::ok) {
    return SizeClassResult{status, broadcast(group, popped.first, leader)};
  }
  // The popped blocks one by one along their links, which the leader
  // follows (the run is its own now); then each lane's place in the carve.
  const u64 taken = broadcast(group, popped.taken, leader);
  u64 mine = 0;
  u64 block = popped.first;
  for (u64 i = 0; i < taken; ++i) {
    const u64 handed = broadcast(group, block, leader);
    if (rank == i) {
      mine = handed;
    }
    if (lane == leader && i + 1 < taken) {
      // Relaxed: links of our own run, ordered by sc_pop_run's acquire.
      block = load_relaxed<S>(&heap.block(block)->next);
    }
  }
  carved = broadcast(group, carved, leader);
  const bool fresh = mine == 0 && carved != 0;
  if (fresh) {
    mine = carved + (rank - taken) * sc_block_size(req.cls);
  }
  // The leader's acquire (and its carve) happen before the lanes use the
  // blocks it handed them.
  warp_sync(group);
  if (mine == 0) {
    return sc_allocate<S>(heap, req);
  }
  if (fresh) {
    sc_write_header(heap, mine, req.cls, magic::BLOCK_FREE);
  }
  return sc_hand_out<S>(heap, mine, req.cls, req.pad);
}

/// sc_allocate for every lane that calls it together (the cache-miss path):
/// the lanes split into groups by class, and each group allocates with
/// sc_allocate_group, so a warp whose threads all miss at once costs each
/// class's head one or two operations instead of one per lane.
template <scope S>
TANDEM_DEVICE SizeClassResult sc_allocate_together(const SizeClassHeap& heap,
                                                   const SizeClassRequest& req) {
  const lane_mask group = key_peers(req.cls);
  return sc_allocate_group<S>(heap, req, group, lowest_lane(group));
}

}  // namespace detail

/// `SizeClassAllocator::allocate`: `size` bytes aligned to `align` (a power
/// of two up to size_class::MAX_ALIGN, and no more than the region base's own
/// alignment), from the class's free list if it has a block, else carved.
template <scope S = scope::system>
TANDEM_DEVICE SizeClassResult size_class_allocate(const SizeClassHeap& heap, u64 size, u64 align) {
  const detail::SizeClassRequest req = detail::sc_request(heap, size, align);
  if (req.status != size_class_status::ok) {
    return SizeClassResult{req.status, 0};
  }
  return detail::sc_allocate<S>(heap, req);
}

/// `SizeClassAllocator::free`: returns an allocation to its class's free
/// list, refusing what Rust refuses (another allocator's pointer, an offset
/// that is not an allocation's data start, a double free). Like Rust's, the
/// checks catch stale and wild pointers but are a guard, not a proof.
template <scope S = scope::system>
TANDEM_DEVICE SizeClassResult size_class_free(const SizeClassHeap& heap, ShmPtr<u8> ptr) {
  const detail::SizeClassClaim c = detail::sc_claim<S>(heap, ptr);
  if (c.result.status == size_class_status::ok) {
    detail::sc_push_chain<S>(heap, c.cls, c.block, c.block);
  }
  return c.result;
}

// ---------------------------------------------------------------------------
// Thread cache
// ---------------------------------------------------------------------------

/// One thread's cache of free blocks, a C++-side layer above the shared heap
/// (like glibc's tcache): size_class_cached_free validates and claims a block
/// exactly as size_class_free does (so a double free is still refused, from
/// C++ and from Rust), but keeps it in the thread's bin for its class instead
/// of pushing it; size_class_cached_allocate serves from that bin first. A
/// thread that frees what it allocated thus never touches the class's head,
/// the one word every thread would otherwise serialise on.
///
/// Blocks in a cache are marked free but are on no list: invisible to every
/// other thread and to Rust (its stats count them as neither free nor
/// allocated) until size_class_flush pushes them back. Flush before the
/// thread ends or the cache is dropped, or they are lost to the heap.
///
/// A miss goes to the shared heap together with the lanes of the warp that
/// miss at the same time (sc_allocate_together), and size_class_flush pools
/// each class's bins of the lanes that flush it together: call both from
/// code the lanes of a warp may reach together, never from inside a
/// lane-private spin.
///
/// Bins link blocks through their headers' `next` words (written atomically,
/// as a push does, since a stale pop may read them) and hold at most
/// BIN_CAPACITY blocks; a free into a full bin goes to the shared list. A
/// cache belongs to one thread and lives in its registers or local memory;
/// start it empty: `tandem::SizeClassCache cache = {};`.
struct SizeClassCache {
  static constexpr u32 BIN_CAPACITY = 16;
  /// First block of each class's bin (offset 0: empty).
  u64 first[SIZE_CLASSES];
  /// Blocks in each bin.
  u32 count[SIZE_CLASSES];
};

/// size_class_allocate, served from the thread's cache when its bin for the
/// request's class has a block (same outcome as popping it from the list).
template <scope S = scope::system>
TANDEM_DEVICE SizeClassResult size_class_cached_allocate(const SizeClassHeap& heap,
                                                         SizeClassCache& cache, u64 size,
                                                         u64 align) {
  const detail::SizeClassRequest req = detail::sc_request(heap, size, align);
  if (req.status != size_class_status::ok) {
    return SizeClassResult{req.status, 0};
  }
  const u64 block = cache.first[req.cls];
  if (block == 0) {
    return detail::sc_allocate_together<S>(heap, req);
  }
  // Relaxed: this thread wrote the link itself.
  cache.first[req.cls] = load_relaxed<S>(&heap.block(block)->next);
  --cache.count[req.cls];
  return detail::sc_hand_out<S>(heap, block, req.cls, req.pad);
}

/// size_class_free into the thread's cache (or to the shared list when the
/// class's bin is full).
template <scope S = scope::system>
TANDEM_DEVICE SizeClassResult size_class_cached_free(const SizeClassHeap& heap,
                                                     SizeClassCache& cache, ShmPtr<u8> ptr) {
  const detail::SizeClassClaim c = detail::sc_claim<S>(heap, ptr);
  if (c.result.status != size_class_status::ok) {
    return c.result;
  }
  if (cache.count[c.cls] == SizeClassCache::BIN_CAPACITY) {
    detail::sc_push_chain<S>(heap, c.cls, c.block, c.block);
    return c.result;
  }
  // Relaxed: only this thread follows the link until a flush publishes it
  // with a release.
  store_relaxed<S>(&heap.block(c.block)->next, cache.first[c.cls]);
  cache.first[c.cls] = c.block;
  ++cache.count[c.cls];
  return c.result;
}

/// Pushes every cached block back onto its class's shared list and empties
/// the cache. The lanes that flush a class together pool it: for each class,
/// the lanes holding a bin of it at that moment (key_peers, taken right
/// before the collectives that use it) link their chains lane to lane, and
/// the lowest of them pushes the whole chain with one compare-and-swap. A
/// group is formed anew for every class: one mask taken at the start and
/// kept through every class's pushes, which spin and sleep lane by lane, was
/// seen on sm_90 to put a lane's chain on another class's list
/// (docs/perf/2026-12-02-h200-size-class-flush.md).
template <scope S = scope::system>
TANDEM_DEVICE void size_class_flush(const SizeClassHeap& heap, SizeClassCache& cache) {
  const u32 lane = lane_id();
  for (u64 cls = 0; cls < SIZE_CLASSES; ++cls) {
    const u64 first = cache.first[cls];
    if (first == 0) {
      continue;
    }
    u64 last = first;
    for (u32 i = 1; i < cache.count[cls]; ++i) {
      // Relaxed: links this thread wrote.
      last = load_relaxed<S>(&heap.block(last)->next);
    }
    const lane_mask holders = key_peers(cls);
    // Each holder links its chain to the next holder's above it.
    const lane_mask above = holders & ~lanes_below(lane) & ~(lane_mask{1} << lane);
    const u64 next_first = broadcast(holders, first, above != 0 ? lowest_lane(above) : lane);
    if (above != 0) {
      // Relaxed: the pushing lane's release covers it (warp_sync below).
      store_relaxed<S>(&heap.block(last)->next, next_first);
    }
    const u64 chain_last = broadcast(holders, last, highest_lane(holders));
    // Every holder's links (and its earlier writes to its blocks) happen
    // before the push's release.
    warp_sync(holders);
    if (lane == lowest_lane(holders)) {
      detail::sc_push_chain<S>(heap, cls, first, chain_last);
    }
    cache.first[cls] = 0;
    cache.count[cls] = 0;
  }
}

}  // namespace tandem
