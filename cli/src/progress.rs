//! A progress bar for `tandem blob put` and `get` (and a spinner for `tandem share fetch`): bytes, rate and time left on stderr, only
//! when stderr is a terminal, only once a transfer has taken a second (a quick one leaves no
//! trace), and never with `--quiet`. Scripts reading stderr get their logs alone.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a transfer runs before its bar shows.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// A transfer's progress, drawn on a terminal's stderr once it has taken [`SHOW_AFTER`].
pub(crate) struct Progress {
    /// `None`: nothing is ever drawn (not a terminal, or `--quiet`).
    bar: Option<ProgressBar>,
    shown: AtomicBool,
}

impl Progress {
    /// Nothing drawn.
    pub(crate) fn off() -> Progress {
        Progress {
            bar: None,
            shown: AtomicBool::new(false),
        }
    }

    /// A bar for `what`, of `total` bytes if known, unless `quiet` or stderr is no terminal.
    pub(crate) fn new(what: &str, total: Option<u64>, quiet: bool) -> Progress {
        if quiet || !std::io::stderr().is_terminal() {
            return Progress::off();
        }
        let (bar, template) = match total {
            Some(total) => (
                ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden()),
                "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} \
                 {binary_bytes_per_sec}, {eta} left",
            ),
            None => (
                ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
                "{msg} {spinner} {binary_bytes} {binary_bytes_per_sec}",
            ),
        };
        // The templates are constants that parse.
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(what.to_owned());
        Progress {
            bar: Some(bar),
            shown: AtomicBool::new(false),
        }
    }

    /// `bytes` more moved.
    pub(crate) fn add(&self, bytes: u64) {
        let Some(bar) = &self.bar else { return };
        bar.inc(bytes);
        self.show_when_due(bar);
    }

    /// Time passed with no bytes counted here (a transfer another process makes): the
    /// spinner turns, and the bar shows once due.
    pub(crate) fn tick(&self) {
        let Some(bar) = &self.bar else { return };
        bar.tick();
        self.show_when_due(bar);
    }

    fn show_when_due(&self, bar: &ProgressBar) {
        if bar.elapsed() >= SHOW_AFTER && !self.shown.swap(true, Ordering::Relaxed) {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // The result line that follows goes to stdout: the bar leaves the terminal's line.
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// A writer that counts what passes into a [`Progress`].
pub(crate) struct Counted<'a, W: Write> {
    pub(crate) inner: W,
    pub(crate) progress: &'a Progress,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.progress.add(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
