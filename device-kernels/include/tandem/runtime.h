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
//   after tandem::rt_init_peer(rt, own_segment, other_segment, access,
//   64 * 1024), another device's GPU service runs it)
//   tandem::rt_wait(f, stop, budget, &rc);         // completed/stopped/budget
//   tandem::rt_output(f, &data, &len);             // then rt_make_task again
//
// The segment (runtime/src/layout.rs, mirrored below) is passed to the
// kernel as a by-value MemoryBackend: base = the device address of the
// segment. Futures come from the segment's kernel arena (one carve per
// block, then block-local bumps); a future is reused for the thread's next
// task once the last one completed. A lane record names its future by its
// byte offset from the segment's base (rt_record), which is how the CPU
// workers resolve it; so do the from-host ring's records (the same
// format, rt_record), which host threads push to the GPU service.
//
// The GPU route stays in device memory: rt_send_to_gpu writes the task into
// a slot of the service's device inbox (RtInboxSlot) and the service
// answers in the sender's reply word and cell (RtReplyCell), carved per
// block from the reply region of the sender's own device. Both sides
// publish with one release store of a sequence (reply) word and acquire it:
// at device scope, or at system scope when the two are on different devices
// or the task was written into host memory (RT_INBOX_WIDE).
//
// Memory order: a task small enough goes to the workers whole in its lane
// record (tandem/ll_ring.h), whose tagged words need no fence: the kernel
// writes nothing else for it (not even the future, which the worker
// re-arms). A larger task is written into the future's copy space, and one
// system-scope release fence before the record publishes it. The worker's
// answer is a release store of the thread's notify word, which rt_wait's
// system-scope acquire pairs with (so the future's output is then visible).
// Waiting: call rt_wait from any lane; it spins on memory another agent
// (the CPU, the GPU service) writes, never on another lane of the same
// warp/wavefront.
#pragma once

#include "tandem/arena.h"
#include "tandem/future.h"
#include "tandem/layout.h"
#include "tandem/ll_ring.h"
#include "tandem/mpmc.h"
#include "tandem/portability.h"
#include "tandem/ser.h"
#include "tandem/warp.h"

namespace tandem {

// Mirrors of runtime/src/layout.rs, down to rt_math: the runtime crate
// compares every struct and constant with its own when it compiles, through
// bindgen's reading of this header (tandem_device_kernels::runtime_mirror;
// run `cargo xtask bindings` after an edit).

/// `SEGMENT_MAGIC` ("TNDMRTSG").
constexpr u64 RT_SEGMENT_MAGIC = 0x544e444d52545347ull;
/// `SEGMENT_VERSION`.
constexpr u32 RT_SEGMENT_VERSION = 10;
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
  /// Slots of the device inbox (`device_inbox`), a power of two.
  u32 device_inbox_depth;
  /// Device address of the segment's DeviceTickets (RtTicket), in device
  /// memory.
  u64 device_tickets;
  /// The GPU inbox's from-host ring (an LL ring of task records) at
  /// `inbox_offset` (0: none), `inbox_ring_bytes` long, `inbox_depth` slots.
  u64 inbox_offset;
  u64 inbox_ring_bytes;
  u32 inbox_depth;
  /// Raised by the host to end the GPU service once the inbox is drained.
  u32 service_stop;
  /// Device address of the device inbox: `device_inbox_depth` RtInboxSlots
  /// in device memory, where kernels send tasks to the GPU service.
  u64 device_inbox;
  /// The runtime process's start time (with `runtime_pid`, the owner).
  u64 runtime_start_time;
  /// The host clients' region (runtime::clients), host-only: 0 and 0 in
  /// device segments.
  u64 clients_offset;
  u64 clients_bytes;
  /// Device address and length of the reply region: device memory that
  /// rt_init carves per block for its threads' replies from GPU services.
  u64 device_replies;
  u64 device_replies_bytes;
  /// Bytes of the reply region carved so far (one fetch_add per block);
  /// the host resets it with the kernel arena.
  u64 replies_carved;
};

static_assert(sizeof(RuntimeSegmentHeader) == 256, "SegmentHeader size");
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
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, device_inbox_depth, 116);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, device_tickets, 120);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, inbox_offset, 128);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, inbox_ring_bytes, 136);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, inbox_depth, 144);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, service_stop, 148);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, device_inbox, 152);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, runtime_start_time, 160);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, clients_offset, 168);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, clients_bytes, 176);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, device_replies, 184);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, device_replies_bytes, 192);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, replies_carved, 200);

/// `lane_queue::Priority` (shm-core).
enum class rt_priority : u32 { high = 0, low = 1 };

/// `runtime::layout::device_ticket`: where each of the segment's tickets
/// sits: PER_LANE per lane (the producers of lane l at priority p at
/// PER_LANE * l + p), then the GPU service's, at PER_LANE * lanes + these.
namespace rt_ticket {
constexpr u32 PER_LANE = 2;
/// The GPU service's tickets on the from-host ring.
constexpr u32 INBOX_FROM_HOST_CONSUMERS = 0;
/// Kernels' tickets on the device inbox.
constexpr u32 DEVICE_INBOX_PRODUCERS = 1;
/// Its consumers take none (rt_serve): `next` here is the first ticket the
/// next service serves, which the last one left.
constexpr u32 DEVICE_INBOX_SERVED = 2;
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
  static TANDEM_HOST_DEVICE u32 device_inbox_producers(u32 lanes) {
    return rt_ticket::PER_LANE * lanes + rt_ticket::DEVICE_INBOX_PRODUCERS;
  }
  static TANDEM_HOST_DEVICE u32 device_inbox_served(u32 lanes) {
    return rt_ticket::PER_LANE * lanes + rt_ticket::DEVICE_INBOX_SERVED;
  }
};

/// Argument words a device-inbox slot carries inline (RtInboxSlot::args).
constexpr u32 RT_INBOX_ARGS_WORDS = 4;
/// Argument bytes an inline device-inbox task may carry; larger ones travel
/// in the future's copy space.
constexpr u32 RT_INBOX_ARGS_MAX = RT_INBOX_ARGS_WORDS * 4;
/// `runtime::layout::device_inbox::SLOT_BYTES`.
constexpr u64 RT_INBOX_SLOT_BYTES = 64;
/// Set in a full slot's `seq` when its sender may be on another device, or
/// wrote the task into host memory: the service then acquires, and answers,
/// at system scope (device scope otherwise).
constexpr u64 RT_INBOX_WIDE = 1ull << 63;

/// A slot of the device inbox (`runtime::layout::device_inbox`): one cache
/// line of device memory. Ticket t uses slot t mod depth; `seq` is 2t while
/// the slot is free for t's producer, 2t + 1 (maybe | RT_INBOX_WIDE) once it
/// holds t's task, and 2(t + depth) once the service took it. The host
/// writes only the initial sequence numbers (2i for slot i).
struct alignas(64) RtInboxSlot {
  u64 seq;
  /// Device addresses of the sender's reply word and reply cell (RtReply).
  u64 reply_word;
  u64 reply_cell;
  /// The segment offset of the future whose copy space holds the task, or
  /// 0 for a task carried here (pool, method, args).
  u64 future;
  /// The task's token, which the reply word carries back (rt_notify).
  u32 token;
  u32 pool;
  u32 method;
  u32 args_len;
  /// The arguments, four little-endian bytes a word.
  u32 args[RT_INBOX_ARGS_WORDS];
};
static_assert(sizeof(RtInboxSlot) == RT_INBOX_SLOT_BYTES, "one cache line a slot");
TANDEM_ASSERT_OFFSET(RtInboxSlot, seq, 0);

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

/// Bytes of output a device handler may write (rt_serve stages it locally:
/// a host task's output overwrites its input in the copy space).
constexpr u32 RT_DEVICE_OUTPUT_MAX = 256;

/// Where a GPU service answers a kernel thread's task (rt_send_to_gpu): in
/// the sender's own device memory, carved per block by rt_init, so the
/// sender's wait polls memory of its own device. The thread polls its reply
/// word (a u32 beside its block's other threads' words, so a warp's polls
/// share a line), which the service stores last, with release: the task's
/// token above rt_notify's flags. A success without output is said by the
/// word alone; otherwise this cell holds the return code and the output.
struct RtReplyCell {
  i32 return_code;
  u32 output_len;
  u8 output[RT_DEVICE_OUTPUT_MAX];
};

/// `runtime::layout::HostReply`: where the GPU service answers a host
/// thread's task carried in its from-host record: the first
/// RT_HOST_REPLY_BYTES of the task's future's copy space, the output right
/// after (rt_run_host_record). `answer` is 0 (the host cleared it before
/// pushing) until the service stores RT_HOST_REPLY_ANSWERED | the return
/// code << 32, last.
struct RtHostReply {
  u64 answer;
  u32 output_len;
  /// Unused: keeps the output 16-aligned.
  u32 reserved;
};
/// `runtime::layout::HOST_REPLY_BYTES`.
constexpr u64 RT_HOST_REPLY_BYTES = 16;
/// `runtime::layout::host_reply::ANSWERED`.
constexpr u64 RT_HOST_REPLY_ANSWERED = 1;
static_assert(sizeof(RtHostReply) == RT_HOST_REPLY_BYTES, "HostReply size");
TANDEM_ASSERT_OFFSET(RtHostReply, output_len, 8);

/// Alignment of each block's carve of the reply region (words, then cells).
constexpr u64 RT_REPLY_ALIGN = 128;

/// Bytes of the reply region a block of `threads` threads carves: a reply
/// word and a cell per thread.
TANDEM_HOST_DEVICE u64 rt_reply_words_bytes(u32 threads) {
  return (u64{threads} * sizeof(u32) + RT_REPLY_ALIGN - 1) & ~(RT_REPLY_ALIGN - 1);
}
TANDEM_HOST_DEVICE u64 rt_reply_block_bytes(u32 threads) {
  return (rt_reply_words_bytes(threads) + u64{threads} * sizeof(RtReplyCell) + RT_REPLY_ALIGN - 1) &
         ~(RT_REPLY_ALIGN - 1);
}

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
  /// The GPU inbox's from-host ring, or null.
  u8* inbox;
  u32 inbox_depth;
  /// The device inbox, or null, and its slots - 1.
  RtInboxSlot* device_inbox;
  u64 device_inbox_mask;
  u32 num_lanes;
  u32 depth;
  /// The segment is another device's (rt_init_peer): what this block writes
  /// into it, and the answers that come back, cross devices, so they are
  /// ordered at system scope.
  bool peer;
  BlockArena arena;
  /// The block's notify words (one per thread, from its arena share) and
  /// their segment offset; null when they did not fit.
  u32* notify_words;
  u64 notify_offset;
  /// The block's reply words and cells (one per thread, RtReplyCell) in
  /// this device's memory; null when its reply region is used up.
  u32* reply_words;
  RtReplyCell* reply_cells;
  /// Whether thread i's notify word and reply are taken (by its first
  /// future).
  bool notify_taken[RT_NOTIFY_THREADS];
  /// Raised by the block's thread 0 once it has seen the segment's
  /// `service_stop` (rt_serve): the block's other service threads read it
  /// here, in block-shared memory, rather than each reading host memory.
  u32 service_stop_seen;
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
  /// The thread's reply word and cell in its own device's memory (RtReplyCell),
  /// or null: where a GPU service answers (rt_send_to_gpu).
  u32* reply_word;
  RtReplyCell* reply_cell;
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
  /// The task in flight went to a GPU service, which answers through the
  /// reply word and cell.
  bool via_gpu;
  /// The context it went through was another device's (RtContext::peer):
  /// the answer comes from there, at system scope.
  bool via_peer;
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

/// Bytes of the GPU inbox's from-host ring (`inbox_ring_bytes` in
/// segment.rs: one LL ring of task records, rounded up to a cache line).
TANDEM_HOST_DEVICE u64 rt_inbox_ring_bytes(u32 depth) {
  return (ll_required_bytes(depth) + CACHE_LINE - 1) & ~(CACHE_LINE - 1);
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
      h->device_inbox % alignof(RtInboxSlot) != 0 ||
      (h->device_inbox != 0 && check_ring_capacity(h->device_inbox_depth) != ring_status::ok) ||
      h->device_replies % RT_REPLY_ALIGN != 0) {
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
  ctx.inbox = nullptr;
  if (h->inbox_offset != 0) {
    LlRing ring;
    RingHeader* rh = reinterpret_cast<RingHeader*>(base + h->inbox_offset);
    if (h->inbox_depth != q->depth || h->inbox_ring_bytes != rt_inbox_ring_bytes(h->inbox_depth) ||
        h->inbox_offset < h->queue_offset ||
        h->inbox_offset + h->inbox_ring_bytes > h->queue_offset + h->queue_bytes ||
        ll_attach(rh, h->inbox_ring_bytes, &ring) != ring_status::ok) {
      return rt_status::bad_queue;
    }
    ctx.inbox = base + h->inbox_offset;
    ctx.inbox_depth = h->inbox_depth;
  }
  ctx.device_inbox = reinterpret_cast<RtInboxSlot*>(h->device_inbox);
  ctx.device_inbox_mask = u64{h->device_inbox_depth} - 1;
  ctx.peer = false;
  ctx.reply_words = nullptr;
  ctx.reply_cells = nullptr;
  ctx.num_lanes = q->num_lanes;
  ctx.depth = q->depth;
  ctx.service_stop_seen = 0;
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

namespace detail {

/// The header of the kernel's own device's segment `own`, or null when it
/// is not a published runtime segment of this version.
TANDEM_DEVICE RuntimeSegmentHeader* rt_own_header(const MemoryBackend& own) {
  if (own.base == 0 || own.capacity < RT_SEGMENT_HEADER_RESERVED ||
      own.base % alignof(RuntimeSegmentHeader) != 0) {
    return nullptr;
  }
  RuntimeSegmentHeader* h = reinterpret_cast<RuntimeSegmentHeader*>(own.base);
  // Acquire: as rt_validate's.
  if (load_acquire<scope::system>(&h->magic) != RT_SEGMENT_MAGIC || h->version != RT_SEGMENT_VERSION ||
      h->id.major != own.id.major || h->id.minor != own.id.minor ||
      h->device_replies % RT_REPLY_ALIGN != 0) {
    return nullptr;
  }
  return h;
}

/// Thread 0's carve of the block's replies (a word and a cell per thread)
/// from the reply region `own` names, in the kernel's own device's memory:
/// one fetch_add per block on the header's count, as the arena's carve.
/// None (null) once the region is used up.
TANDEM_DEVICE void rt_carve_replies(RtContext& ctx, RuntimeSegmentHeader* own) {
  ctx.reply_words = nullptr;
  ctx.reply_cells = nullptr;
  if (own->device_replies == 0) {
    return;
  }
  const u64 bytes = rt_reply_block_bytes(block_size());
  // Relaxed: the count only hands out disjoint ranges of device memory that
  // the host never touches; the host resets it only while no kernel runs.
  const u64 at = fetch_add<scope::system, order::relaxed>(&own->replies_carved, bytes);
  if (at > own->device_replies_bytes || bytes > own->device_replies_bytes - at) {
    return;
  }
  u8* const block = reinterpret_cast<u8*>(own->device_replies + at);
  ctx.reply_words = reinterpret_cast<u32*>(block);
  ctx.reply_cells = reinterpret_cast<RtReplyCell*>(block + rt_reply_words_bytes(block_size()));
}

/// rt_init over `segment` with replies from `own`'s reply region (the
/// segment of the device the kernel runs on), `peer` when the two differ.
TANDEM_DEVICE void rt_init_on(RtContext& ctx, const MemoryBackend& segment, const MemoryBackend& own, bool peer,
                              u64 block_arena_bytes) {
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
    RuntimeSegmentHeader* const own_header = peer ? rt_own_header(own) : ctx.header;
    if (ctx.arena.carved != alloc_status::ok) {
      ctx.status = rt_status::no_memory;
    } else if (own_header == nullptr) {
      ctx.status = rt_status::bad_segment;
    } else {
      ctx.peer = peer;
      rt_carve_replies(ctx, own_header);
      // One notify word per thread, consecutive, so a warp's words share a
      // cache line and its lanes' polls coalesce (see rt_wait).
      const FullPtr<u8> words = block_arena_allocate(ctx.arena, u64{block_size()} * sizeof(u32), 128);
      ctx.notify_words = reinterpret_cast<u32*>(words.ptr);
      ctx.notify_offset = ctx.arena_offset + words.shm.off;
    }
  }
  block_barrier();
}

}  // namespace detail

/// Sets up the block's context over `segment` and carves `block_arena_bytes`
/// of the segment's kernel arena for the block's futures, and a reply word
/// and cell per thread from the device's reply region. Every thread of the
/// block must call it, as it would reach a barrier; afterwards `ctx.status`
/// says whether the runtime can be used (the same in every thread).
TANDEM_DEVICE void rt_init(RtContext& ctx, const MemoryBackend& segment, u64 block_arena_bytes) {
  detail::rt_init_on(ctx, segment, segment, false, block_arena_bytes);
}

/// rt_init over another device's segment, for a kernel that sends tasks to
/// that device's GPU service: the block's futures come from the peer
/// segment's kernel arena, its replies from the reply region of
/// `own_segment` (the segment of the device the kernel runs on, so its
/// threads wait on their own device's memory), and rt_send_to_gpu, rt_wait
/// and rt_output on this context then work as on the kernel's own device.
/// The peer's inbox and tickets are its device memory, which this device
/// reaches through peer access. `access` is the host's word on that:
/// anything but reachable touches nothing of the peer's and leaves
/// ctx.status = no_peer_access (in every thread). Every thread of the
/// block, as rt_init.
TANDEM_DEVICE void rt_init_peer(RtContext& ctx, const MemoryBackend& own_segment, const MemoryBackend& peer_segment,
                                rt_peer access, u64 block_arena_bytes) {
  if (access != rt_peer::reachable) {
    if (thread_rank() == 0) {
      ctx.status = rt_status::no_peer_access;
    }
    block_barrier();
    return;
  }
  detail::rt_init_on(ctx, peer_segment, own_segment, true, block_arena_bytes);
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
  out->token = 0;
  out->staged_len = 0;
  for (u32 i = 0; i < LL_RECORD_WORDS - rt_record::POOL; ++i) {
    out->staged[i] = 0;  // records copy all of it (rt_send_to_cpu)
  }
  out->via_gpu = false;
  out->via_peer = false;
  out->no_output = false;
  out->nearly_empty_ring = 0;
  out->ahead = 0;
  out->wait_ns_per_ahead = detail::RT_WAIT_NS_PER_AHEAD;
  out->sent_ns = 0;
  out->sent_cycles = 0;
  out->first_poll_cycles = 0;
  // The thread's notify word and reply go to its first future (one future
  // per word: rt_wait trusts the word alone, see there); records carry
  // 32-bit offsets.
  const u32 me = thread_rank();
  const bool first = me < RT_NOTIFY_THREADS && !ctx.notify_taken[me];
  if (first) {
    ctx.notify_taken[me] = true;
  }
  const u64 word_offset = ctx.notify_offset + u64{me} * sizeof(u32);
  const bool notified = first && ctx.notify_words != nullptr && word_offset <= 0xFFFFFFFFull &&
                        out->ptr.off <= 0xFFFFFFFFull;
  if (notified) {
    // No earlier launch's answer may pass for one of ours.
    store_relaxed<scope::system>(&ctx.notify_words[me], 0u);
  }
  out->notify = notified ? &ctx.notify_words[me] : nullptr;
  out->notify_offset = notified ? static_cast<u32>(word_offset) : 0;
  const bool replied = first && ctx.reply_words != nullptr;
  if (replied) {
    // Likewise; ordered before any service's answer by the release of the
    // first push that names the word (rt_send_to_gpu).
    store_relaxed<scope::device>(&ctx.reply_words[me], 0u);
  }
  out->reply_word = replied ? &ctx.reply_words[me] : nullptr;
  out->reply_cell = replied ? &ctx.reply_cells[me] : nullptr;
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
/// up since is waited on, not reported full.
template <typename Push>
TANDEM_DEVICE rt_status rt_push(RtFuture& f, u64 capacity, const u32* stop, u64 spin_budget, Push push) {
  Backoff backoff = Backoff::up_to(full_ring_max_sleep_ns(capacity));
  for (u64 round = 0;; ++round) {
    switch (push()) {
      case ticket_result::done:
        f.in_flight = true;
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

/// The from-host ring of a context whose segment has an inbox.
TANDEM_DEVICE LlRing rt_inbox_from_host(const RtContext& ctx) {
  // Validated by rt_attach.
  return ll_view(reinterpret_cast<RingHeader*>(ctx.inbox), ctx.inbox_depth);
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
  const auto push = [&]() {
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
    return r;
  };
  const rt_status st = detail::rt_push(f, ring.capacity(), stop, spin_budget, push);
  if (st == rt_status::ok) {
    detail::rt_mark_sent(f);
  }
  return st;
}

namespace detail {

/// A fence at system scope when `wide` (the other party may be on another
/// device, or the data in host memory), else at device scope.
TANDEM_DEVICE void rt_fence(bool wide) {
  if (wide) {
    fence_acq_rel<scope::system>();
  } else {
    fence_acq_rel<scope::device>();
  }
}

/// How often, in rounds, a wait whose polls are reads of device memory (the
/// GPU route's inbox slot and reply word) checks its stop flag. There the
/// flag, usually in host memory, is the loop's only PCIe read: thousands of
/// senders each reading it every few microseconds would fill the link, and
/// every other read of host memory on the device (the host server's, the
/// CPU route's) would queue behind them. At the waits' back-off this is
/// about a millisecond between reads, which is how late a stop is seen.
constexpr u64 RT_LOCAL_WAIT_STOP_POLL_EVERY = 1024;

/// Waits until device-inbox `slot` is free for `ticket` (the service took
/// the slot's previous lap); false when `*stop` (may be null) is raised
/// first, which abandons the ticket: the service thread that owns it then
/// waits at it until its own stop, so raise `stop` only once the service is
/// no longer needed (as for any ticketed ring, mpmc.h).
TANDEM_DEVICE bool rt_wait_inbox_slot(RtInboxSlot* slot, u64 ticket, bool wide, const u32* stop) {
  const u64 free = mpmc_free_for(ticket);
  Backoff backoff = Backoff::up_to(Backoff::RACE_DEVICE_MAX_NS);
  for (u64 round = 0;; ++round) {
    // Relaxed, with the fence below: the acquire pattern of the service's
    // release of the slot, so its reads of the previous lap happen before
    // our stores. System scope for a sender on another device.
    const u64 seen = wide ? load_relaxed<scope::system>(&slot->seq) : load_relaxed<scope::device>(&slot->seq);
    if (seen == free) {
      break;
    }
    if (stop_raised<scope::system, RT_LOCAL_WAIT_STOP_POLL_EVERY>(stop, round, false)) {
      return false;
    }
    backoff.idle();
  }
  rt_fence(wide);
  return true;
}

/// A device-inbox ticket for the calling thread. The lanes of a warp that
/// send together take consecutive tickets with one fetch_add, made by the
/// lowest of them: every sender of a device claims from one word, and
/// thousands of them a microsecond would queue at it one RMW at a time.
TANDEM_DEVICE u64 rt_claim_inbox_ticket(const RtContext& ctx) {
  DeviceTickets* const producers = ctx.tickets + RtTicket::device_inbox_producers(ctx.num_lanes);
  const lane_mask senders = active_lanes();
  const u32 leader = lowest_lane(senders);
  u64 first = 0;
  if (lane_id() == leader) {
    // Relaxed: the fetch_add only makes tickets unique (the slot's sequence
    // number hands each over). System scope: kernels of other devices
    // (rt_init_peer) take tickets here too, and two devices' RMWs are atomic
    // with each other only at system scope.
    first = fetch_add_global<scope::system, order::relaxed>(&producers->next, u64{lane_count(senders)});
  }
  return broadcast(senders, first, leader) + lane_count(senders & lanes_below(lane_id()));
}

}  // namespace detail

/// Sends `f`'s task to the device's GPU service (rt_serve, a persistent
/// kernel the host started) through the device inbox, in device memory: a
/// task of at most RT_INBOX_ARGS_MAX argument bytes travels in the slot,
/// a larger one in the future's copy space. The service answers in the
/// thread's reply word and cell, in its own device's memory (rt_wait,
/// rt_output). One device-memory fetch_add claims the slot; a slot whose
/// previous lap the service has not taken yet is waited on until `*stop`
/// (the claimed ticket cannot be handed back, so `spin_budget` bounds
/// nothing here). no_inbox when the segment has none, no_memory when the
/// future has no reply (not its thread's first, or the reply region was
/// used up).
TANDEM_DEVICE rt_status rt_send_to_gpu(const RtContext& ctx, RtFuture& f, const u32* stop, u64 spin_budget) {
  static_assert(RT_INBOX_ARGS_MAX <= rt_record::INLINE_ARGS_MAX, "a task a slot carries is one rt_make_task stages");
  (void)spin_budget;
  if (ctx.status != rt_status::ok) {
    return ctx.status;
  }
  if (ctx.device_inbox == nullptr) {
    return rt_status::no_inbox;
  }
  if (f.reply_word == nullptr) {
    return rt_status::no_memory;
  }
  const u32 args_len = f.staged_len != 0 ? rt_record::args_len(f.staged[2]) : 0;
  const bool in_slot = f.staged_len != 0 && args_len <= RT_INBOX_ARGS_MAX;
  if (f.staged_len != 0 && !in_slot) {
    // The staged argument bytes, by constant indices into `staged` (which
    // may then stay in registers).
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
  // A copy-space task was written to host memory: published at system scope
  // too, as is anything from another device.
  const bool wide = ctx.peer || !in_slot;
  const u64 ticket = detail::rt_claim_inbox_ticket(ctx);
  RtInboxSlot* const slot = ctx.device_inbox + (ticket & ctx.device_inbox_mask);
  if (!detail::rt_wait_inbox_slot(slot, ticket, wide, stop)) {
    return rt_status::stopped;
  }
  slot->reply_word = reinterpret_cast<u64>(f.reply_word);
  slot->reply_cell = reinterpret_cast<u64>(f.reply_cell);
  slot->future = in_slot ? 0 : f.ptr.off;
  slot->token = f.token;
  slot->pool = in_slot ? f.staged[0] : 0;
  slot->method = in_slot ? f.staged[1] : 0;
  slot->args_len = args_len;
  TANDEM_UNROLL
  for (u32 i = 0; i < RT_INBOX_ARGS_WORDS; ++i) {
    slot->args[i] = f.staged[3 + i];
  }
  // Release: pairs with the service's acquire of the sequence number
  // (rt_serve), publishing the slot's fields, the cleared reply word
  // (rt_future_alloc) and a copy-space task.
  const u64 full = detail::mpmc_full_for(ticket) | (wide ? RT_INBOX_WIDE : 0);
  if (wide) {
    store_release<scope::system>(&slot->seq, full);
  } else {
    store_release<scope::device>(&slot->seq, full);
  }
  f.via_gpu = true;
  f.via_peer = ctx.peer;
  f.in_flight = true;
  return rt_status::ok;
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
/// of a thread without a notify word, whose answers take far longer than a
/// call.
TANDEM_COLD RtFlagsWait rt_wait_flags(FutureView view, const u32* stop, u64 spin_budget) {
  RtFlagsWait waited{wait_outcome::budget_exhausted, 0};
  waited.outcome = future_wait<scope::system>(view, stop, spin_budget, &waited.return_code);
  return waited;
}

/// Whether `f`'s reply word shows its task answered by a GPU service; then
/// `*return_code` and `f.no_output`.
TANDEM_DEVICE bool rt_replied(RtFuture& f, i32* return_code) {
  // Acquire: pairs with the service's release store of the word, after its
  // cell (rt_answer). System scope for an answer from another device.
  const u32 seen =
      f.via_peer ? load_acquire<scope::system>(f.reply_word) : load_acquire<scope::device>(f.reply_word);
  if ((seen >> rt_notify::TOKEN_SHIFT) != f.token) {
    return false;
  }
  f.no_output = (seen & rt_notify::NO_OUTPUT) != 0;
  *return_code = (seen & rt_notify::SUCCEEDED) != 0 ? 0 : f.reply_cell->return_code;
  return true;
}

/// rt_wait for a task sent to a GPU service: polls the reply word, in this
/// device's memory, so a poll is an L2 read, not a PCIe one. The first
/// Backoff::IDLE_POLLS polls do not sleep (a lone thread's answer comes
/// within them); later ones sleep up to Backoff::RACE_DEVICE_MAX_NS, which
/// only waits that are long already (a busy service) reach.
TANDEM_DEVICE wait_outcome rt_wait_replied(RtFuture& f, const u32* stop, u64 spin_budget, i32* return_code) {
  Backoff backoff = Backoff::up_to(Backoff::RACE_DEVICE_MAX_NS);
  for (u64 round = 0;; ++round) {
    const bool stopped =
        stop_raised<scope::system, RT_LOCAL_WAIT_STOP_POLL_EVERY>(stop, round, round >= spin_budget);
    if (rt_replied(f, return_code)) {
      return wait_outcome::completed;
    }
    // Then the word once more, as future_wait re-checks the flags.
    if (stopped) {
      return rt_replied(f, return_code) ? wait_outcome::completed : wait_outcome::stopped;
    }
    if (round >= spin_budget) {
      return rt_replied(f, return_code) ? wait_outcome::completed : wait_outcome::budget_exhausted;
    }
    backoff.idle();
  }
}

}  // namespace detail

/// Waits for `f`'s completion: completed (with `*return_code`), stopped, or
/// budget_exhausted, as future_wait, but polling the thread's reply word
/// for a task sent to a GPU service, and its notify word when it has one
/// and the task went to the CPU workers. Call it from any lane; it spins on
/// memory another agent writes, never on another lane.
TANDEM_DEVICE wait_outcome rt_wait(RtFuture& f, const u32* stop, u64 spin_budget, i32* return_code) {
  f.no_output = false;
  wait_outcome outcome;
  if (f.via_gpu) {
    outcome = detail::rt_wait_replied(f, stop, spin_budget, return_code);
  } else if (f.notify != nullptr) {
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
  }
  return outcome;
}

/// The output of a completed `f`, to read with Reader::over(*data, *len):
/// in the reply cell for a task a GPU service answered, else in the future.
TANDEM_DEVICE rt_status rt_output(const RtFuture& f, const u8** data, u32* len) {
  if (f.no_output) {
    *data = f.view.copy_space();
    *len = 0;
    return rt_status::ok;
  }
  if (f.via_gpu) {
    // Ordered after the cell's writes by rt_wait's acquire of the word.
    const u32 n = f.reply_cell->output_len;
    if (n > RT_DEVICE_OUTPUT_MAX) {
      return rt_status::future_error;
    }
    *data = f.reply_cell->output;
    *len = n;
    return rt_status::ok;
  }
  return future_output<scope::system>(f.view, data, len) == future_status::ok ? rt_status::ok
                                                                             : rt_status::future_error;
}

namespace detail {

/// The future at byte `offset` of the context's segment, attached into
/// `*f`; false when no future of the segment lies there.
TANDEM_DEVICE bool rt_task_future(const RtContext& ctx, u64 offset, FutureView* f) {
  const u64 segment_bytes = ctx.header->segment_bytes;
  return offset >= RT_SEGMENT_HEADER_RESERVED && offset < segment_bytes &&
         future_attach<scope::system>(ctx.base + offset, segment_bytes - offset, f) == future_status::ok;
}

/// Runs the task in `f`'s copy space (task header, then arguments) with
/// `handle`, its output into `w`: the return code, RT_RC_BAD_TASK for bytes
/// that are not a task. A pointer future (no COPY_FROM_CLIENT) carries no
/// input here: a bad task too.
template <typename H>
TANDEM_DEVICE i32 rt_run_future_task(const FutureView& f, H& handle, Writer& w) {
  const u8* input = nullptr;
  u32 input_len = 0;
  if (future_input<scope::system>(f, &input, &input_len) != future_status::ok || input_len == 0) {
    return RT_RC_BAD_TASK;
  }
  Reader r = Reader::over(input, input_len);
  u32 pool = 0, method = 0, args_len = 0, version = 0;
  if (r.get_u32(&pool) != ser_status::ok || r.get_u32(&method) != ser_status::ok ||
      r.get_u32(&args_len) != ser_status::ok || r.get_u32(&version) != ser_status::ok ||
      version != RT_TASK_VERSION || args_len > input_len - RT_TASK_HEADER_BYTES) {
    return RT_RC_BAD_TASK;
  }
  Reader args = Reader::over(input + RT_TASK_HEADER_BYTES, args_len);
  return handle(pool, method, args, w);
}

/// The host route for a task too large for its record: runs the task in
/// the copy space of the future at segment offset `offset` with `handle` and
/// completes the future (system-scope release: a host thread waits on it).
/// Returns false when `offset` names no future of this segment (nothing to
/// complete: a corrupt record), true otherwise.
template <typename H>
TANDEM_DEVICE bool rt_run_on_device(const RtContext& ctx, u64 offset, H& handle) {
  FutureView f;
  if (!rt_task_future(ctx, offset, &f)) {
    return false;
  }
  u8 out[RT_DEVICE_OUTPUT_MAX];
  Writer w = Writer::over(out, RT_DEVICE_OUTPUT_MAX);
  const i32 rc = rt_run_future_task(f, handle, w);
  const u64 written = rc == 0 ? w.pos : 0;  // a failed task carries no output
  // A second completion (a duplicated pointer) is refused and changes nothing.
  (void)future_complete<scope::system>(f, rc, [&](u8* buf, u32 cap, u64* len) {
    *len = written;
    if (written <= cap) {
      for (u64 i = 0; i < written; ++i) {
        buf[i] = out[i];
      }
    }
    return true;  // too long: future_complete stores RC_OUTPUT_TOO_LARGE
  });
  return true;
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

/// Frees position `ticket`'s slot of the from-host ring for the host
/// producer a lap later. Relaxed, after a system-scope fence the caller
/// issued once done reading the record: together a release, which the
/// producer's acquire of the sequence number (Rust's LlRing::try_push)
/// pairs with, so the record is read before it is overwritten.
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
/// Returns false for a record that names no future of the segment, or no
/// reply the copy space holds: nothing can be answered then.
///
/// One system-scope fence, after the output and before the answer and the
/// slot's release: a release for the output (the host thread's acquire of
/// `answer` pairs with it) and for the record's reads (before the slot's
/// next lap), and, following the record's loads, an acquire pattern that
/// pairs with the host's release fence before its record words, so its
/// clearing of `answer` is ordered before the answer. The output and its
/// length, stored before the fence, are memory the host does not write.
template <typename H>
TANDEM_DEVICE bool rt_run_host_record(const RtContext& ctx, const LlRing& ring, u64 ticket,
                                      const RtHostRecord& record, u64 segment_bytes, H& handle) {
  const u64 offset = record.words[rt_record::FUTURE];
  if (record.len <= rt_record::IN_FUTURE_WORDS) {
    // Acquire (as above): the host's copy space, which its release fence
    // published before the record; and release for the slot.
    fence_acq_rel<scope::system>();
    rt_free_host_slot(ring, ticket);
    return record.len == rt_record::IN_FUTURE_WORDS && rt_run_on_device(ctx, offset, handle);
  }
  const u32 lengths = record.words[rt_record::LENGTHS];
  const u64 copy_space = lengths >> rt_record::ARGS_LEN_BITS;
  const u32 args_len = rt_record::args_len(lengths);
  const u64 cell = offset + FUTURE_COPY_SPACE_OFFSET;
  if (offset < RT_SEGMENT_HEADER_RESERVED || offset % alignof(FutureShmHeader) != 0 ||
      copy_space < RT_HOST_REPLY_BYTES || cell > segment_bytes || copy_space > segment_bytes - cell) {
    fence_acq_rel<scope::system>();
    rt_free_host_slot(ring, ticket);
    return false;
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
  rt_copy_to_host(ctx.base + cell + RT_HOST_REPLY_BYTES, out, len);
  reply->output_len = len;
  fence_acq_rel<scope::system>();
  store_relaxed<scope::system>(&reply->answer, RT_HOST_REPLY_ANSWERED | u64{static_cast<u32>(rc)} << 32);
  rt_free_host_slot(ring, ticket);
  return true;
}

/// A device-inbox task, as rt_take_inbox_task copied it out of its slot.
struct RtInboxTask {
  u32* reply_word;
  RtReplyCell* reply_cell;
  u64 future;
  u32 token;
  u32 pool;
  u32 method;
  u32 args_len;
  u32 args[RT_INBOX_ARGS_WORDS];
  /// The sender may be on another device, or wrote the task to host memory.
  bool wide;
};

/// Copies device-inbox ticket `ticket`'s task into `*task` if it has
/// arrived; false (nothing taken) if not yet. The caller owns the ticket
/// (rt_serve): nobody else takes it, and the slot stays its own until it
/// frees it (rt_free_inbox_slot).
TANDEM_DEVICE bool rt_take_inbox_task(const RtContext& ctx, u64 ticket, RtInboxTask* task) {
  RtInboxSlot* const slot = ctx.device_inbox + (ticket & ctx.device_inbox_mask);
  // Relaxed, with the fence below: the acquire pattern that pairs with the
  // sender's release of `seq` (rt_send_to_gpu), at the scope it released
  // at. The load itself is system scope, so it sees a sender on another
  // device as well.
  const u64 seen = load_relaxed<scope::system>(&slot->seq);
  if ((seen & ~RT_INBOX_WIDE) != mpmc_full_for(ticket)) {
    return false;
  }
  task->wide = (seen & RT_INBOX_WIDE) != 0;
  rt_fence(task->wide);
  task->reply_word = reinterpret_cast<u32*>(slot->reply_word);
  task->reply_cell = reinterpret_cast<RtReplyCell*>(slot->reply_cell);
  task->future = slot->future;
  task->token = slot->token;
  task->pool = slot->pool;
  task->method = slot->method;
  task->args_len = slot->args_len;
  TANDEM_UNROLL
  for (u32 i = 0; i < RT_INBOX_ARGS_WORDS; ++i) {
    task->args[i] = slot->args[i];
  }
  return true;
}

/// Frees ticket `ticket`'s slot, whose task was taken, for the ticket a lap
/// later. Called after the answer: its system-scope release is then off the
/// sender's path (the sender's next ticket uses another slot).
TANDEM_DEVICE void rt_free_inbox_slot(const RtContext& ctx, u64 ticket) {
  RtInboxSlot* const slot = ctx.device_inbox + (ticket & ctx.device_inbox_mask);
  // Release, so the reads of rt_take_inbox_task finish before the next
  // lap's sender overwrites the slot (its acquire pattern,
  // rt_wait_inbox_slot). System scope: that sender may be on another
  // device.
  store_release<scope::system>(&slot->seq, mpmc_free_for(ticket + ctx.device_inbox_mask + 1));
}

/// Answers `task` with return code `rc` and the `len` bytes of `out` (none
/// unless rc is 0): the reply cell if the word alone cannot say it, then
/// the word, with release (rt_replied's acquire pairs with it), at system
/// scope for a wide task. Reply addresses are the sender's own (kernels of
/// this process, like the handler), so they are not checked.
TANDEM_DEVICE void rt_answer(const RtInboxTask& task, i32 rc, const u8* out, u32 len) {
  u32 flags = 0;
  if (rc == 0 && len == 0) {
    flags = rt_notify::SUCCEEDED | rt_notify::NO_OUTPUT;
  } else {
    flags = rc == 0 ? rt_notify::SUCCEEDED : 0;
    task.reply_cell->return_code = rc;
    task.reply_cell->output_len = len;
    for (u32 i = 0; i < len; ++i) {
      task.reply_cell->output[i] = out[i];
    }
  }
  const u32 word = task.token << rt_notify::TOKEN_SHIFT | flags;
  if (task.wide) {
    store_release<scope::system>(task.reply_word, word);
  } else {
    store_release<scope::device>(task.reply_word, word);
  }
}

/// Runs a taken device-inbox task with `handle` and answers it. Returns
/// false when its future offset names no future of the segment (answered
/// RT_RC_BAD_TASK).
template <typename H>
TANDEM_DEVICE bool rt_run_inbox_task(const RtContext& ctx, const RtInboxTask& task, H& handle) {
  u8 out[RT_DEVICE_OUTPUT_MAX];
  Writer w = Writer::over(out, RT_DEVICE_OUTPUT_MAX);
  i32 rc = RT_RC_BAD_TASK;
  bool found = true;
  if (task.future != 0) {
    FutureView f;
    found = rt_task_future(ctx, task.future, &f);
    if (found) {
      rc = rt_run_future_task(f, handle, w);
    }
  } else if (task.args_len <= RT_INBOX_ARGS_MAX) {
    u8 args[RT_INBOX_ARGS_MAX];
    TANDEM_UNROLL
    for (u32 i = 0; i < RT_INBOX_ARGS_MAX; ++i) {
      args[i] = static_cast<u8>(task.args[i / 4] >> (8 * (i % 4)));
    }
    Reader r = Reader::over(args, task.args_len);
    rc = handle(task.pool, task.method, r, w);
  }
  rt_answer(task, rc, out, rc == 0 ? static_cast<u32>(w.pos) : 0);
  return found;
}

/// Idle rounds a service thread polls without sleeping; after them it
/// sleeps RT_SERVE_IDLE_SLEEP_NS before each poll: what an idle service
/// costs its SMs, and the most it adds to the first answer after a pause.
constexpr u64 RT_SERVE_SPIN_POLLS = 256;
constexpr u32 RT_SERVE_IDLE_SLEEP_NS = 512;
/// Whether the host server (rt_serve's thread 0) skips the idle sleeps: on
/// a GPU each of its polls of the from-host ring is a PCIe round trip, which
/// paces it, and a sleep would come on top of the next host task's wait. The
/// CPU device's poll is a read of its own memory: it sleeps as the others.
#if defined(TANDEM_BACKEND_GPU)
constexpr bool RT_HOST_SERVER_PACED = true;
#else
constexpr bool RT_HOST_SERVER_PACED = false;
#endif
/// How often, in idle rounds, a service thread checks for the stop (a busy
/// service never does): thread 0 of each block in the segment's header
/// (host memory, a PCIe read), the others in the block's copy
/// (rt_service_stop_raised).
constexpr u64 RT_SERVE_STOP_POLL_EVERY = 64;

/// Whether the segment's `service_stop` is raised, as the calling service
/// thread learns it: thread 0 of the block reads the header and, once it is
/// raised, hands that to the block through `ctx.service_stop_seen`; the
/// others read only that. One reader per block: a PCIe read from every idle
/// thread of a large service, a few dozen times a millisecond each, queues
/// up at the link, and every read that a sender or the host server makes
/// of host memory then waits behind them. Once true, what the host pushed
/// before raising the flag is seen.
TANDEM_DEVICE bool rt_service_stop_raised(RtContext& ctx) {
  if (thread_rank() != 0) {
    // Acquire: pairs with thread 0's release below, which follows its own
    // acquire of the host's flag: the host's pushes happen before this.
    return load_acquire<scope::block>(&ctx.service_stop_seen) != 0;
  }
  // Relaxed, with the fence: the acquire pattern that pairs with the host's
  // release of the flag (GpuService::stop).
  if (load_relaxed<scope::system>(&ctx.header->service_stop) == 0) {
    return false;
  }
  fence_acq_rel<scope::system>();
  store_release<scope::block>(&ctx.service_stop_seen, u32{1});
  return true;
}

/// Whether a stopping service thread is done: no sender claimed its next
/// device-inbox ticket, and the from-host ring holds nothing past
/// `host_ticket` (`host_server`). Acquire loads after the stop flag's
/// acquire: every push made before the flag was raised is seen. Once done,
/// the thread records the senders' count as the first ticket of the next
/// service: every ticket below it was served (each thread serves its
/// tickets in order and is past the count), and as senders are done the
/// count no longer moves, so every thread records the same. The host server
/// records where the next service resumes the from-host ring.
TANDEM_DEVICE bool rt_serve_drained(const RtContext& ctx, u64 ticket, bool host_server, u64 host_ticket) {
  DeviceTickets* const producers = ctx.tickets + RtTicket::device_inbox_producers(ctx.num_lanes);
  const u64 claimed = load_acquire<scope::system>(&producers->next);
  if (claimed > ticket) {
    return false;
  }
  if (host_server) {
    const RingHeader* const ring = reinterpret_cast<const RingHeader*>(ctx.inbox);
    if (load_acquire<scope::system>(&ring->tail.value) > host_ticket) {
      return false;
    }
    // Relaxed: as the device inbox's count below.
    store_relaxed<scope::device>(&(ctx.tickets + RtTicket::inbox_from_host_consumers(ctx.num_lanes))->next,
                                 host_ticket);
  }
  // Relaxed: the next service reads it after this kernel ended (the host
  // synchronises before starting another).
  store_relaxed<scope::device>(&(ctx.tickets + RtTicket::device_inbox_served(ctx.num_lanes))->next, claimed);
  return true;
}

}  // namespace detail

/// What rt_serve did, per thread.
struct RtServeStats {
  u64 served;
  /// Tasks that named no future of the segment (skipped: a host record,
  /// or a kernel's copy-space task, answered RT_RC_BAD_TASK).
  u64 bad_pointers;
};

/// The GPU service: the body of a persistent kernel that runs the tasks sent
/// to the device, from kernels (rt_send_to_gpu, through the device inbox)
/// and from the host (Runtime::submit_to_gpu, through the from-host ring),
/// with `handle(pool, method, Reader& args, Writer& out) -> i32` (0 =
/// success; RT_RC_UNKNOWN_POOL / _METHOD for what it does not serve; output
/// up to RT_DEVICE_OUTPUT_MAX bytes). Kernels' tasks are answered in their
/// reply words (rt_answer), host tasks in their futures (reply or completion).
///
/// Who serves what: the device inbox's tickets are split among the grid's
/// G threads, from the first ticket B no earlier service served: thread g
/// takes B + g, B + g + G, B + g + 2G, ..., each waiting on the one slot its
/// next ticket uses (device memory) and taking no counter, so no ticket is
/// skipped or taken twice. Each ticket is taken once its earlier ones are
/// (its thread's, and the slot's previous lap, which frees the slot for its
/// sender): by induction on the tickets, none waits forever, provided all of
/// the service's threads are resident at once, as for any persistent
/// kernel, and one service runs on a device at a time. Thread 0 of the grid
/// also serves the from-host ring, alone, so a ticket it claims always has a
/// producer and the pop never waits for one.
/// Nothing sleeps while there is work; an idle thread sleeps briefly
/// between polls (RT_SERVE_IDLE_SLEEP_NS), but for a GPU's thread 0
/// (RT_HOST_SERVER_PACED), and checks for the stop now and then
/// (RT_SERVE_STOP_POLL_EVERY; one reader of the host's flag per block).
/// Host tasks are read whole from their records and answered in the
/// future's reply (rt_run_host_record).
///
/// It returns once the segment's `service_stop` is raised and both routes
/// are drained; the host raises it after its own submitters and the
/// kernels that send here are done, so nothing pushed before is lost. Call
/// after rt_attach.
template <typename H>
TANDEM_DEVICE rt_status rt_serve(RtContext& ctx, H handle, RtServeStats* stats) {
  *stats = RtServeStats{0, 0};
  if (ctx.status != rt_status::ok) {
    return ctx.status;
  }
  if (ctx.inbox == nullptr || ctx.device_inbox == nullptr) {
    return rt_status::no_inbox;
  }
  const u64 threads = grid_size();
  const u64 me = global_rank();
  const bool host_server = me == 0;
  const LlRing from_host = detail::rt_inbox_from_host(ctx);
  // Relaxed: written by the last service, which ended before this launch.
  u64 ticket = load_relaxed<scope::device>(&(ctx.tickets + RtTicket::device_inbox_served(ctx.num_lanes))->next) + me;
  // The host server alone takes the from-host ring's records, in order,
  // from where the last service left (relaxed, as above).
  u64 host_ticket =
      host_server ? load_relaxed<scope::device>(&(ctx.tickets + RtTicket::inbox_from_host_consumers(ctx.num_lanes))->next)
                  : 0;
  // Plain: the host wrote it before publishing the segment (rt_attach's
  // acquire), and never changes it.
  const u64 segment_bytes = ctx.header->segment_bytes;
  bool stopping = false;
  for (u64 idle = 0;;) {
    bool worked = false;
    detail::RtInboxTask task;
    if (detail::rt_take_inbox_task(ctx, ticket, &task)) {
      worked = true;
      if (detail::rt_run_inbox_task(ctx, task, handle)) {
        ++stats->served;
      } else {
        ++stats->bad_pointers;
      }
      detail::rt_free_inbox_slot(ctx, ticket);
      ticket += threads;
    }
    detail::RtHostRecord record;
    if (host_server && detail::rt_read_host_record(from_host, host_ticket, &record)) {
      worked = true;
      if (detail::rt_run_host_record(ctx, from_host, host_ticket, record, segment_bytes, handle)) {
        ++stats->served;
      } else {
        ++stats->bad_pointers;
      }
      ++host_ticket;
    }
    if (worked) {
      idle = 0;
      continue;
    }
    if (stopping) {
      if (detail::rt_serve_drained(ctx, ticket, host_server, host_ticket)) {
        return rt_status::ok;
      }
    } else if (++idle % detail::RT_SERVE_STOP_POLL_EVERY == 0 && detail::rt_service_stop_raised(ctx)) {
      stopping = true;
      continue;
    }
    if (idle > detail::RT_SERVE_SPIN_POLLS && !(host_server && detail::RT_HOST_SERVER_PACED)) {
      sleep_for(detail::RT_SERVE_IDLE_SLEEP_NS);
    } else {
      spin_pause();
    }
  }
}

}  // namespace tandem
