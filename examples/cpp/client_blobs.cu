// A C++ program whose own kernel uses the blob store and the math pool of a
// runtime in another process (`tandem blob run`): the Rust client_blobs
// example's shape, from CMake. The host attaches, makes a round trip and a
// blob put/get itself, opens device queues of its own and launches
// `cpp_client_blobs`, whose every thread creates (or finds) a tag, adds two
// numbers on a CPU worker, puts its blob, gets it back and compares.
//
//   cpp_client_blobs SEGMENT [PROGRAM]
//
// One source for every backend: built by the host compiler it is a
// CPU-device kernel launched through the C ABI; by nvcc (or hipcc), a
// CUDA (HIP) kernel launched with <<<>>> on the device the queues are on.
#include "tandem/blob.h"
#include "tandem_cpu_kernel.hpp"

#if !defined(TANDEM_BACKEND_GPU)
#include <vector>
#endif
#include <cstdio>
#include <cstring>
#include <string>

#include "tandem.hpp"

using tandem::i32;
using tandem::u32;
using tandem::u64;
using tandem::u8;

/// Status past tandem::rt_status's values: a get returned other bytes.
constexpr u32 MISMATCH = 1000;
/// Status past tandem::rt_status's values: the math pool added wrong.
constexpr u32 BAD_SUM = 1001;

/// Byte i of program `program`'s thread `rank`'s blob.
TANDEM_HOST_DEVICE u8 pattern(u32 program, u64 rank, u64 i) {
  return static_cast<u8>(program * 31 + rank * 131 + i * 7 + (i >> 8));
}

/// "c<program>-t<rank>" into `name` (at least 24 bytes); its length.
TANDEM_DEVICE u32 blob_name(u32 program, u64 rank, char* name) {
  name[0] = 'c';
  u32 n = tandem::blob::append_decimal(name, 1, program);
  name[n++] = '-';
  name[n++] = 't';
  return tandem::blob::append_decimal(name, n, rank);
}

/// Every thread: rank + program on a CPU worker (math pool), the tag
/// "cpp-blobs", then blob "c<program>-t<rank>" of `blob_bytes` put, got
/// back and compared. status[r]: tandem::rt_status (ok), MISMATCH or
/// BAD_SUM; codes[r]: the blob store's code of a call that failed.
TANDEM_KERNEL cpp_client_blobs(u8* segment, u64 len, u32 program, u64 blob_bytes, const u32* stop,
                               u64 spin_budget, u32* status, i32* codes) {
  namespace b = tandem::blob;
  TANDEM_SHARED(tandem::RtContext, rt);
  const auto* h = reinterpret_cast<const tandem::RuntimeSegmentHeader*>(segment);
  const tandem::MemoryBackend backend{h->id, tandem::backend_kind::PINNED, 0, reinterpret_cast<u64>(segment), len};
  const u64 padded = (blob_bytes + 15) & ~u64{15};
  tandem::rt_init(rt, backend, tandem::block_size() * (512 + 2 * padded) + 256);
  const u64 r = tandem::global_rank();
  tandem::RtFuture f{};
  b::Buffer data{};
  b::Buffer back{};
  tandem::rt_status st = tandem::rt_future_alloc(rt, b::COPY_SPACE, &f);
  if (st == tandem::rt_status::ok) st = b::buffer_alloc(rt, blob_bytes, &data);
  if (st == tandem::rt_status::ok) st = b::buffer_alloc(rt, blob_bytes, &back);
  const u32 lane = static_cast<u32>(tandem::block_rank() % (st == tandem::rt_status::ok ? rt.num_lanes : 1));
  i32 rc = 0;
  u32 result = 0;
  // The math pool: r + program on a CPU worker.
  if (st == tandem::rt_status::ok) {
    st = tandem::rt_make_task(f, tandem::rt_math::POOL, tandem::rt_math::ADD, [&](tandem::Writer& w) {
      const tandem::ser_status s = w.put_u64(r);
      return s == tandem::ser_status::ok ? w.put_u64(program) : s;
    });
  }
  if (st == tandem::rt_status::ok) {
    st = tandem::rt_send_to_cpu(rt, f, lane, tandem::rt_priority::high, stop, spin_budget);
  }
  if (st == tandem::rt_status::ok) {
    const tandem::wait_outcome w = tandem::rt_wait(f, stop, spin_budget, &rc);
    if (w != tandem::wait_outcome::completed) st = tandem::rt_status::stopped;
  }
  if (st == tandem::rt_status::ok) {
    const u8* out = nullptr;
    u32 out_len = 0;
    st = tandem::rt_output(f, &out, &out_len);
    u64 sum = 0;
    tandem::Reader reader = tandem::Reader::over(out, out_len);
    if (st == tandem::rt_status::ok && (rc != 0 || reader.get_u64(&sum) != tandem::ser_status::ok || sum != r + program)) {
      result = BAD_SUM;
    }
  }
  u64 tag = 0;
  const char tag_name[] = "cpp-blobs";
  if (st == tandem::rt_status::ok && result == 0) {
    st = b::get_or_create_tag(rt, f, lane, tag_name, sizeof(tag_name) - 1, stop, spin_budget, &tag, &rc);
  }
  char name[24];
  const u32 name_len = blob_name(program, r, name);
  if (st == tandem::rt_status::ok && rc == 0 && result == 0) {
    for (u64 i = 0; i < blob_bytes; ++i) data.data[i] = pattern(program, r, i);
    u64 size = 0;
    st = b::put(rt, f, lane, tag, name, name_len, 0, data, 1.0f, stop, spin_budget, &size, &rc);
  }
  if (st == tandem::rt_status::ok && rc == 0 && result == 0) {
    st = b::get(rt, f, lane, tag, name, name_len, 0, back, stop, spin_budget, &rc);
  }
  if (st == tandem::rt_status::ok && rc == 0 && result == 0) {
    for (u64 i = 0; i < blob_bytes; ++i) {
      if (back.data[i] != pattern(program, r, i)) {
        result = MISMATCH;
        break;
      }
    }
  }
  status[r] = result != 0 ? result : static_cast<u32>(st);
  codes[r] = rc;
}
TANDEM_CPU_KERNEL(cpp_client_blobs)

namespace {

/// Result arrays the kernel writes and the host reads.
template <typename T>
struct Results {
#if defined(TANDEM_BACKEND_CUDA)
  explicit Results(size_t n) : n(n) {
    if (cudaMallocManaged(&data, n * sizeof(T)) != cudaSuccess) throw std::runtime_error("cudaMallocManaged");
  }
  ~Results() { cudaFree(data); }
#elif defined(TANDEM_BACKEND_HIP)
  explicit Results(size_t n) : n(n) {
    if (hipMallocManaged(&data, n * sizeof(T)) != hipSuccess) throw std::runtime_error("hipMallocManaged");
  }
  ~Results() { (void)hipFree(data); }
#else
  explicit Results(size_t n) : n(n), storage(n) { data = storage.data(); }
  std::vector<T> storage;
#endif
  Results(const Results&) = delete;
  Results& operator=(const Results&) = delete;
  size_t n;
  T* data = nullptr;
};

int run(const std::string& segment, u32 program) {
  tandem::Client client = tandem::Client::attach(segment);
  // Host code first: a round trip, and a blob put and got back.
  const u64 sum = client.add(2, 3);
  const u64 tag = client.blob_tag("cpp-host");
  const std::string name = "p" + std::to_string(program);
  char data[4096];
  for (size_t i = 0; i < sizeof data; ++i) data[i] = static_cast<char>(program + i * 3);
  client.blob_put(tag, name, data, sizeof data);
  char back[sizeof data] = {};
  client.blob_get(tag, name, back, sizeof back);
  const bool host_ok = sum == 5 && std::memcmp(data, back, sizeof data) == 0 && client.blob_size(tag, name) == sizeof data;
  std::printf("cpp_client_blobs: program %u: host: 2 + 3 = %llu, a %zu-byte blob put and got back: %s\n", program,
              static_cast<unsigned long long>(sum), sizeof data, host_ok ? "ok" : "WRONG");
  if (!host_ok) return 1;

  // Then the kernel, on device queues of this program's own.
  tandem::DeviceQueues queues(client, 0);
  const tandem_queue_segment s = queues.segment();
#if defined(TANDEM_BACKEND_GPU)
  const u32 blocks = 8, threads = 64;
  const char* device = "GPU";
#else
  const u32 blocks = 2, threads = 8;
  const char* device = "CPU device";
#endif
  const size_t count = size_t{blocks} * threads;
  Results<u32> status(count);
  Results<i32> codes(count);
  const u64 blob_bytes = 4096;
  // Spin rounds: far more than any answer takes; the stop word (raised if
  // the runtime dies) is what ends a wait early.
  const u64 spin_budget = u64{1} << 40;
  auto* base = reinterpret_cast<u8*>(static_cast<uintptr_t>(s.base));
  auto* stop = reinterpret_cast<const u32*>(static_cast<uintptr_t>(s.stop));
#if defined(TANDEM_BACKEND_CUDA)
  cpp_client_blobs<<<blocks, threads>>>(base, s.len, program, blob_bytes, stop, spin_budget, status.data, codes.data);
  if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("cpp_client_blobs: launch failed");
#elif defined(TANDEM_BACKEND_HIP)
  cpp_client_blobs<<<blocks, threads>>>(base, s.len, program, blob_bytes, stop, spin_budget, status.data, codes.data);
  if (hipDeviceSynchronize() != hipSuccess) throw std::runtime_error("cpp_client_blobs: launch failed");
#else
  queues.launch_cpu(tandem_cpu_kernel_cpp_client_blobs(), tandem_dim3{blocks, 1, 1}, tandem_dim3{threads, 1, 1}, base,
                    s.len, program, blob_bytes, stop, spin_budget, status.data, codes.data);
#endif
  queues.check_runtime();
  size_t failed = 0;
  for (size_t t = 0; t < count; ++t) {
    if (status.data[t] != 0) {
      if (failed == 0) {
        std::printf("cpp_client_blobs: thread %zu: status %u, blob store code %d\n", t, status.data[t], codes.data[t]);
      }
      ++failed;
    }
  }
  std::printf("cpp_client_blobs: program %u on the %s: %zu threads added, put, got and compared %llu bytes each: %zu failed\n",
              program, device, count, static_cast<unsigned long long>(blob_bytes), failed);
  if (failed != 0) return 1;
  std::printf("cpp_client_blobs: program %u: ok\n", program);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s SEGMENT [PROGRAM]\n", argv[0]);
    return 2;
  }
  const u32 program = argc == 3 ? static_cast<u32>(std::stoul(argv[2])) : 1;
  try {
    return run(argv[1], program);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpp_client_blobs: %s\n", e.what());
    return 1;
  }
}
