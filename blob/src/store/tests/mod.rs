//! The store's behaviour through its public calls: every error, placement, spills, holes,
//! copy-on-write accounting, opening and reopening.

mod context;
mod data;
mod errors;
mod open;
mod placement;

use std::path::Path;

use crate::*;

/// A store in `dir` with the given (kind, capacity in pages, score) targets; file targets live
/// in `dir`.
fn config(dir: &Path, targets: &[(TargetKind, u64, f32)]) -> StoreConfig {
    StoreConfig {
        metadata: dir.join("meta.redb"),
        targets: targets
            .iter()
            .enumerate()
            .map(|(i, &(kind, pages, score))| TargetConfig {
                kind,
                path: (kind == TargetKind::File).then(|| dir.join(format!("t{i}.dat"))),
                capacity: pages * PAGE_SIZE,
                score,
                object: None,
            })
            .collect(),
        limits: Limits::default(),
    }
}

/// Bytes used on each target.
fn used(s: &BlobStore) -> Vec<u64> {
    s.targets().iter().map(|t| t.used).collect()
}

const RAM: TargetKind = TargetKind::Ram;
const FILE: TargetKind = TargetKind::File;

#[test]
fn store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<BlobStore>();
}
