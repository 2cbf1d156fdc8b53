// Basic kernels: they exercise launches of every dimensionality, argument
// passing, block-shared memory and the block barrier on every backend.
// Signatures are declared in kernels.toml; the build checks these against it.
#include "tandem/portability.h"

using tandem::u32;
using tandem::u64;

/// Does nothing: measures launch overhead.
TANDEM_KERNEL tandem_empty() {}

/// dst[i] = value for i < n.
TANDEM_KERNEL tandem_fill_u32(u32* dst, u64 n, u32 value) {
  for (u64 i = tandem::global_rank(); i < n; i += tandem::grid_size()) {
    dst[i] = value;
  }
}

/// Waits until `*gate` (host memory the host raises) is nonzero, then
/// dst[i] = value for i < n: lets a test hold a stream's work back, so what
/// waits on that work provably waits.
TANDEM_KERNEL tandem_gated_fill_u32(const u32* gate, u32* dst, u64 n, u32 value) {
  // Acquire: the gate is a flag, not data; nothing is read behind it, but
  // the fill must not start before it.
  while (tandem::load_acquire<tandem::scope::system>(gate) == 0) {
    tandem::sleep_for(1000);
  }
  for (u64 i = tandem::global_rank(); i < n; i += tandem::grid_size()) {
    dst[i] = value;
  }
}

/// data[i] += delta (wrapping) for i < n.
TANDEM_KERNEL tandem_add_u32(u32* data, u64 n, u32 delta) {
  for (u64 i = tandem::global_rank(); i < n; i += tandem::grid_size()) {
    data[i] += delta;
  }
}

/// Largest block the reduction below handles (the CUDA and HIP limit).
constexpr u32 BLOCK_SUM_MAX_THREADS = 1024;

/// out[b] = wrapping sum of in[i] over the indices i < n that block b's
/// threads visit in a grid-stride loop; blocks of any shape up to 1024 threads.
TANDEM_KERNEL tandem_block_sum_u32(const u32* in, u32* out, u64 n) {
  TANDEM_SHARED(u32[BLOCK_SUM_MAX_THREADS], partial);
  const u32 rank = tandem::thread_rank();
  const u32 threads = tandem::block_size();

  u32 sum = 0;
  for (u64 i = tandem::global_rank(); i < n; i += tandem::grid_size()) {
    sum += in[i];
  }
  partial[rank] = sum;
  tandem::block_barrier();

  // Tree reduction over a power-of-two span covering `threads`; the bound
  // check folds in the tail of a non-power-of-two block. Every thread runs
  // every round, so each reaches the same barriers.
  u32 span = 1;
  while (span < threads) {
    span <<= 1;
  }
  for (u32 half = span >> 1; half > 0; half >>= 1) {
    if (rank < half && rank + half < threads) {
      partial[rank] += partial[rank + half];
    }
    tandem::block_barrier();
  }
  if (rank == 0) {
    out[tandem::block_rank()] = partial[0];
  }
}

/// Each thread takes `per_thread` tickets from `*counter` and records itself
/// as the owner of each: owner[ticket] = its global rank. Alternates a
/// fetch-add with a compare-and-swap loop so that both are exercised; when it
/// returns, `*counter` grew by the number of tickets and every ticket below it
/// has exactly one owner, or an atomic is broken.
template <typename T>
TANDEM_DEVICE void take_tickets(T* counter, u64* owner, u32 per_thread) {
  const u64 me = tandem::global_rank();
  for (u32 k = 0; k < per_thread; ++k) {
    T ticket;
    if (k % 2 == 0) {
      ticket = tandem::fetch_add<tandem::scope::device, tandem::order::relaxed>(counter, T(1));
    } else {
      ticket = tandem::load_relaxed<tandem::scope::device>(counter);
      for (;;) {
        const T seen =
            tandem::cas<tandem::scope::device, tandem::order::relaxed>(counter, ticket, T(ticket + 1));
        if (seen == ticket) {
          break;
        }
        ticket = seen;
      }
    }
    owner[ticket] = me;
  }
}

TANDEM_KERNEL tandem_tickets_u32(u32* counter, u64* owner, u32 per_thread) {
  take_tickets(counter, owner, per_thread);
}

TANDEM_KERNEL tandem_tickets_u64(u64* counter, u64* owner, u32 per_thread) {
  take_tickets(counter, owner, per_thread);
}
