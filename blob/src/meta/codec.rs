//! How a blob version kept in the metadata (long-term or temporary) is stored: its class, size
//! and extent map, each extent naming its target by persistent id. The bytes are the on-disk
//! format of every store made so far; a change to them needs a new format byte and a reader
//! for the old ones.
//!
//! Format 1 (every store before compression and persistence levels): a long-term version of
//! raw extents. Format 2 adds the class, the boot a temporary version was written in, and per
//! extent its codec, compressed length and checksum. A version that format 1 can say is still
//! written in format 1, so a store whose blobs are all raw and long-term stays readable by the
//! builds before format 2; both are read.

use crate::compress::Packed;
use crate::context::{Codec, Persistence};

/// One extent as stored: logical page, page count, the target's persistent id (see
/// `register_targets`), physical page, and how a compressed frame is packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredExtent {
    pub(crate) lpage: u64,
    pub(crate) npages: u64,
    pub(crate) persistent_id: u32,
    pub(crate) ppage: u64,
    pub(crate) packed: Option<Packed>,
}

/// A kernel's boot id (`/proc/sys/kernel/random/boot_id`, as 16 bytes).
pub(crate) type BootId = [u8; 16];

/// A version as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredVersion {
    /// Long-term or temporary.
    pub(crate) class: Persistence,
    /// The boot a temporary version was written in (zeros for long-term ones).
    pub(crate) boot: BootId,
    pub(crate) size: u64,
    pub(crate) extents: Vec<StoredExtent>,
}

const FORMAT_1: u8 = 1;
const FORMAT_2: u8 = 2;
const EXTENT_1: usize = 8 + 8 + 4 + 8;
const EXTENT_2: usize = EXTENT_1 + 1 + 4 + 4;
const CODEC_RAW: u8 = 0;
const CODEC_LZ4: u8 = 1;
const CODEC_ZSTD: u8 = 2;
const CLASS_TEMPORARY: u8 = 1;
const CLASS_LONG_TERM: u8 = 2;

/// Encodes a version: format 1 when it is long-term and raw, else format 2; little endian.
pub(crate) fn encode(v: &StoredVersion) -> Vec<u8> {
    let format_1 = v.class == Persistence::LongTerm && v.extents.iter().all(|e| e.packed.is_none());
    let mut b = Vec::with_capacity(1 + 1 + 16 + 8 + 4 + v.extents.len() * EXTENT_2);
    if format_1 {
        b.push(FORMAT_1);
    } else {
        b.push(FORMAT_2);
        b.push(match v.class {
            Persistence::Temporary => CLASS_TEMPORARY,
            _ => CLASS_LONG_TERM,
        });
        b.extend_from_slice(&v.boot);
    }
    b.extend_from_slice(&v.size.to_le_bytes());
    b.extend_from_slice(&(v.extents.len() as u32).to_le_bytes());
    for e in &v.extents {
        b.extend_from_slice(&e.lpage.to_le_bytes());
        b.extend_from_slice(&e.npages.to_le_bytes());
        b.extend_from_slice(&e.persistent_id.to_le_bytes());
        b.extend_from_slice(&e.ppage.to_le_bytes());
        if !format_1 {
            let (codec, len, crc) = match e.packed {
                None => (CODEC_RAW, 0, 0),
                Some(p) => (
                    match p.codec {
                        Codec::Lz4 => CODEC_LZ4,
                        Codec::Zstd => CODEC_ZSTD,
                    },
                    p.len,
                    p.crc,
                ),
            };
            b.push(codec);
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(&crc.to_le_bytes());
        }
    }
    b
}

/// Decodes what [`encode`] wrote (either format); `None` when the bytes are not such an
/// encoding.
pub(crate) fn decode(b: &[u8]) -> Option<StoredVersion> {
    fn u64_at(b: &[u8], at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    }
    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }
    let (class, boot, head, extent_bytes) = match *b.first()? {
        FORMAT_1 => (Persistence::LongTerm, [0; 16], 1, EXTENT_1),
        FORMAT_2 => {
            let class = match *b.get(1)? {
                CLASS_TEMPORARY => Persistence::Temporary,
                CLASS_LONG_TERM => Persistence::LongTerm,
                _ => return None,
            };
            (class, b.get(2..18)?.try_into().ok()?, 18, EXTENT_2)
        }
        _ => return None,
    };
    let size = u64_at(b, head)?;
    let n = u32_at(b, head + 8)? as usize;
    let first = head + 12;
    if b.len() != first.checked_add(n.checked_mul(extent_bytes)?)? {
        return None;
    }
    let mut extents = Vec::with_capacity(n);
    for i in 0..n {
        let at = first + i * extent_bytes;
        let packed = if extent_bytes == EXTENT_2 {
            let codec = match b[at + 28] {
                CODEC_RAW => None,
                CODEC_LZ4 => Some(Codec::Lz4),
                CODEC_ZSTD => Some(Codec::Zstd),
                _ => return None,
            };
            match codec {
                None => None,
                Some(codec) => Some(Packed {
                    codec,
                    len: u32_at(b, at + 29)?,
                    crc: u32_at(b, at + 33)?,
                }),
            }
        } else {
            None
        };
        extents.push(StoredExtent {
            lpage: u64_at(b, at)?,
            npages: u64_at(b, at + 8)?,
            persistent_id: u32_at(b, at + 16)?,
            ppage: u64_at(b, at + 20)?,
            packed,
        });
    }
    Some(StoredVersion {
        class,
        boot,
        size,
        extents,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(lpage: u64, npages: u64, persistent_id: u32, ppage: u64) -> StoredExtent {
        StoredExtent {
            lpage,
            npages,
            persistent_id,
            ppage,
            packed: None,
        }
    }

    fn long_term(size: u64, extents: Vec<StoredExtent>) -> StoredVersion {
        StoredVersion {
            class: Persistence::LongTerm,
            boot: [0; 16],
            size,
            extents,
        }
    }

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let v = long_term(12345, vec![raw(0, 3, 1, 7), raw(5, 1, 0, 0)]);
        let b = encode(&v);
        assert_eq!(b[0], FORMAT_1);
        assert_eq!(decode(&b), Some(v));
        assert_eq!(decode(&b[..b.len() - 1]), None);
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[9, 0, 0]), None);
        let packed = StoredExtent {
            packed: Some(Packed {
                codec: Codec::Zstd,
                len: 5000,
                crc: 0xdead_beef,
            }),
            ..raw(16, 16, 2, 40)
        };
        let v = StoredVersion {
            class: Persistence::Temporary,
            boot: [7; 16],
            size: 70000,
            extents: vec![raw(0, 3, 1, 7), packed],
        };
        let b = encode(&v);
        assert_eq!(b[0], FORMAT_2);
        assert_eq!(decode(&b), Some(v));
        assert_eq!(decode(&b[..b.len() - 1]), None);
        let mut bad_codec = b.clone();
        bad_codec[18 + 12 + 28] = 9;
        assert_eq!(decode(&bad_codec), None);
    }

    /// The bytes are what stores on disk hold: a change here must come with a new format.
    #[test]
    fn the_encoding_is_the_one_stores_on_disk_hold() {
        let one = raw(2, 3, 0x0102_0304, 0x0a0b);
        // A version of 9000 bytes in one extent (`one`), as both formats write it.
        let mut size_and_extent = Vec::new();
        size_and_extent.extend_from_slice(&9000u64.to_le_bytes());
        size_and_extent.extend_from_slice(&1u32.to_le_bytes());
        size_and_extent.extend_from_slice(&2u64.to_le_bytes());
        size_and_extent.extend_from_slice(&3u64.to_le_bytes());
        size_and_extent.extend_from_slice(&[4, 3, 2, 1]);
        size_and_extent.extend_from_slice(&0x0a0bu64.to_le_bytes());
        let mut want = vec![1u8];
        want.extend_from_slice(&size_and_extent);
        assert_eq!(encode(&long_term(9000, vec![one])), want);

        let packed = StoredExtent {
            packed: Some(Packed {
                codec: Codec::Lz4,
                len: 0x0506,
                crc: 0x0708_090a,
            }),
            ..one
        };
        let v = StoredVersion {
            class: Persistence::Temporary,
            boot: [0xbb; 16],
            size: 9000,
            extents: vec![packed],
        };
        let mut want = vec![2u8, 1];
        want.extend_from_slice(&[0xbb; 16]);
        want.extend_from_slice(&size_and_extent);
        want.push(1);
        want.extend_from_slice(&0x0506u32.to_le_bytes());
        want.extend_from_slice(&0x0708_090au32.to_le_bytes());
        assert_eq!(encode(&v), want);
    }
}
