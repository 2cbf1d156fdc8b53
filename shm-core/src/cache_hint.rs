//! A hint for lines a device is about to read: out of this core's caches.

/// Hints the CPU to move the cache lines of `[at, at + len)`, which a device
/// is about to read across PCIe, from this core's caches to the shared
/// last-level cache (x86's `CLDEMOTE`). A device's read of a line that a
/// core holds modified has to snoop that core; from the shared cache it is
/// answered sooner (docs/design/pcie.md, "Cache lines the GPU reads").
/// Nothing elsewhere, nor for lines not cached: the hint never changes
/// memory's contents, and a store to the lines after it only brings them
/// back.
#[inline]
pub fn demote_lines(at: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        const LINE: usize = 64;
        let first = at as usize & !(LINE - 1);
        for line in (first..at as usize + len).step_by(LINE) {
            // SAFETY: CLDEMOTE changes no register, flag or memory contents
            // (only where a line is cached) and raises no exception for any
            // address (only a LOCK prefix, not used here, faults);
            // processors without it execute it as a NOP.
            unsafe {
                core::arch::asm!("cldemote [{0}]", in(reg) line, options(nostack, preserves_flags));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, len);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn demoting_leaves_the_bytes_as_they_were() {
        let bytes: Vec<u8> = (0..=255).collect();
        // Unaligned, across lines, and empty.
        demote_lines(bytes[3..].as_ptr(), 200);
        demote_lines(bytes.as_ptr(), 0);
        assert!(bytes.iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}
