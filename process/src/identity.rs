//! Which process is this, and is it still there?
//!
//! A pid alone names a process only while it lives: once it exits, the kernel
//! may give the same number to another. A pid with the process's start time
//! (clock ticks after boot, field 22 of `/proc/<pid>/stat`) names one process
//! for good, which is what iceoryx2 records for its nodes; so segment owners
//! and attached clients are recorded as a [`ProcessIdentity`].

use std::sync::OnceLock;

/// A process, named so that a later process reusing its pid is not it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ProcessIdentity {
    /// The process id.
    pub pid: u32,
    /// When it started, in clock ticks after boot.
    pub start_time: u64,
}

/// What `/proc` says of a process.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ProcessState {
    /// It exists and may run.
    Running,
    /// It exists but is stopped (SIGSTOP, a debugger): alive, not answering.
    Stopped,
    /// It exited (a zombie awaiting its parent counts as gone), or the pid now
    /// names another process.
    Gone,
}

/// The fields of `/proc/<pid>/stat` a [`ProcessIdentity`] needs.
struct Stat {
    state: char,
    start_time: u64,
}

fn read_stat(pid: u32) -> Option<Stat> {
    if pid == 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is parenthesised and may hold spaces or ')': the
    // fields after the last ')' start with the state (field 3).
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 22 is the 20th after the state's field 3.
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(Stat { state, start_time })
}

impl ProcessIdentity {
    /// This process.
    pub fn current() -> Self {
        static CURRENT: OnceLock<ProcessIdentity> = OnceLock::new();
        *CURRENT.get_or_init(|| {
            let pid = std::process::id();
            // /proc/self always exists on Linux; a start time of 0 (no /proc
            // mounted) still names this process while it lives.
            let start_time = read_stat(pid).map_or(0, |s| s.start_time);
            Self { pid, start_time }
        })
    }

    /// The process `pid` is now, if it exists and is not a zombie.
    pub fn of(pid: u32) -> Option<Self> {
        read_stat(pid)
            .filter(|s| s.state != 'Z' && s.state != 'X')
            .map(|s| Self {
                pid,
                start_time: s.start_time,
            })
    }

    /// Whether this process still exists, running or stopped.
    pub fn is_alive(&self) -> bool {
        self.state() != ProcessState::Gone
    }

    /// Where this process is.
    pub fn state(&self) -> ProcessState {
        match read_stat(self.pid) {
            Some(s) if s.start_time == self.start_time => match s.state {
                'Z' | 'X' => ProcessState::Gone,
                'T' | 't' => ProcessState::Stopped,
                _ => ProcessState::Running,
            },
            _ => ProcessState::Gone,
        }
    }
}

impl std::fmt::Display for ProcessIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}", self.pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn current_process_is_running() {
        let me = ProcessIdentity::current();
        assert_eq!(me.pid, std::process::id());
        assert_ne!(me.start_time, 0);
        assert_eq!(ProcessIdentity::of(me.pid), Some(me));
        assert_eq!(me.state(), ProcessState::Running);
    }

    #[test]
    fn another_start_time_is_another_process() {
        let me = ProcessIdentity::current();
        let impostor = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!impostor.is_alive());
    }

    #[test]
    fn stopped_is_alive_and_reaped_is_gone() {
        let mut child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let identity = ProcessIdentity::of(pid).expect("child exists");
        // SAFETY: signalling our own child, which has not been reaped.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while identity.state() != ProcessState::Stopped {
            assert!(std::time::Instant::now() < deadline, "child never stopped");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(identity.is_alive());
        child.kill().expect("kill child");
        child.wait().expect("reap child");
        assert_eq!(identity.state(), ProcessState::Gone);
        assert_eq!(ProcessIdentity::of(pid).filter(|p| *p == identity), None);
    }
}
