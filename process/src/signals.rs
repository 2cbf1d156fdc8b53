//! SIGINT and SIGTERM for the `tandem` binary: nothing it created in
//! `/dev/shm` outlives it.
//!
//! * A process that can stop cleanly (`tandem run`) waits on a
//!   [`Termination`], then shuts its runtime down, whose drop removes its
//!   named segments.
//! * A process that cannot (the demo: kernels in flight cannot be
//!   interrupted) calls [`exit_on_termination`]: on the signal, every named
//!   segment it created is removed and it exits with 128 + the signal.
//!
//! Both take the signals on a normal thread (signal-hook's iterator), not in
//! a handler, so they may lock and allocate.

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};

use crate::error::ProcessError;

/// The signals that ask a `tandem` process to end.
const TERMINATION: [i32; 2] = [SIGINT, SIGTERM];

fn catch() -> Result<Signals, ProcessError> {
    Signals::new(TERMINATION).map_err(ProcessError::Signals)
}

/// SIGINT and SIGTERM, caught from [`catch`](Self::catch) on: they no longer
/// end the process, [`wait`](Self::wait) returns them instead (one that came
/// before `wait` is kept for it).
#[derive(Debug)]
pub struct Termination {
    signals: Signals,
}

/// Ends a [`Termination::wait`] from another thread.
#[derive(Clone, Debug)]
pub struct TerminationWaker(Handle);

impl Termination {
    /// Starts catching SIGINT and SIGTERM.
    pub fn catch() -> Result<Self, ProcessError> {
        Ok(Self { signals: catch()? })
    }

    /// A handle that ends [`wait`](Self::wait) from another thread (the
    /// binary's stdin-EOF watcher).
    pub fn waker(&self) -> TerminationWaker {
        TerminationWaker(self.signals.handle())
    }

    /// Blocks until SIGINT or SIGTERM arrives (returns it) or the waker is
    /// used (`None`).
    pub fn wait(&mut self) -> Option<i32> {
        self.signals.forever().next()
    }
}

impl TerminationWaker {
    /// Ends the wait; the signals stay caught (a late one is ignored).
    pub fn wake(&self) {
        self.0.close();
    }
}

/// On SIGINT or SIGTERM, removes every named segment this process created
/// (shm-core's [`unlink_created_names`]), runs `before_exit` (what else the
/// process must not leave behind: the demo's temporary blob store), and
/// exits with status 128 + signal, without running destructors. For a
/// process whose work cannot be stopped cleanly; starts one thread that
/// waits for the signal.
///
/// [`unlink_created_names`]: tandem_shm_core::unlink_created_names
pub fn exit_on_termination(
    before_exit: impl FnOnce() + Send + 'static,
) -> Result<(), ProcessError> {
    let mut signals = catch()?;
    std::thread::Builder::new()
        .name("tandem-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let removed = tandem_shm_core::unlink_created_names();
                before_exit();
                tracing::info!("signal {signal}: removed {removed} named segment(s), exiting");
                std::process::exit(128 + signal);
            }
        })
        .map_err(ProcessError::Thread)?;
    Ok(())
}
