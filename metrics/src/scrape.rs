//! One scrape's series: each service reads its counters when asked and hands them over as
//! rows of labels and values, which are encoded in Prometheus' text format.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::histogram::HistogramSnapshot;

/// A series' labels: names and values, in order.
pub type Labels = Vec<(&'static str, String)>;

/// What a service shows at one scrape: its series, filled by [`crate::Source::collect`]. Names
/// get Prometheus' suffixes here: a unit's (`_bytes`, `_seconds`), then `_total` on counters.
#[derive(Debug, Default)]
pub struct Scrape {
    registry: Registry,
}

impl Scrape {
    /// A counter per row: `name`, then `_<unit>` if any, then `_total`.
    pub fn counter(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        rows: impl IntoIterator<Item = (Labels, u64)>,
    ) {
        self.add(name, help, unit, Rows::new(MetricType::Counter, rows));
    }

    /// A gauge per row: `name`, then `_<unit>` if any.
    pub fn gauge(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        rows: impl IntoIterator<Item = (Labels, f64)>,
    ) {
        self.add(name, help, unit, Rows::new(MetricType::Gauge, rows));
    }

    /// A histogram per row, in seconds: `name_seconds` with its `_bucket`, `_sum`, `_count`.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (Labels, HistogramSnapshot)>,
    ) {
        let rows = Rows::new(MetricType::Histogram, rows);
        self.add(name, help, Some(Unit::Seconds), rows);
    }

    fn add<V>(&mut self, name: &str, help: &str, unit: Option<Unit>, rows: Rows<V>)
    where
        Rows<V>: EncodeMetric + Send + Sync + std::fmt::Debug + 'static,
    {
        // The encoder ends every help text with a full stop of its own.
        let help = help.trim_end_matches('.');
        match unit {
            Some(unit) => self.registry.register_with_unit(name, help, unit, rows),
            None => self.registry.register(name, help, rows),
        }
    }

    /// The text a `GET /metrics` answers.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail, and the rows hold nothing else that could.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

/// The rows of one series, read at this scrape.
#[derive(Debug)]
struct Rows<V> {
    kind: MetricType,
    rows: Vec<(Labels, V)>,
}

impl<V> Rows<V> {
    fn new(kind: MetricType, rows: impl IntoIterator<Item = (Labels, V)>) -> Self {
        Rows {
            kind,
            rows: rows.into_iter().collect(),
        }
    }
}

impl EncodeMetric for Rows<u64> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, value) in &self.rows {
            encoder
                .encode_family(labels)?
                .encode_counter::<Labels, _, f64>(value, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.kind
    }
}

impl EncodeMetric for Rows<f64> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, value) in &self.rows {
            encoder.encode_family(labels)?.encode_gauge(value)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.kind
    }
}

impl EncodeMetric for Rows<HistogramSnapshot> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, h) in &self.rows {
            encoder.encode_family(labels)?.encode_histogram::<Labels>(
                h.sum_seconds,
                h.count,
                &h.buckets,
                None,
            )?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.kind
    }
}
