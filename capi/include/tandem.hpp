// Tandem's C++ host layer: RAII handles over the C ABI (tandem.h),
// header-only.
//
// Errors are exceptions (tandem::Error, carrying the tandem_status and the
// C ABI's message). Why not expected-style results: the handles are
// acquired in constructors (RAII), which cannot return a result; C++17 has
// no std::expected; and the design notes' host code reads as straight-line
// calls whose failures end the program or the request. The C calls
// themselves never throw or abort; only this layer turns their codes into
// exceptions.
//
// Thread safety and blocking are the C calls' (tandem.h): every call is
// thread-safe; a handle must not be destroyed while another thread uses the
// same object (the C layer then reports a closed handle rather than
// crashing, but this layer's object is gone).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "tandem.h"

namespace tandem {

/// A failed Tandem call: its code and message.
class Error : public std::runtime_error {
 public:
  Error(tandem_status status, const std::string& what)
      : std::runtime_error(what), status_(status) {}
  /// The C ABI's code.
  tandem_status status() const noexcept { return status_; }

 private:
  tandem_status status_;
};

/// Throws an Error for a failed call's `status`, naming `call`.
inline void check(tandem_status status, const char* call) {
  if (status != TANDEM_STATUS_OK) {
    throw Error(status, std::string(call) + ": " + tandem_last_error_message());
  }
}

namespace detail {
/// Owns one C handle, closed by `Close` (null-safe, as every C close).
template <typename T, tandem_status (*Close)(T*)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T* raw) : raw_(raw) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      raw_ = std::exchange(other.raw_, nullptr);
    }
    return *this;
  }
  ~Handle() { reset(); }
  /// Closes now (a destructor cannot report; this cannot fail but on a
  /// handle closed elsewhere, which it ignores).
  void reset() noexcept {
    if (raw_ != nullptr) {
      (void)Close(std::exchange(raw_, nullptr));
    }
  }
  T* get() const noexcept { return raw_; }

 private:
  T* raw_ = nullptr;
};
}  // namespace detail

/// A client of a runtime in another process (`tandem run`, `tandem blob
/// run`): tasks, blobs, device queues.
class Client {
 public:
  /// Attaches to the runtime serving CPU segment `segment`.
  static Client attach(const std::string& segment) {
    tandem_client* raw = nullptr;
    check(tandem_client_attach(segment.c_str(), &raw), "tandem_client_attach");
    return Client(raw);
  }
  /// Starts `tandem run` (`tandem_bin`, empty: $TANDEM_BIN) with the TOML
  /// file `config` (empty: defaults) and attaches; stopped when closed.
  static Client fork(const std::string& tandem_bin = {}, const std::string& config = {}) {
    tandem_client* raw = nullptr;
    check(tandem_client_fork(tandem_bin.empty() ? nullptr : tandem_bin.c_str(),
                             config.empty() ? nullptr : config.c_str(), &raw),
          "tandem_client_fork");
    return Client(raw);
  }

  /// The runtime's process id.
  std::uint32_t runtime_pid() const {
    std::uint32_t pid = 0;
    check(tandem_client_runtime_pid(get(), &pid), "tandem_client_runtime_pid");
    return pid;
  }
  /// a + b by a CPU worker of the runtime (the math pool): a round trip.
  std::uint64_t add(std::uint64_t a, std::uint64_t b, std::uint32_t lane = 0,
                    std::uint64_t timeout_ms = 0) const {
    std::uint64_t sum = 0;
    check(tandem_client_add(get(), lane, a, b, timeout_ms, &sum), "tandem_client_add");
    return sum;
  }

  /// The id of blob tag `name`, created if new.
  std::uint64_t blob_tag(const std::string& name, std::uint64_t timeout_ms = 0) const {
    std::uint64_t tag = 0;
    check(tandem_blob_tag(get(), name.c_str(), timeout_ms, &tag), "tandem_blob_tag");
    return tag;
  }
  /// Writes `len` bytes at `offset` of blob `name`; its size after.
  std::uint64_t blob_put(std::uint64_t tag, const std::string& name, const void* data, std::size_t len,
                         std::uint64_t offset = 0, std::uint64_t timeout_ms = 0) const {
    std::uint64_t size = 0;
    check(tandem_blob_put(get(), tag, name.c_str(), offset, static_cast<const std::uint8_t*>(data), len,
                          timeout_ms, &size),
          "tandem_blob_put");
    return size;
  }
  /// Reads `len` bytes at `offset` of blob `name` into `out`.
  void blob_get(std::uint64_t tag, const std::string& name, void* out, std::size_t len,
                std::uint64_t offset = 0, std::uint64_t timeout_ms = 0) const {
    check(tandem_blob_get(get(), tag, name.c_str(), offset, static_cast<std::uint8_t*>(out), len, timeout_ms),
          "tandem_blob_get");
  }
  /// Blob `name`'s size in bytes.
  std::uint64_t blob_size(std::uint64_t tag, const std::string& name, std::uint64_t timeout_ms = 0) const {
    std::uint64_t size = 0;
    check(tandem_blob_size(get(), tag, name.c_str(), timeout_ms, &size), "tandem_blob_size");
    return size;
  }
  /// Deletes blob `name`.
  void blob_delete(std::uint64_t tag, const std::string& name, std::uint64_t timeout_ms = 0) const {
    check(tandem_blob_delete(get(), tag, name.c_str(), timeout_ms), "tandem_blob_delete");
  }

  tandem_client* get() const noexcept { return handle_.get(); }

 private:
  explicit Client(tandem_client* raw) : handle_(raw) {}
  detail::Handle<tandem_client, tandem_client_close> handle_;
};

/// Device queues of this process's own on one device, which its kernels
/// are launched against (`segment()`: base, length, stop word).
class DeviceQueues {
 public:
  DeviceQueues(const Client& client, std::uint32_t ordinal) {
    tandem_device_queues* raw = nullptr;
    check(tandem_device_queues_open(client.get(), ordinal, &raw), "tandem_device_queues_open");
    handle_ = Handle(raw);
  }
  /// What a kernel is launched against.
  tandem_queue_segment segment() const {
    tandem_queue_segment s{};
    check(tandem_device_queues_segment(get(), &s), "tandem_device_queues_segment");
    return s;
  }
  /// Raises the stop word: waiting kernels return `stopped`.
  void stop() const { check(tandem_device_queues_stop(get()), "tandem_device_queues_stop"); }
  /// Throws (TANDEM_STATUS_RUNTIME_DEAD) once the runtime died.
  void check_runtime() const {
    check(tandem_device_queues_check_runtime(get()), "tandem_device_queues_check_runtime");
  }
  /// Runs a CPU-device kernel (tandem_cpu_kernel.hpp) and waits for it.
  /// `args` are the kernel's parameters, in order and of its types.
  template <typename... Args>
  void launch_cpu(const tandem_host_kernel& kernel, tandem_dim3 grid, tandem_dim3 block, Args... args) const {
    if (kernel.param_count != sizeof...(Args)) {
      throw Error(TANDEM_STATUS_INVALID_ARGUMENT, std::string("launch_cpu: ") + kernel.name + " takes " +
                                                      std::to_string(kernel.param_count) + " parameters, " +
                                                      std::to_string(sizeof...(Args)) + " given");
    }
    const void* pointers[sizeof...(Args) + 1] = {static_cast<const void*>(&args)...};
    check(tandem_device_queues_launch_cpu(get(), &kernel, grid, block, 0, pointers),
          "tandem_device_queues_launch_cpu");
  }

  tandem_device_queues* get() const noexcept { return handle_.get(); }

 private:
  using Handle = detail::Handle<tandem_device_queues, tandem_device_queues_close>;
  Handle handle_;
};

class SharedBuffer;

/// A connection to the share daemon.
class Share {
 public:
  /// Connects to the daemon serving `socket`.
  static Share connect(const std::string& socket) {
    tandem_share* raw = nullptr;
    check(tandem_share_connect(socket.c_str(), &raw), "tandem_share_connect");
    return Share(raw);
  }
  /// Starts a daemon of this process's own (`tandem_bin`, empty: $TANDEM_BIN).
  static Share spawn(const std::string& tandem_bin = {}) {
    tandem_share* raw = nullptr;
    check(tandem_share_spawn(tandem_bin.empty() ? nullptr : tandem_bin.c_str(), &raw), "tandem_share_spawn");
    return Share(raw);
  }
  /// A new buffer of `bytes` on `device`, writable until sealed.
  inline SharedBuffer create(std::uint32_t device, std::size_t bytes) const;
  /// Sealed buffer `id`, read-only, its writer's work complete.
  inline SharedBuffer get_buffer(std::uint64_t id, std::uint64_t wait_ms = 0) const;
  /// Deletes buffer `id` (holders keep it until they close it).
  void remove(std::uint64_t id) const { check(tandem_share_delete(get(), id), "tandem_share_delete"); }
  /// The daemon's process id.
  std::uint32_t daemon_pid() const {
    std::uint32_t pid = 0;
    check(tandem_share_daemon_pid(get(), &pid), "tandem_share_daemon_pid");
    return pid;
  }

  tandem_share* get() const noexcept { return handle_.get(); }

 private:
  explicit Share(tandem_share* raw) : handle_(raw) {}
  detail::Handle<tandem_share, tandem_share_close> handle_;
};

/// A shared buffer mapped in this process.
class SharedBuffer {
 public:
  explicit SharedBuffer(tandem_share_buffer* raw) : handle_(raw) {
    check(tandem_share_buffer_info(raw, &id_, &device_ptr_, &len_), "tandem_share_buffer_info");
  }
  /// Its id, for other processes.
  std::uint64_t id() const noexcept { return id_; }
  /// Its device address, for this process's kernels.
  void* device_ptr() const noexcept { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(device_ptr_)); }
  /// Its length in bytes.
  std::size_t size() const noexcept { return len_; }
  /// Copies `len` bytes from `data` to `offset` (unsealed buffers).
  void write(const void* data, std::size_t len, std::size_t offset = 0) const {
    check(tandem_share_buffer_write(get(), offset, static_cast<const std::uint8_t*>(data), len),
          "tandem_share_buffer_write");
  }
  /// Copies `len` bytes at `offset` to `out`.
  void read(void* out, std::size_t len, std::size_t offset = 0) const {
    check(tandem_share_buffer_read(get(), offset, static_cast<std::uint8_t*>(out), len), "tandem_share_buffer_read");
  }
  /// Seals it (this process's work on it must be complete).
  void seal() const { check(tandem_share_buffer_seal(get()), "tandem_share_buffer_seal"); }

  tandem_share_buffer* get() const noexcept { return handle_.get(); }

 private:
  detail::Handle<tandem_share_buffer, tandem_share_buffer_close> handle_;
  std::uint64_t id_ = 0;
  std::uint64_t device_ptr_ = 0;
  std::size_t len_ = 0;
};

inline SharedBuffer Share::create(std::uint32_t device, std::size_t bytes) const {
  std::uint64_t id = 0;
  tandem_share_buffer* raw = nullptr;
  check(tandem_share_create(get(), device, bytes, &id, &raw), "tandem_share_create");
  return SharedBuffer(raw);
}

inline SharedBuffer Share::get_buffer(std::uint64_t id, std::uint64_t wait_ms) const {
  tandem_share_buffer* raw = nullptr;
  check(tandem_share_get(get(), id, wait_ms, &raw), "tandem_share_get");
  return SharedBuffer(raw);
}

}  // namespace tandem
