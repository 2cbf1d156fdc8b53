//! Finding and running nvcc and hipcc.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// First `dir/name` that exists among `$PATH` and the `bin` folders of the
/// given root variables (e.g. `CUDA_PATH`).
pub fn find_tool(name: &str, root_vars: &[&str]) -> Option<PathBuf> {
    let path_dirs = env::var_os("PATH")
        .map(|p| env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let root_dirs = root_vars
        .iter()
        .filter_map(env::var_os)
        .map(|root| PathBuf::from(root).join("bin"));
    path_dirs
        .into_iter()
        .chain(root_dirs)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// An architecture list from `var` (comma or space separated), `default` when
/// unset; `explicit` says whether the variable was set. Each entry must pass
/// `valid`, so nothing odd reaches a compiler's command line.
pub struct Archs {
    pub list: Vec<String>,
    pub explicit: bool,
}

pub fn archs(var: &str, default: &str, valid: fn(&str) -> bool) -> Result<Archs, String> {
    let (text, explicit) = match env::var(var) {
        Ok(v) => (v, true),
        Err(env::VarError::NotPresent) => (default.to_string(), false),
        Err(env::VarError::NotUnicode(_)) => return Err(format!("{var} is not UTF-8")),
    };
    let list: Vec<String> = text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if let Some(bad) = list.iter().find(|a| !valid(a)) {
        return Err(format!("{var}: `{bad}` is not a valid architecture"));
    }
    if list.is_empty() {
        return Err(format!("{var} names no architecture"));
    }
    Ok(Archs { list, explicit })
}

/// `sm_90`, `sm_90a`, `sm_100f`.
pub fn is_cuda_arch(a: &str) -> bool {
    a.strip_prefix("sm_").is_some_and(|rest| {
        let digits = rest.trim_end_matches(|c: char| c.is_ascii_lowercase());
        !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit())
            && rest.len() - digits.len() <= 1
    })
}

/// `gfx90a`, `gfx942`, `gfx90a:xnack+`.
pub fn is_hip_arch(a: &str) -> bool {
    a.strip_prefix("gfx").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '+' | '-'))
    })
}

/// Runs `cmd`, turning a spawn failure or a non-zero exit into an error that
/// shows the command line and the compiler's output.
pub fn run(mut cmd: Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let output = cmd.output().map_err(|e| format!("running {shown}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{shown} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}

/// nvcc: `-ptx` or `-cubin` of `source` for `arch` into `out`.
pub fn nvcc(nvcc: &Path, mode: &str, arch: &str, source: &Path, out: &Path) -> Result<(), String> {
    let mut cmd = Command::new(nvcc);
    cmd.args([mode, "-std=c++17", "-O3", &format!("-arch={arch}"), "-o"])
        .arg(out)
        .arg(source);
    run(cmd)
}

/// hipcc: a code object of `source` for `arch` into `out`.
///
/// hipcc (ROCm 5.2's, at least) leaves two empty folders in `$TMPDIR` per
/// `--genco` run, so it gets a scratch folder beside `out` as its `TMPDIR`,
/// removed after it ran: nothing of the build is left in /tmp.
pub fn hipcc(hipcc: &Path, arch: &str, source: &Path, out: &Path) -> Result<(), String> {
    let scratch = out.with_extension("hipcc-tmp");
    std::fs::create_dir_all(&scratch)
        .map_err(|e| format!("creating hipcc's scratch folder {}: {e}", scratch.display()))?;
    let built = hipcc_in(hipcc, arch, source, out, &scratch);
    // Best effort: a leftover sits in the build's own folder.
    let _ = std::fs::remove_dir_all(&scratch);
    built
}

fn hipcc_in(
    hipcc: &Path,
    arch: &str,
    source: &Path,
    out: &Path,
    scratch: &Path,
) -> Result<(), String> {
    let mut cmd = Command::new(hipcc);
    cmd.env("TMPDIR", scratch);
    // The embedded source includes nothing (NVRTC has no system headers);
    // HIP's threadIdx and __syncthreads come from its runtime header.
    cmd.args([
        "--genco",
        "-x",
        "hip",
        "-include",
        "hip/hip_runtime.h",
        "-std=c++17",
        "-O3",
    ])
    .arg(format!("--offload-arch={arch}"))
    .arg("-o")
    .arg(out)
    .arg(source);
    run(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_are_checked_before_they_reach_a_command_line() {
        for good in ["sm_90", "sm_90a", "sm_100f", "sm_8"] {
            assert!(is_cuda_arch(good), "{good}");
        }
        for bad in ["sm_", "sm_90ab", "compute_90", "sm_9 0", "sm_90;rm"] {
            assert!(!is_cuda_arch(bad), "{bad}");
        }
        for good in ["gfx90a", "gfx942", "gfx90a:xnack+"] {
            assert!(is_hip_arch(good), "{good}");
        }
        for bad in ["gfx", "sm_90", "gfx90a xnack", "gfx90a;rm"] {
            assert!(!is_hip_arch(bad), "{bad}");
        }
    }
}
