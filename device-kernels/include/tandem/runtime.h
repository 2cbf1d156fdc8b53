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
// The GPU route stays in device memory: rt_send_to_gpu claims its thread's
// slot of the service's device inbox (RtInboxSlot) with one fetch_or and
// writes the task there in words tagged with the slot's lap (as the LL
// records, tandem/ll_ring.h), so the service reads it in the poll that finds
// it and neither side fences; the service answers in the sender's reply word
// and cell (RtReplyCell), carved per block from the reply region of the
// sender's own device. Kernels of the service's device use one part of the
// inbox, at device scope; kernels of other devices another, at system scope.
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
constexpr u32 RT_SEGMENT_VERSION = 14;
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
  /// The device inbox's depth (`device_inbox`): slots of its LOCAL part, a
  /// power of two, at least 4 (rt_inbox_part_depth).
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
  /// Device address of the device inbox: an RtInboxHeader, then its parts'
  /// RtInboxSlots (rt_inbox), in device memory, where kernels send tasks
  /// to the GPU service.
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
  /// Unused (zero): the reply region's count is in the device inbox's
  /// header (RtInboxHeader::replies_carved), in device memory.
  u64 reserved;
  /// Raised by the host with every reset of the kernel arena: leases of
  /// device inbox slots (RtInboxHeader::leased) are one epoch's, since a
  /// lease lasts as long as its block, and no block of an earlier launch
  /// runs after a reset. 32 bits of it count.
  u64 kernel_epoch;
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
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, reserved, 200);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, kernel_epoch, 208);

/// `lane_queue::Priority` (shm-core).
enum class rt_priority : u32 { high = 0, low = 1 };

/// `runtime::layout::device_ticket`: where each of the segment's tickets
/// sits: PER_LANE per lane (the producers of lane l at priority p at
/// PER_LANE * l + p), then the GPU service's, at PER_LANE * lanes + these.
namespace rt_ticket {
constexpr u32 PER_LANE = 2;
/// The GPU service's tickets on the from-host ring.
constexpr u32 INBOX_FROM_HOST_CONSUMERS = 0;
/// Tickets after the lanes'.
constexpr u32 INBOX = 1;
}  // namespace rt_ticket

/// Indices into the segment's tickets, from rt_ticket.
struct RtTicket {
  static TANDEM_HOST_DEVICE u32 lane_producers(u32 lane, rt_priority priority) {
    return rt_ticket::PER_LANE * lane + static_cast<u32>(priority);
  }
  static TANDEM_HOST_DEVICE u32 inbox_from_host_consumers(u32 lanes) {
    return rt_ticket::PER_LANE * lanes + rt_ticket::INBOX_FROM_HOST_CONSUMERS;
  }
};

/// `runtime::layout::device_inbox`: the device inbox, device memory of the
/// segment's device through which kernels send tasks to its GPU service
/// (rt_send_to_gpu, rt_serve). An RtInboxHeader, then PARTS parts
/// (rt_inbox_part): LOCAL and LOCAL_SHARED for kernels of the segment's own
/// device, every access at device scope; PEER and PEER_SHARED for kernels
/// of other devices (rt_init_peer), every access at system scope. Apart, as
/// an atomic is one with another only if each one's scope holds the other's
/// thread, and the device's own kernels, nearly all the senders, would
/// otherwise pay system scope on every claim and poll. A LOCAL or PEER slot
/// is leased to one sending thread for its block's launch, so only its
/// first task claims it: a claim is an RMW whose round trip (across the
/// link, for a peer) comes on top of the task's own. Blocks that find the
/// leases spent share the _SHARED parts' slots, claimed for every task.
/// LOCAL has `device_inbox_depth` slots, LOCAL_SHARED half, the peer parts
/// a quarter each (rt_inbox_part_depth).
namespace rt_inbox {
constexpr u32 LOCAL = 0;
constexpr u32 LOCAL_SHARED = 1;
constexpr u32 PEER = 2;
constexpr u32 PEER_SHARED = 3;
constexpr u32 PARTS = 4;
/// Slots of the inbox per slot of `device_inbox_depth`, the parts' together
/// (`device_inbox::SLOTS_PER_DEPTH`).
constexpr u32 SLOTS_PER_DEPTH = 2;
/// `device_inbox::HEADER_BYTES` and `SLOT_BYTES`.
constexpr u64 HEADER_BYTES = 128;
constexpr u64 SLOT_BYTES = 128;
/// Set in a slot's `ctrl` while a sender holds it.
constexpr u64 BUSY = 1;
/// Argument words a slot carries, and so bytes; larger arguments travel in
/// the future's copy space.
constexpr u32 ARGS_WORDS = 4;
constexpr u32 ARGS_MAX = ARGS_WORDS * 4;
/// The words of a slot's task (RtInboxSlot::words), 32 bits each: the shape
/// (argument bytes, SHAPE_IN_FUTURE; or SHAPE_REPEATED and the token), the
/// token the reply word carries back, pool, method, the reply word's device
/// address (low half first), the reply cell's distance past it, then the
/// arguments (four little-endian bytes a word) or, SHAPE_IN_FUTURE, the
/// segment offset of the future whose copy space holds the task (low half
/// first).
constexpr u32 W_SHAPE = 0;
constexpr u32 W_TOKEN = 1;
constexpr u32 W_POOL = 2;
constexpr u32 W_METHOD = 3;
constexpr u32 W_REPLY = 4;
constexpr u32 W_CELL_DELTA = 6;
constexpr u32 W_ARGS = 7;
constexpr u32 W_FUTURE = 7;
/// Words every task has, and the most one has.
constexpr u32 HEAD_WORDS = W_ARGS;
constexpr u32 WORDS = W_ARGS + ARGS_WORDS;
/// The shape's flag for a task in the future's copy space.
constexpr u32 SHAPE_IN_FUTURE = 1u << 8;
/// Slots of a part that blocks map into before any service sized it (at
/// most the part): kernels launched before their service starts then use
/// few enough that it finds them soon among its cold slots.
constexpr u32 UNSIZED_ACTIVE = 1024;
/// Bits of the shape that hold the argument bytes.
constexpr u32 SHAPE_ARGS_MASK = 0xFF;
/// The shape's flag for a task without arguments whose reply, pool and
/// method are those of the task its sender sent through the slot's last
/// lap, in the slot: its other bits are then the task's token, so the
/// service that took that lap takes this one from its poll alone
/// (rt_take_repeated_task). The sender writes the other words all the same:
/// any other service thread takes it from them.
constexpr u32 SHAPE_REPEATED = 1u << 31;
}  // namespace rt_inbox

/// The device inbox's header (`runtime::layout::device_inbox`), one line.
struct alignas(128) RtInboxHeader {
  /// Slots of the _SHARED parts handed to sending blocks so far: rt_init
  /// takes its block's with one fetch_add (at its part's scope), and its
  /// thread i sends through slot (carved + i) mod active. A block that
  /// leased PEER slots (`leased`) adds its threads to carved[PEER], which
  /// only says that peers send.
  u64 carved[rt_inbox::PARTS];
  /// The slots of each part senders map into, a power of two: set by the
  /// running service from its size (rt_serve), so each of its threads polls
  /// a few every round; 0 before any service ran (then UNSIZED_ACTIVE).
  u32 active[rt_inbox::PARTS];
  /// The most slots of each part any block may have mapped into (the
  /// largest `active` so far, at least UNSIZED_ACTIVE): a service polls
  /// those past its own hot ones as cold, and none beyond.
  u32 mapped[rt_inbox::PARTS];
  /// The LOCAL and PEER slots leased, one to each thread of a sending block
  /// (rt_take_in_epoch): the kernel epoch (RuntimeSegmentHeader) above
  /// 32 bits, the slots leased in it below; the _SHARED parts' are unused.
  /// In the device's memory, changed by compare-and-swap at the part's
  /// scope, as the slots' claims: several devices lease PEER slots at once.
  u64 leased[rt_inbox::PARTS];
  /// The segment's kernel arena carved by blocks (rt_carve_block_arena), in
  /// cache lines past its first line-aligned byte, and the reply region
  /// carved (rt_carve_replies), in RT_REPLY_ALIGN units: each the kernel
  /// epoch above 32 bits, the count in it below (rt_take_in_epoch). Here,
  /// not beside the regions in host memory: a GPU's RMWs of host memory are
  /// atomic only as far as the platform carries atomics across the link,
  /// and a lost update of these counts would hand two blocks one range;
  /// RMWs of the device's own memory are its L2's. The arena's at system
  /// scope (other devices' kernels carve futures there, rt_init_peer), the
  /// replies' at device scope (only the device's own kernels carve them).
  u64 arena_carved;
  u64 replies_carved;
};
static_assert(sizeof(RtInboxHeader) == rt_inbox::HEADER_BYTES, "one line");
TANDEM_ASSERT_OFFSET(RtInboxHeader, active, 32);
TANDEM_ASSERT_OFFSET(RtInboxHeader, mapped, 48);
TANDEM_ASSERT_OFFSET(RtInboxHeader, leased, 64);
TANDEM_ASSERT_OFFSET(RtInboxHeader, arena_carved, 96);
TANDEM_ASSERT_OFFSET(RtInboxHeader, replies_carved, 104);

/// A slot of the device inbox: `ctrl` is the slot's lap << 1, | BUSY while a
/// sender holds it (from its claim, a fetch_or, until the service has read
/// the task and stores the next lap). The sender writes the task into
/// `words`, each the tag of the lap (rt_inbox_tag) above 32 bits of the
/// task: a word whose tag is the lap's is whole and this lap's, so the
/// service needs no fence to read them and the sender none to publish.
/// Zeroed memory is a free slot at lap 0, whose tag is not 0.
struct alignas(128) RtInboxSlot {
  u64 ctrl;
  u64 words[15];
};
static_assert(sizeof(RtInboxSlot) == rt_inbox::SLOT_BYTES, "two lines a slot");
static_assert(rt_inbox::WORDS <= 15, "a task fits its slot");
TANDEM_ASSERT_OFFSET(RtInboxSlot, words, 8);

/// The tag of a slot's lap: never 0, so zeroed words are no lap's. A word
/// passes for a later lap's only if it was last written a multiple of 2^32
/// laps before, and is read before that lap's store of it lands.
TANDEM_HOST_DEVICE u32 rt_inbox_tag(u64 lap) { return static_cast<u32>(lap + 1); }

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
static_assert(rt_notify::TOKEN_MAX < rt_inbox::SHAPE_REPEATED, "a repeated task's shape holds its token");

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
/// code << 32, last, with RT_HOST_REPLY_NO_OUTPUT when there is no output,
/// or RT_HOST_REPLY_TAGGED and the length when the output is in tagged
/// words (`output_len` is then not written).
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
/// `runtime::layout::host_reply::NO_OUTPUT`.
constexpr u64 RT_HOST_REPLY_NO_OUTPUT = 2;
/// `runtime::layout::host_reply::TAGGED`, `TAGGED_LEN_SHIFT`,
/// `TAGGED_LEN_MASK` and `TAGGED_MAX`.
constexpr u64 RT_HOST_REPLY_TAGGED = 4;
constexpr u32 RT_HOST_REPLY_TAGGED_LEN_SHIFT = 8;
constexpr u64 RT_HOST_REPLY_TAGGED_LEN_MASK = 0x3FF;
constexpr u32 RT_HOST_REPLY_TAGGED_MAX = 32;
static_assert(RT_HOST_REPLY_TAGGED_MAX <= RT_HOST_REPLY_TAGGED_LEN_MASK, "a tagged length fits its bits");
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
  /// The device inbox, or null, and the slots of each of its parts.
  RtInboxHeader* device_inbox;
  u32 device_inbox_depth;
  /// Where the block's threads send tasks (rt_send_to_gpu): the inbox part
  /// for the block's device (LOCAL or LOCAL_SHARED, PEER or PEER_SHARED
  /// when `peer`), and the block's carve of it: thread i's slot is
  /// send_slots[(send_first + i) & send_mask].
  RtInboxSlot* send_slots;
  u32 send_first;
  u32 send_mask;
  /// The slots are the block's lease, one per thread (rt_carve_inbox_slots).
  bool send_owned;
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
  /// The leased inbox slot (RtContext::send_owned) this future's last GPU
  /// task went through, or null, and that task's lap there: once it is
  /// answered the slot is free at the next lap, and no other thread sends
  /// through it, so the next task needs no claim.
  RtInboxSlot* owned_slot;
  u64 owned_lap;
  /// Whether that task went in its slot, and its pool and method: the next
  /// one, if it repeats them without arguments, goes as SHAPE_REPEATED.
  bool owned_in_slot;
  u32 owned_pool;
  u32 owned_method;
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
  /// Whether the future's header and notify word in the segment (host
  /// memory) are written, behind a system-scope fence (rt_future_for_host).
  /// rt_future_alloc leaves that to the first task that travels through
  /// host memory, so a thread whose tasks all go to its own device's GPU
  /// service in their inbox slots writes nothing there and fences only at
  /// device scope.
  bool host_ready;
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
      h->device_inbox % alignof(RtInboxHeader) != 0 ||
      (h->device_inbox != 0 &&
       (check_ring_capacity(h->device_inbox_depth) != ring_status::ok || h->device_inbox_depth < 4)) ||
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
  // The first ring's header only: the host lays every ring from the queue's
  // depth before it publishes the queue's magic (LaneQueue::init_in), which
  // the acquire above saw, and the bounds of the last were checked with the
  // queue's. Each header read is a PCIe round trip that thread 0 makes
  // before its block's threads may send, in every block of every launch
  // (docs/perf/2026-12-01-h200-launch-setup.md).
  {
    LlRing ring;
    if (ll_attach(reinterpret_cast<RingHeader*>(rings), q->ring_bytes, &ring) != ring_status::ok ||
        ring.capacity() != q->depth) {
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
  ctx.device_inbox = reinterpret_cast<RtInboxHeader*>(h->device_inbox);
  ctx.device_inbox_depth = h->device_inbox_depth;
  ctx.send_slots = nullptr;
  ctx.send_first = 0;
  ctx.send_mask = 0;
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

/// Takes `amount` more of a count whose word is `word` (the kernel epoch
/// above 32 bits, the count in it below), at scope `S`, in kernel epoch
/// `epoch`, if the count stays within `limit`: the count before it in
/// `*first`, or false with nothing taken (a limit past 32 bits counts as
/// 2^32 - 1). A word of an earlier epoch counts none taken, so the host's
/// raise of the epoch resets every such count without touching device
/// memory. Relaxed: a count only hands out disjoint ranges (of inbox slots,
/// arena lines, reply units); what is then written there is ordered by its
/// own users.
template <scope S>
TANDEM_DEVICE bool rt_take_in_epoch(u64* word, u32 epoch, u64 amount, u64 limit, u64* first) {
  u64 seen = load_relaxed<S>(word);
  for (;;) {
    const u64 taken = static_cast<u32>(seen >> 32) == epoch ? (seen & 0xFFFFFFFFull) : 0;
    const u64 most = limit < 0xFFFFFFFFull ? limit : 0xFFFFFFFFull;
    if (taken >= most || amount > most - taken) {
      return false;
    }
    const u64 want = u64{epoch} << 32 | (taken + amount);
    const u64 found = cas<S, order::relaxed>(word, seen, want);
    if (found == seen) {
      *first = taken;
      return true;
    }
    seen = found;
  }
}

/// Thread 0's carve of the block's replies (a word and a cell per thread)
/// from the reply region `own` names, in the kernel's own device's memory,
/// counted in its device inbox's header (RtInboxHeader::replies_carved) in
/// `own`'s kernel epoch `epoch`. None (null) once the region is used up.
TANDEM_DEVICE void rt_carve_replies(RtContext& ctx, RuntimeSegmentHeader* own, u32 epoch) {
  ctx.reply_words = nullptr;
  ctx.reply_cells = nullptr;
  if (own->device_replies == 0 || own->device_inbox == 0) {
    return;
  }
  RtInboxHeader* const inbox = reinterpret_cast<RtInboxHeader*>(own->device_inbox);
  const u64 units = rt_reply_block_bytes(block_size()) / RT_REPLY_ALIGN;
  u64 at = 0;
  if (!rt_take_in_epoch<scope::device>(&inbox->replies_carved, epoch, units, own->device_replies_bytes / RT_REPLY_ALIGN,
                                       &at)) {
    return;
  }
  u8* const block = reinterpret_cast<u8*>(own->device_replies + at * RT_REPLY_ALIGN);
  ctx.reply_words = reinterpret_cast<u32*>(block);
  ctx.reply_cells = reinterpret_cast<RtReplyCell*>(block + rt_reply_words_bytes(block_size()));
}

/// Thread 0's carve of the block's share of the segment's kernel arena,
/// whose header is `arena` (in the segment): `bytes` on cache lines of
/// their own, counted in the device inbox's header
/// (RtInboxHeader::arena_carved) in kernel epoch `epoch`; in a segment
/// without a device inbox, through the arena's own cursor (arena_carve).
TANDEM_DEVICE void rt_carve_block_arena(RtContext& ctx, ArenaHeader* arena, u64 bytes, u32 epoch) {
  ctx.arena.header = arena;
  if (ctx.device_inbox == nullptr) {
    ctx.arena.carved = arena_carve<scope::system>(arena, bytes, &ctx.arena.arena);
    return;
  }
  // Plain: the host wrote them before publishing the segment (rt_attach's
  // acquire), and never changes them.
  const u64 heap_begin = arena->heap_begin;
  const u64 heap_end = arena->heap_end;
  const u64 base = reinterpret_cast<u64>(arena);
  u64 first_address = 0;
  if (bytes == 0) {
    ctx.arena.carved = alloc_status::zero_size;
    return;
  }
  if (!detail::align_up(base + heap_begin, CACHE_LINE, &first_address) || first_address - base > heap_end) {
    ctx.arena.carved = alloc_status::exhausted;
    return;
  }
  const u64 first = first_address - base;
  const u64 lines = bytes / CACHE_LINE + (bytes % CACHE_LINE != 0 ? 1 : 0);
  u64 at = 0;
  if (!rt_take_in_epoch<scope::system>(&ctx.device_inbox->arena_carved, epoch, lines, (heap_end - first) / CACHE_LINE,
                                       &at)) {
    ctx.arena.carved = alloc_status::exhausted;
    return;
  }
  const u64 start = first + at * CACHE_LINE;
  ctx.arena.arena = ThreadArena{arena->id, start, start + bytes};
  ctx.arena.carved = alloc_status::ok;
}

/// The slots of device inbox part `part` of an inbox of `depth`
/// (`device_inbox_depth`, a power of two, at least 4): LOCAL all of it,
/// LOCAL_SHARED half, PEER and PEER_SHARED a quarter each.
TANDEM_HOST_DEVICE u32 rt_inbox_part_depth(u32 depth, u32 part) {
  return part == rt_inbox::LOCAL ? depth : part == rt_inbox::LOCAL_SHARED ? depth / 2 : depth / 4;
}

/// Whether part `part` is for the device's own kernels (device scope).
TANDEM_HOST_DEVICE bool rt_inbox_part_is_local(u32 part) { return part < rt_inbox::PEER; }

/// The slots of device inbox part `part`, which follow each other in the
/// parts' order.
TANDEM_DEVICE RtInboxSlot* rt_inbox_part(const RtContext& ctx, u32 part) {
  u8* const first = reinterpret_cast<u8*>(ctx.device_inbox) + rt_inbox::HEADER_BYTES;
  u64 before = 0;
  for (u32 p = 0; p < part; ++p) {
    before += rt_inbox_part_depth(ctx.device_inbox_depth, p);
  }
  return reinterpret_cast<RtInboxSlot*>(first + before * rt_inbox::SLOT_BYTES);
}

/// How many of a part's `depth` slots a service of `servers` mailbox
/// threads keeps hot (RtInboxHeader::active): `per_server` each, rounded
/// down to a power of two, at least 1 and at most the part.
TANDEM_HOST_DEVICE u32 rt_inbox_active(u64 servers, u32 per_server, u32 depth) {
  const u64 wanted = servers * per_server;
  if (wanted >= depth) {
    return depth;
  }
  u32 active = 1;
  while (u64{active} * 2 <= wanted) {
    active *= 2;
  }
  return active;
}

/// The hot slots `published` (RtInboxHeader::active) of a part of `depth`
/// slots: as published by a service, else (none ran, or the value is no
/// power of two within the part, so no service's) as before any service ran.
TANDEM_HOST_DEVICE u32 rt_inbox_sane_active(u32 published, u32 depth) {
  if (published == 0 || published > depth || (published & (published - 1)) != 0) {
    return rt_inbox::UNSIZED_ACTIVE < depth ? rt_inbox::UNSIZED_ACTIVE : depth;
  }
  return published;
}

/// rt_carve_inbox_slots over parts `leased` and `shared` (LOCAL and
/// LOCAL_SHARED, or PEER and PEER_SHARED), whose scope is `S`.
template <scope S>
TANDEM_DEVICE void rt_carve_inbox_slots_of(RtContext& ctx, u32 leased, u32 shared, u32 epoch) {
  const u64 threads = block_size();
  RtInboxHeader* const inbox = ctx.device_inbox;
  const u32 depth = ctx.device_inbox_depth;
  // Relaxed, all: the counts and the sizes only pick slots; a slot's claim
  // orders everything the sends do.
  const u32 leasable = rt_inbox_sane_active(load_relaxed<S>(&inbox->active[leased]), rt_inbox_part_depth(depth, leased));
  u64 lease = 0;
  if (rt_take_in_epoch<S>(&inbox->leased[leased], epoch, threads, leasable, &lease)) {
    if (leased == rt_inbox::PEER) {
      // The count turns the service's polls of the peer parts on
      // (rt_inbox_has_peers); its value is not needed.
      (void)fetch_add<S, order::relaxed>(&inbox->carved[leased], threads);
    }
    ctx.send_owned = true;
    ctx.send_slots = rt_inbox_part(ctx, leased);
    ctx.send_mask = ~u32{0};
    ctx.send_first = static_cast<u32>(lease);
    return;
  }
  const u32 active = rt_inbox_sane_active(load_relaxed<S>(&inbox->active[shared]), rt_inbox_part_depth(depth, shared));
  const u64 first = fetch_add<S, order::relaxed>(&inbox->carved[shared], threads);
  ctx.send_slots = rt_inbox_part(ctx, shared);
  ctx.send_mask = active - 1;
  ctx.send_first = static_cast<u32>(first) & ctx.send_mask;
}

/// Thread 0's carve of the block's inbox slots, one per thread, from the
/// parts for the block's device. First a lease of LOCAL (or PEER) slots
/// among those leased since the kernel arena's last reset
/// (rt_take_in_epoch): while the lease lies within the part's hot
/// slots, the slots are the block's alone (the reset's contract: no block
/// of an earlier launch runs) and polled every round, so each thread claims
/// its slot once and then sends into it unclaimed (rt_send_to_gpu). Past
/// them, the block shares LOCAL_SHARED (or PEER_SHARED) slots, taken with
/// one fetch_add, as the replies': the count only spreads the blocks over
/// the part. Those slots are shared when more threads send than the service
/// keeps hot, or carves wrap onto a running block's: a sender then claims
/// its slot after the last holder's task was read (rt_claim_inbox_slot), so
/// sharing costs time, never a task.
TANDEM_DEVICE void rt_carve_inbox_slots(RtContext& ctx, u32 epoch) {
  ctx.send_owned = false;
  if (ctx.device_inbox == nullptr) {
    return;
  }
  if (ctx.peer) {
    rt_carve_inbox_slots_of<scope::system>(ctx, rt_inbox::PEER, rt_inbox::PEER_SHARED, epoch);
  } else {
    rt_carve_inbox_slots_of<scope::device>(ctx, rt_inbox::LOCAL, rt_inbox::LOCAL_SHARED, epoch);
  }
}

/// rt_init over `segment` with replies from `own`'s reply region (the
/// segment of the device the kernel runs on), `peer` when the two differ.
TANDEM_DEVICE void rt_init_on(RtContext& ctx, const MemoryBackend& segment, const MemoryBackend& own, bool peer,
                              u64 block_arena_bytes) {
  rt_attach(ctx, segment);
  if (ctx.status != rt_status::ok) {
    return;
  }
  if (thread_rank() < RT_NOTIFY_THREADS) {
    ctx.notify_taken[thread_rank()] = false;
  }
  if (thread_rank() == 0) {
    RuntimeSegmentHeader* const own_header = peer ? rt_own_header(own) : ctx.header;
    // Relaxed: the host raised it before this launch (reset_kernel_arena).
    const u32 epoch = static_cast<u32>(load_relaxed<scope::system>(&ctx.header->kernel_epoch));
    rt_carve_block_arena(ctx, reinterpret_cast<ArenaHeader*>(ctx.base + ctx.arena_offset), block_arena_bytes, epoch);
    if (ctx.arena.carved != alloc_status::ok) {
      ctx.status = rt_status::no_memory;
    } else if (own_header == nullptr) {
      ctx.status = rt_status::bad_segment;
    } else {
      ctx.peer = peer;
      // Relaxed, as the segment's: its own device's kernels are launched
      // after the host raised it.
      rt_carve_replies(ctx, own_header,
                       peer ? static_cast<u32>(load_relaxed<scope::system>(&own_header->kernel_epoch)) : epoch);
      rt_carve_inbox_slots(ctx, epoch);
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

}  // namespace detail

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
  // The header is written by rt_future_for_host, when a task first needs it.
  if (detail::check_future_region(mem.ptr, bytes, bytes) != future_status::ok) {
    return rt_status::future_error;
  }
  out->view = FutureView{reinterpret_cast<FutureShmHeader*>(mem.ptr), copy_space};
  out->host_ready = false;
  out->ptr = ShmPtr<u8>{ctx.id, ctx.arena_offset + mem.shm.off};
  out->bytes = bytes;
  out->in_flight = false;
  out->token = 0;
  out->staged_len = 0;
  out->owned_slot = nullptr;
  out->owned_lap = 0;
  out->owned_in_slot = false;
  out->owned_pool = 0;
  out->owned_method = 0;
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
  // Cleared, as the header is written, by rt_future_for_host.
  out->notify = notified ? &ctx.notify_words[me] : nullptr;
  out->notify_offset = notified ? static_cast<u32>(word_offset) : 0;
  const bool replied = first && ctx.reply_words != nullptr;
  if (replied) {
    // No earlier launch's answer may pass for one of ours. Cleared before
    // any service's answer: the fence below orders it before the stores of
    // any task this thread sends, and a service answers only at an address
    // it read from one. At device scope for this device's service, at
    // system scope for another device's (a peer context), which answers
    // across the link.
    store_relaxed<scope::device>(&ctx.reply_words[me], 0u);
    detail::rt_fence(ctx.peer);
  }
  out->reply_word = replied ? &ctx.reply_words[me] : nullptr;
  out->reply_cell = replied ? &ctx.reply_cells[me] : nullptr;
  return rt_status::ok;
}

namespace detail {

/// Makes `f` ready for a task that travels through host memory (to the CPU
/// workers, or in its copy space): writes its header and clears its notify
/// word (no earlier launch's answer may pass for one of ours), then one
/// system-scope fence, so both reach the host before any record naming
/// them (records carry no fence of their own). Once per future
/// (RtFuture::host_ready).
TANDEM_DEVICE rt_status rt_future_for_host(RtFuture& f) {
  if (f.host_ready) {
    return rt_status::ok;
  }
  if (future_init(reinterpret_cast<u8*>(f.view.header), f.bytes, f.view.copy_space_size, &f.view) !=
      future_status::ok) {
    return rt_status::future_error;
  }
  if (f.notify != nullptr) {
    store_relaxed<scope::system>(f.notify, 0u);
  }
  fence_acq_rel<scope::system>();
  f.host_ready = true;
  return rt_status::ok;
}

/// Writes the task (header, then the `args_len` argument bytes
/// `write_args` puts) into `f`'s copy space, after re-initialising the
/// future. args_too_large when it does not fit.
template <typename W>
TANDEM_DEVICE rt_status rt_fill_copy_space(RtFuture& f, u32 pool, u32 method, u32 args_len, W write_args) {
  const rt_status ready = rt_future_for_host(f);
  if (ready != rt_status::ok) {
    return ready;
  }
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
  const rt_status ready = detail::rt_future_for_host(f);
  if (ready != rt_status::ok) {
    return ready;
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

/// How often, in rounds, a wait whose polls are reads of device memory (the
/// GPU route's inbox slot and reply word) checks its stop flag. There the
/// flag, usually in host memory, is the loop's only PCIe read: thousands of
/// senders each reading it every few microseconds would fill the link, and
/// every other read of host memory on the device (the host server's, the
/// CPU route's) would queue behind them. At the waits' back-off this is
/// about a millisecond between reads, which is how late a stop is seen.
constexpr u64 RT_LOCAL_WAIT_STOP_POLL_EVERY = 1024;

/// Claims inbox slot `slot` for the calling thread's task (at scope `S`, its
/// part's): sets BUSY with a fetch_or, and if the slot was free returns true
/// and its lap in `*lap`. A slot another sender holds is waited on with
/// loads until the service has read that task (it frees the slot before
/// running it), then claimed again; false, with nothing claimed, when
/// `*stop` (may be null) is raised first.
template <scope S>
TANDEM_DEVICE bool rt_claim_inbox_slot(RtInboxSlot* slot, const u32* stop, u64* lap) {
  Backoff backoff = Backoff::up_to(Backoff::RACE_DEVICE_MAX_NS);
  for (u64 round = 0;; ++round) {
    // Relaxed: the claim orders nothing. The task's words carry its lap's
    // tag, and the service's free of the last lap (a store of ctrl) comes
    // after its reads of that lap's words, which the values it used prove
    // done before it stores (rt_take_inbox_task).
    const u64 old = fetch_or<S, order::relaxed>(&slot->ctrl, rt_inbox::BUSY);
    if ((old & rt_inbox::BUSY) == 0) {
      *lap = old >> 1;
      return true;
    }
    // Loads, not more RMWs, while it is held: they queue at the slot's line
    // with the service's free.
    while ((load_relaxed<S>(&slot->ctrl) & rt_inbox::BUSY) != 0) {
      if (stop_raised<scope::system, RT_LOCAL_WAIT_STOP_POLL_EVERY>(stop, round++, false)) {
        return false;
      }
      backoff.idle();
    }
  }
}

/// Writes `f`'s task into claimed slot `slot` at lap `lap`, each word under
/// the lap's tag, in pairs where the words are 16-aligned (words 1-2, 3-4,
/// 5-6, 7-8, 9-10): relaxed, as the tags say which words have landed.
/// `repeated`: the task goes as SHAPE_REPEATED.
template <scope S>
TANDEM_DEVICE void rt_write_inbox_task(RtInboxSlot* slot, u64 lap, const RtFuture& f, bool in_slot, u32 args_len,
                                       bool repeated) {
  const u64 tag = u64{rt_inbox_tag(lap)} << 32;
  u32 w[rt_inbox::WORDS];
  w[rt_inbox::W_SHAPE] = repeated  ? rt_inbox::SHAPE_REPEATED | f.token
                         : in_slot ? args_len
                                   : rt_inbox::SHAPE_IN_FUTURE;
  w[rt_inbox::W_TOKEN] = f.token;
  w[rt_inbox::W_POOL] = in_slot ? f.staged[0] : 0;
  w[rt_inbox::W_METHOD] = in_slot ? f.staged[1] : 0;
  const u64 reply = reinterpret_cast<u64>(f.reply_word);
  w[rt_inbox::W_REPLY] = static_cast<u32>(reply);
  w[rt_inbox::W_REPLY + 1] = static_cast<u32>(reply >> 32);
  // The cell follows the word in the block's carve (rt_carve_replies).
  w[rt_inbox::W_CELL_DELTA] = static_cast<u32>(reinterpret_cast<u64>(f.reply_cell) - reply);
  TANDEM_UNROLL
  for (u32 i = 0; i < rt_inbox::ARGS_WORDS; ++i) {
    w[rt_inbox::W_ARGS + i] = f.staged[3 + i];
  }
  if (!in_slot) {
    w[rt_inbox::W_FUTURE] = static_cast<u32>(f.ptr.off);
    w[rt_inbox::W_FUTURE + 1] = static_cast<u32>(f.ptr.off >> 32);
  }
  static_assert(rt_inbox::HEAD_WORDS == 7 && rt_inbox::WORDS == 11, "the stores below");
  store_relaxed<S>(&slot->words[0], tag | w[0]);
  store_relaxed_pair<S>(&slot->words[1], tag | w[1], tag | w[2]);
  store_relaxed_pair<S>(&slot->words[3], tag | w[3], tag | w[4]);
  store_relaxed_pair<S>(&slot->words[5], tag | w[5], tag | w[6]);
  if (!in_slot || args_len > 0) {
    store_relaxed_pair<S>(&slot->words[7], tag | w[7], tag | w[8]);
  }
  if (in_slot && args_len > 2 * 4) {
    store_relaxed_pair<S>(&slot->words[9], tag | w[9], tag | w[10]);
  }
}

}  // namespace detail

/// Sends `f`'s task to the device's GPU service (rt_serve, a persistent
/// kernel the host started) through the thread's slot of the device inbox,
/// in device memory: a task of at most rt_inbox::ARGS_MAX argument bytes
/// travels in the slot, a larger one in the future's copy space. The
/// service answers in the thread's reply word and cell, in its own device's
/// memory (rt_wait, rt_output). One fetch_or claims the slot; a slot another
/// sender holds (more senders than the service keeps slots hot) is waited
/// on until its task was read, or until `*stop`, which then returns stopped
/// with nothing sent (`spin_budget` bounds nothing here). A thread's leased
/// slot (rt_carve_inbox_slots) is claimed by its first task only. no_inbox
/// when the segment has none, no_memory when the future
/// has no reply (not its thread's first, or the reply region was used up),
/// future_error when its last task was not seen answered (rt_wait).
TANDEM_DEVICE rt_status rt_send_to_gpu(const RtContext& ctx, RtFuture& f, const u32* stop, u64 spin_budget) {
  static_assert(rt_inbox::ARGS_MAX <= rt_record::INLINE_ARGS_MAX, "a task a slot carries is one rt_make_task stages");
  (void)spin_budget;
  // The context's fields this send reads, read together: `ctx` is block-shared memory, which
  // the strong stores and atomics below (asm, clobbering memory) make the compiler read
  // afresh each send, and reads spread over the branches wait for one another.
  const rt_status status = ctx.status;
  RtInboxSlot* const slots = ctx.send_slots;
  const u32 send_first = ctx.send_first;
  const u32 send_mask = ctx.send_mask;
  const bool send_owned = ctx.send_owned;
  const bool peer = ctx.peer;
  // By address: `slots` may be null (refused below).
  RtInboxSlot* const slot = reinterpret_cast<RtInboxSlot*>(
      reinterpret_cast<u64>(slots) + u64{(send_first + thread_rank()) & send_mask} * sizeof(RtInboxSlot));
  // A leased slot this future sent through before is free at the next lap:
  // the service stored that lap before it ran the last task
  // (rt_take_inbox_task), and its own later polls see that store; this
  // thread saw the task answered (in_flight is false), so the stores below
  // come after the service's reads of the last lap's words.
  const bool owned = send_owned && f.owned_slot == slot;
  u64 lap = f.owned_lap + 1;
  const u32 args_len = f.staged_len != 0 ? rt_record::args_len(f.staged[2]) : 0;
  const bool in_slot = f.staged_len != 0 && args_len <= rt_inbox::ARGS_MAX;
  // One branch before the stores for a thread's steady tasks (in the slot, through its
  // leased slot): a lone GPU thread pays for each instruction on its way to the service.
  const bool steady = (status == rt_status::ok) & (slots != nullptr) & (f.reply_word != nullptr) & !f.in_flight &
                      in_slot & owned;
  if (!steady) {
    if (status != rt_status::ok) {
      return status;
    }
    if (slots == nullptr) {
      return rt_status::no_inbox;
    }
    if (f.reply_word == nullptr) {
      return rt_status::no_memory;
    }
    if (f.in_flight) {
      return rt_status::future_error;
    }
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
    if (!in_slot) {
      // Release: the task in the copy space, host memory the service reads
      // after its own system-scope fence (rt_take_inbox_task).
      fence_acq_rel<scope::system>();
    }
    if (!owned) {
      const bool claimed = peer ? detail::rt_claim_inbox_slot<scope::system>(slot, stop, &lap)
                                : detail::rt_claim_inbox_slot<scope::device>(slot, stop, &lap);
      if (!claimed) {
        return rt_status::stopped;
      }
    }
  }
  // The last lap was this future's task (the slot is leased to its thread),
  // whose reply word and cell were this one's too.
  const bool repeated = owned && in_slot && args_len == 0 && f.owned_in_slot && f.owned_pool == f.staged[0] &&
                        f.owned_method == f.staged[1];
  if (peer) {
    detail::rt_write_inbox_task<scope::system>(slot, lap, f, in_slot, args_len, repeated);
  } else {
    detail::rt_write_inbox_task<scope::device>(slot, lap, f, in_slot, args_len, repeated);
  }
  f.owned_slot = send_owned ? slot : nullptr;
  f.owned_lap = lap;
  f.owned_in_slot = in_slot;
  f.owned_pool = in_slot ? f.staged[0] : 0;
  f.owned_method = in_slot ? f.staged[1] : 0;
  f.via_gpu = true;
  f.via_peer = peer;
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

/// `f`'s reply word as it is now. Relaxed: a success without output is the word alone.
/// System scope for an answer from another device.
TANDEM_DEVICE u32 rt_reply_word(const RtFuture& f) {
  return f.via_peer ? load_relaxed<scope::system>(f.reply_word) : load_relaxed<scope::device>(f.reply_word);
}

/// Whether reply word `seen` shows `f`'s task answered by a GPU service; then
/// `*return_code` and `f.no_output`.
TANDEM_DEVICE bool rt_replied(RtFuture& f, u32 seen, i32* return_code) {
  if ((seen >> rt_notify::TOKEN_SHIFT) != f.token) {
    return false;
  }
  f.no_output = (seen & rt_notify::NO_OUTPUT) != 0;
  if (!f.no_output) {
    // With the word's load, the acquire pattern that pairs with the
    // service's fence before the word (rt_answer): the cell is read after.
    rt_fence(f.via_peer);
  }
  *return_code = (seen & rt_notify::SUCCEEDED) != 0 ? 0 : f.reply_cell->return_code;
  return true;
}

/// rt_wait for a task sent to a GPU service: polls the reply word, in this
/// device's memory, so a poll is an L2 read, not a PCIe one. Each round's
/// load is issued before the round's stop bookkeeping, which runs while it
/// is in flight: a lone thread's next poll, and so its answer, comes sooner.
/// The first Backoff::IDLE_POLLS polls do not sleep (a lone thread's answer
/// comes within them); later ones sleep up to Backoff::RACE_DEVICE_MAX_NS,
/// which only waits that are long already (a busy service) reach.
TANDEM_DEVICE wait_outcome rt_wait_replied(RtFuture& f, const u32* stop, u64 spin_budget, i32* return_code) {
  Backoff backoff = Backoff::up_to(Backoff::RACE_DEVICE_MAX_NS);
  for (u64 round = 0;; ++round) {
    const u32 seen = rt_reply_word(f);
    const bool stopped =
        stop_raised<scope::system, RT_LOCAL_WAIT_STOP_POLL_EVERY>(stop, round, round >= spin_budget);
    if (rt_replied(f, seen, return_code)) {
      return wait_outcome::completed;
    }
    // Then the word once more, read after the stop, as future_wait re-checks
    // the flags.
    if (stopped) {
      return rt_replied(f, rt_reply_word(f), return_code) ? wait_outcome::completed : wait_outcome::stopped;
    }
    if (round >= spin_budget) {
      return rt_replied(f, rt_reply_word(f), return_code) ? wait_outcome::completed
                                                           : wait_outcome::budget_exhausted;
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
/// Returns false for a record that names no future of the segment, or no
/// reply the copy space holds: nothing can be answered then.
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
  return true;
}

/// A device-inbox task, as rt_take_inbox_task read it out of its slot.
struct RtInboxTask {
  u32* reply_word;
  RtReplyCell* reply_cell;
  /// The segment offset of the future whose copy space holds the task, or
  /// 0 for a task carried in the slot (pool, method, args).
  u64 future;
  u32 token;
  u32 pool;
  u32 method;
  u32 args_len;
  u32 args[rt_inbox::ARGS_WORDS];
  /// From the PEER part: the sender is on another device, and is answered
  /// at system scope.
  bool peer;
};

/// A poll of an inbox slot: its `ctrl` and first word, one load.
struct RtSlotHead {
  u64 ctrl;
  u64 first;
};

/// Polls `slot` (of the part whose scope is `S`). Relaxed: every word says
/// by its tag whether it is whole and this lap's (RtInboxSlot), and what a
/// word does not carry (a copy-space task) is ordered by a fence once the
/// task is taken (rt_take_inbox_task).
template <scope S>
TANDEM_DEVICE RtSlotHead rt_poll_inbox_slot(const RtInboxSlot* slot) {
  RtSlotHead head{0, 0};
  load_relaxed_pair<S>(&slot->ctrl, &head.ctrl, &head.first);
  return head;
}

/// Frees `slot` (of the part whose scope is `S`), whose task of lap `lap` its server has just
/// read, for the next lap. Relaxed: the store depends on the values the server loaded (they
/// decided that it happens), so those loads are done before it, and a next lap's stores
/// cannot reach them.
template <scope S>
TANDEM_DEVICE void rt_free_inbox_slot(RtInboxSlot* slot, u64 lap) {
  store_relaxed<S>(&slot->ctrl, (lap + 1) << 1);
}

/// Reads the task in `slot` (of the part whose scope is `S`), whose poll
/// found `head` holding this lap's first word (rt_inbox_slot_has_task), into
/// `*task` if a whole one is there, and frees the slot for its next lap;
/// false (nothing taken) if not yet. The caller owns the slot (rt_serve): no
/// other service thread reads it. The rest of the words are loaded, every
/// load issued before any is checked.
template <scope S>
TANDEM_DEVICE bool rt_take_inbox_task(RtInboxSlot* slot, RtSlotHead head, RtInboxTask* task) {
  const u64 lap = head.ctrl >> 1;
  const u32 tag = rt_inbox_tag(lap);
  u64 seen[rt_inbox::WORDS + 1];
  seen[0] = head.first;
  const u32 shape = static_cast<u32>(seen[0]);
  // A repeated task's shape is its token: it has no arguments.
  const bool repeated = (shape & rt_inbox::SHAPE_REPEATED) != 0;
  const bool in_future = !repeated && (shape & rt_inbox::SHAPE_IN_FUTURE) != 0;
  const u32 args_len = repeated ? 0 : shape & rt_inbox::SHAPE_ARGS_MASK;
  // A shape no sender writes (too many argument bytes) is a task of the
  // head words alone, answered RT_RC_BAD_TASK (rt_run_inbox_task).
  const u32 words = in_future                        ? rt_inbox::W_FUTURE + 2
                    : args_len <= rt_inbox::ARGS_MAX ? rt_inbox::W_ARGS + (args_len + 3) / 4
                                                     : rt_inbox::HEAD_WORDS;
  static_assert(rt_inbox::HEAD_WORDS == 7 && rt_inbox::WORDS == 11, "the loads below");
  load_relaxed_pair<S>(&slot->words[1], &seen[1], &seen[2]);
  load_relaxed_pair<S>(&slot->words[3], &seen[3], &seen[4]);
  load_relaxed_pair<S>(&slot->words[5], &seen[5], &seen[6]);
  TANDEM_UNROLL
  for (u32 i = rt_inbox::HEAD_WORDS; i < rt_inbox::WORDS + 1; ++i) {
    seen[i] = u64{tag} << 32;  // words the task has not: no argument
  }
  if (words > 7) {
    load_relaxed_pair<S>(&slot->words[7], &seen[7], &seen[8]);
  }
  if (words > 9) {
    load_relaxed_pair<S>(&slot->words[9], &seen[9], &seen[10]);
  }
  u32 w[rt_inbox::WORDS];
  bool whole = true;
  TANDEM_UNROLL
  for (u32 i = 0; i < rt_inbox::WORDS; ++i) {
    whole = whole && (i >= words || static_cast<u32>(seen[i] >> 32) == tag);
    w[i] = i < words ? static_cast<u32>(seen[i]) : 0;
  }
  if (!whole) {
    return false;  // the sender's other stores are on their way
  }
  // Before the task runs: a sender waiting for the slot
  // (rt_claim_inbox_slot) waits for the read, not the answer.
  rt_free_inbox_slot<S>(slot, lap);
  if (in_future) {
    // With the loads above, the acquire pattern that pairs with the
    // sender's fence before its words: the copy space (host memory) it
    // wrote is read after.
    fence_acq_rel<scope::system>();
  }
  const u64 reply = u64{w[rt_inbox::W_REPLY]} | u64{w[rt_inbox::W_REPLY + 1]} << 32;
  task->reply_word = reinterpret_cast<u32*>(reply);
  task->reply_cell = reinterpret_cast<RtReplyCell*>(reply + w[rt_inbox::W_CELL_DELTA]);
  task->future = in_future ? u64{w[rt_inbox::W_FUTURE]} | u64{w[rt_inbox::W_FUTURE + 1]} << 32 : 0;
  task->token = w[rt_inbox::W_TOKEN];
  task->pool = w[rt_inbox::W_POOL];
  task->method = w[rt_inbox::W_METHOD];
  task->args_len = in_future ? 0 : args_len;
  TANDEM_UNROLL
  for (u32 i = 0; i < rt_inbox::ARGS_WORDS; ++i) {
    task->args[i] = w[rt_inbox::W_ARGS + i];
  }
  task->peer = S == scope::system;
  return true;
}

/// What a mailbox server of rt_serve knows of the last task it took that
/// carried its arguments in its slot: the slot (null: none yet), the lap,
/// and what a SHAPE_REPEATED task of the slot's next lap repeats.
struct RtLastTaken {
  const RtInboxSlot* slot;
  u64 lap;
  u32* reply_word;
  u32 cell_delta;
  u32 pool;
  u32 method;

  /// Remembers `task`, just taken from `slot` at `lap`, if it carried its
  /// arguments in the slot.
  TANDEM_DEVICE void remember(const RtInboxSlot* taken, u64 taken_lap, const RtInboxTask& task) {
    if (task.future != 0) {
      return;
    }
    slot = taken;
    lap = taken_lap;
    reply_word = task.reply_word;
    cell_delta = static_cast<u32>(reinterpret_cast<u64>(task.reply_cell) - reinterpret_cast<u64>(task.reply_word));
    pool = task.pool;
    method = task.method;
  }
};

/// Takes the task of `slot` (of the part whose scope is `S`), whose poll
/// found `head` holding this lap's first word (rt_inbox_slot_has_task),
/// from the poll alone: when it is SHAPE_REPEATED and `last`
/// is the slot's last lap, whose task was its sender's last (the sender
/// marks it so only then), so the rest of its words are `last`'s. Frees the
/// slot as rt_take_inbox_task does; false, with nothing taken, otherwise.
template <scope S>
TANDEM_DEVICE bool rt_take_repeated_task(RtInboxSlot* slot, RtSlotHead head, const RtLastTaken& last,
                                         RtInboxTask* task) {
  const u64 lap = head.ctrl >> 1;
  const u32 shape = static_cast<u32>(head.first);
  if ((shape & rt_inbox::SHAPE_REPEATED) == 0 || last.slot != slot || last.lap + 1 != lap) {
    return false;
  }
  rt_free_inbox_slot<S>(slot, lap);
  task->reply_word = last.reply_word;
  task->reply_cell = reinterpret_cast<RtReplyCell*>(reinterpret_cast<u64>(last.reply_word) + last.cell_delta);
  task->future = 0;
  task->token = shape & ~rt_inbox::SHAPE_REPEATED;
  task->pool = last.pool;
  task->method = last.method;
  task->args_len = 0;
  TANDEM_UNROLL
  for (u32 i = 0; i < rt_inbox::ARGS_WORDS; ++i) {
    task->args[i] = 0;
  }
  task->peer = S == scope::system;
  return true;
}

/// Answers `task` with return code `rc` and the `len` bytes of `out` (none
/// unless rc is 0): the word alone for a success without output (relaxed:
/// it carries all there is), else the cell, a fence (release, which
/// rt_replied's acquire pattern pairs with), then the word; at system scope
/// for a sender on another device. Reply addresses are the sender's own
/// (kernels of this process, like the handler), so they are not checked.
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
    rt_fence(task.peer);
  }
  const u32 word = task.token << rt_notify::TOKEN_SHIFT | flags;
  if (task.peer) {
    store_relaxed<scope::system>(task.reply_word, word);
  } else {
    store_relaxed<scope::device>(task.reply_word, word);
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
  } else if (task.args_len <= rt_inbox::ARGS_MAX) {
    u8 args[rt_inbox::ARGS_MAX];
    // Unpacked only when there are any: the bytes go to the stack, and a
    // task without arguments (a repeated one) should not pay for them.
    if (task.args_len != 0) {
      TANDEM_UNROLL
      for (u32 i = 0; i < rt_inbox::ARGS_MAX; ++i) {
        args[i] = static_cast<u8>(task.args[i / 4] >> (8 * (i % 4)));
      }
    }
    Reader r = Reader::over(args, task.args_len);
    rc = handle(task.pool, task.method, r, w);
  }
  rt_answer(task, rc, out, rc == 0 ? static_cast<u32>(w.pos) : 0);
  return found;
}

/// The inbox slots a mailbox server of rt_serve owns: of each part, slots
/// `first`, first + servers, first + 2 servers, ... (so every slot has one
/// owner); those below the part's hot count are polled every round, the
/// others (cold: a sender that mapped its slot by an earlier service's
/// size) one every RT_SERVE_COLD_EVERY rounds, round-robin, by this cursor.
struct RtColdSweep {
  u64 first;
  u64 servers;
  u32 hot[rt_inbox::PARTS];
  /// The slots of each part any block may have mapped into.
  u32 mapped[rt_inbox::PARTS];
  /// The first cold slot this thread owns in each part (past `mapped`:
  /// none).
  u64 start[rt_inbox::PARTS];
  u32 part;
  u64 index;

  /// The sweep of the server `first` of `servers` over the parts, `hot[p]`
  /// slots of part p hot and `mapped[p]` (at least as many, at most the
  /// part) maybe mapped into. The one division of a sweep is here: a GPU
  /// divides 64-bit integers in software.
  static TANDEM_DEVICE RtColdSweep over(u64 first, u64 servers, const u32 (&hot)[rt_inbox::PARTS],
                                        const u32 (&mapped)[rt_inbox::PARTS]) {
    RtColdSweep sweep{};
    sweep.first = first;
    sweep.servers = servers;
    for (u32 part = 0; part < rt_inbox::PARTS; ++part) {
      sweep.hot[part] = hot[part];
      sweep.mapped[part] = mapped[part];
      const u64 from = first > hot[part] ? first : u64{hot[part]};
      sweep.start[part] = first + (from - first + servers - 1) / servers * servers;
    }
    sweep.part = 0;
    while (sweep.part + 1 < rt_inbox::PARTS && !sweep.has(sweep.part)) {
      ++sweep.part;
    }
    sweep.index = sweep.start[sweep.part];
    return sweep;
  }

  /// Whether this thread owns a cold slot of `part`.
  TANDEM_DEVICE bool has(u32 part) const { return start[part] < mapped[part]; }

  /// Whether this thread owns any cold slot.
  TANDEM_DEVICE bool any() const {
    bool any = false;
    for (u32 part = 0; part < rt_inbox::PARTS; ++part) {
      any = any || has(part);
    }
    return any;
  }

  /// Moves to the next cold slot this thread owns (after the last of a
  /// part, the other part's first). Only while any().
  TANDEM_DEVICE void advance() {
    index += servers;
    for (u32 turns = 0; index >= mapped[part] && turns < rt_inbox::PARTS; ++turns) {
      part = (part + 1) % rt_inbox::PARTS;
      index = start[part];
    }
  }
};

/// The slots of inbox part `part` any block may have mapped into, this
/// service's `hot` ones included: the largest of those, the part's
/// recorded high-water mark (RtInboxHeader::mapped) and UNSIZED_ACTIVE,
/// within the part. Read by every thread of the service before thread 0
/// raises it (relaxed: the previous service, which wrote it, has ended).
TANDEM_DEVICE u32 rt_inbox_mapped(const RtContext& ctx, u32 part, u32 hot) {
  const u32 depth = rt_inbox_part_depth(ctx.device_inbox_depth, part);
  const u32 recorded = rt_inbox_part_is_local(part) ? load_relaxed<scope::device>(&ctx.device_inbox->mapped[part])
                                                    : load_relaxed<scope::system>(&ctx.device_inbox->mapped[part]);
  u32 mapped = rt_inbox::UNSIZED_ACTIVE > hot ? rt_inbox::UNSIZED_ACTIVE : hot;
  mapped = recorded > mapped ? recorded : mapped;
  return mapped < depth ? mapped : depth;
}

/// How often, in rounds, a mailbox server polls one of its cold slots.
constexpr u64 RT_SERVE_COLD_EVERY = 8;

/// Hot slots of the LOCAL inbox part, and of each of the others, per
/// mailbox server (rt_serve sizes RtInboxHeader::active by them): few
/// enough that a round of polls is about one L2 round trip on a GPU. The
/// leased LOCAL slots carry nearly all the device's tasks.
constexpr u32 RT_SERVE_LOCAL_SLOTS_PER_SERVER = 4;
constexpr u32 RT_SERVE_SHARED_SLOTS_PER_SERVER = 1;

/// A mailbox server's polls in a round, by index: its hot LOCAL slots, then
/// one hot slot of each other part, then the cold slot of its turn.
constexpr u32 RT_POLL_SHARED = RT_SERVE_LOCAL_SLOTS_PER_SERVER;
constexpr u32 RT_POLL_PEER = RT_POLL_SHARED + 1;
constexpr u32 RT_POLL_PEER_SHARED = RT_POLL_PEER + 1;
constexpr u32 RT_POLL_COLD = RT_POLL_PEER_SHARED + 1;
constexpr u32 RT_SERVE_POLLS = RT_POLL_COLD + 1;
static_assert(RT_SERVE_POLLS <= 32, "a round's finds are bits of a u32");

/// How often, in rounds, a mailbox server that has seen no block of another
/// device take PEER slots looks again (one system-scope load).
constexpr u64 RT_SERVE_PEER_CHECK_EVERY = 1024;

/// Whether any block of another device has taken slots of the inbox's peer
/// parts (rt_carve_inbox_slots). Relaxed: it only turns the parts' polls
/// on; a block that carved before these loads is seen by a later one.
TANDEM_DEVICE bool rt_inbox_has_peers(const RtContext& ctx) {
  return load_relaxed<scope::system>(&ctx.device_inbox->carved[rt_inbox::PEER]) != 0 ||
         load_relaxed<scope::system>(&ctx.device_inbox->carved[rt_inbox::PEER_SHARED]) != 0;
}

/// Between two idle rounds of a service thread that does not sleep yet: on
/// a GPU nothing (the round's polls are memory round trips, which pace it,
/// and the shortest sleep is longer than an answer should wait); the CPU
/// device's threads give their turn away.
TANDEM_DEVICE void rt_serve_spin() {
#if !defined(TANDEM_BACKEND_GPU)
  spin_pause();
#endif
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
/// (host memory, a PCIe read, which its warp waits for), the others in the
/// block's copy (rt_service_stop_raised). A GPU's idle round is an L2 round
/// trip: about every quarter millisecond.
constexpr u64 RT_SERVE_STOP_POLL_EVERY = 1024;

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

/// Whether the poll `head` of an inbox slot found a task's first word of the
/// slot's lap: a task to take (rt_take_inbox_task), whose other words may
/// still be on their way. A zeroed head finds none.
TANDEM_DEVICE bool rt_inbox_slot_has_task(RtSlotHead head) {
  return static_cast<u32>(head.first >> 32) == rt_inbox_tag(head.ctrl >> 1);
}

/// Whether inbox slot `head` (a poll of it) holds a task not yet taken, or
/// one on its way: claimed, or (a leased slot's later tasks are not
/// claimed) its first word this lap's.
TANDEM_DEVICE bool rt_inbox_slot_pending(RtSlotHead head) {
  return (head.ctrl & rt_inbox::BUSY) != 0 || rt_inbox_slot_has_task(head);
}

/// Whether a stopping service thread is done: none of the inbox slots it
/// owns holds a task (`sweep`, when it serves them), and the from-host ring
/// holds nothing past `host_ticket` (`host_server`). Loads after the stop
/// flag's acquire: every claim, task and push made before the flag was
/// raised is seen. The host server records where the next service resumes
/// the from-host ring; slots need no record, their laps are theirs.
TANDEM_DEVICE bool rt_serve_drained(const RtContext& ctx, const RtColdSweep* sweep, bool host_server,
                                    u64 host_ticket) {
  if (sweep != nullptr) {
    for (u32 part = 0; part < rt_inbox::PARTS; ++part) {
      const RtInboxSlot* const slots = rt_inbox_part(ctx, part);
      // Slots past `mapped` are no block's.
      for (u64 i = sweep->first; i < sweep->mapped[part]; i += sweep->servers) {
        const RtSlotHead head = rt_inbox_part_is_local(part) ? rt_poll_inbox_slot<scope::device>(&slots[i])
                                                             : rt_poll_inbox_slot<scope::system>(&slots[i]);
        if (rt_inbox_slot_pending(head)) {
          return false;
        }
      }
    }
  }
  if (host_server) {
    const RingHeader* const ring = reinterpret_cast<const RingHeader*>(ctx.inbox);
    if (load_acquire<scope::system>(&ring->tail.value) > host_ticket) {
      return false;
    }
    // Relaxed: the next service reads it after this kernel ended (the host
    // synchronises before starting another).
    store_relaxed<scope::device>(&(ctx.tickets + RtTicket::inbox_from_host_consumers(ctx.num_lanes))->next,
                                 host_ticket);
  }
  return true;
}

}  // namespace detail

/// What rt_serve did, per thread.
struct RtServeStats {
  u64 served;
  /// Tasks that named no future of the segment (skipped: a host record,
  /// or a kernel's copy-space task, answered RT_RC_BAD_TASK).
  u64 bad_pointers;
  /// Rounds of inbox polls the thread made as a mailbox server (none as
  /// the host warp): with the tasks it served, how many a round finds, and
  /// with the service's run time, how long a round takes.
  u64 rounds;
};

namespace detail {

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

/// rt_serve's host server when it is a warp (rt_serve, "Who serves what"):
/// every lane of warp 0 of block 0 polls the from-host ring together
/// (rt_read_host_record_warp), lane 0 runs and answers each record, and
/// every decision (a record taken, the stop seen, the ring drained) is the
/// same in all lanes, so they stay together through each collective. Lane
/// 0, thread 0 of block 0, is also the block's reader of the stop flag. On
/// a GPU the host server never sleeps (RT_HOST_SERVER_PACED), and it paces
/// its polls after an answer to a lone host thread (RtHostPacing).
template <typename H>
TANDEM_DEVICE rt_status rt_serve_host_warp(RtContext& ctx, H& handle, RtServeStats* stats) {
  // The whole warp, which rt_serve sends here together.
  const u32 width = warp_width();
  const lane_mask lanes = width >= 64 ? ~lane_mask{0} : (lane_mask{1} << width) - 1;
  const bool leader = lane_id() == 0;
  const LlRing from_host = rt_inbox_from_host(ctx);
  // Relaxed: written by the last service, which ended before this launch.
  u64 host_ticket = load_relaxed<scope::device>(&(ctx.tickets + RtTicket::inbox_from_host_consumers(ctx.num_lanes))->next);
  // Plain: the host wrote it before publishing the segment (rt_attach's
  // acquire), and never changes it.
  const u64 segment_bytes = ctx.header->segment_bytes;
  bool stopping = false;
  RtHostPacing pacing;
  for (u64 idle = 0;;) {
    RtHostRecord record;
    if (rt_read_host_record_warp(lanes, from_host, host_ticket, &record)) {
      pacing.found();
      if (leader) {
        if (rt_run_host_record(ctx, from_host, host_ticket, record, segment_bytes, handle)) {
          ++stats->served;
        } else {
          ++stats->bad_pointers;
        }
      }
      ++host_ticket;
      idle = 0;
      pacing.answered();
      continue;
    }
    pacing.missed();
    if (stopping) {
      const bool drained = leader && rt_serve_drained(ctx, nullptr, true, host_ticket);
      if (broadcast(lanes, drained ? 1 : 0, 0) != 0) {
        return rt_status::ok;
      }
    } else if (++idle % RT_SERVE_STOP_POLL_EVERY == 0) {
      const bool raised = leader && rt_service_stop_raised(ctx);
      stopping = broadcast(lanes, raised ? 1 : 0, 0) != 0;
    }
    rt_serve_spin();
  }
}

}  // namespace detail

/// The GPU service: the body of a persistent kernel that runs the tasks sent
/// to the device, from kernels (rt_send_to_gpu, through the device inbox)
/// and from the host (Runtime::submit_to_gpu, through the from-host ring),
/// with `handle(pool, method, Reader& args, Writer& out) -> i32` (0 =
/// success; RT_RC_UNKNOWN_POOL / _METHOD for what it does not serve; output
/// up to RT_DEVICE_OUTPUT_MAX bytes). Kernels' tasks are answered in their
/// reply words (rt_answer), host tasks in their futures (reply or completion).
///
/// Who serves what: the host server alone takes the from-host ring's
/// records, in order, so a ticket it claims always has a producer and the
/// pop never waits for one. It is warp 0 of block 0 when the block holds a
/// whole warp and the grid more (its lanes read a record in one PCIe read,
/// rt_serve_host_warp), else thread 0. Every other thread (all of a
/// one-thread grid) is a mailbox server,
/// owning a fixed share of each inbox part's slots (RtColdSweep), so no
/// slot is read by two. At its start the service sizes the parts' hot
/// slots to its servers (RT_SERVE_LOCAL_SLOTS_PER_SERVER and
/// RT_SERVE_SHARED_SLOTS_PER_SERVER each) and publishes that (RtInboxHeader::active),
/// which blocks map their senders into from then on; a server polls its hot
/// slots every round and one cold slot (of a block that mapped by an
/// earlier service's size) a round. Every task is taken once its slot's
/// owner polls it, provided all of the service's threads are resident at
/// once, as for any persistent kernel, and one service runs on a device at
/// a time.
/// Nothing sleeps while there is work; a warp whose every thread is idle
/// sleeps briefly between polls (RT_SERVE_IDLE_SLEEP_NS), but a GPU's host
/// server (RT_HOST_SERVER_PACED), and an idle thread checks for the stop now
/// and then (RT_SERVE_STOP_POLL_EVERY; one reader of the host's flag per
/// block).
/// Host tasks are read whole from their records and answered in the
/// future's reply (rt_run_host_record).
///
/// `sized` (may be null): thread 0 stores 1 there, at system scope, once
/// the inbox's hot slots are published, so the host can wait for it before
/// launching senders: a block mapped by an earlier size polls as cold.
///
/// It returns once the segment's `service_stop` is raised and both routes
/// are drained; the host raises it after its own submitters and the
/// kernels that send here are done, so nothing pushed before is lost. Call
/// after rt_attach.
template <typename H>
TANDEM_DEVICE rt_status rt_serve(RtContext& ctx, H handle, RtServeStats* stats, u64* sized = nullptr) {
  *stats = RtServeStats{0, 0, 0};
  if (ctx.status != rt_status::ok) {
    return ctx.status;
  }
  if (ctx.inbox == nullptr || ctx.device_inbox == nullptr) {
    return rt_status::no_inbox;
  }
  const u64 threads = grid_size();
  const u64 me = global_rank();
  const u64 width = warp_width();
  const bool host_warp = width >= 1 + LL_RECORD_WORDS && block_size() >= width && threads > width;
  const u64 host_lanes = host_warp ? width : 1;
  const bool host_server = me < host_lanes;
  // The host server's polls of the from-host ring are PCIe round trips:
  // slots it owned would wait on them.
  const u64 servers = threads > host_lanes ? threads - host_lanes : 1;
  const bool mailbox_server = threads == 1 || !host_server;
  const u32 depth = ctx.device_inbox_depth;
  u32 hot[rt_inbox::PARTS];
  u32 mapped[rt_inbox::PARTS];
  RtInboxSlot* parts[rt_inbox::PARTS];
  for (u32 part = 0; part < rt_inbox::PARTS; ++part) {
    const u32 per_server = part == rt_inbox::LOCAL ? detail::RT_SERVE_LOCAL_SLOTS_PER_SERVER
                                                   : detail::RT_SERVE_SHARED_SLOTS_PER_SERVER;
    hot[part] = detail::rt_inbox_active(servers, per_server, detail::rt_inbox_part_depth(depth, part));
    mapped[part] = detail::rt_inbox_mapped(ctx, part, hot[part]);
    parts[part] = detail::rt_inbox_part(ctx, part);
  }
  detail::RtColdSweep sweep =
      detail::RtColdSweep::over(threads > host_lanes && !host_server ? me - host_lanes : 0, servers, hot, mapped);
  if (me == 0) {
    // Relaxed: a block reads it at its start (rt_carve_inbox_slots), and any
    // size it reads maps to a slot some server polls. `mapped` only grows;
    // one service runs at a time, so no other thread stores it.
    for (u32 part = 0; part < rt_inbox::PARTS; ++part) {
      if (detail::rt_inbox_part_is_local(part)) {
        store_relaxed<scope::device>(&ctx.device_inbox->mapped[part], mapped[part]);
        store_relaxed<scope::device>(&ctx.device_inbox->active[part], hot[part]);
      } else {
        store_relaxed<scope::system>(&ctx.device_inbox->mapped[part], mapped[part]);
        store_relaxed<scope::system>(&ctx.device_inbox->active[part], hot[part]);
      }
    }
    if (sized != nullptr) {
      // Release: the sizes before the word, so a kernel launched once the
      // host saw it reads them.
      fence_acq_rel<scope::system>();
      store_relaxed<scope::system>(sized, u64{1});
    }
  }
  if (host_warp && host_server) {
    return detail::rt_serve_host_warp(ctx, handle, stats);
  }
  const bool owns_slots = mailbox_server && sweep.first < depth;
  const bool owns_cold = owns_slots && sweep.any();
  // The slots polled every round: this thread's hot ones, as many of each
  // part as the sizing gives it (at most the per-server counts).
  constexpr u32 HOT_LOCAL = detail::RT_SERVE_LOCAL_SLOTS_PER_SERVER;
  static_assert(detail::RT_SERVE_SHARED_SLOTS_PER_SERVER == 1, "one hot slot of each other part, below");
  RtInboxSlot* hot_local[HOT_LOCAL];
  u32 hot_locals = 0;
  TANDEM_UNROLL
  for (u32 k = 0; k < HOT_LOCAL; ++k) {
    const u64 i = sweep.first + k * servers;
    hot_local[k] = parts[rt_inbox::LOCAL] + i;
    hot_locals += owns_slots && i < sweep.hot[rt_inbox::LOCAL] ? 1 : 0;
  }
  RtInboxSlot* const hot_shared =
      owns_slots && sweep.first < sweep.hot[rt_inbox::LOCAL_SHARED] ? parts[rt_inbox::LOCAL_SHARED] + sweep.first : nullptr;
  // The peer parts are sized alike: a server has a hot slot in both or in
  // neither.
  const bool hot_peers = owns_slots && sweep.first < sweep.hot[rt_inbox::PEER];
  RtInboxSlot* const peer = parts[rt_inbox::PEER] + sweep.first;
  RtInboxSlot* const peer_shared = parts[rt_inbox::PEER_SHARED] + sweep.first;
  // Whether any block of another device has taken slots of the peer parts:
  // until one has, their slots (system scope: polls that cost more) are not
  // polled.
  bool peers = detail::rt_inbox_has_peers(ctx);
  const LlRing from_host = detail::rt_inbox_from_host(ctx);
  // The host server alone takes the from-host ring's records, in order,
  // from where the last service left (relaxed: written by the last service,
  // which ended before this launch).
  u64 host_ticket =
      host_server ? load_relaxed<scope::device>(&(ctx.tickets + RtTicket::inbox_from_host_consumers(ctx.num_lanes))->next)
                  : 0;
  // Plain: the host wrote it before publishing the segment (rt_attach's
  // acquire), and never changes it.
  const u64 segment_bytes = ctx.header->segment_bytes;
  // Takes, runs and answers the task in a slot if there is one.
  const auto serve = [&](bool taken, const detail::RtInboxTask& task) {
    if (!taken) {
      return false;
    }
    if (detail::rt_run_inbox_task(ctx, task, handle)) {
      ++stats->served;
    } else {
      ++stats->bad_pointers;
    }
    return true;
  };
  // Kept in registers: one task's worth, which a lone sender's repeated
  // tasks hit; a server taking from several slots in turn misses, and takes
  // as any other task.
  detail::RtLastTaken last{nullptr, 0, nullptr, 0, 0, 0};
  bool stopping = false;
  for (u64 round = 0, idle = 0;; ++round) {
    bool worked = false;
    if (owns_slots) {
      if (!peers && round % detail::RT_SERVE_PEER_CHECK_EVERY == detail::RT_SERVE_PEER_CHECK_EVERY - 1) {
        peers = detail::rt_inbox_has_peers(ctx);
      }
      // Every poll of the round issued before any is looked at: each is an
      // L2 round trip, and one after the other they would add up.
      RtInboxSlot* slot[detail::RT_SERVE_POLLS];
      detail::RtSlotHead head[detail::RT_SERVE_POLLS];
      TANDEM_UNROLL
      for (u32 k = 0; k < HOT_LOCAL; ++k) {
        slot[k] = hot_local[k];
        head[k] = k < hot_locals ? detail::rt_poll_inbox_slot<scope::device>(hot_local[k])
                                 : detail::RtSlotHead{0, 0};
      }
      slot[detail::RT_POLL_SHARED] = hot_shared;
      head[detail::RT_POLL_SHARED] =
          hot_shared != nullptr ? detail::rt_poll_inbox_slot<scope::device>(hot_shared) : detail::RtSlotHead{0, 0};
      const bool poll_peer = peers && hot_peers;
      slot[detail::RT_POLL_PEER] = peer;
      slot[detail::RT_POLL_PEER_SHARED] = peer_shared;
      head[detail::RT_POLL_PEER] = detail::RtSlotHead{0, 0};
      head[detail::RT_POLL_PEER_SHARED] = detail::RtSlotHead{0, 0};
      if (poll_peer) {
        head[detail::RT_POLL_PEER] = detail::rt_poll_inbox_slot<scope::system>(peer);
        head[detail::RT_POLL_PEER_SHARED] = detail::rt_poll_inbox_slot<scope::system>(peer_shared);
      }
      const bool cold_turn = owns_cold && round % detail::RT_SERVE_COLD_EVERY == 0;
      const bool cold_local = cold_turn && detail::rt_inbox_part_is_local(sweep.part);
      const bool poll_cold = cold_turn && (cold_local || peers);
      RtInboxSlot* const cold = parts[sweep.part] + sweep.index;
      slot[detail::RT_POLL_COLD] = cold;
      head[detail::RT_POLL_COLD] = detail::RtSlotHead{0, 0};
      if (poll_cold) {
        head[detail::RT_POLL_COLD] = cold_local ? detail::rt_poll_inbox_slot<scope::device>(cold)
                                                : detail::rt_poll_inbox_slot<scope::system>(cold);
      }
      // The polls that found a task's first word, taken in that order by
      // one copy of the take-and-serve code: unrolled per slot, each copy
      // with the handler inlined, the loop outgrew the registers and
      // spilled.
      u32 found = 0;
      TANDEM_UNROLL
      for (u32 k = 0; k < detail::RT_SERVE_POLLS; ++k) {
        found |= detail::rt_inbox_slot_has_task(head[k]) ? 1u << k : 0u;
      }
      while (found != 0) {
        const u32 k = lowest_set_bit(found);
        found &= found - 1;
        // By constant indices: the arrays stay in registers.
        RtInboxSlot* taken_slot = slot[0];
        detail::RtSlotHead taken_head = head[0];
        TANDEM_UNROLL
        for (u32 i = 1; i < detail::RT_SERVE_POLLS; ++i) {
          taken_slot = k == i ? slot[i] : taken_slot;
          taken_head = k == i ? head[i] : taken_head;
        }
        const bool system =
            k == detail::RT_POLL_PEER || k == detail::RT_POLL_PEER_SHARED || (k == detail::RT_POLL_COLD && !cold_local);
        detail::RtInboxTask task;
        bool taken = system ? detail::rt_take_repeated_task<scope::system>(taken_slot, taken_head, last, &task)
                            : detail::rt_take_repeated_task<scope::device>(taken_slot, taken_head, last, &task);
        if (!taken) {
          taken = system ? detail::rt_take_inbox_task<scope::system>(taken_slot, taken_head, &task)
                         : detail::rt_take_inbox_task<scope::device>(taken_slot, taken_head, &task);
        }
        if (taken) {
          last.remember(taken_slot, taken_head.ctrl >> 1, task);
        }
        worked |= serve(taken, task);
      }
      if (cold_turn) {
        sweep.advance();
      }
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
    } else if (stopping) {
      if (detail::rt_serve_drained(ctx, owns_slots ? &sweep : nullptr, host_server, host_ticket)) {
        stats->rounds = round + 1;
        return rt_status::ok;
      }
    } else if (++idle % detail::RT_SERVE_STOP_POLL_EVERY == 0 && detail::rt_service_stop_raised(ctx)) {
      stopping = true;
    }
    // A warp sleeps as one, and only once each of its lanes has idled past
    // the spin polls: a lane's sleep holds up the whole warp, and so its
    // busy neighbours' next polls (every lane reaches this point each round,
    // so the vote is over all of them but those that returned).
    const bool restless = worked || stopping || idle <= detail::RT_SERVE_SPIN_POLLS ||
                          (host_server && detail::RT_HOST_SERVER_PACED);
    if (ballot(active_lanes(), restless) == 0) {
      sleep_for(detail::RT_SERVE_IDLE_SLEEP_NS);
    } else {
      detail::rt_serve_spin();
    }
  }
}

}  // namespace tandem
