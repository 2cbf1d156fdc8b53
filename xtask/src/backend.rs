//! The GPU backends as xtask selects them: which packages build a backend and with which
//! features, and whether the HIP toolchain needed to build the HIP backend is present.

use crate::cmd::{find_on_path, Cmd};
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// The packages that have `cuda` and `hip` features; each feature adds that backend.
pub const FEATURE_PACKAGES: [&str; 9] = [
    "tandem-backends",
    "tandem-device-kernels",
    "tandem-runtime",
    "tandem-tests",
    "tandem-examples",
    "tandem-blob",
    "tandem-cli",
    "tandem-share",
    "tandem-capi",
];

/// A GPU backend that is selected by features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// NVIDIA, through cudarc (builds everywhere; the driver is loaded at run time).
    Cuda,
    /// AMD, through hip-runtime-sys (needs ROCm headers and `hipcc` to build).
    Hip,
}

impl Backend {
    /// Both backends.
    pub const ALL: [Backend; 2] = [Backend::Cuda, Backend::Hip];

    /// The feature name, also the backend's name in messages.
    pub fn feature(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Hip => "hip",
        }
    }

    /// The backend's own crate: always that backend, no features.
    pub fn hal_package(self) -> &'static str {
        match self {
            Backend::Cuda => "tandem-hal-cuda",
            Backend::Hip => "tandem-hal-hip",
        }
    }

    /// The `--features` value that turns the backend on in every [`FEATURE_PACKAGES`] member,
    /// e.g. `tandem-device-kernels/cuda,tandem-runtime/cuda,tandem-tests/cuda`. The
    /// `package/feature` form is what cargo accepts with several `-p` or with `--workspace`.
    pub fn features_value(self) -> String {
        FEATURE_PACKAGES
            .iter()
            .map(|package| format!("{package}/{}", self.feature()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `-p` arguments for the packages whose tests exercise this backend: its own crate and
    /// every [`FEATURE_PACKAGES`] member.
    pub fn test_package_args(self) -> Vec<String> {
        let packages = std::iter::once(self.hal_package()).chain(FEATURE_PACKAGES);
        packages
            .flat_map(|package| ["-p".to_owned(), package.to_owned()])
            .collect()
    }
}

/// The header whose presence under a prefix means ROCm's HIP headers are installed there.
const HIP_HEADER: &str = "include/hip/hip_runtime_api.h";

/// Where Debian puts ROCm (headers in `/usr/include/hip`).
const DEBIAN_HIP_PATH: &str = "/usr";

/// A usable HIP toolchain: `hipcc` on `PATH` and the headers under `hip_path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HipToolchain {
    hip_path: PathBuf,
    /// `HIP_PATH` was already in the environment; it is then passed on untouched.
    from_env: bool,
}

impl HipToolchain {
    /// Looks for `hipcc` and the ROCm headers; `Err` says what is missing.
    pub fn probe() -> Result<Self, String> {
        let hipcc = find_on_path("hipcc").ok_or_else(|| "hipcc is not on PATH".to_owned());
        let user = std::env::var_os("HIP_PATH").map(PathBuf::from);
        let hipconfig = || {
            let out = Command::new("hipconfig")
                .arg("-p")
                .stderr(Stdio::null())
                .output()
                .ok()?;
            let path = String::from_utf8(out.stdout).ok()?;
            let path = path.trim();
            (out.status.success() && !path.is_empty()).then(|| PathBuf::from(path))
        };
        let headers = choose_hip_path(user, hipconfig, |prefix| prefix.join(HIP_HEADER).is_file());
        match (hipcc, headers) {
            (Ok(_), Ok(toolchain)) => Ok(toolchain),
            (Err(why), Ok(_)) | (Ok(_), Err(why)) => Err(why),
            (Err(no_hipcc), Err(no_headers)) => Err(format!("{no_hipcc}; {no_headers}")),
        }
    }

    /// Sets `HIP_PATH` for hip-runtime-sys's build script when the environment had none.
    pub fn configure(&self, cmd: Cmd) -> Cmd {
        if self.from_env {
            cmd
        } else {
            cmd.env("HIP_PATH", &self.hip_path)
        }
    }
}

/// Picks the HIP prefix: `HIP_PATH` from the environment if set (and then only it), else what
/// `hipconfig -p` says, else Debian's `/usr`; the first with the headers wins.
fn choose_hip_path(
    from_env: Option<PathBuf>,
    hipconfig: impl FnOnce() -> Option<PathBuf>,
    has_headers: impl Fn(&Path) -> bool,
) -> Result<HipToolchain, String> {
    if let Some(hip_path) = from_env {
        return if has_headers(&hip_path) {
            Ok(HipToolchain {
                hip_path,
                from_env: true,
            })
        } else {
            Err(format!(
                "HIP_PATH={} has no {HIP_HEADER}",
                hip_path.display()
            ))
        };
    }
    let mut candidates: Vec<PathBuf> = hipconfig().into_iter().collect();
    if !candidates.iter().any(|c| c == Path::new(DEBIAN_HIP_PATH)) {
        candidates.push(DEBIAN_HIP_PATH.into());
    }
    match candidates.iter().find(|c| has_headers(c)) {
        Some(hip_path) => Ok(HipToolchain {
            hip_path: hip_path.clone(),
            from_env: false,
        }),
        None => {
            let looked: Vec<_> = candidates.iter().map(|c| c.display().to_string()).collect();
            Err(format!(
                "no ROCm headers ({HIP_HEADER} under {})",
                looked.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_value_names_every_feature_package() {
        assert_eq!(
            Backend::Cuda.features_value(),
            "tandem-backends/cuda,tandem-device-kernels/cuda,tandem-runtime/cuda,tandem-tests/cuda,tandem-examples/cuda,\
             tandem-blob/cuda,tandem-cli/cuda,tandem-share/cuda,tandem-capi/cuda"
        );
        assert_eq!(
            Backend::Hip.features_value(),
            "tandem-backends/hip,tandem-device-kernels/hip,tandem-runtime/hip,tandem-tests/hip,tandem-examples/hip,\
             tandem-blob/hip,tandem-cli/hip,tandem-share/hip,tandem-capi/hip"
        );
    }

    #[test]
    fn test_packages_start_with_the_backend_crate() {
        assert_eq!(
            Backend::Hip.test_package_args(),
            [
                "-p",
                "tandem-hal-hip",
                "-p",
                "tandem-backends",
                "-p",
                "tandem-device-kernels",
                "-p",
                "tandem-runtime",
                "-p",
                "tandem-tests",
                "-p",
                "tandem-examples",
                "-p",
                "tandem-blob",
                "-p",
                "tandem-cli",
                "-p",
                "tandem-share",
                "-p",
                "tandem-capi"
            ]
        );
        assert_eq!(Backend::Cuda.test_package_args()[1], "tandem-hal-cuda");
    }

    #[test]
    fn hip_path_from_env_is_the_only_candidate() {
        let found = choose_hip_path(Some("/opt/rocm".into()), || panic!("not asked"), |_| true);
        assert_eq!(
            found,
            Ok(HipToolchain {
                hip_path: "/opt/rocm".into(),
                from_env: true
            })
        );
        let err = choose_hip_path(
            Some("/opt/rocm".into()),
            || None,
            |p| p == Path::new("/usr"),
        )
        .unwrap_err();
        assert!(err.contains("HIP_PATH=/opt/rocm"), "{err}");
    }

    #[test]
    fn hipconfig_wins_over_debian_default_and_absence_is_explained() {
        let with = |has: &'static str| {
            choose_hip_path(
                None,
                || Some("/opt/rocm".into()),
                move |p| p == Path::new(has),
            )
        };
        assert_eq!(with("/opt/rocm").unwrap().hip_path, Path::new("/opt/rocm"));
        let debian = with("/usr").unwrap();
        assert_eq!(debian.hip_path, Path::new("/usr"));
        assert!(!debian.from_env);
        let err = with("/nowhere").unwrap_err();
        assert!(err.contains("/opt/rocm, /usr"), "{err}");
    }
}
