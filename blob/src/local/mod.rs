//! The local store: the RAM and file targets, the in-memory index of published versions (the
//! read path, rebuilt from the metadata at open: `recover`), the tags, and the metadata
//! committer. Its puts are in `put`, its gets in `get`; here are the index, the tags, stat,
//! delete and listing.

mod get;
mod put;
mod recover;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub(crate) use put::PutRequest;
pub(crate) use recover::{recover, Recovered};

use crate::config::TargetKind;
use crate::context::Persistence;
use crate::error::{BlobError, NameKind};
use crate::extent::{Extent, Version};
use crate::meta::{BootId, Committer, MetaOp};
use crate::target::{Area, Target};
use crate::types::{check_name, BlobStat, TagId, TargetStat, PAGE_SIZE};
use crate::uring::Rings;

/// A blob's place in the index: its put lock and its published version.
struct BlobEntry {
    /// Serialises puts and deletes of the blob; `true` once the entry left the index.
    writer: Mutex<bool>,
    /// The published version; gets hold the read lock while copying, which keeps its pages from
    /// being freed. `None` while a first put is in progress.
    state: RwLock<Option<Arc<Version>>>,
}

impl BlobEntry {
    fn new(version: Option<Version>) -> Arc<BlobEntry> {
        Arc::new(BlobEntry {
            writer: Mutex::new(false),
            state: RwLock::new(version.map(Arc::new)),
        })
    }
}

/// The tags, both ways, and the next id to give.
#[derive(Default)]
struct Tags {
    by_name: HashMap<String, TagId>,
    by_id: BTreeMap<TagId, String>,
    next: u64,
}

/// Every tag's blobs, by name.
type TagIndex = HashMap<TagId, BTreeMap<String, Arc<BlobEntry>>>;

/// The local part of a store. `Send + Sync`, as the store is.
pub(crate) struct LocalStore {
    /// Every configured target, in configuration order (the object target's entry holds no
    /// pages: placement orders it among the others).
    pub(crate) targets: Vec<Target>,
    index: RwLock<TagIndex>,
    tags: RwLock<Tags>,
    tag_create: Mutex<()>,
    /// io_uring rings for file reads and writes; `None`: pread and pwrite.
    rings: Option<Rings>,
    /// This boot's id, which temporary versions are stamped with.
    boot: BootId,
    /// Opens of the store, this one included, that found the last process to hold it had
    /// ended without closing it, over the store's life (its metadata keeps the count).
    pub(crate) crash_recoveries: u64,
    // Declared last: dropped after the index, joining the committer thread.
    committer: Committer,
}

impl LocalStore {
    /// The store over `targets` (free pages set), holding what `recovered` rebuilt, committing
    /// through `committer`, moving file pages through `rings` when there are, in boot `boot`.
    pub(crate) fn new(
        targets: Vec<Target>,
        recovered: Recovered,
        rings: Option<Rings>,
        committer: Committer,
        boot: BootId,
    ) -> LocalStore {
        LocalStore {
            targets,
            index: RwLock::new(recovered.index),
            tags: RwLock::new(recovered.tags),
            tag_create: Mutex::new(()),
            rings,
            boot,
            crash_recoveries: 0,
            committer,
        }
    }

    /// The id of tag `name`, if it has one here.
    pub(crate) fn tag_id(&self, name: &str) -> Option<TagId> {
        self.tags.read().by_name.get(name).copied()
    }

    /// The id of tag `name`, creating it (durably committed) if it has none here.
    pub(crate) fn create_tag(&self, name: &str) -> Result<TagId, BlobError> {
        let _one = self.tag_create.lock();
        if let Some(id) = self.tag_id(name) {
            return Ok(id);
        }
        let id = TagId(self.tags.read().next);
        self.committer.commit(MetaOp::CreateTag {
            name: name.to_owned(),
            id: id.0,
        })?;
        self.index.write().insert(id, BTreeMap::new());
        let mut tags = self.tags.write();
        tags.by_name.insert(name.to_owned(), id);
        tags.by_id.insert(id, name.to_owned());
        tags.next = id.0 + 1;
        Ok(id)
    }

    /// Every tag, by id.
    pub(crate) fn tags(&self) -> Vec<(TagId, String)> {
        self.tags
            .read()
            .by_id
            .iter()
            .map(|(id, n)| (*id, n.clone()))
            .collect()
    }

    /// [`BlobError::UnknownTag`] unless `tag` exists.
    pub(crate) fn check_tag(&self, tag: TagId) -> Result<(), BlobError> {
        self.tag_name(tag).map(drop)
    }

    /// Tag `tag`'s name; [`BlobError::UnknownTag`] when there is none.
    pub(crate) fn tag_name(&self, tag: TagId) -> Result<String, BlobError> {
        self.tags
            .read()
            .by_id
            .get(&tag)
            .cloned()
            .ok_or(BlobError::UnknownTag(tag))
    }

    /// Whether blob `name` of `tag` has a published local version.
    pub(crate) fn holds(&self, tag: TagId, name: &str) -> bool {
        self.lookup(tag, name)
            .is_some_and(|e| e.state.read().is_some())
    }

    fn lookup(&self, tag: TagId, name: &str) -> Option<Arc<BlobEntry>> {
        self.index.read().get(&tag)?.get(name).cloned()
    }

    fn lookup_or_insert(&self, tag: TagId, name: &str) -> Result<Arc<BlobEntry>, BlobError> {
        if let Some(e) = self.lookup(tag, name) {
            return Ok(e);
        }
        let mut index = self.index.write();
        let blobs = index.get_mut(&tag).ok_or(BlobError::UnknownTag(tag))?;
        Ok(blobs
            .entry(name.to_owned())
            .or_insert_with(|| BlobEntry::new(None))
            .clone())
    }

    fn remove_entry(&self, tag: TagId, name: &str, entry: &Arc<BlobEntry>) {
        let mut index = self.index.write();
        if let Some(blobs) = index.get_mut(&tag) {
            if blobs.get(name).is_some_and(|e| Arc::ptr_eq(e, entry)) {
                blobs.remove(name);
            }
        }
    }

    /// The index entry of blob `name` of `tag` (name and tag checked); its version may still be
    /// missing (a first put in progress, or a delete that won the race).
    fn published(&self, tag: TagId, name: &str) -> Result<Arc<BlobEntry>, BlobError> {
        check_name(name, NameKind::Blob)?;
        self.check_tag(tag)?;
        self.lookup(tag, name).ok_or_else(|| not_found(tag, name))
    }

    /// Size, class and targets of blob `name`.
    pub(crate) fn stat(&self, tag: TagId, name: &str) -> Result<BlobStat, BlobError> {
        let entry = self.published(tag, name)?;
        let state = entry.state.read();
        match state.as_ref() {
            Some(v) => Ok(v.describe(tag, name)),
            None => Err(not_found(tag, name)),
        }
    }

    /// Removes blob `name`; its pages are freed once no get is reading them.
    pub(crate) fn delete(&self, tag: TagId, name: &str) -> Result<(), BlobError> {
        let entry = self.published(tag, name)?;
        let mut dead = entry.writer.lock();
        if *dead {
            return Err(not_found(tag, name));
        }
        let Some(old) = entry.state.read().clone() else {
            return Err(not_found(tag, name));
        };
        if old.class != Persistence::Volatile {
            self.committer.commit(MetaOp::DeleteBlob {
                tag: tag.0,
                name: name.to_owned(),
            })?;
        }
        // Waits for the gets still copying from the old version.
        *entry.state.write() = None;
        *dead = true;
        self.remove_entry(tag, name, &entry);
        self.free(&old.extents);
        Ok(())
    }

    /// The published blobs of `tag` (which exists), by name.
    pub(crate) fn list(&self, tag: TagId) -> Vec<BlobStat> {
        let entries: Vec<(String, Arc<BlobEntry>)> = match self.index.read().get(&tag) {
            Some(b) => b.iter().map(|(n, e)| (n.clone(), e.clone())).collect(),
            None => Vec::new(),
        };
        entries
            .into_iter()
            .filter_map(|(n, e)| e.state.read().as_ref().map(|v| v.describe(tag, &n)))
            .collect()
    }

    /// Every target's description, as the local store knows it.
    pub(crate) fn target_stats(&self) -> Vec<TargetStat> {
        self.targets
            .iter()
            .enumerate()
            .map(|(index, t)| TargetStat {
                index,
                kind: t.kind,
                path: t.path().map(|p| p.to_path_buf()),
                capacity: t.pages * PAGE_SIZE,
                used: (t.pages - t.free.free_pages()) * PAGE_SIZE,
                score: t.score,
                direct_io: matches!(&t.area, Area::File(f) if f.direct_io()),
                io_uring: t.kind == TargetKind::File && self.rings.is_some(),
                conditional_writes: false,
            })
            .collect()
    }

    /// Gives the pages of `extents` back to their targets.
    fn free(&self, extents: &[Extent]) {
        for e in extents {
            self.targets[e.target].free.give(e.ppage, e.ppages());
        }
    }
}

fn not_found(tag: TagId, name: &str) -> BlobError {
    BlobError::NotFound {
        tag,
        name: name.to_owned(),
    }
}
