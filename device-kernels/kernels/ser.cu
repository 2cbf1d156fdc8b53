// Kernels over the serializer (tandem/ser.h): a fixed record written by C++
// and read by Rust, and the reverse. The record ("sample") is, in order:
//
//   u8, u16, u32, u64, i8, i16, i32, i64, f32, f64, bool, bytes
//
// Its scalar values travel between Rust and the kernels as eleven u64 words
// (the integers zero-extended from their bit patterns, f32/f64 as their IEEE
// bits, bool as 0/1) so that no float conversion can blur a NaN payload.
#include "tandem/ser.h"
#include "tandem/portability.h"

using tandem::u64;
using tandem::u8;

/// Scalar words of a sample.
constexpr u64 SAMPLE_SCALARS = 11;

/// Global rank 0 writes the sample made of `values` and the `bytes_len` bytes
/// at `bytes` into the `len` bytes at `buf`, as one record.
/// out[0] = ser_status, out[1] = the writer's position afterwards (0 on
/// failure: no partial record), out[2] = on buffer_too_small the record's
/// full length (Rust's `BufferTooSmall::needed`).
TANDEM_KERNEL tandem_ser_write_sample(u8* buf, u64 len, const u64* values, const u8* bytes,
                                      u64 bytes_len, u64* out) {
  if (tandem::global_rank() != 0) {
    return;
  }
  tandem::Writer writer = tandem::Writer::over(buf, len);
  const tandem::ser_status st = writer.put_record([&](tandem::Writer& w) {
    tandem::ser_status s = w.put_u8(static_cast<u8>(values[0]));
    if (s == tandem::ser_status::ok) s = w.put_u16(static_cast<tandem::u16>(values[1]));
    if (s == tandem::ser_status::ok) s = w.put_u32(static_cast<tandem::u32>(values[2]));
    if (s == tandem::ser_status::ok) s = w.put_u64(values[3]);
    if (s == tandem::ser_status::ok) s = w.put_i8(static_cast<signed char>(values[4]));
    if (s == tandem::ser_status::ok) s = w.put_i16(static_cast<short>(values[5]));
    if (s == tandem::ser_status::ok) s = w.put_i32(static_cast<tandem::i32>(values[6]));
    if (s == tandem::ser_status::ok) s = w.put_i64(static_cast<tandem::i64>(values[7]));
    if (s == tandem::ser_status::ok) {
      s = w.put_f32(tandem::detail::f32_from_bits(static_cast<tandem::u32>(values[8])));
    }
    if (s == tandem::ser_status::ok) s = w.put_f64(tandem::detail::f64_from_bits(values[9]));
    if (s == tandem::ser_status::ok) s = w.put_bool(values[10] != 0);
    if (s == tandem::ser_status::ok) s = w.put_bytes(bytes, bytes_len);
    return s;
  });
  out[0] = static_cast<u64>(st);
  out[1] = writer.pos;
  out[2] = st == tandem::ser_status::buffer_too_small ? writer.needed : 0;
}

/// Global rank 0 reads a sample from the `len` bytes at `buf` into `values`
/// (SAMPLE_SCALARS words, as tandem_ser_write_sample takes them).
/// out[0] = ser_status, out[1] = the reader's position afterwards (0 on
/// failure), out[2] = offset of the byte string in `buf`, out[3] = its length.
TANDEM_KERNEL tandem_ser_read_sample(const u8* buf, u64 len, u64* values, u64* out) {
  if (tandem::global_rank() != 0) {
    return;
  }
  u64 v[SAMPLE_SCALARS] = {};
  const u8* bytes = nullptr;
  u64 bytes_len = 0;
  tandem::Reader reader = tandem::Reader::over(buf, len);
  const tandem::ser_status st = reader.get_record([&](tandem::Reader& r) {
    // Integers are read at their width and zero-extended (their bit
    // pattern); the float words are read as their bits, which is what
    // get_f32/get_f64 do before converting.
    u8 b = 0;
    bool flag = false;
    tandem::ser_status s = r.get_u8(&b);
    v[0] = b;
    if (s == tandem::ser_status::ok) s = r.get_le(2, &v[1]);
    if (s == tandem::ser_status::ok) s = r.get_le(4, &v[2]);
    if (s == tandem::ser_status::ok) s = r.get_le(8, &v[3]);
    if (s == tandem::ser_status::ok) s = r.get_le(1, &v[4]);
    if (s == tandem::ser_status::ok) s = r.get_le(2, &v[5]);
    if (s == tandem::ser_status::ok) s = r.get_le(4, &v[6]);
    if (s == tandem::ser_status::ok) s = r.get_le(8, &v[7]);
    if (s == tandem::ser_status::ok) {
      tandem::f32 f = 0;
      s = r.get_f32(&f);
      v[8] = tandem::detail::f32_bits(f);
    }
    if (s == tandem::ser_status::ok) {
      tandem::f64 d = 0;
      s = r.get_f64(&d);
      v[9] = tandem::detail::f64_bits(d);
    }
    if (s == tandem::ser_status::ok) {
      s = r.get_bool(&flag);
      v[10] = flag ? 1 : 0;
    }
    if (s == tandem::ser_status::ok) s = r.get_bytes(&bytes, &bytes_len);
    return s;
  });
  for (u64 i = 0; i < SAMPLE_SCALARS; ++i) {
    values[i] = v[i];
  }
  out[0] = static_cast<u64>(st);
  out[1] = reader.pos;
  out[2] = st == tandem::ser_status::ok ? static_cast<u64>(bytes - buf) : 0;
  out[3] = bytes_len;
}
