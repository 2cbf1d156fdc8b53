//! `tandem.blob`: the blob store through a runtime serving it, attached to
//! by its CPU segment or started for this process. Data moves through the
//! client's heap a chunk at a time: from and into bytes, buffer-protocol
//! objects and DLPack tensors (CUDA ones staged through the host).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tandem_blob::BlobPut;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyInt};
use tandem_blob::wire::COPY_SPACE;
use tandem_blob::{BlobCaller, CallError, PutContext, Score, StoreConfig, TagId};
use tandem_runtime::status::single_live_runtime;
use tandem_runtime::{Client as RuntimeClient, Config, DeviceSelection};

use crate::backend::{host_bytes, host_bytes_mut, read_device, write_device};
use crate::dlpack::{self, Place};
use crate::errors::{no_single_runtime, non_negative, Error, Kind};
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
            None => single_live_runtime().map_err(|e| no_single_runtime(e, Kind::BlobRuntime))?,
        };
        let client = RuntimeClient::attach(&segment)?;
        Ok(BlobClient::new(client, segment))
    })?;
    Ok(client)
}

/// Starts `tandem blob run` for this process on the store `config` (a
/// TOML file holding a store's configuration, or a runtime's with a
/// `[blob]` table) and attaches to it; it stops when the client is gone (or
/// this process dies).
#[pyfunction]
#[pyo3(signature = (config, tandem=None, heap_bytes=16 << 20))]
pub(crate) fn fork(
    py: Python<'_>,
    config: PathBuf,
    tandem: Option<PathBuf>,
    heap_bytes: i128,
) -> PyResult<BlobClient> {
    let heap_bytes = non_negative("heap_bytes", heap_bytes)?;
    let exe = match tandem {
        Some(exe) => exe,
        None => tandem_process::find_tandem_binary()
            .map_err(|e| Error::new(Kind::BlobRuntime, format!("cannot start a runtime: {e}")))?,
    };
    let client = py.allow_threads(move || fork_with(&exe, &config, heap_bytes))?;
    Ok(client)
}

fn fork_with(exe: &Path, store: &Path, heap_bytes: usize) -> Result<BlobClient, Error> {
    let blob_table = store_table(store)?;
    // CPU queues only: CUDA tensors reach the store through the host.
    // The segment holds the default one's lanes and heap beside the
    // clients' heaps (and a page of the client table each); the copy space
    // holds any blob task, as `tandem blob run` would raise it to.
    let defaults = Config::default();
    let max_clients = 8;
    let config = Config {
        devices: DeviceSelection::Only(vec![]),
        client_heap_bytes: heap_bytes,
        max_clients,
        cpu_segment_size: defaults.cpu_segment_size
            + (max_clients as usize) * heap_bytes.saturating_add(4096),
        copy_space: defaults.copy_space.max(COPY_SPACE),
        ..defaults
    };
    let client = RuntimeClient::fork_runtime_args(
        exe,
        &["blob".as_ref(), "run".as_ref()],
        &config,
        &blob_table,
    )
    .map_err(|e| {
        Error::new(
            Kind::BlobRuntime,
            format!(
                "starting `{} blob run` on the store {}: {e}",
                exe.display(),
                store.display()
            ),
        )
    })?;
    let segment = client.segment().name().unwrap_or_default().to_owned();
    Ok(BlobClient::new(client, segment))
}

/// The store configuration file `store` (just a store's configuration, or a
/// runtime's holding a `[blob]` table, as `tandem blob run` reads them) as
/// the `[blob]` table of the forked runtime's configuration. It is checked
/// here, so that a bad one fails with the parser's words rather than with
/// the runtime's exit.
fn store_table(store: &Path) -> Result<String, Error> {
    let failed = |why: String| Error::new(Kind::Blob, format!("{}: {why}", store.display()));
    let text = std::fs::read_to_string(store).map_err(|e| {
        failed(format!(
            "cannot read the store configuration (config=): {e}"
        ))
    })?;
    let mut table: toml::Table = text.parse().map_err(|e| failed(format!("{e}")))?;
    let blob = match table.remove("blob") {
        Some(toml::Value::Table(blob)) => blob,
        Some(_) => return Err(failed("[blob] is not a table".into())),
        None => table,
    };
    toml::Value::Table(blob.clone())
        .try_into::<StoreConfig>()
        .map_err(|e| failed(format!("bad store configuration: {e}")))?;
    let mut wrapped = toml::Table::new();
    wrapped.insert("blob".into(), toml::Value::Table(blob));
    toml::to_string(&wrapped).map_err(|e| failed(e.to_string()))
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
        if tag.is_instance_of::<PyInt>() {
            return Ok(TagId(non_negative("tag", tag.extract()?)?));
        }
        let name: String = tag.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "tag: a name (str) or an id (int), not {}",
                tag.get_type()
            ))
        })?;
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

/// A put's context from `put`'s keywords, strings as `tandem blob put`
/// takes them (`PutContext`'s parsers); `None` keeps the default. A value
/// they do not name is an `ArgumentError`.
fn put_context(compression: Option<&str>, persistence: Option<&str>) -> Result<PutContext, Error> {
    let refused = |why: String| Error::new(Kind::Argument, why);
    let mut context = PutContext::default();
    if let Some(compression) = compression {
        context.compression = compression.parse().map_err(refused)?;
    }
    if let Some(persistence) = persistence {
        context.persistence = persistence.parse().map_err(refused)?;
    }
    Ok(context)
}

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
    /// tensor, CPU or CUDA; not an empty one: the store holds no empty
    /// blobs) at `offset` of blob `name` of `tag` (a name, made if new, or an
    /// id), placed on the fastest target with room, or on a target of tier
    /// `score` (0.0 to 1.0); the blob's size after. `compression`: "none"
    /// (the default) or "[dynamic:]CODEC[:PRESET]" (codec "zstd" or "lz4",
    /// preset "fast", "balanced" or "best"; "dynamic" compresses a sample
    /// first and stores the bytes raw when it does not shrink).
    /// `persistence`, the least the blob must survive: "volatile" (the
    /// default), "temporary" (a crash of the store's process) or
    /// "long-term" (a power loss).
    #[pyo3(signature = (tag, name, obj, offset=0, score=None, *, compression=None, persistence=None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "the Python method's arguments, each one of its keywords"
    )]
    fn put(
        &self,
        py: Python<'_>,
        tag: &Bound<'_, PyAny>,
        name: String,
        obj: &Bound<'_, PyAny>,
        offset: i128,
        score: Option<f32>,
        compression: Option<&str>,
        persistence: Option<&str>,
    ) -> PyResult<u64> {
        let offset = non_negative("offset", offset)?;
        let context = put_context(compression, persistence)?;
        let score = score.map_or(Score::AUTO, Score);
        let imported;
        let staged;
        let exported;
        let bytes: &[u8] = if obj.hasattr("__dlpack__")? && !obj.is_instance_of::<PyBytes>() {
            imported = dlpack::import(obj)?;
            match imported.place {
                Place::Host => host_bytes(&imported)?,
                Place::Cuda(_) => {
                    staged = read_device(&imported)?;
                    &staged
                }
            }
        } else {
            exported = host::Bytes::of(obj)?;
            &exported
        };
        if bytes.is_empty() {
            return Err(Error::new(
                Kind::BlobRange,
                "obj is empty (0 bytes): the store holds no empty blobs",
            )
            .into());
        }
        let caller = caller(&self.client);
        let tag = self.tag_id(py, &caller, tag, true)?;
        call(py, &caller, bytes.len(), |c| {
            c.put_chunked(
                &BlobPut::new(tag, &name)
                    .at(offset)
                    .score(score)
                    .context(context),
                bytes,
            )
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
        offset: i128,
    ) -> PyResult<Bound<'py, PyAny>> {
        let offset = non_negative("offset", offset)?;
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

    /// Blob `name` of `tag`: its size, whether it is durable, its targets,
    /// the bytes it takes on them (`stored`), its persistence level and the
    /// codecs its compressed frames use (empty when stored raw).
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
        dict.set_item("stored", info.stored)?;
        dict.set_item("persistence", info.persistence().map(|p| p.to_string()))?;
        let codecs: Vec<String> = info.codecs().iter().map(ToString::to_string).collect();
        dict.set_item("codecs", codecs)?;
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
