//! Kernels of client processes submitting to a runtime in another process
//! through device queues of their own ([`Client::device_queues`]), both
//! sides: the `client_queues_child` binary is the runtime's process and the
//! clients' ([`child_main`]); the parent functions below are the tests'
//! bodies, generic over the backend (`tests/client_queues.rs`).
//!
//! Child command lines (backend first, as `ipc_child`'s):
//! * `<backend> runtime <segment> <device queues a client>`: serves a runtime
//!   on device 0 with the built-in pools, prints `ready`, and stops when its
//!   stdin closes.
//! * `<backend> echo <segment> <blocks> <threads> <tasks>`: attaches, runs
//!   the echo (add) and no-op kernels on device queues of its own, to the
//!   runtime's workers and to a GPU service of its own on those queues,
//!   checks every answer, prints `ok`.
//! * `<backend> hold <segment>`: attaches, starts a GPU service on its
//!   queues, prints `running <its segment>` and runs an echo kernel that
//!   never ends by itself: killed (the client killed mid-kernel, its
//!   service running), or stopped when the runtime dies, then it prints
//!   `stopped <threads stopped> <the client's error>`.

use std::path::Path;
use std::time::{Duration, Instant};

use tandem_hal::GpuApi;
use tandem_runtime::kernels::{EchoLaunch, EchoPriority, EchoRoute, NoopLaunch, RuntimeKernels};
use tandem_runtime::{
    math, Client, Config, DeviceQueues, DeviceSelection, GpuService, Registry, Runtime,
    RuntimeError,
};

use crate::ipc::Child;

/// Printed by the runtime child once it serves.
pub const CHILD_READY: &str = "ready";
/// Printed by an echo child whose every answer was right.
pub const CHILD_OK: &str = "ok";
/// `rt_status::stopped` (tandem/runtime/context.h).
const RT_STOPPED: u32 = 7;
/// How long the parent waits for any step of a child (a CUDA child may
/// compile kernels with NVRTC first).
const STEP: Duration = Duration::from_secs(120);

/// The runtime the tests run: two workers, two lanes on every device, and
/// `device_queues` device segments a client.
pub fn runtime_config(segment: &str, device_queues: u32) -> Config {
    Config {
        workers: 2,
        queue_depth: 64,
        lanes: 2,
        gpu_lanes: 2,
        gpu_segment_size: 8 << 20,
        cpu_segment_size: 2 << 20,
        devices: DeviceSelection::Only(vec![0]),
        cpu_segment_name: Some(segment.to_owned()),
        client_device_queues: device_queues,
        client_device_segment_size: 4 << 20,
        ..Config::default()
    }
}

fn add_launch(blocks: u32, threads: u32, tasks: u64, route: EchoRoute) -> EchoLaunch {
    EchoLaunch {
        blocks,
        threads,
        tasks_per_thread: tasks,
        method: math::ADD,
        priority: EchoPriority::Alternate,
        route,
        spin_budget: 1 << 40,
    }
}

/// The child's side (module docs).
pub fn child_main<A: GpuApi>(args: &[String]) -> Result<(), String> {
    let arg = |i: usize| args.get(i).cloned().ok_or(format!("argument {i} missing"));
    let number = |i: usize| -> Result<u64, String> {
        arg(i)?.parse().map_err(|e| format!("argument {i}: {e}"))
    };
    let api = A::load().map_err(|e| e.to_string())?;
    let text = |e: RuntimeError| e.to_string();
    match arg(0)?.as_str() {
        "runtime" => {
            let config = runtime_config(&arg(1)?, number(2)? as u32);
            let runtime =
                Runtime::start_with(api, config, Registry::with_builtins()).map_err(text)?;
            println!("{CHILD_READY}");
            // Serves until the parent closes stdin (or kills it).
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                line.clear();
            }
            runtime.shutdown().map_err(text)
        }
        "echo" => {
            let client = Client::attach(&arg(1)?).map_err(text)?;
            let queues = client.device_queues(&api, 0).map_err(text)?;
            let (blocks, threads, tasks) = (number(2)? as u32, number(3)? as u32, number(4)?);
            echo_and_check(&queues, blocks, threads, tasks)?;
            println!("{CHILD_OK}");
            Ok(())
        }
        "hold" => {
            let client = Client::attach(&arg(1)?).map_err(text)?;
            let queues = client.device_queues(&api, 0).map_err(text)?;
            // Loaded first: see GpuService on driver calls while it runs.
            let mut kernels = RuntimeKernels::load(&queues).map_err(text)?;
            let _service = GpuService::start(&queues, 1, 4).map_err(text)?;
            println!("running {}", queues.segment().name().unwrap_or_default());
            let launch = add_launch(2, 4, 1 << 40, EchoRoute::CpuWorkers);
            let outcome = kernels.echo(&launch).map_err(text)?;
            let stopped = outcome.status.iter().filter(|&&s| s == RT_STOPPED).count();
            let error = match queues.check_runtime() {
                Ok(()) => "none".to_owned(),
                Err(RuntimeError::RuntimeDead { .. }) => "RuntimeDead".to_owned(),
                Err(e) => e.to_string(),
            };
            println!("stopped {stopped} {error}");
            Ok(())
        }
        other => Err(format!("unknown mode {other:?}")),
    }
}

/// Runs the echo (add) and no-op kernels on `queues` and checks every
/// thread's answers: to the runtime's CPU workers, then to a GPU service of
/// this process's own on the same queues, which serves this process's
/// host tasks too.
fn echo_and_check<A: GpuApi>(
    queues: &DeviceQueues<A>,
    blocks: u32,
    threads: u32,
    tasks: u64,
) -> Result<(), String> {
    let text = |e: RuntimeError| e.to_string();
    let mut kernels = RuntimeKernels::load(queues).map_err(text)?;
    let outcome = kernels
        .echo(&add_launch(blocks, threads, tasks, EchoRoute::CpuWorkers))
        .map_err(text)?;
    outcome
        .check_added(tasks)
        .map_err(|e| format!("to the workers: {e}"))?;
    let noop = kernels
        .noop_tasks(&NoopLaunch {
            route: EchoRoute::CpuWorkers,
            blocks,
            threads,
            tasks_per_thread: tasks,
            spin_budget: 1 << 40,
        })
        .map_err(text)?;
    if noop.failed_threads() != 0 || noop.results.iter().any(|&n| n != tasks) {
        return Err(format!("no-op kernel: {:?}", &noop.status[..4]));
    }
    let service = GpuService::start(queues, 1, 4).map_err(text)?;
    let outcome = kernels
        .echo(&add_launch(blocks, threads, tasks, EchoRoute::GpuService))
        .map_err(text)?;
    outcome
        .check_added(tasks)
        .map_err(|e| format!("to the GPU service: {e}"))?;
    let stop = std::sync::atomic::AtomicU32::new(0);
    let mut pending = queues
        .submit_to_gpu(&math::Add { a: 40, b: 2 }, None)
        .map_err(|e| e.to_string())?;
    let sum = pending.wait(&stop, None).map_err(|e| e.to_string())?;
    if sum != 42 {
        return Err(format!("a host task to the GPU service: {sum}"));
    }
    let served = service.stop().map_err(text)?.served;
    // The kernel's tasks and ours: the runtime's workers ran none of them.
    let want = u64::from(blocks * threads) * tasks + 1;
    if served != want {
        return Err(format!("the GPU service served {served} tasks, not {want}"));
    }
    Ok(())
}

/// A runtime child serving `segment` (device queues a client:
/// `device_queues`), ready.
fn start_runtime<A: GpuApi>(exe: &Path, segment: &str, device_queues: u32) -> Child {
    let child = Child::spawn(
        exe,
        &[
            A::BACKEND.to_string(),
            "runtime".into(),
            segment.into(),
            device_queues.to_string(),
        ],
    )
    .expect("spawning the runtime child");
    let line = child.next_line(STEP).expect("runtime child's first line");
    assert_eq!(line, CHILD_READY);
    child
}

fn spawn_client<A: GpuApi>(exe: &Path, mode: &str, segment: &str, rest: &[&str]) -> Child {
    let mut args = vec![A::BACKEND.to_string(), mode.into(), segment.into()];
    args.extend(rest.iter().map(|s| s.to_string()));
    Child::spawn(exe, &args).expect("spawning a client child")
}

/// A client child whose kernel holds its device queues, running: the child
/// and its queues' segment.
fn holding_client<A: GpuApi>(exe: &Path, segment: &str) -> (Child, String) {
    let held = spawn_client::<A>(exe, "hold", segment, &[]);
    let line = held.next_line(STEP).expect("hold child's line");
    let name = line
        .strip_prefix("running ")
        .expect("running <segment>")
        .to_owned();
    (held, name)
}

/// A segment name of this test process's own, for `test` on backend `A`:
/// the backends' runs of one test may overlap.
fn segment_name<A: GpuApi>(test: &str) -> String {
    format!("tandem-cq-{}-{}-{test}", std::process::id(), A::BACKEND)
}

/// Whether `/dev/shm/<name>` exists.
fn in_shm(name: &str) -> bool {
    Path::new("/dev/shm").join(name).exists()
}

/// Waits up to `timeout` for `done`.
fn eventually(timeout: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

/// Two client processes' kernels at once against one runtime (its own
/// process), every answer right; this process's kernels on queues of its
/// own too, which `tandem status` lists with their tasks.
pub fn two_clients_kernels_at_once<A: GpuApi>(api: &A, exe: &Path) {
    let segment = segment_name::<A>("two");
    let mut runtime = start_runtime::<A>(exe, &segment, 2);
    let mut clients: Vec<Child> = (0..2)
        .map(|_| spawn_client::<A>(exe, "echo", &segment, &["4", "8", "32"]))
        .collect();
    let client = Client::attach(&segment).expect("attach");
    let queues = client.device_queues(api, 0).expect("device queues");
    echo_and_check(&queues, 2, 4, 16).expect("this process's kernels");
    for child in &mut clients {
        assert_eq!(child.next_line(STEP).as_deref(), Ok(CHILD_OK));
        assert!(child.wait(STEP).expect("client exit").success());
    }
    // This process's device queues in the runtime's status, with the
    // records its kernels sent (echo and no-op: 2 x 8 threads x 16).
    let listed = eventually(Duration::from_secs(5), || {
        let status = tandem_runtime::status::read_status(&segment).expect("status");
        status.clients.iter().any(|c| {
            c.pid == std::process::id()
                && c.device_queues.iter().any(|q| {
                    q.state == "serving" && q.lanes == 2 && q.tasks >= 2 * 8 * 16 && q.device == 0
                })
        })
    });
    assert!(listed, "status lists this client's device queues and tasks");
    let name = queues.segment().name().expect("named").to_owned();
    drop(queues);
    assert!(!in_shm(&name), "{name} removed with its queues");
    drop(client);
    assert!(runtime.wait(STEP).expect("runtime exit").success());
    assert!(!in_shm(&segment));
}

/// A client killed (SIGKILL) while its kernel waits: the runtime lives,
/// stops serving its segment and removes it; another client goes on.
pub fn client_killed_mid_kernel<A: GpuApi>(api: &A, exe: &Path) {
    let segment = segment_name::<A>("killed");
    let mut runtime = start_runtime::<A>(exe, &segment, 2);
    let (mut held, name) = holding_client::<A>(exe, &segment);
    assert!(in_shm(&name));
    // Its kernel is sending tasks.
    std::thread::sleep(Duration::from_millis(300));
    held.kill();
    assert!(
        eventually(Duration::from_secs(10), || !in_shm(&name)),
        "the runtime removed the dead client's segment {name}"
    );
    let client = Client::attach(&segment).expect("attach after the kill");
    let queues = client.device_queues(api, 0).expect("device queues");
    echo_and_check(&queues, 2, 4, 16).expect("another client goes on");
    drop(queues);
    drop(client);
    assert!(runtime.wait(STEP).expect("runtime exit").success());
    assert!(!in_shm(&segment));
}

/// The runtime killed (SIGKILL) under a client's waiting kernel: the
/// client's library raises the stop word, the kernel's threads return
/// stopped, the client gets `RuntimeDead`, and nothing is left in /dev/shm.
pub fn runtime_killed_under_client_kernels<A: GpuApi>(exe: &Path) {
    let segment = segment_name::<A>("runtime-killed");
    let mut runtime = start_runtime::<A>(exe, &segment, 2);
    let (mut held, name) = holding_client::<A>(exe, &segment);
    std::thread::sleep(Duration::from_millis(300));
    runtime.kill();
    let line = held
        .next_line(Duration::from_secs(30))
        .expect("the client's kernel ended");
    assert_eq!(line, "stopped 8 RuntimeDead");
    assert!(held.wait(STEP).expect("client exit").success());
    assert!(!in_shm(&name), "the client removed {name}");
    assert!(
        !in_shm(&segment),
        "the client removed the dead runtime's {segment}"
    );
}

/// One client at its quota (device queues, then its segment's heap) gets
/// typed errors; another client's kernels are unaffected.
pub fn quota_of_one_client_leaves_the_other_alone<A: GpuApi>(api: &A, exe: &Path) {
    let segment = segment_name::<A>("quota");
    let mut runtime = start_runtime::<A>(exe, &segment, 1);
    let client = Client::attach(&segment).expect("attach");
    let queues = client.device_queues(api, 0).expect("device queues");
    match client.device_queues(api, 0) {
        Err(RuntimeError::TooManyDeviceQueues { max: 1 }) => {}
        Err(e) => panic!("a second device queue: {e}"),
        Ok(_) => panic!("a second device queue beyond the quota of 1"),
    }
    let mut other = spawn_client::<A>(exe, "echo", &segment, &["2", "8", "32"]);
    // Its segment's heap used up: a typed error, nothing else.
    let mut held = Vec::new();
    let refused = loop {
        match queues.allocate_shared(256 << 10) {
            Ok(buffer) => held.push(buffer),
            Err(e) => break e,
        }
        assert!(held.len() < 64, "a 4 MiB segment's heap holds fewer");
    };
    assert!(
        matches!(refused, tandem_runtime::TaskError::OutOfMemory(_)),
        "{refused:?}"
    );
    assert_eq!(other.next_line(STEP).as_deref(), Ok(CHILD_OK));
    assert!(other.wait(STEP).expect("client exit").success());
    drop(held);
    drop(queues);
    drop(client);
    assert!(runtime.wait(STEP).expect("runtime exit").success());
}

/// Device queues on a device the runtime does not serve: refused with a
/// typed error, and the entry is free again for a request it serves. On
/// the CPU device, whose client side may have two devices while the
/// runtime serves one.
pub fn a_device_the_runtime_does_not_serve_is_refused(exe: &Path) {
    let segment = segment_name::<tandem_hal::HostApi>("refused");
    let mut runtime = start_runtime::<tandem_hal::HostApi>(exe, &segment, 1);
    let api = tandem_hal::HostApi::with_devices(2);
    let client = Client::attach(&segment).expect("attach");
    match client.device_queues(&api, 1) {
        Err(RuntimeError::DeviceQueuesRefused { device: 1, .. }) => {}
        Err(e) => panic!("device queues on device 1: {e}"),
        Ok(_) => panic!("device queues on a device the runtime does not serve"),
    }
    let queues = client.device_queues(&api, 0).expect("device 0's queues");
    echo_and_check(&queues, 1, 4, 8).expect("kernels on device 0");
    drop(queues);
    drop(client);
    assert!(runtime.wait(STEP).expect("runtime exit").success());
}
