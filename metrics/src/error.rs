//! What can go wrong setting up the endpoint.

use std::fmt;
use std::net::SocketAddr;

/// Why the metrics endpoint could not start.
#[derive(Debug)]
pub enum MetricsError {
    /// The address is not a port or an `IP:PORT`.
    BadAddress {
        /// What was given.
        text: String,
    },
    /// Binding or setting up the listener failed.
    Bind {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl fmt::Display for MetricsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricsError::BadAddress { text } => write!(
                f,
                "metrics address `{text}` is neither a port (listening on 127.0.0.1) \
                 nor an IP:PORT"
            ),
            MetricsError::Bind { addr, source } => {
                write!(f, "cannot serve metrics on {addr}: {source}")
            }
        }
    }
}

impl std::error::Error for MetricsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MetricsError::BadAddress { .. } => None,
            MetricsError::Bind { source, .. } => Some(source),
        }
    }
}
