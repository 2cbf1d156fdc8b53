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
// Two ways to take a ticket:
// - mpmc_try_push/mpmc_try_pop: one compare-and-swap on the ring's `tail` /
//   `head`, exactly as Rust does. Lock-free and non-blocking; right for the
//   CPU device and for a few GPU threads at a time.
// - mpmc_push_ticketed/mpmc_pop_ticketed ("Device tickets" below): when one
//   side of the ring is GPU threads only, its counter lives in device memory
//   and is taken with a fetch_add. This is the path for many GPU threads.
#pragma once

#include "tandem/atomic.h"
#include "tandem/layout.h"
#include "tandem/portability.h"

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
  static constexpr u64 slot_align = alignof(T) > alignof(RingSlotHeader) ? alignof(T)
                                                                          : alignof(RingSlotHeader);
  static constexpr u64 elem_offset = round_up(sizeof(RingSlotHeader), alignof(T));
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
  static TANDEM_DEVICE u64* seq(u8* slot) { return &reinterpret_cast<RingSlotHeader*>(slot)->seq; }
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
  Backoff backoff = Backoff::for_races<S>();
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
      // After a sleep, reload: see Backoff::contended.
      ticket = backoff.contended() ? load_relaxed<S>(tail) : seen;
    } else if (lag < 0) {
      return false;  // the slot still holds the previous lap's item: full
    } else {
      backoff.contended();  // another producer took it: catch up
      ticket = load_relaxed<S>(tail);
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
  Backoff backoff = Backoff::for_races<S>();
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
      // After a sleep, reload: see Backoff::contended.
      ticket = backoff.contended() ? load_relaxed<S>(head) : seen;
    } else if (lag < 0) {
      return false;  // not filled for this ticket yet: empty
    } else {
      backoff.contended();  // another consumer took it: catch up
      ticket = load_relaxed<S>(head);
    }
  }
}

// ---------------------------------------------------------------------------
// Device tickets: one side of a ring entirely on the GPU
// ---------------------------------------------------------------------------
// mpmc_try_push/mpmc_try_pop take their ticket with a compare-and-swap on the
// ring's `tail`/`head`. From a GPU that word is in host memory, and a
// system-scope RMW there crosses PCIe (docs/design/pcie.md, "Atomics across
// PCIe"), and the CAS window spans a round trip to read the slot, so
// thousands of threads mostly fail and retry: progress collapses. Worse,
// without hostNativeAtomicSupported (x86 hosts over PCIe) GPU RMWs on host
// memory are not atomic with respect to the CPU's, so a counter must never be
// shared by GPU and CPU threads that run at the same time.
//
// So when every producer (or every consumer) of a ring is a GPU thread, that
// side's counter moves off the ring into device memory (DeviceTickets),
// taken with one device-scope fetch_add per operation: it never fails and
// costs a device-memory atomic, not a PCIe round trip. The slot protocol is
// unchanged (wait for seq == 2t, fill, release 2t + 1; the consumer frees
// with 2(t + capacity)), so Rust threads on the other side run the ordinary
// try_pop/try_push on the same ring: Vyukov's algorithm has each side read
// only its own counter and the slots. The ring's own counter for the ticketed
// side stays untouched, so Rust's `len()` does not count that side.
//
// A fetch_add cannot be taken back, so a claimed ticket is waited out: the
// producer until its slot's previous lap was consumed, the consumer until its
// item was published. Both depend on the other side (the CPU), never on a
// lane of the same warp, so the wait is allowed on AMD too. A check before
// claiming turns a ring that is already full (empty) into `unavailable`
// without claiming anything; it reads a device-memory copy of the other
// side's counter and crosses PCIe only when the copy says full (empty). A
// producer whose last claim found the ring nearly empty may skip that check
// (claim_mode::direct) and save its round trip; should the ring have filled
// meanwhile, its ticket waits like one that passed the check with others. A
// producer released by `stop` while holding a ticket leaves its slot unfilled
// and the consumers stall at it: raise that flag only when the consumers are
// gone. A consumer gives a claimed ticket up on `stop` only if no producer
// has claimed it yet (see mpmc_pop_ticketed).

/// What mpmc_push_ticketed / mpmc_pop_ticketed did.
enum class ticket_result : u32 {
  /// Pushed / popped.
  done = 0,
  /// The ring was full (push) or empty (pop) before a ticket was claimed:
  /// nothing happened, retry later.
  unavailable = 1,
  /// `*stop` was raised while waiting on a claimed ticket (see above).
  stopped = 2,
  /// The slot of the claimed ticket was already past it: something outside
  /// these tickets used this side of the ring (e.g. a CPU producer on a ring
  /// whose producers take device tickets). Nothing was written.
  foreign_ticket = 3,
};

/// One side's tickets of a ring, in device memory (zeroed when the ring is
/// initialised; no CPU thread touches it): the next ticket, a copy of the
/// other side's counter as last read, the lock that lets one thread at a
/// time read it again, and how fast the other side has been moving its
/// counter while this side waited (see wait_ticket_ready). 32 bytes: one L2
/// sector per ring side.
struct alignas(32) DeviceTickets {
  u64 next;
  u64 other_seen;
  u32 refreshing;
  /// Nanoseconds per item the other side took, on average, while threads
  /// of this side waited on their tickets; 0 before it was measured.
  u32 ns_per_item;
  /// Where the current measurement started: the low 32 bits of the copy
  /// and of timer_ns then (their differences are exact for 2^32 items and
  /// 4 s).
  u32 rate_base_count;
  u32 rate_base_ns;
};
static_assert(sizeof(DeviceTickets) == 32, "tandem_device_kernels::DEVICE_TICKETS_BYTES");
TANDEM_ASSERT_OFFSET(DeviceTickets, ns_per_item, 20);  // tandem_device_kernels::DEVICE_TICKETS_PACE_OFFSET

/// How a producer claims its ticket.
enum class claim_mode : u32 {
  /// Check first that the ring has room, from the device-memory copy of the
  /// consumers' counter (one more device-memory round trip): a ring already
  /// full returns `unavailable`, nothing claimed.
  probe = 0,
  /// Claim at once: on a full ring the claimed ticket waits for its slot
  /// (until `stop`) instead. For a producer whose last claim found the ring
  /// nearly empty (TicketClaim::nearly_empty): a lone thread's every push.
  direct = 1,
};

/// Free slots that make a ring of `capacity` nearly empty: seven eighths.
/// Never for rings of fewer than NEARLY_EMPTY_MIN_CAPACITY slots (layout.h).
TANDEM_HOST_DEVICE i64 nearly_empty_free(u64 capacity) {
  return capacity >= NEARLY_EMPTY_MIN_CAPACITY ? static_cast<i64>(capacity - capacity / 8)
                                               : static_cast<i64>(~0ull >> 1);
}

/// A claimed producer ticket and the slots still free behind it, as far as
/// the copy of the consumers' counter knew when it was claimed.
struct TicketClaim {
  u64 ticket;
  i64 free;

  /// Whether the claim found a ring of `capacity` nearly empty, so the
  /// producer's next claim may be direct.
  TANDEM_DEVICE bool nearly_empty(u64 capacity) const { return free >= nearly_empty_free(capacity); }
};

namespace detail {

/// A measurement of the other side's pace (DeviceTickets::ns_per_item)
/// spans at least RATE_MIN_ITEMS items, so one consumer's run of items, or a
/// refresh right after another, does not make it (a pace from few items
/// errs high), and at most RATE_WINDOW_NS, so it is not of an idle spell.
/// On the CPU device both sides are threads the OS may preempt for a time
/// slice (milliseconds) in mid-span: there the window is longer.
constexpr u32 RATE_MIN_ITEMS = 256;
#if defined(TANDEM_BACKEND_GPU)
constexpr u32 RATE_WINDOW_NS = 4 * 1000 * 1000;
#else
constexpr u32 RATE_WINDOW_NS = 64 * 1000 * 1000;
#endif

/// Reads the other side's counter `other` across PCIe into `t->other_seen`,
/// unless another thread is doing so (then returns at once): thousands of
/// threads waiting on a full (empty) ring then make one read of the line the
/// other side keeps writing, not thousands. The lock only limits traffic
/// (relaxed). The copy only grows (the refresher, its one writer, keeps the
/// larger value), and every value it holds was once `other`'s, so a stale
/// copy only errs towards "no room".
///
/// The counter is read with acquire and the copy stored with release (and
/// read with acquire, ticket_ready), so what the other side did before
/// moving its counter happens-before whatever a thread does once the copy
/// says so: an LL ring's consumers read a slot's record before they move
/// `head` past it (ll_ring.h relies on this to reuse slots).
///
/// A `Waiting` refresher (it holds a ticket the other side has not reached:
/// that side is the bottleneck, busy) also measures the other side's pace:
/// once the copy is RATE_MIN_ITEMS past the measurement's base, the time
/// since the base over those items goes into `ns_per_item` (a quarter's
/// weight) if the span is within RATE_WINDOW_NS; either way the base moves
/// to now. The tickets start zeroed, and a zero base time is no base yet:
/// the first span would run from the clock's zero (on the CPU device the
/// process's first clock read, a few milliseconds off), so that refresh only
/// sets the base. Statistics: relaxed, written under the lock only. Other
/// refreshers (a probe, refresh_if_due on a lone thread's push) leave it
/// alone and pay nothing for it: a probe that finds a ring full may come
/// after the other side drained it and idled, and measuring there too was
/// slower (docs/design/pcie.md, "GPU ring push: runs of slots, and a
/// measured pace").
template <bool Waiting = false>
TANDEM_COLD void refresh_other_side(DeviceTickets* t, const u64* other) {
  if (cas<scope::device, order::relaxed>(&t->refreshing, 0u, 1u) != 0) {
    return;
  }
  // System scope: `other` is a word the CPU writes (or another ring side's
  // device tickets).
  const u64 now = load_acquire<scope::system>(other);
  if (static_cast<i64>(now - load_relaxed<scope::device>(&t->other_seen)) > 0) {
    if (Waiting) {
      const u32 items = static_cast<u32>(now) - load_relaxed<scope::device>(&t->rate_base_count);
      if (items >= RATE_MIN_ITEMS) {
        const u32 at = static_cast<u32>(timer_ns());
        const u32 base_ns = load_relaxed<scope::device>(&t->rate_base_ns);
        const u32 span = at - base_ns;
        if (base_ns != 0 && span <= RATE_WINDOW_NS) {
          const u32 sample = span / items;
          const u32 old = load_relaxed<scope::device>(&t->ns_per_item);
          store_relaxed<scope::device>(&t->ns_per_item, old == 0 ? sample : (3 * old + sample) / 4);
        }
        store_relaxed<scope::device>(&t->rate_base_count, static_cast<u32>(now));
        store_relaxed<scope::device>(&t->rate_base_ns, at);
      }
    }
    store_release<scope::device>(&t->other_seen, now);
  }
  store_relaxed<scope::device>(&t->refreshing, 0u);
}

/// Whether `seen` (a copy of the other side's counter) is at least `needed`
/// ahead of `ticket` (signed: `ticket` may have been read before others
/// claimed).
TANDEM_DEVICE bool counter_ready(u64 seen, u64 ticket, i64 needed) {
  return static_cast<i64>(seen - ticket) >= needed;
}

/// The copy of the other side's counter (acquire: see refresh_other_side).
TANDEM_DEVICE u64 other_seen(const DeviceTickets* t) {
  return load_acquire<scope::device>(&t->other_seen);
}

/// Whether the copy of the other side's counter is at least `needed` ahead
/// of `ticket`.
TANDEM_DEVICE bool ticket_ready(const DeviceTickets* t, u64 ticket, i64 needed) {
  return counter_ready(other_seen(t), ticket, needed);
}

/// ticket_ready, refreshing the copy once when it says no (`Waiting`: see
/// refresh_other_side).
template <bool Waiting = false>
TANDEM_DEVICE bool ticket_room(DeviceTickets* t, const u64* other, u64 ticket, i64 needed) {
  if (ticket_ready(t, ticket, needed)) {
    return true;
  }
  refresh_other_side<Waiting>(t, other);
  return ticket_ready(t, ticket, needed);
}

/// Nanoseconds per item a waiting ticket assumes the other side takes,
/// unless it measured that side faster (wait_ticket_ready).
constexpr u32 TICKET_WAIT_NS_PER_ITEM = 64;

/// The longest sleep between the retries of a producer that found a ring of
/// `capacity` slots full (and claimed nothing): about the time the consumers
/// take to drain it, TICKET_WAIT_NS_PER_ITEM a slot at their fastest, so the
/// full ring cannot run dry before the first sleeper is back; kept between
/// Backoff::MAX_NS and FULL_MAX_NS. Shorter sleeps only add traffic: every
/// retry reads the ring's DeviceTickets line, which thousands of waiting
/// threads then saturate, and the claims queue behind them there
/// (docs/design/pcie.md, "Full lanes: sleep up to the drain time").
TANDEM_HOST_DEVICE u32 full_ring_max_sleep_ns(u64 capacity) {
  const u64 ns = capacity * TICKET_WAIT_NS_PER_ITEM;
  return ns < Backoff::MAX_NS        ? Backoff::MAX_NS
         : ns > Backoff::FULL_MAX_NS ? Backoff::FULL_MAX_NS
                                     : static_cast<u32>(ns);
}

/// After a fetch_add claimed `ticket`, which may lie past what the other
/// side has reached (many threads passed the check at once): waits on the
/// device-memory copy (refreshed by one thread at a time) until it has, so
/// the wait costs no PCIe traffic per thread. Between looks it sleeps 3/4 of
/// the time the items still ahead take at the other side's pace: a thread
/// far back in the line sleeps long (no traffic), one at the front looks
/// often, and an item is not left waiting for a sleeping producer while the
/// other side idles. The pace is TICKET_WAIT_NS_PER_ITEM, or the measured
/// one (ns_per_item) where that is faster: CPU threads draining a ring in
/// runs take a few nanoseconds an item, and waiters that assumed 64 held
/// them up. Never slower: a runtime lane's workers take microseconds an
/// item, but a sleep too long leaves them idle at the sleeper's slot, while
/// one too short costs a read of device memory.
/// False when `*stop` was raised (may be null; polled every 8th round) and
/// `other` itself, read then, is not far enough either.
TANDEM_COLD bool wait_ticket_ready(DeviceTickets* t, const u64* other, u64 ticket, i64 needed,
                                   const u32* stop) {
  for (u64 round = 0; !ticket_room<true>(t, other, ticket, needed); ++round) {
    // Acquire: pairs with the host's release of the flag, like future_wait.
    if (stop != nullptr && round % STOP_POLL_EVERY == STOP_POLL_EVERY - 1 &&
        load_acquire<scope::system>(stop) != 0) {
      // The copy may lag: only the counter itself may say "never" (read
      // with acquire, as refresh_other_side reads it).
      return static_cast<i64>(load_acquire<scope::system>(other) - ticket) >= needed;
    }
    const i64 behind = needed - static_cast<i64>(load_relaxed<scope::device>(&t->other_seen) - ticket);
    const u32 measured = load_relaxed<scope::device>(&t->ns_per_item);
    const u32 pace = measured != 0 && measured < TICKET_WAIT_NS_PER_ITEM ? measured : TICKET_WAIT_NS_PER_ITEM;
    const i64 ns = behind * pace / 4 * 3;
    sleep_for(ns < 64 ? 64u : ns > Backoff::FULL_MAX_NS ? Backoff::FULL_MAX_NS : static_cast<u32>(ns));
  }
  return true;
}

}  // namespace detail

namespace detail {

/// Claims a producer's ticket from `tickets` on a ring of `capacity` slots
/// whose consumers count in `consumed`, and waits until the consumers have
/// taken the ticket's slot's previous lap (see "Device tickets" above).
/// With claim_mode::probe, two device-memory loads come first; then the
/// fetch_add and one load beside it (one round trip for both).
TANDEM_DEVICE ticket_result claim_ticket(u64 capacity, DeviceTickets* tickets, const u64* consumed,
                                         claim_mode mode, const u32* stop, TicketClaim* claimed) {
  // Room for ticket t when consumed + capacity > t. A stale `next` makes the
  // ring look emptier than it is; the claimed ticket then waits (below).
  const i64 needed = 1 - static_cast<i64>(capacity);
  if (mode == claim_mode::probe) {
    // Relaxed: this check only keeps a full ring from being claimed.
    const u64 next = load_relaxed<scope::device>(&tickets->next);
    const u64 seen = load_relaxed<scope::device>(&tickets->other_seen);
    if (!counter_ready(seen, next, needed) && !ticket_room(tickets, consumed, next, needed)) {
      return ticket_result::unavailable;
    }
  }
  // Relaxed: the fetch_add only makes tickets unique; the hand-off of the
  // slot is ordered through the consumers' counter (and, for MPMC rings,
  // the slot's sequence number).
  const u64 ticket = fetch_add_global<scope::device, order::relaxed>(&tickets->next, u64{1});
  // Acquire (see refresh_other_side), and after the fetch_add, which it may
  // overlap (fetch_add_global: a generic one could not be): an acquire load
  // before it would hold the fetch_add back, a device-memory round trip on
  // every push. Then until a consumer has taken the slot's previous lap,
  // without polling it.
  u64 seen = other_seen(tickets);
  if (!counter_ready(seen, ticket, needed)) {
    if (!wait_ticket_ready(tickets, consumed, ticket, needed, stop)) {
      return ticket_result::stopped;  // the ticket is abandoned (see above)
    }
    seen = other_seen(tickets);
  }
  claimed->ticket = ticket;
  claimed->free = static_cast<i64>(seen - ticket) - needed;
  return ticket_result::done;
}

/// After a push published the item of `claim`: the claim that found exactly
/// the nearly-empty count of slots free refreshes the copy of the consumers'
/// counter (one claim per value of the copy, so the refreshes never contend).
/// A lone producer's claims then keep finding the ring nearly empty, for one
/// PCIe read every capacity / 8 pushes, made while its item travels.
TANDEM_DEVICE void refresh_if_due(const TicketClaim& claim, u64 capacity, DeviceTickets* tickets,
                                  const u64* consumed) {
  if (claim.free == nearly_empty_free(capacity)) {
    refresh_other_side(tickets, consumed);
  }
}

}  // namespace detail

/// Pushes `item` on a ring whose producers all take their tickets from
/// `tickets`; `consumed` is the consumers' counter: the ring's `head` when
/// they are CPU threads (the overload below), their DeviceTickets::next when
/// they are GPU threads too. See "Device tickets" above. `*claimed` (may be
/// null) gets the ticket pushed with; `mode` says whether a full ring is
/// `unavailable` (probe) or waited on (direct).
template <typename T, scope S = scope::system>
TANDEM_DEVICE ticket_result mpmc_push_ticketed(const MpmcRing<T>& ring, DeviceTickets* tickets,
                                               const u64* consumed, const T& item, const u32* stop,
                                               u64* claimed = nullptr, claim_mode mode = claim_mode::probe) {
  TicketClaim claim{};
  const ticket_result r = detail::claim_ticket(ring.capacity(), tickets, consumed, mode, stop, &claim);
  if (r != ticket_result::done) {
    return r;
  }
  const u64 ticket = claim.ticket;
  u8* const slot = ring.slot(ticket);
  u64* const seq = MpmcRing<T>::seq(slot);
  const u64 free = detail::mpmc_free_for(ticket);
  // A consumer has taken the previous lap (claim_ticket): it frees the slot
  // right after its copy, so this wait is short.
  Backoff backoff;
  for (u64 round = 0;; ++round) {
    // Acquire: pairs with the release store of the consumer that freed the
    // slot, so its read of the old element is finished before we overwrite.
    const i64 lag = static_cast<i64>(load_acquire<S>(seq) - free);
    if (lag == 0) {
      break;
    }
    if (lag > 0) {
      return ticket_result::foreign_ticket;
    }
    // Acquire: pairs with the host's release of the flag, like future_wait.
    // The ticket is abandoned (see above).
    if (stop != nullptr && round % STOP_POLL_EVERY == STOP_POLL_EVERY - 1 &&
        load_acquire<scope::system>(stop) != 0) {
      return ticket_result::stopped;
    }
    backoff.idle();
  }
  *MpmcRing<T>::elem(slot) = item;
  // Release: pairs with the consumer's acquire load of `seq`, publishing the
  // element (at system scope: to the CPU as well).
  store_release<S>(seq, detail::mpmc_full_for(ticket));
  detail::refresh_if_due(claim, ring.capacity(), tickets, consumed);
  if (claimed != nullptr) {
    *claimed = ticket;
  }
  return ticket_result::done;
}

/// mpmc_push_ticketed for a ring whose consumers are CPU threads (Rust's
/// try_pop, counting in the ring's `head`).
template <typename T, scope S = scope::system>
TANDEM_DEVICE ticket_result mpmc_push_ticketed(const MpmcRing<T>& ring, DeviceTickets* tickets,
                                               const T& item, const u32* stop, u64* claimed = nullptr,
                                               claim_mode mode = claim_mode::probe) {
  return mpmc_push_ticketed<T, S>(ring, tickets, &ring.header->head.value, item, stop, claimed, mode);
}

/// Pops into `*out` from a ring whose consumers all take their tickets from
/// `tickets`; `produced` is the producers' counter: the ring's `tail` for
/// CPU producers (the overload below), their DeviceTickets::next for GPU
/// producers. See "Device tickets" above. When `*stop`
/// is raised while this thread waits on a claimed ticket, it gives up only if
/// no producer has claimed that ticket (`produced` is not past it): an item
/// already on its way is still taken, so raising `stop` after the producers
/// have finished loses nothing.
template <typename T, scope S = scope::system>
TANDEM_DEVICE ticket_result mpmc_pop_ticketed(const MpmcRing<T>& ring, DeviceTickets* tickets,
                                              const u64* produced, T* out, const u32* stop) {
  // Something to take when produced > next. `produced` counts tickets
  // producers claimed; an item may still be on its way into its slot, which
  // the wait below covers.
  const u64 next = load_relaxed<scope::device>(&tickets->next);
  if (!detail::ticket_room(tickets, produced, next, 1)) {
    return ticket_result::unavailable;
  }
  // Relaxed: as in mpmc_push_ticketed.
  const u64 ticket = fetch_add_global<scope::device, order::relaxed>(&tickets->next, u64{1});
  // Until a producer has claimed it, without polling the slot. A stop then
  // gives the ticket up: no producer holds it.
  if (!detail::wait_ticket_ready(tickets, produced, ticket, 1, stop)) {
    return ticket_result::stopped;
  }
  u8* const slot = ring.slot(ticket);
  u64* const seq = MpmcRing<T>::seq(slot);
  const u64 full = detail::mpmc_full_for(ticket);
  // A producer holds the ticket (wait_ticket_ready): its item is on its way.
  Backoff backoff;
  for (;;) {
    // Acquire: pairs with the producer's release store of `seq`, so its
    // element is visible.
    const i64 lag = static_cast<i64>(load_acquire<S>(seq) - full);
    if (lag == 0) {
      break;
    }
    if (lag > 0) {
      return ticket_result::foreign_ticket;
    }
    backoff.idle();
  }
  *out = *MpmcRing<T>::elem(slot);
  // Release: pairs with the next lap's producer's acquire load of `seq`, so
  // our read finishes before it overwrites the slot.
  store_release<S>(seq, detail::mpmc_free_for(ticket + ring.capacity()));
  return ticket_result::done;
}

/// mpmc_pop_ticketed for a ring whose producers are CPU threads (Rust's
/// try_push, counting in the ring's `tail`).
template <typename T, scope S = scope::system>
TANDEM_DEVICE ticket_result mpmc_pop_ticketed(const MpmcRing<T>& ring, DeviceTickets* tickets, T* out,
                                              const u32* stop) {
  return mpmc_pop_ticketed<T, S>(ring, tickets, &ring.header->tail.value, out, stop);
}

}  // namespace tandem
