//! Configuration, deserialisable so that the runtime's TOML can embed it as `[blob]`.

use std::path::PathBuf;

use serde::Deserialize;

/// What a target is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// One anonymous allocation of `capacity` bytes; volatile (lost at restart).
    Ram,
    /// A preallocated file of `capacity` bytes; durable.
    File,
}

/// One storage target.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetConfig {
    /// RAM or file.
    pub kind: TargetKind,
    /// The file's path (file targets only; must be absent or ignored for RAM targets).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Capacity in bytes; rounded down to whole pages ([`crate::PAGE_SIZE`]).
    pub capacity: u64,
    /// The target's tier, `0.0..=1.0`, higher = faster.
    pub score: f32,
}

/// Limits a store enforces.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest size a blob may reach (`offset + len` of a put), in bytes.
    pub max_blob_size: u64,
    /// Most puts/deletes whose metadata one redb transaction commits (group commit).
    pub max_commit_batch: usize,
    /// Most file requests (1 MiB chunks) one put or get keeps in flight through io_uring; 0 =
    /// no io_uring, `pwrite` and `pread` only. Where the kernel refuses io_uring the store uses
    /// them anyway.
    pub io_uring_depth: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_blob_size: 1 << 40,
            max_commit_batch: 256,
            io_uring_depth: 4,
        }
    }
}

/// A store's configuration.
///
/// ```toml
/// metadata = "/var/lib/tandem/blob.redb"
/// [[targets]]
/// kind = "ram"
/// capacity = 1073741824
/// score = 1.0
/// [[targets]]
/// kind = "file"
/// path = "/var/lib/tandem/blob0.dat"
/// capacity = 17179869184
/// score = 0.5
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Path of the redb metadata file; created on first start.
    pub metadata: PathBuf,
    /// The storage targets, at least one.
    pub targets: Vec<TargetConfig>,
    /// Limits; defaults when absent.
    #[serde(default)]
    pub limits: Limits,
}

impl StoreConfig {
    /// A store in `dir` (metadata `meta.redb`): a RAM target (score 1.0) and
    /// a file target `target0.dat` (score 0.5), each of `capacity` bytes;
    /// default limits. What demos, tests and benches start from.
    pub fn ram_and_file(dir: &std::path::Path, capacity: u64) -> Self {
        StoreConfig {
            metadata: dir.join("meta.redb"),
            targets: vec![
                TargetConfig {
                    kind: TargetKind::Ram,
                    path: None,
                    capacity,
                    score: 1.0,
                },
                TargetConfig {
                    kind: TargetKind::File,
                    path: Some(dir.join("target0.dat")),
                    capacity,
                    score: 0.5,
                },
            ],
            limits: Limits::default(),
        }
    }
}
