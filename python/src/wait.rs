//! Waits as Python expects them: the GIL released meanwhile, and Ctrl-C
//! (any pending signal handler that raises) ending them.

use std::sync::mpsc;
use std::time::Duration;

use pyo3::prelude::*;

use crate::errors::{Error, Kind};

/// How often a wait looks for signals: short enough that Ctrl-C feels
/// immediate, long enough to cost nothing.
pub(crate) const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// A wait's `timeout` argument, in seconds: `None` and infinity wait for
/// ever (`None` returned), as does a value too large for a `Duration`, which
/// no wait could outlast; a negative value or NaN is an `ArgumentError`
/// naming `timeout`.
pub(crate) fn timeout(seconds: Option<f64>) -> Result<Option<Duration>, Error> {
    let Some(seconds) = seconds else {
        return Ok(None);
    };
    if seconds.is_nan() {
        return Err(Error::new(
            Kind::Argument,
            "timeout: nan is no number of seconds (None waits for ever)",
        ));
    }
    if seconds < 0.0 {
        return Err(Error::new(
            Kind::Argument,
            format!("timeout: {seconds} is negative (None waits for ever)"),
        ));
    }
    Ok(Duration::try_from_secs_f64(seconds).ok())
}

/// Runs `work` on a helper thread while this one, the GIL released, looks
/// for signals every [`SIGNAL_POLL`]; when a handler raises, `stop` is
/// called (it must make `work` return soon), `work` is waited for, and the
/// handler's exception returned. The helper touches no Python object.
pub(crate) fn interruptible<T: Send>(
    py: Python<'_>,
    stop: impl Fn() + Sync,
    work: impl FnOnce() -> T + Send,
) -> PyResult<T> {
    std::thread::scope(|scope| {
        let (done, finished) = mpsc::channel();
        scope.spawn(move || {
            // The receiver outlives the scope's threads: it cannot be gone.
            let _ = done.send(work());
        });
        let mut finished = finished;
        loop {
            // The receiver goes to the GIL-free closure and back: it may
            // move between threads, not be shared.
            let (outcome, back) = py.allow_threads(move || {
                let outcome = finished.recv_timeout(SIGNAL_POLL);
                (outcome, finished)
            });
            finished = back;
            match outcome {
                Ok(result) => return Ok(result),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Err(raised) = py.check_signals() {
                        stop();
                        // The work's outcome no longer matters; the scope
                        // joins its thread.
                        let _ = py.allow_threads(move || finished.recv());
                        return Err(raised);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // The helper panicked; the scope re-raises it on exit,
                    // which pyo3 turns into a PanicException.
                    return Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "a tandem call's thread failed",
                    ));
                }
            }
        }
    })
}
