//! Compression of blob frames: a compressed blob's bytes are cut into frames of
//! [`FRAME_PAGES`] logical pages, each compressed on its own (so a get or put at an offset
//! touches only the frames it covers) and stored in whole pages with its codec, length and
//! checksum in the extent map. A frame that would not save a page is stored raw.
//!
//! Why 64 KiB frames: large enough for both codecs to find most of the redundancy in smooth
//! numeric data, small enough that a small get decompresses little it does not return.

use std::cell::RefCell;

use crate::context::{Codec, Preset};
use crate::types::PAGE_SIZE;

/// Logical pages per frame (64 KiB).
pub(crate) const FRAME_PAGES: u64 = 16;
/// Bytes of a put that a dynamic compression compresses to decide.
pub(crate) const SAMPLE_BYTES: usize = 4 << 10;

/// How a compressed frame is stored: its codec, the length of its compressed bytes (in the
/// first pages of its extent) and their CRC-32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Packed {
    pub(crate) codec: Codec,
    pub(crate) len: u32,
    pub(crate) crc: u32,
}

impl Packed {
    /// Pages its bytes take.
    pub(crate) fn pages(&self) -> u64 {
        u64::from(self.len).div_ceil(PAGE_SIZE)
    }
}

fn zstd_level(preset: Preset) -> i32 {
    match preset {
        Preset::Fast => 1,
        Preset::Balanced => 3,
        Preset::Best => 19,
    }
}

thread_local! {
    /// zstd contexts this thread's puts are done with, by level, for its next puts: a context
    /// made per put (its workspace allocated and cleared) cost a dynamic put on incompressible
    /// data more than its sample's compression.
    static ZSTD_CONTEXTS: RefCell<Vec<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(Vec::new()) };
}

/// A put's compressor: one codec and preset, its context and output buffer reused frame after
/// frame.
pub(crate) struct Packer {
    codec: Codec,
    /// zstd's context at `level`; `None` for lz4, or when zstd could not make one (then nothing
    /// packs).
    zstd: Option<zstd::bulk::Compressor<'static>>,
    level: i32,
    out: Vec<u8>,
}

impl Packer {
    /// A compressor for `codec` at `preset`.
    pub(crate) fn new(codec: Codec, preset: Preset) -> Packer {
        let level = zstd_level(preset);
        let zstd = match codec {
            Codec::Zstd => ZSTD_CONTEXTS
                .with_borrow_mut(|kept| {
                    let i = kept.iter().position(|(l, _)| *l == level)?;
                    Some(kept.swap_remove(i).1)
                })
                .or_else(|| zstd::bulk::Compressor::new(level).ok()),
            Codec::Lz4 => None,
        };
        Packer {
            codec,
            zstd,
            level,
            out: Vec::new(),
        }
    }

    /// `src` compressed, when that takes at most `limit` bytes; `None` otherwise (or when the
    /// library fails: the caller stores the bytes raw).
    pub(crate) fn pack(&mut self, src: &[u8], limit: usize) -> Option<(Packed, &[u8])> {
        let len = match (self.codec, &mut self.zstd) {
            (Codec::Zstd, Some(z)) => {
                // zstd stops at the end of the buffer: a frame that does not fit costs no more.
                self.out.resize(limit, 0);
                z.compress_to_buffer(src, &mut self.out[..]).ok()?
            }
            (Codec::Zstd, None) => return None,
            (Codec::Lz4, _) => {
                // lz4_flex wants room for its worst case up front.
                self.out
                    .resize(lz4_flex::block::get_maximum_output_size(src.len()), 0);
                let n = lz4_flex::block::compress_into(src, &mut self.out[..]).ok()?;
                (n <= limit).then_some(n)?
            }
        };
        let bytes = &self.out[..len];
        let packed = Packed {
            codec: self.codec,
            len: u32::try_from(len).ok()?,
            crc: crc32fast::hash(bytes),
        };
        Some((packed, bytes))
    }
}

impl Drop for Packer {
    fn drop(&mut self) {
        if let Some(z) = self.zstd.take() {
            // One a level: the presets' three.
            ZSTD_CONTEXTS.with_borrow_mut(|kept| {
                if kept.iter().all(|(l, _)| *l != self.level) {
                    kept.push((self.level, z));
                }
            });
        }
    }
}

/// Whether `sample` compresses to at most seven eighths of its size with `codec`'s fastest
/// setting (a dynamic put's test: a put that fails it is stored raw).
pub(crate) fn worth_it(codec: Codec, sample: &[u8]) -> bool {
    Packer::new(codec, Preset::Fast)
        .pack(sample, sample.len() * 7 / 8)
        .is_some()
}

/// Decompresses the frame stored as `stored` (its compressed bytes, and maybe the padding of
/// its last page) into `out`, which it must fill exactly. `false` when the bytes fail their
/// checksum or do not decompress to `out.len()` bytes.
pub(crate) fn unpack(packed: &Packed, stored: &[u8], out: &mut [u8]) -> bool {
    let Some(bytes) = stored.get(..packed.len as usize) else {
        return false;
    };
    if crc32fast::hash(bytes) != packed.crc {
        return false;
    }
    match packed.codec {
        Codec::Zstd => zstd::bulk::decompress_to_buffer(bytes, out).is_ok_and(|n| n == out.len()),
        Codec::Lz4 => lz4_flex::block::decompress_into(bytes, out).is_ok_and(|n| n == out.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_damage_is_caught() {
        let frame: Vec<u8> = (0..FRAME_PAGES * PAGE_SIZE)
            .map(|i| (i / 100) as u8)
            .collect();
        for codec in [Codec::Lz4, Codec::Zstd] {
            for preset in [Preset::Fast, Preset::Balanced, Preset::Best] {
                let mut p = Packer::new(codec, preset);
                let (packed, bytes) = p.pack(&frame, frame.len() - PAGE_SIZE as usize).unwrap();
                let mut stored = bytes.to_vec();
                stored.resize(packed.pages() as usize * PAGE_SIZE as usize, 0);
                let mut out = vec![0; frame.len()];
                assert!(unpack(&packed, &stored, &mut out));
                assert_eq!(out, frame);
                stored[packed.len as usize / 2] ^= 1;
                assert!(!unpack(&packed, &stored, &mut out), "{codec} {preset}");
            }
            assert!(worth_it(codec, &frame[..SAMPLE_BYTES]));
        }
        // Random bytes do not compress: no room for them under the limit.
        let noise = tandem_tests::support::xorshift_bytes(0x9E37_79B9_7F4A_7C15, SAMPLE_BYTES);
        assert!(!worth_it(Codec::Zstd, &noise));
        assert!(!worth_it(Codec::Lz4, &noise));
    }
}
