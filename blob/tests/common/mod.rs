//! What the blob store's kernel tests share: a runtime in this process
//! serving a store.

use std::sync::Arc;

use tandem_blob::{pool, wire, BlobStore};
use tandem_hal::GpuApi;
use tandem_runtime::{Config, DeviceSelection, Registry, Runtime};

/// A runtime in this process serving `store` on `devices` of `api`, with
/// GPU segments of `gpu_segment_size` bytes.
pub fn blob_runtime<A: GpuApi>(
    api: A,
    store: &Arc<BlobStore>,
    devices: DeviceSelection,
    gpu_segment_size: usize,
) -> Runtime<A> {
    let mut registry = Registry::with_builtins();
    pool::register(&mut registry, Arc::clone(store)).expect("register the blob pool");
    let config = Config {
        workers: 2,
        lanes: 2,
        // The same few lanes on a GPU as on the CPU device.
        gpu_lanes: 2,
        queue_depth: 256,
        gpu_segment_size,
        cpu_segment_size: 8 << 20,
        // Host submits carry names up to MAX_NAME_BYTES in the copy space.
        copy_space: wire::COPY_SPACE,
        devices,
        ..Config::default()
    };
    Runtime::start_with(api, config, registry).expect("start the runtime")
}
