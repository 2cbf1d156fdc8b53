//! Project automation for Tandem, run as `cargo xtask <command>` (an alias in
//! `.cargo/config.toml`):
//!
//! - `test [LEG...]`: the test matrix (host, loom, cuda, hip, bindings, no-libclang, s3,
//!   python, lint; all by default);
//! - `bench [--gpu]`: every benchmark of the workspace, with CUDA variants under `--gpu`;
//! - `gpu-bundle [--out DIR]`: CUDA test and bench binaries plus `run.sh`, for a GPU machine;
//! - `bindings [--check]`: regenerates (or checks) device-kernels' checked-in bindgen output;
//! - `capi-header [--check]`: regenerates (or checks) tandem-capi's C header;
//! - `install-capi --prefix DIR [--debug]`: installs the C ABI's library, headers and CMake package;
//! - `structure`: fails on a module circle inside a crate, an `allow` without a reason or a
//!   function outside tests over 100 lines;
//! - `no-libclang-check DIR`: the `no-libclang` leg's work, run in a private mount namespace;
//! - `perf-report [--check]`: plots docs/perf's records' summary blocks (or checks the plots).

mod backend;
mod bench;
mod bindings;
mod bundle;
mod capi;
mod capi_install;
mod cluster;
mod cmd;
mod error;
mod legs;
mod metadata;
mod no_libclang;
mod perf_report;
mod python;
mod structure;
mod test_result;

use backend::HipToolchain;
use error::XtaskError;
use metadata::Metadata;
use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::ExitCode,
};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test [LEG...]          run test legs: host, loom, cuda, hip, bindings, no-libclang, s3,
                         python, cluster, lint (default: all). s3 runs Garage from
                         TANDEM_GARAGE or PATH; python builds and tests in the venv
                         TANDEM_PYTHON_VENV names (default: target/python-venv, which
                         .ci/run makes); cluster runs etcd from TANDEM_ETCD or PATH and NIXL
                         from TANDEM_NIXL_LIBRARY or that venv.
                         A leg that cannot run here is a note, or a failure when named
                         or when CI=true.
  bench [--gpu]          run every bench target; --gpu adds the CUDA variants
  gpu-bundle [--out DIR] build CUDA test/bench binaries and run.sh into DIR
                         (default: gpu-bundle/ in the repository root)
  bindings [--check]     rewrite device-kernels/src/generated/ from the C++ headers with
                         bindgen (needs libclang); --check only compares and fails on a
                         difference
  capi-header [--check]  rewrite capi/include/tandem.h from capi/src with cbindgen; --check
                         only compares and fails on a difference
  install-capi --prefix DIR [--debug]
                         build tandem-capi (release; --debug: the dev profile) and install
                         lib/, include/ and lib/cmake/Tandem/ (find_package(Tandem)) in DIR
  structure              fail on a module circle inside a crate (modules that import each
                         other), an allow/expect without a `reason`, or a function outside
                         tests over 100 lines
  no-libclang-check DIR  what the no-libclang leg runs in a private mount namespace: hide
                         libclang, build into DIR, check that drifted headers fail the build
  perf-report [--check]  plot each figure's ratio over time from docs/perf's records'
                         summary blocks into docs/perf/plots/ and docs/perf/README.md;
                         --check only compares and fails on a difference
  help                   print this";

/// A parsed command line.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    Test { legs: Vec<String> },
    Bench { gpu: bool },
    GpuBundle { out: Option<PathBuf> },
    Bindings { check: bool },
    CapiHeader { check: bool },
    InstallCapi { prefix: PathBuf, debug: bool },
    Structure,
    NoLibclangCheck { dir: PathBuf },
    PerfReport { check: bool },
    Help,
}

fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Command, XtaskError> {
    let mut args = args.into_iter();
    let Some(command) = args.next() else {
        return Ok(Command::Help);
    };
    match text(command)?.as_str() {
        "test" => {
            let legs = args.map(text).collect::<Result<Vec<_>, _>>()?;
            if let Some(flag) = legs.iter().find(|leg| leg.starts_with('-')) {
                return Err(XtaskError::Usage(format!(
                    "test takes leg names, not `{flag}`"
                )));
            }
            Ok(Command::Test { legs })
        }
        "bench" => Ok(Command::Bench {
            gpu: flag_given(args, "bench", "--gpu")?,
        }),
        "gpu-bundle" => parse_gpu_bundle(args),
        "bindings" => Ok(Command::Bindings {
            check: flag_given(args, "bindings", "--check")?,
        }),
        "capi-header" => Ok(Command::CapiHeader {
            check: flag_given(args, "capi-header", "--check")?,
        }),
        "install-capi" => parse_install_capi(args),
        "perf-report" => Ok(Command::PerfReport {
            check: flag_given(args, "perf-report", "--check")?,
        }),
        "structure" => match args.next() {
            None => Ok(Command::Structure),
            Some(arg) => Err(XtaskError::Usage(format!(
                "structure takes no arguments, got `{}`",
                arg.to_string_lossy()
            ))),
        },
        no_libclang::SUBCOMMAND => match (args.next(), args.next()) {
            (Some(dir), None) => Ok(Command::NoLibclangCheck { dir: dir.into() }),
            _ => Err(XtaskError::Usage(format!(
                "{} takes one folder",
                no_libclang::SUBCOMMAND
            ))),
        },
        "help" | "-h" | "--help" => Ok(Command::Help),
        other => Err(XtaskError::Usage(format!("unknown command `{other}`"))),
    }
}

/// An argument as text.
fn text(arg: OsString) -> Result<String, XtaskError> {
    arg.into_string()
        .map_err(|arg| XtaskError::Usage(format!("argument is not UTF-8: {arg:?}")))
}

/// Whether `command`'s arguments, which may be `flag` and nothing else, give `flag`.
fn flag_given(
    args: impl Iterator<Item = OsString>,
    command: &str,
    flag: &str,
) -> Result<bool, XtaskError> {
    let mut given = false;
    for arg in args {
        match text(arg)? {
            arg if arg == flag => given = true,
            other => return Err(XtaskError::Usage(format!("{command}: unknown `{other}`"))),
        }
    }
    Ok(given)
}

/// `gpu-bundle [--out DIR]`'s arguments.
fn parse_gpu_bundle(mut args: impl Iterator<Item = OsString>) -> Result<Command, XtaskError> {
    let mut out = None;
    while let Some(arg) = args.next() {
        let arg = text(arg)?;
        if arg == "--out" {
            let dir = args
                .next()
                .ok_or_else(|| XtaskError::Usage("gpu-bundle: --out needs a folder".into()))?;
            out = Some(PathBuf::from(dir));
        } else if let Some(dir) = arg.strip_prefix("--out=") {
            out = Some(PathBuf::from(dir));
        } else {
            return Err(XtaskError::Usage(format!("gpu-bundle: unknown `{arg}`")));
        }
    }
    Ok(Command::GpuBundle { out })
}

/// `install-capi --prefix DIR [--debug]`'s arguments.
fn parse_install_capi(mut args: impl Iterator<Item = OsString>) -> Result<Command, XtaskError> {
    let (mut prefix, mut debug) = (None, false);
    while let Some(arg) = args.next() {
        match text(arg)?.as_str() {
            "--prefix" => {
                let dir = args.next().ok_or_else(|| {
                    XtaskError::Usage("install-capi: --prefix needs a folder".into())
                })?;
                prefix = Some(PathBuf::from(dir));
            }
            "--debug" => debug = true,
            other => {
                return Err(XtaskError::Usage(format!(
                    "install-capi: unknown `{other}`"
                )))
            }
        }
    }
    let prefix =
        prefix.ok_or_else(|| XtaskError::Usage("install-capi: --prefix DIR is required".into()))?;
    Ok(Command::InstallCapi { prefix, debug })
}

/// Where to ask cargo about the workspace: the parent of xtask's folder, as `cargo run` reports
/// it at run time (a path compiled in with `env!` goes stale when the checkout is moved, and
/// cargo does not rebuild for that), else the current folder, from which cargo finds the
/// workspace itself.
fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .and_then(|xtask_dir| xtask_dir.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Whether the `CI` environment variable asks for every leg to be required (and libclang, hipcc
/// and Garage to be present).
fn ci_requires_all(ci_var: Option<&str>) -> bool {
    ci_var.is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

fn run(command: Command) -> Result<ExitCode, XtaskError> {
    let metadata = || Metadata::load(&repo_root());
    match command {
        Command::Help => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Test { legs } => {
            let ci = ci_requires_all(std::env::var("CI").ok().as_deref());
            let planned = legs::plan(&legs, ci)?;
            let metadata = metadata()?;
            let ctx = legs::TestContext {
                metadata: &metadata,
                ci,
                hip: HipToolchain::probe(),
                garage: legs::find_garage(std::env::var_os("TANDEM_GARAGE")),
                python: python::Venv::find(python::venv_dir(&metadata.target_directory)),
                cluster: cluster::find(&python::venv_dir(&metadata.target_directory)),
            };
            Ok(legs::run(&ctx, &planned))
        }
        Command::Bench { gpu } => bench::run(&metadata()?, gpu),
        Command::GpuBundle { out } => {
            let metadata = metadata()?;
            let out = out.unwrap_or_else(|| metadata.workspace_root.join("gpu-bundle"));
            bundle::run(&metadata, &out)
        }
        Command::Bindings { check } => {
            let root = repo_root();
            // With --check a difference is an error; otherwise the list says what was rewritten.
            let rewritten = bindings::run(&root, check)?;
            if rewritten.is_empty() {
                println!("xtask: the bindings in device-kernels/src/generated/ are up to date");
            }
            for file in &rewritten {
                println!("xtask: rewrote {}", file.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::CapiHeader { check } => {
            match capi::run(&repo_root(), check)? {
                Some(file) => println!("xtask: rewrote {}", file.display()),
                None => println!("xtask: {} is up to date", capi::HEADER),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::InstallCapi { prefix, debug } => {
            capi_install::run(&metadata()?, &prefix, debug)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Structure => structure::run(&metadata()?),
        Command::NoLibclangCheck { dir } => no_libclang::run(&dir),
        Command::PerfReport { check } => {
            perf_report::run(&repo_root(), check)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn main() -> ExitCode {
    let command = match parse_args(std::env::args_os().skip(1)) {
        Ok(command) => command,
        Err(err) => {
            eprintln!("xtask: {err}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(command) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("xtask: error: {err}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_variable_values() {
        assert!(ci_requires_all(Some("true")));
        assert!(ci_requires_all(Some("TRUE")));
        assert!(ci_requires_all(Some("1")));
        assert!(!ci_requires_all(Some("false")));
        assert!(!ci_requires_all(Some("")));
        assert!(!ci_requires_all(None));
    }

    fn parse(args: &[&str]) -> Result<Command, XtaskError> {
        parse_args(args.iter().map(OsString::from))
    }

    #[test]
    fn parses_each_command() {
        assert_eq!(parse(&[]).unwrap(), Command::Help);
        assert_eq!(
            parse(&["test", "hip", "lint"]).unwrap(),
            Command::Test {
                legs: vec!["hip".into(), "lint".into()]
            }
        );
        assert_eq!(
            parse(&["bench", "--gpu"]).unwrap(),
            Command::Bench { gpu: true }
        );
        assert_eq!(
            parse(&["gpu-bundle", "--out", "/tmp/b"]).unwrap(),
            Command::GpuBundle {
                out: Some("/tmp/b".into())
            }
        );
        assert_eq!(
            parse(&["bindings", "--check"]).unwrap(),
            Command::Bindings { check: true }
        );
        assert_eq!(
            parse(&["gpu-bundle", "--out=rel"]).unwrap(),
            Command::GpuBundle {
                out: Some("rel".into())
            }
        );
    }

    #[test]
    fn bad_command_lines_are_usage_errors() {
        for args in [
            &["frobnicate"][..],
            &["bench", "--cpu"],
            &["gpu-bundle", "--out"],
            &["gpu-bundle", "extra"],
            &["bindings", "--fix"],
            &["no-libclang-check"],
            &["test", "--release"],
        ] {
            assert!(matches!(parse(args), Err(XtaskError::Usage(_))), "{args:?}");
        }
    }

    #[test]
    fn repo_root_holds_the_workspace_manifest() {
        assert!(repo_root().join("Cargo.toml").is_file());
        assert!(repo_root().join("xtask").is_dir());
    }
}
