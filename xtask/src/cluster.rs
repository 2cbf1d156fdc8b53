//! The cluster leg's tools: an etcd binary and NIXL's C API library, and the commands that
//! run the share daemon's cluster suites (Rust, C, Python) against them with UCX on TCP.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::cmd::{find_on_path, Cmd};
use crate::python::Venv;

/// The variable naming the etcd binary (`tandem_tests::cluster` reads it too).
const ETCD_ENV: &str = "TANDEM_ETCD";
/// The variable naming NIXL's library (the daemon and `tandem_tests::cluster` read it).
const NIXL_ENV: &str = "TANDEM_NIXL_LIBRARY";

/// What the leg runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTools {
    /// The etcd binary.
    pub etcd: PathBuf,
    /// `libnixl_capi.so`.
    pub nixl: PathBuf,
}

/// The etcd binary: `TANDEM_ETCD` if set, else `etcd` on PATH.
fn find_etcd(env: Option<OsString>) -> Result<PathBuf, String> {
    match env.filter(|v| !v.is_empty()) {
        Some(path) if Path::new(&path).is_file() => Ok(PathBuf::from(path)),
        Some(path) => Err(format!(
            "{ETCD_ENV}={} is not a file",
            Path::new(&path).display()
        )),
        None => find_on_path("etcd").ok_or_else(|| {
            format!(
                "no etcd: {ETCD_ENV} is not set and `etcd` is not on PATH (.ci/run installs \
                 Debian's etcd-server)"
            )
        }),
    }
}

/// NIXL's library: `TANDEM_NIXL_LIBRARY` if set, else the `nixl_cu13` (or `nixl_cu12`)
/// package's in the Python environment `venv`.
fn find_nixl(env: Option<OsString>, venv: &Path) -> Result<PathBuf, String> {
    if let Some(path) = env.filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{NIXL_ENV}={} is not a file", path.display()))
        };
    }
    let sites = std::fs::read_dir(venv.join("lib"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("site-packages"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for site in &sites {
        for package in ["nixl_cu13", "nixl_cu12"] {
            let library = site
                .join(format!(".{package}.mesonpy.libs"))
                .join("libnixl_capi.so");
            if library.is_file() {
                return Ok(library);
            }
        }
    }
    Err(format!(
        "no NIXL: {NIXL_ENV} is not set and the Python environment {} has no nixl_cu13 \
         (.ci/run installs it: pip install --no-deps nixl-cu13)",
        venv.display()
    ))
}

/// The tools, or why the leg cannot run.
pub fn find(venv: &Path) -> Result<ClusterTools, String> {
    Ok(ClusterTools {
        etcd: find_etcd(std::env::var_os(ETCD_ENV))?,
        nixl: find_nixl(std::env::var_os(NIXL_ENV), venv)?,
    })
}

/// The leg: the NIXL loader's test, then the two-node suites of the CLI (Rust clients), the
/// C ABI and the Python package (built into `python`'s environment), each told where etcd
/// and NIXL are and that a skip is a failure.
pub fn leg_commands(
    root: &Path,
    target_directory: &Path,
    tools: &ClusterTools,
    python: &Venv,
) -> Vec<Cmd> {
    let with = |cmd: Cmd| {
        cmd.env(ETCD_ENV, &tools.etcd)
            .env(NIXL_ENV, &tools.nixl)
            .env("TANDEM_REQUIRE_CLUSTER", "1")
            .env("UCX_TLS", "tcp")
    };
    let cargo = || with(Cmd::cargo(root));
    let mut commands = vec![
        Cmd::cargo(root).args(["build", "-p", "tandem-cli", "--bin", "tandem"]),
        cargo().args(["test", "-p", "tandem-nixl", "--test", "library"]),
        cargo().args(["test", "-p", "tandem-cli", "--test", "cluster"]),
        cargo().args(["test", "-p", "tandem-capi", "--test", "cluster"]),
    ];
    commands.extend(
        python
            .cluster_commands(root, target_directory)
            .into_iter()
            .map(with),
    );
    commands
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_and_nixl_say_what_is_missing() {
        let why = find_etcd(Some("/nonexistent/etcd".into())).unwrap_err();
        assert!(why.contains("TANDEM_ETCD=/nonexistent/etcd"), "{why}");
        let why = find_nixl(None, Path::new("/nonexistent/venv")).unwrap_err();
        assert!(
            why.contains("nixl-cu13") && why.contains("/nonexistent/venv"),
            "{why}"
        );
        let why = find_nixl(Some("/nonexistent/lib.so".into()), Path::new("/")).unwrap_err();
        assert!(why.contains("TANDEM_NIXL_LIBRARY"), "{why}");
    }
}
