// The one header a Tandem kernel includes. It compiles under nvcc and NVRTC,
// hipcc, and g++/clang++ (the CPU device), and gives kernels one spelling for
//
//   * qualifiers: TANDEM_KERNEL, TANDEM_DEVICE, TANDEM_HOST_DEVICE (backend.h);
//   * thread and block indices: thread_idx(), block_idx(), block_dim(),
//     grid_dim() and their linearizations;
//   * block_barrier();
//   * block-shared memory: TANDEM_SHARED(type, name) and dynamic_shared<T>();
//   * scoped atomics, fences and spin_pause() (atomic.h).
//
// Like CUDA's __shared__, TANDEM_SHARED declarations belong at the top level
// of a kernel body, executed unconditionally by every thread: on the CPU
// device each declaration carves the next piece of the block's static shared
// area, so all threads of a block agree on the addresses only if they execute
// the same declarations in the same order.
#pragma once

#include "tandem/atomic.h"
#include "tandem/backend.h"
#include "tandem/host_abi.h"
#include "tandem/types.h"

#if defined(TANDEM_BACKEND_CUDA)
#define TANDEM_DYNAMIC_SHARED_DECL extern __shared__ __align__(16) unsigned char
#elif defined(TANDEM_BACKEND_HIP)
#define TANDEM_DYNAMIC_SHARED_DECL extern __shared__ __attribute__((aligned(16))) unsigned char
#endif

/// Unrolls the loop that follows: on a GPU a small array indexed by a
/// constant-bound loop then lives in registers, not in (slow) local memory.
#if defined(TANDEM_BACKEND_GPU)
#define TANDEM_UNROLL _Pragma("unroll")
#else
#define TANDEM_UNROLL _Pragma("GCC unroll 16")
#endif

#if defined(TANDEM_BACKEND_GPU)
/// Declares a block-shared variable `name` of type `T` (arrays too:
/// `TANDEM_SHARED(u32[256], partial)`). Uninitialised, as on every backend.
#define TANDEM_SHARED(T, name) __shared__ ::tandem::type_t<T> name
#else
#define TANDEM_SHARED(T, name) ::tandem::type_t<T>& name = ::tandem::host::carve_shared<::tandem::type_t<T>>()
#endif

namespace tandem {

#if defined(TANDEM_BACKEND_HOST)
namespace host {

/// Reserves the next `sizeof(T)` bytes, aligned for `T`, of the block's static
/// shared area for one TANDEM_SHARED declaration. The alignment is computed
/// on the address (the area itself is only 16-aligned), which is the same for
/// every thread of the block, so each thread computes the same offsets.
template <typename T>
inline T& carve_shared() {
  static_assert(__is_trivial(T), "block-shared variables are never constructed: use plain data");
  ThreadState& st = thread_state;
  unsigned char* const base = st.ctx->shared_mem;
  const u64 align = alignof(T);
  const u64 addr = reinterpret_cast<u64>(base) + st.shared_cursor;
  const u64 at = ((addr + align - 1) & ~(align - 1)) - reinterpret_cast<u64>(base);
  if (at + sizeof(T) > HOST_STATIC_SHARED_BYTES) {
    // The GPU compilers reject this at build time; the host can only notice
    // when the declaration runs. A kernel bug, not bad input: stop loudly.
    __builtin_printf("tandem: TANDEM_SHARED declarations exceed the %u-byte static shared area\n",
                     HOST_STATIC_SHARED_BYTES);
    __builtin_abort();
  }
  st.shared_cursor = static_cast<u32>(at + sizeof(T));
  // The host backend hands each block a zeroed-or-stale buffer of raw bytes;
  // `T` is trivial, so its lifetime begins by storage being obtained for it.
  return *reinterpret_cast<T*>(base + at);
}

}  // namespace host
#endif

// ---------------------------------------------------------------------------
// Indices
// ---------------------------------------------------------------------------

/// This thread's index within its block (`threadIdx`).
TANDEM_DEVICE Dim3 thread_idx() {
#if defined(TANDEM_BACKEND_GPU)
  return Dim3{threadIdx.x, threadIdx.y, threadIdx.z};
#else
  return host::thread_state.ctx->thread_idx;
#endif
}

/// This block's index within the grid (`blockIdx`).
TANDEM_DEVICE Dim3 block_idx() {
#if defined(TANDEM_BACKEND_GPU)
  return Dim3{blockIdx.x, blockIdx.y, blockIdx.z};
#else
  return host::thread_state.ctx->block_idx;
#endif
}

/// Threads per block in each dimension (`blockDim`).
TANDEM_DEVICE Dim3 block_dim() {
#if defined(TANDEM_BACKEND_GPU)
  return Dim3{blockDim.x, blockDim.y, blockDim.z};
#else
  return host::thread_state.ctx->block_dim;
#endif
}

/// Blocks per grid in each dimension (`gridDim`).
TANDEM_DEVICE Dim3 grid_dim() {
#if defined(TANDEM_BACKEND_GPU)
  return Dim3{gridDim.x, gridDim.y, gridDim.z};
#else
  return host::thread_state.ctx->grid_dim;
#endif
}

/// `x + dim.x * (y + dim.y * z)`: the x-fastest linear index of `idx` in a
/// box of `dim`, in 64 bits (a grid can hold more than 2^32 threads).
TANDEM_HOST_DEVICE u64 linearize(Dim3 idx, Dim3 dim) {
  return static_cast<u64>(idx.x) +
         static_cast<u64>(dim.x) * (static_cast<u64>(idx.y) + static_cast<u64>(dim.y) * idx.z);
}

/// `dim.x * dim.y * dim.z`.
TANDEM_HOST_DEVICE u64 volume(Dim3 dim) {
  return static_cast<u64>(dim.x) * dim.y * dim.z;
}

/// This thread's linear index within its block (x fastest, as warps are formed).
TANDEM_DEVICE u32 thread_rank() { return static_cast<u32>(linearize(thread_idx(), block_dim())); }

/// Threads per block (at most 1024).
TANDEM_DEVICE u32 block_size() { return static_cast<u32>(volume(block_dim())); }

/// This block's linear index within the grid.
TANDEM_DEVICE u64 block_rank() { return linearize(block_idx(), grid_dim()); }

/// Blocks in the grid.
TANDEM_DEVICE u64 grid_blocks() { return volume(grid_dim()); }

/// This thread's linear index within the whole grid, whatever the launch's
/// dimensionality: grid-stride loops start here ...
TANDEM_DEVICE u64 global_rank() { return block_rank() * block_size() + thread_rank(); }

/// ... and advance by this many.
TANDEM_DEVICE u64 grid_size() { return grid_blocks() * block_size(); }

// ---------------------------------------------------------------------------
// Block synchronization and shared memory
// ---------------------------------------------------------------------------

/// Waits until every thread of the block has arrived (`__syncthreads`); the
/// block's shared-memory writes before it are visible to all after it.
/// Every thread of the block must call it the same number of times.
TANDEM_DEVICE void block_barrier() {
#if defined(TANDEM_BACKEND_GPU)
  __syncthreads();
#else
  const HostThreadCtx* ctx = host::thread_state.ctx;
  // The backend's barrier guarantees only that nobody leaves before everybody
  // arrived. The release fence before it and the acquire fence after it make
  // it a synchronization point for shared memory as well, whatever ordering
  // the backend's own flag operations use: a thread's exit depends on reading
  // a value written after every other thread's arrival, and fence-to-fence
  // synchronization carries the plain writes across.
  fence_acq_rel<scope::block>();
  host::switch_point([ctx] { ctx->barrier(ctx); });
  fence_acq_rel<scope::block>();
#endif
}

/// The block's dynamic shared memory (`LaunchConfig::shared_mem_bytes` of
/// it), 16-aligned, as `T*`.
template <typename T>
TANDEM_DEVICE T* dynamic_shared() {
  static_assert(alignof(T) <= 16, "dynamic shared memory is 16-aligned");
#if defined(TANDEM_BACKEND_GPU)
  TANDEM_DYNAMIC_SHARED_DECL tandem_dynamic_shared_bytes[];
  return reinterpret_cast<T*>(tandem_dynamic_shared_bytes);
#else
  return reinterpret_cast<T*>(host::thread_state.ctx->shared_mem + HOST_STATIC_SHARED_BYTES);
#endif
}

}  // namespace tandem
