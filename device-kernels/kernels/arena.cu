// Kernels over tandem-shm-core's bump arena, used by the cross-language tests
// and as the reference use of tandem/arena.h.
#include "tandem/arena.h"

using tandem::u32;
using tandem::u64;

/// Every thread allocates `size` bytes aligned to `align` from the arena at
/// `arena`: result[2r] = alloc_status, result[2r + 1] = offset, r its global
/// rank.
TANDEM_KERNEL tandem_arena_allocate(tandem::ArenaHeader* arena, u64 size, u64 align, u64* result) {
  const u64 r = tandem::global_rank();
  const tandem::AllocResult a = tandem::arena_reserve(arena, size, align);
  result[2 * r] = static_cast<u64>(a.status);
  result[2 * r + 1] = a.off;
}

/// Global rank 0 carves a `size`-byte sub-arena into `*out`;
/// `*status` = alloc_status.
TANDEM_KERNEL tandem_arena_carve(tandem::ArenaHeader* arena, u64 size, tandem::ThreadArena* out,
                                 u64* status) {
  if (tandem::global_rank() == 0) {
    *status = static_cast<u64>(tandem::arena_carve(arena, size, out));
  }
}

/// Global rank 0 allocates from the sub-arena `*arena` (which it owns for the
/// call): result[0] = alloc_status, result[1] = offset.
TANDEM_KERNEL tandem_thread_arena_allocate(tandem::ThreadArena* arena, u64 size, u64 align,
                                           u64* result) {
  if (tandem::global_rank() == 0) {
    const tandem::AllocResult a = tandem::thread_arena_allocate(arena, size, align);
    result[0] = static_cast<u64>(a.status);
    result[1] = a.off;
  }
}

/// Each block carves `block_bytes` into its BlockArena; each thread then
/// allocates `size` bytes (8-aligned), fills them with its global rank, and
/// writes the buffer's offset to out[rank] (~0 when it got none).
TANDEM_KERNEL tandem_block_arena_fill(tandem::ArenaHeader* arena, u64 block_bytes, u64 size,
                                      u64* out) {
  TANDEM_SHARED(tandem::BlockArena, ctx);
  tandem::block_arena_init(ctx, arena, block_bytes);
  const u64 r = tandem::global_rank();
  const tandem::FullPtr<tandem::u8> buf = tandem::block_arena_allocate(ctx, size, 8);
  if (buf.ptr == nullptr) {
    out[r] = ~0ull;
    return;
  }
  u64* words = reinterpret_cast<u64*>(buf.ptr);
  for (u64 i = 0; i < size / 8; ++i) {
    words[i] = r;
  }
  out[r] = buf.shm.off;
}
