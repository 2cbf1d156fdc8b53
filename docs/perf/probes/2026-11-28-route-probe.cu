// A raw CUDA probe of GPU-route protocols, run for docs/perf/2026-11-28-h200x2-inbox-slots.md:
// T = the ticketed inbox (as it was), C = a slot claimed by fetch_or with LL-tagged words, X = an
// exclusive mailbox with LL-tagged words; a host thread's LL record polled by one GPU thread
// or by the lanes of a warp; and the real route's habits added one at a time (`bisect`).
// Build and run on the GPU machine: nvcc -O3 -std=c++20 -arch=sm_90 -o route_probe
// route_probe.cu, then CUDA_MODULE_LOADING=EAGER ./route_probe [host | bisect].
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <chrono>
#include <thread>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

typedef unsigned long long u64;
typedef unsigned u32;

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); exit(3);} } while (0)

template <bool SYS> struct M;
#define DEF(SYS, S)                                                                                  \
  template <> struct M<SYS> {                                                                         \
    static __device__ __forceinline__ u64 ld(const u64* p) { u64 r; asm volatile("ld.relaxed." S ".u64 %0,[%1];" : "=l"(r) : "l"(p) : "memory"); return r; } \
    static __device__ __forceinline__ u32 ld32(const u32* p) { u32 r; asm volatile("ld.relaxed." S ".u32 %0,[%1];" : "=r"(r) : "l"(p) : "memory"); return r; } \
    static __device__ __forceinline__ u32 ldacq32(const u32* p) { u32 r; asm volatile("ld.acquire." S ".u32 %0,[%1];" : "=r"(r) : "l"(p) : "memory"); return r; } \
    static __device__ __forceinline__ u64 ldacq(const u64* p) { u64 r; asm volatile("ld.acquire." S ".u64 %0,[%1];" : "=l"(r) : "l"(p) : "memory"); return r; } \
    static __device__ __forceinline__ void ld2(const u64* p, u64& a, u64& b) { asm volatile("ld.relaxed." S ".v2.u64 {%0,%1},[%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory"); } \
    static __device__ __forceinline__ void st(u64* p, u64 v) { asm volatile("st.relaxed." S ".u64 [%0],%1;" ::"l"(p), "l"(v) : "memory"); } \
    static __device__ __forceinline__ void st32(u32* p, u32 v) { asm volatile("st.relaxed." S ".u32 [%0],%1;" ::"l"(p), "r"(v) : "memory"); } \
    static __device__ __forceinline__ void strel32(u32* p, u32 v) { asm volatile("st.release." S ".u32 [%0],%1;" ::"l"(p), "r"(v) : "memory"); } \
    static __device__ __forceinline__ void strel(u64* p, u64 v) { asm volatile("st.release." S ".u64 [%0],%1;" ::"l"(p), "l"(v) : "memory"); } \
    static __device__ __forceinline__ void st2(u64* p, u64 a, u64 b) { asm volatile("st.relaxed." S ".v2.u64 [%0],{%1,%2};" ::"l"(p), "l"(a), "l"(b) : "memory"); } \
    static __device__ __forceinline__ u64 add(u64* p, u64 v) { u64 r; asm volatile("atom.relaxed." S ".global.add.u64 %0,[%1],%2;" : "=l"(r) : "l"(p), "l"(v) : "memory"); return r; } \
    static __device__ __forceinline__ u64 orr(u64* p, u64 v) { u64 r; asm volatile("atom.relaxed." S ".global.or.b64 %0,[%1],%2;" : "=l"(r) : "l"(p), "l"(v) : "memory"); return r; } \
    static __device__ __forceinline__ void fence() { asm volatile("fence.acq_rel." S ";" ::: "memory"); } \
  };
DEF(false, "gpu")
DEF(true, "sys")

__device__ __forceinline__ u64 gtimer() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

struct alignas(128) Slot {
  u64 ctrl;
  u64 w[15];
};

constexpr u64 BUDGET = 1ull << 26;

// ---- floors
template <bool SYS>
__global__ void pingpong(u64* mine, u64* theirs, u64 rounds, u32 leader, u64* out) {
  if (threadIdx.x != 0) return;
  u64 t0 = gtimer(), done = 0;
  for (u64 i = 1; i <= rounds; ++i) {
    if (leader) M<SYS>::strel(theirs, i);
    u64 s = 0;
    while (M<SYS>::ldacq(mine) != i && ++s < BUDGET) {}
    if (s >= BUDGET) break;
    if (!leader) M<SYS>::strel(theirs, i);
    done = i;
  }
  if (leader) { out[0] = gtimer() - t0; out[1] = done; }
}

// ---- senders
// MODE 0 = T, 1 = C, 2 = X.  REL: reply awaited with acquire (else relaxed).
template <int MODE, bool SYS>
__global__ void sender(Slot* slots, u64 mask, u64* counter, u32* replies, u64 tasks, u64 warm, u64* out, u32* fails) {
  const u32 me = blockIdx.x * blockDim.x + threadIdx.x;
  u32* reply = &replies[me];
  M<SYS>::st32(reply, 0);
  u32 token = 0;
  Slot* const mine = &slots[me & mask];
  u64 lap = 0;
  if (MODE == 2) lap = M<SYS>::ld(&mine->ctrl) >> 1;
  u64 t0 = 0;
  for (u64 i = 0; i < warm + tasks; ++i) {
    if (i == warm) t0 = gtimer();
    token = token + 1;
    if (MODE == 0) {
      const u64 t = M<SYS>::add(counter, 1);
      Slot* s = &slots[t & mask];
      u64 n = 0;
      while (M<SYS>::ld(&s->ctrl) != 2 * t && ++n < BUDGET) {}
      if (n >= BUDGET) { atomicAdd(fails, 1); return; }
      M<SYS>::fence();
      s->w[0] = reinterpret_cast<u64>(reply);
      s->w[1] = token;
      M<SYS>::strel(&s->ctrl, 2 * t + 1);
    } else {
      if (MODE == 1) {
        u64 n = 0;
        for (;;) {
          const u64 old = M<SYS>::orr(&mine->ctrl, 1);
          if ((old & 1) == 0) { lap = old >> 1; break; }
          while ((M<SYS>::ld(&mine->ctrl) & 1) != 0 && ++n < BUDGET) {}
          if (n >= BUDGET) { atomicAdd(fails, 1); return; }
        }
      }
      const u64 tag = (lap + 1) << 32;
      const u64 r = reinterpret_cast<u64>(reply);
      M<SYS>::st(&mine->w[0], tag | token);
      M<SYS>::st2(&mine->w[1], tag | (r & 0xffffffffu), tag | (r >> 32));
      M<SYS>::st2(&mine->w[3], tag | 1u, tag | 0u);
      M<SYS>::st2(&mine->w[5], tag | 0u, tag | 0u);
      ++lap;
    }
    u64 n = 0;
    while (M<SYS>::ld32(reply) != token && ++n < BUDGET) {}
    if (n >= BUDGET) { atomicAdd(fails, 1); return; }
  }
  if (me == 0) out[0] = gtimer() - t0;
}

// ---- service
template <int MODE, bool SYS, bool WIDEPOLL, bool RELREPLY>
__global__ void service(Slot* slots, u64 depth, const u64* stop, u64* served_total) {
  const u64 G = u64{gridDim.x} * blockDim.x;
  const u64 me = u64{blockIdx.x} * blockDim.x + threadIdx.x;
  u64 served = 0;
  u64 ticket = me;
  u64 idle = 0;
  for (;;) {
    bool worked = false;
    if (MODE == 0) {
      Slot* s = &slots[ticket & (depth - 1)];
      if (M<SYS>::ld(&s->ctrl) == 2 * ticket + 1) {
        M<SYS>::fence();
        u32* reply = reinterpret_cast<u32*>(s->w[0]);
        const u32 token = static_cast<u32>(s->w[1]);
        if (RELREPLY) M<SYS>::strel32(reply, token); else M<SYS>::st32(reply, token);
        M<true>::strel(&s->ctrl, 2 * (ticket + depth));
        ticket += G;
        ++served;
        worked = true;
      }
    } else {
      for (u64 i = me; i < depth; i += G) {
        Slot* s = &slots[i];
        u64 c, w0, w1 = 0, w2 = 0, w3 = 0, w4 = 0, w5 = 0, w6 = 0;
        M<SYS>::ld2(&s->ctrl, c, w0);
        if (WIDEPOLL) {
          M<SYS>::ld2(&s->w[1], w1, w2);
          M<SYS>::ld2(&s->w[3], w3, w4);
          M<SYS>::ld2(&s->w[5], w5, w6);
        }
        const u64 lap = c >> 1;
        const u32 tag = static_cast<u32>(lap + 1);
        if (static_cast<u32>(w0 >> 32) != tag) continue;
        if (!WIDEPOLL) {
          M<SYS>::ld2(&s->w[1], w1, w2);
          M<SYS>::ld2(&s->w[3], w3, w4);
          M<SYS>::ld2(&s->w[5], w5, w6);
        }
        const bool whole = static_cast<u32>(w1 >> 32) == tag && static_cast<u32>(w2 >> 32) == tag &&
                           static_cast<u32>(w3 >> 32) == tag && static_cast<u32>(w4 >> 32) == tag &&
                           static_cast<u32>(w5 >> 32) == tag && static_cast<u32>(w6 >> 32) == tag;
        if (!whole) continue;
        M<SYS>::st(&s->ctrl, (lap + 1) << 1);
        u32* reply = reinterpret_cast<u32*>((w1 & 0xffffffffu) | (w2 << 32));
        if (RELREPLY) M<SYS>::strel32(reply, static_cast<u32>(w0)); else M<SYS>::st32(reply, static_cast<u32>(w0));
        ++served;
        worked = true;
      }
    }
    if (worked) { idle = 0; continue; }
    if ((++idle & 1023) == 0 && M<SYS>::ld(stop) != 0) break;
  }
  atomicAdd(served_total, served);
}


// ---- host route: a host thread's 8-word LL record in pinned memory, polled
// by one GPU thread; answer stored to pinned memory. VARIANT 0: header word
// first, then the rest, fence.sys, answer (landed); 1: whole record a poll,
// no fence; 2: whole record, fence.sys before the answer; 3: floor (one word
// each way).
template <int VARIANT>
__global__ void host_server(u64* rec, u64* answer, u64 rounds) {
  if (threadIdx.x != 0) return;
  for (u64 i = 1; i <= rounds; ++i) {
    const u64 tag = i << 32;
    u64 n = 0;
    for (;;) {
      u64 w[8];
      if (VARIANT == 3) {
        if (M<true>::ld(&rec[0]) == i) break;
      } else if (VARIANT == 0) {
        const u64 h = M<true>::ld(&rec[0]);
        if ((h & ~0xffffffffull) == tag) {
          w[1] = M<true>::ld(&rec[1]);
          M<true>::ld2(&rec[2], w[2], w[3]);
          M<true>::ld2(&rec[4], w[4], w[5]);
          w[6] = M<true>::ld(&rec[6]);
          bool whole = true;
          for (int k = 1; k < 7; ++k) whole = whole && (w[k] & ~0xffffffffull) == tag;
          if (whole) break;
        }
      } else {
        M<true>::ld2(&rec[0], w[0], w[1]);
        M<true>::ld2(&rec[2], w[2], w[3]);
        M<true>::ld2(&rec[4], w[4], w[5]);
        M<true>::ld2(&rec[6], w[6], w[7]);
        bool whole = true;
        for (int k = 0; k < 7; ++k) whole = whole && (w[k] & ~0xffffffffull) == tag;
        if (whole) break;
      }
      if (++n > BUDGET) return;
    }
    if (VARIANT == 0 || VARIANT == 2) M<true>::fence();
    M<true>::st(answer, i);
  }
}


// VARIANT 4: lanes 0..7 load one word each (one request), no fence; 5: as
// 4, fence.sys before the answer; 6: lanes 0..3 a pair each; 7: one thread,
// ld.volatile v2 x4.
template <int VARIANT>
__global__ void host_server_warp(u64* rec, u64* answer, u64 rounds) {
  const u32 lane = threadIdx.x;
  for (u64 i = 1; i <= rounds; ++i) {
    const u64 tag = i << 32;
    u64 n = 0;
    for (;;) {
      bool ok = true;
      if (VARIANT == 4 || VARIANT == 5) {
        const u64 w = lane < 8 ? M<true>::ld(&rec[lane]) : tag;
        ok = (w & ~0xffffffffull) == tag;
      } else if (VARIANT == 6) {
        u64 a = tag, b = tag;
        if (lane < 4) M<true>::ld2(&rec[2 * lane], a, b);
        ok = (a & ~0xffffffffull) == tag && (lane >= 3 || (b & ~0xffffffffull) == tag);
      } else {
        u64 w[8];
        if (lane == 0) {
          for (int k = 0; k < 8; k += 2)
            asm volatile("ld.volatile.global.v2.u64 {%0,%1},[%2];" : "=l"(w[k]), "=l"(w[k + 1]) : "l"(&rec[k]) : "memory");
          for (int k = 0; k < 7; ++k) ok = ok && (w[k] & ~0xffffffffull) == tag;
        }
      }
      if (__all_sync(0xffffffffu, ok)) break;
      if (++n > BUDGET) return;
    }
    if (VARIANT == 5) M<true>::fence();
    if (lane == 0) M<true>::st(answer, i);
    __syncwarp();
  }
}

template <int VARIANT>
static double host_case(u64* hrec, u64* drec, u64* hans, u64* dans) {
  const u64 rounds = 20000;
  memset(hrec, 0, 64);
  *reinterpret_cast<volatile u64*>(hans) = 0;
  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (VARIANT < 4) host_server<VARIANT><<<1, 32, 0, s>>>(drec, dans, rounds);
  else host_server_warp<VARIANT><<<1, 32, 0, s>>>(drec, dans, rounds);
  CK(cudaGetLastError());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto t0 = std::chrono::steady_clock::now();
  for (u64 i = 1; i <= rounds; ++i) {
    const u64 tag = i << 32;
    if (VARIANT == 3) {
      std::atomic_ref<u64>(hrec[0]).store(i, std::memory_order_release);
    } else {
      for (int k = 0; k < 8; ++k) std::atomic_ref<u64>(hrec[k]).store(tag | (k + 7), std::memory_order_relaxed);
    }
    u64 n = 0;
    while (std::atomic_ref<u64>(*hans).load(std::memory_order_acquire) != i) {
      if (++n > (1ull << 32)) { printf("host HUNG\n"); exit(2); }
    }
  }
  auto t1 = std::chrono::steady_clock::now();
  CK(cudaStreamSynchronize(s));
  CK(cudaStreamDestroy(s));
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / rounds;
}

struct Dev {
  int id;
  Slot* slots;
  u64* counter;
  u32* replies;
  u64* out;
  u32* fails;
  u64* stop;
  u64* served;
  cudaStream_t s_serv, s_send, s_ctl;
};

static bool wait_stream(cudaStream_t s, double secs) {
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) { printf("stream error %s\n", cudaGetErrorString(e)); exit(3); }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > secs) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

constexpr u64 MAXDEPTH = 32768;
constexpr u32 MAXSENDERS = 132 * 1024;

static void init_slots(Dev& d, int mode, u64 depth) {
  CK(cudaSetDevice(d.id));
  std::vector<Slot> h(MAXDEPTH);
  memset(h.data(), 0, sizeof(Slot) * MAXDEPTH);
  if (mode == 0)
    for (u64 i = 0; i < MAXDEPTH; ++i) h[i].ctrl = 2 * i;
  CK(cudaMemcpy(d.slots, h.data(), sizeof(Slot) * depth, cudaMemcpyHostToDevice));
  CK(cudaMemset(d.counter, 0, 8));
  CK(cudaMemset(d.stop, 0, 8));
  CK(cudaMemset(d.served, 0, 8));
  CK(cudaMemset(d.fails, 0, 4));
  CK(cudaDeviceSynchronize());
}

template <int MODE, bool SYS, bool WIDEPOLL, bool REL>
static void run_case(const char* name, Dev& sd, Dev& cd, u64 depth, u32 sblocks, u32 sthreads, int sms) {
  // cd: device of the service (slots, counter); sd: device of senders (replies).
  init_slots(cd, MODE, depth);
  CK(cudaSetDevice(sd.id));
  CK(cudaMemset(sd.fails, 0, 4));
  CK(cudaDeviceSynchronize());
  cudaFuncAttributes a;
  CK(cudaFuncGetAttributes(&a, service<MODE, SYS, WIDEPOLL, REL>));
  CK(cudaFuncGetAttributes(&a, sender<MODE, SYS>));
  CK(cudaSetDevice(cd.id));
  service<MODE, SYS, WIDEPOLL, REL><<<sblocks, sthreads, 0, cd.s_serv>>>(cd.slots, depth, cd.stop, cd.served);
  CK(cudaGetLastError());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CK(cudaSetDevice(sd.id));
  double rt_ns = -1, tput = -1;
  bool hung = false;
  // RT: one thread.
  {
    const u64 tasks = 20000;
    sender<MODE, SYS><<<1, 1, 0, sd.s_send>>>(cd.slots, depth - 1, cd.counter, sd.replies, tasks, 1000, sd.out, sd.fails);
    CK(cudaGetLastError());
    if (!wait_stream(sd.s_send, 10)) hung = true;
    if (!hung) {
      u64 ns = 0;
      CK(cudaMemcpy(&ns, sd.out, 8, cudaMemcpyDeviceToHost));
      rt_ns = double(ns) / tasks;
    }
  }
  if (!hung) {
    const u32 blocks = sms, threads = 128;
    const u64 tasks = 1000;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, sd.s_send));
    sender<MODE, SYS><<<blocks, threads, 0, sd.s_send>>>(cd.slots, depth - 1, cd.counter, sd.replies, tasks, 0, sd.out, sd.fails);
    CK(cudaEventRecord(e1, sd.s_send));
    if (!wait_stream(sd.s_send, 20)) hung = true;
    if (!hung) {
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      tput = double(blocks) * threads * tasks / (ms * 1e-3);
    }
  }
  u32 fails = 0;
  if (!hung) CK(cudaMemcpy(&fails, sd.fails, 4, cudaMemcpyDeviceToHost));
  CK(cudaSetDevice(cd.id));
  const u64 one = 1;
  CK(cudaMemcpyAsync(cd.stop, &one, 8, cudaMemcpyHostToDevice, cd.s_ctl));
  const bool stopped = wait_stream(cd.s_serv, 10);
  u64 served = 0;
  if (stopped) CK(cudaMemcpy(&served, cd.served, 8, cudaMemcpyDeviceToHost));
  printf("%-34s depth %6llu service %3ux%-4u | RT %8.1f ns | %4ux128 x1000: %8.1f M/s | fails %u served %llu%s%s\n", name,
         (unsigned long long)depth, sblocks, sthreads, rt_ns, sms, tput / 1e6, fails, (unsigned long long)served,
         hung ? " HUNG" : "", stopped ? "" : " SERVICE-HUNG");
  fflush(stdout);
  if (hung || !stopped) exit(2);
}


// ---- bisection of the real route: C claim + narrow poll, plus one of the
// real code's habits at a time. SB: the sender's reply wait sleeps as
// Backoff (8 bare polls, then jittered sleeps doubling from 32 ns to 1024
// ns); BATCH: the service issues its slots' polls together (4 a thread);
// HANDLER: the service copies args through a local buffer and a 256-byte
// output buffer, as rt_run_inbox_task.
template <bool SB, u32 SPIN = 8>
__global__ void sender2(Slot* slots, u64 mask, u32* replies, u64 tasks, u64 warm, u64* out, u32* fails) {
  const u32 me = blockIdx.x * blockDim.x + threadIdx.x;
  u32* reply = &replies[me];
  M<false>::st32(reply, 0);
  u32 token = 0;
  Slot* const mine = &slots[me & mask];
  u64 t0 = 0;
  u32 rng = (me * 2654435761u) | 1u;
  for (u64 i = 0; i < warm + tasks; ++i) {
    if (i == warm) t0 = gtimer();
    token = token + 1;
    u64 lap = 0;
    for (;;) {
      const u64 old = M<false>::orr(&mine->ctrl, 1);
      if ((old & 1) == 0) { lap = old >> 1; break; }
      while ((M<false>::ld(&mine->ctrl) & 1) != 0) {}
    }
    const u64 tag = (lap + 1) << 32;
    const u64 r = reinterpret_cast<u64>(reply);
    M<false>::st(&mine->w[0], tag | token);
    M<false>::st2(&mine->w[1], tag | (r & 0xffffffffu), tag | (r >> 32));
    M<false>::st2(&mine->w[3], tag | 1u, tag | 0u);
    M<false>::st2(&mine->w[5], tag | 0u, tag | 0u);
    u64 n = 0;
    u32 polls = 0, ns = 32;
    while (M<false>::ld32(reply) != token && ++n < BUDGET) {
      if (SB) {
        if (polls < SPIN) { ++polls; continue; }
        rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
        __nanosleep(ns / 2 + rng % (ns / 2));
        ns = ns < 1024 ? ns * 2 : 1024;
      }
    }
    if (n >= BUDGET) { atomicAdd(fails, 1); return; }
  }
  if (me == 0) out[0] = gtimer() - t0;
}

template <bool BATCH, bool HANDLER>
__global__ void service2(Slot* slots, u64 depth, const u64* stop, u64* served_total) {
  const u64 G = u64{gridDim.x} * blockDim.x;
  const u64 me = u64{blockIdx.x} * blockDim.x + threadIdx.x;
  u64 served = 0, idle = 0;
  for (;;) {
    bool worked = false;
    u64 c[4], w0[4];
    if (BATCH) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const u64 i = me + k * G;
        if (i < depth) M<false>::ld2(&slots[i].ctrl, c[k], w0[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const u64 i = me + k * G;
      if (i >= depth) continue;
      Slot* s = &slots[i];
      if (!BATCH) M<false>::ld2(&s->ctrl, c[k], w0[k]);
      const u64 lap = c[k] >> 1;
      const u32 tag = static_cast<u32>(lap + 1);
      if (static_cast<u32>(w0[k] >> 32) != tag) continue;
      u64 w1, w2, w3, w4, w5, w6;
      M<false>::ld2(&s->w[1], w1, w2);
      M<false>::ld2(&s->w[3], w3, w4);
      M<false>::ld2(&s->w[5], w5, w6);
      const bool whole = static_cast<u32>(w1 >> 32) == tag && static_cast<u32>(w2 >> 32) == tag &&
                         static_cast<u32>(w3 >> 32) == tag && static_cast<u32>(w4 >> 32) == tag &&
                         static_cast<u32>(w5 >> 32) == tag && static_cast<u32>(w6 >> 32) == tag;
      if (!whole) continue;
      M<false>::st(&s->ctrl, (lap + 1) << 1);
      u32 rc = 0;
      if (HANDLER) {
        volatile unsigned char args[16];
        unsigned char outb[256];
        for (int b = 0; b < 16; ++b) args[b] = static_cast<unsigned char>((w5 >> (8 * (b % 4))) & 0xff);
        u32 pos = 0;
        if (static_cast<u32>(w3) != 1) { outb[pos++] = args[0]; }
        rc = static_cast<u32>(w4) == 0 && pos == 0 ? 0 : outb[0];
      }
      u32* reply = reinterpret_cast<u32*>((w1 & 0xffffffffu) | (w2 << 32));
      M<false>::st32(reply, static_cast<u32>(w0[k]) + rc);
      ++served;
      worked = true;
    }
    if (worked) { idle = 0; continue; }
    if ((++idle & 1023) == 0 && M<false>::ld(stop) != 0) break;
  }
  atomicAdd(served_total, served);
}

template <bool SB, bool BATCH, bool HANDLER, u32 SPIN = 8>
static void run_case2(const char* name, Dev& d, u64 depth, u32 sblocks, u32 sthreads, int sms) {
  init_slots(d, 1, depth);
  cudaFuncAttributes a;
  CK(cudaFuncGetAttributes(&a, service2<BATCH, HANDLER>));
  CK(cudaFuncGetAttributes(&a, sender2<SB, SPIN>));
  service2<BATCH, HANDLER><<<sblocks, sthreads, 0, d.s_serv>>>(d.slots, depth, d.stop, d.served);
  CK(cudaGetLastError());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  double rt_ns = -1, tput = -1;
  const u64 tasks = 20000;
  sender2<SB, SPIN><<<1, 1, 0, d.s_send>>>(d.slots, depth - 1, d.replies, tasks, 1000, d.out, d.fails);
  if (!wait_stream(d.s_send, 10)) { printf("HUNG\n"); exit(2); }
  u64 ns = 0;
  CK(cudaMemcpy(&ns, d.out, 8, cudaMemcpyDeviceToHost));
  rt_ns = double(ns) / tasks;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0, d.s_send));
  sender2<SB, SPIN><<<sms, 128, 0, d.s_send>>>(d.slots, depth - 1, d.replies, 1000, 0, d.out, d.fails);
  CK(cudaEventRecord(e1, d.s_send));
  if (!wait_stream(d.s_send, 20)) { printf("HUNG\n"); exit(2); }
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  tput = double(sms) * 128 * 1000 / (ms * 1e-3);
  const u64 one = 1;
  CK(cudaMemcpyAsync(d.stop, &one, 8, cudaMemcpyHostToDevice, d.s_ctl));
  if (!wait_stream(d.s_serv, 10)) { printf("SERVICE HUNG\n"); exit(2); }
  printf("%-40s depth %6llu service %3ux%-4u | RT %8.1f ns | %dx128 x1000: %8.1f M/s\n", name,
         (unsigned long long)depth, sblocks, sthreads, rt_ns, sms, tput / 1e6);
  fflush(stdout);
}

template <bool SYS>
static double floor_case(Dev& a, Dev& b, u64* wa, u64* wb) {
  const u64 rounds = 20000;
  CK(cudaSetDevice(a.id));
  CK(cudaMemset(wa, 0, 8));
  CK(cudaSetDevice(b.id));
  CK(cudaMemset(wb, 0, 8));
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(a.id));
  CK(cudaDeviceSynchronize());
  cudaFuncAttributes at;
  CK(cudaFuncGetAttributes(&at, pingpong<SYS>));
  CK(cudaSetDevice(b.id));
  pingpong<SYS><<<1, 32, 0, b.s_serv>>>(wb, wa, rounds, 0, b.out);
  CK(cudaSetDevice(a.id));
  pingpong<SYS><<<1, 32, 0, a.s_send>>>(wa, wb, rounds, 1, a.out);
  if (!wait_stream(a.s_send, 10) || !wait_stream(b.s_serv, 10)) { printf("floor HUNG\n"); exit(2); }
  u64 o[2];
  CK(cudaMemcpy(o, a.out, 16, cudaMemcpyDeviceToHost));
  return double(o[0]) / double(o[1]);
}

int main(int argc, char** argv) {
  const bool host_only = argc > 1;
  const bool skip_host = argc > 1 && std::string(argv[1]) == "bisect";
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  std::vector<Dev> d(n);
  int sms = 0;
  for (int i = 0; i < n; ++i) {
    CK(cudaSetDevice(i));
    if (i == 0) CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    d[i].id = i;
    CK(cudaMalloc(&d[i].slots, sizeof(Slot) * MAXDEPTH));
    CK(cudaMalloc(&d[i].counter, 8));
    CK(cudaMalloc(&d[i].replies, 4 * MAXSENDERS));
    CK(cudaMalloc(&d[i].out, 16));
    CK(cudaMalloc(&d[i].fails, 4));
    CK(cudaMalloc(&d[i].stop, 8));
    CK(cudaMalloc(&d[i].served, 8));
    CK(cudaStreamCreateWithFlags(&d[i].s_serv, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&d[i].s_send, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&d[i].s_ctl, cudaStreamNonBlocking));
  }
  if (n >= 2) {
    CK(cudaSetDevice(0));
    CK(cudaDeviceEnablePeerAccess(1, 0));
    CK(cudaSetDevice(1));
    CK(cudaDeviceEnablePeerAccess(0, 0));
  }
  // Floors: two blocks' words on one device.
  u64* w;
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&w, 256));
  printf("SMs %d, devices %d\n", sms, n);
  printf("floor device ping-pong (gpu scope): %.1f ns\n", floor_case<false>(d[0], d[0], w, w + 8));
  printf("floor device ping-pong (sys scope): %.1f ns\n", floor_case<true>(d[0], d[0], w, w + 8));
  {
    u64 *hrec, *hans, *drec, *dans;
    CK(cudaSetDevice(0));
    CK(cudaHostAlloc(&hrec, 4096, cudaHostAllocMapped));
    CK(cudaHostAlloc(&hans, 4096, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&drec, hrec, 0));
    CK(cudaHostGetDevicePointer(&dans, hans, 0));
    for (int rep = 0; rep < (skip_host ? 0 : 2); ++rep) {
      printf("host floor (one word each way): %.1f ns\n", host_case<3>(hrec, drec, hans, dans));
      printf("host record, header first + fence (landed): %.1f ns\n", host_case<0>(hrec, drec, hans, dans));
      printf("host record, whole poll, no fence: %.1f ns\n", host_case<1>(hrec, drec, hans, dans));
      printf("host record, whole poll, fence: %.1f ns\n", host_case<2>(hrec, drec, hans, dans));
      printf("host record, 8 lanes a word, no fence: %.1f ns\n", host_case<4>(hrec, drec, hans, dans));
      printf("host record, 8 lanes a word, fence: %.1f ns\n", host_case<5>(hrec, drec, hans, dans));
      printf("host record, 4 lanes a pair, no fence: %.1f ns\n", host_case<6>(hrec, drec, hans, dans));
      printf("host record, one thread volatile v2 x4: %.1f ns\n", host_case<7>(hrec, drec, hans, dans));
    }
  }
  if (host_only) {
    const u32 q = sms / 4;
    CK(cudaSetDevice(0));
    run_case2<false, false, false>("A claim narrow (probe)", d[0], 16384, q, 128, sms);
    run_case2<true, false, false>("B A + sender backoff sleeps", d[0], 16384, q, 128, sms);
    run_case2<false, true, false>("C A + batched service polls", d[0], 16384, q, 128, sms);
    run_case2<false, false, true>("D A + handler buffers", d[0], 16384, q, 128, sms);
    run_case2<true, true, true>("E all three", d[0], 16384, q, 128, sms);
    run_case2<false, true, true>("F batched + handler, bare sender", d[0], 16384, q, 128, sms);
    run_case2<true, true, true, 64>("G all three, sender spins 64 polls", d[0], 16384, q, 128, sms);
    run_case2<true, true, true, 256>("H all three, sender spins 256 polls", d[0], 16384, q, 128, sms);
    return 0;
  }
  const u32 q = sms / 4;
  run_case<0, false, false, true>("T ticketed (landed)", d[0], d[0], 16384, q, 128, sms);
  run_case<0, true, false, true>("T ticketed sys", d[0], d[0], 16384, q, 128, sms);
  run_case<1, false, false, false>("C claim, narrow poll", d[0], d[0], 8192, q, 128, sms);
  run_case<1, false, true, false>("C claim, wide poll", d[0], d[0], 8192, q, 128, sms);
  run_case<1, true, true, false>("C claim sys, wide poll", d[0], d[0], 8192, q, 128, sms);
  run_case<1, false, true, true>("C claim, wide poll, rel reply", d[0], d[0], 8192, q, 128, sms);
  run_case<1, false, true, false>("C claim, wide poll", d[0], d[0], 16384, q, 128, sms);
  run_case<1, false, true, false>("C claim, wide poll", d[0], d[0], 32768, q, 128, sms);
  run_case<1, false, true, false>("C claim, wide poll", d[0], d[0], 8192, q, 256, sms);
  run_case<1, false, false, false>("C claim, narrow poll", d[0], d[0], 32768, q, 256, sms);
  run_case<2, false, false, false>("X exclusive, narrow poll", d[0], d[0], 32768, q, 128, sms);
  run_case<2, false, true, false>("X exclusive, wide poll", d[0], d[0], 32768, q, 128, sms);
  run_case<2, false, true, false>("X exclusive, wide poll", d[0], d[0], 32768, q, 256, sms);
  if (n >= 2) {
    u64* w1;
    CK(cudaSetDevice(1));
    CK(cudaMalloc(&w1, 256));
    printf("floor peer ping-pong: %.1f ns\n", floor_case<true>(d[0], d[1], w, w1));
    run_case<0, true, false, true>("peer T ticketed", d[0], d[1], 16384, q, 128, sms);
    run_case<1, true, false, false>("peer C claim, narrow poll", d[0], d[1], 8192, q, 128, sms);
    run_case<1, true, true, false>("peer C claim, wide poll", d[0], d[1], 8192, q, 128, sms);
    run_case<2, true, true, false>("peer X exclusive, wide poll", d[0], d[1], 32768, q, 128, sms);
  }
  return 0;
}
