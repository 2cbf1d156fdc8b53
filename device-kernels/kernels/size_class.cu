// Kernels over tandem-shm-core's freeing allocator, used by the
// cross-language tests and as the reference use of tandem/size_class.h. Every
// kernel takes the allocator's header (offset 0 of its region) and the
// region's length, and attaches first; the heap is shared with Rust, so all
// of them use the default scope::system.
#include "tandem/size_class.h"

using tandem::u32;
using tandem::u64;
using tandem::u8;

/// Every thread allocates `size` bytes aligned to `align`:
/// result[2r] = size_class_status (of the attach when it failed),
/// result[2r + 1] = SizeClassResult::off, r its global rank.
TANDEM_KERNEL tandem_size_class_allocate(tandem::SizeClassHeader* heap, u64 len, u64 size,
                                         u64 align, u64* result) {
  const u64 r = tandem::global_rank();
  tandem::SizeClassHeap h;
  tandem::SizeClassResult a{tandem::size_class_attach(heap, len, &h), 0};
  if (a.status == tandem::size_class_status::ok) {
    a = tandem::size_class_allocate(h, size, align);
  }
  result[2 * r] = static_cast<u64>(a.status);
  result[2 * r + 1] = a.off;
}

/// Every thread frees the pointer {major, minor, off} (so a launch of many
/// threads races frees of one block; a barrier lines the threads of a block
/// up first): result[2r] = size_class_status, result[2r + 1] =
/// SizeClassResult::off.
TANDEM_KERNEL tandem_size_class_free(tandem::SizeClassHeader* heap, u64 len, u32 major, u32 minor,
                                     u64 off, u64* result) {
  const u64 r = tandem::global_rank();
  tandem::SizeClassHeap h;
  tandem::SizeClassResult f{tandem::size_class_attach(heap, len, &h), 0};
  tandem::block_barrier();
  if (f.status == tandem::size_class_status::ok) {
    f = tandem::size_class_free(h, tandem::ShmPtr<u8>{tandem::AllocatorId{major, minor}, off});
  }
  result[2 * r] = static_cast<u64>(f.status);
  result[2 * r + 1] = f.off;
}

/// Global rank 0 exercises a SizeClassCache: allocates `count` blocks of
/// `size` bytes aligned to `align` into out[0..count), frees them all (in that
/// order) into the cache, allocates `count` again into out[count..2count),
/// frees those too, frees out[count] once more (a double free), and flushes
/// the cache when `flush` is non-zero. out[2count] = the first failing
/// size_class_status (0: none), out[2count + 1] = that of the double free.
TANDEM_KERNEL tandem_size_class_cache_cycle(tandem::SizeClassHeader* heap, u64 len, u64 size,
                                            u64 align, u64 count, u32 flush, u64* out) {
  if (tandem::global_rank() != 0) {
    return;
  }
  using tandem::size_class_status;
  tandem::SizeClassHeap h;
  size_class_status failed = tandem::size_class_attach(heap, len, &h);
  tandem::SizeClassCache cache = {};
  for (u64 round = 0; round < 2 && failed == size_class_status::ok; ++round) {
    for (u64 i = 0; i < count && failed == size_class_status::ok; ++i) {
      const tandem::SizeClassResult a = tandem::size_class_cached_allocate(h, cache, size, align);
      failed = a.status;
      out[round * count + i] = a.off;
    }
    for (u64 i = 0; i < count && failed == size_class_status::ok; ++i) {
      const tandem::ShmPtr<u8> p{h.id, out[round * count + i]};
      failed = tandem::size_class_cached_free(h, cache, p).status;
    }
  }
  out[2 * count] = static_cast<u64>(failed);
  if (failed != size_class_status::ok) {
    return;
  }
  const tandem::ShmPtr<u8> again{h.id, out[count]};
  out[2 * count + 1] = static_cast<u64>(tandem::size_class_cached_free(h, cache, again).status);
  if (flush != 0) {
    tandem::size_class_flush(h, cache);
  }
}

/// Live allocations each stress thread juggles.
constexpr u64 STRESS_SLOTS = 4;

/// Concurrent allocation and freeing, meant to run while Rust threads use the
/// same heap. Every thread runs `rounds` rounds; round i reuses slot
/// i % STRESS_SLOTS: it checks that the slot's allocation still holds the tag
/// it was filled with and frees it, then allocates 8..512 bytes (aligned to 64
/// every fifth round, else 8) and fills every word with the tag
/// (r << 32 | i). Halfway through, it frees the block Rust allocated for it,
/// to_free[r] (unless ~0). With `cached` non-zero it goes through a
/// SizeClassCache, flushed at the end. It leaves its last allocations live
/// for Rust to free: left[r * STRESS_SLOTS + s] = offset, or ~0.
/// stats[0] += failed allocations, stats[1] += allocations found overwritten,
/// stats[2] += failed frees, stats[3] += failed attaches.
TANDEM_KERNEL tandem_size_class_stress(tandem::SizeClassHeader* heap, u64 len, u64 rounds,
                                       u32 cached, const u64* to_free, u64* left, u64* stats) {
  using tandem::order;
  using tandem::scope;
  using tandem::size_class_status;
  const u64 r = tandem::global_rank();
  tandem::SizeClassHeap h;
  if (tandem::size_class_attach(heap, len, &h) != size_class_status::ok) {
    tandem::fetch_add<scope::system, order::relaxed>(&stats[3], u64{1});
    return;
  }
  tandem::SizeClassCache cache = {};
  u64 live[STRESS_SLOTS] = {~0ull, ~0ull, ~0ull, ~0ull};
  u64 words[STRESS_SLOTS] = {};
  u64 tags[STRESS_SLOTS] = {};
  u64 failed_allocs = 0;
  u64 overwritten = 0;
  u64 failed_frees = 0;
  for (u64 i = 0; i < rounds; ++i) {
    if (i == rounds / 2 && to_free[r] != ~0ull) {
      const tandem::ShmPtr<u8> p{h.id, to_free[r]};
      const tandem::SizeClassResult f =
          cached ? tandem::size_class_cached_free(h, cache, p) : tandem::size_class_free(h, p);
      failed_frees += f.status != size_class_status::ok;
    }
    const u64 s = i % STRESS_SLOTS;
    if (live[s] != ~0ull) {
      const u64* data = reinterpret_cast<const u64*>(h.address(live[s]));
      for (u64 w = 0; w < words[s]; ++w) {
        if (data[w] != tags[s]) {
          ++overwritten;
          break;
        }
      }
      const tandem::ShmPtr<u8> p{h.id, live[s]};
      const tandem::SizeClassResult f =
          cached ? tandem::size_class_cached_free(h, cache, p) : tandem::size_class_free(h, p);
      failed_frees += f.status != size_class_status::ok;
      live[s] = ~0ull;
    }
    const u64 size = 8 * (1 + (r * 7 + i * 13) % 64);
    const u64 align = i % 5 == 0 ? 64 : 8;
    const tandem::SizeClassResult a =
        cached ? tandem::size_class_cached_allocate(h, cache, size, align)
               : tandem::size_class_allocate(h, size, align);
    if (a.status != size_class_status::ok) {
      ++failed_allocs;
      continue;
    }
    live[s] = a.off;
    words[s] = size / 8;
    tags[s] = r << 32 | (i & 0xFFFFFFFFull);
    u64* data = reinterpret_cast<u64*>(h.address(a.off));
    for (u64 w = 0; w < words[s]; ++w) {
      data[w] = tags[s];
    }
  }
  for (u64 s = 0; s < STRESS_SLOTS; ++s) {
    left[r * STRESS_SLOTS + s] = live[s];
  }
  if (cached) {
    tandem::size_class_flush(h, cache);
  }
  const u64 counts[3] = {failed_allocs, overwritten, failed_frees};
  for (u64 c = 0; c < 3; ++c) {
    if (counts[c] != 0) {
      tandem::fetch_add<scope::system, order::relaxed>(&stats[c], counts[c]);
    }
  }
}

/// Global rank 0 allocates `size`-byte blocks (aligned to 16) until the heap
/// has none left, through a SizeClassCache when `cached` is non-zero, keeping
/// up to `capacity` offsets in `offsets`, then frees them all (and flushes the
/// cache). out[0] = blocks allocated, out[1] = the size_class_status that
/// ended the allocations (of the attach when it failed; exhausted when all
/// went well, also when `capacity` ran out first: then out[0] == capacity),
/// out[2] = failed frees.
TANDEM_KERNEL tandem_size_class_fill_and_free(tandem::SizeClassHeader* heap, u64 len, u64 size,
                                              u32 cached, u64* offsets, u64 capacity, u64* out) {
  if (tandem::global_rank() != 0) {
    return;
  }
  using tandem::size_class_status;
  tandem::SizeClassHeap h;
  size_class_status ended = tandem::size_class_attach(heap, len, &h);
  out[0] = 0;
  out[1] = static_cast<u64>(ended);
  out[2] = 0;
  if (ended != size_class_status::ok) {
    return;
  }
  tandem::SizeClassCache cache = {};
  u64 count = 0;
  while (ended == size_class_status::ok) {
    if (count == capacity) {
      ended = size_class_status::exhausted;
      break;
    }
    const tandem::SizeClassResult a = cached
                                          ? tandem::size_class_cached_allocate(h, cache, size, 16)
                                          : tandem::size_class_allocate(h, size, 16);
    ended = a.status;
    if (a.status == size_class_status::ok) {
      offsets[count++] = a.off;
    }
  }
  u64 failed_frees = 0;
  for (u64 i = 0; i < count; ++i) {
    const tandem::ShmPtr<u8> p{h.id, offsets[i]};
    const tandem::SizeClassResult f =
        cached ? tandem::size_class_cached_free(h, cache, p) : tandem::size_class_free(h, p);
    failed_frees += f.status != size_class_status::ok;
  }
  if (cached) {
    tandem::size_class_flush(h, cache);
  }
  out[0] = count;
  out[1] = static_cast<u64>(ended);
  out[2] = failed_frees;
}
