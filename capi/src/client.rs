//! A host client of a runtime in another process: attach to its CPU
//! segment or fork one, submit tasks to its workers and wait, and read a
//! runtime's status.

use std::ffi::c_char;
use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use tandem_runtime::{math, Client, Config, Liveness, Route};

use crate::args::{self, deadline};
use crate::error::{guard, CapiError, CapiResult};
use crate::handles::Handles;
use crate::layout::Status;

/// A client of a runtime in another process. Thread-safe: calls on one
/// client may come from several threads at once.
pub struct ClientHandle {
    _opaque: [u8; 0],
}

pub(crate) static CLIENTS: Handles<Client> = Handles::new("tandem_client", "client");

/// The client of `handle`.
pub(crate) fn client(handle: *const ClientHandle) -> CapiResult<Arc<Client>> {
    CLIENTS.get(handle)
}

/// Attaches to the runtime whose CPU segment is `segment` (its name in
/// /dev/shm, as `tandem run --announce` prints it) and claims a client slot.
/// No segment of that name is `TANDEM_STATUS_NOT_FOUND`; a name no segment
/// can have (empty, or with a `/`) `TANDEM_STATUS_INVALID_ARGUMENT`.
/// Blocks briefly (opens the segment). Close with `tandem_client_close`.
///
/// # Safety
/// `segment` is null or a NUL-terminated string; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_client_attach(
    segment: *const c_char,
    out: *mut *mut ClientHandle,
) -> Status {
    guard(|| {
        args::need_out(out, "out")?;
        // SAFETY: the caller's contract.
        let segment = unsafe { args::c_str(segment, "segment") }?;
        let client = Client::attach(segment).map_err(|e| {
            let e = CapiError::from(e);
            CapiError::new(e.status, format!("segment {segment:?}: {}", e.message))
        })?;
        // SAFETY: checked non-null above; writable per the caller.
        unsafe { args::write_out(out, CLIENTS.insert(client), "out") }
    })
}

/// Starts `tandem run` in a child process and attaches to it once it
/// serves; closing the client stops the child. `tandem_bin`: the `tandem`
/// executable (null: `$TANDEM_BIN`, else `tandem` beside the program).
/// `config_path`: a `tandem run` TOML file (null: the defaults). Blocks
/// until the child serves.
///
/// # Safety
/// `tandem_bin` and `config_path` are null or NUL-terminated strings; `out`
/// is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_client_fork(
    tandem_bin: *const c_char,
    config_path: *const c_char,
    out: *mut *mut ClientHandle,
) -> Status {
    guard(|| {
        args::need_out(out, "out")?;
        // SAFETY: the caller's contract.
        let exe = unsafe { args::opt_c_str(tandem_bin, "tandem_bin") }?;
        // SAFETY: the caller's contract.
        let config_path = unsafe { args::opt_c_str(config_path, "config_path") }?;
        let config = match config_path {
            Some(path) => Config::from_toml(&tandem_runtime::read_config_file(Path::new(path))?)?,
            None => Config::default(),
        };
        let client = match exe {
            Some(exe) => Client::fork_runtime_with(Path::new(exe), &config)?,
            None => Client::fork_runtime(&config)?,
        };
        // SAFETY: checked non-null above; writable per the caller.
        unsafe { args::write_out(out, CLIENTS.insert(client), "out") }
    })
}

/// Detaches (and stops a forked runtime) once no device queues of this
/// client remain open. Null is a no-op; a second close is
/// `TANDEM_STATUS_CLOSED_HANDLE`. Blocks while a forked child stops.
#[no_mangle]
pub extern "C" fn tandem_client_close(client: *mut ClientHandle) -> Status {
    guard(|| CLIENTS.remove(client))
}

/// The runtime's process id. Never blocks.
///
/// # Safety
/// `pid` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_client_runtime_pid(
    client: *const ClientHandle,
    pid: *mut u32,
) -> Status {
    guard(|| {
        let client = self::client(client)?;
        // SAFETY: the caller's contract.
        unsafe { args::write_out(pid, client.runtime_pid(), "pid") }
    })
}

/// `TANDEM_STATUS_OK` while the runtime serves or is only slow to answer,
/// `TANDEM_STATUS_RUNTIME_DEAD` once it shut down or its process is gone.
/// Never blocks.
#[no_mangle]
pub extern "C" fn tandem_client_check_runtime(client: *const ClientHandle) -> Status {
    guard(|| {
        let client = self::client(client)?;
        match client.runtime_liveness() {
            Liveness::ShutDown | Liveness::Gone => Err(CapiError::new(
                Status::RuntimeDead,
                format!(
                    "the runtime (pid {}) is {}",
                    client.runtime_pid(),
                    client.runtime_liveness()
                ),
            )),
            _ => Ok(()),
        }
    })
}

/// Submits `a + b` to the runtime's built-in math pool on `lane` and waits
/// up to `timeout_ms` (0: no limit) for the sum: a task's round trip.
/// Blocks.
///
/// # Safety
/// `sum` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_client_add(
    client: *const ClientHandle,
    lane: u32,
    a: u64,
    b: u64,
    timeout_ms: u64,
    sum: *mut u64,
) -> Status {
    guard(|| {
        args::need_out(sum, "sum")?;
        let client = self::client(client)?;
        let stop = AtomicU32::new(0);
        let value = client.call(
            Route::lane(lane),
            &math::Add { a, b },
            &stop,
            deadline(timeout_ms),
        )?;
        // SAFETY: the caller's contract.
        unsafe { args::write_out(sum, value, "sum") }
    })
}

/// Submits a task that does nothing to the math pool on `lane` and waits up
/// to `timeout_ms` (0: no limit) for its answer. Blocks.
#[no_mangle]
pub extern "C" fn tandem_client_noop(
    client: *const ClientHandle,
    lane: u32,
    timeout_ms: u64,
) -> Status {
    guard(|| {
        let client = self::client(client)?;
        let stop = AtomicU32::new(0);
        client.call(Route::lane(lane), &math::Noop, &stop, deadline(timeout_ms))?;
        Ok(())
    })
}

/// Writes the status of the runtime serving `segment` (null: the one live
/// runtime) as `tandem status --json`'s JSON, NUL-terminated, into `buf` of
/// `cap` bytes; `len` gets the bytes it takes, the NUL included: the `cap`
/// a call needs. A `cap` smaller than that is
/// `TANDEM_STATUS_INVALID_ARGUMENT` with `len` set all the same (`buf` may
/// then be null), so a caller sizes its buffer by one call and fills it by
/// the next. The status is live, so it may outgrow a buffer sized by an
/// earlier call, and then says so the same way. Reads the segment; never
/// waits for the runtime. Thread-safe.
///
/// # Safety
/// `segment` is null or NUL-terminated; `buf` is null or writable for `cap`
/// bytes; `len` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_status_json(
    segment: *const c_char,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> Status {
    guard(|| {
        args::need_out(len, "len")?;
        // SAFETY: the caller's contract.
        let segment = unsafe { args::opt_c_str(segment, "segment") }?;
        let name = match segment {
            Some(name) => name.to_owned(),
            None => tandem_runtime::status::single_live_runtime()
                .map_err(|e| CapiError::new(Status::NotFound, e.to_string()))?,
        };
        let snapshot = tandem_runtime::status::read_status(&name)
            .map_err(|e| CapiError::new(Status::NotFound, e.to_string()))?;
        let json = serde_json::to_string(&snapshot)
            .map_err(|e| CapiError::new(Status::Failed, e.to_string()))?;
        // SAFETY: the caller's contract.
        unsafe { args::write_text(&json, buf, cap, len, "the status") }
    })
}
