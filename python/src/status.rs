//! `tandem.status`: what `tandem status --json` prints, as a dict.

use pyo3::prelude::*;
use tandem_runtime::status::{read_status, single_live_runtime};

use crate::errors::{no_single_runtime, Error, Kind};

/// The status of the runtime of CPU segment `segment` (default: the one
/// live runtime), as the JSON text of `tandem status --json`.
#[pyfunction]
#[pyo3(signature = (segment=None))]
pub(crate) fn status_json(py: Python<'_>, segment: Option<String>) -> PyResult<String> {
    let text = py.allow_threads(move || -> Result<String, Error> {
        let failed = |e: &dyn std::fmt::Display| Error::new(Kind::Status, e.to_string());
        let segment = match segment {
            Some(segment) => segment,
            None => single_live_runtime().map_err(|e| no_single_runtime(e, Kind::Status))?,
        };
        let status = read_status(&segment).map_err(|e| failed(&e))?;
        serde_json::to_string(&status).map_err(|e| failed(&e))
    })?;
    Ok(text)
}
