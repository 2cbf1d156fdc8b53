//! The object tier against a real distributed S3 store: Garage, started on loopback by
//! `tandem_tests::garage` (one node, then three with three copies). Without a Garage binary
//! (`TANDEM_GARAGE`) each test prints "skipped: no Garage"; with `TANDEM_REQUIRE_S3=1` (the
//! xtask `s3` leg) that is a failure. The same tier on an in-memory store is
//! `object_memory.rs`; the S3 client as the configuration builds it (credentials from the
//! environment, timeouts) runs in `tandem blob` processes in the CLI's `blob_object.rs`.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_blob::BlobPut;

use tandem_blob::object_store::aws::AmazonS3Builder;
use tandem_blob::object_store::{ClientOptions, ObjectStore, RetryConfig};
use tandem_blob::{
    BlobError, BlobStore, FillError, ObjectConfig, Score, StoreConfig, TargetConfig,
};
use tandem_tests::garage::{self, Cluster};

/// An S3 client of node `node`, with the cluster's key (or `secret`). One retry: a killed
/// endpoint is an error within seconds. The request limit is above the up to 10 s that
/// Garage's surviving nodes may wait on a killed peer before they notice it.
fn client(cluster: &Cluster, node: usize, bucket: &str, secret: &str) -> Arc<dyn ObjectStore> {
    let store = AmazonS3Builder::new()
        .with_endpoint(cluster.endpoint(node))
        .with_allow_http(true)
        .with_region(cluster.region())
        .with_bucket_name(bucket)
        .with_access_key_id(cluster.access_key_id())
        .with_secret_access_key(secret)
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(Duration::from_secs(15))
                .with_connect_timeout(Duration::from_millis(500)),
        )
        .with_retry(RetryConfig {
            max_retries: 1,
            retry_timeout: Duration::from_secs(2),
            ..RetryConfig::default()
        })
        .build()
        .expect("an S3 client");
    Arc::new(store)
}

/// A store with a RAM target and the object target on node `node` (`part_size`-byte parts).
fn store_on(cluster: &Cluster, node: usize, dir: &tempfile::TempDir, part_size: u64) -> BlobStore {
    let object = client(cluster, node, cluster.bucket(), cluster.secret_access_key());
    BlobStore::open_with_object_store(&config(dir, part_size, false), object).expect("open")
}

fn config(
    dir: &tempfile::TempDir,
    part_size: u64,
    require_conditional_writes: bool,
) -> StoreConfig {
    let mut config = StoreConfig::ram_and_file(dir.path(), 16 << 20);
    config.targets.push(TargetConfig::object(ObjectConfig {
        part_size,
        require_conditional_writes,
        ..ObjectConfig::new(None, "unused: the client is given")
    }));
    config
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed ^ (i >> 12) as u8)
        .collect()
}

fn read_all(store: &BlobStore, tag: &str, name: &str) -> Result<Vec<u8>, BlobError> {
    let tag = store.tag(tag)?.expect("the tag exists");
    let size = store.stat(tag, name)?.size;
    let mut out = vec![0; size as usize];
    store.get(tag, name, 0, &mut out)?;
    Ok(out)
}

/// [`read_all`] after a node restarted or died. A Garage node may answer "Not connected" for a
/// restarted peer well after every node's health said the cluster is whole (until its own next
/// reconnection attempt), so with another node down it lacks a quorum for a while: quorum
/// errors are retried for up to 40 s, and the wait is printed.
fn read_quorum(store: &BlobStore, tag: &str, name: &str) -> Vec<u8> {
    let began = Instant::now();
    loop {
        match read_all(store, tag, name) {
            Ok(bytes) => {
                println!("read with a quorum after {:?}", began.elapsed());
                return bytes;
            }
            Err(e)
                if began.elapsed() < Duration::from_secs(30)
                    && e.to_string().contains("quorum") =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn start(nodes: usize, copies: usize) -> Option<Cluster> {
    let binary = garage::binary_or_skip()?;
    Some(Cluster::start(&binary, nodes, copies, "tandem").expect("start Garage"))
}

#[test]
fn one_node_holds_blobs_across_parts_and_says_it_ignores_conditional_writes() {
    let Some(cluster) = start(1, 1) else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = store_on(&cluster, 0, &dir, 256 << 10);
    let tag = store.get_or_create_tag("t").unwrap();
    let data = bytes((1 << 20) + 12345, 1);
    let info = store
        .put(&BlobPut::new(tag, "b").score(Score(0.0)), &data)
        .unwrap();
    assert_eq!((info.size, info.targets), (data.len() as u64, vec![2]));
    let patch = bytes(300 << 10, 2);
    store
        .put(&BlobPut::new(tag, "b").at(200 << 10), &patch)
        .unwrap();
    let mut want = data.clone();
    want[200 << 10..500 << 10].copy_from_slice(&patch);
    assert_eq!(read_all(&store, "t", "b").unwrap(), want);
    // Garage 2.5 takes If-Match / If-None-Match writes as plain ones: the probe says so.
    assert!(!store.targets()[2].conditional_writes);
    let strict = client(&cluster, 0, cluster.bucket(), cluster.secret_access_key());
    let dir2 = tempfile::tempdir().unwrap();
    match BlobStore::open_with_object_store(&config(&dir2, 1 << 20, true), strict) {
        Err(BlobError::Config(why)) => assert!(why.contains("ignores conditional writes"), "{why}"),
        other => panic!(
            "require_conditional_writes on Garage: {:?}",
            other.map(drop)
        ),
    }
}

#[test]
fn two_stores_on_two_nodes_read_each_others_blobs_byte_for_byte() {
    let Some(cluster) = start(3, 3) else { return };
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = store_on(&cluster, 0, &a_dir, 1 << 20);
    let b = store_on(&cluster, 2, &b_dir, 1 << 20);
    let ta = a.get_or_create_tag("shared").unwrap();
    let data = bytes((5 << 20) + 17, 3);
    a.put(&BlobPut::new(ta, "x").score(Score(0.0)), &data)
        .unwrap();
    assert_eq!(read_all(&b, "shared", "x").unwrap(), data);
    // b's put (AUTO: the blob is in the bucket, so it stays there) is what a reads next.
    let tb = b.tag("shared").unwrap().unwrap();
    b.put(&BlobPut::new(tb, "x").at(4 << 20), b"through node 2")
        .unwrap();
    let mut got = [0u8; 14];
    a.get(ta, "x", 4 << 20, &mut got).unwrap();
    assert_eq!(&got, b"through node 2");
    let names: Vec<_> = a
        .list_blobs(ta)
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["x"]);
    b.delete(tb, "x").unwrap();
    assert!(matches!(a.stat(ta, "x"), Err(BlobError::NotFound { .. })));
}

/// Puts a new version of blob `v` through `store` while the test kills `victim` when the
/// put's fifth part is being composed; returns how the put ended.
fn put_while_killing(
    cluster: &mut Cluster,
    store: &BlobStore,
    victim: usize,
    new: &[u8],
) -> Result<(), BlobError> {
    let tag = store.tag("t").unwrap().unwrap();
    let (at_part, go_on) = (mpsc::channel(), mpsc::channel::<()>());
    let (reached, killed) = (at_part.0, go_on.1);
    let part = 512 << 10;
    std::thread::scope(|s| {
        let put = s.spawn(move || {
            store
                .put_with(&BlobPut::new(tag, "v"), new.len() as u64, &mut |at, dst| {
                    if at == 4 * part {
                        reached
                            .send(())
                            .map_err(|_| FillError("test gone".into()))?;
                        killed.recv().map_err(|_| FillError("test gone".into()))?;
                    }
                    dst.copy_from_slice(&new[at as usize..at as usize + dst.len()]);
                    Ok(())
                })
                .map(drop)
        });
        at_part.1.recv().expect("the put reached its fifth part");
        cluster.kill(victim);
        go_on.0.send(()).expect("the put waits");
        put.join().expect("the put thread")
    })
}

#[test]
fn a_node_killed_mid_put_leaves_the_old_blob_or_the_new_never_a_mix() {
    let Some(mut cluster) = start(3, 3) else {
        return;
    };
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = store_on(&cluster, 0, &a_dir, 512 << 10);
    let b = store_on(&cluster, 1, &b_dir, 512 << 10);
    let tag = a.get_or_create_tag("t").unwrap();
    let (v1, v2, v3) = (bytes(4 << 20, 1), bytes(4 << 20, 2), bytes(4 << 20, 3));
    a.put(&BlobPut::new(tag, "v").score(Score(0.0)), &v1)
        .unwrap();

    // The node the writer talks to dies: the put fails, and every node left sees v1.
    let put = put_while_killing(&mut cluster, &a, 0, &v2);
    let seen = read_all(&b, "t", "v").unwrap();
    match &put {
        Err(e) => {
            assert!(e.to_string().contains("object target"), "{e}");
            assert!(seen == v1, "a failed put left a mix or the new version");
        }
        // The put finished its uploads before the node went: all of v2.
        Ok(()) => assert!(seen == v2, "an acknowledged put is not what is read"),
    }
    println!(
        "writer's node killed mid-put: {}",
        if put.is_ok() {
            "put done"
        } else {
            "put failed, old blob kept"
        }
    );
    cluster.restart(0).expect("restart node 0");

    // Another node dies: two copies of three still answer, the put goes through whole.
    let before = read_quorum(&b, "t", "v");
    let put = put_while_killing(&mut cluster, &a, 2, &v3);
    let seen = read_quorum(&b, "t", "v");
    match put {
        Ok(()) => {
            println!("another node killed mid-put: put done, new blob read");
            assert!(seen == v3, "the acknowledged put is not what is read");
        }
        Err(e) => {
            println!("put with one node of three down failed: {e}");
            assert!(seen == before, "a failed put left a mix");
        }
    }
    cluster.restart(2).expect("restart node 2");
    assert_eq!(read_quorum(&a, "t", "v"), seen, "both stores agree");
}

#[test]
fn concurrent_writers_on_two_nodes_never_mix_versions() {
    let Some(cluster) = start(3, 3) else { return };
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let stores: Vec<BlobStore> = (0..2)
        .map(|i| store_on(&cluster, i, &dirs[i], 64 << 10))
        .collect();
    let tag = stores[0].get_or_create_tag("t").unwrap();
    stores[0]
        .put(&BlobPut::new(tag, "c").score(Score(0.0)), &[0; 256 << 10])
        .unwrap();
    let rounds = 12;
    std::thread::scope(|s| {
        for (w, store) in stores.iter().enumerate() {
            s.spawn(move || {
                let tag = store.tag("t").unwrap().unwrap();
                for round in 0..rounds {
                    let fill = (w * rounds + round + 1) as u8;
                    store
                        .put(&BlobPut::new(tag, "c"), &[fill; 256 << 10])
                        .unwrap();
                }
            });
        }
        // Meanwhile a reader on the third node sees whole versions only.
        let reader = tempfile::tempdir().unwrap();
        let reader = store_on(&cluster, 2, &reader, 64 << 10);
        for _ in 0..20 {
            match read_all(&reader, "t", "c") {
                Ok(seen) => assert!(
                    seen.iter().all(|&b| b == seen[0]),
                    "a read mixed two versions"
                ),
                // A get can find a part replaced under it and give up: not a mix.
                Err(BlobError::ObjectConflict { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
    });
    let last = read_all(&stores[0], "t", "c").unwrap();
    assert!(last.iter().all(|&b| b == last[0]));
    assert!(
        [rounds as u8, 2 * rounds as u8].contains(&last[0]),
        "the last version of one writer wins"
    );
}

#[test]
fn wrong_credentials_a_missing_bucket_and_a_dead_endpoint_are_clear_errors() {
    let Some(mut cluster) = start(1, 1) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let open = |object: Arc<dyn ObjectStore>| {
        BlobStore::open_with_object_store(&config(&dir, 1 << 20, false), object).map(drop)
    };
    let wrong = open(client(&cluster, 0, cluster.bucket(), "not-the-secret")).unwrap_err();
    assert!(matches!(wrong, BlobError::ObjectStore { .. }), "{wrong}");
    println!("wrong secret: {wrong}");
    let missing = open(client(
        &cluster,
        0,
        "no-such-bucket",
        cluster.secret_access_key(),
    ));
    let missing = missing.unwrap_err().to_string();
    assert!(
        missing.contains("does not exist") || missing.contains("no-such-bucket"),
        "{missing}"
    );
    println!("missing bucket: {missing}");

    let store = store_on(&cluster, 0, &dir, 1 << 20);
    let tag = store.get_or_create_tag("t").unwrap();
    store
        .put(&BlobPut::new(tag, "in the bucket").score(Score(0.0)), b"1")
        .unwrap();
    store.put(&BlobPut::new(tag, "local"), b"2").unwrap();
    cluster.kill(0);
    let began = Instant::now();
    let down = store
        .put(&BlobPut::new(tag, "in the bucket"), b"3")
        .unwrap_err();
    println!("endpoint down: {down} (after {:?})", began.elapsed());
    assert!(down.to_string().contains("object target"), "{down}");
    assert!(began.elapsed() < Duration::from_secs(30));
    // The store lives on: its local blobs still answer, and the bucket again once it is back.
    let mut one = [0u8; 1];
    store.get(tag, "local", 0, &mut one).unwrap();
    assert_eq!(one, *b"2");
    cluster.restart(0).expect("restart");
    store.get(tag, "in the bucket", 0, &mut one).unwrap();
    assert_eq!(one, *b"1");
}
