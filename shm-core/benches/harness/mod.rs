//! The small benchmark harness every shm-core benchmark shares: run a closure
//! that performs `n` operations, repeat, keep the median, and print rows that
//! compare Tandem against its peers measured in the same run.

use std::time::{Duration, Instant};

/// Operations per second of `op`, which must perform `ops` operations per call.
/// Runs one warm-up call, then `reps` timed calls, and returns the median rate.
pub fn rate(ops: u64, reps: usize, mut op: impl FnMut()) -> f64 {
    op();
    let mut times: Vec<Duration> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            op();
            start.elapsed()
        })
        .collect();
    times.sort();
    ops as f64 / times[reps / 2].as_secs_f64()
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
