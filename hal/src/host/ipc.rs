//! IPC handles of the CPU device: the name of a POSIX shared-memory segment,
//! with enough around it to reject garbage and stale or foreign handles.
//!
//! # Handle layout (64 bytes, little-endian)
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0      | 4    | magic `b"TDMH"` |
//! | 4      | 2    | version ([`VERSION`]) |
//! | 6      | 1    | kind: 1 memory, 2 event |
//! | 7      | 1    | name length in bytes (1..=32) |
//! | 8      | 4    | exporter's process id |
//! | 12     | 4    | zero |
//! | 16     | 8    | length: usable bytes (memory) or segment bytes (event) |
//! | 24     | 32   | `shm_open` name without the leading `/`, zero-padded; characters `[A-Za-z0-9._-]` |
//! | 56     | 8    | FNV-1a 64 checksum of bytes 0..56 |
//!
//! # Lifetime (differs from CUDA)
//! The exporter owns the name: dropping the exported buffer or event unlinks
//! it, after which opening the handle is `IpcStale`. Importers that already
//! opened it keep a valid mapping until they close it (the pages live until
//! the last mapping goes). CUDA instead requires importers to close before
//! the exporter frees; code that must run on every backend follows CUDA's rule.

use std::sync::atomic::{AtomicU64, Ordering};

use tandem_process::host_ipc_segment_name;
use tandem_shm_core::Segment;

use super::error::{host_error, segment_error};
use crate::error::{ErrorKind, GpuResult};

const MAGIC: [u8; 4] = *b"TDMH";
/// Layout version of the handle bytes.
pub const VERSION: u16 = 1;
const NAME_OFFSET: usize = 24;
const NAME_MAX: usize = 32;
const CHECKSUM_OFFSET: usize = 56;
/// Tries with fresh names when a name is taken (left behind by a crashed
/// process that had our pid).
const NAME_ATTEMPTS: u32 = 16;

/// What a handle names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum HandleKind {
    Memory = 1,
    Event = 2,
}

/// The fields of a valid handle.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct HandleFields {
    pub(crate) kind: HandleKind,
    pub(crate) exporter_pid: u32,
    pub(crate) len: u64,
    pub(crate) name: String,
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

impl HandleFields {
    /// Encodes the fields. The name must be one this module generated.
    pub(crate) fn encode(&self) -> [u8; 64] {
        debug_assert!(!self.name.is_empty() && self.name.len() <= NAME_MAX);
        let mut bytes = [0u8; 64];
        bytes[0..4].copy_from_slice(&MAGIC);
        bytes[4..6].copy_from_slice(&VERSION.to_le_bytes());
        bytes[6] = self.kind as u8;
        bytes[7] = self.name.len() as u8;
        bytes[8..12].copy_from_slice(&self.exporter_pid.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.len.to_le_bytes());
        bytes[NAME_OFFSET..NAME_OFFSET + self.name.len()].copy_from_slice(self.name.as_bytes());
        let checksum = fnv1a64(&bytes[..CHECKSUM_OFFSET]);
        bytes[CHECKSUM_OFFSET..].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// Decodes and validates handle bytes of the expected kind; the error
    /// text says what was wrong.
    pub(crate) fn decode(bytes: &[u8; 64], expected: HandleKind) -> Result<Self, String> {
        if bytes[0..4] != MAGIC {
            return Err("not a host-backend handle (bad magic)".into());
        }
        let word = |range: core::ops::Range<usize>| {
            let mut out = [0u8; 8];
            out[..range.len()].copy_from_slice(&bytes[range]);
            u64::from_le_bytes(out)
        };
        let version = word(4..6);
        if version != u64::from(VERSION) {
            return Err(format!("handle version {version}, expected {VERSION}"));
        }
        if word(CHECKSUM_OFFSET..64) != fnv1a64(&bytes[..CHECKSUM_OFFSET]) {
            return Err("checksum mismatch".into());
        }
        let kind = match bytes[6] {
            1 => HandleKind::Memory,
            2 => HandleKind::Event,
            other => return Err(format!("unknown handle kind {other}")),
        };
        if kind != expected {
            return Err(format!(
                "a {kind:?} handle where a {expected:?} handle was expected"
            ));
        }
        let name_len = usize::from(bytes[7]);
        let name = &bytes[NAME_OFFSET..NAME_OFFSET + NAME_MAX];
        if name_len == 0
            || name_len > NAME_MAX
            || !name[..name_len].iter().all(|&b| is_name_char(b))
            || name[name_len..].iter().any(|&b| b != 0)
            || word(12..16) != 0
        {
            return Err("malformed segment name".into());
        }
        Ok(Self {
            kind,
            exporter_pid: word(8..12) as u32,
            len: word(16..24),
            // All bytes checked to be ASCII above.
            name: name[..name_len].iter().map(|&b| char::from(b)).collect(),
        })
    }
}

/// This process's id, as handles carry it.
pub(crate) fn own_pid() -> u32 {
    std::process::id()
}

/// Creates a named segment of `len` bytes under a fresh name
/// ([`host_ipc_segment_name`], which `tandem clean` reads the exporter back
/// from) that this process owns.
pub(crate) fn create_named_segment(call: &'static str, len: usize) -> GpuResult<Segment> {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let mut last = None;
    for _ in 0..NAME_ATTEMPTS {
        // Relaxed: only uniqueness matters, which the RMW gives.
        let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let name = host_ipc_segment_name(own_pid(), sequence);
        match Segment::create_named(&name, len) {
            Ok(segment) => return Ok(segment),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => last = Some(e),
            Err(e) => return Err(segment_error(call, e)),
        }
    }
    Err(last.map_or_else(
        || {
            host_error(
                call,
                ErrorKind::Os {
                    errno: libc::EEXIST,
                },
            )
        },
        |e| segment_error(call, e),
    ))
}

/// Opens the segment a decoded handle names, mapping "already unlinked" to
/// `IpcStale`. Refuses handles this process exported (`IpcSameProcess`).
pub(crate) fn open_named_segment(call: &'static str, fields: &HandleFields) -> GpuResult<Segment> {
    if fields.exporter_pid == own_pid() {
        return Err(host_error(call, ErrorKind::IpcSameProcess));
    }
    let segment = Segment::open_named(&fields.name).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOENT) {
            host_error(
                call,
                ErrorKind::IpcStale(format!(
                    "segment `{}` was freed by its exporter",
                    fields.name
                )),
            )
        } else {
            segment_error(call, e)
        }
    })?;
    if (segment.len() as u64) < fields.len {
        return Err(host_error(
            call,
            ErrorKind::InvalidIpcHandle(format!(
                "segment `{}` holds {} bytes, the handle claims {}",
                fields.name,
                segment.len(),
                fields.len
            )),
        ));
    }
    Ok(segment)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HandleFields {
        HandleFields {
            kind: HandleKind::Memory,
            exporter_pid: 4242,
            len: 3 << 20,
            name: host_ipc_segment_name(0x1092, 0x1f),
        }
    }

    #[test]
    fn the_longest_segment_name_fits_a_handle() {
        let longest = host_ipc_segment_name(u32::MAX, u64::MAX);
        assert!(longest.len() <= NAME_MAX, "{longest}");
        assert!(longest.bytes().all(is_name_char), "{longest}");
    }

    #[test]
    fn handles_round_trip() {
        let bytes = sample().encode();
        assert_eq!(
            HandleFields::decode(&bytes, HandleKind::Memory),
            Ok(sample())
        );
        assert!(HandleFields::decode(&bytes, HandleKind::Event).is_err());
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let bytes = sample().encode();
        for bit in 0..64 * 8 {
            let mut flipped = bytes;
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(
                HandleFields::decode(&flipped, HandleKind::Memory).is_err(),
                "bit {bit} flipped went unnoticed"
            );
        }
    }

    #[test]
    fn bad_names_are_rejected_even_with_a_valid_checksum() {
        for name in ["../etc/passwd", "a/b", "with space"] {
            let mut fields = sample();
            fields.name = name.into();
            let bytes = fields.encode();
            assert!(
                HandleFields::decode(&bytes, HandleKind::Memory).is_err(),
                "{name}"
            );
        }
    }
}
