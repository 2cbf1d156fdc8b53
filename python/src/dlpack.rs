//! DLPack both ways. Out: capsules lending a shared buffer's memory to a
//! consumer (NumPy, PyTorch, CuPy, JAX), which keep the buffer mapped (and
//! its lease held) until the consumer calls the deleter. In: the memory of
//! another library's tensor, read or written while its capsule is held.
//!
//! Ownership follows the standard: a capsule named `dltensor_versioned` or
//! `dltensor` owns its tensor, and its destructor calls the deleter; a
//! consumer that takes the tensor renames the capsule (`used_...`), and
//! the destructor then leaves it alone, the deleter being the consumer's to
//! call, once.

use core::ffi::{c_void, CStr};
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::dtype::Dtype;
use crate::errors::{Error, Kind};
use crate::layout::{
    DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLTensor, DL_CPU, DL_CUDA, FLAG_READ_ONLY,
    VERSION,
};

const VERSIONED: &CStr = c"dltensor_versioned";
const LEGACY: &CStr = c"dltensor";

/// What keeps lent memory alive: dropped by the deleter, on any thread,
/// with or without the GIL, so it holds no Python object.
pub(crate) type Keep = Box<dyn Send + Sync>;

/// Memory to lend, and how to read it (compact, row-major).
pub(crate) struct Export {
    pub(crate) data: u64,
    pub(crate) device: DLDevice,
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<i64>,
    pub(crate) read_only: bool,
    pub(crate) keep: Keep,
}

/// A managed tensor and what it points to, in one allocation the deleter
/// frees. `managed` comes first, so the consumer's pointer is this
/// allocation's (`manager_ctx` says so as well).
#[repr(C)]
struct Owned<T> {
    managed: T,
    shape: Box<[i64]>,
    strides: Box<[i64]>,
    _keep: Keep,
}

/// The two managed-tensor forms a capsule carries.
trait Managed: Sized + 'static {
    const NAME: &'static CStr;
    fn new(tensor: DLTensor, read_only: bool) -> Self;
    fn parts(&mut self) -> (&mut DLTensor, &mut *mut c_void);
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)>;
}

impl Managed for DLManagedTensorVersioned {
    const NAME: &'static CStr = VERSIONED;
    fn new(dl_tensor: DLTensor, read_only: bool) -> Self {
        Self {
            version: VERSION,
            manager_ctx: core::ptr::null_mut(),
            deleter: Some(delete::<Self>),
            flags: if read_only { FLAG_READ_ONLY } else { 0 },
            dl_tensor,
        }
    }
    fn parts(&mut self) -> (&mut DLTensor, &mut *mut c_void) {
        (&mut self.dl_tensor, &mut self.manager_ctx)
    }
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
        self.deleter
    }
}

impl Managed for DLManagedTensor {
    const NAME: &'static CStr = LEGACY;
    /// The legacy form has no flags: a read-only buffer is lent on the
    /// consumer's word (what older PyTorch and CuPy ask for).
    fn new(dl_tensor: DLTensor, _read_only: bool) -> Self {
        Self {
            dl_tensor,
            manager_ctx: core::ptr::null_mut(),
            deleter: Some(delete::<Self>),
        }
    }
    fn parts(&mut self) -> (&mut DLTensor, &mut *mut c_void) {
        (&mut self.dl_tensor, &mut self.manager_ctx)
    }
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
        self.deleter
    }
}

/// The deleter: frees the allocation `managed` starts, dropping its keep.
///
/// # Safety
/// `managed` is null or a pointer this module handed out in a capsule,
/// deleted once (the standard's rule for consumers and for the capsule's
/// destructor, which defer to each other by the capsule's name).
unsafe extern "C" fn delete<T: Managed>(managed: *mut T) {
    if !managed.is_null() {
        // SAFETY: `managed` is the first field of a leaked `Box<Owned<T>>`
        // (`repr(C)`), not freed before, per the contract above.
        drop(unsafe { Box::from_raw(managed.cast::<Owned<T>>()) });
    }
}

/// The capsule's destructor: deletes the tensor unless a consumer took it
/// (renamed the capsule).
///
/// # Safety
/// Called by Python, with the GIL, on a capsule this module made.
unsafe extern "C" fn destroy<T: Managed>(capsule: *mut ffi::PyObject) {
    // SAFETY: `capsule` is a live capsule; `IsValid` sets no exception and
    // is false once a consumer renamed it.
    if unsafe { ffi::PyCapsule_IsValid(capsule, T::NAME.as_ptr()) } != 1 {
        return;
    }
    // SAFETY: valid under that name, so its pointer is our managed tensor.
    let managed = unsafe { ffi::PyCapsule_GetPointer(capsule, T::NAME.as_ptr()) }.cast::<T>();
    if managed.is_null() {
        return;
    }
    // SAFETY: no consumer took it, so it is ours to delete, once.
    if let Some(deleter) = unsafe { &*managed }.deleter() {
        // SAFETY: our own deleter, on our own tensor.
        unsafe { deleter(managed) };
    }
}

/// `export` as a capsule: versioned when the consumer reads DLPack 1.x.
pub(crate) fn capsule(py: Python<'_>, export: Export, versioned: bool) -> PyResult<PyObject> {
    if versioned {
        capsule_of::<DLManagedTensorVersioned>(py, export)
    } else {
        capsule_of::<DLManagedTensor>(py, export)
    }
}

fn capsule_of<T: Managed>(py: Python<'_>, export: Export) -> PyResult<PyObject> {
    let shape: Box<[i64]> = export.shape.into();
    let strides = compact_strides(&shape);
    let ndim =
        i32::try_from(shape.len()).map_err(|_| Error::new(Kind::Shape, "too many dimensions"))?;
    let tensor = DLTensor {
        data: export.data as *mut c_void,
        device: export.device,
        ndim,
        dtype: export.dtype.0,
        shape: core::ptr::null_mut(),
        strides: core::ptr::null_mut(),
        byte_offset: 0,
    };
    let mut owned = Box::new(Owned {
        managed: T::new(tensor, export.read_only),
        shape,
        strides,
        _keep: export.keep,
    });
    let shape_ptr = owned.shape.as_mut_ptr();
    let strides_ptr = owned.strides.as_mut_ptr();
    let raw = Box::into_raw(owned);
    // SAFETY: `raw` is the allocation just leaked, ours alone until the
    // capsule exists; the boxed slices do not move with it.
    let (dl_tensor, ctx) = unsafe { (*raw).managed.parts() };
    dl_tensor.shape = shape_ptr;
    dl_tensor.strides = strides_ptr;
    *ctx = raw.cast();
    // SAFETY: a capsule over our tensor, named as its form says, whose
    // destructor frees it unless a consumer takes it.
    let capsule = unsafe { ffi::PyCapsule_New(raw.cast(), T::NAME.as_ptr(), Some(destroy::<T>)) };
    if capsule.is_null() {
        // SAFETY: no capsule owns it: freed here, once.
        unsafe { delete::<T>(raw.cast()) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference, owned from here.
    Ok(unsafe { PyObject::from_owned_ptr(py, capsule) })
}

/// Row-major strides, in elements, of a compact tensor of `shape`.
fn compact_strides(shape: &[i64]) -> Box<[i64]> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    strides.into()
}

/// Where a tensor's memory is, as this package reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    Host,
    Cuda(usize),
}

impl Place {
    pub(crate) fn of(device: DLDevice) -> Result<Self, Error> {
        match device.device_type {
            DL_CPU => Ok(Place::Host),
            DL_CUDA => Ok(Place::Cuda(usize::try_from(device.device_id).map_err(
                |_| Error::new(Kind::Unsupported, "a negative CUDA device id"),
            )?)),
            other => Err(Error::new(
                Kind::Unsupported,
                format!("memory on DLPack device type {other}: only CPU and CUDA are supported"),
            )),
        }
    }
}

/// Another library's tensor, held through its capsule: the memory stays
/// valid while this lives (dropping the capsule lets its producer free it).
pub(crate) struct Imported<'py> {
    _capsule: Bound<'py, PyAny>,
    pub(crate) data: u64,
    pub(crate) len: usize,
    pub(crate) place: Place,
    pub(crate) read_only: bool,
}

/// `obj`'s memory through `obj.__dlpack__`, which must be compact and
/// row-major. A CUDA producer is asked to order its work before the legacy
/// default stream, which this package's copies run on.
pub(crate) fn import<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Imported<'py>> {
    let py = obj.py();
    let (device_type, device_id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    let place = Place::of(DLDevice {
        device_type,
        device_id,
    })?;
    // CPU memory takes no stream; for CUDA, 1 is the standard's "legacy
    // default stream".
    let stream = match place {
        Place::Host => None,
        Place::Cuda(_) => Some(1i64),
    };
    let keywords = PyDict::new(py);
    keywords.set_item("stream", stream)?;
    keywords.set_item("max_version", (VERSION.major, VERSION.minor))?;
    let capsule = match obj.call_method("__dlpack__", (), Some(&keywords)) {
        Ok(capsule) => capsule,
        // A producer older than DLPack 1.0 takes no `max_version`.
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            keywords.del_item("max_version")?;
            obj.call_method("__dlpack__", (), Some(&keywords))?
        }
        Err(e) => return Err(e),
    };
    read_capsule(capsule, place)
}

fn read_capsule(capsule: Bound<'_, PyAny>, place: Place) -> PyResult<Imported<'_>> {
    let raw = capsule.as_ptr();
    // SAFETY: `raw` is a live object; each call checks it is a capsule of
    // that name and sets no exception when it is not.
    let (tensor, read_only) = unsafe {
        if ffi::PyCapsule_IsValid(raw, VERSIONED.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(raw, VERSIONED.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            let managed = &*managed;
            if managed.version.major != VERSION.major {
                return Err(Error::new(
                    Kind::Unsupported,
                    format!(
                        "DLPack {}.x tensor: this package reads 1.x",
                        managed.version.major
                    ),
                )
                .into());
            }
            (&managed.dl_tensor, managed.flags & FLAG_READ_ONLY != 0)
        } else if ffi::PyCapsule_IsValid(raw, LEGACY.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(raw, LEGACY.as_ptr()).cast::<DLManagedTensor>();
            (&(*managed).dl_tensor, false)
        } else {
            return Err(Error::new(
                Kind::Unsupported,
                "__dlpack__ returned no unused DLPack capsule",
            )
            .into());
        }
    };
    let itemsize = Dtype(tensor.dtype)
        .itemsize()
        .ok_or_else(|| Error::new(Kind::Unsupported, "elements narrower than a byte"))?;
    let ndim = usize::try_from(tensor.ndim)
        .map_err(|_| Error::new(Kind::Unsupported, "a negative number of dimensions"))?;
    let shape: Vec<i64> = if ndim == 0 {
        Vec::new()
    } else {
        // SAFETY: the producer's `shape` has `ndim` entries, alive with the
        // capsule.
        unsafe { std::slice::from_raw_parts(tensor.shape, ndim) }.to_vec()
    };
    // An empty tensor's strides are whatever its producer chose: it has no
    // element they could place out of order.
    let empty = shape.contains(&0);
    if !tensor.strides.is_null() && ndim > 0 && !empty {
        // SAFETY: as for `shape`.
        let strides = unsafe { std::slice::from_raw_parts(tensor.strides, ndim) };
        let compact = compact_strides(&shape);
        // A dimension of extent 1 may carry any stride.
        let contiguous = shape
            .iter()
            .zip(strides.iter().zip(compact.iter()))
            .all(|(&extent, (&s, &c))| extent == 1 || s == c);
        if !contiguous {
            return Err(Error::new(
                Kind::Unsupported,
                "the tensor is not contiguous: make it so first (.contiguous(), np.ascontiguousarray)",
            )
            .into());
        }
    }
    let elements = shape.iter().try_fold(1usize, |n, &extent| {
        usize::try_from(extent).ok().and_then(|e| n.checked_mul(e))
    });
    let len = elements
        .and_then(|n| n.checked_mul(itemsize))
        .ok_or_else(|| Error::new(Kind::Unsupported, "a shape whose size overflows"))?;
    let data = (tensor.data as u64)
        .checked_add(tensor.byte_offset)
        .ok_or_else(|| Error::new(Kind::Unsupported, "an address that overflows"))?;
    Ok(Imported {
        _capsule: capsule,
        data,
        len,
        place,
        read_only,
    })
}
