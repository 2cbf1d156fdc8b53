// The GPU service's end of the host route: host threads push task records
// to the segment's from-host ring (Runtime::submit_to_gpu), and the
// service's host server reads each record, runs its task and answers in the
// task's future, pacing its polls of the ring to a lone host thread.
#pragma once

#include "tandem/atomic.h"
#include "tandem/future.h"
#include "tandem/layout.h"
#include "tandem/ll_ring.h"
#include "tandem/mpmc.h"
#include "tandem/portability.h"
#include "tandem/runtime/context.h"
#include "tandem/runtime/layout.h"
#include "tandem/runtime/task.h"
#include "tandem/ser.h"
#include "tandem/warp.h"

namespace tandem {

namespace detail {

/// The from-host ring of a context whose segment has an inbox.
TANDEM_DEVICE LlRing rt_inbox_from_host(const RtContext& ctx) {
  // Validated by rt_attach.
  return ll_view(reinterpret_cast<RingHeader*>(ctx.inbox), ctx.inbox_depth);
}

/// The host route for a task too large for its record: runs the task in
/// the copy space of the future at segment offset `offset` with `handle` and
/// completes the future (system-scope release: a host thread waits on it).
/// Skipped when `offset` names no future of this segment (nothing to
/// complete: a corrupt record).
template <typename H>
TANDEM_DEVICE rt_ran rt_run_on_device(const RtContext& ctx, u64 offset, H& handle) {
  FutureView f;
  if (!rt_task_future(ctx, offset, &f)) {
    return rt_ran::skipped;
  }
  u8 out[RT_DEVICE_OUTPUT_MAX];
  Writer w = Writer::over(out, RT_DEVICE_OUTPUT_MAX);
  const i32 rc = rt_run_future_task(f, handle, w);
  const u64 written = rc == 0 ? w.pos : 0;  // a failed task carries no output
  bool fits = true;
  // A second completion (a duplicated pointer) is refused and changes nothing.
  (void)future_complete<scope::system>(f, rc, [&](u8* buf, u32 cap, u64* len) {
    *len = written;
    fits = written <= cap;
    if (fits) {
      for (u64 i = 0; i < written; ++i) {
        buf[i] = out[i];
      }
    }
    return true;  // too long: future_complete stores RC_OUTPUT_TOO_LARGE
  });
  return fits ? rt_ran_with(rc) : rt_ran::failed;
}

/// A from-host record (rt_record's words), as rt_read_host_record found it.
struct RtHostRecord {
  u32 len;
  u32 words[LL_RECORD_WORDS];
};

/// Reads position `ticket` of the from-host ring into `*record`; false
/// while its record is not whole. The header word first, alone: an empty
/// poll, which the host server makes over and over, is then one PCIe read,
/// and the warp it shares with device-inbox threads waits for no more. Then
/// the words the header says the record has, two to a load (the host
/// stores them in 16-aligned pairs, tandem/ll_ring.h) and every load issued
/// before any is checked: checked one by one, each PCIe round trip would
/// wait for the last. Relaxed: each 8-byte word arrives whole and says by
/// its tag whose it is; what the words do not carry is ordered by the fence
/// rt_run_host_record issues after this read.
TANDEM_DEVICE bool rt_read_host_record(const LlRing& ring, u64 ticket, RtHostRecord* record) {
  const u64* const words = ring.slot(ticket)->words;
  const u64 tag = ll_tag(ticket);
  const u64 head = load_relaxed<scope::system>(&words[0]);
  if ((head >> 32) != tag) {
    return false;
  }
  // A length past the slot is a corrupt producer's: taken as an empty
  // record (a bad one), so the ring moves on.
  const u32 len = static_cast<u32>(head) <= LL_RECORD_WORDS ? static_cast<u32>(head) : 0;
  static_assert(LL_RECORD_WORDS % 2 == 0, "records are read in word pairs");
  u64 seen[LL_RECORD_WORDS];
  TANDEM_UNROLL
  for (u32 i = 0; i < LL_RECORD_WORDS; i += 2) {
    seen[i] = tag << 32;
    seen[i + 1] = tag << 32;
    if (i < len) {
      load_relaxed_pair<scope::system>(&words[1 + i], &seen[i], &seen[i + 1]);
    }
  }
  bool whole = true;
  TANDEM_UNROLL
  for (u32 i = 0; i < LL_RECORD_WORDS; ++i) {
    // The pair's second word past an odd length is not the record's: its
    // tag is not checked, and the record's words past `len` read as zero.
    const bool mine = i < len;
    whole = whole && (!mine || (seen[i] >> 32) == tag);
    record->words[i] = mine ? static_cast<u32>(seen[i]) : 0;
  }
  record->len = len;
  return whole;
}

/// The words of an LL slot in the cache line it starts with (after `seq`):
/// the header and a record of up to six words.
constexpr u32 RT_LL_FIRST_LINE_WORDS = (CACHE_LINE - sizeof(u64)) / sizeof(u64);

/// rt_read_host_record by the lanes `lanes` of one warp together, all of
/// it and at least 1 + LL_RECORD_WORDS lanes: lane i loads the slot's word
/// i, so a poll is one read of host memory however long the record (one
/// thread's loads of host memory are not overlapped: each would be another
/// PCIe round trip), and the record's words are then gathered by shuffles.
/// The slot's two cache lines are two loads, issued together: an empty
/// poll waits for the first line alone (its header), a found record's
/// words are selected from both. The same answer and record in every lane.
TANDEM_DEVICE bool rt_read_host_record_warp(lane_mask lanes, const LlRing& ring, u64 ticket, RtHostRecord* record) {
  static_assert(sizeof(LlSlot) == 2 * CACHE_LINE, "two lines a slot (its words start at 8, layout.h)");
  const u64* const words = ring.slot(ticket)->words;
  const u64 tag = ll_tag(ticket);
  const u32 lane = lane_id();
  // Relaxed, as rt_read_host_record's loads.
  const u64 near = lane < RT_LL_FIRST_LINE_WORDS ? load_relaxed<scope::system>(&words[lane]) : tag << 32;
  const u64 far = lane >= RT_LL_FIRST_LINE_WORDS && lane < 1 + LL_RECORD_WORDS
                      ? load_relaxed<scope::system>(&words[lane])
                      : tag << 32;
  const u64 head = broadcast(lanes, near, 0);
  if ((head >> 32) != tag) {
    return false;
  }
  const u32 len = static_cast<u32>(head) <= LL_RECORD_WORDS ? static_cast<u32>(head) : 0;
  // Uniform: every lane has the same `len`.
  const u64 seen = len < RT_LL_FIRST_LINE_WORDS || lane < RT_LL_FIRST_LINE_WORDS ? near : far;
  // Words past the record (lane > len) are not the record's: not checked.
  if (ballot(lanes, lane >= 1 && lane <= len && (seen >> 32) != tag) != 0) {
    return false;
  }
  TANDEM_UNROLL
  for (u32 i = 0; i < LL_RECORD_WORDS; ++i) {
    const u32 word = static_cast<u32>(broadcast(lanes, seen, i + 1));
    record->words[i] = i < len ? word : 0;
  }
  record->len = len;
  return true;
}

/// Frees position `ticket`'s slot of the from-host ring for the host
/// producer a lap later (Rust's LlRing::try_push acquires the sequence
/// number). Relaxed: the caller stores it after it used the record's values
/// (they decided what it stores and where), so the record's reads are done
/// before the producer can overwrite it.
TANDEM_DEVICE void rt_free_host_slot(const LlRing& ring, u64 ticket) {
  store_relaxed<scope::system>(&ring.slot(ticket)->seq, mpmc_free_for(ticket + ring.capacity()));
}

/// Writes `len` bytes of `src` to `dst` (host memory, 4-aligned) a word at
/// a time where it can: each store to host memory is a write across PCIe.
TANDEM_DEVICE void rt_copy_to_host(u8* dst, const u8* src, u32 len) {
  u32 i = 0;
  for (; i + 4 <= len; i += 4) {
    *reinterpret_cast<u32*>(dst + i) =
        u32{src[i]} | u32{src[i + 1]} << 8 | u32{src[i + 2]} << 16 | u32{src[i + 3]} << 24;
  }
  for (; i < len; ++i) {
    dst[i] = src[i];
  }
}

/// Runs and answers position `ticket`'s from-host record with `handle`:
/// the task itself when it travelled in the record (rt_record's inline
/// words; its future at FUTURE has the copy space LENGTHS gives, at the
/// start of which the answer goes, RtHostReply), else the task in the
/// future's copy space (rt_run_on_device). `segment_bytes` is the
/// segment's length (read once by the caller: a read of the header here
/// would be another PCIe round trip). Frees the slot in either case.
/// Skipped for a record that names no future of the segment, or no reply
/// the copy space holds: nothing can be answered then.
///
/// An answer without output (a success with none, or a failure) is the
/// answer word alone, RT_HOST_REPLY_NO_OUTPUT set, stored with no fence: the
/// word carries all of it. It lands after the host's clearing of `answer`,
/// which the host made before the record's words, as the service stores it
/// at the address the record named, after reading it. An output of at most
/// RT_HOST_REPLY_TAGGED_MAX bytes that the copy space holds twice over goes
/// in tagged words (RT_HOST_REPLY_TAGGED: four bytes a word under the
/// record's tag, which tells the host that the word is this task's: the
/// host cleared those words with the answer, before the record), then
/// the word, with no fence: a system-scope fence waits for the stores
/// before it to reach host memory, about a PCIe round trip. A larger output
/// takes that fence after the output and its length (memory the host does
/// not write), a release which the host thread's acquire of `answer` pairs
/// with. The slot's release is a plain store after the record's values
/// were used: its reads are done.
template <typename H>
TANDEM_DEVICE rt_ran rt_run_host_record(const RtContext& ctx, const LlRing& ring, u64 ticket,
                                      const RtHostRecord& record, u64 segment_bytes, H& handle) {
  const u64 offset = record.words[rt_record::FUTURE];
  if (record.len <= rt_record::IN_FUTURE_WORDS) {
    // Acquire (as above): the host's copy space, which its release fence
    // published before the record; and release for the slot.
    fence_acq_rel<scope::system>();
    rt_free_host_slot(ring, ticket);
    return record.len == rt_record::IN_FUTURE_WORDS ? rt_run_on_device(ctx, offset, handle) : rt_ran::skipped;
  }
  const u32 lengths = record.words[rt_record::LENGTHS];
  const u64 copy_space = lengths >> rt_record::ARGS_LEN_BITS;
  const u32 args_len = rt_record::args_len(lengths);
  const u64 cell = offset + FUTURE_COPY_SPACE_OFFSET;
  if (offset < RT_SEGMENT_HEADER_RESERVED || offset % alignof(FutureShmHeader) != 0 ||
      copy_space < RT_HOST_REPLY_BYTES || cell > segment_bytes || copy_space > segment_bytes - cell) {
    rt_free_host_slot(ring, ticket);
    return rt_ran::skipped;
  }
  u8 out[RT_DEVICE_OUTPUT_MAX];
  Writer w = Writer::over(out, RT_DEVICE_OUTPUT_MAX);
  i32 rc = RT_RC_BAD_TASK;
  if (args_len <= rt_record::INLINE_ARGS_MAX && record.len == rt_record::ARGS + (args_len + 3) / 4) {
    u8 args[rt_record::INLINE_ARGS_MAX];
    TANDEM_UNROLL
    for (u32 i = 0; i < rt_record::INLINE_ARGS_MAX; ++i) {
      args[i] = static_cast<u8>(record.words[rt_record::ARGS + i / 4] >> (8 * (i % 4)));
    }
    Reader r = Reader::over(args, args_len);
    rc = handle(record.words[rt_record::POOL], record.words[rt_record::METHOD], r, w);
  }
  u32 len = rc == 0 ? static_cast<u32>(w.pos) : 0;
  if (len > copy_space - RT_HOST_REPLY_BYTES) {
    rc = RC_OUTPUT_TOO_LARGE;  // as future_complete: never truncated
    len = 0;
  }
  RtHostReply* const reply = reinterpret_cast<RtHostReply*>(ctx.base + cell);
  u64 answer = RT_HOST_REPLY_ANSWERED | u64{static_cast<u32>(rc)} << 32;
  const u32 tagged_words = (len + 3) / 4;
  if (len == 0) {
    answer |= RT_HOST_REPLY_NO_OUTPUT;
  } else if (len <= RT_HOST_REPLY_TAGGED_MAX && u64{tagged_words} * sizeof(u64) <= copy_space - RT_HOST_REPLY_BYTES) {
    u64* const words = reinterpret_cast<u64*>(ctx.base + cell + RT_HOST_REPLY_BYTES);
    const u64 tag = u64{ll_tag(ticket)} << 32;
    for (u32 i = 0; i < tagged_words; ++i) {
      u32 data = 0;
      for (u32 b = 0; b < 4 && 4 * i + b < len; ++b) {
        data |= u32{out[4 * i + b]} << (8 * b);
      }
      store_relaxed<scope::system>(&words[i], tag | data);
    }
    answer |= RT_HOST_REPLY_TAGGED | u64{len} << RT_HOST_REPLY_TAGGED_LEN_SHIFT;
  } else {
    rt_copy_to_host(ctx.base + cell + RT_HOST_REPLY_BYTES, out, len);
    reply->output_len = len;
    fence_acq_rel<scope::system>();
  }
  store_relaxed<scope::system>(&reply->answer, answer);
  rt_free_host_slot(ring, ticket);
  return rt_ran_with(rc);
}

/// How long the GPU's host server waits after answering a record before it
/// polls the from-host ring again, when the ring was drained when that
/// record came (RtHostPacing). It covers the answer's way to host memory
/// and a host thread's next submit after it sees the answer; a host
/// slower than that loses one poll as it would without the pause. The CPU
/// device's poll is a read of its own memory: it does not pause.
#if defined(TANDEM_BACKEND_GPU)
constexpr u64 RT_HOST_ANSWER_PAUSE_NS = 400;
#else
constexpr u64 RT_HOST_ANSWER_PAUSE_NS = 0;
#endif
/// Every this many paused answers, the next poll goes at once instead: a
/// paused poll that finds a record cannot tell whether it was queued, so
/// without it a ring that filled up would stay paced.
constexpr u32 RT_HOST_PACE_CHECK_EVERY = 32;

/// When the warp host server's next poll goes after an answer. A poll of
/// host memory is a PCIe round trip, and one issued at once after an answer
/// reaches host memory before a lone host thread, which waits for that
/// answer, has pushed its next record: it comes back empty, and the record
/// waits a whole poll more. So once a record is found after an empty poll
/// (the ring had drained), the poll after its answer waits
/// RT_HOST_ANSWER_PAUSE_NS; once a poll made at once after an answer finds
/// a record (one was queued), polls follow answers at once again. Every
/// decision is the warp's: each lane keeps the same state.
struct RtHostPacing {
  /// Whether the next poll after an answer pauses first.
  bool paced = false;
  /// Whether no poll has come back empty since the last answer (false
  /// before the first).
  bool first_poll = false;
  /// Whether the last answer was followed by a pause.
  bool paused = false;
  u32 paused_answers = 0;

  /// A poll found a record.
  TANDEM_DEVICE void found() {
    if (!first_poll) {
      paced = true;
    } else if (!paused) {
      paced = false;
    }
  }

  /// A poll came back empty.
  TANDEM_DEVICE void missed() { first_poll = false; }

  /// A record was answered: pauses before the next poll if paced.
  TANDEM_DEVICE void answered() {
    first_poll = true;
    paused = RT_HOST_ANSWER_PAUSE_NS != 0 && paced && ++paused_answers % RT_HOST_PACE_CHECK_EVERY != 0;
    if (paused) {
      // A spin on the clock: the shortest sleep is longer than the pause.
      const u64 until = timer_ns() + RT_HOST_ANSWER_PAUSE_NS;
      while (timer_ns() < until) {
      }
    }
  }
};

}  // namespace detail

}  // namespace tandem
