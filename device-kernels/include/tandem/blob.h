// The blob store (crate tandem-blob) from a kernel thread: tags and named
// blobs, put and get by reference, each call a task of the blob pool sent to
// the CPU workers and waited on with a stop flag, like every runtime task.
//
// Data travels by reference: a kernel carves a buffer from its block's arena
// share (blob::buffer_alloc: memory of the device's segment, which the host
// maps), writes it, and passes its segment pointer; the worker copies from
// or into it. The ids, codes and limits below mirror tandem-blob's `wire`
// module: its `tandem_blob_wire` kernel reports them and its tests compare
// them with Rust's on every backend.
#pragma once

#include "tandem/runtime.h"

namespace tandem {
namespace blob {

/// The blob pool's id (tandem_blob::wire::POOL).
constexpr u32 POOL = 16;

namespace method {
/// get_or_create_tag(name) -> tag id
constexpr u32 TAG = 1;
/// put(tag, name, offset, data, score, context) -> blob size after the put
constexpr u32 PUT = 2;
/// get(tag, name, offset, out) -> bytes read (the whole range)
constexpr u32 GET = 3;
/// stat(tag, name) -> size, class, targets, stored bytes, persistence, codecs
constexpr u32 STAT = 4;
/// delete(tag, name)
constexpr u32 DELETE = 5;
/// list(tag, out) -> bytes written: the tag's blob names (tag 0: the tags'),
/// each a u32 length and its bytes, back to back
constexpr u32 LIST = 6;
/// identify() -> the store's identity (its metadata file's device and inode):
/// what a host process checks to know which store a runtime serves
constexpr u32 IDENTIFY = 7;
/// find_tag(name) -> tag id, 0 when there is no such tag (none is made)
constexpr u32 FIND_TAG = 8;
}  // namespace method

/// Return codes of the blob pool's handlers (positive: the runtime's own are
/// near INT32_MIN).
namespace code {
constexpr i32 EMPTY_NAME = 1;
constexpr i32 NAME_TOO_LONG = 2;
constexpr i32 UNKNOWN_TAG = 3;
constexpr i32 NOT_FOUND = 4;
constexpr i32 OUT_OF_RANGE = 5;
constexpr i32 EMPTY_RANGE = 6;
constexpr i32 TOO_LARGE = 7;
constexpr i32 NO_SPACE = 8;
constexpr i32 BAD_SCORE = 9;
constexpr i32 FILL = 10;
constexpr i32 TARGET_CREATE = 11;
constexpr i32 TARGET_SIZE = 12;
constexpr i32 TARGET_IO = 13;
constexpr i32 TARGET_MISMATCH = 14;
constexpr i32 CONFIG = 15;
constexpr i32 METADATA = 16;
constexpr i32 CORRUPT = 17;
/// A new tag or blob name holds a control character.
constexpr i32 CONTROL_IN_NAME = 18;
/// A compressed frame of the blob failed its checksum or did not decompress.
constexpr i32 CORRUPT_FRAME = 19;
/// A PutContext field holds a value none of the constants below has.
constexpr i32 BAD_CONTEXT = 20;
/// No configured target keeps a blob at the persistence level asked for.
constexpr i32 NO_TARGET_FOR = 21;
/// The blob is volatile (in RAM): a put to it cannot ask for more.
constexpr i32 CLASS_TOO_LOW = 22;
/// The data pointer does not name the length's bytes of the caller's segment.
constexpr i32 BAD_POINTER = 32;
/// A list did not fit the caller's buffer.
constexpr i32 BUFFER_TOO_SMALL = 33;
}  // namespace code

/// Longest tag or blob name, in bytes (not NAME_MAX: limits.h, which
/// hip_runtime.h includes, defines that as a macro).
constexpr u32 MAX_NAME_BYTES = 255;
/// Placement score meaning "the fastest target with room".
constexpr f32 SCORE_AUTO = -1.0f;
/// Copy space a future needs for any blob call: the task header and the
/// largest arguments (a put with a MAX_NAME_BYTES name), with room to spare.
constexpr u32 COPY_SPACE = 336;

/// PutContext::compress: whether a put compresses.
namespace compress {
/// Store the bytes as they are.
constexpr u8 SKIP = 0;
/// Compress every frame.
constexpr u8 STATIC = 1;
/// A sample of the bytes decides; a put that does not compress is stored raw.
constexpr u8 DYNAMIC = 2;
}  // namespace compress

/// PutContext::codec: which library (ignored with compress::SKIP).
namespace codec {
constexpr u8 LZ4 = 1;
constexpr u8 ZSTD = 2;
}  // namespace codec

/// PutContext::preset: how hard the codec tries.
namespace preset {
constexpr u8 BALANCED = 0;
constexpr u8 FAST = 1;
constexpr u8 BEST = 2;
}  // namespace preset

/// PutContext::persistence: the least the blob must survive.
namespace persistence {
/// Nothing: gone after a restart.
constexpr u8 VOLATILE = 0;
/// A crash of the store's process, not a power loss (a file target, no sync
/// per put; dropped after a reboot).
constexpr u8 TEMPORARY = 1;
/// A power loss: acknowledged once synced (a file or the object tier).
constexpr u8 LONG_TERM = 2;
}  // namespace persistence

/// A put's context (tandem_blob::wire::PutContext, field for field): how to
/// compress and how long to keep. Zero-initialised (`PutContext{}`) it is
/// the default: no compression, the class placement picks.
struct PutContext {
  u8 compress;
  u8 codec;
  u8 preset;
  u8 persistence;
};
static_assert(sizeof(PutContext) == 4, "PutContext is four bytes, as in Rust");
TANDEM_ASSERT_OFFSET(PutContext, compress, 0);
TANDEM_ASSERT_OFFSET(PutContext, codec, 1);
TANDEM_ASSERT_OFFSET(PutContext, preset, 2);
TANDEM_ASSERT_OFFSET(PutContext, persistence, 3);

/// A buffer in the device's segment that a put reads or a get fills.
struct Buffer {
  u8* data;
  ShmPtr<u8> ptr;
  u64 len;
};

/// Carves `bytes` (a multiple of 16 is best) from the block's arena share
/// (rt_init's block_arena_bytes must leave room): no_memory when it does not
/// fit. Any thread, after rt_init; freed with the arena between launches.
TANDEM_DEVICE rt_status buffer_alloc(RtContext& ctx, u64 bytes, Buffer* out) {
  if (ctx.status != rt_status::ok) {
    return ctx.status;
  }
  const FullPtr<u8> mem = block_arena_allocate(ctx.arena, bytes, 16);
  if (mem.ptr == nullptr) {
    return rt_status::no_memory;
  }
  out->data = mem.ptr;
  out->ptr = ShmPtr<u8>{ctx.id, ctx.arena_offset + mem.shm.off};
  out->len = bytes;
  return rt_status::ok;
}

/// Writes `value` in decimal at `name + at` (at most 20 bytes) and returns
/// the name's new length: how a kernel thread spells a blob name of its own
/// from numbers such as its rank.
TANDEM_HOST_DEVICE u32 append_decimal(char* name, u32 at, u64 value) {
  char digits[20];
  u32 count = 0;
  do {
    digits[count++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (count > 0) {
    name[at++] = digits[--count];
  }
  return at;
}

namespace detail {

TANDEM_DEVICE ser_status put_name(Writer& w, const char* name, u32 name_len) {
  return w.put_bytes(reinterpret_cast<const u8*>(name), name_len);
}

TANDEM_DEVICE ser_status put_ptr(Writer& w, ShmPtr<u8> p) {
  ser_status s = w.put_u32(p.alloc_id.major);
  if (s == ser_status::ok) s = w.put_u32(p.alloc_id.minor);
  if (s == ser_status::ok) s = w.put_u64(p.off);
  return s;
}

/// Sends the task `write_args` makes to `lane` and waits for it: ok with the
/// handler's code in `*rc` (0: success, output readable with rt_output), or
/// why it never completed (stopped, queue_full when the budget ran out).
template <typename W>
TANDEM_DEVICE rt_status call(const RtContext& ctx, RtFuture& f, u32 lane, u32 which, W write_args,
                             const u32* stop, u64 spin_budget, i32* rc) {
  rt_status st = rt_make_task(f, POOL, which, write_args);
  if (st != rt_status::ok) {
    return st;
  }
  st = rt_send_to_cpu(ctx, f, lane, rt_priority::high, stop, spin_budget);
  if (st != rt_status::ok) {
    return st;
  }
  switch (rt_wait(f, stop, spin_budget, rc)) {
    case wait_outcome::completed:
      return rt_status::ok;
    case wait_outcome::stopped:
      return rt_status::stopped;
    default:
      return rt_status::queue_full;
  }
}

/// The u64 output of a completed call.
TANDEM_DEVICE rt_status output_u64(const RtFuture& f, u64* value) {
  const u8* out = nullptr;
  u32 len = 0;
  if (rt_output(f, &out, &len) != rt_status::ok) {
    return rt_status::future_error;
  }
  Reader r = Reader::over(out, len);
  return r.get_u64(value) == ser_status::ok && r.remaining() == 0 ? rt_status::ok : rt_status::future_error;
}

}  // namespace detail

/// The id of tag `name` (created if new) in `*tag`. Every call below: ok
/// with the handler's code in `*rc` (0 or a blob::code), or the rt_status
/// that kept it from completing; `f` needs COPY_SPACE bytes of copy space.
TANDEM_DEVICE rt_status get_or_create_tag(const RtContext& ctx, RtFuture& f, u32 lane, const char* name,
                                          u32 name_len, const u32* stop, u64 spin_budget, u64* tag, i32* rc) {
  const rt_status st = detail::call(
      ctx, f, lane, method::TAG, [&](Writer& w) { return detail::put_name(w, name, name_len); }, stop,
      spin_budget, rc);
  return st == rt_status::ok && *rc == 0 ? detail::output_u64(f, tag) : st;
}

/// Writes `data` at `offset` of blob `name` of `tag` (all or nothing; past
/// the end extends, a hole reads as zeros), placed by `score`, compressed and
/// kept as `context` says; the blob's size after the put in `*size`. The
/// thread's writes to `data` are made visible to the host first.
TANDEM_DEVICE rt_status put(const RtContext& ctx, RtFuture& f, u32 lane, u64 tag, const char* name, u32 name_len,
                            u64 offset, const Buffer& data, f32 score, const PutContext& context, const u32* stop,
                            u64 spin_budget, u64* size, i32* rc) {
  // System scope: the worker reads `data` from host memory once it pops the
  // task; the push's own fence covers the copy space, this one the buffer
  // whatever path the push takes.
  fence_acq_rel<scope::system>();
  const rt_status st = detail::call(
      ctx, f, lane, method::PUT,
      [&](Writer& w) {
        ser_status s = w.put_u64(tag);
        if (s == ser_status::ok) s = detail::put_name(w, name, name_len);
        if (s == ser_status::ok) s = w.put_u64(offset);
        if (s == ser_status::ok) s = w.put_u64(data.len);
        if (s == ser_status::ok) s = detail::put_ptr(w, data.ptr);
        if (s == ser_status::ok) s = w.put_f32(score);
        if (s == ser_status::ok) s = w.put_u8(context.compress);
        if (s == ser_status::ok) s = w.put_u8(context.codec);
        if (s == ser_status::ok) s = w.put_u8(context.preset);
        if (s == ser_status::ok) s = w.put_u8(context.persistence);
        return s;
      },
      stop, spin_budget, rc);
  return st == rt_status::ok && *rc == 0 ? detail::output_u64(f, size) : st;
}

/// put in the default context (no compression, the class placement picks).
TANDEM_DEVICE rt_status put(const RtContext& ctx, RtFuture& f, u32 lane, u64 tag, const char* name, u32 name_len,
                            u64 offset, const Buffer& data, f32 score, const u32* stop, u64 spin_budget, u64* size,
                            i32* rc) {
  return put(ctx, f, lane, tag, name, name_len, offset, data, score, PutContext{}, stop, spin_budget, size, rc);
}

/// Reads `out.len` bytes at `offset` of blob `name` of `tag` into `out`
/// (OUT_OF_RANGE past the end). Once it returns ok with `*rc` 0, the bytes
/// are visible to the calling thread (rt_wait acquired the completion).
TANDEM_DEVICE rt_status get(const RtContext& ctx, RtFuture& f, u32 lane, u64 tag, const char* name, u32 name_len,
                            u64 offset, const Buffer& out, const u32* stop, u64 spin_budget, i32* rc) {
  u64 read = 0;
  rt_status st = detail::call(
      ctx, f, lane, method::GET,
      [&](Writer& w) {
        ser_status s = w.put_u64(tag);
        if (s == ser_status::ok) s = detail::put_name(w, name, name_len);
        if (s == ser_status::ok) s = w.put_u64(offset);
        if (s == ser_status::ok) s = w.put_u64(out.len);
        if (s == ser_status::ok) s = detail::put_ptr(w, out.ptr);
        return s;
      },
      stop, spin_budget, rc);
  if (st == rt_status::ok && *rc == 0) {
    st = detail::output_u64(f, &read);
    if (st == rt_status::ok && read != out.len) {
      st = rt_status::future_error;
    }
  }
  return st;
}

/// What stat says of a blob (tandem_blob::pool::BlobInfo).
struct BlobInfo {
  u64 size;
  /// 1: on file or object targets (survives a restart); 0: in RAM.
  u32 durable;
  /// A bit per target index holding its pages.
  u64 targets;
  /// Bytes of target pages it takes (compressed frames take fewer).
  u64 stored;
  /// Its persistence level: one of `persistence`.
  u8 persistence;
  /// A bit `1 << c` per `codec` value `c` its frames use; 0: stored raw.
  u8 codecs;
};

/// Blob `name` of `tag`: what stat says of it in `*info`.
TANDEM_DEVICE rt_status stat(const RtContext& ctx, RtFuture& f, u32 lane, u64 tag, const char* name, u32 name_len,
                             const u32* stop, u64 spin_budget, BlobInfo* info, i32* rc) {
  const rt_status st = detail::call(
      ctx, f, lane, method::STAT,
      [&](Writer& w) {
        ser_status s = w.put_u64(tag);
        if (s == ser_status::ok) s = detail::put_name(w, name, name_len);
        return s;
      },
      stop, spin_budget, rc);
  if (st != rt_status::ok || *rc != 0) {
    return st;
  }
  const u8* out = nullptr;
  u32 len = 0;
  if (rt_output(f, &out, &len) != rt_status::ok) {
    return rt_status::future_error;
  }
  Reader r = Reader::over(out, len);
  ser_status s = r.get_u64(&info->size);
  if (s == ser_status::ok) s = r.get_u32(&info->durable);
  if (s == ser_status::ok) s = r.get_u64(&info->targets);
  if (s == ser_status::ok) s = r.get_u64(&info->stored);
  if (s == ser_status::ok) s = r.get_u8(&info->persistence);
  if (s == ser_status::ok) s = r.get_u8(&info->codecs);
  return s == ser_status::ok && r.remaining() == 0 ? rt_status::ok : rt_status::future_error;
}

/// The names of `tag`'s blobs (tag 0: the tags'), into `out` (each a u32
/// length and its bytes); the bytes written in `*written`.
/// code::BUFFER_TOO_SMALL when they do not fit.
TANDEM_DEVICE rt_status list(const RtContext& ctx, RtFuture& f, u32 lane, u64 tag, const Buffer& out,
                             const u32* stop, u64 spin_budget, u64* written, i32* rc) {
  const rt_status st = detail::call(
      ctx, f, lane, method::LIST,
      [&](Writer& w) {
        ser_status s = w.put_u64(tag);
        if (s == ser_status::ok) s = w.put_u64(out.len);
        if (s == ser_status::ok) s = detail::put_ptr(w, out.ptr);
        return s;
      },
      stop, spin_budget, rc);
  return st == rt_status::ok && *rc == 0 ? detail::output_u64(f, written) : st;
}

/// Deletes blob `name` of `tag`.
TANDEM_DEVICE rt_status remove(const RtContext& ctx, RtFuture& f, u32 lane, u64 tag, const char* name,
                               u32 name_len, const u32* stop, u64 spin_budget, i32* rc) {
  return detail::call(
      ctx, f, lane, method::DELETE,
      [&](Writer& w) {
        ser_status s = w.put_u64(tag);
        if (s == ser_status::ok) s = detail::put_name(w, name, name_len);
        return s;
      },
      stop, spin_budget, rc);
}

}  // namespace blob
}  // namespace tandem
