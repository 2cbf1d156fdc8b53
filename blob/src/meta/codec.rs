//! How a durable blob version is stored in the metadata: its size and extent map, each extent
//! naming its target by persistent id. The bytes are the on-disk format of every store made so
//! far; a change to them needs a new `FORMAT` and a reader for the old one.

/// One extent as stored: logical page, page count, the target's persistent id (see
/// `register_targets`), physical page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredExtent {
    pub(crate) lpage: u64,
    pub(crate) npages: u64,
    pub(crate) persistent_id: u32,
    pub(crate) ppage: u64,
}

const FORMAT: u8 = 1;
const EXTENT_BYTES: usize = 8 + 8 + 4 + 8;

/// Encodes a blob version: format byte, size, extent count, extents (little endian).
pub(crate) fn encode(size: u64, extents: &[StoredExtent]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + 8 + 4 + extents.len() * EXTENT_BYTES);
    v.push(FORMAT);
    v.extend_from_slice(&size.to_le_bytes());
    v.extend_from_slice(&(extents.len() as u32).to_le_bytes());
    for e in extents {
        v.extend_from_slice(&e.lpage.to_le_bytes());
        v.extend_from_slice(&e.npages.to_le_bytes());
        v.extend_from_slice(&e.persistent_id.to_le_bytes());
        v.extend_from_slice(&e.ppage.to_le_bytes());
    }
    v
}

/// Decodes what [`encode`] wrote; `None` when the bytes are not such an encoding.
pub(crate) fn decode(b: &[u8]) -> Option<(u64, Vec<StoredExtent>)> {
    fn u64_at(b: &[u8], at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    }
    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }
    if b.first() != Some(&FORMAT) {
        return None;
    }
    let size = u64_at(b, 1)?;
    let n = u32_at(b, 9)? as usize;
    if b.len() != 13 + n.checked_mul(EXTENT_BYTES)? {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let at = 13 + i * EXTENT_BYTES;
        out.push(StoredExtent {
            lpage: u64_at(b, at)?,
            npages: u64_at(b, at + 8)?,
            persistent_id: u32_at(b, at + 16)?,
            ppage: u64_at(b, at + 20)?,
        });
    }
    Some((size, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let ex = vec![
            StoredExtent {
                lpage: 0,
                npages: 3,
                persistent_id: 1,
                ppage: 7,
            },
            StoredExtent {
                lpage: 5,
                npages: 1,
                persistent_id: 0,
                ppage: 0,
            },
        ];
        let b = encode(12345, &ex);
        assert_eq!(decode(&b), Some((12345, ex)));
        assert_eq!(decode(&b[..b.len() - 1]), None);
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[9, 0, 0]), None);
    }

    /// The bytes are what stores on disk hold: a change here must come with a new `FORMAT`.
    #[test]
    fn the_encoding_is_the_one_stores_on_disk_hold() {
        let one = StoredExtent {
            lpage: 2,
            npages: 3,
            persistent_id: 0x0102_0304,
            ppage: 0x0a0b,
        };
        let mut want = vec![1u8];
        want.extend_from_slice(&9000u64.to_le_bytes());
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(&3u64.to_le_bytes());
        want.extend_from_slice(&[4, 3, 2, 1]);
        want.extend_from_slice(&0x0a0bu64.to_le_bytes());
        assert_eq!(encode(9000, &[one]), want);
    }
}
