// Kernels over tandem-shm-core's MPMC ring (tandem/mpmc.h), used by the
// cross-language tests and the GPU ring benchmark. Rings of u64; the region
// length travels with the ring so every kernel validates it as Rust does.
#include "tandem/mpmc.h"

using tandem::u32;
using tandem::u64;
using tandem::u8;

/// Global rank 0 initialises an MPMC ring of u64 with `capacity` slots in
/// the `len` bytes at `region`: *status = ring_status.
TANDEM_KERNEL tandem_mpmc_init_u64(u8* region, u64 len, u32 capacity, u32* status) {
  if (tandem::global_rank() == 0) {
    tandem::MpmcRing<u64> ring;
    *status = static_cast<u32>(tandem::mpmc_init<u64>(region, len, capacity, &ring));
  }
}

/// Global rank 0 tries to push `value`: result[0] = ring_status of the
/// attach, result[1] = 1 if pushed, 0 if the ring was full.
TANDEM_KERNEL tandem_mpmc_try_push_u64(tandem::RingHeader* ring, u64 len, u64 value,
                                       u64* result) {
  if (tandem::global_rank() != 0) {
    return;
  }
  tandem::MpmcRing<u64> r;
  const tandem::ring_status st = tandem::mpmc_attach<u64>(ring, len, &r);
  result[0] = static_cast<u64>(st);
  result[1] = st == tandem::ring_status::ok && tandem::mpmc_try_push(r, value) ? 1 : 0;
}

/// Global rank 0 tries to pop: result[0] = ring_status of the attach,
/// result[1] = 1 if an item was taken (then result[2] = the item), else 0.
TANDEM_KERNEL tandem_mpmc_try_pop_u64(tandem::RingHeader* ring, u64 len, u64* result) {
  if (tandem::global_rank() != 0) {
    return;
  }
  tandem::MpmcRing<u64> r;
  const tandem::ring_status st = tandem::mpmc_attach<u64>(ring, len, &r);
  result[0] = static_cast<u64>(st);
  u64 item = 0;
  result[1] = st == tandem::ring_status::ok && tandem::mpmc_try_pop(r, &item) ? 1 : 0;
  result[2] = item;
}

/// Adds `n` to `*counter` unless it is zero: failures are rare, so the
/// common path issues no atomic at all.
TANDEM_DEVICE void count_if_any(u64* counter, u64 n) {
  if (n != 0) {
    tandem::fetch_add<tandem::scope::system, tandem::order::relaxed>(counter, n);
  }
}

/// Every thread pushes the values base + i for its grid-stride share of
/// i < count with mpmc_push_ticketed, its tickets from `tickets` (a
/// DeviceTickets in device memory, zeroed with the ring). While the ring is
/// full a thread pauses and retries: progress then depends on the ring's consumers (the
/// CPU), never on another lane of its warp, so this is allowed on AMD too.
/// After `max_full_retries` consecutive full rounds a value is given up.
/// With `direct` nonzero every push claims its ticket without probing
/// (claim_mode::direct) and waits for its slot, however full the ring.
/// stats[0] += values given up, stats[1] += threads that could not attach
/// the ring, stats[2] += pushes that found a foreign ticket.
TANDEM_KERNEL tandem_mpmc_push_u64(tandem::RingHeader* ring, u64 len, u64* tickets, u64 count,
                                   u64 base, u64 max_full_retries, u32 direct, u64* stats) {
  tandem::MpmcRing<u64> r;
  if (tandem::mpmc_attach<u64>(ring, len, &r) != tandem::ring_status::ok) {
    count_if_any(&stats[1], 1);
    return;
  }
  tandem::DeviceTickets* const mine = reinterpret_cast<tandem::DeviceTickets*>(tickets);
  u64 given_up = 0, foreign = 0;
  for (u64 i = tandem::global_rank(); i < count; i += tandem::grid_size()) {
    tandem::Backoff backoff;
    for (u64 tries = 0;; ++tries) {
      const tandem::ticket_result res = tandem::mpmc_push_ticketed(
          r, mine, base + i, nullptr, nullptr,
          direct != 0 ? tandem::claim_mode::direct : tandem::claim_mode::probe);
      if (res == tandem::ticket_result::done) {
        break;
      }
      if (res == tandem::ticket_result::foreign_ticket) {
        ++foreign;
        break;
      }
      if (tries >= max_full_retries) {
        ++given_up;
        break;
      }
      backoff.idle();
    }
  }
  count_if_any(&stats[0], given_up);
  count_if_any(&stats[2], foreign);
}

/// Every thread pops its grid-stride share of `count` items with
/// mpmc_pop_ticketed (tickets as for tandem_mpmc_push_u64), pausing while
/// the ring is empty (progress depends on the producers, another agent) and
/// giving up after `max_empty_retries` consecutive empty rounds. For each
/// item v: seen[v - base] += 1 when base <= v < base + count. stats[0] +=
/// wrapping sum of the items, stats[1] += pops given up, stats[2] += threads
/// that could not attach, stats[3] += items outside [base, base + count),
/// stats[4] += pops that found a foreign ticket.
TANDEM_KERNEL tandem_mpmc_pop_sum_u64(tandem::RingHeader* ring, u64 len, u64* tickets, u64 count,
                                      u64 base, u64 max_empty_retries, u32* seen, u64* stats) {
  tandem::MpmcRing<u64> r;
  if (tandem::mpmc_attach<u64>(ring, len, &r) != tandem::ring_status::ok) {
    count_if_any(&stats[2], 1);
    return;
  }
  tandem::DeviceTickets* const mine = reinterpret_cast<tandem::DeviceTickets*>(tickets);
  u64 sum = 0, given_up = 0, stray = 0, foreign = 0;
  for (u64 i = tandem::global_rank(); i < count; i += tandem::grid_size()) {
    tandem::Backoff backoff;
    for (u64 tries = 0;; ++tries) {
      u64 item;
      const tandem::ticket_result res = tandem::mpmc_pop_ticketed(r, mine, &item, nullptr);
      if (res == tandem::ticket_result::done) {
        sum += item;
        if (item - base < count) {
          tandem::fetch_add<tandem::scope::system, tandem::order::relaxed>(&seen[item - base], 1u);
        } else {
          ++stray;
        }
        break;
      }
      if (res == tandem::ticket_result::foreign_ticket) {
        ++foreign;
        break;
      }
      if (tries >= max_empty_retries) {
        ++given_up;
        break;
      }
      backoff.idle();
    }
  }
  count_if_any(&stats[0], sum);
  count_if_any(&stats[1], given_up);
  count_if_any(&stats[3], stray);
  count_if_any(&stats[4], foreign);
}
