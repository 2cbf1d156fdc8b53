// Device-side operations of tandem-shm-core's FutureShm (shm-core/src/future.rs)
// over the FutureShmHeader of tandem/layout.h, with Rust's protocol:
//
//   1. submit: the sole owner writes the input (plain and relaxed stores) and
//      publishes the future through a queue push (release) or a launch;
//   2. complete: the single completer writes the output into the copy space,
//      stores return code and output length (relaxed), then sets COMPLETE
//      with a release fetch_or;
//   3. wait: a waiter loads the flags with acquire; seeing COMPLETE, it sees
//      the return code, output length and copy space as written.
//
// Scope S (scope::system by default) covers the CPU: a future Rust waits on
// or completes lives in host-visible memory. Lengths written by a peer are
// never trusted (future_status::corrupt_length), and the copy-space size is
// read once on attach and kept in the FutureView.
//
// Waiting on a GPU: wait for a future only from one lane per warp/wavefront
// (AMD has no independent thread scheduling, see tandem/atomic.h); to make a
// whole block wait, use future_wait_block, where thread 0 waits and the
// outcome reaches the other threads through block-shared memory.
#pragma once

#include "tandem/arena.h"
#include "tandem/atomic.h"
#include "tandem/layout.h"
#include "tandem/portability.h"
#include "tandem/ser.h"

namespace tandem {

/// Why a future operation failed: shm-core's `FutureError` (and `FillError`),
/// as a u32 kernels can report through memory.
enum class future_status : u32 {
  ok = 0,
  null_region = 1,
  misaligned = 2,
  region_too_small = 3,
  unknown_flags = 4,
  copy_space_too_small = 5,
  corrupt_length = 6,
  already_complete = 7,
  not_complete = 8,
  /// The caller's fill function failed (Rust's `FillError::Fill`).
  fill_failed = 9,
};

/// How future_wait ended.
enum class wait_outcome : u32 {
  /// The future is complete (checked first, so completion wins).
  completed = 0,
  /// The stop flag was raised before completion was seen.
  stopped = 1,
  /// The spin budget ran out before completion was seen.
  budget_exhausted = 2,
};

/// Stored instead of the task's return code when its output did not fit.
constexpr i32 RC_OUTPUT_TOO_LARGE = -2147483647 - 1;
/// Stored instead of the task's return code when writing its output failed.
constexpr i32 RC_OUTPUT_FAILED = RC_OUTPUT_TOO_LARGE + 1;
/// Return codes at or below this are Tandem's own (`RC_RESERVED_MAX`).
constexpr i32 RC_RESERVED_MAX = RC_OUTPUT_TOO_LARGE + 0xFFFF;

/// A validated future: its header and the copy-space size read once.
struct FutureView {
  FutureShmHeader* header;
  u32 copy_space_size;

  /// The copy space, right after the header.
  TANDEM_DEVICE u8* copy_space() const {
    return reinterpret_cast<u8*>(header) + FUTURE_COPY_SPACE_OFFSET;
  }
};

/// Outcome of a block-wide wait, declared
/// `TANDEM_SHARED(tandem::FutureWaitSlot, slot)` by the kernel.
struct FutureWaitSlot {
  wait_outcome outcome;
  i32 return_code;
};

namespace detail {

/// Every flag bit with a meaning (`KNOWN_FLAGS`).
constexpr u32 FUTURE_KNOWN_FLAGS = future_flags::COMPLETE | future_flags::COPY_FROM_CLIENT |
                                   future_flags::POINTER | future_flags::SUCCEEDED |
                                   future_flags::USER_MASK;

/// `FutureShm::check_region`.
TANDEM_DEVICE future_status check_future_region(const void* mem, u64 len, u64 needed) {
  if (mem == nullptr) {
    return future_status::null_region;
  }
  if (reinterpret_cast<u64>(mem) % alignof(FutureShmHeader) != 0) {
    return future_status::misaligned;
  }
  return len < needed ? future_status::region_too_small : future_status::ok;
}

/// `*flags &= bits` with order O, as a CAS loop (tandem/atomic.h has no
/// fetch_and); returns the previous value.
template <scope S, order O>
TANDEM_DEVICE u32 fetch_and_u32(u32* flags, u32 bits) {
  u32 current = load_relaxed<S>(flags);
  for (;;) {
    const u32 seen = cas<S, O>(flags, current, current & bits);
    if (seen == current) {
      return seen;
    }
    current = seen;
  }
}

/// The i32 fields of the header as the u32 words the atomics take (a signed
/// and an unsigned type of one size may alias).
TANDEM_DEVICE u32* as_word(i32* field) { return reinterpret_cast<u32*>(field); }

}  // namespace detail

/// `FutureShm::required_bytes`.
TANDEM_HOST_DEVICE u64 future_required_bytes(u32 copy_space) {
  return FUTURE_COPY_SPACE_OFFSET + copy_space;
}

/// `FutureShm::init_in`: a future with `copy_space` bytes of copy space at
/// `mem`, in place: not complete, no input, no payload. Nobody else may use
/// the bytes during the call; the caller then publishes the future (release).
template <scope S = scope::system>
TANDEM_DEVICE future_status future_init(u8* mem, u64 len, u32 copy_space, FutureView* out) {
  const future_status st = detail::check_future_region(mem, len, future_required_bytes(copy_space));
  if (st != future_status::ok) {
    return st;
  }
  FutureShmHeader* h = reinterpret_cast<FutureShmHeader*>(mem);
  h->flags = 0;
  h->return_code = 0;
  h->copy_space_size = copy_space;
  h->input_len = 0;
  h->output_len = 0;
  h->notify = 0;
  h->payload = null_shm_ptr<u8>();
  *out = FutureView{h, copy_space};
  return future_status::ok;
}

/// `FutureShm::attach`: checks the alignment, that the stored copy-space size
/// fits `len`, and that no undefined flag bits are set. The future's
/// initialisation must happen-before (it was received through a queue or a
/// launch).
template <scope S = scope::system>
TANDEM_DEVICE future_status future_attach(u8* mem, u64 len, FutureView* out) {
  future_status st = detail::check_future_region(mem, len, FUTURE_COPY_SPACE_OFFSET);
  if (st != future_status::ok) {
    return st;
  }
  FutureShmHeader* h = reinterpret_cast<FutureShmHeader*>(mem);
  // Plain: written only by init, which happened-before (caller's contract).
  const u32 copy_space = h->copy_space_size;
  if (len < future_required_bytes(copy_space)) {
    return future_status::region_too_small;
  }
  // Acquire, as Rust's `flags()`: a flag set with release shows what preceded it.
  if ((load_acquire<S>(&h->flags) & ~detail::FUTURE_KNOWN_FLAGS) != 0) {
    return future_status::unknown_flags;
  }
  *out = FutureView{h, copy_space};
  return future_status::ok;
}

/// `FutureShm::is_complete`. Acquire: pairs with the completer's release
/// fetch_or, so true makes the output, return code and length readable.
template <scope S = scope::system>
TANDEM_DEVICE bool future_is_complete(const FutureView& f) {
  return (load_acquire<S>(&f.header->flags) & future_flags::COMPLETE) != 0;
}

/// `FutureShm::write_input`: `fill(u8* buf, u32 cap, u64* written)` writes
/// the input into the copy space and returns false on failure; `*written` is
/// its length, or the length it would need when that exceeds `cap`. Records
/// the length and sets COPY_FROM_CLIENT; on any failure the future is left
/// with no input. Relaxed stores: the publication of the future (a release
/// queue push, or a launch) makes them visible. Submitter only, before
/// publishing.
template <scope S = scope::system, typename F>
TANDEM_DEVICE future_status future_write_input(const FutureView& f, F fill, u64* written) {
  u32* const flags = &f.header->flags;
  if ((load_relaxed<S>(flags) & future_flags::COMPLETE) != 0) {
    return future_status::already_complete;
  }
  // Withdraw any earlier input first so a failure leaves none.
  detail::fetch_and_u32<S, order::relaxed>(flags, ~future_flags::COPY_FROM_CLIENT);
  store_relaxed<S>(&f.header->input_len, 0u);
  u64 len = 0;
  if (!fill(f.copy_space(), f.copy_space_size, &len)) {
    return future_status::fill_failed;
  }
  *written = len;
  if (len > f.copy_space_size) {
    return future_status::copy_space_too_small;
  }
  store_relaxed<S>(&f.header->input_len, static_cast<u32>(len));
  fetch_or<S, order::relaxed>(flags, future_flags::COPY_FROM_CLIENT);
  return future_status::ok;
}

/// A fill function for future_write_input / future_complete that serializes
/// one record with `write(Writer&)`, or reports its full length when it does
/// not fit (Rust's `serialize_into`: a value is never truncated).
template <typename W>
struct SerializeInto {
  W write;

  TANDEM_DEVICE bool operator()(u8* buf, u32 cap, u64* written) {
    Writer counter = Writer::counting();
    if (counter.put_record(write) != ser_status::ok) {
      return false;
    }
    if (counter.pos > cap) {
      *written = counter.pos;
      return true;
    }
    Writer w = Writer::over(buf, cap);
    if (w.put_record(write) != ser_status::ok) {
      return false;
    }
    *written = w.pos;
    return true;
  }
};

/// SerializeInto for `write`.
template <typename W>
TANDEM_DEVICE SerializeInto<W> serialize_into(W write) {
  return SerializeInto<W>{write};
}

/// `FutureShm::input`: the input bytes (`*len` = 0 if the submitter wrote
/// none). Relaxed loads: the completer received the future through an
/// acquire (queue pop or launch). Completer only, before completing.
template <scope S = scope::system>
TANDEM_DEVICE future_status future_input(const FutureView& f, const u8** data, u32* len) {
  const u32 flags = load_relaxed<S>(&f.header->flags);
  if ((flags & future_flags::COMPLETE) != 0) {
    return future_status::already_complete;
  }
  *data = f.copy_space();
  *len = 0;
  if ((flags & future_flags::COPY_FROM_CLIENT) == 0) {
    return future_status::ok;
  }
  const u32 n = load_relaxed<S>(&f.header->input_len);
  if (n > f.copy_space_size) {
    return future_status::corrupt_length;
  }
  *len = n;
  return future_status::ok;
}

/// `FutureShm::complete`: `write_output(u8* buf, u32 cap, u64* written)`
/// (as for future_write_input) fills the copy space; then the return code and
/// output length are stored (relaxed) and COMPLETE is set with a release
/// fetch_or at scope S, which pairs with the waiters' acquire load. Waiters
/// are released in every case but the first:
///
///   * already complete: nothing written, already_complete;
///   * the output does not fit: completed with RC_OUTPUT_TOO_LARGE and empty
///     output, copy_space_too_small (never truncated);
///   * write_output fails: completed with RC_OUTPUT_FAILED and empty output,
///     fill_failed.
///
/// Completer only (a single one), after it is done with the input.
template <scope S = scope::system, typename F>
TANDEM_DEVICE future_status future_complete(const FutureView& f, i32 return_code, F write_output) {
  u32* const flags = &f.header->flags;
  // Relaxed: refuses a sequential second completion only; the single
  // completer contract rules out a concurrent one.
  if ((load_relaxed<S>(flags) & future_flags::COMPLETE) != 0) {
    return future_status::already_complete;
  }
  u64 written = 0;
  i32 code = return_code;
  u32 len = 0;
  future_status result = future_status::ok;
  if (!write_output(f.copy_space(), f.copy_space_size, &written)) {
    code = RC_OUTPUT_FAILED;
    result = future_status::fill_failed;
  } else if (written > f.copy_space_size) {
    code = RC_OUTPUT_TOO_LARGE;
    result = future_status::copy_space_too_small;
  } else {
    len = static_cast<u32>(written);
  }
  store_relaxed<S>(detail::as_word(&f.header->return_code), static_cast<u32>(code));
  store_relaxed<S>(&f.header->output_len, len);
  // Release: publishes the copy space, return code and output length to
  // waiters that load COMPLETE with acquire (Rust's `is_complete` included).
  const u32 done = code == 0 ? future_flags::COMPLETE | future_flags::SUCCEEDED : future_flags::COMPLETE;
  const u32 previous = fetch_or<S, order::release>(flags, done);
  if ((previous & future_flags::COMPLETE) != 0) {
    return future_status::already_complete;
  }
  return result;
}

/// `FutureShm::return_code`: not_complete before completion.
template <scope S = scope::system>
TANDEM_DEVICE future_status future_return_code(const FutureView& f, i32* code) {
  // Acquire: pairs with the completer's release fetch_or (future_is_complete).
  const u32 flags = load_acquire<S>(&f.header->flags);
  if ((flags & future_flags::COMPLETE) == 0) {
    return future_status::not_complete;
  }
  // SUCCEEDED says the code is 0 without a second read across the link;
  // otherwise relaxed: ordered by the acquire above.
  *code = (flags & future_flags::SUCCEEDED) != 0
              ? 0
              : static_cast<i32>(load_relaxed<S>(detail::as_word(&f.header->return_code)));
  return future_status::ok;
}

/// `FutureShm::output`: the output bytes; not_complete before completion,
/// corrupt_length for a length past the copy space.
template <scope S = scope::system>
TANDEM_DEVICE future_status future_output(const FutureView& f, const u8** data, u32* len) {
  if (!future_is_complete<S>(f)) {
    return future_status::not_complete;
  }
  // Relaxed: ordered by the acquire in future_is_complete.
  const u32 n = load_relaxed<S>(&f.header->output_len);
  if (n > f.copy_space_size) {
    return future_status::corrupt_length;
  }
  *data = f.copy_space();
  *len = n;
  return future_status::ok;
}

/// Waits for completion for at most `spin_budget` rounds, or until `*stop`
/// (nonzero = stop; may be null for none) is raised, as Rust's
/// `FutureShm::wait`: completion is checked first in every round and again
/// after a stop or an exhausted budget, so a future completed before the stop
/// was raised is always reported completed (with `*return_code`). Each round
/// ends with an idle back-off. Call it from ONE lane per warp/wavefront.
template <scope S = scope::system>
TANDEM_DEVICE wait_outcome future_wait(const FutureView& f, const u32* stop, u64 spin_budget,
                                       i32* return_code) {
  wait_outcome outcome = wait_outcome::budget_exhausted;
  Backoff backoff = Backoff::up_to(Backoff::ANSWER_MAX_NS);
  for (u64 round = 0;; ++round) {
    const bool stopped = detail::stop_raised<S>(stop, round, round >= spin_budget);
    if (future_return_code<S>(f, return_code) == future_status::ok) {
      return wait_outcome::completed;
    }
    if (stopped) {
      outcome = wait_outcome::stopped;
      break;
    }
    if (round >= spin_budget) {
      break;
    }
    backoff.idle();
  }
  return future_return_code<S>(f, return_code) == future_status::ok ? wait_outcome::completed
                                                                    : outcome;
}

/// future_wait for a whole block: thread 0 waits (the one lane that spins)
/// and hands the outcome to every thread through `slot`, block-shared
/// memory the kernel declared. Every thread of the block must call it, as it
/// would reach a barrier; all get the same outcome and return code.
template <scope S = scope::system>
TANDEM_DEVICE wait_outcome future_wait_block(const FutureView& f, const u32* stop, u64 spin_budget,
                                             FutureWaitSlot& slot, i32* return_code) {
  if (thread_rank() == 0) {
    i32 code = 0;
    slot.outcome = future_wait<S>(f, stop, spin_budget, &code);
    slot.return_code = code;
  }
  // The barrier orders thread 0's acquire (and the slot writes) before every
  // other thread's reads, so they may read the output too.
  block_barrier();
  const wait_outcome outcome = slot.outcome;
  *return_code = slot.return_code;
  // Nobody may rewrite the slot (a later wait) before everyone has read it.
  block_barrier();
  return outcome;
}

}  // namespace tandem
