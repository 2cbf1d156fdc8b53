//! The bytes of objects with the buffer protocol (`bytes`, `bytearray`,
//! `memoryview`, `array.array`, NumPy arrays), read in place, or written
//! in place when they are writable.

use core::ffi::c_int;
use core::ops::{Deref, DerefMut};
use std::mem::MaybeUninit;

use pyo3::prelude::*;

use crate::errors::{Error, Kind};
use crate::pybuffer::{self, flags};

/// An object's bytes, exported to us for as long as this lives (released
/// on drop).
pub(crate) struct Bytes {
    view: Box<pybuffer::View>,
}

impl Bytes {
    /// `obj`'s bytes, read-only.
    pub(crate) fn of(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::export(obj, flags::SIMPLE).map_err(|_| not_bytes(obj))
    }

    /// `obj`'s bytes, to be written in place.
    pub(crate) fn of_mut(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Self::export(obj, flags::WRITABLE).map_err(|e| {
            Error::new(
                Kind::Unsupported,
                format!("the output is not a writable contiguous buffer: {e}"),
            )
            .into()
        })
    }

    /// `obj`'s buffer as contiguous bytes (`PyBUF_SIMPLE`, with `WRITABLE`
    /// when asked).
    fn export(obj: &Bound<'_, PyAny>, flags: c_int) -> PyResult<Self> {
        let mut view = Box::new(MaybeUninit::<pybuffer::View>::zeroed());
        // SAFETY: a live object (the GIL held, as `obj` proves) and a view
        // to fill; on failure the exporter leaves nothing to release and an
        // exception set.
        if unsafe { pybuffer::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), flags) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        // SAFETY: filled by the successful call.
        let view = unsafe { Box::from_raw(Box::into_raw(view).cast::<pybuffer::View>()) };
        Ok(Self { view })
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "object".into())
}

fn not_bytes(obj: &Bound<'_, PyAny>) -> PyErr {
    Error::new(
        Kind::Unsupported,
        format!(
            "{} has neither __dlpack__ nor a contiguous buffer",
            type_name(obj)
        ),
    )
    .into()
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match usize::try_from(self.view.len) {
            // SAFETY: `PyBUF_SIMPLE`: `len` contiguous bytes at `buf`,
            // exported until released.
            Ok(len) if len > 0 => unsafe { std::slice::from_raw_parts(self.view.buf.cast(), len) },
            _ => &[],
        }
    }
}

impl DerefMut for Bytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        match usize::try_from(self.view.len) {
            // SAFETY: as in `deref`, exported writable (`Bytes::of_mut`
            // asked for it) and borrowed exclusively.
            Ok(len) if len > 0 => unsafe {
                std::slice::from_raw_parts_mut(self.view.buf.cast(), len)
            },
            _ => &mut [],
        }
    }
}

impl Drop for Bytes {
    fn drop(&mut self) {
        // SAFETY: a view filled by `PyObject_GetBuffer`, released once,
        // with the GIL.
        Python::with_gil(|_| unsafe { pybuffer::PyBuffer_Release(&mut *self.view) });
    }
}
