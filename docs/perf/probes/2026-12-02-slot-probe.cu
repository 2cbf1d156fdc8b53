// A raw CUDA probe for docs/perf (session 15): what the GPU service's take of a task costs
// when its head needs a second load after the poll that found it, against a head the poll
// itself carries. One launch: blocks 0..S-1 of 128 threads are the service, each thread
// polling P slots of device memory every round (as rt_serve's mailbox servers); the last block's
// thread 0 sends N no-op tasks, one at a time, through one slot and waits for each answer in a
// reply word of its own. Modes:
//   floor    two blocks ping-pong one word each way (the roundtrip bench's device floor);
//   two-load the landed protocol's shape: the sender stores the head's first word, then three
//            pairs; a poll loads (ctrl, word 0); a hit loads the three pairs (a second round);
//   one-load the head in one 16-byte pair, stored by one instruction and polled by one load
//            (the slot's lap kept by its server, so the poll needs no ctrl);
//   two-pair the head in two pairs, the second stored first; a poll loads both in one round,
//            the first one first, and a take whose second pair is not this lap's loads it again
//            (counted: `split`);
//   dense-two, dense-one  two-load and one-load with the polled 16 bytes of each slot (ctrl and
//            word 0; the one-load pair) in an array of their own, 16 bytes apart, so a warp's
//            polls of its lanes' consecutive slots read 4 lines, not 32; the rest in the slot;
//   one+1, one+2  one-load with one or two more loads a slot in each round, of words only the
//            server writes (its lap, what it keeps of the sender): what more loads cost a round.
// Build and run on the GPU machine: nvcc -O3 -std=c++17 -arch=sm_90 -o slot_probe slot_probe.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

typedef unsigned long long u64;
typedef unsigned u32;

#define CK(x)                                                             \
  do {                                                                    \
    cudaError_t e = (x);                                                  \
    if (e != cudaSuccess) {                                               \
      printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); \
      exit(3);                                                            \
    }                                                                     \
  } while (0)

__device__ __forceinline__ u64 ld(const u64* p) {
  u64 r;
  asm volatile("ld.relaxed.gpu.u64 %0,[%1];" : "=l"(r) : "l"(p) : "memory");
  return r;
}
__device__ __forceinline__ u32 ld32(const u32* p) {
  u32 r;
  asm volatile("ld.relaxed.gpu.u32 %0,[%1];" : "=r"(r) : "l"(p) : "memory");
  return r;
}
__device__ __forceinline__ u64 ldacq(const u64* p) {
  u64 r;
  asm volatile("ld.acquire.gpu.u64 %0,[%1];" : "=l"(r) : "l"(p) : "memory");
  return r;
}
__device__ __forceinline__ void ld2(const u64* p, u64* a, u64* b) {
  asm volatile("ld.relaxed.gpu.v2.u64 {%0,%1},[%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
}
__device__ __forceinline__ void st(u64* p, u64 v) {
  asm volatile("st.relaxed.gpu.u64 [%0],%1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st32(u32* p, u32 v) {
  asm volatile("st.relaxed.gpu.u32 [%0],%1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void strel(u64* p, u64 v) {
  asm volatile("st.release.gpu.u64 [%0],%1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st2(u64* p, u64 a, u64 b) {
  asm volatile("st.relaxed.gpu.v2.u64 [%0],{%1,%2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ u64 gtimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

enum Mode { FLOOR = 0, TWO_LOAD = 1, ONE_LOAD = 2, TWO_PAIR = 3, ONE_E1 = 4, ONE_E2 = 5, DENSE_TWO = 6, DENSE_ONE = 7 };
constexpr int MODES = 8;
constexpr u32 P = 5;  // slots a server polls a round (4 hot LOCAL + 1 shared in rt_serve)

struct alignas(128) Slot {
  u64 w[16];
};
__device__ __forceinline__ u32 tag(u64 lap) { return static_cast<u32>(lap + 1); }
__device__ __forceinline__ bool is(u64 word, u32 t) { return static_cast<u32>(word >> 32) == t; }

struct Out {
  u64 ns;     // the sender's N round trips
  u64 done;   // tasks answered
  u64 split;  // takes whose first look found part of the head not yet landed
  u64 pad;
};

// Slot layouts: TWO_LOAD is the landed one (w[0] ctrl, w[1..] the task's words); ONE_LOAD and
// TWO_PAIR keep the task's words from w[0] and ctrl in w[8].
template <int M>
__global__ void probe(Slot* slots, u64* heads, u32* reply, u64 n, u32 target, u32* stop, Out* out, u64* ping) {
  const u32 me = blockIdx.x * blockDim.x + threadIdx.x;
  if (M == FLOOR) {
    if (threadIdx.x != 0 || (blockIdx.x != 0 && blockIdx.x != gridDim.x - 1)) return;
    const bool leader = blockIdx.x == gridDim.x - 1;
    const u64 t0 = gtimer();
    for (u64 i = 1; i <= n; ++i) {
      if (leader) strel(&ping[0], i);
      u64* aw = leader ? &ping[16] : &ping[0];
      while (ldacq(aw) != i) {
      }
      if (!leader) strel(&ping[16], i);
    }
    if (leader) {
      out->ns = gtimer() - t0;
      out->done = n;
    }
    return;
  }
  if (blockIdx.x == gridDim.x - 1) {
    if (threadIdx.x != 0) return;
    // The sender: slot `target`, the token in the reply word.
    Slot* s = &slots[target];
    const u64 t0 = gtimer();
    for (u64 i = 0; i < n; ++i) {
      const u64 lap = i;
      const u64 t = u64{tag(lap)} << 32;
      const u32 token = static_cast<u32>(i + 1);
      u64* h = &heads[2 * target];
      if (M == DENSE_TWO) {
        st2(&s->w[2], t | token, t | 7);
        st2(&s->w[4], t | 1, t | 2);
        st2(&s->w[6], t | 3, t | 4);
        st(&h[1], t | 0);  // shape, last
      } else if (M == DENSE_ONE) {
        st2(&h[0], t | token, t | 7);
      } else if (M == TWO_LOAD) {
        st(&s->w[1], t | 0);  // shape
        st2(&s->w[2], t | token, t | 7);
        st2(&s->w[4], t | 1, t | 2);
        st2(&s->w[6], t | 3, t | 4);
      } else if (M == ONE_LOAD || M == ONE_E1 || M == ONE_E2) {
        st2(&s->w[0], t | token, t | 7);
      } else {
        st2(&s->w[2], t | 1, t | 2);
        st2(&s->w[0], t | token, t | 7);
      }
      while (ld32(reply) != token) {
      }
    }
    out->ns = gtimer() - t0;
    out->done = n;
    st32(stop, 1);
    return;
  }
  // A server: slots me*P .. me*P+P-1, laps from 0.
  u64 lap[P] = {};
  u64 split = 0, done = 0;
  const u32 servers = (gridDim.x - 1) * blockDim.x;
  for (u64 round = 0;; ++round) {
    if ((round & 1023) == 0 && ld32(stop) != 0) break;
    u64 a[P], b[P], c[P], d[P], e[P], f[P];
#pragma unroll
    for (u32 k = 0; k < P; ++k) {
      Slot* s = &slots[me * P + k];
      // Dense: server me's k-th slot is me + k * servers, so a warp's lanes poll consecutive heads.
      const u32 di = me + k * servers;
      if (M == DENSE_TWO || M == DENSE_ONE) {
        ld2(&heads[2 * di], &a[k], &b[k]);
      } else if (M == TWO_LOAD) {
        ld2(&s->w[0], &a[k], &b[k]);  // ctrl, word 0
      } else if (M == ONE_LOAD) {
        ld2(&s->w[0], &a[k], &b[k]);
      } else if (M == ONE_E1 || M == ONE_E2) {
        ld2(&s->w[0], &a[k], &b[k]);
        ld2(&s->w[8], &c[k], &d[k]);  // the server's own: ctrl and a kept word
        if (M == ONE_E2) ld2(&s->w[10], &e[k], &f[k]);
      } else {
        ld2(&s->w[0], &a[k], &b[k]);
        ld2(&s->w[2], &c[k], &d[k]);
      }
    }
#pragma unroll
    for (u32 k = 0; k < P; ++k) {
      const u32 di = me + k * servers;
      Slot* s = (M == DENSE_TWO || M == DENSE_ONE) ? &slots[di] : &slots[me * P + k];
      u64* h = &heads[2 * di];
      if (M == DENSE_TWO) {
        const u64 l = a[k] >> 1;
        const u32 t = tag(l);
        if (!is(b[k], t)) continue;
        bool first = true;
        for (;;) {
          u64 x1, x2, x3, x4, x5, x6;
          ld2(&s->w[2], &x1, &x2);
          ld2(&s->w[4], &x3, &x4);
          ld2(&s->w[6], &x5, &x6);
          if (is(x1, t) && is(x2, t) && is(x3, t) && is(x4, t) && is(x5, t) && is(x6, t)) {
            st(&h[0], (l + 1) << 1);
            st32(reply, static_cast<u32>(x1));
            break;
          }
          if (first) ++split;
          first = false;
        }
        ++done;
      } else if (M == DENSE_ONE) {
        const u32 t = tag(lap[k]);
        if (!(is(a[k], t) && is(b[k], t))) continue;
        ++lap[k];
        st(&s->w[8], lap[k] << 1);
        st32(reply, static_cast<u32>(a[k]));
        ++done;
      } else if (M == TWO_LOAD) {
        const u64 l = a[k] >> 1;
        const u32 t = tag(l);
        if (!is(b[k], t)) continue;
        bool first = true;
        for (;;) {
          u64 x1, x2, x3, x4, x5, x6;
          ld2(&s->w[2], &x1, &x2);
          ld2(&s->w[4], &x3, &x4);
          ld2(&s->w[6], &x5, &x6);
          if (is(x1, t) && is(x2, t) && is(x3, t) && is(x4, t) && is(x5, t) && is(x6, t)) {
            st(&s->w[0], (l + 1) << 1);
            st32(reply, static_cast<u32>(x1));
            break;
          }
          if (first) ++split;
          first = false;
        }
        ++done;
      } else if (M == ONE_LOAD || M == ONE_E1 || M == ONE_E2) {
        // one+N: the lap from the loaded ctrl (which equals the kept one), and the reply word's
        // token offset by the kept words (zero), so the extra loads are used.
        const u64 l = M == ONE_LOAD ? lap[k] : c[k] >> 1;
        const u32 extra = M == ONE_E1 ? static_cast<u32>(d[k]) : M == ONE_E2 ? static_cast<u32>(d[k] + e[k] + f[k]) : 0;
        const u32 t = tag(l);
        if (!(is(a[k], t) && is(b[k], t))) continue;
        lap[k] = l + 1;
        st(&s->w[8], lap[k] << 1);
        st32(reply, static_cast<u32>(a[k]) + extra);
        ++done;
      } else {
        const u32 t = tag(lap[k]);
        if (!(is(a[k], t) && is(b[k], t))) continue;
        u64 cc = c[k], dd = d[k];
        if (!(is(cc, t) && is(dd, t))) {
          ++split;
          do {
            ld2(&s->w[2], &cc, &dd);
          } while (!(is(cc, t) && is(dd, t)));
        }
        ++lap[k];
        st(&s->w[8], lap[k] << 1);
        st32(reply, static_cast<u32>(a[k]) + static_cast<u32>(cc) - 1);
        ++done;
      }
    }
  }
  if (done != 0 || split != 0) {
    atomicAdd(&out->split, split);
  }
}

int main(int argc, char** argv) {
  const u64 n = argc > 1 ? strtoull(argv[1], nullptr, 10) : 100000;
  const u32 blocks = 33, threads = 128;
  const u32 servers = blocks * threads;
  Slot* slots;
  u32 *reply, *stop;
  Out* out;
  u64* ping;
  CK(cudaMalloc(&slots, sizeof(Slot) * servers * P));
  u64* heads;
  CK(cudaMalloc(&heads, 16 * servers * P));
  CK(cudaMalloc(&reply, 128));
  CK(cudaMalloc(&stop, 128));
  CK(cudaMalloc(&out, sizeof(Out)));
  CK(cudaMalloc(&ping, 256));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs; service %u x %u threads, %u slots polled each a round; %llu tasks a run\n",
         prop.name, prop.multiProcessorCount, blocks, threads, P, n);
  const char* names[] = {"floor", "two-load", "one-load", "two-pair", "one+1", "one+2", "dense-two", "dense-one"};
  // The sender's slot: one a server of block 16 owns, as its k = 0 slot.
  const u32 target = (16 * threads + 37) * P;
  // Dense: the same server's k = 0 slot.
  const u32 dtarget = 16 * threads + 37;
  std::vector<double> res[MODES];
  std::vector<u64> splits[MODES];
  for (int turn = 0; turn < 5; ++turn) {
    for (int m = 0; m < MODES; ++m) {
      CK(cudaMemset(slots, 0, sizeof(Slot) * servers * P));
      CK(cudaMemset(heads, 0, 16 * servers * P));
      CK(cudaMemset(reply, 0, 128));
      CK(cudaMemset(stop, 0, 128));
      CK(cudaMemset(out, 0, sizeof(Out)));
      CK(cudaMemset(ping, 0, 256));
      CK(cudaDeviceSynchronize());
      const u32 grid = blocks + 1;
      switch (m) {
        case 0: probe<FLOOR><<<grid, threads>>>(slots, heads, reply, n, target, stop, out, ping); break;
        case 1: probe<TWO_LOAD><<<grid, threads>>>(slots, heads, reply, n, target, stop, out, ping); break;
        case 2: probe<ONE_LOAD><<<grid, threads>>>(slots, heads, reply, n, target, stop, out, ping); break;
        case 3: probe<TWO_PAIR><<<grid, threads>>>(slots, heads, reply, n, target, stop, out, ping); break;
        case 4: probe<ONE_E1><<<grid, threads>>>(slots, heads, reply, n, target, stop, out, ping); break;
        case 5: probe<ONE_E2><<<grid, threads>>>(slots, heads, reply, n, target, stop, out, ping); break;
        case 6: probe<DENSE_TWO><<<grid, threads>>>(slots, heads, reply, n, dtarget, stop, out, ping); break;
        case 7: probe<DENSE_ONE><<<grid, threads>>>(slots, heads, reply, n, dtarget, stop, out, ping); break;
      }
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      Out o;
      CK(cudaMemcpy(&o, out, sizeof o, cudaMemcpyDeviceToHost));
      res[m].push_back(o.ns / 1000.0 / (o.done ? o.done : 1));
      splits[m].push_back(o.split);
    }
  }
  printf("%-9s %10s %10s %10s %10s   %s\n", "mode", "median us", "min", "max", "x floor", "takes split (per run)");
  std::vector<double> f = res[0];
  std::sort(f.begin(), f.end());
  for (int m = 0; m < MODES; ++m) {
    std::vector<double> v = res[m];
    std::sort(v.begin(), v.end());
    printf("%-9s %10.3f %10.3f %10.3f %10.2f  ", names[m], v[2], v[0], v[4], v[2] / f[2]);
    for (u64 s : splits[m]) printf(" %llu", s);
    printf("\n");
  }
  return 0;
}
