// The blob store's kernels: the header's values (for the wire check) and
// kernel threads putting and getting blobs of their own through the
// device's queue segment (tests/kernels.rs, benches/blob.rs).
#include "tandem/blob.h"

using tandem::f32;
using tandem::i32;
using tandem::u32;
using tandem::u64;
using tandem::u8;

/// Writes blob.h's ids, codes and limits to out[0..26], in the order
/// tandem_blob::wire lists them (tests/kernels.rs reads them back).
TANDEM_KERNEL tandem_blob_wire(u64* out) {
  namespace b = tandem::blob;
  if (tandem::global_rank() != 0) {
    return;
  }
  const i32 codes[] = {b::code::EMPTY_NAME,   b::code::NAME_TOO_LONG, b::code::UNKNOWN_TAG,   b::code::NOT_FOUND,
                       b::code::OUT_OF_RANGE, b::code::EMPTY_RANGE,   b::code::TOO_LARGE,     b::code::NO_SPACE,
                       b::code::BAD_SCORE,    b::code::FILL,          b::code::TARGET_CREATE, b::code::TARGET_SIZE,
                       b::code::TARGET_IO,    b::code::TARGET_MISMATCH, b::code::CONFIG,      b::code::METADATA,
                       b::code::CORRUPT,      b::code::BAD_POINTER};
  u32 i = 0;
  out[i++] = b::POOL;
  out[i++] = b::method::TAG;
  out[i++] = b::method::PUT;
  out[i++] = b::method::GET;
  out[i++] = b::method::STAT;
  out[i++] = b::method::DELETE;
  for (i32 c : codes) {
    out[i++] = static_cast<u64>(c);
  }
  out[i++] = b::NAME_MAX;
  out[i++] = b::COPY_SPACE;
}

/// Modes of tandem_blob_put_get.
constexpr u32 MODE_PUT_GET_CHECK = 0;
constexpr u32 MODE_PUT = 1;
constexpr u32 MODE_GET = 2;

/// Status past tandem::rt_status's values: a get returned other bytes.
constexpr u32 STATUS_MISMATCH = 1000;

/// Byte i of round `round` of thread `rank`'s blob: every round's bytes
/// differ, so a get that returned an older version or another thread's
/// blob is caught.
TANDEM_DEVICE u8 pattern(u64 rank, u64 round, u64 i) {
  return static_cast<u8>(rank * 131 + round * 31 + i * 7 + (i >> 8));
}

/// Thread r's blob name, "k<r>", into `name` (24 bytes); its length.
TANDEM_DEVICE u32 blob_name(u64 rank, char* name) {
  char digits[20];
  u32 n = 0;
  do {
    digits[n++] = static_cast<char>('0' + rank % 10);
    rank /= 10;
  } while (rank != 0);
  name[0] = 'k';
  for (u32 i = 0; i < n; ++i) {
    name[1 + i] = digits[n - 1 - i];
  }
  return n + 1;
}

/// Every thread r, `rounds` times: (mode PUT_GET_CHECK) fills a buffer of
/// blob_bytes with round's pattern, puts it as blob "k<r>" of `tag` at
/// offset 0 with `score`, gets it back into a second buffer and compares;
/// (mode PUT) only the put; (mode GET) only the get of a blob an earlier
/// launch put. Through lane (block rank mod lanes) of the device segment at
/// `segment` (`len` bytes), waiting with `stop` and `spin_budget`.
/// status[r]: the thread's rt_status (0 ok), or STATUS_MISMATCH; codes[r]:
/// the first nonzero blob code a call returned (0: none).
TANDEM_KERNEL tandem_blob_put_get(u8* segment, u64 len, u64 tag, u64 blob_bytes, u64 rounds, u32 mode, f32 score,
                                  const u32* stop, u64 spin_budget, u32* status, i32* codes) {
  namespace b = tandem::blob;
  TANDEM_SHARED(tandem::RtContext, rt);
  const tandem::RuntimeSegmentHeader* h = reinterpret_cast<const tandem::RuntimeSegmentHeader*>(segment);
  const tandem::MemoryBackend backend{h->id, tandem::backend_kind::PINNED, 0, reinterpret_cast<u64>(segment), len};
  // Per thread: its future (48 + COPY_SPACE bytes), its notify word, and
  // two data buffers, with alignment slack.
  const u64 per_thread = 512 + 2 * ((blob_bytes + 15) & ~u64{15});
  tandem::rt_init(rt, backend, static_cast<u64>(tandem::block_size()) * per_thread + 256);
  const u64 r = tandem::global_rank();
  tandem::RtFuture f{};
  b::Buffer data{};
  b::Buffer back{};
  tandem::rt_status st = tandem::rt_future_alloc(rt, b::COPY_SPACE, &f);
  if (st == tandem::rt_status::ok) st = b::buffer_alloc(rt, blob_bytes, &data);
  if (st == tandem::rt_status::ok) st = b::buffer_alloc(rt, blob_bytes, &back);
  const u32 lane = static_cast<u32>(tandem::block_rank() % (st == tandem::rt_status::ok ? rt.num_lanes : 1));
  char name[24];
  const u32 name_len = blob_name(r, name);
  u32 result = static_cast<u32>(st);
  i32 first_code = 0;
  for (u64 round = 0; st == tandem::rt_status::ok && round < rounds; ++round) {
    i32 rc = 0;
    if (mode != MODE_GET) {
      for (u64 i = 0; i < blob_bytes; ++i) {
        data.data[i] = pattern(r, round, i);
      }
      u64 size = 0;
      st = b::put(rt, f, lane, tag, name, name_len, 0, data, score, stop, spin_budget, &size, &rc);
      if (st != tandem::rt_status::ok || rc != 0) {
        first_code = rc;
        break;
      }
    }
    if (mode != MODE_PUT) {
      st = b::get(rt, f, lane, tag, name, name_len, 0, back, stop, spin_budget, &rc);
      if (st != tandem::rt_status::ok || rc != 0) {
        first_code = rc;
        break;
      }
    }
    if (mode == MODE_PUT_GET_CHECK) {
      for (u64 i = 0; i < blob_bytes; ++i) {
        if (back.data[i] != pattern(r, round, i)) {
          result = STATUS_MISMATCH;
          break;
        }
      }
      if (result == STATUS_MISMATCH) {
        break;
      }
    }
  }
  if (result != STATUS_MISMATCH) {
    result = static_cast<u32>(st);
  }
  status[r] = result;
  codes[r] = first_code;
}
