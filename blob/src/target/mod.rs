//! Storage targets: what a configured target is (its kind, score, pages and persistent id) and
//! where its bytes live (`ram`, `file`), the free pages each has (`free`), and the aligned
//! buffers the file data path moves pages through (`aligned`).

mod aligned;
mod file;
mod free;
mod ram;

use std::path::Path;

pub(crate) use aligned::AlignedBuf;
pub(crate) use file::{create_whole, FileArea, SyncHandle};
pub(crate) use free::FreePages;
use ram::RamArea;

use crate::config::TargetKind;
use crate::error::BlobError;
use crate::PAGE_SIZE;

/// Where a target's bytes live.
pub(crate) enum Area {
    Ram(RamArea),
    File(FileArea),
    /// In the object target's bucket: no pages here (the store holds the tier itself).
    Object,
}

/// One configured target.
pub(crate) struct Target {
    pub(crate) kind: TargetKind,
    pub(crate) score: f32,
    pub(crate) pages: u64,
    /// The id the metadata's extent maps name this target by, which stays when the
    /// configuration's order changes (file targets only; set once the metadata registered the
    /// target's path).
    pub(crate) persistent_id: Option<u32>,
    pub(crate) area: Area,
    pub(crate) free: FreePages,
}

impl Target {
    pub(crate) fn ram(pages: u64, score: f32) -> Result<Target, BlobError> {
        let len = usize::try_from(pages * PAGE_SIZE).map_err(|_| {
            BlobError::Config("RAM target capacity exceeds the address space".into())
        })?;
        let area = RamArea::new(len)
            .map_err(|e| BlobError::Config(format!("RAM target of {len} bytes: {e}")))?;
        Ok(Target {
            kind: TargetKind::Ram,
            score,
            pages,
            persistent_id: None,
            area: Area::Ram(area),
            free: FreePages::from_used(pages, Vec::new()).expect("empty"),
        })
    }

    /// A file target on `path`, its file made if missing; its persistent id and free pages are
    /// set once the metadata is read.
    pub(crate) fn file(path: &Path, pages: u64, score: f32) -> Result<Target, BlobError> {
        let area = FileArea::open(path, pages * PAGE_SIZE, true)?;
        Ok(Target {
            kind: TargetKind::File,
            score,
            pages,
            persistent_id: None,
            area: Area::File(area),
            // Set from the metadata once the store has read it.
            free: FreePages::from_used(pages, vec![(0, pages)]).expect("all used"),
        })
    }

    /// The object target's entry: no pages; its blobs live in the bucket.
    pub(crate) fn object(score: f32) -> Target {
        Target {
            kind: TargetKind::Object,
            score,
            pages: 0,
            persistent_id: None,
            area: Area::Object,
            free: FreePages::from_used(0, Vec::new()).expect("empty"),
        }
    }

    /// Whether the target keeps pages across a restart (file targets; the object target has
    /// no pages).
    pub(crate) fn durable(&self) -> bool {
        self.kind == TargetKind::File
    }

    pub(crate) fn path(&self) -> Option<&Path> {
        match &self.area {
            Area::File(f) => Some(&f.path),
            Area::Ram(_) | Area::Object => None,
        }
    }
}
