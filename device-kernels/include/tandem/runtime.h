// Kernel side of Tandem's runtime (runtime/src): send tasks to the CPU
// workers through the device's queue segment and wait for the answers.
//
//   TANDEM_SHARED(tandem::RtContext, rt);
//   tandem::rt_init(rt, segment, 64 * 1024);        // every thread, once
//   tandem::RtFuture f;
//   tandem::rt_future_alloc(rt, 128, &f);          // once per thread, reused
//   tandem::rt_make_task(f, POOL, METHOD, [&](tandem::Writer& w) { ... });
//   tandem::rt_send_to_cpu(rt, f, lane, tandem::rt_priority::high, stop, budget);
//   (or tandem::rt_send_to_gpu(rt, f, stop, budget): the GPU service runs it;
//   after tandem::rt_init_peer(rt, own_segment, other_segment, access,
//   64 * 1024), another device's GPU service runs it)
//   tandem::rt_wait(f, stop, budget, &rc);         // completed/stopped/budget
//   tandem::rt_output(f, &data, &len);             // then rt_make_task again
//
// The segment (runtime/src/layout.rs, mirrored in tandem/runtime/layout.h)
// is passed to the kernel as a by-value MemoryBackend: base = the device
// address of the segment. Futures come from the segment's kernel arena (one
// carve per block, then block-local bumps); a future is reused for the
// thread's next task once the last one completed. A lane record names its
// future by its byte offset from the segment's base (rt_record), which is
// how the CPU workers resolve it; so do the from-host ring's records (the
// same format, rt_record), which host threads push to the GPU service.
//
// This header only includes its parts, each of which reads on its own,
// in the order they build on each other:
//   tandem/runtime/layout.h      the mirrors of runtime/src/layout.rs
//   tandem/runtime/context.h     RtContext: rt_attach, rt_init, rt_init_peer
//   tandem/runtime/task.h        RtFuture: rt_future_alloc, rt_make_task
//   tandem/runtime/cpu_route.h   rt_send_to_cpu, and its wait
//   tandem/runtime/gpu_route.h   rt_send_to_gpu, its wait, the service's end
//   tandem/runtime/wait.h        rt_wait and rt_output, for either route
//   tandem/runtime/host_route.h  the service's end of the from-host ring
//   tandem/runtime/service.h     rt_serve, the GPU service
#pragma once

#include "tandem/runtime/layout.h"
#include "tandem/runtime/context.h"
#include "tandem/runtime/task.h"
#include "tandem/runtime/cpu_route.h"
#include "tandem/runtime/gpu_route.h"
#include "tandem/runtime/wait.h"
#include "tandem/runtime/host_route.h"
#include "tandem/runtime/service.h"
