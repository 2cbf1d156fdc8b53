//! The clients under the process topologies their users have, on the CPU
//! device: a child forked from a process that holds shared buffers (Python's
//! default start method, a data loader's workers) uses the inherited share
//! client while its parent goes on, and nothing the parent holds changes; a
//! runtime client inherited by a child refuses to submit there and leaves
//! the parent's client slot alone when the child drops it; a daemon
//! restarted under a live client gives out no id its predecessor did; a
//! reader's store into a sealed buffer faults instead of changing what every
//! later reader sees; a writer that deleted its unsealed buffer cannot seal
//! it.
//!
//! The tests fork this test binary's process, so they run one at a time
//! ([`ONE_AT_A_TIME`]): at each fork the other test threads wait on that
//! lock and hold none that a child could need.

mod common;

use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tandem_hal::{DeviceMemory, GpuApi, GpuDevice, HostApi};
use tandem_runtime::{math, Client, Config, DeviceSelection, Route, TaskError};
use tandem_share::{HostMirror, ObjectId, ShareClient, ShareError};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const LEN: usize = 1 << 20;

/// A daemon on a socket of the test's own (`tandem share serve`), started
/// again on the same socket by [`Daemon::restart`].
struct Daemon {
    socket: std::path::PathBuf,
    cleanup: common::Cleanup,
}

impl Daemon {
    fn start() -> Self {
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let socket = tandem_share::runtime_dir().join(format!(
            "share-fork-test-{}-{}.sock",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let mut daemon = Self {
            socket: socket.clone(),
            cleanup: common::Cleanup {
                children: Vec::new(),
                files: vec![socket],
            },
        };
        daemon.spawn();
        daemon
    }

    fn spawn(&mut self) {
        let mut child = common::tandem()
            .args(["share", "serve", "--socket"])
            .arg(&self.socket)
            .args(["--backend", "host", "--announce", "--exit-on-stdin-eof"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the share daemon");
        let ready = tandem_tests::support::lines(&mut child)
            .recv_timeout(Duration::from_secs(60))
            .expect("the daemon's ready line");
        assert!(ready.starts_with("ready "), "{ready}");
        self.cleanup.children.push(child);
    }

    /// Kills the daemon (as a crash would) and starts another on the same
    /// socket.
    fn restart(&mut self) {
        let mut old = self.cleanup.children.pop().expect("a running daemon");
        old.kill().expect("kill");
        old.wait().expect("reap");
        tandem_process::remove_host_ipc_segments_of(old.id());
        let _ = std::fs::remove_file(&self.socket);
        self.spawn();
    }

    fn client(&self) -> ShareClient<HostApi> {
        ShareClient::connect(HostApi::load().unwrap(), &self.socket).expect("connecting")
    }
}

/// A sealed buffer of `client`'s filled with `byte`.
fn sealed(client: &ShareClient<HostApi>, byte: u8) -> (ObjectId, tandem_share::GpuBuffer<HostApi>) {
    let device = client.device(0).unwrap();
    let stream = device.create_stream().unwrap();
    let (id, mut buffer) = client.create_buffer(0, LEN).unwrap();
    HostMirror::new(&mut buffer, false).unwrap().fill(byte);
    (id, client.seal(buffer, &stream).unwrap())
}

fn bytes_of(buffer: &tandem_share::GpuBuffer<HostApi>) -> Vec<u8> {
    HostMirror::new(buffer, true).unwrap().to_vec()
}

/// Forks; the child runs `child` and exits with its status (0: passed)
/// without running this process's destructors or exit handlers; returns
/// the child's wait status.
fn fork_and_wait(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the other test threads wait on ONE_AT_A_TIME (held by the
    // caller), so the child inherits no lock in use; it ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: ends the child at once, as a forked worker does.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    status
}

fn exited_with(status: i32) -> Option<i32> {
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}

/// A child forked from a process holding a sealed buffer (and its writer's
/// client) calls through the inherited client while the parent calls too:
/// it opens the buffer as a client of its own (its own lease), creates and
/// deletes buffers, and drops everything it inherited. The parent's lease
/// stays, its mapping keeps its bytes even after the child deleted the
/// buffer and the parent made new buffers of the same size, and its own
/// connection never sees a frame of the child's.
#[test]
fn a_forked_child_uses_the_client_without_touching_what_the_parent_holds() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let daemon = Daemon::start();
    let client = daemon.client();
    let (id, held) = sealed(&client, 7);
    let leases = client.stat(id).unwrap().leases;
    let parent_pid = std::process::id();

    // The parent keeps calling while the child runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let caller = {
        let (client, stop) = (client.clone(), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut calls = 0u32;
            while !stop.load(Ordering::Relaxed) {
                client
                    .stat(id)
                    .expect("the parent's call while a child calls");
                calls += 1;
            }
            calls
        })
    };
    // What the child inherits and drops: a clone of the client and a second
    // handle on the parent's mapping.
    let (inherited_client, inherited) = {
        let stream = client.device(0).unwrap().create_stream().unwrap();
        let again = client.get_buffer(id, &stream).unwrap();
        assert!(again.same_mapping(&held));
        (client.clone(), again)
    };
    let status = fork_and_wait(move || {
        let client = inherited_client;
        let stream = match client.device(0).and_then(|d| Ok(d.create_stream()?)) {
            Ok(stream) => stream,
            Err(e) => {
                eprintln!("child: device: {e}");
                return 8;
            }
        };
        let opened = match client.get_buffer(id, &stream) {
            Ok(opened) => opened,
            Err(e) => {
                eprintln!("child: get: {e}");
                return 2;
            }
        };
        if opened.same_mapping(&inherited) || bytes_of(&opened) != vec![7; LEN] {
            eprintln!("child: opened the parent's mapping, or other bytes");
            return 3;
        }
        // Its own lease, beside the parent's.
        if client.stat(id).map(|info| info.leases).ok() != Some(leases + 1) {
            eprintln!("child: expected its own lease on top of the parent's");
            return 4;
        }
        for _ in 0..20 {
            let (other, _) = sealed(&client, 9);
            if client.delete(other).is_err() {
                return 5;
            }
        }
        if client.delete(id).is_err() {
            return 6;
        }
        drop((opened, inherited, client));
        // The parent's daemon is untouched by the drops: still there.
        if std::process::id() == parent_pid {
            return 7;
        }
        0
    });
    stop.store(true, Ordering::Relaxed);
    let calls = caller.join().expect("the parent's caller");
    assert_eq!(
        exited_with(status),
        Some(0),
        "the child's checks (status {status:#x})"
    );
    assert!(calls > 0);

    let info = client.stat(id).expect("the buffer the parent holds");
    assert!(info.deleted, "the child's delete counts");
    assert_eq!(
        info.leases, leases,
        "the child's own lease went with it; the parent's stays"
    );
    // New buffers of the same size get fresh memory while the parent maps
    // the deleted one.
    for _ in 0..4 {
        let (other, fresh) = sealed(&client, 1);
        assert!(!fresh.same_mapping(&held));
        client.delete(other).unwrap();
    }
    assert_eq!(bytes_of(&held), vec![7; LEN], "the parent's bytes");
    assert_eq!(
        client.status().unwrap().clients,
        1,
        "the child's client went with it"
    );
}

/// A daemon restarted on the same socket under a client that still maps a
/// buffer of the old one: the client's next calls reach the new daemon, and
/// the new daemon's first buffer has another id, so the old mapping is never
/// taken for it.
#[test]
fn a_restarted_daemon_gives_out_none_of_its_predecessors_ids() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let mut daemon = Daemon::start();
    let client = daemon.client();
    let (old_id, old) = sealed(&client, 3);
    daemon.restart();

    let writer = daemon.client();
    let (new_id, _new) = sealed(&writer, 5);
    assert!(new_id.0 > old_id.0, "{new_id} after {old_id}");
    let stream = client.device(0).unwrap().create_stream().unwrap();
    let got = client
        .get_buffer(new_id, &stream)
        .expect("the new daemon's buffer");
    assert_eq!(
        bytes_of(&got),
        vec![5; LEN],
        "the new buffer's bytes, not a cached old mapping"
    );
    // The old id names nothing now, though this client still maps it.
    assert!(matches!(
        client.get_buffer(old_id, &stream).map(drop),
        Err(ShareError::UnknownId(unknown)) if unknown == old_id
    ));
    assert_eq!(
        bytes_of(&old),
        vec![3; LEN],
        "the old mapping keeps its bytes"
    );
}

/// A reader's mapping of a sealed buffer is read-only: a store through it
/// kills the storing process (SIGSEGV) and leaves the bytes as sealed.
#[test]
fn a_store_into_a_sealed_buffer_faults_and_changes_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let daemon = Daemon::start();
    let writer = daemon.client();
    let (id, _sealed) = sealed(&writer, 4);
    let reader = daemon.client();
    let stream = reader.device(0).unwrap().create_stream().unwrap();
    let opened = reader.get_buffer(id, &stream).unwrap();
    let address = opened.device_ptr() as *mut u8;
    let status = fork_and_wait(|| {
        // SAFETY: deliberately a store through the read-only mapping, the
        // fault it makes is what the test looks for.
        unsafe { address.write_volatile(0xff) };
        0
    });
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
        "the store faults (status {status:#x})"
    );
    let again = daemon.client();
    let fresh = again.get_buffer(id, &stream).unwrap();
    assert_eq!(bytes_of(&fresh), vec![4; LEN]);
}

/// A writer that deleted its buffer before sealing it cannot seal it (and
/// so not get it back either).
#[test]
fn a_buffer_deleted_before_its_seal_cannot_be_sealed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let daemon = Daemon::start();
    let client = daemon.client();
    let device = client.device(0).unwrap();
    let stream = device.create_stream().unwrap();
    let (id, buffer) = client.create_buffer(0, LEN).unwrap();
    client.delete(id).unwrap();
    match client.seal(buffer, &stream) {
        Err(ShareError::Deleted(deleted)) => assert_eq!(deleted, id),
        other => panic!("expected Deleted, got {:?}", other.map(|b| b.id())),
    }
    assert!(client.get_buffer(id, &stream).is_err());
}

/// A runtime client inherited by a forked child: its submits there are
/// `ForkedClient` (its slot, heap and futures are the parent's), and the
/// child's drop of it detaches nothing: the parent's calls go on.
#[test]
fn a_runtime_client_in_a_forked_child_refuses_and_leaves_the_parents_slot() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let config = Config {
        workers: 1,
        queue_depth: 64,
        lanes: 1,
        cpu_segment_size: 2 << 20,
        devices: DeviceSelection::Only(vec![]),
        ..Config::default()
    };
    let client = Client::fork_runtime_with(&common::tandem_exe(), &config).expect("fork_runtime");
    let stop = std::sync::atomic::AtomicU32::new(0);
    let add = |a| client.call(Route::lane(0), &math::Add { a, b: 1 }, &stop, None);
    assert_eq!(add(1).unwrap(), 2);
    let slot = client.slot();
    let inherited = &client;
    let status = fork_and_wait(|| {
        // SAFETY: the child's copy of the parent's client, owned here alone:
        // the child exits without using or dropping the original.
        let client = unsafe { std::ptr::read(inherited) };
        match client.submit(Route::lane(0), &math::Add { a: 1, b: 1 }) {
            Err(TaskError::ForkedClient { pid }) if pid != std::process::id() => {}
            Err(e) => {
                eprintln!("child: expected ForkedClient, got {e}");
                return 2;
            }
            Ok(_) => return 3,
        }
        if client.allocate_shared(64).is_ok() {
            return 4;
        }
        drop(client);
        0
    });
    assert_eq!(
        exited_with(status),
        Some(0),
        "the child's checks (status {status:#x})"
    );
    assert_eq!(client.slot(), slot);
    for a in 0..100 {
        assert_eq!(add(a).unwrap(), a + 1, "the parent's slot serves on");
    }
}
