//! The owner record: the first bytes of a named segment of a user's own
//! format, saying which process owns it, so that the segment is known for
//! stale once that process is gone (the runtime's own segments record their
//! owner in their header instead).

use std::mem::size_of;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memoffset::offset_of;

use crate::identity::ProcessIdentity;

/// The first word of a published [`OwnerRecord`] ("TNDMOWND").
pub const OWNED_SEGMENT_MAGIC: u64 = 0x544e_444d_4f57_4e44;

/// The first 24 bytes of a named segment of a user's own format that
/// `tandem clean` and `tandem_runtime::create_owned_segment` should
/// recognise: who owns it. The segment's creator places it at offset 0,
/// initialises the rest of its segment, then [`publish`](Self::publish)es
/// it; the runtime's own segments record their owner in their header
/// instead.
#[repr(C, align(8))]
#[derive(Debug)]
pub struct OwnerRecord {
    magic: AtomicU64,
    pid: AtomicU32,
    kind: AtomicU32,
    start_time: AtomicU64,
}

static_assertions::assert_eq_size!(OwnerRecord, [u8; 24]);
static_assertions::const_assert_eq!(offset_of!(OwnerRecord, magic), 0);
static_assertions::const_assert_eq!(offset_of!(OwnerRecord, pid), 8);
static_assertions::const_assert_eq!(offset_of!(OwnerRecord, kind), 12);
static_assertions::const_assert_eq!(offset_of!(OwnerRecord, start_time), 16);

impl OwnerRecord {
    /// Records this process as the owner and `kind` (the format's own tag,
    /// which [`owner`](Self::owner) returns to tell formats apart), then
    /// publishes the record. Call it last: a reader that sees the record
    /// published sees everything written before the call.
    pub fn publish(&self, kind: u32) {
        let me = ProcessIdentity::current();
        // Relaxed: published by the Release of the magic below.
        self.pid.store(me.pid, Ordering::Relaxed);
        self.kind.store(kind, Ordering::Relaxed);
        self.start_time.store(me.start_time, Ordering::Relaxed);
        // Release: pairs with the Acquire in `owner` (and with `tandem
        // clean`'s read of the segment), ordering the segment's
        // initialisation and the fields above before the magic.
        self.magic.store(OWNED_SEGMENT_MAGIC, Ordering::Release);
    }

    /// The owner and kind, once published; `None` before.
    pub fn owner(&self) -> Option<(ProcessIdentity, u32)> {
        // Acquire: pairs with `publish`'s Release.
        if self.magic.load(Ordering::Acquire) != OWNED_SEGMENT_MAGIC {
            return None;
        }
        // Relaxed: ordered by the Acquire above.
        let owner = ProcessIdentity {
            pid: self.pid.load(Ordering::Relaxed),
            start_time: self.start_time.load(Ordering::Relaxed),
        };
        Some((owner, self.kind.load(Ordering::Relaxed)))
    }

    /// The owner a published record at the start of `bytes` names: what a
    /// process that reads a segment's first bytes through a file (not a
    /// mapping) sees. `None` when `bytes` are too short or hold no
    /// published record.
    pub fn owner_in(bytes: &[u8]) -> Option<ProcessIdentity> {
        let bytes = bytes.get(..size_of::<Self>())?;
        let u32_at = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        (u64_at(offset_of!(Self, magic)) == OWNED_SEGMENT_MAGIC).then(|| ProcessIdentity {
            pid: u32_at(offset_of!(Self, pid)),
            start_time: u64_at(offset_of!(Self, start_time)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record's bytes, as a reader of the segment's file sees them.
    fn bytes_of(record: &OwnerRecord) -> [u8; 24] {
        // SAFETY: `OwnerRecord` is 24 bytes of integers (asserted above),
        // every one initialised; the copy reads them once.
        unsafe { std::ptr::read((record as *const OwnerRecord).cast::<[u8; 24]>()) }
    }

    #[test]
    fn a_published_record_names_this_process_in_memory_and_in_bytes() {
        let record = OwnerRecord {
            magic: AtomicU64::new(0),
            pid: AtomicU32::new(0),
            kind: AtomicU32::new(0),
            start_time: AtomicU64::new(0),
        };
        assert_eq!(record.owner(), None);
        assert_eq!(OwnerRecord::owner_in(&bytes_of(&record)), None);
        record.publish(7);
        let me = ProcessIdentity::current();
        assert_eq!(record.owner(), Some((me, 7)));
        let bytes = bytes_of(&record);
        assert_eq!(OwnerRecord::owner_in(&bytes), Some(me));
        assert_eq!(OwnerRecord::owner_in(&bytes[..23]), None, "too short");
    }
}
