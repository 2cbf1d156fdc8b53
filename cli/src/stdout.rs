//! Whether this process started with its stdout closed (`>&-`).
//!
//! Rust's runtime opens `/dev/null` on a closed stdin, stdout or stderr
//! before `main`, so writes to a closed stdout succeed and vanish. A
//! command whose output is its data must tell that apart from a stdout
//! sent to `/dev/null` on purpose, so the descriptor is looked at before
//! the runtime starts: from the ELF constructors (`.init_array`), which the
//! loader runs before the runtime's own start-up.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_a_closed_stdout() {
    // SAFETY: F_GETFD only reads the descriptor's flags; it fails (EBADF)
    // only when no descriptor 1 is open.
    let closed = unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_GETFD) } == -1;
    // Relaxed: written once before `main`, on the only thread there is.
    CLOSED.store(closed, Ordering::Relaxed);
}

#[used]
#[link_section = ".init_array"]
static NOTE_A_CLOSED_STDOUT: extern "C" fn() = note_a_closed_stdout;

/// Whether stdout was closed when the process started (what is there now
/// is the runtime's `/dev/null`).
pub(crate) fn was_closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// Lets SIGPIPE end the process, as it ends other commands whose reader
/// went away (`tandem blob ls | head -1`): Rust ignores it, and a print to
/// the closed pipe then panics. Only for commands that hold nothing a
/// signal would leave behind; their sockets send with `MSG_NOSIGNAL`.
pub(crate) fn end_quietly_when_the_reader_leaves() {
    // SAFETY: restores the default disposition of one signal; no handler
    // is installed, so nothing runs in signal context.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Prints `line` on stdout for a command that holds resources (SIGPIPE
/// ignored, see `main`): when the reader has gone away the line is lost,
/// and the command goes on to release what it holds rather than panic in
/// `println!`. A line that cannot be written is not worth failing the run
/// for; its exit status still says how the work went.
pub(crate) fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}
