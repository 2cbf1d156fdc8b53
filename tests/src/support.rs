//! Helpers of the suites and of other crates' GPU tests and benches: the
//! device kernels loaded, a launch that must be accepted, a buffer read back
//! as u32s; and, for the conformance suite, test patterns and the checks of
//! an error's kind.

use tandem_hal::{DeviceMemory, Dim3, ErrorKind, GpuDevice, GpuResult, KernelArg, LaunchConfig};

/// The device kernels library, loaded on `device`.
pub fn kernels<D: GpuDevice>(device: &D) -> D::Module {
    device
        .load_module(&tandem_device_kernels::library())
        .expect("loading the device kernels")
}

/// Launches kernel `name` of `module` and panics if the launch is refused.
pub fn launch<D: GpuDevice>(
    device: &D,
    module: &D::Module,
    name: &str,
    config: LaunchConfig,
    args: &[KernelArg<'_>],
    stream: &D::Stream,
) {
    let kernel = device.kernel(module, name).expect("looking up a kernel");
    // SAFETY: every caller passes pointers to live allocations sized for the
    // `n` it passes, and synchronises before freeing them.
    unsafe { device.launch(&kernel, &config, args, stream) }.expect("launching");
}

/// The first `count` u32s of `memory`.
pub fn read_u32s<D: GpuDevice>(
    device: &D,
    memory: &impl DeviceMemory<Api = D::Api>,
    count: usize,
) -> Vec<u32> {
    let mut bytes = vec![0u8; count * 4];
    device
        .copy_from_device(&mut bytes, memory, 0)
        .expect("copy_from_device");
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(crate) fn u32_bytes(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Bytes that differ from position to position, so shifted copies show.
pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub(crate) fn kind<T>(result: GpuResult<T>) -> ErrorKind {
    match result {
        Ok(_) => panic!("expected an error, the call succeeded"),
        Err(e) => e.kind,
    }
}

pub(crate) fn assert_invalid_size<T>(result: GpuResult<T>) {
    let kind = kind(result);
    assert!(
        matches!(kind, ErrorKind::InvalidSize { .. }),
        "expected InvalidSize, got {kind:?}"
    );
}

pub(crate) fn assert_out_of_bounds<T>(result: GpuResult<T>) {
    let kind = kind(result);
    assert!(
        matches!(kind, ErrorKind::OutOfBounds { .. }),
        "expected OutOfBounds, got {kind:?}"
    );
}

pub(crate) fn assert_invalid_argument<T>(result: GpuResult<T>) {
    let kind = kind(result);
    assert!(
        matches!(kind, ErrorKind::InvalidArgument(_)),
        "expected InvalidArgument, got {kind:?}"
    );
}

pub(crate) fn assert_argument_mismatch<T>(result: GpuResult<T>) {
    let kind = kind(result);
    assert!(
        matches!(kind, ErrorKind::ArgumentMismatch { .. }),
        "expected ArgumentMismatch, got {kind:?}"
    );
}

/// What `tandem_block_sum_u32` must produce: per block, the sum of the
/// elements its threads visit in a grid-stride loop.
pub(crate) fn block_sums_reference(input: &[u32], grid: Dim3, block: Dim3) -> Vec<u32> {
    let blocks = grid.count().unwrap();
    let threads = block.count().unwrap();
    let stride = blocks * threads;
    (0..blocks)
        .map(|b| {
            (0..threads)
                .flat_map(|t| (b * threads + t..input.len() as u64).step_by(stride as usize))
                .fold(0u32, |sum, i| sum.wrapping_add(input[i as usize]))
        })
        .collect()
}
