//! Manifests: a blob version as one object (its size, part size and the put that wrote each
//! part), read conditionally on the etag the tier holds and written conditionally on the one it
//! read.

use std::sync::Arc;

use bytes::Bytes;
use object_store::{GetOptions, PutMode, PutOptions, PutPayload, UpdateVersion};

use super::ObjectTier;
use crate::error::BlobError;

/// A blob version as stored in its manifest object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Manifest {
    pub(super) size: u64,
    pub(super) part_size: u64,
    /// Per part, the id of the put that wrote it; 0 is a hole.
    pub(super) parts: Vec<u128>,
}

const MANIFEST_FORMAT: u8 = 1;

impl Manifest {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(21 + self.parts.len() * 16);
        v.push(MANIFEST_FORMAT);
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.part_size.to_le_bytes());
        v.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        for p in &self.parts {
            v.extend_from_slice(&p.to_le_bytes());
        }
        v
    }

    /// `None` unless `b` is what [`Manifest::encode`] writes, with one part per `part_size`
    /// bytes of the size.
    fn decode(b: &[u8]) -> Option<Manifest> {
        let u64_at = |at: usize| Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?));
        if b.first() != Some(&MANIFEST_FORMAT) {
            return None;
        }
        let size = u64_at(1)?;
        let part_size = u64_at(9)?;
        let n = u32::from_le_bytes(b.get(17..21)?.try_into().ok()?) as usize;
        if part_size == 0 || b.len() != 21 + n.checked_mul(16)? {
            return None;
        }
        if size.div_ceil(part_size) != n as u64 {
            return None;
        }
        let parts = b[21..]
            .chunks_exact(16)
            .map(|c| u128::from_le_bytes(c.try_into().expect("16 bytes")))
            .collect();
        Some(Manifest {
            size,
            part_size,
            parts,
        })
    }

    /// Bytes of part `i` (the last part may be short).
    pub(super) fn part_len(&self, i: u64) -> u64 {
        self.part_size.min(self.size - i * self.part_size)
    }
}

/// A manifest as read, with the etag to make the next write conditional on.
#[derive(Clone)]
pub(super) struct Read {
    pub(super) manifest: Arc<Manifest>,
    pub(super) etag: Option<String>,
}

/// What a conditional read of a manifest found.
enum ManifestRead {
    Missing,
    Unchanged,
    /// The object's bytes and etag.
    Fresh(Bytes, Option<String>),
}

impl ObjectTier {
    /// The blob's manifest, read again unless the cached etag still matches.
    pub(super) fn manifest(&self, tag: &str, name: &str) -> Result<Option<Read>, BlobError> {
        let path = self.manifest_path(tag, name);
        let cached = self.manifests.lock().get(&path).cloned();
        let store = Arc::clone(&self.store);
        let etag = cached.as_ref().and_then(|c| c.etag.clone());
        let key = path.clone();
        let read = self.run(format!("read the manifest of {tag}/{name}"), async move {
            let options = GetOptions {
                if_none_match: etag,
                ..GetOptions::default()
            };
            match store.get_opts(&key, options).await {
                Ok(got) => {
                    let etag = got.meta.e_tag.clone();
                    Ok(ManifestRead::Fresh(got.bytes().await?, etag))
                }
                Err(object_store::Error::NotModified { .. }) => Ok(ManifestRead::Unchanged),
                Err(object_store::Error::NotFound { .. }) => Ok(ManifestRead::Missing),
                Err(e) => Err(e),
            }
        })?;
        match read {
            ManifestRead::Missing => {
                self.manifests.lock().remove(&path);
                Ok(None)
            }
            ManifestRead::Unchanged => Ok(cached),
            ManifestRead::Fresh(bytes, etag) => {
                let manifest = Manifest::decode(&bytes).ok_or_else(|| {
                    BlobError::Corrupt(format!(
                        "object target {}: the manifest of {tag}/{name} is not one this version reads",
                        self.label
                    ))
                })?;
                let read = Read {
                    manifest: Arc::new(manifest),
                    etag,
                };
                self.manifests.lock().insert(path, read.clone());
                Ok(Some(read))
            }
        }
    }

    /// The size of blob `name` of `tag`, if the bucket has it.
    pub(super) fn size(&self, tag: &str, name: &str) -> Result<Option<u64>, BlobError> {
        Ok(self.manifest(tag, name)?.map(|r| r.manifest.size))
    }

    /// Writes `m` as the blob's manifest, conditional on `old` (the manifest read, or none)
    /// where the store honours conditions; `false` when another writer came first.
    pub(super) fn write_manifest(
        &self,
        tag: &str,
        name: &str,
        old: Option<&Read>,
        m: &Manifest,
    ) -> Result<bool, BlobError> {
        let mode = match (self.conditional, old) {
            (false, _) => PutMode::Overwrite,
            (true, None) => PutMode::Create,
            (true, Some(Read { etag: Some(e), .. })) => PutMode::Update(UpdateVersion {
                e_tag: Some(e.clone()),
                version: None,
            }),
            (true, Some(Read { etag: None, .. })) => PutMode::Overwrite,
        };
        let store = Arc::clone(&self.store);
        let path = self.manifest_path(tag, name);
        let key = path.clone();
        let payload = PutPayload::from(m.encode());
        let written = self.run(format!("write the manifest of {tag}/{name}"), async move {
            match store.put_opts(&key, payload, PutOptions::from(mode)).await {
                Ok(done) => Ok(Some(done.e_tag)),
                Err(object_store::Error::AlreadyExists { .. })
                | Err(object_store::Error::Precondition { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        let Some(etag) = written else {
            return Ok(false);
        };
        self.manifests.lock().insert(
            path,
            Read {
                manifest: Arc::new(m.clone()),
                etag,
            },
        );
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_round_trip_and_bad_ones_are_refused() {
        let m = Manifest {
            size: 10,
            part_size: 4,
            parts: vec![7, 0, 9],
        };
        assert_eq!(Manifest::decode(&m.encode()), Some(m.clone()));
        let mut bad = m.encode();
        bad[0] = 2;
        assert_eq!(Manifest::decode(&bad), None);
        let short = Manifest {
            parts: vec![7, 0],
            ..m.clone()
        };
        assert_eq!(Manifest::decode(&short.encode()), None);
        assert_eq!(Manifest::decode(&m.encode()[..30]), None);
        assert_eq!(m.part_len(2), 2);
    }
}
