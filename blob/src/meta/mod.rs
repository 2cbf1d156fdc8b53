//! The redb metadata: the tables (`TAGS`, `BLOBS`, `TARGETS`), opening the database, what an
//! open reads back, the encoding of a durable blob version (`codec`) and the group committer
//! that writes changes (`commit`).
//!
//! # Why redb
//!
//! The metadata is a small, write-heavy index (one key per blob) that must commit atomically and
//! survive a crash. redb is pure Rust (no C toolchain), ACID, one file, with copy-on-write
//! B-trees whose commit switches a root pointer after an fsync, so a crash leaves either the old
//! or the new tree. fjall is an LSM tree with a journal: good for large write-heavy data, but it
//! adds compaction and write amplification for an index this small, and its several files and
//! background threads are more to manage. heed wraps LMDB, which is proven but needs a C build
//! and a map size fixed in advance. redb's cost, one fsync'd commit per write transaction, is
//! what group commit amortises.

mod codec;
mod commit;

use std::collections::HashMap;
use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition};

pub(crate) use codec::{decode, encode, BootId, StoredExtent, StoredVersion};
pub(crate) use commit::{Committer, MetaOp};

use crate::error::{meta_err, BlobError};
use crate::target;

/// Tag name -> tag id.
pub(crate) const TAGS: TableDefinition<&str, u64> = TableDefinition::new("tags");
/// (tag id, blob name) -> encoded version of a long-term or temporary blob (class, size,
/// extent map).
pub(crate) const BLOBS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("blobs");
/// File target path -> the target's persistent id, which extent maps name it by.
pub(crate) const TARGETS: TableDefinition<&str, u32> = TableDefinition::new("targets");
/// The store's life: [`OPEN`] and [`CRASH_RECOVERIES`].
const LIFE: TableDefinition<&str, u64> = TableDefinition::new("life");
/// 1 from an open until the clean close that ends it: found at 1 at open, the last process
/// that had the store open ended without closing it (killed, crashed, or the machine lost
/// power).
const OPEN: &str = "open";
/// Opens that found [`OPEN`] at 1 and so recovered from a crash, over the store's life.
const CRASH_RECOVERIES: &str = "crash_recoveries";

/// An I/O error around the metadata file, as [`BlobError::Metadata`].
pub(crate) fn meta_io(e: std::io::Error) -> BlobError {
    BlobError::Metadata(e.to_string())
}

/// Opens the redb metadata at `path`, first making it whole elsewhere when there is none
/// ([`target::create_whole`]): a first start killed while redb laid the file out would leave
/// one that redb then refuses to open ("invalid data"), and the store with it.
///
/// The database made whole is the one returned (its descriptor follows the rename): opening
/// the fresh file a second time made 1 MiB puts to a file target about half as fast, with the
/// same syscalls (the blob bench on the CPU device; docs/perf/2026-11-25-dev-vm-2core.md,
/// "The metadata database opened twice").
pub(crate) fn open(path: &Path) -> Result<Database, BlobError> {
    if path.try_exists().map_err(meta_io)? {
        return Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => BlobError::InUse {
                metadata: path.to_owned(),
            },
            e => meta_err(e),
        });
    }
    target::create_whole(path, |tmp| {
        let fresh = |e: &dyn std::fmt::Display| std::io::Error::other(e.to_string());
        let _ = std::fs::remove_file(tmp);
        let db = Database::create(tmp).map_err(|e| fresh(&e))?;
        // One durable (fsynced) commit: the file is complete before it is renamed.
        db.begin_write()
            .map_err(|e| fresh(&e))?
            .commit()
            .map_err(|e| fresh(&e))?;
        Ok(db)
    })
    .map_err(meta_io)
}

/// This boot's id, which temporary versions are stamped with: one stamped with another was
/// written before a reboot, which a power loss may have come with, and is dropped at open.
/// Zeros where the kernel does not tell (then every temporary version is dropped at open).
pub(crate) fn boot_id() -> BootId {
    let mut id = [0; 16];
    let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
        return id;
    };
    let hex: Vec<u8> = text
        .bytes()
        .filter(u8::is_ascii_hexdigit)
        .map(|c| (c as char).to_digit(16).unwrap_or_default() as u8)
        .collect();
    if hex.len() != 32 {
        return id;
    }
    for (i, b) in id.iter_mut().enumerate() {
        *b = hex[2 * i] << 4 | hex[2 * i + 1];
    }
    id
}

/// Removes blob versions at open (temporary ones from another boot), in one transaction.
pub(crate) fn drop_blobs(db: &Database, keys: &[(u64, String)]) -> Result<(), BlobError> {
    if keys.is_empty() {
        return Ok(());
    }
    let txn = db.begin_write().map_err(meta_err)?;
    {
        let mut blobs = txn.open_table(BLOBS).map_err(meta_err)?;
        for (tag, name) in keys {
            blobs.remove((*tag, name.as_str())).map_err(meta_err)?;
        }
    }
    txn.commit().map_err(meta_err)
}

/// Everything read back at open.
pub(crate) struct Loaded {
    pub(crate) tags: Vec<(String, u64)>,
    pub(crate) blobs: Vec<(u64, String, Vec<u8>)>,
}

/// Creates the tables if missing, gives every file target path in `paths` a persistent id (a
/// path new to the metadata gets the next free one) and returns every known path's id. With no
/// `paths`: the paths the metadata knew before this open.
pub(crate) fn register_targets(
    db: &Database,
    paths: &[String],
) -> Result<HashMap<String, u32>, BlobError> {
    let txn = db.begin_write().map_err(meta_err)?;
    let mut known = HashMap::new();
    {
        txn.open_table(TAGS).map_err(meta_err)?;
        txn.open_table(BLOBS).map_err(meta_err)?;
        let mut t = txn.open_table(TARGETS).map_err(meta_err)?;
        for item in t.iter().map_err(meta_err)? {
            let (k, v) = item.map_err(meta_err)?;
            known.insert(k.value().to_owned(), v.value());
        }
        let mut next = known.values().copied().max().map_or(0, |m| m + 1);
        for p in paths {
            if !known.contains_key(p) {
                t.insert(p.as_str(), next).map_err(meta_err)?;
                known.insert(p.clone(), next);
                next += 1;
            }
        }
    }
    txn.commit().map_err(meta_err)?;
    Ok(known)
}

/// Marks the store open, durably, and returns its crash recoveries so far, this open's
/// included when the last one ended without closing the store ([`OPEN`]).
pub(crate) fn mark_open(db: &Database) -> Result<u64, BlobError> {
    let txn = db.begin_write().map_err(meta_err)?;
    let recoveries = {
        let mut life = txn.open_table(LIFE).map_err(meta_err)?;
        let value = |key| -> Result<u64, BlobError> {
            Ok(life.get(key).map_err(meta_err)?.map_or(0, |v| v.value()))
        };
        let crashed = value(OPEN)? == 1;
        let recoveries = value(CRASH_RECOVERIES)? + u64::from(crashed);
        life.insert(CRASH_RECOVERIES, recoveries)
            .map_err(meta_err)?;
        life.insert(OPEN, 1).map_err(meta_err)?;
        recoveries
    };
    txn.commit().map_err(meta_err)?;
    Ok(recoveries)
}

/// Marks the store closed cleanly: the last commit of its life in this process.
pub(crate) fn mark_closed(db: &Database) -> Result<(), BlobError> {
    let txn = db.begin_write().map_err(meta_err)?;
    txn.open_table(LIFE)
        .map_err(meta_err)?
        .insert(OPEN, 0)
        .map_err(meta_err)?;
    txn.commit().map_err(meta_err)
}

/// Reads all tags and durable blobs.
pub(crate) fn load(db: &Database) -> Result<Loaded, BlobError> {
    let txn = db.begin_read().map_err(meta_err)?;
    let mut loaded = Loaded {
        tags: Vec::new(),
        blobs: Vec::new(),
    };
    let tags = txn.open_table(TAGS).map_err(meta_err)?;
    for item in tags.iter().map_err(meta_err)? {
        let (k, v) = item.map_err(meta_err)?;
        loaded.tags.push((k.value().to_owned(), v.value()));
    }
    let blobs = txn.open_table(BLOBS).map_err(meta_err)?;
    for item in blobs.iter().map_err(meta_err)? {
        let (k, v) = item.map_err(meta_err)?;
        let (tag, name) = k.value();
        loaded
            .blobs
            .push((tag, name.to_owned(), v.value().to_vec()));
    }
    Ok(loaded)
}
