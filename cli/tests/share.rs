//! The share daemon end to end: a daemon in a child process (`tandem share
//! serve`), writers and readers in this process and in others, kernels
//! filling and reading shared buffers, and the failures: a killed client, a
//! killed daemon, another user, garbage on the socket, bad ids and sizes.
//!
//! Other processes are this test binary run again with [`ROLE_ENV`] naming
//! what to do (see [`child_role`]); they talk on stdout lines. Every
//! behaviour runs on the host backend (memfd buffers) and, with the `cuda`
//! feature, on CUDA (skipped without a device unless `TANDEM_REQUIRE_GPU=1`).

mod common;

use std::io::{BufRead, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use tandem_hal::{
    DeviceMemory, EventFlags, GpuApi, GpuDevice, HostMemory, KernelArg, LaunchConfig,
};
use tandem_share::{Access, HostMirror, ObjectId, ShareClient, ShareError};
use tandem_tests::support::{fill_u32, kernels, launch, read_u32s};

/// Set in a child: which role it plays, then its arguments in [`ARGS_ENV`].
const ROLE_ENV: &str = "TANDEM_SHARE_TEST_ROLE";
const ARGS_ENV: &str = "TANDEM_SHARE_TEST_ARGS";
/// How long any step of a child may take (first CUDA use compiles kernels).
const STEP: Duration = Duration::from_secs(120);
/// When a gated producer opens its gate unasked (see its role).
const GATE_FALLBACK: Duration = Duration::from_secs(5);
const WORDS: usize = 1 << 16;

fn daemon<A: GpuApi>(api: A) -> ShareClient<A> {
    ShareClient::spawn_daemon_with(api, &common::tandem_exe()).expect("starting the share daemon")
}

/// Fills `buffer` with `value` by kernel on `stream` (not synchronised: the
/// seal's event orders readers after it).
fn fill<A: GpuApi>(
    device: &A::Device,
    buffer: &impl DeviceMemory<Api = A>,
    value: u32,
    stream: &<A::Device as GpuDevice>::Stream,
) {
    let module = kernels(device);
    let target = (buffer.device_ptr(), buffer.len() / 4);
    fill_u32(
        device,
        &module,
        LaunchConfig::linear(64, 256),
        target,
        value,
        stream,
    );
}

/// Blocks of [`Summer::launch`]'s kernel.
const SUM_BLOCKS: u32 = 32;

/// What summing by kernel needs, made ahead: the module and the block sums.
struct Summer<A: GpuApi> {
    module: <A::Device as GpuDevice>::Module,
    sums: <A::Device as GpuDevice>::DeviceBuffer,
}

impl<A: GpuApi> Summer<A> {
    fn new(device: &A::Device) -> Self {
        Self {
            module: kernels(device),
            sums: device.alloc_device(SUM_BLOCKS as usize * 4).unwrap(),
        }
    }

    /// Queues a sum of `buffer`'s words on `stream` (after what the stream
    /// waits for); [`read_sum`] adds up its block sums.
    fn launch(
        &self,
        device: &A::Device,
        buffer: &impl DeviceMemory<Api = A>,
        stream: &<A::Device as GpuDevice>::Stream,
    ) {
        launch(
            device,
            &self.module,
            "tandem_block_sum_u32",
            LaunchConfig::linear(SUM_BLOCKS, 256),
            &[
                KernelArg::Ptr(buffer.device_ptr()),
                KernelArg::Ptr(self.sums.device_ptr()),
                KernelArg::U64((buffer.len() / 4) as u64),
            ],
            stream,
        );
    }
}

/// What [`Summer::launch`] summed, once `stream` is done.
fn read_sum<A: GpuApi>(
    device: &A::Device,
    sums: &<A::Device as GpuDevice>::DeviceBuffer,
    stream: &<A::Device as GpuDevice>::Stream,
) -> u64 {
    device.synchronize_stream(stream).unwrap();
    read_u32s(device, sums, SUM_BLOCKS as usize)
        .iter()
        .map(|&s| u64::from(s))
        .sum()
}

/// Sums `buffer`'s words by kernel on `stream`, read back on the host.
fn kernel_sum<A: GpuApi>(
    device: &A::Device,
    buffer: &impl DeviceMemory<Api = A>,
    stream: &<A::Device as GpuDevice>::Stream,
) -> u64 {
    let summer = Summer::new(device);
    summer.launch(device, buffer, stream);
    read_sum::<A>(device, &summer.sums, stream)
}

// --- child processes ----------------------------------------------------------

/// A child of this test binary playing `role`, its stdout as lines; killed
/// and reaped when dropped.
struct RoleChild {
    child: Child,
    lines: Receiver<String>,
}

impl RoleChild {
    fn spawn<A: GpuApi>(role: &str, args: &[String]) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "share_child_role",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_ENV, format!("{}:{role}", A::BACKEND))
            // Host children see two devices, like the daemon of the tests
            // of two devices; the others use device 0 alone.
            .env(tandem_hal::host::DEVICES_ENV, "2")
            .env(ARGS_ENV, args.join(" "))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("re-running the test binary");
        let lines = tandem_tests::support::lines(&mut child);
        Self { child, lines }
    }

    /// The next thing the child [`say`]s (libtest may print on the same line).
    fn expect_line(&self, prefix: &str) -> String {
        let deadline = Instant::now() + STEP;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("child said nothing starting {prefix:?}"));
            if let Some((_, rest)) = line.split_once(SAID) {
                assert!(
                    rest.starts_with(prefix),
                    "child said {rest:?}, expected {prefix:?}"
                );
                return rest[prefix.len()..].trim().to_string();
            }
        }
    }

    /// Writes a line to the child (which [`await_parent`]s it).
    fn tell(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("the child's stdin");
        writeln!(stdin, "{line}").expect("telling the child");
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn succeeds(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "child failed: {status}");
    }
}

impl Drop for RoleChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Marks what a child says to the parent on its stdout.
const SAID: &str = "@share-child@ ";

/// Says a line to the parent.
fn say(line: impl std::fmt::Display) {
    println!("{SAID}{line}");
}

/// The parent's lines, one message each, as they come (disconnected when
/// the parent closes stdin).
fn parent_lines() -> std::sync::mpsc::Receiver<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for _ in std::io::stdin().lines() {
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    rx
}

/// Blocks until the parent writes a line (or closes stdin).
fn await_parent() {
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
}

/// Not a test: the entry point of the child processes above. Without
/// [`ROLE_ENV`] (a normal test run) it does nothing.
#[test]
fn share_child_role() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let args: Vec<String> = std::env::var(ARGS_ENV)
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    let (backend, role) = role.split_once(':').unwrap();
    match backend {
        "host" => child_role::<tandem_hal::HostApi>(role, &args),
        #[cfg(feature = "cuda")]
        "cuda" => child_role::<tandem_hal_cuda::CudaApi>(role, &args),
        other => panic!("no backend {other} in this build"),
    }
}

fn child_role<A: GpuApi>(role: &str, args: &[String]) {
    let socket = std::path::Path::new(&args[0]);
    let client = ShareClient::connect(A::load().unwrap(), socket).expect("connecting");
    let device = client.device(0).unwrap();
    let stream = device.create_stream().unwrap();
    match role {
        // Creates a buffer, fills it by kernel, seals without waiting, and
        // exits: the sealed buffer outlives its writer.
        "producer" => {
            let value: u32 = args[1].parse().unwrap();
            let (id, buffer) = client.create_buffer(0, WORDS * 4).unwrap();
            fill::<A>(&device, &buffer, value, &stream);
            let sealed = client.seal(buffer, &stream).unwrap();
            say(format!("sealed {}", id.0));
            device.synchronize_stream(&stream).unwrap();
            drop(sealed);
        }
        // Like "producer", but its fill waits for a gate the parent opens
        // (a line on stdin), or [`GATE_FALLBACK`] after "sealed" should the
        // parent be held up, so the seal's work is still running when
        // readers open the buffer.
        "gated-producer" => {
            let value: u32 = args[1].parse().unwrap();
            let gate = device.alloc_pinned_mapped(4).unwrap();
            // SAFETY: `gate` is 4 bytes of mapped host memory, 4-aligned
            // (allocations are page-aligned), alive while the atomic is used;
            // the kernel reads it with acquire loads.
            let open = unsafe { &*gate.host_ptr().cast::<AtomicU32>() };
            open.store(0, Ordering::Relaxed);
            let (id, buffer) = client.create_buffer(0, WORDS * 4).unwrap();
            let module = kernels(&*device);
            launch(
                &*device,
                &module,
                "tandem_gated_fill_u32",
                LaunchConfig::linear(4, 64),
                &[
                    KernelArg::Ptr(gate.device_ptr()),
                    KernelArg::Ptr(buffer.device_ptr()),
                    KernelArg::U64(WORDS as u64),
                    KernelArg::U32(value),
                ],
                &stream,
            );
            let sealed = client.seal(buffer, &stream).unwrap();
            let parent = parent_lines();
            say(format!("sealed {}", id.0));
            let _ = parent.recv_timeout(GATE_FALLBACK);
            // Release: orders nothing the kernel reads but the flag itself.
            open.store(1, Ordering::Release);
            device.synchronize_stream(&stream).unwrap();
            say("filled");
            let _ = parent.recv();
            drop(sealed);
        }
        // Opens a buffer and sums it by kernel.
        "consumer" => {
            let id = ObjectId(args[1].parse().unwrap());
            let buffer = client.get_buffer(id, &stream).unwrap();
            say(format!(
                "sum {}",
                kernel_sum::<A>(&device, &buffer, &stream)
            ));
        }
        // Opens a buffer on device 1 (its memory is device 0's), says how it
        // is reached ("none": device 1 cannot reach it), sums it by kernel
        // there, and sums a copy of it made into device 1's memory.
        "peer-consumer" => {
            let id = ObjectId(args[1].parse().unwrap());
            let second = client.device(1).unwrap();
            let stream = second.create_stream().unwrap();
            let buffer = match client.get_buffer_on(id, 1, &stream, STEP) {
                Ok(buffer) => buffer,
                Err(ShareError::NoPeerAccess { .. }) => return say("access none"),
                Err(e) => panic!("opening on device 1: {e}"),
            };
            say(format!("access {:?}", buffer.access()));
            say(format!(
                "sum {}",
                kernel_sum::<A>(&second, &buffer, &stream)
            ));
            let copy = second.alloc_device(buffer.len()).unwrap();
            buffer.copy_to(&second, &copy, 0).unwrap();
            say(format!(
                "copy sum {}",
                kernel_sum::<A>(&second, &copy, &stream)
            ));
        }
        // Holds buffers (two sealed, one opened twice, one unsealed) until killed.
        "holder" => {
            let (a, first) = client.create_buffer(0, 1 << 20).unwrap();
            let (_, second) = client.create_buffer(0, 1 << 20).unwrap();
            let (_, unsealed) = client.create_buffer(0, 1 << 20).unwrap();
            let first = client.seal(first, &stream).unwrap();
            let second = client.seal(second, &stream).unwrap();
            let again = client.get_buffer(a, &stream).unwrap();
            assert!(again.same_mapping(&first));
            say("holding");
            await_parent();
            drop((first, second, unsealed, again));
        }
        other => panic!("no role {other}"),
    }
}

// --- behaviours ---------------------------------------------------------------

/// A buffer its creator deleted comes back to that creator's next create of
/// the same device and length, mapped where it was (nothing allocated,
/// exported or imported); another client's create, or one of another
/// length, gets fresh memory, and what is kept goes with its client.
fn freed_buffers_come_back_to_their_creator<A: GpuApi>(api: A) {
    let client = daemon(api);
    let device = client.device(0).unwrap();
    let stream = device.create_stream().unwrap();
    let (first, buffer) = client.create_buffer(0, WORDS * 4).unwrap();
    let address = buffer.device_ptr();
    fill::<A>(&device, &buffer, 5, &stream);
    let sealed = client.seal(buffer, &stream).unwrap();
    client.delete(first).unwrap();
    drop(sealed);
    let status = client.status().unwrap();
    assert_eq!((status.objects, status.kept), (0, 1), "{status:?}");

    let other = ShareClient::connect(A::load().unwrap(), client.socket_path()).unwrap();
    let (_, theirs) = other.create_buffer(0, WORDS * 4).unwrap();
    assert_eq!(
        client.status().unwrap().kept,
        1,
        "not handed to another client"
    );
    let (_, longer) = client.create_buffer(0, WORDS * 8).unwrap();
    assert_eq!(client.status().unwrap().kept, 1, "not for another length");

    let (second, again) = client.create_buffer(0, WORDS * 4).unwrap();
    assert_ne!(second, first, "a new id");
    assert_eq!(again.device_ptr(), address, "the same mapping, reused");
    assert_eq!(client.status().unwrap().kept, 0);
    fill::<A>(&device, &again, 7, &stream);
    let sealed = client.seal(again, &stream).unwrap();
    let reader = other.get_buffer(second, &stream).unwrap();
    assert_eq!(kernel_sum::<A>(&device, &reader, &stream), 7 * WORDS as u64);
    drop((reader, theirs, other));
    drop((sealed, longer));
    client.delete(second).unwrap();
    // The unsealed `longer` (abandoned) and `second` (deleted, released)
    // are kept for this client until it goes.
    assert!(client.status().unwrap().kept >= 1);
}

/// Create, fill by kernel, seal, open (cached), mirror, stat, delete while
/// mapped, free at the last release.
fn round_trip_in_one_process<A: GpuApi>(api: A) {
    let client = daemon(api);
    let device = client.device(0).unwrap();
    let stream = device.create_stream().unwrap();
    let (id, buffer) = client.create_buffer(0, WORDS * 4).unwrap();
    assert_eq!(buffer.len(), WORDS * 4);
    let info = client.stat(id).unwrap();
    assert!(!info.sealed && info.leases == 1, "{info:?}");
    fill::<A>(&device, &buffer, 3, &stream);
    let sealed = client.seal(buffer, &stream).unwrap();
    let opened = client.get_buffer(id, &stream).unwrap();
    assert!(
        opened.same_mapping(&sealed),
        "a second open shares the mapping"
    );
    assert_eq!(client.stat(id).unwrap().leases, 1, "one lease per mapping");
    assert_eq!(kernel_sum::<A>(&device, &opened, &stream), 3 * WORDS as u64);
    let mirror = HostMirror::new(&opened, true).unwrap();
    assert!(mirror.chunks_exact(4).all(|w| w == 3u32.to_le_bytes()));
    drop(mirror);

    client.delete(id).unwrap();
    let info = client.stat(id).unwrap();
    assert!(
        info.deleted && info.leases == 1,
        "deleted, still mapped: {info:?}"
    );
    assert!(matches!(
        client.get_buffer_within(id, &stream, Duration::ZERO),
        Err(ShareError::Deleted(_))
    ));
    assert!(
        matches!(client.delete(id), Err(ShareError::Deleted(_))),
        "double delete"
    );
    // Still mapped, still readable.
    assert_eq!(kernel_sum::<A>(&device, &sealed, &stream), 3 * WORDS as u64);
    drop((sealed, opened));
    assert!(
        matches!(client.stat(id), Err(ShareError::UnknownId(_))),
        "freed at the last release"
    );
    let status = client.status().unwrap();
    assert_eq!((status.objects, status.bytes, status.leases), (0, 0, 0));
}

/// A writer's mirror is copied back on drop; a reader's mirror sees it.
fn mirrors_round_trip<A: GpuApi>(api: A) {
    let client = daemon(api);
    let stream = client.device(0).unwrap().create_stream().unwrap();
    let pattern: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let (id, mut buffer) = client.create_buffer(0, pattern.len()).unwrap();
    {
        let mut mirror = HostMirror::new(&mut buffer, false).unwrap();
        assert!(mirror.iter().all(|&b| b == 0), "copy_in false: zeroes");
        mirror.copy_from_slice(&pattern);
    }
    // An explicit finish reports errors; here it writes the same bytes.
    let mut mirror = HostMirror::new(&mut buffer, true).unwrap();
    assert_eq!(&mirror[..], &pattern[..]);
    mirror[0] = pattern[0];
    mirror.finish().unwrap();
    drop(client.seal(buffer, &stream).unwrap());
    let reader = client.get_buffer(id, &stream).unwrap();
    assert_eq!(&HostMirror::new(&reader, true).unwrap()[..], &pattern[..]);
}

/// A producer process fills and seals, exits; consumer processes (and this
/// one) read it by kernel: the seal's event orders them after its kernel.
fn producer_and_consumer_processes<A: GpuApi>(api: A) {
    let client = daemon(api);
    let socket = client.socket_path().display().to_string();
    let producer = RoleChild::spawn::<A>("producer", &[socket.clone(), "9".into()]);
    let id = producer.expect_line("sealed ");
    producer.succeeds();
    for _ in 0..2 {
        let consumer = RoleChild::spawn::<A>("consumer", &[socket.clone(), id.clone()]);
        assert_eq!(consumer.expect_line("sum "), (9 * WORDS as u64).to_string());
        consumer.succeeds();
    }
    let id = ObjectId(id.parse().unwrap());
    let stream = client.device(0).unwrap().create_stream().unwrap();
    let buffer = client.get_buffer(id, &stream).unwrap();
    let mirror = HostMirror::new(&buffer, true).unwrap();
    assert!(mirror.chunks_exact(4).all(|w| w == 9u32.to_le_bytes()));
    assert_eq!(
        client.stat(id).unwrap().leases,
        1,
        "the consumers' leases went with them"
    );
}

/// A reader that opens a buffer whose seal's work still runs in another
/// process: its kernel waits for that work (the seal's interprocess event),
/// then reads the finished data.
fn readers_wait_for_the_writers_work<A: GpuApi>(api: A) {
    let client = daemon(api);
    let socket = client.socket_path().display().to_string();
    // Everything but the open and the launch comes first: on CUDA, some
    // step of this process waited for the writer's running kernel.
    let device = client.device(0).unwrap();
    let stream = device.create_stream().unwrap();
    let summer = Summer::<A>::new(&device);
    let after = device.create_event(EventFlags::default()).unwrap();
    let mut producer = RoleChild::spawn::<A>("gated-producer", &[socket, "5".into()]);
    let id = ObjectId(producer.expect_line("sealed ").parse().unwrap());
    let sealed = Instant::now();
    let buffer = client.get_buffer(id, &stream).unwrap();
    let opened = sealed.elapsed();
    summer.launch(&device, &buffer, &stream);
    let launched = sealed.elapsed();
    device.record_event(&after, &stream).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // The gate is shut until we say go, or GATE_FALLBACK after "sealed".
    if sealed.elapsed() < GATE_FALLBACK - Duration::from_millis(500) {
        assert!(
            !device.query_event(&after).unwrap(),
            "the reader's kernel ran before the writer's work was done"
        );
    } else {
        eprintln!(
            "note: after the seal, opened at {opened:?}, launched at {launched:?}, now {:?}: \
             past the gate's fallback, so this process waited for the writer's work and the \
             stream wait was not exercised",
            sealed.elapsed()
        );
    }
    producer.tell("go");
    assert_eq!(
        read_sum::<A>(&device, &summer.sums, &stream),
        5 * WORDS as u64
    );
    producer.expect_line("filled");
    // Now done: a cached open and a new reader need no wait.
    drop(client.get_buffer(id, &stream).unwrap());
    let consumer = RoleChild::spawn::<A>(
        "consumer",
        &[client.socket_path().display().to_string(), id.0.to_string()],
    );
    assert_eq!(consumer.expect_line("sum "), (5 * WORDS as u64).to_string());
    consumer.succeeds();
    producer.succeeds();
}

/// Polls the daemon until `done` holds of its status.
fn settle<A: GpuApi>(
    client: &ShareClient<A>,
    what: &str,
    done: impl Fn(&tandem_share::DaemonStatus) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = client.status().unwrap();
        if done(&status) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {status:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A client killed while holding buffers: its leases go, its unsealed
/// buffer is freed, the sealed ones stay until deleted, and then the
/// daemon holds nothing.
fn killed_client_leases_go<A: GpuApi>(api: A) {
    let client = daemon(api);
    let socket = client.socket_path().display().to_string();
    let mut holder = RoleChild::spawn::<A>("holder", &[socket]);
    holder.expect_line("holding");
    let status = client.status().unwrap();
    assert_eq!((status.objects, status.leases), (3, 3), "{status:?}");
    holder.kill();
    settle(&client, "the killed client's leases", |s| {
        s.leases == 0 && s.objects == 2
    });
    for info in client.list().unwrap() {
        assert!(
            info.sealed,
            "only sealed buffers outlive their writer: {info:?}"
        );
        client.delete(info.id).unwrap();
    }
    let status = client.status().unwrap();
    assert_eq!((status.objects, status.bytes), (0, 0), "{status:?}");
}

/// The daemon killed while this process maps a buffer: calls fail with
/// `DaemonGone`, the mapping stays usable, dropping it is quiet.
fn killed_daemon<A: GpuApi>(api: A) {
    let client = daemon(api);
    let device = client.device(0).unwrap();
    let stream = device.create_stream().unwrap();
    let (id, buffer) = client.create_buffer(0, WORDS * 4).unwrap();
    fill::<A>(&device, &buffer, 5, &stream);
    let buffer = client.seal(buffer, &stream).unwrap();
    device.synchronize_stream(&stream).unwrap();
    assert_eq!(
        // SAFETY: kill(2) on the daemon's pid, a child of this process.
        unsafe { libc::kill(client.daemon_pid() as i32, libc::SIGKILL) },
        0
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.stat(id) {
            Err(ShareError::DaemonGone(_)) => break,
            other => assert!(Instant::now() < deadline, "stat after the kill: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(matches!(
        client.create_buffer(0, 4096),
        Err(ShareError::DaemonGone(_))
    ));
    assert_eq!(
        kernel_sum::<A>(&device, &buffer, &stream),
        5 * WORDS as u64,
        "mapped memory outlives the daemon"
    );
    let (pid, socket) = (client.daemon_pid(), client.socket_path().to_path_buf());
    drop((buffer, device, client));
    // The client that started it removes what the killed daemon left.
    assert!(!socket.exists(), "socket file left behind");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| tandem_process::host_ipc_exporter(name) == Some(pid))
        .collect();
    assert!(left.is_empty(), "segments left in /dev/shm: {left:?}");
}

/// Bad input: zero and impossible sizes, unknown ids, a get before the
/// seal (waits, then `NotSealed`; or is woken by the seal), a seal by
/// another client.
fn bad_requests_are_refused<A: GpuApi>(api: A) {
    let client = daemon(api);
    let stream = client.device(0).unwrap().create_stream().unwrap();
    assert!(matches!(
        client.create_buffer(0, 0),
        Err(ShareError::InvalidSize { bytes: 0 })
    ));
    assert!(matches!(
        client.create_buffer(0, 1 << 60),
        Err(ShareError::InvalidSize { .. })
    ));
    assert!(matches!(
        client.create_buffer(99, 4096),
        Err(ShareError::NoDevice(_))
    ));
    assert!(matches!(
        client.get_buffer(ObjectId(12345), &stream),
        Err(ShareError::UnknownId(_))
    ));
    assert!(matches!(
        client.delete(ObjectId(12345)),
        Err(ShareError::UnknownId(_))
    ));

    let (id, buffer) = client.create_buffer(0, 4096).unwrap();
    let started = Instant::now();
    match client.get_buffer_within(id, &stream, Duration::from_millis(200)) {
        Err(ShareError::NotSealed { waited, .. }) => assert!(waited >= Duration::from_millis(200)),
        other => panic!("get before seal: {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(200));

    // Another client (its own token) cannot seal it.
    let other = ShareClient::connect(A::load().unwrap(), client.socket_path()).unwrap();
    let other_stream = other.device(0).unwrap().create_stream().unwrap();
    let (_, foreign) = other.create_buffer(0, 4096).unwrap();
    drop(foreign); // abandoned unsealed: freed
                   // A reader waiting in another thread is woken by the seal.
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| other.get_buffer(id, &other_stream).map(|b| b.len()));
        std::thread::sleep(Duration::from_millis(100));
        drop(client.seal(buffer, &stream).unwrap());
        assert_eq!(waiter.join().unwrap().unwrap(), 4096);
    });
    assert_eq!(
        client.status().unwrap().objects,
        1,
        "the abandoned buffer was freed"
    );
}

/// Garbage, truncated frames and frames out of order close the connection
/// with an error; the daemon serves on.
fn garbage_closes_the_connection<A: GpuApi>(api: A) {
    use tandem_share::testing::Request;
    use tandem_share::WireBackend;
    let client = daemon(api);
    let socket = client.socket_path().to_path_buf();
    let hello = Request::Hello {
        pid: 1,
        client: 77,
        backend: WireBackend::Inspect,
    }
    .encode();
    let mut status_frame = Request::Status.encode();
    status_frame.truncate(status_frame.len() - 1);
    let mut long = Request::Status.encode();
    long[8..12].copy_from_slice(&(64u32 << 20).to_le_bytes());
    let cases: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        vec![0; 64],
        Request::Status.encode(), // before Hello
        [
            hello.clone(),
            b"TDSH\x01\x00\x99\x99\x00\x00\x00\x00".to_vec(),
        ]
        .concat(),
        [hello.clone(), long].concat(),
        [hello.clone(), status_frame].concat(), // truncated, then closed
        hello[..5].to_vec(),
    ];
    for bytes in cases {
        let mut stream = UnixStream::connect(&socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(&bytes).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply); // an error frame, or nothing
        let status = client.status().expect("the daemon serves on");
        assert_eq!(status.leases, 0);
    }
}

/// Removes a folder when dropped (a panicking test leaves nothing behind).
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The socket is the user's alone: mode 0600 in a 0700 directory; and a
/// process of another user is refused even when the file's mode lets it
/// connect (`SO_PEERCRED`). Needs root to drop privileges in a child.
fn other_users_are_refused<A: GpuApi>(api: A) {
    let client = daemon(api);
    let socket = client.socket_path().to_path_buf();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(socket.parent().unwrap()), 0o700);
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        println!("other_users_are_refused: skipped the uid part: needs root to drop privileges");
        return;
    }
    // The build's binary may sit where only its owner can reach it (a
    // fresh clone in a 0700 temporary folder): the intruder runs a copy, one
    // per call (each backend's test runs this at once, in one process).
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let copy = std::env::temp_dir().join(format!(
        "tandem-share-test-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&copy).unwrap();
    let _remove = RemoveOnDrop(copy.clone());
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = copy.join("tandem");
    std::fs::copy(common::tandem_exe(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let intrude = || -> String {
        let run = || {
            Command::new(&exe)
                .args(["share", "status", "--socket"])
                .arg(&socket)
                .env("RUST_LOG", "warn")
                .uid(65534)
                .gid(65534)
                .output()
        };
        let out = common::while_busy(run, |e| e.kind() == std::io::ErrorKind::ExecutableFileBusy)
            .unwrap();
        assert!(!out.status.success(), "another user was served");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let why = intrude();
    assert!(
        why.contains("ermission denied"),
        "closed by the file modes: {why}"
    );
    let open = |p: &std::path::Path, m| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    open(socket.parent().unwrap(), 0o711);
    open(&socket, 0o666);
    let why = intrude();
    open(&socket, 0o600);
    open(socket.parent().unwrap(), 0o700);
    assert!(
        why.contains("refused") && why.contains("uid 65534"),
        "refused by SO_PEERCRED: {why}"
    );
    assert_eq!(client.status().unwrap().clients, 1, "the daemon serves on");
}

/// A daemon (`tandem share serve`) of backend `A` whose CPU device is two
/// devices, as the host clients of the tests of two devices load it (GPU
/// backends serve every device anyway): its socket, and the guard that
/// stops it.
fn daemon_of_two_devices<A: GpuApi>() -> (std::path::PathBuf, common::Cleanup) {
    static STARTED: AtomicU32 = AtomicU32::new(0);
    let socket = tandem_share::runtime_dir().join(format!(
        "share-test-{}-{}.sock",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::Relaxed)
    ));
    let mut child = common::tandem()
        .args(["share", "serve", "--socket"])
        .arg(&socket)
        .args(["--backend", &A::BACKEND.to_string()])
        .args(["--announce", "--exit-on-stdin-eof"])
        .env(tandem_hal::host::DEVICES_ENV, "2")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the share daemon");
    let lines = tandem_tests::support::lines(&mut child);
    let ready = lines.recv_timeout(STEP).expect("the daemon's ready line");
    assert!(ready.starts_with("ready "), "{ready}");
    let cleanup = common::Cleanup {
        children: vec![child],
        files: vec![socket.clone()],
    };
    (socket, cleanup)
}

/// A buffer created on device 0 and filled there by kernel is opened on
/// device 1 by another process, mapped through peer access: its kernel
/// there sums what the kernel on device 0 wrote, and so does one over a
/// copy made into device 1's memory. In this process, a second client's
/// open on device 1 is its own mapping, cached apart from the one on device
/// 0, and an open on a device the daemon lacks gives its lease back.
fn buffer_opened_on_another_device<A: GpuApi>(load: impl Fn() -> tandem_hal::GpuResult<A>) {
    let (socket, _daemon) = daemon_of_two_devices::<A>();
    let writer = ShareClient::connect(load().unwrap(), &socket).expect("connecting");
    let first = writer.device(0).unwrap();
    let first_stream = first.create_stream().unwrap();
    let (id, buffer) = writer.create_buffer(0, WORDS * 4).unwrap();
    fill::<A>(&first, &buffer, 11, &first_stream);
    let sealed = writer.seal(buffer, &first_stream).unwrap();
    assert_eq!(sealed.access(), Access::Local);
    let expected = (11 * WORDS as u64).to_string();

    let args = [socket.display().to_string(), id.0.to_string()];
    let reader = RoleChild::spawn::<A>("peer-consumer", &args);
    match reader.expect_line("access ").as_str() {
        "Peer { holder: 0 }" => {
            assert_eq!(reader.expect_line("sum "), expected);
            assert_eq!(reader.expect_line("copy sum "), expected);
            reader.succeeds();
        }
        "none" if A::BACKEND != tandem_hal::Backend::Host => {
            reader.succeeds();
            println!(
                "buffer_opened_on_another_device: skipped the rest: device 1 has no peer \
                 access to device 0 (refused as NoPeerAccess)"
            );
            return;
        }
        other => panic!("device 1 reached device 0's buffer as {other}"),
    }

    let second_client = ShareClient::connect(load().unwrap(), &socket).unwrap();
    let second = second_client.device(1).unwrap();
    let stream = second.create_stream().unwrap();
    let on_second = second_client.get_buffer_on(id, 1, &stream, STEP).unwrap();
    assert_eq!(on_second.access(), Access::Peer { holder: 0 });
    assert_eq!(on_second.device().ordinal(), 1);
    let mirror = HostMirror::new(&on_second, true).unwrap();
    assert!(mirror.chunks_exact(4).all(|w| w == 11u32.to_le_bytes()));
    drop(mirror);
    let again = second_client.get_buffer_on(id, 1, &stream, STEP).unwrap();
    assert!(again.same_mapping(&on_second), "one mapping per device");
    let local = second_client.get_buffer(id, &first_stream).unwrap();
    assert_eq!(local.access(), Access::Local);
    assert!(!local.same_mapping(&on_second), "a mapping per device");
    assert_eq!(writer.stat(id).unwrap().leases, 3, "the writer's and two");
    // One past the last device this process sees: two on a machine of two, more elsewhere.
    let beyond = load().unwrap().device_count().unwrap();
    assert!(matches!(
        second_client.get_buffer_on(id, beyond, &stream, STEP),
        Err(ShareError::NoDevice(_))
    ));
    assert_eq!(
        writer.stat(id).unwrap().leases,
        3,
        "the failed open's lease"
    );
    drop((again, on_second, local));
    assert_eq!(writer.stat(id).unwrap().leases, 1);
}

/// A command aimed at a socket no daemon ever served says that, not that
/// a daemon is gone.
#[test]
fn no_daemon_is_not_a_daemon_gone() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("never.sock");
    let out = common::tandem()
        .args(["share", "status", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("no share daemon serves") && why.contains("tandem share serve"),
        "{why}"
    );
    assert!(!why.contains("gone"), "{why}");
}

/// `tandem share ls --json` and `status --json`: the fields of the text
/// output, as one array of buffers and one object of totals, matching what
/// the daemon says through the library.
#[test]
fn ls_and_status_print_json() {
    let client = daemon(tandem_hal::HostApi::with_devices(1));
    let device = client.device(0).unwrap();
    let stream = device.create_stream().unwrap();
    let (sealed_id, buffer) = client.create_buffer(0, WORDS * 4).unwrap();
    let sealed = client.seal(buffer, &stream).unwrap();
    let (writing_id, writing) = client.create_buffer(0, 4096).unwrap();
    let look = |what: &str| -> serde_json::Value {
        let out = common::tandem()
            .args(["share", what, "--json", "--socket"])
            .arg(client.socket_path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{what}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
    };

    let listed = look("ls");
    let rows = listed.as_array().expect("an array of buffers");
    assert_eq!(rows.len(), 2, "{listed}");
    for (id, state) in [(sealed_id, "sealed"), (writing_id, "writing")] {
        let row = rows
            .iter()
            .find(|r| r["id"] == id.0)
            .unwrap_or_else(|| panic!("no buffer {id} in {listed}"));
        let info = client.stat(id).unwrap();
        assert_eq!(row["state"], state, "{row}");
        assert_eq!(row["device"], info.device, "{row}");
        assert_eq!(row["bytes"], info.len, "{row}");
        assert_eq!(row["allocated"], info.size, "{row}");
        assert_eq!(row["leases"], info.leases, "{row}");
    }

    let totals = look("status");
    assert_eq!(totals["pid"], client.daemon_pid(), "{totals}");
    assert_eq!(totals["backend"], "host", "{totals}");
    assert_eq!(totals["devices"], 1, "{totals}");
    assert_eq!(totals["buffers"], 2, "{totals}");
    assert_eq!(totals["leases"], 2, "{totals}");
    let sizes: u64 = rows.iter().map(|r| r["allocated"].as_u64().unwrap()).sum();
    assert_eq!(totals["bytes"], sizes, "{totals}");
    for field in ["clients", "kept", "kept_bytes"] {
        assert!(totals[field].is_u64(), "{field} in {totals}");
    }
    drop((sealed, writing));
}

tandem_tests::backend_tests!(
    round_trip_in_one_process,
    freed_buffers_come_back_to_their_creator,
    mirrors_round_trip,
    producer_and_consumer_processes,
    readers_wait_for_the_writers_work,
    killed_client_leases_go,
    killed_daemon,
    bad_requests_are_refused,
    garbage_closes_the_connection,
    other_users_are_refused;
    two_devices: buffer_opened_on_another_device,
);
