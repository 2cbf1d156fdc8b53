// A user's kernel built for the CPU device by the host C++ compiler, and
// launched through Tandem's C ABI (tandem_device_queues_launch_cpu): the
// CPU device's counterpart of nvcc's `<<<grid, block>>>`.
//
// In the translation unit that defines the kernel (with TANDEM_KERNEL,
// tandem/portability.h), after its definition:
//
//   TANDEM_CPU_KERNEL(my_kernel)
//
// defines the kernel's entry (what the host backend calls once per GPU
// thread, as tandem-kernel-build generates for Rust crates' kernels) and
// `tandem_cpu_kernel_my_kernel()`, its tandem_host_kernel descriptor, with
// the parameter kinds read from the kernel's signature. Parameters must be
// 32- or 64-bit integers, float, double or pointers.
//
// Only for the CPU device: under nvcc or hipcc (TANDEM_BACKEND_GPU) the
// macro expands to nothing and kernels launch with the vendor's syntax.
#pragma once

#include "tandem.h"
#include "tandem/backend.h"

#if defined(TANDEM_BACKEND_HOST)
#include <cstddef>
#include <type_traits>
#include <utility>

namespace tandem {
namespace cpu {

/// The C ABI's kind of a kernel parameter of type T.
template <typename T>
constexpr tandem_arg_kind kind_of() {
  if constexpr (std::is_pointer_v<T>) {
    return TANDEM_ARG_PTR;
  } else if constexpr (std::is_same_v<T, float>) {
    return TANDEM_ARG_F32;
  } else if constexpr (std::is_same_v<T, double>) {
    return TANDEM_ARG_F64;
  } else {
    static_assert(std::is_integral_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                  "a CPU-device kernel parameter is a 32/64-bit integer, float, double or pointer");
    if constexpr (sizeof(T) == 4) {
      return std::is_signed_v<T> ? TANDEM_ARG_I32 : TANDEM_ARG_U32;
    } else {
      return std::is_signed_v<T> ? TANDEM_ARG_I64 : TANDEM_ARG_U64;
    }
  }
}

/// The kinds of parameters P, with one spare element so that a kernel of
/// no parameters has an array too.
template <typename... P>
inline constexpr tandem_arg_kind kinds_of[sizeof...(P) + 1] = {kind_of<P>()..., 0};

/// Calls `kernel` with its parameters unpacked from `args`.
template <typename... P, std::size_t... I>
inline void call(void (*kernel)(P...), const void* const* args, std::index_sequence<I...>) {
  (void)args;
  kernel(::tandem::host::kernel_arg<P>(args, static_cast<u32>(I))...);
}

template <typename... P>
inline void call(void (*kernel)(P...), const void* const* args) {
  call(kernel, args, std::index_sequence_for<P...>{});
}

/// The descriptor of `kernel`, whose entry is `entry`.
template <typename... P>
inline tandem_host_kernel describe(const char* name, void (*)(P...),
                                   void (*entry)(const void*, const void* const*)) {
  return tandem_host_kernel{name, entry, kinds_of<P...>, sizeof...(P)};
}

}  // namespace cpu
}  // namespace tandem

#define TANDEM_CPU_KERNEL(name)                                                                        \
  extern "C" void tandem_cpu_entry_##name(const void* ctx, const void* const* args) noexcept {        \
    ::tandem::host::enter_kernel(static_cast<const ::tandem::HostThreadCtx*>(ctx));                   \
    ::tandem::cpu::call(&name, args);                                                                  \
    ::tandem::host::leave_kernel();                                                                    \
  }                                                                                                    \
  inline tandem_host_kernel tandem_cpu_kernel_##name() {                                              \
    return ::tandem::cpu::describe(#name, &name, &tandem_cpu_entry_##name);                          \
  }
#else
#define TANDEM_CPU_KERNEL(name)
#endif
