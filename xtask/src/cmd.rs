//! The one way xtask runs a build or test command: print a banner with the exact command line,
//! run it in the repository root with its output streamed, and return its status and duration.

use crate::error::XtaskError;
use std::{
    ffi::OsString,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc::{self, RecvTimeoutError},
    thread,
    time::{Duration, Instant},
};

/// How often the line pump checks whether the child has exited while no output arrives.
const POLL: Duration = Duration::from_millis(100);

/// How long output may keep coming after the child exited. A grandchild that a test leaked
/// (a multi-process test gone wrong) can hold the pipe open forever; past this grace period the
/// remaining output is dropped instead of hanging the whole run.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// A command line to run: program, arguments, extra environment, working folder.
#[derive(Debug, Clone)]
pub struct Cmd {
    program: OsString,
    /// What the banner calls the program (`cargo` rather than the full path in `$CARGO`).
    shown_program: String,
    args: Vec<OsString>,
    envs: Vec<(String, OsString)>,
    cwd: PathBuf,
}

/// How a command ended.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The exit status.
    pub status: ExitStatus,
    /// Time from start to exit.
    pub elapsed: Duration,
}

impl Outcome {
    /// Whether the command exited with status 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }
}

impl Cmd {
    /// `program`, run in `cwd`.
    pub fn new(program: impl Into<OsString>, cwd: &Path) -> Self {
        let program = program.into();
        Self {
            shown_program: program.to_string_lossy().into_owned(),
            program,
            args: Vec::new(),
            envs: Vec::new(),
            cwd: cwd.to_path_buf(),
        }
    }

    /// The cargo that runs xtask (`$CARGO`, set by `cargo run`), or `cargo` from `PATH`.
    pub fn cargo(cwd: &Path) -> Self {
        let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        Self {
            shown_program: "cargo".into(),
            ..Self::new(program, cwd)
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I>(mut self, args: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the command (shown in the banner).
    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Self {
        self.envs.push((key.to_owned(), value.into()));
        self
    }

    /// The command line as a shell would take it: `KEY=value program args...`, quoted where needed.
    pub fn display(&self) -> String {
        let envs = self
            .envs
            .iter()
            .map(|(key, value)| format!("{key}={}", shell_quote(&value.to_string_lossy())));
        let args = self.args.iter().map(|a| shell_quote(&a.to_string_lossy()));
        envs.chain(std::iter::once(self.shown_program.clone()))
            .chain(args)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs the command with stdout and stderr passed straight through.
    pub fn run(&self) -> Result<Outcome, XtaskError> {
        let start = Instant::now();
        let mut child = self.spawn(Stdio::inherit())?;
        let status = self.wait(&mut child)?;
        Ok(Outcome {
            status,
            elapsed: start.elapsed(),
        })
    }

    /// Runs the command and hands each line of its stdout to `on_line` (stderr passes straight
    /// through). `on_line` decides whether to print it.
    pub fn run_lines(&self, mut on_line: impl FnMut(&str)) -> Result<Outcome, XtaskError> {
        let start = Instant::now();
        let mut child = self.spawn(Stdio::piped())?;
        let stdout = child.stdout.take().expect("stdout was requested as a pipe");
        let (lines_tx, lines_rx) = mpsc::channel::<String>();
        // The reader runs on its own thread so that this one can notice the child's exit even if
        // a leaked grandchild keeps the pipe open (see DRAIN_GRACE). It ends at end of file or
        // when the receiver is gone.
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        let line = line.trim_end_matches(['\n', '\r']).to_owned();
                        if lines_tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });

        let mut exited: Option<(ExitStatus, Instant)> = None;
        loop {
            match lines_rx.recv_timeout(POLL) {
                Ok(line) => on_line(&line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
            match exited {
                Some((_, at)) if at.elapsed() > DRAIN_GRACE => {
                    eprintln!("xtask: output still open {DRAIN_GRACE:?} after the command exited (a leaked child process?); not waiting for it");
                    break;
                }
                Some(_) => {}
                None => {
                    let status = child.try_wait().map_err(|source| XtaskError::Spawn {
                        command: self.display(),
                        source,
                    })?;
                    exited = status.map(|s| (s, Instant::now()));
                }
            }
        }
        let status = match exited {
            Some((status, _)) => status,
            None => self.wait(&mut child)?,
        };
        Ok(Outcome {
            status,
            elapsed: start.elapsed(),
        })
    }

    /// Runs the command with its stdout and stderr captured, and returns them together
    /// (stdout first), for a caller that checks what the command said.
    pub fn run_captured(&self) -> Result<(Outcome, String), XtaskError> {
        let start = Instant::now();
        let child = self.spawn_with(Stdio::piped(), Stdio::piped())?;
        let output = child
            .wait_with_output()
            .map_err(|source| XtaskError::Spawn {
                command: self.display(),
                source,
            })?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        let outcome = Outcome {
            status: output.status,
            elapsed: start.elapsed(),
        };
        Ok((outcome, text))
    }

    fn spawn(&self, stdout: Stdio) -> Result<Child, XtaskError> {
        self.spawn_with(stdout, Stdio::inherit())
    }

    fn spawn_with(&self, stdout: Stdio, stderr: Stdio) -> Result<Child, XtaskError> {
        println!("\n$ {}", self.display());
        // Flushed so the banner comes before the child's own output in a captured log.
        let _ = std::io::stdout().flush();
        Command::new(&self.program)
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|source| XtaskError::Spawn {
                command: self.display(),
                source,
            })
    }

    fn wait(&self, child: &mut Child) -> Result<ExitStatus, XtaskError> {
        child.wait().map_err(|source| XtaskError::Spawn {
            command: self.display(),
            source,
        })
    }
}

/// Quotes `word` for a POSIX shell unless it is made only of characters that need no quoting.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./,=:+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Searches `PATH` for an executable file called `program`.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a file with an execute bit.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shows_env_and_quotes_only_what_needs_it() {
        let cmd = Cmd::cargo(Path::new("/"))
            .env("RUSTFLAGS", "--cfg loom")
            .args([
                "test",
                "-p",
                "tandem-shm-core",
                "--features",
                "a/cuda,b/cuda",
            ]);
        assert_eq!(
            cmd.display(),
            "RUSTFLAGS='--cfg loom' cargo test -p tandem-shm-core --features a/cuda,b/cuda"
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn run_lines_delivers_every_line_and_the_status() {
        let mut lines = Vec::new();
        let outcome = Cmd::new("sh", Path::new("/"))
            .args(["-c", "printf 'one\\ntwo\\nthree'; exit 3"])
            .run_lines(|line| lines.push(line.to_owned()))
            .expect("sh runs");
        assert_eq!(lines, ["one", "two", "three"]);
        assert!(!outcome.success());
        assert_eq!(outcome.status.code(), Some(3));
    }

    #[test]
    fn run_lines_does_not_wait_for_a_leaked_grandchild() {
        let start = Instant::now();
        let outcome = Cmd::new("sh", Path::new("/"))
            .args(["-c", "echo started; sleep 10 & exit 0"])
            .run_lines(|_| {})
            .expect("sh runs");
        assert!(outcome.success());
        assert!(start.elapsed() < Duration::from_secs(8));
    }

    #[test]
    fn run_captured_returns_both_streams_and_the_status() {
        let (outcome, text) = Cmd::new("sh", Path::new("/"))
            .args(["-c", "echo out; echo err >&2; exit 2"])
            .run_captured()
            .expect("sh runs");
        assert_eq!(outcome.status.code(), Some(2));
        assert_eq!(text, "out\nerr\n");
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let err = Cmd::new("/nonexistent/tandem-xtask-no-such-program", Path::new("/"))
            .run()
            .unwrap_err();
        assert!(matches!(err, XtaskError::Spawn { .. }), "{err}");
    }

    #[test]
    fn find_on_path_finds_sh_and_not_nonsense() {
        assert!(find_on_path("sh").is_some());
        assert!(find_on_path("tandem-xtask-no-such-program").is_none());
    }
}
