// Device-side operations of tandem-shm-core's bump arena (shm-core/src/arena.rs)
// over the shared layouts of tandem/layout.h: the same algorithm, so Rust and
// C++ can allocate from one arena at the same time.
//
// The arena's cursor is taken with scope S: scope::system (the default) when
// the arena lives in memory the CPU or other devices allocate from too
// (pinned, managed, host shared memory); scope::device when only this GPU's
// kernels use it.
#pragma once

#include "tandem/atomic.h"
#include "tandem/layout.h"
#include "tandem/portability.h"

namespace tandem {

/// Why an allocation failed: the subset of shm-core's `AllocError` a kernel
/// can meet (u32 so that a kernel can report it through memory).
enum class alloc_status : u32 {
  ok = 0,
  zero_size = 1,
  bad_alignment = 2,
  too_large = 3,
  exhausted = 4,
};

/// An offset into an allocator's region, or why there is none.
struct AllocResult {
  alloc_status status;
  u64 off;
};

/// The null portable pointer (`ShmPtr::null()`).
template <typename T>
TANDEM_HOST_DEVICE ShmPtr<T> null_shm_ptr() {
  return ShmPtr<T>{NULL_ALLOCATOR_ID, ~0ull};
}

/// The null full pointer (`FullPtr::null()`).
template <typename T>
TANDEM_HOST_DEVICE FullPtr<T> null_full_ptr() {
  return FullPtr<T>{nullptr, null_shm_ptr<T>()};
}

namespace detail {

TANDEM_HOST_DEVICE bool is_power_of_two(u64 v) { return v != 0 && (v & (v - 1)) == 0; }

/// `value` rounded up to `align` (a power of two); false on overflow.
TANDEM_HOST_DEVICE bool align_up(u64 value, u64 align, u64* out) {
  const u64 bumped = value + (align - 1);
  if (bumped < value) {
    return false;
  }
  *out = bumped & ~(align - 1);
  return true;
}

/// `check_request` of region.rs.
TANDEM_HOST_DEVICE alloc_status check_request(u64 size, u64 align) {
  if (size == 0) {
    return alloc_status::zero_size;
  }
  return is_power_of_two(align) ? alloc_status::ok : alloc_status::bad_alignment;
}

}  // namespace detail

/// `ArenaAllocator::reserve`: moves the cursor of the arena whose header is
/// at `header` (offset 0 of its region) past `size` bytes whose *address* is
/// aligned to `align`, and returns their offset. A compare-and-swap loop, so a
/// request that does not fit never moves the cursor.
template <scope S = scope::system>
TANDEM_DEVICE AllocResult arena_reserve(ArenaHeader* header, u64 size, u64 align) {
  const alloc_status request = detail::check_request(size, align);
  if (request != alloc_status::ok) {
    return AllocResult{request, 0};
  }
  const u64 heap_begin = header->heap_begin;
  const u64 heap_end = header->heap_end;
  if (size > heap_end - heap_begin) {
    return AllocResult{alloc_status::too_large, 0};
  }
  const u64 base = reinterpret_cast<u64>(header);
  u64* const cursor = &header->cursor.value;
  // Acquire, here and on both outcomes of the CAS, as in Rust: pairs with the
  // Release of a reset so memory handed out again is ordered after the reset.
  // Exclusivity of the range needs only the atomicity of the CAS.
  u64 current = load_acquire<S>(cursor);
  for (;;) {
    u64 start_addr;
    if (base + current < base || !detail::align_up(base + current, align, &start_addr)) {
      return AllocResult{alloc_status::exhausted, 0};
    }
    const u64 start = start_addr - base;
    const u64 end = start + size;
    if (end < start || end > heap_end) {
      return AllocResult{alloc_status::exhausted, 0};
    }
    const u64 seen = cas<S, order::acquire>(cursor, current, end);
    if (seen == current) {
      return AllocResult{alloc_status::ok, start};
    }
    current = seen;
  }
}

/// `ArenaAllocator::allocate_full`: `size` bytes aligned to `align`, or the
/// null FullPtr (with `*status` saying why, when given).
template <scope S = scope::system>
TANDEM_DEVICE FullPtr<u8> arena_allocate(ArenaHeader* header, u64 size, u64 align,
                                         alloc_status* status = nullptr) {
  const AllocResult r = arena_reserve<S>(header, size, align);
  if (status != nullptr) {
    *status = r.status;
  }
  if (r.status != alloc_status::ok) {
    return null_full_ptr<u8>();
  }
  return FullPtr<u8>{reinterpret_cast<u8*>(header) + r.off, ShmPtr<u8>{header->id, r.off}};
}

/// `ArenaAllocator::carve`: reserves `size` bytes on a cache line of their own
/// for a ThreadArena.
template <scope S = scope::system>
TANDEM_DEVICE alloc_status arena_carve(ArenaHeader* header, u64 size, ThreadArena* out) {
  const alloc_status request = detail::check_request(size, 1);
  if (request != alloc_status::ok) {
    return request;
  }
  const AllocResult r = arena_reserve<S>(header, size, CACHE_LINE);
  if (r.status == alloc_status::ok) {
    *out = ThreadArena{header->id, r.off, r.off + size};
  }
  return r.status;
}

/// `ThreadArena::allocate`: plain arithmetic on a sub-arena one thread owns;
/// the *offset* is aligned (see arena.rs). Returns the offset.
TANDEM_DEVICE AllocResult thread_arena_allocate(ThreadArena* arena, u64 size, u64 align) {
  const alloc_status request = detail::check_request(size, align);
  if (request != alloc_status::ok) {
    return AllocResult{request, 0};
  }
  u64 start;
  if (!detail::align_up(arena->cursor, align, &start) || start + size < start ||
      start + size > arena->end) {
    return AllocResult{alloc_status::exhausted, 0};
  }
  arena->cursor = start + size;
  return AllocResult{alloc_status::ok, start};
}

// ---------------------------------------------------------------------------
// A block's allocation context
// ---------------------------------------------------------------------------

/// Per-block allocation state, declared `TANDEM_SHARED(tandem::BlockArena, ctx)`
/// and set up by block_arena_init: one sub-arena carved for the whole block,
/// from which every thread allocates with block-scope atomics (shared-memory
/// atomics on a GPU: no traffic to the arena's cursor after the carve).
struct BlockArena {
  ArenaHeader* header;
  ThreadArena arena;
  /// alloc_status of the carve; allocations fail while it is not ok.
  alloc_status carved;
};

/// Sets up `ctx` for the block: thread 0 carves `bytes` from the arena at
/// `header`, then a barrier publishes the context to every thread. Needs no
/// constructor (shared memory is never constructed). Every thread of the
/// block must call it, the same way it would reach a barrier.
template <scope S = scope::system>
TANDEM_DEVICE void block_arena_init(BlockArena& ctx, ArenaHeader* header, u64 bytes) {
  if (thread_rank() == 0) {
    ctx.header = header;
    ctx.carved = arena_carve<S>(header, bytes, &ctx.arena);
  }
  block_barrier();
}

/// Allocates `size` bytes aligned to `align` (an offset alignment, as
/// ThreadArena) from the block's sub-arena; any thread, any time after
/// block_arena_init. Returns the null FullPtr when the sub-arena cannot serve
/// it.
TANDEM_DEVICE FullPtr<u8> block_arena_allocate(BlockArena& ctx, u64 size, u64 align) {
  if (ctx.carved != alloc_status::ok || detail::check_request(size, align) != alloc_status::ok) {
    return null_full_ptr<u8>();
  }
  u64* const cursor = &ctx.arena.cursor;
  const u64 end = ctx.arena.end;
  // Relaxed: the threads of the block only need distinct ranges, which the
  // CAS's atomicity gives; nothing else is published through the cursor.
  u64 current = load_relaxed<scope::block>(cursor);
  for (;;) {
    u64 start;
    if (!detail::align_up(current, align, &start) || start + size < start || start + size > end) {
      return null_full_ptr<u8>();
    }
    const u64 seen = cas<scope::block, order::relaxed>(cursor, current, start + size);
    if (seen == current) {
      return FullPtr<u8>{reinterpret_cast<u8*>(ctx.header) + start,
                         ShmPtr<u8>{ctx.arena.id, start}};
    }
    current = seen;
  }
}

/// Carves a ThreadArena of `size` bytes (on a cache line of its own) for the
/// calling thread from the block's sub-arena: one shared-memory atomic, after
/// which the thread allocates with plain arithmetic (thread_arena_allocate).
/// The per-thread path of the arena -> block -> thread hierarchy.
TANDEM_DEVICE alloc_status block_arena_carve(BlockArena& ctx, u64 size, ThreadArena* out) {
  const FullPtr<u8> mem = block_arena_allocate(ctx, size, CACHE_LINE);
  if (mem.ptr == nullptr) {
    return ctx.carved != alloc_status::ok ? ctx.carved : alloc_status::exhausted;
  }
  *out = ThreadArena{ctx.arena.id, mem.shm.off, mem.shm.off + size};
  return alloc_status::ok;
}

}  // namespace tandem
