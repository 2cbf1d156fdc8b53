//! A real Garage S3 cluster on loopback, for the tests of the blob store's object tier.
//!
//! [`Cluster::start`] writes one config per node into a temporary folder, starts the nodes,
//! connects them, applies a layout with the asked replication, and creates a bucket and a
//! key allowed on it; every step polls against a deadline and a failure carries the tail of
//! the node logs (kept in the folder as `node<N>.log`). Dropping the cluster kills the nodes
//! and removes the folder. The binary comes from `TANDEM_GARAGE` ([`binary_or_skip`]).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ipc::to_hex;

/// The Garage binary the tests run (the xtask `s3` leg sets it).
pub const GARAGE_ENV: &str = "TANDEM_GARAGE";
/// Set to `1` to make a missing Garage fail the S3 tests instead of skipping them.
pub const REQUIRE_S3_ENV: &str = "TANDEM_REQUIRE_S3";

/// The `s3_region` of every node; S3 clients must sign with it.
const REGION: &str = "garage";
/// The name of the harness's access key in Garage.
const KEY_NAME: &str = "tandem-tests";
/// Each node's storage capacity in the layout: only its ratio matters to Garage, and the
/// tests store far less.
const NODE_CAPACITY: &str = "1G";
/// The longest any startup step may take; a healthy 3-node start takes seconds.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest one `garage` CLI command may take (its own RPC timeouts are minutes long).
const CLI_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a waiting step polls.
const POLL: Duration = Duration::from_millis(100);
/// How much of each node log an error quotes.
const LOG_TAIL_LINES: usize = 15;

/// The Garage binary named by `TANDEM_GARAGE`, if set; nothing else is searched, so that
/// which Garage a test run uses is always explicit.
pub fn binary() -> Option<PathBuf> {
    std::env::var_os(GARAGE_ENV)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

/// [`binary`], or `None` after printing why the calling test is skipped. With
/// `TANDEM_REQUIRE_S3=1` a missing binary panics instead, failing the test.
pub fn binary_or_skip() -> Option<PathBuf> {
    if let Some(binary) = binary() {
        return Some(binary);
    }
    // libtest names each test's thread after the test.
    let thread = std::thread::current();
    let label = thread.name().unwrap_or("garage");
    crate::skip_unless_required(
        REQUIRE_S3_ENV,
        label,
        &format!("no Garage (set {GARAGE_ENV})"),
    )
}

/// One node: its files and ports, and its process while it runs.
struct Node {
    home: PathBuf,
    config: PathBuf,
    log: PathBuf,
    rpc_port: u16,
    s3_port: u16,
    admin_port: u16,
    /// The RPC identity, `<hex id>@127.0.0.1:<port>`, known once the node has started.
    id: String,
    process: Option<Child>,
}

/// A running Garage cluster on 127.0.0.1, with one bucket and one key allowed on it. Dropping
/// it kills every node (SIGKILL), reaps it, and removes its folder.
pub struct Cluster {
    binary: PathBuf,
    nodes: Vec<Node>,
    replication: usize,
    rpc_secret: String,
    bucket: String,
    access_key_id: String,
    secret_access_key: String,
    // Last, so that it is removed after `Drop::drop` has stopped the nodes writing into it.
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts `nodes` nodes that keep `replication` copies of everything, one zone per node,
    /// creates `bucket` and a key that may read, write and own it, and returns once every
    /// node reports the cluster fully operational and its S3 API answers. An error says which
    /// step failed, with the tail of the node logs.
    pub fn start(
        binary: &Path,
        nodes: usize,
        replication: usize,
        bucket: &str,
    ) -> Result<Cluster, String> {
        if nodes == 0 || replication == 0 || replication > nodes {
            return Err(format!(
                "garage: cannot keep {replication} copies on {nodes} nodes"
            ));
        }
        let began = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("tandem-garage-")
            .tempdir()
            .map_err(|e| format!("garage: creating the cluster folder: {e}"))?;
        let ports = free_ports(3 * nodes)?;
        let node_list = ports
            .chunks_exact(3)
            .enumerate()
            .map(|(index, ports)| Node {
                home: dir.path().join(format!("node{index}")),
                config: dir.path().join(format!("node{index}.toml")),
                log: dir.path().join(format!("node{index}.log")),
                rpc_port: ports[0],
                s3_port: ports[1],
                admin_port: ports[2],
                id: String::new(),
                process: None,
            })
            .collect();
        let mut cluster = Cluster {
            binary: binary.to_path_buf(),
            nodes: node_list,
            replication,
            rpc_secret: random_hex(32)?,
            bucket: bucket.to_owned(),
            access_key_id: format!("GK{}", random_hex(12)?),
            secret_access_key: random_hex(32)?,
            dir,
        };
        for node in 0..nodes {
            cluster.write_config(node)?;
            cluster.spawn(node)?;
        }
        cluster.form()?;
        for node in 0..nodes {
            cluster.wait_healthy(node)?;
        }
        let key = cluster.access_key_id.clone();
        let secret = cluster.secret_access_key.clone();
        cluster.cli(&["key", "import", "--yes", "-n", KEY_NAME, &key, &secret])?;
        cluster.create_bucket(bucket)?;
        for node in 0..nodes {
            cluster.wait_s3(node)?;
        }
        println!(
            "garage: {nodes} node(s) with {replication} copies up in {:.1} s ({})",
            began.elapsed().as_secs_f64(),
            cluster.dir.path().display()
        );
        Ok(cluster)
    }

    /// The S3 endpoint of node `node`, `http://127.0.0.1:PORT` (known even while the node is
    /// killed). Panics if there is no such node.
    pub fn endpoint(&self, node: usize) -> String {
        format!("http://127.0.0.1:{}", self.nodes[node].s3_port)
    }

    /// The S3 region every node expects in signatures.
    pub fn region(&self) -> &str {
        REGION
    }

    /// The access key allowed on the cluster's buckets.
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// The secret of [`Cluster::access_key_id`].
    pub fn secret_access_key(&self) -> &str {
        &self.secret_access_key
    }

    /// The bucket created by [`Cluster::start`].
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// How many nodes the cluster has, running or killed.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Kills node `node` with SIGKILL and reaps it; nothing happens if it is not running.
    /// Panics if there is no such node.
    ///
    /// The survivors notice only when they next write to its connection (their status
    /// exchange, every 10 s): until then a request whose quorum read picks the dead node
    /// waits for it, so the first S3 request after a kill may take up to 10 s (7.5 s seen).
    pub fn kill(&mut self, node: usize) {
        if let Some(mut process) = self.nodes[node].process.take() {
            // Best effort: a node that already died cannot be killed, and wait reaps it
            // either way.
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// Starts a killed node `node` again on its folders and ports, and waits until every
    /// running node sees enough of the cluster to serve requests (all of it when every node
    /// runs) and this one's S3 API answers. A running node is left alone. Panics if there is no
    /// such node.
    pub fn restart(&mut self, node: usize) -> Result<(), String> {
        if self.nodes[node].process.is_some() {
            return Ok(());
        }
        self.spawn(node)?;
        // Every running node, not only this one: each must see the cluster it needs.
        for index in 0..self.nodes.len() {
            if self.nodes[index].process.is_some() {
                self.wait_healthy(index)?;
            }
        }
        self.wait_s3(node)
    }

    /// Creates bucket `name` and allows the cluster's key to read, write and own it.
    pub fn create_bucket(&self, name: &str) -> Result<(), String> {
        self.cli(&["bucket", "create", name])?;
        let key = self.access_key_id.as_str();
        let allow = ["--read", "--write", "--owner"];
        let args = [&["bucket", "allow"][..], &allow, &["--key", key, name]].concat();
        self.cli(&args).map(drop)
    }

    /// Writes node `index`'s config: its folders and ports, and as bootstrap peers the other
    /// nodes whose RPC identity is known.
    fn write_config(&self, index: usize) -> Result<(), String> {
        let node = &self.nodes[index];
        let peers: Vec<String> = self
            .nodes
            .iter()
            .filter(|peer| !peer.id.is_empty() && peer.id != node.id)
            .map(|peer| format!("{:?}", peer.id))
            .collect();
        // Debug quoting is TOML's basic-string quoting for any path a temporary folder has.
        let path = |name: &str| format!("{:?}", node.home.join(name).display().to_string());
        let text = format!(
            r#"metadata_dir = {meta}
data_dir = {data}
db_engine = "lmdb"
replication_factor = {replication}
rpc_bind_addr = "127.0.0.1:{rpc_port}"
rpc_public_addr = "127.0.0.1:{rpc_port}"
rpc_secret = "{rpc_secret}"
bootstrap_peers = [{peers}]

[s3_api]
s3_region = "{REGION}"
api_bind_addr = "127.0.0.1:{s3_port}"

[admin]
api_bind_addr = "127.0.0.1:{admin_port}"
"#,
            meta = path("meta"),
            data = path("data"),
            replication = self.replication,
            rpc_port = node.rpc_port,
            rpc_secret = self.rpc_secret,
            peers = peers.join(", "),
            s3_port = node.s3_port,
            admin_port = node.admin_port,
        );
        std::fs::write(&node.config, text)
            .map_err(|e| format!("garage: writing {}: {e}", node.config.display()))
    }

    /// Starts node `node`'s server, its output appended to its log.
    fn spawn(&mut self, index: usize) -> Result<(), String> {
        let node = &self.nodes[index];
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .map_err(|e| format!("garage: opening {}: {e}", node.log.display()))?;
        let stderr = log
            .try_clone()
            .map_err(|e| format!("garage: opening {}: {e}", node.log.display()))?;
        let process = self
            .command(&node.config)
            .arg("server")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("garage: starting {}: {e}", self.binary.display()))?;
        self.nodes[index].process = Some(process);
        Ok(())
    }

    /// `garage -c <config>`, with Garage's own log defaults: `RUST_LOG` is meant for Tandem
    /// and could silence the node logs that errors quote.
    fn command(&self, config: &Path) -> Command {
        let mut command = Command::new(&self.binary);
        command.env_remove("RUST_LOG").arg("-c").arg(config);
        command
    }

    /// Learns every node's RPC identity, connects node 0 to the others (gossip does the
    /// rest), gives each node a zone and capacity, and applies that first layout.
    fn form(&mut self) -> Result<(), String> {
        for index in 0..self.nodes.len() {
            // The node writes its key on startup; until then `node id` fails.
            let id = self.poll(&format!("node {index}'s RPC identity"), |cluster| {
                cluster.cli_on(index, &["node", "id", "-q"])
            })?;
            self.nodes[index].id = id.trim().to_owned();
        }
        // A node saves the peers it knows only once a minute: one restarted sooner would know
        // none and wait for the others' next retry (every 30 s). Its config names them.
        for index in 0..self.nodes.len() {
            self.write_config(index)?;
        }
        for index in 1..self.nodes.len() {
            let id = self.nodes[index].id.clone();
            self.poll(&format!("node 0 connecting to node {index}"), |cluster| {
                cluster.cli_on(0, &["node", "connect", &id])
            })?;
        }
        for (index, node) in self.nodes.iter().enumerate() {
            // The hex id, without `@address`, names the node in the layout.
            let hex = node.id.split('@').next().unwrap_or_default();
            let zone = format!("z{index}");
            self.cli(&["layout", "assign", "-z", &zone, "-c", NODE_CAPACITY, hex])?;
        }
        self.cli(&["layout", "apply", "--version", "1"]).map(drop)
    }

    /// Waits until node `index`'s admin API says the cluster can serve requests: fully
    /// operational when every node runs, else at least quorate.
    fn wait_healthy(&mut self, index: usize) -> Result<(), String> {
        let port = self.nodes[index].admin_port;
        let full = self.nodes.iter().all(|node| node.process.is_some());
        self.poll(&format!("node {index}'s health"), |_| {
            let (status, body) = http_get(port, "/health")?;
            let ready = status == 200 && (!full || body.contains("fully operational"));
            if ready {
                Ok(())
            } else {
                Err(format!("/health answered {status}: {}", body.trim()))
            }
        })
    }

    /// Waits until node `index`'s S3 API answers an HTTP request (with any status: an
    /// unsigned request is refused, but only by a server that is up).
    fn wait_s3(&mut self, index: usize) -> Result<(), String> {
        let port = self.nodes[index].s3_port;
        let path = format!("/{}", self.bucket);
        self.poll(&format!("node {index}'s S3 API"), |_| {
            http_get(port, &path).map(drop)
        })
    }

    /// Calls `attempt` until it succeeds, a node dies, or [`STEP_TIMEOUT`] passes; the errors
    /// say what was awaited, what the last attempt said, and what the nodes logged.
    fn poll<T>(
        &mut self,
        what: &str,
        mut attempt: impl FnMut(&Self) -> Result<T, String>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let last = match attempt(self) {
                Ok(value) => return Ok(value),
                Err(why) => why,
            };
            if let Some(died) = self.reap_dead() {
                return Err(self.failure(&format!("waiting for {what}: {died}; last: {last}")));
            }
            if Instant::now() >= deadline {
                return Err(self.failure(&format!(
                    "waiting for {what}: not done after {STEP_TIMEOUT:?}; last: {last}"
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Reaps a node that exited on its own, and says which and how.
    fn reap_dead(&mut self) -> Option<String> {
        for (index, node) in self.nodes.iter_mut().enumerate() {
            let Some(process) = node.process.as_mut() else {
                continue;
            };
            match process.try_wait() {
                Ok(Some(status)) => {
                    node.process = None;
                    return Some(format!("node {index} exited ({status})"));
                }
                Ok(None) => {}
                Err(e) => return Some(format!("node {index}: cannot wait on it: {e}")),
            }
        }
        None
    }

    /// `garage <args>` against the first running node; its stdout.
    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let index = self
            .nodes
            .iter()
            .position(|node| node.process.is_some())
            .ok_or_else(|| format!("garage {}: no node is running", args.join(" ")))?;
        self.cli_on(index, args).map_err(|why| self.failure(&why))
    }

    /// `garage <args>` with node `index`'s config, killed after [`CLI_TIMEOUT`]; its stdout,
    /// or an error with its status and output.
    fn cli_on(&self, index: usize, args: &[&str]) -> Result<String, String> {
        let shown = format!("garage {}", args.join(" "));
        let mut child = self
            .command(&self.nodes[index].config)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{shown}: cannot start {}: {e}", self.binary.display()))?;
        let deadline = Instant::now() + CLI_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL / 10),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("{shown}: no answer after {CLI_TIMEOUT:?}"));
                }
                Err(e) => return Err(format!("{shown}: cannot wait on it: {e}")),
            }
        };
        // Read after the exit: the CLI's answers are far smaller than a pipe's buffer.
        let mut stdout = String::new();
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stdout.take() {
            let _ = pipe.read_to_string(&mut stdout);
        }
        if let Some(mut pipe) = child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        if status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "{shown} failed ({status}): {}",
                format!("{stdout}{stderr}").trim()
            ))
        }
    }

    /// `garage: <what>`, followed by the tail of every node log.
    fn failure(&self, what: &str) -> String {
        let mut text = format!("garage: {what}");
        for (index, node) in self.nodes.iter().enumerate() {
            let log = std::fs::read_to_string(&node.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            text.push_str(&format!(
                "\n--- node {index} log ({}), last {} lines:\n{}",
                node.log.display(),
                tail.len(),
                tail.join("\n")
            ));
        }
        text
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in 0..self.nodes.len() {
            self.kill(node);
        }
    }
}

/// `count` distinct ports that were free a moment ago: each bound to port 0 by the kernel,
/// all held at once so that none repeats, then released for a server (Garage, etcd) to bind.
pub(crate) fn free_ports(count: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("finding free ports: {e}"))?;
    listeners
        .iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("finding free ports: {e}"))
}

/// `bytes` random bytes from the kernel, in hex: the RPC secret and the S3 key.
fn random_hex(bytes: usize) -> Result<String, String> {
    let mut buf = vec![0u8; bytes];
    File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut buf))
        .map_err(|e| format!("garage: reading /dev/urandom: {e}"))?;
    Ok(to_hex(&buf))
}

/// `GET path` on 127.0.0.1:`port` over HTTP/1.0: the status and body, or why there was no
/// answer.
pub(crate) fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let timeout = Duration::from_secs(5);
    let exchange = || -> std::io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        write!(
            stream,
            "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    };
    let response = exchange().map_err(|e| format!("GET {addr}{path}: {e}"))?;
    // "HTTP/1.x <status> <reason>", a blank line, the body.
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| format!("GET {addr}{path}: not HTTP: {response:?}"))?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((status, body.to_owned()))
}
