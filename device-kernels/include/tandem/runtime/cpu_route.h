// The CPU route: a kernel thread sends its task to the CPU workers through
// a lane of the device's queue (rt_send_to_cpu) and waits on its notify word
// (rt_wait, tandem/runtime/wait.h).
//
// Memory order: a task small enough goes to the workers whole in its lane
// record (tandem/ll_ring.h), whose tagged words need no fence: the kernel
// writes nothing else for it (not even the future, which the worker
// re-arms). A larger task is written into the future's copy space, and one
// system-scope release fence before the record publishes it. The worker's
// answer is a release store of the thread's notify word, which rt_wait's
// system-scope acquire pairs with (so the future's output is then visible).
#pragma once

#include "tandem/atomic.h"
#include "tandem/future.h"
#include "tandem/layout.h"
#include "tandem/ll_ring.h"
#include "tandem/mpmc.h"
#include "tandem/portability.h"
#include "tandem/runtime/context.h"
#include "tandem/runtime/layout.h"
#include "tandem/runtime/task.h"

namespace tandem {

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

}  // namespace detail

}  // namespace tandem
