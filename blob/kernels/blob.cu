// The blob store's kernels: the header's values (for the wire check) and
// kernel threads putting and getting blobs of their own through the
// device's queue segment (tests/kernels.rs, benches/blob.rs).
#include "tandem/blob.h"

using tandem::f32;
using tandem::i32;
using tandem::u32;
using tandem::u64;
using tandem::u8;

/// Writes blob.h's ids, codes, limits and PutContext (its constants, size
/// and field offsets) to out[0..51], in the order tests/kernels.rs lists
/// tandem_blob::wire's (it reads them back).
TANDEM_KERNEL tandem_blob_wire(u64* out) {
  namespace b = tandem::blob;
  if (tandem::global_rank() != 0) {
    return;
  }
  const i32 codes[] = {b::code::EMPTY_NAME,   b::code::NAME_TOO_LONG, b::code::UNKNOWN_TAG,   b::code::NOT_FOUND,
                       b::code::OUT_OF_RANGE, b::code::EMPTY_RANGE,   b::code::TOO_LARGE,     b::code::NO_SPACE,
                       b::code::BAD_SCORE,    b::code::FILL,          b::code::TARGET_CREATE, b::code::TARGET_SIZE,
                       b::code::TARGET_IO,    b::code::TARGET_MISMATCH, b::code::CONFIG,      b::code::METADATA,
                       b::code::CORRUPT,      b::code::CONTROL_IN_NAME, b::code::BAD_POINTER,
                       b::code::BUFFER_TOO_SMALL};
  u32 i = 0;
  out[i++] = b::POOL;
  out[i++] = b::method::TAG;
  out[i++] = b::method::PUT;
  out[i++] = b::method::GET;
  out[i++] = b::method::STAT;
  out[i++] = b::method::DELETE;
  out[i++] = b::method::LIST;
  out[i++] = b::method::IDENTIFY;
  out[i++] = b::method::FIND_TAG;
  for (i32 c : codes) {
    out[i++] = static_cast<u64>(c);
  }
  out[i++] = b::MAX_NAME_BYTES;
  out[i++] = b::COPY_SPACE;
  const i32 context_codes[] = {b::code::CORRUPT_FRAME, b::code::BAD_CONTEXT, b::code::NO_TARGET_FOR,
                               b::code::CLASS_TOO_LOW};
  for (i32 c : context_codes) {
    out[i++] = static_cast<u64>(c);
  }
  const u8 context_values[] = {b::compress::SKIP,         b::compress::STATIC,       b::compress::DYNAMIC,
                               b::codec::LZ4,             b::codec::ZSTD,            b::preset::BALANCED,
                               b::preset::FAST,           b::preset::BEST,           b::persistence::VOLATILE,
                               b::persistence::TEMPORARY, b::persistence::LONG_TERM};
  for (u8 v : context_values) {
    out[i++] = v;
  }
  // Offsets from an instance: NVRTC has no offsetof.
  const b::PutContext context{};
  const u8* base = reinterpret_cast<const u8*>(&context);
  out[i++] = sizeof(b::PutContext);
  out[i++] = static_cast<u64>(&context.compress - base);
  out[i++] = static_cast<u64>(&context.codec - base);
  out[i++] = static_cast<u64>(&context.preset - base);
  out[i++] = static_cast<u64>(&context.persistence - base);
}

/// The PutContext a kernel parameter carries: its fields a byte each, the
/// first lowest (tandem_blob::demo packs it so).
TANDEM_DEVICE tandem::blob::PutContext unpack_context(u32 c) {
  return tandem::blob::PutContext{static_cast<u8>(c), static_cast<u8>(c >> 8), static_cast<u8>(c >> 16),
                                  static_cast<u8>(c >> 24)};
}

/// Modes of tandem_blob_put_get (tandem_blob::demo::PutGetMode).
constexpr u32 MODE_PUT_GET_CHECK = 0;
constexpr u32 MODE_PUT = 1;
constexpr u32 MODE_GET = 2;
/// The block's threads fill one buffer together (coalesced), thread 0 puts
/// it as blob "b<block>"; a GPU producing a large result works this way.
constexpr u32 MODE_BLOCK_PUT = 3;
constexpr u32 MODE_BLOCK_GET = 4;
constexpr u32 MODE_BLOCK_PUT_GET_CHECK = 5;
/// Get and compare with the bytes a PUT launch wrote (its first round's,
/// which every round of it puts): a blob another kernel put, on this device
/// or another.
constexpr u32 MODE_GET_CHECK = 6;

/// Status past tandem::rt_status's values: a get returned other bytes.
constexpr u32 STATUS_MISMATCH = 1000;

/// Byte i of round `round` of thread `rank`'s blob: every round's bytes
/// differ, so a get that returned an older version or another thread's
/// blob is caught.
TANDEM_DEVICE u8 pattern(u64 rank, u64 round, u64 i) {
  return static_cast<u8>(rank * 131 + round * 31 + i * 7 + (i >> 8));
}

/// Fills `data` with round `round` of thread `rank`'s pattern, eight bytes
/// a store where it can (on a GPU each store to host memory is a
/// transaction across the link).
TANDEM_DEVICE void fill(const tandem::blob::Buffer& data, u64 rank, u64 round) {
  const u64 words = data.len / 8;
  u64* out = reinterpret_cast<u64*>(data.data);
  for (u64 w = 0; w < words; ++w) {
    u64 word = 0;
    for (u64 k = 0; k < 8; ++k) {
      word |= u64{pattern(rank, round, w * 8 + k)} << (8 * k);
    }
    out[w] = word;
  }
  for (u64 i = words * 8; i < data.len; ++i) {
    data.data[i] = pattern(rank, round, i);
  }
}

/// Word w of round `round` of block `block`'s blob (per-block modes).
TANDEM_DEVICE u64 block_pattern(u64 block, u64 round, u64 w) {
  return (block << 44) ^ (round << 36) ^ (w * 0x9E3779B97F4A7C15ull);
}

/// "<prefix><n>" into `name` (24 bytes); its length.
TANDEM_DEVICE u32 blob_name(char prefix, u64 n, char* name) {
  char digits[20];
  u32 count = 0;
  do {
    digits[count++] = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n != 0);
  name[0] = prefix;
  for (u32 i = 0; i < count; ++i) {
    name[1 + i] = digits[count - 1 - i];
  }
  return count + 1;
}

namespace {

/// The per-block modes: one blob per block, `blob_bytes` a multiple of 8.
struct BlockBlob {
  tandem::blob::Buffer data;
  tandem::blob::Buffer back;
  tandem::rt_status status;
  i32 code;
  bool mismatch;
};

}  // namespace

TANDEM_DEVICE void block_put_get(tandem::RtContext& rt, BlockBlob& shared, tandem::RtFuture& f, u64 tag,
                                 u64 blob_bytes, u64 rounds, u32 mode, f32 score,
                                 const tandem::blob::PutContext& context, const u32* stop, u64 spin_budget) {
  namespace b = tandem::blob;
  const u32 me = tandem::thread_rank();
  const u64 block = tandem::block_rank();
  const u64 words = blob_bytes / 8;
  char name[24];
  const u32 name_len = blob_name('b', block, name);
  const u32 lane = static_cast<u32>(block % rt.num_lanes);
  for (u64 round = 0; round < rounds; ++round) {
    // A put-only run (a bench) writes its bytes once, as the per-thread
    // mode does: what it measures is the puts.
    if (mode == MODE_BLOCK_PUT_GET_CHECK || (mode == MODE_BLOCK_PUT && round == 0)) {
      u64* out = reinterpret_cast<u64*>(shared.data.data);
      for (u64 w = me; w < words; w += tandem::block_size()) {
        out[w] = block_pattern(block, round, w);
      }
    }
    // The barrier orders every thread's fill before thread 0's put, whose
    // system-scope fence (blob::put) is cumulative: it publishes them too.
    tandem::block_barrier();
    if (me == 0 && shared.status == tandem::rt_status::ok && shared.code == 0) {
      i32 rc = 0;
      tandem::rt_status st = tandem::rt_status::ok;
      if (mode != MODE_BLOCK_GET) {
        u64 size = 0;
        st = b::put(rt, f, lane, tag, name, name_len, 0, shared.data, score, context, stop, spin_budget, &size,
                    &rc);
      }
      if (st == tandem::rt_status::ok && rc == 0 && mode != MODE_BLOCK_PUT) {
        st = b::get(rt, f, lane, tag, name, name_len, 0, shared.back, stop, spin_budget, &rc);
      }
      shared.status = st;
      shared.code = rc;
    }
    tandem::block_barrier();
    if (mode == MODE_BLOCK_PUT_GET_CHECK && shared.status == tandem::rt_status::ok && shared.code == 0) {
      const u64* in = reinterpret_cast<const u64*>(shared.back.data);
      for (u64 w = me; w < words; w += tandem::block_size()) {
        if (in[w] != block_pattern(block, round, w)) {
          shared.mismatch = true;
        }
      }
    }
    tandem::block_barrier();
    if (shared.status != tandem::rt_status::ok || shared.code != 0 || shared.mismatch) {
      return;
    }
  }
}

/// Every thread r, `rounds` times: (mode PUT_GET_CHECK) fills a buffer of
/// blob_bytes with round's pattern, puts it as blob "k<r>" of `tag` at
/// offset 0 with `score` in `context` (a PutContext packed by
/// unpack_context's rule), gets it back into a second buffer and compares,
/// and at the end asks stat for the blob's size;
/// (mode PUT) only the put; (mode GET) only the get of a blob an earlier
/// launch put; (mode GET_CHECK) that get, compared with what a PUT launch
/// wrote. The BLOCK modes do the same with one blob "b<block>" per
/// block (blob_bytes a multiple of 8), which the block's threads fill and
/// check together and thread 0 puts and gets. Through lane (block rank mod
/// lanes) of the device segment at `segment` (`len` bytes), waiting with
/// `stop` and `spin_budget`. status[r]: the thread's (or its block's)
/// rt_status (0 ok), or STATUS_MISMATCH; codes[r]: the first nonzero blob
/// code a call returned (0: none).
TANDEM_KERNEL tandem_blob_put_get(u8* segment, u64 len, u64 tag, u64 blob_bytes, u64 rounds, u32 mode, f32 score,
                                  u32 context, const u32* stop, u64 spin_budget, u32* status, i32* codes) {
  namespace b = tandem::blob;
  const b::PutContext put_context = unpack_context(context);
  TANDEM_SHARED(tandem::RtContext, rt);
  TANDEM_SHARED(BlockBlob, shared);
  const tandem::RuntimeSegmentHeader* h = reinterpret_cast<const tandem::RuntimeSegmentHeader*>(segment);
  const tandem::MemoryBackend backend{h->id, tandem::backend_kind::PINNED, 0, reinterpret_cast<u64>(segment), len};
  const bool per_block = mode >= MODE_BLOCK_PUT && mode <= MODE_BLOCK_PUT_GET_CHECK;
  const u64 padded = (blob_bytes + 15) & ~u64{15};
  // Per thread: its future (48 + COPY_SPACE bytes) and notify word; and two
  // data buffers per thread or per block; with alignment slack.
  const u64 threads = tandem::block_size();
  const u64 arena = threads * 512 + (per_block ? 2 * padded : threads * 2 * padded) + 256;
  tandem::rt_init(rt, backend, arena);
  const u64 r = tandem::global_rank();
  tandem::RtFuture f{};
  tandem::rt_status st = tandem::rt_future_alloc(rt, b::COPY_SPACE, &f);
  if (per_block) {
    if (tandem::thread_rank() == 0) {
      shared.status = st;
      shared.code = 0;
      shared.mismatch = false;
      if (shared.status == tandem::rt_status::ok) shared.status = b::buffer_alloc(rt, padded, &shared.data);
      if (shared.status == tandem::rt_status::ok) shared.status = b::buffer_alloc(rt, padded, &shared.back);
      if (blob_bytes % 8 != 0) shared.status = tandem::rt_status::ser_failed;
    }
    tandem::block_barrier();
    if (shared.status == tandem::rt_status::ok) {
      block_put_get(rt, shared, f, tag, blob_bytes, rounds, mode, score, put_context, stop, spin_budget);
    }
    status[r] = shared.mismatch ? STATUS_MISMATCH : static_cast<u32>(shared.status);
    codes[r] = shared.code;
    return;
  }
  b::Buffer data{};
  b::Buffer back{};
  if (st == tandem::rt_status::ok) st = b::buffer_alloc(rt, blob_bytes, &data);
  if (st == tandem::rt_status::ok) st = b::buffer_alloc(rt, blob_bytes, &back);
  const u32 lane = static_cast<u32>(tandem::block_rank() % (st == tandem::rt_status::ok ? rt.num_lanes : 1));
  char name[24];
  const u32 name_len = blob_name('k', r, name);
  u32 result = static_cast<u32>(st);
  i32 first_code = 0;
  for (u64 round = 0; st == tandem::rt_status::ok && round < rounds; ++round) {
    i32 rc = 0;
    if (mode != MODE_GET && mode != MODE_GET_CHECK) {
      // A put-only run (a bench) writes its bytes once: what it measures is
      // the puts, not this thread's stores across the link.
      if (mode == MODE_PUT_GET_CHECK || round == 0) {
        fill(data, r, round);
      }
      u64 size = 0;
      st = b::put(rt, f, lane, tag, name, name_len, 0, data, score, put_context, stop, spin_budget, &size, &rc);
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
    if (mode == MODE_PUT_GET_CHECK || mode == MODE_GET_CHECK) {
      const u64 written = mode == MODE_GET_CHECK ? 0 : round;
      for (u64 i = 0; i < blob_bytes; ++i) {
        if (back.data[i] != pattern(r, written, i)) {
          result = STATUS_MISMATCH;
          break;
        }
      }
      if (result == STATUS_MISMATCH) {
        break;
      }
    }
  }
  // What the store says of the blob: as big as the last put.
  if (mode == MODE_PUT_GET_CHECK && st == tandem::rt_status::ok && result != STATUS_MISMATCH && first_code == 0 &&
      rounds > 0) {
    b::BlobInfo info{};
    i32 rc = 0;
    st = b::stat(rt, f, lane, tag, name, name_len, stop, spin_budget, &info, &rc);
    if (st == tandem::rt_status::ok && rc != 0) {
      first_code = rc;
    } else if (st == tandem::rt_status::ok && info.size != blob_bytes) {
      result = STATUS_MISMATCH;
    }
  }
  if (result != STATUS_MISMATCH) {
    result = static_cast<u32>(st);
  }
  status[r] = result;
  codes[r] = first_code;
}

/// Every thread r puts blob "k<r>" of `tag` (blob_bytes >= 8, at offset 0,
/// with `score`, in the default context: put's shorter form) round after round, until `rounds` are done or a put fails.
/// Round n's bytes: round n's pattern, its first eight overwritten by the
/// stamp (r << 40) | n, little-endian (the pattern alone repeats every 256
/// rounds; the stamp tells a reader which put it found). After each put that
/// returned ok with code 0 the thread stores n + 1 to acks[r] with a
/// system-scope release: a host thread that acquires acks[r] == n knows the
/// puts of rounds < n were acknowledged (the crash test kills the runtime
/// under this stream and checks that every acknowledged put survived).
/// Through lane (block rank mod lanes) of the device segment at `segment`
/// (`len` bytes), waiting with `stop` and `spin_budget`. acks[r] below
/// `rounds` at the end: the thread stopped on an error or the stop word.
TANDEM_KERNEL tandem_blob_put_stream(u8* segment, u64 len, u64 tag, u64 blob_bytes, u64 rounds, f32 score,
                                     const u32* stop, u64 spin_budget, u64* acks) {
  namespace b = tandem::blob;
  TANDEM_SHARED(tandem::RtContext, rt);
  const tandem::RuntimeSegmentHeader* h = reinterpret_cast<const tandem::RuntimeSegmentHeader*>(segment);
  const tandem::MemoryBackend backend{h->id, tandem::backend_kind::PINNED, 0, reinterpret_cast<u64>(segment), len};
  const u64 padded = (blob_bytes + 15) & ~u64{15};
  // Per thread: its future and notify word, and one data buffer; with
  // alignment slack.
  const u64 threads = tandem::block_size();
  tandem::rt_init(rt, backend, threads * 512 + threads * padded + 256);
  const u64 r = tandem::global_rank();
  tandem::RtFuture f{};
  tandem::rt_status st = tandem::rt_future_alloc(rt, b::COPY_SPACE, &f);
  b::Buffer data{};
  if (st == tandem::rt_status::ok) st = b::buffer_alloc(rt, blob_bytes, &data);
  if (st != tandem::rt_status::ok || blob_bytes < 8) {
    return;
  }
  const u32 lane = static_cast<u32>(tandem::block_rank() % rt.num_lanes);
  char name[24];
  const u32 name_len = blob_name('k', r, name);
  for (u64 round = 0; round < rounds; ++round) {
    // The previous put was acknowledged: the worker is done reading.
    fill(data, r, round);
    // Aligned (buffer_alloc's 16 bytes); every backend is little-endian.
    *reinterpret_cast<u64*>(data.data) = (r << 40) | round;
    i32 rc = 0;
    u64 size = 0;
    st = b::put(rt, f, lane, tag, name, name_len, 0, data, score, stop, spin_budget, &size, &rc);
    if (st != tandem::rt_status::ok || rc != 0) {
      return;
    }
    tandem::store_release<tandem::scope::system>(&acks[r], round + 1);
  }
}
