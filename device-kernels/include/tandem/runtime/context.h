// A block's view of its device's runtime segment (RtContext) and its
// set-up: rt_attach for a block that only serves, rt_init for one whose
// threads send (its share of the kernel arena, a reply word and cell and an
// inbox slot per thread), rt_init_peer for one that sends to another
// device's GPU service.
#pragma once

#include "tandem/arena.h"
#include "tandem/layout.h"
#include "tandem/ll_ring.h"
#include "tandem/mpmc.h"
#include "tandem/portability.h"
#include "tandem/runtime/layout.h"

namespace tandem {

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

}  // namespace tandem
