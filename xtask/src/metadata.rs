//! The workspace as `cargo metadata --format-version 1 --no-deps` describes it: its packages,
//! their targets and features, and where cargo puts build output.

use crate::error::XtaskError;
use serde::Deserialize;
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// The parts of `cargo metadata` output that xtask uses.
#[derive(Debug, Deserialize)]
pub struct Metadata {
    /// Packages; with `--no-deps`, the workspace members.
    pub packages: Vec<Package>,
    /// Package ids of the workspace members.
    pub workspace_members: Vec<String>,
    /// The repository root.
    pub workspace_root: PathBuf,
    /// Cargo's target directory (honours `CARGO_TARGET_DIR`).
    pub target_directory: PathBuf,
}

/// One package.
#[derive(Debug, Deserialize)]
pub struct Package {
    /// The package name, e.g. `tandem-shm-core`.
    pub name: String,
    /// The package id, as compiler messages name it.
    pub id: String,
    /// Path of its `Cargo.toml`.
    pub manifest_path: PathBuf,
    /// Its build targets.
    pub targets: Vec<Target>,
    /// Its features (name to what each enables).
    #[serde(default)]
    pub features: BTreeMap<String, Vec<String>>,
    /// Its `[package.metadata]` table (`null` when it has none).
    #[serde(default)]
    pub metadata: Option<PackageMetadata>,
}

/// The parts of `[package.metadata]` that xtask reads.
#[derive(Debug, Default, Deserialize)]
pub struct PackageMetadata {
    /// `[package.metadata.gpu-bundle]`.
    #[serde(default, rename = "gpu-bundle")]
    pub gpu_bundle: GpuBundleMetadata,
}

/// `[package.metadata.gpu-bundle]`: what a package's binaries are to the GPU bundle.
#[derive(Debug, Default, Deserialize)]
pub struct GpuBundleMetadata {
    /// Test and bench targets (by target name; a library's unit tests by its crate name) that
    /// do no GPU work: CI's legs run them, the bundle leaves them out.
    #[serde(default, rename = "host-only")]
    pub host_only: Vec<String>,
}

/// One build target of a package (also used for the target in compiler-artifact messages).
#[derive(Debug, Clone, Deserialize)]
pub struct Target {
    /// The target name (a bench's or test's file stem, the lib's crate name).
    pub name: String,
    /// Its kinds: `lib`, `bin`, `test`, `bench`, `example`, `custom-build`, ...
    pub kind: Vec<String>,
    /// The file at its root (`src/lib.rs`, `src/main.rs`, ...).
    #[serde(default)]
    pub src_path: PathBuf,
}

impl Target {
    /// Whether `kind` is among the target's kinds.
    pub fn is(&self, kind: &str) -> bool {
        self.kind.iter().any(|k| k == kind)
    }

    /// Whether the target is a library of any crate type: a `[lib]` with `crate-type` set is
    /// `cdylib`, `rlib` and so on, never `lib`.
    pub fn is_library(&self) -> bool {
        const LIBRARY_KINDS: [&str; 6] =
            ["lib", "rlib", "dylib", "cdylib", "staticlib", "proc-macro"];
        LIBRARY_KINDS.iter().any(|&kind| self.is(kind))
    }
}

impl Metadata {
    /// Runs `cargo metadata` in `root`.
    pub fn load(root: &Path) -> Result<Self, XtaskError> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .current_dir(root)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|source| XtaskError::Spawn {
                command: "cargo metadata --format-version 1 --no-deps".into(),
                source,
            })?;
        if !output.status.success() {
            return Err(XtaskError::Metadata(format!(
                "exited with {} (its message is above)",
                output.status
            )));
        }
        let json = String::from_utf8(output.stdout)
            .map_err(|_| XtaskError::Metadata("output is not UTF-8".into()))?;
        Self::parse(&json)
    }

    /// Parses `cargo metadata --format-version 1` JSON.
    pub fn parse(json: &str) -> Result<Self, XtaskError> {
        serde_json::from_str(json).map_err(|e| XtaskError::Metadata(e.to_string()))
    }

    /// The workspace member packages.
    pub fn workspace_packages(&self) -> impl Iterator<Item = &Package> {
        self.packages
            .iter()
            .filter(|p| self.workspace_members.contains(&p.id))
    }

    /// The workspace member with package id `id`, if any.
    pub fn workspace_package(&self, id: &str) -> Option<&Package> {
        self.workspace_packages().find(|p| p.id == id)
    }
}

impl Package {
    /// Whether the package marks target `name` as doing no GPU work (`host-only` in
    /// `[package.metadata.gpu-bundle]`).
    pub fn host_only(&self, name: &str) -> bool {
        self.metadata
            .as_ref()
            .is_some_and(|m| m.gpu_bundle.host_only.iter().any(|t| t == name))
    }

    /// Whether the package declares `feature`.
    pub fn has_feature(&self, feature: &str) -> bool {
        self.features.contains_key(feature)
    }

    /// The package's folder.
    pub fn folder(&self) -> &Path {
        self.manifest_path.parent().unwrap_or(Path::new("."))
    }
}

/// Sample `cargo metadata` output shared by the unit tests of several modules.
#[cfg(test)]
pub(crate) const SAMPLE: &str = r#"{
  "packages": [
    {"name": "tandem-runtime", "id": "path+file:///ws/runtime#tandem-runtime@0.1.0",
     "manifest_path": "/ws/runtime/Cargo.toml",
     "features": {"cuda": ["dep:tandem-hal-cuda"], "hip": []},
     "metadata": {"gpu-bundle": {"host-only": ["host_tasks"]}},
     "targets": [
       {"name": "tandem_runtime", "kind": ["lib"], "src_path": "/ws/runtime/src/lib.rs"},
       {"name": "tandem", "kind": ["bin"], "src_path": "/ws/cli/src/main.rs"},
       {"name": "launch", "kind": ["bench"], "src_path": "/ws/runtime/benches/launch.rs"}
     ]},
    {"name": "tandem-hal-cuda", "id": "path+file:///ws/hal-cuda#tandem-hal-cuda@0.1.0",
     "manifest_path": "/ws/hal-cuda/Cargo.toml", "features": {}, "metadata": null,
     "targets": [
       {"name": "tandem_hal_cuda", "kind": ["lib"], "src_path": "/ws/hal-cuda/src/lib.rs"},
       {"name": "copy", "kind": ["bench"], "src_path": "/ws/hal-cuda/benches/copy.rs"}
     ]},
    {"name": "tandem-hal-hip", "id": "path+file:///ws/hal-hip#tandem-hal-hip@0.1.0",
     "manifest_path": "/ws/hal-hip/Cargo.toml", "features": {},
     "targets": [
       {"name": "tandem_hal_hip", "kind": ["lib"], "src_path": "/ws/hal-hip/src/lib.rs"},
       {"name": "hipcopy", "kind": ["bench"], "src_path": "/ws/hal-hip/benches/hipcopy.rs"}
     ]},
    {"name": "tandem-shm-core", "id": "path+file:///ws/shm-core#tandem-shm-core@0.1.0",
     "manifest_path": "/ws/shm-core/Cargo.toml",
     "features": {"default": ["std"], "std": []},
     "targets": [
       {"name": "tandem_shm_core", "kind": ["lib"], "src_path": "/ws/shm-core/src/lib.rs"},
       {"name": "rings", "kind": ["bench"], "src_path": "/ws/shm-core/benches/rings.rs"},
       {"name": "alloc", "kind": ["bench"], "src_path": "/ws/shm-core/benches/alloc.rs"}
     ]},
    {"name": "tandem-capi", "id": "path+file:///ws/capi#tandem-capi@0.1.0",
     "manifest_path": "/ws/capi/Cargo.toml", "features": {},
     "targets": [
       {"name": "tandem", "kind": ["cdylib", "rlib"], "src_path": "/ws/capi/src/lib.rs"},
       {"name": "bad_input", "kind": ["test"], "src_path": "/ws/capi/tests/bad_input.rs"},
       {"name": "build-script-build", "kind": ["custom-build"], "src_path": "/ws/capi/build.rs"}
     ]},
    {"name": "tandem-python", "id": "path+file:///ws/python#tandem-python@0.1.0",
     "manifest_path": "/ws/python/Cargo.toml", "features": {},
     "targets": [
       {"name": "_tandem", "kind": ["cdylib"], "src_path": "/ws/python/src/lib.rs"}
     ]}
  ],
  "workspace_members": [
    "path+file:///ws/runtime#tandem-runtime@0.1.0",
    "path+file:///ws/hal-cuda#tandem-hal-cuda@0.1.0",
    "path+file:///ws/hal-hip#tandem-hal-hip@0.1.0",
    "path+file:///ws/shm-core#tandem-shm-core@0.1.0",
    "path+file:///ws/capi#tandem-capi@0.1.0",
    "path+file:///ws/python#tandem-python@0.1.0"
  ],
  "workspace_root": "/ws",
  "target_directory": "/ws/target",
  "version": 1
}"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_packages_targets_and_features() {
        let meta = Metadata::parse(SAMPLE).expect("sample parses");
        assert_eq!(meta.workspace_root, Path::new("/ws"));
        assert_eq!(meta.target_directory, Path::new("/ws/target"));
        assert_eq!(meta.workspace_packages().count(), 6);
        let runtime = meta
            .workspace_package("path+file:///ws/runtime#tandem-runtime@0.1.0")
            .expect("runtime is a member");
        assert!(runtime.has_feature("cuda"));
        assert!(!runtime.has_feature("std"));
        assert_eq!(runtime.folder(), Path::new("/ws/runtime"));
        assert!(runtime.targets[2].is("bench"));
        assert!(!runtime.targets[2].is("bin"));
        assert!(meta.workspace_package("registry+foo").is_none());
        assert!(runtime.host_only("host_tasks") && !runtime.host_only("launch"));
        let cuda = meta.workspace_packages().nth(1).expect("hal-cuda");
        assert!(!cuda.host_only("copy"), "no metadata: nothing is host-only");
    }

    #[test]
    fn every_crate_type_of_a_library_is_a_library() {
        let target = |kind: &[&str]| Target {
            name: "t".into(),
            kind: kind.iter().map(|k| k.to_string()).collect(),
            src_path: PathBuf::new(),
        };
        for kind in ["lib", "rlib", "dylib", "cdylib", "staticlib", "proc-macro"] {
            assert!(target(&[kind]).is_library(), "{kind}");
        }
        assert!(target(&["cdylib", "rlib"]).is_library());
        for kind in ["bin", "test", "bench", "example", "custom-build"] {
            assert!(!target(&[kind]).is_library(), "{kind}");
        }
    }

    #[test]
    fn malformed_output_is_a_typed_error() {
        let err = Metadata::parse("{\"packages\": 3}").unwrap_err();
        assert!(matches!(err, XtaskError::Metadata(_)), "{err}");
    }
}
