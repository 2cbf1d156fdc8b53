//! What loading NIXL or calling it can fail with.

use core::fmt;
use std::path::PathBuf;

/// Why NIXL could not be loaded or a call of it failed.
#[derive(Debug)]
pub enum NixlError {
    /// No `libnixl_capi.so` was found: none configured, and no `nixl_cu13`
    /// or `nixl_cu12` Python package in the places searched.
    NotFound {
        /// Every place looked in, in order.
        searched: Vec<PathBuf>,
    },
    /// The library was found but would not load (a dependency missing).
    Load {
        /// The library.
        path: PathBuf,
        /// What the dynamic loader said.
        why: String,
    },
    /// The library lacks a function this crate calls (a NIXL too old or too new).
    MissingSymbol {
        /// The library.
        path: PathBuf,
        /// The function.
        symbol: &'static str,
    },
    /// A NIXL call returned an error status.
    Call {
        /// The C function.
        call: &'static str,
        /// Its status (`nixl_capi_status_t`).
        status: i32,
    },
    /// A name or argument NIXL cannot take (an interior NUL byte).
    BadArgument(String),
}

impl NixlError {
    /// What a status says, in NIXL's words.
    fn status_name(status: i32) -> &'static str {
        match status {
            -1 => "invalid parameter",
            -2 => "backend error",
            -3 => "invalid state",
            -4 => "exception",
            -5 => "no telemetry",
            -6 => "not found",
            _ => "unknown status",
        }
    }
}

impl fmt::Display for NixlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound { searched } => {
                write!(
                    f,
                    "NIXL (libnixl_capi.so) was not found: set its path in the configuration \
                     or install the Python package (`pip install --no-deps nixl-cu13`); searched"
                )?;
                if searched.is_empty() {
                    write!(f, " nowhere (no Python interpreter answered)")
                } else {
                    let places: Vec<String> =
                        searched.iter().map(|p| p.display().to_string()).collect();
                    write!(f, " {}", places.join(", "))
                }
            }
            Self::Load { path, why } => {
                write!(f, "cannot load NIXL from {}: {why}", path.display())
            }
            Self::MissingSymbol { path, symbol } => write!(
                f,
                "{} lacks `{symbol}`: a NIXL whose C API this build does not speak",
                path.display()
            ),
            Self::Call { call, status } => write!(
                f,
                "NIXL call {call} failed: {} ({status})",
                Self::status_name(*status)
            ),
            Self::BadArgument(why) => write!(f, "bad argument to NIXL: {why}"),
        }
    }
}

impl std::error::Error for NixlError {}
