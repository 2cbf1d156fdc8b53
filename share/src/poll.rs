//! The daemon's connection threads poll for the next request while the
//! daemon is busy, instead of sleeping in `recv`.
//!
//! A thread blocked in `recv` is woken by the kernel when a request lands,
//! and on a host whose idle cores sleep (a virtual machine's halted vCPU,
//! a deep C-state) that wake-up is most of a request's round trip: the
//! share bench prints the first open with polling and without, measured in
//! one run. So for [`Polling::window`] after any request, up to
//! [`Polling::threads`] connection threads peek at their sockets in a loop
//! (yielding between peeks, so runnable threads keep the core) before they
//! block. An idle daemon polls nothing: a burst of requests pays one
//! wake-up, the rest none.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::transport;

/// How the daemon polls (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Polling {
    /// How long after the daemon's last request its threads poll; zero:
    /// they never do (every request wakes its thread).
    pub window: Duration,
    /// How many threads may poll at once (at least one, unless the window
    /// is zero): the cores the daemon may keep busy.
    pub threads: usize,
}

impl Polling {
    /// The default window: requests of one hand-off (a writer's create and
    /// seal, a reader's open, a delete) come a few milliseconds apart.
    pub const DEFAULT_WINDOW: Duration = Duration::from_millis(10);

    /// Never polls.
    pub const OFF: Self = Self {
        window: Duration::ZERO,
        threads: 0,
    };

    /// Polls for `window` on up to a quarter of this host's cores (one at
    /// least, four at most).
    pub fn for_window(window: Duration) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            window,
            threads: (cores / 4).clamp(1, 4),
        }
    }
}

impl Default for Polling {
    fn default() -> Self {
        Self::for_window(Self::DEFAULT_WINDOW)
    }
}

/// The daemon's polling state, shared by its connection threads.
pub(crate) struct RequestPoller {
    polling: Polling,
    started: Instant,
    /// When the last request arrived, in nanoseconds since `started`.
    last_request_ns: AtomicU64,
    /// Threads polling now.
    pollers: AtomicUsize,
}

impl RequestPoller {
    pub(crate) fn new(polling: Polling) -> Self {
        Self {
            polling,
            started: Instant::now(),
            last_request_ns: AtomicU64::new(0),
            pollers: AtomicUsize::new(0),
        }
    }

    pub(crate) fn polling(&self) -> Polling {
        self.polling
    }

    /// A request arrived: the daemon is busy for another window.
    pub(crate) fn saw_request(&self) {
        // Relaxed: a hint to pollers, ordering nothing else; a poller that
        // reads an older time only stops polling sooner.
        self.last_request_ns
            .store(self.since_start(), Ordering::Relaxed);
    }

    /// Returns once `stream` is readable, the daemon has been idle for the
    /// window, `stopping` is raised, or no polling slot is free; the caller
    /// then reads, blocking if it must.
    pub(crate) fn await_request(&self, stream: &UnixStream, stopping: &AtomicBool) {
        if self.polling.window.is_zero() {
            return;
        }
        // Relaxed: the count only caps how many threads poll; it guards no
        // data.
        if self.pollers.fetch_add(1, Ordering::Relaxed) >= self.polling.threads {
            self.pollers.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let window = u64::try_from(self.polling.window.as_nanos()).unwrap_or(u64::MAX);
        while !transport::readable_now(stream)
            && !stopping.load(Ordering::Relaxed)
            && self
                .since_start()
                .saturating_sub(self.last_request_ns.load(Ordering::Relaxed))
                < window
        {
            std::thread::yield_now();
        }
        self.pollers.fetch_sub(1, Ordering::Relaxed);
    }

    fn since_start(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_request_within_the_window_is_seen_while_polling() {
        let poller = RequestPoller::new(Polling {
            window: Duration::from_secs(5),
            threads: 1,
        });
        let (daemon_end, mut client_end) = UnixStream::pair().unwrap();
        let stopping = AtomicBool::new(false);
        poller.saw_request();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let started = Instant::now();
                poller.await_request(&daemon_end, &stopping);
                started.elapsed()
            });
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(poller.pollers.load(Ordering::Relaxed), 1, "it polls");
            client_end.write_all(b"x").unwrap();
            let waited = waiter.join().unwrap();
            assert!(waited < Duration::from_secs(5), "returned at the request");
        });
        assert_eq!(poller.pollers.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_idle_daemon_and_full_slots_do_not_poll() {
        let (daemon_end, _client_end) = UnixStream::pair().unwrap();
        let stopping = AtomicBool::new(false);
        // Idle for longer than the window: returns at once.
        let poller = RequestPoller::new(Polling {
            window: Duration::from_millis(1),
            threads: 1,
        });
        poller.saw_request();
        std::thread::sleep(Duration::from_millis(5));
        let started = Instant::now();
        poller.await_request(&daemon_end, &stopping);
        assert!(started.elapsed() < Duration::from_secs(1));
        // No free slot: returns at once, however busy the daemon is.
        let busy = RequestPoller::new(Polling {
            window: Duration::from_secs(60),
            threads: 1,
        });
        busy.saw_request();
        busy.pollers.store(1, Ordering::Relaxed);
        let started = Instant::now();
        busy.await_request(&daemon_end, &stopping);
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(
            busy.pollers.load(Ordering::Relaxed),
            1,
            "slot count restored"
        );
        // Off: returns at once.
        RequestPoller::new(Polling::OFF).await_request(&daemon_end, &stopping);
    }

    #[test]
    fn a_stop_ends_the_polling() {
        let poller = RequestPoller::new(Polling {
            window: Duration::from_secs(60),
            threads: 2,
        });
        let (daemon_end, _client_end) = UnixStream::pair().unwrap();
        let stopping = AtomicBool::new(false);
        poller.saw_request();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| poller.await_request(&daemon_end, &stopping));
            std::thread::sleep(Duration::from_millis(20));
            stopping.store(true, Ordering::Relaxed);
            waiter.join().unwrap();
        });
    }
}
