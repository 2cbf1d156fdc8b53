//! The `no-libclang` test leg: the build as a newcomer's machine runs it, without libclang.
//!
//! The leg starts `cargo xtask no-libclang-check` in a private mount namespace (`unshare -m`,
//! which needs root: CI has it). That command bind-mounts `/dev/null` over every libclang it
//! finds (nothing outside the namespace changes), proves that libclang can no longer be loaded,
//! then, in target folders of its own (one per build: see [`run`]),
//! - builds tandem-runtime with device-kernels' build script run afresh: the README's first
//!   command (`tandem demo`), which failed with "Unable to find libclang" while the build ran
//!   bindgen;
//! - builds a copy of the repository whose headers drift from the committed bindings (a field
//!   dropped and two swapped in `tandem/layout.h`, two swapped in `tandem/runtime/layout.h`)
//!   and checks that the build fails naming each field.

use crate::{bindings, cmd::Cmd, error::XtaskError};
use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::ExitCode,
};

/// The subcommand the leg runs inside the namespace.
pub const SUBCOMMAND: &str = "no-libclang-check";

/// Folders where a libclang may lie (clang-sys searches these and more; the check below proves
/// that none is left loadable).
const LIBCLANG_DIRS: [&str; 6] = [
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/llvm-*/lib",
];

/// The leg's command, or why it cannot run here.
pub fn leg_command(target_dir: &Path) -> Result<Cmd, String> {
    let unshare = crate::cmd::find_on_path("unshare")
        .ok_or("hiding libclang needs `unshare` (util-linux), which is not on PATH")?;
    // /proc/self belongs to the effective user.
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        return Err("hiding libclang needs root (unshare -m, mount --bind)".into());
    }
    if crate::cmd::find_on_path("git").is_none() {
        return Err(
            "the drift check copies the repository's tracked files with git, which is not on PATH"
                .into(),
        );
    }
    let xtask = std::env::current_exe().map_err(|e| format!("finding xtask's own binary: {e}"))?;
    Ok(Cmd::new(unshare, &crate::repo_root())
        .args(["--mount", "--propagation", "private", "--"])
        .arg(xtask)
        .arg(SUBCOMMAND)
        .arg(target_dir.join("no-libclang")))
}

/// One edit of a mirror header that the committed bindings do not know of, and what the build
/// must then say.
pub(crate) struct Drift {
    pub(crate) header: &'static str,
    /// The line that opens the struct to edit.
    open: &'static str,
    edit: Edit,
    /// Text the failed build's output must contain.
    expect: &'static str,
}

enum Edit {
    /// Remove this member line.
    Drop(&'static str),
    /// Swap these two adjacent member lines.
    Swap(&'static str, &'static str),
}

pub(crate) const DRIFTS: [Drift; 3] = [
    // Nothing else moves (`base` stays 8-aligned at 16): only the dropped field's own check
    // can notice, and the compiler names it.
    Drift {
        header: "device-kernels/include/tandem/layout.h",
        open: "struct MemoryBackend {",
        edit: Edit::Drop("u32 flags;"),
        expect: "layout drift: tandem::MemoryBackend::flags",
    },
    // The header's own static_asserts do not cover these two fields: only the generated
    // checks can notice.
    Drift {
        header: "device-kernels/include/tandem/layout.h",
        open: "struct alignas(64) LaneQueueHeader {",
        edit: Edit::Swap("u32 num_lanes;", "u32 depth;"),
        expect: "layout drift: tandem::LaneQueueHeader::num_lanes is not at offset",
    },
    Drift {
        header: "device-kernels/include/tandem/runtime/layout.h",
        open: "struct alignas(64) RuntimeSegmentHeader {",
        edit: Edit::Swap("u32 num_lanes;", "u32 copy_space;"),
        expect: "layout drift: tandem::RuntimeSegmentHeader::num_lanes is not at offset",
    },
];

/// `text` with `drift` applied inside its struct, or why it no longer applies.
pub(crate) fn apply(text: &str, drift: &Drift) -> Result<String, String> {
    let stale = |what: &str| {
        format!(
            "{}: the drift check's edit no longer applies ({what}); choose another field in \
             xtask/src/no_libclang.rs",
            drift.header
        )
    };
    let mut lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == drift.open)
        .ok_or_else(|| stale(&format!("no line `{}`", drift.open)))?;
    let end = start
        + lines[start..]
            .iter()
            .position(|l| l.trim() == "};")
            .ok_or_else(|| stale("the struct does not end"))?;
    let find = |member: &str| {
        (start..end)
            .find(|&i| lines[i].trim() == member)
            .ok_or_else(|| stale(&format!("no member `{member}`")))
    };
    match drift.edit {
        Edit::Drop(member) => {
            lines.remove(find(member)?);
        }
        Edit::Swap(a, b) => {
            let i = find(a)?;
            if find(b)? != i + 1 {
                return Err(stale(&format!("`{b}` does not follow `{a}`")));
            }
            lines.swap(i, i + 1);
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    Ok(out)
}

/// `cargo xtask no-libclang-check DIR`, run by the leg inside a private mount namespace: hides
/// libclang, builds, checks the drift builds. Build output goes under `dir` (`build/`, and
/// `drift-src/` with `drift-target/` for the drift build).
pub fn run(dir: &Path) -> Result<ExitCode, XtaskError> {
    let root = crate::repo_root();
    let fail = |why: String| Err(XtaskError::Check(why));

    let hidden = libclang_files();
    if !hidden.is_empty() {
        let hide = Cmd::new("sh", &root)
            .args([
                "-c",
                r#"for f; do mount --bind /dev/null "$f" || exit 1; done"#,
                "sh",
            ])
            .args(hidden.iter().map(|path| path.as_os_str().to_owned()));
        if !hide.run()?.success() {
            return fail("could not bind-mount /dev/null over libclang".into());
        }
    }
    match bindings::load_libclang() {
        Ok(()) => {
            let found = clang_sys::get_library()
                .map(|l| l.path().display().to_string())
                .unwrap_or_default();
            return fail(format!(
                "libclang still loads ({found}) after hiding {hidden:?}: the check would prove \
                 nothing; add its folder to LIBCLANG_DIRS in xtask/src/no_libclang.rs"
            ));
        }
        Err(why) => println!("xtask: libclang hidden ({} files): {why}", hidden.len()),
    }

    // The build and the drift build each have a target folder of their own:
    // cargo names a workspace's path crates' artifacts without their absolute
    // path, so the copy's would land on the build's, and its fingerprints
    // (pointing at the copy's older files) made a later build take crates
    // edited since for fresh.
    let cargo =
        |cwd: &Path, target: &str| Cmd::cargo(cwd).env("CARGO_TARGET_DIR", dir.join(target));
    // Afresh: a build script output from before would prove nothing.
    let clean = cargo(&root, "build").args(["clean", "-p", "tandem-device-kernels"]);
    let build = cargo(&root, "build").args(["build", "-p", "tandem-runtime"]);
    for cmd in [clean, build] {
        if !cmd.run()?.success() {
            return fail(format!("`{}` failed without libclang", cmd.display()));
        }
    }

    let copy = dir.join("drift-src");
    copy_tracked_files(&root, &copy)?;
    for drift in &DRIFTS {
        let path = copy.join(drift.header);
        let text = std::fs::read_to_string(&path).map_err(XtaskError::io(&path))?;
        let edited = apply(&text, drift).map_err(XtaskError::Check)?;
        std::fs::write(&path, edited).map_err(XtaskError::io(&path))?;
    }
    let drift_build = cargo(&copy, "drift-target").args(["build", "-p", "tandem-device-kernels"]);
    let (outcome, output) = drift_build.run_captured()?;
    if outcome.success() {
        return fail(format!(
            "`{}` in {} passed, with headers that drifted from the committed bindings",
            drift_build.display(),
            copy.display()
        ));
    }
    let missing: Vec<&str> = DRIFTS
        .iter()
        .map(|d| d.expect)
        .filter(|expect| !output.contains(expect))
        .collect();
    if !missing.is_empty() {
        println!("{output}");
        return fail(format!(
            "the drift build failed without naming {missing:?} (its output is above)"
        ));
    }
    println!(
        "xtask: the build without libclang passed; the drift build failed naming {:?}",
        DRIFTS.iter().map(|d| d.expect).collect::<Vec<_>>()
    );
    Ok(ExitCode::SUCCESS)
}

/// Every `libclang*.so*` in [`LIBCLANG_DIRS`] (and `$LIBCLANG_PATH`).
fn libclang_files() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for pattern in LIBCLANG_DIRS {
        match pattern.split_once('*') {
            Some((prefix, suffix)) => {
                let (parent, stem) = prefix.rsplit_once('/').unwrap_or((".", prefix));
                let Ok(entries) = std::fs::read_dir(parent) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let name = entry.file_name();
                    if name.to_string_lossy().starts_with(stem) {
                        dirs.push(entry.path().join(suffix.trim_start_matches('/')));
                    }
                }
            }
            None => dirs.push(pattern.into()),
        }
    }
    dirs.extend(std::env::var_os("LIBCLANG_PATH").map(PathBuf::from));
    let mut files: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()))
        .filter(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("libclang") && name.contains(".so")
        })
        .collect();
    files.sort();
    files.dedup();
    files
}

/// Copies the files git tracks under `root` (the working tree's contents) to `to`, replacing
/// what was there.
fn copy_tracked_files(root: &Path, to: &Path) -> Result<(), XtaskError> {
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(XtaskError::io(to))?;
    }
    let listing = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .map_err(|source| XtaskError::Spawn {
            command: "git ls-files -z".into(),
            source,
        })?;
    if !listing.status.success() {
        return Err(XtaskError::Check(format!(
            "git ls-files in {} failed: {}",
            root.display(),
            String::from_utf8_lossy(&listing.stderr)
        )));
    }
    for name in listing.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = Path::new(std::str::from_utf8(name).map_err(|_| {
            XtaskError::Check(format!("a tracked file's name is not UTF-8: {name:?}"))
        })?);
        let (from, dest) = (root.join(name), to.join(name));
        // A file deleted in the working tree but not yet in git's index is not part of it.
        if !from.is_file() {
            continue;
        }
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(XtaskError::io(parent))?;
        }
        std::fs::copy(&from, &dest).map_err(XtaskError::io(&from))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removes a folder when dropped, so a failed test leaves nothing behind.
    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Copies the files under `from` (folders too: `tandem/runtime/`) to `to`.
    fn copy_files(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let dest = to.join(path.file_name().unwrap());
            if path.is_dir() {
                copy_files(&path, &dest);
            } else if path.is_file() {
                std::fs::copy(&path, dest).unwrap();
            }
        }
    }

    #[test]
    fn check_fails_on_a_header_edited_without_regeneration() {
        if let Err(why) = bindings::load_libclang() {
            // A newcomer's machine; CI installs libclang, and there this is a failure.
            let ci = crate::ci_requires_all(std::env::var("CI").ok().as_deref());
            assert!(!ci, "{why}");
            println!("skipped: {why}");
            return;
        }
        let root = crate::repo_root();
        let copy =
            TempDir(std::env::temp_dir().join(format!("xtask-bindings-{}", std::process::id())));
        for dir in [
            "device-kernels/include/tandem",
            "device-kernels/src/generated",
        ] {
            copy_files(&root.join(dir), &copy.0.join(dir));
        }
        assert_eq!(bindings::run(&copy.0, true).unwrap(), Vec::<PathBuf>::new());

        // An edit that the header's own static_asserts let through: only this check sees it.
        let drift = &DRIFTS[1];
        let header = copy.0.join(drift.header);
        let text = std::fs::read_to_string(&header).unwrap();
        std::fs::write(&header, apply(&text, drift).unwrap()).unwrap();
        let err = bindings::run(&copy.0, true).unwrap_err().to_string();
        assert!(err.contains("cpp_layout.rs: line "), "{err}");
        assert!(!err.contains("cpp_runtime.rs"), "{err}");
    }

    #[test]
    fn drifts_apply_to_the_headers_and_change_them() {
        let root = crate::repo_root();
        for drift in &DRIFTS {
            let text = std::fs::read_to_string(root.join(drift.header)).unwrap();
            let edited = apply(&text, drift).unwrap();
            assert_ne!(edited, text, "{}", drift.header);
            assert_eq!(
                edited.len() < text.len(),
                matches!(drift.edit, Edit::Drop(_))
            );
        }
    }

    #[test]
    fn an_edit_that_no_longer_applies_says_so() {
        let drift = Drift {
            header: "h",
            open: "struct S {",
            edit: Edit::Swap("u32 a;", "u32 b;"),
            expect: "",
        };
        let ok = apply("struct S {\n  u32 a;\n  u32 b;\n};\n", &drift).unwrap();
        assert_eq!(ok, "struct S {\n  u32 b;\n  u32 a;\n};\n");
        let err = apply("struct S {\n  u32 a;\n  u32 c;\n  u32 b;\n};\n", &drift).unwrap_err();
        assert!(err.contains("does not follow"), "{err}");
        // A member of another struct does not count.
        let err = apply(
            "struct S {\n  u32 a;\n};\nstruct T {\n  u32 b;\n};\n",
            &drift,
        )
        .unwrap_err();
        assert!(err.contains("no member `u32 b;`"), "{err}");
    }
}
