// Kernels over tandem-shm-core's FutureShm (tandem/future.h): a completer
// that Rust waits on, and a block-wide waiter on a future Rust completes.
#include "tandem/future.h"

using tandem::i32;
using tandem::u32;
using tandem::u64;
using tandem::u8;

/// What tandem_future_complete does with the copy space.
namespace complete_mode {
/// Answers the task (see tandem_future_complete).
constexpr u32 ANSWER = 0;
/// Reports an output one byte larger than the copy space.
constexpr u32 OVERSIZED = 1;
/// The output function fails.
constexpr u32 FAIL = 2;
}  // namespace complete_mode

/// Global rank 0 completes the future in the `len` bytes at `future` with
/// `return_code`. The input is the record (u64 a, u64 b, bytes payload); in
/// mode ANSWER the output is (u64 a + b, u64 a ^ b, bytes payload reversed,
/// bool payload non-empty). status[0] = future_status of the attach, input
/// or completion; status[1] = ser_status of reading the input (which, when
/// not ok, completes the future with RC_OUTPUT_FAILED).
TANDEM_KERNEL tandem_future_complete(u8* future, u64 len, i32 return_code, u32 mode,
                                     u32* status) {
  if (tandem::global_rank() != 0) {
    return;
  }
  tandem::FutureView f;
  tandem::future_status st = tandem::future_attach(future, len, &f);
  const u8* input = nullptr;
  u32 input_len = 0;
  if (st == tandem::future_status::ok) {
    st = tandem::future_input(f, &input, &input_len);
  }
  if (st != tandem::future_status::ok) {
    status[0] = static_cast<u32>(st);
    status[1] = 0;
    return;
  }
  u64 a = 0, b = 0, payload_len = 0;
  const u8* payload = nullptr;
  tandem::Reader reader = tandem::Reader::over(input, input_len);
  const tandem::ser_status read = reader.get_record([&](tandem::Reader& r) {
    tandem::ser_status s = r.get_u64(&a);
    if (s == tandem::ser_status::ok) {
      s = r.get_u64(&b);
    }
    return s == tandem::ser_status::ok ? r.get_bytes(&payload, &payload_len) : s;
  });
  // The answer is written into the copy space the input lives in: copy what
  // is still needed out of it first (the payload is reversed byte by byte
  // from a private copy, bounded by the copy space).
  u8 reversed[256];
  const bool fits = payload_len <= sizeof reversed;
  for (u64 i = 0; fits && i < payload_len; ++i) {
    reversed[i] = payload[payload_len - 1 - i];
  }
  const bool answerable = read == tandem::ser_status::ok && fits && mode == complete_mode::ANSWER;
  auto answer = tandem::serialize_into([&](tandem::Writer& w) {
    tandem::ser_status s = w.put_u64(a + b);
    if (s == tandem::ser_status::ok) {
      s = w.put_u64(a ^ b);
    }
    if (s == tandem::ser_status::ok) {
      s = w.put_bytes(reversed, payload_len);
    }
    return s == tandem::ser_status::ok ? w.put_bool(payload_len != 0) : s;
  });
  st = tandem::future_complete(f, return_code, [&](u8* buf, u32 cap, u64* written) {
    if (mode == complete_mode::OVERSIZED) {
      *written = static_cast<u64>(cap) + 1;
      return true;
    }
    return answerable && answer(buf, cap, written);
  });
  status[0] = static_cast<u32>(st);
  status[1] = static_cast<u32>(read);
}

/// Every block waits for the future in the `len` bytes at `future` with
/// future_wait_block (thread 0 spins, for at most `spin_budget` rounds or
/// until `*stop` is raised). Each thread r then writes out[3r] = wait_outcome,
/// out[3r + 1] = the return code (as u32), out[3r + 2] = the first u64 of the
/// output when completed (u64 max when not readable). A failed attach writes
/// out[3r] = 100 + future_status.
TANDEM_KERNEL tandem_future_wait(u8* future, u64 len, const u32* stop, u64 spin_budget,
                                 u64* out) {
  TANDEM_SHARED(tandem::FutureWaitSlot, slot);
  const u64 r = tandem::global_rank();
  tandem::FutureView f;
  const tandem::future_status st = tandem::future_attach(future, len, &f);
  if (st != tandem::future_status::ok) {
    // Uniform across the block (same bytes), so no thread reaches a barrier.
    out[3 * r] = 100 + static_cast<u64>(st);
    return;
  }
  i32 code = 0;
  const tandem::wait_outcome outcome = tandem::future_wait_block(f, stop, spin_budget, slot, &code);
  u64 first = ~0ull;
  const u8* output = nullptr;
  u32 output_len = 0;
  if (outcome == tandem::wait_outcome::completed &&
      tandem::future_output(f, &output, &output_len) == tandem::future_status::ok) {
    tandem::Reader reader = tandem::Reader::over(output, output_len);
    u64 value;
    if (reader.get_u64(&value) == tandem::ser_status::ok) {
      first = value;
    }
  }
  out[3 * r] = static_cast<u64>(outcome);
  out[3 * r + 1] = static_cast<u32>(code);
  out[3 * r + 2] = first;
}
