//! The small benchmark harness every shm-core benchmark shares: time closures
//! that each perform `n` operations, taking turns, keep each one's median, and
//! print rows that compare Tandem against its peers measured in the same run.

pub mod cpus;

use std::time::{Duration, Instant};

/// Operations per second of each of `runs`, every one of which performs `ops`
/// operations per call, timed by [`interleaved_times`]. Returns each run's
/// median rate, in `runs`' order.
pub fn interleaved_rates<const N: usize>(
    ops: u64,
    reps: usize,
    runs: [&mut dyn FnMut(); N],
) -> [f64; N] {
    let mut timed = runs.map(|run| {
        move || {
            let start = Instant::now();
            run();
            start.elapsed()
        }
    });
    interleaved_times(reps, timed.each_mut().map(|run| run as _))
        .map(|time| ops as f64 / time.as_secs_f64())
}

/// The median of the times each of `runs` reports for itself (a run that
/// sets up and tears down outside its clock times itself). A warm-up round
/// comes first; then each of `reps` rounds calls every run once, in turn (A,
/// B, C, A, B, C, ...), so that drift (clock speed, machine load) hits all of
/// them alike rather than whichever ran last. Returns each run's median, in
/// `runs`' order.
pub fn interleaved_times<const N: usize>(
    reps: usize,
    mut runs: [&mut dyn FnMut() -> Duration; N],
) -> [Duration; N] {
    let mut times: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::with_capacity(reps));
    for round in 0..=reps {
        for (run, times) in runs.iter_mut().zip(&mut times) {
            let time = run();
            if round > 0 {
                times.push(time);
            }
        }
    }
    times.map(|mut times| {
        times.sort();
        times[reps / 2]
    })
}

/// Prints one comparison row: Tandem's rate, the peer's, and their ratio.
/// `target`, when set, is the ratio Tandem must reach.
pub fn compare(what: &str, tandem: f64, peer_name: &str, peer: f64, target: Option<f64>) {
    let ratio = tandem / peer;
    let verdict = match target {
        Some(t) if ratio >= t => format!("(target >= {t}x: meets)"),
        Some(t) => format!("(target >= {t}x: BELOW)"),
        None => "(no target)".to_owned(),
    };
    println!(
        "{what:<34} tandem {:>9.2} M/s | {peer_name:<22} {:>9.2} M/s | ratio {ratio:>6.2}x {verdict}",
        tandem / 1e6,
        peer / 1e6,
    );
}

/// The CPU model and how many CPUs this process may use, for the header line
/// of a benchmark's output (results from different hosts differ).
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|name| name.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cpus} CPUs available")
}
