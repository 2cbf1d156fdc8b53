// A raw CUDA probe, run for docs/perf/2026-12-02-h200-resident-kernel-waits.md: which driver calls return
// while a persistent kernel runs on a non-blocking stream (as the GPU service does) and which
// wait for it to end. Each call runs on a thread of its own; one that has not returned after
// 1.5 s is reported as waiting, the kernel is released, and the call's eventual return is
// reported too. The module rows load tiny.cubin, built from
//   extern "C" __global__ void tiny(int* p) { if (p) *p = 1; }
// Build and run on the GPU machine:
//   nvcc -cubin -arch=sm_90 -o tiny.cubin tiny.cu
//   nvcc -O2 -std=c++17 -arch=sm_90 -o driver_probe driver_probe.cu -lcuda && ./driver_probe
#include <cuda.h>
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <thread>
#include <vector>

__global__ void spin(volatile unsigned* flag, unsigned* started) {
  if (threadIdx.x == 0) atomicAdd(started, 1u);
  while (*flag == 0) __nanosleep(1000);
}

// %globaltimer's step: one thread reads it until it has changed 4096 times.
__global__ void timer_steps(unsigned long long* out) {
  unsigned long long last, now, lo = ~0ull, hi = 0, sum = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(last));
  for (int k = 0; k < 4096; ++k) {
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now == last);
    const unsigned long long d = now - last;
    lo = d < lo ? d : lo; hi = d > hi ? d : hi; sum += d; last = now;
  }
  out[0] = lo; out[1] = hi; out[2] = sum / 4096;
}

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* s; cuGetErrorName(r_, &s); printf("FAIL %s: %s\n", #x, s); exit(1);} } while (0)

static unsigned* flag;
static unsigned* started;
static CUstream s_spin, s_other;
static std::vector<char> cubin;

using Op = std::function<CUresult()>;

struct Case { const char* name; std::function<void()> setup; Op op; std::function<void()> teardown; };

static void run(const Case& c) {
  if (c.setup) c.setup();
  *flag = 0; *started = 0;
  spin<<<4, 128, 0, (cudaStream_t)s_spin>>>(flag, started);
  while (__atomic_load_n(started, __ATOMIC_ACQUIRE) < 4) {}
  std::atomic<int> done{0};
  CUresult rc = CUDA_SUCCESS;
  auto t0 = std::chrono::steady_clock::now();
  double took_ms = 0;
  std::thread t([&] {
    CUcontext ctx; cuDevicePrimaryCtxRetain(&ctx, 0); cuCtxSetCurrent(ctx);
    rc = c.op();
    took_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    done.store(1);
  });
  while (!done.load() && std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500)) std::this_thread::sleep_for(std::chrono::microseconds(200));
  bool waited = !done.load();
  *flag = 1;
  CK(cuStreamSynchronize(s_spin));
  t.join();
  const char* rs; cuGetErrorName(rc, &rs);
  if (waited) printf("PROBE %-62s WAITS for the kernel (returned %s once it ended)\n", c.name, rs);
  else printf("PROBE %-62s returns while it runs: %.3f ms, %s\n", c.name, took_ms, rs);
  if (c.teardown) c.teardown();
}

int main() {
  CK(cuInit(0));
  CUdevice dev; CK(cuDeviceGet(&dev, 0));
  CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  char name[128]; cuDeviceGetName(name, sizeof name, dev);
  int drv = 0; cuDriverGetVersion(&drv);
  printf("PROBE device %s, driver API %d, CUDA_MODULE_LOADING=%s\n", name, drv, getenv("CUDA_MODULE_LOADING") ? getenv("CUDA_MODULE_LOADING") : "(unset: lazy)");
  CK(cuMemHostAlloc((void**)&flag, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  started = flag + 32;
  CK(cuStreamCreate(&s_spin, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s_other, CU_STREAM_NON_BLOCKING));
  { std::ifstream f("tiny.cubin", std::ios::binary); cubin.assign(std::istreambuf_iterator<char>(f), {}); }
  {
    unsigned long long* t; CK(cuMemHostAlloc((void**)&t, 64, CU_MEMHOSTALLOC_DEVICEMAP));
    timer_steps<<<1, 1>>>(t); CK(cuCtxSynchronize());
    printf("PROBE %%globaltimer steps: min %llu ns, max %llu ns, mean %llu ns\n", t[0], t[1], t[2]);
    cuMemFreeHost(t);
  }
  // Warm the spin kernel's loading so it is not measured.
  *flag = 1; spin<<<1, 32, 0, (cudaStream_t)s_spin>>>(flag, started); CK(cuStreamSynchronize(s_spin));

  CUdeviceptr dp = 0; void* hp = nullptr; void* reg = nullptr; CUmodule mod = nullptr; CUfunction fn = nullptr;
  CUmemGenericAllocationHandle vh = 0; CUdeviceptr va = 0; size_t gran = 0;
  const size_t MB = 1 << 20;
  std::vector<Case> cases = {
    {"cuMemAlloc 1 MiB", nullptr, [&] { return cuMemAlloc(&dp, MB); }, [&] { cuMemFree(dp); }},
    {"cuMemFree (a cuMemAlloc from before)", [&] { CK(cuMemAlloc(&dp, MB)); }, [&] { return cuMemFree(dp); }, nullptr},
    {"cuMemFree 64 MiB (a cuMemAlloc from before)", [&] { CK(cuMemAlloc(&dp, 64 * MB)); }, [&] { return cuMemFree(dp); }, nullptr},
    {"cuMemFreeAsync of a cuMemAlloc, other stream, + its sync", [&] { CK(cuMemAlloc(&dp, MB)); },
     [&] { CUresult r = cuMemFreeAsync(dp, s_other); return r != CUDA_SUCCESS ? r : cuStreamSynchronize(s_other); }, nullptr},
    {"cuMemAllocAsync + cuMemFreeAsync (pool), other stream, + sync", nullptr,
     [&] { CUresult r = cuMemAllocAsync(&dp, MB, s_other); if (r) return r; r = cuMemFreeAsync(dp, s_other); return r ? r : cuStreamSynchronize(s_other); }, nullptr},
    {"cuMemHostAlloc 1 MiB (DEVICEMAP|PORTABLE)", nullptr, [&] { return cuMemHostAlloc(&hp, MB, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE); }, [&] { cuMemFreeHost(hp); }},
    {"cuMemFreeHost (a cuMemHostAlloc from before)", [&] { CK(cuMemHostAlloc(&hp, MB, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)); }, [&] { return cuMemFreeHost(hp); }, nullptr},
    {"cuMemHostRegister 1 MiB (DEVICEMAP|PORTABLE)", [&] { reg = aligned_alloc(4096, MB); }, [&] { return cuMemHostRegister(reg, MB, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE); }, [&] { cuMemHostUnregister(reg); free(reg); }},
    {"cuMemHostUnregister", [&] { reg = aligned_alloc(4096, MB); CK(cuMemHostRegister(reg, MB, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE)); }, [&] { return cuMemHostUnregister(reg); }, [&] { free(reg); }},
    {"cuModuleLoadData (cubin)", nullptr, [&] { return cuModuleLoadData(&mod, cubin.data()); }, [&] { cuModuleUnload(mod); }},
    {"cuModuleGetFunction + launch + sync, module loaded before", [&] { CK(cuModuleLoadData(&mod, cubin.data())); },
     [&] { CUresult r = cuModuleGetFunction(&fn, mod, "tiny"); if (r) return r; void* nul = nullptr; void* args[] = {&nul};
           r = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s_other, args, nullptr); return r ? r : cuStreamSynchronize(s_other); }, [&] { cuModuleUnload(mod); }},
    {"launch + sync, function got (and launched) before", [&] { CK(cuModuleLoadData(&mod, cubin.data())); CK(cuModuleGetFunction(&fn, mod, "tiny")); void* nul = nullptr; void* args[] = {&nul}; CK(cuLaunchKernel(fn, 1,1,1,1,1,1,0,s_other,args,nullptr)); CK(cuStreamSynchronize(s_other)); },
     [&] { void* nul = nullptr; void* args[] = {&nul}; CUresult r = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s_other, args, nullptr); return r ? r : cuStreamSynchronize(s_other); }, [&] { cuModuleUnload(mod); }},
    {"cuModuleUnload (function got and launched before)", [&] { CK(cuModuleLoadData(&mod, cubin.data())); CK(cuModuleGetFunction(&fn, mod, "tiny")); void* nul = nullptr; void* args[] = {&nul}; CK(cuLaunchKernel(fn, 1,1,1,1,1,1,0,s_other,args,nullptr)); CK(cuStreamSynchronize(s_other)); },
     [&] { return cuModuleUnload(mod); }, nullptr},
    {"cuMemcpyHtoDAsync on a non-blocking stream + its sync", [&] { CK(cuMemAlloc(&dp, MB)); CK(cuMemHostAlloc(&hp, MB, 0)); },
     [&] { CUresult r = cuMemcpyHtoDAsync(dp, hp, MB, s_other); return r ? r : cuStreamSynchronize(s_other); }, [&] { cuMemFree(dp); cuMemFreeHost(hp); }},
    {"cuMemcpyHtoD (synchronous)", [&] { CK(cuMemAlloc(&dp, MB)); CK(cuMemHostAlloc(&hp, MB, 0)); },
     [&] { return cuMemcpyHtoD(dp, hp, MB); }, [&] { cuMemFree(dp); cuMemFreeHost(hp); }},
    {"cuStreamCreate + cuStreamDestroy", nullptr, [&] { CUstream s; CUresult r = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING); return r ? r : cuStreamDestroy(s); }, nullptr},
    {"cuEventCreate + cuEventDestroy", nullptr, [&] { CUevent e; CUresult r = cuEventCreate(&e, 0); return r ? r : cuEventDestroy(e); }, nullptr},
    {"cuMemUnmap + cuMemRelease + cuMemAddressFree (VMM, fd-shareable)", [&] {
       CUmemAllocationProp p{}; p.type = CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type = CU_MEM_LOCATION_TYPE_DEVICE; p.location.id = 0;
       p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
       CK(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM)); CK(cuMemCreate(&vh, gran, &p, 0));
       CK(cuMemAddressReserve(&va, gran, 0, 0, 0)); CK(cuMemMap(va, gran, 0, vh, 0));
       CUmemAccessDesc a{}; a.location = p.location; a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE; CK(cuMemSetAccess(va, gran, &a, 1)); },
     [&] { CUresult r = cuMemUnmap(va, gran); if (r) return r; r = cuMemRelease(vh); return r ? r : cuMemAddressFree(va, gran); }, nullptr},
    {"cuMemCreate + map + set access (VMM, fd-shareable)", nullptr, [&] {
       CUmemAllocationProp p{}; p.type = CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type = CU_MEM_LOCATION_TYPE_DEVICE; p.location.id = 0;
       p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
       CUresult r = cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM); if (r) return r;
       r = cuMemCreate(&vh, gran, &p, 0); if (r) return r; r = cuMemAddressReserve(&va, gran, 0, 0, 0); if (r) return r;
       r = cuMemMap(va, gran, 0, vh, 0); if (r) return r;
       CUmemAccessDesc a{}; a.location = p.location; a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE; return cuMemSetAccess(va, gran, &a, 1); },
     [&] { cuMemUnmap(va, gran); cuMemRelease(vh); cuMemAddressFree(va, gran); }},
    {"cuMemAllocManaged 1 MiB + cuMemFree", nullptr, [&] { CUresult r = cuMemAllocManaged(&dp, MB, CU_MEM_ATTACH_GLOBAL); return r ? r : cuMemFree(dp); }, nullptr},
    {"cuEventQuery of an event recorded after the kernel", nullptr, [&] { CUevent e; CUresult r = cuEventCreate(&e, CU_EVENT_DISABLE_TIMING); if (r) return r;
       r = cuEventRecord(e, s_spin); if (r) return r; r = cuEventQuery(e); cuEventDestroy(e); return r; }, nullptr},
    {"cuStreamQuery of the kernel's stream", nullptr, [&] { return cuStreamQuery(s_spin); }, nullptr},
    {"cuMemFreeAsync of a cuMemAlloc on the kernel's own stream (no sync)", [&] { CK(cuMemAlloc(&dp, MB)); }, [&] { return cuMemFreeAsync(dp, s_spin); }, nullptr},
    {"cuCtxSynchronize (control: must wait)", nullptr, [&] { return cuCtxSynchronize(); }, nullptr},
  };
  for (const Case& c : cases) run(c);
  return 0;
}
