// The user_pool example's kernel: its threads ask a pool that lives on the
// host (the catalog: price by SKU, a table the device does not hold) for
// prices, through the device's queue segment, and write what came back.
// The pool and method ids come from Rust as parameters (CatalogPrice::POOL
// and ::METHOD), so they cannot drift from the pool the runtime serves.
#include "tandem/runtime.h"

using tandem::i32;
using tandem::u32;
using tandem::u64;
using tandem::u8;

/// Copy space of each thread's future: the task header and one u64 each way.
constexpr u32 CATALOG_COPY_SPACE = 32;

/// Bytes of the segment's kernel arena each thread takes: its future (48 +
/// CATALOG_COPY_SPACE bytes) and notify word, with alignment slack.
constexpr u64 CATALOG_ARENA_PER_THREAD = 128;

/// Thread r asks for the prices of SKUs r * skus_per_thread + i, i <
/// skus_per_thread, one at a time: `pool`.`method`(sku) on lane (block rank
/// mod lanes) of the device segment at `segment` (`len` bytes; its device
/// address), waiting with `stop` and `spin_budget`. For SKU s, codes[s] is
/// the task's return code and prices[s] the price (0 unless codes[s] is 0).
/// status[r] is the thread's tandem::rt_status: ok, or why it stopped early
/// (stopped, queue_full when its spin budget ran out, future_error for an
/// answer that is not one u64).
TANDEM_KERNEL example_catalog_prices(u8* segment, u64 len, u32 pool, u32 method, u64 skus_per_thread,
                                     const u32* stop, u64 spin_budget, u64* prices, i32* codes,
                                     u32* status) {
  TANDEM_SHARED(tandem::RtContext, rt);
  const tandem::RuntimeSegmentHeader* h = reinterpret_cast<const tandem::RuntimeSegmentHeader*>(segment);
  const tandem::MemoryBackend backend{h->id, tandem::backend_kind::PINNED, 0, reinterpret_cast<u64>(segment),
                                      len};
  tandem::rt_init(rt, backend, static_cast<u64>(tandem::block_size()) * CATALOG_ARENA_PER_THREAD + 256);
  const u64 r = tandem::global_rank();
  tandem::RtFuture f{};
  tandem::rt_status st = tandem::rt_future_alloc(rt, CATALOG_COPY_SPACE, &f);
  const u32 lane = static_cast<u32>(tandem::block_rank() % (st == tandem::rt_status::ok ? rt.num_lanes : 1));
  for (u64 i = 0; st == tandem::rt_status::ok && i < skus_per_thread; ++i) {
    const u64 sku = r * skus_per_thread + i;
    st = tandem::rt_make_task(f, pool, method, [&](tandem::Writer& w) { return w.put_u64(sku); });
    if (st != tandem::rt_status::ok) {
      break;
    }
    st = tandem::rt_send_to_cpu(rt, f, lane, tandem::rt_priority::high, stop, spin_budget);
    if (st != tandem::rt_status::ok) {
      break;
    }
    i32 rc = 0;
    const tandem::wait_outcome outcome = tandem::rt_wait(f, stop, spin_budget, &rc);
    if (outcome != tandem::wait_outcome::completed) {
      // The future stays queued or in a worker's hands: it is not reused.
      st = outcome == tandem::wait_outcome::stopped ? tandem::rt_status::stopped : tandem::rt_status::queue_full;
      break;
    }
    u64 price = 0;
    if (rc == 0) {
      const u8* out = nullptr;
      u32 out_len = 0;
      st = tandem::rt_output(f, &out, &out_len);
      tandem::Reader reader = tandem::Reader::over(out, out_len);
      if (st == tandem::rt_status::ok &&
          (reader.get_u64(&price) != tandem::ser_status::ok || reader.pos != reader.len)) {
        st = tandem::rt_status::future_error;
      }
    }
    codes[sku] = rc;
    prices[sku] = price;
  }
  status[r] = static_cast<u32>(st);
}
