//! `cargo xtask bench [--gpu]`: runs every bench target of every workspace package (found with
//! `cargo metadata`), shm-core's first. The benches print their own comparison tables; this
//! only runs them, one `cargo bench` each, and sums up which ran.

use crate::{backend::Backend, cmd::Cmd, error::XtaskError, metadata::Metadata};
use std::{path::Path, process::ExitCode};

/// The package whose benches (the ring and allocator comparisons) run first.
const FIRST_PACKAGE: &str = "tandem-shm-core";

/// One `cargo bench` to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchRun {
    /// Package name.
    pub package: String,
    /// Bench target name.
    pub bench: String,
    /// The package's backend feature to turn on, if this is a GPU variant.
    pub feature: Option<&'static str>,
}

impl BenchRun {
    fn label(&self) -> String {
        match self.feature {
            Some(feature) => format!("{}/{} (--features {feature})", self.package, self.bench),
            None => format!("{}/{}", self.package, self.bench),
        }
    }

    fn command(&self, root: &Path) -> Cmd {
        let cmd = Cmd::cargo(root).args(["bench", "-p", &self.package, "--bench", &self.bench]);
        match self.feature {
            Some(feature) => cmd.args(["--features", feature]),
            None => cmd,
        }
    }
}

/// The benches to run and, for those left out, why. Each bench runs with default features;
/// with `gpu`, packages with a `cuda` feature run each bench again with it, and the CUDA
/// backend's own crate (always CUDA) runs. The HIP backend's crate needs ROCm to build and an
/// AMD GPU to measure anything, so its benches are only listed.
pub fn plan(metadata: &Metadata, gpu: bool) -> (Vec<BenchRun>, Vec<String>) {
    let mut packages: Vec<_> = metadata.workspace_packages().collect();
    packages.sort_by_key(|p| (p.name != FIRST_PACKAGE, p.name.clone()));
    let cuda = Backend::Cuda.feature();
    let (mut runs, mut skipped) = (Vec::new(), Vec::new());
    for package in packages {
        for target in package.targets.iter().filter(|t| t.is("bench")) {
            let run = |feature| BenchRun {
                package: package.name.clone(),
                bench: target.name.clone(),
                feature,
            };
            if package.name == Backend::Hip.hal_package() {
                skipped.push(format!(
                    "{}/{}: HIP backend benches are not run (no AMD GPU)",
                    package.name, target.name
                ));
            } else if package.name == Backend::Cuda.hal_package() {
                if gpu {
                    runs.push(run(None));
                } else {
                    skipped.push(format!("{}/{}: needs --gpu", package.name, target.name));
                }
            } else {
                runs.push(run(None));
                if gpu && package.has_feature(cuda) {
                    runs.push(run(Some(cuda)));
                }
            }
        }
    }
    (runs, skipped)
}

/// Runs the planned benches one after another and prints which passed.
pub fn run(metadata: &Metadata, gpu: bool) -> Result<ExitCode, XtaskError> {
    let (runs, skipped) = plan(metadata, gpu);
    if runs.is_empty() {
        println!("xtask: no bench targets to run");
    }
    let mut results = Vec::new();
    for bench in &runs {
        println!("\n=== bench {} ===", bench.label());
        let outcome = bench.command(&metadata.workspace_root).run()?;
        results.push((bench.label(), outcome));
    }
    println!("\n=== summary ===");
    for (label, outcome) in &results {
        let word = if outcome.success() {
            "passed"
        } else {
            "FAILED"
        };
        let secs = outcome.elapsed.as_secs_f64();
        println!("{word:<7} {secs:>8.1} s  {label}");
    }
    for why in &skipped {
        println!("skipped           {why}");
    }
    let failed = results.iter().filter(|(_, o)| !o.success()).count();
    println!("xtask: {} passed, {failed} failed", results.len() - failed);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::SAMPLE;

    fn labels(runs: &[BenchRun]) -> Vec<String> {
        runs.iter().map(BenchRun::label).collect()
    }

    #[test]
    fn shm_core_first_and_gpu_crates_left_out_without_gpu() {
        let meta = Metadata::parse(SAMPLE).unwrap();
        let (runs, skipped) = plan(&meta, false);
        assert_eq!(
            labels(&runs),
            [
                "tandem-shm-core/rings",
                "tandem-shm-core/alloc",
                "tandem-runtime/launch"
            ]
        );
        assert_eq!(skipped.len(), 2);
        assert!(skipped[0].starts_with("tandem-hal-cuda/copy: needs --gpu"));
        assert!(skipped[1].starts_with("tandem-hal-hip/hipcopy"));
    }

    #[test]
    fn gpu_adds_cuda_variants_and_the_cuda_crate() {
        let meta = Metadata::parse(SAMPLE).unwrap();
        let (runs, skipped) = plan(&meta, true);
        assert_eq!(
            labels(&runs),
            [
                "tandem-shm-core/rings",
                "tandem-shm-core/alloc",
                "tandem-hal-cuda/copy",
                "tandem-runtime/launch",
                "tandem-runtime/launch (--features cuda)"
            ]
        );
        assert_eq!(skipped.len(), 1);
        assert_eq!(
            runs[4].command(Path::new("/ws")).display(),
            "cargo bench -p tandem-runtime --bench launch --features cuda"
        );
    }
}
