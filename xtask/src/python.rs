//! The python leg's tools: the virtual environment with maturin, pytest, NumPy and mypy that
//! `.ci/run` makes (`python3 -m venv`, then `pip install`), and the commands that build the
//! package into it, run its tests and check its type stubs.

use crate::cmd::{find_on_path, is_executable, Cmd};
use std::path::{Path, PathBuf};

/// The environment variable naming the virtual environment, when it is not the default.
pub const VENV_ENV: &str = "TANDEM_PYTHON_VENV";

/// maturin: in the environment `TANDEM_PYTHON_VENV` names (else the default one), else on
/// `PATH`.
pub fn find_maturin(target_directory: &Path) -> Option<PathBuf> {
    let venv = Venv {
        dir: venv_dir(target_directory),
    };
    Some(venv.maturin())
        .filter(|maturin| is_executable(maturin))
        .or_else(|| find_on_path("maturin"))
}

/// The environment `TANDEM_PYTHON_VENV` names, else [`Venv::default_dir`].
pub fn venv_dir(target_directory: &Path) -> PathBuf {
    std::env::var_os(VENV_ENV)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Venv::default_dir(target_directory))
}

/// A virtual environment holding what the leg needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Venv {
    dir: PathBuf,
}

impl Venv {
    /// The default place, in the target directory (where `.ci/run` makes it).
    pub fn default_dir(target_directory: &Path) -> PathBuf {
        target_directory.join("python-venv")
    }

    /// The environment at `dir` (see [`venv_dir`]) if it has Python, maturin, pytest and
    /// mypy; `Err` says what is missing and how to make it.
    pub fn find(dir: PathBuf) -> Result<Self, String> {
        let venv = Self { dir };
        for tool in [
            venv.python(),
            venv.maturin(),
            venv.bin("pytest"),
            venv.bin("mypy"),
        ] {
            if !is_executable(&tool) {
                return Err(format!(
                    "no {} in the Python environment {dir} (.ci/run makes it: python3 -m venv \
                     {dir}; {dir}/bin/pip install maturin pytest numpy mypy; or name one with \
                     {VENV_ENV})",
                    tool.display(),
                    dir = venv.dir.display()
                ));
            }
        }
        Ok(venv)
    }

    fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }

    fn python(&self) -> PathBuf {
        self.bin("python")
    }

    fn maturin(&self) -> PathBuf {
        self.bin("maturin")
    }

    /// The cluster leg's Python part: the package built into the environment and its
    /// two-node suite (`tests/test_cluster.py`), the `tandem` binary already built.
    pub fn cluster_commands(&self, root: &Path, target_directory: &Path) -> Vec<Cmd> {
        let package = root.join("python");
        let tandem = target_directory.join("debug").join("tandem");
        vec![
            Cmd::new(self.maturin(), &package)
                .args(["develop", "--profile", "dev"])
                .env("VIRTUAL_ENV", &self.dir),
            Cmd::new(self.python(), &package)
                .args([
                    "-m",
                    "pytest",
                    "-p",
                    "no:cacheprovider",
                    "-rs",
                    "tests/test_cluster.py",
                ])
                .env("TANDEM_BIN", tandem),
        ]
    }

    /// The leg: the `tandem` binary the tests start daemons and runtimes with, the package
    /// built (debug) and installed into the environment in place, and pytest over
    /// `python/tests`, whose GPU files print `skipped: no CUDA device` here. Pytest's exit
    /// status 5 (no test collected) fails the leg like any other: the suite is never empty.
    /// Then mypy's stubtest compares the package's type stubs with the built module: a stub
    /// that drifted from the Rust signatures fails the leg. Its allowlist holds the differences
    /// that are meant, some on older CPythons only: an entry left unused is accepted. Last,
    /// `python/ci/check_wheel.py` builds the wheel with the manylinux tag `pyproject.toml`
    /// names (maturin's audit of its glibc symbols must pass), checks the tag in its name and
    /// installs it into a fresh environment, where it must import. It builds with the debug
    /// profile, reusing the build above: the tag depends on the glibc symbols the library
    /// links, not on optimisation.
    pub fn leg_commands(&self, root: &Path, target_directory: &Path) -> Vec<Cmd> {
        let package = root.join("python");
        vec![
            Cmd::cargo(root).args(["build", "-p", "tandem-cli", "--bin", "tandem"]),
            Cmd::new(self.maturin(), &package)
                .args(["develop", "--profile", "dev"])
                .env("VIRTUAL_ENV", &self.dir),
            Cmd::new(self.python(), &package)
                .args(["-m", "pytest", "-p", "no:cacheprovider", "-rs", "tests"])
                .env("TANDEM_BIN", target_directory.join("debug").join("tandem")),
            Cmd::new(self.python(), &package).args([
                "-m",
                "mypy.stubtest",
                "tandem",
                "--allowlist",
                "stubtest-allowlist.txt",
                "--ignore-unused-allowlist",
            ]),
            Cmd::new(self.python(), &package)
                .arg("ci/check_wheel.py")
                .arg(self.maturin())
                .args(["--profile", "dev"])
                .env("VIRTUAL_ENV", &self.dir),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_environment_says_how_to_make_it() {
        let why = Venv::find(PathBuf::from("/nonexistent/venv")).unwrap_err();
        assert!(why.contains("/nonexistent/venv/bin/python"), "{why}");
        assert!(
            why.contains("pip install maturin pytest numpy mypy"),
            "{why}"
        );
    }

    #[test]
    fn the_leg_builds_the_package_runs_pytest_and_stubtest_then_checks_the_wheel() {
        let venv = Venv {
            dir: PathBuf::from("/v"),
        };
        let commands = venv.leg_commands(Path::new("/repo"), Path::new("/repo/target"));
        assert_eq!(
            commands[0].display(),
            "cargo build -p tandem-cli --bin tandem"
        );
        assert_eq!(
            commands[1].display(),
            "VIRTUAL_ENV=/v /v/bin/maturin develop --profile dev"
        );
        assert_eq!(
            commands[2].display(),
            "TANDEM_BIN=/repo/target/debug/tandem /v/bin/python -m pytest -p no:cacheprovider \
             -rs tests"
        );
        assert_eq!(
            commands[3].display(),
            "/v/bin/python -m mypy.stubtest tandem --allowlist stubtest-allowlist.txt \
             --ignore-unused-allowlist"
        );
        assert_eq!(
            commands[4].display(),
            "VIRTUAL_ENV=/v /v/bin/python ci/check_wheel.py /v/bin/maturin --profile dev"
        );
    }
}
