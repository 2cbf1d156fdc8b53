//! The error type of xtask: what stops a subcommand before it can report its own result.
//!
//! A test leg or bench that runs and fails is not an error here: it is a result, reported in the
//! summary. These are the cases where xtask itself could not do its work.

use std::{fmt, io, path::PathBuf};

/// Why an xtask subcommand could not run to its end.
#[derive(Debug)]
pub enum XtaskError {
    /// The command line could not be understood; the text says what was wrong.
    Usage(String),
    /// A program could not be started (not installed, not executable).
    Spawn {
        /// The command line as it was shown.
        command: String,
        /// What the operating system said.
        source: io::Error,
    },
    /// Reading or writing a file or folder failed.
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },
    /// `cargo metadata` failed or printed something that is not its JSON.
    Metadata(String),
    /// bindgen could not run, or (`bindings --check`) its output differs from the checked-in
    /// files; the text says which.
    Bindings(String),
    /// A line of a `gpu-bundle-files.txt` manifest names a path xtask will not copy.
    BundleManifest {
        /// The manifest file.
        manifest: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the path.
        reason: &'static str,
    },
}

impl XtaskError {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}

impl fmt::Display for XtaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(why) => write!(f, "{why}"),
            Self::Spawn { command, source } => write!(f, "could not start `{command}`: {source}"),
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Self::Metadata(why) => write!(f, "cargo metadata: {why}"),
            Self::Bindings(why) => write!(f, "bindings: {why}"),
            Self::BundleManifest {
                manifest,
                line,
                reason,
            } => write!(f, "{}:{line}: {reason}", manifest.display()),
        }
    }
}

impl std::error::Error for XtaskError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Spawn { source, .. } | Self::Io { source, .. } => Some(source),
            Self::Usage(_)
            | Self::Metadata(_)
            | Self::Bindings(_)
            | Self::BundleManifest { .. } => None,
        }
    }
}
