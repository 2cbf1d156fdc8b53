// Scoped atomics and fences on u32/u64, one spelling for CUDA, HIP and the
// host.
//
// Every operation names its scope, the set of agents it must be atomic and
// ordered with respect to:
//
//   scope::block   threads of the same block (CUDA .cta, AMD workgroup);
//   scope::device  every thread of the same GPU (CUDA .gpu, AMD agent);
//   scope::system  the GPU, the CPU and peer GPUs, i.e. memory shared with
//                  the host: mapped pinned memory, managed memory, the queues
//                  and futures of tandem-shm-core (CUDA .sys, AMD system).
//
// A narrower scope is cheaper (a device-scope RMW stays in L2; a system-scope
// RMW on pinned host memory crosses PCIe, at a small fraction of that rate:
// docs/design/pcie.md, "Atomics across PCIe"), so use system scope only on words
// another agent reads or writes.
//
// The orders are C++'s: an acquire load that reads the value of a release
// store (or of a release RMW, or of any RMW in its release sequence)
// synchronizes with it, provided both name a scope that includes the other
// party. The Rust side of a shared structure uses core::sync::atomic with the
// matching ordering; on the CPU, `scope` has no effect (one coherence domain).
//
// Spinning: AMD GPUs have no independent thread scheduling. A lane that spins
// waiting for another lane of its own wavefront never lets that lane run, and
// the wavefront hangs; NVIDIA since Volta schedules lanes independently, so
// the same code only slows down there. Rule for every Tandem kernel: wait only
// on state another agent (the CPU, another block) changes, and let one lane
// per warp/wavefront wait while the others wait at a barrier or a ballot.
#pragma once

#include "tandem/backend.h"
#include "tandem/types.h"

namespace tandem {

/// Which agents an atomic operation is atomic and ordered with respect to.
enum class scope { block, device, system };

/// Memory order of a read-modify-write operation.
enum class order { relaxed, acquire, release, acq_rel };

namespace detail {

// Turns C++ orders into the builtins' constants (HIP and host).
#if !defined(TANDEM_BACKEND_CUDA)
template <order O>
struct builtin_order;
template <>
struct builtin_order<order::relaxed> {
  static constexpr int success = __ATOMIC_RELAXED;
  static constexpr int failure = __ATOMIC_RELAXED;
};
template <>
struct builtin_order<order::acquire> {
  static constexpr int success = __ATOMIC_ACQUIRE;
  static constexpr int failure = __ATOMIC_ACQUIRE;
};
// A failed compare-exchange stores nothing, so it cannot be a release: its
// failure order drops the release half.
template <>
struct builtin_order<order::release> {
  static constexpr int success = __ATOMIC_RELEASE;
  static constexpr int failure = __ATOMIC_RELAXED;
};
template <>
struct builtin_order<order::acq_rel> {
  static constexpr int success = __ATOMIC_ACQ_REL;
  static constexpr int failure = __ATOMIC_ACQUIRE;
};
#endif

#if defined(TANDEM_BACKEND_HIP)
template <scope S>
struct hip_scope;
template <>
struct hip_scope<scope::block> {
  static constexpr int value = __HIP_MEMORY_SCOPE_WORKGROUP;
};
template <>
struct hip_scope<scope::device> {
  static constexpr int value = __HIP_MEMORY_SCOPE_AGENT;
};
template <>
struct hip_scope<scope::system> {
  static constexpr int value = __HIP_MEMORY_SCOPE_SYSTEM;
};

// AMDGPU's fence builtin takes its order and its scope (a sync-scope name;
// the empty name is system) as literals, hence a macro rather than a template.
#define TANDEM_AMDGCN_FENCE(S, ORDER)               \
  do {                                              \
    if constexpr ((S) == scope::block) {            \
      __builtin_amdgcn_fence(ORDER, "workgroup");   \
    } else if constexpr ((S) == scope::device) {    \
      __builtin_amdgcn_fence(ORDER, "agent");       \
    } else {                                        \
      __builtin_amdgcn_fence(ORDER, "");            \
    }                                               \
  } while (0)
#endif

#if defined(TANDEM_BACKEND_CUDA)
// PTX memory-consistency-model instructions (PTX ISA 6.0+, sm_70+). Each
// (scope, order) pair gets one specialization whose asm strings are built by
// literal concatenation; "memory" clobbers keep the compiler from moving
// ordinary accesses across them, which the hardware order alone would not
// prevent.
template <scope S>
struct ptx_ld_st;
template <scope S, order O>
struct ptx_rmw;

#define TANDEM_PTX_LD_ST(S, SCOPE)                                                          \
  template <>                                                                               \
  struct ptx_ld_st<S> {                                                                     \
    static __device__ __forceinline__ u32 load_relaxed(const u32* p) {                     \
      u32 r;                                                                                \
      asm volatile("ld.relaxed." SCOPE ".u32 %0, [%1];" : "=r"(r) : "l"(p) : "memory");   \
      return r;                                                                             \
    }                                                                                       \
    static __device__ __forceinline__ u64 load_relaxed(const u64* p) {                     \
      u64 r;                                                                                \
      asm volatile("ld.relaxed." SCOPE ".u64 %0, [%1];" : "=l"(r) : "l"(p) : "memory");   \
      return r;                                                                             \
    }                                                                                       \
    static __device__ __forceinline__ void load_relaxed_pair(const u64* p, u64* a, u64* b) { \
      asm volatile("ld.relaxed." SCOPE ".v2.u64 {%0, %1}, [%2];"                            \
                   : "=l"(*a), "=l"(*b) : "l"(p) : "memory");                               \
    }                                                                                       \
    static __device__ __forceinline__ u32 load_acquire(const u32* p) {                     \
      u32 r;                                                                                \
      asm volatile("ld.acquire." SCOPE ".u32 %0, [%1];" : "=r"(r) : "l"(p) : "memory");   \
      return r;                                                                             \
    }                                                                                       \
    static __device__ __forceinline__ u64 load_acquire(const u64* p) {                     \
      u64 r;                                                                                \
      asm volatile("ld.acquire." SCOPE ".u64 %0, [%1];" : "=l"(r) : "l"(p) : "memory");   \
      return r;                                                                             \
    }                                                                                       \
    static __device__ __forceinline__ void store_relaxed(u32* p, u32 v) {                  \
      asm volatile("st.relaxed." SCOPE ".u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");      \
    }                                                                                       \
    static __device__ __forceinline__ void store_relaxed(u64* p, u64 v) {                  \
      asm volatile("st.relaxed." SCOPE ".u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");      \
    }                                                                                       \
    static __device__ __forceinline__ void store_relaxed_pair(u64* p, u64 a, u64 b) {      \
      asm volatile("st.relaxed." SCOPE ".v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b)  \
                   : "memory");                                                             \
    }                                                                                       \
    static __device__ __forceinline__ void store_release(u32* p, u32 v) {                  \
      asm volatile("st.release." SCOPE ".u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");      \
    }                                                                                       \
    static __device__ __forceinline__ void store_release(u64* p, u64 v) {                  \
      asm volatile("st.release." SCOPE ".u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");      \
    }                                                                                       \
    static __device__ __forceinline__ void fence_acq_rel() {                               \
      asm volatile("fence.acq_rel." SCOPE ";" ::: "memory");                                \
    }                                                                                       \
    static __device__ __forceinline__ void fence_seq_cst() {                               \
      asm volatile("fence.sc." SCOPE ";" ::: "memory");                                     \
    }                                                                                       \
  };

#define TANDEM_PTX_RMW(S, O, SEM, SCOPE)                                                    \
  template <>                                                                               \
  struct ptx_rmw<S, O> {                                                                    \
    TANDEM_PTX_RMW_OPS("atom." SEM "." SCOPE)                                              \
    static __device__ __forceinline__ u64 fetch_add_global(u64* p, u64 v) {                \
      u64 r;                                                                                \
      asm volatile("{ .reg .u64 g; cvta.to.global.u64 g, %1; atom.global." SEM "." SCOPE   \
                   ".add.u64 %0, [g], %2; }"                                                \
                   : "=l"(r) : "l"(p), "l"(v) : "memory");                                  \
      return r;                                                                             \
    }                                                                                       \
  };

// clang-format off
#define TANDEM_PTX_RMW_OPS(P)                                                                \
    static __device__ __forceinline__ u32 fetch_add(u32* p, u32 v) {                         \
      u32 r; asm volatile(P ".add.u32 %0, [%1], %2;" : "=r"(r) : "l"(p), "r"(v) : "memory"); \
      return r; }                                                                            \
    static __device__ __forceinline__ u64 fetch_add(u64* p, u64 v) {                         \
      u64 r; asm volatile(P ".add.u64 %0, [%1], %2;" : "=l"(r) : "l"(p), "l"(v) : "memory"); \
      return r; }                                                                            \
    static __device__ __forceinline__ u32 fetch_or(u32* p, u32 v) {                          \
      u32 r; asm volatile(P ".or.b32 %0, [%1], %2;" : "=r"(r) : "l"(p), "r"(v) : "memory");  \
      return r; }                                                                            \
    static __device__ __forceinline__ u64 fetch_or(u64* p, u64 v) {                          \
      u64 r; asm volatile(P ".or.b64 %0, [%1], %2;" : "=l"(r) : "l"(p), "l"(v) : "memory");  \
      return r; }                                                                            \
    static __device__ __forceinline__ u32 exchange(u32* p, u32 v) {                          \
      u32 r; asm volatile(P ".exch.b32 %0, [%1], %2;" : "=r"(r) : "l"(p), "r"(v) : "memory");\
      return r; }                                                                            \
    static __device__ __forceinline__ u64 exchange(u64* p, u64 v) {                          \
      u64 r; asm volatile(P ".exch.b64 %0, [%1], %2;" : "=l"(r) : "l"(p), "l"(v) : "memory");\
      return r; }                                                                            \
    static __device__ __forceinline__ u32 cas(u32* p, u32 expected, u32 desired) {           \
      u32 r; asm volatile(P ".cas.b32 %0, [%1], %2, %3;"                                     \
                          : "=r"(r) : "l"(p), "r"(expected), "r"(desired) : "memory");        \
      return r; }                                                                            \
    static __device__ __forceinline__ u64 cas(u64* p, u64 expected, u64 desired) {           \
      u64 r; asm volatile(P ".cas.b64 %0, [%1], %2, %3;"                                     \
                          : "=l"(r) : "l"(p), "l"(expected), "l"(desired) : "memory");        \
      return r; }
// clang-format on

#define TANDEM_PTX_SCOPE(S, SCOPE)                              \
  TANDEM_PTX_LD_ST(S, SCOPE)                                    \
  TANDEM_PTX_RMW(S, order::relaxed, "relaxed", SCOPE)           \
  TANDEM_PTX_RMW(S, order::acquire, "acquire", SCOPE)           \
  TANDEM_PTX_RMW(S, order::release, "release", SCOPE)           \
  TANDEM_PTX_RMW(S, order::acq_rel, "acq_rel", SCOPE)

TANDEM_PTX_SCOPE(scope::block, "cta")
TANDEM_PTX_SCOPE(scope::device, "gpu")
TANDEM_PTX_SCOPE(scope::system, "sys")

#undef TANDEM_PTX_SCOPE
#undef TANDEM_PTX_RMW_OPS
#undef TANDEM_PTX_RMW
#undef TANDEM_PTX_LD_ST
#endif  // TANDEM_BACKEND_CUDA

/// The word types the operations below accept.
template <typename T>
struct is_atomic_word {
  static constexpr bool value = is_same<T, u32>::value || is_same<T, u64>::value;
};

}  // namespace detail

// ---------------------------------------------------------------------------
// Loads and stores
// ---------------------------------------------------------------------------

/// Atomic load with no ordering: sees some value another agent stored, never a
/// torn one.
template <scope S, typename T>
TANDEM_DEVICE T load_relaxed(const T* p) {
  static_assert(detail::is_atomic_word<T>::value, "atomics are on u32 or u64");
#if defined(TANDEM_BACKEND_CUDA)
  return detail::ptx_ld_st<S>::load_relaxed(p);
#elif defined(TANDEM_BACKEND_HIP)
  return __hip_atomic_load(p, __ATOMIC_RELAXED, detail::hip_scope<S>::value);
#else
  return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

/// Acquire load: pairs with the release store (or release RMW) whose value it
/// reads; everything the storing agent wrote before that store is visible
/// after this load. On the GPU this is what makes a flag a CPU set with
/// `Ordering::Release` safe to act on (volatile alone is not an order).
template <scope S, typename T>
TANDEM_DEVICE T load_acquire(const T* p) {
  static_assert(detail::is_atomic_word<T>::value, "atomics are on u32 or u64");
#if defined(TANDEM_BACKEND_CUDA)
  return detail::ptx_ld_st<S>::load_acquire(p);
#elif defined(TANDEM_BACKEND_HIP)
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, detail::hip_scope<S>::value);
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

/// Atomic store with no ordering.
template <scope S, typename T>
TANDEM_DEVICE void store_relaxed(T* p, T v) {
  static_assert(detail::is_atomic_word<T>::value, "atomics are on u32 or u64");
#if defined(TANDEM_BACKEND_CUDA)
  detail::ptx_ld_st<S>::store_relaxed(p, v);
#elif defined(TANDEM_BACKEND_HIP)
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, detail::hip_scope<S>::value);
#else
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

/// Two relaxed atomic loads, *a = p[0] and *b = p[1] (`p` 16-aligned), as one
/// instruction where there is one (CUDA's v2 load): each word on its own is
/// single-copy atomic, the pair is not.
template <scope S>
TANDEM_DEVICE void load_relaxed_pair(const u64* p, u64* a, u64* b) {
#if defined(TANDEM_BACKEND_CUDA)
  detail::ptx_ld_st<S>::load_relaxed_pair(p, a, b);
#else
  *a = load_relaxed<S>(p);
  *b = load_relaxed<S>(p + 1);
#endif
}

/// Two relaxed atomic stores, p[0] = a and p[1] = b (`p` 16-aligned), as one
/// instruction where there is one (CUDA's v2 store): each word on its own is
/// single-copy atomic, the pair is not, and the two may land in either order.
template <scope S>
TANDEM_DEVICE void store_relaxed_pair(u64* p, u64 a, u64 b) {
#if defined(TANDEM_BACKEND_CUDA)
  detail::ptx_ld_st<S>::store_relaxed_pair(p, a, b);
#else
  store_relaxed<S>(p, a);
  store_relaxed<S>(p + 1, b);
#endif
}

/// Release store: publishes every write this thread made (and, by
/// cumulativity, those it had observed) before it to whoever acquires this
/// value. With scope::system this is the publish step of a GPU -> CPU record
/// in mapped pinned memory: the CPU reads the word with `Ordering::Acquire`.
template <scope S, typename T>
TANDEM_DEVICE void store_release(T* p, T v) {
  static_assert(detail::is_atomic_word<T>::value, "atomics are on u32 or u64");
#if defined(TANDEM_BACKEND_CUDA)
  detail::ptx_ld_st<S>::store_release(p, v);
#elif defined(TANDEM_BACKEND_HIP)
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, detail::hip_scope<S>::value);
#else
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

// ---------------------------------------------------------------------------
// Read-modify-write. Each returns the value before the operation.
// ---------------------------------------------------------------------------

/// `*p += v`, wrapping.
template <scope S, order O, typename T>
TANDEM_DEVICE T fetch_add(T* p, T v) {
  static_assert(detail::is_atomic_word<T>::value, "atomics are on u32 or u64");
#if defined(TANDEM_BACKEND_CUDA)
  return detail::ptx_rmw<S, O>::fetch_add(p, v);
#elif defined(TANDEM_BACKEND_HIP)
  return __hip_atomic_fetch_add(p, v, detail::builtin_order<O>::success,
                                detail::hip_scope<S>::value);
#else
  return __atomic_fetch_add(p, v, detail::builtin_order<O>::success);
#endif
}

/// fetch_add on a u64 in global memory (device memory, or host memory mapped
/// into the device), never in shared memory. On CUDA a 64-bit atomic add at
/// a generic address must first rule out shared memory, which has no such
/// instruction: the compiler adds a fallback whose branch waits for the
/// atomic's answer, so nothing after it issues before it returns, not even
/// an independent load (in the lane push's SASS, the ticket's fetch_add and
/// the load beside it took two device-memory round trips instead of one).
/// Elsewhere the same as fetch_add.
template <scope S, order O>
TANDEM_DEVICE u64 fetch_add_global(u64* p, u64 v) {
#if defined(TANDEM_BACKEND_CUDA)
  return detail::ptx_rmw<S, O>::fetch_add_global(p, v);
#else
  return fetch_add<S, O>(p, v);
#endif
}

/// `*p |= v`.
template <scope S, order O, typename T>
TANDEM_DEVICE T fetch_or(T* p, T v) {
  static_assert(detail::is_atomic_word<T>::value, "atomics are on u32 or u64");
#if defined(TANDEM_BACKEND_CUDA)
  return detail::ptx_rmw<S, O>::fetch_or(p, v);
#elif defined(TANDEM_BACKEND_HIP)
  return __hip_atomic_fetch_or(p, v, detail::builtin_order<O>::success,
                               detail::hip_scope<S>::value);
#else
  return __atomic_fetch_or(p, v, detail::builtin_order<O>::success);
#endif
}

/// `*p = v`.
template <scope S, order O, typename T>
TANDEM_DEVICE T exchange(T* p, T v) {
  static_assert(detail::is_atomic_word<T>::value, "atomics are on u32 or u64");
#if defined(TANDEM_BACKEND_CUDA)
  return detail::ptx_rmw<S, O>::exchange(p, v);
#elif defined(TANDEM_BACKEND_HIP)
  return __hip_atomic_exchange(p, v, detail::builtin_order<O>::success,
                               detail::hip_scope<S>::value);
#else
  return __atomic_exchange_n(p, v, detail::builtin_order<O>::success);
#endif
}

/// Strong compare-and-swap: stores `desired` if `*p == expected`. Returns the
/// value found, so the swap happened exactly when the result equals
/// `expected`. A failed swap has order O without its release half.
template <scope S, order O, typename T>
TANDEM_DEVICE T cas(T* p, T expected, T desired) {
  static_assert(detail::is_atomic_word<T>::value, "atomics are on u32 or u64");
#if defined(TANDEM_BACKEND_CUDA)
  return detail::ptx_rmw<S, O>::cas(p, expected, desired);
#elif defined(TANDEM_BACKEND_HIP)
  __hip_atomic_compare_exchange_strong(p, &expected, desired, detail::builtin_order<O>::success,
                                       detail::builtin_order<O>::failure,
                                       detail::hip_scope<S>::value);
  return expected;  // the builtin wrote the value found into `expected`
#else
  __atomic_compare_exchange_n(p, &expected, desired, false, detail::builtin_order<O>::success,
                              detail::builtin_order<O>::failure);
  return expected;  // the builtin wrote the value found into `expected`
#endif
}

// ---------------------------------------------------------------------------
// Fences
// ---------------------------------------------------------------------------

/// Acquire-release fence: a release fence before a relaxed store, or an
/// acquire fence after a relaxed load, synchronizes like a release store /
/// acquire load (C++ fence rules). Use it to order plain accesses around
/// relaxed flag operations that were issued elsewhere (e.g. by the host
/// backend's barrier).
template <scope S>
TANDEM_DEVICE void fence_acq_rel() {
#if defined(TANDEM_BACKEND_CUDA)
  detail::ptx_ld_st<S>::fence_acq_rel();
#elif defined(TANDEM_BACKEND_HIP)
  TANDEM_AMDGCN_FENCE(S, __ATOMIC_ACQ_REL);
#else
  __atomic_thread_fence(__ATOMIC_ACQ_REL);
#endif
}

/// Sequentially consistent fence: also orders a store before a later load
/// (store-buffer pattern, e.g. "publish my flag, then read yours").
template <scope S>
TANDEM_DEVICE void fence_seq_cst() {
#if defined(TANDEM_BACKEND_CUDA)
  detail::ptx_ld_st<S>::fence_seq_cst();
#elif defined(TANDEM_BACKEND_HIP)
  TANDEM_AMDGCN_FENCE(S, __ATOMIC_SEQ_CST);
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/// Called in every iteration of a wait loop. GPU: a short sleep frees issue
/// slots for the threads being waited on. Host: the block's threads are
/// fibers of one OS thread, so the waiter lets the others run (and once all
/// of them wait, the OS thread is given away).
/// See the spinning rule at the top of this file.
TANDEM_DEVICE void spin_pause() {
#if defined(TANDEM_BACKEND_CUDA)
  __nanosleep(64);
#elif defined(TANDEM_BACKEND_HIP)
  __builtin_amdgcn_s_sleep(1);
#else
  host::yield_turn();
#endif
}

/// How often a wait loop polls its stop flag, in rounds: on a GPU each poll
/// is a PCIe read, and with thousands of threads waiting the stop flag is
/// the one line every one of them would read, for the rare case.
constexpr u64 STOP_POLL_EVERY = 8;

namespace detail {

/// Whether a waiter's `*stop` (may be null) is raised, checked in every
/// `EVERY`-th `round` (on a GPU each poll is a PCIe round trip, and the flag
/// is the rare case) and in the `last` round of its budget.
///
/// Call it just before the round's poll of what is awaited. The flag's load
/// is relaxed, so it does not hold that poll back and both reads cross the
/// link together; an acquire load would make the poll wait for it, and a
/// waiter whose answer landed meanwhile would pay a whole extra round trip
/// (docs/design/pcie.md, "Waiting: the stop flag and one read at a time").
/// When the flag is raised, an
/// acquire fence makes the load synchronise like an acquire load, so
/// whatever completed before the flag was raised is visible to the waiter's
/// re-check.
template <scope S, u64 EVERY = STOP_POLL_EVERY>
TANDEM_DEVICE bool stop_raised(const u32* stop, u64 round, bool last) {
  if (stop == nullptr || (round % EVERY != EVERY - 1 && !last) ||
      load_relaxed<S>(stop) == 0) {
    return false;
  }
  fence_acq_rel<S>();
  return true;
}

}  // namespace detail

/// Sleeps about `ns` nanoseconds on a GPU (a sleeping warp leaves its issue
/// slots to others); the CPU device yields the thread's turn instead.
TANDEM_DEVICE void sleep_for(u32 ns) {
#if defined(TANDEM_BACKEND_CUDA)
  __nanosleep(ns);
#elif defined(TANDEM_BACKEND_HIP)
  // s_sleep takes an immediate (units of 64 cycles): loop for longer sleeps.
  for (u32 i = 0; i <= ns / 64; ++i) {
    __builtin_amdgcn_s_sleep(1);
  }
#else
  (void)ns;
  host::yield_turn();
#endif
}

/// A clock for timing phases inside a kernel, in nanoseconds from an
/// arbitrary start; only differences on one device mean anything. CUDA: the
/// global timer (%globaltimer); HIP: s_memrealtime, the 100 MHz constant
/// clock of gfx9 GPUs (hipDeviceAttributeWallClockRate); the CPU device: the
/// host backend's monotonic clock.
TANDEM_DEVICE u64 timer_ns() {
#if defined(TANDEM_BACKEND_CUDA)
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#elif defined(TANDEM_BACKEND_HIP)
  return __builtin_amdgcn_s_memrealtime() * 10u;
#else
  return tandem_host_timer_ns();
#endif
}

/// Exponential back-off for loops that retry against other agents: a lost
/// CAS, a full ring, a future not yet complete. Thousands of GPU threads
/// re-polling or re-CASing one word of pinned host memory fill the link with
/// traffic that does no work; doubling sleeps (32 ns up to MAX_NS) bound it.
/// A wait first re-polls IDLE_POLLS times without sleeping: on a GPU each
/// poll of host memory is itself a PCIe round trip (about a microsecond), and
/// an answer usually comes within a few, so sleeping at once would only add
/// latency to a round trip (see runtime/benches/roundtrip.rs).
///
/// The longest sleep depends on what is awaited: a lost race or a short wait
/// (MAX_NS); an answer from the CPU (ANSWER_MAX_NS), which thousands of
/// threads may await at once, each poll a PCIe read. FULL_MAX_NS bounds the
/// waits for a full ring (mpmc.h: a ticket far back in the line, a retry).
struct Backoff {
  static constexpr u32 MAX_NS = 4096;
  static constexpr u32 RACE_DEVICE_MAX_NS = 1024;
  static constexpr u32 ANSWER_MAX_NS = 64 * 1024;
  static constexpr u32 FULL_MAX_NS = 256 * 1024;
  static constexpr u32 IDLE_POLLS = 8;
  u32 ns = 32;
  u32 polls = 0;
  u32 max_ns = MAX_NS;

  /// A back-off whose sleeps grow to `max` ns.
  static TANDEM_DEVICE Backoff up_to(u32 max) {
    Backoff b;
    b.max_ns = max;
    return b;
  }

  /// A back-off that sleeps from the first idle() on, `first` ns (at least
  /// 32) doubling up to `max`: for a wait already known to be long.
  static TANDEM_DEVICE Backoff sleeping_from(u32 first, u32 max) {
    Backoff b = up_to(max);
    b.ns = first < 32 ? 32 : first > max ? max : first;
    b.polls = IDLE_POLLS;
    return b;
  }

  /// A back-off for compare-and-swap loops on a word at scope `S`. The next
  /// success after a lost race waits for a loser to wake, so sleeps bound
  /// each success's cost: on device memory (scope::device), where a retry
  /// costs the GPU an L2 atomic, they stop at RACE_DEVICE_MAX_NS (a retry
  /// there is cheap, and a longer sleep only delays the next success); on
  /// memory the CPU shares, every retry crosses the link, so MAX_NS.
  template <scope S>
  static TANDEM_DEVICE Backoff for_races() {
    return up_to(S == scope::system ? MAX_NS : RACE_DEVICE_MAX_NS);
  }

  /// After losing a race with a peer (a failed CAS). The CPU device retries
  /// at once: its peers are running threads, not a link to saturate.
  /// Returns whether it slept: the value the failed CAS returned is then
  /// stale, and the retry should reload it (a lane that retries with a value
  /// a sleep old nearly always loses again, so without the reload every
  /// success costs a whole sleep).
  TANDEM_DEVICE bool contended() {
#if defined(TANDEM_BACKEND_GPU)
    sleep();
    return true;
#else
    return false;
#endif
  }

  /// While waiting for another agent (the CPU, another block). The CPU device
  /// yields the thread's turn to the block's other threads.
  TANDEM_DEVICE void idle() {
#if defined(TANDEM_BACKEND_GPU)
    if (polls < IDLE_POLLS) {
      ++polls;
      return;
    }
    sleep();
#else
    host::yield_turn();
#endif
  }

 private:
  /// xorshift32 state for the jitter, seeded at the first sleep (0: not yet).
  u32 rng = 0;

  /// Sleeps somewhere in [ns/2, ns) ("equal jitter"), then doubles ns. Threads
  /// that lost the same race back off in lockstep otherwise: they all wake
  /// together, retry together, and all but one lose again, so every success
  /// costs a whole sleep, however few contended.
  TANDEM_DEVICE void sleep() {
#if defined(TANDEM_BACKEND_GPU)
    rng = sleep_jittered(ns, rng);
#endif
    ns = ns < max_ns ? ns * 2 : max_ns;
  }

#if defined(TANDEM_BACKEND_GPU)
  /// sleep()'s sleep, out of line (a wait's poll that succeeds never gets
  /// here); returns the next jitter state.
  static TANDEM_COLD u32 sleep_jittered(u32 ns, u32 rng) {
    if (rng == 0) {
      // Differs between the lanes, warps and blocks that fail together, and
      // between one thread's successive back-offs.
      const u32 thread = threadIdx.x + 1024u * (threadIdx.y + 1024u * threadIdx.z);
      const u32 block = blockIdx.x ^ (blockIdx.y << 11) ^ (blockIdx.z << 22);
      rng = (static_cast<u32>(clock64()) ^ (thread * 2654435761u) ^ (block * 40503u)) | 1u;
    }
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    sleep_for(ns / 2 + rng % (ns / 2));
    return rng;
  }
#endif
};

}  // namespace tandem
