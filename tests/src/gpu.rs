//! Finding a device for a test, or skipping it.

use std::sync::{Mutex, MutexGuard};

use tandem_hal::{Backend, GpuApi, GpuResult};

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
    loaded_or_skip(label, A::load())
}

/// [`api_or_skip`] for a backend already loaded (or not) by the caller.
fn loaded_or_skip<A: GpuApi>(label: &str, loaded: GpuResult<A>) -> Option<A> {
    let noun = device_noun(A::BACKEND);
    let found = loaded.and_then(|api| match api.device_count()? {
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

/// The backend `load` returns, with at least `count` devices, for tests of
/// several devices (peer access, multi-device runtimes, shared buffers), or `None`
/// when the test `label` is skipped. No device at all is decided as by
/// [`api_or_skip`] (a failure under `TANDEM_REQUIRE_GPU=1`); a machine with
/// devices, but fewer than `count`, skips with `skipped: needs {count}
/// devices` even then, since no setting makes a one-GPU machine a two-GPU
/// one. The host backend is loaded with as many devices as its caller asks
/// for and never skips.
pub fn api_with_devices_or_skip<A: GpuApi>(
    label: &str,
    count: usize,
    load: impl FnOnce() -> GpuResult<A>,
) -> Option<A> {
    let api = loaded_or_skip(label, load())?;
    let available = api
        .device_count()
        .expect("a loaded backend counted its devices");
    if available < count {
        if A::BACKEND == Backend::Host {
            panic!("{label}: the host backend was loaded with {available} of {count} devices");
        }
        println!("{label}: skipped: needs {count} devices ({available} present)");
        return None;
    }
    Some(api)
}

/// Devices `0..count` of the backend `load` returns, or `None` when the
/// test `label` is skipped, as [`api_with_devices_or_skip`] decides.
pub fn devices_or_skip<A: GpuApi>(
    label: &str,
    count: usize,
    load: impl FnOnce() -> GpuResult<A>,
) -> Option<Vec<A::Device>> {
    let api = api_with_devices_or_skip(label, count, load)?;
    let devices = (0..count)
        .map(|ordinal| api.device(ordinal))
        .collect::<GpuResult<Vec<_>>>();
    match devices {
        Ok(devices) => Some(devices),
        Err(e) => skip(
            label,
            format!("no {} device ({e})", device_noun(A::BACKEND)),
            A::BACKEND,
        ),
    }
}

/// A device test's turn: the tests of one test binary that hold it run one
/// at a time. A test's GPU service must not run while another test's driver
/// calls wait for the device to be idle (see `GpuService`): such a call
/// waits for the service, which its test may then never get to stop.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    // A failed test poisons the lock; the next one still runs.
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A module per backend this build has, `host` always and `cuda`/`hip` with the calling crate's
/// features of those names, holding a `#[test]` per behaviour: each runs `super::behaviour(api)`
/// on that backend, or says why it skipped ([`api_or_skip`]). The behaviours after
/// `two_devices:` need two devices (the host backend is made with two) and take the backend's
/// loader rather than an API, since some load once per client they connect.
#[macro_export]
macro_rules! backend_tests {
    ($($behaviour:ident),* $(,)? $(; two_devices: $($pair:ident),* $(,)?)?) => {
        $crate::backend_tests!(@backend host, tandem_hal::HostApi,
            || ::core::result::Result::Ok(tandem_hal::HostApi::with_devices(2));
            [$($behaviour)*] [$($($pair)*)?]);
        #[cfg(feature = "cuda")]
        $crate::backend_tests!(@backend cuda, tandem_hal_cuda::CudaApi,
            <tandem_hal_cuda::CudaApi as tandem_hal::GpuApi>::load;
            [$($behaviour)*] [$($($pair)*)?]);
        #[cfg(feature = "hip")]
        $crate::backend_tests!(@backend hip, tandem_hal_hip::HipApi,
            <tandem_hal_hip::HipApi as tandem_hal::GpuApi>::load;
            [$($behaviour)*] [$($($pair)*)?]);
    };
    (@backend $backend:ident, $api:ty, $load:expr; [$($behaviour:ident)*] [$($pair:ident)*]) => {
        mod $backend {
            $(
                #[test]
                fn $behaviour() {
                    let label = stringify!($behaviour);
                    if let Some(api) = $crate::gpu::api_or_skip::<$api>(label) {
                        super::$behaviour(api);
                    }
                }
            )*
            $(
                #[test]
                fn $pair() {
                    let label = stringify!($pair);
                    if $crate::gpu::api_with_devices_or_skip::<$api>(label, 2, $load).is_some() {
                        super::$pair::<$api>($load);
                    }
                }
            )*
        }
    };
}
