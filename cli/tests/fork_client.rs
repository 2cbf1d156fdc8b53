//! Host clients in another process than the runtime: a forked runtime is
//! ready when `fork_runtime` returns, serves several clients, and when it is
//! killed waiting clients get an error in bounded time; a stopped one is
//! reported not answering while they wait on; the segment a killed one left
//! behind is reclaimed by the next runtime on its name. A fork client's own
//! kernels submit to its runtime through device queues of their own.

mod common;

use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use tandem_hal::HostApi;
use tandem_runtime::{
    math, Client, Config, DeviceSelection, Liveness, Registry, Route, Runtime, RuntimeError,
    TaskError, HEARTBEAT_STALE,
};

fn small_config() -> Config {
    Config {
        workers: 1,
        queue_depth: 64,
        lanes: 2,
        cpu_segment_size: 2 << 20,
        devices: DeviceSelection::Only(vec![]),
        ..Config::default()
    }
}

fn forked() -> Client {
    forked_with(&small_config())
}

fn forked_with(config: &Config) -> Client {
    Client::fork_runtime_with(&common::tandem_exe(), config).expect("fork")
}

/// Removes the named segment when the test ends, failed or not (declared
/// before the clients, so dropped after them).
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(format!("/dev/shm/{}", self.0));
    }
}

fn child_pid(client: &mut Client) -> libc::pid_t {
    client.child_mut().expect("forked").id() as libc::pid_t
}

fn signal(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: sends a signal to our own child process (not reaped before
    // the client is dropped, so the pid cannot be reused meanwhile).
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// SIGSTOP, then waits until every thread of `pid` is stopped (delivery is
/// asynchronous: a worker may run on for a moment).
fn freeze(pid: libc::pid_t) {
    signal(pid, libc::SIGSTOP);
    let deadline = Instant::now() + Duration::from_secs(5);
    let stopped = |tid: &std::path::Path| {
        std::fs::read_to_string(tid.join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('T'))
            })
            .unwrap_or(true)
    };
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("proc");
        if tasks.filter_map(Result::ok).all(|t| stopped(&t.path())) {
            return;
        }
        assert!(Instant::now() < deadline, "runtime did not stop");
        std::thread::yield_now();
    }
}

#[test]
fn forked_runtime_is_ready_and_serves_clients() {
    let client = forked();
    let stop = AtomicU32::new(0);
    assert_ne!(client.runtime_pid(), std::process::id());
    let sum = client
        .call(Route::lane(0), &math::Add { a: 40, b: 2 }, &stop, None)
        .expect("call");
    assert_eq!(sum, 42);
    // A second client attaches by name, at another address.
    let name = client.segment().name().expect("named").to_string();
    let other = Client::attach(&name).expect("attach");
    assert_ne!(other.segment().base(), client.segment().base());
    for i in 0..100u64 {
        let sum = other
            .call(Route::lane(1), &math::Add { a: i, b: i }, &stop, None)
            .expect("call");
        assert_eq!(sum, 2 * i);
    }
}

#[test]
fn a_fork_clients_kernels_submit_through_device_queues_of_its_own() {
    use tandem_runtime::kernels::{EchoRoute, NoopLaunch, RuntimeKernels};
    let config = Config {
        devices: DeviceSelection::All,
        client_device_segment_size: 4 << 20,
        gpu_lanes: 2,
        ..small_config()
    };
    let client = forked_with(&config);
    let api = HostApi::with_devices(1);
    let queues = client.device_queues(&api, 0).expect("device queues");
    let mut kernels = RuntimeKernels::load(&queues).expect("kernels");
    let outcome = kernels
        .noop_tasks(&NoopLaunch {
            route: EchoRoute::CpuWorkers,
            blocks: 2,
            threads: 4,
            tasks_per_thread: 50,
            spin_budget: 1 << 40,
        })
        .expect("launch");
    assert_eq!(outcome.failed_threads(), 0, "{:?}", outcome.status);
    assert!(outcome.results.iter().all(|&n| n == 50));
    let name = queues.segment().name().expect("named").to_string();
    drop(kernels);
    drop(queues);
    assert!(!std::path::Path::new("/dev/shm").join(name).exists());
}

#[test]
fn killed_runtime_releases_waiting_clients() {
    let mut client = forked();
    let pid = child_pid(&mut client);
    let stop = AtomicU32::new(0);
    // Freeze the runtime so the task below stays queued, then kill it while
    // a client waits.
    freeze(pid);
    let mut pending = client
        .submit(Route::lane(0), &math::Add { a: 1, b: 2 })
        .expect("submit");
    let killed_at = std::thread::scope(|s| {
        let waiter = s.spawn(|| pending.wait(&stop, None));
        std::thread::sleep(Duration::from_millis(100));
        let killed_at = Instant::now();
        signal(pid, libc::SIGKILL);
        let result = waiter.join().expect("waiter");
        assert!(
            matches!(result, Err(TaskError::RuntimeDead { .. })),
            "{result:?}"
        );
        killed_at
    });
    assert!(
        killed_at.elapsed() < Duration::from_secs(1),
        "took {:?}",
        killed_at.elapsed()
    );
    // A later call fails fast too, instead of hanging.
    let start = Instant::now();
    let result = client.call(Route::lane(0), &math::Add { a: 1, b: 1 }, &stop, None);
    assert!(
        matches!(result, Err(TaskError::RuntimeDead { .. })),
        "{result:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn stopped_runtime_is_not_answering_not_dead() {
    let mut client = forked();
    let pid = child_pid(&mut client);
    let stop = AtomicU32::new(0);
    assert_eq!(client.runtime_liveness(), Liveness::Serving);
    freeze(pid);
    let mut pending = client
        .submit(Route::lane(0), &math::Add { a: 20, b: 22 })
        .expect("submit");
    std::thread::scope(|s| {
        let waiter = s.spawn(|| pending.wait(&stop, None));
        // Past HEARTBEAT_STALE the runtime is reported silent and stopped,
        // while the waiter still waits.
        let deadline = Instant::now() + HEARTBEAT_STALE + Duration::from_secs(30);
        loop {
            match client.runtime_liveness() {
                Liveness::NotAnswering {
                    silent_for,
                    process_stopped: true,
                } if silent_for > HEARTBEAT_STALE => break,
                Liveness::NotAnswering { .. } | Liveness::Serving => {}
                other => panic!("a stopped runtime reported {other:?}"),
            }
            assert!(
                !waiter.is_finished(),
                "waiter returned: {:?}",
                waiter.join()
            );
            assert!(Instant::now() < deadline, "never reported silent");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !waiter.is_finished(),
            "waiter returned: {:?}",
            waiter.join()
        );
        signal(pid, libc::SIGCONT);
        assert_eq!(
            waiter.join().expect("waiter").expect("call after SIGCONT"),
            42
        );
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.runtime_liveness() != Liveness::Serving {
        assert!(Instant::now() < deadline, "{:?}", client.runtime_liveness());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn killed_runtime_segment_is_reclaimed_by_the_next_runtime() {
    let name = format!("tandem-test-reclaim-{}", std::process::id());
    let config = Config {
        cpu_segment_name: Some(name.clone()),
        ..small_config()
    };
    let shm = std::path::PathBuf::from(format!("/dev/shm/{name}"));
    let _cleanup = RemoveOnDrop(name.clone());
    let mut dead = forked_with(&config);
    let pid = child_pid(&mut dead);
    signal(pid, libc::SIGKILL);
    dead.child_mut().expect("forked").wait().expect("reap");
    assert_eq!(dead.runtime_liveness(), Liveness::Gone);
    assert!(shm.exists(), "kill -9 left no segment to reclaim");

    // The next runtime on the name reclaims it.
    let next = forked_with(&config);
    assert_ne!(next.runtime_pid(), pid as u32);
    let stop = AtomicU32::new(0);
    let call = |c: &Client| c.call(Route::lane(0), &math::Add { a: 1, b: 2 }, &stop, None);
    assert_eq!(call(&next).expect("call"), 3);
    // The dead runtime's client leaves the new owner's name alone.
    drop(dead);
    assert!(
        shm.exists(),
        "the old client removed the new runtime's segment"
    );
    assert_eq!(call(&next).expect("call"), 3);
    drop(next);
    assert!(!shm.exists(), "segment left behind");
}

#[test]
fn live_owner_keeps_its_name_with_a_clear_error() {
    let name = format!("tandem-test-inuse-{}", std::process::id());
    let config = Config {
        cpu_segment_name: Some(name.clone()),
        ..small_config()
    };
    let _cleanup = RemoveOnDrop(name.clone());
    let owner = forked_with(&config);
    let err = Runtime::start_with(HostApi::with_devices(0), config, Registry::with_builtins())
        .err()
        .expect("a second runtime on a live name must fail");
    assert!(
        matches!(&err, RuntimeError::SegmentInUse { name: n, owner_pid: Some(p) }
            if *n == name && *p == owner.runtime_pid()),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains(&name), "{message}");
    assert!(message.contains("cpu_segment_name"), "{message}");
    // The owner still serves.
    let stop = AtomicU32::new(0);
    let sum = owner
        .call(Route::lane(0), &math::Add { a: 2, b: 2 }, &stop, None)
        .expect("call");
    assert_eq!(sum, 4);
}

#[test]
fn fork_with_a_bad_binary_is_an_error() {
    let err = Client::fork_runtime_with("/nonexistent/tandem".as_ref(), &Config::default())
        .expect_err("must fail");
    assert!(err.to_string().contains("cannot start"), "{err}");
}
