// Kernels of the GPU allocation benchmark (tandem-tests, bench
// `device_kernels`): per-thread allocation from tandem's arena against the
// device's own malloc/free, same thread counts, same sizes.
#include "tandem/arena.h"

using tandem::u64;
using tandem::u8;

/// Adds `n` to `*counter` unless it is zero (failures are rare).
TANDEM_DEVICE void add_failures(u64* counter, u64 n) {
  if (n != 0) {
    tandem::fetch_add<tandem::scope::system, tandem::order::relaxed>(counter, n);
  }
}

/// Every thread carves `allocs * size` bytes from the arena at `arena` (one
/// device-scope CAS: the arena lives in device memory), then makes `allocs`
/// allocations of `size` bytes from its ThreadArena (plain arithmetic) and
/// writes the first word of each. stats[0] += allocations that failed.
TANDEM_KERNEL tandem_bench_thread_arena(tandem::ArenaHeader* arena, u64 allocs, u64 size,
                                        u64* stats) {
  tandem::ThreadArena mine;
  if (tandem::arena_carve<tandem::scope::device>(arena, allocs * size, &mine) !=
      tandem::alloc_status::ok) {
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
