//! Segments left behind by processes that died: found by their owner, reclaimed
//! when a runtime (or any creator using [`create_owned_segment`]) starts on
//! their name, removed by hand with [`clean_stale_segments`] (`tandem clean`).
//!
//! Whether a segment is stale is tandem-process's to decide
//! ([`tandem_process::staleness`]); this module reads what a segment says of
//! its owner, which takes the runtime's header layout: a runtime segment's
//! [`SegmentHeader::runtime_pid`] and `runtime_start_time`, an
//! [`OwnerRecord`] for a segment of a user's own format, the name of a CPU
//! device IPC segment.
//!
//! Two starters reclaiming one stale name at once: the probe that wins the
//! lock is the only one that may remove the name, and it creates the new
//! segment (`O_EXCL`) before it lets go of the old one; the other finds the
//! old object held, or the name on a new, held object, and reports the
//! segment in use. One wins, the other gets [`RuntimeError::SegmentInUse`].

use std::mem::size_of;
use std::time::{Duration, Instant};

use memoffset::offset_of;
use tandem_process::{
    host_ipc_exporter, staleness, OwnerRecord, ProcessIdentity, SegmentOwner, StaleSegment,
    Staleness, OWNED_SEGMENT_MAGIC,
};
use tandem_shm_core::SHM_DIR;
use tandem_shm_core::{Segment, SegmentError, SegmentProbe};

use crate::error::RuntimeError;
use crate::layout::{SegmentHeader, SEGMENT_MAGIC};

/// What the segment `probe` opened says of its owner.
fn read_owner(probe: &SegmentProbe) -> Result<SegmentOwner, RuntimeError> {
    if let Some(pid) = host_ipc_exporter(probe.name()) {
        return Ok(SegmentOwner::HostIpcExporter(pid));
    }
    let mut bytes = [0u8; size_of::<SegmentHeader>()];
    let n = probe.read_at(0, &mut bytes)?;
    let u32_at = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if n < size_of::<u64>() {
        return Ok(SegmentOwner::Unpublished);
    }
    let recorded = match u64_at(0) {
        0 => return Ok(SegmentOwner::Unpublished),
        SEGMENT_MAGIC if n >= size_of::<SegmentHeader>() => Some(ProcessIdentity {
            pid: u32_at(offset_of!(SegmentHeader, runtime_pid)),
            start_time: u64_at(offset_of!(SegmentHeader, runtime_start_time)),
        }),
        OWNED_SEGMENT_MAGIC => OwnerRecord::owner_in(&bytes[..n]),
        _ => None,
    };
    Ok(recorded.map_or(SegmentOwner::Foreign, SegmentOwner::Recorded))
}

/// The segment `probe` opened if it is stale, else why it must be left
/// alone, as the error a creator on its name reports.
fn stale_or_refusal(probe: &SegmentProbe) -> Result<StaleSegment, RuntimeError> {
    let name = probe.name().to_owned();
    match staleness(probe, read_owner(probe)?) {
        Staleness::Stale(stale) => Ok(stale),
        Staleness::InUse { owner_pid } => Err(RuntimeError::SegmentInUse { name, owner_pid }),
        Staleness::Foreign => Err(RuntimeError::NotTandemSegment { name }),
    }
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
        let stale = stale_or_refusal(&probe)?;
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
    remove_stale_segment_within(name, Duration::ZERO)
}

/// How often [`remove_stale_segment_within`] looks again.
const HELD_RETRY: Duration = Duration::from_millis(10);

/// [`remove_stale_segment`], tried again for up to `patience` while the
/// segment's recorded owner is gone but something still holds it: another
/// process probing it at that moment (`tandem clean`, a command looking for
/// the runtime that serves its store) holds it while it decides, and lets go
/// within moments.
pub(crate) fn remove_stale_segment_within(
    name: &str,
    patience: Duration,
) -> Result<Option<StaleSegment>, RuntimeError> {
    let start = Instant::now();
    loop {
        let probe = match SegmentProbe::open(name) {
            Ok(probe) => probe,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let owner = read_owner(&probe)?;
        let owner_gone = matches!(&owner, SegmentOwner::Recorded(o) if !o.is_alive());
        match staleness(&probe, owner) {
            Staleness::Stale(stale) if probe.unlink()? => {
                tracing::info!("removed stale segment {stale}");
                return Ok(Some(stale));
            }
            Staleness::InUse { .. } if owner_gone && start.elapsed() < patience => {
                drop(probe);
                std::thread::sleep(HELD_RETRY);
            }
            _ => return Ok(None),
        }
    }
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
        let owner = read_owner(&probe)?;
        let ours = match owner {
            SegmentOwner::Recorded(_) | SegmentOwner::HostIpcExporter(_) => true,
            // A runtime killed while it set up its segment: only its
            // default name says whose it was.
            SegmentOwner::Unpublished => {
                default_name_pid(&name).is_some_and(|pid| ProcessIdentity::of(pid).is_none())
            }
            SegmentOwner::Foreign => false,
        };
        if !ours {
            continue;
        }
        let Staleness::Stale(stale) = staleness(&probe, owner) else {
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
    use tandem_process::StaleWhy;

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
