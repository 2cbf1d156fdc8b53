// Kernel side of Tandem's runtime (runtime/src): send tasks to the CPU
// workers through the device's queue segment and wait for the answers.
//
//   TANDEM_SHARED(tandem::RtContext, rt);
//   tandem::rt_init(rt, segment, 64 * 1024);        // every thread, once
//   tandem::RtFuture f;
//   tandem::rt_future_alloc(rt, 128, &f);          // once per thread, reused
//   tandem::rt_make_task(f, POOL, METHOD, [&](tandem::Writer& w) { ... });
//   tandem::rt_send_to_cpu(rt, f, lane, tandem::rt_priority::high, stop, budget);
//   (or tandem::rt_send_to_gpu(rt, f, stop, budget): the GPU service runs it;
//   after tandem::rt_init_peer(rt, other_segment, access, 64 * 1024), another
//   device's GPU service runs it)
//   tandem::rt_wait(f, stop, budget, &rc);         // completed/stopped/budget
//   tandem::rt_output(f, &data, &len);             // then rt_make_task again
//
// The segment (runtime/src/layout.rs, mirrored below) is passed to the
// kernel as a by-value MemoryBackend: base = the device address of the
// segment. Futures come from the segment's kernel arena (one carve per
// block, then block-local bumps); a future is reused for the thread's next
// task once the last one completed. A lane record names its future by its
// byte offset from the segment's base (rt_record), which is how the CPU
// workers resolve it; the GPU inbox carries ShmPtrs with the segment's id.
//
// Memory order: a task small enough goes to the workers whole in its lane
// record (tandem/ll_ring.h), whose tagged words need no fence: the kernel
// writes nothing else for it (not even the future, which the worker
// re-arms). A larger task is written into the future's copy space, and one
// system-scope release fence before the record publishes it. The worker's
// answer is a release store of the thread's notify word, which rt_wait's
// system-scope acquire pairs with (so the future's output is then visible).
// Waiting: call rt_wait from any lane; it spins on memory the CPU writes,
// never on another lane of the same warp/wavefront.
#pragma once

#include "tandem/arena.h"
#include "tandem/future.h"
#include "tandem/layout.h"
#include "tandem/ll_ring.h"
#include "tandem/mpmc.h"
#include "tandem/portability.h"
#include "tandem/ser.h"

namespace tandem {

// Mirrors of runtime/src/layout.rs, down to rt_math: the runtime crate
// compares every struct and constant with its own when it compiles, through
// bindgen's reading of this header (tandem_device_kernels::runtime_mirror;
// run `cargo xtask bindings` after an edit).

/// `SEGMENT_MAGIC` ("TNDMRTSG").
constexpr u64 RT_SEGMENT_MAGIC = 0x544e444d52545347ull;
/// `SEGMENT_VERSION`.
constexpr u32 RT_SEGMENT_VERSION = 7;
/// `TASK_VERSION`.
constexpr u32 RT_TASK_VERSION = 1;
/// `TASK_HEADER_BYTES`.
constexpr u64 RT_TASK_HEADER_BYTES = 16;
/// `SEGMENT_HEADER_RESERVED`.
constexpr u64 RT_SEGMENT_HEADER_RESERVED = 4096;

/// `runtime::layout::SegmentHeader`: at offset 0 of a queue segment. The
/// Rust atomics are plain words here, read with tandem/atomic.h.
struct alignas(64) RuntimeSegmentHeader {
  u64 magic;
  u32 version;
  u32 kind;
  AllocatorId id;
  i32 device_ordinal;
  i32 numa_node;
  u64 segment_bytes;
  u64 queue_offset;
  u64 queue_bytes;
  u64 heap_offset;
  u64 heap_bytes;
  u64 arena_offset;
  u64 arena_bytes;
  u32 num_lanes;
  u32 copy_space;
  u32 runtime_pid;
  u32 state;
  /// CLOCK_MONOTONIC ns of the runtime's last beat.
  u64 heartbeat;
  /// Raised (nonzero) by the host to release waiting kernels.
  u32 stop;
  u32 reserved;
  /// Device address of the segment's DeviceTickets (RtTicket), in device
  /// memory.
  u64 device_tickets;
  /// The GPU inbox: two rings (RtInbox) `inbox_ring_bytes` apart from
  /// `inbox_offset` (0: none), `inbox_depth` slots each.
  u64 inbox_offset;
  u64 inbox_ring_bytes;
  u32 inbox_depth;
  /// Raised by the host to end the GPU service once the inbox is drained.
  u32 service_stop;
  /// Device address of the free-slot hints (mpmc.h) of the GPU inbox's
  /// from-kernels ring: `depth` u64s (the inbox has the lanes' depth).
  u64 device_free_hints;
  /// The runtime process's start time (with `runtime_pid`, the owner).
  u64 runtime_start_time;
  /// The host clients' region (runtime::clients), host-only: 0 and 0 in
  /// device segments.
  u64 clients_offset;
  u64 clients_bytes;
};

static_assert(sizeof(RuntimeSegmentHeader) == 192, "SegmentHeader size");
static_assert(alignof(RuntimeSegmentHeader) == 64, "SegmentHeader alignment");
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, version, 8);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, kind, 12);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, id, 16);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, device_ordinal, 24);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, numa_node, 28);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, segment_bytes, 32);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, queue_offset, 40);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, queue_bytes, 48);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, heap_offset, 56);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, heap_bytes, 64);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, arena_offset, 72);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, arena_bytes, 80);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, num_lanes, 88);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, copy_space, 92);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, runtime_pid, 96);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, state, 100);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, heartbeat, 104);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, stop, 112);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, device_tickets, 120);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, inbox_offset, 128);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, inbox_ring_bytes, 136);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, inbox_depth, 144);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, service_stop, 148);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, device_free_hints, 152);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, runtime_start_time, 160);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, clients_offset, 168);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, clients_bytes, 176);

/// `runtime::layout::inbox`: the rings of a device's GPU inbox.
enum class RtInbox : u32 { from_host = 0, from_kernels = 1 };

/// `lane_queue::Priority` (shm-core).
enum class rt_priority : u32 { high = 0, low = 1 };

/// `runtime::layout::device_ticket`: where each of the segment's tickets
/// sits: PER_LANE per lane (the producers of lane l at priority p at
/// PER_LANE * l + p), then the inbox's, at PER_LANE * lanes + these.
namespace rt_ticket {
constexpr u32 PER_LANE = 2;
constexpr u32 INBOX_FROM_HOST_CONSUMERS = 0;
constexpr u32 INBOX_FROM_KERNELS_PRODUCERS = 1;
constexpr u32 INBOX_FROM_KERNELS_CONSUMERS = 2;
/// Tickets after the lanes'.
constexpr u32 INBOX = 3;
}  // namespace rt_ticket

/// Indices into the segment's tickets, from rt_ticket.
struct RtTicket {
  static TANDEM_HOST_DEVICE u32 lane_producers(u32 lane, rt_priority priority) {
    return rt_ticket::PER_LANE * lane + static_cast<u32>(priority);
  }
  static TANDEM_HOST_DEVICE u32 inbox_from_host_consumers(u32 lanes) {
    return rt_ticket::PER_LANE * lanes + rt_ticket::INBOX_FROM_HOST_CONSUMERS;
  }
  static TANDEM_HOST_DEVICE u32 inbox_from_kernels_producers(u32 lanes) {
    return rt_ticket::PER_LANE * lanes + rt_ticket::INBOX_FROM_KERNELS_PRODUCERS;
  }
  static TANDEM_HOST_DEVICE u32 inbox_from_kernels_consumers(u32 lanes) {
    return rt_ticket::PER_LANE * lanes + rt_ticket::INBOX_FROM_KERNELS_CONSUMERS;
  }
};

/// `runtime::layout::TaskHeader`, serialized as four little-endian u32s at
/// the start of a task's bytes.
struct TaskHeader {
  u32 pool;
  u32 method;
  u32 args_len;
  u32 version;
};

static_assert(sizeof(TaskHeader) == RT_TASK_HEADER_BYTES, "TaskHeader size");
TANDEM_ASSERT_OFFSET(TaskHeader, method, 4);
TANDEM_ASSERT_OFFSET(TaskHeader, args_len, 8);
TANDEM_ASSERT_OFFSET(TaskHeader, version, 12);

/// `runtime::layout::task_record`: the words of a lane record (LlSlot).
namespace rt_record {
/// The future's byte offset in the segment.
constexpr u32 FUTURE = 0;
/// The byte offset of the sender's notify word; 0 for none.
constexpr u32 NOTIFY = 1;
/// The task's token, which the completer's notify word carries (rt_notify).
constexpr u32 TOKEN = 2;
/// Words of a record whose task is in the future (copy space or payload).
constexpr u32 IN_FUTURE_WORDS = 3;
/// An inline task's pool, method and lengths (see `lengths`), then the
/// arguments, four little-endian bytes a word, the last one zero-padded.
constexpr u32 POOL = 3;
constexpr u32 METHOD = 4;
constexpr u32 LENGTHS = 5;
constexpr u32 ARGS = 6;
/// Argument bytes an inline task may carry.
constexpr u32 INLINE_ARGS_MAX = (LL_RECORD_WORDS - ARGS) * 4;
/// Bits of the LENGTHS word that hold the argument bytes.
constexpr u32 ARGS_LEN_BITS = 8;
/// The largest copy space a LENGTHS word can give.
constexpr u32 COPY_SPACE_MAX = 0xFFFFFFFFu >> ARGS_LEN_BITS;
static_assert(INLINE_ARGS_MAX < (1u << ARGS_LEN_BITS), "argument bytes fit their bits");

/// The LENGTHS word (`task_record::lengths`): the argument bytes, and the
/// future's copy space above them unless it is past COPY_SPACE_MAX (0: not
/// given). Given it, a worker answers a task with no output through the
/// notify word alone, never reading the future.
TANDEM_HOST_DEVICE u32 lengths(u32 args_len, u32 copy_space) {
  return (copy_space <= COPY_SPACE_MAX ? copy_space << ARGS_LEN_BITS : 0u) |
         (args_len & ((1u << ARGS_LEN_BITS) - 1));
}

/// The argument bytes of a LENGTHS word.
TANDEM_HOST_DEVICE u32 args_len(u32 lengths) { return lengths & ((1u << ARGS_LEN_BITS) - 1); }
}  // namespace rt_record

/// `runtime::layout::notify_word`: what the completer stores in a kernel
/// thread's notify word, the task's token above two flags.
namespace rt_notify {
/// Return code 0 (not read from the future then).
constexpr u32 SUCCEEDED = 1;
/// No output either, and the future was left as it was: rt_output must
/// not read it. Only with SUCCEEDED, only for inline tasks.
constexpr u32 NO_OUTPUT = 2;
constexpr u32 TOKEN_SHIFT = 2;
/// Tokens run 1..=TOKEN_MAX (0 is a cleared word).
constexpr u32 TOKEN_MAX = 0xFFFFFFFFu >> TOKEN_SHIFT;
}  // namespace rt_notify

/// Runtime return codes (`runtime::layout::RC_*`).
constexpr i32 RT_RC_UNKNOWN_POOL = RC_OUTPUT_TOO_LARGE + 16;
constexpr i32 RT_RC_UNKNOWN_METHOD = RC_OUTPUT_TOO_LARGE + 17;
constexpr i32 RT_RC_BAD_TASK = RC_OUTPUT_TOO_LARGE + 18;
constexpr i32 RT_RC_BAD_ARGS = RC_OUTPUT_TOO_LARGE + 19;
constexpr i32 RT_RC_HANDLER_PANICKED = RC_OUTPUT_TOO_LARGE + 20;

/// `runtime::layout::math_pool`: the ids of the runtime's built-in math pool
/// (noop() = 0, add(u64 a, u64 b) -> u64 = 1, sum(u64 values[SUM_VALUES])
/// -> u64 = 2), which the runtime's own kernels send and serve.
namespace rt_math {
constexpr u32 POOL = 1;
constexpr u32 NOOP = 0;
constexpr u32 ADD = 1;
constexpr u32 SUM = 2;
constexpr u32 SUM_VALUES = 6;
}  // namespace rt_math

/// What a runtime call on the device reports (u32, so kernels can store it).
enum class rt_status : u32 {
  ok = 0,
  /// The MemoryBackend is not a published runtime segment of this version.
  bad_segment = 1,
  /// The segment's lane queue header or a ring is not valid, or a ring
  /// was pushed to outside the device tickets (see detail::rt_push).
  bad_queue = 2,
  /// The block's arena share cannot hold another future.
  no_memory = 3,
  /// The task does not fit the future's copy space (never truncated).
  args_too_large = 4,
  /// The arguments could not be serialized.
  ser_failed = 5,
  /// The lane stayed full for the whole spin budget (nothing was pushed).
  queue_full = 6,
  /// The stop flag was raised.
  stopped = 7,
  /// A future operation failed (previous task not complete, corrupt future).
  future_error = 8,
  /// No such lane.
  bad_lane = 9,
  /// The segment has no GPU inbox (rt_send_to_gpu, rt_serve).
  no_inbox = 10,
  /// The segment is another device's, which this device cannot reach
  /// (rt_init_peer).
  no_peer_access = 11,
};

/// Whether a kernel on one device may reach another device's segment, as
/// the host found it (`Runtime::peer_route`, which enables the devices' peer
/// access where they have it).
enum class rt_peer : u32 {
  /// This device addresses the peer's device memory (its tickets) directly.
  reachable = 1,
  /// It does not: nothing of the peer's may be touched.
  unreachable = 2,
};

/// Threads of a block that get a notify word (the most a CUDA or HIP block
/// has); threads beyond poll their futures' flags.
constexpr u32 RT_NOTIFY_THREADS = 1024;

/// A block's view of its device's segment, declared
/// `TANDEM_SHARED(tandem::RtContext, rt)` and set up by rt_init.
struct RtContext {
  RuntimeSegmentHeader* header;
  u8* base;
  AllocatorId id;
  u64 arena_offset;
  u8* rings;
  u64 ring_bytes;
  DeviceTickets* tickets;
  /// Free-slot hints of the inbox's from-kernels ring (see the header).
  u64* free_hints;
  /// The GPU inbox's rings, or null.
  u8* inbox;
  u64 inbox_ring_bytes;
  u32 inbox_depth;
  u32 num_lanes;
  u32 depth;
  BlockArena arena;
  /// The block's notify words (one per thread, from its arena share) and
  /// their segment offset; null when they did not fit.
  u32* notify_words;
  u64 notify_offset;
  /// Whether thread i's notify word is taken (by its first future).
  bool notify_taken[RT_NOTIFY_THREADS];
  rt_status status;
};

namespace detail {

/// The sleep before a waiter polls, for a task with records ahead of it in
/// its lane (RtFuture::ahead; a lone thread's lane is nearly empty, so its
/// round trip sleeps none of this). Every poll of a notify word is a PCIe
/// read, and under load thousands of waiters poll while their lanes drain:
/// at 264 x 256 threads a task waits milliseconds, and polls that cannot
/// succeed yet take the link from the records and answers. So a waiter
/// sleeps through RT_WAIT_SLEEP_QUARTERS of the wait it expects, `ahead` times
/// what its thread's recent answers took per record ahead (learnt after each
/// answer, starting from RT_WAIT_NS_PER_AHEAD), then polls on sleeps of a
/// sixteenth of that wait, doubling. A wait it overestimates lengthens its
/// own and, as its next task waits on it, leaves its lane's worker idle: so
/// one slow answer (a worker preempted for a millisecond) counts for at most
/// RT_WAIT_SAMPLE_MAX times the average, and an answer that the first poll
/// found, which proves the wait was no longer than it measured, lowers the
/// average to that at once (rt_learn_wait). GPUs only: the CPU device's
/// polls are reads of its own memory, it yields once.
constexpr u32 RT_WAIT_NS_PER_AHEAD = 256;
/// The most one answer's wait per record ahead counts for, in averages (at
/// least RT_WAIT_NS_PER_AHEAD): a lasting slowdown is learnt in a few
/// answers (2.75x each), a passing one fades as fast.
constexpr u64 RT_WAIT_SAMPLE_MAX = 8;
/// The share of the expected wait slept before the first poll, in quarters.
constexpr u64 RT_WAIT_SLEEP_QUARTERS = 3;
/// The longest wait expected (and so slept before polling): a stop raised
/// meanwhile is seen that much later, as the sleep reads no stop flag (the
/// one line all waiters would read).
constexpr u64 RT_WAIT_EXPECTED_MAX_NS = 8u * 1000 * 1000;
/// The longest single sleep of a GPU thread (__nanosleep's bound).
constexpr u32 RT_WAIT_SLEEP_CHUNK_NS = 1000 * 1000;

/// The wait before the first poll of a task sent into a nearly empty lane
/// (a lone thread's every task). Each poll is a PCIe read of about a
/// microsecond, answered with what host memory held midway: one issued as
/// the task leaves finds no answer yet whenever the worker takes longer than
/// the read's way there, and the answer then waits for the next read. So a
/// thread learns how long after its send its first poll should leave: it
/// waits RT_FIRST_POLL_STEP_UP cycles longer after a first poll that found
/// nothing, RT_FIRST_POLL_STEP_DOWN shorter after one that found the
/// answer. A first poll then finds the answer 8 times in 9, each miss
/// costing a read, each wait too long only its excess. In SM clock cycles
/// (clock64: cheap to read, and the unit needs no calibration, as the wait
/// is learnt), at most RT_FIRST_POLL_MAX_CYCLES. GPUs only, as the sleep
/// above.
constexpr u32 RT_FIRST_POLL_STEP_UP = 128;
constexpr u32 RT_FIRST_POLL_STEP_DOWN = 16;
constexpr u32 RT_FIRST_POLL_MAX_CYCLES = 4096;

}  // namespace detail

/// A future the kernel owns: its view and its segment-relative pointer.
struct RtFuture {
  FutureView view;
  ShmPtr<u8> ptr;
  u64 bytes;
  /// Sent and not yet seen complete by rt_wait: kept here, so rt_make_task
  /// need not read the flags back across PCIe to know the future is ours.
  bool in_flight;
  /// What rt_wait records once the task is answered: its queue slot is free
  /// again (mpmc.h free-slot hints).
  ConsumedNote consumed;
  /// The thread's notify word and its segment offset, or null/0: once the
  /// task is answered, the worker stores the token and flags there
  /// (rt_notify).
  u32* notify;
  u32 notify_offset;
  /// The current task's token: 1..=rt_notify::TOKEN_MAX, new for every
  /// task, so an earlier answer never passes for this one's and the word
  /// needs no clearing (which, unfenced, could land after the answer).
  u32 token;
  /// The last answer was rt_notify::NO_OUTPUT: rt_output answers from here,
  /// as the future still holds whatever an earlier task left.
  bool no_output;
  /// The task rt_make_task staged for its lane record (pool, method,
  /// args_len, argument words: `staged_len` words), or staged_len 0 when
  /// it went into the copy space.
  u32 staged[LL_RECORD_WORDS - rt_record::POOL];
  u32 staged_len;
  /// The task in flight went to the GPU service, which answers through the
  /// future's flags only.
  bool via_gpu;
  /// 1 + the lane ring this future's last push found nearly empty (its next
  /// push there claims without probing: mpmc.h claim_mode), or 0.
  u32 nearly_empty_ring;
  /// Records ahead of this future's last push in its lane, as far as the
  /// claim's copy of the workers' counter knew (the copy only lags, so never
  /// fewer), or 0 when the claim found the lane nearly empty (where the copy
  /// may lag by up to an eighth of the lane, mpmc.h refresh_if_due). rt_wait
  /// sleeps in proportion before its first poll.
  u32 ahead;
  /// What this thread's answers took per record ahead of them, lately (an
  /// average rt_wait keeps): with `ahead`, the wait rt_wait expects.
  u32 wait_ns_per_ahead;
  /// When the task in flight was pushed (timer_ns), if `ahead` was nonzero.
  u64 sent_ns;
  /// When the task in flight was pushed (clock64), if `ahead` was zero, and
  /// how long after that this thread's first poll leaves, lately (see
  /// RT_FIRST_POLL_STEP_UP).
  u64 sent_cycles;
  u32 first_poll_cycles;
};

namespace detail {

/// After a push: the time rt_wait's expectation (records ahead) or its
/// first poll (none ahead) counts from (GPUs only, as rt_sleep_before_polls).
TANDEM_DEVICE void rt_mark_sent(RtFuture& f) {
#if defined(TANDEM_BACKEND_GPU)
  if (f.ahead != 0) {
    f.sent_ns = timer_ns();
  } else {
    f.sent_cycles = static_cast<u64>(clock64());
  }
#else
  (void)f;
#endif
}

#if defined(TANDEM_BACKEND_GPU)
/// rt_sleep_before_polls for a task with records ahead, which waits `expected`
/// ns from `sent_ns` (out of line: a lone thread's task has none ahead).
TANDEM_COLD Backoff rt_sleep_expected(u64 sent_ns, u64 expected) {
  expected = expected < RT_WAIT_EXPECTED_MAX_NS ? expected : RT_WAIT_EXPECTED_MAX_NS;
  const u64 until = sent_ns + expected / 4 * RT_WAIT_SLEEP_QUARTERS;
  for (u64 now = timer_ns(); now < until; now = timer_ns()) {
    const u64 left = until - now;
    sleep_for(left < RT_WAIT_SLEEP_CHUNK_NS ? static_cast<u32>(left) : RT_WAIT_SLEEP_CHUNK_NS);
  }
  const u64 longest = expected / 8 < Backoff::ANSWER_MAX_NS ? Backoff::ANSWER_MAX_NS
                      : expected / 8 > RT_WAIT_SLEEP_CHUNK_NS ? RT_WAIT_SLEEP_CHUNK_NS
                                                              : expected / 8;
  return Backoff::sleeping_from(static_cast<u32>(expected / 16), static_cast<u32>(longest));
}
#endif

/// Sleeps before rt_wait_notified's first poll (see RT_WAIT_NS_PER_AHEAD)
/// and returns the back-off for its polls.
TANDEM_DEVICE Backoff rt_sleep_before_polls(const RtFuture& f) {
#if defined(TANDEM_BACKEND_GPU)
  const u64 expected = u64{f.ahead} * f.wait_ns_per_ahead;
  if (expected == 0) {
    const u64 first_poll = f.sent_cycles + f.first_poll_cycles;
    while (static_cast<u64>(clock64()) < first_poll) {
    }
    return Backoff::up_to(Backoff::ANSWER_MAX_NS);
  }
  return rt_sleep_expected(f.sent_ns, expected);
#else
  if (f.ahead != 0) {
    sleep_for(0);
  }
  return Backoff::up_to(Backoff::ANSWER_MAX_NS);
#endif
}

#if defined(TANDEM_BACKEND_GPU)
/// rt_learn_wait's new average for a task sent at `sent_ns` with `ahead`
/// (nonzero) records ahead, from the thread's `average` (out of line, as
/// rt_sleep_expected).
TANDEM_COLD u32 rt_learnt_wait_per_ahead(u64 average, u64 sent_ns, u32 ahead, bool first_poll_answered) {
  // At least 1: an average of 0 would expect no wait at all.
  const u64 per_ahead = (timer_ns() - sent_ns) / ahead + 1;
  if (first_poll_answered) {
    return static_cast<u32>(per_ahead < average ? per_ahead : average);
  }
  u64 cap = (average > RT_WAIT_NS_PER_AHEAD ? average : u64{RT_WAIT_NS_PER_AHEAD}) * RT_WAIT_SAMPLE_MAX;
  cap = cap < RT_WAIT_EXPECTED_MAX_NS ? cap : RT_WAIT_EXPECTED_MAX_NS;
  return static_cast<u32>((3 * average + (per_ahead < cap ? per_ahead : cap)) / 4);
}
#endif

/// After an answer: to a task that had records ahead, learns what it took
/// per record ahead into the thread's average, which the next wait expects
/// from: found by the first poll, at most what it measured (the answer may
/// have come earlier, the sleep hid it), else folded in with a quarter's
/// weight, capped at RT_WAIT_SAMPLE_MAX averages; to one that had none,
/// moves the first poll later if it found nothing (`first_poll_answered`
/// false), else earlier.
TANDEM_DEVICE void rt_learn_wait(RtFuture& f, bool first_poll_answered) {
#if defined(TANDEM_BACKEND_GPU)
  if (f.ahead == 0) {
    const u32 wait = f.first_poll_cycles;
    f.first_poll_cycles = first_poll_answered ? (wait > RT_FIRST_POLL_STEP_DOWN ? wait - RT_FIRST_POLL_STEP_DOWN : 0)
                          : wait + RT_FIRST_POLL_STEP_UP < RT_FIRST_POLL_MAX_CYCLES
                              ? wait + RT_FIRST_POLL_STEP_UP
                              : RT_FIRST_POLL_MAX_CYCLES;
    return;
  }
  f.wait_ns_per_ahead = rt_learnt_wait_per_ahead(f.wait_ns_per_ahead, f.sent_ns, f.ahead, first_poll_answered);
#else
  (void)f;
  (void)first_poll_answered;
#endif
}

/// Bytes between consecutive rings of a lane queue (`ring_bytes` in
/// lane_queue.rs: one LL ring, rounded up to a cache line).
TANDEM_HOST_DEVICE u64 rt_ring_bytes(u32 depth) {
  return (ll_required_bytes(depth) + CACHE_LINE - 1) & ~(CACHE_LINE - 1);
}

/// Bytes between the GPU inbox's rings (`inbox_ring_bytes` in segment.rs:
/// one MPMC ring of task pointers, rounded up to a cache line).
TANDEM_HOST_DEVICE u64 rt_inbox_ring_bytes(u32 depth) {
  return (mpmc_required_bytes<ShmPtr<u8>>(depth) + CACHE_LINE - 1) & ~(CACHE_LINE - 1);
}

/// Whether [offset, offset + bytes) lies in a segment of `capacity` bytes.
TANDEM_DEVICE bool rt_region_fits(u64 offset, u64 bytes, u64 capacity) {
  return offset >= RT_SEGMENT_HEADER_RESERVED && offset <= capacity && bytes <= capacity - offset;
}

/// Thread 0's half of rt_init: validates the header and the lane queue.
TANDEM_DEVICE rt_status rt_validate(RtContext& ctx, const MemoryBackend& segment) {
  if (segment.base == 0 || segment.capacity < RT_SEGMENT_HEADER_RESERVED ||
      segment.base % alignof(RuntimeSegmentHeader) != 0) {
    return rt_status::bad_segment;
  }
  RuntimeSegmentHeader* h = reinterpret_cast<RuntimeSegmentHeader*>(segment.base);
  // Acquire: pairs with the runtime's release of the magic (publish), so
  // every plain field below is final.
  if (load_acquire<scope::system>(&h->magic) != RT_SEGMENT_MAGIC || h->version != RT_SEGMENT_VERSION ||
      h->id.major != segment.id.major || h->id.minor != segment.id.minor ||
      h->segment_bytes > segment.capacity ||
      !rt_region_fits(h->queue_offset, h->queue_bytes, h->segment_bytes) ||
      !rt_region_fits(h->arena_offset, h->arena_bytes, h->segment_bytes) ||
      h->device_tickets == 0 || h->device_tickets % alignof(DeviceTickets) != 0 ||
      h->device_free_hints == 0 || h->device_free_hints % alignof(u64) != 0) {
    return rt_status::bad_segment;
  }
  u8* const base = reinterpret_cast<u8*>(segment.base);
  LaneQueueHeader* q = reinterpret_cast<LaneQueueHeader*>(base + h->queue_offset);
  if (load_acquire<scope::system>(&q->magic) != magic::LANE_QUEUE || q->num_lanes == 0 ||
      q->elem_size != sizeof(LlSlot::words) || detail::check_ring_capacity(q->depth) != ring_status::ok ||
      q->ring_bytes != rt_ring_bytes(q->depth) ||
      LANE_QUEUE_RINGS_OFFSET + 2ull * q->num_lanes * q->ring_bytes > h->queue_bytes) {
    return rt_status::bad_queue;
  }
  u8* const rings = base + h->queue_offset + LANE_QUEUE_RINGS_OFFSET;
  for (u32 i = 0; i < 2 * q->num_lanes; ++i) {
    LlRing ring;
    RingHeader* rh = reinterpret_cast<RingHeader*>(rings + i * q->ring_bytes);
    if (ll_attach(rh, q->ring_bytes, &ring) != ring_status::ok || ring.capacity() != q->depth) {
      return rt_status::bad_queue;
    }
  }
  ctx.header = h;
  ctx.base = base;
  ctx.id = h->id;
  ctx.arena_offset = h->arena_offset;
  ctx.rings = rings;
  ctx.ring_bytes = q->ring_bytes;
  ctx.tickets = reinterpret_cast<DeviceTickets*>(h->device_tickets);
  ctx.free_hints = reinterpret_cast<u64*>(h->device_free_hints);
  ctx.inbox = nullptr;
  if (h->inbox_offset != 0) {
    if (h->inbox_depth != q->depth ||
        h->inbox_ring_bytes != rt_inbox_ring_bytes(h->inbox_depth) || h->inbox_offset < h->queue_offset ||
        h->inbox_offset + 2 * h->inbox_ring_bytes > h->queue_offset + h->queue_bytes) {
      return rt_status::bad_queue;
    }
    for (u32 i = 0; i < 2; ++i) {
      MpmcRing<ShmPtr<u8>> ring;
      RingHeader* rh = reinterpret_cast<RingHeader*>(base + h->inbox_offset + i * h->inbox_ring_bytes);
      if (mpmc_attach<ShmPtr<u8>>(rh, h->inbox_ring_bytes, &ring) != ring_status::ok) {
        return rt_status::bad_queue;
      }
    }
    ctx.inbox = base + h->inbox_offset;
    ctx.inbox_ring_bytes = h->inbox_ring_bytes;
    ctx.inbox_depth = h->inbox_depth;
  }
  ctx.num_lanes = q->num_lanes;
  ctx.depth = q->depth;
  return rt_status::ok;
}

}  // namespace detail

/// Sets up the block's context over `segment` without an arena share (a
/// block that allocates no futures: the GPU service). Every thread of the
/// block must call it, as it would reach a barrier; afterwards `ctx.status`
/// says whether the runtime can be used.
TANDEM_DEVICE void rt_attach(RtContext& ctx, const MemoryBackend& segment) {
  if (thread_rank() == 0) {
    ctx.status = detail::rt_validate(ctx, segment);
  }
  block_barrier();
}

/// Sets up the block's context over `segment` and carves `block_arena_bytes`
/// of the segment's kernel arena for the block's futures. Every thread of
/// the block must call it, as it would reach a barrier; afterwards
/// `ctx.status` says whether the runtime can be used (the same in every
/// thread).
TANDEM_DEVICE void rt_init(RtContext& ctx, const MemoryBackend& segment, u64 block_arena_bytes) {
  rt_attach(ctx, segment);
  if (ctx.status != rt_status::ok) {
    return;
  }
  ArenaHeader* arena = reinterpret_cast<ArenaHeader*>(ctx.base + ctx.arena_offset);
  block_arena_init(ctx.arena, arena, block_arena_bytes);
  if (thread_rank() < RT_NOTIFY_THREADS) {
    ctx.notify_taken[thread_rank()] = false;
  }
  if (thread_rank() == 0) {
    if (ctx.arena.carved != alloc_status::ok) {
      ctx.status = rt_status::no_memory;
    } else {
      // One notify word per thread, consecutive, so a warp's words share a
      // cache line and its lanes' polls coalesce (see rt_wait).
      const FullPtr<u8> words = block_arena_allocate(ctx.arena, u64{block_size()} * sizeof(u32), 128);
      ctx.notify_words = reinterpret_cast<u32*>(words.ptr);
      ctx.notify_offset = ctx.arena_offset + words.shm.off;
    }
  }
  block_barrier();
}

/// rt_init over another device's segment, for a kernel that sends tasks to
/// that device's GPU service: the block's futures come from the peer
/// segment's kernel arena, and rt_send_to_gpu, rt_wait and rt_output on this
/// context then work as on the kernel's own device. The segment is pinned
/// host memory mapped for every device; the peer's tickets are its device
/// memory, which this device reaches through peer access. `access` is the
/// host's word on that: anything but reachable touches nothing of the
/// peer's and leaves ctx.status = no_peer_access (in every thread). Every
/// thread of the block, as rt_init.
TANDEM_DEVICE void rt_init_peer(RtContext& ctx, const MemoryBackend& peer_segment, rt_peer access,
                                u64 block_arena_bytes) {
  if (access != rt_peer::reachable) {
    if (thread_rank() == 0) {
      ctx.status = rt_status::no_peer_access;
    }
    block_barrier();
    return;
  }
  rt_init(ctx, peer_segment, block_arena_bytes);
}

/// Allocates a future with `copy_space` bytes of copy space from the block's
/// arena share. Any thread, after rt_init.
TANDEM_DEVICE rt_status rt_future_alloc(RtContext& ctx, u32 copy_space, RtFuture* out) {
  if (ctx.status != rt_status::ok) {
    return ctx.status;
  }
  const u64 bytes = future_required_bytes(copy_space);
  const FullPtr<u8> mem = block_arena_allocate(ctx.arena, bytes, alignof(FutureShmHeader));
  if (mem.ptr == nullptr) {
    return rt_status::no_memory;
  }
  if (future_init(mem.ptr, bytes, copy_space, &out->view) != future_status::ok) {
    return rt_status::future_error;
  }
  out->ptr = ShmPtr<u8>{ctx.id, ctx.arena_offset + mem.shm.off};
  out->bytes = bytes;
  out->in_flight = false;
  out->consumed = ConsumedNote{nullptr, 0};
  out->token = 0;
  out->staged_len = 0;
  for (u32 i = 0; i < LL_RECORD_WORDS - rt_record::POOL; ++i) {
    out->staged[i] = 0;  // records copy all of it (rt_send_to_cpu)
  }
  out->via_gpu = false;
  out->no_output = false;
  out->nearly_empty_ring = 0;
  out->ahead = 0;
  out->wait_ns_per_ahead = detail::RT_WAIT_NS_PER_AHEAD;
  out->sent_ns = 0;
  out->sent_cycles = 0;
  out->first_poll_cycles = 0;
  // The thread's notify word goes to its first future (one future per word:
  // rt_wait trusts the word alone, see there); records carry 32-bit offsets.
  const u32 me = thread_rank();
  const u64 word_offset = ctx.notify_offset + u64{me} * sizeof(u32);
  const bool notified = ctx.notify_words != nullptr && me < RT_NOTIFY_THREADS &&
                        !ctx.notify_taken[me] && word_offset <= 0xFFFFFFFFull &&
                        out->ptr.off <= 0xFFFFFFFFull;
  if (notified) {
    ctx.notify_taken[me] = true;
    // No earlier launch's answer may pass for one of ours.
    store_relaxed<scope::system>(&ctx.notify_words[me], 0u);
  }
  out->notify = notified ? &ctx.notify_words[me] : nullptr;
  out->notify_offset = notified ? static_cast<u32>(word_offset) : 0;
  // Release, once per future: its header (the copy-space size a worker
  // checks) and the cleared word reach the host before any record naming
  // them, since records carry no fence of their own.
  fence_acq_rel<scope::system>();
  return rt_status::ok;
}

namespace detail {

/// Writes the task (header, then the `args_len` argument bytes
/// `write_args` puts) into `f`'s copy space, after re-initialising the
/// future. args_too_large when it does not fit.
template <typename W>
TANDEM_DEVICE rt_status rt_fill_copy_space(RtFuture& f, u32 pool, u32 method, u32 args_len, W write_args) {
  FutureView view;
  if (future_init(reinterpret_cast<u8*>(f.view.header), f.bytes, f.view.copy_space_size, &view) !=
      future_status::ok) {
    return rt_status::future_error;
  }
  const u64 needed = RT_TASK_HEADER_BYTES + u64{args_len};
  if (needed > view.copy_space_size) {
    return rt_status::args_too_large;
  }
  Writer w = Writer::over(view.copy_space(), view.copy_space_size);
  ser_status s = w.put_u32(pool);
  if (s == ser_status::ok) s = w.put_u32(method);
  if (s == ser_status::ok) s = w.put_u32(args_len);
  if (s == ser_status::ok) s = w.put_u32(RT_TASK_VERSION);
  if (s == ser_status::ok) s = write_args(w);
  if (s != ser_status::ok || w.pos != needed) {
    return rt_status::ser_failed;
  }
  // Plain (relaxed) stores rather than future_write_input's read-modify-
  // writes: the future is not published until the fenced push that follows,
  // and a GPU's system-scope RMWs on host memory are its scarcest resource.
  store_relaxed<scope::system>(&view.header->input_len, static_cast<u32>(needed));
  store_relaxed<scope::system>(&view.header->flags, future_flags::COPY_FROM_CLIENT);
  f.view = view;
  return rt_status::ok;
}

}  // namespace detail

/// Makes `f` carry the task (pool, method, arguments written by
/// `write_args(Writer&) -> ser_status`); `f` must be fresh or its last task
/// seen complete (the kernel owns it again). Arguments of at most
/// rt_record::INLINE_ARGS_MAX bytes are staged in `f` and go to the workers
/// inside the lane record (nothing is written to host memory yet); larger
/// ones are serialized into the copy space. args_too_large when they do not
/// fit there either (nothing is truncated).
template <typename W>
TANDEM_DEVICE rt_status rt_make_task(RtFuture& f, u32 pool, u32 method, W write_args) {
  if (f.in_flight) {
    return rt_status::future_error;  // the previous task was not seen complete
  }
  Writer counter = Writer::counting();
  if (write_args(counter) != ser_status::ok || counter.pos > 0xFFFFFFFFull) {
    return rt_status::ser_failed;
  }
  const u32 args_len = static_cast<u32>(counter.pos);
  // Never 0 (a cleared word), different from the last task's.
  f.token = f.token % rt_notify::TOKEN_MAX + 1;
  if (args_len > rt_record::INLINE_ARGS_MAX) {
    f.staged_len = 0;
    return detail::rt_fill_copy_space(f, pool, method, args_len, write_args);
  }
  u8 args[rt_record::INLINE_ARGS_MAX] = {};
  Writer w = Writer::over(args, rt_record::INLINE_ARGS_MAX);
  if (write_args(w) != ser_status::ok || w.pos != args_len) {
    return rt_status::ser_failed;
  }
  f.staged[0] = pool;
  f.staged[1] = method;
  f.staged[2] = rt_record::lengths(args_len, f.view.copy_space_size);
  // Constant bounds, so the staged words can stay in registers.
  TANDEM_UNROLL
  for (u32 i = 0; i < rt_record::INLINE_ARGS_MAX / 4; ++i) {
    f.staged[3 + i] = u32{args[4 * i]} | u32{args[4 * i + 1]} << 8 | u32{args[4 * i + 2]} << 16 |
                      u32{args[4 * i + 3]} << 24;
  }
  f.staged_len = 3 + (args_len + 3) / 4;
  return rt_status::ok;
}

namespace detail {

/// Runs `push()` (a ticketed push of `f`'s task on a ring of `capacity`
/// slots; mpmc.h, "Device tickets": one device-memory fetch_add, no RMW on
/// host memory) until it lands: a full ring is retried (back-pressure:
/// nothing is dropped), with sleeps up to full_ring_max_sleep_ns, for up to
/// `spin_budget` rounds or until `*stop` (may be null) is raised; queue_full
/// then means nothing was pushed. Once a ticket is claimed the push waits for
/// its slot, which the consumers free; only `*stop` ends that wait (when
/// they are gone). A lane push claims without looking when the future's last
/// push found the lane nearly empty (rt_send_to_cpu), so a lane that filled
/// up since is waited on, not reported full. `note(ticket)` makes the
/// ConsumedNote of the ticket.
template <typename Push, typename Note>
TANDEM_DEVICE rt_status rt_push(RtFuture& f, u64 capacity, const u32* stop, u64 spin_budget, Push push,
                                Note note) {
  Backoff backoff = Backoff::up_to(full_ring_max_sleep_ns(capacity));
  for (u64 round = 0;; ++round) {
    u64 ticket = 0;
    switch (push(&ticket)) {
      case ticket_result::done:
        f.in_flight = true;
        f.consumed = note(ticket);
        return rt_status::ok;
      case ticket_result::stopped:
        return rt_status::stopped;
      case ticket_result::foreign_ticket:
        return rt_status::bad_queue;
      case ticket_result::unavailable:
        break;
    }
    // Acquire: as future_wait's stop check, and rarer still: thousands of
    // threads may be waiting here for a full lane, on short sleeps.
    constexpr u64 every = 8 * STOP_POLL_EVERY;
    if (stop != nullptr && round % every == every - 1 && load_acquire<scope::system>(stop) != 0) {
      return rt_status::stopped;
    }
    if (round >= spin_budget) {
      return rt_status::queue_full;
    }
    backoff.idle();
  }
}

/// Inbox ring `which` of a context whose segment has an inbox.
TANDEM_DEVICE MpmcRing<ShmPtr<u8>> rt_inbox_ring(const RtContext& ctx, RtInbox which) {
  RingHeader* header =
      reinterpret_cast<RingHeader*>(ctx.inbox + static_cast<u32>(which) * ctx.inbox_ring_bytes);
  // Validated by rt_attach.
  return mpmc_view<ShmPtr<u8>>(header, ctx.inbox_depth);
}

}  // namespace detail

/// Sends `f`'s task to the CPU workers: its lane record (the task itself
/// when rt_make_task staged it, else the future's offset) goes to `lane` at
/// `priority` of the device's queue (see detail::rt_push for full lanes and
/// `stop`). A staged task costs no fence (tandem/ll_ring.h).
TANDEM_DEVICE rt_status rt_send_to_cpu(const RtContext& ctx, RtFuture& f, u32 lane, rt_priority priority,
                                       const u32* stop, u64 spin_budget) {
  if (ctx.status != rt_status::ok) {
    return ctx.status;
  }
  if (lane >= ctx.num_lanes) {
    return rt_status::bad_lane;
  }
  if (f.ptr.off > 0xFFFFFFFFull) {
    return rt_status::future_error;  // rt_future_alloc's futures never are
  }
  // Constant indices throughout, so the record stays in registers. Words
  // past the task's are left as `staged` holds them (ll_push_ticketed
  // ignores them).
  u32 record[LL_RECORD_WORDS];
  record[rt_record::FUTURE] = static_cast<u32>(f.ptr.off);
  record[rt_record::NOTIFY] = f.notify_offset;
  record[rt_record::TOKEN] = f.token;
  TANDEM_UNROLL
  for (u32 i = 0; i < LL_RECORD_WORDS - rt_record::POOL; ++i) {
    record[rt_record::POOL + i] = f.staged[i];
  }
  const u32 words = rt_record::IN_FUTURE_WORDS + f.staged_len;
  const bool in_future = f.staged_len == 0;
  const u32 index = RtTicket::lane_producers(lane, priority);
  RingHeader* header = reinterpret_cast<RingHeader*>(ctx.rings + u64{index} * ctx.ring_bytes);
  // Validated by rt_init.
  const LlRing ring = ll_view(header, ctx.depth);
  f.via_gpu = false;
  const auto push = [&](u64* ticket) {
    // Straight to the fetch_add when this future's last push found the ring
    // nearly empty (mpmc.h claim_mode): a lone thread's every push.
    const claim_mode mode = f.nearly_empty_ring == index + 1 ? claim_mode::direct : claim_mode::probe;
    TicketClaim claim{};
    const ticket_result r = ll_push_ticketed(ring, ctx.tickets + index, record, words, in_future, mode, stop, &claim);
    f.nearly_empty_ring = r == ticket_result::done && claim.nearly_empty(ring.capacity()) ? index + 1 : 0;
    // free = capacity - 1 - (ticket - copy of head): the rest is ahead.
    const i64 ahead = r != ticket_result::done || claim.nearly_empty(ring.capacity())
                          ? 0
                          : static_cast<i64>(ring.capacity()) - 1 - claim.free;
    f.ahead = ahead > 0 ? static_cast<u32>(ahead) : 0;
    *ticket = claim.ticket;
    return r;
  };
  // No free-slot note: an LL slot is known free from the consumers' counter.
  const rt_status st =
      detail::rt_push(f, ring.capacity(), stop, spin_budget, push, [](u64) { return ConsumedNote{nullptr, 0}; });
  if (st == rt_status::ok) {
    detail::rt_mark_sent(f);
  }
  return st;
}

/// Sends `f`'s task to the device's GPU service (rt_serve, a persistent
/// kernel the host started): the task goes into the copy space (if it was
/// staged) and the future's pointer to the GPU inbox's from-kernels ring.
/// The task stays on the device. no_inbox when the segment has none.
TANDEM_DEVICE rt_status rt_send_to_gpu(const RtContext& ctx, RtFuture& f, const u32* stop, u64 spin_budget) {
  if (ctx.status != rt_status::ok) {
    return ctx.status;
  }
  if (ctx.inbox == nullptr) {
    return rt_status::no_inbox;
  }
  if (f.staged_len != 0) {
    // The staged argument bytes, by constant indices into `staged` (which
    // may then stay in registers).
    const u32 args_len = rt_record::args_len(f.staged[2]);
    const auto staged_args = [&](Writer& w) {
      ser_status s = ser_status::ok;
      TANDEM_UNROLL
      for (u32 i = 0; i < rt_record::INLINE_ARGS_MAX; ++i) {
        if (i < args_len && s == ser_status::ok) {
          s = w.put_u8(static_cast<u8>(f.staged[3 + i / 4] >> (8 * (i % 4))));
        }
      }
      return s;
    };
    const rt_status st = detail::rt_fill_copy_space(f, f.staged[0], f.staged[1], args_len, staged_args);
    if (st != rt_status::ok) {
      return st;
    }
    f.staged_len = 0;
  }
  const MpmcRing<ShmPtr<u8>> ring = detail::rt_inbox_ring(ctx, RtInbox::from_kernels);
  DeviceTickets* const producers = ctx.tickets + RtTicket::inbox_from_kernels_producers(ctx.num_lanes);
  DeviceTickets* const consumers = ctx.tickets + RtTicket::inbox_from_kernels_consumers(ctx.num_lanes);
  u64* const hints = ctx.free_hints;
  f.via_gpu = true;
  // The slot's release store publishes the copy space (mpmc_push_ticketed).
  return detail::rt_push(
      f, ring.capacity(), stop, spin_budget,
      [&](u64* ticket) {
        return mpmc_push_ticketed<ShmPtr<u8>>(ring, producers, &consumers->next, f.ptr, stop, hints, ticket);
      },
      [&](u64 ticket) { return mpmc_consumed_note(ring, hints, ticket); });
}

namespace detail {

/// Whether the notify word shows `f`'s task answered; then `*return_code`
/// and `f.no_output`.
TANDEM_DEVICE bool rt_notified(RtFuture& f, i32* return_code) {
  // Acquire: pairs with the worker's release store of the word, which
  // follows its completion of the future (flags, return code, output), if
  // it completed it. The lanes of a warp poll consecutive words, one cache
  // line.
  const u32 seen = load_acquire<scope::system>(f.notify);
  if ((seen >> rt_notify::TOKEN_SHIFT) != f.token) {
    return false;
  }
  f.no_output = (seen & rt_notify::NO_OUTPUT) != 0;
  if ((seen & rt_notify::SUCCEEDED) != 0) {
    *return_code = 0;
  } else if (future_return_code<scope::system>(f.view, return_code) != future_status::ok) {
    *return_code = RT_RC_BAD_TASK;  // unreachable: the completion came first
  }
  return true;
}

/// rt_wait through the thread's notify word. Only the word counts, never the
/// flags: the worker stores the word after completing, so once a kernel
/// sees the word it may reuse the future; had it acted on COMPLETE instead,
/// the late word store could land on the next task's wait.
TANDEM_DEVICE wait_outcome rt_wait_notified(RtFuture& f, const u32* stop, u64 spin_budget,
                                            i32* return_code) {
  Backoff backoff = rt_sleep_before_polls(f);
  for (u64 round = 0;; ++round) {
    const bool stopped = stop_raised<scope::system>(stop, round, round >= spin_budget);
    if (rt_notified(f, return_code)) {
      rt_learn_wait(f, round == 0);
      return wait_outcome::completed;
    }
    // Then the word once more, as future_wait re-checks the flags.
    if (stopped) {
      return rt_notified(f, return_code) ? wait_outcome::completed : wait_outcome::stopped;
    }
    if (round >= spin_budget) {
      return rt_notified(f, return_code) ? wait_outcome::completed : wait_outcome::budget_exhausted;
    }
    backoff.idle();
  }
}

/// What rt_wait_flags saw: the outcome, and the return code if completed.
struct RtFlagsWait {
  wait_outcome outcome;
  i32 return_code;
};

/// rt_wait through the future's flags (future_wait), out of line: the path
/// of a task sent to the GPU service or of a thread without a notify word,
/// whose answers take far longer than a call.
TANDEM_COLD RtFlagsWait rt_wait_flags(FutureView view, const u32* stop, u64 spin_budget) {
  RtFlagsWait waited{wait_outcome::budget_exhausted, 0};
  waited.outcome = future_wait<scope::system>(view, stop, spin_budget, &waited.return_code);
  return waited;
}

}  // namespace detail

/// Waits for `f`'s completion: completed (with `*return_code`), stopped, or
/// budget_exhausted, as future_wait, but polling the thread's notify word
/// when it has one and the task went to the CPU workers. Call it from any
/// lane; it spins on memory the host writes, never on another lane.
TANDEM_DEVICE wait_outcome rt_wait(RtFuture& f, const u32* stop, u64 spin_budget, i32* return_code) {
  f.no_output = false;
  wait_outcome outcome;
  if (f.notify != nullptr && !f.via_gpu) {
    outcome = detail::rt_wait_notified(f, stop, spin_budget, return_code);
  } else {
    const detail::RtFlagsWait waited = detail::rt_wait_flags(f.view, stop, spin_budget);
    outcome = waited.outcome;
    if (outcome == wait_outcome::completed) {
      *return_code = waited.return_code;
    }
  }
  if (outcome == wait_outcome::completed) {
    f.in_flight = false;
    // The consumer freed the slot before it completed the future, whose
    // completion we just acquired.
    mpmc_note_consumed(f.consumed);
  }
  return outcome;
}

/// The output of a completed `f`, to read with Reader::over(*data, *len).
TANDEM_DEVICE rt_status rt_output(const RtFuture& f, const u8** data, u32* len) {
  if (f.no_output) {
    *data = f.view.copy_space();
    *len = 0;
    return rt_status::ok;
  }
  return future_output<scope::system>(f.view, data, len) == future_status::ok ? rt_status::ok
                                                                             : rt_status::future_error;
}

/// Bytes of output a device handler may write (rt_serve stages it locally,
/// because the output overwrites the input in the copy space).
constexpr u32 RT_DEVICE_OUTPUT_MAX = 256;

namespace detail {

/// Runs the task of the future at `ptr` with `handle` and completes it.
/// Returns false when `ptr` names no future of this segment (nothing to
/// complete: a corrupt pointer), true otherwise.
template <typename H>
TANDEM_DEVICE bool rt_run_on_device(const RtContext& ctx, ShmPtr<u8> ptr, H& handle) {
  const u64 segment_bytes = ctx.header->segment_bytes;
  if (ptr.alloc_id.major != ctx.id.major || ptr.alloc_id.minor != ctx.id.minor ||
      ptr.off < RT_SEGMENT_HEADER_RESERVED || ptr.off >= segment_bytes) {
    return false;
  }
  FutureView f;
  if (future_attach<scope::system>(ctx.base + ptr.off, segment_bytes - ptr.off, &f) != future_status::ok) {
    return false;
  }
  const u8* input = nullptr;
  u32 input_len = 0;
  i32 rc = RT_RC_BAD_TASK;
  u8 out[RT_DEVICE_OUTPUT_MAX];
  Writer w = Writer::over(out, RT_DEVICE_OUTPUT_MAX);
  // A pointer future (no COPY_FROM_CLIENT) carries no input here: bad task.
  if (future_input<scope::system>(f, &input, &input_len) == future_status::ok && input_len != 0) {
    Reader r = Reader::over(input, input_len);
    u32 pool = 0, method = 0, args_len = 0, version = 0;
    if (r.get_u32(&pool) == ser_status::ok && r.get_u32(&method) == ser_status::ok &&
        r.get_u32(&args_len) == ser_status::ok && r.get_u32(&version) == ser_status::ok &&
        version == RT_TASK_VERSION && args_len <= input_len - RT_TASK_HEADER_BYTES) {
      Reader args = Reader::over(input + RT_TASK_HEADER_BYTES, args_len);
      rc = handle(pool, method, args, w);
    }
  }
  if (rc != 0) {
    w.pos = 0;  // a failed task carries no output
  }
  // A second completion (a duplicated pointer) is refused and changes nothing.
  (void)future_complete<scope::system>(f, rc, [&](u8* buf, u32 cap, u64* written) {
    *written = w.pos;
    if (w.pos <= cap) {
      for (u64 i = 0; i < w.pos; ++i) {
        buf[i] = out[i];
      }
    }
    return true;  // too long: future_complete stores RC_OUTPUT_TOO_LARGE
  });
  return true;
}

}  // namespace detail

/// What rt_serve did, per thread.
struct RtServeStats {
  u64 served;
  /// Pointers that named no future of the segment (skipped).
  u64 bad_pointers;
  /// Pops that found a foreign ticket (a ring used outside its tickets).
  u64 foreign;
};

/// The GPU service: the body of a persistent kernel that runs the tasks sent
/// to the device's GPU inbox, from the host (Runtime::submit_to_gpu) and from
/// kernels (rt_send_to_gpu), with `handle(pool, method, Reader& args,
/// Writer& out) -> i32` (0 = success; RT_RC_UNKNOWN_POOL / _METHOD for what it
/// does not serve; output up to RT_DEVICE_OUTPUT_MAX bytes), then completes
/// each future (system-scope release: the host or the sending kernel is
/// waiting). Any number of threads may call it, each taking one task at a
/// time (device tickets on both rings; nothing waits on another lane). It
/// returns once the segment's `service_stop` is raised and both rings are
/// drained; the host raises it after its own submitters are done, so nothing
/// pushed before is lost (mpmc_pop_ticketed). Call after rt_attach.
template <typename H>
TANDEM_DEVICE rt_status rt_serve(const RtContext& ctx, H handle, RtServeStats* stats) {
  *stats = RtServeStats{0, 0, 0};
  if (ctx.status != rt_status::ok) {
    return ctx.status;
  }
  if (ctx.inbox == nullptr) {
    return rt_status::no_inbox;
  }
  const u32* const stop = &ctx.header->service_stop;
  const MpmcRing<ShmPtr<u8>> from_host = detail::rt_inbox_ring(ctx, RtInbox::from_host);
  const MpmcRing<ShmPtr<u8>> from_kernels = detail::rt_inbox_ring(ctx, RtInbox::from_kernels);
  DeviceTickets* const host_consumers = ctx.tickets + RtTicket::inbox_from_host_consumers(ctx.num_lanes);
  DeviceTickets* const kernel_producers = ctx.tickets + RtTicket::inbox_from_kernels_producers(ctx.num_lanes);
  DeviceTickets* const kernel_consumers = ctx.tickets + RtTicket::inbox_from_kernels_consumers(ctx.num_lanes);
  Backoff backoff;
  for (;;) {
    // Acquire, read before the rings: pairs with the host's release of the
    // flag, so everything pushed before it was raised is seen below.
    const bool stopping = load_acquire<scope::system>(stop) != 0;
    ShmPtr<u8> ptr;
    // Host tasks: the ring's own `tail` counts what host threads pushed.
    ticket_result r = mpmc_pop_ticketed<ShmPtr<u8>>(from_host, host_consumers, &ptr, stop);
    if (r == ticket_result::unavailable) {
      r = mpmc_pop_ticketed<ShmPtr<u8>>(from_kernels, kernel_consumers, &kernel_producers->next, &ptr, stop);
    }
    if (r == ticket_result::done) {
      if (detail::rt_run_on_device(ctx, ptr, handle)) {
        ++stats->served;
      } else {
        ++stats->bad_pointers;
      }
      backoff = Backoff{};
      continue;
    }
    if (r == ticket_result::foreign_ticket) {
      ++stats->foreign;
      continue;
    }
    // Both rings empty after the stop was seen, or our claimed ticket has
    // no producer: done.
    if (r == ticket_result::stopped || stopping) {
      return rt_status::ok;
    }
    backoff.idle();
  }
}

}  // namespace tandem
