// Mirrors of runtime/src/layout.rs: the queue segment's header, the device
// inbox, lane and from-host records, notify and reply words, host replies,
// the runtime's return codes and its math pool, as kernels read and write
// them. The runtime crate compares every struct and constant with its own
// when it compiles, through bindgen's reading of this header
// (tandem_device_kernels::runtime_mirror; run `cargo xtask bindings` after
// an edit).
#pragma once

#include "tandem/future.h"
#include "tandem/layout.h"
#include "tandem/portability.h"

namespace tandem {

/// `SEGMENT_MAGIC` ("TNDMRTSG").
constexpr u64 RT_SEGMENT_MAGIC = 0x544e444d52545347ull;
/// `SEGMENT_VERSION`.
constexpr u32 RT_SEGMENT_VERSION = 16;
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
  /// What the GPU services on this segment did, summed over their threads
  /// and every service that ran (rt_serve): tasks run and answered from
  /// kernels (the device inbox) and of those, answered with a nonzero
  /// return code; the same from the host (the from-host ring); and the
  /// entries of either that named no future of the segment (skipped). Each
  /// thread adds what it counted in registers now and then
  /// (RT_SERVE_PUBLISH_EVERY, and when it idles), so they lag a busy
  /// service a little; the host only reads them.
  u64 service_kernel_tasks;
  u64 service_kernel_failed;
  u64 service_host_tasks;
  u64 service_host_failed;
  u64 service_skipped;
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
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, service_kernel_tasks, 216);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, service_kernel_failed, 224);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, service_host_tasks, 232);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, service_host_failed, 240);
TANDEM_ASSERT_OFFSET(RuntimeSegmentHeader, service_skipped, 248);

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

/// Whether a kernel on one device may reach another device's segment, as
/// the host found it (`Runtime::peer_route`, which enables the devices' peer
/// access where they have it).
enum class rt_peer : u32 {
  /// This device addresses the peer's device memory (its tickets) directly.
  reachable = 1,
  /// It does not: nothing of the peer's may be touched.
  unreachable = 2,
};

}  // namespace tandem
