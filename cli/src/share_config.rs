//! `tandem share serve --config FILE`: the daemon's TOML configuration: keys that stand in for
//! flags an operator would rather keep in a file (a systemd unit's command line stays fixed),
//! and the `[cluster]` that makes the daemon a node of a cluster (`cluster.rs`).

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;
use tandem_runtime::read_config_file;
use tandem_share::ClusterConfig;

use crate::cluster::{cluster_config, ClusterSection};

/// The keys `tandem share serve --config` reads; every key optional, unknown keys refused.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct ShareConfigFile {
    metrics: Option<String>,
    cluster: Option<ClusterSection>,
}

/// What a share daemon's configuration file says.
#[derive(Debug, Default)]
pub(crate) struct ShareConfig {
    /// Where to serve Prometheus metrics unless `--metrics` names another place: a port (on
    /// 127.0.0.1) or `IP:PORT`.
    pub(crate) metrics: Option<SocketAddr>,
    /// The cluster the daemon is a node of (`[cluster]`), if any.
    pub(crate) cluster: Option<ClusterConfig>,
}

impl ShareConfig {
    /// Reads `path`; an error names the file and the key.
    pub(crate) fn from_file(path: &Path) -> Result<Self, String> {
        let text = read_config_file(path).map_err(|e| e.to_string())?;
        Self::from_toml(&text).map_err(|why| format!("{}: {why}", path.display()))
    }

    fn from_toml(text: &str) -> Result<Self, String> {
        let file: ShareConfigFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let metrics = file
            .metrics
            .map(|text| tandem_metrics::parse_metrics_address(&text))
            .transpose()
            .map_err(|e| format!("`metrics`: {e}"))?;
        let cluster = file.cluster.map(cluster_config).transpose()?;
        Ok(ShareConfig { metrics, cluster })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_takes_a_port_or_an_address() {
        let empty = ShareConfig::from_toml("").unwrap();
        assert!(empty.metrics.is_none() && empty.cluster.is_none());
        let port = ShareConfig::from_toml("metrics = \"9466\"").unwrap();
        assert_eq!(port.metrics, Some("127.0.0.1:9466".parse().unwrap()));
        let any = ShareConfig::from_toml("metrics = \"0.0.0.0:9466\"").unwrap();
        assert_eq!(any.metrics, Some("0.0.0.0:9466".parse().unwrap()));
    }

    #[test]
    fn a_bad_address_or_an_unknown_key_is_refused_by_name() {
        let bad = ShareConfig::from_toml("metrics = \"localhost\"").unwrap_err();
        assert!(
            bad.contains("`metrics`") && bad.contains("localhost"),
            "{bad}"
        );
        let unknown = ShareConfig::from_toml("metric = \"9466\"").unwrap_err();
        assert!(unknown.contains("metric"), "{unknown}");
    }
}
