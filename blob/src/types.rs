//! The values the store's calls take and give: tag ids, placement scores, what a put did, the
//! descriptions of blobs and targets, the callbacks data moves through, the store's identity,
//! and the limits of names and pages.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::config::TargetKind;
use crate::context::{Codec, Persistence};
use crate::error::{BlobError, FillError, NameKind};

/// Bytes per page: the unit of allocation on every target and of file I/O.
pub const PAGE_SIZE: u64 = 4096;
/// Longest blob name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Longest tag name, in bytes.
pub const MAX_TAG_LEN: usize = 255;

/// Pages moved per file I/O (and per `fill`/`drain` call): 1 MiB.
pub(crate) const CHUNK_PAGES: u64 = 256;

/// A put's data source: `fill(offset_within_data, dst)` writes the bytes of `dst`, which
/// start at `offset_within_data` of the put's range.
pub type Fill<'a> = dyn FnMut(u64, &mut [u8]) -> Result<(), FillError> + 'a;
/// A get's data sink: `drain(offset_within_range, src)` takes the bytes of `src`, which start at
/// `offset_within_range` of the get's range.
pub type Drain<'a> = dyn FnMut(u64, &[u8]) -> Result<(), FillError> + 'a;
/// What the store's own reads hand bytes to: a [`Drain`] whose errors are already the store's.
pub(crate) type Sink<'a> = dyn FnMut(u64, &[u8]) -> Result<(), BlobError> + 'a;

/// A tag's id. Ids start at 1 and are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagId(pub u64);

/// A placement score: [`Score::AUTO`] or a tier in `0.0..=1.0` (higher = faster). See the crate
/// docs, "Placement".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score(pub f32);

impl Score {
    /// Automatic placement: the fastest target with room.
    pub const AUTO: Score = Score(-1.0);

    /// `None` for [`Score::AUTO`], else the tier; [`BlobError::BadScore`] for anything else.
    pub(crate) fn check(self) -> Result<Option<f32>, BlobError> {
        if self.0 == -1.0 {
            Ok(None)
        } else if (0.0..=1.0).contains(&self.0) {
            Ok(Some(self.0))
        } else {
            Err(BlobError::BadScore(self.0))
        }
    }
}

/// What a put did.
#[derive(Debug, Clone, PartialEq)]
pub struct PutInfo {
    /// The blob's size after the put.
    pub size: u64,
    /// Whether the blob is durable (file or object targets) or volatile (RAM targets). A first
    /// put whose score prefers file targets lands in RAM when those are full (see the crate
    /// docs, "Placement"): a caller that needs durability asks for it with a
    /// [`crate::PutContext`], or checks this.
    pub durable: bool,
    /// The blob's persistence level (at least the one the put asked for).
    pub persistence: Persistence,
    /// Indices (into [`crate::BlobStore::targets`]) of the targets this put's pages went to.
    pub targets: Vec<usize>,
}

/// A blob's description.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobStat {
    /// The blob's tag.
    pub tag: TagId,
    /// The blob's name.
    pub name: String,
    /// Size in bytes (logical: what a get may read).
    pub size: u64,
    /// Bytes of target pages it takes (compressed frames take fewer than their logical size;
    /// holes take none). On the object tier, its logical size.
    pub stored: u64,
    /// The codecs its compressed frames use, each once; empty when it is stored raw.
    pub codecs: Vec<Codec>,
    /// Whether the blob is durable (file or object targets) or volatile (RAM targets).
    pub durable: bool,
    /// The blob's persistence level.
    pub persistence: Persistence,
    /// Indices (into [`crate::BlobStore::targets`]) of the targets holding its pages,
    /// ascending.
    pub targets: Vec<usize>,
}

/// A target's description.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetStat {
    /// Position in the configuration (and in [`crate::BlobStore::targets`]).
    pub index: usize,
    /// RAM or file.
    pub kind: TargetKind,
    /// The file's path (file targets).
    pub path: Option<PathBuf>,
    /// Capacity in bytes (whole pages).
    pub capacity: u64,
    /// Bytes allocated, including those of puts in progress.
    pub used: u64,
    /// The target's score.
    pub score: f32,
    /// Whether the file target uses O_DIRECT (false: buffered I/O, or a RAM target).
    pub direct_io: bool,
    /// Whether the file target's reads and writes go through io_uring (false: pread and pwrite,
    /// or a RAM target).
    pub io_uring: bool,
    /// Whether the object target's store honours conditional writes, which keep two writers
    /// of one blob from losing each other's bytes (false for the other targets).
    pub conditional_writes: bool,
}

/// Which store this is: its metadata file, by device and inode. An open store holds that file
/// locked, so no two open stores share an identity; two paths to one file (links, relative
/// paths, other mount points) give the same one. A runtime serving the store answers it
/// ([`crate::BlobCaller::identity`]), so a process holding only a configuration can tell
/// whether a runtime serves that store ([`StoreIdentity::of_metadata`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreIdentity {
    /// The metadata file's device (`st_dev`).
    pub device: u64,
    /// The metadata file's inode (`st_ino`).
    pub inode: u64,
}

impl StoreIdentity {
    /// The identity of the store whose metadata file is `path` (as a configuration names it).
    pub fn of_metadata(path: &Path) -> std::io::Result<StoreIdentity> {
        let file = std::fs::metadata(path)?;
        Ok(StoreIdentity {
            device: file.dev(),
            inode: file.ino(),
        })
    }
}

/// Checks a name looked up: not empty, within its limit.
pub(crate) fn check_name(name: &str, kind: NameKind) -> Result<(), BlobError> {
    let max = match kind {
        NameKind::Tag => MAX_TAG_LEN,
        NameKind::Blob => MAX_NAME_LEN,
    };
    if name.is_empty() {
        Err(BlobError::EmptyName(kind))
    } else if name.len() > max {
        Err(BlobError::NameTooLong {
            kind,
            len: name.len(),
            max,
        })
    } else {
        Ok(())
    }
}

/// Checks a name about to be created: [`check_name`], and no control
/// characters (listings print one name a line).
pub(crate) fn check_new_name(name: &str, kind: NameKind) -> Result<(), BlobError> {
    check_name(name, kind)?;
    if name.chars().any(char::is_control) {
        return Err(BlobError::ControlInName {
            kind,
            name: name.to_owned(),
        });
    }
    Ok(())
}
