//! The one way the cross-language tests run kernels, on any backend: the
//! library loaded on a device, and memory both Rust and kernels address
//! (mapped pinned memory: on CUDA the only kind a Rust thread can read while
//! a kernel writes it); the sizes a test runs at on that backend; and the
//! proptest runner every property goes through.

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tandem_device_kernels::library;
use tandem_hal::{
    Backend, DeviceMemory, Dim3, GpuApi, GpuDevice, HostMemory, KernelArg, LaunchConfig,
};

/// A device with Tandem's kernels loaded.
pub struct Gpu<A: GpuApi> {
    /// The device, for what the harness does not wrap.
    pub device: A::Device,
    module: <A::Device as GpuDevice>::Module,
    /// Where `run_one` launches.
    stream: <A::Device as GpuDevice>::Stream,
}

/// Mapped pinned memory, zeroed: `host` for Rust, `arg()` for kernels.
pub struct Shared<A: GpuApi> {
    buffer: <A::Device as GpuDevice>::PinnedBuffer,
}

#[allow(
    clippy::len_without_is_empty,
    reason = "a test's memory is never empty, and nothing would call it"
)]
impl<A: GpuApi> Shared<A> {
    /// The address Rust uses.
    pub fn host(&self) -> *mut u8 {
        self.buffer.host_ptr()
    }

    /// The kernel argument naming the memory, `offset` bytes in.
    pub fn arg_at(&self, offset: usize) -> KernelArg<'static> {
        assert!(offset <= self.buffer.len(), "offset inside the buffer");
        KernelArg::Ptr(self.buffer.device_ptr() + offset as u64)
    }

    /// The kernel argument naming the memory.
    pub fn arg(&self) -> KernelArg<'static> {
        self.arg_at(0)
    }

    /// Bytes of memory.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// The memory as `T`s (for result words a kernel wrote; no kernel may be
    /// writing them during the call).
    pub fn read<T: Copy>(&self, index: usize) -> T {
        assert!(
            (index + 1) * size_of::<T>() <= self.len(),
            "index inside the buffer"
        );
        // SAFETY: in bounds (checked); pinned memory is page-aligned, so
        // aligned for `T` at a multiple of its size; the caller's contract
        // rules out a concurrent writer.
        unsafe { self.host().cast::<T>().add(index).read_volatile() }
    }

    /// A copy of all bytes (no kernel may be writing them).
    pub fn bytes(&self) -> Vec<u8> {
        // SAFETY: `len` bytes at `host` are the buffer's; no concurrent writer
        // is the caller's contract.
        unsafe { core::slice::from_raw_parts(self.host(), self.len()).to_vec() }
    }
}

/// Zeroed device memory, for kernels only (e.g. the device tickets of a
/// ring side that only GPU threads use).
pub struct DeviceWords<A: GpuApi> {
    buffer: <A::Device as GpuDevice>::DeviceBuffer,
}
impl<A: GpuApi> DeviceWords<A> {
    /// The kernel argument naming the memory.
    pub fn arg(&self) -> KernelArg<'static> {
        KernelArg::Ptr(self.buffer.device_ptr())
    }

    /// A copy of the memory's bytes (no kernel may be writing it).
    pub fn bytes(&self, gpu: &Gpu<A>) -> Vec<u8> {
        let mut out = vec![0; self.buffer.len()];
        gpu.device
            .copy_from_device(&mut out, &self.buffer, 0)
            .expect("device to host copy");
        out
    }
}

impl<A: GpuApi> Gpu<A> {
    /// Loads the library on `device`.
    pub fn new(device: A::Device) -> Self {
        let module = device
            .load_module(&library())
            .expect("the library loads on the device");
        let stream = device.create_stream().expect("a stream");
        Self {
            device,
            module,
            stream,
        }
    }

    /// `bytes` of zeroed mapped pinned memory.
    pub fn shared(&self, bytes: usize) -> Shared<A> {
        let buffer = self
            .device
            .alloc_pinned_mapped(bytes)
            .expect("pinned memory");
        // SAFETY: a fresh allocation of `bytes` bytes nobody else uses yet.
        unsafe { buffer.host_ptr().write_bytes(0, bytes) };
        Shared { buffer }
    }

    /// `words` zeroed u64s of device memory.
    pub fn device_words(&self, words: usize) -> DeviceWords<A> {
        let bytes = words * size_of::<u64>();
        let buffer = self.device.alloc_device(bytes).expect("device memory");
        self.device
            .fill(&buffer, 0, bytes, 0)
            .expect("zeroing device memory");
        DeviceWords { buffer }
    }

    /// A new stream, for launches that must run beside others.
    pub fn stream(&self) -> <A::Device as GpuDevice>::Stream {
        self.device.create_stream().expect("a stream")
    }

    /// Launches kernel `name` over `grid` x `block` on `stream`.
    ///
    /// # Safety
    /// Every pointer argument must cover what the kernel touches until the
    /// stream is synchronized.
    pub unsafe fn launch(
        &self,
        stream: &<A::Device as GpuDevice>::Stream,
        name: &str,
        grid: Dim3,
        block: Dim3,
        args: &[KernelArg<'_>],
    ) {
        let kernel = self.device.kernel(&self.module, name).expect("kernel");
        let config = LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        };
        // SAFETY: forwarded to the caller.
        unsafe { self.device.launch(&kernel, &config, args, stream) }.expect("launch");
    }

    /// Waits for `stream`, failing the test if a kernel failed.
    pub fn sync(&self, stream: &<A::Device as GpuDevice>::Stream) {
        self.device
            .synchronize_stream(stream)
            .expect("the kernels ran");
    }

    /// `cpu` on the CPU device, `gpu` on a GPU: a GPU test runs thousands of
    /// threads where the CPU device, a few cores, runs tens.
    pub fn at_scale<T>(&self, cpu: T, gpu: T) -> T {
        if A::BACKEND == Backend::Host {
            cpu
        } else {
            gpu
        }
    }

    /// Runs kernel `name` on one thread and waits for it.
    ///
    /// # Safety
    /// As for [`launch`](Self::launch).
    pub unsafe fn run_one(&self, name: &str, args: &[KernelArg<'_>]) {
        let one = Dim3::linear(1);
        // SAFETY: forwarded to the caller; synchronized before returning.
        unsafe { self.launch(&self.stream, name, one, one, args) };
        self.sync(&self.stream);
    }
}

/// Runs `test` on `cases` values of `strategy`, as `proptest!` would: failures
/// shrunk, reported by panicking, and their seeds kept in the regression file
/// of `source` (the caller's `file!()`), replayed first on later runs.
pub fn check<S: Strategy>(
    source: &'static str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        source_file: Some(source),
        ..Config::default()
    });
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}\n{runner}");
    }
}
