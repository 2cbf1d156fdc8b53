//! `tandem.share`'s client: a connection to the share daemon (found on its
//! socket or started for this process), creating, opening, listing and
//! deleting buffers by id, and binding, looking up, listing and deleting
//! named sets of them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tandem_hal::Backend;
use tandem_runtime::BackendChoice;
use tandem_share::{
    default_socket_path, AnyShareClient, ObjectId, ObjectInfo, SetInfo, ShareError,
};

use crate::buffer::Buffer;
use crate::core;
use crate::dlpack;
use crate::errors::{non_negative, Error, Kind};
use crate::host;
use crate::host_buffer;
use crate::wait::{self, SIGNAL_POLL};

/// A connection to the share daemon. Buffers keep it (and a daemon it
/// started) alive.
#[pyclass(module = "tandem._tandem", name = "Client", frozen)]
pub(crate) struct Client {
    inner: AnyShareClient,
}

impl Client {
    /// The share crate's client (the pool allocates through it).
    pub(crate) fn inner(&self) -> &AnyShareClient {
        &self.inner
    }

    /// `inner`, if this package supports its backend.
    fn of(inner: AnyShareClient) -> Result<Self, Error> {
        match inner.backend() {
            Backend::Host => Ok(Self { inner }),
            #[cfg(feature = "cuda")]
            Backend::Cuda => Ok(Self { inner }),
            #[allow(
                unreachable_patterns,
                reason = "reached only in builds that leave a backend out"
            )]
            other => Err(core::unsupported(other)),
        }
    }
}

/// Connects to the daemon serving `socket` (default: the user's default
/// socket), on the backend the daemon serves.
#[pyfunction]
#[pyo3(signature = (socket=None))]
pub(crate) fn connect(py: Python<'_>, socket: Option<PathBuf>) -> PyResult<Client> {
    let socket = socket.unwrap_or_else(default_socket_path);
    let inner = py
        .allow_threads(|| AnyShareClient::connect(&socket))
        .map_err(Error::from)?;
    Ok(Client::of(inner)?)
}

/// Starts a daemon for this process (`tandem share serve`, the executable
/// `tandem`), stopped when the client and its buffers are gone. `backend`:
/// `"auto"` (CUDA when built with it and a device answers, else the CPU
/// device), `"host"` or `"cuda"`.
#[pyfunction]
#[pyo3(signature = (backend="auto", tandem=None))]
pub(crate) fn spawn_daemon(
    py: Python<'_>,
    backend: &str,
    tandem: Option<PathBuf>,
) -> PyResult<Client> {
    let exe = match tandem {
        Some(exe) => exe,
        None => tandem_process::find_tandem_binary()
            .map_err(|e| Error::new(Kind::NoDaemon, format!("cannot start a daemon: {e}")))?,
    };
    let choice: BackendChoice = backend
        .parse()
        .map_err(|e| Error::new(Kind::Argument, format!("backend: {e}")))?;
    let inner = py
        .allow_threads(move || AnyShareClient::spawn(choice, Some(&exe)))
        .map_err(Error::from)?;
    Ok(Client::of(inner)?)
}

#[pymethods]
impl Client {
    /// The backend the daemon allocates on: `"host"` or `"cuda"`.
    #[getter]
    fn backend(&self) -> String {
        self.inner.backend().to_string()
    }

    /// The daemon's process id.
    #[getter]
    fn daemon_pid(&self) -> u32 {
        self.inner.daemon_pid()
    }

    /// The daemon's socket.
    #[getter]
    fn socket(&self) -> PathBuf {
        self.inner.socket_path().to_path_buf()
    }

    /// A new buffer of `nbytes` on `device`, writable by this process until
    /// it is sealed.
    #[pyo3(signature = (nbytes, device=0))]
    fn create<'py>(
        &self,
        py: Python<'py>,
        nbytes: i128,
        device: i128,
    ) -> PyResult<Bound<'py, Buffer>> {
        let nbytes = non_negative("nbytes", nbytes)?;
        let device = non_negative("device", device)?;
        self.create_buffer(py, nbytes, device)
    }

    /// Sealed buffer `id`, read-only, mapped on `device` (default: the
    /// device holding it); waits up to `timeout` seconds for its seal
    /// (`None` or `math.inf`: for ever).
    #[pyo3(
        signature = (id, timeout=Some(30.0), device=None),
        text_signature = "($self, id, timeout=30.0, device=None)"
    )]
    fn get<'py>(
        &self,
        py: Python<'py>,
        id: i128,
        timeout: Option<f64>,
        device: Option<i128>,
    ) -> PyResult<Bound<'py, Buffer>> {
        let id = non_negative("id", id)?;
        let timeout = wait::timeout(timeout)?;
        let device = match device {
            Some(device) => non_negative("device", device)?,
            None => {
                let inner = self.inner.clone();
                py.allow_threads(move || inner.stat(ObjectId(id)))
                    .map_err(Error::from)?
                    .device as usize
            }
        };
        let started = Instant::now();
        // Opened in slices, so that Ctrl-C is seen while the seal is awaited.
        loop {
            let left = timeout.map(|timeout| timeout.saturating_sub(started.elapsed()));
            let inner = self.inner.clone();
            let slice = left.map_or(SIGNAL_POLL, |left| left.min(SIGNAL_POLL));
            match py.allow_threads(move || inner.get(ObjectId(id), Some(device), slice)) {
                Ok(held) => return host_buffer::object(py, core::core_of(held)?),
                Err(ShareError::NotSealed { .. }) if left != Some(Duration::ZERO) => {
                    py.check_signals()?
                }
                Err(e) => return Err(Error::from(e).into()),
            }
        }
    }

    /// Lets the other nodes of the daemon's cluster fetch sealed buffer `id`.
    fn export(&self, py: Python<'_>, id: i128) -> PyResult<()> {
        let id = non_negative("id", id)?;
        let inner = self.inner.clone();
        Ok(py
            .allow_threads(move || inner.export(ObjectId(id)))
            .map_err(Error::from)?)
    }

    /// Copies buffer `remote` (``"NODE/ID"``, exported on node NODE of the
    /// daemon's cluster) into a new sealed buffer on `device` here, and
    /// opens it (a local buffer from then on, its own id).
    #[pyo3(signature = (remote, device=0))]
    fn fetch<'py>(
        &self,
        py: Python<'py>,
        remote: String,
        device: i128,
    ) -> PyResult<Bound<'py, Buffer>> {
        let device = non_negative("device", device)?;
        let inner = self.inner.clone();
        let held = py
            .allow_threads(move || inner.fetch(&remote, device))
            .map_err(Error::from)?;
        host_buffer::object(py, core::core_of(held)?)
    }

    /// Deletes `id`: nobody can open it any more; it is freed when the
    /// last process mapping it lets go.
    fn delete(&self, py: Python<'_>, id: i128) -> PyResult<()> {
        let id = non_negative("id", id)?;
        let inner = self.inner.clone();
        Ok(py
            .allow_threads(move || inner.delete(ObjectId(id)))
            .map_err(Error::from)?)
    }

    /// What the daemon knows of `id`.
    fn stat<'py>(&self, py: Python<'py>, id: i128) -> PyResult<Bound<'py, PyDict>> {
        let id = non_negative("id", id)?;
        let inner = self.inner.clone();
        let info = py
            .allow_threads(move || inner.stat(ObjectId(id)))
            .map_err(Error::from)?;
        info_dict(py, &info)
    }

    /// Every buffer the daemon holds.
    fn ls<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let inner = self.inner.clone();
        let infos = py
            .allow_threads(move || inner.list())
            .map_err(Error::from)?;
        infos.iter().map(|info| info_dict(py, info)).collect()
    }

    /// The daemon's totals.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let inner = self.inner.clone();
        let status = py
            .allow_threads(move || inner.status())
            .map_err(Error::from)?;
        let dict = PyDict::new(py);
        dict.set_item("pid", status.pid)?;
        dict.set_item("backend", status.backend.to_string())?;
        dict.set_item("devices", status.devices)?;
        dict.set_item("objects", status.objects)?;
        dict.set_item("bytes", status.bytes)?;
        dict.set_item("leases", status.leases)?;
        dict.set_item("clients", status.clients)?;
        dict.set_item("kept", status.kept)?;
        dict.set_item("kept_bytes", status.kept_bytes)?;
        dict.set_item("sets", status.sets)?;
        dict.set_item("set_versions", status.set_versions)?;
        dict.set_item("set_bytes", status.set_bytes)?;
        Ok(dict)
    }

    /// A sealed buffer holding a copy of `obj`'s bytes: a DLPack producer
    /// (a tensor, on the CPU or, on a CUDA daemon, its device: one device
    /// copy) or anything with the buffer protocol; not an empty one, as
    /// a buffer holds at least a byte.
    #[pyo3(signature = (obj, device=None))]
    fn put<'py>(
        &self,
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        device: Option<i128>,
    ) -> PyResult<Bound<'py, Buffer>> {
        let device: Option<usize> = device
            .map(|device| non_negative("device", device))
            .transpose()?;
        let buffer = if obj.hasattr("__dlpack__")? {
            let imported = dlpack::import(obj)?;
            check_not_empty(imported.len)?;
            let device = device.unwrap_or(match imported.place {
                dlpack::Place::Cuda(ordinal) if self.inner.backend() == Backend::Cuda => ordinal,
                _ => 0,
            });
            let core = self.create_buffer(py, imported.len, device)?;
            core.get().core().copy_in(&imported)?;
            core
        } else {
            let bytes = host::Bytes::of(obj)?;
            check_not_empty(bytes.len())?;
            let core = self.create_buffer(py, bytes.len(), device.unwrap_or(0))?;
            core.get().core().write_host(&bytes)?;
            core
        };
        let core = Arc::clone(buffer.get().core());
        py.allow_threads(move || core.seal(None))?;
        Ok(buffer)
    }

    /// Stages this client's unsealed buffer `id` for named set `name`, the
    /// first step of publishing a set: nobody can open it until the set is
    /// bound (`bind_set`), and it is freed if this process lets go of it,
    /// or dies, before.
    fn stage(&self, py: Python<'_>, id: i128, name: String) -> PyResult<()> {
        let id = ObjectId(non_negative("id", id)?);
        let inner = self.inner.clone();
        Ok(py
            .allow_threads(move || inner.stage(id, &name))
            .map_err(Error::from)?)
    }

    /// Binds the next version of named set `name` to the sealed buffers
    /// `manifest` and `buffers` (ids), which this client staged for it, all
    /// at once; `tensors` is the count `tandem share ls` shows. Returns the
    /// version bound, as `get_set` does.
    fn bind_set<'py>(
        &self,
        py: Python<'py>,
        name: String,
        manifest: i128,
        buffers: Vec<i128>,
        tensors: i128,
    ) -> PyResult<Bound<'py, PyDict>> {
        let manifest = ObjectId(non_negative("manifest", manifest)?);
        let buffers = buffers
            .into_iter()
            .map(|id| non_negative("buffers", id).map(ObjectId))
            .collect::<Result<Vec<_>, _>>()?;
        let tensors = non_negative("tensors", tensors)?;
        let inner = self.inner.clone();
        let info = py
            .allow_threads(move || inner.bind_set(&name, manifest, &buffers, tensors))
            .map_err(Error::from)?;
        set_dict(py, &info)
    }

    /// Version `version` of named set `name` (default: the latest): its
    /// `name`, `version`, `manifest` (a buffer id), `buffers` (ids),
    /// `tensors` and `nbytes`.
    #[pyo3(signature = (name, version=None))]
    fn get_set<'py>(
        &self,
        py: Python<'py>,
        name: String,
        version: Option<i128>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let version = match version {
            Some(version) => match non_negative::<u64>("version", version)? {
                0 => return Err(Error::new(Kind::Argument, "version: versions start at 1").into()),
                version => Some(version),
            },
            None => None,
        };
        let inner = self.inner.clone();
        let info = py
            .allow_threads(move || inner.lookup_set(&name, version))
            .map_err(Error::from)?;
        set_dict(py, &info)
    }

    /// Every version of every named set the daemon keeps, as `get_set`
    /// describes one.
    fn list_sets<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let inner = self.inner.clone();
        let sets = py
            .allow_threads(move || inner.list_sets())
            .map_err(Error::from)?;
        sets.iter().map(|info| set_dict(py, info)).collect()
    }

    /// Deletes named set `name`: nobody can look it up any more; its
    /// buffers are freed when the last process mapping them lets go.
    fn delete_set(&self, py: Python<'_>, name: String) -> PyResult<()> {
        let inner = self.inner.clone();
        Ok(py
            .allow_threads(move || inner.delete_set(&name))
            .map_err(Error::from)?)
    }

    fn __repr__(&self) -> String {
        format!(
            "tandem.share.Client(socket={:?}, backend={:?}, daemon_pid={})",
            self.inner.socket_path(),
            self.inner.backend().to_string(),
            self.inner.daemon_pid()
        )
    }
}

impl Client {
    /// A new buffer of `nbytes` on `device`, as its Python object: `create`'s
    /// work once its arguments are checked, and `put`'s first step.
    fn create_buffer<'py>(
        &self,
        py: Python<'py>,
        nbytes: usize,
        device: usize,
    ) -> PyResult<Bound<'py, Buffer>> {
        let inner = self.inner.clone();
        let held = py
            .allow_threads(move || inner.create(device, nbytes))
            .map_err(Error::from)?;
        host_buffer::object(py, core::core_of(held)?)
    }
}

/// Refuses an empty object for `put` in words that say so: the daemon's
/// refusal of a zero size would not.
fn check_not_empty(len: usize) -> Result<(), Error> {
    if len == 0 {
        return Err(Error::new(
            Kind::InvalidSize,
            "obj is empty (0 bytes): a shared buffer holds at least one byte",
        ));
    }
    Ok(())
}

fn set_dict<'py>(py: Python<'py>, info: &SetInfo) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("name", &info.name)?;
    dict.set_item("version", info.version)?;
    dict.set_item("manifest", info.manifest.0)?;
    let buffers: Vec<u64> = info.buffers.iter().map(|id| id.0).collect();
    dict.set_item("buffers", buffers)?;
    dict.set_item("tensors", info.tensors)?;
    dict.set_item("nbytes", info.bytes)?;
    Ok(dict)
}

fn info_dict<'py>(py: Python<'py>, info: &ObjectInfo) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("id", info.id.0)?;
    dict.set_item("device", info.device)?;
    dict.set_item("nbytes", info.len)?;
    dict.set_item("allocated", info.size)?;
    dict.set_item("sealed", info.sealed)?;
    dict.set_item("deleted", info.deleted)?;
    dict.set_item("leases", info.leases)?;
    dict.set_item("exported", info.exported)?;
    Ok(dict)
}
