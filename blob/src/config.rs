//! Configuration, deserialisable so that the runtime's TOML can embed it as `[blob]`.

use std::path::PathBuf;

use serde::Deserialize;

/// What a target is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// One anonymous allocation of `capacity` bytes; volatile (lost at restart).
    Ram,
    /// A preallocated file of `capacity` bytes; durable.
    File,
    /// A bucket (and key prefix) on S3-compatible object storage, shared by every store
    /// configured with it; durable. See the crate docs, "The object tier".
    Object,
}

/// One storage target.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// RAM, file or object.
    pub kind: TargetKind,
    /// The file's path (file targets only; must be absent for the others).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Capacity in bytes; rounded down to whole pages ([`crate::PAGE_SIZE`]). Object targets
    /// take none (0): the bucket's own quota is the only limit.
    #[serde(default)]
    pub capacity: u64,
    /// The target's tier, `0.0..=1.0`, higher = faster; absent: 0.0, the slowest tier. Among
    /// targets of equal score, object targets come last.
    #[serde(default)]
    pub score: f32,
    /// Where an object target's bucket is (object targets only).
    #[serde(default)]
    pub object: Option<ObjectConfig>,
}

impl TargetConfig {
    /// A RAM target of `capacity` bytes at `score`.
    pub fn ram(capacity: u64, score: f32) -> TargetConfig {
        TargetConfig {
            kind: TargetKind::Ram,
            path: None,
            capacity,
            score,
            object: None,
        }
    }

    /// A file target of `capacity` bytes in the file at `path`, at `score`.
    pub fn file(path: impl Into<PathBuf>, capacity: u64, score: f32) -> TargetConfig {
        TargetConfig {
            kind: TargetKind::File,
            path: Some(path.into()),
            capacity,
            score,
            object: None,
        }
    }

    /// An object target on `object`'s bucket, at the slowest score (0.0).
    pub fn object(object: ObjectConfig) -> TargetConfig {
        TargetConfig {
            kind: TargetKind::Object,
            path: None,
            capacity: 0,
            score: 0.0,
            object: Some(object),
        }
    }
}

/// An object target's bucket, client settings and caches.
///
/// ```toml
/// [[targets]]
/// kind = "object"
/// [targets.object]
/// endpoint = "http://10.0.0.7:3900"
/// allow_http = true
/// region = "garage"
/// bucket = "tandem"
/// prefix = "cluster-a"
/// ```
///
/// Credentials are never read from the configuration: the access key id and secret come from
/// the environment variables it names (`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` by
/// default). A file that holds `access_key_id` or `secret_access_key` is refused.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawObjectConfig")]
pub struct ObjectConfig {
    /// The S3 endpoint; absent: AWS's, from the region.
    pub endpoint: Option<String>,
    /// Whether an `http://` endpoint is allowed (credentials and data then travel unencrypted).
    pub allow_http: bool,
    /// The region (Garage's default: `garage`).
    pub region: String,
    /// The bucket; it must exist.
    pub bucket: String,
    /// Key prefix of everything this target stores: stores that name the same bucket and prefix
    /// share their tags and blobs.
    pub prefix: String,
    /// Environment variable holding the access key id.
    pub access_key_id_env: String,
    /// Environment variable holding the secret access key.
    pub secret_access_key_env: String,
    /// Bytes per part object: a put rewrites the parts its range touches, a get fetches the
    /// parts its range touches. Fixed per blob at its first put.
    pub part_size: u64,
    /// Most part uploads or downloads one put or get keeps in flight.
    pub in_flight: usize,
    /// Bytes of parts kept in memory after a get or put reads or writes them (parts never
    /// change, so a cached part is never stale).
    pub cache_bytes: u64,
    /// Limit of one request, in milliseconds.
    pub timeout_ms: u64,
    /// Limit of connecting to the endpoint, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Retries of a failed request (with exponential back-off from 100 ms).
    pub max_retries: usize,
    /// Longest time spent retrying one request, in milliseconds.
    pub retry_timeout_ms: u64,
    /// Refuse to open on a store that ignores conditional writes (`If-Match`,
    /// `If-None-Match`): see the crate docs on what two writers of one blob then do.
    pub require_conditional_writes: bool,
}

impl ObjectConfig {
    /// Settings for `bucket` at `endpoint` (`None`: AWS), every other field at its default.
    pub fn new(endpoint: Option<&str>, bucket: &str) -> ObjectConfig {
        RawObjectConfig {
            endpoint: endpoint.map(str::to_owned),
            bucket: bucket.to_owned(),
            ..RawObjectConfig::default()
        }
        .settings()
    }
}

/// What the TOML holds: [`ObjectConfig`] plus the credential fields it refuses.
#[derive(Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawObjectConfig {
    endpoint: Option<String>,
    allow_http: bool,
    region: String,
    bucket: String,
    prefix: String,
    access_key_id_env: String,
    secret_access_key_env: String,
    part_size: u64,
    in_flight: usize,
    cache_bytes: u64,
    timeout_ms: u64,
    connect_timeout_ms: u64,
    max_retries: usize,
    retry_timeout_ms: u64,
    require_conditional_writes: bool,
    access_key_id: Option<serde::de::IgnoredAny>,
    secret_access_key: Option<serde::de::IgnoredAny>,
}

impl Default for RawObjectConfig {
    fn default() -> Self {
        RawObjectConfig {
            endpoint: None,
            allow_http: false,
            region: "us-east-1".into(),
            bucket: String::new(),
            prefix: String::new(),
            access_key_id_env: "AWS_ACCESS_KEY_ID".into(),
            secret_access_key_env: "AWS_SECRET_ACCESS_KEY".into(),
            part_size: 8 << 20,
            in_flight: 8,
            cache_bytes: 256 << 20,
            timeout_ms: 30_000,
            connect_timeout_ms: 5_000,
            max_retries: 3,
            retry_timeout_ms: 30_000,
            require_conditional_writes: false,
            access_key_id: None,
            secret_access_key: None,
        }
    }
}

impl RawObjectConfig {
    fn settings(self) -> ObjectConfig {
        ObjectConfig {
            endpoint: self.endpoint,
            allow_http: self.allow_http,
            region: self.region,
            bucket: self.bucket,
            prefix: self.prefix,
            access_key_id_env: self.access_key_id_env,
            secret_access_key_env: self.secret_access_key_env,
            part_size: self.part_size,
            in_flight: self.in_flight,
            cache_bytes: self.cache_bytes,
            timeout_ms: self.timeout_ms,
            connect_timeout_ms: self.connect_timeout_ms,
            max_retries: self.max_retries,
            retry_timeout_ms: self.retry_timeout_ms,
            require_conditional_writes: self.require_conditional_writes,
        }
    }
}

impl TryFrom<RawObjectConfig> for ObjectConfig {
    type Error = String;

    fn try_from(raw: RawObjectConfig) -> Result<Self, String> {
        if raw.access_key_id.is_some() || raw.secret_access_key.is_some() {
            return Err(format!(
                "credentials are not read from the configuration file: put them in the \
                 environment variables {} and {} (or name others with access_key_id_env and \
                 secret_access_key_env)",
                raw.access_key_id_env, raw.secret_access_key_env
            ));
        }
        if raw.bucket.is_empty() {
            return Err("an object target needs a bucket".into());
        }
        Ok(raw.settings())
    }
}

/// Limits a store enforces.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest size a blob may reach (`offset + len` of a put), in bytes.
    pub max_blob_size: u64,
    /// Most puts/deletes whose metadata one redb transaction commits (group commit).
    pub max_commit_batch: usize,
    /// Most file requests (1 MiB chunks) one put or get keeps in flight through io_uring; 0 =
    /// no io_uring, `pwrite` and `pread` only. Where the kernel refuses io_uring the store uses
    /// them anyway.
    pub io_uring_depth: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_blob_size: 1 << 40,
            max_commit_batch: 256,
            io_uring_depth: 4,
        }
    }
}

/// A store's configuration.
///
/// ```toml
/// metadata = "/var/lib/tandem/blob.redb"
/// [[targets]]
/// kind = "ram"
/// capacity = 1073741824
/// score = 1.0
/// [[targets]]
/// kind = "file"
/// path = "/var/lib/tandem/blob0.dat"
/// capacity = 17179869184
/// score = 0.5
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Path of the redb metadata file; created on first start.
    pub metadata: PathBuf,
    /// The storage targets, at least one.
    pub targets: Vec<TargetConfig>,
    /// Limits; defaults when absent.
    #[serde(default)]
    pub limits: Limits,
}

impl StoreConfig {
    /// A store in `dir` (metadata `meta.redb`): a RAM target (score 1.0) and
    /// a file target `target0.dat` (score 0.5), each of `capacity` bytes;
    /// default limits. What demos, tests and benches start from.
    pub fn ram_and_file(dir: &std::path::Path, capacity: u64) -> Self {
        StoreConfig {
            metadata: dir.join("meta.redb"),
            targets: vec![
                TargetConfig::ram(capacity, 1.0),
                TargetConfig::file(dir.join("target0.dat"), capacity, 0.5),
            ],
            limits: Limits::default(),
        }
    }
}
