// Which compiler is building this source, and the function qualifiers that
// follow from it. Exactly one of TANDEM_BACKEND_{CUDA,HIP,HOST} is defined:
//
//   CUDA  nvcc (__CUDACC__) or NVRTC (__CUDACC_RTC__);
//   HIP   hipcc / clang -x hip (__HIPCC__, __HIP__), checked first because
//         hipcc targeting NVIDIA would also define __CUDACC__;
//   HOST  any other C++17 compiler (g++/clang++): the CPU device, where the
//         GPU threads of a block are fibers of one OS thread, driven by
//         tandem_hal's host backend.
#pragma once

#include "tandem/host_abi.h"
#include "tandem/types.h"

#if defined(__HIPCC__) || defined(__HIP__)
#define TANDEM_BACKEND_HIP 1
#elif defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TANDEM_BACKEND_CUDA 1
#else
#define TANDEM_BACKEND_HOST 1
#endif

#if defined(TANDEM_BACKEND_HIP) && !defined(HIP_INCLUDE_HIP_HIP_RUNTIME_H)
// threadIdx, __syncthreads and friends come from the HIP runtime header, which
// Tandem sources do not include themselves (they must stay free of system
// includes for NVRTC): the HIP build injects it.
#error "Tandem HIP builds need the HIP runtime header first: hipcc -include hip/hip_runtime.h"
#endif

#if defined(TANDEM_BACKEND_CUDA) || defined(TANDEM_BACKEND_HIP)
#define TANDEM_BACKEND_GPU 1
/// A function callable from kernels only.
#if defined(TANDEM_BACKEND_CUDA)
#define TANDEM_DEVICE __device__ __forceinline__
#else
#define TANDEM_DEVICE __device__ inline __attribute__((always_inline))
#endif
/// A function callable from kernels only, kept out of line: a path the hot
/// one seldom takes (a full ring, a refresh of a counter's copy, a long
/// sleep). Inlined, such paths sit between the hot path's instructions and
/// lengthen a lone GPU thread's send (docs/design/pcie.md, "A kernel's own
/// instructions count"; the figures in docs/perf/2026-11-27-h200.md). Takes
/// and returns values, not references to the caller's locals, which would
/// have to leave registers for memory.
#define TANDEM_COLD __device__ inline __attribute__((noinline))
/// A function callable from kernels and from host code.
#define TANDEM_HOST_DEVICE __host__ __device__ inline
/// Declares a kernel: `TANDEM_KERNEL tandem_fill_u32(u32* dst, ...) { ... }`.
/// Unmangled, so a module lookup by the name in kernels.toml finds it.
#define TANDEM_KERNEL extern "C" __global__ void
#else
#define TANDEM_DEVICE inline __attribute__((always_inline))
#define TANDEM_COLD inline __attribute__((noinline))
#define TANDEM_HOST_DEVICE inline
/// On the host a kernel is a plain function of the one translation unit that
/// also holds its generated entry wrapper (`tandem_host_<name>`), which is
/// what the host backend calls.
#define TANDEM_KERNEL static void
#endif

#if defined(TANDEM_BACKEND_HOST)
/// The CPU device's clock (tandem_hal::host_abi::tandem_host_timer_ns).
extern "C" tandem::u64 tandem_host_timer_ns(void) noexcept;
/// A wait loop's turn: lets the block's other threads (fibers of this OS
/// thread) run (tandem_hal::host_abi::tandem_host_yield).
extern "C" void tandem_host_yield(void) noexcept;

namespace tandem {
namespace host {

/// Per-OS-thread state of the CPU device: which GPU thread this OS thread is
/// running right now, and how much of the block's static shared area its
/// `TANDEM_SHARED` declarations have used so far. The block's other threads
/// run on the same OS thread whenever this one waits (switch_point), so it
/// is saved and restored around every wait.
struct ThreadState {
  const HostThreadCtx* ctx;
  u32 shared_cursor;
};

/// Plain data, so no constructor or destructor runs per thread (no
/// __cxa_thread_atexit, no libstdc++ runtime needed).
inline thread_local ThreadState thread_state;

/// Called first by every generated entry wrapper: binds the OS thread to the
/// GPU thread described by `ctx` for the duration of one kernel call.
inline void enter_kernel(const HostThreadCtx* ctx) {
  thread_state.ctx = ctx;
  thread_state.shared_cursor = 0;
}

/// Ends the binding made by enter_kernel, so a stale ctx is never read.
inline void leave_kernel() { thread_state.ctx = nullptr; }

/// Runs `wait` (the block barrier or a wait loop's turn), during which the
/// block's other threads run on this OS thread and bind it to themselves,
/// then binds it back to the calling GPU thread.
template <typename Wait>
inline void switch_point(Wait wait) {
  const ThreadState mine = thread_state;
  wait();
  thread_state = mine;
}

/// A wait loop's turn on the CPU device.
inline void yield_turn() {
  switch_point([] { tandem_host_yield(); });
}

/// Reads parameter `i` of a launch: `args[i]` points at its value. Copied
/// bytewise because a by-value struct's bytes need not be aligned for `T`.
template <typename T>
inline T kernel_arg(const void* const* args, u32 i) {
  T value;
  __builtin_memcpy(&value, args[i], sizeof(T));
  return value;
}

}  // namespace host
}  // namespace tandem
#endif
