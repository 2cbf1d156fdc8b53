//! Argument checks every backend makes before calling its vendor, so misuse is
//! the same typed error on every backend instead of undefined behaviour.

use crate::api::DeviceMemory;
use crate::error::{Backend, ErrorKind, GpuError, GpuResult};
use crate::types::LaunchConfig;

/// Largest single allocation any backend accepts (1 TiB): larger requests are
/// bugs (a negative size cast to usize), not memory to ask a driver for.
pub const MAX_ALLOCATION: usize = 1 << 40;

/// Rejects zero and absurd allocation sizes.
pub fn allocation_size(backend: Backend, call: &'static str, bytes: usize) -> GpuResult<()> {
    if bytes == 0 || bytes > MAX_ALLOCATION {
        return Err(GpuError::new(
            backend,
            call,
            ErrorKind::InvalidSize {
                bytes: bytes as u64,
            },
        ));
    }
    Ok(())
}

/// Checks that `[offset, offset + len)` lies inside `capacity` bytes.
pub fn range(
    backend: Backend,
    call: &'static str,
    offset: usize,
    len: usize,
    capacity: usize,
) -> GpuResult<()> {
    match offset.checked_add(len) {
        Some(end) if end <= capacity => Ok(()),
        _ => Err(GpuError::new(
            backend,
            call,
            ErrorKind::OutOfBounds {
                offset: offset as u64,
                len: len as u64,
                capacity: capacity as u64,
            },
        )),
    }
}

/// The device address of `[offset, offset + len)` of `memory`, after checking
/// that the range lies inside it ([`range`]) and that `memory` itself is
/// plausible: not at address 0 and not running past the end of the address
/// space (`InvalidArgument`). Every backend calls this before it hands an
/// address to its vendor; it is all of [`DeviceMemory`]'s contract that can be
/// checked without asking the driver.
pub fn address<M: DeviceMemory + ?Sized>(
    backend: Backend,
    call: &'static str,
    memory: &M,
    offset: usize,
    len: usize,
) -> GpuResult<u64> {
    range(backend, call, offset, len, memory.len())?;
    let base = memory.device_ptr();
    // `usize` is at most 64 bits on every supported target.
    let end = base.checked_add(memory.len() as u64);
    if base == 0 || end.is_none() {
        return Err(GpuError::new(
            backend,
            call,
            ErrorKind::InvalidArgument(format!(
                "memory at {base:#x}+{} is not memory of a device",
                memory.len()
            )),
        ));
    }
    // Cannot overflow: offset <= len() (checked) and base + len() fits.
    Ok(base + offset as u64)
}

/// Device limits a launch is checked against.
#[derive(Clone, Copy, Debug)]
pub struct LaunchLimits {
    /// Most threads in one block, over all three dimensions.
    pub max_threads_per_block: u32,
    /// Largest block along x, y and z.
    pub max_block_dim: [u32; 3],
    /// Largest grid along x, y and z.
    pub max_grid_dim: [u32; 3],
    /// Most dynamic shared memory one block may ask for, in bytes.
    pub max_shared_mem_per_block: u32,
}

/// Rejects empty or oversized grids and blocks and too much shared memory.
pub fn launch_config(
    backend: Backend,
    config: &LaunchConfig,
    limits: &LaunchLimits,
) -> GpuResult<()> {
    let bad = |what: String| {
        Err(GpuError::new(
            backend,
            "launch",
            ErrorKind::InvalidArgument(what),
        ))
    };
    let grid = [config.grid.x, config.grid.y, config.grid.z];
    let block = [config.block.x, config.block.y, config.block.z];
    for axis in 0..3 {
        if grid[axis] == 0 || block[axis] == 0 {
            return bad(format!(
                "empty launch: grid {:?}, block {:?}",
                config.grid, config.block
            ));
        }
        if grid[axis] > limits.max_grid_dim[axis] {
            return bad(format!(
                "grid {:?} exceeds {:?}",
                config.grid, limits.max_grid_dim
            ));
        }
        if block[axis] > limits.max_block_dim[axis] {
            return bad(format!(
                "block {:?} exceeds {:?}",
                config.block, limits.max_block_dim
            ));
        }
    }
    match config.block.count() {
        Some(n) if n <= limits.max_threads_per_block as u64 => {}
        _ => {
            return bad(format!(
                "block {:?} has more than {} threads",
                config.block, limits.max_threads_per_block
            ))
        }
    }
    if config.shared_mem_bytes > limits.max_shared_mem_per_block {
        return bad(format!(
            "{} bytes of dynamic shared memory exceed {}",
            config.shared_mem_bytes, limits.max_shared_mem_per_block
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HostApi;

    /// Memory at a fixed address and length.
    struct Claimed(u64, usize);

    // SAFETY: never handed to a backend; only `address` reads it.
    unsafe impl DeviceMemory for Claimed {
        type Api = HostApi;
        fn device_ptr(&self) -> u64 {
            self.0
        }
        fn len(&self) -> usize {
            self.1
        }
    }

    fn kind(result: GpuResult<u64>) -> ErrorKind {
        result.unwrap_err().kind
    }

    #[test]
    fn address_checks_bounds_null_and_wrap_around() {
        let memory = Claimed(0x1000, 64);
        assert_eq!(address(Backend::Host, "t", &memory, 16, 48), Ok(0x1010));
        assert_eq!(address(Backend::Host, "t", &memory, 64, 0), Ok(0x1040));
        assert!(matches!(
            kind(address(Backend::Host, "t", &memory, 16, 49)),
            ErrorKind::OutOfBounds { .. }
        ));
        // Null, past the end of the address space, and ending exactly at 2^64.
        for forged in [
            Claimed(0, 64),
            Claimed(u64::MAX - 31, 64),
            Claimed(u64::MAX - 63, 64),
        ] {
            for (offset, len) in [(0, 0), (0, 16), (8, 8)] {
                assert!(matches!(
                    kind(address(Backend::Host, "t", &forged, offset, len)),
                    ErrorKind::InvalidArgument(_)
                ));
            }
        }
    }
}
