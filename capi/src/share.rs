//! The share daemon's client: GPU (and CPU device) buffers handed between
//! processes by id. A writer creates a buffer, fills it (its own kernels
//! through its device address, or `tandem_share_buffer_write`) and seals
//! it; readers get it by id and read it (their kernels, or
//! `tandem_share_buffer_read`); anyone deletes it. Every call is
//! thread-safe; those that talk to the daemon block until it answers.

use std::ffi::c_char;
use std::path::Path;
use std::time::Duration;

use tandem_runtime::BackendChoice;
use tandem_share::{AnyHeldBuffer, AnyShareClient, ObjectId};

use crate::args;
use crate::error::{guard, CapiError, CapiResult};
use crate::handles::Handles;
use crate::layout::Status;

/// A connection to a share daemon.
///
/// A child forked from a process holding one may go on using it: on its
/// first call there it connects as a client of its own, and nothing the
/// parent holds (buffers, leases, daemon) changes. Buffer handles it
/// inherited stay the parent's, so the child opens buffers by id itself. On
/// CUDA a forked child cannot use the GPU at all. Details:
/// docs/shared-buffers.md, "Forked children".
pub struct ShareHandle {
    _opaque: [u8; 0],
}

/// A shared buffer mapped in this process.
pub struct ShareBufferHandle {
    _opaque: [u8; 0],
}

pub(crate) static SHARES: Handles<AnyShareClient> = Handles::new("tandem_share", "share");
static BUFFERS: Handles<AnyHeldBuffer> = Handles::new("tandem_share_buffer", "buffer");

fn open_share(share: AnyShareClient, out: *mut *mut ShareHandle) -> CapiResult {
    // SAFETY: `out` is null or writable per the exported caller's contract.
    unsafe { args::write_out(out, SHARES.insert(share), "out") }
}

/// Connects to the daemon serving the socket `socket` (`tandem share serve
/// --socket`), on the backend it serves: `TANDEM_STATUS_REFUSED` where this
/// build lacks that backend. Blocks until it answers.
///
/// # Safety
/// `socket` is null or NUL-terminated; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_connect(
    socket: *const c_char,
    out: *mut *mut ShareHandle,
) -> Status {
    guard(|| {
        args::need_out(out, "out")?;
        // SAFETY: the caller's contract.
        let socket = unsafe { args::c_str(socket, "socket") }?;
        open_share(AnyShareClient::connect(Path::new(socket))?, out)
    })
}

/// Starts a daemon (`tandem share serve`, from `tandem_bin`, null:
/// `$TANDEM_BIN`, else `tandem` beside the program) in a child process on
/// a socket of its own and connects; it stops once the connection and its
/// buffers are closed. Its backend is CUDA where this build has it and a
/// device answers, else HIP likewise, else the CPU device. Blocks until it
/// serves.
///
/// # Safety
/// `tandem_bin` is null or NUL-terminated; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_spawn(
    tandem_bin: *const c_char,
    out: *mut *mut ShareHandle,
) -> Status {
    guard(|| {
        args::need_out(out, "out")?;
        // SAFETY: the caller's contract.
        let exe = unsafe { args::opt_c_str(tandem_bin, "tandem_bin") }?;
        open_share(
            AnyShareClient::spawn(BackendChoice::Auto, exe.map(Path::new))?,
            out,
        )
    })
}

/// Closes the connection (buffers still open keep it until they close).
/// Null is a no-op; a second close is `TANDEM_STATUS_CLOSED_HANDLE`.
#[no_mangle]
pub extern "C" fn tandem_share_close(share: *mut ShareHandle) -> Status {
    guard(|| SHARES.remove(share))
}

/// The daemon's process id. Never blocks.
///
/// # Safety
/// `pid` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_daemon_pid(
    share: *const ShareHandle,
    pid: *mut u32,
) -> Status {
    guard(|| {
        let share = SHARES.get(share)?;
        // SAFETY: the caller's contract.
        unsafe { args::write_out(pid, share.daemon_pid(), "pid") }
    })
}

/// Creates a buffer of `bytes` on device `device`, writable by this
/// process until sealed; `id` gets the id readers open it by. A `device`
/// that does not exist is `TANDEM_STATUS_NOT_FOUND`.
///
/// # Safety
/// `id` and `out` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_create(
    share: *const ShareHandle,
    device: u32,
    bytes: usize,
    id: *mut u64,
    out: *mut *mut ShareBufferHandle,
) -> Status {
    guard(|| {
        args::need_out(id, "id")?;
        args::need_out(out, "out")?;
        if bytes == 0 || bytes > args::MAX_BYTES {
            return Err(CapiError::invalid(format!(
                "bytes: {bytes} is not a buffer size"
            )));
        }
        let buffer = SHARES.get(share)?.create(device as usize, bytes)?;
        // SAFETY: both checked non-null above; writable per the caller.
        unsafe {
            args::write_out(id, buffer.id().0, "id")?;
            args::write_out(out, BUFFERS.insert(buffer), "out")
        }
    })
}

/// Opens sealed buffer `id` read-only, waiting up to `wait_ms` for its
/// seal (0: the daemon's default); returns once the writer's work on it is
/// complete, so this process's kernels may read it at once. The mapping is
/// read-only: a store through its device address kills the storing
/// process (SIGSEGV on the CPU device, an illegal address on a GPU except
/// through a legacy CUDA IPC handle) rather than change what other readers
/// see (docs/shared-buffers.md, "Read-only readers").
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_get(
    share: *const ShareHandle,
    id: u64,
    wait_ms: u64,
    out: *mut *mut ShareBufferHandle,
) -> Status {
    guard(|| {
        args::need_out(out, "out")?;
        let share = SHARES.get(share)?;
        let wait = match wait_ms {
            0 => tandem_share::DEFAULT_SEAL_WAIT,
            ms => Duration::from_millis(ms),
        };
        let buffer = share.get(ObjectId(id), None, wait)?;
        // C callers order their own work after this call's return rather
        // than after the client's stream.
        buffer.wait_for_seal()?;
        // SAFETY: checked non-null above; writable per the caller.
        unsafe { args::write_out(out, BUFFERS.insert(buffer), "out") }
    })
}

/// Lets the other nodes of the daemon's cluster fetch sealed buffer `id`
/// (nothing leaves a node unless exported); `TANDEM_STATUS_UNSUPPORTED`
/// when the daemon is in no cluster.
#[no_mangle]
pub extern "C" fn tandem_share_export(share: *const ShareHandle, id: u64) -> Status {
    guard(|| Ok(SHARES.get(share)?.export(ObjectId(id))?))
}

/// Copies buffer `remote` (`"NODE/ID"`: sealed and exported on node NODE of
/// the daemon's cluster) into a new sealed buffer on the daemon's device
/// `device`, opened read-only into `*out` (its own local id). Blocks until
/// the bytes are all there. Fails with `TANDEM_STATUS_NOT_FOUND` (no such
/// node or buffer), `TANDEM_STATUS_REFUSED` (not exported, or the other
/// node holds another cluster token), `TANDEM_STATUS_UNREACHABLE` (etcd or
/// the other node went away), `TANDEM_STATUS_UNSUPPORTED` (the daemon is in
/// no cluster), `TANDEM_STATUS_INVALID_ARGUMENT` (not `NODE/ID`); nothing
/// of a failed fetch is left on either node.
///
/// # Safety
/// `remote` is null or NUL-terminated; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_fetch(
    share: *const ShareHandle,
    remote: *const c_char,
    device: u32,
    out: *mut *mut ShareBufferHandle,
) -> Status {
    guard(|| {
        args::need_out(out, "out")?;
        // SAFETY: the caller's contract.
        let remote = unsafe { args::c_str(remote, "remote") }?;
        let buffer = SHARES.get(share)?.fetch(remote, device as usize)?;
        // SAFETY: checked non-null above; writable per the caller.
        unsafe { args::write_out(out, BUFFERS.insert(buffer), "out") }
    })
}

/// Deletes buffer `id`: those who hold it keep it until they close it.
#[no_mangle]
pub extern "C" fn tandem_share_delete(share: *const ShareHandle, id: u64) -> Status {
    guard(|| Ok(SHARES.get(share)?.delete(ObjectId(id))?))
}

/// Closes a buffer (an unsealed one is abandoned: the daemon frees it).
/// Null is a no-op; a second close is `TANDEM_STATUS_CLOSED_HANDLE`.
#[no_mangle]
pub extern "C" fn tandem_share_buffer_close(buffer: *mut ShareBufferHandle) -> Status {
    guard(|| BUFFERS.remove(buffer))
}

/// The buffer's id, device address (for this process's kernels) and
/// length; each output is nullable. Never blocks.
///
/// # Safety
/// `id`, `device_ptr` and `len` are each null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_buffer_info(
    buffer: *const ShareBufferHandle,
    id: *mut u64,
    device_ptr: *mut u64,
    len: *mut usize,
) -> Status {
    guard(|| {
        let buffer = BUFFERS.get(buffer)?;
        // SAFETY: each non-null output is writable per the caller.
        unsafe {
            if !id.is_null() {
                args::write_out(id, buffer.id().0, "id")?;
            }
            if !device_ptr.is_null() {
                args::write_out(device_ptr, buffer.device_ptr(), "device_ptr")?;
            }
            if !len.is_null() {
                args::write_out(len, buffer.len(), "len")?;
            }
        }
        Ok(())
    })
}

/// Copies `len` bytes from `data` to `offset` of an unsealed buffer (the
/// host side of a mirror); a sealed one, its writer's handle or a reader's,
/// is `TANDEM_STATUS_REFUSED`. Blocks until copied.
///
/// # Safety
/// `data` is null or readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_buffer_write(
    buffer: *const ShareBufferHandle,
    offset: usize,
    data: *const u8,
    len: usize,
) -> Status {
    guard(|| {
        // SAFETY: the caller's contract.
        let data = unsafe { args::bytes(data, len, "data") }?;
        Ok(BUFFERS.get(buffer)?.write(offset, data)?)
    })
}

/// Copies `len` bytes at `offset` of the buffer to `out` (a sealed one's
/// after its writer's work); only that range is copied, whatever the
/// buffer's size. Blocks until copied.
///
/// # Safety
/// `out` is null or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_buffer_read(
    buffer: *const ShareBufferHandle,
    offset: usize,
    out: *mut u8,
    len: usize,
) -> Status {
    guard(|| {
        // SAFETY: the caller's contract.
        let out = unsafe { args::bytes_mut(out, len, "out") }?;
        Ok(BUFFERS.get(buffer)?.read(offset, out)?)
    })
}

/// Seals a buffer this process created: readers may open it. Work this
/// process queued on it (its kernels) must be complete first (synchronise
/// the stream). Blocks until the daemon answers and the seal is recorded,
/// so the process may exit as soon as it returns.
#[no_mangle]
pub extern "C" fn tandem_share_buffer_seal(buffer: *const ShareBufferHandle) -> Status {
    guard(|| Ok(BUFFERS.get(buffer)?.seal()?))
}
