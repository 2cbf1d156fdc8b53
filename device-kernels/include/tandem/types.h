// Fixed-width types and the few type utilities every Tandem header needs.
//
// Self-contained on purpose: NVRTC has no standard library include path, so
// nothing here (or in any Tandem header) includes a system header.
#pragma once

namespace tandem {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef long long i64;
typedef float f32;
typedef double f64;

static_assert(sizeof(u8) == 1 && sizeof(u16) == 2 && sizeof(u32) == 4 && sizeof(u64) == 8,
              "unsigned widths");
static_assert(sizeof(i32) == 4 && sizeof(i64) == 8 && sizeof(f32) == 4 && sizeof(f64) == 8,
              "signed and float widths");
static_assert(sizeof(void*) == 8, "Tandem's shared layouts assume 64-bit addresses");

/// `static_assert(offsetof(T, field) == offset)`, naming the field on failure.
/// NVRTC's front end has no `__builtin_offsetof` (and no <cstddef>), so there
/// the check is left to the nvcc, hipcc and host builds of the same source,
/// which lay these plain structs out the same way.
#if defined(__CUDACC_RTC__)
#define TANDEM_ASSERT_OFFSET(T, field, offset)
#else
#define TANDEM_ASSERT_OFFSET(T, field, offset) \
  static_assert(__builtin_offsetof(T, field) == (offset), #T "::" #field " is not at offset " #offset)
#endif

/// Grid or block dimensions (`tandem_hal::Dim3`).
struct Dim3 {
  u32 x;
  u32 y;
  u32 z;
};
static_assert(sizeof(Dim3) == 12, "Dim3 size differs from tandem_hal::Dim3");

/// Names `T` in positions where the declarator syntax would otherwise split
/// it (`type_t<u32[256]> name;` declares an array).
template <typename T>
struct type_identity {
  typedef T type;
};
template <typename T>
using type_t = typename type_identity<T>::type;

/// `std::is_same` without the standard library.
template <typename A, typename B>
struct is_same {
  static constexpr bool value = false;
};
template <typename A>
struct is_same<A, A> {
  static constexpr bool value = true;
};

}  // namespace tandem
