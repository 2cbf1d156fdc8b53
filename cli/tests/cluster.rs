//! Two share daemons as two nodes of a cluster (an etcd this test starts, NIXL over UCX on
//! TCP, each daemon on its own loopback address): buffers fetched by id from the other node
//! byte for byte, and every way a fetch can fail giving its typed error and leaving nothing
//! behind on either node. Skipped, saying why, without etcd and NIXL (`TANDEM_ETCD`,
//! `TANDEM_NIXL_LIBRARY`: the `cluster` leg sets them; `TANDEM_REQUIRE_CLUSTER=1` makes
//! their absence a failure).

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::cluster::{start_node, TwoNodes};
use common::{tandem, text};
use tandem_hal::{GpuDevice, HostApi};
use tandem_share::{HostMirror, Inspector, ObjectId, ShareClient, ShareError};
use tandem_tests::cluster::{check_pattern, fill_pattern, needs_or_skip};

fn client(socket: &std::path::Path) -> ShareClient<HostApi> {
    ShareClient::connect(HostApi::with_devices(1), socket).expect("connect to a node's daemon")
}

/// A sealed buffer of `bytes` holding the pattern on `client`'s daemon, exported if asked.
fn publish(client: &ShareClient<HostApi>, bytes: usize, export: bool) -> ObjectId {
    let (id, mut buffer) = client.create_buffer(0, bytes).unwrap();
    fill_pattern(&mut HostMirror::new(&mut buffer, false).unwrap());
    let stream = client.device(0).unwrap().create_stream().unwrap();
    let sealed = client.seal(buffer, &stream).unwrap();
    if export {
        client.export(id).unwrap();
    }
    // The daemon keeps a sealed buffer after its writer lets go.
    drop(sealed);
    id
}

/// How many buffers `socket`'s daemon holds, and the leases on them.
fn held(socket: &std::path::Path) -> (u32, u32) {
    let status = Inspector::connect(socket).unwrap().status().unwrap();
    (status.objects, status.leases)
}

/// Waits up to 10 s for `socket`'s daemon to hold `want` (buffers, leases).
fn wait_held(socket: &std::path::Path, want: (u32, u32)) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while held(socket) != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(held(socket), want, "{}", socket.display());
}

#[test]
fn buffers_of_every_size_arrive_byte_for_byte() {
    let Some(needs) = needs_or_skip() else { return };
    let nodes = TwoNodes::start(&needs, 10);
    let a = client(&nodes.a.socket);
    let b = client(&nodes.b.socket);
    for bytes in [1, 4096, 64 << 20, 1 << 30] {
        let id = publish(&a, bytes, true);
        let started = Instant::now();
        let (local, copy) = b.fetch(&format!("node-a/{id}"), 0).unwrap();
        let took = started.elapsed();
        assert_eq!(copy.id(), local);
        let mirror = HostMirror::new(&copy, true).unwrap();
        assert_eq!(mirror.len(), bytes);
        if let Err(at) = check_pattern(&mirror) {
            panic!("{bytes} bytes: the copy differs at byte {at}");
        }
        drop(mirror);
        println!("fetched {bytes} bytes in {took:?}");
        // The copy is an ordinary sealed local buffer; the original is unleased again.
        let info = Inspector::connect(&nodes.b.socket)
            .unwrap()
            .stat(local)
            .unwrap();
        assert!(info.sealed && !info.exported && info.len == bytes as u64);
        // The remote lease is given back as the copy is answered, not awaited.
        wait_held(&nodes.a.socket, (1, 0));
        drop(copy);
        b.delete(local).unwrap();
        a.delete(id).unwrap();
    }
    let status = Inspector::connect(&nodes.b.socket)
        .unwrap()
        .cluster_status()
        .unwrap();
    assert!(status.registered && status.fetches == 4, "{status:?}");
}

#[test]
fn refusals_are_typed_and_leave_nothing_behind() {
    let Some(needs) = needs_or_skip() else { return };
    let mut nodes = TwoNodes::start(&needs, 10);
    let a = client(&nodes.a.socket);
    let b = client(&nodes.b.socket);
    let private = publish(&a, 4096, false);
    match b.fetch(&format!("node-a/{private}"), 0) {
        Err(ShareError::NotExported(why)) => assert!(why.contains("not exported"), "{why}"),
        other => panic!("a fetch of a buffer not exported: {:?}", other.map(|r| r.0)),
    }
    assert!(matches!(
        b.fetch("node-a/12345", 0),
        Err(ShareError::Daemon {
            code: tandem_share::ErrorCode::UnknownId,
            ..
        })
    ));
    assert!(matches!(
        b.fetch("node-z/1", 0),
        Err(ShareError::UnknownNode(_))
    ));
    assert!(matches!(
        b.fetch("node-a", 0),
        Err(ShareError::BadRemoteId(_))
    ));
    // A third node with another token is refused by node-a.
    let c = start_node(
        "node-c",
        std::net::Ipv4Addr::new(127, 0, 0, 3),
        &nodes.etcd,
        "another-token",
        &needs,
        10,
        &mut nodes.cleanup,
    );
    let exported = publish(&a, 4096, true);
    match client(&c.socket).fetch(&format!("node-a/{exported}"), 0) {
        Err(ShareError::ClusterRefused(why)) => assert!(why.contains("token"), "{why}"),
        other => panic!("a fetch with a wrong token: {:?}", other.map(|r| r.0)),
    }
    // Nothing was left: node-a holds its two buffers unleased, node-b and node-c nothing.
    wait_held(&nodes.a.socket, (2, 0));
    wait_held(&nodes.b.socket, (0, 0));
    wait_held(&c.socket, (0, 0));
}

#[test]
fn a_remote_daemon_killed_mid_fetch_is_remote_gone() {
    let Some(needs) = needs_or_skip() else { return };
    let nodes = TwoNodes::start(&needs, 10);
    let a = client(&nodes.a.socket);
    let b = client(&nodes.b.socket);
    let id = publish(&a, 1 << 30, true);
    let remote = format!("node-a/{id}");
    let pid = nodes.a.pid;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill(2) of the daemon this test started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let fetched = b.fetch(&remote, 0);
    killer.join().unwrap();
    // What the killed daemon left in /dev/shm.
    tandem_process::remove_host_ipc_segments_of(pid);
    match fetched {
        Err(ShareError::RemoteGone(_) | ShareError::UnknownNode(_)) => {}
        other => panic!("a fetch from a killed node: {:?}", other.map(|r| r.0)),
    }
    wait_held(&nodes.b.socket, (0, 0));
}

#[test]
fn fetches_from_one_node_share_one_link_that_holds_nothing() {
    let Some(needs) = needs_or_skip() else { return };
    let nodes = TwoNodes::start(&needs, 10);
    let a = client(&nodes.a.socket);
    let b = client(&nodes.b.socket);
    let id = publish(&a, 64 << 10, true);
    let inspector = Inspector::connect(&nodes.a.socket).unwrap();
    let clients = || inspector.status().unwrap().clients;
    let before = clients();
    for _ in 0..5 {
        let (local, copy) = b.fetch(&format!("node-a/{id}"), 0).unwrap();
        check_pattern(&HostMirror::new(&copy, true).unwrap()).unwrap();
        drop(copy);
        b.delete(local).unwrap();
    }
    // node-b's one connection to node-a stays open between fetches, holding no lease.
    assert_eq!(clients(), before + 1);
    wait_held(&nodes.a.socket, (1, 0));
}

#[test]
fn a_node_restarted_elsewhere_is_fetched_from_where_it_is_now() {
    let Some(needs) = needs_or_skip() else { return };
    let mut nodes = TwoNodes::start(&needs, 10);
    let b = client(&nodes.b.socket);
    let old = publish(&client(&nodes.a.socket), 4096, true);
    let (local, copy) = b.fetch(&format!("node-a/{old}"), 0).unwrap();
    drop(copy);
    b.delete(local).unwrap();
    // node-a dies: the link node-b kept to it breaks, and its record stays in etcd until
    // its lease's TTL, naming an address nobody answers on.
    // SAFETY: kill(2) of the daemon this test started.
    unsafe { libc::kill(nodes.a.pid as i32, libc::SIGKILL) };
    tandem_process::remove_host_ipc_segments_of(nodes.a.pid);
    match b.fetch(&format!("node-a/{old}"), 0) {
        Err(ShareError::RemoteGone(_) | ShareError::UnknownNode(_)) => {}
        other => panic!("a fetch from a killed node: {:?}", other.map(|r| r.0)),
    }
    // node-a again, on another address with another agent.
    let again = start_node(
        "node-a",
        std::net::Ipv4Addr::new(127, 0, 0, 4),
        &nodes.etcd,
        tandem_tests::cluster::TOKEN,
        &needs,
        10,
        &mut nodes.cleanup,
    );
    let id = publish(&client(&again.socket), 64 << 10, true);
    for _ in 0..2 {
        let (local, copy) = b.fetch(&format!("node-a/{id}"), 0).unwrap();
        check_pattern(&HostMirror::new(&copy, true).unwrap()).unwrap();
        drop(copy);
        b.delete(local).unwrap();
    }
    wait_held(&again.socket, (1, 0));
    wait_held(&nodes.b.socket, (0, 0));
}

#[test]
fn a_fetching_process_killed_mid_fetch_leaks_nothing() {
    let Some(needs) = needs_or_skip() else { return };
    let nodes = TwoNodes::start(&needs, 10);
    let a = client(&nodes.a.socket);
    let id = publish(&a, 1 << 30, true);
    let mut fetcher = tandem()
        .args(["share", "fetch", &format!("node-a/{id}"), "--socket"])
        .arg(&nodes.b.socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    fetcher.kill().unwrap();
    let out = fetcher.wait_with_output().unwrap();
    assert!(
        text(&out.stdout).is_empty(),
        "it fetched before the kill: {out:?}"
    );
    // node-b frees the half-filled copy; node-a's lease goes with node-b's connection.
    wait_held(&nodes.b.socket, (0, 0));
    wait_held(&nodes.a.socket, (1, 0));
    // Freed once the READ has ended: memory freed under it would crash node-b.
    for node in [&nodes.a, &nodes.b] {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", node.pid)).unwrap();
        let state = stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.split(' ').next());
        assert_ne!(state, Some("Z"), "{} died: {stat}", node.name);
    }
}

#[test]
fn etcd_gone_is_cluster_unavailable_and_back_is_fine() {
    let Some(needs) = needs_or_skip() else { return };
    let mut nodes = TwoNodes::start(&needs, 10);
    let a = client(&nodes.a.socket);
    let b = client(&nodes.b.socket);
    let id = publish(&a, 4096, true);
    nodes.etcd.stop();
    assert!(matches!(
        b.fetch(&format!("node-a/{id}"), 0),
        Err(ShareError::ClusterUnavailable(_))
    ));
    nodes.etcd.restart().unwrap();
    let (local, _copy) = b.fetch(&format!("node-a/{id}"), 0).unwrap();
    assert!(local.0 > 0);
}

#[test]
fn a_node_whose_lease_expired_is_unknown_until_it_registers_again() {
    let Some(needs) = needs_or_skip() else { return };
    let nodes = TwoNodes::start(&needs, 2);
    let a = client(&nodes.a.socket);
    let b = client(&nodes.b.socket);
    let id = publish(&a, 4096, true);
    let remote = format!("node-a/{id}");
    // Stopped, node-a renews nothing: its record goes with its lease.
    // SAFETY: signals to the daemon this test started.
    unsafe { libc::kill(nodes.a.pid as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_secs(5));
    let fetched = b.fetch(&remote, 0).map(|r| r.0);
    // SAFETY: as above.
    unsafe { libc::kill(nodes.a.pid as i32, libc::SIGCONT) };
    assert!(
        matches!(fetched, Err(ShareError::UnknownNode(_))),
        "{fetched:?}"
    );
    // Running again, it registers anew at its next renewal.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match b.fetch(&remote, 0) {
            Ok(_) => break,
            Err(ShareError::UnknownNode(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("after node-a came back: {e}"),
        }
    }
}

#[test]
fn the_cli_lists_the_cluster_and_its_state() {
    let Some(needs) = needs_or_skip() else { return };
    let nodes = TwoNodes::start(&needs, 10);
    let a = client(&nodes.a.socket);
    let id = publish(&a, 4096, false);
    let run = |args: &[&str], socket: &std::path::Path| {
        let out = tandem()
            .arg("share")
            .args(args)
            .arg("--socket")
            .arg(socket)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    run(&["export", &id.to_string()], &nodes.a.socket);
    let listed = run(&["ls", "--cluster"], &nodes.b.socket);
    assert!(
        listed.contains("node-a")
            && listed.contains("node-b")
            && listed.contains(&format!("{id}:4096")),
        "{listed}"
    );
    let fetched = run(&["fetch", &format!("node-a/{id}")], &nodes.b.socket);
    let local: u64 = fetched.trim().parse().expect("a local id");
    let status = run(&["status"], &nodes.b.socket);
    assert!(
        status.contains("node node-b")
            && status.contains("registered")
            && status.contains("fetched 1"),
        "{status}"
    );
    let listed = run(&["ls"], &nodes.b.socket);
    assert!(listed.contains(&local.to_string()), "{listed}");
}

/// Needs neither etcd nor NIXL: a daemon with no `[cluster]` answers the cluster's
/// requests with `NoCluster`.
#[test]
fn a_daemon_without_a_cluster_says_so() {
    let client =
        ShareClient::spawn_daemon_with(HostApi::with_devices(1), &common::tandem_exe()).unwrap();
    let id = publish(&client, 16, false);
    assert!(matches!(client.export(id), Err(ShareError::NoCluster(_))));
    assert!(matches!(
        client.fetch("node-a/1", 0),
        Err(ShareError::NoCluster(_))
    ));
    assert!(matches!(
        client.cluster_status(),
        Err(ShareError::NoCluster(_))
    ));
}

/// On a GPU machine: a buffer in GPU memory on one daemon fetched into GPU memory by another
/// daemon's client (UCX picks the transport; the fetching daemon's log of UCX's protocol
/// choices, `UCX_PROTO_INFO=y`, is printed to say which), and its bytes checked. Skipped
/// without a CUDA device (`TANDEM_REQUIRE_GPU=1`: a failure), and without etcd and NIXL.
#[cfg(feature = "cuda")]
#[test]
fn a_gpu_buffer_is_fetched_into_gpu_memory_of_another_node() {
    use std::net::Ipv4Addr;
    use tandem_hal::GpuApi;
    use tandem_hal_cuda::CudaApi;
    use tandem_tests::cluster::{node_files, serve_command, Etcd, TOKEN};

    let label = "a_gpu_buffer_is_fetched_into_gpu_memory_of_another_node";
    let Some(api) = tandem_tests::gpu::api_or_skip::<CudaApi>(label) else {
        return;
    };
    let Some(needs) = needs_or_skip() else { return };
    let etcd = Etcd::start(&needs.etcd).unwrap();
    let mut cleanup = common::Cleanup::default();
    let mut sockets = Vec::new();
    let mut logs = Vec::new();
    for (name, ip) in [
        ("gpu-a", Ipv4Addr::LOCALHOST),
        ("gpu-b", Ipv4Addr::new(127, 0, 0, 2)),
    ] {
        let files = node_files(name, ip, &etcd.endpoint(), TOKEN, &needs.nixl, 10);
        let log = files.dir.path().join("daemon.log");
        let mut command = serve_command(&common::tandem_exe(), &files, "cuda");
        command
            .env("UCX_PROTO_INFO", "y")
            .env("RUST_LOG", "warn")
            .stderr(std::fs::File::create(&log).unwrap());
        common::start_until_ready(command, &mut cleanup);
        sockets.push(files.socket.clone());
        logs.push((log, files));
    }
    let a = ShareClient::connect(api, &sockets[0]).unwrap();
    let b = ShareClient::connect(CudaApi::load().unwrap(), &sockets[1]).unwrap();
    const BYTES: usize = 64 << 20;
    let (id, mut buffer) = a.create_buffer(0, BYTES).unwrap();
    fill_pattern(&mut HostMirror::new(&mut buffer, false).unwrap());
    let (_device, stream) = a.stream(0).unwrap();
    drop(a.seal(buffer, &stream).unwrap());
    a.export(id).unwrap();
    let started = Instant::now();
    let (_local, copy) = b.fetch(&format!("gpu-a/{id}"), 0).unwrap();
    let took = started.elapsed();
    assert_eq!(
        check_pattern(&HostMirror::new(&copy, true).unwrap()),
        Ok(())
    );
    println!("{label}: 64 MiB GPU to GPU in {took:?}");
    drop(copy);
    drop(cleanup);
    let log = std::fs::read_to_string(&logs[1].0).unwrap_or_default();
    let protocols: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("get") || l.contains("cuda") || l.contains("rndv"))
        .take(20)
        .collect();
    println!(
        "{label}: UCX's protocol choices on the fetching node:\n{}",
        protocols.join("\n")
    );
}
