//! Clients cannot starve each other: each client's futures come from its own
//! heap in the CPU segment, a leaking client hits its own quota, and a slot
//! is taken back when its client is killed or detaches, only once no worker
//! can touch its futures. Clients in other processes are this test binary
//! run again with `TANDEM_CLIENTS_CHILD` set (see `child_client`).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_hal::HostApi;
use tandem_runtime::{
    math, Client, ClientSnapshot, ClientState, Config, ConfigError, Pending, Pool, Registry, Route,
    Runtime, RuntimeError, SharedBuffer, Task, TaskError,
};
use tandem_shm_core::impl_serialize_fields;

const CHILD_ENV: &str = "TANDEM_CLIENTS_CHILD";
const SEGMENT_ENV: &str = "TANDEM_CLIENTS_SEGMENT";
/// Lines a child prints for the parent start with this (libtest prints
/// its own lines on the same stdout).
const LINE: &str = "CHILD:";
/// Tasks a holding child submits, one per worker of the kill test: no more
/// than the cores of the smallest machine that runs it (CI has 2), since the
/// runtime caps its workers at the cores.
const HELD_TASKS: u64 = 2;
const DEADLINE: Duration = Duration::from_secs(20);

/// `gate(v) -> v`, once the test has opened the gate past `v`.
#[derive(Debug)]
struct Gate {
    v: u64,
}
impl_serialize_fields!(Gate { v });
impl Task for Gate {
    const POOL: u32 = 77;
    const METHOD: u32 = 0;
    type Output = u64;
}

/// The gate the `Gate` handlers wait at (task `v` passes once `v <
/// open_below`), and how many handlers entered.
#[derive(Default)]
struct GateState {
    open_below: AtomicU64,
    entered: AtomicU64,
}

impl GateState {
    fn open(&self, below: u64) {
        self.open_below.store(below, Ordering::SeqCst);
    }
}

fn registry(gate: &Arc<GateState>) -> Registry {
    let mut registry = Registry::with_builtins();
    let gate = Arc::clone(gate);
    let pool = Pool::new(Gate::POOL, "gate").task::<Gate, _>("wait", move |t| {
        gate.entered.fetch_add(1, Ordering::SeqCst);
        while t.v >= gate.open_below.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(t.v)
    });
    registry.register(pool).expect("pool id free");
    registry
}

fn config(name: &str, workers: usize, max_clients: u32, client_heap_bytes: usize) -> Config {
    let name = format!("tandem-clients-{}-{name}", std::process::id());
    Config {
        max_clients,
        client_heap_bytes,
        ..common::cpu_config(&name, workers)
    }
}

/// Starts a runtime whose gate opens when the returned guard drops (so a
/// failing test does not leave workers blocked at shutdown).
fn start(config: Config) -> (Runtime<HostApi>, Arc<GateState>, String) {
    let gate = Arc::new(GateState::default());
    let name = config.cpu_segment_name.clone().expect("named");
    let runtime =
        Runtime::start_with(HostApi::with_devices(0), config, registry(&gate)).expect("start");
    (runtime, gate, name)
}

/// Opens the gate when dropped, before the runtime (declared after it).
struct OpenOnDrop(Arc<GateState>);
impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open(u64::MAX);
    }
}

/// Raises its flag when dropped.
struct RaiseOnDrop<'a>(&'a AtomicBool);
impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A child client process; killed and reaped when dropped.
struct ChildClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl ChildClient {
    fn spawn(mode: &str, segment: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("own exe"))
            .args(["--exact", "child_client", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, mode)
            .env(SEGMENT_ENV, segment)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child client");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may have begun a line of its own before ours.
                if let Some((_, rest)) = line.split_once(LINE) {
                    let _ = tx.send(rest.to_string());
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
        }
    }

    fn line(&self) -> String {
        self.lines.recv_timeout(DEADLINE).expect("child's line")
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill(&mut self) {
        self.child.kill().expect("kill child");
        self.child.wait().expect("reap child");
    }

    /// Closes its stdin (it detaches and exits) and checks it succeeded.
    fn finish(&mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().expect("reap child").success());
    }
}

impl Drop for ChildClient {
    fn drop(&mut self) {
        // Already reaped, or killed now: errors leave nothing to do.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `what` until it holds, failing after [`DEADLINE`].
fn wait_until(why: &str, mut what: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !what() {
        assert!(Instant::now() < deadline, "timed out waiting until {why}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn slot(runtime: &Runtime<HostApi>, index: u32) -> ClientSnapshot {
    let table = runtime.cpu_segment().clients().expect("client table");
    table.slot(index).expect("slot")
}

/// The child side: attaches to `$TANDEM_CLIENTS_SEGMENT` and does what
/// `$TANDEM_CLIENTS_CHILD` says. Does nothing in a normal test run.
#[test]
fn child_client() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let segment = std::env::var(SEGMENT_ENV).expect("segment name");
    let client = Client::attach(&segment).expect("child attach");
    let wait_for_parent = || {
        let mut rest = Vec::new();
        // Returns at EOF: the parent closed our stdin (or died).
        let _ = std::io::stdin().read_to_end(&mut rest);
    };
    match mode.as_str() {
        // Submits tasks the gate holds, and waits to be killed.
        "hold" => {
            let pending: Vec<_> = (0..HELD_TASKS)
                .map(|v| {
                    client
                        .submit(Route::lane(v as u32), &Gate { v })
                        .expect("submit")
                })
                .collect();
            println!("{LINE}submitted {}", client.slot());
            wait_for_parent();
            drop(pending);
        }
        // Leaks futures (never waits for or frees them) until its quota.
        "leak" => {
            let mut leaked = 0u64;
            let err = loop {
                match client.submit(Route::lane(0), &math::Add { a: leaked, b: 1 }) {
                    Ok(pending) => {
                        std::mem::forget(pending);
                        leaked += 1;
                    }
                    Err(e) => break e,
                }
            };
            let TaskError::ClientQuota { futures, .. } = err else {
                panic!("leaking ended with {err:?}, not the quota");
            };
            assert_eq!(futures, leaked);
            println!("{LINE}quota {} {leaked} {err}", client.slot());
            wait_for_parent();
        }
        other => panic!("unknown child mode {other}"),
    }
}

#[test]
fn killed_client_slot_is_reclaimed_after_its_tasks_finish() {
    const WORKERS: u64 = HELD_TASKS;
    let (runtime, gate, name) = start(config("kill", WORKERS as usize, 1, 64 << 10));
    assert_eq!(
        runtime.workers() as u64,
        WORKERS,
        "fewer cores than HELD_TASKS"
    );
    let _open = OpenOnDrop(Arc::clone(&gate));
    let mut child = ChildClient::spawn("hold", &name);
    assert_eq!(child.line(), "submitted 0");
    let held = slot(&runtime, 0);
    assert_eq!(held.state, ClientState::Attached);
    assert_eq!(held.pid, child.pid());
    assert_eq!(held.futures, HELD_TASKS);
    assert!(held.bytes_in_use > 0, "{held:?}");
    // Every worker holds a task of the child: the lanes are drained, so
    // only the workers' sweeps keep the slot from being freed (the janitor
    // would otherwise free it in the round it sees the child gone, and it
    // would never be seen reclaiming).
    wait_until("every worker holds a gate task", || {
        gate.entered.load(Ordering::SeqCst) == WORKERS
    });
    child.kill();
    wait_until("the janitor sees the child gone", || {
        slot(&runtime, 0).state == ClientState::Reclaiming
    });
    // Its futures are still in workers' hands: the slot (the
    // only one) cannot be handed out.
    assert!(matches!(
        Client::attach(&name),
        Err(RuntimeError::TooManyClients { max: 1 })
    ));
    gate.open(u64::MAX);
    wait_until("the slot is free", || {
        slot(&runtime, 0).state == ClientState::Free
    });
    let freed = slot(&runtime, 0);
    assert_eq!((freed.bytes_in_use, freed.futures), (0, 0), "{freed:?}");
    // A new client gets the slot, with an empty heap, and works.
    let client = Client::attach(&name).expect("attach after reclaim");
    assert_eq!(client.slot(), 0);
    let fresh = slot(&runtime, 0);
    assert_eq!(fresh.pid, std::process::id());
    assert_eq!((fresh.bytes_in_use, fresh.futures, fresh.claims), (0, 0, 2));
    let stop = AtomicU32::new(0);
    assert_eq!(
        client.call(Route::lane(1), &Gate { v: 7 }, &stop, None),
        Ok(7)
    );
    assert_eq!(
        client.call(Route::lane(0), &math::Add { a: 2, b: 3 }, &stop, None),
        Ok(5)
    );
    // The dead client's tasks completed into its heap before it was freed.
    wait_until("every task is counted", || {
        runtime.stats().completed == HELD_TASKS + 2
    });
    let stats = runtime.stats();
    assert_eq!(
        (stats.failed, stats.bad_pointers, stats.double_completions),
        (0, 0, 0),
        "{stats:?}"
    );
    assert_eq!(gate.entered.load(Ordering::SeqCst), HELD_TASKS + 1);
}

#[test]
fn queued_tasks_of_a_killed_client_hold_its_slot() {
    let config = Config {
        lanes: 1,
        ..config("queued", 1, 1, 64 << 10)
    };
    let (runtime, gate, name) = start(config);
    let _open = OpenOnDrop(Arc::clone(&gate));
    let mut child = ChildClient::spawn("hold", &name);
    assert_eq!(child.line(), "submitted 0");
    wait_until("the worker holds the first task", || {
        gate.entered.load(Ordering::SeqCst) == 1
    });
    child.kill();
    wait_until("the janitor sees the child gone", || {
        slot(&runtime, 0).state == ClientState::Reclaiming
    });
    // The worker finishes the first task, ending its sweep, and takes the
    // second; two more stay queued, so the slot must stay held even after
    // the janitor's next full round (a heartbeat, then a round, each beat).
    gate.open(1);
    wait_until("the worker holds the second task", || {
        gate.entered.load(Ordering::SeqCst) == 2
    });
    let beat = || {
        runtime
            .cpu_segment()
            .header()
            .heartbeat
            .load(Ordering::Relaxed)
    };
    let seen = beat();
    wait_until("the janitor has had a round", || beat() >= seen + 2);
    assert_eq!(slot(&runtime, 0).state, ClientState::Reclaiming);
    gate.open(u64::MAX);
    wait_until("the slot is free", || {
        slot(&runtime, 0).state == ClientState::Free
    });
    wait_until("every task is counted", || {
        runtime.stats().completed == HELD_TASKS
    });
    assert_eq!(gate.entered.load(Ordering::SeqCst), HELD_TASKS);
}

#[test]
fn leaking_client_hits_its_own_quota_while_another_keeps_going() {
    let quota = 16 << 10;
    let (runtime, gate, name) = start(config("leak", 2, 2, quota));
    let _open = OpenOnDrop(gate);
    let steady = Client::attach(&name).expect("attach");
    let leaker_done = AtomicBool::new(false);
    let stop = AtomicU32::new(0);
    std::thread::scope(|s| {
        let submitter = s.spawn(|| {
            let mut i = 0u64;
            let mut after = 0;
            while after < 100 {
                let sum = steady
                    .call(Route::lane(1), &math::Add { a: i, b: i }, &stop, None)
                    .expect("the steady client's call");
                assert_eq!(sum, 2 * i);
                i += 1;
                if leaker_done.load(Ordering::SeqCst) {
                    after += 1;
                }
            }
            i
        });
        // Raised when the leaker is done, or when this test fails first: the
        // submitter then stops and the scope can end.
        let done = RaiseOnDrop(&leaker_done);
        let mut leaker = ChildClient::spawn("leak", &name);
        let line = leaker.line();
        let mut words = line.splitn(4, ' ');
        assert_eq!(words.next(), Some("quota"));
        let leaker_slot: u32 = words.next().expect("slot").parse().expect("slot");
        let leaked: u64 = words.next().expect("count").parse().expect("count");
        let message = words.next().expect("message");
        assert!(
            message.starts_with(&format!(
                "client quota of {quota} bytes used up by {leaked} outstanding futures"
            )) && message.ends_with("raise client_heap_bytes"),
            "{message}"
        );
        assert!(leaked > 0);
        let at_quota = slot(&runtime, leaker_slot);
        assert_eq!(at_quota.futures, leaked);
        assert!(at_quota.bytes_in_use > quota as u64 / 2, "{at_quota:?}");
        drop(done);
        let calls = submitter.join().expect("steady client");
        assert!(calls >= 100);
        // The steady client holds nothing between calls.
        let steady_slot = slot(&runtime, steady.slot());
        assert_eq!((steady_slot.futures, steady_slot.bytes_in_use), (0, 0));
        // Detaching with leaked futures: taken back by the janitor.
        leaker.finish();
        wait_until("the leaker's slot is free", || {
            slot(&runtime, leaker_slot).state == ClientState::Free
        });
    });
    // Clients never touched the segment's own heap.
    let main_heap = runtime.cpu_segment().heap().stats().expect("stats");
    assert_eq!(main_heap.carved_bytes, 0, "{main_heap:?}");
}

/// Submits `Add` tasks through `client` until its heap refuses one, each
/// waited for (so workers are done with it) and held (so its future stays
/// allocated); returns them and the error.
fn hold_futures(client: &Client) -> (Vec<Pending<'_, math::Add>>, TaskError) {
    let stop = AtomicU32::new(0);
    let mut held = Vec::new();
    loop {
        match client.submit(Route::lane(0), &math::Add { a: 1, b: 2 }) {
            Ok(mut pending) => {
                assert_eq!(pending.wait(&stop, None).expect("the sum"), 3);
                held.push(pending);
            }
            Err(e) => return (held, e),
        }
    }
}

/// Allocates shared buffers of `len` bytes through `client` until its heap
/// refuses one; returns them and the error.
fn hold_buffers(client: &Client, len: usize) -> (Vec<SharedBuffer<'_>>, TaskError) {
    let mut held = Vec::new();
    loop {
        match client.allocate_shared(len) {
            Ok(buffer) => held.push(buffer),
            Err(e) => return (held, e),
        }
    }
}

/// A client heap that held large shared buffers serves a heap's worth of
/// small futures once they are freed, and the reverse; with every other
/// future freed, a buffer request is refused as fragmented, not as the quota
/// used up; the slot's heap figures (`tandem status`) say the same.
#[test]
fn a_client_heap_of_freed_buffers_serves_futures_and_the_reverse() {
    const BUFFER: usize = 8000;
    let quota = 64 << 10;
    // The heap's allocator keeps its first page for its header.
    let heap = quota as u64 - 4096;
    let (runtime, gate, name) = start(config("sizes", 1, 1, quota));
    let _open = OpenOnDrop(gate);
    let client = Client::attach(&name).expect("attach");
    let index = client.slot();
    // Bytes of the block that one of `held` takes, from the slot's count.
    let block_of = |held: usize| slot(&runtime, index).bytes_in_use / held as u64;
    let all_free = || {
        let s = slot(&runtime, index);
        // The largest naturally aligned block of a 60 KiB heap: 32 KiB.
        s.bytes_in_use == 0 && s.free_bytes == heap && s.largest_servable_block == 32 << 10
    };
    for round in 0..2 {
        let (buffers, err) = hold_buffers(&client, BUFFER);
        let buffer_block = block_of(buffers.len());
        assert_eq!(
            buffers.len() as u64,
            heap / buffer_block,
            "round {round}: {err}"
        );
        assert!(matches!(err, TaskError::ClientQuota { .. }), "{err}");
        drop(buffers);
        wait_until("the heap's figures show it free", all_free);

        let (futures, err) = hold_futures(&client);
        let future_block = block_of(futures.len());
        assert_eq!(
            futures.len() as u64,
            heap / future_block,
            "round {round}: {err}"
        );
        let TaskError::ClientQuota { futures: held, .. } = err else {
            panic!("the futures ended with {err:?}");
        };
        assert_eq!(held, futures.len() as u64);
        // Every other future freed: half the heap free, in pieces.
        let kept: Vec<_> = futures.into_iter().step_by(2).collect();
        let Err(err) = client.allocate_shared(BUFFER) else {
            panic!("a buffer fit between the futures");
        };
        let TaskError::ClientHeapFragmented {
            quota_bytes,
            needed_bytes,
            free_bytes,
            largest_free_block,
        } = err
        else {
            panic!("a buffer between the futures: {err:?}");
        };
        assert_eq!(quota_bytes, quota as u64);
        assert_eq!(needed_bytes, buffer_block);
        assert_eq!(free_bytes, heap - kept.len() as u64 * future_block);
        assert_eq!(largest_free_block, future_block);
        assert!(
            err.to_string().starts_with("client heap fragmented"),
            "{err}"
        );
        wait_until("the heap's figures show it fragmented", || {
            let s = slot(&runtime, index);
            s.free_bytes == free_bytes && s.largest_servable_block == future_block
        });
        let status = tandem_runtime::status::read_status(&name).expect("status");
        let line = status
            .clients
            .iter()
            .find(|c| c.slot == index)
            .expect("the client's line");
        assert_eq!(
            (line.state.as_str(), line.heap_bytes),
            ("attached", quota as u64)
        );
        assert_eq!(line.futures, kept.len() as u64);
        assert_eq!(line.largest_request, future_block - 16);
        drop(kept);
        wait_until("the heap's figures show it free", all_free);
    }
}

#[test]
fn detach_frees_an_idle_slot_at_once_and_a_busy_one_after_its_tasks() {
    let (runtime, gate, name) = start(config("detach", 1, 1, 64 << 10));
    let _open = OpenOnDrop(Arc::clone(&gate));
    let stop = AtomicU32::new(0);
    let client = Client::attach(&name).expect("attach");
    assert_eq!(
        client.call(Route::lane(0), &math::Add { a: 1, b: 1 }, &stop, None),
        Ok(2)
    );
    drop(client);
    assert_eq!(slot(&runtime, 0).state, ClientState::Free);

    let client = Client::attach(&name).expect("attach again at once");
    let pending: Vec<_> = (0..2)
        .map(|v| client.submit(Route::lane(0), &Gate { v }).expect("submit"))
        .collect();
    wait_until("the worker holds a gate task", || {
        gate.entered.load(Ordering::SeqCst) == 1
    });
    // Dropped uncompleted: their futures stay allocated (a worker will
    // write them), so the detach cannot free the slot.
    drop(pending);
    drop(client);
    let detached = slot(&runtime, 0);
    assert!(
        matches!(
            detached.state,
            ClientState::Detaching | ClientState::Reclaiming
        ),
        "{detached:?}"
    );
    assert_eq!(detached.futures, 2);
    assert!(matches!(
        Client::attach(&name),
        Err(RuntimeError::TooManyClients { max: 1 })
    ));
    gate.open(u64::MAX);
    wait_until("the detached slot is free", || {
        slot(&runtime, 0).state == ClientState::Free
    });
    let client = Client::attach(&name).expect("attach after the tasks finished");
    assert_eq!(
        client.call(Route::lane(0), &Gate { v: 3 }, &stop, None),
        Ok(3)
    );
}

#[test]
fn concurrent_attaches_never_share_a_slot() {
    const SLOTS: u32 = 4;
    let (runtime, gate, name) = start(config("claim", 1, SLOTS, 16 << 10));
    let _open = OpenOnDrop(gate);
    let held: Vec<AtomicBool> = (0..SLOTS).map(|_| AtomicBool::new(false)).collect();
    let attached = AtomicU64::new(0);
    let refused = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..100 {
                    match Client::attach(&name) {
                        Ok(client) => {
                            let slot = client.slot() as usize;
                            assert!(
                                !held[slot].swap(true, Ordering::SeqCst),
                                "slot {slot} twice"
                            );
                            attached.fetch_add(1, Ordering::Relaxed);
                            held[slot].store(false, Ordering::SeqCst);
                            drop(client);
                        }
                        Err(RuntimeError::TooManyClients { max }) => {
                            assert_eq!(max, SLOTS);
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("attach: {e}"),
                    }
                }
            });
        }
    });
    assert_eq!(
        attached.load(Ordering::Relaxed) + refused.load(Ordering::Relaxed),
        800
    );
    assert!(attached.load(Ordering::Relaxed) > 0);
    let table = runtime.cpu_segment().clients().expect("table");
    assert!(table.attached().is_empty(), "{:?}", table.attached());
}

#[test]
fn client_settings_are_validated() {
    let invalid = |config: Config| match config.validate() {
        Err(ConfigError::Invalid { field, why }) => (field, why),
        other => panic!("{other:?}"),
    };
    let base = config("validate", 1, 2, 64 << 10);
    assert_eq!(
        invalid(Config {
            max_clients: 0,
            ..base.clone()
        })
        .0,
        "max_clients"
    );
    assert_eq!(
        invalid(Config {
            client_heap_bytes: 20000,
            ..base.clone()
        })
        .0,
        "client_heap_bytes"
    );
    let (field, why) = invalid(Config {
        copy_space: 64 << 10,
        client_heap_bytes: 64 << 10,
        ..base.clone()
    });
    assert_eq!(field, "client_heap_bytes");
    assert!(why.contains("cannot hold a future"), "{why}");
    let (field, why) = invalid(Config {
        max_clients: 64,
        ..base.clone()
    });
    assert_eq!(field, "cpu_segment_size");
    assert!(why.contains("64 client heaps"), "{why}");
    // The defaults fit the default segment, and round-trip through TOML.
    Config::default().validate().expect("defaults");
    let text = base.to_toml();
    assert_eq!(Config::from_toml(&text).expect("parse"), base);
}
