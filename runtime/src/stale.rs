//! Segments left behind by processes that died: found by their owner, reclaimed
//! when a runtime (or any creator using [`create_owned_segment`]) starts on
//! their name, removed by hand with [`clean_stale_segments`] (`tandem clean`).
//!
//! Two records say who owns a named segment. Its creator holds an `flock` on
//! it for as long as its segment lives (shm-core's [`SegmentProbe`]), which
//! the kernel drops when the creator dies; and its header names the owner's
//! [`ProcessIdentity`] (pid and start time): a runtime segment's
//! [`SegmentHeader::runtime_pid`] and `runtime_start_time`, or, for a segment
//! of a user's own format, the [`OwnerRecord`] it starts with. A segment is
//! stale when nobody holds it and, if its header is published, the owner it
//! names is gone. A live owner, stopped or not, keeps its segment.
//!
//! Two starters reclaiming one stale name at once: the probe that wins the
//! lock is the only one that may remove the name, and it creates the new
//! segment (`O_EXCL`) before it lets go of the old one; the other finds the
//! old object held, or the name on a new, held object, and reports the
//! segment in use. One wins, the other gets [`RuntimeError::SegmentInUse`].

use std::mem::size_of;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memoffset::offset_of;
use tandem_shm_core::segment::SHM_DIR;
use tandem_shm_core::{Segment, SegmentError, SegmentProbe};

use crate::error::RuntimeError;
use crate::layout::{SegmentHeader, SEGMENT_MAGIC};
use crate::process::ProcessIdentity;

/// The first word of a published [`OwnerRecord`] ("TNDMOWND").
pub const OWNED_SEGMENT_MAGIC: u64 = 0x544e_444d_4f57_4e44;

/// The first 24 bytes of a named segment of a user's own format that
/// `tandem clean` and [`create_owned_segment`] should recognise: who owns it.
/// The segment's creator places it at offset 0, initialises the rest of its
/// segment, then [`publish`](Self::publish)es it; the runtime's own segments
/// record their owner in their header instead.
#[repr(C, align(8))]
#[derive(Debug)]
pub struct OwnerRecord {
    magic: AtomicU64,
    pid: AtomicU32,
    kind: AtomicU32,
    start_time: AtomicU64,
}

static_assertions::assert_eq_size!(OwnerRecord, [u8; 24]);
static_assertions::const_assert_eq!(offset_of!(OwnerRecord, magic), 0);
static_assertions::const_assert_eq!(offset_of!(OwnerRecord, pid), 8);
static_assertions::const_assert_eq!(offset_of!(OwnerRecord, kind), 12);
static_assertions::const_assert_eq!(offset_of!(OwnerRecord, start_time), 16);

impl OwnerRecord {
    /// Records this process as the owner and `kind` (the format's own tag,
    /// which [`owner`](Self::owner) returns to tell formats apart), then
    /// publishes the record. Call it last: a reader that sees the record
    /// published sees everything written before the call.
    pub fn publish(&self, kind: u32) {
        let me = ProcessIdentity::current();
        // Relaxed: published by the Release of the magic below.
        self.pid.store(me.pid, Ordering::Relaxed);
        self.kind.store(kind, Ordering::Relaxed);
        self.start_time.store(me.start_time, Ordering::Relaxed);
        // Release: pairs with the Acquire in `owner` (and with `tandem
        // clean`'s read of the segment), ordering the segment's
        // initialisation and the fields above before the magic.
        self.magic.store(OWNED_SEGMENT_MAGIC, Ordering::Release);
    }

    /// The owner and kind, once published; `None` before.
    pub fn owner(&self) -> Option<(ProcessIdentity, u32)> {
        // Acquire: pairs with `publish`'s Release.
        if self.magic.load(Ordering::Acquire) != OWNED_SEGMENT_MAGIC {
            return None;
        }
        // Relaxed: ordered by the Acquire above.
        let owner = ProcessIdentity {
            pid: self.pid.load(Ordering::Relaxed),
            start_time: self.start_time.load(Ordering::Relaxed),
        };
        Some((owner, self.kind.load(Ordering::Relaxed)))
    }
}

/// Why a segment was found stale.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StaleWhy {
    /// Its header names an owner process that is gone, and nobody holds it.
    OwnerGone,
    /// Its creator died before publishing its header (and nobody holds it).
    NeverPublished,
}

/// A segment left behind by a process that is gone. Displays as
/// `NAME (owner pid N, gone)`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StaleSegment {
    /// Its name (the file `/dev/shm/<name>`).
    pub name: String,
    /// The owner its header names, when it has one.
    pub owner_pid: Option<u32>,
    /// Why it is stale.
    pub why: StaleWhy,
}

impl std::fmt::Display for StaleSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (", self.name)?;
        match (self.why, self.owner_pid) {
            (StaleWhy::OwnerGone, Some(pid)) => write!(f, "owner pid {pid}, gone)"),
            (StaleWhy::OwnerGone, None) => f.write_str("owner gone)"),
            (StaleWhy::NeverPublished, _) => {
                f.write_str("never set up: its creator died first, nobody holds it)")
            }
        }
    }
}

/// What a segment's first bytes say.
enum Header {
    /// A runtime segment or an owned segment, published, with its owner.
    Tandem(ProcessIdentity),
    /// Too short for a magic, or the magic still 0: its creator had not
    /// finished (or is finishing now).
    Unpublished,
    /// A CPU device IPC segment (memory or event), which has no header;
    /// its name (`tdm-<pid>-<sequence>`, hex) gives its exporter, which
    /// holds it while alive.
    HostIpc(u32),
    /// Something else.
    Foreign,
}

/// The exporter of a CPU device IPC segment named `name` (see
/// `tandem_hal::host`), if that is what the name is.
fn host_ipc_exporter(name: &str) -> Option<u32> {
    let (pid, sequence) = name.strip_prefix("tdm-")?.split_once('-')?;
    u64::from_str_radix(sequence, 16).ok()?;
    u32::from_str_radix(pid, 16).ok()
}

fn read_header(probe: &SegmentProbe) -> Result<Header, RuntimeError> {
    if let Some(pid) = host_ipc_exporter(probe.name()) {
        return Ok(Header::HostIpc(pid));
    }
    let mut bytes = [0u8; size_of::<SegmentHeader>()];
    let n = probe.read_at(0, &mut bytes)?;
    let u32_at = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if n < size_of::<u64>() {
        return Ok(Header::Unpublished);
    }
    Ok(match u64_at(0) {
        0 => Header::Unpublished,
        SEGMENT_MAGIC if n >= size_of::<SegmentHeader>() => Header::Tandem(ProcessIdentity {
            pid: u32_at(offset_of!(SegmentHeader, runtime_pid)),
            start_time: u64_at(offset_of!(SegmentHeader, runtime_start_time)),
        }),
        OWNED_SEGMENT_MAGIC if n >= size_of::<OwnerRecord>() => Header::Tandem(ProcessIdentity {
            pid: u32_at(offset_of!(OwnerRecord, pid)),
            start_time: u64_at(offset_of!(OwnerRecord, start_time)),
        }),
        _ => Header::Foreign,
    })
}

/// Whether the segment `probe` opened is stale, or why it must be left alone.
fn judge(probe: &SegmentProbe) -> Result<Result<StaleSegment, RuntimeError>, RuntimeError> {
    let name = probe.name().to_owned();
    let header = read_header(probe)?;
    let owner = match &header {
        Header::Tandem(owner) => Some(*owner),
        _ => None,
    };
    let in_use = |owner: Option<ProcessIdentity>| RuntimeError::SegmentInUse {
        name: name.clone(),
        owner_pid: owner.map(|o| o.pid),
    };
    if probe.is_held() {
        return Ok(Err(in_use(owner)));
    }
    Ok(match header {
        Header::Tandem(owner) if owner.is_alive() => Err(in_use(Some(owner))),
        Header::Tandem(owner) => Ok(StaleSegment {
            name,
            owner_pid: Some(owner.pid),
            why: StaleWhy::OwnerGone,
        }),
        // Not held: its exporter is gone (it held it while alive).
        Header::HostIpc(pid) => Ok(StaleSegment {
            name,
            owner_pid: Some(pid),
            why: StaleWhy::OwnerGone,
        }),
        Header::Unpublished => Ok(StaleSegment {
            name,
            owner_pid: None,
            why: StaleWhy::NeverPublished,
        }),
        Header::Foreign => Err(RuntimeError::NotTandemSegment { name }),
    })
}

/// Creates the named segment `name` of `len` bytes (shm-core's
/// [`Segment::create_named`]), held by this process while it lives. If the
/// name exists and is stale (owner gone, nobody holding it), removes it, logs
/// "reclaimed stale segment NAME (...)" and creates it anew. If its owner is
/// alive (or another process holds it), fails with
/// [`RuntimeError::SegmentInUse`] naming the segment and the owner; a file
/// that is not a Tandem segment is [`RuntimeError::NotTandemSegment`]. A
/// segment of one's own format starts with an [`OwnerRecord`], published once
/// the segment is set up, so that its name is reclaimed after its owner dies.
pub fn create_owned_segment(name: &str, len: usize) -> Result<Segment, RuntimeError> {
    let taken = || RuntimeError::SegmentInUse {
        name: name.to_owned(),
        owner_pid: None,
    };
    // Twice: the name may vanish between the failed create and the probe
    // (its owner exiting), and then a second create settles it.
    for _ in 0..2 {
        match Segment::create_named(name, len) {
            Ok(segment) => return Ok(segment),
            Err(SegmentError::Exists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let probe = match SegmentProbe::open(name) {
            Ok(probe) => probe,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        let stale = judge(&probe)??;
        if !probe.unlink()? {
            return Err(taken());
        }
        tracing::info!("reclaimed stale segment {stale}");
        // Created while the probe still holds the old object (module docs).
        let created = Segment::create_named(name, len).map_err(|e| match e {
            SegmentError::Exists { .. } => taken(),
            e => e.into(),
        });
        drop(probe);
        return created;
    }
    Err(taken())
}

/// Removes the segment `name` if it is stale; `None` when it is missing, in
/// use, or not a Tandem segment. For a process that saw the owner die (a
/// client of a killed runtime, the consumer of a dead producer's segment).
pub fn remove_stale_segment(name: &str) -> Result<Option<StaleSegment>, RuntimeError> {
    let probe = match SegmentProbe::open(name) {
        Ok(probe) => probe,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match judge(&probe)? {
        Ok(stale) if probe.unlink()? => {
            tracing::info!("removed stale segment {stale}");
            Ok(Some(stale))
        }
        _ => Ok(None),
    }
}

/// Removes the CPU device IPC segments that process `pid`, now dead,
/// exported and nobody holds: what a parent does after its child service
/// was killed. Returns how many it removed.
pub fn remove_host_ipc_segments_of(pid: u32) -> usize {
    let prefix = format!("tdm-{pid:x}-");
    let Ok(entries) = std::fs::read_dir(SHM_DIR) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
        .filter(|name| name.starts_with(&prefix))
        .filter(|name| matches!(remove_stale_segment(name), Ok(Some(_))))
        .count()
}

/// `tandem clean`: scans `/dev/shm` for Tandem's segments (runtime segments
/// and owned segments, told by their magic, whatever their name; the CPU
/// device's IPC segments, told by their name)
/// and removes those whose owner process is gone and that no process holds;
/// returns them. With `dry_run`, removes nothing and returns what it would
/// remove.
///
/// Left alone: segments whose owner is alive (running or stopped), files
/// that are not Tandem segments, files this user may not open, and segments
/// whose creator died before publishing the header (no magic to tell them
/// by: a creator starting on that name reclaims them).
pub fn clean_stale_segments(dry_run: bool) -> Result<Vec<StaleSegment>, RuntimeError> {
    let entries = std::fs::read_dir(SHM_DIR).map_err(|source| {
        RuntimeError::Segment(SegmentError::Os {
            call: "read_dir /dev/shm",
            source,
        })
    })?;
    let mut removed = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        // Not ours to judge: unreadable, gone meanwhile, or a bad name.
        let Ok(probe) = SegmentProbe::open(&name) else {
            continue;
        };
        let ours = match read_header(&probe)? {
            Header::Tandem(_) | Header::HostIpc(_) => true,
            // A runtime killed while it set up its segment: only its
            // default name says whose it was.
            Header::Unpublished => {
                default_name_pid(&name).is_some_and(|pid| ProcessIdentity::of(pid).is_none())
            }
            Header::Foreign => false,
        };
        if !ours {
            continue;
        }
        let Ok(stale) = judge(&probe)? else {
            continue;
        };
        if dry_run || probe.unlink()? {
            if !dry_run {
                tracing::info!("removed stale segment {stale}");
            }
            removed.push(stale);
        }
    }
    removed.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(removed)
}

/// The pid a runtime's default segment name (`tandem-<pid>-<n>`) names.
fn default_name_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix("tandem-")?.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok()
}

/// The prefix of a temporary folder that this process makes and means to
/// remove, `tandem-<kind>-<pid>-<start time>-`, to give `tempfile`: what a
/// process killed before it could remove its folder leaves is then found by
/// [`clean_stale_temp_folders`].
pub fn owned_temp_prefix(kind: &str) -> String {
    let me = ProcessIdentity::current();
    format!("tandem-{kind}-{}-{}-", me.pid, me.start_time)
}

/// Removes (or, with `dry_run`, only lists) the folders of the temporary
/// folder named by [`owned_temp_prefix`] with one of `kinds` whose owner is
/// gone. A folder whose owner lives, of another user, or whose name is not
/// such a prefix and a random tail, is left alone.
pub fn clean_stale_temp_folders(
    kinds: &[&str],
    dry_run: bool,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(std::env::temp_dir())?.filter_map(Result::ok) {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Some(owner) = temp_folder_owner(&name, kinds) else {
            continue;
        };
        // A link is not a folder we made (and is not followed); another
        // user's folder is theirs to clean, even for root.
        // SAFETY: getuid cannot fail and touches no memory.
        let uid = unsafe { libc::getuid() };
        let ours = entry
            .metadata()
            .is_ok_and(|m| m.is_dir() && std::os::unix::fs::MetadataExt::uid(&m) == uid);
        if owner.is_alive() || !ours {
            continue;
        }
        let path = entry.path();
        if !dry_run {
            match std::fs::remove_dir_all(&path) {
                Ok(()) => tracing::info!("removed {} ({owner}, gone)", path.display()),
                // Removed meanwhile by another cleaner.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
        removed.push(path);
    }
    Ok(removed)
}

/// The owner a folder named `tandem-<kind>-<pid>-<start time>-<tail>` names,
/// for one of `kinds`.
fn temp_folder_owner(name: &str, kinds: &[&str]) -> Option<ProcessIdentity> {
    let rest = name.strip_prefix("tandem-")?;
    let mut fields = rest.rsplitn(4, '-');
    let tail = fields.next()?;
    let start_time = fields.next()?.parse().ok()?;
    let pid = fields.next()?.parse().ok()?;
    let kind = fields.next()?;
    (kinds.contains(&kind) && !tail.is_empty() && tail.chars().all(|c| c.is_ascii_alphanumeric()))
        .then_some(ProcessIdentity { pid, start_time })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn a_runtime_killed_before_its_header_is_cleaned_by_its_default_name() {
        // A pid that is no process: beyond the kernel's pid limit.
        let dead = 1u32 << 23;
        let names = [format!("tandem-{dead}-0"), format!("tandem-x{dead}-0")];
        let paths: Vec<PathBuf> = names
            .iter()
            .map(|n| PathBuf::from(SHM_DIR).join(n))
            .collect();
        let _remove: Vec<RemoveOnDrop> = paths.iter().cloned().map(RemoveOnDrop).collect();
        for path in &paths {
            // Sized, its header never written: all zeros.
            std::fs::File::create(path)
                .unwrap()
                .set_len(1 << 16)
                .unwrap();
        }
        let stale = clean_stale_segments(true).unwrap();
        let found = |name: &str| stale.iter().find(|s| s.name == name);
        assert_eq!(
            found(&names[0]).map(|s| s.why),
            Some(StaleWhy::NeverPublished)
        );
        assert!(found(&names[1]).is_none(), "not a default name: not ours");
        assert_eq!(default_name_pid("tandem-12-3"), Some(12));
        assert_eq!(default_name_pid("tandem-demo-blob-12-3"), None);
    }

    #[test]
    fn a_temp_folder_names_its_owner() {
        let prefix = owned_temp_prefix("demo-blob");
        let me = ProcessIdentity::current();
        let kinds = ["demo-blob", "blob-demo"];
        assert_eq!(
            temp_folder_owner(&format!("{prefix}Ab3xYz"), &kinds),
            Some(me)
        );
        for other in [
            prefix.clone(),
            format!("{prefix}a-b"),
            format!("tandem-other-{}-{}-Ab3xYz", me.pid, me.start_time),
            format!("tandem-demo-blob-x-{}-Ab3xYz", me.start_time),
            "tandem-0".to_string(),
            "tandem-share-test-12-0".to_string(),
        ] {
            assert_eq!(temp_folder_owner(&other, &kinds), None, "{other}");
        }
    }

    #[test]
    fn stale_temp_folders_go_live_ones_stay() {
        let kinds = ["stale-test"];
        let live = std::env::temp_dir().join(format!("{}Live12", owned_temp_prefix("stale-test")));
        std::fs::create_dir_all(&live).unwrap();
        // A pid that is no process: beyond the kernel's pid limit.
        let dead = std::env::temp_dir().join(format!("tandem-stale-test-{}-1-Ab3xYz", 1u32 << 23));
        std::fs::create_dir_all(dead.join("inside")).unwrap();
        // Another user's (when this test may make one): left alone.
        let theirs =
            std::env::temp_dir().join(format!("tandem-stale-test-{}-1-Other1", 1u32 << 23));
        std::fs::create_dir_all(&theirs).unwrap();
        // SAFETY: getuid cannot fail and touches no memory.
        let root = unsafe { libc::getuid() } == 0;
        if root {
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        } else {
            std::fs::remove_dir(&theirs).unwrap();
        }
        let listed = clean_stale_temp_folders(&kinds, true).unwrap();
        assert!(
            listed.contains(&dead) && dead.exists(),
            "a dry run removes nothing"
        );
        let removed = clean_stale_temp_folders(&kinds, false).unwrap();
        assert_eq!(removed, vec![dead.clone()]);
        assert!(!dead.exists());
        assert!(live.exists());
        std::fs::remove_dir(&live).unwrap();
        if root {
            assert!(theirs.exists(), "another user's folder was removed");
            std::fs::remove_dir(&theirs).unwrap();
        }
    }

    /// Removes the file when dropped, so a failing test leaves no segment.
    struct RemoveOnDrop(PathBuf);

    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            // Already gone when the test passed: nothing to do.
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn starters_racing_on_one_stale_name_one_wins() {
        const STARTERS: usize = 6;
        let name = format!("tandem-test-race-{}", std::process::id());
        let file = RemoveOnDrop(PathBuf::from(format!("{SHM_DIR}/{name}")));
        // A runtime killed with SIGKILL right after creating its name: an
        // empty, unpublished segment that nobody holds.
        let path = std::ffi::CString::new(format!("/{name}")).expect("path");
        // SAFETY: plain calls with a NUL-terminated path; the fd is closed.
        unsafe {
            let fd = libc::shm_open(
                path.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            );
            assert!(fd >= 0, "cannot create the stale name");
            libc::close(fd);
        }
        let barrier = std::sync::Barrier::new(STARTERS);
        let results: Vec<_> = std::thread::scope(|s| {
            let starters: Vec<_> = (0..STARTERS)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let result = create_owned_segment(&name, 1 << 16);
                        // Everyone decides before a winner lets go of its
                        // segment.
                        barrier.wait();
                        result
                    })
                })
                .collect();
            starters
                .into_iter()
                .map(|t| t.join().expect("starter"))
                .collect()
        });
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "{results:?}");
        for result in &results {
            if let Err(e) = result {
                assert!(
                    matches!(e, RuntimeError::SegmentInUse { name: n, .. } if *n == name),
                    "{e:?}"
                );
            }
        }
        drop(results);
        assert!(!file.0.exists(), "the winner's drop left the name");
    }
}
