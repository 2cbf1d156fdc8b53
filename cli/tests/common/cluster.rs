//! Two share daemons as two nodes of a cluster, for the cluster tests (Rust here; the C and
//! Python suites start theirs through `tandem share serve` the same way): an etcd the test
//! starts, each node's config, token and socket in a folder of its own, each daemon on its
//! own loopback address, UCX forced to TCP.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tandem_tests::cluster::{Etcd, Needs};

use super::{start_until_ready, tandem, Cleanup};

/// The cluster's token in the tests.
pub const TOKEN: &str = "tandem-test-token";

/// One node: its folder (config, token, socket) and its daemon's pid.
pub struct Node {
    pub name: String,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    pub pid: u32,
}

/// A free port on `ip` (bound to port 0, then released for the daemon).
pub fn free_port(ip: Ipv4Addr) -> u16 {
    TcpListener::bind(SocketAddrV4::new(ip, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Writes node `name`'s config (etcd at `etcd`, listening on `ip`, with `token`) into a new
/// folder; `lease_ttl_s` is its record's lease.
pub fn node_files(
    name: &str,
    ip: Ipv4Addr,
    etcd: &str,
    token: &str,
    nixl: &Path,
    lease_ttl_s: u64,
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("tandem-node-")
        .tempdir()
        .expect("a node folder");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = dir.path().join("tandem.toml");
    let listen = SocketAddrV4::new(ip, free_port(ip));
    std::fs::write(
        &config,
        format!(
            "[cluster]\netcd = [{etcd:?}]\nnode = {name:?}\nlisten = \"{listen}\"\n\
             token_file = {token_file:?}\nlease_ttl_s = {lease_ttl_s}\nnixl_library = {nixl:?}\n"
        ),
    )
    .unwrap();
    let socket = dir.path().join("share.sock");
    (dir, config, socket)
}

/// `tandem share serve` for a node's files, UCX on TCP.
pub fn serve_command(config: &Path, socket: &Path) -> Command {
    let mut command = tandem();
    command
        .args([
            "share",
            "serve",
            "--backend",
            "host",
            "--announce",
            "--exit-on-stdin-eof",
        ])
        .arg("--socket")
        .arg(socket)
        .arg("--config")
        .arg(config)
        .env("UCX_TLS", "tcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    command
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
    let (dir, config, socket) =
        node_files(name, ip, &etcd.endpoint(), token, &needs.nixl, lease_ttl_s);
    let pid = start_until_ready(serve_command(&config, &socket), cleanup);
    Node {
        name: name.to_owned(),
        dir,
        socket,
        config,
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

/// The byte at `offset` of the tests' pattern: no period a power of two divides.
pub fn pattern(offset: usize) -> u8 {
    ((offset % 251) as u8) ^ ((offset / 251 % 253) as u8)
}

/// Fills `bytes` with the pattern (quickly: a block of it copied).
pub fn fill_pattern(bytes: &mut [u8]) {
    let block: Vec<u8> = (0..251 * 253).map(pattern).collect();
    for chunk in bytes.chunks_mut(block.len()) {
        chunk.copy_from_slice(&block[..chunk.len()]);
    }
}

/// Whether `bytes` hold the pattern, and where they first differ if not.
pub fn check_pattern(bytes: &[u8]) -> Result<(), usize> {
    let block: Vec<u8> = (0..251 * 253).map(pattern).collect();
    for (i, chunk) in bytes.chunks(block.len()).enumerate() {
        if chunk != &block[..chunk.len()] {
            let at = chunk
                .iter()
                .zip(&block)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(i * block.len() + at);
        }
    }
    Ok(())
}
