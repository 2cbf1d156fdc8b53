//! The configurations `tandem blob` reads: the runtime's TOML with its
//! `[blob]` table, or the store's own file named by $TANDEM_BLOB_CONFIG.

use std::path::{Path, PathBuf};

use tandem_blob::{wire, StoreConfig};
use tandem_runtime::{read_config_file, Config};

use super::ConfigArg;

/// The environment variable naming a store configuration file, used when
/// the runtime configuration has no `[blob]` table.
const STORE_CONFIG_ENV: &str = "TANDEM_BLOB_CONFIG";

/// The runtime's and the store's configurations.
pub(super) struct Configs {
    pub(super) runtime: Config,
    /// Whether the configuration file set `copy_space` (else it is the default).
    pub(super) copy_space_set: bool,
    pub(super) store: StoreConfig,
}

fn read_toml(path: &Path) -> Result<toml::Table, String> {
    let text = read_config_file(path).map_err(|e| e.to_string())?;
    text.parse::<toml::Table>()
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn store_config(table: toml::Table, path: &Path) -> Result<StoreConfig, String> {
    toml::Value::Table(table)
        .try_into()
        .map_err(|e| format!("{}: bad store configuration: {e}", path.display()))
}

/// The store configuration of $TANDEM_BLOB_CONFIG, if set: a file holding a
/// `StoreConfig`, or a `[blob]` table.
fn store_config_from_env() -> Result<Option<StoreConfig>, String> {
    let Some(path) = std::env::var_os(STORE_CONFIG_ENV) else {
        return Ok(None);
    };
    let path = PathBuf::from(path);
    let mut table = read_toml(&path).map_err(|e| format!("${STORE_CONFIG_ENV}: {e}"))?;
    let table = match table.remove("blob") {
        Some(toml::Value::Table(blob)) => blob,
        Some(_) => return Err(format!("{}: [blob] is not a table", path.display())),
        None => table,
    };
    store_config(table, &path).map(Some)
}

/// Reads `--config` (split into the runtime's part and `[blob]`), falling
/// back to $TANDEM_BLOB_CONFIG for the store.
pub(super) fn configs(arg: &ConfigArg) -> Result<Configs, String> {
    let (runtime, copy_space_set, store) = match &arg.config {
        Some(path) => {
            let mut table = read_toml(path)?;
            let store = match table.remove("blob") {
                Some(toml::Value::Table(blob)) => store_config(blob, path)?,
                Some(_) => return Err(format!("{}: [blob] is not a table", path.display())),
                None => store_config_from_env()?.ok_or_else(|| {
                    format!(
                        "{} has no [blob] table (the store's configuration) and \
                         ${STORE_CONFIG_ENV} is not set",
                        path.display()
                    )
                })?,
            };
            let copy_space_set = table.contains_key("copy_space");
            let rest = toml::to_string(&table).map_err(|e| e.to_string())?;
            let runtime =
                Config::from_toml(&rest).map_err(|e| format!("{}: {e}", path.display()))?;
            (runtime, copy_space_set, store)
        }
        None => {
            let store = store_config_from_env()?.ok_or_else(|| {
                format!(
                    "no store configuration: pass --config FILE with a [blob] table, \
                     or set ${STORE_CONFIG_ENV} to a store configuration file"
                )
            })?;
            (Config::default(), false, store)
        }
    };
    Ok(Configs {
        runtime,
        copy_space_set,
        store,
    })
}

/// The runtime configuration of a runtime serving the blob pool: a copy
/// space that holds any blob task. Raising a `copy_space` the user set is
/// worth a warning; raising the default, a note.
pub(super) fn with_copy_space(mut config: Config, user_set: bool) -> Config {
    if config.copy_space < wire::COPY_SPACE {
        let why = format!(
            "{} to {} bytes: blob tasks carry names up to {} bytes",
            config.copy_space,
            wire::COPY_SPACE,
            wire::MAX_NAME_BYTES
        );
        if user_set {
            tracing::warn!("copy_space raised from the configured {why}");
        } else {
            tracing::info!("copy_space raised from the default {why}");
        }
        config.copy_space = wire::COPY_SPACE;
    }
    config
}
