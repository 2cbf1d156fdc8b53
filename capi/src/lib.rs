//! Tandem's C ABI: C and C++ host programs attach to a runtime (or fork
//! one), get device queues of their own for their own kernels, submit
//! tasks and wait, call the blob store and the share daemon. The header is
//! `include/tandem.h`, generated from this crate by cbindgen and committed
//! (`cargo xtask capi-header` writes it; the `cpp` test leg checks it has
//! not drifted); `include/tandem.hpp` is a header-only C++ layer over it;
//! `cargo xtask install-capi --prefix DIR` installs the library, the
//! headers and a CMake package (`find_package(Tandem)`, target
//! `Tandem::tandem`).
//!
//! # The boundary's rules
//!
//! * Every call returns a [`Status`]; on failure the calling thread's
//!   message is [`tandem_last_error_message`]. No call aborts or unwinds
//!   into C: each runs in `error::guard`, which catches panics.
//! * Handles (`tandem_client*`, `tandem_device_queues*`, `tandem_share*`,
//!   `tandem_share_buffer*`) are keys into tables of live objects
//!   (`handles.rs`), never dereferenced: a null handle is
//!   `TANDEM_STATUS_NULL_POINTER` (a no-op to a close call), a closed or
//!   foreign one `TANDEM_STATUS_CLOSED_HANDLE`, a double close too; a close
//!   racing a call on another thread waits for nothing and frees the object
//!   once the call returns.
//! * Every argument check names the argument in its message; a device
//!   ordinal that does not exist is `TANDEM_STATUS_NOT_FOUND`.
//! * Only C types cross: integers, `char*` strings (NUL-terminated UTF-8),
//!   byte pointers with lengths, the `#[repr(C)]` structs of [`layout`].
//! * Calls are thread-safe; each says whether it blocks.
//!
//! # The front
//!
//! The C functions are the API. They and the opaque handle types they take
//! are re-exported here so that this crate's tests and bench call them as C
//! does; [`layout`] holds the codes and structs the header states. Modules,
//! bottom up: `layout`, `error` (codes, messages,
//! the guard), `args` (C arguments checked), `handles`; then `client` (attach,
//! fork, tasks, status), `blob`, `queues` (device queues and the CPU
//! device's launch), `share` with `sets` (named sets of its buffers) and
//! `version`.

mod args;
mod blob;
mod client;
mod error;
mod handles;
pub mod layout;
mod queues;
mod sets;
mod share;
mod version;

pub use blob::{
    tandem_blob_delete, tandem_blob_get, tandem_blob_put, tandem_blob_size, tandem_blob_tag,
};
pub use client::{
    tandem_client_add, tandem_client_attach, tandem_client_check_runtime, tandem_client_close,
    tandem_client_fork, tandem_client_noop, tandem_client_runtime_pid, tandem_status_json,
    ClientHandle,
};
pub use error::tandem_last_error_message;
pub use queues::{
    tandem_device_queues_check_runtime, tandem_device_queues_close,
    tandem_device_queues_launch_cpu, tandem_device_queues_open, tandem_device_queues_segment,
    tandem_device_queues_stop, DeviceQueuesHandle,
};
pub use sets::{
    tandem_share_bind_set, tandem_share_delete_set, tandem_share_list_sets_json,
    tandem_share_lookup_set, tandem_share_stage,
};
pub use share::{
    tandem_share_buffer_close, tandem_share_buffer_info, tandem_share_buffer_read,
    tandem_share_buffer_seal, tandem_share_buffer_write, tandem_share_close, tandem_share_connect,
    tandem_share_create, tandem_share_daemon_pid, tandem_share_delete, tandem_share_export,
    tandem_share_fetch, tandem_share_get, tandem_share_spawn, ShareBufferHandle, ShareHandle,
};
pub use version::{tandem_version, tandem_version_numbers};
