//! Recovery at open: the tags, the index of long-term and temporary blobs and every target's
//! free pages, rebuilt from the committed metadata. Free space is never stored: pages that no
//! committed extent map names (those of puts in flight at a crash, written but not committed)
//! are free again, and a put in flight at a crash is either wholly visible (its transaction
//! committed) or not at all. Temporary blobs written in another boot are dropped (their data
//! was never synced, and a power loss may have come with the reboot), their records removed.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use redb::Database;

use super::{BlobEntry, TagIndex, Tags};
use crate::context::Persistence;
use crate::error::BlobError;
use crate::extent::{Extent, Version};
use crate::meta::{self, BootId};
use crate::target::{FreePages, Target};
use crate::types::{TagId, PAGE_SIZE};

/// What the metadata held: the tags and the index of durable blobs.
pub(crate) struct Recovered {
    pub(super) tags: Tags,
    pub(super) index: TagIndex,
}

impl Recovered {
    /// Every tag's name.
    pub(crate) fn tag_names(&self) -> Vec<String> {
        self.tags.by_name.keys().cloned().collect()
    }
}

/// The configured file targets by persistent id, and every path the metadata knows by id (to
/// name a target that is no longer configured).
struct TargetIds<'a> {
    index_of: HashMap<u32, usize>,
    path_of: HashMap<u32, &'a String>,
}

/// Rebuilds from `db` every tag and every kept blob's version (its extents mapped from
/// persistent ids to indices of `targets`, whose ids are set; `known`: every path the metadata
/// knows, by id), dropping the temporary ones not of boot `boot`, and sets each target's free
/// pages: those no version uses.
pub(crate) fn recover(
    db: &Database,
    targets: &mut [Target],
    known: &HashMap<String, u32>,
    boot: BootId,
) -> Result<Recovered, BlobError> {
    let loaded = meta::load(db)?;
    let ids = TargetIds {
        index_of: targets
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.persistent_id.map(|id| (id, i)))
            .collect(),
        path_of: known.iter().map(|(p, id)| (*id, p)).collect(),
    };
    let (tags, mut index) = tags_of(loaded.tags);
    let mut used: Vec<Vec<(u64, u64)>> = vec![Vec::new(); targets.len()];
    let mut dropped = Vec::new();
    for (tag, name, value) in loaded.blobs {
        let stored =
            meta::decode(&value).ok_or_else(|| corrupt(tag, &name, "undecodable extent map"))?;
        // A zero boot id is no boot's: the kernel did not tell.
        if stored.class == Persistence::Temporary && (stored.boot != boot || boot == [0; 16]) {
            dropped.push((tag, name));
            continue;
        }
        let version = decode_version(tag, &name, stored, &ids, &mut used)?;
        let Some(blobs) = index.get_mut(&TagId(tag)) else {
            return Err(corrupt(tag, &name, "unknown tag"));
        };
        blobs.insert(name, BlobEntry::new(Some(version)));
    }
    set_free_pages(targets, used)?;
    meta::drop_blobs(db, &dropped)?;
    Ok(Recovered { tags, index })
}

/// The tags read back, and an index with no blob in any of them yet.
fn tags_of(loaded: Vec<(String, u64)>) -> (Tags, TagIndex) {
    let mut tags = Tags {
        next: 1,
        ..Tags::default()
    };
    let mut index: TagIndex = HashMap::new();
    for (name, id) in loaded {
        tags.by_name.insert(name.clone(), TagId(id));
        tags.by_id.insert(TagId(id), name);
        tags.next = tags.next.max(id + 1);
        index.insert(TagId(id), BTreeMap::new());
    }
    (tags, index)
}

/// The version `stored` for blob `name` of `tag`, its pages noted in `used` (per target). A
/// version on a target no longer configured is [`BlobError::TargetMismatch`]; one whose extents
/// overlap or pass its size, or whose compressed frame claims more pages than it stands for,
/// is [`BlobError::Corrupt`].
fn decode_version(
    tag: u64,
    name: &str,
    stored: meta::StoredVersion,
    ids: &TargetIds<'_>,
    used: &mut [Vec<(u64, u64)>],
) -> Result<Version, BlobError> {
    let size = stored.size;
    let mut extents = Vec::with_capacity(stored.extents.len());
    let mut next_lpage = 0;
    for e in stored.extents {
        let Some(&target) = ids.index_of.get(&e.persistent_id) else {
            let path = ids.path_of.get(&e.persistent_id);
            return Err(BlobError::TargetMismatch {
                path: path.map(|p| PathBuf::from(p.as_str())).unwrap_or_default(),
                reason: format!("blob {name:?} of tag {tag} lives on it but it is not configured"),
            });
        };
        if e.lpage < next_lpage || e.npages == 0 {
            return Err(corrupt(tag, name, "extents out of order"));
        }
        if e.packed.is_some_and(|p| p.len == 0 || p.pages() > e.npages) {
            return Err(corrupt(
                tag,
                name,
                "a compressed frame larger than its pages",
            ));
        }
        next_lpage = e.lpage + e.npages;
        let extent = Extent {
            lpage: e.lpage,
            npages: e.npages,
            target,
            ppage: e.ppage,
            packed: e.packed,
        };
        used[target].push((e.ppage, extent.ppages()));
        extents.push(extent);
    }
    if next_lpage > size.div_ceil(PAGE_SIZE) {
        return Err(corrupt(tag, name, "extents past the size"));
    }
    Ok(Version {
        size,
        class: stored.class,
        extents,
    })
}

/// Sets each target's free pages: all but the `used` ranges, which must lie within it and
/// not overlap ([`BlobError::Corrupt`]).
fn set_free_pages(targets: &mut [Target], used: Vec<Vec<(u64, u64)>>) -> Result<(), BlobError> {
    for (t, used) in targets.iter_mut().zip(used) {
        t.free = FreePages::from_used(t.pages, used).map_err(|why| {
            BlobError::Corrupt(format!(
                "target {}: {why}",
                t.path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ))
        })?;
    }
    Ok(())
}

fn corrupt(tag: u64, name: &str, why: &str) -> BlobError {
    BlobError::Corrupt(format!("blob {name:?} of tag {tag}: {why}"))
}
