// The CUDA IPC tutorial's producer and consumer, through Tandem's share
// daemon instead of cudaIpcGetMemHandle and a file: the producer creates a
// buffer, fills it (a kernel on a GPU; the host's copy on the CPU device),
// seals it and prints its id; the consumer, another process, opens it by
// id, checks every value (a kernel on a GPU counts mismatches) and deletes
// it.
//
//   cpp_share_exchange produce SOCKET COUNT    # prints `id <ID>`
//   cpp_share_exchange consume SOCKET ID COUNT
//
// SOCKET is a daemon's (`tandem share serve --socket SOCKET`).
#include "tandem/portability.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tandem.hpp"

using tandem::u32;
using tandem::u64;

/// Value i of the exchange (the tutorial's `i * 2.0f`, as an integer so the
/// check is exact).
TANDEM_HOST_DEVICE u32 value(u64 i) { return static_cast<u32>(i * 2 + 1); }

#if defined(TANDEM_BACKEND_GPU)
__global__ void fill(u32* data, u64 count) {
  const u64 i = blockIdx.x * u64{blockDim.x} + threadIdx.x;
  if (i < count) data[i] = value(i);
}

__global__ void count_mismatches(const u32* data, u64 count, unsigned long long* mismatches) {
  const u64 i = blockIdx.x * u64{blockDim.x} + threadIdx.x;
  if (i < count && data[i] != value(i)) atomicAdd(mismatches, 1ull);
}

#if defined(TANDEM_BACKEND_HIP)
#define GPU(call) hip##call
#else
#define GPU(call) cuda##call
#endif

static void gpu_check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(what);
}
#endif

namespace {

int produce(const std::string& socket, u64 count) {
  tandem::Share share = tandem::Share::connect(socket);
  tandem::SharedBuffer buffer = share.create(0, count * sizeof(u32));
#if defined(TANDEM_BACKEND_GPU)
  fill<<<static_cast<unsigned>((count + 255) / 256), 256>>>(static_cast<u32*>(buffer.device_ptr()), count);
  gpu_check(GPU(DeviceSynchronize)() == GPU(Success), "fill");
#else
  std::vector<u32> data(count);
  for (u64 i = 0; i < count; ++i) data[i] = value(i);
  buffer.write(data.data(), data.size() * sizeof(u32));
#endif
  buffer.seal();
  std::printf("id %llu\n", static_cast<unsigned long long>(buffer.id()));
  std::fflush(stdout);
  return 0;
}

int consume(const std::string& socket, u64 id, u64 count) {
  tandem::Share share = tandem::Share::connect(socket);
  u64 mismatches = 0;
  {
    tandem::SharedBuffer buffer = share.get_buffer(id);
    if (buffer.size() < count * sizeof(u32)) {
      std::fprintf(stderr, "cpp_share_exchange: buffer %llu holds %zu bytes, %llu values expected\n",
                   static_cast<unsigned long long>(id), buffer.size(), static_cast<unsigned long long>(count));
      return 1;
    }
#if defined(TANDEM_BACKEND_GPU)
    unsigned long long* counter = nullptr;
    gpu_check(GPU(MallocManaged)(&counter, sizeof *counter) == GPU(Success), "malloc");
    *counter = 0;
    count_mismatches<<<static_cast<unsigned>((count + 255) / 256), 256>>>(
        static_cast<const u32*>(buffer.device_ptr()), count, counter);
    gpu_check(GPU(DeviceSynchronize)() == GPU(Success), "count_mismatches");
    mismatches = *counter;
    (void)GPU(Free)(counter);
#else
    std::vector<u32> data(count);
    buffer.read(data.data(), data.size() * sizeof(u32));
    for (u64 i = 0; i < count; ++i) mismatches += data[i] != value(i);
#endif
  }
  share.remove(id);
  std::printf("cpp_share_exchange: consumer read %llu values of buffer %llu: %llu mismatched\n",
              static_cast<unsigned long long>(count), static_cast<unsigned long long>(id),
              static_cast<unsigned long long>(mismatches));
  if (mismatches != 0) return 1;
  std::printf("cpp_share_exchange: ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "produce" && argc == 4) return produce(argv[2], std::stoull(argv[3]));
    if (mode == "consume" && argc == 5) return consume(argv[2], std::stoull(argv[3]), std::stoull(argv[4]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpp_share_exchange: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s produce SOCKET COUNT | consume SOCKET ID COUNT\n", argv[0]);
  return 2;
}
