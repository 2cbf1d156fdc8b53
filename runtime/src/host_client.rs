//! Host clients in other processes: attach to a runtime's CPU segment by
//! name, or start a runtime in a child process ([`Client::fork_runtime`]).

use std::ffi::OsStr;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tandem_hal::GpuApi;
use tandem_process::{find_tandem_binary, MadeIn, ServiceChild};
use tandem_shm_core::Segment;

use crate::client_queues::ClientDeviceQueues;
use crate::client_table::ClientLease;
use crate::config::Config;
use crate::error::RuntimeError;
use crate::layout::runtime_state;
use crate::liveness::Liveness;
use crate::segment::QueueSegment;
use crate::submit::{self, Heap, Pending, Route, SharedBuffer};
use crate::task::{Task, TaskError};

/// A connection to a runtime's CPU queues, holding a client slot there: its
/// futures come from the slot's heap, its quota ([`ClientTable`](crate::ClientTable)).
/// Dropping it detaches.
#[derive(Debug)]
pub struct Client {
    /// Borrows `segment`'s mapping (declared 'static like the segment's own
    /// handles): it has no drop glue, and Drop detaches it before the
    /// segment goes.
    lease: ClientLease<'static>,
    /// Shared with the watchers of its device queues.
    segment: Arc<QueueSegment>,
    forked: Option<ServiceChild>,
    /// A child forked from this process inherits the client, but its slot,
    /// heap and futures stay the parent's: the child neither submits through
    /// it nor detaches it.
    made_in: MadeIn,
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
            segment: Arc::new(segment),
            forked: None,
            made_in: MadeIn::this_process(),
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
        Self::fork_runtime_args(exe, &["run".as_ref()], config, "")
    }

    /// [`fork_runtime_with`](Self::fork_runtime_with) running `exe` with
    /// `command` instead of `run`: a subcommand that serves a runtime as
    /// `tandem run` does and takes its `--config`, `--announce` and
    /// `--exit-on-stdin-eof` (`tandem blob run`). Its configuration file
    /// holds `config` followed by `tables`, TOML tables of the command's own
    /// (the store's `[blob]`), which must not repeat `config`'s keys.
    pub fn fork_runtime_args(
        exe: &Path,
        command: &[&OsStr],
        config: &Config,
        tables: &str,
    ) -> Result<Self, RuntimeError> {
        config.validate()?;
        let process = |why: String| RuntimeError::Process(why);
        let config_path = std::env::temp_dir().join(format!(
            "tandem-fork-{}-{}.toml",
            std::process::id(),
            FORK_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&config_path, format!("{}\n{tables}", config.to_toml()))
            .map_err(|e| process(format!("writing {}: {e}", config_path.display())))?;
        let flags: [&OsStr; 4] = [
            "--config".as_ref(),
            config_path.as_os_str(),
            "--announce".as_ref(),
            "--exit-on-stdin-eof".as_ref(),
        ];
        let args: Vec<&OsStr> = command.iter().chain(&flags).copied().collect();
        let spawned = ServiceChild::spawn(exe, &args);
        // The child has read its config (or died): the file is not needed.
        let _ = std::fs::remove_file(&config_path);
        let forked = spawned?;
        let name = forked.ready().to_string();
        match Self::attach(&name) {
            Ok(mut client) => {
                client.forked = Some(forked);
                Ok(client)
            }
            Err(e) => {
                drop(forked.stop());
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
        self.forked.as_mut().map(ServiceChild::child_mut)
    }

    /// The CPU segment.
    pub fn segment(&self) -> &QueueSegment {
        &self.segment
    }

    /// Device queues of this client's own on `api`'s device `ordinal`
    /// (one the runtime serves), which its kernels are launched against
    /// exactly as the runtime's own kernels are against
    /// [`Runtime::devices`](crate::Runtime::devices); the runtime's workers
    /// serve them. At most `client_device_queues` at once
    /// ([`RuntimeError::TooManyDeviceQueues`]); the runtime's refusal is
    /// [`RuntimeError::DeviceQueuesRefused`]. How the memory is shared, and
    /// what happens when either side dies: [`ClientDeviceQueues`].
    pub fn device_queues<A: GpuApi>(
        &self,
        api: &A,
        ordinal: usize,
    ) -> Result<ClientDeviceQueues<'_, A>, RuntimeError> {
        if !self.made_in.is_this_process() {
            return Err(RuntimeError::ForkedClient {
                pid: self.made_in.pid(),
            });
        }
        ClientDeviceQueues::request(Arc::clone(&self.segment), &self.lease, api, ordinal)
    }

    /// The client slot this client holds (an index into the segment's
    /// [`ClientTable`](crate::client_table::ClientTable)).
    pub fn slot(&self) -> u32 {
        self.lease.index()
    }

    /// Submits `task` (a copy future from this client's heap) without
    /// waiting; [`TaskError::ClientQuota`] when the futures this client holds
    /// fill its heap ([`TaskError::ClientHeapFragmented`] when its free
    /// bytes would hold the future but lie in pieces between live blocks).
    pub fn submit<T: Task>(&self, route: Route, task: &T) -> Result<Pending<'_, T>, TaskError> {
        self.in_its_process()?;
        submit::submit_from(&self.segment, Heap::Client(&self.lease), route, task)
    }

    /// A block of `len` bytes of this client's heap, for data a task takes
    /// by reference; [`TaskError::ClientQuota`] when the heap is full,
    /// [`TaskError::ClientHeapFragmented`] when its free bytes lie in pieces
    /// too small for the buffer.
    pub fn allocate_shared(&self, len: usize) -> Result<SharedBuffer<'_>, TaskError> {
        self.in_its_process()?;
        SharedBuffer::allocate(&self.segment, Heap::Client(&self.lease), len)
    }

    /// [`TaskError::ForkedClient`] in a child forked from the process that
    /// made the client.
    fn in_its_process(&self) -> Result<(), TaskError> {
        if self.made_in.is_this_process() {
            Ok(())
        } else {
            Err(TaskError::ForkedClient {
                pid: self.made_in.pid(),
            })
        }
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
}

impl Drop for Client {
    fn drop(&mut self) {
        if !self.made_in.is_this_process() {
            // The slot and the runtime are the parent's, which still uses
            // them; only this process's copies of the handles go.
            return;
        }
        // Before the runtime (if forked) stops: its janitor takes back a
        // slot left with futures outstanding.
        self.lease.detach();
        let runtime_gone = match self.forked.take() {
            // Reaping errors leave nothing to do in a drop.
            Some(forked) => !forked.stop().is_ok_and(|s| s.success()),
            None => self.runtime_liveness() == Liveness::Gone,
        };
        // A runtime that was killed could not remove its segment's name;
        // it is gone now, so nobody else will. Only if still stale: a new
        // runtime may have reclaimed the name meanwhile. Failing leaves it
        // to `tandem clean`; a drop has no one to tell.
        if runtime_gone {
            if let Some(name) = self.segment.name() {
                let _ = crate::stale::remove_stale_segment_within(name, DEAD_RUNTIME_PATIENCE);
            }
        }
    }
}

/// How long a client that saw its runtime die waits for a prober's hold on
/// the dead runtime's segment to end before leaving the name to
/// `tandem clean` (`stale::remove_stale_segment_within`).
const DEAD_RUNTIME_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

static FORK_COUNTER: AtomicU32 = AtomicU32::new(0);
