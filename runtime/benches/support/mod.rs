//! What the runtime's benches share: microseconds for their rows, rates
//! pooled over several runtimes, and the way a CUDA part that cannot run
//! says so (a failure under `TANDEM_REQUIRE_GPU=1`, never a quiet skip).

use std::time::Duration;

/// `d` in microseconds.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runtimes started for a throughput row, and runs in each (both odd: the
/// median is a run). A runtime's runs tend to be slow or fast together, and
/// runs of separate runtimes spread far wider than one runtime's
/// (docs/perf/2026-11-25-h100.md, "Why the 8-worker row moves"): one
/// runtime is a sample of one, so a row is the median of all its runs, and
/// also prints each runtime's median.
pub const RUNTIMES: usize = 3;
pub const RUNS_PER_RUNTIME: usize = 3;

/// Rates measured in several runtimes (`runs[r]`: runtime r's), pooled.
pub struct Pooled {
    /// The median of all the runs.
    pub median: f64,
    pub low: f64,
    pub high: f64,
    /// Each runtime's median.
    pub per_runtime: Vec<f64>,
    pub runs: usize,
}

impl Pooled {
    pub fn of(runs: &[Vec<f64>]) -> Pooled {
        let sorted = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v
        };
        let all = sorted(runs.iter().flatten().copied().collect());
        Pooled {
            median: all[all.len() / 2],
            low: all[0],
            high: all[all.len() - 1],
            per_runtime: runs
                .iter()
                .map(|r| sorted(r.clone())[r.len() / 2])
                .collect(),
            runs: all.len(),
        }
    }

    /// "median of <runs> runs in <runtimes> runtimes; <low> - <high>; each
    /// runtime's median <a> / <b> / ...", in millions.
    pub fn spread_in_millions(&self) -> String {
        let per: Vec<String> = self
            .per_runtime
            .iter()
            .map(|r| format!("{:.2}", r / 1e6))
            .collect();
        format!(
            "median of {} runs in {} runtimes; {:.2} - {:.2}; each runtime's median {}",
            self.runs,
            self.per_runtime.len(),
            self.low / 1e6,
            self.high / 1e6,
            per.join(" / ")
        )
    }
}

/// Prints `CUDA: skipped: {why}`, or exits 1 when `TANDEM_REQUIRE_GPU=1`
/// asks for a GPU.
pub fn skip_cuda(why: &str) {
    if std::env::var("TANDEM_REQUIRE_GPU").as_deref() == Ok("1") {
        eprintln!("CUDA: {why} (or not compiled in), but TANDEM_REQUIRE_GPU=1");
        std::process::exit(1);
    }
    println!("CUDA: skipped: {why}");
}
