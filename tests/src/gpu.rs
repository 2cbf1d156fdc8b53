//! Finding a device for a test, or skipping it.

use tandem_hal::{Backend, GpuApi};

/// Set to `1` to make a missing device fail GPU tests instead of skipping
/// them (CI machines that do have the GPU).
pub const REQUIRE_GPU_ENV: &str = "TANDEM_REQUIRE_GPU";

/// How a backend's devices are named in skip messages.
fn device_noun(backend: Backend) -> &'static str {
    match backend {
        Backend::Host => "host",
        Backend::Cuda => "CUDA",
        Backend::Hip => "HIP",
    }
}

/// Backend `A`, loaded, with at least one device, or `None` after printing
/// why the test `label` is skipped when it cannot load or has no device.
/// With `TANDEM_REQUIRE_GPU=1` that case panics instead, failing the test;
/// so does it always for the host backend, which is built in and has a
/// device on every machine: its tests never skip.
pub fn api_or_skip<A: GpuApi>(label: &str) -> Option<A> {
    let noun = device_noun(A::BACKEND);
    let found = A::load().and_then(|api| match api.device_count()? {
        0 => Ok(None),
        _ => Ok(Some(api)),
    });
    let why = match found {
        Ok(Some(api)) => return Some(api),
        Ok(None) => format!("no {noun} device"),
        Err(e) => format!("no {noun} device ({e})"),
    };
    skip(label, why, A::BACKEND)
}

/// Device 0 of backend `A`, or `None` when the test `label` is skipped, as
/// [`api_or_skip`] decides.
pub fn device_or_skip<A: GpuApi>(label: &str) -> Option<A::Device> {
    let api = api_or_skip::<A>(label)?;
    match api.device(0) {
        Ok(device) => Some(device),
        Err(e) => skip(
            label,
            format!("no {} device ({e})", device_noun(A::BACKEND)),
            A::BACKEND,
        ),
    }
}

fn skip<T>(label: &str, why: String, backend: Backend) -> Option<T> {
    if backend == Backend::Host {
        panic!("{label}: {why}: the host backend must always load");
    }
    crate::skip_unless_required(REQUIRE_GPU_ENV, label, &why)
}
