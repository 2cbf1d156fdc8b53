//! `tandem blob` processes standing for nodes, each with its own metadata and an object target
//! on a different node of one Garage cluster (three nodes, three copies): a blob put through one
//! is read through another, byte for byte, both by the store commands and by clients of two
//! runtimes (`tandem blob run`) through the blob pool's task path. The S3 client is the one the configuration builds
//! (credentials from the environment variables it names, plain HTTP allowed explicitly, short
//! timeouts); a dead endpoint and a missing `allow_http` fail the command with the reason.
//! Without Garage (`TANDEM_GARAGE`) the tests print "skipped: no Garage"; with
//! `TANDEM_REQUIRE_S3=1` (the xtask `s3` leg) that is a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use tandem_blob::BlobPut;

use tandem_blob::BlobCaller;
use tandem_runtime::{Config, DeviceSelection};
use tandem_tests::garage::{self, Cluster};

/// A store configuration for a node: its metadata in `dir`, the object target on `endpoint`.
fn node_config(dir: &Path, cluster: &Cluster, endpoint: &str, allow_http: bool) -> PathBuf {
    let text = format!(
        "metadata = {:?}\n\
         [[targets]]\nkind = \"object\"\n\
         [targets.object]\nendpoint = {endpoint:?}\nallow_http = {allow_http}\nregion = {:?}\n\
         bucket = {:?}\nprefix = \"nodes\"\n\
         access_key_id_env = \"TANDEM_TEST_S3_KEY\"\nsecret_access_key_env = \"TANDEM_TEST_S3_SECRET\"\n\
         part_size = 1048576\ntimeout_ms = 3000\nconnect_timeout_ms = 500\nmax_retries = 1\n\
         retry_timeout_ms = 2000\n",
        dir.join("meta.redb"),
        cluster.region(),
        cluster.bucket(),
    );
    let path = dir.join("store.toml");
    std::fs::write(&path, text).expect("write the store configuration");
    path
}

/// `tandem blob args...` as a node configured by `config`, the cluster's key in its environment.
fn blob(cluster: &Cluster, config: &Path, args: &[&str]) -> Output {
    Command::new(common::tandem_exe())
        .arg("blob")
        .args(args)
        .env("RUST_LOG", "warn")
        .env("TANDEM_BLOB_CONFIG", config)
        .env("TANDEM_TEST_S3_KEY", cluster.access_key_id())
        .env("TANDEM_TEST_S3_SECRET", cluster.secret_access_key())
        .output()
        .expect("run tandem blob")
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A script that runs `tandem blob` as a node configured by `config`, with the cluster's key in
/// its environment (this test process's environment stays as it is).
fn node_script(dir: &Path, cluster: &Cluster, config: &Path) -> PathBuf {
    let path = dir.join("tandem-blob-node");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh
TANDEM_BLOB_CONFIG={config:?} TANDEM_TEST_S3_KEY={:?} \
             TANDEM_TEST_S3_SECRET={:?} RUST_LOG=warn exec {:?} blob \"$@\"\n",
            cluster.access_key_id(),
            cluster.secret_access_key(),
            common::tandem_exe()
        ),
    )
    .expect("write the node script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    path
}

fn start(nodes: usize, copies: usize) -> Option<Cluster> {
    let binary = garage::binary_or_skip()?;
    Some(Cluster::start(&binary, nodes, copies, "tandem").expect("start Garage"))
}

#[test]
fn processes_on_two_garage_nodes_share_blobs() {
    let Some(cluster) = start(3, 3) else { return };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let a_config = node_config(&a, &cluster, &cluster.endpoint(0), true);
    let b_config = node_config(&b, &cluster, &cluster.endpoint(2), true);
    let data: Vec<u8> = (0..(3 << 20) + 777u32)
        .map(|i| ((i * 7) ^ (i >> 9)) as u8)
        .collect();
    let file = dir.path().join("in.bin");
    std::fs::write(&file, &data).unwrap();
    let put = ok(
        &blob(
            &cluster,
            &a_config,
            &["put", file.to_str().unwrap(), "--tag", "t", "--name", "x"],
        ),
        "put through node 0",
    );
    println!("{put}");
    let out = dir.path().join("out.bin");
    ok(
        &blob(
            &cluster,
            &b_config,
            &["get", "x", "--tag", "t", "-o", out.to_str().unwrap()],
        ),
        "get through node 2",
    );
    assert!(
        std::fs::read(&out).unwrap() == data,
        "node 2 read other bytes"
    );
    let listed = ok(
        &blob(&cluster, &b_config, &["ls", "--tag", "t"]),
        "ls through node 2",
    );
    assert!(listed.contains('x'), "{listed}");
}

#[test]
fn a_dead_endpoint_and_plain_http_not_allowed_fail_with_the_reason() {
    let Some(mut cluster) = start(1, 1) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = node_config(dir.path(), &cluster, &cluster.endpoint(0), false);
    let refused = blob(&cluster, &config, &["ls"]);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && why.contains("allow_http"),
        "{why}"
    );

    let config = node_config(dir.path(), &cluster, &cluster.endpoint(0), true);
    ok(&blob(&cluster, &config, &["ls"]), "ls with the node up");
    cluster.kill(0);
    let began = Instant::now();
    let down = blob(&cluster, &config, &["ls"]);
    let why = String::from_utf8_lossy(&down.stderr);
    println!("endpoint down after {:?}: {why}", began.elapsed());
    assert!(
        !down.status.success() && why.contains("object target"),
        "{why}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "the timeouts bound the wait"
    );
}

#[test]
fn two_runtimes_on_two_garage_nodes_serve_each_others_blobs() {
    let Some(cluster) = start(3, 3) else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        workers: 2,
        devices: DeviceSelection::Only(vec![]),
        cpu_segment_size: 16 << 20,
        max_clients: 2,
        client_heap_bytes: 4 << 20,
        ..Config::default()
    };
    let mut clients = Vec::new();
    for (name, node) in [("a", 0), ("b", 2)] {
        let home = dir.path().join(name);
        std::fs::create_dir_all(&home).unwrap();
        let store = node_config(&home, &cluster, &cluster.endpoint(node), true);
        let script = node_script(&home, &cluster, &store);
        clients.push(common::fork_script(&script, &config));
    }
    let (a, b) = (BlobCaller::new(&clients[0]), BlobCaller::new(&clients[1]));
    let data: Vec<u8> = (0..(300 << 10) + 333u32)
        .map(|i| (i ^ (i >> 7)) as u8)
        .collect();
    let tag = a.get_or_create_tag("runtimes").expect("tag through a");
    assert_eq!(
        a.put(&BlobPut::new(tag, "shared"), &data),
        Ok(data.len() as u64)
    );
    // b's runtime learns the tag from the bucket (its own id) and reads the bytes a put.
    let their_tag = b.get_or_create_tag("runtimes").expect("tag through b");
    let mut back = vec![0u8; data.len()];
    b.get(their_tag, "shared", 0, &mut back)
        .expect("get through b");
    assert!(back == data, "runtime b read other bytes");
    assert_eq!(
        b.put(&BlobPut::new(their_tag, "shared").at(10), b"from b"),
        Ok(data.len() as u64)
    );
    let mut six = [0u8; 6];
    a.get(tag, "shared", 10, &mut six).expect("get through a");
    assert_eq!(&six, b"from b");
}
