// A kernel thread's wait for its task's answer (rt_wait) and the answer's
// output (rt_output), whichever route the task took.
#pragma once

#include "tandem/future.h"
#include "tandem/portability.h"
#include "tandem/runtime/cpu_route.h"
#include "tandem/runtime/gpu_route.h"
#include "tandem/runtime/layout.h"
#include "tandem/runtime/task.h"

namespace tandem {

/// Waits for `f`'s completion: completed (with `*return_code`), stopped, or
/// budget_exhausted, as future_wait, but polling the thread's reply word
/// for a task sent to a GPU service, and its notify word when it has one
/// and the task went to the CPU workers. Call it from any lane; it spins on
/// memory another agent writes, never on another lane.
TANDEM_DEVICE wait_outcome rt_wait(RtFuture& f, const u32* stop, u64 spin_budget, i32* return_code) {
  f.no_output = false;
  wait_outcome outcome;
  if (f.via_gpu) {
    outcome = detail::rt_wait_replied(f, stop, spin_budget, return_code);
  } else if (f.notify != nullptr) {
    outcome = detail::rt_wait_notified(f, stop, spin_budget, return_code);
  } else {
    const detail::RtFlagsWait waited = detail::rt_wait_flags(f.view, stop, spin_budget);
    outcome = waited.outcome;
    if (outcome == wait_outcome::completed) {
      *return_code = waited.return_code;
    }
  }
  if (outcome == wait_outcome::completed) {
    f.in_flight = false;
  }
  return outcome;
}

/// The output of a completed `f`, to read with Reader::over(*data, *len):
/// in the reply cell for a task a GPU service answered, else in the future.
TANDEM_DEVICE rt_status rt_output(const RtFuture& f, const u8** data, u32* len) {
  if (f.no_output) {
    *data = f.view.copy_space();
    *len = 0;
    return rt_status::ok;
  }
  if (f.via_gpu) {
    // Ordered after the cell's writes by rt_wait's acquire of the word.
    const u32 n = f.reply_cell->output_len;
    if (n > RT_DEVICE_OUTPUT_MAX) {
      return rt_status::future_error;
    }
    *data = f.reply_cell->output;
    *len = n;
    return rt_status::ok;
  }
  return future_output<scope::system>(f.view, data, len) == future_status::ok ? rt_status::ok
                                                                             : rt_status::future_error;
}

}  // namespace tandem
