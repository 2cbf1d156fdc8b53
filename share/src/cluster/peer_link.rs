//! Frames between the daemons of a cluster, over TCP: reading and writing one, and the
//! asking side of a link (a daemon that fetches from another: hello with the token, lease,
//! release, list).
//!
//! A link answers its requests in order, so a release may be sent without waiting for its
//! answer ([`PeerLink::release_later`]): the link reads the answers it owes before its next
//! request's.

use std::io::{self, Read};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::transport;
use crate::wire::{
    ErrorCode, Header, LeasedRegion, ObjectId, ObjectInfo, Reply, Request, HEADER_BYTES,
};

/// How long a link waits to connect, and for each answer.
pub(crate) const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a link to another node failed.
#[derive(Debug)]
pub(crate) enum LinkError {
    /// The node did not answer (refused, reset, closed, timed out).
    Gone(String),
    /// The node answered with a refusal.
    Refused {
        /// Its code.
        code: ErrorCode,
        /// Its words.
        message: String,
    },
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gone(why) => f.write_str(why),
            Self::Refused { message, .. } => f.write_str(message),
        }
    }
}

/// Writes one frame.
pub(crate) fn write_frame(stream: &TcpStream, frame: &[u8]) -> io::Result<()> {
    transport::send_all(stream, frame)
}

/// Reads one frame, as long as the stream's read timeout lets it; `Ok(None)` when the peer
/// closed the connection between frames.
pub(crate) fn read_frame(mut stream: &TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; HEADER_BYTES];
    match stream.read(&mut header[..1]) {
        Ok(0) => return Ok(None),
        Ok(_) => {}
        Err(e) => return Err(e),
    }
    stream.read_exact(&mut header[1..])?;
    let parsed = Header::decode(&header)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    let mut frame = vec![0u8; HEADER_BYTES + parsed.payload as usize];
    frame[..HEADER_BYTES].copy_from_slice(&header);
    stream.read_exact(&mut frame[HEADER_BYTES..])?;
    Ok(Some(frame))
}

/// A connection to another node's daemon, introduced with the cluster's token.
pub(crate) struct PeerLink {
    stream: TcpStream,
    /// The node it reaches (for messages).
    node: String,
    /// Releases sent whose answers are still to be read.
    unanswered: usize,
}

impl PeerLink {
    /// Connects to node `node` at `address` and introduces this node (`from`) with `token`.
    pub(crate) fn connect(
        node: &str,
        address: &str,
        from: &str,
        token: &str,
    ) -> Result<Self, LinkError> {
        let gone = |e: io::Error| LinkError::Gone(format!("node {node} at {address}: {e}"));
        let target = address
            .to_socket_addrs()
            .map_err(gone)?
            .next()
            .ok_or_else(|| LinkError::Gone(format!("node {node}: {address} names no address")))?;
        let stream = TcpStream::connect_timeout(&target, PEER_TIMEOUT).map_err(gone)?;
        stream.set_read_timeout(Some(PEER_TIMEOUT)).map_err(gone)?;
        // Small frames, each awaited: sent at once.
        stream.set_nodelay(true).map_err(gone)?;
        let mut link = Self {
            stream,
            node: node.to_owned(),
            unanswered: 0,
        };
        let hello = Request::PeerHello {
            node: from.to_owned(),
            token: token.to_owned(),
        };
        match link.call(&hello)? {
            Reply::Done => Ok(link),
            other => Err(link.unexpected(&other)),
        }
    }

    /// The TCP connection (its hang-up says the node went away).
    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    fn call(&mut self, request: &Request) -> Result<Reply, LinkError> {
        write_frame(&self.stream, &request.encode()).map_err(|e| self.gone(&e))?;
        while self.unanswered > 0 {
            match self.answer() {
                Ok(_) => {}
                // A release refused: the node had forgotten the lease already (it goes
                // with the connection anyway), nothing to undo here.
                Err(LinkError::Refused { message, .. }) => {
                    tracing::debug!("node {}: a release: {message}", self.node);
                }
                Err(gone) => return Err(gone),
            }
            self.unanswered -= 1;
        }
        self.answer()
    }

    fn gone(&self, e: &io::Error) -> LinkError {
        LinkError::Gone(format!("node {}: {e}", self.node))
    }

    /// The next answer on the link.
    fn answer(&self) -> Result<Reply, LinkError> {
        let frame = read_frame(&self.stream)
            .map_err(|e| self.gone(&e))?
            .ok_or_else(|| LinkError::Gone(format!("node {} closed the connection", self.node)))?;
        match Reply::decode(&frame) {
            Ok(Reply::Error { code, message }) => Err(LinkError::Refused { code, message }),
            Ok(reply) => Ok(reply),
            Err(e) => Err(LinkError::Gone(format!("node {}: {e}", self.node))),
        }
    }

    fn unexpected(&self, reply: &Reply) -> LinkError {
        LinkError::Gone(format!("node {} answered {reply:?}", self.node))
    }

    /// A lease on exported buffer `id`, and where to read it.
    pub(crate) fn lease(&mut self, id: ObjectId) -> Result<LeasedRegion, LinkError> {
        match self.call(&Request::PeerLease { id })? {
            Reply::Leased(region) => Ok(region),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Gives the lease on `id` back without waiting for the node's answer (read before the
    /// next request's).
    pub(crate) fn release_later(&mut self, id: ObjectId) -> Result<(), LinkError> {
        write_frame(&self.stream, &Request::PeerRelease { id }.encode())
            .map_err(|e| self.gone(&e))?;
        self.unanswered += 1;
        Ok(())
    }

    /// The node's exported buffers.
    pub(crate) fn list(&mut self) -> Result<Vec<ObjectInfo>, LinkError> {
        match self.call(&Request::PeerList)? {
            Reply::List(infos) => Ok(infos),
            other => Err(self.unexpected(&other)),
        }
    }
}
