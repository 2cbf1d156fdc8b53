//! Tandem's Python package, `tandem` (its native part, `tandem._tandem`;
//! the Python part in `python/tandem/` wraps it): shared buffers handed
//! between processes by id, the blob store, a runtime's status.
//!
//! # The front
//!
//! Python sees only what the module registers below, each for one job:
//!
//! * **Shared buffers** (`tandem.share`): [`connect`](share::connect) and
//!   [`spawn_daemon`](share::spawn_daemon) give a `Client` (create, get,
//!   put, delete, ls, stat, status); a `Buffer` lends its memory through
//!   DLPack and `__cuda_array_interface__`, a `HostBuffer` (one on the CPU
//!   device) also through the buffer protocol, and a `View` reads it
//!   typed.
//! * **The blob store** (`tandem.blob`): [`attach`](blob::attach) and
//!   [`fork`](blob::fork) give a `BlobClient`.
//! * **Status** (`tandem.status`): [`status_json`](status::status_json).
//! * **The pool** (`tandem.torch.pool`): the C entry points PyTorch's
//!   pluggable allocator calls, `tandem_pool_alloc` and `tandem_pool_free`,
//!   exported by this library; `_pool_attach`, `_pool_detach`,
//!   `_pool_find` and `_pool_status` for `tandem.torch`.
//!
//! Failures are exceptions of `tandem.errors`, a class per kind
//! (`errors`).
//!
//! # Module layers
//!
//! Bottom up: `layout` (DLPack's structures), `pybuffer` (the buffer
//! protocol's) and `errors`; `dtype`, `wait`, `host`; `dlpack`; `backend`;
//! `core` (a buffer whatever its backend) with `share` (the client it
//! belongs to); `buffer` with `host_buffer`, `blob`, `status`; `pool`.

mod backend;
mod blob;
mod buffer;
mod core;
mod dlpack;
mod dtype;
mod errors;
mod host;
mod host_buffer;
mod layout;
mod pool;
mod pybuffer;
mod share;
mod status;
mod wait;

use pyo3::prelude::*;

#[pymodule]
fn _tandem(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<share::Client>()?;
    m.add_class::<buffer::Buffer>()?;
    host_buffer::register(m)?;
    m.add_class::<buffer::View>()?;
    m.add_class::<buffer::Mirror>()?;
    m.add_class::<blob::BlobClient>()?;
    m.add_function(wrap_pyfunction!(share::connect, m)?)?;
    m.add_function(wrap_pyfunction!(share::spawn_daemon, m)?)?;
    m.add_function(wrap_pyfunction!(blob::attach, m)?)?;
    m.add_function(wrap_pyfunction!(blob::fork, m)?)?;
    m.add_function(wrap_pyfunction!(status::status_json, m)?)?;
    m.add_function(wrap_pyfunction!(pool::attach, m)?)?;
    m.add_function(wrap_pyfunction!(pool::detach, m)?)?;
    m.add_function(wrap_pyfunction!(pool::find, m)?)?;
    m.add_function(wrap_pyfunction!(pool::status, m)?)?;
    m.add("CUDA", cfg!(feature = "cuda"))?;
    Ok(())
}
