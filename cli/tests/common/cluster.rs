//! Two share daemons as two nodes of a cluster, for the cluster tests (Rust here; the C and
//! Python suites start theirs through `tandem share serve` the same way): an etcd the test
//! starts, each node's config, token and socket in a folder of its own, each daemon on its
//! own loopback address, UCX forced to TCP.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use tandem_tests::cluster::{node_files, serve_command, Etcd, Needs, NodeFiles, TOKEN};

use super::{start_until_ready, tandem_exe, Cleanup};

/// One node: its folder (config, token, socket) and its daemon's pid.
pub struct Node {
    pub name: String,
    pub files: NodeFiles,
    pub socket: PathBuf,
    pub pid: u32,
}

/// Starts node `name` on `ip` against `etcd`, with `token`, until it serves.
pub fn start_node(
    name: &str,
    ip: Ipv4Addr,
    etcd: &Etcd,
    token: &str,
    needs: &Needs,
    lease_ttl_s: u64,
    cleanup: &mut Cleanup,
) -> Node {
    let files = node_files(name, ip, &etcd.endpoint(), token, &needs.nixl, lease_ttl_s);
    let mut command = serve_command(&tandem_exe(), &files, "host");
    command.env("RUST_LOG", "warn");
    let pid = start_until_ready(command, cleanup);
    Node {
        name: name.to_owned(),
        socket: files.socket.clone(),
        files,
        pid,
    }
}

/// An etcd and two nodes, `node-a` on 127.0.0.1 and `node-b` on 127.0.0.2, one token.
pub struct TwoNodes {
    pub a: Node,
    pub b: Node,
    // Before the etcd: the daemons stop (leave etcd) first.
    pub cleanup: Cleanup,
    pub etcd: Etcd,
}

impl TwoNodes {
    pub fn start(needs: &Needs, lease_ttl_s: u64) -> Self {
        let etcd = Etcd::start(&needs.etcd).expect("etcd");
        let mut cleanup = Cleanup::default();
        let a = start_node(
            "node-a",
            Ipv4Addr::new(127, 0, 0, 1),
            &etcd,
            TOKEN,
            needs,
            lease_ttl_s,
            &mut cleanup,
        );
        let b = start_node(
            "node-b",
            Ipv4Addr::new(127, 0, 0, 2),
            &etcd,
            TOKEN,
            needs,
            lease_ttl_s,
            &mut cleanup,
        );
        Self {
            a,
            b,
            cleanup,
            etcd,
        }
    }
}
