//! The socket: where it lives, who may connect, and frames with a file
//! descriptor beside them.
//!
//! The socket is the daemon's only door, so it is shut twice: it is created
//! mode 0600 in a directory of mode 0700 that the user owns (the kernel
//! refuses other users at `connect`), and the daemon checks every
//! connection's uid with `SO_PEERCRED` (in case the file's mode was widened
//! or the socket handed on).

use std::io::{self, IoSlice, IoSliceMut, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::wire::{Header, HEADER_BYTES};

/// The socket's file name in [`runtime_dir`].
pub const SOCKET_NAME: &str = "share.sock";

/// The current user's id.
pub fn own_uid() -> u32 {
    // SAFETY: getuid cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

/// `$XDG_RUNTIME_DIR/tandem`, or `/tmp/tandem-<uid>` where that is unset:
/// a directory only the user can enter.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("tandem"),
        _ => std::env::temp_dir().join(format!("tandem-{}", own_uid())),
    }
}

/// Where a daemon listens unless told otherwise.
pub fn default_socket_path() -> PathBuf {
    runtime_dir().join(SOCKET_NAME)
}

/// Creates `dir` (mode 0700) or checks that an existing one is the user's
/// and closed to others: a socket in a directory another user can write
/// could be swapped for theirs.
fn private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::metadata(dir)?;
    if meta.uid() != own_uid() || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {} with mode {:o}: not a private directory",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o777
            ),
        ));
    }
    Ok(())
}

/// Binds `path` owner-only. A socket file left by a dead daemon is
/// replaced; one a live daemon answers on is `AddrInUse`; anything else
/// there (a file named by mistake, a link) is `AlreadyExists`, and kept.
pub fn bind_owner_only(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    // A bare file name lives in the current directory, which must be as
    // private as any other.
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => private_dir(dir)?,
        _ => private_dir(Path::new("."))?,
    }
    let existing = match std::fs::symlink_metadata(path) {
        Ok(meta) => Some(meta.file_type()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if existing.is_some_and(|kind| !kind.is_socket()) {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket: not replacing it",
                path.display()
            ),
        ));
    }
    if existing.is_some() {
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("a daemon already serves {}", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    // The folder is made again if a daemon that stopped just removed it,
    // empty (remove_socket), between the check above and the bind.
    let mut tries = 0;
    let listener = loop {
        match UnixListener::bind(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 3 => {
                tries += 1;
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    private_dir(dir)?;
                }
            }
            bound => break bound?,
        }
    };
    // bind creates the file with the umask's mode; there is no window for
    // another user, since the directory is private.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Shuts `listener`: an `accept` blocked on it in any thread returns
/// (`EINVAL`), as does every later one, and connects are refused, whatever
/// became of its socket file.
pub(crate) fn shut_listener(listener: &impl AsRawFd) {
    // SAFETY: shutdown(2) on the descriptor `listener` owns, open for the
    // call; it touches no memory of ours. It fails only for a descriptor
    // that is not a socket, which a listener's is.
    unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) };
}

/// Removes a daemon's socket, and the default folder it lived in
/// ([`runtime_dir`]) when no other socket is left there: a daemon leaves
/// nothing behind in `/tmp`. Errors are ignored: whoever stops a daemon has
/// nothing to do about them.
pub(crate) fn remove_socket(path: &Path) {
    let _ = std::fs::remove_file(path);
    if path.parent() == Some(runtime_dir().as_path()) {
        // Fails, harmlessly, while another daemon's socket is there.
        let _ = std::fs::remove_dir(runtime_dir());
    }
}

/// Who is at the other end of a connection, as it was at `connect`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCredentials {
    /// Its process.
    pub pid: u32,
    /// Its user.
    pub uid: u32,
}

/// The process and user at the other end (`SO_PEERCRED`, as they were at
/// `connect`).
pub fn peer_credentials(stream: &UnixStream) -> io::Result<PeerCredentials> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = core::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable ucred and `len` its size, as
    // SO_PEERCRED expects.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCredentials {
        pid: cred.pid as u32,
        uid: cred.uid,
    })
}

/// Room for one descriptor's control message.
const CMSG_SPACE: usize = 64;

/// Sends `frame`, with `fd` beside its first byte when given. A peer that
/// closed its end is `BrokenPipe`, never SIGPIPE: the process may not
/// ignore that signal (a command that lets it end a `| head` pipeline).
pub fn send_frame(stream: &UnixStream, frame: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let Some(fd) = fd else {
        return send_all(stream, frame);
    };
    let mut control = [0u8; CMSG_SPACE];
    let iov = [IoSlice::new(frame)];
    // SAFETY: zeroed msghdr is a valid "nothing" value; the fields set below
    // point at `iov` and `control`, which outlive the sendmsg call.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(core::mem::size_of::<RawFd>() as u32) } as _;
    debug_assert!(msg.msg_controllen as usize <= CMSG_SPACE);
    // SAFETY: msg_control points at msg_controllen writable bytes, so the
    // first header exists; CMSG_DATA of it has room for one int.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(core::mem::size_of::<RawFd>() as u32) as _;
        core::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd.as_raw_fd());
    }
    // SAFETY: msg is fully initialised as above; MSG_NOSIGNAL turns a
    // closed peer into EPIPE instead of SIGPIPE.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    // The descriptor went with the first byte; the rest is plain.
    send_all(stream, &frame[sent as usize..])
}

/// Writes all of `bytes` with `MSG_NOSIGNAL` to a connected socket (the
/// daemon's, or a TCP one between the daemons of a cluster).
pub(crate) fn send_all(stream: &impl AsRawFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a live slice of its length; send only reads it.
        let sent = unsafe {
            libc::send(
                stream.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if sent < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[sent as usize..];
    }
    Ok(())
}

/// What [`recv_frame`] read.
#[derive(Debug)]
pub struct Received {
    /// The whole frame, header included (its header checked).
    pub frame: Vec<u8>,
    /// The descriptor that came with it, if one did.
    pub fd: Option<OwnedFd>,
}

/// Why [`recv_frame`] returned no frame.
#[derive(Debug)]
pub enum RecvError {
    /// The peer closed the connection between frames.
    Closed,
    /// The socket failed (or closed mid-frame).
    Io(io::Error),
    /// The header is not this protocol's.
    Wire(crate::wire::WireError),
}

/// Reads one frame and any descriptor sent with it. More than one
/// descriptor, or one cut short by the kernel, is an error (and closed).
/// Waits for the first byte as long as the stream's read timeout lets it,
/// then for the rest as long as `rest_within` (when given) allows in all:
/// a peer that starts a frame and stalls cannot hold the reader.
pub fn recv_frame(
    stream: &UnixStream,
    rest_within: Option<Duration>,
) -> Result<Received, RecvError> {
    let mut header = [0u8; HEADER_BYTES];
    let mut control = [0u8; CMSG_SPACE];
    let mut iov = [IoSliceMut::new(&mut header)];
    // SAFETY: as in send_frame; the buffers outlive the call.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr().cast();
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CMSG_SPACE as _;
    let got = loop {
        // SAFETY: msg describes writable buffers; CLOEXEC so a descriptor
        // never leaks into a child we spawn.
        let got = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if got >= 0 {
            break got as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(RecvError::Io(e));
        }
    };
    let fds = received_fds(&msg);
    if got == 0 {
        return Err(RecvError::Closed);
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() > 1 {
        return Err(RecvError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            "more descriptors than one came with a frame",
        )));
    }
    // A deadline past what an Instant holds is no deadline.
    let deadline = rest_within.and_then(|d| Instant::now().checked_add(d));
    read_exact_by(stream, &mut header[got..], deadline).map_err(RecvError::Io)?;
    let parsed = Header::decode(&header).map_err(RecvError::Wire)?;
    let mut frame = vec![0u8; HEADER_BYTES + parsed.payload as usize];
    frame[..HEADER_BYTES].copy_from_slice(&header);
    read_exact_by(stream, &mut frame[HEADER_BYTES..], deadline).map_err(RecvError::Io)?;
    Ok(Received {
        frame,
        fd: fds.into_iter().next(),
    })
}

/// Fills `buf` from `stream`, failing with `TimedOut` once `deadline` (if
/// any) passes; the stream's read timeout is as it was afterwards.
fn read_exact_by(stream: &UnixStream, buf: &mut [u8], deadline: Option<Instant>) -> io::Result<()> {
    let Some(deadline) = deadline else {
        return (&*stream).read_exact(buf);
    };
    let before = stream.read_timeout()?;
    let mut filled = 0;
    let result = loop {
        if filled == buf.len() {
            break Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "a frame was started but not finished in time",
            ));
        }
        if let Err(e) = stream.set_read_timeout(Some(left)) {
            break Err(e);
        }
        match (&*stream).read(&mut buf[filled..]) {
            Ok(0) => break Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The timeout expired: the loop's check says so.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => break Err(e),
        }
    };
    stream.set_read_timeout(before)?;
    result
}

/// Whether the peer of `stream` closed its end (or the connection broke):
/// what a daemon thread that waits on the peer's behalf checks, to stop
/// waiting for someone who left.
pub fn peer_hung_up(stream: &impl AsRawFd) -> bool {
    peer_hung_up_within(stream, Duration::ZERO)
}

/// Whether the peer of `stream` closes its end (or the connection breaks)
/// within `wait`: what a fetch asks of a remote node's connection when its
/// transfer failed, to tell a node that died from a transfer that did.
pub fn peer_hung_up_within(stream: &impl AsRawFd, wait: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    let timeout = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd; poll only reports.
    let rc = unsafe { libc::poll(&mut poll, 1, timeout) };
    rc > 0 && poll.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Whether a read of `stream` would return at once: bytes are waiting, or
/// the peer closed it, or it failed (the read then says how).
pub fn readable_now(stream: &UnixStream) -> bool {
    let mut byte = 0u8;
    // SAFETY: a one-byte peek into a live local; nothing is consumed.
    let got = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&raw mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    !(got < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock)
}

/// Spins up to `spin` for `stream` to have bytes (or to close) before the
/// caller blocks reading it. A reply the daemon sends within the window
/// then costs this thread no sleep and wake-up; a later one is read
/// blocking as before.
pub fn spin_until_readable(stream: &UnixStream, spin: std::time::Duration) {
    let started = std::time::Instant::now();
    while !readable_now(stream) && started.elapsed() < spin {
        core::hint::spin_loop();
    }
}

/// Takes ownership of every descriptor in `msg`'s control messages, so none
/// leaks whatever the caller decides.
fn received_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control up to msg_controllen; the CMSG
    // macros walk only within it, and each SCM_RIGHTS payload holds
    // (cmsg_len - CMSG_LEN(0)) / 4 descriptors now owned by this process.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / core::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(core::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    fds
}
