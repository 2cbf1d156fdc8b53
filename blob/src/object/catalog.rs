//! What the bucket holds by name: its tags, the blobs of a tag, and removing a blob.

use std::sync::Arc;

use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::ObjectTier;
use crate::error::BlobError;

impl ObjectTier {
    /// Records tag `name` in the bucket (idempotent).
    pub(super) fn put_tag(&self, name: &str) -> Result<(), BlobError> {
        let store = Arc::clone(&self.store);
        let path = self.tag_path(name);
        self.run(format!("put tag {name:?}"), async move {
            store.put(&path, PutPayload::new()).await.map(drop)
        })
    }

    /// Whether the bucket has tag `name`.
    pub(super) fn has_tag(&self, name: &str) -> Result<bool, BlobError> {
        let store = Arc::clone(&self.store);
        let path = self.tag_path(name);
        self.run(format!("look up tag {name:?}"), async move {
            match store.head(&path).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    /// Every tag name in the bucket.
    pub(super) fn tags(&self) -> Result<Vec<String>, BlobError> {
        let store = Arc::clone(&self.store);
        let dir = self.tags_dir();
        let listed = self.run("list tags", async move {
            store.list_with_delimiter(Some(&dir)).await
        })?;
        listed
            .objects
            .iter()
            .map(|o| self.last_segment(&o.location))
            .collect()
    }

    /// Removes blob `name` of `tag`; `Ok(false)` when the bucket has no such blob.
    pub(super) fn delete(&self, tag: &str, name: &str) -> Result<bool, BlobError> {
        let Some(read) = self.manifest(tag, name)? else {
            return Ok(false);
        };
        let store = Arc::clone(&self.store);
        let path = self.manifest_path(tag, name);
        let key = path.clone();
        self.run(format!("delete the manifest of {tag}/{name}"), async move {
            store.delete(&key).await
        })?;
        self.manifests.lock().remove(&path);
        let m = &read.manifest;
        self.drop_parts(
            m.parts
                .iter()
                .enumerate()
                .filter(|(_, &id)| id != 0)
                .map(|(i, &id)| self.part_path(tag, name, id, i as u64)),
        );
        Ok(true)
    }

    /// The blobs of `tag` in the bucket, with their sizes, by name.
    pub(super) fn list(&self, tag: &str) -> Result<Vec<(String, u64)>, BlobError> {
        let store = Arc::clone(&self.store);
        let dir = self.blobs_dir(tag);
        let listed = self.run(format!("list the blobs of {tag}"), async move {
            store.list_with_delimiter(Some(&dir)).await
        })?;
        let mut out = Vec::with_capacity(listed.objects.len());
        for o in &listed.objects {
            let name = self.last_segment(&o.location)?;
            // Deleted since the listing: left out.
            if let Some(size) = self.size(tag, &name)? {
                out.push((name, size));
            }
        }
        out.sort();
        Ok(out)
    }
}
