// Device side of tandem-shm-core's LL ring (shm-core/src/ll_ring.rs) over the
// RingHeader and LlSlots of tandem/layout.h: records of up to
// LL_RECORD_WORDS u32s whose every 8-byte word carries its own tag, so a
// producer publishes with plain 8-byte stores and no fence.
//
// Why: a GPU thread that publishes data in host memory behind a flag needs a
// system-scope fence between the two (stores to different addresses may
// reach the host in any order), and that fence alone costs a sizeable part
// of a host round trip (docs/design/pcie.md, "Publishing without a fence").
// An aligned 8-byte store reaches the host whole, so each word here says by
// its tag, (2t + 1) mod 2^32 for position t, whether it is position t's; a consumer
// takes a record only once all its words do (NCCL's LL protocol makes the
// same bet on 8-byte stores, over the same links).
//
// Kernels only push, with device tickets (mpmc.h "Device tickets"); the
// consumers are CPU threads (Rust's LlRing::try_pop). A kernel that also
// wrote memory the consumer will read (a future's copy space) fences before
// pushing (ll_push_ticketed's `publish_first`).
#pragma once

#include "tandem/atomic.h"
#include "tandem/layout.h"
#include "tandem/mpmc.h"
#include "tandem/portability.h"

namespace tandem {

/// A validated LL ring: geometry read from the header once, then kept.
struct LlRing {
  RingHeader* header;
  LlSlot* slots;
  u64 mask;

  TANDEM_DEVICE LlSlot* slot(u64 ticket) const { return slots + (ticket & mask); }
  TANDEM_DEVICE u64 capacity() const { return mask + 1; }
};

/// The tag of position `ticket`'s words (`ll_tag` in ll_ring.rs).
TANDEM_HOST_DEVICE u32 ll_tag(u64 ticket) { return static_cast<u32>(2 * ticket + 1); }

/// Bytes a ring of `capacity` slots needs (`LlRing::required_bytes`).
TANDEM_HOST_DEVICE u64 ll_required_bytes(u32 capacity) {
  return RING_SLOTS_OFFSET + static_cast<u64>(capacity) * sizeof(LlSlot);
}

/// The view of an already validated ring of `capacity` slots.
TANDEM_DEVICE LlRing ll_view(RingHeader* header, u32 capacity) {
  return LlRing{header, reinterpret_cast<LlSlot*>(reinterpret_cast<u8*>(header) + RING_SLOTS_OFFSET),
                static_cast<u64>(capacity) - 1};
}

/// `LlRing::attach`: validates the ring header at `header` (`len` bytes):
/// magic, kind, element layout, stride, capacity, and that the slots fit.
TANDEM_DEVICE ring_status ll_attach(RingHeader* header, u64 len, LlRing* out) {
  ring_status st = detail::check_ring_region(header, len, RING_SLOTS_OFFSET);
  if (st != ring_status::ok) {
    return st;
  }
  // Acquire: pairs with the initialiser's release store of the magic.
  if (load_acquire<scope::system>(&header->magic) != magic::RING) {
    return ring_status::bad_magic;
  }
  if (header->kind != ring_kind::LL) {
    return ring_status::wrong_kind;
  }
  if (header->elem_size != sizeof(LlSlot::words) || header->elem_align != alignof(u64)) {
    return ring_status::element_mismatch;
  }
  if (header->slot_stride != sizeof(LlSlot)) {
    return ring_status::header_mismatch;
  }
  const u32 capacity = header->capacity;
  st = detail::check_ring_capacity(capacity);
  if (st != ring_status::ok) {
    return st;
  }
  if (len < ll_required_bytes(capacity)) {
    return ring_status::region_too_small;
  }
  *out = ll_view(header, capacity);
  return ring_status::ok;
}

/// Pushes the record `data[0..n)` (n <= LL_RECORD_WORDS; `data` holds
/// LL_RECORD_WORDS words, those past n ignored) on a ring whose producers all
/// take their tickets from `tickets` (claimed as `mode` says) and whose
/// consumers are CPU threads (Rust's LlRing::try_pop, counting in the ring's
/// `head`). With `publish_first`, a system-scope release fence first
/// publishes what this thread wrote before (the only fence on this path).
/// `stop` and the waits are mpmc_push_ticketed's; `*claimed` gets the claim.
///
/// The slot needs no sequence number: a consumer reads a
/// record whole before it moves `head` past it (with release), and the
/// ticket's wait for `head` acquires that move (mpmc.h refresh_other_side),
/// so the previous lap's reads happen-before these stores. A ring pushed
/// here must have no other producers (Rust's try_push would not see the
/// device tickets).
template <scope S = scope::system>
TANDEM_DEVICE ticket_result ll_push_ticketed(const LlRing& ring, DeviceTickets* tickets,
                                             const u32 (&data)[LL_RECORD_WORDS], u32 n, bool publish_first,
                                             claim_mode mode, const u32* stop, TicketClaim* claimed) {
  if (n > LL_RECORD_WORDS) {
    return ticket_result::unavailable;  // not a record: callers check first
  }
  const ticket_result r =
      detail::claim_ticket(ring.capacity(), tickets, &ring.header->head.value, mode, stop, claimed);
  if (r != ticket_result::done) {
    return r;
  }
  if (publish_first) {
    fence_acq_rel<S>();
  }
  const u64 ticket = claimed->ticket;
  u64* const words = ring.slot(ticket)->words;
  const u64 tag = u64{ll_tag(ticket)} << 32;
  // Relaxed 8-byte stores, in any order: each word is checked on its own by
  // its tag. Words 1 and 2, 3 and 4, ... share 16-aligned pairs (words[0]
  // is 8 bytes into the slot), stored two at a time, the last pair of an
  // odd length with one word past the record (ignored: the consumer reads
  // n words). Constant loop bounds, so `data` can stay in registers; the
  // length word goes last only as a courtesy to a consumer polling it.
  static_assert(sizeof(LlSlot) % 16 == 0 && LL_RECORD_WORDS % 2 == 0, "LL word pairs");
  TANDEM_UNROLL
  for (u32 i = 0; i < LL_RECORD_WORDS; i += 2) {
    if (i < n) {
      store_relaxed_pair<S>(&words[1 + i], tag | data[i], tag | data[i + 1]);
    }
  }
  store_relaxed<S>(&words[0], tag | n);
  detail::refresh_if_due(*claimed, ring.capacity(), tickets, &ring.header->head.value);
  return ticket_result::done;
}

}  // namespace tandem
