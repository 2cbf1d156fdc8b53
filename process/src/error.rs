//! The crate's error type. A leaf: it names no other module's types.

use std::fmt;

/// Why a service child, the `tandem` executable or the termination signals
/// could not be had.
#[derive(Debug)]
pub enum ProcessError {
    /// A service child could not be started, or ended or misspoke before
    /// its ready line.
    Child(String),
    /// No `tandem` executable was found.
    NoTandemBinary(String),
    /// SIGINT and SIGTERM could not be caught.
    Signals(std::io::Error),
    /// The thread that waits for the signals could not be started.
    Thread(std::io::Error),
}

impl fmt::Display for ProcessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Child(why) | Self::NoTandemBinary(why) => f.write_str(why),
            Self::Signals(e) => write!(f, "cannot catch SIGINT/SIGTERM: {e}"),
            Self::Thread(e) => write!(f, "cannot start the signal thread: {e}"),
        }
    }
}

impl std::error::Error for ProcessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Signals(e) | Self::Thread(e) => Some(e),
            Self::Child(_) | Self::NoTandemBinary(_) => None,
        }
    }
}
