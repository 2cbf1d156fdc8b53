// Warp (NVIDIA) / wavefront (AMD) collectives for the few algorithms that
// aggregate work per warp (the size-class thread cache's refills and
// flushes): which lanes are here, a vote, a broadcast, groups by key, a
// hand-over barrier.
//
// Masks are 64 bits wide on every backend so that one spelling covers AMD's
// 64-lane wavefronts; on NVIDIA the upper half is always zero. On the CPU
// device every GPU thread is its own fiber, switching on its own, so a
// "warp" is one lane: the
// collectives below degenerate to the identity and an aggregated algorithm
// runs exactly its one-lane case.
//
// Convergence: `active_lanes()` names the lanes executing the call together
// (CUDA `__activemask`, AMD's exec mask). Every collective of one aggregated
// operation must then be reached by exactly those lanes, the same number of
// times (loop exits decided by a vote, never by one lane's private state).
#pragma once

#include "tandem/backend.h"
#include "tandem/types.h"

namespace tandem {

/// A set of lanes of one warp/wavefront, bit i = lane i.
typedef u64 lane_mask;

/// Lanes of a warp/wavefront: 32 on NVIDIA, the wavefront's width on AMD,
/// 1 on the CPU device.
TANDEM_DEVICE u32 warp_width() {
#if defined(TANDEM_BACKEND_CUDA)
  return 32;
#elif defined(TANDEM_BACKEND_HIP)
  return static_cast<u32>(warpSize);
#else
  return 1;
#endif
}

/// This thread's lane within its warp/wavefront (0 on the CPU device).
TANDEM_DEVICE u32 lane_id() {
#if defined(TANDEM_BACKEND_CUDA)
  u32 lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
#elif defined(TANDEM_BACKEND_HIP)
  return __lane_id();
#else
  return 0;
#endif
}

/// The lanes executing this call together with the caller (caller included).
TANDEM_DEVICE lane_mask active_lanes() {
#if defined(TANDEM_BACKEND_CUDA)
  return __activemask();
#elif defined(TANDEM_BACKEND_HIP)
  // No independent thread scheduling: the lanes that vote are the exec mask.
  return __ballot(1);
#else
  return 1;
#endif
}

/// The lanes of `group` (which must contain the caller and be reached by
/// all of its lanes) whose `predicate` is true.
TANDEM_DEVICE lane_mask ballot(lane_mask group, bool predicate) {
#if defined(TANDEM_BACKEND_CUDA)
  return __ballot_sync(static_cast<u32>(group), predicate);
#elif defined(TANDEM_BACKEND_HIP)
  return __ballot(predicate) & group;
#else
  return predicate ? (group & 1) : 0;
#endif
}

/// Lane `src`'s `value`, as seen by every lane of `group` (`src` in `group`).
TANDEM_DEVICE u64 broadcast(lane_mask group, u64 value, u32 src) {
#if defined(TANDEM_BACKEND_CUDA)
  return __shfl_sync(static_cast<u32>(group), static_cast<unsigned long long>(value),
                     static_cast<int>(src));
#elif defined(TANDEM_BACKEND_HIP)
  (void)group;
  return __shfl(static_cast<unsigned long long>(value), static_cast<int>(src));
#else
  (void)group;
  (void)src;
  return value;
#endif
}

/// Number of lanes in `mask`.
TANDEM_DEVICE u32 lane_count(lane_mask mask) {
#if defined(TANDEM_BACKEND_GPU)
  return __popcll(mask);
#else
  return static_cast<u32>(__builtin_popcountll(mask));
#endif
}

/// The index of the lowest set bit of non-zero `bits`.
TANDEM_DEVICE u32 lowest_set_bit(u64 bits) {
#if defined(TANDEM_BACKEND_GPU)
  return __ffsll(static_cast<long long>(bits)) - 1;
#else
  return static_cast<u32>(__builtin_ctzll(bits));
#endif
}

/// The lowest lane of a non-empty `mask`.
TANDEM_DEVICE u32 lowest_lane(lane_mask mask) { return lowest_set_bit(mask); }

/// Waits until every lane of `group` (which must contain the caller) gets
/// here, and orders the memory accesses of each before those of all after
/// it: what one lane wrote before is visible to the others after, so a block
/// of memory can change hands between lanes (CUDA's `__syncwarp` gives
/// that ordering among the lanes it names). On AMD a wavefront's lanes issue
/// one instruction stream in order; the wave barrier keeps the compiler
/// from moving memory accesses across the hand-over.
TANDEM_DEVICE void warp_sync(lane_mask group) {
#if defined(TANDEM_BACKEND_CUDA)
  __syncwarp(static_cast<u32>(group));
#elif defined(TANDEM_BACKEND_HIP)
  (void)group;
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "wavefront");
  __builtin_amdgcn_wave_barrier();
#else
  (void)group;
#endif
}

/// The lanes executing this call together with the caller whose `key`
/// equals the caller's (caller included): the groups a warp splits into
/// when its lanes aim at different objects (CUDA's `__match_any_sync`; a
/// vote per distinct key elsewhere, every lane looping until its own key's
/// turn, so each ballot is reached by exactly the lanes still in it).
TANDEM_DEVICE lane_mask key_peers(u64 key) {
#if defined(TANDEM_BACKEND_CUDA)
  return __match_any_sync(__activemask(), static_cast<unsigned long long>(key));
#else
  lane_mask pending = active_lanes();
  for (;;) {
    const u64 turn = broadcast(pending, key, lowest_lane(pending));
    const lane_mask same = ballot(pending, key == turn);
    if (key == turn) {
      return same;
    }
    pending &= ~same;
  }
#endif
}

/// floor(log2(v)) for v != 0.
TANDEM_DEVICE u32 log2_floor(u64 v) {
#if defined(TANDEM_BACKEND_CUDA)
  return 63 - static_cast<u32>(__clzll(static_cast<long long>(v)));
#else
  return 63 - static_cast<u32>(__builtin_clzll(v));
#endif
}

/// The highest lane of a non-empty `mask`.
TANDEM_DEVICE u32 highest_lane(lane_mask mask) { return log2_floor(mask); }

/// The lanes below `lane` (`lane` < 64).
TANDEM_HOST_DEVICE lane_mask lanes_below(u32 lane) { return (1ull << lane) - 1; }

}  // namespace tandem
