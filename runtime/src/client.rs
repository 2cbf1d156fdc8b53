//! Host clients in other processes: attach to a runtime's CPU segment by
//! name, or start a runtime in a child process ([`Client::fork_runtime`]).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use tandem_shm_core::Segment;

use crate::clients::ClientLease;
use crate::config::Config;
use crate::error::RuntimeError;
use crate::layout::runtime_state;
use crate::liveness::Liveness;
use crate::segment::QueueSegment;
use crate::submit::{self, Heap, Pending, Route, SharedBuffer};
use crate::task::{Task, TaskError};

/// The line `tandem run --announce` prints on stdout once it serves:
/// `ready <cpu segment name> <pid>`.
pub(crate) const READY_PREFIX: &str = "ready ";

/// Environment variable naming the `tandem` executable for
/// [`Client::fork_runtime`].
pub(crate) const TANDEM_BIN_ENV: &str = "TANDEM_BIN";

/// A runtime started by [`Client::fork_runtime`]: the child and the pipe
/// whose closing tells it to stop.
#[derive(Debug)]
struct ForkedRuntime {
    child: Child,
    lifeline: Option<ChildStdin>,
}

/// A connection to a runtime's CPU queues, holding a client slot there: its
/// futures come from the slot's heap, its quota ([`ClientTable`](crate::ClientTable)).
/// Dropping it detaches.
#[derive(Debug)]
pub struct Client {
    /// Borrows `segment`'s mapping (declared 'static like the segment's own
    /// handles): it has no drop glue, and Drop detaches it before the
    /// segment goes.
    lease: ClientLease<'static>,
    segment: QueueSegment,
    forked: Option<ForkedRuntime>,
}

impl Client {
    /// Attaches to the CPU segment `name` of a running runtime and claims a
    /// client slot there ([`RuntimeError::TooManyClients`] when all
    /// `max_clients` are taken).
    pub fn attach(name: &str) -> Result<Self, RuntimeError> {
        let segment = QueueSegment::attach(Segment::open_named(name)?)?;
        // Acquire pairs with the runtime's Release of READY.
        let state = segment.header().state.load(Ordering::Acquire);
        if state != runtime_state::READY {
            return Err(RuntimeError::Process(format!(
                "runtime of segment {name} is not serving (state {state})"
            )));
        }
        let lease = segment.claim_client()?;
        tracing::debug!("attached to {name} as client slot {}", lease.index());
        Ok(Self {
            lease,
            segment,
            forked: None,
        })
    }

    /// Starts `tandem run` with `config` in a child process and attaches to
    /// it once the child reports ready through its stdout pipe (after its
    /// setup: no sleeps). The `tandem` executable is `$TANDEM_BIN`, or the one
    /// next to the current executable (or one directory up, for test
    /// binaries in `deps/`). Dropping the client closes the child's stdin,
    /// which stops it, and reaps it.
    pub fn fork_runtime(config: &Config) -> Result<Self, RuntimeError> {
        Self::fork_runtime_with(&find_tandem_binary()?, config)
    }

    /// [`fork_runtime`](Self::fork_runtime) with an explicit executable.
    pub fn fork_runtime_with(exe: &Path, config: &Config) -> Result<Self, RuntimeError> {
        config.validate()?;
        let process = |why: String| RuntimeError::Process(why);
        let config_path = std::env::temp_dir().join(format!(
            "tandem-fork-{}-{}.toml",
            std::process::id(),
            FORK_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&config_path, config.to_toml())
            .map_err(|e| process(format!("writing {}: {e}", config_path.display())))?;
        let spawned = Command::new(exe)
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .arg("--announce")
            .arg("--exit-on-stdin-eof")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_file(&config_path);
                return Err(process(format!("cannot start {}: {e}", exe.display())));
            }
        };
        let ready = read_ready_line(&mut child);
        // The child has read its config (or died): the file is not needed.
        let _ = std::fs::remove_file(&config_path);
        let name = match ready {
            Ok(name) => name,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let lifeline = child.stdin.take();
        let forked = ForkedRuntime { child, lifeline };
        match Self::attach(&name) {
            Ok(mut client) => {
                client.forked = Some(forked);
                Ok(client)
            }
            Err(e) => {
                drop(Client::stop_forked(forked));
                Err(e)
            }
        }
    }

    /// The runtime's process id.
    pub fn runtime_pid(&self) -> u32 {
        self.segment.header().runtime_pid.load(Ordering::Relaxed)
    }

    /// Whether the runtime serves, has not answered for a while (hung, or
    /// its process stopped), shut down, or is gone. Only the last two end
    /// waits with [`TaskError::RuntimeDead`].
    pub fn runtime_liveness(&self) -> Liveness {
        Liveness::of(self.segment.header())
    }

    /// The child process, for a client that forked its runtime.
    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.forked.as_mut().map(|f| &mut f.child)
    }

    /// The CPU segment.
    pub fn segment(&self) -> &QueueSegment {
        &self.segment
    }

    /// The client slot this client holds (an index into the segment's
    /// [`ClientTable`](crate::clients::ClientTable)).
    pub fn slot(&self) -> u32 {
        self.lease.index()
    }

    /// Submits `task` (a copy future from this client's heap) without
    /// waiting; [`TaskError::ClientQuota`] when the futures this client holds
    /// fill its heap.
    pub fn submit<T: Task>(&self, route: Route, task: &T) -> Result<Pending<'_, T>, TaskError> {
        submit::submit_from(&self.segment, Heap::Client(&self.lease), route, task)
    }

    /// A block of `len` bytes of this client's heap, for data a task takes
    /// by reference; [`TaskError::ClientQuota`] when the heap is full.
    pub fn allocate_shared(&self, len: usize) -> Result<SharedBuffer<'_>, TaskError> {
        SharedBuffer::allocate(&self.segment, Heap::Client(&self.lease), len)
    }

    /// Submits `task` and waits for its output, until `stop` is raised,
    /// `deadline` passes, or the runtime dies.
    pub fn call<T: Task>(
        &self,
        route: Route,
        task: &T,
        stop: &AtomicU32,
        deadline: Option<Instant>,
    ) -> Result<T::Output, TaskError> {
        let route = Route {
            deadline: route.deadline.or(deadline),
            ..route
        };
        self.submit(route, task)?.wait(stop, deadline)
    }

    /// Closes the child's lifeline and reaps it.
    fn stop_forked(mut forked: ForkedRuntime) -> std::io::Result<std::process::ExitStatus> {
        drop(forked.lifeline.take());
        forked.child.wait()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Before the runtime (if forked) stops: its janitor takes back a
        // slot left with futures outstanding.
        self.lease.detach();
        if let Some(forked) = self.forked.take() {
            // Reaping errors leave nothing to do in a drop.
            let status = Client::stop_forked(forked);
            // A runtime that was killed could not remove its segment's name;
            // it is gone now, so nobody else will. Only if still stale: a
            // new runtime may have reclaimed the name meanwhile. Failing
            // leaves it to `tandem clean`; a drop has no one to tell.
            if !status.is_ok_and(|s| s.success()) {
                if let Some(name) = self.segment.name() {
                    let _ = crate::stale::remove_stale_segment(name);
                }
            }
        }
    }
}

static FORK_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Reads the child's stdout up to its ready line; returns the segment name.
fn read_ready_line(child: &mut Child) -> Result<String, RuntimeError> {
    let Some(out) = child.stdout.take() else {
        return Err(RuntimeError::Process("child has no stdout pipe".into()));
    };
    let mut lines = BufReader::new(out).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(rest) = line.strip_prefix(READY_PREFIX) {
                    let name = rest.split_whitespace().next().unwrap_or_default();
                    if name.is_empty() {
                        return Err(RuntimeError::Process(format!("bad ready line {line:?}")));
                    }
                    // Keep draining the child's stdout so it never blocks on
                    // a full pipe.
                    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
                    return Ok(name.to_string());
                }
            }
            Some(Err(e)) => {
                return Err(RuntimeError::Process(format!("reading child stdout: {e}")))
            }
            None => {
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                return Err(RuntimeError::Process(format!(
                    "runtime exited before it was ready ({status})"
                )));
            }
        }
    }
}

/// `$TANDEM_BIN`, or `tandem` next to (or one directory above) the current
/// executable.
fn find_tandem_binary() -> Result<PathBuf, RuntimeError> {
    if let Some(path) = std::env::var_os(TANDEM_BIN_ENV) {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()
        .map_err(|e| RuntimeError::Process(format!("cannot find own executable: {e}")))?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    [dir.join("tandem"), dir.join("..").join("tandem")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            RuntimeError::Process(format!(
                "no `tandem` executable near {}; set {TANDEM_BIN_ENV}",
                exe.display()
            ))
        })
}
