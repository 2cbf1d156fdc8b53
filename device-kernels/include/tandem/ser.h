// The serializer of tandem-shm-core (shm-core/src/ser.rs) for kernels: a
// Writer and a Reader over a fixed buffer (a future's copy space, say) that
// produce and accept exactly Rust's bytes:
//
//   * u8 u16 u32 u64 i8 i16 i32 i64: little-endian, fixed width, two's
//     complement;
//   * f32, f64: the IEEE 754 bit pattern as a little-endian u32 / u64;
//   * bool: one byte, 0 or 1 (any other byte is ser_status::invalid_bool);
//   * byte strings (and strings, as their UTF-8 bytes): a u32 little-endian
//     length, then the bytes;
//   * fixed arrays and structs: their elements / fields back to back.
//
// Failure leaves no partial value: a put or get that fails leaves the
// position where it was, and put_record / get_record extend that to a whole
// composite value. Bytes past a writer's position may have been scribbled on.
// Bytes are assembled one at a time with shifts, so the encoding does not
// depend on the machine's byte order.
#pragma once

#include "tandem/backend.h"
#include "tandem/types.h"

namespace tandem {

/// Why a value could not be written or read (shm-core's `SerError`; strings
/// are read as bytes on the device, so `InvalidUtf8` has no counterpart).
enum class ser_status : u32 {
  ok = 0,
  /// A write needs more bytes than remain (Writer::needed says how many).
  buffer_too_small = 1,
  /// A read needs more bytes than remain.
  unexpected_end = 2,
  /// A bool byte that is neither 0 nor 1.
  invalid_bool = 3,
  /// A length does not fit the u32 prefix, or a position overflowed.
  length_overflow = 5,
};

namespace detail {

TANDEM_DEVICE u32 f32_bits(f32 v) {
#if defined(TANDEM_BACKEND_GPU)
  return __float_as_uint(v);
#else
  u32 bits;
  __builtin_memcpy(&bits, &v, sizeof bits);
  return bits;
#endif
}

TANDEM_DEVICE f32 f32_from_bits(u32 bits) {
#if defined(TANDEM_BACKEND_GPU)
  return __uint_as_float(bits);
#else
  f32 v;
  __builtin_memcpy(&v, &bits, sizeof v);
  return v;
#endif
}

TANDEM_DEVICE u64 f64_bits(f64 v) {
#if defined(TANDEM_BACKEND_GPU)
  return static_cast<u64>(__double_as_longlong(v));
#else
  u64 bits;
  __builtin_memcpy(&bits, &v, sizeof bits);
  return bits;
#endif
}

TANDEM_DEVICE f64 f64_from_bits(u64 bits) {
#if defined(TANDEM_BACKEND_GPU)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  f64 v;
  __builtin_memcpy(&v, &bits, sizeof v);
  return v;
#endif
}

}  // namespace detail

/// Writes values into a fixed buffer or, made by `counting()`, only counts
/// their size (Rust's `serialized_len`).
struct Writer {
  /// Destination; null for a counting writer.
  u8* buf;
  /// Capacity of `buf` (u64 max for a counting writer).
  u64 len;
  /// Bytes written so far, all of them complete values.
  u64 pos;
  /// After buffer_too_small: the bytes the failing value (a whole record for
  /// put_record) needs; Rust's `BufferTooSmall::needed`.
  u64 needed;

  /// A writer that fills the `len` bytes at `buf` from their start.
  static TANDEM_DEVICE Writer over(u8* buf, u64 len) { return Writer{buf, len, 0, 0}; }
  /// A writer that stores nothing and only advances its position.
  static TANDEM_DEVICE Writer counting() { return Writer{nullptr, ~0ull, 0, 0}; }

  /// Bytes left in the buffer.
  TANDEM_DEVICE u64 remaining() const { return len - pos; }

  /// Little-endian `bytes`-byte integer; all or nothing.
  TANDEM_DEVICE ser_status put_le(u64 value, u32 bytes) {
    if (bytes > remaining()) {
      needed = bytes;
      return buf == nullptr ? ser_status::length_overflow : ser_status::buffer_too_small;
    }
    if (buf != nullptr) {
      for (u32 i = 0; i < bytes; ++i) {
        buf[pos + i] = static_cast<u8>(value >> (8 * i));
      }
    }
    pos += bytes;
    return ser_status::ok;
  }

  TANDEM_DEVICE ser_status put_u8(u8 v) { return put_le(v, 1); }
  TANDEM_DEVICE ser_status put_u16(u16 v) { return put_le(v, 2); }
  TANDEM_DEVICE ser_status put_u32(u32 v) { return put_le(v, 4); }
  TANDEM_DEVICE ser_status put_u64(u64 v) { return put_le(v, 8); }
  TANDEM_DEVICE ser_status put_i8(signed char v) { return put_le(static_cast<u8>(v), 1); }
  TANDEM_DEVICE ser_status put_i16(short v) { return put_le(static_cast<u16>(v), 2); }
  TANDEM_DEVICE ser_status put_i32(i32 v) { return put_le(static_cast<u32>(v), 4); }
  TANDEM_DEVICE ser_status put_i64(i64 v) { return put_le(static_cast<u64>(v), 8); }
  TANDEM_DEVICE ser_status put_f32(f32 v) { return put_le(detail::f32_bits(v), 4); }
  TANDEM_DEVICE ser_status put_f64(f64 v) { return put_le(detail::f64_bits(v), 8); }
  TANDEM_DEVICE ser_status put_bool(bool v) { return put_le(v ? 1 : 0, 1); }

  /// A u32 length prefix, then `n` bytes from `data`; all or nothing.
  TANDEM_DEVICE ser_status put_bytes(const u8* data, u64 n) {
    if (n > 0xFFFFFFFFull || n > ~0ull - 4) {
      return ser_status::length_overflow;
    }
    if (n + 4 > remaining()) {
      needed = n + 4;
      return buf == nullptr ? ser_status::length_overflow : ser_status::buffer_too_small;
    }
    put_le(n, 4);
    if (buf != nullptr) {
      for (u64 i = 0; i < n; ++i) {
        buf[pos + i] = data[i];
      }
    }
    pos += n;
    return ser_status::ok;
  }

  /// Writes a composite value: `write(Writer&)` puts its fields and returns
  /// the first failure. On failure the position is restored, and for
  /// buffer_too_small `needed` is the whole record's size (a counting pass on
  /// this error path only, as Rust's `Writer::put`).
  template <typename F>
  TANDEM_DEVICE ser_status put_record(F write) {
    const u64 start = pos;
    const ser_status st = write(*this);
    if (st == ser_status::ok) {
      return st;
    }
    pos = start;
    if (st == ser_status::buffer_too_small) {
      Writer counter = counting();
      const ser_status counted = write(counter);
      if (counted != ser_status::ok) {
        return counted;
      }
      needed = counter.pos;
    }
    return st;
  }
};

/// Reads values from a byte buffer; byte strings are returned as pointers
/// into it.
struct Reader {
  const u8* buf;
  u64 len;
  /// Bytes consumed so far.
  u64 pos;

  /// A reader at the start of the `len` bytes at `buf`.
  static TANDEM_DEVICE Reader over(const u8* buf, u64 len) { return Reader{buf, len, 0}; }

  /// Bytes not yet read.
  TANDEM_DEVICE u64 remaining() const { return len - pos; }

  /// A little-endian `bytes`-byte integer; nothing consumed on failure.
  TANDEM_DEVICE ser_status get_le(u32 bytes, u64* out) {
    if (bytes > remaining()) {
      return ser_status::unexpected_end;
    }
    u64 v = 0;
    for (u32 i = 0; i < bytes; ++i) {
      v |= static_cast<u64>(buf[pos + i]) << (8 * i);
    }
    pos += bytes;
    *out = v;
    return ser_status::ok;
  }

  /// Reads a `bytes`-byte integer into `*out` (an integer type of that size).
  template <typename T>
  TANDEM_DEVICE ser_status get_int(T* out) {
    u64 v;
    const ser_status st = get_le(sizeof(T), &v);
    if (st == ser_status::ok) {
      *out = static_cast<T>(v);
    }
    return st;
  }

  TANDEM_DEVICE ser_status get_u8(u8* out) { return get_int(out); }
  TANDEM_DEVICE ser_status get_u16(u16* out) { return get_int(out); }
  TANDEM_DEVICE ser_status get_u32(u32* out) { return get_int(out); }
  TANDEM_DEVICE ser_status get_u64(u64* out) { return get_int(out); }
  TANDEM_DEVICE ser_status get_i8(signed char* out) { return get_int(out); }
  TANDEM_DEVICE ser_status get_i16(short* out) { return get_int(out); }
  TANDEM_DEVICE ser_status get_i32(i32* out) { return get_int(out); }
  TANDEM_DEVICE ser_status get_i64(i64* out) { return get_int(out); }

  TANDEM_DEVICE ser_status get_f32(f32* out) {
    u32 bits;
    const ser_status st = get_int(&bits);
    if (st == ser_status::ok) {
      *out = detail::f32_from_bits(bits);
    }
    return st;
  }

  TANDEM_DEVICE ser_status get_f64(f64* out) {
    u64 bits;
    const ser_status st = get_int(&bits);
    if (st == ser_status::ok) {
      *out = detail::f64_from_bits(bits);
    }
    return st;
  }

  /// A bool; a byte other than 0 and 1 is invalid_bool and is not consumed.
  TANDEM_DEVICE ser_status get_bool(bool* out) {
    if (remaining() < 1) {
      return ser_status::unexpected_end;
    }
    const u8 byte = buf[pos];
    if (byte > 1) {
      return ser_status::invalid_bool;
    }
    pos += 1;
    *out = byte == 1;
    return ser_status::ok;
  }

  /// A u32-prefixed byte string: `*data` points into the buffer, `*n` is
  /// its length. Nothing is consumed on failure.
  TANDEM_DEVICE ser_status get_bytes(const u8** data, u64* n) {
    const u64 start = pos;
    u32 prefix;
    ser_status st = get_int(&prefix);
    if (st == ser_status::ok && prefix > remaining()) {
      st = ser_status::unexpected_end;
    }
    if (st != ser_status::ok) {
      pos = start;
      return st;
    }
    *data = buf + pos;
    *n = prefix;
    pos += prefix;
    return ser_status::ok;
  }

  /// Reads a composite value: `read(Reader&)` gets its fields and returns the
  /// first failure; the position is restored on failure.
  template <typename F>
  TANDEM_DEVICE ser_status get_record(F read) {
    const u64 start = pos;
    const ser_status st = read(*this);
    if (st != ser_status::ok) {
      pos = start;
    }
    return st;
  }
};

}  // namespace tandem
