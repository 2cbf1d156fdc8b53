//! What the share daemon's cluster tests need: a real etcd on loopback, and NIXL's library.
//!
//! [`Etcd::start`] runs one etcd member on free loopback ports with its data in a temporary
//! folder, and waits until it answers; [`Etcd::stop`] kills it (what "etcd went away" means
//! to a test) and [`Etcd::restart`] brings it back on the same ports and data. Dropping it
//! kills it and removes the folder. The etcd binary and the NIXL library come from
//! environment variables only ([`needs_or_skip`]), so that which ones a run uses is explicit:
//! the `cluster` leg of `cargo xtask test` sets them. [`node_files`] and [`serve_command`]
//! make and start a node (`tandem share serve --config`), the pattern helpers fill and check
//! the bytes a fetch moves.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::garage::{free_ports, http_get};

/// The etcd binary the tests run.
pub const ETCD_ENV: &str = "TANDEM_ETCD";
/// NIXL's `libnixl_capi.so` (what `tandem_nixl::LIBRARY_ENV` names: the daemons the tests
/// start find it through the same variable).
pub const NIXL_ENV: &str = "TANDEM_NIXL_LIBRARY";
/// Set to `1` to make a missing etcd or NIXL fail the cluster tests instead of skipping them.
pub const REQUIRE_CLUSTER_ENV: &str = "TANDEM_REQUIRE_CLUSTER";

/// The cluster's token in the tests.
pub const TOKEN: &str = "tandem-test-token";

/// How long etcd may take to answer after a start.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// What a cluster test runs with.
#[derive(Clone, Debug)]
pub struct Needs {
    /// The etcd binary.
    pub etcd: PathBuf,
    /// NIXL's C API library.
    pub nixl: PathBuf,
}

fn file_from_env(name: &str) -> Result<PathBuf, String> {
    match std::env::var_os(name).filter(|v| !v.is_empty()) {
        Some(path) if Path::new(&path).is_file() => Ok(PathBuf::from(path)),
        Some(path) => Err(format!(
            "{name}={} is not a file",
            Path::new(&path).display()
        )),
        None => Err(format!("{name} is not set")),
    }
}

fn label() -> String {
    // libtest names each test's thread after the test.
    std::thread::current()
        .name()
        .unwrap_or("cluster")
        .to_owned()
}

/// The NIXL library, or `None` after printing why the calling test is skipped; with
/// `TANDEM_REQUIRE_CLUSTER=1` a missing library fails the test instead.
pub fn nixl_or_skip() -> Option<PathBuf> {
    match file_from_env(NIXL_ENV) {
        Ok(path) => Some(path),
        Err(why) => crate::skip_unless_required(
            REQUIRE_CLUSTER_ENV,
            &label(),
            &format!("no NIXL ({why}; `pip install --no-deps nixl-cu13` has it)"),
        ),
    }
}

/// The etcd binary and the NIXL library, or `None` after printing why the calling test is
/// skipped; with `TANDEM_REQUIRE_CLUSTER=1` a missing one fails the test instead.
pub fn needs_or_skip() -> Option<Needs> {
    let etcd = match file_from_env(ETCD_ENV) {
        Ok(path) => path,
        Err(why) => {
            return crate::skip_unless_required(
                REQUIRE_CLUSTER_ENV,
                &label(),
                &format!("no etcd ({why}; Debian's etcd-server has it)"),
            )
        }
    };
    let nixl = nixl_or_skip()?;
    Some(Needs { etcd, nixl })
}

/// One etcd member on 127.0.0.1, its data in a temporary folder.
pub struct Etcd {
    binary: PathBuf,
    client_port: u16,
    peer_port: u16,
    process: Option<Child>,
    // Last: removed after the member has been killed.
    dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts a member and waits until it answers `/health`.
    pub fn start(binary: &Path) -> Result<Self, String> {
        let dir = tempfile::Builder::new()
            .prefix("tandem-etcd-")
            .tempdir()
            .map_err(|e| format!("etcd: creating its folder: {e}"))?;
        let ports = free_ports(2)?;
        let mut etcd = Self {
            binary: binary.to_path_buf(),
            client_port: ports[0],
            peer_port: ports[1],
            process: None,
            dir,
        };
        etcd.restart()?;
        Ok(etcd)
    }

    /// Its client URL, what the daemons' `[cluster] etcd` lists.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Kills it (SIGKILL) and reaps it; its data stays for [`restart`](Self::restart).
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            // Best effort: one that died already cannot be killed; wait reaps it either way.
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// Starts it (again) on its ports and data, and waits until it answers.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .map_err(|e| format!("etcd: its log: {e}"))?;
        let process = Command::new(&self.binary)
            .arg("--name=tandem-test")
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=tandem-test={peer}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| format!("etcd: its log: {e}"))?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("etcd: starting {}: {e}", self.binary.display()))?;
        self.process = Some(process);
        let started = Instant::now();
        loop {
            match http_get(self.client_port, "/health") {
                Ok((200, body)) if body.contains("true") => return Ok(()),
                _ if started.elapsed() > START_TIMEOUT => {
                    let log = std::fs::read_to_string(self.dir.path().join("etcd.log"))
                        .unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(15).collect();
                    return Err(format!(
                        "etcd did not answer within {START_TIMEOUT:?}; its log ends:\n{}",
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    ));
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A free port on `ip` (bound to port 0, then released for the daemon).
pub fn free_port(ip: Ipv4Addr) -> u16 {
    TcpListener::bind(SocketAddrV4::new(ip, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A node's files: its folder (removed on drop), its `[cluster]` config, and the socket its
/// daemon serves.
pub struct NodeFiles {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub socket: PathBuf,
}

/// Writes node `name`'s config (etcd at `etcd`, listening on `ip`, with `token`, NIXL at
/// `nixl`) into a new folder; `lease_ttl_s` is its record's lease.
pub fn node_files(
    name: &str,
    ip: Ipv4Addr,
    etcd: &str,
    token: &str,
    nixl: &Path,
    lease_ttl_s: u64,
) -> NodeFiles {
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
    NodeFiles {
        dir,
        config,
        socket,
    }
}

/// `tandem share serve` (the binary `tandem`) on `backend` for a node's files, announcing
/// itself on stdout and stopping when stdin closes. The host backend's nodes talk UCX over
/// TCP (loopback nodes of one machine, as CI's); a GPU's let UCX pick.
pub fn serve_command(tandem: &Path, files: &NodeFiles, backend: &str) -> Command {
    let mut command = Command::new(tandem);
    if backend == "host" {
        command.env("UCX_TLS", "tcp");
    }
    command
        .args(["share", "serve", "--announce", "--exit-on-stdin-eof"])
        .args(["--backend", backend])
        .arg("--socket")
        .arg(&files.socket)
        .arg("--config")
        .arg(&files.config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    command
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
