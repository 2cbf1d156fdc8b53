//! Tandem's Prometheus endpoint, shared by its services (`tandem run`, `tandem blob run`,
//! `tandem share serve`): each says what it shows through a [`Source`], read at every scrape
//! from counters it keeps anyway, and a [`MetricsServer`] answers `GET /metrics` with it in
//! Prometheus' text format.
//!
//! # The front
//!
//! * **Serving.** [`MetricsServer`] listens where [`parse_metrics_address`] says (loopback for
//!   a port alone), bounded against hostile clients ([`MAX_CONNECTIONS`],
//!   [`MAX_REQUEST_HEAD`], [`HEAD_TIME`], [`CONNECTION_TIME`]); a failure is a
//!   [`MetricsError`].
//! * **Saying what to show.** A [`Source`] fills a [`Scrape`] with counters, gauges and
//!   histograms, each row a [`Labels`] and a value; [`Unit`] names a series' unit.
//! * **Latency.** [`LatencyHistogram`] is what threads observe durations into without a lock,
//!   and [`HistogramSnapshot`] what a scrape reads of it ([`LATENCY_BOUNDS`]).

mod address;
mod error;
mod histogram;
mod scrape;
mod server;

pub use address::parse_metrics_address;
pub use error::MetricsError;
pub use histogram::{HistogramSnapshot, LatencyHistogram, LATENCY_BOUNDS};
pub use prometheus_client::registry::Unit;
pub use scrape::{Labels, Scrape};
pub use server::{
    MetricsServer, Source, CONNECTION_TIME, HEAD_TIME, MAX_CONNECTIONS, MAX_REQUEST_HEAD,
};
