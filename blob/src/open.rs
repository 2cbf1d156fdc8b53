//! Opening a store: the configuration checked, the metadata file and the target files made (on
//! a first start) or found, the object target connected, each file target given its persistent
//! id, and the local store recovered from the metadata. An open that fails removes what it
//! made.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::ObjectStore;

use crate::config::{StoreConfig, TargetConfig, TargetKind};
use crate::error::BlobError;
use crate::local::{self, LocalStore};
use crate::meta::{self, meta_io, Committer};
use crate::object::ObjectTarget;
use crate::target::{Area, SyncHandle, Target};
use crate::types::PAGE_SIZE;
use crate::uring::Rings;

/// Whether an open may create what is missing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    CreateMissing,
    ExistingOnly,
}

/// Opens the local store and the object target `config` describes (the object target on
/// `object_store` when given); on failure, removes every file and folder it made.
pub(crate) fn open(
    config: &StoreConfig,
    object_store: Option<Arc<dyn ObjectStore>>,
    opening: Opening,
) -> Result<(LocalStore, ObjectTarget), BlobError> {
    let mut created = Created::default();
    let opened = open_creating(config, object_store, opening, &mut created);
    if opened.is_err() {
        created.remove();
    }
    opened
}

/// [`open`]'s work, noting in `created` each file and folder it made.
fn open_creating(
    config: &StoreConfig,
    object_store: Option<Arc<dyn ObjectStore>>,
    opening: Opening,
    created: &mut Created,
) -> Result<(LocalStore, ObjectTarget), BlobError> {
    let paths = check_config(config)?;
    let db = open_metadata(config, opening, created)?;
    // Which paths the metadata already knows (and so must exist) is read before registering.
    let known_before = meta::register_targets(&db, &[])?;
    let object = ObjectTarget::open(config, object_store)?;
    let mut targets = config
        .targets
        .iter()
        .map(|t| open_target(t, opening, &known_before, created))
        .collect::<Result<Vec<_>, _>>()?;
    // The files are made before their paths are committed, so a known path always had a file.
    let known = meta::register_targets(&db, &paths)?;
    for t in &mut targets {
        if let Some(path) = t.path() {
            t.persistent_id = Some(known[path.to_string_lossy().as_ref()]);
        }
    }
    let boot = meta::boot_id();
    let recovered = local::recover(&db, &mut targets, &known, boot)?;
    let syncers = sync_handles(&targets)?;
    object.share_tags(&recovered.tag_names())?;
    // Last of what may fail: from here the committer marks the store closed when it closes.
    let crash_recoveries = meta::mark_open(&db)?;
    let rings = Rings::probe(config.limits.io_uring_depth);
    let committer = Committer::start(Arc::new(db), config.limits.max_commit_batch, syncers);
    let mut local = LocalStore::new(targets, recovered, rings, committer, boot);
    local.crash_recoveries = crash_recoveries;
    Ok((local, object))
}

/// Checks every target's settings; returns the file targets' paths, as the metadata names them.
fn check_config(config: &StoreConfig) -> Result<Vec<String>, BlobError> {
    if config.targets.is_empty() {
        return Err(BlobError::Config("no targets".into()));
    }
    let mut paths = Vec::new();
    for (i, t) in config.targets.iter().enumerate() {
        check_target(t, &mut paths)
            .map_err(|why| BlobError::Config(format!("target {i}: {why}")))?;
    }
    Ok(paths)
}

/// Checks one target's settings, adding a file target's path to `paths` (once: a path listed
/// twice is refused); `Err` says why not.
fn check_target(t: &TargetConfig, paths: &mut Vec<String>) -> Result<(), String> {
    if !(0.0..=1.0).contains(&t.score) {
        return Err(format!("score {} not in 0.0..=1.0", t.score));
    }
    if (t.kind == TargetKind::Object) != t.object.is_some() {
        return Err("an object target needs an [object] table, and only it takes one".into());
    }
    match (t.kind, &t.path) {
        (TargetKind::Object, Some(_)) => return Err("an object target takes no path".into()),
        (TargetKind::Object, None) if t.capacity != 0 => {
            return Err(
                "an object target takes no capacity (its bucket's quota is the limit)".into(),
            )
        }
        (TargetKind::Object, None) | (TargetKind::Ram, None) => {}
        (TargetKind::File, None) => return Err("a file target needs a path".into()),
        (TargetKind::Ram, Some(_)) => return Err("a RAM target takes no path".into()),
        (TargetKind::File, Some(p)) => {
            let s = p.to_string_lossy().into_owned();
            if paths.contains(&s) {
                return Err(format!("path {s} listed twice"));
            }
            paths.push(s);
        }
    }
    if t.kind != TargetKind::Object && t.capacity < PAGE_SIZE {
        return Err(format!(
            "a capacity of {} bytes holds no page of {PAGE_SIZE} bytes",
            t.capacity
        ));
    }
    Ok(())
}

/// Opens the metadata, making it and its folder on a first start (refused when `opening` may
/// not: a store never made has nothing to show).
fn open_metadata(
    config: &StoreConfig,
    opening: Opening,
    created: &mut Created,
) -> Result<redb::Database, BlobError> {
    let exists = config.metadata.try_exists().map_err(meta_io)?;
    if opening == Opening::ExistingOnly && !exists {
        return Err(BlobError::Metadata(format!(
            "{} does not exist: nothing was ever put in this store",
            config.metadata.display()
        )));
    }
    if let Some(dir) = config
        .metadata
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        created.dirs_of(dir).map_err(meta_io)?;
    }
    if !exists {
        created.files.push(config.metadata.clone());
    }
    meta::open(&config.metadata)
}

/// Opens one configured target: maps a RAM target, opens (or, `opening` allowing, makes) a file
/// target's file. A file the metadata knows (`known_before`) must still be there.
fn open_target(
    t: &TargetConfig,
    opening: Opening,
    known_before: &HashMap<String, u32>,
    created: &mut Created,
) -> Result<Target, BlobError> {
    let pages = t.capacity / PAGE_SIZE;
    let path = match t.kind {
        TargetKind::Object => return Ok(Target::object(t.score)),
        TargetKind::Ram => return Target::ram(pages, t.score),
        TargetKind::File => t.path.as_ref().expect("checked: a file target has a path"),
    };
    let mismatch = |reason: &str| BlobError::TargetMismatch {
        path: path.clone(),
        reason: reason.into(),
    };
    let exists = path.exists();
    if known_before.contains_key(path.to_string_lossy().as_ref()) && !exists {
        return Err(mismatch(
            "the metadata knows this target but its file is gone",
        ));
    }
    if !exists {
        if opening == Opening::ExistingOnly {
            return Err(mismatch("configured, but its file was never made"));
        }
        created.files.push(path.clone());
    }
    Target::file(path, pages, t.score)
}

/// The committer's handle on each file target (`None` for the others).
fn sync_handles(targets: &[Target]) -> Result<Vec<Option<SyncHandle>>, BlobError> {
    targets
        .iter()
        .map(|t| match &t.area {
            Area::File(f) => f.sync_handle().map(Some),
            Area::Ram(_) | Area::Object => Ok(None),
        })
        .collect()
}

/// What an open created, to remove again if it fails: files, and folders
/// (deepest first).
#[derive(Default)]
struct Created {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Created {
    /// Creates `dir` and its missing parents, noting each made.
    fn dirs_of(&mut self, dir: &Path) -> std::io::Result<()> {
        let mut missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(PathBuf::from)
            .collect();
        std::fs::create_dir_all(dir)?;
        self.dirs.append(&mut missing);
        Ok(())
    }

    fn remove(self) {
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
        // Only if empty: a folder something else wrote to meanwhile stays.
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}
