//! The group committer: one thread that syncs the target files a batch of puts wrote and
//! commits the batch's metadata changes in one redb transaction.

use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use redb::Database;

use super::{mark_closed, BLOBS, TAGS};
use crate::error::{meta_err, BlobError};
use crate::target::SyncHandle;

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
    // The channel closed: the store is closing, cleanly (a killed process never gets here).
    if let Err(e) = mark_closed(&db) {
        tracing::warn!("blob metadata: cannot mark the store closed: {e}");
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
