//! A pool of your own, called from a kernel thread: the host keeps a catalog
//! (price by SKU, a table the device does not hold), served by the `catalog`
//! pool; a kernel (`kernels/catalog.cu`, built by this crate's `build.rs`
//! with `tandem-kernel-build`) has every thread ask it for prices through the
//! device's queue and write what came back; the host checks every answer.
//!
//! ```sh
//! cargo run -p tandem-examples --example user_pool                    # the CPU device
//! cargo run -p tandem-examples --features cuda --example user_pool    # a CUDA device if one answers
//! ```
//!
//! It runs on the best backend compiled in and present (CUDA, then HIP, else
//! the CPU device), prints a summary and one verdict line, `user_pool: N
//! lookups, 0 wrong: ok` (or `... : FAILED`, exit status 1). Ctrl-C raises
//! the segment's stop word, which every waiting kernel thread sees.

use std::collections::HashMap;
use std::fmt;
use std::process::ExitCode;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tandem_examples::kernels;
use tandem_hal::{DeviceMemory, GpuApi, GpuDevice, HostMemory, KernelArg, LaunchConfig};
use tandem_runtime::{
    on_best_backend, Backend, Config, DeviceQueues, MethodId, OnBackend, Pool, PoolId, Registry,
    Runtime, Task,
};
use tandem_shm_core::impl_serialize_fields;

/// The catalog pool's id: built-in pools take the small ids (`math` is 1),
/// and `Registry::register` refuses a duplicate.
const CATALOG: PoolId = 100;
/// `catalog.price(sku) -> cents`.
const PRICE: MethodId = 1;
/// The price handler's code for a SKU the store does not carry (user codes
/// are positive: the runtime's own are near `i32::MIN`).
const NOT_CARRIED: i32 = 404;

/// `catalog.price`: the price of one SKU, in cents.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct CatalogPrice {
    sku: u64,
}
impl_serialize_fields!(CatalogPrice { sku });

impl Task for CatalogPrice {
    const POOL: PoolId = CATALOG;
    const METHOD: MethodId = PRICE;
    type Output = u64;
}

/// Prices of SKUs `0..skus` in cents; every 7th SKU is not carried, so some
/// answers are the handler's error code.
fn catalog(skus: u64) -> HashMap<u64, u64> {
    (0..skus)
        .filter(|sku| sku % 7 != 3)
        .map(|sku| (sku, 199 + (sku * 37) % 5000))
        .collect()
}

/// The built-in pools and the catalog.
fn registry(catalog: Arc<HashMap<u64, u64>>) -> Result<Registry, String> {
    let mut registry = Registry::with_builtins();
    let pool = Pool::new(CATALOG, "catalog").task::<CatalogPrice, _>("price", move |task| {
        catalog.get(&task.sku).copied().ok_or(NOT_CARRIED)
    });
    registry.register(pool).map_err(|e| e.to_string())?;
    Ok(registry)
}

/// Kernel threads asking a user pool for prices; checks every answer.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// SKUs each kernel thread looks up, one at a time.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    skus_per_thread: u64,
    /// Gives up on answers after this many seconds (raises the stop word).
    #[arg(long, default_value_t = 60)]
    timeout_s: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run_on_best_backend(&args) {
        Ok(summary) => {
            print!("{summary}");
            if summary.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(why) => {
            eprintln!("user_pool: {why}");
            ExitCode::from(1)
        }
    }
}

/// The example on one backend (whichever [`on_best_backend`] picks).
struct Example<'a>(&'a Args);

impl OnBackend for Example<'_> {
    type Output = Result<Summary, String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        run(api, backend.describe(), backend.is_gpu(), self.0)
    }
}

/// Runs the example on CUDA or HIP when compiled in and a device answers,
/// else on the CPU device.
fn run_on_best_backend(args: &Args) -> Result<Summary, String> {
    on_best_backend(Example(args)).map_err(|e| format!("loading a backend: {e}"))?
}

/// What the kernel got back, checked against the catalog.
struct Summary {
    device: String,
    blocks: u32,
    threads: u32,
    skus_per_thread: u64,
    elapsed: Duration,
    /// Prices that match the catalog.
    right: u64,
    /// SKUs answered NOT_CARRIED, as the catalog says.
    not_carried: u64,
    /// Answers that differ from the catalog (or were never written).
    wrong: u64,
    /// Kernel threads that stopped early (their rt_status), and the first
    /// such status.
    failed_threads: usize,
    first_failure: Option<u32>,
}

impl Summary {
    fn lookups(&self) -> u64 {
        u64::from(self.blocks) * u64::from(self.threads) * self.skus_per_thread
    }

    /// Every lookup answered as the catalog says.
    fn ok(&self) -> bool {
        self.wrong == 0 && self.failed_threads == 0
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "user_pool: kernel on {}: {} blocks x {} threads, each asking catalog.price for {} SKUs",
            self.device, self.blocks, self.threads, self.skus_per_thread
        )?;
        writeln!(
            f,
            "user_pool: {} lookups in {:.3} s: {} prices right, {} not carried (code {NOT_CARRIED}) \
             as the catalog says, {} wrong; {} threads stopped early",
            self.lookups(),
            self.elapsed.as_secs_f64(),
            self.right,
            self.not_carried,
            self.wrong,
            self.failed_threads,
        )?;
        if let Some(status) = self.first_failure {
            writeln!(f, "user_pool: first early stop: rt_status {status}")?;
        }
        let verdict = if self.ok() { "ok" } else { "FAILED" };
        writeln!(
            f,
            "user_pool: {} lookups, {} wrong: {verdict}",
            self.lookups(),
            self.wrong
        )
    }
}

/// Starts a runtime on `api` with the catalog pool, runs the kernel on its
/// first device and checks the answers.
fn run<A: GpuApi>(api: A, device: &str, gpu: bool, args: &Args) -> Result<Summary, String> {
    // A real GPU takes many threads; the CPU device runs the grid on a few
    // cores.
    let (blocks, threads) = if gpu { (132, 128) } else { (4, 16) };
    let skus = u64::from(blocks) * u64::from(threads) * args.skus_per_thread;
    let catalog = Arc::new(catalog(skus));
    let runtime = Runtime::start_with(api, Config::default(), registry(Arc::clone(&catalog))?)
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let launched = launch(&runtime, blocks, threads, args);
    runtime
        .shutdown()
        .map_err(|e| format!("shutting the runtime down: {e}"))?;
    let (answers, elapsed) = launched?;

    let mut summary = Summary {
        device: device.to_string(),
        blocks,
        threads,
        skus_per_thread: args.skus_per_thread,
        elapsed,
        right: 0,
        not_carried: 0,
        wrong: 0,
        failed_threads: answers.status.iter().filter(|&&s| s != 0).count(),
        first_failure: answers.status.iter().copied().find(|&s| s != 0),
    };
    for (sku, (&price, &code)) in answers.prices.iter().zip(&answers.codes).enumerate() {
        match (catalog.get(&(sku as u64)), code) {
            (Some(&expected), 0) if price == expected => summary.right += 1,
            (None, NOT_CARRIED) if price == 0 => summary.not_carried += 1,
            _ => summary.wrong += 1,
        }
    }
    Ok(summary)
}

/// What the kernel wrote: per SKU its price and return code, per thread its
/// rt_status.
struct Answers {
    prices: Vec<u64>,
    codes: Vec<i32>,
    status: Vec<u32>,
}

/// Loads the examples' kernels on the runtime's first device and launches
/// `example_catalog_prices` against its queue segment, waiting for it; a
/// signal or the timeout raises the segment's stop word meanwhile.
fn launch<A: GpuApi>(
    runtime: &Runtime<A>,
    blocks: u32,
    threads: u32,
    args: &Args,
) -> Result<(Answers, Duration), String> {
    let queues = runtime
        .devices()
        .first()
        .ok_or("the runtime serves no device")?;
    let device = queues.device();
    let module = device
        .load_module(&kernels::library())
        .map_err(|e| format!("loading the examples' kernels: {e}"))?;
    let kernel = device
        .kernel(&module, kernels::names::EXAMPLE_CATALOG_PRICES)
        .map_err(|e| e.to_string())?;
    let stream = device.create_stream().map_err(|e| e.to_string())?;

    let thread_count = blocks as usize * threads as usize;
    let skus = thread_count * args.skus_per_thread as usize;
    let alloc = |bytes: usize| {
        let buffer = device
            .alloc_pinned_mapped(bytes)
            .map_err(|e| format!("allocating {bytes} bytes of pinned memory: {e}"))?;
        // Marks every entry "never written" (all ones): a thread that skipped
        // one shows as a wrong answer, not as price 0.
        // SAFETY: a fresh allocation of `bytes` bytes, which no kernel uses yet.
        unsafe { buffer.host_ptr().write_bytes(0xff, bytes) };
        Ok::<_, String>(buffer)
    };
    let prices = alloc(skus * 8)?;
    let codes = alloc(skus * 4)?;
    let status = alloc(thread_count * 4)?;

    let segment = queues.segment();
    let launch_args = [
        KernelArg::Ptr(queues.kernel_backend().base),
        KernelArg::U64(segment.len() as u64),
        // The ids from the Rust task type: the kernel cannot name another pool.
        KernelArg::U32(CatalogPrice::POOL),
        KernelArg::U32(CatalogPrice::METHOD),
        KernelArg::U64(args.skus_per_thread),
        KernelArg::Ptr(queues.stop_flag_device_ptr()),
        // Spin rounds: far more than any answer takes; the stop word is what
        // ends a wait early.
        KernelArg::U64(1 << 40),
        KernelArg::Ptr(prices.device_ptr()),
        KernelArg::Ptr(codes.device_ptr()),
        KernelArg::Ptr(status.device_ptr()),
    ];
    queues.clear_stop();
    let started = Instant::now();
    // SAFETY: the segment stays mapped and registered while `runtime` lives
    // (borrowed here); the buffers hold an entry per SKU / thread and live
    // until after the synchronisation below.
    unsafe {
        device.launch(
            &kernel,
            &LaunchConfig::linear(blocks, threads),
            &launch_args,
            &stream,
        )
    }
    .map_err(|e| format!("launching the kernel: {e}"))?;
    let synced = watch_while(queues, Duration::from_secs(args.timeout_s), || {
        device.synchronize_stream(&stream)
    })?;
    let elapsed = started.elapsed();
    synced.map_err(|e| format!("running the kernel: {e}"))?;

    // SAFETY: the kernel finished (synchronised); each buffer holds that many
    // entries, written by it (or still all ones).
    let answers = unsafe {
        Answers {
            prices: std::slice::from_raw_parts(prices.host_ptr().cast::<u64>(), skus).to_vec(),
            codes: std::slice::from_raw_parts(codes.host_ptr().cast::<i32>(), skus).to_vec(),
            status: std::slice::from_raw_parts(status.host_ptr().cast::<u32>(), thread_count)
                .to_vec(),
        }
    };
    Ok((answers, elapsed))
}

/// Runs `wait` while a thread raises `queues`' stop word on SIGINT, SIGTERM
/// or after `timeout`, so that waiting kernel threads give up.
fn watch_while<A: GpuApi, T>(
    queues: &DeviceQueues<A>,
    timeout: Duration,
    wait: impl FnOnce() -> T,
) -> Result<T, String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| format!("cannot watch signals: {e}"))?;
    let deadline = Instant::now() + timeout;
    let (done, finished) = mpsc::channel::<()>();
    Ok(std::thread::scope(|scope| {
        scope.spawn(move || loop {
            if signals.pending().next().is_some() {
                eprintln!("user_pool: signal: stopping the kernel's waits");
                queues.raise_stop();
                return;
            }
            // Wakes at once when `wait` returns (the sender is dropped), else
            // every 100 ms to look for a signal.
            let left = deadline.saturating_duration_since(Instant::now());
            match finished.recv_timeout(left.min(Duration::from_millis(100))) {
                Err(RecvTimeoutError::Timeout) if left.is_zero() => {
                    eprintln!("user_pool: timed out: stopping the kernel's waits");
                    queues.raise_stop();
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
        });
        let result = wait();
        drop(done);
        result
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole example, on the best backend built (the CPU device without
    /// a GPU): every lookup of every kernel thread comes back as the catalog
    /// says, the handler's error code included.
    #[test]
    fn kernel_threads_get_the_catalogs_answers() {
        let args = Args::parse_from(["user_pool", "--skus-per-thread", "4"]);
        let summary = run_on_best_backend(&args).expect("the example runs");
        // The GPU run sets TANDEM_REQUIRE_GPU=1: there the CPU device must
        // not stand in for a GPU that failed to answer.
        if std::env::var("TANDEM_REQUIRE_GPU").as_deref() == Ok("1") {
            assert!(
                !summary.device.contains("CPU device"),
                "TANDEM_REQUIRE_GPU=1, but the example ran on {}",
                summary.device
            );
        }
        assert!(summary.ok(), "{summary}");
        assert_eq!(summary.right + summary.not_carried, summary.lookups());
        // Both kinds of answer went through the kernel.
        assert!(summary.right > 0 && summary.not_carried > 0, "{summary}");
        assert!(summary.to_string().ends_with(": ok\n"), "{summary}");
    }

    /// The catalog's id is its own: registering it next to the built-ins
    /// works, and a second pool with its id is refused.
    #[test]
    fn the_catalog_pool_id_is_free_and_taken_once() {
        let mut registry = registry(Arc::new(catalog(1))).expect("catalog registers");
        assert!(registry.register(Pool::new(CATALOG, "again")).is_err());
    }
}
