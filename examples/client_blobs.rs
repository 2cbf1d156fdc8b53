//! A program whose own kernel puts and gets blobs through a blob store that
//! a runtime in another process serves: the design notes' GPU path, one
//! runtime and one store for many programs. It attaches to the runtime,
//! takes device queues of its own (`Client::device_queues`), launches
//! `example_client_blobs` (kernels/client_blobs.cu: every thread creates or
//! finds the tag `client-blobs`, puts its blob, gets it back and compares)
//! and exits; several such programs run at once against one store.
//!
//! ```sh
//! tandem blob run --config store.toml --announce   # prints `ready <segment> <pid>`
//! client_blobs run --segment <segment> --program 1 &
//! client_blobs run --segment <segment> --program 2
//! ```
//!
//! `client_blobs serve --store DIR` is such a runtime too (a RAM and a file
//! target in DIR), for a machine without the `tandem` binary: it prints
//! `ready <segment> <pid>` and serves until its stdin closes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, Subcommand};
use tandem_blob::{pool, wire, BlobStore, StoreConfig};
use tandem_examples::kernels;
use tandem_hal::{GpuApi, GpuDevice, KernelArg, LaunchConfig};
use tandem_runtime::{
    on_best_backend, serve, Backend, Client, Config, OnBackend, Registry, ServeOptions,
};

/// `tandem::rt_status::ok`.
const RT_OK: u32 = 0;
/// The kernel's status of a thread whose get returned other bytes.
const MISMATCH: u32 = 1000;

/// Blobs put and got by a kernel of this program, through a runtime of
/// another process.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Attaches to the runtime serving `segment` and runs the kernel.
    Run {
        /// The runtime's CPU segment (in /dev/shm).
        #[arg(long, value_name = "NAME")]
        segment: String,
        /// This program's number: its blobs are `p<program>-t<thread>`.
        #[arg(long, default_value_t = 1)]
        program: u32,
        /// Bytes of each thread's blob.
        #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
        blob_bytes: u64,
    },
    /// Serves a blob store in DIR (created if new) from a runtime of this
    /// process until stdin closes.
    Serve {
        /// The store's folder.
        #[arg(long, value_name = "DIR")]
        store: PathBuf,
        /// The CPU segment's name; default: tandem-<pid>-0.
        #[arg(long, value_name = "NAME")]
        segment: Option<String>,
    },
}

fn main() -> ExitCode {
    let outcome = match Args::parse().command {
        Command::Run {
            segment,
            program,
            blob_bytes,
        } => on_best_backend(RunKernel {
            segment,
            program,
            blob_bytes,
        }),
        Command::Serve { store, segment } => {
            tandem_runtime::init_logging();
            on_best_backend(Serve { store, segment })
        }
    };
    match outcome.map_err(|e| e.to_string()).and_then(|r| r) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("client_blobs: {why}");
            ExitCode::from(1)
        }
    }
}

/// `run` on the backend `on_best_backend` picks.
struct RunKernel {
    segment: String,
    program: u32,
    blob_bytes: u64,
}

impl OnBackend for RunKernel {
    type Output = Result<(), String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        let client = Client::attach(&self.segment).map_err(|e| e.to_string())?;
        let queues = client
            .device_queues(&api, 0)
            .map_err(|e| format!("device queues: {e}"))?;
        let device = queues.device();
        let module = device
            .load_module(&kernels::library())
            .map_err(|e| format!("loading the examples' kernels: {e}"))?;
        let kernel = device
            .kernel(&module, kernels::names::EXAMPLE_CLIENT_BLOBS)
            .map_err(|e| e.to_string())?;
        let stream = device.create_stream().map_err(|e| e.to_string())?;
        let (blocks, threads) = if backend.is_gpu() { (8, 64) } else { (2, 8) };
        let count = blocks as usize * threads as usize;
        // The results in the segment's heap: host memory the device maps,
        // no driver call.
        let status = queues
            .allocate_shared(count * 4)
            .map_err(|e| e.to_string())?;
        let codes = queues
            .allocate_shared(count * 4)
            .map_err(|e| e.to_string())?;
        let at = |buffer| queues.device_address(buffer).ok_or("not of this segment");
        let args = [
            KernelArg::Ptr(queues.kernel_backend().base),
            KernelArg::U64(queues.segment().len() as u64),
            KernelArg::U32(self.program),
            KernelArg::U64(self.blob_bytes),
            KernelArg::Ptr(queues.stop_flag_device_ptr()),
            // Spin rounds: far more than any answer takes; the stop word
            // (raised if the runtime dies) is what ends a wait early.
            KernelArg::U64(1 << 40),
            KernelArg::Ptr(at(&status)?),
            KernelArg::Ptr(at(&codes)?),
        ];
        let started = Instant::now();
        // SAFETY: the segment stays registered while `queues` lives; the
        // result buffers hold an entry per thread and live until after the
        // synchronisation.
        unsafe {
            device.launch(
                &kernel,
                &LaunchConfig::linear(blocks, threads),
                &args,
                &stream,
            )
        }
        .map_err(|e| e.to_string())?;
        device
            .synchronize_stream(&stream)
            .map_err(|e| e.to_string())?;
        let elapsed = started.elapsed();
        queues.check_runtime().map_err(|e| e.to_string())?;
        let words = |buffer: &tandem_runtime::SharedBuffer<'_>| {
            let mut bytes = vec![0u8; count * 4];
            buffer.read(0, &mut bytes);
            bytes
                .chunks_exact(4)
                .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .collect::<Vec<u32>>()
        };
        let (status, codes) = (words(&status), words(&codes));
        let mismatched = status.iter().filter(|&&s| s == MISMATCH).count();
        let failed = status.iter().filter(|&&s| s != RT_OK).count();
        println!(
            "client_blobs: program {} on {}: {count} threads put, got and compared {} bytes each in {:.3} s: {mismatched} mismatched, {failed} failed",
            self.program,
            backend.describe(),
            self.blob_bytes,
            elapsed.as_secs_f64()
        );
        if let Some((thread, (s, code))) = status
            .iter()
            .zip(&codes)
            .enumerate()
            .find(|(_, (&s, _))| s != RT_OK)
        {
            return Err(format!(
                "thread {thread}: status {s}, blob store code {}",
                *code as i32
            ));
        }
        println!("client_blobs: program {}: ok", self.program);
        Ok(())
    }
}

/// `serve` on the backend `on_best_backend` picks.
struct Serve {
    store: PathBuf,
    segment: Option<String>,
}

impl OnBackend for Serve {
    type Output = Result<(), String>;

    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output {
        std::fs::create_dir_all(&self.store)
            .map_err(|e| format!("creating {}: {e}", self.store.display()))?;
        let store = BlobStore::open(&StoreConfig::ram_and_file(&self.store, 64 << 20))
            .map_err(|e| e.to_string())?;
        let mut registry = Registry::with_builtins();
        pool::register(&mut registry, Arc::new(store)).map_err(|e| e.to_string())?;
        let config = Config {
            cpu_segment_name: self.segment,
            // Host clients' blob calls need the pool's copy space (as
            // `tandem blob run` raises it).
            copy_space: Config::default().copy_space.max(wire::COPY_SPACE),
            ..Config::default()
        };
        let options = ServeOptions {
            announce: true,
            exit_on_stdin_eof: true,
            metrics: None,
        };
        serve(api, backend, config, registry, options).map_err(|e| e.to_string())
    }
}
