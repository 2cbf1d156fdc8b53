// A kernel thread's future (RtFuture) and the task it carries, whichever
// route the task takes: rt_future_alloc, rt_make_task (arguments staged for
// a record or slot, or written into the future's copy space), and the
// reading of a copy-space task by whoever runs it.
#pragma once

#include "tandem/arena.h"
#include "tandem/future.h"
#include "tandem/layout.h"
#include "tandem/portability.h"
#include "tandem/runtime/context.h"
#include "tandem/runtime/layout.h"
#include "tandem/ser.h"

namespace tandem {

namespace detail {

/// The sleep before a waiter polls, for a task with records ahead of it in
/// its lane (RtFuture::ahead; a lone thread's lane is nearly empty, so its
/// round trip sleeps none of this). Every poll of a notify word is a PCIe
/// read, and under load thousands of waiters poll while their lanes drain:
/// at 264 x 256 threads a task waits milliseconds, and polls that cannot
/// succeed yet take the link from the records and answers. So a waiter
/// sleeps through RT_WAIT_SLEEP_QUARTERS of the wait it expects, `ahead` times
/// what its thread's recent answers took per record ahead (learnt after each
/// answer, starting from RT_WAIT_NS_PER_AHEAD), then polls on sleeps of a
/// sixteenth of that wait, doubling. A wait it overestimates lengthens its
/// own and, as its next task waits on it, leaves its lane's worker idle: so
/// one slow answer (a worker preempted for a millisecond) counts for at most
/// RT_WAIT_SAMPLE_MAX times the average, and an answer that the first poll
/// found, which proves the wait was no longer than it measured, lowers the
/// average to that at once (rt_learn_wait). GPUs only: the CPU device's
/// polls are reads of its own memory, it yields once.
constexpr u32 RT_WAIT_NS_PER_AHEAD = 256;
/// The most one answer's wait per record ahead counts for, in averages (at
/// least RT_WAIT_NS_PER_AHEAD): a lasting slowdown is learnt in a few
/// answers (2.75x each), a passing one fades as fast.
constexpr u64 RT_WAIT_SAMPLE_MAX = 8;
/// The share of the expected wait slept before the first poll, in quarters.
constexpr u64 RT_WAIT_SLEEP_QUARTERS = 3;
/// The longest wait expected (and so slept before polling): a stop raised
/// meanwhile is seen that much later, as the sleep reads no stop flag (the
/// one line all waiters would read).
constexpr u64 RT_WAIT_EXPECTED_MAX_NS = 8u * 1000 * 1000;
/// The longest single sleep of a GPU thread (__nanosleep's bound).
constexpr u32 RT_WAIT_SLEEP_CHUNK_NS = 1000 * 1000;

/// The wait before the first poll of a task sent into a nearly empty lane
/// (a lone thread's every task). Each poll is a PCIe read of about a
/// microsecond, answered with what host memory held midway: one issued as
/// the task leaves finds no answer yet whenever the worker takes longer than
/// the read's way there, and the answer then waits for the next read. So a
/// thread learns how long after its send its first poll should leave: it
/// waits RT_FIRST_POLL_STEP_UP cycles longer after a first poll that found
/// nothing, RT_FIRST_POLL_STEP_DOWN shorter after one that found the
/// answer. A first poll then finds the answer 8 times in 9, each miss
/// costing a read, each wait too long only its excess. In SM clock cycles
/// (clock64: cheap to read, and the unit needs no calibration, as the wait
/// is learnt), at most RT_FIRST_POLL_MAX_CYCLES. GPUs only, as the sleep
/// above.
constexpr u32 RT_FIRST_POLL_STEP_UP = 128;
constexpr u32 RT_FIRST_POLL_STEP_DOWN = 16;
constexpr u32 RT_FIRST_POLL_MAX_CYCLES = 4096;

}  // namespace detail

/// What a GPU service made of one task it took (rt_run_inbox_task,
/// rt_run_host_record): ran it and answered return code 0, ran it and
/// answered another, or skipped it: it named no future of the segment, so
/// nothing could be answered.
enum class rt_ran : u32 { ok = 0, failed = 1, skipped = 2 };

/// The outcome of a task answered with `rc`.
TANDEM_DEVICE rt_ran rt_ran_with(i32 rc) { return rc == 0 ? rt_ran::ok : rt_ran::failed; }

/// A future the kernel owns: its view and its segment-relative pointer.
struct RtFuture {
  FutureView view;
  ShmPtr<u8> ptr;
  u64 bytes;
  /// Sent and not yet seen complete by rt_wait: kept here, so rt_make_task
  /// need not read the flags back across PCIe to know the future is ours.
  bool in_flight;
  /// The thread's reply word and cell in its own device's memory (RtReplyCell),
  /// or null: where a GPU service answers (rt_send_to_gpu).
  u32* reply_word;
  RtReplyCell* reply_cell;
  /// The thread's notify word and its segment offset, or null/0: once the
  /// task is answered, the worker stores the token and flags there
  /// (rt_notify).
  u32* notify;
  u32 notify_offset;
  /// The current task's token: 1..=rt_notify::TOKEN_MAX, new for every
  /// task, so an earlier answer never passes for this one's and the word
  /// needs no clearing (which, unfenced, could land after the answer).
  u32 token;
  /// The last answer was rt_notify::NO_OUTPUT: rt_output answers from here,
  /// as the future still holds whatever an earlier task left.
  bool no_output;
  /// The task rt_make_task staged for its lane record (pool, method,
  /// args_len, argument words: `staged_len` words), or staged_len 0 when
  /// it went into the copy space.
  u32 staged[LL_RECORD_WORDS - rt_record::POOL];
  u32 staged_len;
  /// The task in flight went to a GPU service, which answers through the
  /// reply word and cell.
  bool via_gpu;
  /// The context it went through was another device's (RtContext::peer):
  /// the answer comes from there, at system scope.
  bool via_peer;
  /// The leased inbox slot (RtContext::send_owned) this future's last GPU
  /// task went through, or null, and that task's lap there: once it is
  /// answered the slot is free at the next lap, and no other thread sends
  /// through it, so the next task needs no claim.
  RtInboxSlot* owned_slot;
  u64 owned_lap;
  /// Whether that task went in its slot, and its pool and method: the next
  /// one, if it repeats them without arguments, goes as SHAPE_REPEATED.
  bool owned_in_slot;
  u32 owned_pool;
  u32 owned_method;
  /// 1 + the lane ring this future's last push found nearly empty (its next
  /// push there claims without probing: mpmc.h claim_mode), or 0.
  u32 nearly_empty_ring;
  /// Records ahead of this future's last push in its lane, as far as the
  /// claim's copy of the workers' counter knew (the copy only lags, so never
  /// fewer), or 0 when the claim found the lane nearly empty (where the copy
  /// may lag by up to an eighth of the lane, mpmc.h refresh_if_due). rt_wait
  /// sleeps in proportion before its first poll.
  u32 ahead;
  /// What this thread's answers took per record ahead of them, lately (an
  /// average rt_wait keeps): with `ahead`, the wait rt_wait expects.
  u32 wait_ns_per_ahead;
  /// When the task in flight was pushed (timer_ns), if `ahead` was nonzero.
  u64 sent_ns;
  /// When the task in flight was pushed (clock64), if `ahead` was zero, and
  /// how long after that this thread's first poll leaves, lately (see
  /// RT_FIRST_POLL_STEP_UP).
  u64 sent_cycles;
  u32 first_poll_cycles;
  /// Whether the future's header and notify word in the segment (host
  /// memory) are written, behind a system-scope fence (rt_future_for_host).
  /// rt_future_alloc leaves that to the first task that travels through
  /// host memory, so a thread whose tasks all go to its own device's GPU
  /// service in their inbox slots writes nothing there and fences only at
  /// device scope.
  bool host_ready;
};

/// Allocates a future with `copy_space` bytes of copy space from the block's
/// arena share. Any thread, after rt_init.
TANDEM_DEVICE rt_status rt_future_alloc(RtContext& ctx, u32 copy_space, RtFuture* out) {
  if (ctx.status != rt_status::ok) {
    return ctx.status;
  }
  const u64 bytes = future_required_bytes(copy_space);
  const FullPtr<u8> mem = block_arena_allocate(ctx.arena, bytes, alignof(FutureShmHeader));
  if (mem.ptr == nullptr) {
    return rt_status::no_memory;
  }
  // The header is written by rt_future_for_host, when a task first needs it.
  if (detail::check_future_region(mem.ptr, bytes, bytes) != future_status::ok) {
    return rt_status::future_error;
  }
  out->view = FutureView{reinterpret_cast<FutureShmHeader*>(mem.ptr), copy_space};
  out->host_ready = false;
  out->ptr = ShmPtr<u8>{ctx.id, ctx.arena_offset + mem.shm.off};
  out->bytes = bytes;
  out->in_flight = false;
  out->token = 0;
  out->staged_len = 0;
  out->owned_slot = nullptr;
  out->owned_lap = 0;
  out->owned_in_slot = false;
  out->owned_pool = 0;
  out->owned_method = 0;
  for (u32 i = 0; i < LL_RECORD_WORDS - rt_record::POOL; ++i) {
    out->staged[i] = 0;  // records copy all of it (rt_send_to_cpu)
  }
  out->via_gpu = false;
  out->via_peer = false;
  out->no_output = false;
  out->nearly_empty_ring = 0;
  out->ahead = 0;
  out->wait_ns_per_ahead = detail::RT_WAIT_NS_PER_AHEAD;
  out->sent_ns = 0;
  out->sent_cycles = 0;
  out->first_poll_cycles = 0;
  // The thread's notify word and reply go to its first future (one future
  // per word: rt_wait trusts the word alone, see there); records carry
  // 32-bit offsets.
  const u32 me = thread_rank();
  const bool first = me < RT_NOTIFY_THREADS && !ctx.notify_taken[me];
  if (first) {
    ctx.notify_taken[me] = true;
  }
  const u64 word_offset = ctx.notify_offset + u64{me} * sizeof(u32);
  const bool notified = first && ctx.notify_words != nullptr && word_offset <= 0xFFFFFFFFull &&
                        out->ptr.off <= 0xFFFFFFFFull;
  // Cleared, as the header is written, by rt_future_for_host.
  out->notify = notified ? &ctx.notify_words[me] : nullptr;
  out->notify_offset = notified ? static_cast<u32>(word_offset) : 0;
  const bool replied = first && ctx.reply_words != nullptr;
  if (replied) {
    // No earlier launch's answer may pass for one of ours. Cleared before
    // any service's answer: the fence below orders it before the stores of
    // any task this thread sends, and a service answers only at an address
    // it read from one. At device scope for this device's service, at
    // system scope for another device's (a peer context), which answers
    // across the link.
    store_relaxed<scope::device>(&ctx.reply_words[me], 0u);
    detail::rt_fence(ctx.peer);
  }
  out->reply_word = replied ? &ctx.reply_words[me] : nullptr;
  out->reply_cell = replied ? &ctx.reply_cells[me] : nullptr;
  return rt_status::ok;
}

namespace detail {

/// Makes `f` ready for a task that travels through host memory (to the CPU
/// workers, or in its copy space): writes its header and clears its notify
/// word (no earlier launch's answer may pass for one of ours), then one
/// system-scope fence, so both reach the host before any record naming
/// them (records carry no fence of their own). Once per future
/// (RtFuture::host_ready).
TANDEM_DEVICE rt_status rt_future_for_host(RtFuture& f) {
  if (f.host_ready) {
    return rt_status::ok;
  }
  if (future_init(reinterpret_cast<u8*>(f.view.header), f.bytes, f.view.copy_space_size, &f.view) !=
      future_status::ok) {
    return rt_status::future_error;
  }
  if (f.notify != nullptr) {
    store_relaxed<scope::system>(f.notify, 0u);
  }
  fence_acq_rel<scope::system>();
  f.host_ready = true;
  return rt_status::ok;
}

/// Writes the task (header, then the `args_len` argument bytes
/// `write_args` puts) into `f`'s copy space, after re-initialising the
/// future. args_too_large when it does not fit.
template <typename W>
TANDEM_DEVICE rt_status rt_fill_copy_space(RtFuture& f, u32 pool, u32 method, u32 args_len, W write_args) {
  const rt_status ready = rt_future_for_host(f);
  if (ready != rt_status::ok) {
    return ready;
  }
  FutureView view;
  if (future_init(reinterpret_cast<u8*>(f.view.header), f.bytes, f.view.copy_space_size, &view) !=
      future_status::ok) {
    return rt_status::future_error;
  }
  const u64 needed = RT_TASK_HEADER_BYTES + u64{args_len};
  if (needed > view.copy_space_size) {
    return rt_status::args_too_large;
  }
  Writer w = Writer::over(view.copy_space(), view.copy_space_size);
  ser_status s = w.put_u32(pool);
  if (s == ser_status::ok) s = w.put_u32(method);
  if (s == ser_status::ok) s = w.put_u32(args_len);
  if (s == ser_status::ok) s = w.put_u32(RT_TASK_VERSION);
  if (s == ser_status::ok) s = write_args(w);
  if (s != ser_status::ok || w.pos != needed) {
    return rt_status::ser_failed;
  }
  // Plain (relaxed) stores rather than future_write_input's read-modify-
  // writes: the future is not published until the fenced push that follows,
  // and a GPU's system-scope RMWs on host memory are its scarcest resource.
  store_relaxed<scope::system>(&view.header->input_len, static_cast<u32>(needed));
  store_relaxed<scope::system>(&view.header->flags, future_flags::COPY_FROM_CLIENT);
  f.view = view;
  return rt_status::ok;
}

}  // namespace detail

/// Makes `f` carry the task (pool, method, arguments written by
/// `write_args(Writer&) -> ser_status`); `f` must be fresh or its last task
/// seen complete (the kernel owns it again). Arguments of at most
/// rt_record::INLINE_ARGS_MAX bytes are staged in `f` and go to the workers
/// inside the lane record (nothing is written to host memory yet); larger
/// ones are serialized into the copy space. args_too_large when they do not
/// fit there either (nothing is truncated).
template <typename W>
TANDEM_DEVICE rt_status rt_make_task(RtFuture& f, u32 pool, u32 method, W write_args) {
  if (f.in_flight) {
    return rt_status::future_error;  // the previous task was not seen complete
  }
  Writer counter = Writer::counting();
  if (write_args(counter) != ser_status::ok || counter.pos > 0xFFFFFFFFull) {
    return rt_status::ser_failed;
  }
  const u32 args_len = static_cast<u32>(counter.pos);
  // Never 0 (a cleared word), different from the last task's.
  f.token = f.token % rt_notify::TOKEN_MAX + 1;
  if (args_len > rt_record::INLINE_ARGS_MAX) {
    f.staged_len = 0;
    return detail::rt_fill_copy_space(f, pool, method, args_len, write_args);
  }
  u8 args[rt_record::INLINE_ARGS_MAX] = {};
  Writer w = Writer::over(args, rt_record::INLINE_ARGS_MAX);
  if (write_args(w) != ser_status::ok || w.pos != args_len) {
    return rt_status::ser_failed;
  }
  f.staged[0] = pool;
  f.staged[1] = method;
  f.staged[2] = rt_record::lengths(args_len, f.view.copy_space_size);
  // Constant bounds, so the staged words can stay in registers.
  TANDEM_UNROLL
  for (u32 i = 0; i < rt_record::INLINE_ARGS_MAX / 4; ++i) {
    f.staged[3 + i] = u32{args[4 * i]} | u32{args[4 * i + 1]} << 8 | u32{args[4 * i + 2]} << 16 |
                      u32{args[4 * i + 3]} << 24;
  }
  f.staged_len = 3 + (args_len + 3) / 4;
  return rt_status::ok;
}

namespace detail {

/// The future at byte `offset` of the context's segment, attached into
/// `*f`; false when no future of the segment lies there.
TANDEM_DEVICE bool rt_task_future(const RtContext& ctx, u64 offset, FutureView* f) {
  const u64 segment_bytes = ctx.header->segment_bytes;
  return offset >= RT_SEGMENT_HEADER_RESERVED && offset < segment_bytes &&
         future_attach<scope::system>(ctx.base + offset, segment_bytes - offset, f) == future_status::ok;
}

/// Runs the task in `f`'s copy space (task header, then arguments) with
/// `handle`, its output into `w`: the return code, RT_RC_BAD_TASK for bytes
/// that are not a task. A pointer future (no COPY_FROM_CLIENT) carries no
/// input here: a bad task too.
template <typename H>
TANDEM_DEVICE i32 rt_run_future_task(const FutureView& f, H& handle, Writer& w) {
  const u8* input = nullptr;
  u32 input_len = 0;
  if (future_input<scope::system>(f, &input, &input_len) != future_status::ok || input_len == 0) {
    return RT_RC_BAD_TASK;
  }
  Reader r = Reader::over(input, input_len);
  u32 pool = 0, method = 0, args_len = 0, version = 0;
  if (r.get_u32(&pool) != ser_status::ok || r.get_u32(&method) != ser_status::ok ||
      r.get_u32(&args_len) != ser_status::ok || r.get_u32(&version) != ser_status::ok ||
      version != RT_TASK_VERSION || args_len > input_len - RT_TASK_HEADER_BYTES) {
    return RT_RC_BAD_TASK;
  }
  Reader args = Reader::over(input + RT_TASK_HEADER_BYTES, args_len);
  return handle(pool, method, args, w);
}

}  // namespace detail

}  // namespace tandem
