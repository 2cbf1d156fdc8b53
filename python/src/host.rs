//! The bytes of objects with the buffer protocol (`bytes`, `bytearray`,
//! `memoryview`, `array.array`, NumPy arrays), read in place, or written
//! in place when they are writable.

use core::ops::{Deref, DerefMut};

use pyo3::prelude::*;

use crate::errors::{Error, Kind};

#[cfg(feature = "buffer-protocol")]
mod exported {
    use core::ffi::c_int;
    use std::mem::MaybeUninit;

    use pyo3::ffi;
    use pyo3::prelude::*;

    /// A buffer an object exported to us, released on drop.
    pub(super) struct Exported {
        view: Box<ffi::Py_buffer>,
    }

    impl Exported {
        /// `obj`'s buffer as contiguous bytes (`PyBUF_SIMPLE`), writable
        /// when asked.
        pub(super) fn of(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
            let mut view = Box::new(MaybeUninit::<ffi::Py_buffer>::zeroed());
            let flags: c_int = if writable {
                ffi::PyBUF_WRITABLE
            } else {
                ffi::PyBUF_SIMPLE
            };
            // SAFETY: a live object and a view to fill; on failure the
            // exporter leaves nothing to release and an exception set.
            if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), flags) } != 0 {
                return Err(PyErr::fetch(obj.py()));
            }
            // SAFETY: filled by the successful call.
            let view = unsafe { Box::from_raw(Box::into_raw(view).cast::<ffi::Py_buffer>()) };
            Ok(Self { view })
        }

        pub(super) fn bytes(&self) -> &[u8] {
            match usize::try_from(self.view.len) {
                // SAFETY: `PyBUF_SIMPLE`: `len` contiguous bytes at `buf`,
                // exported until released.
                Ok(len) if len > 0 => unsafe {
                    std::slice::from_raw_parts(self.view.buf.cast::<u8>(), len)
                },
                _ => &[],
            }
        }

        pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
            match usize::try_from(self.view.len) {
                // SAFETY: as in `bytes`, exported writable (`Bytes::of_mut`
                // asked for it) and borrowed exclusively.
                Ok(len) if len > 0 => unsafe {
                    std::slice::from_raw_parts_mut(self.view.buf.cast::<u8>(), len)
                },
                _ => &mut [],
            }
        }
    }

    impl Drop for Exported {
        fn drop(&mut self) {
            // SAFETY: a view filled by `PyObject_GetBuffer`, released once,
            // with the GIL.
            Python::with_gil(|_| unsafe { ffi::PyBuffer_Release(&mut *self.view) });
        }
    }
}

/// An object's bytes, for as long as this lives.
pub(crate) struct Bytes {
    #[cfg(feature = "buffer-protocol")]
    exported: exported::Exported,
    /// Without the buffer protocol in the limited API: a copy.
    #[cfg(not(feature = "buffer-protocol"))]
    copy: Vec<u8>,
}

impl Bytes {
    /// `obj`'s bytes, read-only.
    pub(crate) fn of(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        #[cfg(feature = "buffer-protocol")]
        {
            Ok(Self {
                exported: exported::Exported::of(obj, false).map_err(|_| not_bytes(obj))?,
            })
        }
        #[cfg(not(feature = "buffer-protocol"))]
        {
            let copy = obj
                .py()
                .import("builtins")?
                .getattr("bytes")?
                .call1((obj,))
                .map_err(|_| not_bytes(obj))?
                .extract::<Vec<u8>>()?;
            Ok(Self { copy })
        }
    }

    /// `obj`'s bytes, to be written in place.
    pub(crate) fn of_mut(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        #[cfg(feature = "buffer-protocol")]
        {
            Ok(Self {
                exported: exported::Exported::of(obj, true).map_err(|e| {
                    Error::new(
                        Kind::Unsupported,
                        format!("the output is not a writable contiguous buffer: {e}"),
                    )
                })?,
            })
        }
        #[cfg(not(feature = "buffer-protocol"))]
        {
            Err(Error::new(
                Kind::Unsupported,
                format!(
                    "{}: this build writes only into DLPack outputs (NumPy, PyTorch, CuPy)",
                    type_name(obj)
                ),
            )
            .into())
        }
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
        #[cfg(feature = "buffer-protocol")]
        {
            self.exported.bytes()
        }
        #[cfg(not(feature = "buffer-protocol"))]
        {
            &self.copy
        }
    }
}

impl DerefMut for Bytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        #[cfg(feature = "buffer-protocol")]
        {
            self.exported.bytes_mut()
        }
        #[cfg(not(feature = "buffer-protocol"))]
        {
            &mut self.copy
        }
    }
}
