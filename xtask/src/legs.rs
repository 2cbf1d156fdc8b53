//! `cargo xtask test [LEG...]`: the test legs, which of them must run, and the summary.
//!
//! A leg that runs and fails is always a failure. A leg that cannot run (no loom tests, no HIP
//! toolchain, no Garage) is a failure only when it is required: named on the command line, or
//! every leg under `CI=true`; otherwise it is a note in the summary.

use crate::{
    backend::{Backend, HipToolchain},
    bindings,
    cluster::ClusterTools,
    cmd::{find_on_path, is_executable, Cmd},
    error::XtaskError,
    metadata::Metadata,
    no_libclang,
    python::Venv,
    test_result::TestTally,
};
use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::ExitCode,
    time::{Duration, Instant},
};

/// One leg of the test matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leg {
    /// Workspace tests with default features (the host backend), shm-core's tests, the blob
    /// store's kill -9 test and the fork gate's stress test again in release, then the
    /// host-client and user-pool examples.
    Host,
    /// The loom models in `shm-core/tests/loom_*.rs` and tandem-hal's `loom` unit tests.
    Loom,
    /// The CUDA backend's crates with the `cuda` features.
    Cuda,
    /// The HIP backend's crates with the `hip` features (needs ROCm).
    Hip,
    /// The committed bindings are what bindgen makes of the headers (needs libclang).
    Bindings,
    /// The C ABI: its committed header is what cbindgen makes of it, its package installs, and
    /// the C++ examples build with CMake and the host compiler and run against a runtime and a
    /// share daemon (needs cmake and a C++ compiler).
    Cpp,
    /// The build without libclang, and drifted headers failing it (needs root).
    NoLibclang,
    /// The Garage harness, and the blob store's object tier (in process, and `tandem blob`
    /// processes as nodes) against real Garage clusters (needs a `garage` binary).
    S3,
    /// The Python package's pytest suite and stubtest, built with maturin into a virtual
    /// environment (needs one with maturin, pytest, NumPy and mypy: `.ci/run` makes it).
    Python,
    /// The share daemon's cluster: two daemons as two nodes fetching from each other through
    /// NIXL, from Rust, C and Python, against an etcd the tests start (needs etcd, and NIXL in
    /// the Python environment: `.ci/run` installs both).
    Cluster,
    /// rustfmt and clippy.
    Lint,
}

impl Leg {
    /// Every leg, in the order a plain `cargo xtask test` runs them.
    pub const ALL: [Leg; 11] = [
        Leg::Host,
        Leg::Loom,
        Leg::Cuda,
        Leg::Hip,
        Leg::Bindings,
        Leg::Cpp,
        Leg::NoLibclang,
        Leg::S3,
        Leg::Python,
        Leg::Cluster,
        Leg::Lint,
    ];

    /// The name used on the command line and in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Leg::Host => "host",
            Leg::Loom => "loom",
            Leg::Cuda => "cuda",
            Leg::Hip => "hip",
            Leg::Bindings => "bindings",
            Leg::Cpp => "cpp",
            Leg::NoLibclang => "no-libclang",
            Leg::S3 => "s3",
            Leg::Python => "python",
            Leg::Cluster => "cluster",
            Leg::Lint => "lint",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|leg| leg.name() == name)
    }
}

/// A leg to run and whether it must run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedLeg {
    /// The leg.
    pub leg: Leg,
    /// A leg that cannot run is then a failure rather than a note.
    pub required: bool,
}

/// Which legs to run: the named ones (each once, in the order given, all required), or every
/// leg when none is named (required only when `ci`).
pub fn plan(named: &[String], ci: bool) -> Result<Vec<PlannedLeg>, XtaskError> {
    if named.is_empty() {
        return Ok(Leg::ALL
            .into_iter()
            .map(|leg| PlannedLeg { leg, required: ci })
            .collect());
    }
    let mut planned: Vec<PlannedLeg> = Vec::new();
    for name in named {
        let leg = Leg::from_name(name).ok_or_else(|| {
            let legs: Vec<&str> = Leg::ALL.iter().map(|leg| leg.name()).collect();
            XtaskError::Usage(format!(
                "unknown test leg `{name}`; legs are: {}",
                legs.join(", ")
            ))
        })?;
        if !planned.iter().any(|p| p.leg == leg) {
            planned.push(PlannedLeg {
                leg,
                required: true,
            });
        }
    }
    Ok(planned)
}

/// How a leg ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LegResult {
    Passed,
    /// Ran and failed; the text says which commands.
    Failed(String),
    /// Could not run; the text says why.
    NotRun(String),
}

/// What a leg's result counts as, given whether it was required.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Passed,
    Failed,
    /// Not run and not required: reported, not counted.
    Note,
}

impl LegResult {
    fn verdict(&self, required: bool) -> Verdict {
        match self {
            LegResult::Passed => Verdict::Passed,
            LegResult::Failed(_) => Verdict::Failed,
            LegResult::NotRun(_) if required => Verdict::Failed,
            LegResult::NotRun(_) => Verdict::Note,
        }
    }

    fn describe(&self) -> String {
        match self {
            LegResult::Passed => "passed".into(),
            LegResult::Failed(why) => format!("FAILED: {why}"),
            LegResult::NotRun(why) => format!("not run: {why}"),
        }
    }
}

/// What one leg did.
struct LegReport {
    planned: PlannedLeg,
    result: LegResult,
    /// Things worth saying that do not change the result (a part skipped on this machine).
    notes: Vec<String>,
    tests: TestTally,
    elapsed: Duration,
}

/// The environment the legs run in.
pub struct TestContext<'a> {
    /// Workspace description (target dir, root).
    pub metadata: &'a Metadata,
    /// `CI=true`: every part of every leg must run.
    pub ci: bool,
    /// The HIP toolchain, or why there is none.
    pub hip: Result<HipToolchain, String>,
    /// The Garage binary the s3 leg runs its clusters with, or why there is none.
    pub garage: Result<PathBuf, String>,
    /// The Python environment the python leg builds and tests in, or why there is none.
    pub python: Result<Venv, String>,
    /// The etcd and NIXL the cluster leg runs with, or why there are none.
    pub cluster: Result<ClusterTools, String>,
}

/// The environment variable that names the Garage binary (`tandem_tests::garage` reads it too).
const GARAGE_ENV: &str = "TANDEM_GARAGE";

/// The Garage binary: `TANDEM_GARAGE` (`env`) if set, which must then be an executable, else
/// `garage` on `PATH`; `Err` says what is missing.
pub fn find_garage(env: Option<OsString>) -> Result<PathBuf, String> {
    match env.filter(|path| !path.is_empty()) {
        Some(path) => {
            let path = PathBuf::from(path);
            if is_executable(&path) {
                Ok(path)
            } else {
                Err(format!(
                    "{GARAGE_ENV}={} is not an executable file",
                    path.display()
                ))
            }
        }
        None => find_on_path("garage").ok_or_else(|| {
            format!(
                "no Garage: {GARAGE_ENV} is not set and `garage` is not on PATH \
                 (.ci/run installs it with cargo install)"
            )
        }),
    }
}

/// Runs the planned legs one after another, prints the summary, and says how to exit.
pub fn run(ctx: &TestContext<'_>, planned: &[PlannedLeg]) -> ExitCode {
    if let Some(value) = std::env::var_os("TANDEM_REQUIRE_GPU") {
        println!(
            "xtask: TANDEM_REQUIRE_GPU={} (passed through to the tests)",
            value.to_string_lossy()
        );
    }
    let reports: Vec<LegReport> = planned.iter().map(|&p| run_leg(ctx, p)).collect();
    print_summary(&reports)
}

fn run_leg(ctx: &TestContext<'_>, planned: PlannedLeg) -> LegReport {
    let name = planned.leg.name();
    let need = if planned.required {
        "required"
    } else {
        "optional"
    };
    println!("\n=== leg {name} ({need}) ===");
    let start = Instant::now();
    let mut notes = Vec::new();
    let mut tests = TestTally::default();
    let result = match leg_commands(ctx, planned.leg, &mut notes) {
        Err(why) => LegResult::NotRun(why),
        Ok(commands) => run_commands(&commands, &mut tests),
    };
    let report = LegReport {
        planned,
        result,
        notes,
        tests,
        elapsed: start.elapsed(),
    };
    for note in &report.notes {
        println!("note: {note}");
    }
    println!(
        "=== leg {name}: {} in {:.1} s (tests passed/failed/ignored: {})",
        report.result.describe(),
        report.elapsed.as_secs_f64(),
        report.tests.short()
    );
    report
}

/// The commands of a leg, or why the leg cannot run here. Parts that are optional on this
/// machine and missing are added to `notes`.
fn leg_commands(
    ctx: &TestContext<'_>,
    leg: Leg,
    notes: &mut Vec<String>,
) -> Result<Vec<Cmd>, String> {
    let root = ctx.metadata.workspace_root.as_path();
    let cargo = || Cmd::cargo(root);
    match leg {
        Leg::Host => Ok(host_commands(root)),
        Leg::Loom => loom_commands(ctx),
        Leg::Cuda => Ok(vec![backend_tests(cargo(), Backend::Cuda)]),
        Leg::Hip => {
            let hip = ctx.hip.as_ref().map_err(Clone::clone)?;
            Ok(vec![hip.configure(backend_tests(cargo(), Backend::Hip))])
        }
        Leg::Bindings => {
            bindings::load_libclang()?;
            let xtask =
                std::env::current_exe().map_err(|e| format!("finding xtask's own binary: {e}"))?;
            Ok(vec![Cmd::new(xtask, root).args(["bindings", "--check"])])
        }
        Leg::Cpp => cpp_commands(ctx.metadata),
        Leg::NoLibclang => Ok(vec![no_libclang::leg_command(
            &ctx.metadata.target_directory,
        )?]),
        Leg::S3 => s3_commands(ctx),
        Leg::Python => {
            let venv = ctx.python.as_ref().map_err(Clone::clone)?;
            Ok(venv.leg_commands(root, &ctx.metadata.target_directory))
        }
        Leg::Cluster => {
            let tools = ctx.cluster.as_ref().map_err(Clone::clone)?;
            let venv = ctx.python.as_ref().map_err(Clone::clone)?;
            Ok(crate::cluster::leg_commands(
                root,
                &ctx.metadata.target_directory,
                tools,
                venv,
            ))
        }
        Leg::Lint => lint_commands(ctx, notes),
    }
}

/// The `host` leg: the workspace's tests with default features, the tests that race in
/// release, and the examples that run against a runtime.
fn host_commands(root: &Path) -> Vec<Cmd> {
    let cargo = || Cmd::cargo(root);
    let mut cmd = cargo().args(["test", "--workspace"]);
    for backend in Backend::ALL {
        cmd = cmd.args(["--exclude", backend.hal_package()]);
    }
    // The host-client example forks `tandem run`, which it finds next to it in the
    // target directory: built first.
    let example = ["run", "-p", "tandem-examples", "--example", "host_client"];
    // shm-core's stress and model tests again in release: optimised code runs threads
    // at other relative speeds and interleaves them otherwise than a debug build.
    let shm_core_release = ["test", "-p", "tandem-shm-core", "--release", "--tests"];
    // The blob store's kill -9 test too: a put's steps race the kill otherwise there.
    let blob_crash_release = ["test", "-p", "tandem-blob", "--release", "--test", "crash"];
    // And the fork gate's stress test: its forks race the guarded locks.
    let fork_gate_release = [
        "test",
        "-p",
        "tandem-process",
        "--release",
        "--test",
        "fork_gate",
    ];
    vec![
        cmd,
        cargo().args(shm_core_release),
        cargo().args(blob_crash_release),
        cargo().args(fork_gate_release),
        cargo().args(["build", "-p", "tandem-cli", "--bin", "tandem"]),
        cargo().args(example),
        cargo().args(["run", "-p", "tandem-examples", "--example", "user_pool"]),
    ]
}

/// The `loom` leg: shm-core's loom models and the host backend's, in a target folder of their
/// own.
fn loom_commands(ctx: &TestContext<'_>) -> Result<Vec<Cmd>, String> {
    let root = ctx.metadata.workspace_root.as_path();
    let cargo = || Cmd::cargo(root);
    let tests_dir = root.join("shm-core/tests");
    let models = loom_tests(&tests_dir)?;
    let loom_cargo = || {
        cargo()
            .env("RUSTFLAGS", loom_rustflags(std::env::var_os("RUSTFLAGS")))
            // `--cfg loom` changes every crate's build; a target dir of its own keeps
            // the normal builds from being invalidated by each loom run.
            .env(
                "CARGO_TARGET_DIR",
                ctx.metadata.target_directory.join("loom"),
            )
    };
    let mut cmd = loom_cargo().args(["test", "-p", "tandem-shm-core", "--release"]);
    for model in models {
        cmd = cmd.args(["--test", &model]);
    }
    // The host backend's model is a unit test (its countdown is crate-private).
    let hal = loom_cargo().args([
        "test",
        "-p",
        "tandem-hal",
        "--release",
        "--lib",
        "loom_models",
    ]);
    Ok(vec![cmd, hal])
}

/// The `s3` leg: the suites against the Garage that was found.
fn s3_commands(ctx: &TestContext<'_>) -> Result<Vec<Cmd>, String> {
    let garage = ctx.garage.as_ref().map_err(Clone::clone)?;
    // The tests skip without a Garage; here one was found, so a skip would be a bug.
    let s3_cargo = || {
        Cmd::cargo(ctx.metadata.workspace_root.as_path())
            .env(GARAGE_ENV, garage)
            .env("TANDEM_REQUIRE_S3", "1")
    };
    Ok(vec![
        s3_cargo().args(["test", "-p", "tandem-tests", "--test", "garage"]),
        s3_cargo().args(["test", "-p", "tandem-blob", "--test", "object_tier"]),
        s3_cargo().args(["test", "-p", "tandem-cli", "--test", "blob_object"]),
    ])
}

/// The `lint` leg: formatting, `cargo xtask structure`, `cargo xtask perf-report --check` and
/// clippy with each feature set; clippy
/// with the hip features where hipcc is found (else a note, or a failure under CI).
fn lint_commands(ctx: &TestContext<'_>, notes: &mut Vec<String>) -> Result<Vec<Cmd>, String> {
    let cargo = || Cmd::cargo(ctx.metadata.workspace_root.as_path());
    let mut commands = vec![
        cargo().args(["fmt", "--all", "--check"]),
        cargo().args(["xtask", "structure"]),
        // The perf plots and the README's plots section are what the records' blocks make.
        cargo().args(["xtask", "perf-report", "--check"]),
        clippy(cargo(), Backend::Cuda),
        // The Python package has a `cuda` feature but no `hip` one, so it is not among
        // the backends' feature packages: its CUDA code is linted here.
        cargo().args([
            "clippy",
            "-p",
            "tandem-python",
            "--all-targets",
            "--features",
            "cuda",
            "--",
            "-D",
            "warnings",
        ]),
    ];
    match &ctx.hip {
        Ok(hip) => commands.push(hip.configure(clippy(cargo(), Backend::Hip))),
        Err(why) if ctx.ci => return Err(format!("clippy with hip features: {why}")),
        Err(why) => notes.push(format!("clippy with hip features not run: {why}")),
    }
    Ok(commands)
}

/// The `cpp` leg: the header's drift check, the package installed into the target directory,
/// examples/cpp configured and built there with the host compiler, and tandem-capi's tests
/// (bad input, the installed package with pkg-config, and the examples against a runtime and a
/// daemon they start) told where.
fn cpp_commands(metadata: &Metadata) -> Result<Vec<Cmd>, String> {
    for tool in ["cmake", "c++", "pkg-config"] {
        if find_on_path(tool).is_none() {
            return Err(format!("`{tool}` is not on PATH (.ci/run installs it)"));
        }
    }
    let root = metadata.workspace_root.as_path();
    let work = metadata.target_directory.join("cpp");
    let prefix = work.join("prefix");
    let build = work.join("build");
    let xtask = std::env::current_exe().map_err(|e| format!("finding xtask's own binary: {e}"))?;
    let mut prefix_path = OsString::from("-DCMAKE_PREFIX_PATH=");
    prefix_path.push(&prefix);
    Ok(vec![
        Cmd::new(&xtask, root).args(["capi-header", "--check"]),
        Cmd::cargo(root).args(["build", "-p", "tandem-cli", "--bin", "tandem"]),
        Cmd::new(&xtask, root)
            .args(["install-capi", "--debug", "--prefix"])
            .arg(&prefix),
        Cmd::new("cmake", root)
            .args(["-S", "examples/cpp", "-B"])
            .arg(&build)
            .arg(prefix_path),
        Cmd::new("cmake", root).arg("--build").arg(&build),
        Cmd::cargo(root)
            .args(["test", "-p", "tandem-capi"])
            .env("TANDEM_CPP_EXAMPLES", &build)
            .env("TANDEM_CAPI_PREFIX", &prefix)
            .env("TANDEM_REQUIRE_CPP", "1"),
    ])
}

/// `cargo test` over a backend's crates with its features.
fn backend_tests(cargo: Cmd, backend: Backend) -> Cmd {
    cargo
        .arg("test")
        .args(backend.test_package_args())
        .args(["--features".to_owned(), backend.features_value()])
}

/// `cargo clippy` over the workspace with a backend's features. The other backend's own crate
/// is left out: it does not depend on these features, and the HIP one needs ROCm to build.
fn clippy(cargo: Cmd, backend: Backend) -> Cmd {
    let other = match backend {
        Backend::Cuda => Backend::Hip,
        Backend::Hip => Backend::Cuda,
    };
    cargo
        .args(["clippy", "--workspace", "--exclude", other.hal_package()])
        .args(["--all-targets", "--features"])
        .arg(backend.features_value())
        .args(["--", "-D", "warnings"])
}

/// `RUSTFLAGS` for the loom build: the caller's flags, if any, plus `--cfg loom`.
fn loom_rustflags(existing: Option<OsString>) -> OsString {
    match existing {
        Some(mut flags) if !flags.is_empty() => {
            flags.push(" --cfg loom");
            flags
        }
        _ => "--cfg loom".into(),
    }
}

/// The names of the loom test targets: the stems of `loom_*.rs` in `dir`, sorted.
fn loom_tests(dir: &Path) -> Result<Vec<String>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {} for loom_*.rs: {e}", dir.display()))?;
    let mut models: Vec<String> = entries
        .filter_map(|entry| entry.ok().map(|e| PathBuf::from(e.file_name())))
        .filter(|name| name.extension().is_some_and(|ext| ext == "rs"))
        .filter_map(|name| name.file_stem()?.to_str().map(str::to_owned))
        .filter(|stem| stem.starts_with("loom_"))
        .collect();
    if models.is_empty() {
        return Err(format!("no loom_*.rs in {}", dir.display()));
    }
    models.sort();
    Ok(models)
}

/// Runs every command (all of them, so that one failure does not hide another) and returns
/// the leg's result.
fn run_commands(commands: &[Cmd], tests: &mut TestTally) -> LegResult {
    let mut failures = Vec::new();
    for cmd in commands {
        let outcome = cmd.run_lines(|line| {
            println!("{line}");
            tests.observe(line);
        });
        match outcome {
            Ok(outcome) if outcome.success() => {}
            Ok(outcome) => failures.push(format!("`{}` ({})", cmd.display(), outcome.status)),
            Err(err) => failures.push(err.to_string()),
        }
    }
    if failures.is_empty() {
        LegResult::Passed
    } else {
        LegResult::Failed(failures.join("; "))
    }
}

fn print_summary(reports: &[LegReport]) -> ExitCode {
    println!("\n=== summary ===");
    println!(
        "{:<11} {:<9} {:>14} {:>9}  detail",
        "leg", "result", "tests p/f/i", "seconds"
    );
    let (mut passed, mut failed) = (0, 0);
    for report in reports {
        let verdict = report.result.verdict(report.planned.required);
        let word = match verdict {
            Verdict::Passed => {
                passed += 1;
                "passed"
            }
            Verdict::Failed => {
                failed += 1;
                "FAILED"
            }
            Verdict::Note => "note",
        };
        let mut detail = match &report.result {
            LegResult::Passed => String::new(),
            LegResult::Failed(why) => why.clone(),
            LegResult::NotRun(why) => format!("not run: {why}"),
        };
        for note in &report.notes {
            if !detail.is_empty() {
                detail.push_str("; ");
            }
            detail.push_str(note);
        }
        println!(
            "{:<11} {word:<9} {:>14} {:>9.1}  {detail}",
            report.planned.leg.name(),
            report.tests.short(),
            report.elapsed.as_secs_f64(),
        );
    }
    println!("xtask: {passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(legs: &[&str]) -> Vec<String> {
        legs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn no_named_leg_runs_all_required_only_under_ci() {
        let local = plan(&[], false).unwrap();
        assert_eq!(
            local.iter().map(|p| p.leg).collect::<Vec<_>>(),
            Leg::ALL.to_vec()
        );
        assert!(local.iter().all(|p| !p.required));
        assert!(plan(&[], true).unwrap().iter().all(|p| p.required));
    }

    #[test]
    fn named_legs_are_required_deduplicated_and_ordered_as_given() {
        let planned = plan(&names(&["lint", "hip", "lint"]), false).unwrap();
        assert_eq!(
            planned,
            [
                PlannedLeg {
                    leg: Leg::Lint,
                    required: true
                },
                PlannedLeg {
                    leg: Leg::Hip,
                    required: true
                }
            ]
        );
    }

    #[test]
    fn unknown_leg_is_a_usage_error() {
        let err = plan(&names(&["host", "rocm"]), false).unwrap_err();
        assert!(
            matches!(&err, XtaskError::Usage(m) if m.contains("rocm")),
            "{err}"
        );
    }

    #[test]
    fn a_leg_that_cannot_run_fails_only_when_required() {
        let not_run = LegResult::NotRun("hipcc is not on PATH".into());
        assert_eq!(not_run.verdict(true), Verdict::Failed);
        assert_eq!(not_run.verdict(false), Verdict::Note);
        assert_eq!(
            LegResult::Failed("x".into()).verdict(false),
            Verdict::Failed
        );
        assert_eq!(LegResult::Passed.verdict(true), Verdict::Passed);
    }

    #[test]
    fn loom_flags_keep_the_callers_flags() {
        assert_eq!(loom_rustflags(None), "--cfg loom");
        assert_eq!(loom_rustflags(Some("".into())), "--cfg loom");
        assert_eq!(
            loom_rustflags(Some("-C target-cpu=native".into())),
            "-C target-cpu=native --cfg loom"
        );
    }

    #[test]
    fn loom_tests_are_discovered_by_name_and_sorted() {
        let dir = std::env::temp_dir().join(format!("xtask-loom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for file in [
            "loom_spsc.rs",
            "loom_future.rs",
            "proptest_ring.rs",
            "loom_notes.md",
        ] {
            std::fs::write(dir.join(file), "").unwrap();
        }
        let found = loom_tests(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found.unwrap(), ["loom_future", "loom_spsc"]);
        assert!(loom_tests(&dir).unwrap_err().contains("cannot list"));
    }

    fn context(meta: &Metadata, ci: bool, hip: Result<HipToolchain, String>) -> TestContext<'_> {
        TestContext {
            metadata: meta,
            ci,
            hip,
            garage: Err("no Garage".into()),
            python: Err("no Python environment".into()),
            cluster: Err("no etcd".into()),
        }
    }

    #[test]
    fn host_and_cuda_commands() {
        let meta = Metadata::parse(crate::metadata::SAMPLE).unwrap();
        let ctx = context(&meta, false, Err("none".into()));
        let mut notes = Vec::new();
        let host = leg_commands(&ctx, Leg::Host, &mut notes).unwrap();
        assert_eq!(
            host[0].display(),
            "cargo test --workspace --exclude tandem-hal-cuda --exclude tandem-hal-hip"
        );
        assert_eq!(
            host[1].display(),
            "cargo test -p tandem-shm-core --release --tests"
        );
        assert_eq!(
            host[2].display(),
            "cargo test -p tandem-blob --release --test crash"
        );
        assert_eq!(
            host[3].display(),
            "cargo test -p tandem-process --release --test fork_gate"
        );
        assert_eq!(
            host[5].display(),
            "cargo run -p tandem-examples --example host_client"
        );
        assert_eq!(
            host[6].display(),
            "cargo run -p tandem-examples --example user_pool"
        );
        let cuda = leg_commands(&ctx, Leg::Cuda, &mut notes).unwrap();
        assert_eq!(
            cuda[0].display(),
            "cargo test -p tandem-hal-cuda -p tandem-backends -p tandem-device-kernels \
             -p tandem-runtime -p tandem-tests -p tandem-examples -p tandem-blob -p tandem-cli \
             -p tandem-share -p tandem-capi --features tandem-backends/cuda,\
             tandem-device-kernels/cuda,tandem-runtime/cuda,\
             tandem-tests/cuda,tandem-examples/cuda,tandem-blob/cuda,tandem-cli/cuda,\
             tandem-share/cuda,tandem-capi/cuda"
        );
        assert!(notes.is_empty());
    }

    #[test]
    fn python_leg_cannot_run_without_its_environment() {
        let meta = Metadata::parse(crate::metadata::SAMPLE).unwrap();
        let ctx = context(&meta, false, Err("none".into()));
        assert_eq!(
            leg_commands(&ctx, Leg::Python, &mut Vec::new()).unwrap_err(),
            "no Python environment"
        );
    }

    #[test]
    fn bindings_leg_checks_or_says_libclang_is_missing() {
        let meta = Metadata::parse(crate::metadata::SAMPLE).unwrap();
        let ctx = context(&meta, false, Err("none".into()));
        match leg_commands(&ctx, Leg::Bindings, &mut Vec::new()) {
            Ok(commands) => assert!(commands[0].display().ends_with(" bindings --check")),
            Err(why) => assert!(why.contains("libclang"), "{why}"),
        }
    }

    #[test]
    fn missing_hip_skips_the_leg_and_notes_the_lint_part_unless_ci() {
        let meta = Metadata::parse(crate::metadata::SAMPLE).unwrap();
        let why = "hipcc is not on PATH".to_owned();
        let ctx = context(&meta, false, Err(why.clone()));
        let mut notes = Vec::new();
        assert_eq!(leg_commands(&ctx, Leg::Hip, &mut notes).unwrap_err(), why);
        let lint = leg_commands(&ctx, Leg::Lint, &mut notes).unwrap();
        assert_eq!(lint.len(), 5);
        assert_eq!(lint[0].display(), "cargo fmt --all --check");
        assert_eq!(lint[1].display(), "cargo xtask structure");
        assert_eq!(lint[2].display(), "cargo xtask perf-report --check");
        assert!(lint[3].display().starts_with(
            "cargo clippy --workspace --exclude tandem-hal-hip --all-targets --features"
        ));
        assert!(lint[3].display().ends_with("-- -D warnings"));
        assert_eq!(
            lint[4].display(),
            "cargo clippy -p tandem-python --all-targets --features cuda -- -D warnings"
        );
        assert_eq!(notes.len(), 1);

        let ci = context(&meta, true, Err(why));
        let err = leg_commands(&ci, Leg::Lint, &mut Vec::new()).unwrap_err();
        assert!(err.contains("hipcc"), "{err}");
    }

    #[test]
    fn s3_leg_runs_the_garage_suites_with_the_garage_it_found() {
        let meta = Metadata::parse(crate::metadata::SAMPLE).unwrap();
        let ctx = TestContext {
            garage: Ok("/opt/garage".into()),
            ..context(&meta, false, Err("none".into()))
        };
        let commands = leg_commands(&ctx, Leg::S3, &mut Vec::new()).unwrap();
        let shown: Vec<String> = commands.iter().map(Cmd::display).collect();
        assert_eq!(
            shown,
            [
                "TANDEM_GARAGE=/opt/garage TANDEM_REQUIRE_S3=1 cargo test -p tandem-tests --test garage",
                "TANDEM_GARAGE=/opt/garage TANDEM_REQUIRE_S3=1 cargo test -p tandem-blob --test object_tier",
                "TANDEM_GARAGE=/opt/garage TANDEM_REQUIRE_S3=1 cargo test -p tandem-cli --test blob_object",
            ]
        );
    }

    #[test]
    fn s3_leg_cannot_run_without_garage() {
        let meta = Metadata::parse(crate::metadata::SAMPLE).unwrap();
        let ctx = context(&meta, false, Err("none".into()));
        assert_eq!(
            leg_commands(&ctx, Leg::S3, &mut Vec::new()).unwrap_err(),
            "no Garage"
        );
    }

    #[test]
    fn garage_comes_from_the_variable_else_from_path() {
        assert_eq!(
            find_garage(Some("/bin/sh".into())).unwrap(),
            Path::new("/bin/sh")
        );
        let err = find_garage(Some("/nonexistent/garage".into())).unwrap_err();
        assert!(err.contains("TANDEM_GARAGE=/nonexistent/garage"), "{err}");
        // Unset (or empty): whatever PATH holds, with the reason when it holds none.
        match find_garage(Some("".into())) {
            Ok(path) => assert!(path.ends_with("garage"), "{}", path.display()),
            Err(why) => assert!(why.contains("not on PATH"), "{why}"),
        }
    }
}
