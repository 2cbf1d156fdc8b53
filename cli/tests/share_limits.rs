//! What the share daemon bounds, against a client of its own user that
//! misbehaves: descriptors running out, too many connections, a frame
//! started and never finished, a connection that never says Hello, an
//! opener that hangs up while it waits for a seal. The daemon is `tandem
//! share serve` on the CPU device in a child process; the misbehaving
//! client speaks the wire format by hand.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_hal::{GpuApi, HostApi};
use tandem_share::testing::{recv_frame, Reply, Request};
use tandem_share::{ErrorCode, Inspector, ObjectId, ShareClient, ShareError, WireBackend};

/// How long anything may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(60);

/// `tandem share serve` on the CPU device, its stderr lines counted.
struct Served {
    child: Child,
    socket: PathBuf,
    log_lines: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Serves with `args` added, under a descriptor limit of `nofile` when
    /// given.
    fn start(args: &[&str], nofile: Option<u64>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        let mut command = common::tandem();
        command
            .args([
                "share",
                "serve",
                "--backend",
                "host",
                "--announce",
                "--socket",
            ])
            .arg(&socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(nofile) = nofile {
            let limit = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            // SAFETY: setrlimit is async-signal-safe and `limit` is a local
            // copied into the closure.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = command.spawn().unwrap();
        let log_lines = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&log_lines);
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if counted.fetch_add(1, Ordering::Relaxed) < 20 {
                    eprintln!("daemon: {line}");
                }
            }
        });
        let lines = tandem_tests::support::lines(&mut child);
        let ready = lines.recv_timeout(HANG).expect("the daemon's ready line");
        assert!(ready.starts_with("ready "), "{ready}");
        Self {
            child,
            socket,
            log_lines,
            _dir: dir,
        }
    }

    /// A connection that said Hello, and the daemon's answer to it.
    fn hello(&self) -> (UnixStream, Reply) {
        let stream = UnixStream::connect(&self.socket).unwrap();
        stream.set_read_timeout(Some(HANG)).unwrap();
        let hello = Request::Hello {
            pid: std::process::id(),
            client: 7,
            backend: WireBackend::Inspect,
        };
        // A refusing daemon may close before the Hello lands.
        let _ = (&stream).write_all(&hello.encode());
        let reply = read_reply(&stream);
        (stream, reply)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + HANG;
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The next reply on `stream`; a hang (no reply within [`HANG`]) fails.
fn read_reply(stream: &UnixStream) -> Reply {
    let frame = recv_frame(stream, None).expect("a reply, not a hang or a silent close");
    Reply::decode(&frame.frame).unwrap()
}

fn is_busy(reply: &Reply) -> bool {
    matches!(
        reply,
        Reply::Error {
            code: ErrorCode::Busy,
            ..
        }
    )
}

/// Waits until `done` holds, failing after [`HANG`].
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG;
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Out of descriptors, the daemon refuses new connections with a reason
/// (rather than leave them hanging), neither spins nor floods its log, and
/// serves again once connections close.
#[test]
fn out_of_descriptors_refuses_and_recovers() {
    let served = Served::start(&[], Some(64));
    let mut held = Vec::new();
    let mut busy = 0;
    for _ in 0..80 {
        let (stream, reply) = served.hello();
        match reply {
            Reply::Hello { .. } => held.push(stream),
            reply if is_busy(&reply) => busy += 1,
            other => panic!("unexpected reply {other:?}"),
        }
    }
    assert!(!held.is_empty(), "some connections were served");
    assert!(busy > 0, "64 descriptors cannot serve 80 connections");
    // A client library call is refused with a typed error, not a hang.
    match Inspector::connect(&served.socket) {
        Err(ShareError::Busy(why)) => assert!(why.contains("descriptors"), "{why}"),
        other => panic!("while out of descriptors: {other:?}"),
    }
    // A while out of descriptors, with clients knocking: a few log lines,
    // not one per retry.
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(50));
        let _ = Inspector::connect(&served.socket);
    }
    let lines = served.log_lines.load(Ordering::Relaxed);
    assert!(lines < 20, "{lines} log lines while out of descriptors");
    drop(held);
    eventually("the daemon serves again", || {
        Inspector::connect(&served.socket).is_ok_and(|i| i.status().is_ok())
    });
}

/// Connections beyond the per-process limit, and beyond the total, are
/// refused as busy; those within are served.
#[test]
fn connection_limits_refuse_as_busy() {
    let refused = |served: &Served| match served.hello().1 {
        Reply::Error {
            code: ErrorCode::Busy,
            message,
        } => message,
        other => panic!("a connection over the limit: {other:?}"),
    };
    let per_process = Served::start(
        &["--max-connections", "3", "--max-client-connections", "2"],
        None,
    );
    let held = [per_process.hello(), per_process.hello()];
    for (_, reply) in &held {
        assert!(matches!(reply, Reply::Hello { .. }), "{reply:?}");
    }
    let why = refused(&per_process);
    assert!(why.contains("per client process"), "{why}");
    // Another process gets the third connection of the total.
    let other = common::tandem()
        .args(["share", "status", "--socket"])
        .arg(&per_process.socket)
        .output()
        .unwrap();
    assert!(other.status.success(), "{other:?}");

    let total = Served::start(
        &["--max-connections", "2", "--max-client-connections", "8"],
        None,
    );
    let held = [total.hello(), total.hello()];
    for (_, reply) in &held {
        assert!(matches!(reply, Reply::Hello { .. }), "{reply:?}");
    }
    let why = refused(&total);
    assert!(why.contains("the daemon's limit"), "{why}");
    let other = common::tandem()
        .args(["share", "status", "--socket"])
        .arg(&total.socket)
        .output()
        .unwrap();
    assert!(!other.status.success());
    let said = String::from_utf8_lossy(&other.stderr);
    assert!(said.contains("busy"), "{said}");
    drop(held);
    eventually("a freed slot is served", || {
        Inspector::connect(&total.socket).is_ok_and(|i| i.status().is_ok())
    });
}

/// A connection that never says Hello, and one that starts a frame and
/// stalls, are closed after the frame timeout.
#[test]
fn stalled_connections_are_closed() {
    let served = Served::start(&["--frame-timeout-ms", "300"], None);
    let silent = UnixStream::connect(&served.socket).unwrap();
    let (stalled, reply) = served.hello();
    assert!(matches!(reply, Reply::Hello { .. }), "{reply:?}");
    (&stalled)
        .write_all(&Request::Status.encode()[..5])
        .unwrap();
    for stream in [&silent, &stalled] {
        stream.set_read_timeout(Some(HANG)).unwrap();
        let mut rest = Vec::new();
        // Closed by the daemon: the read ends (EOF or a reset), no timeout.
        match (&*stream).read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) => assert!(
                !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "the daemon kept a stalled connection: {e}"
            ),
        }
    }
}

/// An opener that hangs up while it waits for a seal is let go at once,
/// not when its timeout (here days) ends: its client entry goes.
#[test]
fn an_opener_that_hangs_up_is_let_go() {
    let served = Served::start(&[], None);
    let client = ShareClient::connect(HostApi::load().unwrap(), &served.socket).unwrap();
    let (id, _unsealed) = client.create_buffer(0, 4096).unwrap();
    let clients = || client.status().unwrap().clients;
    assert_eq!(clients(), 1);
    let opener = open_and_wait(&served.socket, id);
    eventually("the opener is counted", || clients() == 2);
    drop(opener);
    eventually("the opener that hung up is let go", || clients() == 1);
}

/// A connection of another client whose `Open` of `id` waits for a seal.
fn open_and_wait(socket: &Path, id: ObjectId) -> UnixStream {
    let stream = UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(HANG)).unwrap();
    let hello = Request::Hello {
        pid: std::process::id(),
        client: 99,
        backend: WireBackend::of(HostApi::BACKEND),
    };
    (&stream).write_all(&hello.encode()).unwrap();
    assert!(matches!(read_reply(&stream), Reply::Hello { .. }));
    let open = Request::Open {
        id,
        timeout_ms: u32::MAX,
    };
    (&stream).write_all(&open.encode()).unwrap();
    stream
}

/// Creates beyond the buffers the daemon may hold are refused as busy;
/// a buffer freed makes room again.
#[test]
fn creates_beyond_the_buffer_limit_are_busy() {
    let served = Served::start(&["--max-buffers", "2"], None);
    let client = ShareClient::connect(HostApi::load().unwrap(), &served.socket).unwrap();
    let (_, first) = client.create_buffer(0, 4096).unwrap();
    let (_, _second) = client.create_buffer(0, 4096).unwrap();
    match client.create_buffer(0, 4096) {
        Err(ShareError::Busy(why)) => assert!(why.contains("buffers"), "{why}"),
        other => panic!("a third buffer: {:?}", other.map(|(id, _)| id)),
    }
    // Dropped unsealed: freed.
    drop(first);
    eventually("a freed buffer makes room", || {
        client.create_buffer(0, 4096).is_ok()
    });
}

/// `--socket` naming a file that is not a socket (a mistake, or a link
/// planted there) fails and leaves it alone, rather than replace it.
#[test]
fn serve_keeps_a_file_that_is_not_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "precious").unwrap();
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    for path in [&file, &link] {
        let out = common::tandem()
            .args(["share", "serve", "--backend", "host", "--exit-on-stdin-eof"])
            .arg("--socket")
            .arg(path)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "served on {}", path.display());
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("is not a socket"), "{said}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
    assert!(link.symlink_metadata().is_ok(), "the link was removed");
}

/// A socket that accepts and never answers (not a share daemon's) gives a
/// client an error, not a hang.
#[test]
fn a_silent_socket_is_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("silent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let (done, result) = std::sync::mpsc::channel();
    let path = socket.clone();
    std::thread::spawn(move || {
        let _ = done.send(Inspector::connect(&path).map(drop));
    });
    match result.recv_timeout(HANG) {
        Ok(Err(ShareError::Protocol(why))) => assert!(why.contains("Hello"), "{why}"),
        Ok(other) => panic!("a silent socket: {other:?}"),
        Err(_) => panic!("the client hung on a silent socket"),
    }
}

/// A socket named without a folder lives in the current one, which must be
/// private too: not the shared temporary folder.
#[test]
fn a_bare_socket_name_needs_a_private_current_folder() {
    let out = common::tandem()
        .args(["share", "serve", "--backend", "host", "--exit-on-stdin-eof"])
        .args(["--socket", "tandem-share-limits-bare.sock"])
        .current_dir("/tmp")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("not a private directory"), "{said}");
    assert!(!Path::new("/tmp/tandem-share-limits-bare.sock").exists());
}

/// A frame timeout beyond what the clock can count is no timeout, not a
/// connection thread that panics.
#[test]
fn an_endless_frame_timeout_serves() {
    let served = Served::start(&["--frame-timeout-ms", &u64::MAX.to_string()], None);
    let inspector = Inspector::connect(&served.socket).expect("served");
    assert_eq!(inspector.status().unwrap().clients, 1);
}
