//! The buffer protocol's C side, as every CPython the wheel installs on
//! (3.9 and later) has it: `Py_buffer`, the request flags, and the two
//! calls a consumer makes.
//!
//! The wheel is abi3 for 3.9, whose limited API does not name these (they
//! joined it in 3.11, so PyO3's bindings of them need a 3.11 wheel). What
//! makes declaring them here sound for 3.9 and 3.10 as well: the struct's
//! layout and the functions' signatures are those of every CPython since
//! 3.3 (the 3.11 stable ABI froze them as they were), both functions are
//! exported by the interpreter the module is loaded into (the package is
//! Linux only: symbols resolve against the running interpreter, not a
//! `python3.dll` that might lack them), and the getbuffer slot number is
//! the stable ABI's (`typeslots.h`), which `PyType_FromSpec` accepts from
//! 3.9 on.

use core::ffi::{c_char, c_int, c_void};

use pyo3::ffi::{PyObject, Py_ssize_t};

/// `Py_buffer` (`Include/pybuffer.h`): one exported view of an object's
/// memory.
#[repr(C)]
pub(crate) struct View {
    pub(crate) buf: *mut c_void,
    /// An owned reference to the exporter, dropped when the view is
    /// released.
    pub(crate) obj: *mut PyObject,
    pub(crate) len: Py_ssize_t,
    pub(crate) itemsize: Py_ssize_t,
    pub(crate) readonly: c_int,
    pub(crate) ndim: c_int,
    pub(crate) format: *mut c_char,
    pub(crate) shape: *mut Py_ssize_t,
    pub(crate) strides: *mut Py_ssize_t,
    pub(crate) suboffsets: *mut Py_ssize_t,
    pub(crate) internal: *mut c_void,
}

// The C layout on the 64-bit Linux targets the package builds for: eight
// pointer-sized fields around two ints.
#[cfg(target_pointer_width = "64")]
static_assertions::const_assert_eq!(core::mem::size_of::<View>(), 80);

/// `bf_getbuffer`'s type.
pub(crate) type GetBufferProc = unsafe extern "C" fn(*mut PyObject, *mut View, c_int) -> c_int;

/// The request flags (`PyBUF_...`) the package reads or passes.
pub(crate) mod flags {
    use core::ffi::c_int;

    pub(crate) const SIMPLE: c_int = 0;
    pub(crate) const WRITABLE: c_int = 0x0001;
    pub(crate) const FORMAT: c_int = 0x0004;
    pub(crate) const ND: c_int = 0x0008;
    pub(crate) const STRIDES: c_int = 0x0010 | ND;
}

extern "C" {
    pub(crate) fn PyObject_GetBuffer(obj: *mut PyObject, view: *mut View, flags: c_int) -> c_int;
    pub(crate) fn PyBuffer_Release(view: *mut View);
}
