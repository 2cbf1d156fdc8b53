//! The store through the runtime serving it: a client of its CPU segment
//! calling the blob pool. Data moves through one buffer of the client's
//! heap, a chunk at a time, so a transfer of any size fits the client's
//! quota (`client_heap_bytes`).

use std::io::Write;
use tandem_blob::{BlobPut, BlobRange};

use tandem_blob::pool::BlobInfo;
use tandem_blob::{BlobCaller, CallError, StoreIdentity, TagId};
use tandem_runtime::{Client, SharedBuffer};

use super::access::{Blob, Storage, StoreAccess};
use super::error::{AccessError, PutError};
use super::input::Input;

/// A client of the runtime serving the store.
pub(super) struct Served {
    client: Client,
    segment: String,
}

impl Served {
    /// Attaches to the runtime of CPU segment `segment`.
    pub(super) fn attach(segment: &str) -> Result<Served, String> {
        let client = Client::attach(segment)
            .map_err(|e| format!("attaching to the runtime of segment {segment}: {e}"))?;
        Ok(Served {
            client,
            segment: segment.into(),
        })
    }

    /// The runtime, in words.
    pub(super) fn shown(&self) -> String {
        format!(
            "the runtime of segment {} (pid {})",
            self.segment,
            self.client.runtime_pid()
        )
    }

    /// Which store the runtime serves.
    pub(super) fn identity(&self) -> Result<StoreIdentity, AccessError> {
        self.caller().identity().map_err(|e| self.failed(e))
    }

    fn caller(&self) -> BlobCaller<'_, Client> {
        BlobCaller::new(&self.client)
    }

    fn failed(&self, e: CallError) -> AccessError {
        match e {
            CallError::Blob(code) => AccessError::Refused {
                code,
                words: CallError::Blob(code).to_string(),
            },
            CallError::Task(e) => AccessError::Failed(format!("{}: {e}", self.shown())),
        }
    }

    /// A buffer of the client's heap for a transfer's chunks.
    fn buffer(&self) -> Result<SharedBuffer<'_>, AccessError> {
        self.caller().chunk_buffer().map_err(|e| {
            AccessError::Failed(format!(
                "{}: no buffer for a transfer in this client's heap: {e}",
                self.shown()
            ))
        })
    }
}

fn blob(name: String, info: BlobInfo) -> Blob {
    Blob {
        name,
        size: info.size,
        durable: info.durable != 0,
        targets: (0..64).filter(|i| info.targets & 1 << i != 0).collect(),
        storage: info
            .persistence()
            .map(|level| Storage::new(level, info.stored, &info.codecs())),
    }
}

impl StoreAccess for Served {
    fn tag(&self, name: &str) -> Result<Option<TagId>, AccessError> {
        self.caller().tag(name).map_err(|e| self.failed(e))
    }

    fn get_or_create_tag(&self, name: &str) -> Result<TagId, AccessError> {
        self.caller()
            .get_or_create_tag(name)
            .map_err(|e| self.failed(e))
    }

    fn list_tags(&self) -> Result<Vec<(TagId, String)>, AccessError> {
        let caller = self.caller();
        let names = caller.list_tags().map_err(|e| self.failed(e))?;
        let mut tags = Vec::with_capacity(names.len());
        for name in names {
            // Tags are never deleted: each listed one has its id.
            if let Some(tag) = caller.tag(&name).map_err(|e| self.failed(e))? {
                tags.push((tag, name));
            }
        }
        Ok(tags)
    }

    fn list_blobs(&self, tag: TagId) -> Result<Vec<Blob>, AccessError> {
        let caller = self.caller();
        let names = caller.list_blobs(tag).map_err(|e| self.failed(e))?;
        let mut blobs = Vec::with_capacity(names.len());
        for name in names {
            match caller.stat(tag, &name).map_err(|e| self.failed(e)) {
                Ok(info) => blobs.push(blob(name, info)),
                // Deleted since the listing.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(blobs)
    }

    fn stat(&self, tag: TagId, name: &str) -> Result<Blob, AccessError> {
        let info = self.caller().stat(tag, name).map_err(|e| self.failed(e))?;
        Ok(blob(name.into(), info))
    }

    fn delete(&self, tag: TagId, name: &str) -> Result<(), AccessError> {
        self.caller().delete(tag, name).map_err(|e| self.failed(e))
    }

    fn put(&self, put: &BlobPut<'_>, input: &mut Input) -> Result<u64, PutError> {
        let caller = self.caller();
        let first = self.buffer()?;
        let chunk = first.len();
        let mut buffer = Some(first);
        input.put_in_chunks(chunk, |at, bytes| {
            // A failed call took the buffer, and ended the put.
            let mut data = buffer.take().expect("the buffer is back after each chunk");
            data.write(0, bytes);
            let (_, data) = caller
                .put_from(&put.at(put.offset + at), data, bytes.len())
                .map_err(|e| self.failed(e))?;
            buffer = Some(data);
            Ok(())
        })
    }

    fn get(&self, range: BlobRange<'_>, out: &mut dyn Write) -> Result<(), AccessError> {
        let caller = self.caller();
        let mut buffer = self.buffer()?;
        let mut staging = vec![0u8; buffer.len()];
        let mut done = 0u64;
        while done < range.len {
            let n = (range.len - done).min(buffer.len() as u64) as usize;
            buffer = caller
                .get_into(range.tag, range.name, range.offset + done, buffer, n)
                .map_err(|e| self.failed(e))?;
            buffer.read(0, &mut staging[..n]);
            out.write_all(&staging[..n])
                .map_err(|e| AccessError::Failed(format!("writing the output: {e}")))?;
            done += n as u64;
        }
        Ok(())
    }

    fn keeps_volatile_blobs(&self) -> bool {
        true
    }
}
