//! Named sets: what staging, binding, looking up, listing and deleting a
//! set do to the books (see the module docs, "Named sets").

use std::collections::VecDeque;

use tandem_hal::GpuApi;

use crate::wire::{check_set_name, ErrorCode, ObjectId, Reply, SetInfo};

use super::ledger::{Ledger, Membership, NamedSet};
use super::{error, lock, DaemonState};

/// Versions a set keeps: the latest and the one before it, so that a
/// consumer may stay on the previous version while the new one is checked.
/// A bind deletes older ones (alive for those who hold them).
pub(super) const KEPT_VERSIONS: usize = 2;

fn unknown(id: ObjectId) -> Reply {
    error(ErrorCode::UnknownId, format!("no buffer {id}"))
}

impl<A: GpuApi> DaemonState<A> {
    /// Marks `client`'s unsealed buffer `id` as part of set `name`.
    pub(super) fn stage(&self, client: u64, id: ObjectId, name: &str) -> Reply {
        if let Err(why) = check_set_name(name) {
            return error(ErrorCode::BadSetName, why);
        }
        let mut ledger = lock(&self.ledger);
        let Some(object) = ledger.objects.get_mut(&id) else {
            return unknown(id);
        };
        match object.writer {
            // A sealed buffer could already be open elsewhere, outside the set.
            None => {
                return error(
                    ErrorCode::AlreadySealed,
                    format!("buffer {id} is sealed: a buffer is staged before its seal"),
                )
            }
            Some(writer) if writer != client => {
                return error(
                    ErrorCode::NotWriter,
                    format!("buffer {id} has another writer"),
                )
            }
            Some(_) => {}
        }
        if object.deleted {
            return error(ErrorCode::Deleted, format!("buffer {id} was deleted"));
        }
        if let Some(Membership::Staged(set) | Membership::Bound(set)) = &object.set {
            return error(
                ErrorCode::NotPermitted,
                format!("buffer {id} is staged for set {set:?} already"),
            );
        }
        object.set = Some(Membership::Staged(name.to_owned()));
        Reply::Done
    }

    /// Binds the next version of set `name` to `manifest` and `buffers`,
    /// which `client` staged for it and sealed; all or nothing.
    pub(super) fn bind_set(
        &self,
        client: u64,
        name: String,
        manifest: ObjectId,
        buffers: Vec<ObjectId>,
        tensors: u32,
    ) -> Reply {
        if let Err(why) = check_set_name(&name) {
            return error(ErrorCode::BadSetName, why);
        }
        let mut ledger = lock(&self.ledger);
        if !ledger.sets.contains_key(&name) && ledger.sets.len() >= self.limits.sets {
            return error(
                ErrorCode::Busy,
                format!("the daemon holds {} sets, its limit", self.limits.sets),
            );
        }
        let members: Vec<ObjectId> = core::iter::once(manifest)
            .chain(buffers.iter().copied())
            .collect();
        let staged = Some(Membership::Staged(name.clone()));
        let mut bytes = 0;
        for (at, &id) in members.iter().enumerate() {
            if members[..at].contains(&id) {
                return error(
                    ErrorCode::NotPermitted,
                    format!("buffer {id} is named twice"),
                );
            }
            let Some(object) = ledger.objects.get(&id) else {
                return unknown(id);
            };
            if object.deleted {
                return error(ErrorCode::Deleted, format!("buffer {id} was deleted"));
            }
            if object.set != staged || object.creator != client {
                return error(
                    ErrorCode::NotWriter,
                    format!("buffer {id} is not staged for set {name:?} by this client"),
                );
            }
            if object.writer.is_some() {
                return error(
                    ErrorCode::NotSealed,
                    format!("buffer {id} is not sealed: a set is bound once all are"),
                );
            }
            bytes += object.len;
        }
        for id in &members {
            if let Some(object) = ledger.objects.get_mut(id) {
                object.set = Some(Membership::Bound(name.clone()));
            }
        }
        let set = ledger.sets.entry(name.clone()).or_insert_with(|| NamedSet {
            versions: VecDeque::new(),
            next_version: 1,
        });
        let info = SetInfo {
            name,
            version: set.next_version,
            manifest,
            buffers,
            tensors,
            bytes,
        };
        set.next_version += 1;
        set.versions.push_back(info.clone());
        let retired: Vec<SetInfo> = set
            .versions
            .drain(..set.versions.len().saturating_sub(KEPT_VERSIONS))
            .collect();
        for old in &retired {
            delete_members(&mut ledger, old);
        }
        drop(ledger);
        self.changed.notify_all();
        tracing::debug!(
            "bound set {:?} version {} ({} buffer(s), {} bytes; {} version(s) retired)",
            info.name,
            info.version,
            members.len(),
            info.bytes,
            retired.len()
        );
        Reply::Set(info)
    }

    /// Version `version` of set `name` (`None`: the latest).
    pub(super) fn lookup_set(&self, name: &str, version: Option<u64>) -> Reply {
        if let Err(why) = check_set_name(name) {
            return error(ErrorCode::BadSetName, why);
        }
        let ledger = lock(&self.ledger);
        let Some(set) = ledger.sets.get(name) else {
            let staged = Some(Membership::Staged(name.to_owned()));
            return if ledger.objects.values().any(|o| o.set == staged) {
                error(
                    ErrorCode::SetPublishing,
                    format!("set {name:?} is being published and has no version yet"),
                )
            } else {
                error(ErrorCode::UnknownSet, format!("no set {name:?}"))
            };
        };
        let found = match version {
            None => set.versions.back(),
            Some(version) => set.versions.iter().find(|v| v.version == version),
        };
        match found {
            Some(info) => Reply::Set(info.clone()),
            None => {
                let kept: Vec<String> =
                    set.versions.iter().map(|v| v.version.to_string()).collect();
                error(
                    ErrorCode::UnknownSet,
                    format!(
                        "set {name:?} keeps version(s) {}, not {}",
                        kept.join(", "),
                        version.unwrap_or(0)
                    ),
                )
            }
        }
    }

    /// Every version of every set.
    pub(super) fn list_sets(&self) -> Reply {
        let ledger = lock(&self.ledger);
        Reply::Sets(
            ledger
                .sets
                .values()
                .flat_map(|set| set.versions.iter().cloned())
                .collect(),
        )
    }

    /// Deletes set `name` and every version it keeps.
    pub(super) fn delete_set(&self, name: &str) -> Reply {
        if let Err(why) = check_set_name(name) {
            return error(ErrorCode::BadSetName, why);
        }
        let mut ledger = lock(&self.ledger);
        let Some(set) = ledger.sets.remove(name) else {
            return error(ErrorCode::UnknownSet, format!("no set {name:?}"));
        };
        for version in &set.versions {
            delete_members(&mut ledger, version);
        }
        drop(ledger);
        self.changed.notify_all();
        tracing::debug!("deleted set {name:?}");
        Reply::Done
    }
}

/// Deletes the manifest and buffers of a version: freed at once if nobody
/// holds them, else at their last release.
fn delete_members<A: GpuApi>(ledger: &mut Ledger<A>, version: &SetInfo) {
    for &id in core::iter::once(&version.manifest).chain(&version.buffers) {
        if let Some(object) = ledger.objects.get_mut(&id) {
            object.deleted = true;
        }
        ledger.free_if_unheld(id);
    }
}
