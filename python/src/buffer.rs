//! `tandem.share.Buffer` and its typed `View`: a shared buffer's memory
//! handed to NumPy, PyTorch, CuPy and JAX without a copy, through DLPack,
//! `__cuda_array_interface__` (CUDA) and the buffer protocol (CPU device,
//! `host_buffer`).

use std::sync::{Arc, Mutex, PoisonError};

use pyo3::exceptions::PyAttributeError;
use pyo3::ffi::Py_ssize_t;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyInt, PyTuple};

use crate::backend::LEGACY_STREAM;
use crate::core::AnyBuffer;
use crate::dlpack::{self, Export};
use crate::dtype::Dtype;
use crate::errors::{Error, Kind};
use crate::host;
use crate::layout::{type_code, DL_CUDA};

/// A shared buffer: writable by its creator until sealed, read-only after
/// (and when opened by id). Arrays made from it keep it mapped. A
/// subclass, `HostBuffer` (`host_buffer`), adds the buffer protocol on the
/// CPU device.
#[pyclass(module = "tandem._tandem", name = "Buffer", frozen, subclass)]
pub(crate) struct Buffer {
    core: Arc<dyn AnyBuffer>,
    /// The buffer protocol's shape and strides, which must outlive every
    /// view handed out (the object itself does).
    extent: [Py_ssize_t; 2],
}

impl Buffer {
    pub(crate) fn new(core: Arc<dyn AnyBuffer>) -> Self {
        Self {
            extent: [
                Py_ssize_t::try_from(core.len()).unwrap_or(Py_ssize_t::MAX),
                1,
            ],
            core,
        }
    }

    pub(crate) fn core(&self) -> &Arc<dyn AnyBuffer> {
        &self.core
    }

    /// The buffer protocol's shape and strides of its bytes.
    pub(crate) fn extent(&self) -> &[Py_ssize_t; 2] {
        &self.extent
    }
}

/// A buffer's memory read as `dtype` elements of `shape` (compact,
/// row-major, the whole buffer).
#[pyclass(module = "tandem._tandem", name = "View", frozen)]
pub(crate) struct View {
    core: Arc<dyn AnyBuffer>,
    dtype: Dtype,
    shape: Vec<i64>,
}

#[pymethods]
impl Buffer {
    /// Its id, for other processes' `get`.
    #[getter]
    fn id(&self) -> u64 {
        self.core.id()
    }

    /// Its size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.core.len()
    }

    fn __len__(&self) -> usize {
        self.core.len()
    }

    /// The ordinal of the device it is mapped on.
    #[getter]
    fn device(&self) -> i32 {
        self.core.dl_device().device_id
    }

    /// Whether it is sealed (then read-only).
    #[getter]
    fn sealed(&self) -> bool {
        self.core.sealed()
    }

    /// Seals it once the work queued so far on `stream` is done (on CUDA,
    /// with no host wait): other processes may open it; nobody may change
    /// it. `stream`: a CUDA stream's handle (an int: 1 the legacy default
    /// stream, 2 the per-thread one, 0 refused as ambiguous), or a stream
    /// object lending one (`__cuda_stream__()`, PyTorch's `cuda_stream`,
    /// CuPy's `ptr`), whose handle 0 is its library's default stream, the
    /// legacy default one; `None` is the legacy default stream. The CPU
    /// device has no streams: `None` only.
    #[pyo3(signature = (stream=None))]
    fn seal(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let stream = stream.map(stream_handle).transpose()?;
        let core = Arc::clone(&self.core);
        Ok(py.allow_threads(move || core.seal(stream))?)
    }

    /// Its memory as `dtype` elements of `shape` (default: as many as fit,
    /// in one dimension), which must cover the buffer exactly.
    #[pyo3(signature = (dtype, shape=None))]
    fn view(&self, dtype: &str, shape: Option<Vec<i64>>) -> PyResult<View> {
        let dtype = Dtype::parse(dtype)?;
        let itemsize = dtype.itemsize().unwrap_or(1);
        let len = self.core.len();
        let shape = match shape {
            Some(shape) => shape,
            None if len % itemsize == 0 => vec![(len / itemsize) as i64],
            None => {
                return Err(Error::new(
                    Kind::Shape,
                    format!(
                        "{len} bytes are not a whole number of {} ({itemsize} bytes)",
                        dtype.name().unwrap_or("elements")
                    ),
                )
                .into())
            }
        };
        let elements = shape.iter().try_fold(1u64, |n, &extent| {
            u64::try_from(extent).ok().and_then(|e| n.checked_mul(e))
        });
        let fits = elements.and_then(|n| n.checked_mul(itemsize as u64)) == Some(len as u64);
        if !fits {
            return Err(Error::new(
                Kind::Shape,
                format!(
                    "shape {shape:?} of {} does not cover the buffer's {len} bytes",
                    dtype.name().unwrap_or("elements")
                ),
            )
            .into());
        }
        Ok(View {
            core: Arc::clone(&self.core),
            dtype,
            shape,
        })
    }

    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<i64>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<PyObject> {
        let shape = vec![self.core.len() as i64];
        lend(
            py,
            &self.core,
            Dtype::BYTES,
            shape,
            stream,
            max_version,
            dl_device,
            copy,
        )
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        let device = self.core.dl_device();
        (device.device_type, device.device_id)
    }

    /// `__cuda_array_interface__` (version 3), on CUDA buffers only.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        cuda_array_interface(py, &self.core, Dtype::BYTES, &[self.core.len() as i64])
    }

    /// A host copy for a `with` block: `bytes` of a sealed buffer, a
    /// `bytearray` of a writable one, copied back when the block ends
    /// without an exception.
    fn mirror(slf: Bound<'_, Self>) -> Mirror {
        Mirror {
            buffer: slf.unbind(),
            host: Mutex::new(None),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "tandem.share.Buffer(id={}, nbytes={}, device={}, sealed={})",
            self.core.id(),
            self.core.len(),
            self.device(),
            if self.core.sealed() { "True" } else { "False" }
        )
    }
}

/// A host copy of a buffer, for the length of a `with` block.
#[pyclass(module = "tandem._tandem", name = "Mirror", frozen)]
pub(crate) struct Mirror {
    buffer: Py<Buffer>,
    host: Mutex<Option<Py<PyAny>>>,
}

#[pymethods]
impl Mirror {
    fn __enter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let core = Arc::clone(&self.buffer.get().core);
        let sealed = core.sealed();
        let bytes = py.allow_threads(move || core.read_host())?;
        let host = if sealed {
            PyBytes::new(py, &bytes).into_any()
        } else {
            PyByteArray::new(py, &bytes).into_any()
        };
        *self.host.lock().unwrap_or_else(PoisonError::into_inner) = Some(host.clone().unbind());
        Ok(host.unbind())
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let host = self
            .host
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let core = &self.buffer.get().core;
        if let (Some(host), None) = (host, exc_type) {
            if !core.sealed() {
                let bytes = host::Bytes::of(host.bind(py))?;
                core.write_host(&bytes)?;
            }
        }
        Ok(false)
    }
}

#[pymethods]
impl View {
    /// The element type's name.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name().unwrap_or("unknown")
    }

    /// The extents of its dimensions, row-major.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// Its size in bytes: the whole buffer's.
    #[getter]
    fn nbytes(&self) -> usize {
        self.core.len()
    }

    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<i64>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<PyObject> {
        lend(
            py,
            &self.core,
            self.dtype,
            self.shape.clone(),
            stream,
            max_version,
            dl_device,
            copy,
        )
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        let device = self.core.dl_device();
        (device.device_type, device.device_id)
    }

    /// `__cuda_array_interface__` (version 3), on CUDA buffers only.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        cuda_array_interface(py, &self.core, self.dtype, &self.shape)
    }

    fn __repr__(&self) -> String {
        format!(
            "tandem.share.View(id={}, dtype={:?}, shape={:?})",
            self.core.id(),
            self.dtype(),
            self.shape
        )
    }
}

/// The raw handle `stream` names: an int, or an object lending one through
/// the CUDA stream protocol (`__cuda_stream__()`, a (version, handle) pair),
/// a `cuda_stream` attribute (PyTorch's streams) or a `ptr` one (CuPy's).
///
/// An object's handle 0 is CUDA's null stream, which its library reports
/// for its default stream (`torch.cuda.current_stream()` before any other
/// is made current, `cupy.cuda.Stream.null`): the legacy default stream,
/// as those libraries are built (CuPy's per-thread mode hands out
/// `cudaStreamPerThread`, 2, instead). Only a raw 0, which may mean either
/// default stream, stays ambiguous.
fn stream_handle(stream: &Bound<'_, PyAny>) -> PyResult<i64> {
    let py = stream.py();
    let lent = if stream.hasattr(intern!(py, "__cuda_stream__"))? {
        let pair = stream.call_method0(intern!(py, "__cuda_stream__"))?;
        let pair = pair
            .downcast::<PyTuple>()
            .map_err(|_| not_a_stream(&pair))?;
        match pair.len() {
            2 => Some(pair.get_item(1)?),
            _ => return Err(not_a_stream(pair)),
        }
    } else if stream.hasattr(intern!(py, "cuda_stream"))? {
        Some(stream.getattr(intern!(py, "cuda_stream"))?)
    } else if stream.hasattr(intern!(py, "ptr"))? {
        Some(stream.getattr(intern!(py, "ptr"))?)
    } else {
        None
    };
    let (handle, from_object) = match lent {
        Some(handle) => (handle, true),
        None => (stream.clone(), false),
    };
    if !handle.is_instance_of::<PyInt>() {
        return Err(not_a_stream(&handle));
    }
    let raw = handle.extract::<i64>().map_err(|_| {
        PyErr::from(Error::new(
            Kind::Stream,
            format!("stream {handle} is no stream handle"),
        ))
    })?;
    Ok(if from_object && raw == 0 {
        LEGACY_STREAM
    } else {
        raw
    })
}

fn not_a_stream(found: &Bound<'_, PyAny>) -> PyErr {
    Error::new(
        Kind::Unsupported,
        format!(
            "stream: an int handle, or an object with __cuda_stream__() (a (version, handle) \
             pair), cuda_stream or ptr; got {found:?}"
        ),
    )
    .into()
}

/// `__dlpack__` as the standard has it: the consumer's `stream` ordered
/// after the seal, a versioned capsule for consumers of DLPack 1.x (marked
/// read-only when sealed), else the legacy one; no copies, no other device.
#[allow(
    clippy::too_many_arguments,
    reason = "`__dlpack__`'s four keywords beside what is lent"
)]
fn lend(
    py: Python<'_>,
    core: &Arc<dyn AnyBuffer>,
    dtype: Dtype,
    shape: Vec<i64>,
    stream: Option<i64>,
    max_version: Option<(u32, u32)>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> PyResult<PyObject> {
    let device = core.dl_device();
    if let Some((device_type, device_id)) = dl_device {
        if (device_type, device_id) != (device.device_type, device.device_id) {
            return Err(Error::new(
                Kind::Export,
                format!(
                    "the buffer is on DLPack device ({}, {}), not ({device_type}, {device_id}): \
                     Tandem lends memory, it does not copy it across devices",
                    device.device_type, device.device_id
                ),
            )
            .into());
        }
    }
    if copy == Some(true) {
        return Err(Error::new(
            Kind::Export,
            "copy=True: Tandem lends memory; copy the array the consumer makes",
        )
        .into());
    }
    let waiting = Arc::clone(core);
    py.allow_threads(move || waiting.order_stream(stream))?;
    let export = Export {
        data: core.data(),
        device,
        dtype,
        shape,
        read_only: core.sealed(),
        keep: Box::new(Arc::clone(core)),
    };
    let versioned = max_version.is_some_and(|(major, _)| major >= 1);
    dlpack::capsule(py, export, versioned)
}

/// `__cuda_array_interface__` v3: the writer's work waited for on the host
/// first (the interface cannot carry an event), so `stream` is `None`.
fn cuda_array_interface<'py>(
    py: Python<'py>,
    core: &Arc<dyn AnyBuffer>,
    dtype: Dtype,
    shape: &[i64],
) -> PyResult<Bound<'py, PyDict>> {
    if core.dl_device().device_type != DL_CUDA {
        return Err(PyAttributeError::new_err(
            "__cuda_array_interface__: the buffer is not CUDA memory",
        ));
    }
    let typestr = typestr(dtype)?;
    let waiting = Arc::clone(core);
    py.allow_threads(move || waiting.wait_for_seal())?;
    let dict = PyDict::new(py);
    dict.set_item("shape", PyTuple::new(py, shape)?)?;
    dict.set_item("typestr", typestr)?;
    dict.set_item("data", (core.data(), core.sealed()))?;
    dict.set_item("strides", py.None())?;
    dict.set_item("stream", py.None())?;
    dict.set_item("version", 3)?;
    Ok(dict)
}

/// NumPy's type string for `dtype` (`"<f4"`).
fn typestr(dtype: Dtype) -> Result<String, Error> {
    let kind = match dtype.0.code {
        type_code::INT => 'i',
        type_code::UINT => 'u',
        type_code::FLOAT => 'f',
        type_code::COMPLEX => 'c',
        type_code::BOOL => 'b',
        _ => {
            return Err(Error::new(
                Kind::Dtype,
                format!(
                    "{} has no __cuda_array_interface__ type: use DLPack",
                    dtype.name().unwrap_or("this type")
                ),
            ))
        }
    };
    let size = dtype.itemsize().unwrap_or(1);
    let order = if size == 1 { '|' } else { '<' };
    Ok(format!("{order}{kind}{size}"))
}
