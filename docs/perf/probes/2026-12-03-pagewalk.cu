// After a 1 s pause (asleep or spinning), what reading 4 lines costs: one line in each of 4
// 4 KiB pages of one 2 MiB range, or 4 lines of one 4 KiB page, by how the memory was mapped:
// anonymous 4 KiB pages, anonymous pages advised MADV_HUGEPAGE, a memfd (shmem) mapping as the
// runtime's segment is now, either registered with CUDA, and cudaHostAlloc. Each read is timed
// alone. Also prints each mapping's AnonHugePages/ShmemPmdMapped from /proc/self/smaps.
// On a CUDA machine: nvcc -O2 -o pagewalk pagewalk.cu && ./pagewalk [spin]
// Without CUDA (the CUDA kinds are left out): g++ -O2 -x c++ -o pagewalk pagewalk.cu
#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif
#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
using clk = std::chrono::steady_clock;
static const size_t LEN = 64 << 20, HUGE = 2 << 20;
static std::string smaps_of(void* p) {
  FILE* f = fopen("/proc/self/smaps", "r");
  char line[512];
  bool in = false;
  std::string out;
  unsigned long a = (unsigned long)p;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = a >= lo && a < hi;
      continue;
    }
    if (in && (!strncmp(line, "AnonHugePages", 13) || !strncmp(line, "ShmemPmdMapped", 14) ||
               !strncmp(line, "FilePmdMapped", 13))) {
      line[strcspn(line, "\n")] = 0;
      out += std::string(" ") + line;
    }
  }
  fclose(f);
  return out;
}
static char* region(const std::string& kind) {
  char* p = nullptr;
  if (kind == "hostalloc") {
#ifdef __CUDACC__
    if (cudaHostAlloc((void**)&p, LEN + HUGE, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) return nullptr;
#else
    return nullptr;
#endif
  } else if (kind.rfind("memfd", 0) == 0) {
    int fd = memfd_create("probe", 0);
    if (ftruncate(fd, LEN + HUGE)) return nullptr;
    p = (char*)mmap(nullptr, LEN + HUGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (kind == "memfd_adv") madvise(p, LEN + HUGE, MADV_HUGEPAGE);
  } else {
    p = (char*)mmap(nullptr, LEN + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (kind.rfind("thp", 0) == 0) madvise(p, LEN + HUGE, MADV_HUGEPAGE);
  }
  memset(p, 1, LEN + HUGE);
  if (kind.size() > 4 && kind.substr(kind.size() - 4) == "_reg") {
#ifndef __CUDACC__
    return nullptr;
#else
    cudaError_t e = cudaHostRegister(p, LEN + HUGE, cudaHostRegisterPortable | cudaHostRegisterMapped);
    if (e != cudaSuccess) { printf("%s: register failed: %s\n", kind.c_str(), cudaGetErrorString(e)); return nullptr; }
#endif
  }
  return p;
}
int main(int argc, char**) {
#ifdef __CUDACC__
  cudaFree(0);
#endif
  int spin = argc > 1;
  for (std::string kind : {"anon4k", "thp", "memfd", "memfd_adv", "memfd_reg", "thp_reg", "hostalloc"}) {
    char* p = region(kind);
    if (!p) { printf("%s: no region\n", kind.c_str()); continue; }
    volatile unsigned long* base = (volatile unsigned long*)(((unsigned long)p + HUGE - 1) & ~(HUGE - 1));
    printf("%-10s%s\n", kind.c_str(), smaps_of((void*)base).c_str());
    for (int shape = 0; shape < 2; ++shape) {
      size_t offs[4];
      for (int i = 0; i < 4; ++i) offs[i] = shape == 0 ? 8 + i * 4096 * 37 / 8 : 8 + i * 72;
      std::vector<std::vector<long>> runs;
      for (int r = 0; r < 5; ++r) {
        if (spin) { auto t = clk::now(); while (clk::now() - t < std::chrono::seconds(1)) __builtin_ia32_pause(); }
        else std::this_thread::sleep_for(std::chrono::seconds(1));
        std::vector<long> each(4);
        for (int k = 0; k < 4; ++k) {
          auto t = clk::now();
          (void)base[offs[k]];
          each[k] = std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - t).count();
        }
        runs.push_back(each);
      }
      auto sum = [](const std::vector<long>& e) { long s = 0; for (long x : e) s += x; return s; };
      std::sort(runs.begin(), runs.end(), [&](auto& a, auto& b) { return sum(a) < sum(b); });
      printf("  %-9s %-6s %s: median %5ld ns (each %ld %ld %ld %ld); sums", kind.c_str(), shape ? "1page" : "4pages",
             spin ? "spin" : "sleep", sum(runs[2]), runs[2][0], runs[2][1], runs[2][2], runs[2][3]);
      for (auto& e : runs) printf(" %ld", sum(e));
      printf("\n");
    }
  }
}
