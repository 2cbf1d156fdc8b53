//! Is the runtime behind a segment still there? Its process must exist and
//! its heartbeat must keep moving.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::layout::{runtime_state, SegmentHeader};

/// How often the runtime bumps every segment's heartbeat.
pub const HEARTBEAT_PERIOD: Duration = Duration::from_millis(10);
/// A heartbeat that has not moved for this long means a hung runtime.
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(2);
/// How often a waiter checks liveness (a syscall or two) while it waits.
pub const LIVENESS_CHECK_PERIOD: Duration = Duration::from_millis(5);

/// Whether `pid` is a live process (a zombie awaiting its parent counts as dead).
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid_t) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks for existence and permission.
    if unsafe { libc::kill(pid_t, 0) } != 0 {
        return std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(true),
        Err(_) => false,
    }
}

/// Tracks one runtime's liveness from a waiter's side.
#[derive(Debug)]
pub struct LivenessWatch<'h> {
    header: &'h SegmentHeader,
    last_beat: u64,
    last_change: Instant,
    last_check: Instant,
}

impl<'h> LivenessWatch<'h> {
    /// Starts watching the runtime of `header`.
    pub fn new(header: &'h SegmentHeader) -> Self {
        let now = Instant::now();
        Self {
            header,
            // Relaxed: only compared with later values of the same word.
            last_beat: header.heartbeat.load(Ordering::Relaxed),
            last_change: now,
            last_check: now,
        }
    }

    /// The runtime's pid.
    pub fn pid(&self) -> u32 {
        self.header.runtime_pid.load(Ordering::Relaxed)
    }

    /// `false` once the runtime is known dead: stopped, its process gone, or
    /// its heartbeat stuck for [`HEARTBEAT_STALE`]. Cheap between checks
    /// (every [`LIVENESS_CHECK_PERIOD`]).
    pub fn alive(&mut self) -> bool {
        let now = Instant::now();
        if now.duration_since(self.last_check) < LIVENESS_CHECK_PERIOD {
            return true;
        }
        self.last_check = now;
        // Acquire pairs with the Release of STOPPED at shutdown.
        if self.header.state.load(Ordering::Acquire) == runtime_state::STOPPED {
            return false;
        }
        let beat = self.header.heartbeat.load(Ordering::Relaxed);
        if beat != self.last_beat {
            self.last_beat = beat;
            self.last_change = now;
        } else if now.duration_since(self.last_change) > HEARTBEAT_STALE {
            return false;
        }
        process_alive(self.pid())
    }
}
