// Kernels over the runtime's device API (tandem/runtime.h): threads that
// send tasks to the CPU workers or a GPU service and wait for the answers,
// the GPU service itself, and the raw ping-pongs (pinned memory, device
// memory, peer memory) the runtime's round trips are measured against.
#include "tandem/runtime.h"

using tandem::i32;
using tandem::u32;
using tandem::u64;
using tandem::u8;

/// The runtime's math pool (`runtime::task::math`; ids in tandem/runtime/layout.h).
namespace math = tandem::rt_math;

/// Copy space of each thread's future: task header + six u64s (a sum's
/// arguments, too large to travel inline in a lane record), with room.
constexpr u32 ECHO_COPY_SPACE = 80;

/// The echo kernel's `method` for a mix of tasks with and without
/// arguments (`runtime::kernels::ECHO_MIXED`): task i is, by i mod 6, a
/// no-op (0, 1, 5), an add without arguments (2, 3), answered
/// RT_RC_BAD_ARGS, or add(r, i) (4); a task that repeats the last one's
/// method without arguments goes as one (rt_inbox::SHAPE_REPEATED).
constexpr u32 ECHO_MIXED = 0xFFFFFFFFu;

/// The math pool on the device, as runtime::task::math serves it on the CPU:
/// what the GPU service runs.
struct MathOnDevice {
  TANDEM_DEVICE i32 operator()(u32 pool, u32 method, tandem::Reader& args, tandem::Writer& out) const {
    if (pool != math::POOL) {
      return tandem::RT_RC_UNKNOWN_POOL;
    }
    if (method == math::NOOP) {
      return 0;
    }
    const u32 values = method == math::ADD ? 2 : method == math::SUM ? math::SUM_VALUES : 0;
    if (values == 0) {
      return tandem::RT_RC_UNKNOWN_METHOD;
    }
    u64 sum = 0;
    for (u32 i = 0; i < values; ++i) {
      u64 v = 0;
      if (args.get_u64(&v) != tandem::ser_status::ok) {
        return tandem::RT_RC_BAD_ARGS;
      }
      sum += v;
    }
    if (args.pos != args.len) {
      return tandem::RT_RC_BAD_ARGS;
    }
    return out.put_u64(sum) == tandem::ser_status::ok ? 0 : tandem::RC_OUTPUT_TOO_LARGE;
  }
};

/// Adds `n` to `*counter` unless it is zero.
TANDEM_DEVICE void add_if_any(u64* counter, u64 n) {
  if (n != 0) {
    tandem::fetch_add<tandem::scope::system, tandem::order::relaxed>(counter, n);
  }
}

/// The device segment at `segment` (`len` bytes; its device address), as
/// the runtime registered it.
TANDEM_DEVICE tandem::MemoryBackend segment_backend(u8* segment, u64 len) {
  const tandem::RuntimeSegmentHeader* h = reinterpret_cast<const tandem::RuntimeSegmentHeader*>(segment);
  return tandem::MemoryBackend{h->id, tandem::backend_kind::PINNED, 0, reinterpret_cast<u64>(segment), len};
}

/// rt_init for the task kernels (echo, no-op): each thread gets one future
/// (48 + ECHO_COPY_SPACE bytes) and one notify word from the block's arena
/// share, plus alignment slack, and a reply from its device's reply region.
/// `peer`: 0 when the segment is this device's, else a tandem::rt_peer (the
/// segment is another device's: rt_init_peer, with replies from `own`, this
/// device's segment; it reads nothing of the peer's when unreachable).
TANDEM_DEVICE void init_task_kernel(tandem::RtContext& rt, u8* own, u64 own_len, u8* segment, u64 len, u32 peer) {
  const u64 arena_bytes = static_cast<u64>(tandem::block_size()) * 160 + 256;
  if (peer == 0) {
    tandem::rt_init(rt, segment_backend(segment, len), arena_bytes);
    return;
  }
  const tandem::rt_peer access = static_cast<tandem::rt_peer>(peer);
  const bool reachable = access == tandem::rt_peer::reachable;
  tandem::rt_init_peer(rt, reachable ? segment_backend(own, own_len) : tandem::MemoryBackend{},
                       reachable ? segment_backend(segment, len) : tandem::MemoryBackend{}, access, arena_bytes);
}

/// Waits for the answer to `f`'s task (rt_wait): ok once it came (`*rc` its
/// return code), else the status its thread stops with, stopped or
/// queue_full (the spin budget ran out). A stopped thread's future stays
/// queued or in a worker's hands: it is not reused.
TANDEM_DEVICE tandem::rt_status wait_answer(tandem::RtFuture& f, const u32* stop, u64 spin_budget, i32* rc) {
  const tandem::wait_outcome outcome = tandem::rt_wait(f, stop, spin_budget, rc);
  return outcome == tandem::wait_outcome::completed ? tandem::rt_status::ok
         : outcome == tandem::wait_outcome::stopped ? tandem::rt_status::stopped
                                                     : tandem::rt_status::queue_full;
}

/// Global rank 0's phase sums of a task kernel (its `phase_ns`, may be
/// null): lap(phase) adds the time since the last lap to the phase, and
/// report adds the sums and the tasks timed to phase_ns[0..4] and
/// phase_ns[4]. Every other thread reads no clock.
struct PhaseClock {
  u64* phase_ns;
  u64 last;
  u64 spent[4];

  static TANDEM_DEVICE PhaseClock start(u64* phase_ns) {
    u64* const mine = tandem::global_rank() == 0 ? phase_ns : nullptr;
    return PhaseClock{mine, mine != nullptr ? tandem::timer_ns() : 0, {0, 0, 0, 0}};
  }

  TANDEM_DEVICE void lap(int phase) {
    if (phase_ns != nullptr) {
      const u64 now = tandem::timer_ns();
      spent[phase] += now - last;
      last = now;
    }
  }

  TANDEM_DEVICE void report(u64 tasks) const {
    if (phase_ns != nullptr) {
      for (int phase = 0; phase < 4; ++phase) {
        phase_ns[phase] += spent[phase];
      }
      phase_ns[4] += tasks;
    }
  }
};

/// The multiprocessor the calling thread runs on (the CPU device: 0).
TANDEM_DEVICE u32 multiprocessor_id() {
#if defined(TANDEM_BACKEND_CUDA)
  u32 id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
#elif defined(TANDEM_BACKEND_HIP)
  return __smid();
#else
  return 0;
#endif
}

/// Where one thread of a task kernel spent its launch (its `span_ns`, may be
/// null): five words a thread, at 5 x its global rank: the timer
/// (tandem::timer_ns) at its start, once its block's context and its
/// future were set up, once its first task was answered (its end if it had
/// none), at its end, and the multiprocessor it ran on. What
/// the roundtrip bench reads to tell threads that started late from threads
/// that ran slowly under load; a thread reads the clock four times.
struct ThreadSpan {
  u64* words;
  u64 start;
  u64 ready;
  u64 first;

  static TANDEM_DEVICE ThreadSpan begin(u64* span_ns) {
    u64* const mine = span_ns != nullptr ? span_ns + 5 * tandem::global_rank() : nullptr;
    return ThreadSpan{mine, mine != nullptr ? tandem::timer_ns() : 0, 0, 0};
  }

  TANDEM_DEVICE void set_up() {
    if (words != nullptr) {
      ready = tandem::timer_ns();
    }
  }

  TANDEM_DEVICE void answered(u64 done) {
    if (words != nullptr && done == 0) {
      first = tandem::timer_ns();
    }
  }

  TANDEM_DEVICE void end() const {
    if (words != nullptr) {
      const u64 now = tandem::timer_ns();
      words[0] = start;
      words[1] = ready != 0 ? ready : now;
      words[2] = first != 0 ? first : now;
      words[3] = now;
      words[4] = multiprocessor_id();
    }
  }
};

/// Sends `f`'s task (`route` 1: to the device's GPU service; else to the
/// CPU workers, on `lane` at `priority`) and waits for its answer, `clock`
/// lapping phase 1 once it is sent and phase 2 once answered: ok with `*rc`
/// its return code, or the status the thread stops with (the send's, or
/// wait_answer's).
TANDEM_DEVICE tandem::rt_status send_and_wait(const tandem::RtContext& rt, tandem::RtFuture& f, u32 route,
                                              u32 lane, tandem::rt_priority priority, const u32* stop,
                                              u64 spin_budget, PhaseClock& clock, i32* rc) {
  const tandem::rt_status sent = route == 1 ? tandem::rt_send_to_gpu(rt, f, stop, spin_budget)
                                            : tandem::rt_send_to_cpu(rt, f, lane, priority, stop, spin_budget);
  if (sent != tandem::rt_status::ok) {
    return sent;
  }
  clock.lap(1);
  const tandem::rt_status answered = wait_answer(f, stop, spin_budget, rc);
  clock.lap(2);
  return answered;
}

/// The GPU service (tandem::rt_serve with the math pool) over the device
/// segment at `segment` (`len` bytes; its device address): every thread
/// serves until the segment's service_stop is raised and the inbox is
/// drained. stats[0] += tasks served, stats[1] += bad pointers; stats[2] =
/// the rt_status of a thread that could not serve at all (0 if all could);
/// stats[3] = 1 once the service has sized the inbox (rt_serve's `sized`);
/// stats[4] += rounds of polls (RtServeStats::rounds).
TANDEM_KERNEL tandem_rt_gpu_service(u8* segment, u64 len, u64* stats) {
  TANDEM_SHARED(tandem::RtContext, rt);
  tandem::rt_attach(rt, segment_backend(segment, len));
  tandem::RtServeStats served{};
  const tandem::rt_status st = tandem::rt_serve(rt, MathOnDevice{}, &served, &stats[3]);
  add_if_any(&stats[0], served.served);
  add_if_any(&stats[1], served.bad_pointers);
  add_if_any(&stats[4], served.rounds);
  if (st != tandem::rt_status::ok) {
    tandem::store_relaxed<tandem::scope::system>(&stats[2], static_cast<u64>(st));
  }
}

/// A no-op task on `f` to `lane`: ok once it completed with return code 0
/// and empty output, future_error for another answer.
TANDEM_DEVICE tandem::rt_status echo_noop(const tandem::RtContext& rt, tandem::RtFuture& f, u32 lane,
                                          const u32* stop, u64 spin_budget) {
  tandem::rt_status st =
      tandem::rt_make_task(f, math::POOL, math::NOOP, [](tandem::Writer&) { return tandem::ser_status::ok; });
  i32 rc = 0;
  PhaseClock untimed = PhaseClock::start(nullptr);
  if (st == tandem::rt_status::ok) {
    st = send_and_wait(rt, f, 0, lane, tandem::rt_priority::high, stop, spin_budget, untimed, &rc);
  }
  if (st != tandem::rt_status::ok) {
    return st;
  }
  const u8* out = nullptr;
  u32 out_len = 0;
  st = tandem::rt_output(f, &out, &out_len);
  return st == tandem::rt_status::ok && (rc != 0 || out_len != 0) ? tandem::rt_status::future_error : st;
}

/// Every thread sends `tasks_per_thread` tasks of the math pool, one at a
/// time, and waits for each: with `route` 0 to the CPU workers, on lane
/// (block rank mod lanes) of the segment at `segment` (`len` bytes; its
/// device address); with `route` 1 to the segment's device's GPU service.
/// `peer`: 0 when the segment is this device's own, else a tandem::rt_peer:
/// the segment is another device's (its service runs the tasks) and
/// `own_segment` (`own_len` bytes) this device's, whose reply region the
/// answers come to (see init_task_kernel). `method` = ECHO_MIXED: each
/// task answered as expected adds its sum (add(r, i)) or 1 to results[r],
/// one that is not fails the thread as below. `method` = math::ADD:
/// task i of global rank r is add(r, i), and results[r] is the wrapping sum
/// of the answers; math::SUM: the same answers, but odd tasks are
/// sum(r, i, 0, 0, 0, 0), whose arguments go through the future's copy
/// space (too large for a lane record), so one future alternates between
/// both ways, and each even task is followed by a no-op on the same future
/// (echo_noop: its empty answer comes in the notify word alone, while the
/// future still holds the last output); math::NOOP: results[r] counts
/// completions, each checked to have empty output. `priority`: 0
/// high, 1 low, 2 alternating. status[r] = rt_status (ok, or why the thread
/// stopped early); on a task failure status[r] = 0x100 and results[r] = the
/// return code. With `phase_ns` (may be null), global rank 0 adds the
/// nanoseconds it spent making its tasks, sending them, waiting for the
/// answers and reading them (tandem::timer_ns) to phase_ns[0..4], and
/// phase_ns[4] += the tasks it timed: where one round trip goes.
TANDEM_KERNEL tandem_rt_echo_tasks(u8* own_segment, u64 own_len, u8* segment, u64 len, u32 peer,
                                   u64 tasks_per_thread, u32 method, u32 priority, u32 route, const u32* stop,
                                   u64 spin_budget, u64* results, u32* status, u64* phase_ns) {
  TANDEM_SHARED(tandem::RtContext, rt);
  init_task_kernel(rt, own_segment, own_len, segment, len, peer);
  const u64 r = tandem::global_rank();
  results[r] = 0;
  tandem::RtFuture f{};
  tandem::rt_status st = tandem::rt_future_alloc(rt, ECHO_COPY_SPACE, &f);
  const u32 lane = static_cast<u32>(tandem::block_rank() % (rt.status == tandem::rt_status::ok ? rt.num_lanes : 1));
  u64 acc = 0;
  // Phases (see above): make, send, wait, output.
  PhaseClock clock = PhaseClock::start(phase_ns);
  u64 timed_tasks = 0;
  for (u64 i = 0; st == tandem::rt_status::ok && i < tasks_per_thread; ++i) {
    const u32 mixed = static_cast<u32>(i % 6);
    i32 expected_rc = 0;
    if (method == ECHO_MIXED && mixed != 4) {
      const u32 m = mixed == 2 || mixed == 3 ? math::ADD : math::NOOP;
      expected_rc = m == math::ADD ? tandem::RT_RC_BAD_ARGS : 0;
      st = tandem::rt_make_task(f, math::POOL, m, [](tandem::Writer&) { return tandem::ser_status::ok; });
    } else if (method == math::SUM && i % 2 == 1) {
      st = tandem::rt_make_task(f, math::POOL, math::SUM, [&](tandem::Writer& w) {
        tandem::ser_status s = w.put_u64(r);
        for (u32 k = 1; k < math::SUM_VALUES && s == tandem::ser_status::ok; ++k) {
          s = w.put_u64(k == 1 ? i : 0);
        }
        return s;
      });
    } else if (method == math::ADD || method == math::SUM || method == ECHO_MIXED) {
      st = tandem::rt_make_task(f, math::POOL, math::ADD, [&](tandem::Writer& w) {
        const tandem::ser_status s = w.put_u64(r);
        return s == tandem::ser_status::ok ? w.put_u64(i) : s;
      });
    } else {
      st = tandem::rt_make_task(f, math::POOL, method, [](tandem::Writer&) { return tandem::ser_status::ok; });
    }
    if (st != tandem::rt_status::ok) {
      break;
    }
    clock.lap(0);
    const tandem::rt_priority p = priority == 2 ? static_cast<tandem::rt_priority>(i & 1)
                                                : static_cast<tandem::rt_priority>(priority & 1);
    i32 rc = 0;
    st = send_and_wait(rt, f, route, lane, p, stop, spin_budget, clock, &rc);
    if (st != tandem::rt_status::ok) {
      break;
    }
    if (rc != expected_rc) {
      status[r] = 0x100;
      results[r] = static_cast<u64>(static_cast<tandem::i64>(rc));
      return;
    }
    if (method == math::ADD || method == math::SUM || (method == ECHO_MIXED && mixed == 4)) {
      const u8* out = nullptr;
      u32 out_len = 0;
      st = tandem::rt_output(f, &out, &out_len);
      u64 sum = 0;
      tandem::Reader reader = tandem::Reader::over(out, out_len);
      if (st == tandem::rt_status::ok && reader.get_u64(&sum) != tandem::ser_status::ok) {
        st = tandem::rt_status::ser_failed;
      }
      acc += sum;
    } else if (expected_rc != 0) {
      acc += 1;  // a failed task has no output to read
    } else {
      const u8* out = nullptr;
      u32 out_len = 0;
      st = tandem::rt_output(f, &out, &out_len);
      if (st == tandem::rt_status::ok && out_len != 0) {
        st = tandem::rt_status::future_error;
      }
      acc += 1;
    }
    clock.lap(3);
    ++timed_tasks;
    if (st == tandem::rt_status::ok && route == 0 && method == math::SUM && i % 2 == 0) {
      st = echo_noop(rt, f, lane, stop, spin_budget);
    }
  }
  clock.report(timed_tasks);
  results[r] = acc;
  status[r] = static_cast<u32>(st);
}

/// No-op tasks, as a latency-bound kernel sends them: each thread sends
/// `tasks_per_thread` math::NOOP tasks one after another, with `route` 0 to
/// the CPU workers (high priority, lane = block rank mod lanes), with `route`
/// 1 to the device's GPU service, and waits for each; the loop does nothing
/// else. completed[r] = tasks answered with return code 0,
/// status[r] = rt_status (ok, or why the thread stopped early), or 0x100 with
/// completed[r] = the return code of a task that failed. With `phase_ns`
/// (may be null), global rank 0 adds the nanoseconds it spent making its
/// tasks, sending them and waiting for the answers to phase_ns[0..3], and
/// phase_ns[4] += the tasks it timed (phase_ns[3], reading outputs, stays:
/// a no-op has none). What the roundtrip bench times: the echo kernel's
/// loop also picks a method, a route and a priority per task and reads each
/// output, and a GPU thread pays for every instruction of that
/// (docs/design/pcie.md, "A kernel's own instructions count"). With
/// `span_ns` (may be null), every thread records its ThreadSpan.
TANDEM_KERNEL tandem_rt_noop_tasks(u8* segment, u64 len, u64 tasks_per_thread, u32 route, const u32* stop,
                                   u64 spin_budget, u64* completed, u32* status, u64* phase_ns, u64* span_ns) {
  ThreadSpan span = ThreadSpan::begin(span_ns);
  TANDEM_SHARED(tandem::RtContext, rt);
  init_task_kernel(rt, segment, len, segment, len, 0);
  const u64 r = tandem::global_rank();
  tandem::RtFuture f{};
  tandem::rt_status st = tandem::rt_future_alloc(rt, ECHO_COPY_SPACE, &f);
  const u32 lane = static_cast<u32>(tandem::block_rank() % (rt.status == tandem::rt_status::ok ? rt.num_lanes : 1));
  span.set_up();
  PhaseClock clock = PhaseClock::start(phase_ns);
  u64 done = 0;
  for (; st == tandem::rt_status::ok && done < tasks_per_thread; ++done) {
    st = tandem::rt_make_task(f, math::POOL, math::NOOP, [](tandem::Writer&) { return tandem::ser_status::ok; });
    clock.lap(0);
    if (st != tandem::rt_status::ok) {
      break;
    }
    i32 rc = 0;
    st = send_and_wait(rt, f, route, lane, tandem::rt_priority::high, stop, spin_budget, clock, &rc);
    if (st != tandem::rt_status::ok) {
      break;
    }
    if (rc != 0) {
      status[r] = 0x100;
      completed[r] = static_cast<u64>(static_cast<tandem::i64>(rc));
      span.end();
      return;
    }
    span.answered(done);
  }
  clock.report(done);
  span.end();
  completed[r] = done;
  status[r] = static_cast<u32>(st);
}

/// The round-trip floor: global rank 0 writes i to words[0] (system-scope
/// release) and spins (system-scope acquire) until a host thread echoes i
/// into words[1], for i = 1..=rounds; gives up after `spin_budget` spins on
/// one round. *done = rounds completed.
TANDEM_KERNEL tandem_rt_pingpong(u64* words, u64 rounds, u64 spin_budget, u64* done) {
  if (tandem::global_rank() != 0) {
    return;
  }
  u64 completed = 0;
  for (u64 i = 1; i <= rounds; ++i) {
    tandem::store_release<tandem::scope::system>(&words[0], i);
    u64 spins = 0;
    while (tandem::load_acquire<tandem::scope::system>(&words[1]) != i && spins < spin_budget) {
      tandem::spin_pause();
      ++spins;
    }
    if (spins >= spin_budget) {
      break;
    }
    completed = i;
  }
  *done = completed;
}

/// The floor of a kernel thread's round trip to its device's GPU service:
/// thread 0 of block 0 and thread 0 of block 1 of one launch (of at least
/// two blocks, both resident) bounce i = 1..=rounds through two words of
/// device memory, block 0 writing `words[0]` and waiting for `words[1]`,
/// block 1 echoing; device-scope release and acquire, as the service's
/// route. Gives up after `spin_budget` spins on one round; *done = rounds
/// block 0 completed.
TANDEM_KERNEL tandem_rt_device_pingpong(u64* words, u64 rounds, u64 spin_budget, u64* done) {
  const u64 block = tandem::block_rank();
  if (tandem::thread_rank() != 0 || block > 1) {
    return;
  }
  const bool leader = block == 0;
  u64 completed = 0;
  for (u64 i = 1; i <= rounds; ++i) {
    if (leader) {
      tandem::store_release<tandem::scope::device>(&words[0], i);
    }
    u64* const awaited = leader ? &words[1] : &words[0];
    u64 spins = 0;
    while (tandem::load_acquire<tandem::scope::device>(awaited) != i && spins < spin_budget) {
#if !defined(TANDEM_BACKEND_GPU)
      // The CPU device's threads are fibers: give the turn away. A GPU
      // spins bare, the floor being what the hardware does at best.
      tandem::spin_pause();
#endif
      ++spins;
    }
    if (spins >= spin_budget) {
      break;
    }
    if (!leader) {
      tandem::store_release<tandem::scope::device>(&words[1], i);
    }
    completed = i;
  }
  if (leader) {
    *done = completed;
  }
}

/// The floor of a task round trip between two devices: this kernel runs on
/// each of them, global rank 0 of each exchanging values with the other
/// through peer memory. `mine` is a word of this device's memory, which only
/// this kernel polls; `theirs` the other device's word, which this kernel
/// only writes (a remote store, a local poll: the cheapest way across).
/// For i = 1..=rounds the leader writes i to `theirs` and waits for i in
/// `mine`; the other waits for i, then writes it back. System-scope release
/// and acquire: the two devices share no narrower scope. Gives up after
/// `spin_budget` spins on one round; *done = rounds completed.
TANDEM_KERNEL tandem_rt_peer_pingpong(u64* mine, u64* theirs, u64 rounds, u32 leader, u64 spin_budget, u64* done) {
  if (tandem::global_rank() != 0) {
    return;
  }
  u64 completed = 0;
  for (u64 i = 1; i <= rounds; ++i) {
    if (leader != 0) {
      tandem::store_release<tandem::scope::system>(theirs, i);
    }
    u64 spins = 0;
    while (tandem::load_acquire<tandem::scope::system>(mine) != i && spins < spin_budget) {
      tandem::spin_pause();
      ++spins;
    }
    if (spins >= spin_budget) {
      break;
    }
    if (leader == 0) {
      tandem::store_release<tandem::scope::system>(theirs, i);
    }
    completed = i;
  }
  *done = completed;
}
