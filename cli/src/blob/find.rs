//! How a store command reaches the store its configuration describes:
//! through the runtime serving it, or opened in this process when none
//! does.
//!
//! An open store holds its metadata file locked, so the command first
//! opens the store itself; a store another process has open is
//! `BlobError::InUse`, and the command then looks for the runtime serving
//! it among the live runtimes in `/dev/shm` whose status lists the blob
//! pool, asking each which store it serves (`identify`: the metadata
//! file's device and inode, `StoreIdentity`). Only the runtime whose answer
//! is the configured metadata file's own is used: two runtimes serving
//! two stores are never confused, however their paths are spelled.
//! `--segment` names the runtime instead; it must serve that same store.

use tandem_blob::{wire, BlobError, BlobStore, StoreConfig, StoreIdentity};
use tandem_runtime::status::{live_runtime_segments, read_status, StatusSnapshot};

use super::access::StoreAccess;
use super::direct::{opening_failed, Direct};
use super::served::Served;

/// Whether a command may make the store.
#[derive(Clone, Copy)]
pub(super) enum Opening {
    /// A put: the store is made on first use.
    MayCreate,
    /// A look or a removal: a store never made is an error.
    Existing,
}

/// The store `config` describes: through the runtime of CPU segment
/// `segment` when one is named; else opened here, or through the live
/// runtime serving it when another process has it open.
pub(super) fn reach(
    config: &StoreConfig,
    segment: Option<&str>,
    opening: Opening,
) -> Result<Box<dyn StoreAccess>, String> {
    if let Some(segment) = segment {
        return named_runtime(config, segment).map(|s| Box::new(s) as Box<dyn StoreAccess>);
    }
    let opened = match opening {
        Opening::MayCreate => BlobStore::open(config),
        Opening::Existing => BlobStore::open_existing(config),
    };
    match opened {
        Ok(store) => Ok(Box::new(Direct(store))),
        Err(BlobError::InUse { .. }) => {
            serving_runtime(config).map(|s| Box::new(s) as Box<dyn StoreAccess>)
        }
        Err(e) => Err(opening_failed(config, &e)),
    }
}

/// The configured store's identity, which a runtime serving it answers;
/// `runtime` names the runtime asked about, for the error.
fn wanted(config: &StoreConfig, runtime: &str) -> Result<StoreIdentity, String> {
    StoreIdentity::of_metadata(&config.metadata).map_err(|e| {
        format!(
            "{runtime} cannot be serving this store: its metadata file {}: {e}",
            config.metadata.display()
        )
    })
}

fn has_blob_pool(status: &StatusSnapshot) -> bool {
    status.pools.iter().any(|p| p.id == wire::POOL)
}

/// The runtime of `segment`, which must serve the configured store.
fn named_runtime(config: &StoreConfig, segment: &str) -> Result<Served, String> {
    let status = read_status(segment).map_err(|e| e.to_string())?;
    if !has_blob_pool(&status) {
        let pools: Vec<&str> = status.pools.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "the runtime of segment {segment} serves no blob store (its pools: {}): \
             start one with `tandem blob run`",
            pools.join(", ")
        ));
    }
    let wanted = wanted(config, &format!("the runtime of segment {segment}"))?;
    let served = Served::attach(segment)?;
    let identity = served.identity().map_err(|e| e.to_string())?;
    if identity != wanted {
        return Err(format!(
            "{} serves another store, not the one whose metadata file is {}",
            served.shown(),
            config.metadata.display()
        ));
    }
    Ok(served)
}

/// The live runtime serving the configured store, which another process
/// has open.
fn serving_runtime(config: &StoreConfig) -> Result<Served, String> {
    let in_use = format!(
        "the store's metadata file {} is in use by another process",
        config.metadata.display()
    );
    let wanted = wanted(config, "a runtime")?;
    let segments = live_runtime_segments().map_err(|e| format!("{in_use}; {e}"))?;
    // What each runtime with a blob store turned out to be, for the error.
    let mut others = Vec::new();
    for segment in segments {
        // Gone since the listing, or not readable: not this store's.
        let Ok(status) = read_status(&segment) else {
            continue;
        };
        if !has_blob_pool(&status) {
            continue;
        }
        let served = match Served::attach(&segment) {
            Ok(served) => served,
            Err(e) => {
                others.push(e);
                continue;
            }
        };
        match served.identity() {
            Ok(identity) if identity == wanted => {
                tracing::info!("through {}", served.shown());
                return Ok(served);
            }
            Ok(_) => others.push(format!("{segment} serves another store")),
            Err(e) => others.push(format!("{segment}: {e}")),
        }
    }
    let looked = if others.is_empty() {
        String::new()
    } else {
        format!(" ({})", others.join("; "))
    };
    Err(format!(
        "{in_use}, and no live runtime serves it{looked}: wait for that process to end, \
         or name the runtime serving the store with --segment"
    ))
}
