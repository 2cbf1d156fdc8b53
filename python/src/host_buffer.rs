//! `tandem.share.HostBuffer`: a CPU-device buffer, which is also a
//! buffer-protocol exporter (`memoryview(buf)`, bytes in place).
//!
//! PyO3 gives a class the buffer protocol only in a wheel for 3.11 on (its
//! binding of `Py_buffer` is the 3.11 limited API's). This wheel is for 3.9
//! on, so the class is made here instead, with `PyType_FromSpecWithBases`:
//! a subclass of `Buffer` that adds the `Py_bf_getbuffer` slot (which
//! CPython takes from a spec from 3.9 on) and no state. PyO3 makes objects
//! of its own class only; a CPU-device buffer is made a `Buffer` and moved
//! to this class by `__class__` assignment, which CPython allows between
//! heap types only once it has checked that their layouts agree.

use core::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyRuntimeError};
use pyo3::ffi;
use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyTuple, PyType};

use crate::buffer::Buffer;
use crate::core::AnyBuffer;
use crate::pybuffer::{self, flags, GetBufferProc};

/// The class, made when the module is initialised (PyO3 modules are
/// initialised once per process: it refuses sub-interpreters).
static CLASS: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// Makes the class and adds it to the module `m`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let class = CLASS.get_or_try_init(py, || make_class(py))?;
    m.add("HostBuffer", class.bind(py))
}

fn make_class(py: Python<'_>) -> PyResult<Py<PyType>> {
    let get_buffer: GetBufferProc = get_buffer;
    let mut slots = [
        ffi::PyType_Slot {
            slot: ffi::Py_bf_getbuffer,
            pfunc: get_buffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_doc,
            pfunc:
                c"A shared buffer on the CPU device: also the buffer protocol (memoryview(buf)), \
                     bytes in place, read-only once sealed."
                    .as_ptr()
                    .cast_mut()
                    .cast(),
        },
        ffi::PyType_Slot {
            slot: 0,
            pfunc: core::ptr::null_mut(),
        },
    ];
    let mut spec = ffi::PyType_Spec {
        // CPython before 3.12 keeps pointing at the name: a static one.
        name: c"tandem._tandem.HostBuffer".as_ptr(),
        // The base's size: no state of its own, so `__class__` may move a
        // `Buffer` here.
        basicsize: 0,
        itemsize: 0,
        // Not a base type: nothing may add state under it.
        flags: ffi::Py_TPFLAGS_DEFAULT as _,
        slots: slots.as_mut_ptr(),
    };
    // A tuple: CPython takes a lone class from 3.10 on only.
    let bases = PyTuple::new(py, [py.get_type::<Buffer>()])?;
    // SAFETY: a spec ending in the zero slot, read during the call only (the
    // name is static); `bases` is a live tuple of types. A new reference, or
    // null with an exception set.
    let class = unsafe { ffi::PyType_FromSpecWithBases(&mut spec, bases.as_ptr()) };
    if class.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: the owned reference just returned, a type object.
    Ok(unsafe { Bound::from_owned_ptr(py, class).downcast_into_unchecked::<PyType>() }.unbind())
}

/// The Python object of `core`: a `HostBuffer` when the host reads its
/// memory in place, else a `Buffer`.
pub(crate) fn object(py: Python<'_>, core: Arc<dyn AnyBuffer>) -> PyResult<Bound<'_, Buffer>> {
    let on_host = core.host_address().is_some();
    let buffer = Bound::new(py, Buffer::new(core))?;
    if on_host {
        let class = CLASS.get(py).ok_or_else(|| {
            PyRuntimeError::new_err("tandem._tandem.HostBuffer is not initialised")
        })?;
        buffer.setattr(pyo3::intern!(py, "__class__"), class.bind(py))?;
    }
    Ok(buffer)
}

/// `bf_getbuffer`: a view of the buffer's bytes, or -1 with an exception
/// set and `view->obj` null, as the protocol asks. No panic crosses it.
unsafe extern "C" fn get_buffer(
    exporter: *mut ffi::PyObject,
    view: *mut pybuffer::View,
    flags: c_int,
) -> c_int {
    // SAFETY: CPython calls the slot with the GIL held.
    let py = unsafe { Python::assume_gil_acquired() };
    let filled = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: CPython passes the exporter, a live object.
        let exporter = unsafe { Bound::from_borrowed_ptr(py, exporter) };
        let buffer = exporter.downcast_into::<Buffer>()?;
        // SAFETY: `view` is the caller's to fill.
        unsafe { fill(buffer, view, flags) }
    }))
    .unwrap_or_else(|_| Err(PanicException::new_err("tandem: getbuffer panicked")));
    match filled {
        Ok(()) => 0,
        Err(e) => {
            // SAFETY: as above.
            unsafe { (*view).obj = core::ptr::null_mut() };
            e.restore(py);
            -1
        }
    }
}

/// Fills `view` with the bytes of `buffer`: one dimension of bytes, shape
/// and strides when asked, read-only once sealed.
///
/// # Safety
///
/// `view` points at a `Py_buffer` the caller lets us fill.
unsafe fn fill(buffer: Bound<'_, Buffer>, view: *mut pybuffer::View, flags: c_int) -> PyResult<()> {
    let this = buffer.get();
    let Some(address) = this.core().host_address() else {
        return Err(PyBufferError::new_err(
            "device memory has no buffer protocol: use DLPack (from_dlpack) or mirror()",
        ));
    };
    let read_only = this.core().sealed();
    if read_only && flags & flags::WRITABLE != 0 {
        return Err(PyBufferError::new_err(format!(
            "shared buffer {} is sealed: read-only",
            this.core().id()
        )));
    }
    this.core().wait_for_seal()?;
    let wants = |flag: c_int| flags & flag == flag;
    let extent = this.extent();
    // SAFETY: the caller's view to fill; the shape and strides point into
    // `this`, which the view's `obj` reference keeps alive.
    unsafe {
        (*view).buf = address.cast();
        (*view).len = extent[0];
        (*view).readonly = c_int::from(read_only);
        (*view).itemsize = 1;
        (*view).format = if wants(flags::FORMAT) {
            c"B".as_ptr().cast_mut()
        } else {
            core::ptr::null_mut()
        };
        (*view).ndim = 1;
        (*view).shape = if wants(flags::ND) {
            extent.as_ptr().cast_mut()
        } else {
            core::ptr::null_mut()
        };
        (*view).strides = if wants(flags::STRIDES) {
            extent[1..].as_ptr().cast_mut()
        } else {
            core::ptr::null_mut()
        };
        (*view).suboffsets = core::ptr::null_mut();
        (*view).internal = core::ptr::null_mut();
        (*view).obj = buffer.into_any().into_ptr();
    }
    Ok(())
}
