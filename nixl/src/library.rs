//! The C functions of NIXL's C API (`libnixl_capi.so`, the `nixl_capi_*`
//! functions that NIXL's `wrapper.h` declares) that this crate calls,
//! resolved once when the library is loaded: a library that lacks one is
//! refused then, with its name, never at a call.

use core::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use crate::error::NixlError;

/// `nixl_capi_status_t`: 0 is success, 1 in progress, negatives errors.
pub(crate) type Status = c_int;
/// Success.
pub(crate) const SUCCESS: Status = 0;
/// A transfer still in flight.
pub(crate) const IN_PROGRESS: Status = 1;
/// Every opaque handle of the C API (`nixl_capi_*_t`) is a pointer.
pub(crate) type Handle = *mut c_void;

/// Declares the table: one field per function, and [`SYMBOLS`], their names
/// (the test that the library has every one reads it).
macro_rules! c_api {
    ($($name:ident: fn($($arg:ty),*);)*) => {
        /// The functions of `libnixl_capi.so` this crate calls.
        pub(crate) struct CApi {
            $(pub(crate) $name: unsafe extern "C" fn($($arg),*) -> Status,)*
            /// Keeps the functions above mapped.
            _library: libloading::Library,
        }

        /// The name of every function in [`CApi`].
        pub const SYMBOLS: &[&str] = &[$(stringify!($name)),*];

        impl CApi {
            fn resolve(library: libloading::Library, path: &Path) -> Result<Self, NixlError> {
                Ok(Self {
                    $($name: {
                        // SAFETY: the symbol's type is the one NIXL's
                        // wrapper.h declares for this name (every argument
                        // a pointer, a C enum or an integer of the given
                        // width; every result a nixl_capi_status_t).
                        let symbol = unsafe {
                            library.get::<unsafe extern "C" fn($($arg),*) -> Status>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                        };
                        *symbol.map_err(|_| NixlError::MissingSymbol {
                            path: path.to_path_buf(),
                            symbol: stringify!($name),
                        })?
                    },)*
                    _library: library,
                })
            }
        }
    };
}

c_api! {
    nixl_capi_create_agent: fn(*const c_char, *mut Handle);
    nixl_capi_destroy_agent: fn(Handle);
    nixl_capi_get_plugin_params: fn(Handle, *const c_char, *mut Handle, *mut Handle);
    nixl_capi_destroy_mem_list: fn(Handle);
    nixl_capi_destroy_params: fn(Handle);
    nixl_capi_create_backend: fn(Handle, *const c_char, Handle, *mut Handle);
    nixl_capi_destroy_backend: fn(Handle);
    nixl_capi_create_opt_args: fn(*mut Handle);
    nixl_capi_destroy_opt_args: fn(Handle);
    nixl_capi_opt_args_add_backend: fn(Handle, Handle);
    nixl_capi_create_reg_dlist: fn(c_int, *mut Handle);
    nixl_capi_destroy_reg_dlist: fn(Handle);
    nixl_capi_reg_dlist_add_desc: fn(Handle, usize, usize, u64, *const c_void, usize);
    nixl_capi_register_mem: fn(Handle, Handle, Handle);
    nixl_capi_deregister_mem: fn(Handle, Handle, Handle);
    nixl_capi_get_local_partial_md: fn(Handle, Handle, *mut *mut c_void, *mut usize, Handle);
    nixl_capi_load_remote_md: fn(Handle, *const c_void, usize, *mut *mut c_char);
    nixl_capi_invalidate_remote_md: fn(Handle, *const c_char);
    nixl_capi_create_xfer_dlist: fn(c_int, *mut Handle);
    nixl_capi_destroy_xfer_dlist: fn(Handle);
    nixl_capi_xfer_dlist_add_desc: fn(Handle, usize, usize, u64);
    nixl_capi_create_xfer_req: fn(Handle, c_int, Handle, Handle, *const c_char, *mut Handle, Handle);
    nixl_capi_post_xfer_req: fn(Handle, Handle, Handle);
    nixl_capi_get_xfer_status: fn(Handle, Handle);
    nixl_capi_release_xfer_req: fn(Handle, Handle);
    nixl_capi_destroy_xfer_req: fn(Handle);
}

impl CApi {
    /// Loads the library at `path` and resolves every function.
    pub(crate) fn load(path: &Path) -> Result<Self, NixlError> {
        // SAFETY: loading runs the library's initialisers, which for NIXL's
        // C API (and the libraries it links) set up statics only.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| NixlError::Load {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        Self::resolve(library, path)
    }
}

/// The names [`SYMBOLS`] lists that the library at `path` lacks (empty:
/// it has them all).
pub fn missing_symbols(path: &Path) -> Result<Vec<&'static str>, NixlError> {
    // SAFETY: as in `CApi::load`.
    let library = unsafe { libloading::Library::new(path) }.map_err(|e| NixlError::Load {
        path: PathBuf::from(path),
        why: e.to_string(),
    })?;
    Ok(SYMBOLS
        .iter()
        .copied()
        .filter(|name| {
            // SAFETY: only looked up, never called through this type.
            unsafe { library.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err()
        })
        .collect())
}

/// Turns a status into a result.
pub(crate) fn check(call: &'static str, status: Status) -> Result<(), NixlError> {
    if status == SUCCESS {
        Ok(())
    } else {
        Err(NixlError::Call { call, status })
    }
}
