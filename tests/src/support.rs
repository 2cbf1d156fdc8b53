//! Helpers of the suites and of other crates' tests and benches: a child's
//! stdout as lines, the device kernels loaded, a launch that must be
//! accepted, a fill by kernel, a buffer read back as u32s, a seeded stream of
//! bytes; and, for the conformance suite, test patterns and the checks of an
//! error's kind.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc;

use tandem_hal::{DeviceMemory, Dim3, ErrorKind, GpuDevice, GpuResult, KernelArg, LaunchConfig};

/// Each stdout line of `child` (spawned with a piped stdout), through a
/// channel fed by a thread.
pub fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

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

/// Launches `tandem_fill_u32` of `module` on `stream` (not synchronised):
/// the `n` u32s at device address `ptr` become `value`.
pub fn fill_u32<D: GpuDevice>(
    device: &D,
    module: &D::Module,
    config: LaunchConfig,
    (ptr, n): (u64, usize),
    value: u32,
    stream: &D::Stream,
) {
    let args = [
        KernelArg::Ptr(ptr),
        KernelArg::U64(n as u64),
        KernelArg::U32(value),
    ];
    launch(device, module, "tandem_fill_u32", config, &args, stream);
}

/// [`fill_u32`] on a stream of its own, waited for.
pub fn fill_u32_and_wait<D: GpuDevice>(
    device: &D,
    config: LaunchConfig,
    target: (u64, usize),
    value: u32,
) {
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    fill_u32(device, &module, config, target, value, &stream);
    device.synchronize_stream(&stream).unwrap();
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

/// `len` bytes of xorshift64 seeded by `x` (not zero), the low byte of each
/// step: the same bytes for the same seed, and incompressible.
pub fn xorshift_bytes(mut x: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
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

/// The `main` of a test's child-process binary, `<bin> <backend> <mode>
/// <args...>`: runs `child_main::<Api>(&[mode, args...])` with the named
/// backend's [`tandem_hal::GpuApi`] (those built into the binary) and exits 0
/// on success, else 1 with the reason on stderr, after the binary's name.
/// Logs through `tracing` only when `RUST_LOG` asks: the tests read the
/// children's stderr.
#[macro_export]
macro_rules! child_process_main {
    ($name:literal, $($child_main:ident)::+) => {
        fn main() -> std::process::ExitCode {
            if std::env::var_os("RUST_LOG").is_some() {
                tandem_runtime::init_logging();
            }
            let args: Vec<String> = std::env::args().skip(1).collect();
            let rest = args.get(1..).unwrap_or_default();
            let outcome = match args.first().map(String::as_str) {
                Some("host") => $($child_main)::+::<tandem_hal::HostApi>(rest),
                #[cfg(feature = "cuda")]
                Some("cuda") => $($child_main)::+::<tandem_hal_cuda::CudaApi>(rest),
                #[cfg(feature = "hip")]
                Some("hip") => $($child_main)::+::<tandem_hal_hip::HipApi>(rest),
                other => Err(format!("backend {other:?} is not built into this binary")),
            };
            match outcome {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(why) => {
                    eprintln!("{}: {why}", $name);
                    std::process::ExitCode::FAILURE
                }
            }
        }
    };
}
