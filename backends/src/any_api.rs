//! A loaded backend, whichever was chosen, and generic work run on it.

use tandem_hal::{Backend, ErrorKind, GpuApi, GpuError, GpuResult, HostApi};

use crate::choice::{auto_order, BackendChoice};

/// A loaded backend: one variant per backend this build has, so that code
/// holding one value of each kind (an enum of clients) can match on it.
#[non_exhaustive]
pub enum AnyApi {
    /// The CPU device.
    Host(HostApi),
    /// CUDA (the `cuda` feature).
    #[cfg(feature = "cuda")]
    Cuda(tandem_hal_cuda::CudaApi),
    /// HIP (the `hip` feature).
    #[cfg(feature = "hip")]
    Hip(tandem_hal_hip::HipApi),
}

impl AnyApi {
    /// Loads the backend `choice` names. `Auto` is CUDA when built with it
    /// and a device answers, else HIP likewise, else the CPU device; a
    /// named GPU backend must load and have a device.
    pub fn load(choice: BackendChoice) -> GpuResult<Self> {
        match choice {
            BackendChoice::Only(backend) => load(backend),
            BackendChoice::Auto => {
                // The CPU device is last and always answers, so the loop
                // returns; its error would be a broken build's.
                let mut last = None;
                for backend in auto_order() {
                    match load(backend) {
                        Ok(api) => return Ok(api),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| not_built(Backend::Host)))
            }
        }
    }

    /// Which backend it is.
    pub fn backend(&self) -> Backend {
        match self {
            AnyApi::Host(_) => Backend::Host,
            #[cfg(feature = "cuda")]
            AnyApi::Cuda(_) => Backend::Cuda,
            #[cfg(feature = "hip")]
            AnyApi::Hip(_) => Backend::Hip,
        }
    }

    /// Runs `work` on it.
    pub fn run<W: OnBackend>(self, work: W) -> W::Output {
        match self {
            AnyApi::Host(api) => work.run(api, Backend::Host),
            #[cfg(feature = "cuda")]
            AnyApi::Cuda(api) => work.run(api, Backend::Cuda),
            #[cfg(feature = "hip")]
            AnyApi::Hip(api) => work.run(api, Backend::Hip),
        }
    }
}

/// Loads `backend`: a GPU one only with a device.
fn load(backend: Backend) -> GpuResult<AnyApi> {
    match backend {
        Backend::Host => Ok(AnyApi::Host(HostApi::load()?)),
        #[cfg(feature = "cuda")]
        Backend::Cuda => Ok(AnyApi::Cuda(with_a_device(
            tandem_hal_cuda::CudaApi::load()?,
        )?)),
        #[cfg(feature = "hip")]
        Backend::Hip => Ok(AnyApi::Hip(with_a_device(tandem_hal_hip::HipApi::load()?)?)),
        #[allow(
            unreachable_patterns,
            reason = "reached only in builds that leave a backend out"
        )]
        other => Err(not_built(other)),
    }
}

/// `api`, if it has a device: a GPU backend without one runs nothing.
#[cfg(any(feature = "cuda", feature = "hip"))]
fn with_a_device<A: GpuApi>(api: A) -> GpuResult<A> {
    match api.device_count()? {
        0 => Err(GpuError::new(
            A::BACKEND,
            "device_count",
            ErrorKind::NoDevice {
                requested: None,
                available: 0,
            },
        )),
        _ => Ok(api),
    }
}

fn not_built(backend: Backend) -> GpuError {
    GpuError::new(
        backend,
        "load",
        ErrorKind::Unsupported(format!("built without the {backend} feature")),
    )
}

/// Work to run on one backend, chosen at run time: [`on_backend`] calls
/// [`run`](Self::run) with the backend it loaded.
pub trait OnBackend {
    /// What the work returns.
    type Output;
    /// Runs the work on `api`, which is `backend`.
    fn run<A: GpuApi>(self, api: A, backend: Backend) -> Self::Output;
}

/// Runs `work` on the backend `choice` names ([`AnyApi::load`]); an error
/// only when that backend does not load.
pub fn on_backend<W: OnBackend>(choice: BackendChoice, work: W) -> GpuResult<W::Output> {
    Ok(AnyApi::load(choice)?.run(work))
}

/// [`on_backend`] with [`BackendChoice::Auto`]: an error only when not even
/// the CPU device loads.
pub fn on_best_backend<W: OnBackend>(work: W) -> GpuResult<W::Output> {
    on_backend(BackendChoice::Auto, work)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named;

    impl OnBackend for Named {
        type Output = (Backend, Backend);

        fn run<A: GpuApi>(self, _api: A, backend: Backend) -> Self::Output {
            (A::BACKEND, backend)
        }
    }

    #[test]
    fn work_runs_on_the_backend_it_is_told_of() {
        let (api, told) = on_best_backend(Named).expect("the CPU device loads");
        assert_eq!(api, told);
        let (api, _) = on_backend(BackendChoice::Only(Backend::Host), Named).expect("host");
        assert_eq!(api, Backend::Host);
    }

    #[test]
    fn auto_is_the_first_backend_that_loads_with_a_device() {
        let picked = AnyApi::load(BackendChoice::Auto).expect("the CPU device loads");
        let first = auto_order()
            .find(|b| load(*b).is_ok())
            .expect("the CPU device loads");
        assert_eq!(picked.backend(), first);
    }

    #[test]
    fn a_backend_left_out_of_the_build_does_not_load() {
        for backend in [Backend::Cuda, Backend::Hip] {
            if BackendChoice::is_built(backend) {
                continue;
            }
            let e = AnyApi::load(BackendChoice::Only(backend))
                .err()
                .expect("a backend left out does not load");
            assert_eq!(e.backend, backend);
            assert!(matches!(e.kind, ErrorKind::Unsupported(_)), "{e}");
        }
    }
}
