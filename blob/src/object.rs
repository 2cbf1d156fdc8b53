//! The object tier: a target on S3-compatible object storage (through `object_store`), shared by
//! every store configured with the same bucket and prefix.
//!
//! # What lives in the bucket (under the target's prefix)
//!
//! * `tags/<tag>`: an empty object per tag name, so that every store sees every tag.
//! * `blobs/<tag>/<name>`: the blob's **manifest**: its size, its part size and, per part, the
//!   id of the put that wrote it (0: a hole, read as zeros).
//! * `parts/<tag>/<name>/<put id>/<index>`: one part's bytes, written once and never changed.
//!
//! Names are path segments, percent-encoded where S3 keys would be ambiguous.
//!
//! # A put
//!
//! Reads the manifest (and its etag), writes a new part object for every part its range
//! touches (the bytes around the range come from the old parts), up to `in_flight` uploads at
//! once, and only then writes the manifest. A put that fails before the manifest is written
//! changes nothing a reader can see; its parts are deleted. One killed before leaves
//! unreferenced parts behind, never a visible blob.
//!
//! The manifest write is conditional: on the etag read (`If-Match`), or on there being no
//! manifest (`If-None-Match: *`). When another writer replaced the manifest meanwhile, the put
//! waits a random while (its ceiling doubling with each conflict), re-reads it, rewrites only
//! the two parts at the ends of its range (whose outer bytes came from the old version; the
//! fill bytes of those two parts are kept for this), and tries again.
//! Two writers of one blob therefore never lose each other's bytes, on stores that honour
//! these conditions. Stores that ignore them (probed at open; Garage 2.5 is one) still never
//! mix two versions, because a manifest is one object written whole, but the last manifest
//! written wins: of two concurrent puts to one blob, one put's bytes may be lost. `tracing`
//! says so at open, and `require_conditional_writes` refuses such a store.
//!
//! After the manifest, the parts it replaced are deleted. A get on another store that read the
//! old manifest then finds a part missing; it waits as a put does, re-reads the manifest and
//! starts over, unless it already handed bytes to its caller, in which case it fails
//! ([`BlobError::ObjectConflict`]).
//!
//! # Caching
//!
//! Part objects never change, so a store keeps the parts it read or wrote (up to
//! `cache_bytes`, least recently used first out) and never asks for them again. Every get, stat
//! and put re-reads the manifest, conditionally (`If-None-Match` on the etag it holds), so a
//! store sees another store's put as soon as the object store returns the new manifest.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::path::{Path, PathPart};
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, RetryConfig, UpdateVersion,
};
use parking_lot::Mutex;

use crate::config::ObjectConfig;
use crate::error::BlobError;
use crate::{Fill, Sink};

/// Most times a put re-reads the manifest after another writer replaced it.
const MAX_CONFLICTS: u32 = 16;
/// Most times a get starts over after a part it needed was replaced.
const MAX_GET_RESTARTS: u32 = 4;
/// Longest wait between two attempts of a put or get that lost to another writer.
const MAX_CONFLICT_WAIT: Duration = Duration::from_secs(1);

/// A blob version as stored in its manifest object.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Manifest {
    size: u64,
    part_size: u64,
    /// Per part, the id of the put that wrote it; 0 is a hole.
    parts: Vec<u128>,
}

const MANIFEST_FORMAT: u8 = 1;

impl Manifest {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(21 + self.parts.len() * 16);
        v.push(MANIFEST_FORMAT);
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.part_size.to_le_bytes());
        v.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        for p in &self.parts {
            v.extend_from_slice(&p.to_le_bytes());
        }
        v
    }

    /// `None` unless `b` is what [`Manifest::encode`] writes, with one part per `part_size`
    /// bytes of the size.
    fn decode(b: &[u8]) -> Option<Manifest> {
        let u64_at = |at: usize| Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?));
        if b.first() != Some(&MANIFEST_FORMAT) {
            return None;
        }
        let size = u64_at(1)?;
        let part_size = u64_at(9)?;
        let n = u32::from_le_bytes(b.get(17..21)?.try_into().ok()?) as usize;
        if part_size == 0 || b.len() != 21 + n.checked_mul(16)? {
            return None;
        }
        if size.div_ceil(part_size) != n as u64 {
            return None;
        }
        let parts = b[21..]
            .chunks_exact(16)
            .map(|c| u128::from_le_bytes(c.try_into().expect("16 bytes")))
            .collect();
        Some(Manifest {
            size,
            part_size,
            parts,
        })
    }

    /// Bytes of part `i` (the last part may be short).
    fn part_len(&self, i: u64) -> u64 {
        self.part_size.min(self.size - i * self.part_size)
    }
}

/// A part object's write in flight.
type Upload = tokio::task::JoinHandle<object_store::Result<()>>;

/// A part a get will hand on: its bytes, or its read in flight.
enum Slot {
    Hole,
    Cached(Path, Bytes),
    Fetching(
        Path,
        tokio::task::JoinHandle<object_store::Result<Option<Bytes>>>,
    ),
}

/// A manifest as read, with the etag to make the next write conditional on.
#[derive(Clone)]
struct Read {
    manifest: Arc<Manifest>,
    etag: Option<String>,
}

/// Parts read or written, least recently used first out.
struct PartCache {
    limit: u64,
    bytes: u64,
    parts: HashMap<Path, Bytes>,
    order: VecDeque<Path>,
}

impl PartCache {
    fn get(&mut self, key: &Path) -> Option<Bytes> {
        let hit = self.parts.get(key)?.clone();
        if let Some(at) = self.order.iter().position(|k| k == key) {
            let k = self.order.remove(at).expect("position found");
            self.order.push_back(k);
        }
        Some(hit)
    }

    fn insert(&mut self, key: Path, part: Bytes) {
        if part.len() as u64 > self.limit || self.parts.contains_key(&key) {
            return;
        }
        self.bytes += part.len() as u64;
        self.parts.insert(key.clone(), part);
        self.order.push_back(key);
        while self.bytes > self.limit {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(b) = self.parts.remove(&old) {
                self.bytes -= b.len() as u64;
            }
        }
    }
}

/// One object target: the client, its own I/O threads, and the caches.
pub(crate) struct ObjectTier {
    /// Runs the client's requests; the store's callers only wait for them (see [`wait`]).
    /// Shut down in the background on drop (see `Drop`).
    io: ManuallyDrop<tokio::runtime::Runtime>,
    store: Arc<dyn ObjectStore>,
    root: Path,
    /// Part size of blobs this store creates.
    part_size: u64,
    in_flight: usize,
    /// Whether the store honours `If-Match` / `If-None-Match` on writes (probed at open).
    conditional: bool,
    /// What errors call this target: `s3://bucket/prefix`.
    label: String,
    parts: Mutex<PartCache>,
    manifests: Mutex<HashMap<Path, Read>>,
}

impl Drop for ObjectTier {
    /// Dropping a tokio runtime blocks, which panics inside another async runtime (a store
    /// dropped by an async application); shutting it down in the background does not. What it
    /// still runs is deletes of replaced parts, which are best effort anyway.
    fn drop(&mut self) {
        // SAFETY: `io` is taken once, here, and not used after: the tier is being dropped.
        let io = unsafe { ManuallyDrop::take(&mut self.io) };
        io.shutdown_background();
    }
}

/// Polls `f` on this thread until it is ready, parking in between. The futures waited on are
/// join handles of tasks on the tier's runtime, so the caller may be any thread, inside an
/// async runtime or not.
fn wait<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// A fresh put id: random, never 0 (0 marks holes).
fn put_id() -> u128 {
    random_bits() | 1
}

/// Random bits from the OS; without its randomness, time and pid, which still differ between
/// the processes of one host.
fn random_bits() -> u128 {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b = (t ^ (u128::from(std::process::id()) << 96)).to_le_bytes();
    }
    u128::from_le_bytes(b)
}

/// How long an operation that lost to another writer `lost` times in a row waits before its
/// next attempt: a random time ("full jitter") up to its last attempt's duration `took` times
/// 2^(lost - 1), at most [`MAX_CONFLICT_WAIT`]. Scaled by the attempt's own duration, writers
/// that keep colliding spread out at the pace of the store they share (microseconds in memory,
/// tens of milliseconds on S3). Retrying at once, equally fast writers collide again: the test
/// with three in-memory writers of one blob failed in 2 of 100 runs without a wait (a put lost
/// 16 times in a row), and in none of 300 with it.
fn conflict_wait(lost: u32, took: Duration) -> Duration {
    let ceiling = took
        .saturating_mul(1 << lost.saturating_sub(1).min(20))
        .min(MAX_CONFLICT_WAIT);
    let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos((random_bits() as u64) % nanos.saturating_add(1))
}

/// What a conditional read of a manifest found.
enum ManifestRead {
    Missing,
    Unchanged,
    /// The object's bytes and etag.
    Fresh(Bytes, Option<String>),
}

impl ObjectTier {
    /// Connects to the configured S3 bucket (credentials from the environment variables the
    /// configuration names), checks that it answers, and probes conditional writes.
    pub(crate) fn open(config: &ObjectConfig) -> Result<ObjectTier, BlobError> {
        let env = |var: &str| {
            std::env::var(var).map_err(|_| {
                BlobError::Config(format!(
                    "object target s3://{}: the environment variable {var} (credentials) is not set",
                    config.bucket
                ))
            })
        };
        let key_id = env(&config.access_key_id_env)?;
        let secret = env(&config.secret_access_key_env)?;
        if let Some(e) = &config.endpoint {
            if e.starts_with("http://") && !config.allow_http {
                return Err(BlobError::Config(format!(
                    "object target endpoint {e} is plain HTTP: credentials and data would travel \
                     unencrypted; set allow_http = true to accept that"
                )));
            }
        }
        let ms = Duration::from_millis;
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_access_key_id(key_id)
            .with_secret_access_key(secret)
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(config.allow_http)
                    .with_timeout(ms(config.timeout_ms))
                    .with_connect_timeout(ms(config.connect_timeout_ms)),
            )
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: ms(100),
                    max_backoff: ms(5_000),
                    base: 2.0,
                },
                max_retries: config.max_retries,
                retry_timeout: ms(config.retry_timeout_ms),
            });
        if let Some(e) = &config.endpoint {
            builder = builder.with_endpoint(e);
        }
        let store = builder
            .build()
            .map_err(|e| BlobError::Config(format!("object target s3://{}: {e}", config.bucket)))?;
        Self::with_store(Arc::new(store), config)
    }

    /// The tier on `store` (any `object_store` backend); `config`'s prefix, part size,
    /// concurrency, cache and conditional-write settings apply, its S3 settings do not.
    pub(crate) fn with_store(
        store: Arc<dyn ObjectStore>,
        config: &ObjectConfig,
    ) -> Result<ObjectTier, BlobError> {
        if config.part_size == 0 || config.in_flight == 0 {
            return Err(BlobError::Config(
                "object target: part_size and in_flight must be at least 1".into(),
            ));
        }
        let root = Path::parse(&config.prefix).map_err(|e| {
            BlobError::Config(format!("object target prefix {:?}: {e}", config.prefix))
        })?;
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("blob-object-io")
            .enable_all()
            .build()
            .map_err(|e| BlobError::Config(format!("object target: I/O threads: {e}")))?;
        let label = if config.prefix.is_empty() {
            format!("s3://{}", config.bucket)
        } else {
            format!("s3://{}/{}", config.bucket, config.prefix)
        };
        let mut tier = ObjectTier {
            io: ManuallyDrop::new(io),
            store,
            root,
            part_size: config.part_size,
            in_flight: config.in_flight,
            conditional: false,
            label,
            parts: Mutex::new(PartCache {
                limit: config.cache_bytes,
                bytes: 0,
                parts: HashMap::new(),
                order: VecDeque::new(),
            }),
            manifests: Mutex::new(HashMap::new()),
        };
        tier.check_reachable()?;
        tier.conditional = tier.probe_conditional_writes()?;
        if !tier.conditional {
            if config.require_conditional_writes {
                return Err(BlobError::Config(format!(
                    "object target {}: the store ignores conditional writes, and \
                     require_conditional_writes is set",
                    tier.label
                )));
            }
            tracing::warn!(
                target = %tier.label,
                "the object store ignores conditional writes: of two concurrent puts to one \
                 blob, the last manifest written wins"
            );
        }
        Ok(tier)
    }

    /// Whether the store honours conditional writes (probed at open).
    pub(crate) fn conditional_writes(&self) -> bool {
        self.conditional
    }

    fn error(&self, op: impl Into<String>, source: object_store::Error) -> BlobError {
        BlobError::ObjectStore {
            target: self.label.clone(),
            op: op.into(),
            source,
        }
    }

    /// Runs `f` on the tier's I/O threads and waits for it.
    fn run<T: Send + 'static>(
        &self,
        op: impl Into<String>,
        f: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> Result<T, BlobError> {
        match wait(self.io.spawn(f)) {
            Ok(r) => r.map_err(|e| self.error(op, e)),
            Err(join) => Err(self.error(op, object_store::Error::JoinError { source: join })),
        }
    }

    /// A listing answers: the endpoint is reachable, the credentials work, the bucket exists.
    fn check_reachable(&self) -> Result<(), BlobError> {
        let store = Arc::clone(&self.store);
        let tags = self.root.clone().join("tags");
        self.run("list (checking the bucket)", async move {
            store.list_with_delimiter(Some(&tags)).await.map(drop)
        })
        .map_err(|e| match e {
            BlobError::ObjectStore {
                target,
                source: object_store::Error::NotFound { .. },
                ..
            } => BlobError::Config(format!("object target {target}: the bucket does not exist")),
            other => other,
        })
    }

    /// Writes one probe object as a manifest write would: created only if absent, then
    /// replaced only if its etag is a stale one. A store that lets either through, or does not
    /// implement them (`object_store`'s local files have no `If-Match`), is written to
    /// unconditionally.
    fn probe_conditional_writes(&self) -> Result<bool, BlobError> {
        let store = Arc::clone(&self.store);
        let probe = self
            .root
            .clone()
            .join("probes")
            .join(format!("{:032x}", put_id()));
        self.run("conditional-write probe", async move {
            let refused = |r: object_store::Result<_>| match r {
                Ok(_) | Err(object_store::Error::NotImplemented { .. }) => Ok(false),
                Err(object_store::Error::AlreadyExists { .. })
                | Err(object_store::Error::Precondition { .. }) => Ok(true),
                Err(e) => Err(e),
            };
            let first = store
                .put_opts(
                    &probe,
                    PutPayload::from_static(b"1"),
                    PutMode::Create.into(),
                )
                .await?;
            let again = store
                .put_opts(
                    &probe,
                    PutPayload::from_static(b"2"),
                    PutMode::Create.into(),
                )
                .await;
            let stale = PutMode::Update(UpdateVersion {
                e_tag: Some(format!("{}-stale", first.e_tag.unwrap_or_default())),
                version: None,
            });
            let honoured = refused(again)?
                && refused(
                    store
                        .put_opts(&probe, PutPayload::from_static(b"3"), stale.into())
                        .await,
                )?;
            store.delete(&probe).await?;
            Ok(honoured)
        })
    }

    fn tag_path(&self, tag: &str) -> Path {
        self.root.clone().join("tags").join(PathPart::from(tag))
    }

    fn manifest_path(&self, tag: &str, name: &str) -> Path {
        self.root
            .clone()
            .join("blobs")
            .join(PathPart::from(tag))
            .join(PathPart::from(name))
    }

    fn part_path(&self, tag: &str, name: &str, id: u128, index: u64) -> Path {
        self.root
            .clone()
            .join("parts")
            .join(PathPart::from(tag))
            .join(PathPart::from(name))
            .join(format!("{id:032x}"))
            .join(index.to_string())
    }

    /// Records tag `name` in the bucket (idempotent).
    pub(crate) fn put_tag(&self, name: &str) -> Result<(), BlobError> {
        let store = Arc::clone(&self.store);
        let path = self.tag_path(name);
        self.run(format!("put tag {name:?}"), async move {
            store.put(&path, PutPayload::new()).await.map(drop)
        })
    }

    /// Whether the bucket has tag `name`.
    pub(crate) fn has_tag(&self, name: &str) -> Result<bool, BlobError> {
        let store = Arc::clone(&self.store);
        let path = self.tag_path(name);
        self.run(format!("look up tag {name:?}"), async move {
            match store.head(&path).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    /// Every tag name in the bucket.
    pub(crate) fn tags(&self) -> Result<Vec<String>, BlobError> {
        let store = Arc::clone(&self.store);
        let dir = self.root.clone().join("tags");
        let listed = self.run("list tags", async move {
            store.list_with_delimiter(Some(&dir)).await
        })?;
        listed
            .objects
            .iter()
            .map(|o| self.last_segment(&o.location))
            .collect()
    }

    /// The decoded last segment of a listed key.
    fn last_segment(&self, key: &Path) -> Result<String, BlobError> {
        let raw = key.filename().unwrap_or_default();
        percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| {
                BlobError::Corrupt(format!(
                    "object target {}: key {key} is not UTF-8",
                    self.label
                ))
            })
    }

    /// The blob's manifest, read again unless the cached etag still matches.
    fn manifest(&self, tag: &str, name: &str) -> Result<Option<Read>, BlobError> {
        let path = self.manifest_path(tag, name);
        let cached = self.manifests.lock().get(&path).cloned();
        let store = Arc::clone(&self.store);
        let etag = cached.as_ref().and_then(|c| c.etag.clone());
        let key = path.clone();
        let read = self.run(format!("read the manifest of {tag}/{name}"), async move {
            let options = GetOptions {
                if_none_match: etag,
                ..GetOptions::default()
            };
            match store.get_opts(&key, options).await {
                Ok(got) => {
                    let etag = got.meta.e_tag.clone();
                    Ok(ManifestRead::Fresh(got.bytes().await?, etag))
                }
                Err(object_store::Error::NotModified { .. }) => Ok(ManifestRead::Unchanged),
                Err(object_store::Error::NotFound { .. }) => Ok(ManifestRead::Missing),
                Err(e) => Err(e),
            }
        })?;
        match read {
            ManifestRead::Missing => {
                self.manifests.lock().remove(&path);
                Ok(None)
            }
            ManifestRead::Unchanged => Ok(cached),
            ManifestRead::Fresh(bytes, etag) => {
                let manifest = Manifest::decode(&bytes).ok_or_else(|| {
                    BlobError::Corrupt(format!(
                        "object target {}: the manifest of {tag}/{name} is not one this version reads",
                        self.label
                    ))
                })?;
                let read = Read {
                    manifest: Arc::new(manifest),
                    etag,
                };
                self.manifests.lock().insert(path, read.clone());
                Ok(Some(read))
            }
        }
    }

    /// The size of blob `name` of `tag`, if the bucket has it.
    pub(crate) fn size(&self, tag: &str, name: &str) -> Result<Option<u64>, BlobError> {
        Ok(self.manifest(tag, name)?.map(|r| r.manifest.size))
    }

    /// The bytes of part `i` of `m` (zeros for a hole), from the cache or the bucket; `None`
    /// when the part object is gone (a newer put replaced it).
    fn part(
        &self,
        tag: &str,
        name: &str,
        m: &Manifest,
        i: u64,
    ) -> Result<Option<Bytes>, BlobError> {
        let len = m.part_len(i);
        let id = m.parts[i as usize];
        if id == 0 {
            return Ok(Some(Bytes::from(vec![0; len as usize])));
        }
        let key = self.part_path(tag, name, id, i);
        if let Some(hit) = self.parts.lock().get(&key) {
            return self.fit(tag, name, &key, hit, len).map(Some);
        }
        let task = self.start_fetch(key.clone());
        self.fetched(tag, name, key, task, len)
    }

    /// Waits for a part read, caches what came, and fits it to `len`; `None` when the part
    /// object is gone.
    fn fetched(
        &self,
        tag: &str,
        name: &str,
        key: Path,
        task: tokio::task::JoinHandle<object_store::Result<Option<Bytes>>>,
        len: u64,
    ) -> Result<Option<Bytes>, BlobError> {
        let Some(got) = self.join(format!("read part {key}"), task)? else {
            return Ok(None);
        };
        self.parts.lock().insert(key.clone(), got.clone());
        self.fit(tag, name, &key, got, len).map(Some)
    }

    /// Starts reading part object `key` on the I/O threads.
    fn start_fetch(
        &self,
        key: Path,
    ) -> tokio::task::JoinHandle<object_store::Result<Option<Bytes>>> {
        let store = Arc::clone(&self.store);
        self.io.spawn(async move {
            match store.get(&key).await {
                Ok(got) => got.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    fn join<T>(
        &self,
        op: String,
        task: tokio::task::JoinHandle<object_store::Result<T>>,
    ) -> Result<T, BlobError> {
        match wait(task) {
            Ok(r) => r.map_err(|e| self.error(op, e)),
            Err(join) => Err(self.error(op, object_store::Error::JoinError { source: join })),
        }
    }

    /// A part object's bytes as part of `len` bytes. An object may be shorter: it was the
    /// blob's last part when written, and a later put extended the blob past it without
    /// touching it; the bytes past its end are zeros.
    fn fit(
        &self,
        tag: &str,
        name: &str,
        key: &Path,
        got: Bytes,
        len: u64,
    ) -> Result<Bytes, BlobError> {
        match (got.len() as u64).cmp(&len) {
            std::cmp::Ordering::Equal => Ok(got),
            std::cmp::Ordering::Less => {
                let mut padded = got.to_vec();
                padded.resize(len as usize, 0);
                Ok(Bytes::from(padded))
            }
            std::cmp::Ordering::Greater => Err(BlobError::Corrupt(format!(
                "object target {}: part {key} of {tag}/{name} holds {} bytes, its manifest says \
                 at most {len}",
                self.label,
                got.len()
            ))),
        }
    }

    /// Writes `end - offset` bytes from `fill` at `offset` of blob `name` of `tag`; returns the
    /// blob's new size. See the module docs.
    pub(crate) fn put(
        &self,
        tag: &str,
        name: &str,
        offset: u64,
        end: u64,
        fill: &mut Fill<'_>,
    ) -> Result<u64, BlobError> {
        let mut old = self.manifest(tag, name)?;
        let part_size = old
            .as_ref()
            .map_or(self.part_size, |r| r.manifest.part_size);
        let id = put_id();
        let (first, last) = (offset / part_size, (end - 1) / part_size);
        let mut uploads = VecDeque::new();
        let mut written: Vec<(Path, Bytes)> = Vec::new();
        let result = (|| {
            // The end parts' fill bytes. Their other bytes come from the version the manifest
            // write is conditional on, so they are composed last, and again after a conflict.
            let mut ends: Vec<(u64, Vec<u8>)> = Vec::new();
            for i in first..=last {
                let (a, b) = (offset.max(i * part_size), end.min((i + 1) * part_size));
                let mut fresh = vec![0u8; (b - a) as usize];
                fill(a - offset, &mut fresh)?;
                if i == first || i == last {
                    ends.push((i, fresh));
                    continue;
                }
                // A middle part is a whole part of fill bytes, whatever the old version holds.
                let key = self.part_path(tag, name, id, i);
                self.upload(&mut uploads, &mut written, key, Bytes::from(fresh))?;
            }
            let mut started = Instant::now();
            for attempt in 1..=MAX_CONFLICTS {
                if attempt > 1 {
                    // This put's end parts are written again under the same keys: the last
                    // attempt's writes must be over first.
                    self.finish_uploads(&mut uploads)?;
                    std::thread::sleep(conflict_wait(attempt - 1, started.elapsed()));
                    started = Instant::now();
                    old = self.manifest(tag, name)?;
                    if old
                        .as_ref()
                        .is_some_and(|r| r.manifest.part_size != part_size)
                    {
                        // A delete and a first put with another part size came between: every
                        // part of the range would have to be cut anew; give up instead.
                        return Err(self.conflict(tag, name, attempt));
                    }
                }
                let mut composed = Vec::with_capacity(ends.len());
                for (i, fresh) in &ends {
                    match self.compose(
                        tag,
                        name,
                        old.as_ref(),
                        part_size,
                        offset,
                        end,
                        *i,
                        fresh,
                    )? {
                        Some(bytes) => composed.push((*i, bytes)),
                        // A part of the old version was replaced: so was its manifest.
                        None => break,
                    }
                }
                if composed.len() < ends.len() {
                    continue;
                }
                for (i, bytes) in composed {
                    let key = self.part_path(tag, name, id, i);
                    self.upload(&mut uploads, &mut written, key, bytes)?;
                }
                self.finish_uploads(&mut uploads)?;
                let prior = old.as_ref().map(|r| &r.manifest);
                let size = prior.map_or(0, |m| m.size).max(end);
                let mut parts = prior.map_or_else(Vec::new, |m| m.parts.clone());
                parts.resize(size.div_ceil(part_size) as usize, 0);
                let replaced: Vec<Path> = (first..=last)
                    .filter_map(|i| match std::mem::replace(&mut parts[i as usize], id) {
                        0 => None,
                        was => Some(self.part_path(tag, name, was, i)),
                    })
                    .collect();
                let manifest = Manifest {
                    size,
                    part_size,
                    parts,
                };
                if self.write_manifest(tag, name, old.as_ref(), &manifest)? {
                    self.drop_parts(replaced.into_iter());
                    return Ok(size);
                }
                tracing::debug!(
                    target = %self.label,
                    blob = %format!("{tag}/{name}"),
                    "another writer replaced the manifest; merging again"
                );
            }
            Err(self.conflict(tag, name, MAX_CONFLICTS))
        })();
        match result {
            Ok(size) => {
                let mut cache = self.parts.lock();
                for (key, bytes) in written {
                    cache.insert(key, bytes);
                }
                Ok(size)
            }
            Err(e) => {
                // The uploads still running end before their parts are deleted.
                for task in uploads {
                    let _ = wait(task);
                }
                self.drop_parts(written.into_iter().map(|(k, _)| k));
                Err(e)
            }
        }
    }

    fn conflict(&self, tag: &str, name: &str, attempts: u32) -> BlobError {
        BlobError::ObjectConflict {
            target: self.label.clone(),
            name: format!("{tag}/{name}"),
            attempts,
        }
    }

    /// End part `i`'s bytes: its `fresh` fill bytes (those of `offset..end` in it), the old
    /// version's bytes around them (zeros where it has none), as long as the part is in a blob
    /// of size `max(old size, end)`. `None` when the old part object is gone.
    #[allow(clippy::too_many_arguments)]
    fn compose(
        &self,
        tag: &str,
        name: &str,
        old: Option<&Read>,
        part_size: u64,
        offset: u64,
        end: u64,
        i: u64,
        fresh: &[u8],
    ) -> Result<Option<Bytes>, BlobError> {
        let start = i * part_size;
        let old_size = old.map_or(0, |r| r.manifest.size);
        let len = part_size.min(old_size.max(end) - start) as usize;
        let a = (offset.max(start) - start) as usize;
        if a == 0 && fresh.len() == len {
            return Ok(Some(Bytes::copy_from_slice(fresh)));
        }
        let mut part = vec![0u8; len];
        if let Some(r) = old.filter(|r| start < r.manifest.size) {
            let Some(was) = self.part(tag, name, &r.manifest, i)? else {
                return Ok(None);
            };
            part[..was.len()].copy_from_slice(&was);
        }
        part[a..a + fresh.len()].copy_from_slice(fresh);
        Ok(Some(Bytes::from(part)))
    }

    /// Starts writing part object `key`, after the oldest upload when `in_flight` are running.
    fn upload(
        &self,
        uploads: &mut VecDeque<Upload>,
        written: &mut Vec<(Path, Bytes)>,
        key: Path,
        bytes: Bytes,
    ) -> Result<(), BlobError> {
        if uploads.len() == self.in_flight {
            let task = uploads.pop_front().expect("in_flight is at least 1");
            self.join("write a part".into(), task)?;
        }
        uploads.push_back(self.start_upload(key.clone(), bytes.clone()));
        written.retain(|(k, _)| *k != key);
        written.push((key, bytes));
        Ok(())
    }

    fn finish_uploads(&self, uploads: &mut VecDeque<Upload>) -> Result<(), BlobError> {
        while let Some(task) = uploads.pop_front() {
            self.join("write a part".into(), task)?;
        }
        Ok(())
    }

    fn start_upload(&self, key: Path, bytes: Bytes) -> Upload {
        let store = Arc::clone(&self.store);
        self.io
            .spawn(async move { store.put(&key, PutPayload::from(bytes)).await.map(drop) })
    }

    /// Writes `m` as the blob's manifest, conditional on `old` (the manifest read, or none)
    /// where the store honours conditions; `false` when another writer came first.
    fn write_manifest(
        &self,
        tag: &str,
        name: &str,
        old: Option<&Read>,
        m: &Manifest,
    ) -> Result<bool, BlobError> {
        let mode = match (self.conditional, old) {
            (false, _) => PutMode::Overwrite,
            (true, None) => PutMode::Create,
            (true, Some(Read { etag: Some(e), .. })) => PutMode::Update(UpdateVersion {
                e_tag: Some(e.clone()),
                version: None,
            }),
            (true, Some(Read { etag: None, .. })) => PutMode::Overwrite,
        };
        let store = Arc::clone(&self.store);
        let path = self.manifest_path(tag, name);
        let key = path.clone();
        let payload = PutPayload::from(m.encode());
        let written = self.run(format!("write the manifest of {tag}/{name}"), async move {
            match store.put_opts(&key, payload, PutOptions::from(mode)).await {
                Ok(done) => Ok(Some(done.e_tag)),
                Err(object_store::Error::AlreadyExists { .. })
                | Err(object_store::Error::Precondition { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        let Some(etag) = written else {
            return Ok(false);
        };
        self.manifests.lock().insert(
            path,
            Read {
                manifest: Arc::new(m.clone()),
                etag,
            },
        );
        Ok(true)
    }

    /// Deletes part objects no manifest names any more, without waiting: a part left behind
    /// (the process ends first, the request fails) is only unreferenced bytes.
    fn drop_parts(&self, keys: impl Iterator<Item = Path>) {
        let keys: Vec<Path> = keys.collect();
        if keys.is_empty() {
            return;
        }
        {
            let mut cache = self.parts.lock();
            for k in &keys {
                if let Some(b) = cache.parts.remove(k) {
                    cache.bytes -= b.len() as u64;
                    cache.order.retain(|o| o != k);
                }
            }
        }
        let store = Arc::clone(&self.store);
        let label = self.label.clone();
        self.io.spawn(async move {
            for k in keys {
                if let Err(e) = store.delete(&k).await {
                    tracing::debug!(target = %label, part = %k, %e, "an unreferenced part stays");
                }
            }
        });
    }

    /// Reads `len` bytes at `offset` of blob `name` of `tag` into `drain`, in order; `Ok(false)`
    /// when the bucket has no such blob. Range errors are [`BlobError::OutOfRange`].
    pub(crate) fn get(
        &self,
        tag: &str,
        name: &str,
        offset: u64,
        len: u64,
        drain: &mut Sink<'_>,
    ) -> Result<bool, BlobError> {
        let mut started = Instant::now();
        for attempt in 1..=MAX_GET_RESTARTS {
            if attempt > 1 {
                std::thread::sleep(conflict_wait(attempt - 1, started.elapsed()));
                started = Instant::now();
            }
            let Some(read) = self.manifest(tag, name)? else {
                return Ok(false);
            };
            let m = &read.manifest;
            if offset.checked_add(len).is_none_or(|e| e > m.size) {
                return Err(BlobError::OutOfRange {
                    size: m.size,
                    offset,
                    len,
                });
            }
            let end = offset + len;
            let (first, last) = (offset / m.part_size, (end - 1) / m.part_size);
            // Parts not cached are fetched up to `in_flight` ahead of the one being drained.
            let mut pending: VecDeque<Slot> = VecDeque::new();
            let mut next = first;
            let mut drained = false;
            let mut gone = false;
            for i in first..=last {
                while next <= last && pending.len() < self.in_flight {
                    pending.push_back(self.slot(tag, name, m, next));
                    next += 1;
                }
                let len = m.part_len(i);
                let bytes = match pending.pop_front().expect("part i was queued") {
                    Slot::Hole => Bytes::from(vec![0; len as usize]),
                    Slot::Cached(key, b) => self.fit(tag, name, &key, b, len)?,
                    Slot::Fetching(key, task) => match self.fetched(tag, name, key, task, len)? {
                        Some(b) => b,
                        None => {
                            gone = true;
                            break;
                        }
                    },
                };
                let start = i * m.part_size;
                let (a, b) = (offset.max(start), end.min(start + len));
                drain(
                    a - offset,
                    &bytes[(a - start) as usize..(b - start) as usize],
                )?;
                drained = true;
            }
            if !gone {
                return Ok(true);
            }
            if drained {
                // The caller has bytes of the old version: starting over would mix versions.
                return Err(self.conflict(tag, name, attempt));
            }
        }
        Err(self.conflict(tag, name, MAX_GET_RESTARTS))
    }

    /// Part `i` of `m` for a get: a hole, cached, or its read started.
    fn slot(&self, tag: &str, name: &str, m: &Manifest, i: u64) -> Slot {
        let id = m.parts[i as usize];
        if id == 0 {
            return Slot::Hole;
        }
        let key = self.part_path(tag, name, id, i);
        let hit = self.parts.lock().get(&key);
        match hit {
            Some(b) => Slot::Cached(key, b),
            None => {
                let task = self.start_fetch(key.clone());
                Slot::Fetching(key, task)
            }
        }
    }

    /// Removes blob `name` of `tag`; `Ok(false)` when the bucket has no such blob.
    pub(crate) fn delete(&self, tag: &str, name: &str) -> Result<bool, BlobError> {
        let Some(read) = self.manifest(tag, name)? else {
            return Ok(false);
        };
        let store = Arc::clone(&self.store);
        let path = self.manifest_path(tag, name);
        let key = path.clone();
        self.run(format!("delete the manifest of {tag}/{name}"), async move {
            store.delete(&key).await
        })?;
        self.manifests.lock().remove(&path);
        let m = &read.manifest;
        self.drop_parts(
            m.parts
                .iter()
                .enumerate()
                .filter(|(_, &id)| id != 0)
                .map(|(i, &id)| self.part_path(tag, name, id, i as u64)),
        );
        Ok(true)
    }

    /// The blobs of `tag` in the bucket, with their sizes, by name.
    pub(crate) fn list(&self, tag: &str) -> Result<Vec<(String, u64)>, BlobError> {
        let store = Arc::clone(&self.store);
        let dir = self.root.clone().join("blobs").join(PathPart::from(tag));
        let listed = self.run(format!("list the blobs of {tag}"), async move {
            store.list_with_delimiter(Some(&dir)).await
        })?;
        let mut out = Vec::with_capacity(listed.objects.len());
        for o in &listed.objects {
            let name = self.last_segment(&o.location)?;
            // Deleted since the listing: left out.
            if let Some(size) = self.size(tag, &name)? {
                out.push((name, size));
            }
        }
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_round_trip_and_bad_ones_are_refused() {
        let m = Manifest {
            size: 10,
            part_size: 4,
            parts: vec![7, 0, 9],
        };
        assert_eq!(Manifest::decode(&m.encode()), Some(m.clone()));
        let mut bad = m.encode();
        bad[0] = 2;
        assert_eq!(Manifest::decode(&bad), None);
        let short = Manifest {
            parts: vec![7, 0],
            ..m.clone()
        };
        assert_eq!(Manifest::decode(&short.encode()), None);
        assert_eq!(Manifest::decode(&m.encode()[..30]), None);
        assert_eq!(m.part_len(2), 2);
    }

    #[test]
    fn a_lost_conflict_waits_up_to_twice_as_long_each_time_within_the_cap() {
        let took = Duration::from_micros(100);
        for lost in 1..=4u32 {
            let ceiling = took * (1 << (lost - 1));
            let waits: Vec<_> = (0..200).map(|_| conflict_wait(lost, took)).collect();
            assert!(waits.iter().all(|w| *w <= ceiling), "{lost}: {waits:?}");
            // Jittered: not all alike, and some in the ceiling's upper half.
            assert!(waits.iter().any(|w| *w > ceiling / 2), "{lost}: {waits:?}");
        }
        for lost in [16, 40, u32::MAX] {
            assert!(conflict_wait(lost, Duration::from_secs(3)) <= MAX_CONFLICT_WAIT);
        }
        assert_eq!(conflict_wait(1, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn the_part_cache_drops_the_least_recently_used() {
        let mut c = PartCache {
            limit: 10,
            bytes: 0,
            parts: HashMap::new(),
            order: VecDeque::new(),
        };
        let (a, b, x) = (Path::from("a"), Path::from("b"), Path::from("x"));
        c.insert(a.clone(), Bytes::from(vec![1; 4]));
        c.insert(b.clone(), Bytes::from(vec![2; 4]));
        assert!(c.get(&a).is_some());
        c.insert(x.clone(), Bytes::from(vec![3; 4]));
        assert!(c.get(&b).is_none(), "b was the least recently used");
        assert!(c.get(&a).is_some() && c.get(&x).is_some());
        c.insert(Path::from("big"), Bytes::from(vec![0; 11]));
        assert_eq!(c.bytes, 8);
    }
}
