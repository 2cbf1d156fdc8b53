//! The blob store from host code through the runtime's task path: from the
//! runtime's own process ([`tandem_runtime::Runtime`]) or another one
//! ([`tandem_runtime::Client`]), the same tasks kernels send. Data goes
//! through a [`SharedBuffer`] of the submitter's heap.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tandem_hal::GpuApi;
use tandem_runtime::{Client, Pending, Route, Runtime, SharedBuffer, Task, TaskError};

use crate::pool::{
    describe, BlobInfo, Delete, FindTag, Get, GetOrCreateTag, Identify, List, Put, Stat,
};
use crate::wire::{self, code};
use crate::{BlobPut, StoreIdentity, TagId};

/// What submits tasks and lends buffers: a runtime (host code in its
/// process) or a client of one.
pub trait Submitter {
    /// Submits `task` on `route`.
    fn submit<T: Task>(&self, route: Route, task: &T) -> Result<Pending<'_, T>, TaskError>;
    /// A buffer of `len` bytes its tasks may name.
    fn allocate_shared(&self, len: usize) -> Result<SharedBuffer<'_>, TaskError>;
}

impl<A: GpuApi> Submitter for Runtime<A> {
    fn submit<T: Task>(&self, route: Route, task: &T) -> Result<Pending<'_, T>, TaskError> {
        Runtime::submit(self, route, task)
    }
    fn allocate_shared(&self, len: usize) -> Result<SharedBuffer<'_>, TaskError> {
        Runtime::allocate_shared(self, len)
    }
}

impl Submitter for Client {
    fn submit<T: Task>(&self, route: Route, task: &T) -> Result<Pending<'_, T>, TaskError> {
        Client::submit(self, route, task)
    }
    fn allocate_shared(&self, len: usize) -> Result<SharedBuffer<'_>, TaskError> {
        Client::allocate_shared(self, len)
    }
}

/// Why a blob call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The store refused it: a [`crate::wire::code`] (the [`crate::BlobError`]
    /// the store returned, by its code).
    Blob(i32),
    /// The task did not complete (stop, deadline, dead runtime, full quota).
    Task(TaskError),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Blob(code) => write!(f, "blob store: {} (code {code})", describe(*code)),
            CallError::Task(e) => write!(f, "blob task: {e}"),
        }
    }
}

impl std::error::Error for CallError {}

impl From<TaskError> for CallError {
    fn from(e: TaskError) -> Self {
        match e {
            // Handler codes are positive; the runtime's own are negative.
            TaskError::Failed { return_code } if return_code > 0 => CallError::Blob(return_code),
            e => CallError::Task(e),
        }
    }
}

/// Blob calls through a [`Submitter`], each waited for (until the timeout
/// passes, or the runtime dies). The runtime's `copy_space` must be at least
/// [`wire::COPY_SPACE`] for names up to [`wire::MAX_NAME_BYTES`] bytes to fit.
pub struct BlobCaller<'s, S: Submitter> {
    submitter: &'s S,
    route: Route,
    stop: AtomicU32,
    timeout: Option<Duration>,
}

impl<'s, S: Submitter> BlobCaller<'s, S> {
    /// Calls through `submitter` on lane 0, with no timeout.
    pub fn new(submitter: &'s S) -> Self {
        Self {
            submitter,
            route: Route::lane(0),
            stop: AtomicU32::new(0),
            timeout: None,
        }
    }

    /// Calls on `route` instead.
    pub fn with_route(mut self, route: Route) -> Self {
        self.route = route;
        self
    }

    /// Gives up on each call after `timeout` (its buffer is then leaked, as
    /// a worker may still use it: see [`SharedBuffer`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Ends the call waiting on another thread (its wait returns
    /// [`TaskError::Stopped`], its buffer leaked as after a timeout) and
    /// every later call of this caller: how a caller interrupted by its
    /// user gets its thread back.
    pub fn stop(&self) {
        // Relaxed: the flag publishes nothing; a wait only needs to see it
        // eventually, which it polls for.
        self.stop.store(1, Ordering::Relaxed);
    }

    /// Refuses a name the store would, before it costs a task (one too long
    /// might not even fit the future's copy space).
    fn check_name(name: &str) -> Result<(), CallError> {
        match name.len() {
            0 => Err(CallError::Blob(code::EMPTY_NAME)),
            n if n > wire::MAX_NAME_BYTES => Err(CallError::Blob(code::NAME_TOO_LONG)),
            _ => Ok(()),
        }
    }

    /// Refuses a length past the buffer's end, which the worker would take
    /// from whatever follows it in the segment.
    fn check_len(buffer: &SharedBuffer<'_>, len: usize) -> Result<(), CallError> {
        if len > buffer.len() {
            return Err(CallError::Blob(code::BAD_POINTER));
        }
        Ok(())
    }

    fn call<T: Task>(&self, task: &T) -> Result<T::Output, CallError> {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let mut pending = self.submitter.submit(self.route, task)?;
        Ok(pending.wait(&self.stop, deadline)?)
    }

    /// Calls `task`, which names `buffer`: the buffer is freed once the task
    /// completed, leaked if the wait ended without it.
    fn call_with<'b, T: Task>(
        &self,
        task: &T,
        buffer: SharedBuffer<'b>,
    ) -> Result<(T::Output, SharedBuffer<'b>), CallError> {
        match self.call(task) {
            Ok(output) => Ok((output, buffer)),
            Err(CallError::Task(e)) => {
                buffer.leak();
                Err(CallError::Task(e))
            }
            Err(e) => Err(e),
        }
    }

    /// The id of tag `name`, created if new.
    pub fn get_or_create_tag(&self, name: &str) -> Result<TagId, CallError> {
        Self::check_name(name)?;
        self.call(&GetOrCreateTag { name: name.into() }).map(TagId)
    }

    /// The id of tag `name`, `None` when there is no such tag (none is made).
    pub fn tag(&self, name: &str) -> Result<Option<TagId>, CallError> {
        Self::check_name(name)?;
        let id = self.call(&FindTag { name: name.into() })?;
        Ok((id != 0).then_some(TagId(id)))
    }

    /// Which store the runtime serves: compare it with
    /// [`StoreIdentity::of_metadata`] of a configuration's metadata file.
    pub fn identity(&self) -> Result<StoreIdentity, CallError> {
        self.call(&Identify)
    }

    /// Writes `data` where `put` says, all or nothing, placed and kept as it
    /// says (see [`crate::BlobStore::put`]); the blob's size after it. The
    /// bytes go through one buffer of the client's heap: for any size, see
    /// [`put_chunked`](Self::put_chunked).
    pub fn put(&self, put: &BlobPut<'_>, data: &[u8]) -> Result<u64, CallError> {
        Self::check_name(put.name)?;
        let mut buffer = self.submitter.allocate_shared(data.len())?;
        buffer.write(0, data);
        self.put_from(put, buffer, data.len()).map(|(size, _)| size)
    }

    /// Writes the first `len` bytes of `buffer` (a buffer of the submitter's
    /// heap) where `put` says, all or nothing; the blob's size after it, and
    /// the buffer back for the next call (a stream moved through one
    /// buffer). A wait that ended without the task's completion leaks the
    /// buffer (see [`SharedBuffer`]).
    pub fn put_from<'b>(
        &self,
        put: &BlobPut<'_>,
        buffer: SharedBuffer<'b>,
        len: usize,
    ) -> Result<(u64, SharedBuffer<'b>), CallError> {
        Self::check_name(put.name)?;
        Self::check_len(&buffer, len)?;
        let task = Put {
            tag: put.tag.0,
            name: put.name.into(),
            offset: put.offset,
            len: len as u64,
            data: buffer.ptr().into(),
            score: put.score.0,
            context: put.context.to_wire(),
        };
        self.call_with(&task, buffer)
    }

    /// Reads `out.len()` bytes from byte `at` of blob `name` of `tag`.
    pub fn get(&self, tag: TagId, name: &str, at: u64, out: &mut [u8]) -> Result<(), CallError> {
        Self::check_name(name)?;
        let buffer = self.submitter.allocate_shared(out.len())?;
        let buffer = self.get_into(tag, name, at, buffer, out.len())?;
        buffer.read(0, out);
        Ok(())
    }

    /// Reads `len` bytes at `offset` of blob `name` of `tag` into the first
    /// `len` bytes of `buffer` (a buffer of the submitter's heap), and gives
    /// the buffer back. A wait that ended without the task's completion
    /// leaks the buffer (see [`SharedBuffer`]).
    pub fn get_into<'b>(
        &self,
        tag: TagId,
        name: &str,
        offset: u64,
        buffer: SharedBuffer<'b>,
        len: usize,
    ) -> Result<SharedBuffer<'b>, CallError> {
        Self::check_name(name)?;
        Self::check_len(&buffer, len)?;
        let task = Get {
            tag: tag.0,
            name: name.into(),
            offset,
            len: len as u64,
            out: buffer.ptr().into(),
        };
        self.call_with(&task, buffer).map(|(_, buffer)| buffer)
    }

    /// Blob `name` of `tag`: its size, class and targets.
    pub fn stat(&self, tag: TagId, name: &str) -> Result<BlobInfo, CallError> {
        Self::check_name(name)?;
        self.call(&Stat {
            tag: tag.0,
            name: name.into(),
        })
    }

    /// The names of `tag`'s blobs.
    pub fn list_blobs(&self, tag: TagId) -> Result<Vec<String>, CallError> {
        self.list(tag.0)
    }

    /// The tags' names.
    pub fn list_tags(&self) -> Result<Vec<String>, CallError> {
        self.list(0)
    }

    /// Lists into a buffer of the submitter's heap, doubling it while the
    /// names do not fit (up to 64 MiB).
    fn list(&self, tag: u64) -> Result<Vec<String>, CallError> {
        let mut len = 4096usize;
        loop {
            let buffer = self.submitter.allocate_shared(len)?;
            let task = List {
                tag,
                len: len as u64,
                out: buffer.ptr().into(),
            };
            match self.call_with(&task, buffer) {
                Ok((written, buffer)) => {
                    let mut bytes = vec![0u8; written as usize];
                    buffer.read(0, &mut bytes);
                    return Ok(parse_names(&bytes));
                }
                Err(CallError::Blob(code::BUFFER_TOO_SMALL)) if len < 64 << 20 => len *= 2,
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes blob `name` of `tag`.
    pub fn delete(&self, tag: TagId, name: &str) -> Result<(), CallError> {
        Self::check_name(name)?;
        self.call(&Delete {
            tag: tag.0,
            name: name.into(),
        })
        .map(drop)
    }
}

/// The largest chunk [`BlobCaller::chunk_buffer`] gives: bigger ones gain
/// little over the tasks' cost.
const MAX_CHUNK: usize = 4 << 20;
/// The smallest chunk it tries before the heap is called full.
const MIN_CHUNK: usize = 4096;

impl<'s> BlobCaller<'s, Client> {
    /// A buffer of the client's heap for a transfer moved a chunk at a time
    /// (through [`put_from`](Self::put_from) and
    /// [`get_into`](Self::get_into)), so a transfer of any size fits the
    /// client's quota: 4 MiB, or as many bytes as the heap gives, leaving
    /// room for the tasks' futures.
    pub fn chunk_buffer(&self) -> Result<SharedBuffer<'s>, TaskError> {
        let client = self.submitter;
        let quota = client
            .segment()
            .clients()
            .map_or(0, |table| table.quota_bytes());
        let half = usize::try_from(quota / 2).unwrap_or(usize::MAX);
        let mut len = MAX_CHUNK.min(half.max(MIN_CHUNK));
        len = 1 << len.ilog2();
        loop {
            match client.allocate_shared(len) {
                Ok(buffer) => return Ok(buffer),
                Err(TaskError::ClientQuota { .. } | TaskError::ClientHeapFragmented { .. })
                    if len > MIN_CHUNK =>
                {
                    len /= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes `bytes` where `put` says, placed and kept as it says, a chunk
    /// at a time through one [`chunk_buffer`](Self::chunk_buffer), so any
    /// size fits the client's quota; the blob's size after. Each chunk is a put of its own: a
    /// failure may leave the chunks before it written.
    pub fn put_chunked(&self, put: &BlobPut<'_>, bytes: &[u8]) -> Result<u64, CallError> {
        if bytes.is_empty() {
            return self.put(put, bytes);
        }
        let mut buffer = self.chunk_buffer()?;
        let step = buffer.len();
        let mut size = 0;
        for (i, chunk) in bytes.chunks(step).enumerate() {
            buffer.write(0, chunk);
            // An offset beyond the store's largest blob is its refusal (too
            // large), not an overflow here.
            let at = put.offset.saturating_add((i * step) as u64);
            let (after, back) = self.put_from(&put.at(at), buffer, chunk.len())?;
            size = after;
            buffer = back;
        }
        Ok(size)
    }

    /// Reads `out.len()` bytes at `offset` of blob `name` of `tag` a chunk at
    /// a time, as [`put_chunked`](Self::put_chunked) writes them.
    pub fn get_chunked(
        &self,
        tag: TagId,
        name: &str,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), CallError> {
        if out.is_empty() {
            return Ok(());
        }
        let mut buffer = self.chunk_buffer()?;
        let step = buffer.len();
        for (i, chunk) in out.chunks_mut(step).enumerate() {
            let at = offset + (i * step) as u64;
            buffer = self.get_into(tag, name, at, buffer, chunk.len())?;
            buffer.read(0, chunk);
        }
        Ok(())
    }
}

/// The names a list wrote: each a u32 length and its bytes.
fn parse_names(mut bytes: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    while bytes.len() >= 4 {
        let len = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize;
        let Some(name) = bytes.get(4..4 + len) else {
            break;
        };
        names.push(String::from_utf8_lossy(name).into_owned());
        bytes = &bytes[4 + len..];
    }
    names
}
