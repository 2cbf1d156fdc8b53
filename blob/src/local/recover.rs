//! Recovery at open: the tags, the index of durable blobs and every target's free pages,
//! rebuilt from the committed metadata. Free space is never stored: pages that no committed
//! extent map names (those of puts in flight at a crash, written but not committed) are free
//! again, and a put in flight at a crash is either wholly visible (its transaction committed)
//! or not at all.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use redb::Database;

use super::{BlobEntry, TagIndex, Tags};
use crate::error::BlobError;
use crate::extent::{Extent, Version};
use crate::meta;
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

/// Rebuilds from `db` every tag and every durable blob's version (its extents mapped from
/// persistent ids to indices of `targets`, whose ids are set; `known`: every path the metadata
/// knows, by id), and sets each target's free pages: those no version uses.
pub(crate) fn recover(
    db: &Database,
    targets: &mut [Target],
    known: &HashMap<String, u32>,
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
    for (tag, name, value) in loaded.blobs {
        let version = decode_version(tag, &name, &value, &ids, &mut used)?;
        let Some(blobs) = index.get_mut(&TagId(tag)) else {
            return Err(corrupt(tag, &name, "unknown tag"));
        };
        blobs.insert(name, BlobEntry::new(Some(version)));
    }
    set_free_pages(targets, used)?;
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

/// The version stored as `value` for blob `name` of `tag`, its pages noted in `used` (per
/// target). A version on a target no longer configured is [`BlobError::TargetMismatch`]; one
/// that does not decode, or whose extents overlap or pass its size, is [`BlobError::Corrupt`].
fn decode_version(
    tag: u64,
    name: &str,
    value: &[u8],
    ids: &TargetIds<'_>,
    used: &mut [Vec<(u64, u64)>],
) -> Result<Version, BlobError> {
    let (size, stored) =
        meta::decode(value).ok_or_else(|| corrupt(tag, name, "undecodable extent map"))?;
    let mut extents = Vec::with_capacity(stored.len());
    let mut next_lpage = 0;
    for e in stored {
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
        next_lpage = e.lpage + e.npages;
        used[target].push((e.ppage, e.npages));
        extents.push(Extent {
            lpage: e.lpage,
            npages: e.npages,
            target,
            ppage: e.ppage,
        });
    }
    if next_lpage > size.div_ceil(PAGE_SIZE) {
        return Err(corrupt(tag, name, "extents past the size"));
    }
    Ok(Version {
        size,
        durable: true,
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
