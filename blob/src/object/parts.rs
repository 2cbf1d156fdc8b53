//! Part objects: written once under their put's id and never changed, so a store caches the
//! parts it read or wrote (least recently used first out) and never asks for them again; read
//! ahead and written with up to `in_flight` requests at once; deleted, without waiting, once no
//! manifest names them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};

use super::block_on::wait;
use super::manifest::Manifest;
use super::ObjectTier;
use crate::error::BlobError;

/// A part object's write in flight.
type Upload = tokio::task::JoinHandle<object_store::Result<()>>;

/// A part object's read in flight: its bytes, `None` when the object is gone.
type Fetch = tokio::task::JoinHandle<object_store::Result<Option<Bytes>>>;

/// A part a get will hand on: its bytes, or its read in flight.
pub(super) enum Slot {
    Hole,
    Cached(Path, Bytes),
    Fetching(Path, Fetch),
}

/// Parts read or written, least recently used first out.
pub(super) struct PartCache {
    limit: u64,
    bytes: u64,
    parts: HashMap<Path, Bytes>,
    order: VecDeque<Path>,
}

impl PartCache {
    /// An empty cache of at most `limit` bytes.
    pub(super) fn new(limit: u64) -> PartCache {
        PartCache {
            limit,
            bytes: 0,
            parts: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn get(&mut self, key: &Path) -> Option<Bytes> {
        let hit = self.parts.get(key)?.clone();
        if let Some(at) = self.order.iter().position(|k| k == key) {
            let k = self.order.remove(at).expect("position found");
            self.order.push_back(k);
        }
        Some(hit)
    }

    fn insert(&mut self, key: Path, part: Bytes) {
        if part.len() as u64 > self.limit || self.parts.contains_key(&key) {
            return;
        }
        self.bytes += part.len() as u64;
        self.parts.insert(key.clone(), part);
        self.order.push_back(key);
        while self.bytes > self.limit {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(b) = self.parts.remove(&old) {
                self.bytes -= b.len() as u64;
            }
        }
    }

    /// Forgets part `key`: no manifest names it any more.
    fn remove(&mut self, key: &Path) {
        if let Some(b) = self.parts.remove(key) {
            self.bytes -= b.len() as u64;
            self.order.retain(|o| o != key);
        }
    }
}

/// A put's part writes: up to `in_flight` running, and every part it wrote, to cache once its
/// manifest is written or to delete if it fails.
#[derive(Default)]
pub(super) struct Uploads {
    running: VecDeque<Upload>,
    written: Vec<(Path, Bytes)>,
}

impl ObjectTier {
    /// The bytes of part `i` of `m` (zeros for a hole), from the cache or the bucket; `None`
    /// when the part object is gone (a newer put replaced it).
    pub(super) fn part(
        &self,
        tag: &str,
        name: &str,
        m: &Manifest,
        i: u64,
    ) -> Result<Option<Bytes>, BlobError> {
        let len = m.part_len(i);
        let id = m.parts[i as usize];
        if id == 0 {
            return Ok(Some(Bytes::from(vec![0; len as usize])));
        }
        let key = self.part_path(tag, name, id, i);
        if let Some(hit) = self.parts.lock().get(&key) {
            return self.fit(tag, name, &key, hit, len).map(Some);
        }
        let task = self.start_fetch(key.clone());
        self.fetched(tag, name, key, task, len)
    }

    /// Waits for a part read, caches what came, and fits it to `len`; `None` when the part
    /// object is gone.
    pub(super) fn fetched(
        &self,
        tag: &str,
        name: &str,
        key: Path,
        task: Fetch,
        len: u64,
    ) -> Result<Option<Bytes>, BlobError> {
        let Some(got) = self.join(format!("read part {key}"), task)? else {
            return Ok(None);
        };
        self.parts.lock().insert(key.clone(), got.clone());
        self.fit(tag, name, &key, got, len).map(Some)
    }

    /// Starts reading part object `key` on the I/O threads.
    fn start_fetch(&self, key: Path) -> Fetch {
        let store = Arc::clone(&self.store);
        self.io.spawn(async move {
            match store.get(&key).await {
                Ok(got) => got.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    /// A part object's bytes as part of `len` bytes. An object may be shorter: it was the
    /// blob's last part when written, and a later put extended the blob past it without
    /// touching it; the bytes past its end are zeros.
    pub(super) fn fit(
        &self,
        tag: &str,
        name: &str,
        key: &Path,
        got: Bytes,
        len: u64,
    ) -> Result<Bytes, BlobError> {
        match (got.len() as u64).cmp(&len) {
            std::cmp::Ordering::Equal => Ok(got),
            std::cmp::Ordering::Less => {
                let mut padded = got.to_vec();
                padded.resize(len as usize, 0);
                Ok(Bytes::from(padded))
            }
            std::cmp::Ordering::Greater => Err(BlobError::Corrupt(format!(
                "object target {}: part {key} of {tag}/{name} holds {} bytes, its manifest says \
                 at most {len}",
                self.label,
                got.len()
            ))),
        }
    }

    /// Part `i` of `m` for a get: a hole, cached, or its read started.
    pub(super) fn slot(&self, tag: &str, name: &str, m: &Manifest, i: u64) -> Slot {
        let id = m.parts[i as usize];
        if id == 0 {
            return Slot::Hole;
        }
        let key = self.part_path(tag, name, id, i);
        let hit = self.parts.lock().get(&key);
        match hit {
            Some(b) => Slot::Cached(key, b),
            None => {
                let task = self.start_fetch(key.clone());
                Slot::Fetching(key, task)
            }
        }
    }

    /// Deletes part objects no manifest names any more, without waiting: a part left behind
    /// (the process ends first, the request fails) is only unreferenced bytes.
    pub(super) fn drop_parts(&self, keys: impl Iterator<Item = Path>) {
        let keys: Vec<Path> = keys.collect();
        if keys.is_empty() {
            return;
        }
        {
            let mut cache = self.parts.lock();
            for k in &keys {
                cache.remove(k);
            }
        }
        let store = Arc::clone(&self.store);
        let label = self.label.clone();
        self.io.spawn(async move {
            for k in keys {
                if let Err(e) = store.delete(&k).await {
                    tracing::debug!(target = %label, part = %k, %e, "an unreferenced part stays");
                }
            }
        });
    }
}

impl Uploads {
    /// Starts writing part object `key` on `tier`, after the oldest write when `in_flight` are
    /// running. A key written before (an end part composed again after a conflict) is
    /// remembered once, with its latest bytes.
    pub(super) fn start(
        &mut self,
        tier: &ObjectTier,
        key: Path,
        bytes: Bytes,
    ) -> Result<(), BlobError> {
        if self.running.len() == tier.in_flight {
            let task = self.running.pop_front().expect("in_flight is at least 1");
            tier.join("write a part".into(), task)?;
        }
        let store = Arc::clone(&tier.store);
        let (at, payload) = (key.clone(), PutPayload::from(bytes.clone()));
        self.running.push_back(
            tier.io
                .spawn(async move { store.put(&at, payload).await.map(drop) }),
        );
        self.written.retain(|(k, _)| *k != key);
        self.written.push((key, bytes));
        Ok(())
    }

    /// Waits for every write running.
    pub(super) fn finish(&mut self, tier: &ObjectTier) -> Result<(), BlobError> {
        while let Some(task) = self.running.pop_front() {
            tier.join("write a part".into(), task)?;
        }
        Ok(())
    }

    /// The put succeeded: its parts go to `tier`'s cache.
    pub(super) fn keep(self, tier: &ObjectTier) {
        let mut cache = tier.parts.lock();
        for (key, bytes) in self.written {
            cache.insert(key, bytes);
        }
    }

    /// The put failed: its parts are deleted, once the writes still running ended.
    pub(super) fn abandon(self, tier: &ObjectTier) {
        for task in self.running {
            let _ = wait(task);
        }
        tier.drop_parts(self.written.into_iter().map(|(k, _)| k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_part_cache_drops_the_least_recently_used() {
        let mut c = PartCache::new(10);
        let (a, b, x) = (Path::from("a"), Path::from("b"), Path::from("x"));
        c.insert(a.clone(), Bytes::from(vec![1; 4]));
        c.insert(b.clone(), Bytes::from(vec![2; 4]));
        assert!(c.get(&a).is_some());
        c.insert(x.clone(), Bytes::from(vec![3; 4]));
        assert!(c.get(&b).is_none(), "b was the least recently used");
        assert!(c.get(&a).is_some() && c.get(&x).is_some());
        c.insert(Path::from("big"), Bytes::from(vec![0; 11]));
        assert_eq!(c.bytes, 8);
    }
}
