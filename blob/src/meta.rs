//! The redb metadata: table layout, the extent-map encoding, and the group committer.

use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use redb::{Database, ReadableTable, TableDefinition};

use crate::error::{meta_err, BlobError};
use crate::target::SyncHandle;

/// Tag name -> tag id.
pub(crate) const TAGS: TableDefinition<&str, u64> = TableDefinition::new("tags");
/// (tag id, blob name) -> encoded durable version (size and extent map).
pub(crate) const BLOBS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("blobs");
/// File target path -> persistent target id used in extent maps.
pub(crate) const TARGETS: TableDefinition<&str, u32> = TableDefinition::new("targets");

/// One extent as stored: logical page, page count, persistent target id, physical page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredExtent {
    pub(crate) lpage: u64,
    pub(crate) npages: u64,
    pub(crate) pid: u32,
    pub(crate) ppage: u64,
}

const FORMAT: u8 = 1;
const EXTENT_BYTES: usize = 8 + 8 + 4 + 8;

/// Encodes a blob version: format byte, size, extent count, extents (little endian).
pub(crate) fn encode(size: u64, extents: &[StoredExtent]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + 8 + 4 + extents.len() * EXTENT_BYTES);
    v.push(FORMAT);
    v.extend_from_slice(&size.to_le_bytes());
    v.extend_from_slice(&(extents.len() as u32).to_le_bytes());
    for e in extents {
        v.extend_from_slice(&e.lpage.to_le_bytes());
        v.extend_from_slice(&e.npages.to_le_bytes());
        v.extend_from_slice(&e.pid.to_le_bytes());
        v.extend_from_slice(&e.ppage.to_le_bytes());
    }
    v
}

/// Decodes what [`encode`] wrote; `None` when the bytes are not such an encoding.
pub(crate) fn decode(b: &[u8]) -> Option<(u64, Vec<StoredExtent>)> {
    fn u64_at(b: &[u8], at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    }
    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }
    if b.first() != Some(&FORMAT) {
        return None;
    }
    let size = u64_at(b, 1)?;
    let n = u32_at(b, 9)? as usize;
    if b.len() != 13 + n.checked_mul(EXTENT_BYTES)? {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let at = 13 + i * EXTENT_BYTES;
        out.push(StoredExtent {
            lpage: u64_at(b, at)?,
            npages: u64_at(b, at + 8)?,
            pid: u32_at(b, at + 16)?,
            ppage: u64_at(b, at + 20)?,
        });
    }
    Some((size, out))
}

/// One metadata change, applied inside a group-committed transaction.
pub(crate) enum MetaOp {
    /// `sync`: indices of the file targets to fdatasync before the commit.
    PutBlob {
        tag: u64,
        name: String,
        value: Vec<u8>,
        sync: Vec<usize>,
    },
    DeleteBlob {
        tag: u64,
        name: String,
    },
    CreateTag {
        name: String,
        id: u64,
    },
}

struct Request {
    op: MetaOp,
    done: SyncSender<Result<(), String>>,
}

/// A thread that commits metadata changes in batches: every request that arrived while the
/// previous transaction was committing goes into the next one (group commit), so N concurrent
/// puts cost about one fsync'd commit instead of N. Each caller waits for its own batch.
pub(crate) struct Committer {
    tx: Option<Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    /// `syncers[i]`: target i's file (None for RAM targets).
    pub(crate) fn start(
        db: Arc<Database>,
        max_batch: usize,
        syncers: Vec<Option<SyncHandle>>,
    ) -> Committer {
        let (tx, rx) = mpsc::channel::<Request>();
        let thread = std::thread::Builder::new()
            .name("blob-commit".into())
            .spawn(move || run(db, rx, max_batch.max(1), syncers))
            .expect("spawn the blob committer thread");
        Committer {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    /// Commits `op` and returns once the transaction holding it is durable.
    pub(crate) fn commit(&self, op: MetaOp) -> Result<(), BlobError> {
        let (done, wait) = mpsc::sync_channel(1);
        let closed = || BlobError::Metadata("the committer thread is gone".into());
        self.tx
            .as_ref()
            .ok_or_else(closed)?
            .send(Request { op, done })
            .map_err(|_| closed())?;
        wait.recv()
            .map_err(|_| closed())?
            .map_err(BlobError::Metadata)
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    db: Arc<Database>,
    rx: Receiver<Request>,
    max_batch: usize,
    syncers: Vec<Option<SyncHandle>>,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let result = sync(&syncers, &batch)
            .and_then(|()| apply(&db, &batch))
            .map_err(|e| e.to_string());
        if let Err(e) = &result {
            tracing::error!(error = %e, ops = batch.len(), "blob metadata commit failed");
        }
        for r in batch {
            let _ = r.done.send(result.clone());
        }
    }
}

/// Syncs each file target that a put of the batch wrote, once: data before the metadata.
fn sync(syncers: &[Option<SyncHandle>], batch: &[Request]) -> Result<(), BlobError> {
    let mut done = vec![false; syncers.len()];
    for r in batch {
        if let MetaOp::PutBlob { sync, .. } = &r.op {
            for &t in sync {
                if !done[t] {
                    done[t] = true;
                    if let Some(h) = &syncers[t] {
                        h.sync()?;
                    }
                }
            }
        }
    }
    Ok(())
}

fn apply(db: &Database, batch: &[Request]) -> Result<(), BlobError> {
    let txn = db.begin_write().map_err(meta_err)?;
    {
        let mut blobs = txn.open_table(BLOBS).map_err(meta_err)?;
        let mut tags = txn.open_table(TAGS).map_err(meta_err)?;
        for r in batch {
            match &r.op {
                MetaOp::PutBlob {
                    tag, name, value, ..
                } => {
                    blobs
                        .insert((*tag, name.as_str()), value.as_slice())
                        .map_err(meta_err)?;
                }
                MetaOp::DeleteBlob { tag, name } => {
                    blobs.remove((*tag, name.as_str())).map_err(meta_err)?;
                }
                MetaOp::CreateTag { name, id } => {
                    tags.insert(name.as_str(), *id).map_err(meta_err)?;
                }
            }
        }
    }
    txn.commit().map_err(meta_err)
}

/// Everything read back at open.
pub(crate) struct Loaded {
    pub(crate) tags: Vec<(String, u64)>,
    pub(crate) blobs: Vec<(u64, String, Vec<u8>)>,
}

/// Creates the tables if missing, gives every configured file target path a persistent id
/// (new paths get fresh ids), and returns (path -> id for all known paths, the new paths).
pub(crate) fn register_targets(
    db: &Database,
    paths: &[String],
) -> Result<(std::collections::HashMap<String, u32>, Vec<String>), BlobError> {
    let txn = db.begin_write().map_err(meta_err)?;
    let mut known = std::collections::HashMap::new();
    let mut fresh = Vec::new();
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
                fresh.push(p.clone());
                next += 1;
            }
        }
    }
    txn.commit().map_err(meta_err)?;
    Ok((known, fresh))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let ex = vec![
            StoredExtent {
                lpage: 0,
                npages: 3,
                pid: 1,
                ppage: 7,
            },
            StoredExtent {
                lpage: 5,
                npages: 1,
                pid: 0,
                ppage: 0,
            },
        ];
        let b = encode(12345, &ex);
        assert_eq!(decode(&b), Some((12345, ex)));
        assert_eq!(decode(&b[..b.len() - 1]), None);
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[9, 0, 0]), None);
    }
}
