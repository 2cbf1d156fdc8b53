//! The store opened in this process: by `tandem blob run` and the demo to
//! serve it, and by the store commands when no runtime serves it.

use std::io::Write;
use tandem_blob::{BlobPut, BlobRange};

use tandem_blob::{BlobError, BlobStat, BlobStore, FillError, StoreConfig, TagId};

use super::access::{Blob, Storage, StoreAccess};
use super::error::{AccessError, PutError};
use super::input::Input;

/// Bytes of a stream held at once: each chunk is one put.
const STREAM_CHUNK: usize = 4 << 20;

/// Opens the store (creating it on first use).
pub(super) fn open_store(config: &StoreConfig) -> Result<BlobStore, String> {
    BlobStore::open(config).map_err(|e| opening_failed(config, &e))
}

/// Why `config`'s store did not open, in words.
pub(super) fn opening_failed(config: &StoreConfig, e: &BlobError) -> String {
    match e {
        BlobError::InUse { .. } => format!(
            "the store's metadata file {} is in use: another process has this store open \
             (a runtime serving it, or another command)",
            config.metadata.display()
        ),
        _ => format!("opening the store ({}): {e}", config.metadata.display()),
    }
}

/// A store this process opened.
pub(super) struct Direct(pub(super) BlobStore);

fn refused(e: BlobError) -> AccessError {
    AccessError::Refused {
        code: e.code(),
        words: e.to_string(),
    }
}

fn blob(stat: BlobStat) -> Blob {
    Blob {
        storage: Some(Storage::new(stat.persistence, stat.stored, &stat.codecs)),
        name: stat.name,
        size: stat.size,
        durable: stat.durable,
        targets: stat.targets,
    }
}

impl StoreAccess for Direct {
    fn tag(&self, name: &str) -> Result<Option<TagId>, AccessError> {
        self.0.tag(name).map_err(refused)
    }

    fn get_or_create_tag(&self, name: &str) -> Result<TagId, AccessError> {
        self.0.get_or_create_tag(name).map_err(refused)
    }

    fn list_tags(&self) -> Result<Vec<(TagId, String)>, AccessError> {
        self.0.list_tags().map_err(refused)
    }

    fn list_blobs(&self, tag: TagId) -> Result<Vec<Blob>, AccessError> {
        let blobs = self.0.list_blobs(tag).map_err(refused)?;
        Ok(blobs.into_iter().map(blob).collect())
    }

    fn stat(&self, tag: TagId, name: &str) -> Result<Blob, AccessError> {
        self.0.stat(tag, name).map(blob).map_err(refused)
    }

    fn delete(&self, tag: TagId, name: &str) -> Result<(), AccessError> {
        self.0.delete(tag, name).map_err(refused)
    }

    /// A file in one put (all or nothing, read as the store writes it); a
    /// stream in chunks.
    fn put(&self, put: &BlobPut<'_>, input: &mut Input) -> Result<u64, PutError> {
        if let Some(len) = input.len() {
            let mut fill = |at: u64, dst: &mut [u8]| input.read_at(at, dst);
            self.0.put_with(put, len, &mut fill).map_err(refused)?;
            return Ok(len);
        }
        input.put_in_chunks(STREAM_CHUNK, |at, bytes| {
            self.0
                .put(&put.at(put.offset + at), bytes)
                .map(drop)
                .map_err(refused)
        })
    }

    fn get(&self, range: BlobRange<'_>, out: &mut dyn Write) -> Result<(), AccessError> {
        // Chunks come in order: written as they come.
        let mut drain = |_at: u64, src: &[u8]| {
            out.write_all(src)
                .map_err(|e| FillError(format!("writing the output: {e}")))
        };
        self.0.get_with(range, &mut drain).map_err(|e| match e {
            BlobError::Fill(FillError(why)) => AccessError::Failed(why),
            e => refused(e),
        })
    }

    fn keeps_volatile_blobs(&self) -> bool {
        false
    }
}
