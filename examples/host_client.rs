//! A host client in its own process: attaches to a running `tandem run` by
//! its CPU segment's name, or starts one itself, submits a batch of
//! `math.add` tasks, waits for every answer (with a stop flag that Ctrl-C
//! raises, and a deadline), checks them and prints a summary.
//!
//! ```sh
//! tandem run &                       # prints `serving: CPU segment tandem-<pid>-0, ...`
//! cargo run -p tandem-examples --example host_client -- --segment tandem-<pid>-0
//! cargo run -p tandem-examples --example host_client   # starts its own runtime
//! ```
//!
//! With no `--segment`, the runtime is `tandem run` started as a child
//! (`Client::fork_runtime`): the `tandem` executable named by `$TANDEM_BIN`,
//! or the one in the target directory (`cargo build -p tandem-cli --bin
//! tandem` first). It stops when the client is dropped.

use std::process::ExitCode;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use tandem_runtime::{math, Client, Config, DeviceSelection, Route};

/// Submits math.add tasks to a Tandem runtime and checks the answers.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The runtime's CPU segment (in /dev/shm); none: start a runtime.
    #[arg(long, value_name = "NAME")]
    segment: Option<String>,
    /// How many tasks to submit.
    #[arg(long, default_value_t = 10_000)]
    tasks: u64,
    /// Tasks in flight at once (submitted before the first is waited for).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    batch: u64,
    /// Gives up on answers after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout_s: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(why) => {
            eprintln!("host_client: {why}");
            ExitCode::from(1)
        }
    }
}

/// Runs the batch; `Ok(false)` when some answers were wrong or missing.
fn run(args: &Args) -> Result<bool, String> {
    let client = match &args.segment {
        Some(name) => Client::attach(name).map_err(|e| format!("attaching to {name}: {e}"))?,
        None => {
            let config = Config {
                workers: 2,
                devices: DeviceSelection::Only(vec![]),
                ..Config::default()
            };
            Client::fork_runtime(&config).map_err(|e| format!("starting a runtime: {e}"))?
        }
    };
    let segment = client.segment().name().unwrap_or("?").to_string();
    println!(
        "host_client: runtime pid {}, CPU segment {segment}",
        client.runtime_pid()
    );

    // Raised by Ctrl-C (or SIGTERM): every wait returns at once.
    let stop = Arc::new(AtomicU32::new(0));
    watch_signals(Arc::clone(&stop))?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout_s);

    let lanes = client.segment().queue().num_lanes();
    let started = Instant::now();
    let (mut right, mut wrong, mut failed) = (0u64, 0u64, 0u64);
    let mut first_error = None;
    let mut next = 0u64;
    while next < args.tasks {
        // Submit a batch, spread over the lanes, then wait for each answer.
        let end = (next + args.batch).min(args.tasks);
        let mut batch = Vec::with_capacity((end - next) as usize);
        for a in next..end {
            let route = Route {
                deadline: Some(deadline),
                ..Route::lane(a as u32 % lanes)
            };
            batch.push((a, client.submit(route, &math::Add { a, b: 1 })));
        }
        for (a, submitted) in batch {
            match submitted.and_then(|mut pending| pending.wait(&stop, Some(deadline))) {
                Ok(sum) if sum == a + 1 => right += 1,
                Ok(_) => wrong += 1,
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| format!("add({a}, 1): {e}"));
                }
            }
        }
        next = end;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "host_client: {} math.add tasks in {seconds:.3} s ({:.0} tasks/s): {right} right, \
         {wrong} wrong, {failed} failed",
        args.tasks,
        args.tasks as f64 / seconds
    );
    if let Some(why) = first_error {
        println!("host_client: first failure: {why}");
    }
    Ok(right == args.tasks)
}

/// Raises `stop` on SIGINT or SIGTERM, from a thread of its own.
fn watch_signals(stop: Arc<AtomicU32>) -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| format!("cannot watch signals: {e}"))?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            // Release pairs with the waits' loads of the flag.
            stop.store(1, std::sync::atomic::Ordering::Release);
        }
    });
    Ok(())
}
