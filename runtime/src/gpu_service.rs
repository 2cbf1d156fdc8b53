//! A device's GPU service: the persistent kernel that serves the tasks sent
//! to the device's GPU route ([`crate::Runtime::submit_to_gpu`],
//! `rt_send_to_gpu`), so they stay on the device.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tandem_hal::{
    DeviceMemory, EventFlags, GpuApi, GpuDevice, HostMemory, KernelArg, LaunchConfig,
    ResidentKernel,
};

use crate::error::RuntimeError;
use crate::runtime::DeviceQueues;

/// What a GPU service did, summed over its threads.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ServiceStats {
    /// Tasks run and completed.
    pub served: u64,
    /// Inbox entries that named no future of the segment (skipped).
    pub bad_pointers: u64,
    /// Rounds of inbox polls, summed over the threads that poll the inbox
    /// (`RtServeStats::rounds`): with `served`, how many tasks a round
    /// finds, and with the service's run time, how long a round takes.
    pub rounds: u64,
}

/// A device's GPU service: the persistent kernel `tandem_rt_gpu_service`
/// (tandem/runtime/service.h `rt_serve`, with the device-side math pool)
/// running on its own stream, serving the tasks sent to the device: from the host
/// ([`crate::Runtime::submit_to_gpu`]) and from kernels (`rt_send_to_gpu`,
/// through the device inbox in device memory). [`stop`](Self::stop) (or
/// drop) raises the segment's service stop flag, lets the service drain
/// both routes, and waits for it. An idle service's threads poll on short
/// sleeps (docs/gpu.md, "The GPU service").
///
/// The service counts as the device's resident kernel while it runs
/// ([`GpuDevice::resident_kernel`]): the device's memory and modules dropped
/// meanwhile are freed once it has ended, as the drivers' frees would wait
/// for it, which only ends when told. Loading a module still waits for it,
/// as may getting a kernel from a module and its first launch (the driver
/// loads kernels' code lazily by default, and sets up `printf` at the first
/// kernel that uses it): load modules, get their kernels and launch each
/// once before starting it (a kernel's result buffers can come from
/// the segment's heap, [`crate::QueueSegment::allocate`], which makes no
/// driver call).
pub struct GpuService<'q, A: GpuApi> {
    queues: &'q DeviceQueues<A>,
    stats: <A::Device as GpuDevice>::PinnedBuffer,
    stream: <A::Device as GpuDevice>::Stream,
    _module: <A::Device as GpuDevice>::Module,
    /// Held from before the launch until the kernel has ended (`finish`).
    resident: Option<ResidentKernel>,
    running: bool,
}

/// Words of the service kernel's `stats` argument: served, bad pointers,
/// the status of a thread that could not serve, and the word the service
/// raises once it has sized the device inbox ([`SIZED_WORD`]).
const SERVICE_STATS_WORDS: usize = 5;
/// The index of the word the service raises once it has sized the inbox.
const SIZED_WORD: usize = 3;
/// How long [`GpuService::start`] waits for the service to size the inbox:
/// its first block starts as soon as the device has room for it.
const SIZED_TIMEOUT: Duration = Duration::from_secs(10);

impl<'q, A: GpuApi> GpuService<'q, A> {
    /// Launches the service with `blocks` x `threads` threads (each serves
    /// one task at a time; the kernels' tasks are split evenly among them)
    /// and returns once it has sized the device inbox to itself, so kernels
    /// launched from then on send into the slots it polls every round.
    /// Every block must stay resident beside the
    /// kernels that use it: [`RuntimeError::ServiceTooLarge`] for more blocks
    /// than the device has multiprocessors. One service a device:
    /// [`RuntimeError::ServiceRunning`] while another runs.
    pub fn start(
        queues: &'q DeviceQueues<A>,
        blocks: u32,
        threads: u32,
    ) -> Result<Self, RuntimeError> {
        let multiprocessors = queues.properties().multiprocessor_count;
        if blocks > multiprocessors {
            return Err(RuntimeError::ServiceTooLarge {
                blocks,
                multiprocessors,
            });
        }
        if queues.service_running.swap(true, Ordering::Acquire) {
            return Err(RuntimeError::ServiceRunning {
                device: queues.device().ordinal(),
            });
        }
        Self::launch(queues, blocks, threads).inspect_err(|_| {
            // Release: none of this attempt's setup outlives it.
            queues.service_running.store(false, Ordering::Release);
        })
    }

    /// The launch behind [`start`](Self::start), once the device is ours.
    fn launch(
        queues: &'q DeviceQueues<A>,
        blocks: u32,
        threads: u32,
    ) -> Result<Self, RuntimeError> {
        let device = queues.device();
        let module = device.load_module(&tandem_device_kernels::library())?;
        let kernel = device.kernel(&module, "tandem_rt_gpu_service")?;
        let stream = device.create_stream()?;
        let stats = device.alloc_pinned_mapped(SERVICE_STATS_WORDS * 8)?;
        // SAFETY: a fresh pinned allocation of that many words, no kernel yet.
        unsafe { stats.host_ptr().write_bytes(0, SERVICE_STATS_WORDS * 8) };
        // Release: ordered before the launch; a stale raised flag would end
        // the service at once.
        queues
            .segment()
            .header()
            .service_stop
            .store(0, Ordering::Release);
        let args = [
            KernelArg::Ptr(queues.kernel_backend().base),
            KernelArg::U64(queues.segment().len() as u64),
            KernelArg::Ptr(stats.device_ptr()),
        ];
        let resident = device.resident_kernel();
        // SAFETY: the segment (registered with the device) and `stats` outlive
        // the kernel: `stop` (or drop) waits for it before either can go.
        unsafe {
            device.launch(
                &kernel,
                &LaunchConfig::linear(blocks, threads),
                &args,
                &stream,
            )
        }?;
        let ended = device.create_event(EventFlags::default())?;
        device.record_event(&ended, &stream)?;
        let mut service = Self {
            queues,
            stats,
            stream,
            _module: module,
            resident: Some(resident),
            running: true,
        };
        service.wait_until_sized(&ended)?;
        Ok(service)
    }

    /// Waits until the service has sized the device inbox (it raises
    /// [`SIZED_WORD`]); a service that ended first, or never got that far,
    /// is stopped and its error returned.
    fn wait_until_sized(
        &mut self,
        ended: &<A::Device as GpuDevice>::Event,
    ) -> Result<(), RuntimeError> {
        // SAFETY: the word is in the live pinned allocation, aligned, and only
        // the service writes it (atomically) while it runs.
        let sized = unsafe { &*self.stats.host_ptr().cast::<AtomicU64>().add(SIZED_WORD) };
        let start = Instant::now();
        // Acquire: pairs with the service's release of the word.
        while sized.load(Ordering::Acquire) == 0 {
            let gone = self.queues.device().query_event(ended)?;
            if gone || start.elapsed() >= SIZED_TIMEOUT {
                let stats = self.finish()?;
                return Err(RuntimeError::Process(format!(
                    "GPU service {} before sizing its inbox ({stats:?})",
                    if gone { "ended" } else { "did not start" }
                )));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        Ok(())
    }

    /// Raises the service stop flag and waits for the service to drain both
    /// routes and end. Submitters (host threads, and kernels sending here)
    /// must be done by then (what they push later is not served).
    pub fn stop(mut self) -> Result<ServiceStats, RuntimeError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<ServiceStats, RuntimeError> {
        self.running = false;
        // Release: pairs with the service's acquire pattern on the flag
        // (rt_serve), after which it sees every push made before this store.
        self.queues
            .segment()
            .header()
            .service_stop
            .store(1, Ordering::Release);
        let ended = self.queues.device().synchronize_stream(&self.stream);
        // The kernel has ended (or the device has failed): what was released
        // while it ran is freed now.
        self.resident = None;
        // Release: the next service on the device starts after this one's
        // end, which the synchronisation saw (Acquire in `start`).
        self.queues.service_running.store(false, Ordering::Release);
        ended?;
        // SAFETY: the kernel has ended (synchronized): nobody writes the words.
        let words = unsafe {
            std::slice::from_raw_parts(self.stats.host_ptr().cast::<u64>(), SERVICE_STATS_WORDS)
        };
        if words[2] != 0 {
            return Err(RuntimeError::Process(format!(
                "GPU service could not attach to the segment (rt_status {})",
                words[2]
            )));
        }
        Ok(ServiceStats {
            served: words[0],
            bad_pointers: words[1],
            rounds: words[4],
        })
    }
}

impl<A: GpuApi> Drop for GpuService<'_, A> {
    fn drop(&mut self) {
        if self.running {
            // Errors have no one to go to here; `stop` reports them.
            let _ = self.finish();
        }
    }
}
