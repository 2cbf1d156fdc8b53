//! A host client's requests for device queues of its own, and the runtime's
//! answers: one [`DeviceQueueEntry`] per device segment a client may hold,
//! `client_device_queues` of them per client slot, in the CPU segment's
//! client region (host-only, so no C++ mirror).
//!
//! # An entry's life
//!
//! The state word is a [`DeviceQueueState`]:
//!
//! * `Free -> Filling` (CAS, by the client holding the slot), then it writes
//!   the device and its segment's name and stores `Requested` (Release).
//! * `Requested -> Adopted` or `Requested -> Refused` by the runtime's
//!   janitor (Release, after it stored the refusal): adopted, its workers
//!   poll the segment's lanes.
//! * `Refused -> Free`, by the client once it read the refusal.
//! * `Adopted -> Releasing` by the client when it gives the queues up (or
//!   `Requested -> Free` when it gave up waiting first), then
//!   `Releasing -> Free` by the janitor once its workers no longer take the
//!   segment's lanes.
//! * Any state `-> Free`, by the janitor, when the slot's client died: the
//!   segment is dropped from the workers' poll set and its name removed.
//!
//! Only the client writes an entry in `Free`, `Filling` and `Refused`; only
//! the janitor in `Requested` and `Releasing`, and its `tasks` count while
//! `Adopted`: each word has one writer at a time, handed over by the
//! state's Release/Acquire pairs.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes of a segment name an entry holds (the last one always zero).
pub(crate) const ENTRY_NAME_BYTES: usize = 32;

/// The first segment id minor of client device segments: the runtime's own
/// segments take 0 (CPU) and 1 + their device's index.
const CLIENT_SEGMENT_INDEX_BASE: u32 = 0x1_0000;

/// The id minor of the device segment requested in entry `entry` of slot
/// `slot` (`per_client` entries a slot): unique among the segments a
/// runtime serves, so a pointer of one never resolves in another.
pub(crate) fn client_segment_index(slot: u32, entry: u32, per_client: u32) -> u32 {
    CLIENT_SEGMENT_INDEX_BASE
        .saturating_add(slot.saturating_mul(per_client))
        .saturating_add(entry)
}

/// One device segment a client holds or asks for: a cache line.
#[repr(C, align(64))]
#[derive(Debug)]
pub(crate) struct DeviceQueueEntry {
    /// A [`DeviceQueueState`].
    pub state: AtomicU32,
    /// A [`DeviceQueueRefusal`] while `Refused`.
    pub refusal: AtomicU32,
    /// The device ordinal the segment serves.
    pub device_ordinal: AtomicU32,
    /// Lanes of the segment's queue, once adopted (for status).
    pub lanes: AtomicU32,
    /// Records the runtime's workers took from the segment, refreshed by
    /// its heartbeat (for status).
    pub tasks: AtomicU64,
    pub reserved: AtomicU64,
    /// The segment's name in `/dev/shm`, UTF-8, zero-padded, little-endian
    /// in the words.
    pub name: [AtomicU64; ENTRY_NAME_BYTES / 8],
}

const _: () = assert!(size_of::<DeviceQueueEntry>() == 64);
const _: () = assert!(std::mem::offset_of!(DeviceQueueEntry, tasks) == 16);
const _: () = assert!(std::mem::offset_of!(DeviceQueueEntry, name) == 32);

/// Where an entry is in its life (module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub enum DeviceQueueState {
    /// Nobody holds it.
    Free = 0,
    /// Its client is writing a request.
    Filling = 1,
    /// Its client asks the runtime to adopt a segment.
    Requested = 2,
    /// The runtime's workers serve the segment.
    Adopted = 3,
    /// The runtime refused the segment (the refusal says why).
    Refused = 4,
    /// Its client gave the segment up; the runtime stops serving it.
    Releasing = 5,
}

impl DeviceQueueState {
    pub(crate) fn from_word(word: u32) -> Option<Self> {
        Some(match word {
            0 => Self::Free,
            1 => Self::Filling,
            2 => Self::Requested,
            3 => Self::Adopted,
            4 => Self::Refused,
            5 => Self::Releasing,
            _ => return None,
        })
    }

    /// The name `tandem status` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Free => "free",
            Self::Filling => "filling",
            Self::Requested => "requested",
            Self::Adopted => "serving",
            Self::Refused => "refused",
            Self::Releasing => "releasing",
        }
    }
}

/// Why the runtime refused a client's device segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u32)]
pub enum DeviceQueueRefusal {
    /// The runtime serves no device of that ordinal.
    NoSuchDevice = 1,
    /// The name opens no published device segment of this layout, or its
    /// id, lanes or size are not the ones the runtime asked for.
    BadSegment = 2,
    /// The segment's header names another process than the slot's client.
    NotOwner = 3,
    /// The runtime is stopping.
    Stopping = 4,
}

impl DeviceQueueRefusal {
    pub(crate) fn from_word(word: u32) -> Self {
        match word {
            1 => Self::NoSuchDevice,
            3 => Self::NotOwner,
            4 => Self::Stopping,
            _ => Self::BadSegment,
        }
    }
}

impl std::fmt::Display for DeviceQueueRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NoSuchDevice => "the runtime serves no such device",
            Self::BadSegment => {
                "the segment is not a device segment of the size, lanes and id the runtime set"
            }
            Self::NotOwner => "the segment's header names another process than the client",
            Self::Stopping => "the runtime is stopping",
        })
    }
}

impl DeviceQueueEntry {
    /// The state now. Acquire: pairs with the Release that set it, so the
    /// words its writer stored before are visible.
    pub(crate) fn state(&self) -> Option<DeviceQueueState> {
        DeviceQueueState::from_word(self.state.load(Ordering::Acquire))
    }

    /// Moves `from -> to`; false when the state was not `from`. AcqRel: the
    /// Acquire takes over the entry's words from their last writer, the
    /// Release hands this writer's over.
    pub(crate) fn advance(&self, from: DeviceQueueState, to: DeviceQueueState) -> bool {
        self.state
            .compare_exchange(from as u32, to as u32, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Sets the state (Release: the words written before are visible to
    /// whoever acquires it). Only for the entry's current writer.
    pub(crate) fn set_state(&self, state: DeviceQueueState) {
        self.state.store(state as u32, Ordering::Release);
    }

    /// Writes `name` (at most [`ENTRY_NAME_BYTES`] - 1 bytes; checked by the
    /// caller, who names the segment). Relaxed: published by the state's
    /// Release.
    pub(crate) fn write_name(&self, name: &str) {
        let mut bytes = [0u8; ENTRY_NAME_BYTES];
        let len = name.len().min(ENTRY_NAME_BYTES - 1);
        bytes[..len].copy_from_slice(&name.as_bytes()[..len]);
        for (word, chunk) in self.name.iter().zip(bytes.chunks_exact(8)) {
            let value = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            word.store(value, Ordering::Relaxed);
        }
    }

    /// The segment name written last; `None` when it is not UTF-8 or empty.
    /// Relaxed: read after the state's Acquire.
    pub(crate) fn name(&self) -> Option<String> {
        let bytes: Vec<u8> = self
            .name
            .iter()
            .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
            .take_while(|&b| b != 0)
            .collect();
        String::from_utf8(bytes).ok().filter(|n| !n.is_empty())
    }
}

/// What an entry held when it was read (for `tandem status`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DeviceQueueSnapshot {
    /// Where the entry is in its life.
    pub state: DeviceQueueState,
    /// The device it serves.
    pub device: u32,
    /// Lanes of its queue.
    pub lanes: u32,
    /// Records the runtime's workers took from it.
    pub tasks: u64,
    /// Its segment's name.
    pub name: Option<String>,
}

impl DeviceQueueEntry {
    /// A snapshot, `None` while free. Relaxed after the state's Acquire:
    /// figures for status.
    pub(crate) fn snapshot(&self) -> Option<DeviceQueueSnapshot> {
        let state = self.state()?;
        (state != DeviceQueueState::Free).then(|| DeviceQueueSnapshot {
            state,
            device: self.device_ordinal.load(Ordering::Relaxed),
            lanes: self.lanes.load(Ordering::Relaxed),
            tasks: self.tasks.load(Ordering::Relaxed),
            name: self.name(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> DeviceQueueEntry {
        // SAFETY: every field is an atomic integer, for which all-zero is
        // valid (a free entry, as the client table lays them out).
        unsafe { std::mem::zeroed() }
    }

    #[test]
    fn a_name_round_trips_and_a_long_one_is_cut() {
        let e = entry();
        assert_eq!(e.name(), None);
        e.write_name("tandem-4194304-q7");
        assert_eq!(e.name().as_deref(), Some("tandem-4194304-q7"));
        let long = "x".repeat(ENTRY_NAME_BYTES + 5);
        e.write_name(&long);
        assert_eq!(e.name().map(|n| n.len()), Some(ENTRY_NAME_BYTES - 1));
    }

    #[test]
    fn states_move_only_from_where_they_are() {
        let e = entry();
        assert_eq!(e.state(), Some(DeviceQueueState::Free));
        assert!(!e.advance(DeviceQueueState::Adopted, DeviceQueueState::Releasing));
        assert!(e.advance(DeviceQueueState::Free, DeviceQueueState::Filling));
        assert!(!e.advance(DeviceQueueState::Free, DeviceQueueState::Filling));
        e.set_state(DeviceQueueState::Requested);
        let snapshot = e.snapshot().expect("not free");
        assert_eq!(snapshot.state.as_str(), "requested");
    }

    #[test]
    fn client_segment_ids_are_distinct_and_clear_of_the_runtimes() {
        let ids: Vec<u32> = (0..4)
            .flat_map(|slot| (0..3).map(move |k| client_segment_index(slot, k, 3)))
            .collect();
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ids.len());
        assert!(ids.iter().all(|&id| id >= CLIENT_SEGMENT_INDEX_BASE));
    }
}
