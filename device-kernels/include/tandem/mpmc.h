// Device-side operations of tandem-shm-core's MPMC ring (shm-core/src/mpmc.rs
// and ring.rs) over the RingHeader of tandem/layout.h: the same bytes and the
// same algorithm (Vyukov's bounded queue with doubled per-slot sequence
// numbers), so Rust threads and kernels push and pop on one ring at once.
//
//   slot seq == 2t      free for the producer holding ticket t;
//   slot seq == 2t + 1  holds the item for the consumer holding ticket t,
//                       who frees it for the next lap: 2(t + capacity).
//
// Scope: every ring word is accessed with scope S, scope::system by default,
// because a ring shared with Rust lives in memory the CPU reads (mapped pinned
// host memory, a registered shared-memory segment, managed memory). Use
// scope::device only for a ring that no CPU thread or other device touches.
//
// Cost on a GPU: each push or pop is one compare-and-swap on `tail`/`head`. A
// system-scope RMW on mapped host memory crosses PCIe; the whole H100 manages
// about 30 M of them per second (shared/notes/gpu-pitfalls.md).
// mpmc_try_push_aggregated claims tickets for a whole warp/wavefront with one
// CAS, which the algorithm allows because tickets are consecutive: the leader
// moves `tail` from t to t + k after the k lanes each saw the slot of their
// own ticket t + i free (with their own acquire load, which is what orders
// their element write after the previous lap's read). Everything else (the
// slot checks, the element writes, the release stores of `seq`) is per lane.
#pragma once

#include "tandem/atomic.h"
#include "tandem/layout.h"
#include "tandem/portability.h"
#include "tandem/warp.h"

namespace tandem {

/// Why a ring could not be attached or initialised: the device-side subset of
/// shm-core's `RingError` (u32, so kernels can report it through memory).
enum class ring_status : u32 {
  ok = 0,
  null_region = 1,
  misaligned = 2,
  region_too_small = 3,
  bad_magic = 4,
  wrong_kind = 5,
  capacity_not_power_of_two = 6,
  zero_capacity = 7,
  element_mismatch = 8,
  header_mismatch = 9,
};

/// How an MPMC ring of `T` lays out its slots (`RingShape::new` in ring.rs):
/// the 8-byte sequence number, the element at `elem_offset`, slots `stride`
/// bytes apart from RING_SLOTS_OFFSET.
template <typename T>
struct MpmcShape {
  static_assert(alignof(T) <= CACHE_LINE, "ring elements may be aligned to at most 64 bytes");
  TANDEM_HOST_DEVICE static constexpr u64 round_up(u64 n, u64 align) { return (n + align - 1) & ~(align - 1); }
  static constexpr u64 slot_align = alignof(T) > alignof(MpmcSlotHeader) ? alignof(T)
                                                                          : alignof(MpmcSlotHeader);
  static constexpr u64 elem_offset = round_up(sizeof(MpmcSlotHeader), alignof(T));
  static constexpr u64 stride = round_up(elem_offset + sizeof(T), slot_align);
  static_assert(stride <= 0xFFFFFFFFull, "ring elements must be smaller than 4 GiB");
};

/// A validated MPMC ring of `T`: the geometry is read from the header once,
/// checked, and kept here, so a peer scribbling over the header later cannot
/// make an operation index outside the slot array (as `RingView` in Rust).
template <typename T>
struct MpmcRing {
  RingHeader* header;
  u8* slots;
  u64 mask;

  /// The slot that ticket `ticket` maps to.
  TANDEM_DEVICE u8* slot(u64 ticket) const {
    return slots + (ticket & mask) * MpmcShape<T>::stride;
  }
  /// The sequence number of `slot`.
  static TANDEM_DEVICE u64* seq(u8* slot) { return &reinterpret_cast<MpmcSlotHeader*>(slot)->seq; }
  /// The element of `slot`.
  static TANDEM_DEVICE T* elem(u8* slot) {
    return reinterpret_cast<T*>(slot + MpmcShape<T>::elem_offset);
  }
  /// The number of slots.
  TANDEM_DEVICE u64 capacity() const { return mask + 1; }
};

namespace detail {

/// `free_for` / `full_for` of mpmc.rs.
TANDEM_HOST_DEVICE u64 mpmc_free_for(u64 ticket) { return ticket * 2; }
TANDEM_HOST_DEVICE u64 mpmc_full_for(u64 ticket) { return ticket * 2 + 1; }

/// `check_capacity` of ring.rs.
TANDEM_HOST_DEVICE ring_status check_ring_capacity(u32 capacity) {
  if (capacity == 0) {
    return ring_status::zero_capacity;
  }
  return (capacity & (capacity - 1)) == 0 ? ring_status::ok
                                          : ring_status::capacity_not_power_of_two;
}

/// Bytes a ring of `capacity` slots of `T` needs (`required_bytes`).
template <typename T>
TANDEM_HOST_DEVICE u64 mpmc_required_bytes(u32 capacity) {
  return RING_SLOTS_OFFSET + static_cast<u64>(capacity) * MpmcShape<T>::stride;
}

/// `check_region` of ring.rs.
TANDEM_HOST_DEVICE ring_status check_ring_region(const void* region, u64 len, u64 needed) {
  if (region == nullptr) {
    return ring_status::null_region;
  }
  if (reinterpret_cast<u64>(region) % alignof(RingHeader) != 0) {
    return ring_status::misaligned;
  }
  return len < needed ? ring_status::region_too_small : ring_status::ok;
}

/// The view of an already validated ring.
template <typename T>
TANDEM_DEVICE MpmcRing<T> mpmc_view(RingHeader* header, u32 capacity) {
  return MpmcRing<T>{header, reinterpret_cast<u8*>(header) + RING_SLOTS_OFFSET,
                     static_cast<u64>(capacity) - 1};
}

}  // namespace detail

/// `MpmcRing::required_bytes`: bytes of region a ring of `capacity` `T`s needs.
template <typename T>
TANDEM_HOST_DEVICE u64 mpmc_required_bytes(u32 capacity) {
  return detail::mpmc_required_bytes<T>(capacity);
}

/// `MpmcRing::init_in`: initialises an empty ring of `capacity` slots (a power
/// of two) in the `len` bytes at `region` (64-aligned) and publishes it by
/// storing the magic word last with a release store, which pairs with the
/// acquire load of every attacher (Rust's `read_magic` included). Nobody may
/// use the region during the call. Slot contents other than the sequence
/// numbers are left as they are, as in Rust.
template <typename T, scope S = scope::system>
TANDEM_DEVICE ring_status mpmc_init(u8* region, u64 len, u32 capacity, MpmcRing<T>* out) {
  ring_status st = detail::check_ring_capacity(capacity);
  if (st != ring_status::ok) {
    return st;
  }
  st = detail::check_ring_region(region, len, detail::mpmc_required_bytes<T>(capacity));
  if (st != ring_status::ok) {
    return st;
  }
  RingHeader* header = reinterpret_cast<RingHeader*>(region);
  header->kind = ring_kind::MPMC;
  header->capacity = capacity;
  header->elem_size = static_cast<u32>(sizeof(T));
  header->elem_align = static_cast<u32>(alignof(T));
  header->slot_stride = static_cast<u32>(MpmcShape<T>::stride);
  header->head.value = 0;
  header->tail.value = 0;
  const MpmcRing<T> ring = detail::mpmc_view<T>(header, capacity);
  for (u64 i = 0; i < capacity; ++i) {
    *MpmcRing<T>::seq(ring.slot(i)) = detail::mpmc_free_for(i);
  }
  store_release<S>(&header->magic, magic::RING);
  *out = ring;
  return ring_status::ok;
}

/// `MpmcRing::attach`: validates the ring header in the `len` bytes at
/// `header` (magic, kind, element size and alignment, stride, capacity, and
/// that the slots fit in `len`) and fills `*out`.
template <typename T, scope S = scope::system>
TANDEM_DEVICE ring_status mpmc_attach(RingHeader* header, u64 len, MpmcRing<T>* out) {
  ring_status st = detail::check_ring_region(header, len, RING_SLOTS_OFFSET);
  if (st != ring_status::ok) {
    return st;
  }
  // Acquire: pairs with the initialiser's release store of the magic word, so
  // the plain header fields read below are the initialised ones.
  if (load_acquire<S>(&header->magic) != magic::RING) {
    return ring_status::bad_magic;
  }
  if (header->kind != ring_kind::MPMC) {
    return ring_status::wrong_kind;
  }
  if (header->elem_size != sizeof(T) || header->elem_align != alignof(T)) {
    return ring_status::element_mismatch;
  }
  if (header->slot_stride != MpmcShape<T>::stride) {
    return ring_status::header_mismatch;
  }
  const u32 capacity = header->capacity;
  st = detail::check_ring_capacity(capacity);
  if (st != ring_status::ok) {
    return st;
  }
  if (len < detail::mpmc_required_bytes<T>(capacity)) {
    return ring_status::region_too_small;
  }
  *out = detail::mpmc_view<T>(header, capacity);
  return ring_status::ok;
}

/// `MpmcRing::try_push`: appends `item`, or returns false when the ring is
/// full (including while the consumer of the slot's previous lap is still
/// copying out of it). Never waits for another party: it only retries when
/// another producer already took the ticket it read, i.e. when `tail` has
/// already moved on, so it is lock-free and safe for any lane to call alone.
template <typename T, scope S = scope::system>
TANDEM_DEVICE bool mpmc_try_push(const MpmcRing<T>& ring, const T& item) {
  u64* const tail = &ring.header->tail.value;
  // Relaxed: a ticket only picks a slot; whether it is ours is decided by the
  // slot's sequence number, read with acquire below.
  u64 ticket = load_relaxed<S>(tail);
  Backoff backoff;
  for (;;) {
    u8* const slot = ring.slot(ticket);
    u64* const seq = MpmcRing<T>::seq(slot);
    // Acquire: pairs with the release store of the consumer that freed the
    // slot, so its read of the old element is finished before we overwrite.
    const i64 lag = static_cast<i64>(load_acquire<S>(seq) - detail::mpmc_free_for(ticket));
    if (lag == 0) {
      // Relaxed: the CAS only arbitrates between producers that all saw the
      // slot free; the hand-off of the element is ordered by `seq`.
      const u64 seen = cas<S, order::relaxed>(tail, ticket, ticket + 1);
      if (seen == ticket) {
        *MpmcRing<T>::elem(slot) = item;
        // Release: pairs with the consumer's acquire load of `seq`,
        // publishing the element (at system scope: to the CPU as well).
        store_release<S>(seq, detail::mpmc_full_for(ticket));
        return true;
      }
      ticket = seen;
      backoff.contended();
    } else if (lag < 0) {
      return false;  // the slot still holds the previous lap's item: full
    } else {
      ticket = load_relaxed<S>(tail);  // another producer took it: catch up
      backoff.contended();
    }
  }
}

/// `MpmcRing::try_pop`: takes the oldest item into `*out`, or returns false
/// when the ring is empty (including while the producer of the next item is
/// still copying into its slot). Lock-free, as mpmc_try_push.
template <typename T, scope S = scope::system>
TANDEM_DEVICE bool mpmc_try_pop(const MpmcRing<T>& ring, T* out) {
  u64* const head = &ring.header->head.value;
  // Relaxed: as for `tail` in mpmc_try_push.
  u64 ticket = load_relaxed<S>(head);
  Backoff backoff;
  for (;;) {
    u8* const slot = ring.slot(ticket);
    u64* const seq = MpmcRing<T>::seq(slot);
    // Acquire: pairs with the producer's release store of `seq`, so its
    // element is visible.
    const i64 lag = static_cast<i64>(load_acquire<S>(seq) - detail::mpmc_full_for(ticket));
    if (lag == 0) {
      // Relaxed: as in mpmc_try_push.
      const u64 seen = cas<S, order::relaxed>(head, ticket, ticket + 1);
      if (seen == ticket) {
        *out = *MpmcRing<T>::elem(slot);
        // Release: pairs with the next lap's producer's acquire load of
        // `seq`, so our read finishes before it overwrites the slot.
        store_release<S>(seq, detail::mpmc_free_for(ticket + ring.capacity()));
        return true;
      }
      ticket = seen;
      backoff.contended();
    } else if (lag < 0) {
      return false;  // not filled for this ticket yet: empty
    } else {
      ticket = load_relaxed<S>(head);  // another consumer took it: catch up
      backoff.contended();
    }
  }
}

/// mpmc_try_push for every lane of the warp/wavefront that calls it together:
/// one CAS on `tail` claims consecutive tickets for as many of them as have
/// free slots, in lane order. Returns, per lane, whether its item was pushed;
/// false means the ring was full at this lane's turn (and then at every later
/// lane's turn of this call too). The same lanes must reach the call together
/// (see tandem/warp.h); on the CPU device this is mpmc_try_push.
///
/// Nothing here waits on another lane: a round either claims tickets, finds
/// the ring full, or retries because another producer moved `tail`, so the
/// AMD spinning rule holds.
template <typename T, scope S = scope::system>
TANDEM_DEVICE bool mpmc_try_push_aggregated(const MpmcRing<T>& ring, const T& item) {
  // What the leader tells the group after each round.
  constexpr u64 RETRY = 0, CLAIMED = 1, FULL = 2;
  const lane_mask group = active_lanes();
  const u32 me = lane_id();
  u64* const tail = &ring.header->tail.value;
  bool pending = true;
  bool pushed = false;
  for (;;) {
    const lane_mask waiting = ballot(group, pending);
    if (waiting == 0) {
      return pushed;
    }
    const u32 leader = lowest_lane(waiting);
    // Relaxed: as in mpmc_try_push; one load for the group.
    const u64 ticket = broadcast(group, me == leader ? load_relaxed<S>(tail) : 0, leader);
    // Waiting lanes take consecutive tickets in lane order.
    const u64 mine = ticket + lane_count(waiting & lanes_below(me));
    u8* const slot = ring.slot(mine);
    i64 lag = 1;
    if (pending) {
      // Acquire, by the lane that will write the slot: as in mpmc_try_push.
      lag = static_cast<i64>(load_acquire<S>(MpmcRing<T>::seq(slot)) - detail::mpmc_free_for(mine));
    }
    // The longest run of waiting lanes, from the leader on, whose slots are free.
    const lane_mask blocked = waiting & ~ballot(group, pending && lag == 0);
    const lane_mask claim = blocked == 0 ? waiting : waiting & lanes_below(lowest_lane(blocked));
    u64 verdict = RETRY;
    if (me == leader) {
      if (claim == 0) {
        // The leader's own slot decides: still full (lag < 0) or a ticket
        // another producer already took (lag > 0, reload and retry).
        verdict = lag < 0 ? FULL : RETRY;
      } else {
        // Relaxed: arbitration only, as in mpmc_try_push. Success means no
        // other producer holds any of the tickets [ticket, ticket + k).
        const u64 k = lane_count(claim);
        verdict = cas<S, order::relaxed>(tail, ticket, ticket + k) == ticket ? CLAIMED : RETRY;
      }
    }
    verdict = broadcast(group, verdict, leader);
    if (verdict == FULL) {
      pending = false;
    } else if (verdict == CLAIMED && ((claim >> me) & 1) != 0) {
      *MpmcRing<T>::elem(slot) = item;
      // Release: as in mpmc_try_push, per lane and per slot.
      store_release<S>(MpmcRing<T>::seq(slot), detail::mpmc_full_for(mine));
      pending = false;
      pushed = true;
    }
  }
}

}  // namespace tandem
