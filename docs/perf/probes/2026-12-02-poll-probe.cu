// A raw CUDA probe, run for docs/perf/2026-12-02-h200-route-costs.md: what a read of the GPU's
// clocks costs a thread (%globaltimer, which tandem::timer_ns reads, and clock64), and whether
// a poller that keeps K staggered loads of the awaited word in flight sees a write sooner than
// one that waits for each load before it issues the next (K = 1, the floors' way): through
// pinned host memory (a host thread echoing, as the roundtrip bench's pinned floor) and through
// device memory (two blocks, as its device floor).
// Build and run on the GPU machine: nvcc -O3 -std=c++17 -arch=sm_90 -o poll_probe
// poll_probe.cu, then ./poll_probe.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

typedef unsigned long long u64;
typedef unsigned u32;

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e = (x);                                                                    \
    if (e != cudaSuccess) {                                                                 \
      printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e));                   \
      exit(3);                                                                              \
    }                                                                                       \
  } while (0)

template <bool SYS>
struct M;
#define DEF(SYS, S)                                                                         \
  template <>                                                                               \
  struct M<SYS> {                                                                           \
    static __device__ __forceinline__ u64 ld(const u64* p) {                                \
      u64 r;                                                                                \
      asm volatile("ld.relaxed." S ".u64 %0,[%1];" : "=l"(r) : "l"(p) : "memory");         \
      return r;                                                                             \
    }                                                                                       \
    static __device__ __forceinline__ u64 ldacq(const u64* p) {                             \
      u64 r;                                                                                \
      asm volatile("ld.acquire." S ".u64 %0,[%1];" : "=l"(r) : "l"(p) : "memory");         \
      return r;                                                                             \
    }                                                                                       \
    static __device__ __forceinline__ void strel(u64* p, u64 v) {                           \
      asm volatile("st.release." S ".u64 [%0],%1;" ::"l"(p), "l"(v) : "memory");           \
    }                                                                                       \
    static __device__ __forceinline__ void fence() {                                        \
      asm volatile("fence.acq_rel." S ";" ::: "memory");                                    \
    }                                                                                       \
  };
DEF(false, "gpu")
DEF(true, "sys")

__device__ __forceinline__ u64 gtimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- the clocks: `reads` back-to-back reads of each, timed by the other.
__global__ void clock_cost(u64 reads, u64* out) {
  u64 sink = 0;
  const u64 c0 = clock64(), g0 = gtimer();
  for (u64 i = 0; i < reads; ++i) sink += gtimer();
  const u64 c1 = clock64(), g1 = gtimer();
  for (u64 i = 0; i < reads; ++i) sink += clock64();
  const u64 c2 = clock64(), g2 = gtimer();
  out[0] = c1 - c0;  // cycles, globaltimer reads
  out[1] = g1 - g0;  // ns, globaltimer reads
  out[2] = c2 - c1;  // cycles, clock64 reads
  out[3] = g2 - g1;  // ns, clock64 reads
  out[4] = sink;
}

// Waits until *p == want. ACQ: the floors' loop, an acquire load waited for, then the next
// (K is 1). Else relaxed loads, K of them in flight, each reissued as it returns (after a
// start staggered by `gap` cycles), and a fence once the value is seen: a write is then seen
// by the first load issued after it lands, about RTT / K after it rather than RTT / 2.
template <bool SYS, bool ACQ, int K>
__device__ __forceinline__ bool await(const u64* p, u64 want, u64 gap, u64 budget) {
  if (ACQ) {
    for (u64 s = 0; s < budget; ++s)
      if (M<SYS>::ldacq(p) == want) return true;
    return false;
  }
  u64 v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    v[k] = M<SYS>::ld(p);
    const u64 until = clock64() + gap;
    while (k + 1 < K && (u64)clock64() < until) {
    }
  }
  for (u64 s = 0; s < budget; s += K) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (v[k] == want) {
        M<SYS>::fence();
        return true;
      }
      v[k] = M<SYS>::ld(p);
    }
  }
  return false;
}

// ---- the pinned floor: thread 0 writes i to words[0] and awaits i in words[1], which a host
// thread echoes.
template <bool ACQ, int K>
__global__ void pinned_pingpong(u64* words, u64 rounds, u64 gap, u64* done) {
  u64 n = 0;
  for (u64 i = 1; i <= rounds; ++i) {
    M<true>::strel(&words[0], i);
    if (!await<true, ACQ, K>(&words[1], i, gap, 1ull << 30)) break;
    n = i;
  }
  *done = n;
}

// ---- the device floor: block 0 writes words[0] and awaits words[1]; block 1 echoes.
template <bool ACQ, int K>
__global__ void device_pingpong(u64* words, u64 rounds, u64 gap, u64* done) {
  if (threadIdx.x != 0) return;
  const bool leader = blockIdx.x == 0;
  u64 n = 0;
  for (u64 i = 1; i <= rounds; ++i) {
    if (leader) M<false>::strel(&words[0], i);
    if (!await<false, ACQ, K>(leader ? &words[1] : &words[0], i, gap, 1ull << 30)) break;
    if (!leader) M<false>::strel(&words[1], i);
    n = i;
  }
  if (leader) *done = n;
}

template <bool ACQ, int K>
double run_pinned(u64 rounds, u64 gap) {
  u64 *words, *done;
  CK(cudaHostAlloc(&words, 128, cudaHostAllocMapped));
  CK(cudaHostAlloc(&done, 8, cudaHostAllocMapped));
  words[0] = words[1] = 0;
  *done = 0;
  u64 *dw, *dd;
  CK(cudaHostGetDevicePointer(&dw, words, 0));
  CK(cudaHostGetDevicePointer(&dd, done, 0));
  std::atomic<u64>* req = reinterpret_cast<std::atomic<u64>*>(&words[0]);
  std::atomic<u64>* ans = reinterpret_cast<std::atomic<u64>*>(&words[1]);
  const auto t0 = std::chrono::steady_clock::now();
  pinned_pingpong<ACQ, K><<<1, 1>>>(dw, rounds, gap, dd);
  CK(cudaGetLastError());
  u64 seen = 0;
  while (seen < rounds) {
    const u64 v = req->load(std::memory_order_acquire);
    if (v != seen) {
      seen = v;
      ans->store(v, std::memory_order_release);
    } else {
      __builtin_ia32_pause();
    }
  }
  CK(cudaDeviceSynchronize());
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const u64 n = *done;
  CK(cudaFreeHost(words));
  CK(cudaFreeHost(done));
  return n == rounds ? us / rounds : -1.0;
}

template <bool ACQ, int K>
double run_device(u64 rounds, u64 gap) {
  u64* words;
  CK(cudaMalloc(&words, 256));
  CK(cudaMemset(words, 0, 256));
  const auto t0 = std::chrono::steady_clock::now();
  device_pingpong<ACQ, K><<<2, 1>>>(words, rounds, gap, words + 16);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  u64 n = 0;
  CK(cudaMemcpy(&n, words + 16, 8, cudaMemcpyDeviceToHost));
  CK(cudaFree(words));
  return n == rounds ? us / rounds : -1.0;
}

// The median of 5 runs of `f`, and its spread.
template <typename F>
void row(const char* name, F f) {
  std::vector<double> v;
  for (int r = 0; r < 5; ++r) v.push_back(f());
  std::sort(v.begin(), v.end());
  printf("  %-44s %6.3f us (median of 5; %.3f - %.3f)\n", name, v[2], v[0], v[4]);
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  u64* out;
  CK(cudaMallocManaged(&out, 5 * 8));
  const u64 reads = 1 << 16;
  clock_cost<<<1, 1>>>(reads, out);  // warm-up
  CK(cudaDeviceSynchronize());
  clock_cost<<<1, 1>>>(reads, out);
  CK(cudaDeviceSynchronize());
  const double hz = double(out[0]) / double(out[1]);  // cycles per ns
  printf("clock reads, %llu back to back (one thread; SM clock %.3f GHz by the two clocks):\n", reads, hz);
  printf("  %%globaltimer: %.1f cycles, %.1f ns a read\n", double(out[0]) / reads, double(out[1]) / reads);
  printf("  clock64:      %.1f cycles, %.1f ns a read\n", double(out[2]) / reads, double(out[3]) / reads);
  const u64 rounds = 100000;
  // Staggers: a pinned read's round trip is about 1.5-2k cycles, a device-memory one a few
  // hundred; each K spreads its loads over about one round trip.
  printf("pinned-memory ping-pong with a host thread (%llu rounds):\n", rounds);
  row("acquire loads, one at a time (the floor's)", [&] { return run_pinned<true, 1>(rounds, 0); });
  row("relaxed loads, one at a time", [&] { return run_pinned<false, 1>(rounds, 0); });
  row("relaxed, K = 2 staggered in flight", [&] { return run_pinned<false, 2>(rounds, 900); });
  row("relaxed, K = 4 staggered in flight", [&] { return run_pinned<false, 4>(rounds, 450); });
  row("relaxed, K = 8 staggered in flight", [&] { return run_pinned<false, 8>(rounds, 225); });
  printf("device-memory ping-pong, two blocks (%llu rounds):\n", rounds);
  row("acquire loads, one at a time (the floor's)", [&] { return run_device<true, 1>(rounds, 0); });
  row("relaxed loads, one at a time", [&] { return run_device<false, 1>(rounds, 0); });
  row("relaxed, K = 2 staggered in flight", [&] { return run_device<false, 2>(rounds, 250); });
  row("relaxed, K = 4 staggered in flight", [&] { return run_device<false, 4>(rounds, 125); });
  return 0;
}
