//! Whether a named segment was left behind by an owner that is gone: the
//! one place that decides it, for every kind of segment Tandem names.
//!
//! Two records say who owns a named segment. Its creator holds an `flock` on
//! it for as long as its segment lives (shm-core's [`SegmentProbe`]), which
//! the kernel drops when the creator dies; and the segment names its owner
//! ([`SegmentOwner`]): in its header (a runtime segment's, or an
//! [`OwnerRecord`](crate::OwnerRecord)), or, for a CPU device IPC segment,
//! in its name. A segment is stale when nobody holds it and, if its header
//! is published, the owner it names is gone. A live owner, stopped or not,
//! keeps its segment.

use tandem_shm_core::SegmentProbe;

use crate::identity::ProcessIdentity;

/// What a segment says of its owner. Reading it is the caller's: only the
/// runtime knows its own header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SegmentOwner {
    /// Its header (a runtime segment's, or an owner record) is published and
    /// names its owner.
    Recorded(ProcessIdentity),
    /// A CPU device IPC segment, which has no header; its name
    /// ([`host_ipc_exporter`](crate::host_ipc_exporter)) gives its exporter,
    /// which holds it while alive.
    HostIpcExporter(u32),
    /// Too short for a magic, or the magic still 0: its creator had not
    /// finished (or is finishing now).
    Unpublished,
    /// Not a Tandem segment.
    Foreign,
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

/// What is to be done with a segment: remove it, or leave it alone and why.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Staleness {
    /// Left behind: nobody holds it, and its owner is gone or never
    /// published it.
    Stale(StaleSegment),
    /// A live process owns it (`owner_pid`, when its header names it) or
    /// holds it right now.
    InUse {
        /// The owner's process id, when its header names it.
        owner_pid: Option<u32>,
    },
    /// Not a Tandem segment: not ours to remove.
    Foreign,
}

/// Whether the segment `probe` opened, whose owner is `owner`, is stale.
pub fn staleness(probe: &SegmentProbe, owner: SegmentOwner) -> Staleness {
    if probe.is_held() {
        let owner_pid = match owner {
            SegmentOwner::Recorded(owner) => Some(owner.pid),
            _ => None,
        };
        return Staleness::InUse { owner_pid };
    }
    let name = probe.name().to_owned();
    match owner {
        SegmentOwner::Recorded(owner) if owner.is_alive() => Staleness::InUse {
            owner_pid: Some(owner.pid),
        },
        SegmentOwner::Recorded(owner) => Staleness::Stale(StaleSegment {
            name,
            owner_pid: Some(owner.pid),
            why: StaleWhy::OwnerGone,
        }),
        // Not held: its exporter is gone (it held it while alive).
        SegmentOwner::HostIpcExporter(pid) => Staleness::Stale(StaleSegment {
            name,
            owner_pid: Some(pid),
            why: StaleWhy::OwnerGone,
        }),
        SegmentOwner::Unpublished => Staleness::Stale(StaleSegment {
            name,
            owner_pid: None,
            why: StaleWhy::NeverPublished,
        }),
        SegmentOwner::Foreign => Staleness::Foreign,
    }
}
