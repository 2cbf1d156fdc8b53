//! What one client, and all of them together, may take of a daemon.

use std::time::Duration;

/// Bounds on what clients may hold (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once, every client together: each is a thread
    /// and two descriptors of the daemon.
    pub connections: usize,
    /// Connections one client process may hold at once.
    pub client_connections: usize,
    /// How long a new connection may take to say Hello, and a frame whose
    /// first byte came to arrive whole.
    pub frame_timeout: Duration,
    /// Buffers the daemon holds at once (each a descriptor of the daemon,
    /// and on the CPU device a segment in `/dev/shm`); a create beyond is
    /// refused as busy.
    pub buffers: usize,
    /// Bytes of freed allocations kept for one client's next creates (see
    /// the module docs, "Reuse"); 0 keeps none.
    pub kept_bytes: u64,
    /// Named sets the daemon holds at once; a bind of a new name beyond is
    /// refused as busy (each set keeps a few versions, whose buffers count
    /// against [`Limits::buffers`]).
    pub sets: usize,
}

impl Limits {
    /// [`Limits::connections`] unless configured.
    pub const DEFAULT_CONNECTIONS: usize = 1024;
    /// [`Limits::client_connections`] unless configured.
    pub const DEFAULT_CLIENT_CONNECTIONS: usize = 256;
    /// [`Limits::frame_timeout`] unless configured.
    pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(10);
    /// [`Limits::buffers`] unless configured.
    pub const DEFAULT_BUFFERS: usize = 4096;
    /// [`Limits::kept_bytes`] unless configured.
    pub const DEFAULT_KEPT_BYTES: u64 = 256 << 20;
    /// [`Limits::sets`] unless configured.
    pub const DEFAULT_SETS: usize = 256;

    /// Descriptors the daemon may need at these limits: two per
    /// connection, two per buffer (its export and its event), and a few of
    /// its own.
    pub fn descriptors(&self) -> u64 {
        (2 * self.connections as u64) + (2 * self.buffers as u64) + 64
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: Self::DEFAULT_CONNECTIONS,
            client_connections: Self::DEFAULT_CLIENT_CONNECTIONS,
            frame_timeout: Self::DEFAULT_FRAME_TIMEOUT,
            buffers: Self::DEFAULT_BUFFERS,
            kept_bytes: Self::DEFAULT_KEPT_BYTES,
            sets: Self::DEFAULT_SETS,
        }
    }
}

/// How often the accept loop logs a recurring condition (out of
/// descriptors, connections refused): a client that hammers the daemon
/// must not fill the disk with its log.
pub const QUIET_LOG: Duration = Duration::from_secs(10);
