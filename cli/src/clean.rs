//! `tandem clean`: removes Tandem segments in /dev/shm whose owner process
//! is gone, and the temporary folders of demos that were killed.

use clap::Args;
use tandem_runtime::{clean_stale_segments, clean_stale_temp_folders};

use crate::{blob, demo};

/// `tandem clean`'s options.
#[derive(Args, Debug)]
pub(crate) struct CleanArgs {
    /// Lists what would be removed, and removes nothing.
    #[arg(long)]
    dry_run: bool,
}

/// `tandem clean`: one line per stale segment and per temporary folder of a
/// killed demo, then counts.
pub(crate) fn clean(args: CleanArgs) -> Result<(), String> {
    let stale = clean_stale_segments(args.dry_run).map_err(|e| e.to_string())?;
    let folders = clean_stale_temp_folders(
        &[demo::DEMO_STORE_KIND, blob::DEMO_STORE_KIND],
        args.dry_run,
    )
    .map_err(|e| format!("cleaning {}: {e}", std::env::temp_dir().display()))?;
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for segment in &stale {
        println!("{verb} /dev/shm/{segment}");
    }
    for folder in &folders {
        println!("{verb} {} (a killed demo's store)", folder.display());
    }
    println!(
        "{verb} {} stale segment(s), {} stale folder(s)",
        stale.len(),
        folders.len()
    );
    Ok(())
}
