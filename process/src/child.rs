//! Tandem services started in a child process by their client (a runtime
//! by `tandem_runtime::Client::fork_runtime`, the share daemon by its
//! client): the child prints a ready line on stdout once it serves, and
//! stops when its stdin closes, so it never outlives the parent that
//! started it.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::error::ProcessError;
use crate::fork::MadeIn;
use crate::signals::TerminationWaker;

/// What a service started with `--announce` prints on stdout once it serves:
/// `ready <what it serves> <pid>`.
pub const READY_PREFIX: &str = "ready ";

/// Environment variable naming the `tandem` executable that
/// [`find_tandem_binary`] returns.
pub const TANDEM_BIN_ENV: &str = "TANDEM_BIN";

/// A service running in a child process: the child, what its ready line
/// said, and the pipe whose closing tells it to stop.
#[derive(Debug)]
pub struct ServiceChild {
    child: Child,
    lifeline: Option<ChildStdin>,
    ready: String,
    /// Only the process that started it may stop it: a forked child holds
    /// a copy of the lifeline, whose closing there stops nothing, and
    /// cannot reap a process that is not its child.
    spawner: MadeIn,
}

impl ServiceChild {
    /// Starts `exe` with `args` (which must make it announce and watch its
    /// stdin) and waits for its ready line: when this returns, it serves.
    pub fn spawn(exe: &Path, args: &[&std::ffi::OsStr]) -> Result<Self, ProcessError> {
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ProcessError::Child(format!("cannot start {}: {e}", exe.display())))?;
        let stderr = child.stderr.take().map(StderrTail::copy);
        match read_ready_line(&mut child, stderr) {
            Ok(ready) => {
                let lifeline = child.stdin.take();
                Ok(Self {
                    child,
                    lifeline,
                    ready,
                    spawner: MadeIn::this_process(),
                })
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
        }
    }

    /// The first word after [`READY_PREFIX`]: what the child serves (a
    /// segment name, a socket path).
    pub fn ready(&self) -> &str {
        &self.ready
    }

    /// The child process (to signal or kill it).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Closes the child's stdin, which stops it, and reaps it. In a process
    /// forked from the one that started it, this does nothing to the
    /// service and says so (`ErrorKind::Unsupported`).
    pub fn stop(mut self) -> std::io::Result<ExitStatus> {
        if !self.spawner.is_this_process() {
            // Dropping closes this process's copy of the pipe, which the
            // spawner's copy keeps open: the service is the spawner's to stop.
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the service was started by the process this one was forked from",
            ));
        }
        drop(self.lifeline.take());
        self.child.wait()
    }

    /// Whether the calling process started it (and so may stop it), rather
    /// than being forked from the process that did.
    pub fn started_here(&self) -> bool {
        self.spawner.is_this_process()
    }
}

/// Lines of a child's stderr kept to say why it did not start.
const STDERR_TAIL_LINES: usize = 20;

/// A thread copying a child's stderr to this process's as it comes (a
/// service's logs go where they went when it inherited stderr), keeping its
/// last lines for the error of a child that exits before it is ready.
struct StderrTail {
    last: Arc<Mutex<VecDeque<String>>>,
    copier: JoinHandle<()>,
}

impl StderrTail {
    fn copy(stderr: ChildStderr) -> Self {
        let last = Arc::new(Mutex::new(VecDeque::new()));
        let kept = Arc::clone(&last);
        let copier = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // This process's stderr may be closed: its lines are lost
                // then, as they were when the child wrote them there.
                let _ = writeln!(std::io::stderr(), "{line}");
                let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                if kept.len() == STDERR_TAIL_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        Self { last, copier }
    }

    /// The last lines, once the child has exited (its stderr closed).
    fn last_lines(self) -> Vec<String> {
        let _ = self.copier.join();
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.iter().cloned().collect()
    }
}

/// Reads the child's stdout up to its ready line; returns what it serves.
/// A child that exits first is reaped, and its error gives its exit status
/// and the last lines it wrote to stderr.
fn read_ready_line(child: &mut Child, stderr: Option<StderrTail>) -> Result<String, ProcessError> {
    let Some(out) = child.stdout.take() else {
        return Err(ProcessError::Child("child has no stdout pipe".into()));
    };
    let mut lines = BufReader::new(out).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(rest) = line.strip_prefix(READY_PREFIX) {
                    let served = rest.split_whitespace().next().unwrap_or_default();
                    if served.is_empty() {
                        return Err(ProcessError::Child(format!("bad ready line {line:?}")));
                    }
                    // Keep draining the child's stdout so it never blocks on
                    // a full pipe.
                    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
                    return Ok(served.to_string());
                }
            }
            Some(Err(e)) => return Err(ProcessError::Child(format!("reading child stdout: {e}"))),
            None => {
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                let said = stderr.map(StderrTail::last_lines).unwrap_or_default();
                let said = match said.as_slice() {
                    [] => String::from("it wrote nothing to stderr"),
                    lines => format!("its last words on stderr:\n{}", lines.join("\n")),
                };
                return Err(ProcessError::Child(format!(
                    "child exited before it was ready ({status}); {said}"
                )));
            }
        }
    }
}

/// `$TANDEM_BIN`, or `tandem` in `$TANDEM_BIN_DIR` (a GPU bundle's
/// programs), or next to (or one directory above, for test and bench
/// binaries in `deps/`) the current executable.
pub fn find_tandem_binary() -> Result<PathBuf, ProcessError> {
    if let Some(path) = std::env::var_os(TANDEM_BIN_ENV) {
        return Ok(PathBuf::from(path));
    }
    if let Some(dir) = std::env::var_os("TANDEM_BIN_DIR") {
        return Ok(PathBuf::from(dir).join("tandem"));
    }
    let exe = std::env::current_exe()
        .map_err(|e| ProcessError::NoTandemBinary(format!("cannot find own executable: {e}")))?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    [dir.join("tandem"), dir.join("..").join("tandem")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            ProcessError::NoTandemBinary(format!(
                "no `tandem` executable near {} (cargo build -p tandem-cli); set {TANDEM_BIN_ENV}",
                exe.display()
            ))
        })
}

/// The service side of `--exit-on-stdin-eof`: wakes `waker` when stdin
/// closes (the parent closed the pipe, or died).
pub fn wake_on_stdin_eof(waker: TerminationWaker) {
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        while std::io::stdin().read(&mut sink).is_ok_and(|n| n > 0) {}
        waker.wake();
    });
}
