//! Connecting to the bucket and running requests: the S3 client or any `object_store` backend,
//! checked at open (the bucket answers, conditional writes are probed), its requests run on the
//! tier's own I/O threads and waited for from any thread.

use std::collections::HashMap;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutPayload, RetryConfig,
    UpdateVersion,
};
use parking_lot::Mutex;

use super::block_on::wait;
use super::conflict::put_id;
use super::parts::PartCache;
use super::ObjectTier;
use crate::config::ObjectConfig;
use crate::error::BlobError;

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

impl ObjectTier {
    /// Connects to the configured S3 bucket (credentials from the environment variables the
    /// configuration names), checks that it answers, and probes conditional writes.
    pub(super) fn open(config: &ObjectConfig) -> Result<ObjectTier, BlobError> {
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
    pub(super) fn with_store(
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
            parts: Mutex::new(PartCache::new(config.cache_bytes)),
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
    pub(super) fn conditional_writes(&self) -> bool {
        self.conditional
    }

    pub(super) fn error(&self, op: impl Into<String>, source: object_store::Error) -> BlobError {
        BlobError::ObjectStore {
            target: self.label.clone(),
            op: op.into(),
            source,
        }
    }

    /// Runs `f` on the tier's I/O threads and waits for it.
    pub(super) fn run<T: Send + 'static>(
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
        let tags = self.tags_dir();
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
        let probe = self.probe_path(put_id());
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

    /// Waits for `task`, a request started on the I/O threads.
    pub(super) fn join<T>(
        &self,
        op: String,
        task: tokio::task::JoinHandle<object_store::Result<T>>,
    ) -> Result<T, BlobError> {
        match wait(task) {
            Ok(r) => r.map_err(|e| self.error(op, e)),
            Err(join) => Err(self.error(op, object_store::Error::JoinError { source: join })),
        }
    }
}
