// The C ABI between the host (CPU) backend and kernels compiled for it.
//
// C++ mirror of `hal/src/host_abi.rs`; the static_asserts below repeat the
// Rust asserts there, and the crate's build checks both sides against each
// other through bindgen (src/layout_check.rs; `cargo xtask bindings` after an
// edit). Change both or neither.
#pragma once

#include "tandem/types.h"

namespace tandem {

struct HostThreadCtx;

/// Block barrier supplied by the host backend: returns once every thread of
/// the block has called it. Never unwinds.
typedef void (*HostBarrierFn)(const HostThreadCtx* ctx);

/// Bytes at the start of each block's shared memory reserved for
/// `TANDEM_SHARED` variables; dynamic shared memory follows
/// (`tandem_hal::host_abi::HOST_STATIC_SHARED_BYTES`).
constexpr u32 HOST_STATIC_SHARED_BYTES = 48u * 1024u;

/// What one CPU-device thread knows about itself (`tandem_hal::host_abi::HostThreadCtx`).
struct HostThreadCtx {
  Dim3 thread_idx;
  Dim3 block_idx;
  Dim3 block_dim;
  Dim3 grid_dim;
  /// Start of this block's shared memory, 16-aligned:
  /// HOST_STATIC_SHARED_BYTES of static space, then dynamic_shared_bytes.
  unsigned char* shared_mem;
  u32 dynamic_shared_bytes;
  u32 _reserved;
  HostBarrierFn barrier;
  /// Backend state the barrier needs; opaque to kernels.
  const void* barrier_state;
};

/// A kernel entry compiled for the CPU device: `args[i]` points at the value
/// of parameter i (the `cuLaunchKernel` convention).
typedef void (*HostKernelFn)(const HostThreadCtx* ctx, const void* const* args);

TANDEM_ASSERT_OFFSET(HostThreadCtx, thread_idx, 0);
TANDEM_ASSERT_OFFSET(HostThreadCtx, block_idx, 12);
TANDEM_ASSERT_OFFSET(HostThreadCtx, block_dim, 24);
TANDEM_ASSERT_OFFSET(HostThreadCtx, grid_dim, 36);
TANDEM_ASSERT_OFFSET(HostThreadCtx, shared_mem, 48);
TANDEM_ASSERT_OFFSET(HostThreadCtx, dynamic_shared_bytes, 56);
TANDEM_ASSERT_OFFSET(HostThreadCtx, barrier, 64);
TANDEM_ASSERT_OFFSET(HostThreadCtx, barrier_state, 72);
static_assert(sizeof(HostThreadCtx) == 80, "HostThreadCtx size differs from hal");

}  // namespace tandem
