//! The object tier against what a user writes without it (one run, ratios printed): put and
//! get of 1 MiB and 64 MiB blobs through a `BlobStore` whose object target is a one-node Garage
//! on loopback, against the same bytes through `object_store`'s S3 client alone (one `put` of
//! the whole payload, one `get` of the whole object), with the same client settings.
//!
//! The tier's gets run on a second store with its part cache off, as another node reading the
//! blob for the first time would; a get that the writing store answers from its cache is
//! printed beside them. Target (docs/perf/README.md, "Targets"): the tier adds little to the
//! client's own path.
//! Needs Garage (`TANDEM_GARAGE`); without it the bench prints "skipped: no Garage".

use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_blob::BlobPut;

use tandem_blob::object_store::aws::AmazonS3Builder;
use tandem_blob::object_store::path::Path;
use tandem_blob::object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};
use tandem_blob::{BlobStore, ObjectConfig, StoreConfig, TargetConfig};
use tandem_tests::garage::{self, Cluster};

fn client(cluster: &Cluster) -> Arc<dyn ObjectStore> {
    let store = AmazonS3Builder::new()
        .with_endpoint(cluster.endpoint(0))
        .with_region(cluster.region())
        .with_bucket_name(cluster.bucket())
        .with_access_key_id(cluster.access_key_id())
        .with_secret_access_key(cluster.secret_access_key())
        .with_client_options(ClientOptions::new().with_allow_http(true))
        .build()
        .expect("an S3 client");
    Arc::new(store)
}

/// A store whose only target is the object target, with `cache_bytes` of part cache.
fn store(cluster: &Cluster, dir: &tempfile::TempDir, cache_bytes: u64) -> BlobStore {
    let config = StoreConfig {
        metadata: dir.path().join("meta.redb"),
        targets: vec![TargetConfig::object(ObjectConfig {
            cache_bytes,
            ..ObjectConfig::new(None, cluster.bucket())
        })],
        limits: Default::default(),
    };
    BlobStore::open_with_object_store(&config, client(cluster)).expect("open the store")
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort_unstable();
    runs[runs.len() / 2]
}

fn time(runs: usize, mut f: impl FnMut()) -> Duration {
    f(); // warm: connections, first-use costs
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let Some(binary) = garage::binary_or_skip() else {
        return;
    };
    let cluster = Cluster::start(&binary, 1, 1, "bench").expect("start Garage");
    let (w_dir, r_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let writer = store(&cluster, &w_dir, 256 << 20);
    let reader = store(&cluster, &r_dir, 0);
    let raw = client(&cluster);
    let io = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tag = writer.get_or_create_tag("bench").unwrap();
    let their_tag = reader.tag("bench").unwrap().unwrap();
    println!(
        "object tier vs object_store's S3 client alone, one-node Garage on loopback (medians)"
    );
    println!(
        "{:<34} {:>12} {:>12} {:>8}",
        "", "client alone", "object tier", "ratio"
    );
    for (label, bytes, runs) in [("1 MiB", 1usize << 20, 30), ("64 MiB", 64 << 20, 5)] {
        let data: Vec<u8> = (0..bytes).map(|i| ((i * 31) ^ (i >> 11)) as u8).collect();
        let payload = bytes::Bytes::from(data.clone());
        let key = Path::from(format!("raw/{label}"));
        let raw_put = time(runs, || {
            let (raw, key, p) = (Arc::clone(&raw), key.clone(), payload.clone());
            io.block_on(async move { raw.put(&key, PutPayload::from(p)).await })
                .expect("raw put");
        });
        let tier_put = time(runs, || {
            writer
                .put(&BlobPut::new(tag, label), &data)
                .expect("tier put");
        });
        let raw_get = time(runs, || {
            let (raw, key) = (Arc::clone(&raw), key.clone());
            let got = io
                .block_on(async move { raw.get(&key).await?.bytes().await })
                .expect("raw get");
            assert_eq!(got.len(), bytes);
        });
        let mut out = vec![0u8; bytes];
        let tier_get = time(runs, || {
            reader.get(their_tag, label, 0, &mut out).expect("tier get");
        });
        assert!(out == data, "the tier read other bytes");
        let cached = time(runs, || {
            writer.get(tag, label, 0, &mut out).expect("cached get");
        });
        let row = |what: &str, a: Duration, b: Duration| {
            println!(
                "{:<34} {:>9.2} ms {:>9.2} ms {:>7.2}x",
                format!("{what} {label}"),
                a.as_secs_f64() * 1e3,
                b.as_secs_f64() * 1e3,
                b.as_secs_f64() / a.as_secs_f64()
            );
        };
        row("put", raw_put, tier_put);
        row("get (reader's cache off)", raw_get, tier_get);
        row("get (writer's part cache)", raw_get, cached);
    }
}
