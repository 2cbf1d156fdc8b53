//! `tandem`: Tandem's command-line entry point.
//!
//! * `tandem demo`: a producer and a consumer process exchange records
//!   through one shared segment (shm-core's ring and freeing allocator).
//! * `tandem exchange produce <segment> <records>` / `tandem exchange consume <segment>`:
//!   one side of that exchange (what `demo` starts twice). Exit status 3 means
//!   the producer died mid-stream after the records it sent were received.

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use tandem_runtime::exchange::{consume, produce, ExchangeError};

const USAGE: &str = "usage: tandem demo [--records N]
       tandem exchange produce <segment> <records>
       tandem exchange consume <segment>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["demo"] => demo(1_000_000),
        ["demo", "--records", n] => match n.parse() {
            Ok(n) => demo(n),
            Err(e) => usage_error(&format!("bad --records {n:?}: {e}")),
        },
        ["exchange", "produce", name, records] => match records.parse() {
            Ok(records) => finish(produce(name, records)),
            Err(e) => usage_error(&format!("bad record count {records:?}: {e}")),
        },
        ["exchange", "consume", name] => finish(consume(name).map(|_| ())),
        _ => usage_error("unknown command"),
    }
}

fn usage_error(why: &str) -> ExitCode {
    eprintln!("tandem: {why}\n{USAGE}");
    ExitCode::from(2)
}

fn finish(result: Result<(), ExchangeError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tandem: {e}");
            println!("error: {e}");
            ExitCode::from(match e {
                ExchangeError::ProducerDied { .. } => 3,
                _ => 2,
            })
        }
    }
}

/// Starts both sides as child processes and reports what they printed.
fn demo(records: u64) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return usage_error(&format!("cannot find own executable: {e}")),
    };
    let name = format!("tandem-demo-{}", std::process::id());
    let spawn = |args: &[&str]| {
        Command::new(&exe)
            .arg("exchange")
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
    };
    println!(
        "tandem demo: host backend, shm-core exchange of {records} records between two processes"
    );
    let start = Instant::now();
    let mut producer = match spawn(&["produce", &name, &records.to_string()]) {
        Ok(child) => child,
        Err(e) => return usage_error(&format!("cannot start producer: {e}")),
    };
    let Some(out) = producer.stdout.take() else {
        return usage_error("producer has no stdout");
    };
    let mut producer_lines = BufReader::new(out).lines();
    // The producer announces `ready` once the segment is initialised: no sleeps.
    match producer_lines.next() {
        Some(Ok(line)) if line.starts_with("ready") => {
            println!(
                "  producer pid {}: segment /dev/shm/{name} mapped at {}",
                producer.id(),
                &line[6..]
            )
        }
        other => {
            let _ = producer.kill();
            let _ = producer.wait();
            return usage_error(&format!("producer did not get ready: {other:?}"));
        }
    }
    let mut consumer = match spawn(&["consume", &name]) {
        Ok(child) => child,
        Err(e) => {
            let _ = producer.kill();
            let _ = producer.wait();
            return usage_error(&format!("cannot start consumer: {e}"));
        }
    };
    let mut last = String::new();
    if let Some(out) = consumer.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.starts_with("attached") {
                println!(
                    "  consumer pid {}: same segment mapped at {}",
                    consumer.id(),
                    &line[9..]
                );
            }
            last = line;
        }
    }
    let consumer_status = consumer.wait();
    let producer_status = producer.wait();
    let secs = start.elapsed().as_secs_f64();
    match (consumer_status, producer_status) {
        (Ok(c), Ok(p)) if c.success() && p.success() => {
            println!("  {last}");
            println!(
                "  {records} records in {secs:.3} s: {:.2} M records/s",
                records as f64 / secs / 1e6
            );
            ExitCode::SUCCESS
        }
        (c, p) => {
            eprintln!("tandem demo failed: consumer {c:?}, producer {p:?}; last line: {last}");
            ExitCode::from(1)
        }
    }
}
