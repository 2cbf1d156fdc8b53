//! The object tier on `object_store`'s in-memory store (which honours conditional writes):
//! placement, offsets and holes across parts, two stores sharing one bucket, concurrent
//! writers of one blob, failed puts, and configuration errors. The same tier against a real
//! S3 store (Garage) is `object_tier.rs`.

use std::path::Path;
use std::sync::Arc;
use tandem_blob::BlobPut;

use tandem_blob::object_store::memory::InMemory;
use tandem_blob::object_store::ObjectStore;
use tandem_blob::{
    BlobError, BlobStore, FillError, Limits, ObjectConfig, Score, StoreConfig, TargetConfig,
    TargetKind,
};

/// A RAM target of `ram` bytes (score 1.0) and an object target with `part_size`-byte parts.
fn config(dir: &Path, ram: u64, part_size: u64) -> StoreConfig {
    StoreConfig {
        metadata: dir.join("meta.redb"),
        targets: vec![
            TargetConfig::ram(ram, 1.0),
            TargetConfig::object(ObjectConfig {
                part_size,
                in_flight: 3,
                ..ObjectConfig::new(None, "memory")
            }),
        ],
        limits: Limits::default(),
    }
}

fn open(dir: &Path, bucket: &Arc<InMemory>, ram: u64, part_size: u64) -> BlobStore {
    let shared: Arc<dyn ObjectStore> = bucket.clone();
    BlobStore::open_with_object_store(&config(dir, ram, part_size), shared).expect("open")
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

fn get(store: &BlobStore, tag: tandem_blob::TagId, name: &str) -> Vec<u8> {
    let size = store.stat(tag, name).expect("stat").size;
    let mut out = vec![0; size as usize];
    store.get(tag, name, 0, &mut out).expect("get");
    out
}

/// Keys under `prefix` in the bucket.
fn keys(bucket: &InMemory, prefix: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        use futures::TryStreamExt;
        let p = tandem_blob::object_store::path::Path::from(prefix);
        let listed: Vec<_> = bucket.list(Some(&p)).try_collect().await.unwrap();
        listed.into_iter().map(|o| o.location.to_string()).collect()
    })
}

#[test]
fn placement_offsets_and_holes_across_parts() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = Arc::new(InMemory::new());
    let store = open(dir.path(), &bucket, 1 << 20, 1000);
    let tag = store.get_or_create_tag("t").unwrap();
    let object = 1;
    // AUTO: the RAM target; score 0.0: the bucket.
    assert_eq!(
        store.put(&BlobPut::new(tag, "fast"), b"x").unwrap().targets,
        [0]
    );
    let data = bytes(3500, 7);
    let info = store
        .put(&BlobPut::new(tag, "b").score(Score(0.0)), &data)
        .unwrap();
    assert_eq!(
        (info.size, info.durable, info.targets),
        (3500, true, vec![object])
    );
    assert_eq!(get(&store, tag, "b"), data);
    // An overwrite inside one part and across two; then past the end, leaving a hole.
    let mut want = data.clone();
    for (at, len, seed) in [(10u64, 20usize, 1u8), (990, 30, 2), (5200, 100, 3)] {
        let patch = bytes(len, seed);
        // Later puts follow the blob to the bucket whatever their score.
        store.put(&BlobPut::new(tag, "b").at(at), &patch).unwrap();
        if want.len() < at as usize + len {
            want.resize(at as usize + len, 0);
        }
        want[at as usize..at as usize + len].copy_from_slice(&patch);
    }
    assert_eq!(get(&store, tag, "b"), want);
    let mut mid = vec![0; 1200];
    store.get(tag, "b", 3400, &mut mid).unwrap();
    assert_eq!(mid, want[3400..4600]);
    let stat = store.stat(tag, "b").unwrap();
    assert_eq!((stat.size, stat.targets), (5300, vec![object]));
    assert!(matches!(
        store.get(tag, "b", 5000, &mut [0; 400]),
        Err(BlobError::OutOfRange { size: 5300, .. })
    ));
    let names: Vec<_> = store
        .list_blobs(tag)
        .unwrap()
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(names, ["b", "fast"]);
    // Replaced parts are deleted (in the background): 6 parts of 1000 bytes, one a hole.
    let parts = || keys(&bucket, "parts").len();
    for _ in 0..200 {
        if parts() == 5 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(parts(), 5, "{:?}", keys(&bucket, "parts"));
    store.delete(tag, "b").unwrap();
    assert!(matches!(
        store.stat(tag, "b"),
        Err(BlobError::NotFound { .. })
    ));
    assert!(matches!(
        store.delete(tag, "b"),
        Err(BlobError::NotFound { .. })
    ));
    let targets = store.targets();
    assert_eq!(targets[object].kind, TargetKind::Object);
    assert!(targets[object].conditional_writes);
}

#[test]
fn two_stores_on_one_bucket_see_each_others_tags_and_blobs() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let bucket = Arc::new(InMemory::new());
    let a = open(a_dir.path(), &bucket, 1 << 20, 4096);
    let b = open(b_dir.path(), &bucket, 1 << 20, 4096);
    // Different local ids for one shared name.
    a.get_or_create_tag("first").unwrap();
    let ta = a.get_or_create_tag("shared").unwrap();
    let data = bytes(10_000, 9);
    a.put(&BlobPut::new(ta, "x").score(Score(0.0)), &data)
        .unwrap();
    let tb = b.tag("shared").unwrap().expect("b sees a's tag");
    assert_ne!(ta, tb);
    assert_eq!(get(&b, tb, "x"), data);
    let tags: Vec<_> = b.list_tags().unwrap().into_iter().map(|t| t.1).collect();
    assert_eq!(tags.len(), 2, "{tags:?}");
    // A put through b, even with AUTO, goes to the blob in the bucket; a sees it.
    b.put(&BlobPut::new(tb, "x").at(100), b"from b").unwrap();
    let mut got = [0; 6];
    a.get(ta, "x", 100, &mut got).unwrap();
    assert_eq!(&got, b"from b");
    b.delete(tb, "x").unwrap();
    assert!(matches!(
        a.get(ta, "x", 0, &mut got),
        Err(BlobError::NotFound { .. })
    ));
}

#[test]
fn concurrent_writers_of_one_blob_lose_nothing_where_writes_are_conditional() {
    let bucket = Arc::new(InMemory::new());
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let stores: Vec<BlobStore> = dirs
        .iter()
        .map(|d| open(d.path(), &bucket, 1 << 20, 64))
        .collect();
    let tag = stores[0].get_or_create_tag("t").unwrap();
    stores[0]
        .put(&BlobPut::new(tag, "c").score(Score(0.0)), &[0; 64 * 12])
        .unwrap();
    // Each writer owns a disjoint set of 16-byte slots, some sharing a part with another's.
    std::thread::scope(|s| {
        for (w, store) in stores.iter().enumerate() {
            s.spawn(move || {
                let tag = store.tag("t").unwrap().unwrap();
                for slot in (w..48).step_by(3) {
                    store
                        .put(
                            &BlobPut::new(tag, "c").at(slot as u64 * 16),
                            &[w as u8 + 1; 16],
                        )
                        .unwrap();
                }
            });
        }
    });
    let all = get(&stores[1], stores[1].tag("t").unwrap().unwrap(), "c");
    for slot in 0..48 {
        assert_eq!(
            all[slot * 16..slot * 16 + 16],
            [(slot % 3) as u8 + 1; 16],
            "slot {slot}"
        );
    }
}

#[test]
fn a_failed_put_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = Arc::new(InMemory::new());
    let store = open(dir.path(), &bucket, 1 << 20, 100);
    let tag = store.get_or_create_tag("t").unwrap();
    let old = bytes(1000, 1);
    store
        .put(&BlobPut::new(tag, "f").score(Score(0.0)), &old)
        .unwrap();
    let before = keys(&bucket, "parts");
    let mut calls = 0;
    let failed = store.put_with(&BlobPut::new(tag, "f").at(50), 800, &mut |_, dst| {
        calls += 1;
        if calls == 5 {
            return Err(FillError("the source went away".into()));
        }
        dst.fill(0xee);
        Ok(())
    });
    assert!(matches!(failed, Err(BlobError::Fill(_))), "{failed:?}");
    assert_eq!(get(&store, tag, "f"), old);
    // A first put that fails leaves no blob at all.
    let failed = store.put_with(
        &BlobPut::new(tag, "new").score(Score(0.0)),
        500,
        &mut |_, _| Err(FillError("nothing to give".into())),
    );
    assert!(failed.is_err());
    assert!(matches!(
        store.stat(tag, "new"),
        Err(BlobError::NotFound { .. })
    ));
    for _ in 0..200 {
        if keys(&bucket, "parts") == before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        keys(&bucket, "parts"),
        before,
        "the failed puts' parts are deleted"
    );
}

#[test]
fn the_object_target_takes_what_the_local_targets_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = Arc::new(InMemory::new());
    let store = open(dir.path(), &bucket, 8 * 4096, 1 << 20);
    let tag = store.get_or_create_tag("t").unwrap();
    let big = bytes(64 * 1024, 3);
    let info = store.put(&BlobPut::new(tag, "big"), &big).unwrap();
    assert_eq!(info.targets, [1]);
    assert_eq!(get(&store, tag, "big"), big);
}

#[test]
fn bad_object_configurations_are_refused_with_reasons() {
    let parse = |toml: &str| {
        toml::from_str::<StoreConfig>(toml)
            .map(drop)
            .unwrap_err()
            .to_string()
    };
    let head = "metadata = \"/tmp/m.redb\"\n[[targets]]\nkind = \"object\"\n[targets.object]\nbucket = \"b\"\n";
    let secret = parse(&format!("{head}secret_access_key = \"hunter2\"\n"));
    assert!(
        secret.contains("not read from the configuration file"),
        "{secret}"
    );
    assert!(
        !secret.contains("hunter2"),
        "the secret is not echoed: {secret}"
    );
    let none = parse("metadata = \"/tmp/m.redb\"\n[[targets]]\nkind = \"object\"\n[targets.object]\nregion = \"r\"\n");
    assert!(none.contains("needs a bucket"), "{none}");

    let dir = tempfile::tempdir().unwrap();
    let bucket: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let refuse = |cfg: StoreConfig| match BlobStore::open_with_object_store(&cfg, bucket.clone()) {
        Err(BlobError::Config(why)) => why,
        other => panic!("expected a configuration error, got {:?}", other.map(drop)),
    };
    let mut cfg = config(dir.path(), 4096, 100);
    cfg.targets[1].capacity = 1 << 30;
    assert!(refuse(cfg).contains("no capacity"));
    let mut cfg = config(dir.path(), 4096, 100);
    cfg.targets[1].path = Some("/tmp/x".into());
    assert!(refuse(cfg).contains("no path"));
    let mut cfg = config(dir.path(), 4096, 100);
    cfg.targets[0].object = Some(ObjectConfig::new(None, "b"));
    assert!(refuse(cfg).contains("[object] table"));
    let mut cfg = config(dir.path(), 4096, 100);
    cfg.targets.push(cfg.targets[1].clone());
    assert!(refuse(cfg).contains("at most one object target"));

    // The S3 client: plain HTTP must be allowed explicitly, credentials must be set.
    let mut cfg = config(dir.path(), 4096, 100);
    let object = cfg.targets[1].object.as_mut().unwrap();
    object.endpoint = Some("http://127.0.0.1:1".into());
    object.access_key_id_env = "TANDEM_TEST_NO_SUCH_KEY_VARIABLE".into();
    match BlobStore::open(&cfg) {
        Err(BlobError::Config(why)) => {
            assert!(why.contains("TANDEM_TEST_NO_SUCH_KEY_VARIABLE"), "{why}")
        }
        other => panic!("{:?}", other.map(drop)),
    }
    // (With credentials set, `allow_http` is checked next: the Garage tests, which run the
    // client against a real endpoint, cover it.)
}

#[test]
fn a_store_works_and_drops_inside_an_async_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = Arc::new(InMemory::new());
    let store = open(dir.path(), &bucket, 1 << 20, 1000);
    let app = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // An async application calling the store: its calls block the task's thread, not panic,
    // and dropping the store there does not either.
    app.block_on(async move {
        let tag = store.get_or_create_tag("t").unwrap();
        store
            .put(&BlobPut::new(tag, "a").score(Score(0.0)), &bytes(2500, 4))
            .unwrap();
        assert_eq!(get(&store, tag, "a"), bytes(2500, 4));
        drop(store);
    });
}

#[test]
fn a_silent_endpoint_is_a_timeout_error_within_the_retry_limits() {
    use std::time::{Duration, Instant};
    use tandem_blob::object_store::aws::AmazonS3Builder;
    use tandem_blob::object_store::{ClientOptions, RetryConfig};
    // Accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            held.push(conn);
        }
    });
    let silent = AmazonS3Builder::new()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_region("garage")
        .with_bucket_name("b")
        .with_access_key_id("id")
        .with_secret_access_key("secret")
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(Duration::from_millis(300)),
        )
        .with_retry(RetryConfig {
            max_retries: 2,
            retry_timeout: Duration::from_secs(2),
            ..RetryConfig::default()
        })
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let began = Instant::now();
    let err = BlobStore::open_with_object_store(&config(dir.path(), 4096, 100), Arc::new(silent))
        .map(drop)
        .unwrap_err();
    let why = err.to_string();
    assert!(matches!(err, BlobError::ObjectStore { .. }), "{why}");
    assert!(
        why.contains("timed out") || why.contains("timeout"),
        "{why}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
}
