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
use tandem_runtime::{math, Client, Config, DeviceSelection, Route, TaskError};

/// Submits math.add tasks to a Tandem runtime and checks the answers.
#[derive(Parser, Debug, Clone)]
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

    let started = Instant::now();
    let tally = submit_all(&client, args, &stop, deadline);
    let seconds = started.elapsed().as_secs_f64();
    let answered = tally.right + tally.wrong + tally.failed;
    println!(
        "host_client: {answered} math.add tasks in {seconds:.3} s ({:.0} tasks/s): {} right, \
         {} wrong, {} failed",
        answered as f64 / seconds,
        tally.right,
        tally.wrong,
        tally.failed
    );
    if let Some(why) = &tally.first_error {
        println!("host_client: first failure: {why}");
    }
    if let Some(why) = &tally.gave_up {
        println!(
            "host_client: gave up, {} of {} tasks not sent: {why}",
            args.tasks - tally.sent,
            args.tasks
        );
    }
    Ok(tally.right == args.tasks)
}

/// What [`submit_all`] counted.
#[derive(Debug, Default)]
struct Tally {
    /// Tasks submitted (or tried).
    sent: u64,
    right: u64,
    wrong: u64,
    failed: u64,
    first_error: Option<String>,
    /// Why it stopped before the last task: the runtime died, the stop flag
    /// was raised, or the deadline passed. Every later task would fail the
    /// same way at once.
    gave_up: Option<String>,
}

/// Submits `args.tasks` math.add tasks in batches, spread over the lanes,
/// waiting for each answer; stops at the first error that every later task
/// would share.
fn submit_all(client: &Client, args: &Args, stop: &AtomicU32, deadline: Instant) -> Tally {
    let lanes = client.segment().queue().num_lanes();
    let mut tally = Tally::default();
    while tally.sent < args.tasks && tally.gave_up.is_none() {
        let end = (tally.sent + args.batch).min(args.tasks);
        let mut batch = Vec::with_capacity((end - tally.sent) as usize);
        for a in tally.sent..end {
            let route = Route {
                deadline: Some(deadline),
                ..Route::lane(a as u32 % lanes)
            };
            batch.push((a, client.submit(route, &math::Add { a, b: 1 })));
        }
        tally.sent = end;
        for (a, submitted) in batch {
            match submitted.and_then(|mut pending| pending.wait(stop, Some(deadline))) {
                Ok(sum) if sum == a + 1 => tally.right += 1,
                Ok(_) => tally.wrong += 1,
                Err(e) => {
                    tally.failed += 1;
                    tally
                        .first_error
                        .get_or_insert_with(|| format!("add({a}, 1): {e}"));
                    if matches!(
                        e,
                        TaskError::RuntimeDead { .. } | TaskError::Stopped | TaskError::TimedOut
                    ) {
                        tally.gave_up.get_or_insert_with(|| e.to_string());
                    }
                }
            }
        }
    }
    tally
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

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_hal::HostApi;
    use tandem_runtime::{Registry, Runtime};

    /// A client whose runtime stopped gives up after the batch in flight,
    /// instead of submitting (and failing) every task left.
    #[test]
    fn a_client_stops_once_the_runtime_died() {
        let name = format!("tandem-test-host-client-{}", std::process::id());
        let config = Config {
            workers: 1,
            devices: DeviceSelection::Only(vec![]),
            cpu_segment_name: Some(name.clone()),
            ..Config::default()
        };
        let runtime =
            Runtime::start_with(HostApi::with_devices(0), config, Registry::with_builtins())
                .unwrap();
        let client = Client::attach(&name).unwrap();
        let args = Args {
            segment: Some(name),
            tasks: 1_000_000,
            batch: 8,
            timeout_s: 60,
        };
        let stop = AtomicU32::new(0);
        let deadline = Instant::now() + Duration::from_secs(60);
        let before = submit_all(
            &client,
            &Args {
                tasks: 16,
                ..args.clone()
            },
            &stop,
            deadline,
        );
        assert_eq!((before.right, before.gave_up), (16, None));
        runtime.shutdown().unwrap();
        let after = submit_all(&client, &args, &stop, deadline);
        assert_eq!(after.right, 0);
        assert!(after.gave_up.is_some(), "{after:?}");
        assert!(after.sent <= args.batch, "{after:?}");
    }
}
