//! `cargo xtask gpu-bundle [--out DIR]`: builds the CUDA test and bench binaries in release and
//! lays them out, with a `run.sh`, so that a GPU machine without Rust can run them all.
//!
//! Layout of DIR:
//! - `bin.tar.xz`: `bin/`, packed (the binaries link much of the same code, which xz's large
//!   window finds across files: they shrink to a fifth, where gzip's 32 KiB window gave a
//!   third, and the bundle stays under the device machine's limit on carried files); `run.sh`
//!   unpacks it. `bin/` holds the binaries, debug info stripped: `<package>.<kind>.<target>` for
//!   tests and benches, programs (`tandem`, helpers that tests start) under their own names;
//! - `crates/<crate folder>/`: the working folder of that crate's binaries, holding the files
//!   its `gpu-bundle-files.txt` lists (paths relative to the crate, one per line);
//! - `binaries.tsv`: `kind<TAB>name<TAB>crate folder` per binary, read by `run.sh`;
//! - `python/`: the Python package's wheel (with CUDA), when maturin is found; its GPU tests
//!   and benches are in `crates/python/`;
//! - `capi/`: the C ABI's library (with the `cuda` feature), headers and CMake package, and
//!   `capi/examples/cpp/`, which `run.sh` builds with nvcc and runs against the bundled `tandem`;
//! - `run.sh`: see `bundle_run.sh`.

use crate::{
    backend::Backend,
    capi_install,
    cmd::{find_on_path, Cmd},
    error::XtaskError,
    metadata::{Metadata, Target},
    python,
};
use serde::Deserialize;
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Component, Path, PathBuf},
    process::ExitCode,
};

/// The device machine takes at most 64 MiB of carried files; this leaves room for the rest.
const MAX_BUNDLE_BYTES: u64 = 60 * 1024 * 1024;
/// `bin/`, packed (`tar -cJf`); `run.sh` unpacks it.
const PACKED_BIN: &str = "bin.tar.xz";
/// Per-crate list of extra files the binaries need at run time.
const FILES_MANIFEST: &str = "gpu-bundle-files.txt";
/// The script that runs the bundle.
const RUN_SCRIPT: &str = include_str!("bundle_run.sh");
/// The index of binaries `run.sh` reads.
const INDEX: &str = "binaries.tsv";
/// Where the Python package's wheel goes.
const PYTHON_DIR: &str = "python";

/// What a bundled binary is, which decides how `run.sh` treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum BinaryKind {
    /// A libtest binary: run, its `test result:` line read.
    Test,
    /// A bench target: run with `--bench`.
    Bench,
    /// A program (`tandem`, a helper a test starts): shipped, not run by `run.sh`.
    Bin,
}

impl BinaryKind {
    fn word(self) -> &'static str {
        match self {
            BinaryKind::Test => "test",
            BinaryKind::Bench => "bench",
            BinaryKind::Bin => "bin",
        }
    }
}

/// One binary to put in the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BundledBinary {
    kind: BinaryKind,
    /// File name under `bin/`.
    name: String,
    /// Where cargo wrote it.
    source: PathBuf,
    /// Its crate's folder, relative to the workspace root.
    crate_folder: PathBuf,
}

/// The cargo `--message-format=json` messages xtask reads; all others are `Other`.
#[derive(Debug, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
enum CargoOutput {
    CompilerArtifact(Artifact),
    CompilerMessage {
        message: Diagnostic,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
struct Artifact {
    package_id: String,
    target: Target,
    profile: ArtifactProfile,
    executable: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
struct ArtifactProfile {
    /// Built as a test harness (unit, integration or bench test).
    test: bool,
}

#[derive(Debug, Deserialize)]
struct Diagnostic {
    rendered: Option<String>,
}

/// Which binary of the bundle an artifact is, if any: executables of workspace packages that
/// are tests, benches or programs (examples and build scripts are left out).
fn classify(artifact: &Artifact, metadata: &Metadata) -> Option<BundledBinary> {
    let source = artifact.executable.clone()?;
    let package = metadata.workspace_package(&artifact.package_id)?;
    let target = &artifact.target;
    if package.host_only(&target.name) {
        return None;
    }
    let (kind, name) = if target.is("bench") {
        let name = format!("{}.bench.{}", package.name, target.name);
        (BinaryKind::Bench, name)
    } else if artifact.profile.test {
        // `lib`, `bin` or `test`: unit tests of a lib or bin, or an integration test.
        let role = target.kind.first().map_or("lib", String::as_str);
        let name = format!("{}.{role}.{}", package.name, target.name);
        (BinaryKind::Test, name)
    } else if target.is("bin") {
        (BinaryKind::Bin, target.name.clone())
    } else {
        return None;
    };
    let crate_folder = package
        .folder()
        .strip_prefix(&metadata.workspace_root)
        .ok()?
        .to_path_buf();
    Some(BundledBinary {
        kind,
        name,
        source,
        crate_folder,
    })
}

/// Whether the test binary at `path` holds a test: its harness lists them without running
/// anything (no GPU needed). One that cannot say is kept.
fn lists_tests(path: &Path) -> bool {
    std::process::Command::new(path)
        .arg("--list")
        .output()
        .map_or(true, |out| {
            !out.status.success()
                || String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .any(|line| line.ends_with(": test"))
        })
}

/// Builds the bundle in `out`; fails (exit code) when a build fails or the bundle is too big.
pub fn run(metadata: &Metadata, out: &Path) -> Result<ExitCode, XtaskError> {
    let has_strip = find_on_path("strip").is_some();
    let Some(binaries) = build_binaries(metadata, has_strip)? else {
        return Ok(ExitCode::FAILURE);
    };
    if !pack_binaries(out, &binaries, has_strip)? {
        return Ok(ExitCode::FAILURE);
    }
    capi_install::install_for_bundle(
        metadata,
        &out.join("capi"),
        Backend::Cuda.feature(),
        has_strip,
    )?;
    copy_listed_files(metadata, &out.join("crates"))?;
    if !python_wheel(metadata, &out.join(PYTHON_DIR))? {
        return Ok(ExitCode::FAILURE);
    }
    write_file(&out.join(INDEX), &index(&binaries), false)?;
    write_file(&out.join("run.sh"), RUN_SCRIPT, true)?;
    if !within_size_limit(out, &binaries)? {
        return Ok(ExitCode::FAILURE);
    }
    println!(
        "xtask: gpu-bundle: on the GPU machine run: bash {}/run.sh",
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The two release builds of the bundle's binaries, with CUDA: the tests, and the benches and
/// programs; each with the kinds of binary it contributes.
fn builds(metadata: &Metadata) -> [(Cmd, &'static [BinaryKind]); 2] {
    let root = metadata.workspace_root.as_path();
    let features = Backend::Cuda.features_value();
    let tests = Cmd::cargo(root)
        .args(["test", "--release", "--no-run", "--message-format=json"])
        .args(Backend::Cuda.test_package_args())
        .args(["--features", &features]);
    // Bench targets are named one by one: `--benches` would also build every library's unit
    // tests (libraries have `bench = true` by default).
    let mut benches_and_programs = Cmd::cargo(root)
        .args([
            "build",
            "--release",
            "--bins",
            "--message-format=json",
            "--workspace",
        ])
        .args(["--exclude", Backend::Hip.hal_package()])
        .args(["--exclude", env!("CARGO_PKG_NAME")])
        .args(["--features", &features]);
    for bench in bench_names(metadata) {
        benches_and_programs = benches_and_programs.args(["--bench", &bench]);
    }
    [
        (tests, &[BinaryKind::Test][..]),
        (
            benches_and_programs,
            &[BinaryKind::Bench, BinaryKind::Bin][..],
        ),
    ]
}

/// Runs the builds and collects the binaries they made, sorted by kind and name, test binaries
/// that hold no test left out; `None` when a build failed or made nothing (said).
fn build_binaries(
    metadata: &Metadata,
    has_strip: bool,
) -> Result<Option<Vec<BundledBinary>>, XtaskError> {
    let mut binaries = BTreeMap::new();
    for (build, wanted) in builds(metadata) {
        // Without `strip`, cargo leaves the debug info out itself (the release profile has
        // `debug = 1`, which would make the bundle several times bigger).
        let build = if has_strip {
            build
        } else {
            build
                .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
                .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        };
        let outcome = build.run_lines(|line| match serde_json::from_str::<CargoOutput>(line) {
            Ok(CargoOutput::CompilerArtifact(artifact)) => {
                // A build also reports what it built on the way (a test build's programs, for
                // instance); each build contributes only its own kinds.
                let binary = classify(&artifact, metadata).filter(|b| wanted.contains(&b.kind));
                if let Some(binary) = binary {
                    binaries.insert(binary.name.clone(), binary);
                }
            }
            Ok(CargoOutput::CompilerMessage { message }) => {
                eprint!("{}", message.rendered.unwrap_or_default());
            }
            Ok(CargoOutput::Other) => {}
            Err(_) => println!("{line}"),
        })?;
        if !outcome.success() {
            println!("xtask: gpu-bundle: build failed ({})", outcome.status);
            return Ok(None);
        }
    }
    if binaries.is_empty() {
        println!("xtask: gpu-bundle: the builds produced no test, bench or program binary");
        return Ok(None);
    }
    let mut binaries: Vec<BundledBinary> = binaries.into_values().collect();
    binaries.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    // A test binary that holds no test (a program's or a library's harness with none) would
    // only take space in the bundle.
    binaries.retain(|b| {
        let keep = b.kind != BinaryKind::Test || lists_tests(&b.source);
        if !keep {
            println!("xtask: gpu-bundle: {} holds no test: left out", b.name);
        }
        keep
    });
    Ok(Some(binaries))
}

/// Puts the binaries in `out` (its previous bundle cleared), stripped where `strip` is found,
/// packed into one archive, with a working folder per crate; `false` when stripping or packing
/// failed (said).
fn pack_binaries(
    out: &Path,
    binaries: &[BundledBinary],
    has_strip: bool,
) -> Result<bool, XtaskError> {
    clear_previous_bundle(out)?;
    let bin_dir = out.join("bin");
    fs::create_dir_all(&bin_dir).map_err(XtaskError::io(&bin_dir))?;
    for binary in binaries {
        let dest = bin_dir.join(&binary.name);
        fs::copy(&binary.source, &dest).map_err(XtaskError::io(&binary.source))?;
        let workdir = out.join("crates").join(&binary.crate_folder);
        fs::create_dir_all(&workdir).map_err(XtaskError::io(&workdir))?;
    }
    if has_strip {
        let names = binaries.iter().map(|b| b.name.as_str());
        let outcome = Cmd::new("strip", &bin_dir)
            .arg("--strip-debug")
            .args(names)
            .run()?;
        if !outcome.success() {
            println!("xtask: gpu-bundle: strip failed ({})", outcome.status);
            return Ok(false);
        }
    }
    let packed = Cmd::new("tar", out)
        .args(["-cJf", PACKED_BIN, "bin"])
        // xz on every core: single-threaded it takes minutes over the binaries.
        .env("XZ_OPT", "-T0")
        .run()?;
    if !packed.success() {
        println!("xtask: gpu-bundle: packing bin/ failed ({})", packed.status);
        return Ok(false);
    }
    fs::remove_dir_all(&bin_dir).map_err(XtaskError::io(&bin_dir))?;
    Ok(true)
}

/// Says what the bundle in `out` holds and weighs; `false` when it is over the limit.
fn within_size_limit(out: &Path, binaries: &[BundledBinary]) -> Result<bool, XtaskError> {
    let bytes = tree_size(out)?;
    let mib = bytes as f64 / (1024.0 * 1024.0);
    let count = |kind| binaries.iter().filter(|b| b.kind == kind).count();
    println!(
        "\nxtask: gpu-bundle: {} test, {} bench and {} program binaries; {mib:.1} MiB in {}",
        count(BinaryKind::Test),
        count(BinaryKind::Bench),
        count(BinaryKind::Bin),
        out.display()
    );
    if bytes > MAX_BUNDLE_BYTES {
        println!(
            "xtask: gpu-bundle: FAILED: over the {} MiB limit",
            MAX_BUNDLE_BYTES / (1024 * 1024)
        );
        return Ok(false);
    }
    Ok(true)
}

/// Builds the Python package's wheel, with CUDA, release and stripped, into `dir` (`run.sh`
/// installs it and runs `python/tests/gpu` and `python/bench`), when maturin is found;
/// without it the bundle has no Python part, which is said. `false`: the build failed.
fn python_wheel(metadata: &Metadata, dir: &Path) -> Result<bool, XtaskError> {
    let Some(maturin) = python::find_maturin(&metadata.target_directory) else {
        println!(
            "xtask: gpu-bundle: no maturin (in {} or on PATH): the bundle has no Python package",
            python::Venv::default_dir(&metadata.target_directory).display()
        );
        return Ok(true);
    };
    let package = metadata.workspace_root.join("python");
    // The manylinux tag python/pyproject.toml names, as a package index would carry it: the
    // wheel a user installs, checked by maturin's audit against the glibc symbols it uses.
    let built = Cmd::new(maturin, &package)
        .args([
            "build",
            "--release",
            "--strip",
            "--features",
            "cuda",
            "--out",
        ])
        .arg(dir)
        .run()?;
    if !built.success() {
        println!(
            "xtask: gpu-bundle: building the Python wheel failed ({})",
            built.status
        );
    }
    Ok(built.success())
}

/// The bench targets of the workspace packages the CUDA bundle builds, each name once.
fn bench_names(metadata: &Metadata) -> BTreeSet<String> {
    metadata
        .workspace_packages()
        .filter(|p| p.name != Backend::Hip.hal_package() && p.name != env!("CARGO_PKG_NAME"))
        .flat_map(|p| p.targets.iter().filter(|t| t.is("bench")))
        .map(|t| t.name.clone())
        .collect()
}

/// Removes what an earlier run wrote into `out` (and only that: `out` may hold other things).
fn clear_previous_bundle(out: &Path) -> Result<(), XtaskError> {
    for dir in ["bin", "crates", PYTHON_DIR] {
        let path = out.join(dir);
        if path.exists() {
            fs::remove_dir_all(&path).map_err(XtaskError::io(&path))?;
        }
    }
    // `bin.tar.gz`: what bundles were packed as before xz.
    for file in ["run.sh", INDEX, PACKED_BIN, "bin.tar.gz"] {
        let path = out.join(file);
        if path.exists() {
            fs::remove_file(&path).map_err(XtaskError::io(&path))?;
        }
    }
    Ok(())
}

/// `binaries.tsv`: one `kind<TAB>name<TAB>crate folder` line per binary.
fn index(binaries: &[BundledBinary]) -> String {
    binaries
        .iter()
        .map(|b| {
            let folder = b.crate_folder.display();
            format!("{}\t{}\t{folder}\n", b.kind.word(), b.name)
        })
        .collect()
}

/// Copies what every workspace crate's `gpu-bundle-files.txt` lists into
/// `crates_dir/<crate folder>/<listed path>`.
fn copy_listed_files(metadata: &Metadata, crates_dir: &Path) -> Result<(), XtaskError> {
    for package in metadata.workspace_packages() {
        let manifest = package.folder().join(FILES_MANIFEST);
        if !manifest.is_file() {
            continue;
        }
        let text = fs::read_to_string(&manifest).map_err(XtaskError::io(&manifest))?;
        let folder = package
            .folder()
            .strip_prefix(&metadata.workspace_root)
            .unwrap_or(Path::new(""));
        for listed in parse_files_manifest(&text, &manifest)? {
            copy_tree(
                &package.folder().join(&listed),
                &crates_dir.join(folder).join(&listed),
            )?;
        }
    }
    Ok(())
}

/// The paths a `gpu-bundle-files.txt` lists: one per line, blank lines and `#` comments
/// skipped. A path must be relative and stay inside its crate (no `..`).
fn parse_files_manifest(text: &str, manifest: &Path) -> Result<Vec<PathBuf>, XtaskError> {
    let mut paths = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let path = PathBuf::from(line);
        let inside = path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !inside {
            return Err(XtaskError::BundleManifest {
                manifest: manifest.to_path_buf(),
                line: index + 1,
                reason: "a listed path must be relative and stay inside its crate",
            });
        }
        paths.push(path);
    }
    Ok(paths)
}

/// Copies a file, or a folder with everything in it but Python's bytecode caches (made on
/// this machine, for its interpreter).
fn copy_tree(from: &Path, to: &Path) -> Result<(), XtaskError> {
    if from.is_dir() {
        fs::create_dir_all(to).map_err(XtaskError::io(to))?;
        for entry in fs::read_dir(from).map_err(XtaskError::io(from))? {
            let entry = entry.map_err(XtaskError::io(from))?;
            if entry.file_name() == "__pycache__" {
                continue;
            }
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(XtaskError::io(parent))?;
    }
    fs::copy(from, to).map_err(XtaskError::io(from))?;
    Ok(())
}

fn write_file(path: &Path, contents: &str, executable: bool) -> Result<(), XtaskError> {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, contents).map_err(XtaskError::io(path))?;
    if executable {
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
            .map_err(XtaskError::io(path))?;
    }
    Ok(())
}

/// Total size of the files under `dir` (links are counted as themselves, not followed).
fn tree_size(dir: &Path) -> Result<u64, XtaskError> {
    let mut total = 0;
    for entry in fs::read_dir(dir).map_err(XtaskError::io(dir))? {
        let entry = entry.map_err(XtaskError::io(dir))?;
        let meta = entry
            .path()
            .symlink_metadata()
            .map_err(XtaskError::io(entry.path()))?;
        total += if meta.is_dir() {
            tree_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::SAMPLE;

    fn artifact(json: &str) -> Artifact {
        match serde_json::from_str::<CargoOutput>(json).expect("message parses") {
            CargoOutput::CompilerArtifact(a) => a,
            other => panic!("not an artifact: {other:?}"),
        }
    }

    const RUNTIME: &str = "path+file:///ws/runtime#tandem-runtime@0.1.0";

    fn message(target: &str, test: bool, executable: &str) -> String {
        format!(
            r#"{{"reason":"compiler-artifact","package_id":"{RUNTIME}","manifest_path":"/ws/runtime/Cargo.toml",
                "target":{target},"profile":{{"opt_level":"3","debuginfo":1,"test":{test}}},
                "features":["cuda"],"filenames":["/x"],"executable":{executable},"fresh":true}}"#
        )
    }

    #[test]
    fn artifacts_become_tests_benches_and_programs() {
        let meta = Metadata::parse(SAMPLE).unwrap();
        let lib = r#"{"name":"tandem_runtime","kind":["lib"],"src_path":"/ws/runtime/src/lib.rs"}"#;
        let unit = classify(
            &artifact(&message(lib, true, r#""/t/deps/tandem_runtime-1a""#)),
            &meta,
        )
        .unwrap();
        assert_eq!(unit.kind, BinaryKind::Test);
        assert_eq!(unit.name, "tandem-runtime.lib.tandem_runtime");
        assert_eq!(unit.source, Path::new("/t/deps/tandem_runtime-1a"));
        assert_eq!(unit.crate_folder, Path::new("runtime"));

        let bench =
            r#"{"name":"launch","kind":["bench"],"src_path":"/ws/runtime/benches/launch.rs"}"#;
        let bench = classify(
            &artifact(&message(bench, true, r#""/t/deps/launch-2b""#)),
            &meta,
        );
        assert_eq!(bench.unwrap().name, "tandem-runtime.bench.launch");

        let bin = r#"{"name":"tandem","kind":["bin"],"src_path":"/ws/cli/src/main.rs"}"#;
        let program = classify(&artifact(&message(bin, false, r#""/t/tandem""#)), &meta);
        assert_eq!(program.as_ref().map(|b| b.kind), Some(BinaryKind::Bin));
        let bin_tests = classify(
            &artifact(&message(bin, true, r#""/t/deps/tandem-3c""#)),
            &meta,
        );
        assert_eq!(bin_tests.unwrap().name, "tandem-runtime.bin.tandem");
    }

    #[test]
    fn libraries_examples_foreign_packages_and_host_only_targets_are_left_out() {
        let meta = Metadata::parse(SAMPLE).unwrap();
        let lib = r#"{"name":"tandem_runtime","kind":["lib"],"src_path":"/ws/runtime/src/lib.rs"}"#;
        assert!(classify(&artifact(&message(lib, false, "null")), &meta).is_none());
        let example =
            r#"{"name":"demo","kind":["example"],"src_path":"/ws/runtime/examples/demo.rs"}"#;
        assert!(classify(&artifact(&message(example, false, r#""/t/demo""#)), &meta).is_none());
        let foreign = message(lib, true, r#""/t/x""#).replace(RUNTIME, "registry+foo#bar@1.0.0");
        assert!(classify(&artifact(&foreign), &meta).is_none());
        let host_only =
            r#"{"name":"host_tasks","kind":["test"],"src_path":"/ws/runtime/tests/host_tasks.rs"}"#;
        assert!(classify(&artifact(&message(host_only, true, r#""/t/h""#)), &meta).is_none());
    }

    #[test]
    fn other_messages_are_recognised_and_diagnostics_keep_their_text() {
        let finished = r#"{"reason":"build-finished","success":true}"#;
        assert!(matches!(
            serde_json::from_str::<CargoOutput>(finished),
            Ok(CargoOutput::Other)
        ));
        let warning = r#"{"reason":"compiler-message","package_id":"x","message":{"rendered":"warning: unused\n","level":"warning"}}"#;
        match serde_json::from_str::<CargoOutput>(warning) {
            Ok(CargoOutput::CompilerMessage { message }) => {
                assert_eq!(message.rendered.as_deref(), Some("warning: unused\n"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bench_names_leave_out_the_hip_crate() {
        let meta = Metadata::parse(SAMPLE).unwrap();
        let names: Vec<_> = bench_names(&meta).into_iter().collect();
        assert_eq!(names, ["alloc", "copy", "launch", "rings"]);
    }

    #[test]
    fn files_manifest_accepts_relative_paths_only() {
        let manifest = Path::new("/ws/device-kernels/gpu-bundle-files.txt");
        let ok = parse_files_manifest("# kernels\n\nkernels/ring.cu\n./include \n", manifest);
        assert_eq!(
            ok.unwrap(),
            [PathBuf::from("kernels/ring.cu"), PathBuf::from("./include")]
        );
        for bad in ["/etc/passwd", "kernels/../../secret"] {
            let err = parse_files_manifest(&format!("ok.txt\n{bad}\n"), manifest).unwrap_err();
            assert!(
                matches!(err, XtaskError::BundleManifest { line: 2, .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn index_lists_kind_name_and_folder() {
        let binary = |kind, name: &str, folder: &str| BundledBinary {
            kind,
            name: name.into(),
            source: PathBuf::new(),
            crate_folder: folder.into(),
        };
        let text = index(&[
            binary(BinaryKind::Test, "tandem-tests.test.conformance", "tests"),
            binary(BinaryKind::Bin, "tandem", "runtime"),
        ]);
        assert_eq!(
            text,
            "test\ttandem-tests.test.conformance\ttests\nbin\ttandem\truntime\n"
        );
    }

    #[test]
    fn copies_listed_trees_and_measures_them() {
        let base = std::env::temp_dir().join(format!("xtask-bundle-{}", std::process::id()));
        let src = base.join("src");
        fs::create_dir_all(src.join("kernels/sub")).unwrap();
        fs::write(src.join("kernels/a.cu"), "abc").unwrap();
        fs::write(src.join("kernels/sub/b.h"), "de").unwrap();
        let dest = base.join("out/kernels");
        copy_tree(&src.join("kernels"), &dest).unwrap();
        let copied = fs::read_to_string(dest.join("sub/b.h")).unwrap();
        let size = tree_size(&base.join("out")).unwrap();
        fs::remove_dir_all(&base).unwrap();
        assert_eq!(copied, "de");
        assert_eq!(size, 5);
    }
}
