//! Yardsticks the benchmarks print their figures against, measured in the
//! same run.

use std::time::Instant;

use tandem_hal::{GpuDevice, GpuResult, HostMemory};

/// Device-to-host copy bandwidth into pinned memory through `GpuApi`, in
/// GB/s: the best of 5 timed copies of `bytes` (after one untimed).
pub fn copy_bandwidth<D: GpuDevice>(device: &D, bytes: usize) -> GpuResult<f64> {
    let src = device.alloc_device(bytes)?;
    device.fill(&src, 0, bytes, 7)?;
    let dst = device.alloc_pinned_mapped(bytes)?;
    // SAFETY: `dst` is `bytes` of pinned memory that no kernel touches here.
    let dst = unsafe { core::slice::from_raw_parts_mut(dst.host_ptr(), bytes) };
    let mut best = f64::INFINITY;
    for run in 0..6 {
        let start = Instant::now();
        device.copy_from_device(dst, &src, 0)?;
        if run > 0 {
            best = best.min(start.elapsed().as_secs_f64());
        }
    }
    Ok(bytes as f64 / best / 1e9)
}
