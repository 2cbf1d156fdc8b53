// Kernels of the GPU allocation benchmark (tandem-tests, bench
// `device_kernels`): per-thread allocation from tandem's arena and from its
// freeing allocator against the device's own malloc/free, same thread counts,
// same sizes.
#include "tandem/arena.h"
#include "tandem/size_class.h"

using tandem::u64;
using tandem::u8;

/// Adds `n` to `*counter` unless it is zero (failures are rare).
TANDEM_DEVICE void add_failures(u64* counter, u64 n) {
  if (n != 0) {
    tandem::fetch_add<tandem::scope::system, tandem::order::relaxed>(counter, n);
  }
}

/// The arena hierarchy: thread 0 of each block carves the block's share of
/// the arena at `arena` (one device-scope CAS per block: the arena lives in
/// device memory), every thread carves its ThreadArena from that share (one
/// shared-memory atomic), then makes `allocs` allocations of `size` bytes
/// from it (plain arithmetic) and writes the first word of each.
/// stats[0] += allocations that failed.
TANDEM_KERNEL tandem_bench_thread_arena(tandem::ArenaHeader* arena, u64 allocs, u64 size,
                                        u64* stats) {
  TANDEM_SHARED(tandem::BlockArena, block);
  const u64 per_thread = allocs * size;
  // Each carve starts a cache line of its own: room for the rounding.
  const u64 per_thread_carve = (per_thread + tandem::CACHE_LINE - 1) & ~(tandem::CACHE_LINE - 1);
  tandem::block_arena_init<tandem::scope::device>(block, arena,
                                                  u64{tandem::block_size()} * per_thread_carve);
  tandem::ThreadArena mine;
  if (tandem::block_arena_carve(block, per_thread, &mine) != tandem::alloc_status::ok) {
    add_failures(&stats[0], allocs);
    return;
  }
  u64 failed = 0;
  for (u64 i = 0; i < allocs; ++i) {
    const tandem::AllocResult a = tandem::thread_arena_allocate(&mine, size, 8);
    if (a.status != tandem::alloc_status::ok) {
      ++failed;
      continue;
    }
    *reinterpret_cast<u64*>(reinterpret_cast<u8*>(arena) + a.off) = i;
  }
  add_failures(&stats[0], failed);
}

/// Every thread makes `allocs` allocations of `size` bytes with the device's
/// `malloc`, writes the first word of each and frees it again (so at most one
/// allocation per thread is live: the device heap is 8 MiB by default).
/// stats[0] += allocations that returned null. CUDA only: elsewhere global
/// rank 0 sets stats[1] = 1 (unsupported) and nothing is allocated.
TANDEM_KERNEL tandem_bench_device_malloc(u64 allocs, u64 size, u64* stats) {
#if defined(TANDEM_BACKEND_CUDA)
  u64 failed = 0;
  for (u64 i = 0; i < allocs; ++i) {
    u64* p = static_cast<u64*>(malloc(size));
    if (p == nullptr) {
      ++failed;
      continue;
    }
    *p = i;
    free(p);
  }
  add_failures(&stats[0], failed);
#else
  (void)allocs;
  (void)size;
  if (tandem::global_rank() == 0) {
    stats[1] = 1;
  }
#endif
}

/// Every thread makes `allocs` allocation+free pairs of `size` bytes (8-aligned)
/// with tandem's freeing allocator at `heap` (a region of `len` bytes in
/// device memory, hence device-scope atomics) through a per-thread
/// SizeClassCache (flushed at the end), writing the first word of each block,
/// as tandem_bench_device_malloc does. stats[0] += pairs whose allocation or
/// free failed.
TANDEM_KERNEL tandem_bench_size_class(tandem::SizeClassHeader* heap, u64 len, u64 allocs,
                                      u64 size, u64* stats) {
  constexpr tandem::scope device = tandem::scope::device;
  tandem::SizeClassHeap h;
  if (tandem::size_class_attach<device>(heap, len, &h) != tandem::size_class_status::ok) {
    add_failures(&stats[0], allocs);
    return;
  }
  tandem::SizeClassCache cache = {};
  u64 failed = 0;
  for (u64 i = 0; i < allocs; ++i) {
    const tandem::SizeClassResult a = tandem::size_class_cached_allocate<device>(h, cache, size, 8);
    if (a.status != tandem::size_class_status::ok) {
      ++failed;
      continue;
    }
    *reinterpret_cast<u64*>(h.address(a.off)) = i;
    const tandem::ShmPtr<u8> p{h.id, a.off};
    const tandem::SizeClassResult f = tandem::size_class_cached_free<device>(h, cache, p);
    failed += f.status != tandem::size_class_status::ok;
  }
  tandem::size_class_flush<device>(h, cache);
  add_failures(&stats[0], failed);
}
