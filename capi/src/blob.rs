//! The blob store of a runtime, called from host code through a client:
//! the same tasks a kernel's `tandem/blob.h` calls send, through
//! [`BlobCaller`]. The runtime must serve the blob pool (`tandem blob run`).
//! Every call blocks until the store answered or `timeout_ms` passed (0: no
//! limit; a put or get waits that long for each chunk), and is thread-safe.
//!
//! Puts and gets move their bytes through a buffer of the client's heap a
//! chunk at a time (`put_chunked`, `get_chunked`), so their size is not
//! bounded by the heap. The store holds no empty blobs (a zero-byte range
//! is its `EmptyRange`), so a zero `len` is refused here, before any task.

use std::ffi::c_char;
use std::time::Duration;
use tandem_blob::BlobPut;

use tandem_blob::{BlobCaller, TagId};
use tandem_runtime::Client;

use crate::args;
use crate::client::{client, ClientHandle};
use crate::error::{guard, CapiError, CapiResult};
use crate::layout::Status;

/// Runs `call` with a blob caller of `client` that gives up after
/// `timeout_ms` (0: never).
fn with_caller<T>(
    client: &Client,
    timeout_ms: u64,
    call: impl FnOnce(&BlobCaller<'_, Client>) -> CapiResult<T>,
) -> CapiResult<T> {
    let caller = BlobCaller::new(client);
    let caller = match timeout_ms {
        0 => caller,
        ms => caller.with_timeout(Duration::from_millis(ms)),
    };
    call(&caller)
}

/// The id of tag `name`, created if new.
///
/// # Safety
/// `name` is null or NUL-terminated; `tag` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_blob_tag(
    client: *const ClientHandle,
    name: *const c_char,
    timeout_ms: u64,
    tag: *mut u64,
) -> Status {
    guard(|| {
        let client = self::client(client)?;
        args::need_out(tag, "tag")?;
        // SAFETY: the caller's contract.
        let name = unsafe { args::c_str(name, "name") }?;
        let id = with_caller(&client, timeout_ms, |c| Ok(c.get_or_create_tag(name)?))?;
        // SAFETY: the caller's contract.
        unsafe { args::write_out(tag, id.0, "tag") }
    })
}

/// Writes the `len` bytes at `data` at `offset` of blob `name` of `tag`,
/// placed automatically; `size` (nullable) gets the blob's size after it.
/// Any `len` from 1 byte up: a put is written a chunk (at most 4 MiB) at a
/// time, each chunk all or nothing, so a put that fails after its first
/// chunk may leave the chunks before it written. A zero `len` is
/// `TANDEM_STATUS_INVALID_ARGUMENT`: the store holds no empty blobs.
///
/// # Safety
/// `name` is null or NUL-terminated; `data` is null or readable for `len`
/// bytes; `size` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_blob_put(
    client: *const ClientHandle,
    tag: u64,
    name: *const c_char,
    offset: u64,
    data: *const u8,
    len: usize,
    timeout_ms: u64,
    size: *mut u64,
) -> Status {
    guard(|| {
        let client = self::client(client)?;
        // SAFETY: the caller's contract.
        let name = unsafe { args::c_str(name, "name") }?;
        // SAFETY: the caller's contract.
        let data = unsafe { args::bytes(data, len, "data") }?;
        if data.is_empty() {
            return Err(CapiError::invalid(
                "len is zero: the store holds no empty blobs, so a put writes at least a byte",
            ));
        }
        let after = with_caller(&client, timeout_ms, |c| {
            Ok(c.put_chunked(&BlobPut::new(TagId(tag), name).at(offset), data)?)
        })?;
        if size.is_null() {
            return Ok(());
        }
        // SAFETY: non-null, writable per the caller.
        unsafe { args::write_out(size, after, "size") }
    })
}

/// Reads `len` bytes at `offset` of blob `name` of `tag` into `out`: any
/// `len` from 1 byte up, read a chunk at a time. A zero `len` is
/// `TANDEM_STATUS_INVALID_ARGUMENT`, as for a put.
///
/// # Safety
/// `name` is null or NUL-terminated; `out` is null or writable for `len`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn tandem_blob_get(
    client: *const ClientHandle,
    tag: u64,
    name: *const c_char,
    offset: u64,
    out: *mut u8,
    len: usize,
    timeout_ms: u64,
) -> Status {
    guard(|| {
        let client = self::client(client)?;
        // SAFETY: the caller's contract.
        let name = unsafe { args::c_str(name, "name") }?;
        // SAFETY: the caller's contract.
        let out = unsafe { args::bytes_mut(out, len, "out") }?;
        if out.is_empty() {
            return Err(CapiError::invalid(
                "len is zero: the store holds no empty blobs, so a get reads at least a byte",
            ));
        }
        with_caller(&client, timeout_ms, |c| {
            Ok(c.get_chunked(TagId(tag), name, offset, out)?)
        })
    })
}

/// The size in bytes of blob `name` of `tag`.
///
/// # Safety
/// `name` is null or NUL-terminated; `size` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_blob_size(
    client: *const ClientHandle,
    tag: u64,
    name: *const c_char,
    timeout_ms: u64,
    size: *mut u64,
) -> Status {
    guard(|| {
        let client = self::client(client)?;
        args::need_out(size, "size")?;
        // SAFETY: the caller's contract.
        let name = unsafe { args::c_str(name, "name") }?;
        let info = with_caller(&client, timeout_ms, |c| Ok(c.stat(TagId(tag), name)?))?;
        // SAFETY: the caller's contract.
        unsafe { args::write_out(size, info.size, "size") }
    })
}

/// Deletes blob `name` of `tag`.
///
/// # Safety
/// `name` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn tandem_blob_delete(
    client: *const ClientHandle,
    tag: u64,
    name: *const c_char,
    timeout_ms: u64,
) -> Status {
    guard(|| {
        let client = self::client(client)?;
        // SAFETY: the caller's contract.
        let name = unsafe { args::c_str(name, "name") }?;
        with_caller(&client, timeout_ms, |c| Ok(c.delete(TagId(tag), name)?))
    })
}
