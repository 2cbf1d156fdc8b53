//! A get of a blob in the bucket: parts read ahead, handed on in order, started over when a put
//! elsewhere replaced a part before any byte went to the caller.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::conflict::{conflict_wait, MAX_GET_RESTARTS};
use super::manifest::Manifest;
use super::parts::Slot;
use super::ObjectTier;
use crate::error::BlobError;
use crate::types::Sink;

/// How one pass of a get over the manifest it read ended.
enum Pass {
    /// Every byte went to the drain.
    Done,
    /// The bucket has no such blob.
    Missing,
    /// A part the manifest names is gone (a put elsewhere replaced it); `drained`: bytes of
    /// this version went to the drain before.
    Gone { drained: bool },
}

impl ObjectTier {
    /// Reads `len` bytes at `offset` of blob `name` of `tag` into `drain`, in order; `Ok(false)`
    /// when the bucket has no such blob. Range errors are [`BlobError::OutOfRange`].
    pub(super) fn get(
        &self,
        tag: &str,
        name: &str,
        offset: u64,
        len: u64,
        drain: &mut Sink<'_>,
    ) -> Result<bool, BlobError> {
        let mut started = Instant::now();
        for attempt in 1..=MAX_GET_RESTARTS {
            if attempt > 1 {
                std::thread::sleep(conflict_wait(attempt - 1, started.elapsed()));
                started = Instant::now();
            }
            match self.get_pass(tag, name, offset, len, drain)? {
                Pass::Done => return Ok(true),
                Pass::Missing => return Ok(false),
                // The caller has bytes of the old version: starting over would mix versions.
                Pass::Gone { drained: true } => return Err(self.conflict(tag, name, attempt)),
                Pass::Gone { drained: false } => {}
            }
        }
        Err(self.conflict(tag, name, MAX_GET_RESTARTS))
    }

    /// One pass: the manifest read now, the range checked against it, its parts drained.
    fn get_pass(
        &self,
        tag: &str,
        name: &str,
        offset: u64,
        len: u64,
        drain: &mut Sink<'_>,
    ) -> Result<Pass, BlobError> {
        let Some(read) = self.manifest(tag, name)? else {
            return Ok(Pass::Missing);
        };
        let m = &read.manifest;
        if offset.checked_add(len).is_none_or(|e| e > m.size) {
            return Err(BlobError::OutOfRange {
                size: m.size,
                offset,
                len,
            });
        }
        self.drain_parts(tag, name, m, offset, offset + len, drain)
    }

    /// Hands the bytes `offset..end` of `m` to `drain`, part after part, parts not cached
    /// fetched up to `in_flight` ahead of the one being drained.
    fn drain_parts(
        &self,
        tag: &str,
        name: &str,
        m: &Manifest,
        offset: u64,
        end: u64,
        drain: &mut Sink<'_>,
    ) -> Result<Pass, BlobError> {
        let (first, last) = (offset / m.part_size, (end - 1) / m.part_size);
        let mut pending: VecDeque<Slot> = VecDeque::new();
        let mut next = first;
        let mut drained = false;
        for i in first..=last {
            while next <= last && pending.len() < self.in_flight {
                pending.push_back(self.slot(tag, name, m, next));
                next += 1;
            }
            let len = m.part_len(i);
            let bytes = match pending.pop_front().expect("part i was queued") {
                Slot::Hole => Bytes::from(vec![0; len as usize]),
                Slot::Cached(key, b) => self.fit(tag, name, &key, b, len)?,
                Slot::Fetching(key, task) => match self.fetched(tag, name, key, task, len)? {
                    Some(b) => b,
                    None => return Ok(Pass::Gone { drained }),
                },
            };
            let start = i * m.part_size;
            let (a, b) = (offset.max(start), end.min(start + len));
            drain(
                a - offset,
                &bytes[(a - start) as usize..(b - start) as usize],
            )?;
            drained = true;
        }
        Ok(Pass::Done)
    }
}
