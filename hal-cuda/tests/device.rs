//! GPU smoke test of the CUDA backend: allocate, copy, compile a kernel with
//! NVRTC through `load_module`, launch, check. Skips (prints why) on machines
//! without a CUDA device unless `TANDEM_REQUIRE_GPU=1`, which makes a missing
//! device a failure. The behaviour suite proper is the shared conformance
//! suite in the `tandem-tests` crate.

use tandem_hal::{
    ArgKind, DeviceMemory, ErrorKind, EventFlags, GpuApi, GpuDevice, GpuError, GpuResult,
    HostMemory, IpcMemHandle, KernelArg, KernelSignature, LaunchConfig, ModuleArtifacts,
};
use tandem_hal_cuda::{CudaApi, CudaDevice};

/// Device 0, or `None` after printing why there is none; panics instead when
/// `TANDEM_REQUIRE_GPU=1`.
fn device_or_skip() -> Option<CudaDevice> {
    let why = match CudaApi::load() {
        Ok(api) => match api.device_count() {
            Ok(0) => "the driver reports 0 devices".to_owned(),
            Ok(_) => return Some(api.device(0).expect("open CUDA device 0")),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    };
    if std::env::var("TANDEM_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("TANDEM_REQUIRE_GPU=1 but there is no CUDA device: {why}");
    }
    println!("skipped: no CUDA device ({why})");
    None
}

/// The error of a call that must fail.
fn expect_error<T>(result: GpuResult<T>, what: &str) -> GpuError {
    match result {
        Ok(_) => panic!("{what}: succeeded, expected an error"),
        Err(e) => e,
    }
}

const SOURCE: &str = r#"
extern "C" __global__ void smoke_add(unsigned int* data, unsigned long long n, unsigned int delta) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += delta;
}
"#;

const SIGNATURES: &[KernelSignature] = &[KernelSignature {
    name: "smoke_add",
    params: &[ArgKind::Ptr, ArgKind::U64, ArgKind::U32],
}];

fn artifacts() -> ModuleArtifacts<'static> {
    ModuleArtifacts {
        name: "hal_cuda_smoke",
        signatures: SIGNATURES,
        host_table: None,
        cuda_source: Some(SOURCE),
        nvrtc_options: &[],
        ptx: &[],
        cubins: &[],
        hip_code_objects: &[],
    }
}

fn le_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn alloc_copy_compile_launch_check() {
    let Some(dev) = device_or_skip() else { return };
    let props = dev.properties().expect("properties");
    assert!(props.arch.starts_with("sm_"), "{props:?}");
    assert_eq!(props.warp_size, 32);
    assert!(
        props.multiprocessor_count > 0 && props.total_memory > 0,
        "{props:?}"
    );
    println!("device 0: {props:?}");

    // Not a multiple of the block size, so the bounds check in the kernel matters.
    let n: usize = (1 << 20) + 3;
    let input: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let buffer = dev.alloc_device(n * 4).expect("alloc");
    dev.fill(&buffer, 0, n * 4, 0xAB).expect("poison");
    dev.copy_to_device(&buffer, 0, &le_bytes(&input))
        .expect("upload");

    let module = dev.load_module(&artifacts()).expect("NVRTC compile + load");
    let kernel = dev.kernel(&module, "smoke_add").expect("kernel");
    let stream = dev.create_stream().expect("stream");
    let args = [
        KernelArg::Ptr(buffer.device_ptr()),
        KernelArg::U64(n as u64),
        KernelArg::U32(7),
    ];
    let blocks = n.div_ceil(256) as u32;
    // SAFETY: the kernel writes `n` u32s of `buffer`, which outlives the sync below.
    unsafe { dev.launch(&kernel, &LaunchConfig::linear(blocks, 256), &args, &stream) }
        .expect("launch");
    dev.synchronize_stream(&stream).expect("sync");

    let mut out = vec![0xFFu8; n * 4];
    dev.copy_from_device(&mut out, &buffer, 0)
        .expect("download");
    let out = words(&out);
    for (i, (got, sent)) in out.iter().zip(&input).enumerate() {
        assert_eq!(*got, sent.wrapping_add(7), "element {i}");
    }

    // A second load of the same source comes from the per-process cache.
    let again = dev.load_module(&artifacts()).expect("cached load");
    dev.kernel(&again, "smoke_add")
        .expect("kernel from cached cubin");

    // Misuse is a typed error, not a launch.
    let e = expect_error(dev.kernel(&module, "absent"), "absent kernel");
    assert!(matches!(e.kind, ErrorKind::KernelNotFound(_)), "{e}");
    // SAFETY: rejected before launching.
    let wrong_arity =
        unsafe { dev.launch(&kernel, &LaunchConfig::linear(1, 1), &args[..2], &stream) };
    let e = expect_error(wrong_arity, "wrong arity");
    assert!(matches!(e.kind, ErrorKind::ArgumentMismatch { .. }), "{e}");
}

#[test]
fn pinned_memory_events_and_ipc_misuse() {
    let Some(dev) = device_or_skip() else { return };
    let module = dev.load_module(&artifacts()).expect("load");
    let kernel = dev.kernel(&module, "smoke_add").expect("kernel");
    let stream = dev.create_stream().expect("stream");

    // A kernel updates mapped pinned memory the host then reads directly.
    let n = 4096usize;
    let pinned = dev.alloc_pinned_mapped(n * 4).expect("pinned");
    // SAFETY: the buffer holds n u32s (page-aligned) and nothing else uses it yet.
    let host = unsafe { std::slice::from_raw_parts_mut(pinned.host_ptr().cast::<u32>(), n) };
    for (i, v) in host.iter_mut().enumerate() {
        *v = i as u32;
    }
    let timing = EventFlags {
        timing: true,
        interprocess: false,
    };
    let (start, end) = (
        dev.create_event(timing).unwrap(),
        dev.create_event(timing).unwrap(),
    );
    dev.record_event(&start, &stream).unwrap();
    let args = [
        KernelArg::Ptr(pinned.device_ptr()),
        KernelArg::U64(n as u64),
        KernelArg::U32(1),
    ];
    // SAFETY: the kernel writes the pinned buffer, alive until after the sync.
    unsafe { dev.launch(&kernel, &LaunchConfig::linear(16, 256), &args, &stream) }.unwrap();
    dev.record_event(&end, &stream).unwrap();
    dev.synchronize_event(&end).unwrap();
    assert!(dev.query_event(&end).unwrap());
    let took = dev.elapsed(&start, &end).unwrap();
    assert!(took.as_secs() < 10, "{took:?}");
    // SAFETY: the GPU is done with the buffer (event synchronized).
    let host = unsafe { std::slice::from_raw_parts(pinned.host_ptr().cast::<u32>(), n) };
    for (i, v) in host.iter().enumerate() {
        assert_eq!(*v, i as u32 + 1, "element {i}");
    }

    // IPC: plain buffers don't export; own handles and garbage don't open.
    let plain = dev.alloc_device(64).unwrap();
    let e = expect_error(dev.ipc_export_memory(&plain), "not exportable");
    assert_eq!(e.kind, ErrorKind::NotExportable);
    let shared = dev.alloc_device_exportable(100).unwrap();
    assert_eq!(shared.len(), tandem_hal::IPC_ALLOC_GRANULARITY);
    let handle = dev.ipc_export_memory(&shared).expect("export");
    assert_eq!(dev.ipc_export_memory(&shared).unwrap(), handle);
    let e = expect_error(dev.ipc_open_memory(&handle), "own handle");
    assert_eq!(e.kind, ErrorKind::IpcSameProcess);
    let garbage = IpcMemHandle(core::array::from_fn(|i| (i * 97 + 13) as u8));
    let e = expect_error(dev.ipc_open_memory(&garbage), "garbage handle");
    assert!(matches!(e.kind, ErrorKind::InvalidIpcHandle(_)), "{e}");
}

/// Hand-written PTX for an older architecture, so the driver JITs it: covers
/// the PTX path without a toolkit at build time.
const EMPTY_PTX_SM80: &str = "
.version 7.0
.target sm_80
.address_size 64

.visible .entry ptx_empty()
{
    ret;
}
";

#[test]
fn ptx_managed_registered_async_and_event_rules() {
    let Some(dev) = device_or_skip() else { return };
    let stream = dev.create_stream().unwrap();

    // PTX for sm_80 is chosen (no cubin, no source) and JIT-compiled.
    let ptx_signatures = [KernelSignature {
        name: "ptx_empty",
        params: &[],
    }];
    let ptx = [("sm_80", EMPTY_PTX_SM80)];
    let module = dev
        .load_module(&ModuleArtifacts {
            signatures: &ptx_signatures,
            cuda_source: None,
            ptx: &ptx,
            ..artifacts()
        })
        .expect("PTX load");
    let empty = dev.kernel(&module, "ptx_empty").expect("PTX kernel");
    // SAFETY: the kernel touches no memory.
    unsafe { dev.launch(&empty, &LaunchConfig::linear(2, 32), &[], &stream) }.unwrap();
    dev.synchronize_stream(&stream).unwrap();

    // Managed memory: written by the host, updated by a kernel, read back.
    let module = dev.load_module(&artifacts()).unwrap();
    let add = dev.kernel(&module, "smoke_add").unwrap();
    let n = 1024usize;
    let managed = dev.alloc_managed(n * 4).unwrap();
    // SAFETY: n u32s of managed memory, no kernel running on it yet.
    let host = unsafe { std::slice::from_raw_parts_mut(managed.host_ptr().cast::<u32>(), n) };
    host.fill(40);
    let args = [
        KernelArg::Ptr(managed.device_ptr()),
        KernelArg::U64(n as u64),
        KernelArg::U32(2),
    ];
    // SAFETY: the kernel writes the managed buffer, alive past the sync.
    unsafe { dev.launch(&add, &LaunchConfig::linear(4, 256), &args, &stream) }.unwrap();
    dev.synchronize_stream(&stream).unwrap();
    // SAFETY: the stream is idle.
    let host = unsafe { std::slice::from_raw_parts(managed.host_ptr().cast::<u32>(), n) };
    assert!(host.iter().all(|&v| v == 42));

    // A registered host region, reached by async fills and copies on two
    // streams ordered by an event.
    let page = tandem_hal::numa::page_size();
    let layout = std::alloc::Layout::from_size_align(4 * page, page).unwrap();
    // SAFETY: non-zero size.
    let region = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!region.is_null());
    {
        // SAFETY: `region` stays allocated until after the registration drops.
        let registered = unsafe { dev.register_host(region, 4 * page) }.expect("register");
        let device_buffer = dev.alloc_device(4 * page).unwrap();
        let other = dev.create_stream().unwrap();
        let done = dev.create_event(EventFlags::default()).unwrap();
        dev.fill_async(&stream, &device_buffer, 0, 4 * page, 0x5C)
            .unwrap();
        dev.record_event(&done, &stream).unwrap();
        dev.stream_wait_event(&other, &done).unwrap();
        dev.copy_device_to_device_async(&other, &registered, page, &device_buffer, 0, page)
            .unwrap();
        dev.synchronize_stream(&other).unwrap();
        // SAFETY: the copy has completed; the region is 4 pages.
        let bytes = unsafe { std::slice::from_raw_parts(registered.host_ptr(), 4 * page) };
        assert!(bytes[..page].iter().all(|&b| b == 0), "page 0 untouched");
        assert!(
            bytes[page..2 * page].iter().all(|&b| b == 0x5C),
            "page 1 copied"
        );
        assert!(
            bytes[2 * page..].iter().all(|&b| b == 0),
            "pages 2-3 untouched"
        );
        // Synchronous device-to-device and a bounds error.
        let copy = dev.alloc_device(page).unwrap();
        dev.copy_device_to_device(&copy, 0, &registered, page, page)
            .unwrap();
        let mut back = vec![0u8; page];
        dev.copy_from_device(&mut back, &copy, 0).unwrap();
        assert!(back.iter().all(|&b| b == 0x5C));
        let e = expect_error(
            dev.copy_device_to_device(&copy, 1, &registered, 0, page),
            "past the end",
        );
        assert!(matches!(e.kind, ErrorKind::OutOfBounds { .. }), "{e}");
    }
    // SAFETY: allocated above with this layout; the registration is gone.
    unsafe { std::alloc::dealloc(region, layout) };
    let e = expect_error(
        // SAFETY: rejected (misaligned) before the driver sees it.
        unsafe { dev.register_host(std::ptr::NonNull::<u64>::dangling().as_ptr().cast(), 64) },
        "misaligned",
    );
    assert!(matches!(e.kind, ErrorKind::InvalidArgument(_)), "{e}");

    // Event rules: only interprocess events export, own handles don't open,
    // elapsed needs timing events.
    let plain = dev.create_event(EventFlags::default()).unwrap();
    let e = expect_error(dev.ipc_export_event(&plain), "plain event export");
    assert!(matches!(e.kind, ErrorKind::InvalidArgument(_)), "{e}");
    let shared = dev
        .create_event(EventFlags {
            timing: true,
            interprocess: true,
        })
        .unwrap();
    let handle = dev.ipc_export_event(&shared).expect("event export");
    let e = expect_error(dev.ipc_open_event(&handle), "own event handle");
    assert_eq!(e.kind, ErrorKind::IpcSameProcess);
    dev.record_event(&shared, &stream).unwrap();
    dev.record_event(&plain, &stream).unwrap();
    dev.synchronize_event(&shared).unwrap();
    let e = expect_error(dev.elapsed(&plain, &shared), "elapsed without timing");
    assert!(matches!(e.kind, ErrorKind::InvalidArgument(_)), "{e}");
    dev.synchronize().unwrap();
}
