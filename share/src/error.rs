//! What a client call can fail with.

use core::fmt;
use std::time::Duration;

use tandem_hal::GpuError;

use crate::wire::{ErrorCode, ObjectId, WireError};

/// Why a share call failed.
#[derive(Debug)]
pub enum ShareError {
    /// No daemon serves the socket a client first connected to: none was
    /// started there, or it stopped (or died, leaving its socket file).
    NoDaemon {
        /// The socket tried.
        socket: std::path::PathBuf,
        /// What `connect` said.
        why: String,
    },
    /// The daemon this client was talking to went away (killed, or it
    /// closed the connection): buffers already mapped stay usable; new
    /// calls fail.
    DaemonGone(String),
    /// The daemon cannot serve its socket (another daemon serves it, or
    /// the directory is not private).
    CannotServe(String),
    /// The daemon refused this client (another user, protocol version or
    /// backend).
    Refused(String),
    /// The daemon is at a limit (connections in all, this process's
    /// connections, its descriptors, the buffers or the named sets it
    /// holds) and refused the connection, the create or the bind.
    Busy(String),
    /// No buffer has this id (never had, or freed).
    UnknownId(ObjectId),
    /// The buffer was deleted (those who hold it keep it until they drop it).
    Deleted(ObjectId),
    /// The buffer was not sealed before the deadline.
    NotSealed {
        /// The buffer.
        id: ObjectId,
        /// How long the open waited.
        waited: Duration,
    },
    /// Seal of a buffer sealed already, or by a client that is not its writer.
    NotWriter(ObjectId),
    /// A size of zero, or beyond the device.
    InvalidSize {
        /// The size asked for.
        bytes: u64,
    },
    /// A range past the buffer's end.
    OutOfRange {
        /// The buffer.
        id: ObjectId,
        /// Where the range starts.
        offset: usize,
        /// Its length.
        len: usize,
        /// The buffer's length.
        buffer: usize,
    },
    /// No such device.
    NoDevice(String),
    /// The buffer's memory lives on device `holder`, which device `device`
    /// cannot reach (no peer access between them): open it on `holder` and
    /// copy it across ([`crate::GpuBuffer::copy_to`]).
    NoPeerAccess {
        /// The buffer.
        id: ObjectId,
        /// The device it was to be mapped for.
        device: usize,
        /// The device holding its memory.
        holder: usize,
    },
    /// A GpuApi call failed, here or in the daemon.
    Gpu(String),
    /// A device call of a GPU backend in a child forked from the process
    /// that made the client: the parent had the driver loaded, which a
    /// forked child cannot use (a rule of CUDA's and HIP's drivers). Calls
    /// that need no device (stat, list, delete, status) still work there.
    GpuInForkedChild {
        /// The process the client was made in.
        parent: u32,
    },
    /// No named set has this name, or it keeps no such version.
    UnknownSet(String),
    /// The named set has no version yet: one is being published.
    SetPublishing(String),
    /// A set name that is empty, too long or has a control character.
    BadSetName(String),
    /// The daemon is in no cluster (its config has no `[cluster]`).
    NoCluster(String),
    /// A `NODE/ID` that is not one: a node name with a bad character, an id
    /// that is not a number.
    BadRemoteId(String),
    /// etcd, where the cluster's nodes are found, did not answer.
    ClusterUnavailable(String),
    /// No node of this name is in the cluster: never joined, or its lease
    /// expired (it died, or stopped answering etcd).
    UnknownNode(String),
    /// The buffer exists on its node, but its creator did not export it.
    NotExported(String),
    /// The node holding the buffer went away (or stopped answering)
    /// mid-fetch; nothing of the fetch is left on either node.
    RemoteGone(String),
    /// The other node refused this one: the two hold different cluster tokens.
    ClusterRefused(String),
    /// NIXL failed to move the bytes (or took longer than the fetch's deadline).
    Transfer(String),
    /// A frame that is not this protocol, or a socket error mid-frame.
    Protocol(String),
    /// Anything else the daemon said no to, with its words.
    Daemon {
        /// Its code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
}

impl ShareError {
    /// The error the daemon's reply stands for.
    pub(crate) fn from_reply(code: ErrorCode, message: String, id: Option<ObjectId>) -> Self {
        match (code, id) {
            (ErrorCode::UnknownId, Some(id)) => Self::UnknownId(id),
            (ErrorCode::Deleted, Some(id)) => Self::Deleted(id),
            (ErrorCode::NotWriter | ErrorCode::AlreadySealed, Some(id)) => Self::NotWriter(id),
            (ErrorCode::Refused, _) => Self::Refused(message),
            (ErrorCode::Busy, _) => Self::Busy(message),
            (ErrorCode::NoDevice, _) => Self::NoDevice(message),
            (ErrorCode::Device, _) => Self::Gpu(message),
            (ErrorCode::Protocol, _) => Self::Protocol(message),
            (ErrorCode::UnknownSet, _) => Self::UnknownSet(message),
            (ErrorCode::SetPublishing, _) => Self::SetPublishing(message),
            (ErrorCode::BadSetName, _) => Self::BadSetName(message),
            (ErrorCode::NoCluster, _) => Self::NoCluster(message),
            (ErrorCode::ClusterUnavailable, _) => Self::ClusterUnavailable(message),
            (ErrorCode::UnknownNode, _) => Self::UnknownNode(message),
            (ErrorCode::NotExported, _) => Self::NotExported(message),
            (ErrorCode::RemoteGone, _) => Self::RemoteGone(message),
            (ErrorCode::ClusterRefused, _) => Self::ClusterRefused(message),
            (ErrorCode::Transfer, _) => Self::Transfer(message),
            _ => Self::Daemon { code, message },
        }
    }
}

impl fmt::Display for ShareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoDaemon { socket, why } => write!(
                f,
                "no share daemon serves {} ({why}): start one with `tandem share serve`",
                socket.display()
            ),
            Self::DaemonGone(why) => write!(f, "the share daemon is gone: {why}"),
            Self::CannotServe(why) => write!(f, "cannot serve: {why}"),
            Self::Refused(why) => write!(f, "the share daemon refused this client: {why}"),
            Self::Busy(why) => write!(f, "the share daemon is busy: {why}; try again later"),
            Self::UnknownId(id) => write!(f, "no shared buffer {id}"),
            Self::Deleted(id) => write!(f, "shared buffer {id} was deleted"),
            Self::NotSealed { id, waited } => {
                write!(f, "shared buffer {id} was not sealed within {waited:?}")
            }
            Self::NotWriter(id) => write!(f, "shared buffer {id} is sealed or not ours to seal"),
            Self::InvalidSize { bytes } => {
                write!(
                    f,
                    "a shared buffer of {bytes} bytes is zero or beyond the device"
                )
            }
            Self::OutOfRange {
                id,
                offset,
                len,
                buffer,
            } => write!(
                f,
                "offset {offset} + len {len} is past the {buffer} bytes of shared buffer {id}"
            ),
            Self::NoDevice(why) => write!(f, "no such device: {why}"),
            Self::NoPeerAccess { id, device, holder } => write!(
                f,
                "shared buffer {id} lives on device {holder}, which device {device} cannot \
                 reach (no peer access): open it on device {holder} and copy it"
            ),
            Self::Gpu(why) => write!(f, "GPU call failed: {why}"),
            Self::GpuInForkedChild { parent } => write!(
                f,
                "this process was forked from process {parent}, which had the GPU driver \
                 loaded, and a forked child cannot use it: start the process with the \
                 `spawn` method (Python's multiprocessing), or exec a new program"
            ),
            Self::UnknownSet(why) => write!(f, "unknown set: {why}"),
            Self::SetPublishing(why) => write!(f, "{why}: try again once it is bound"),
            Self::BadSetName(why) => write!(f, "bad set name: {why}"),
            Self::NoCluster(why) => write!(f, "no cluster: {why}"),
            Self::BadRemoteId(why) => write!(f, "not a remote buffer id: {why}"),
            Self::ClusterUnavailable(why) => write!(f, "the cluster's etcd is unavailable: {why}"),
            Self::UnknownNode(why) => write!(f, "unknown node: {why}"),
            Self::NotExported(why) => write!(f, "not exported: {why}"),
            Self::RemoteGone(why) => write!(f, "the remote node is gone: {why}"),
            Self::ClusterRefused(why) => write!(f, "refused by the cluster: {why}"),
            Self::Transfer(why) => write!(f, "the transfer failed: {why}"),
            Self::Protocol(why) => write!(f, "share protocol error: {why}"),
            Self::Daemon { code, message } => write!(f, "share daemon: {message} ({code:?})"),
        }
    }
}

impl std::error::Error for ShareError {}

impl From<GpuError> for ShareError {
    fn from(e: GpuError) -> Self {
        match e.kind {
            // A backend that loaded without a device, or an ordinal past
            // its devices: what every front reports as a missing device.
            tandem_hal::ErrorKind::NoDevice { .. } => Self::NoDevice(e.to_string()),
            _ => Self::Gpu(e.to_string()),
        }
    }
}

impl From<WireError> for ShareError {
    fn from(e: WireError) -> Self {
        Self::Protocol(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_peer_access_names_the_buffer_and_both_devices() {
        let error = ShareError::NoPeerAccess {
            id: ObjectId(5),
            device: 1,
            holder: 0,
        };
        let text = error.to_string();
        assert!(
            text.contains(&ObjectId(5).to_string())
                && text.contains("lives on device 0")
                && text.contains("device 1 cannot reach"),
            "{text}"
        );
    }
}
