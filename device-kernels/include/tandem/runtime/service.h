// The GPU service (rt_serve): a persistent kernel whose threads split the
// device inbox's slots among them (the GPU route, tandem/runtime/gpu_route.h)
// and serve the from-host ring (the host route, tandem/runtime/host_route.h)
// until the host stops it.
#pragma once

#include "tandem/atomic.h"
#include "tandem/layout.h"
#include "tandem/ll_ring.h"
#include "tandem/portability.h"
#include "tandem/runtime/context.h"
#include "tandem/runtime/gpu_route.h"
#include "tandem/runtime/host_route.h"
#include "tandem/runtime/layout.h"
#include "tandem/warp.h"

namespace tandem {

namespace detail {

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
  /// Tasks run and answered (with any return code).
  u64 served;
  /// Tasks that named no future of the segment (skipped: a host record,
  /// or a kernel's copy-space task, answered RT_RC_BAD_TASK).
  u64 bad_pointers;
  /// Rounds of inbox polls the thread made as a mailbox server (none as
  /// the host warp): with the tasks it served, how many a round finds, and
  /// with the service's run time, how long a round takes.
  u64 rounds;

  /// Counts a task taken: served, or skipped for a bad pointer.
  TANDEM_DEVICE void count(rt_ran ran) {
    if (ran == rt_ran::skipped) {
      ++bad_pointers;
    } else {
      ++served;
    }
  }
};

namespace detail {

/// Tasks a service thread counts in registers before adding them to its
/// segment's counters (RuntimeSegmentHeader::service_*): each add is an
/// atomic on host memory, a PCIe round trip on a GPU, which a busy thread
/// then makes once per this many tasks. An idle thread adds what it has
/// once it stops spinning (RT_SERVE_SPIN_POLLS), when no task waits on it.
constexpr u64 RT_SERVE_PUBLISH_EVERY = 4096;

/// One route's counts of a service thread not yet added to the segment's
/// (the kernels' through the device inbox, or the host's through the
/// from-host ring).
struct RtRouteTally {
  /// Run and answered; of those, failed (a nonzero return code).
  u64 tasks;
  u64 failed;
  u64 skipped;

  TANDEM_DEVICE void count(rt_ran ran) {
    if (ran == rt_ran::skipped) {
      ++skipped;
      return;
    }
    ++tasks;
    if (ran == rt_ran::failed) {
      ++failed;
    }
  }

  TANDEM_DEVICE bool due() const { return tasks + skipped >= RT_SERVE_PUBLISH_EVERY; }

  /// Adds the counts to the route's words of the segment header
  /// (`tasks_word`, `failed_word`) and to its skipped entries, and starts
  /// again from zero.
  TANDEM_DEVICE void publish(RuntimeSegmentHeader* header, u64* tasks_word, u64* failed_word) {
    // Relaxed: statistics, ordered with nothing; the host only reads them.
    if (tasks != 0) {
      (void)fetch_add<scope::system, order::relaxed>(tasks_word, tasks);
    }
    if (failed != 0) {
      (void)fetch_add<scope::system, order::relaxed>(failed_word, failed);
    }
    if (skipped != 0) {
      (void)fetch_add<scope::system, order::relaxed>(&header->service_skipped, skipped);
    }
    *this = RtRouteTally{0, 0, 0};
  }

  TANDEM_DEVICE void publish_kernel_route(RuntimeSegmentHeader* header) {
    publish(header, &header->service_kernel_tasks, &header->service_kernel_failed);
  }

  TANDEM_DEVICE void publish_host_route(RuntimeSegmentHeader* header) {
    publish(header, &header->service_host_tasks, &header->service_host_failed);
  }
};

/// A service thread's counts of both routes not yet in the segment's.
struct RtServiceTallies {
  RtRouteTally kernel;
  RtRouteTally host;

  TANDEM_DEVICE bool due() const { return kernel.due() || host.due(); }

  TANDEM_DEVICE void publish(RuntimeSegmentHeader* header) {
    kernel.publish_kernel_route(header);
    host.publish_host_route(header);
  }
};

/// Where a service's host server resumes the from-host ring: where the last
/// service left it (relaxed: written by that service, which ended before
/// this launch).
TANDEM_DEVICE u64 rt_host_ticket_resumed(const RtContext& ctx) {
  return load_relaxed<scope::device>(&(ctx.tickets + RtTicket::inbox_from_host_consumers(ctx.num_lanes))->next);
}

/// rt_serve's host server when it is one thread: takes the from-host ring's
/// record at `host_ticket` if there is one, runs and answers it, and counts
/// it. Whether it took one.
template <typename H>
TANDEM_DEVICE bool rt_serve_host_record(RtContext& ctx, const LlRing& from_host, u64& host_ticket, u64 segment_bytes,
                                        H& handle, RtServeStats* stats, RtRouteTally& tally) {
  RtHostRecord record;
  if (!rt_read_host_record(from_host, host_ticket, &record)) {
    return false;
  }
  const rt_ran ran = rt_run_host_record(ctx, from_host, host_ticket, record, segment_bytes, handle);
  stats->count(ran);
  tally.count(ran);
  ++host_ticket;
  return true;
}

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
  u64 host_ticket = rt_host_ticket_resumed(ctx);
  // Plain: the host wrote it before publishing the segment (rt_attach's
  // acquire), and never changes it.
  const u64 segment_bytes = ctx.header->segment_bytes;
  bool stopping = false;
  RtHostPacing pacing;
  // Counted by the leader, which alone runs the records.
  RtRouteTally tally{0, 0, 0};
  for (u64 idle = 0;;) {
    RtHostRecord record;
    if (rt_read_host_record_warp(lanes, from_host, host_ticket, &record)) {
      pacing.found();
      if (leader) {
        const rt_ran ran = rt_run_host_record(ctx, from_host, host_ticket, record, segment_bytes, handle);
        stats->count(ran);
        tally.count(ran);
        if (tally.due()) {
          tally.publish_host_route(ctx.header);
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
        if (leader) {
          tally.publish_host_route(ctx.header);
        }
        return rt_status::ok;
      }
    } else if (++idle == RT_SERVE_SPIN_POLLS && leader) {
      tally.publish_host_route(ctx.header);
    } else if (idle % RT_SERVE_STOP_POLL_EVERY == 0) {
      const bool raised = leader && rt_service_stop_raised(ctx);
      stopping = broadcast(lanes, raised ? 1 : 0, 0) != 0;
    }
    rt_serve_spin();
  }
}

/// Sizes each inbox part's hot slots to `servers` mailbox servers
/// (RT_SERVE_LOCAL_SLOTS_PER_SERVER and RT_SERVE_SHARED_SLOTS_PER_SERVER
/// each), and reads how many of its slots any block may have mapped into.
TANDEM_DEVICE void rt_size_inbox(const RtContext& ctx, u32 depth, u64 servers, u32 (&hot)[rt_inbox::PARTS],
                                 u32 (&mapped)[rt_inbox::PARTS], RtInboxSlot* (&parts)[rt_inbox::PARTS]) {
  for (u32 part = 0; part < rt_inbox::PARTS; ++part) {
    const u32 per_server = part == rt_inbox::LOCAL ? RT_SERVE_LOCAL_SLOTS_PER_SERVER : RT_SERVE_SHARED_SLOTS_PER_SERVER;
    hot[part] = rt_inbox_active(servers, per_server, rt_inbox_part_depth(depth, part));
    mapped[part] = rt_inbox_mapped(ctx, part, hot[part]);
    parts[part] = rt_inbox_part(ctx, part);
  }
}

/// Publishes the inbox's sizes (RtInboxHeader::active, ::mapped), which
/// blocks map their senders by from then on; then, when `sized` is given,
/// tells the host so. Thread 0 of the service only.
TANDEM_DEVICE void rt_publish_inbox_sizes(const RtContext& ctx, const u32 (&hot)[rt_inbox::PARTS],
                                          const u32 (&mapped)[rt_inbox::PARTS], u64* sized) {
  // Relaxed: a block reads it at its start (rt_carve_inbox_slots), and any
  // size it reads maps to a slot some server polls. `mapped` only grows;
  // one service runs at a time, so no other thread stores it.
  for (u32 part = 0; part < rt_inbox::PARTS; ++part) {
    if (rt_inbox_part_is_local(part)) {
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

/// The slots a mailbox server polls every round: its hot ones, as many of
/// each part as the sizing gives it (at most the per-server counts).
struct RtHotSlots {
  /// Its LOCAL slots by turn; only the first `locals` are hot (the others
  /// lie past the part's hot count, or the server owns none).
  RtInboxSlot* local[RT_SERVE_LOCAL_SLOTS_PER_SERVER];
  u32 locals;
  /// Null when the server has none of LOCAL_SHARED.
  RtInboxSlot* shared;
  /// The peer parts are sized alike: a server has a hot slot in both or
  /// in neither.
  bool peers;
  RtInboxSlot* peer;
  RtInboxSlot* peer_shared;

  static TANDEM_DEVICE RtHotSlots of(const RtColdSweep& sweep, RtInboxSlot* const (&parts)[rt_inbox::PARTS],
                                     u64 servers, bool owns_slots) {
    static_assert(RT_SERVE_SHARED_SLOTS_PER_SERVER == 1, "one hot slot of each other part");
    RtHotSlots hot;
    hot.locals = 0;
    TANDEM_UNROLL
    for (u32 k = 0; k < RT_SERVE_LOCAL_SLOTS_PER_SERVER; ++k) {
      const u64 i = sweep.first + k * servers;
      hot.local[k] = parts[rt_inbox::LOCAL] + i;
      hot.locals += owns_slots && i < sweep.hot[rt_inbox::LOCAL] ? 1 : 0;
    }
    hot.shared = owns_slots && sweep.first < sweep.hot[rt_inbox::LOCAL_SHARED] ? parts[rt_inbox::LOCAL_SHARED] + sweep.first
                                                                              : nullptr;
    hot.peers = owns_slots && sweep.first < sweep.hot[rt_inbox::PEER];
    hot.peer = parts[rt_inbox::PEER] + sweep.first;
    hot.peer_shared = parts[rt_inbox::PEER_SHARED] + sweep.first;
    return hot;
  }
};

/// One round of a mailbox server's polls (RT_POLL_*): the slots and the
/// heads read from them; a poll not made reads as an empty head.
struct RtRoundPolls {
  RtInboxSlot* slot[RT_SERVE_POLLS];
  RtSlotHead head[RT_SERVE_POLLS];
  /// Whether this round polls a cold slot (one every RT_SERVE_COLD_EVERY).
  bool cold_turn;
  /// Whether that slot is of a part in device memory.
  bool cold_local;

  /// Issues every poll of the round before any is looked at: each is an
  /// L2 round trip, and one after the other they would add up. `peers`:
  /// whether any block of another device has taken peer slots.
  static TANDEM_DEVICE RtRoundPolls issue(const RtHotSlots& hot, const RtColdSweep& sweep,
                                          RtInboxSlot* const (&parts)[rt_inbox::PARTS], bool peers, bool owns_cold,
                                          u64 round) {
    RtRoundPolls polls;
    TANDEM_UNROLL
    for (u32 k = 0; k < RT_SERVE_LOCAL_SLOTS_PER_SERVER; ++k) {
      polls.slot[k] = hot.local[k];
      polls.head[k] = k < hot.locals ? rt_poll_inbox_slot<scope::device>(hot.local[k]) : RtSlotHead{0, 0};
    }
    polls.slot[RT_POLL_SHARED] = hot.shared;
    polls.head[RT_POLL_SHARED] =
        hot.shared != nullptr ? rt_poll_inbox_slot<scope::device>(hot.shared) : RtSlotHead{0, 0};
    const bool poll_peer = peers && hot.peers;
    polls.slot[RT_POLL_PEER] = hot.peer;
    polls.slot[RT_POLL_PEER_SHARED] = hot.peer_shared;
    polls.head[RT_POLL_PEER] = RtSlotHead{0, 0};
    polls.head[RT_POLL_PEER_SHARED] = RtSlotHead{0, 0};
    if (poll_peer) {
      polls.head[RT_POLL_PEER] = rt_poll_inbox_slot<scope::system>(hot.peer);
      polls.head[RT_POLL_PEER_SHARED] = rt_poll_inbox_slot<scope::system>(hot.peer_shared);
    }
    polls.cold_turn = owns_cold && round % RT_SERVE_COLD_EVERY == 0;
    polls.cold_local = polls.cold_turn && rt_inbox_part_is_local(sweep.part);
    const bool poll_cold = polls.cold_turn && (polls.cold_local || peers);
    RtInboxSlot* const cold = parts[sweep.part] + sweep.index;
    polls.slot[RT_POLL_COLD] = cold;
    polls.head[RT_POLL_COLD] = RtSlotHead{0, 0};
    if (poll_cold) {
      polls.head[RT_POLL_COLD] =
          polls.cold_local ? rt_poll_inbox_slot<scope::device>(cold) : rt_poll_inbox_slot<scope::system>(cold);
    }
    return polls;
  }

  /// Takes and serves (`serve(taken, task)`) the tasks this round's polls
  /// found, in poll order, by one copy of the take-and-serve code: unrolled
  /// per slot, each copy with the handler inlined, the loop outgrew the
  /// registers and spilled. Whether any was served.
  template <typename S>
  TANDEM_DEVICE bool take(RtLastTaken& last, S& serve) const {
    bool worked = false;
    u32 found = 0;
    TANDEM_UNROLL
    for (u32 k = 0; k < RT_SERVE_POLLS; ++k) {
      found |= rt_inbox_slot_has_task(head[k]) ? 1u << k : 0u;
    }
    while (found != 0) {
      const u32 k = lowest_set_bit(found);
      found &= found - 1;
      // By constant indices: the arrays stay in registers.
      RtInboxSlot* taken_slot = slot[0];
      RtSlotHead taken_head = head[0];
      TANDEM_UNROLL
      for (u32 i = 1; i < RT_SERVE_POLLS; ++i) {
        taken_slot = k == i ? slot[i] : taken_slot;
        taken_head = k == i ? head[i] : taken_head;
      }
      const bool system = k == RT_POLL_PEER || k == RT_POLL_PEER_SHARED || (k == RT_POLL_COLD && !cold_local);
      RtInboxTask task;
      bool taken = system ? rt_take_repeated_task<scope::system>(taken_slot, taken_head, last, &task)
                          : rt_take_repeated_task<scope::device>(taken_slot, taken_head, last, &task);
      if (!taken) {
        taken = system ? rt_take_inbox_task<scope::system>(taken_slot, taken_head, &task)
                       : rt_take_inbox_task<scope::device>(taken_slot, taken_head, &task);
      }
      if (taken) {
        last.remember(taken_slot, taken_head.ctrl >> 1, task);
      }
      worked |= serve(taken, task);
    }
    return worked;
  }
};

/// Between two rounds of a service thread: a warp sleeps as one
/// (RT_SERVE_IDLE_SLEEP_NS), and only once none of its lanes is
/// `restless`: a lane's sleep holds up the whole warp, and so its busy
/// neighbours' next polls (every lane reaches this point each round, so
/// the vote is over all of them but those that returned).
TANDEM_DEVICE void rt_serve_pause(bool restless) {
  if (ballot(active_lanes(), restless) == 0) {
    sleep_for(RT_SERVE_IDLE_SLEEP_NS);
  } else {
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
  detail::rt_size_inbox(ctx, depth, servers, hot, mapped, parts);
  detail::RtColdSweep sweep =
      detail::RtColdSweep::over(threads > host_lanes && !host_server ? me - host_lanes : 0, servers, hot, mapped);
  if (me == 0) {
    detail::rt_publish_inbox_sizes(ctx, hot, mapped, sized);
  }
  if (host_warp && host_server) {
    return detail::rt_serve_host_warp(ctx, handle, stats);
  }
  const bool owns_slots = mailbox_server && sweep.first < depth;
  const bool owns_cold = owns_slots && sweep.any();
  const detail::RtHotSlots hot_slots = detail::RtHotSlots::of(sweep, parts, servers, owns_slots);
  // Whether any block of another device has taken slots of the peer parts:
  // until one has, their slots (system-scope polls, which cost more) wait.
  bool peers = detail::rt_inbox_has_peers(ctx);
  const LlRing from_host = detail::rt_inbox_from_host(ctx);
  // The host server alone takes the from-host ring's records, in order.
  u64 host_ticket = host_server ? detail::rt_host_ticket_resumed(ctx) : 0;
  // Plain: the host wrote it before publishing the segment (rt_attach's
  // acquire), and never changes it.
  const u64 segment_bytes = ctx.header->segment_bytes;
  // What this thread served of each route, not yet in the segment's counts.
  detail::RtServiceTallies tallies{};
  // Takes, runs and answers the task in a slot if there is one.
  const auto serve = [&](bool taken, const detail::RtInboxTask& task) {
    if (!taken) {
      return false;
    }
    const rt_ran ran = detail::rt_run_inbox_task(ctx, task, handle);
    stats->count(ran);
    tallies.kernel.count(ran);
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
      const detail::RtRoundPolls polls = detail::RtRoundPolls::issue(hot_slots, sweep, parts, peers, owns_cold, round);
      worked |= polls.take(last, serve);
      if (polls.cold_turn) {
        sweep.advance();
      }
    }
    worked |= host_server && detail::rt_serve_host_record(ctx, from_host, host_ticket, segment_bytes, handle, stats,
                                                          tallies.host);
    if (worked) {
      idle = 0;
      if (tallies.due()) {
        tallies.publish(ctx.header);
      }
    } else if (stopping) {
      if (detail::rt_serve_drained(ctx, owns_slots ? &sweep : nullptr, host_server, host_ticket)) {
        tallies.publish(ctx.header);
        stats->rounds = round + 1;
        return rt_status::ok;
      }
    } else if (++idle == detail::RT_SERVE_SPIN_POLLS) {
      tallies.publish(ctx.header);
    } else if (idle % detail::RT_SERVE_STOP_POLL_EVERY == 0 && detail::rt_service_stop_raised(ctx)) {
      stopping = true;
    }
    // Restless: a lane that works, stops, has idled no longer than the
    // spin polls, or is a GPU's host server.
    detail::rt_serve_pause(worked || stopping || idle <= detail::RT_SERVE_SPIN_POLLS ||
                           (host_server && detail::RT_HOST_SERVER_PACED));
  }
}

}  // namespace tandem
