//! Named sets of shared buffers: a publisher stages the buffers it created
//! for a name (`tandem_share_stage`), writes and seals them, and binds them
//! with a manifest buffer as the name's next version
//! (`tandem_share_bind_set`), all at once; any process looks a version up
//! by name (`tandem_share_lookup_set`) and opens its buffers by id. Sets are
//! listed as JSON (`tandem_share_list_sets_json`) and deleted
//! (`tandem_share_delete_set`). The daemon never reads the manifest: its
//! format is the publisher's (docs/shared-buffers.md, "Named sets").

use std::ffi::c_char;

use tandem_share::{ObjectId, SetInfo};

use crate::args;
use crate::error::{guard, CapiError, CapiResult};
use crate::layout::{SetVersion, Status};
use crate::share::{ShareHandle, SHARES};

/// `info` as C sees it.
fn version_of(info: &SetInfo) -> SetVersion {
    SetVersion {
        version: info.version,
        manifest: info.manifest.0,
        bytes: info.bytes,
        tensors: info.tensors,
        // At most `MAX_SET_BUFFERS`.
        buffer_count: info.buffers.len() as u32,
    }
}

/// `info` written to `out`, and its buffers to `buffers` (of `cap` ids)
/// when they fit: a `cap` too small is `TANDEM_STATUS_INVALID_ARGUMENT`
/// with `*out` written all the same, its `buffer_count` the `cap` needed.
///
/// # Safety
/// `out` is null or writable; `buffers` is null or writable for `cap` ids.
unsafe fn write_version(
    info: &SetInfo,
    out: *mut SetVersion,
    buffers: *mut u64,
    cap: usize,
) -> CapiResult {
    let count = info.buffers.len();
    // SAFETY: the caller's contract.
    unsafe { args::write_out(out, version_of(info), "out") }?;
    if cap < count {
        return Err(CapiError::invalid(format!(
            "cap: {cap} ids, the version holds {count} buffers (now in out->buffer_count)"
        )));
    }
    if count == 0 {
        return Ok(());
    }
    if buffers.is_null() {
        return Err(CapiError::null("buffers"));
    }
    // SAFETY: non-null and writable for `cap` >= `count` ids per the caller.
    let ids = unsafe { std::slice::from_raw_parts_mut(buffers, count) };
    for (slot, id) in ids.iter_mut().zip(&info.buffers) {
        *slot = id.0;
    }
    Ok(())
}

/// Stages buffer `id`, which this process created and has not sealed, for
/// set `name`: nobody can open it until the set is bound, and it is freed
/// if this process closes it, or dies, before. Blocks until the daemon
/// answers. A bad name is `TANDEM_STATUS_INVALID_ARGUMENT`; another's or a
/// sealed buffer `TANDEM_STATUS_REFUSED`.
///
/// # Safety
/// `name` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_stage(
    share: *const ShareHandle,
    id: u64,
    name: *const c_char,
) -> Status {
    guard(|| {
        // SAFETY: the caller's contract.
        let name = unsafe { args::c_str(name, "name") }?;
        Ok(SHARES.get(share)?.stage(ObjectId(id), name)?)
    })
}

/// Binds the next version of set `name` (1 for a new name) to the sealed
/// buffer `manifest` and the `count` sealed buffers at `buffers`, which
/// this process staged for it, all at once: a reader sees the whole
/// version or none. `tensors` is the count `tandem share ls` shows; `out`
/// (nullable) gets the version bound. Blocks until the daemon answers. A
/// buffer not staged for `name` by this process, unsealed, or named twice
/// is `TANDEM_STATUS_REFUSED`; a new name beyond the daemon's `--max-sets`
/// too.
///
/// # Safety
/// `name` is null or NUL-terminated; `buffers` is null or readable for
/// `count` ids; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_bind_set(
    share: *const ShareHandle,
    name: *const c_char,
    manifest: u64,
    buffers: *const u64,
    count: usize,
    tensors: u32,
    out: *mut SetVersion,
) -> Status {
    guard(|| {
        // SAFETY: the caller's contract.
        let name = unsafe { args::c_str(name, "name") }?;
        let ids: Vec<ObjectId> = if count == 0 {
            Vec::new()
        } else if buffers.is_null() {
            return Err(CapiError::null("buffers"));
        } else if count > tandem_share::MAX_SET_BUFFERS {
            return Err(CapiError::invalid(format!(
                "count: {count} buffers, a set holds at most {}",
                tandem_share::MAX_SET_BUFFERS
            )));
        } else {
            // SAFETY: non-null and readable for `count` ids per the caller.
            let raw = unsafe { std::slice::from_raw_parts(buffers, count) };
            raw.iter().copied().map(ObjectId).collect()
        };
        let info = SHARES
            .get(share)?
            .bind_set(name, ObjectId(manifest), &ids, tensors)?;
        if out.is_null() {
            return Ok(());
        }
        // SAFETY: non-null, and writable per the caller.
        unsafe { args::write_out(out, version_of(&info), "out") }
    })
}

/// Looks up version `version` of set `name` (0: the latest) into `out`,
/// and its buffers' ids into `buffers` (of `cap` ids; null when `cap` is
/// 0). A `cap` smaller than the version's buffers is
/// `TANDEM_STATUS_INVALID_ARGUMENT` with `*out` written all the same, its
/// `buffer_count` the `cap` needed. An unknown name or version is
/// `TANDEM_STATUS_NOT_FOUND`; a name whose first version is being
/// published `TANDEM_STATUS_REFUSED` (try again). Open the buffers with
/// `tandem_share_get`. Blocks until the daemon answers.
///
/// # Safety
/// `name` is null or NUL-terminated; `out` is null or writable; `buffers`
/// is null or writable for `cap` ids.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_lookup_set(
    share: *const ShareHandle,
    name: *const c_char,
    version: u64,
    out: *mut SetVersion,
    buffers: *mut u64,
    cap: usize,
) -> Status {
    guard(|| {
        args::need_out(out, "out")?;
        // SAFETY: the caller's contract.
        let name = unsafe { args::c_str(name, "name") }?;
        let info = SHARES
            .get(share)?
            .lookup_set(name, (version != 0).then_some(version))?;
        // SAFETY: the caller's contract.
        unsafe { write_version(&info, out, buffers, cap) }
    })
}

/// Writes every version of every set the daemon keeps as
/// `tandem share ls --sets --json` prints them (an array of objects:
/// `name`, `version`, `tensors`, `bytes`, `manifest`, `buffers`),
/// NUL-terminated, into `buf` of `cap` bytes; `len` gets the bytes it
/// takes, the NUL included. A `cap` smaller is
/// `TANDEM_STATUS_INVALID_ARGUMENT` with `len` set all the same (`buf` may
/// then be null). Blocks until the daemon answers.
///
/// # Safety
/// `buf` is null or writable for `cap` bytes; `len` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_list_sets_json(
    share: *const ShareHandle,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> Status {
    guard(|| {
        args::need_out(len, "len")?;
        let sets = SHARES.get(share)?.list_sets()?;
        let rows: Vec<serde_json::Value> = sets
            .iter()
            .map(|s| {
                serde_json::json!({
                    "name": s.name,
                    "version": s.version,
                    "tensors": s.tensors,
                    "bytes": s.bytes,
                    "manifest": s.manifest.0,
                    "buffers": s.buffers.iter().map(|id| id.0).collect::<Vec<_>>(),
                })
            })
            .collect();
        let json = serde_json::Value::Array(rows).to_string();
        // SAFETY: the caller's contract.
        unsafe { args::write_text(&json, buf, cap, len, "the listing") }
    })
}

/// Deletes set `name` and every version it keeps: nobody can look it up
/// any more; its buffers are freed once the last process holding them
/// closes them. An unknown name is `TANDEM_STATUS_NOT_FOUND`. Blocks until
/// the daemon answers.
///
/// # Safety
/// `name` is null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn tandem_share_delete_set(
    share: *const ShareHandle,
    name: *const c_char,
) -> Status {
    guard(|| {
        // SAFETY: the caller's contract.
        let name = unsafe { args::c_str(name, "name") }?;
        Ok(SHARES.get(share)?.delete_set(name)?)
    })
}
