//! `tandem.blob`: the blob store through a runtime serving it, attached to
//! by its CPU segment or started for this process. Data moves through the
//! client's heap a chunk at a time: from and into bytes, buffer-protocol
//! objects and DLPack tensors (CUDA ones staged through the host).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyDict};
use tandem_blob::{BlobCaller, CallError, Score, TagId};
use tandem_runtime::status::single_live_runtime;
use tandem_runtime::{Client as RuntimeClient, Config, DeviceSelection};

use crate::backend::{host_bytes, host_bytes_mut, read_device, write_device};
use crate::dlpack::{self, Place};
use crate::errors::{Error, Kind};
use crate::host;
use crate::wait::interruptible;

/// A client of a runtime serving the blob store.
#[pyclass(module = "tandem._tandem", name = "BlobClient", frozen)]
pub(crate) struct BlobClient {
    client: RuntimeClient,
    segment: String,
    tags: Mutex<HashMap<String, TagId>>,
}

/// Attaches to the runtime of CPU segment `segment` (default: the one live
/// runtime), which must serve the blob pool (`tandem blob run`).
#[pyfunction]
#[pyo3(signature = (segment=None))]
pub(crate) fn attach(py: Python<'_>, segment: Option<String>) -> PyResult<BlobClient> {
    let client = py.allow_threads(move || -> Result<BlobClient, Error> {
        let segment = match segment {
            Some(segment) => segment,
            None => {
                single_live_runtime().map_err(|e| Error::new(Kind::BlobRuntime, e.to_string()))?
            }
        };
        let client = RuntimeClient::attach(&segment)?;
        Ok(BlobClient::new(client, segment))
    })?;
    Ok(client)
}

/// Starts `tandem blob run` for this process on the store `config` (a
/// TOML file holding a `StoreConfig`) and attaches to it; it stops when
/// the client is gone (or this process dies).
#[pyfunction]
#[pyo3(signature = (config, tandem=None, heap_bytes=16 << 20))]
pub(crate) fn fork(
    py: Python<'_>,
    config: PathBuf,
    tandem: Option<PathBuf>,
    heap_bytes: usize,
) -> PyResult<BlobClient> {
    let exe = match tandem {
        Some(exe) => exe,
        None => tandem_process::find_tandem_binary()
            .map_err(|e| Error::new(Kind::BlobRuntime, format!("cannot start a runtime: {e}")))?,
    };
    let client = py.allow_threads(move || fork_with(&exe, &config, heap_bytes))?;
    Ok(client)
}

fn fork_with(exe: &Path, store: &Path, heap_bytes: usize) -> Result<BlobClient, Error> {
    let store = std::path::absolute(store)
        .map_err(|e| Error::new(Kind::Blob, format!("{}: {e}", store.display())))?;
    if !store.is_file() {
        return Err(Error::new(
            Kind::Blob,
            format!("no store configuration at {}", store.display()),
        ));
    }
    // `Client::fork_runtime_with` runs `<exe> run ...`; the store's runtime
    // is `tandem blob run ...`, which reads the store from the environment.
    // The script is read once the child starts: removed with its folder as
    // soon as the runtime answers.
    let folder = tempfile::Builder::new()
        .prefix("tandem-python-")
        .tempdir()
        .map_err(|e| Error::new(Kind::BlobRuntime, format!("a temporary folder: {e}")))?;
    let script = folder.path().join("tandem-blob-run");
    let text = format!(
        "#!/bin/sh\nTANDEM_BLOB_CONFIG={} exec {} blob \"$@\"\n",
        shell_quote(&store),
        shell_quote(exe)
    );
    write_script(&script, &text)?;
    // CPU queues only: CUDA tensors reach the store through the host.
    // The segment holds the default one's lanes and heap beside the
    // clients' heaps (and a page of the client table each).
    let defaults = Config::default();
    let max_clients = 8;
    let config = Config {
        devices: DeviceSelection::Only(vec![]),
        client_heap_bytes: heap_bytes,
        max_clients,
        cpu_segment_size: defaults.cpu_segment_size
            + (max_clients as usize) * heap_bytes.saturating_add(4096),
        ..defaults
    };
    let client = RuntimeClient::fork_runtime_with(&script, &config)?;
    drop(folder);
    let segment = client.segment().name().unwrap_or_default().to_owned();
    Ok(BlobClient::new(client, segment))
}

fn write_script(path: &Path, text: &str) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let failed =
        |e: std::io::Error| Error::new(Kind::BlobRuntime, format!("{}: {e}", path.display()));
    std::fs::write(path, text).map_err(failed)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(failed)
}

/// `path` quoted for `sh`.
fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

impl BlobClient {
    fn new(client: RuntimeClient, segment: String) -> Self {
        Self {
            client,
            segment,
            tags: Mutex::new(HashMap::new()),
        }
    }

    /// A tag by name (made when `create`) or id. Names found are kept:
    /// a tag's id never changes, and a put by name then costs one task.
    fn tag_id(
        &self,
        py: Python<'_>,
        caller: &BlobCaller<'_, RuntimeClient>,
        tag: &Bound<'_, PyAny>,
        create: bool,
    ) -> PyResult<TagId> {
        if let Ok(id) = tag.extract::<u64>() {
            return Ok(TagId(id));
        }
        let name: String = tag.extract()?;
        let known = |tags: &Mutex<HashMap<String, TagId>>| {
            tags.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&name)
                .copied()
        };
        if let Some(id) = known(&self.tags) {
            return Ok(id);
        }
        let id = if create {
            call(py, caller, 0, |c| c.get_or_create_tag(&name))?
        } else {
            call(py, caller, 0, |c| c.tag(&name))?
                .ok_or_else(|| Error::new(Kind::BlobNotFound, format!("no tag {name:?}")))?
        };
        self.tags
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, id);
        Ok(id)
    }
}

/// Calls moving at most this many bytes run on the caller's thread: a
/// helper thread would cost more than the call, which ends within
/// [`CALL_TIMEOUT`] however the runtime behaves.
const DIRECT_BYTES: usize = 64 << 10;

/// How long one task of a call may take before the call fails: bounds the
/// calls Ctrl-C cannot stop, and a chunk of a transfer.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A caller of this client's runtime.
fn caller(client: &RuntimeClient) -> BlobCaller<'_, RuntimeClient> {
    BlobCaller::new(client).with_timeout(CALL_TIMEOUT)
}

/// One call moving `moved` bytes, the GIL released; a large one runs on a
/// helper thread so that Ctrl-C stops it.
fn call<T: Send>(
    py: Python<'_>,
    caller: &BlobCaller<'_, RuntimeClient>,
    moved: usize,
    work: impl FnOnce(&BlobCaller<'_, RuntimeClient>) -> Result<T, CallError> + Send,
) -> PyResult<T> {
    let outcome = if moved <= DIRECT_BYTES {
        py.allow_threads(|| work(caller))
    } else {
        interruptible(py, || caller.stop(), || work(caller))?
    };
    Ok(outcome.map_err(Error::from)?)
}

#[pymethods]
impl BlobClient {
    /// The runtime's CPU segment.
    #[getter]
    fn segment(&self) -> &str {
        &self.segment
    }

    /// The runtime's process id.
    #[getter]
    fn runtime_pid(&self) -> u32 {
        self.client.runtime_pid()
    }

    /// The id of tag `name`, made if new.
    fn tag(&self, py: Python<'_>, name: String) -> PyResult<u64> {
        let caller = caller(&self.client);
        Ok(call(py, &caller, 0, |c| c.get_or_create_tag(&name))?.0)
    }

    /// Writes `obj`'s bytes (bytes, a buffer-protocol object or a DLPack
    /// tensor, CPU or CUDA) at `offset` of blob `name` of `tag` (a name,
    /// made if new, or an id), placed on the fastest target with room, or
    /// on a target of tier `score` (0.0 to 1.0); the blob's size after.
    #[pyo3(signature = (tag, name, obj, offset=0, score=None))]
    fn put(
        &self,
        py: Python<'_>,
        tag: &Bound<'_, PyAny>,
        name: String,
        obj: &Bound<'_, PyAny>,
        offset: u64,
        score: Option<f32>,
    ) -> PyResult<u64> {
        let caller = caller(&self.client);
        let tag = self.tag_id(py, &caller, tag, true)?;
        let score = score.map_or(Score::AUTO, Score);
        if obj.hasattr("__dlpack__")? && !obj.is_instance_of::<pyo3::types::PyBytes>() {
            let imported = dlpack::import(obj)?;
            let staged;
            let bytes = match imported.place {
                Place::Host => host_bytes(&imported)?,
                Place::Cuda(_) => {
                    staged = read_device(&imported)?;
                    &staged[..]
                }
            };
            return call(py, &caller, bytes.len(), |c| {
                c.put_chunked(tag, &name, offset, bytes, score)
            });
        }
        let bytes = host::Bytes::of(obj)?;
        let bytes: &[u8] = &bytes;
        call(py, &caller, bytes.len(), |c| {
            c.put_chunked(tag, &name, offset, bytes, score)
        })
    }

    /// Reads blob `name` of `tag` from `offset`: into `out` (a writable
    /// buffer-protocol object or DLPack tensor, CPU or CUDA, filled
    /// whole) and returns it, or, without `out`, into a new `bytearray` of
    /// the rest of the blob.
    #[pyo3(signature = (tag, name, out=None, offset=0))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        tag: &Bound<'py, PyAny>,
        name: String,
        out: Option<Bound<'py, PyAny>>,
        offset: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let caller = caller(&self.client);
        let tag = self.tag_id(py, &caller, tag, false)?;
        let Some(out) = out else {
            let size = call(py, &caller, 0, |c| c.stat(tag, &name))?.size;
            let len = size.checked_sub(offset).ok_or_else(|| {
                Error::new(
                    Kind::BlobRange,
                    format!("offset {offset} is past the blob's end ({size} bytes)"),
                )
            })?;
            let mut bytes = vec![0u8; len as usize];
            let target = &mut bytes[..];
            call(py, &caller, target.len(), |c| {
                c.get_chunked(tag, &name, offset, target)
            })?;
            return Ok(PyByteArray::new(py, &bytes).into_any());
        };
        if out.hasattr("__dlpack__")? {
            let mut imported = dlpack::import(&out)?;
            match imported.place {
                Place::Host => {
                    let target = host_bytes_mut(&mut imported)?;
                    call(py, &caller, target.len(), |c| {
                        c.get_chunked(tag, &name, offset, target)
                    })?;
                }
                Place::Cuda(_) => {
                    let mut staged = vec![0u8; imported.len];
                    let target = &mut staged[..];
                    call(py, &caller, target.len(), |c| {
                        c.get_chunked(tag, &name, offset, target)
                    })?;
                    write_device(&mut imported, &staged)?;
                }
            }
            return Ok(out);
        }
        let mut bytes = host::Bytes::of_mut(&out)?;
        let target: &mut [u8] = &mut bytes;
        call(py, &caller, target.len(), |c| {
            c.get_chunked(tag, &name, offset, target)
        })?;
        drop(bytes);
        Ok(out)
    }

    /// Blob `name` of `tag`: its size, whether it is durable, its targets.
    fn stat<'py>(
        &self,
        py: Python<'py>,
        tag: &Bound<'py, PyAny>,
        name: String,
    ) -> PyResult<Bound<'py, PyDict>> {
        let caller = caller(&self.client);
        let tag = self.tag_id(py, &caller, tag, false)?;
        let info = call(py, &caller, 0, |c| c.stat(tag, &name))?;
        let dict = PyDict::new(py);
        dict.set_item("size", info.size)?;
        dict.set_item("durable", info.durable != 0)?;
        let targets: Vec<u32> = (0..64).filter(|i| info.targets & (1 << i) != 0).collect();
        dict.set_item("targets", targets)?;
        Ok(dict)
    }

    /// The names of `tag`'s blobs; without a tag, the tags' names.
    #[pyo3(signature = (tag=None))]
    fn ls(&self, py: Python<'_>, tag: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
        let caller = caller(&self.client);
        match tag {
            None => call(py, &caller, 0, |c| c.list_tags()),
            Some(tag) => {
                let tag = self.tag_id(py, &caller, tag, false)?;
                call(py, &caller, 0, |c| c.list_blobs(tag))
            }
        }
    }

    /// Deletes blob `name` of `tag`.
    fn rm(&self, py: Python<'_>, tag: &Bound<'_, PyAny>, name: String) -> PyResult<()> {
        let caller = caller(&self.client);
        let tag = self.tag_id(py, &caller, tag, false)?;
        call(py, &caller, 0, |c| c.delete(tag, &name))
    }

    fn __repr__(&self) -> String {
        format!(
            "tandem.blob.BlobClient(segment={:?}, runtime_pid={})",
            self.segment,
            self.client.runtime_pid()
        )
    }
}
