//! Shared-memory segments: pages that several processes (and the host GPU
//! backend) map, anonymous (`memfd_create`, shared by passing the fd) or named
//! (`shm_open`, shared by name).
//!
//! Every mapping is `MAP_SHARED` with `PROT_READ | PROT_WRITE` (or
//! `PROT_READ` alone, for a reader that must not change what others see:
//! [`Segment::from_fd_read_only`]), so writes through one mapping are seen
//! through every other mapping of the same pages, in this process or
//! another; its base is page-aligned (so at least 64-byte aligned, as every
//! shared layout needs).
//!
//! A named segment's creator holds an exclusive `flock` on it for as long as
//! its [`Segment`] lives: the kernel drops the lock when the creator's fd is
//! closed, death included, so "nobody holds it" needs no pid at all and cannot
//! be fooled by a reused pid. [`SegmentProbe`] asks that question of a name,
//! and lets whoever wins the lock remove a segment its creator left behind.
//! Every name this process creates is also kept in a process-wide list, so a
//! signal handler thread can remove them before the process exits
//! ([`unlink_created_names`]).

use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::Mutex;

/// Where Linux shows named segments as files (what [`SegmentProbe`] compares
/// inodes with, and what a scan for leftovers lists).
pub const SHM_DIR: &str = "/dev/shm";

/// Longest segment name accepted (bytes, without the leading `/` that is
/// added when calling `shm_open`): the OS's file-name limit for
/// `/dev/shm/<name>` on Linux, `PSHMNAMLEN` on Apple systems.
#[cfg(not(target_vendor = "apple"))]
pub const MAX_NAME_LEN: usize = 255;
/// Longest segment name accepted (bytes, without the leading `/` that is
/// added when calling `shm_open`): the OS's file-name limit for
/// `/dev/shm/<name>` on Linux, `PSHMNAMLEN` on Apple systems.
#[cfg(target_vendor = "apple")]
pub const MAX_NAME_LEN: usize = 30;

/// Why a segment name was refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`].
    TooLong {
        /// The name's length in bytes.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// The name contains `/` (names are a single path component).
    ContainsSlash,
    /// The name contains a NUL byte.
    ContainsNul,
    /// The name is `.` or `..`.
    DotName,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Empty => f.write_str("name is empty"),
            Self::TooLong { len, max } => write!(f, "name is {len} bytes long, at most {max}"),
            Self::ContainsSlash => f.write_str("name contains '/'"),
            Self::ContainsNul => f.write_str("name contains a NUL byte"),
            Self::DotName => f.write_str("name is '.' or '..'"),
        }
    }
}

impl std::error::Error for NameError {}

/// Why a segment could not be created, opened or mapped.
#[derive(Debug)]
pub enum SegmentError {
    /// The segment name is not acceptable.
    InvalidName(NameError),
    /// A segment of zero bytes was requested, or the one opened is empty (a
    /// named segment whose creator has not sized it yet reads as empty).
    ZeroLength,
    /// The length does not fit the OS's file offset or this address space.
    TooLarge {
        /// The length asked for or found.
        len: u64,
    },
    /// `create_named`: the name exists (its creator still holds it, it was
    /// left behind by a process that died, or another process is removing
    /// it right now).
    Exists {
        /// The segment's name.
        name: String,
    },
    /// An OS call failed; `source` carries its errno.
    Os {
        /// The OS call, e.g. `shm_open`.
        call: &'static str,
        /// Its error.
        source: io::Error,
    },
}

impl SegmentError {
    /// The error of the OS call `call` that just failed (from `errno`).
    fn last_os(call: &'static str) -> Self {
        Self::Os {
            call,
            source: io::Error::last_os_error(),
        }
    }

    /// The errno of a failed OS call (`EEXIST` for [`Self::Exists`]), `None`
    /// for the other errors.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Self::Os { source, .. } => source.raw_os_error(),
            Self::Exists { .. } => Some(libc::EEXIST),
            _ => None,
        }
    }
}

impl fmt::Display for SegmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidName(e) => write!(f, "invalid segment name: {e}"),
            Self::ZeroLength => f.write_str("segment length is zero"),
            Self::TooLarge { len } => write!(f, "segment length {len} is too large"),
            Self::Exists { name } => write!(
                f,
                "shared-memory segment {SHM_DIR}/{name} already exists (another process holds it, or a dead one left it behind)"
            ),
            Self::Os { call, source } => write!(f, "{call} failed: {source}"),
        }
    }
}

impl std::error::Error for SegmentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidName(e) => Some(e),
            Self::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<NameError> for SegmentError {
    fn from(e: NameError) -> Self {
        Self::InvalidName(e)
    }
}

/// One mapping of a segment's pages, unmapped on drop. It stays valid after
/// the [`Segment`] it came from is dropped (the mapping keeps the pages).
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a mapping is an address range owned by this value; the methods only
// hand out its address (what is done through it is the caller's `unsafe`),
// and `munmap` in `drop` runs with exclusive access.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`; `&Mapping` gives nothing but the address and length.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` shared, readable and writable.
    fn new(fd: BorrowedFd<'_>, len: usize) -> Result<Self, SegmentError> {
        Self::with_protection(fd, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Maps `len` bytes of `fd` shared, with protection `prot`.
    fn with_protection(
        fd: BorrowedFd<'_>,
        len: usize,
        prot: libc::c_int,
    ) -> Result<Self, SegmentError> {
        // SAFETY: a fresh mapping at an address the kernel picks; it aliases
        // no Rust object. The fd is open for the duration of the call.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(SegmentError::last_os("mmap"));
        }
        let ptr = NonNull::new(addr.cast::<u8>()).ok_or(SegmentError::Os {
            call: "mmap",
            source: io::Error::other("mmap returned a null address"),
        })?;
        Ok(Mapping { ptr, len })
    }

    /// The base address (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: zero-length segments are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range `mmap` returned, unmapped once. Failure is
        // only possible for invalid arguments, which this range is not.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A shared-memory segment: its fd, a mapping of all of it and, for named
/// segments, the name. Dropping it unmaps and closes; a segment created by
/// name also unlinks the name (processes that opened it keep their mappings).
#[derive(Debug)]
pub struct Segment {
    map: Mapping,
    fd: OwnedFd,
    name: Option<String>,
    /// The `shm_open` path of a name this value created, unlinked on drop.
    unlink_on_drop: Option<CString>,
}

// `Segment` is Send + Sync without an unsafe impl: `Mapping` is (argued
// above), and the fd and name are plain owned values. Nothing is mutated
// through `&Segment`.

impl Segment {
    /// Creates an anonymous segment of `len` bytes (`memfd_create` with
    /// `MFD_CLOEXEC` where the OS has it), shared with other processes by
    /// passing [`fd`](Self::fd) (e.g. over a UNIX socket).
    pub fn create_anonymous(len: usize) -> Result<Segment, SegmentError> {
        let size = file_size(len)?;
        let fd = anonymous_fd()?;
        resize(fd.as_fd(), size)?;
        let map = Mapping::new(fd.as_fd(), len)?;
        Ok(Self::unnamed(fd, map))
    }

    /// Creates the named segment `name` of `len` bytes (`shm_open` with
    /// `O_CREAT | O_EXCL | O_RDWR`, mode 0600, then `ftruncate`). An existing
    /// name is an error (`EEXIST`). The returned segment unlinks the name when
    /// dropped; if creation fails after the name exists, it is unlinked at once.
    pub fn create_named(name: &str, len: usize) -> Result<Segment, SegmentError> {
        let path = shm_path(name)?;
        let size = file_size(len)?;
        let fd = shm_open(&path, CREATE_EXCLUSIVE, 0o600).map_err(|e| {
            if e.raw_os_error() == Some(libc::EEXIST) {
                SegmentError::Exists {
                    name: name.to_owned(),
                }
            } else {
                e
            }
        })?;
        // The creator's lock (module docs). It can only be refused if a
        // prober took the fresh, empty name for a leftover in the instant
        // between shm_open and here: that prober removes it, so leave the
        // name to it and report the name taken. Such a prober may also have
        // removed the name and let go before this lock: the object is then
        // no longer the name's (which may be another creator's by now), and
        // the name is taken too. Checked under the lock, which any prober
        // must hold to remove the name.
        let exists = || SegmentError::Exists {
            name: name.to_owned(),
        };
        if !try_lock(fd.as_fd()) {
            return Err(exists());
        }
        let (inode, _) = inode_and_size(fd.as_fd())?;
        if !names_inode(name, inode)? {
            return Err(exists());
        }
        let mapped = resize(fd.as_fd(), size).and_then(|()| Mapping::new(fd.as_fd(), len));
        match mapped {
            Ok(map) => {
                created_names().push(path.clone());
                Ok(Segment {
                    map,
                    fd,
                    name: Some(name.to_owned()),
                    unlink_on_drop: Some(path),
                })
            }
            Err(e) => {
                unlink(&path);
                Err(e)
            }
        }
    }

    /// Opens and maps the existing named segment `name`, all of it (the size
    /// comes from `fstat`). A missing name is an error with `ENOENT`; an
    /// empty segment is [`SegmentError::ZeroLength`]. The name is not
    /// unlinked when this segment is dropped.
    pub fn open_named(name: &str) -> Result<Segment, SegmentError> {
        let path = shm_path(name)?;
        let fd = shm_open(&path, libc::O_RDWR, 0)?;
        let mut segment = Self::from_fd(fd)?;
        segment.name = Some(name.to_owned());
        Ok(segment)
    }

    /// Maps all of the shared-memory object `fd` refers to (e.g. one received
    /// from another process); its size comes from `fstat`.
    pub fn from_fd(fd: OwnedFd) -> Result<Segment, SegmentError> {
        let len = mapped_len(fd.as_fd())?;
        let map = Mapping::new(fd.as_fd(), len)?;
        Ok(Self::unnamed(fd, map))
    }

    /// [`from_fd`](Self::from_fd), mapped readable only: a store through
    /// this mapping faults (`SIGSEGV`), while other mappings of the same
    /// pages keep whatever protection they have.
    pub fn from_fd_read_only(fd: OwnedFd) -> Result<Segment, SegmentError> {
        let len = mapped_len(fd.as_fd())?;
        let map = Mapping::with_protection(fd.as_fd(), len, libc::PROT_READ)?;
        Ok(Self::unnamed(fd, map))
    }

    /// A segment of `fd` mapped at `map`, known by no name (a caller that opened it by name
    /// sets that).
    fn unnamed(fd: OwnedFd, map: Mapping) -> Segment {
        Segment {
            map,
            fd,
            name: None,
            unlink_on_drop: None,
        }
    }

    /// The base address of this segment's mapping (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always `false`: zero-length segments are refused.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The name of a named segment.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The segment's fd, to pass to another process or to register the pages.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Maps the same pages again, at another address.
    pub fn map_again(&self) -> Result<Mapping, SegmentError> {
        Mapping::new(self.fd(), self.len())
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if let Some(path) = &self.unlink_on_drop {
            // Under the list's lock, so a signal thread's
            // `unlink_created_names` never unlinks the name after this drop
            // (when another process may have created it anew).
            let mut names = created_names();
            if let Some(at) = names.iter().position(|n| n == path) {
                names.swap_remove(at);
            }
            unlink(path);
        }
        // `map` and `fd` are unmapped and closed by their own drops.
    }
}

/// The names this process created whose [`Segment`]s are alive.
fn created_names() -> std::sync::MutexGuard<'static, Vec<CString>> {
    static NAMES: Mutex<Vec<CString>> = Mutex::new(Vec::new());
    // A panic while holding the lock leaves a usable list (pushes and
    // removals are single operations).
    NAMES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Unlinks every name this process created that is still held by a live
/// [`Segment`], and returns how many. For a process about to exit without
/// running destructors (a signal handler thread that then calls
/// `std::process::exit`); its mappings stay valid until it exits. Not
/// async-signal-safe: call it from a normal thread (e.g. signal-hook's
/// iterator), never from a signal handler.
pub fn unlink_created_names() -> usize {
    let mut names = created_names();
    for path in names.iter() {
        unlink(path);
    }
    let count = names.len();
    // The drops of these segments will find their names gone from the list
    // and unlink nothing more.
    names.clear();
    count
}

/// Takes an exclusive `flock` on `fd` without blocking; `false` when another
/// open file holds one (or the file system refuses locks: then no one can
/// tell, and the name counts as held).
fn try_lock(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: plain syscall on an fd that is open for the call.
    unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// The inode of `fd`'s file, and its size.
fn inode_and_size(fd: BorrowedFd<'_>) -> Result<(u64, u64), SegmentError> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `stat` is writable storage for one `struct stat`.
    if unsafe { libc::fstat(fd.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return Err(SegmentError::last_os("fstat"));
    }
    // SAFETY: `fstat` succeeded, so it filled `stat`.
    let stat = unsafe { stat.assume_init() };
    #[allow(
        clippy::unnecessary_cast,
        reason = "st_ino is narrower than u64 on some targets"
    )]
    let inode = stat.st_ino as u64;
    Ok((inode, stat.st_size.max(0) as u64))
}

/// Whether the segment name `name` refers to the object of inode `inode`
/// (`false` when it is gone or names another object).
fn names_inode(name: &str, inode: u64) -> Result<bool, SegmentError> {
    match std::fs::metadata(format!("{SHM_DIR}/{name}")) {
        Ok(meta) => Ok(std::os::unix::fs::MetadataExt::ino(&meta) == inode),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(SegmentError::Os {
            call: "stat",
            source,
        }),
    }
}

/// An existing named segment opened read-only to decide whether it was left
/// behind: whether its creator still holds it ([`is_held`](Self::is_held)),
/// and what its first bytes say ([`read_at`](Self::read_at)). When nobody
/// held it, the probe now holds the creator's lock itself, until dropped: no
/// other prober can take it meanwhile, so [`unlink`](Self::unlink) removes
/// exactly the object probed, and a process that creates the name anew
/// while the probe lives cannot be removed by a later prober of the old one.
#[derive(Debug)]
pub struct SegmentProbe {
    name: String,
    path: CString,
    fd: OwnedFd,
    inode: u64,
    len: u64,
    held: bool,
}

impl SegmentProbe {
    /// Opens `name` (read-only) and tries its creator's lock. A missing name
    /// is an error with `ENOENT`.
    pub fn open(name: &str) -> Result<Self, SegmentError> {
        let path = shm_path(name)?;
        let fd = shm_open(&path, libc::O_RDONLY, 0)?;
        let held = !try_lock(fd.as_fd());
        let (inode, len) = inode_and_size(fd.as_fd())?;
        Ok(Self {
            name: name.to_owned(),
            path,
            fd,
            inode,
            len,
            held,
        })
    }

    /// The segment's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether another process holds the segment: its creator, alive (running
    /// or stopped), or a prober deciding about it right now.
    pub fn is_held(&self) -> bool {
        self.held
    }

    /// Its size in bytes (0 when its creator died before sizing it).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads up to `buf.len()` bytes at `offset` (fewer at the end of the
    /// segment); returns how many. A snapshot: for a segment nobody holds,
    /// nobody is writing it.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, SegmentError> {
        let offset =
            libc::off_t::try_from(offset).map_err(|_| SegmentError::TooLarge { len: offset })?;
        // SAFETY: `buf` is writable for its length; the fd is open.
        let n = unsafe {
            libc::pread(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                offset,
            )
        };
        usize::try_from(n).map_err(|_| SegmentError::last_os("pread"))
    }

    /// Removes the name of a segment nobody held ([`is_held`](Self::is_held)
    /// false). Returns `false`, removing nothing, when it was held or when
    /// the name no longer refers to the probed object (another prober removed
    /// it and someone created the name anew).
    pub fn unlink(&self) -> Result<bool, SegmentError> {
        if self.held {
            return Ok(false);
        }
        if !names_inode(&self.name, self.inode)? {
            return Ok(false);
        }
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        if unsafe { libc::shm_unlink(self.path.as_ptr()) } != 0 {
            let e = SegmentError::last_os("shm_unlink");
            if e.raw_os_error() == Some(libc::ENOENT) {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(true)
    }
}

/// `shm_open`'s flags for a name that must be new.
const CREATE_EXCLUSIVE: libc::c_int = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;

/// `shm_open(path, flags, mode)`, the descriptor owned.
fn shm_open(path: &CStr, flags: libc::c_int, mode: libc::mode_t) -> Result<OwnedFd, SegmentError> {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let raw = unsafe { libc::shm_open(path.as_ptr(), flags, mode) };
    if raw < 0 {
        return Err(SegmentError::last_os("shm_open"));
    }
    // SAFETY: `raw` is a freshly opened fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Checks a segment name and builds the `shm_open` path `/<name>`.
fn shm_path(name: &str) -> Result<CString, NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong {
            len: name.len(),
            max: MAX_NAME_LEN,
        });
    }
    if name.contains('/') {
        return Err(NameError::ContainsSlash);
    }
    if name == "." || name == ".." {
        return Err(NameError::DotName);
    }
    CString::new(format!("/{name}")).map_err(|_| NameError::ContainsNul)
}

/// `len` as a file size, refusing zero and sizes the OS cannot represent.
fn file_size(len: usize) -> Result<libc::off_t, SegmentError> {
    if len == 0 {
        return Err(SegmentError::ZeroLength);
    }
    libc::off_t::try_from(len).map_err(|_| SegmentError::TooLarge { len: len as u64 })
}

/// Sizes the object behind `fd` to `size` bytes.
fn resize(fd: BorrowedFd<'_>, size: libc::off_t) -> Result<(), SegmentError> {
    // SAFETY: plain syscall on an fd that is open for the call.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(SegmentError::last_os("ftruncate"));
    }
    Ok(())
}

/// The size of the object behind `fd`, as a length to map.
fn mapped_len(fd: BorrowedFd<'_>) -> Result<usize, SegmentError> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `stat` is writable storage for one `struct stat`.
    if unsafe { libc::fstat(fd.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return Err(SegmentError::last_os("fstat"));
    }
    // SAFETY: `fstat` succeeded, so it filled `stat`.
    let size = unsafe { stat.assume_init() }.st_size;
    match usize::try_from(size) {
        Ok(0) => Err(SegmentError::ZeroLength),
        Ok(len) => Ok(len),
        // A negative size is impossible from the kernel; report it as is.
        Err(_) => Err(SegmentError::TooLarge { len: size as u64 }),
    }
}

/// Removes a segment name; failure (already removed by someone else) is not
/// an error to the owner, whose pages stay mapped either way.
fn unlink(path: &CString) {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    unsafe { libc::shm_unlink(path.as_ptr()) };
}

/// A new anonymous shared-memory object.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
fn anonymous_fd() -> Result<OwnedFd, SegmentError> {
    // SAFETY: the name is a NUL-terminated literal.
    let raw = unsafe { libc::memfd_create(c"tandem-segment".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(SegmentError::last_os("memfd_create"));
    }
    // SAFETY: `raw` is a freshly created fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A new anonymous shared-memory object: where there is no `memfd_create`, a
/// named object under a name unique to this process, unlinked at once so only
/// the fd refers to it.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn anonymous_fd() -> Result<OwnedFd, SegmentError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    // Relaxed: only uniqueness of the values matters.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let name = format!(
            "tnd-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = shm_path(&name)?;
        match shm_open(&path, CREATE_EXCLUSIVE, 0o600) {
            Ok(fd) => {
                unlink(&path);
                return Ok(fd);
            }
            // A stale object of a dead process with our pid: try the next name.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => return Err(e),
        }
    }
}
