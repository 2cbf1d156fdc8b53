//! The figures the demo reports: what a launch did, launches on several devices added up, and
//! round-trip percentiles.

use std::time::Duration;

use serde::Serialize;
use tandem_runtime::kernels::{expected_add_sum, EchoLaunch, EchoOutcome};

/// Percentile `p` (0..=100) of sorted `values`.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * p / 100.0).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Microseconds, for reports.
pub(super) fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What a kernel launch of the demo did.
#[derive(Serialize)]
pub(super) struct LaunchReport {
    blocks: u32,
    threads: u32,
    tasks_per_thread: u64,
    pub(super) tasks: u64,
    pub(super) seconds: f64,
    pub(super) tasks_per_second: f64,
    /// Threads whose tasks failed (a nonzero return code or a wait error).
    pub(super) failed_threads: usize,
    /// Threads whose answers did not add up.
    pub(super) wrong_answers: usize,
}

impl LaunchReport {
    pub(super) fn of(launch: &EchoLaunch, outcome: &EchoOutcome) -> Self {
        let tasks = outcome.results.len() as u64 * launch.tasks_per_thread;
        let wrong_answers = outcome
            .results
            .iter()
            .enumerate()
            .filter(|(r, &sum)| sum != expected_add_sum(*r as u64, launch.tasks_per_thread))
            .count();
        Self {
            blocks: launch.blocks,
            threads: launch.threads,
            tasks_per_thread: launch.tasks_per_thread,
            tasks,
            seconds: outcome.elapsed.as_secs_f64(),
            tasks_per_second: tasks as f64 / outcome.elapsed.as_secs_f64(),
            failed_threads: outcome.failed_threads(),
            wrong_answers,
        }
    }

    pub(super) fn failures(&self) -> u64 {
        (self.failed_threads + self.wrong_answers) as u64
    }
}

/// Launches that ran at the same time on several devices, added up: their
/// tasks over the time from the first launch to the last one's end.
#[derive(Serialize)]
pub(super) struct TotalReport {
    pub(super) devices: usize,
    pub(super) tasks: u64,
    pub(super) seconds: f64,
    pub(super) tasks_per_second: f64,
    failed_threads: usize,
    wrong_answers: usize,
}

impl TotalReport {
    pub(super) fn of<'a>(
        launches: impl IntoIterator<Item = &'a LaunchReport>,
        wall: Duration,
    ) -> Self {
        let mut total = Self {
            devices: 0,
            tasks: 0,
            seconds: wall.as_secs_f64(),
            tasks_per_second: 0.0,
            failed_threads: 0,
            wrong_answers: 0,
        };
        for launch in launches {
            total.devices += 1;
            total.tasks += launch.tasks;
            total.failed_threads += launch.failed_threads;
            total.wrong_answers += launch.wrong_answers;
        }
        total.tasks_per_second = total.tasks as f64 / total.seconds;
        total
    }

    pub(super) fn failures(&self) -> u64 {
        (self.failed_threads + self.wrong_answers) as u64
    }
}

/// Round-trip percentiles, in microseconds.
#[derive(Serialize)]
pub(super) struct Latency {
    pub(super) samples: usize,
    pub(super) p50_us: f64,
    pub(super) p90_us: f64,
    pub(super) p99_us: f64,
    pub(super) min_us: f64,
    pub(super) max_us: f64,
}

impl Latency {
    pub(super) fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        let at = |p| micros(percentile(&samples, p));
        Self {
            samples: samples.len(),
            p50_us: at(50.0),
            p90_us: at(90.0),
            p99_us: at(99.0),
            min_us: at(0.0),
            max_us: at(100.0),
        }
    }
}
