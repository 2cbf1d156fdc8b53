//! Which form of a [`ModuleArtifacts`] a CUDA device loads, and a sanity
//! check of binary images before the driver parses them.
//!
//! The rule: a cubin built for exactly the device's architecture; else the
//! PTX of the newest architecture the device can JIT (`<=` its own, or equal
//! for arch-specific `sm_90a`-style targets); else the CUDA source through
//! NVRTC. Pure functions, unit-tested without a GPU.

use core::fmt;

use tandem_hal::ModuleArtifacts;

/// A CUDA architecture: `sm_90` is version 90; `sm_90a` (arch-specific) and
/// `sm_100f` (family) carry a variant letter and only suit that exact version.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SmArch {
    /// `10 * major + minor` of the compute capability.
    pub version: u32,
    /// The trailing letter of arch-specific targets (`a`, `f`), if any.
    pub variant: Option<char>,
}

impl SmArch {
    /// The architecture of a device of compute capability `major.minor`.
    pub fn from_compute_capability(major: u32, minor: u32) -> Self {
        Self {
            version: major.saturating_mul(10).saturating_add(minor),
            variant: None,
        }
    }

    /// Parses `sm_90`, `sm_90a`, `compute_90`, `sm_100f`; `None` otherwise.
    pub fn parse(name: &str) -> Option<Self> {
        let rest = name
            .strip_prefix("sm_")
            .or_else(|| name.strip_prefix("compute_"))?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let version = rest[..digits].parse().ok()?;
        let mut tail = rest[digits..].chars();
        let variant = match (tail.next(), tail.next()) {
            (None, _) => None,
            (Some(c), None) if c.is_ascii_lowercase() => Some(c),
            _ => return None,
        };
        Some(Self { version, variant })
    }

    /// Whether a cubin built for `self` runs on a device of arch `device`.
    fn cubin_runs_on(self, device: SmArch) -> bool {
        self.version == device.version
    }

    /// Whether the driver can JIT PTX built for `self` on `device`.
    fn ptx_runs_on(self, device: SmArch) -> bool {
        match self.variant {
            None => self.version <= device.version,
            Some(_) => self.version == device.version,
        }
    }
}

impl fmt::Display for SmArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.version)?;
        match self.variant {
            Some(v) => write!(f, "{v}"),
            None => Ok(()),
        }
    }
}

/// The form [`select_artifact`] picked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ArtifactChoice<'a> {
    /// A cubin (or fatbin) for the device's exact architecture.
    Cubin {
        /// The architecture it was built for, like `sm_90`.
        arch: &'a str,
        /// The image handed to the driver.
        image: &'a [u8],
    },
    /// PTX the driver JIT-compiles on load.
    Ptx {
        /// The architecture it targets, like `sm_90`.
        arch: &'a str,
        /// The PTX text.
        ptx: &'a str,
    },
    /// CUDA C++ to compile with NVRTC.
    Source(&'a str),
}

/// Picks what a device of arch `device` loads from `artifacts`; `None` if
/// nothing suits it. Entries whose arch does not parse are skipped.
pub fn select_artifact<'a>(
    device: SmArch,
    artifacts: &ModuleArtifacts<'a>,
) -> Option<ArtifactChoice<'a>> {
    let cubin = artifacts
        .cubins
        .iter()
        .find(|(arch, _)| SmArch::parse(arch).is_some_and(|a| a.cubin_runs_on(device)));
    if let Some(&(arch, image)) = cubin {
        return Some(ArtifactChoice::Cubin { arch, image });
    }
    let ptx = artifacts
        .ptx
        .iter()
        .filter_map(|&(arch, ptx)| Some((SmArch::parse(arch)?, arch, ptx)))
        .filter(|(a, _, _)| a.ptx_runs_on(device))
        // `max_by_key` keeps the last of equals; reverse so the first listed wins ties.
        .rev()
        .max_by_key(|(a, _, _)| a.version);
    if let Some((_, arch, ptx)) = ptx {
        return Some(ArtifactChoice::Ptx { arch, ptx });
    }
    artifacts.cuda_source.map(ArtifactChoice::Source)
}

/// Checks that `image` is a complete ELF64 cubin or fatbin whose tables and
/// sections lie inside the slice. `cuModuleLoadData` takes no length and
/// trusts the headers, so a truncated or foreign image would make the driver
/// read past the end of the slice; this turns that into an error.
pub(crate) fn check_image(image: &[u8]) -> Result<(), String> {
    const ELF_MAGIC: &[u8] = b"\x7fELF";
    const FATBIN_MAGIC: u32 = 0xBA55_ED50;
    if image.starts_with(ELF_MAGIC) {
        check_elf(image)
    } else if read_u32(image, 0) == Some(FATBIN_MAGIC) {
        // Header: magic u32, version u16, header size u16, payload size u64.
        let header = read_u16(image, 6).ok_or("truncated fatbin header")? as u64;
        let payload = read_u64(image, 8).ok_or("truncated fatbin header")?;
        fits(image, header, payload, "fatbin payload")
    } else {
        Err("not an ELF cubin or a fatbin (bad magic)".to_owned())
    }
}

fn check_elf(image: &[u8]) -> Result<(), String> {
    const ELFCLASS64: u8 = 2;
    const ELFDATA2LSB: u8 = 1;
    const SHT_NOBITS: u32 = 8;
    if image.len() < 64 || image[4] != ELFCLASS64 || image[5] != ELFDATA2LSB {
        return Err("not a little-endian ELF64 image".to_owned());
    }
    let truncated = || "truncated ELF header".to_owned();
    let phoff = read_u64(image, 0x20).ok_or_else(truncated)?;
    let shoff = read_u64(image, 0x28).ok_or_else(truncated)?;
    let phentsize = read_u16(image, 0x36).ok_or_else(truncated)? as u64;
    let phnum = read_u16(image, 0x38).ok_or_else(truncated)? as u64;
    let shentsize = read_u16(image, 0x3A).ok_or_else(truncated)? as u64;
    let shnum = read_u16(image, 0x3C).ok_or_else(truncated)? as u64;
    fits(image, phoff, phentsize * phnum, "program header table")?;
    fits(image, shoff, shentsize * shnum, "section header table")?;
    // Both tables are inside the image now, so their entries can be read.
    if (shnum > 0 && shentsize < 0x28) || (phnum > 0 && phentsize < 0x28) {
        return Err("ELF table entries too small".to_owned());
    }
    for i in 0..shnum {
        let entry = (shoff + i * shentsize) as usize;
        let kind = read_u32(image, entry + 4).ok_or_else(truncated)?;
        let offset = read_u64(image, entry + 0x18).ok_or_else(truncated)?;
        let size = read_u64(image, entry + 0x20).ok_or_else(truncated)?;
        if kind != SHT_NOBITS {
            fits(image, offset, size, "section")?;
        }
    }
    for i in 0..phnum {
        let entry = (phoff + i * phentsize) as usize;
        let offset = read_u64(image, entry + 0x08).ok_or_else(truncated)?;
        let size = read_u64(image, entry + 0x20).ok_or_else(truncated)?;
        fits(image, offset, size, "segment")?;
    }
    Ok(())
}

/// `Ok` if `[offset, offset + len)` lies inside `image`.
fn fits(image: &[u8], offset: u64, len: u64, what: &str) -> Result<(), String> {
    match offset.checked_add(len) {
        Some(end) if end <= image.len() as u64 => Ok(()),
        _ => Err(format!(
            "{what} at {offset}+{len} runs past the image's {} bytes",
            image.len()
        )),
    }
}

fn read_bytes<const N: usize>(image: &[u8], at: usize) -> Option<[u8; N]> {
    image.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn read_u16(image: &[u8], at: usize) -> Option<u16> {
    read_bytes(image, at).map(u16::from_le_bytes)
}

fn read_u32(image: &[u8], at: usize) -> Option<u32> {
    read_bytes(image, at).map(u32::from_le_bytes)
}

fn read_u64(image: &[u8], at: usize) -> Option<u64> {
    read_bytes(image, at).map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sm(name: &str) -> SmArch {
        SmArch::parse(name).unwrap()
    }

    fn artifacts<'a>(
        cubins: &'a [(&'a str, &'a [u8])],
        ptx: &'a [(&'a str, &'a str)],
        source: Option<&'a str>,
    ) -> ModuleArtifacts<'a> {
        ModuleArtifacts {
            name: "test",
            signatures: &[],
            host_table: None,
            cuda_source: source,
            nvrtc_options: &[],
            ptx,
            cubins,
            hip_code_objects: &[],
        }
    }

    #[test]
    fn parses_arch_names() {
        assert_eq!(
            sm("sm_90"),
            SmArch {
                version: 90,
                variant: None
            }
        );
        assert_eq!(
            sm("sm_90a"),
            SmArch {
                version: 90,
                variant: Some('a')
            }
        );
        assert_eq!(
            sm("compute_86"),
            SmArch {
                version: 86,
                variant: None
            }
        );
        assert_eq!(sm("sm_100f").version, 100);
        for bad in ["", "sm_", "sm_x", "gfx90a", "sm_90ab", "sm_9-0", "sm_90A"] {
            assert_eq!(SmArch::parse(bad), None, "{bad}");
        }
        assert_eq!(SmArch::from_compute_capability(9, 0), sm("sm_90"));
        assert_eq!(SmArch::from_compute_capability(12, 0).to_string(), "sm_120");
        assert_eq!(sm("sm_90a").to_string(), "sm_90a");
    }

    #[test]
    fn exact_cubin_wins_over_ptx_and_source() {
        let a = artifacts(
            &[("sm_80", b"80"), ("sm_90", b"90")],
            &[("sm_90", "ptx90")],
            Some("src"),
        );
        assert_eq!(
            select_artifact(sm("sm_90"), &a),
            Some(ArtifactChoice::Cubin {
                arch: "sm_90",
                image: b"90"
            })
        );
    }

    #[test]
    fn cubin_of_another_arch_is_never_used() {
        let a = artifacts(&[("sm_80", b"80"), ("sm_100", b"100")], &[], Some("src"));
        assert_eq!(
            select_artifact(sm("sm_90"), &a),
            Some(ArtifactChoice::Source("src"))
        );
        assert_eq!(
            select_artifact(sm("sm_90"), &artifacts(&[("sm_80", b"80")], &[], None)),
            None
        );
    }

    #[test]
    fn newest_compatible_ptx_is_chosen() {
        let ptx = [
            ("sm_70", "p70"),
            ("sm_100", "p100"),
            ("sm_86", "p86"),
            ("sm_80", "p80"),
            ("sm_89a", "p89a"),
            ("bogus", "pb"),
        ];
        let a = artifacts(&[], &ptx, Some("src"));
        assert_eq!(
            select_artifact(sm("sm_90"), &a),
            Some(ArtifactChoice::Ptx {
                arch: "sm_86",
                ptx: "p86"
            })
        );
        assert_eq!(
            select_artifact(sm("sm_75"), &a),
            Some(ArtifactChoice::Ptx {
                arch: "sm_70",
                ptx: "p70"
            })
        );
        // Arch-specific PTX only for exactly its arch.
        assert_eq!(
            select_artifact(sm("sm_89"), &a),
            Some(ArtifactChoice::Ptx {
                arch: "sm_89a",
                ptx: "p89a"
            })
        );
        // Nothing old enough: fall back to the source.
        assert_eq!(
            select_artifact(sm("sm_60"), &a),
            Some(ArtifactChoice::Source("src"))
        );
    }

    #[test]
    fn equal_ptx_arches_keep_the_first_listed() {
        let a = artifacts(&[], &[("sm_80", "first"), ("compute_80", "second")], None);
        assert_eq!(
            select_artifact(sm("sm_90"), &a),
            Some(ArtifactChoice::Ptx {
                arch: "sm_80",
                ptx: "first"
            })
        );
    }

    #[test]
    fn nothing_usable_is_none() {
        assert_eq!(
            select_artifact(sm("sm_90"), &artifacts(&[], &[], None)),
            None
        );
    }

    /// A minimal ELF64 image: header, one section header pointing at `data`.
    fn elf(section_offset: u64, section_size: u64) -> Vec<u8> {
        let mut image = vec![0u8; 64 + 64 + 16];
        image[..4].copy_from_slice(b"\x7fELF");
        image[4] = 2;
        image[5] = 1;
        image[0x28..0x30].copy_from_slice(&64u64.to_le_bytes()); // e_shoff
        image[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
        image[0x3C..0x3E].copy_from_slice(&1u16.to_le_bytes()); // e_shnum
        image[64 + 4..64 + 8].copy_from_slice(&1u32.to_le_bytes()); // PROGBITS
        image[64 + 0x18..64 + 0x20].copy_from_slice(&section_offset.to_le_bytes());
        image[64 + 0x20..64 + 0x28].copy_from_slice(&section_size.to_le_bytes());
        image
    }

    #[test]
    fn image_check_accepts_complete_elf() {
        assert_eq!(check_image(&elf(128, 16)), Ok(()));
    }

    #[test]
    fn image_check_rejects_truncated_or_foreign_images() {
        assert!(check_image(&elf(128, 17)).is_err());
        assert!(check_image(&elf(u64::MAX, 2)).is_err());
        let mut table_outside = elf(128, 16);
        table_outside[0x28..0x30].copy_from_slice(&1000u64.to_le_bytes());
        assert!(check_image(&table_outside).is_err());
        assert!(check_image(&elf(128, 16)[..100]).is_err());
        assert!(check_image(b"\x7fELF").is_err());
        assert!(check_image(b".version 8.0\n.target sm_90\n").is_err());
        assert!(check_image(&[]).is_err());
    }

    #[test]
    fn image_check_reads_fatbin_sizes() {
        let mut fatbin = vec![0u8; 16 + 32];
        fatbin[..4].copy_from_slice(&0xBA55_ED50u32.to_le_bytes());
        fatbin[6..8].copy_from_slice(&16u16.to_le_bytes());
        fatbin[8..16].copy_from_slice(&32u64.to_le_bytes());
        assert_eq!(check_image(&fatbin), Ok(()));
        fatbin[8..16].copy_from_slice(&33u64.to_le_bytes());
        assert!(check_image(&fatbin).is_err());
        assert!(check_image(&fatbin[..10]).is_err());
    }
}
