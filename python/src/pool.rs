//! The pool's allocator: the C entry points PyTorch's
//! `CUDAPluggableAllocator` calls (`tandem_pool_alloc`, `tandem_pool_free`),
//! each segment a buffer of the share daemon, and the Python calls that
//! attach the pool to a client and find the buffer a pointer lies in
//! (`tandem.torch.pool` and `publish`).
//!
//! PyTorch's caching allocator sits above: within a `MemPool` it asks this
//! allocator for whole segments (2 MiB and up) only when its cache has none
//! free, splits them into blocks, and reuses a block across streams only
//! after the events of the streams that used it have completed. So an alloc
//! is rare, and its memory is ready when the call returns (a create maps it
//! synchronously): no stream ordering is owed to the `stream` argument. A
//! free comes when the caching allocator releases a segment (`empty_cache`,
//! the pool's end, an allocation retried after a failure); it has waited
//! for the other streams' events, but work it queued on the segment's own
//! stream may still run, and `cudaFree`, which this free replaces, waits for
//! the whole device. So does this one, before it unmaps.
//!
//! A segment is an unsealed buffer this process created: when the process
//! dies the daemon frees it (an abandoned writer's buffer). A segment that
//! `publish` staged and sealed into a named set outlives the free: the set
//! holds it. A forked child inherits the registry but not the segments:
//! they stay the parent's, so a child's free of one does nothing, and a
//! child's alloc starts a registry of its own.
//!
//! Nothing unwinds across the C boundary: a failure (or a panic) is logged
//! through `tracing`, kept as the pool's last error, and an alloc returns
//! null, which PyTorch reports as out of memory.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tandem_process::{lock_across_forks, MadeIn};
use tandem_share::AnyShareClient;

use crate::buffer::Buffer;
use crate::core::{self, AnyBuffer};
use crate::errors::{Error, Kind};
use crate::host_buffer;
use crate::share::Client;

/// The segments this process holds, by address, and the client they come
/// from.
struct Pool {
    client: AnyShareClient,
    /// The process that mapped `segments` (a forked child's registry is
    /// its parent's until its first call, which forgets them).
    made_in: MadeIn,
    segments: BTreeMap<u64, Arc<dyn AnyBuffer>>,
}

impl Pool {
    /// Takes the registry over in a forked child: the parent's segments
    /// are the parent's, never unmapped nor given back here.
    fn for_this_process(&mut self) {
        if self.made_in.is_this_process() {
            return;
        }
        for (_, segment) in std::mem::take(&mut self.segments) {
            std::mem::forget(segment);
        }
        self.made_in = MadeIn::this_process();
    }

    /// The segment holding `ptr`, and `ptr`'s offset in it.
    fn holding(&self, ptr: u64) -> Option<(&Arc<dyn AnyBuffer>, u64)> {
        let (&base, segment) = self.segments.range(..=ptr).next_back()?;
        let offset = ptr - base;
        (offset < segment.len() as u64).then_some((segment, offset))
    }
}

/// The pool of this process; `None` until attached.
static POOL: Mutex<Option<Pool>> = Mutex::new(None);

/// Why the last alloc or free failed (`_pool_status`): PyTorch says only
/// that memory ran out.
static LAST_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Logs `why` and keeps it as the pool's last error.
fn failed(why: String) {
    tracing::error!("tandem pool: {why}");
    *lock_across_forks(&LAST_ERROR) = Some(why);
}

/// A segment of `size` bytes on `device`, as a new buffer of the pool's
/// client, registered; its address.
fn alloc(size: isize, device: c_int) -> Result<u64, String> {
    let size = usize::try_from(size).map_err(|_| format!("a segment of {size} bytes"))?;
    let device = usize::try_from(device).map_err(|_| format!("device {device}"))?;
    let client = {
        let mut guard = lock_across_forks(&POOL);
        let pool = guard
            .as_mut()
            .ok_or("no client: allocate inside `with tandem.torch.pool(...)`")?;
        pool.for_this_process();
        pool.client.clone()
    };
    // The daemon's round trip and the mapping run outside the lock.
    let held = client
        .create(device, size)
        .map_err(|e| format!("a segment of {size} bytes on device {device}: {e}"))?;
    let segment = core::core_of(held).map_err(|e| e.to_string())?;
    let ptr = segment.data();
    let mut guard = lock_across_forks(&POOL);
    let pool = guard.as_mut().ok_or("the pool was detached")?;
    pool.segments.insert(ptr, segment);
    Ok(ptr)
}

/// Unregisters the segment at `ptr` and lets go of it once the device's
/// work is done (see the module docs).
fn free(ptr: u64) -> Result<(), String> {
    let segment = {
        let mut guard = lock_across_forks(&POOL);
        let Some(pool) = guard.as_mut() else {
            return Err(format!("a free of {ptr:#x} with no pool"));
        };
        if !pool.made_in.is_this_process() {
            // The parent's segment: the parent frees it.
            return Ok(());
        }
        pool.segments
            .remove(&ptr)
            .ok_or_else(|| format!("a free of {ptr:#x}, which the pool did not allocate"))?
    };
    segment
        .synchronize_device()
        .map_err(|e| format!("the device's work before freeing {ptr:#x}: {e}"))?;
    drop(segment);
    Ok(())
}

/// PyTorch's `alloc_fn` (`void* alloc(ssize_t size, int device,
/// cudaStream_t stream)`): a segment of the pool, or null (out of memory,
/// over the daemon's limits, no pool attached).
#[no_mangle]
pub extern "C" fn tandem_pool_alloc(
    size: isize,
    device: c_int,
    _stream: *mut c_void,
) -> *mut c_void {
    match catch_unwind(|| alloc(size, device)) {
        Ok(Ok(ptr)) => ptr as *mut c_void,
        Ok(Err(why)) => {
            failed(why);
            std::ptr::null_mut()
        }
        Err(_) => {
            failed(format!("a panic allocating {size} bytes"));
            std::ptr::null_mut()
        }
    }
}

/// PyTorch's `free_fn` (`void free(void* ptr, size_t size, int device,
/// cudaStream_t stream)`, as the pluggable allocator calls it): gives a
/// segment back.
#[no_mangle]
pub extern "C" fn tandem_pool_free(
    ptr: *mut c_void,
    _size: isize,
    _device: c_int,
    _stream: *mut c_void,
) {
    match catch_unwind(AssertUnwindSafe(|| free(ptr as u64))) {
        Ok(Ok(())) => {}
        Ok(Err(why)) => failed(why),
        Err(_) => failed(format!("a panic freeing {ptr:p}")),
    }
}

/// Makes `client` the one the pool allocates through. A pool holding
/// segments of another client keeps it (`ArgumentError`): one pool a
/// process.
#[pyfunction]
#[pyo3(name = "_pool_attach")]
pub(crate) fn attach(client: &Client) -> PyResult<()> {
    let mut guard = lock_across_forks(&POOL);
    match guard.as_mut() {
        Some(pool) => {
            pool.for_this_process();
            if !pool.client.same_client(client.inner()) {
                if !pool.segments.is_empty() {
                    return Err(Error::new(
                        Kind::Argument,
                        format!(
                            "the pool holds {} segment(s) of another client: one client a process",
                            pool.segments.len()
                        ),
                    )
                    .into());
                }
                pool.client = client.inner().clone();
            }
        }
        None => {
            *guard = Some(Pool {
                client: client.inner().clone(),
                made_in: MadeIn::this_process(),
                segments: BTreeMap::new(),
            })
        }
    }
    Ok(())
}

/// Lets go of the pool's client (and a daemon it started), once the pool
/// holds no segment (`ArgumentError` while it does); a later attach
/// starts again.
#[pyfunction]
#[pyo3(name = "_pool_detach")]
pub(crate) fn detach() -> PyResult<()> {
    let mut guard = lock_across_forks(&POOL);
    if let Some(pool) = guard.as_mut() {
        pool.for_this_process();
        if !pool.segments.is_empty() {
            return Err(Error::new(
                Kind::Argument,
                format!("the pool holds {} segment(s)", pool.segments.len()),
            )
            .into());
        }
    }
    *guard = None;
    Ok(())
}

/// The pool's segment holding address `ptr` and `ptr`'s offset in it, if
/// a pool segment of this process holds it.
#[pyfunction]
#[pyo3(name = "_pool_find")]
pub(crate) fn find(py: Python<'_>, ptr: u64) -> PyResult<Option<(Bound<'_, Buffer>, u64)>> {
    let found = {
        let mut guard = lock_across_forks(&POOL);
        let Some(pool) = guard.as_mut() else {
            return Ok(None);
        };
        pool.for_this_process();
        pool.holding(ptr)
            .map(|(segment, offset)| (Arc::clone(segment), offset))
    };
    match found {
        Some((segment, offset)) => Ok(Some((host_buffer::object(py, segment)?, offset))),
        None => Ok(None),
    }
}

/// What the pool holds: `segments`, their `nbytes`, and `last_error` (why
/// the last alloc or free failed, or `None`).
#[pyfunction]
#[pyo3(name = "_pool_status")]
pub(crate) fn status(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let (segments, nbytes) = match lock_across_forks(&POOL).as_mut() {
        Some(pool) => {
            pool.for_this_process();
            (
                pool.segments.len(),
                pool.segments.values().map(|s| s.len()).sum::<usize>(),
            )
        }
        None => (0, 0),
    };
    let last_error = lock_across_forks(&LAST_ERROR).clone();
    let dict = PyDict::new(py);
    dict.set_item("segments", segments)?;
    dict.set_item("nbytes", nbytes)?;
    dict.set_item("last_error", last_error)?;
    Ok(dict)
}
