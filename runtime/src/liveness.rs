//! Is the runtime behind a segment still there?
//!
//! Dead means its process is gone ([`ProcessState::Gone`]: pid and start
//! time, so a reused pid is not mistaken for it) or it shut down. A
//! heartbeat that stops moving says only that the runtime is not answering,
//! and for how long: a runtime paused with SIGSTOP, or under a debugger,
//! resumes where it was, so waiters keep waiting (until their own deadline or
//! stop flag).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tandem_process::ProcessState;

use crate::layout::{runtime_state, SegmentHeader};

/// How often the runtime stores its heartbeat in every segment.
pub const HEARTBEAT_PERIOD: Duration = Duration::from_millis(10);
/// A heartbeat older than this means the runtime is not answering (hung or
/// stopped); not that it is dead.
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(2);
/// How often a waiter checks liveness (a read of `/proc`) while it waits.
pub(crate) const LIVENESS_CHECK_PERIOD: Duration = Duration::from_millis(5);

/// `CLOCK_MONOTONIC` now, in nanoseconds: one clock for every process of the
/// machine, which the heartbeat is stored in.
pub(crate) fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is writable storage for one timespec; CLOCK_MONOTONIC
    // always exists on the platforms this crate builds for.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

/// What a client can tell of the runtime serving a segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Liveness {
    /// Its process exists and its heartbeat is fresh.
    Serving,
    /// Its process exists but its heartbeat has not moved for `silent_for`
    /// (at least [`HEARTBEAT_STALE`], or any time while the process is
    /// stopped): tasks wait, and complete once it answers again.
    NotAnswering {
        /// Since its last heartbeat.
        silent_for: Duration,
        /// Whether the process is stopped (SIGSTOP, a debugger) rather than
        /// running and hung.
        process_stopped: bool,
    },
    /// It shut down (its segment is marked stopped): nothing new completes.
    ShutDown,
    /// Its process is gone (killed, crashed): nothing new completes.
    Gone,
}

impl Liveness {
    /// Of the runtime serving the segment of `header`, now.
    pub fn of(header: &SegmentHeader) -> Self {
        // Acquire pairs with the Release of STOPPED at shutdown.
        if header.state.load(Ordering::Acquire) == runtime_state::STOPPED {
            return Self::ShutDown;
        }
        // Relaxed: the beat is a time, compared with now only.
        let beat = header.heartbeat.load(Ordering::Relaxed);
        let silent_for = Duration::from_nanos(monotonic_ns().saturating_sub(beat));
        match header.owner().state() {
            ProcessState::Gone => Self::Gone,
            ProcessState::Stopped => Self::NotAnswering {
                silent_for,
                process_stopped: true,
            },
            ProcessState::Running if silent_for > HEARTBEAT_STALE => Self::NotAnswering {
                silent_for,
                process_stopped: false,
            },
            ProcessState::Running => Self::Serving,
        }
    }

    /// Whether the runtime can no longer complete anything: gone or shut down.
    pub fn is_dead(&self) -> bool {
        matches!(self, Self::ShutDown | Self::Gone)
    }
}

impl std::fmt::Display for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Serving => f.write_str("serving"),
            Self::NotAnswering {
                silent_for,
                process_stopped,
            } => write!(
                f,
                "not answering for {:.1} s{}",
                silent_for.as_secs_f64(),
                if *process_stopped {
                    " (process stopped)"
                } else {
                    ""
                }
            ),
            Self::ShutDown => f.write_str("shut down"),
            Self::Gone => f.write_str("gone (process exited)"),
        }
    }
}

/// Tracks one runtime's liveness from a waiter's side, checking at most every
/// [`LIVENESS_CHECK_PERIOD`].
#[derive(Debug)]
pub(crate) struct LivenessWatch<'h> {
    header: &'h SegmentHeader,
    last_check: Instant,
}

impl<'h> LivenessWatch<'h> {
    /// Starts watching the runtime of `header`.
    pub fn new(header: &'h SegmentHeader) -> Self {
        Self {
            header,
            last_check: Instant::now(),
        }
    }

    /// The runtime's pid.
    pub fn pid(&self) -> u32 {
        self.header.owner().pid
    }

    /// `false` once the runtime is dead (process gone, or shut down); a
    /// stopped or hung runtime is alive. Cheap between checks.
    pub fn alive(&mut self) -> bool {
        let now = Instant::now();
        if now.duration_since(self.last_check) < LIVENESS_CHECK_PERIOD {
            return true;
        }
        self.last_check = now;
        !Liveness::of(self.header).is_dead()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_process::ProcessIdentity;

    /// A header served by this process, beating now.
    fn header() -> Box<SegmentHeader> {
        // SAFETY: every field of SegmentHeader is an integer, an atomic
        // integer or a struct of integers, for which all-zero is valid.
        let header: Box<SegmentHeader> = Box::new(unsafe { std::mem::zeroed() });
        let me = ProcessIdentity::current();
        header.runtime_pid.store(me.pid, Ordering::Relaxed);
        header.state.store(runtime_state::READY, Ordering::Relaxed);
        header.heartbeat.store(monotonic_ns(), Ordering::Relaxed);
        header
    }

    #[test]
    fn serving_then_silent_then_shut_down() {
        let mut header = header();
        header.runtime_start_time = ProcessIdentity::current().start_time;
        assert_eq!(Liveness::of(&header), Liveness::Serving);
        let silent = HEARTBEAT_STALE + Duration::from_secs(1);
        let beat = monotonic_ns() - silent.as_nanos() as u64;
        header.heartbeat.store(beat, Ordering::Relaxed);
        match Liveness::of(&header) {
            Liveness::NotAnswering {
                silent_for,
                process_stopped: false,
            } => assert!(silent_for >= silent, "{silent_for:?}"),
            other => panic!("{other:?}"),
        }
        assert!(!Liveness::of(&header).is_dead());
        header
            .state
            .store(runtime_state::STOPPED, Ordering::Relaxed);
        assert_eq!(Liveness::of(&header), Liveness::ShutDown);
        assert!(Liveness::of(&header).is_dead());
    }

    #[test]
    fn another_process_with_the_pid_is_gone() {
        let mut header = header();
        header.runtime_start_time = ProcessIdentity::current().start_time + 1;
        assert_eq!(Liveness::of(&header), Liveness::Gone);
        let mut watch = LivenessWatch::new(&header);
        watch.last_check -= LIVENESS_CHECK_PERIOD;
        assert!(!watch.alive());
    }
}
