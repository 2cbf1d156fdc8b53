//! Where things live in the bucket, under the target's prefix (see the module docs of
//! `object`): each key a tag, a manifest and a part is written at, and a listed key's name.

use object_store::path::{Path, PathPart};

use super::ObjectTier;
use crate::error::BlobError;

impl ObjectTier {
    /// The folder of the tags' objects.
    pub(super) fn tags_dir(&self) -> Path {
        self.root.clone().join("tags")
    }

    /// The key of tag `tag`'s object.
    pub(super) fn tag_path(&self, tag: &str) -> Path {
        self.tags_dir().join(PathPart::from(tag))
    }

    /// The folder of the manifests of tag `tag`'s blobs.
    pub(super) fn blobs_dir(&self, tag: &str) -> Path {
        self.root.clone().join("blobs").join(PathPart::from(tag))
    }

    /// The key of the manifest of blob `name` of `tag`.
    pub(super) fn manifest_path(&self, tag: &str, name: &str) -> Path {
        self.blobs_dir(tag).join(PathPart::from(name))
    }

    /// The key of part `index` of blob `name` of `tag`, as the put `id` wrote it.
    pub(super) fn part_path(&self, tag: &str, name: &str, id: u128, index: u64) -> Path {
        self.root
            .clone()
            .join("parts")
            .join(PathPart::from(tag))
            .join(PathPart::from(name))
            .join(format!("{id:032x}"))
            .join(index.to_string())
    }

    /// The key of the object that probes conditional writes at open, named by a put id.
    pub(super) fn probe_path(&self, id: u128) -> Path {
        self.root.clone().join("probes").join(format!("{id:032x}"))
    }

    /// The decoded last segment of a listed key.
    pub(super) fn last_segment(&self, key: &Path) -> Result<String, BlobError> {
        let raw = key.filename().unwrap_or_default();
        percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| {
                BlobError::Corrupt(format!(
                    "object target {}: key {key} is not UTF-8",
                    self.label
                ))
            })
    }
}
