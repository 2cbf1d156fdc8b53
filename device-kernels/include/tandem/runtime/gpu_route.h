// The GPU route, both of its ends: a kernel thread sends its task to a GPU
// service (rt_send_to_gpu) and waits on its reply word (rt_wait,
// tandem/runtime/wait.h); the service takes the task from its inbox slot,
// runs it and answers (rt_serve, tandem/runtime/service.h).
//
// The route stays in device memory: rt_send_to_gpu claims its thread's
// slot of the service's device inbox (RtInboxSlot) with one fetch_or and
// writes the task there in words tagged with the slot's lap (as the LL
// records, tandem/ll_ring.h), so the service reads it in the poll that finds
// it and neither side fences; the service answers in the sender's reply word
// and cell (RtReplyCell), carved per block from the reply region of the
// sender's own device. Kernels of the service's device use one part of the
// inbox, at device scope; kernels of other devices another, at system scope.
#pragma once

#include "tandem/atomic.h"
#include "tandem/future.h"
#include "tandem/portability.h"
#include "tandem/runtime/context.h"
#include "tandem/runtime/layout.h"
#include "tandem/runtime/task.h"
#include "tandem/ser.h"

namespace tandem {

namespace detail {

/// How often, in rounds, a wait whose polls are reads of device memory (the
/// GPU route's inbox slot and reply word) checks its stop flag. There the
/// flag, usually in host memory, is the loop's only PCIe read: thousands of
/// senders each reading it every few microseconds would fill the link, and
/// every other read of host memory on the device (the host server's, the
/// CPU route's) would queue behind them. At the waits' back-off this is
/// about a millisecond between reads, which is how late a stop is seen.
constexpr u64 RT_LOCAL_WAIT_STOP_POLL_EVERY = 1024;

/// Claims inbox slot `slot` for the calling thread's task (at scope `S`, its
/// part's): sets BUSY with a fetch_or, and if the slot was free returns true
/// and its lap in `*lap`. A slot another sender holds is waited on with
/// loads until the service has read that task (it frees the slot before
/// running it), then claimed again; false, with nothing claimed, when
/// `*stop` (may be null) is raised first.
template <scope S>
TANDEM_DEVICE bool rt_claim_inbox_slot(RtInboxSlot* slot, const u32* stop, u64* lap) {
  Backoff backoff = Backoff::up_to(Backoff::RACE_DEVICE_MAX_NS);
  for (u64 round = 0;; ++round) {
    // Relaxed: the claim orders nothing. The task's words carry its lap's
    // tag, and the service's free of the last lap (a store of ctrl) comes
    // after its reads of that lap's words, which the values it used prove
    // done before it stores (rt_take_inbox_task).
    const u64 old = fetch_or<S, order::relaxed>(&slot->ctrl, rt_inbox::BUSY);
    if ((old & rt_inbox::BUSY) == 0) {
      *lap = old >> 1;
      return true;
    }
    // Loads, not more RMWs, while it is held: they queue at the slot's line
    // with the service's free.
    while ((load_relaxed<S>(&slot->ctrl) & rt_inbox::BUSY) != 0) {
      if (stop_raised<scope::system, RT_LOCAL_WAIT_STOP_POLL_EVERY>(stop, round++, false)) {
        return false;
      }
      backoff.idle();
    }
  }
}

/// Writes `f`'s task into claimed slot `slot` at lap `lap`, each word under
/// the lap's tag, in pairs where the words are 16-aligned (words 1-2, 3-4,
/// 5-6, 7-8, 9-10): relaxed, as the tags say which words have landed.
/// `repeated`: the task goes as SHAPE_REPEATED.
template <scope S>
TANDEM_DEVICE void rt_write_inbox_task(RtInboxSlot* slot, u64 lap, const RtFuture& f, bool in_slot, u32 args_len,
                                       bool repeated) {
  const u64 tag = u64{rt_inbox_tag(lap)} << 32;
  u32 w[rt_inbox::WORDS];
  w[rt_inbox::W_SHAPE] = repeated  ? rt_inbox::SHAPE_REPEATED | f.token
                         : in_slot ? args_len
                                   : rt_inbox::SHAPE_IN_FUTURE;
  w[rt_inbox::W_TOKEN] = f.token;
  w[rt_inbox::W_POOL] = in_slot ? f.staged[0] : 0;
  w[rt_inbox::W_METHOD] = in_slot ? f.staged[1] : 0;
  const u64 reply = reinterpret_cast<u64>(f.reply_word);
  w[rt_inbox::W_REPLY] = static_cast<u32>(reply);
  w[rt_inbox::W_REPLY + 1] = static_cast<u32>(reply >> 32);
  // The cell follows the word in the block's carve (rt_carve_replies).
  w[rt_inbox::W_CELL_DELTA] = static_cast<u32>(reinterpret_cast<u64>(f.reply_cell) - reply);
  TANDEM_UNROLL
  for (u32 i = 0; i < rt_inbox::ARGS_WORDS; ++i) {
    w[rt_inbox::W_ARGS + i] = f.staged[3 + i];
  }
  if (!in_slot) {
    w[rt_inbox::W_FUTURE] = static_cast<u32>(f.ptr.off);
    w[rt_inbox::W_FUTURE + 1] = static_cast<u32>(f.ptr.off >> 32);
  }
  static_assert(rt_inbox::HEAD_WORDS == 7 && rt_inbox::WORDS == 11, "the stores below");
  store_relaxed<S>(&slot->words[0], tag | w[0]);
  store_relaxed_pair<S>(&slot->words[1], tag | w[1], tag | w[2]);
  store_relaxed_pair<S>(&slot->words[3], tag | w[3], tag | w[4]);
  store_relaxed_pair<S>(&slot->words[5], tag | w[5], tag | w[6]);
  if (!in_slot || args_len > 0) {
    store_relaxed_pair<S>(&slot->words[7], tag | w[7], tag | w[8]);
  }
  if (in_slot && args_len > 2 * 4) {
    store_relaxed_pair<S>(&slot->words[9], tag | w[9], tag | w[10]);
  }
}

}  // namespace detail

/// Sends `f`'s task to the device's GPU service (rt_serve, a persistent
/// kernel the host started) through the thread's slot of the device inbox,
/// in device memory: a task of at most rt_inbox::ARGS_MAX argument bytes
/// travels in the slot, a larger one in the future's copy space. The
/// service answers in the thread's reply word and cell, in its own device's
/// memory (rt_wait, rt_output). One fetch_or claims the slot; a slot another
/// sender holds (more senders than the service keeps slots hot) is waited
/// on until its task was read, or until `*stop`, which then returns stopped
/// with nothing sent (`spin_budget` bounds nothing here). A thread's leased
/// slot (rt_carve_inbox_slots) is claimed by its first task only. no_inbox
/// when the segment has none, no_memory when the future
/// has no reply (not its thread's first, or the reply region was used up),
/// future_error when its last task was not seen answered (rt_wait).
TANDEM_DEVICE rt_status rt_send_to_gpu(const RtContext& ctx, RtFuture& f, const u32* stop, u64 spin_budget) {
  static_assert(rt_inbox::ARGS_MAX <= rt_record::INLINE_ARGS_MAX, "a task a slot carries is one rt_make_task stages");
  (void)spin_budget;
  // The context's fields this send reads, read together: `ctx` is block-shared memory, which
  // the strong stores and atomics below (asm, clobbering memory) make the compiler read
  // afresh each send, and reads spread over the branches wait for one another.
  const rt_status status = ctx.status;
  RtInboxSlot* const slots = ctx.send_slots;
  const u32 send_first = ctx.send_first;
  const u32 send_mask = ctx.send_mask;
  const bool send_owned = ctx.send_owned;
  const bool peer = ctx.peer;
  // By address: `slots` may be null (refused below).
  RtInboxSlot* const slot = reinterpret_cast<RtInboxSlot*>(
      reinterpret_cast<u64>(slots) + u64{(send_first + thread_rank()) & send_mask} * sizeof(RtInboxSlot));
  // A leased slot this future sent through before is free at the next lap:
  // the service stored that lap before it ran the last task
  // (rt_take_inbox_task), and its own later polls see that store; this
  // thread saw the task answered (in_flight is false), so the stores below
  // come after the service's reads of the last lap's words.
  const bool owned = send_owned && f.owned_slot == slot;
  u64 lap = f.owned_lap + 1;
  const u32 args_len = f.staged_len != 0 ? rt_record::args_len(f.staged[2]) : 0;
  const bool in_slot = f.staged_len != 0 && args_len <= rt_inbox::ARGS_MAX;
  // One branch before the stores for a thread's steady tasks (in the slot, through its
  // leased slot): a lone GPU thread pays for each instruction on its way to the service.
  const bool steady = (status == rt_status::ok) & (slots != nullptr) & (f.reply_word != nullptr) & !f.in_flight &
                      in_slot & owned;
  if (!steady) {
    if (status != rt_status::ok) {
      return status;
    }
    if (slots == nullptr) {
      return rt_status::no_inbox;
    }
    if (f.reply_word == nullptr) {
      return rt_status::no_memory;
    }
    if (f.in_flight) {
      return rt_status::future_error;
    }
    if (f.staged_len != 0 && !in_slot) {
      // The staged argument bytes, by constant indices into `staged` (which
      // may then stay in registers).
      const auto staged_args = [&](Writer& w) {
        ser_status s = ser_status::ok;
        TANDEM_UNROLL
        for (u32 i = 0; i < rt_record::INLINE_ARGS_MAX; ++i) {
          if (i < args_len && s == ser_status::ok) {
            s = w.put_u8(static_cast<u8>(f.staged[3 + i / 4] >> (8 * (i % 4))));
          }
        }
        return s;
      };
      const rt_status st = detail::rt_fill_copy_space(f, f.staged[0], f.staged[1], args_len, staged_args);
      if (st != rt_status::ok) {
        return st;
      }
      f.staged_len = 0;
    }
    if (!in_slot) {
      // Release: the task in the copy space, host memory the service reads
      // after its own system-scope fence (rt_take_inbox_task).
      fence_acq_rel<scope::system>();
    }
    if (!owned) {
      const bool claimed = peer ? detail::rt_claim_inbox_slot<scope::system>(slot, stop, &lap)
                                : detail::rt_claim_inbox_slot<scope::device>(slot, stop, &lap);
      if (!claimed) {
        return rt_status::stopped;
      }
    }
  }
  // The last lap was this future's task (the slot is leased to its thread),
  // whose reply word and cell were this one's too.
  const bool repeated = owned && in_slot && args_len == 0 && f.owned_in_slot && f.owned_pool == f.staged[0] &&
                        f.owned_method == f.staged[1];
  if (peer) {
    detail::rt_write_inbox_task<scope::system>(slot, lap, f, in_slot, args_len, repeated);
  } else {
    detail::rt_write_inbox_task<scope::device>(slot, lap, f, in_slot, args_len, repeated);
  }
  f.owned_slot = send_owned ? slot : nullptr;
  f.owned_lap = lap;
  f.owned_in_slot = in_slot;
  f.owned_pool = in_slot ? f.staged[0] : 0;
  f.owned_method = in_slot ? f.staged[1] : 0;
  f.via_gpu = true;
  f.via_peer = peer;
  f.in_flight = true;
  return rt_status::ok;
}

namespace detail {

/// `f`'s reply word as it is now. Relaxed: a success without output is the word alone.
/// System scope for an answer from another device.
TANDEM_DEVICE u32 rt_reply_word(const RtFuture& f) {
  return f.via_peer ? load_relaxed<scope::system>(f.reply_word) : load_relaxed<scope::device>(f.reply_word);
}

/// Whether reply word `seen` shows `f`'s task answered by a GPU service; then
/// `*return_code` and `f.no_output`.
TANDEM_DEVICE bool rt_replied(RtFuture& f, u32 seen, i32* return_code) {
  if ((seen >> rt_notify::TOKEN_SHIFT) != f.token) {
    return false;
  }
  f.no_output = (seen & rt_notify::NO_OUTPUT) != 0;
  if (!f.no_output) {
    // With the word's load, the acquire pattern that pairs with the
    // service's fence before the word (rt_answer): the cell is read after.
    rt_fence(f.via_peer);
  }
  *return_code = (seen & rt_notify::SUCCEEDED) != 0 ? 0 : f.reply_cell->return_code;
  return true;
}

/// rt_wait for a task sent to a GPU service: polls the reply word, in this
/// device's memory, so a poll is an L2 read, not a PCIe one. Each round's
/// load is issued before the round's stop bookkeeping, which runs while it
/// is in flight: a lone thread's next poll, and so its answer, comes sooner.
/// The first Backoff::IDLE_POLLS polls do not sleep (a lone thread's answer
/// comes within them); later ones sleep up to Backoff::RACE_DEVICE_MAX_NS,
/// which only waits that are long already (a busy service) reach.
TANDEM_DEVICE wait_outcome rt_wait_replied(RtFuture& f, const u32* stop, u64 spin_budget, i32* return_code) {
  Backoff backoff = Backoff::up_to(Backoff::RACE_DEVICE_MAX_NS);
  for (u64 round = 0;; ++round) {
    const u32 seen = rt_reply_word(f);
    const bool stopped =
        stop_raised<scope::system, RT_LOCAL_WAIT_STOP_POLL_EVERY>(stop, round, round >= spin_budget);
    if (rt_replied(f, seen, return_code)) {
      return wait_outcome::completed;
    }
    // Then the word once more, read after the stop, as future_wait re-checks
    // the flags.
    if (stopped) {
      return rt_replied(f, rt_reply_word(f), return_code) ? wait_outcome::completed : wait_outcome::stopped;
    }
    if (round >= spin_budget) {
      return rt_replied(f, rt_reply_word(f), return_code) ? wait_outcome::completed
                                                           : wait_outcome::budget_exhausted;
    }
    backoff.idle();
  }
}

/// A device-inbox task, as rt_take_inbox_task read it out of its slot.
struct RtInboxTask {
  u32* reply_word;
  RtReplyCell* reply_cell;
  /// The segment offset of the future whose copy space holds the task, or
  /// 0 for a task carried in the slot (pool, method, args).
  u64 future;
  u32 token;
  u32 pool;
  u32 method;
  u32 args_len;
  u32 args[rt_inbox::ARGS_WORDS];
  /// From the PEER part: the sender is on another device, and is answered
  /// at system scope.
  bool peer;
};

/// A poll of an inbox slot: its `ctrl` and first word, one load.
struct RtSlotHead {
  u64 ctrl;
  u64 first;
};

/// Polls `slot` (of the part whose scope is `S`). Relaxed: every word says
/// by its tag whether it is whole and this lap's (RtInboxSlot), and what a
/// word does not carry (a copy-space task) is ordered by a fence once the
/// task is taken (rt_take_inbox_task).
template <scope S>
TANDEM_DEVICE RtSlotHead rt_poll_inbox_slot(const RtInboxSlot* slot) {
  RtSlotHead head{0, 0};
  load_relaxed_pair<S>(&slot->ctrl, &head.ctrl, &head.first);
  return head;
}

/// Frees `slot` (of the part whose scope is `S`), whose task of lap `lap` its server has just
/// read, for the next lap. Relaxed: the store depends on the values the server loaded (they
/// decided that it happens), so those loads are done before it, and a next lap's stores
/// cannot reach them.
template <scope S>
TANDEM_DEVICE void rt_free_inbox_slot(RtInboxSlot* slot, u64 lap) {
  store_relaxed<S>(&slot->ctrl, (lap + 1) << 1);
}

/// Reads the task in `slot` (of the part whose scope is `S`), whose poll
/// found `head` holding this lap's first word (rt_inbox_slot_has_task), into
/// `*task` if a whole one is there, and frees the slot for its next lap;
/// false (nothing taken) if not yet. The caller owns the slot (rt_serve): no
/// other service thread reads it. The rest of the words are loaded, every
/// load issued before any is checked.
template <scope S>
TANDEM_DEVICE bool rt_take_inbox_task(RtInboxSlot* slot, RtSlotHead head, RtInboxTask* task) {
  const u64 lap = head.ctrl >> 1;
  const u32 tag = rt_inbox_tag(lap);
  u64 seen[rt_inbox::WORDS + 1];
  seen[0] = head.first;
  const u32 shape = static_cast<u32>(seen[0]);
  // A repeated task's shape is its token: it has no arguments.
  const bool repeated = (shape & rt_inbox::SHAPE_REPEATED) != 0;
  const bool in_future = !repeated && (shape & rt_inbox::SHAPE_IN_FUTURE) != 0;
  const u32 args_len = repeated ? 0 : shape & rt_inbox::SHAPE_ARGS_MASK;
  // A shape no sender writes (too many argument bytes) is a task of the
  // head words alone, answered RT_RC_BAD_TASK (rt_run_inbox_task).
  const u32 words = in_future                        ? rt_inbox::W_FUTURE + 2
                    : args_len <= rt_inbox::ARGS_MAX ? rt_inbox::W_ARGS + (args_len + 3) / 4
                                                     : rt_inbox::HEAD_WORDS;
  static_assert(rt_inbox::HEAD_WORDS == 7 && rt_inbox::WORDS == 11, "the loads below");
  load_relaxed_pair<S>(&slot->words[1], &seen[1], &seen[2]);
  load_relaxed_pair<S>(&slot->words[3], &seen[3], &seen[4]);
  load_relaxed_pair<S>(&slot->words[5], &seen[5], &seen[6]);
  TANDEM_UNROLL
  for (u32 i = rt_inbox::HEAD_WORDS; i < rt_inbox::WORDS + 1; ++i) {
    seen[i] = u64{tag} << 32;  // words the task has not: no argument
  }
  if (words > 7) {
    load_relaxed_pair<S>(&slot->words[7], &seen[7], &seen[8]);
  }
  if (words > 9) {
    load_relaxed_pair<S>(&slot->words[9], &seen[9], &seen[10]);
  }
  u32 w[rt_inbox::WORDS];
  bool whole = true;
  TANDEM_UNROLL
  for (u32 i = 0; i < rt_inbox::WORDS; ++i) {
    whole = whole && (i >= words || static_cast<u32>(seen[i] >> 32) == tag);
    w[i] = i < words ? static_cast<u32>(seen[i]) : 0;
  }
  if (!whole) {
    return false;  // the sender's other stores are on their way
  }
  // Before the task runs: a sender waiting for the slot
  // (rt_claim_inbox_slot) waits for the read, not the answer.
  rt_free_inbox_slot<S>(slot, lap);
  if (in_future) {
    // With the loads above, the acquire pattern that pairs with the
    // sender's fence before its words: the copy space (host memory) it
    // wrote is read after.
    fence_acq_rel<scope::system>();
  }
  const u64 reply = u64{w[rt_inbox::W_REPLY]} | u64{w[rt_inbox::W_REPLY + 1]} << 32;
  task->reply_word = reinterpret_cast<u32*>(reply);
  task->reply_cell = reinterpret_cast<RtReplyCell*>(reply + w[rt_inbox::W_CELL_DELTA]);
  task->future = in_future ? u64{w[rt_inbox::W_FUTURE]} | u64{w[rt_inbox::W_FUTURE + 1]} << 32 : 0;
  task->token = w[rt_inbox::W_TOKEN];
  task->pool = w[rt_inbox::W_POOL];
  task->method = w[rt_inbox::W_METHOD];
  task->args_len = in_future ? 0 : args_len;
  TANDEM_UNROLL
  for (u32 i = 0; i < rt_inbox::ARGS_WORDS; ++i) {
    task->args[i] = w[rt_inbox::W_ARGS + i];
  }
  task->peer = S == scope::system;
  return true;
}

/// What a mailbox server of rt_serve knows of the last task it took that
/// carried its arguments in its slot: the slot (null: none yet), the lap,
/// and what a SHAPE_REPEATED task of the slot's next lap repeats.
struct RtLastTaken {
  const RtInboxSlot* slot;
  u64 lap;
  u32* reply_word;
  u32 cell_delta;
  u32 pool;
  u32 method;

  /// Remembers `task`, just taken from `slot` at `lap`, if it carried its
  /// arguments in the slot.
  TANDEM_DEVICE void remember(const RtInboxSlot* taken, u64 taken_lap, const RtInboxTask& task) {
    if (task.future != 0) {
      return;
    }
    slot = taken;
    lap = taken_lap;
    reply_word = task.reply_word;
    cell_delta = static_cast<u32>(reinterpret_cast<u64>(task.reply_cell) - reinterpret_cast<u64>(task.reply_word));
    pool = task.pool;
    method = task.method;
  }
};

/// Takes the task of `slot` (of the part whose scope is `S`), whose poll
/// found `head` holding this lap's first word (rt_inbox_slot_has_task),
/// from the poll alone: when it is SHAPE_REPEATED and `last`
/// is the slot's last lap, whose task was its sender's last (the sender
/// marks it so only then), so the rest of its words are `last`'s. Frees the
/// slot as rt_take_inbox_task does; false, with nothing taken, otherwise.
template <scope S>
TANDEM_DEVICE bool rt_take_repeated_task(RtInboxSlot* slot, RtSlotHead head, const RtLastTaken& last,
                                         RtInboxTask* task) {
  const u64 lap = head.ctrl >> 1;
  const u32 shape = static_cast<u32>(head.first);
  if ((shape & rt_inbox::SHAPE_REPEATED) == 0 || last.slot != slot || last.lap + 1 != lap) {
    return false;
  }
  rt_free_inbox_slot<S>(slot, lap);
  task->reply_word = last.reply_word;
  task->reply_cell = reinterpret_cast<RtReplyCell*>(reinterpret_cast<u64>(last.reply_word) + last.cell_delta);
  task->future = 0;
  task->token = shape & ~rt_inbox::SHAPE_REPEATED;
  task->pool = last.pool;
  task->method = last.method;
  task->args_len = 0;
  TANDEM_UNROLL
  for (u32 i = 0; i < rt_inbox::ARGS_WORDS; ++i) {
    task->args[i] = 0;
  }
  task->peer = S == scope::system;
  return true;
}

/// Answers `task` with return code `rc` and the `len` bytes of `out` (none
/// unless rc is 0): the word alone for a success without output (relaxed:
/// it carries all there is), else the cell, a fence (release, which
/// rt_replied's acquire pattern pairs with), then the word; at system scope
/// for a sender on another device. Reply addresses are the sender's own
/// (kernels of this process, like the handler), so they are not checked.
TANDEM_DEVICE void rt_answer(const RtInboxTask& task, i32 rc, const u8* out, u32 len) {
  u32 flags = 0;
  if (rc == 0 && len == 0) {
    flags = rt_notify::SUCCEEDED | rt_notify::NO_OUTPUT;
  } else {
    flags = rc == 0 ? rt_notify::SUCCEEDED : 0;
    task.reply_cell->return_code = rc;
    task.reply_cell->output_len = len;
    for (u32 i = 0; i < len; ++i) {
      task.reply_cell->output[i] = out[i];
    }
    rt_fence(task.peer);
  }
  const u32 word = task.token << rt_notify::TOKEN_SHIFT | flags;
  if (task.peer) {
    store_relaxed<scope::system>(task.reply_word, word);
  } else {
    store_relaxed<scope::device>(task.reply_word, word);
  }
}

/// Runs a taken device-inbox task with `handle` and answers it. Skipped
/// when its future offset names no future of the segment (answered
/// RT_RC_BAD_TASK, which its sender's wait reads).
template <typename H>
TANDEM_DEVICE rt_ran rt_run_inbox_task(const RtContext& ctx, const RtInboxTask& task, H& handle) {
  u8 out[RT_DEVICE_OUTPUT_MAX];
  Writer w = Writer::over(out, RT_DEVICE_OUTPUT_MAX);
  i32 rc = RT_RC_BAD_TASK;
  bool found = true;
  if (task.future != 0) {
    FutureView f;
    found = rt_task_future(ctx, task.future, &f);
    if (found) {
      rc = rt_run_future_task(f, handle, w);
    }
  } else if (task.args_len <= rt_inbox::ARGS_MAX) {
    u8 args[rt_inbox::ARGS_MAX];
    // Unpacked only when there are any: the bytes go to the stack, and a
    // task without arguments (a repeated one) should not pay for them.
    if (task.args_len != 0) {
      TANDEM_UNROLL
      for (u32 i = 0; i < rt_inbox::ARGS_MAX; ++i) {
        args[i] = static_cast<u8>(task.args[i / 4] >> (8 * (i % 4)));
      }
    }
    Reader r = Reader::over(args, task.args_len);
    rc = handle(task.pool, task.method, r, w);
  }
  rt_answer(task, rc, out, rc == 0 ? static_cast<u32>(w.pos) : 0);
  return found ? rt_ran_with(rc) : rt_ran::skipped;
}

/// Whether the poll `head` of an inbox slot found a task's first word of the
/// slot's lap: a task to take (rt_take_inbox_task), whose other words may
/// still be on their way. A zeroed head finds none.
TANDEM_DEVICE bool rt_inbox_slot_has_task(RtSlotHead head) {
  return static_cast<u32>(head.first >> 32) == rt_inbox_tag(head.ctrl >> 1);
}

/// Whether inbox slot `head` (a poll of it) holds a task not yet taken, or
/// one on its way: claimed, or (a leased slot's later tasks are not
/// claimed) its first word this lap's.
TANDEM_DEVICE bool rt_inbox_slot_pending(RtSlotHead head) {
  return (head.ctrl & rt_inbox::BUSY) != 0 || rt_inbox_slot_has_task(head);
}

}  // namespace detail

}  // namespace tandem
