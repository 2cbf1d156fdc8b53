//! The Garage harness against a real cluster, through the S3 client the object tier uses:
//! one node stores and returns an object; three nodes with three copies serve through any
//! node and keep serving with one node down. Skipped without `TANDEM_GARAGE`.

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use tandem_tests::garage::{binary_or_skip, Cluster};
use tokio::runtime::Runtime;

/// An S3 client of `cluster`'s bucket through node `node`.
fn client(cluster: &Cluster, node: usize) -> AmazonS3 {
    AmazonS3Builder::new()
        .with_endpoint(cluster.endpoint(node))
        .with_allow_http(true)
        .with_region(cluster.region())
        .with_bucket_name(cluster.bucket())
        .with_access_key_id(cluster.access_key_id())
        .with_secret_access_key(cluster.secret_access_key())
        .build()
        .expect("S3 client")
}

fn put(runtime: &Runtime, store: &AmazonS3, key: &str, bytes: &[u8]) {
    let payload = PutPayload::from(bytes.to_vec());
    runtime
        .block_on(store.put(&Path::from(key), payload))
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

fn get(runtime: &Runtime, store: &AmazonS3, key: &str) -> Vec<u8> {
    runtime
        .block_on(async { store.get(&Path::from(key)).await?.bytes().await })
        .unwrap_or_else(|e| panic!("get {key}: {e}"))
        .to_vec()
}

/// Bytes that differ at every offset, so that a misplaced chunk shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn one_node_returns_what_was_put() {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let cluster = Cluster::start(&binary, 1, 1, "tandem").unwrap_or_else(|e| panic!("{e}"));
    let runtime = Runtime::new().unwrap();
    let store = client(&cluster, 0);
    let bytes = pattern(100_000);
    put(&runtime, &store, "one/blob", &bytes);
    assert_eq!(get(&runtime, &store, "one/blob"), bytes);
}

#[test]
fn three_nodes_serve_through_any_node_and_survive_one_down() {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let mut cluster = Cluster::start(&binary, 3, 3, "tandem").unwrap_or_else(|e| panic!("{e}"));
    let runtime = Runtime::new().unwrap();
    let (first, last) = (client(&cluster, 0), client(&cluster, 2));
    // Over Garage's 1 MiB block size, so that the object spans blocks.
    let bytes = pattern(3 << 20);
    put(&runtime, &first, "three/blob", &bytes);
    assert!(
        get(&runtime, &last, "three/blob") == bytes,
        "node 2 read other bytes"
    );

    // Two of three copies are a quorum for writes and reads.
    cluster.kill(1);
    let more = pattern(10_000);
    put(&runtime, &first, "three/while-down", &more);
    assert_eq!(get(&runtime, &last, "three/while-down"), more);
    assert!(get(&runtime, &last, "three/blob") == bytes);

    cluster.restart(1).unwrap_or_else(|e| panic!("{e}"));
    let middle = client(&cluster, 1);
    assert_eq!(get(&runtime, &middle, "three/while-down"), more);
}
