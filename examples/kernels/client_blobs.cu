// The client_blobs example's kernel: run by a program that is a client of a
// runtime in another process, on device queues of its own. Its threads
// create (or find) a tag, put a blob each, get it back and compare: the
// same tandem/blob.h calls a kernel in the runtime's own process makes.
#include "tandem/blob.h"

using tandem::i32;
using tandem::u32;
using tandem::u64;
using tandem::u8;

/// Status past tandem::rt_status's values: a get returned other bytes.
constexpr u32 CLIENT_BLOBS_MISMATCH = 1000;

/// Byte i of program `program`'s thread `rank`'s blob: two programs' blobs
/// differ, so one reading the other's is caught.
TANDEM_DEVICE u8 client_blobs_pattern(u32 program, u64 rank, u64 i) {
  return static_cast<u8>(program * 77 + rank * 131 + i * 7 + (i >> 8));
}

/// "p<program>-t<rank>" into `name` (at least 24 bytes); its length.
TANDEM_DEVICE u32 client_blobs_name(u32 program, u64 rank, char* name) {
  name[0] = 'p';
  u32 n = tandem::blob::append_decimal(name, 1, program);
  name[n++] = '-';
  name[n++] = 't';
  return tandem::blob::append_decimal(name, n, rank);
}

/// Every thread: the tag "client-blobs" (created by whichever thread, of
/// whichever program, comes first), then blob "p<program>-t<rank>" of
/// `blob_bytes` put, got back and compared. status[r] is the thread's
/// tandem::rt_status (ok), CLIENT_BLOBS_MISMATCH, or why it stopped;
/// codes[r] the blob store's code of a call that failed (0 otherwise).
TANDEM_KERNEL example_client_blobs(u8* segment, u64 len, u32 program, u64 blob_bytes, const u32* stop,
                                   u64 spin_budget, u32* status, i32* codes) {
  namespace b = tandem::blob;
  TANDEM_SHARED(tandem::RtContext, rt);
  const tandem::RuntimeSegmentHeader* h = reinterpret_cast<const tandem::RuntimeSegmentHeader*>(segment);
  const tandem::MemoryBackend backend{h->id, tandem::backend_kind::PINNED, 0, reinterpret_cast<u64>(segment), len};
  const u64 padded = (blob_bytes + 15) & ~u64{15};
  // Per thread: its future and notify word, and two data buffers.
  tandem::rt_init(rt, backend, tandem::block_size() * (512 + 2 * padded) + 256);
  const u64 r = tandem::global_rank();
  tandem::RtFuture f{};
  b::Buffer data{};
  b::Buffer back{};
  tandem::rt_status st = tandem::rt_future_alloc(rt, b::COPY_SPACE, &f);
  if (st == tandem::rt_status::ok) st = b::buffer_alloc(rt, blob_bytes, &data);
  if (st == tandem::rt_status::ok) st = b::buffer_alloc(rt, blob_bytes, &back);
  const u32 lane = static_cast<u32>(tandem::block_rank() % (st == tandem::rt_status::ok ? rt.num_lanes : 1));
  i32 rc = 0;
  u64 tag = 0;
  const char tag_name[] = "client-blobs";
  if (st == tandem::rt_status::ok) {
    st = b::get_or_create_tag(rt, f, lane, tag_name, sizeof(tag_name) - 1, stop, spin_budget, &tag, &rc);
  }
  char name[24];
  const u32 name_len = client_blobs_name(program, r, name);
  if (st == tandem::rt_status::ok && rc == 0) {
    for (u64 i = 0; i < blob_bytes; ++i) {
      data.data[i] = client_blobs_pattern(program, r, i);
    }
    u64 size = 0;
    st = b::put(rt, f, lane, tag, name, name_len, 0, data, 1.0f, stop, spin_budget, &size, &rc);
  }
  if (st == tandem::rt_status::ok && rc == 0) {
    st = b::get(rt, f, lane, tag, name, name_len, 0, back, stop, spin_budget, &rc);
  }
  u32 result = static_cast<u32>(st);
  if (st == tandem::rt_status::ok && rc == 0) {
    for (u64 i = 0; i < blob_bytes; ++i) {
      if (back.data[i] != client_blobs_pattern(program, r, i)) {
        result = CLIENT_BLOBS_MISMATCH;
        break;
      }
    }
  }
  status[r] = result;
  codes[r] = rc;
}
