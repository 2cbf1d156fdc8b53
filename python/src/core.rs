//! A shared buffer as this process holds it, whatever its backend: the
//! writer's until sealed, read-only after, mapped while the Python object
//! or any array lent its memory lives.

use std::sync::Arc;

use tandem_share::{AnyHeldBuffer, HeldBuffer};

use crate::backend::Backend;
use crate::dlpack::Imported;
use crate::errors::{Error, Kind};
use crate::layout::DLDevice;

/// What the Python classes ask of a buffer, object-safe so that they need
/// not be generic over the backend.
pub(crate) trait AnyBuffer: Send + Sync {
    fn id(&self) -> u64;
    fn len(&self) -> usize;
    /// The address its memory is at on its device (constant).
    fn data(&self) -> u64;
    fn dl_device(&self) -> DLDevice;
    fn sealed(&self) -> bool;
    /// Seals it once the work queued so far on `stream` (a raw handle, or
    /// `None`: the backend's default) is done.
    fn seal(&self, stream: Option<i64>) -> Result<(), Error>;
    /// Orders a consumer's `stream` (DLPack's value) after the seal.
    fn order_stream(&self, stream: Option<i64>) -> Result<(), Error>;
    /// Blocks until the writer's work is done (nothing for the writer).
    fn wait_for_seal(&self) -> Result<(), Error>;
    /// Its host address, where the host reads it in place (CPU device).
    fn host_address(&self) -> Option<*mut u8>;
    /// A host copy of its bytes.
    fn read_host(&self) -> Result<Vec<u8>, Error>;
    /// Writes `bytes` (its length) back; the writer's only.
    fn write_host(&self, bytes: &[u8]) -> Result<(), Error>;
    /// Copies another library's memory in from the start; the writer's only.
    fn copy_in(&self, src: &Imported<'_>) -> Result<(), Error>;
    /// Waits for all work queued on its device (what the pool's free waits
    /// for before it unmaps, as `cudaFree` would).
    fn synchronize_device(&self) -> Result<(), Error>;
}

/// The package's side of a held buffer: its backend's conventions over
/// the share crate's buffer, whose client's streams its seals and copies
/// use.
pub(crate) fn core_of(held: AnyHeldBuffer) -> Result<Arc<dyn AnyBuffer>, Error> {
    match held {
        AnyHeldBuffer::Host(held) => Ok(Arc::new(Core { held })),
        #[cfg(feature = "cuda")]
        AnyHeldBuffer::Cuda(held) => Ok(Arc::new(Core { held })),
        other => Err(unsupported(other.backend())),
    }
}

/// The refusal of a backend this package does not support.
pub(crate) fn unsupported(backend: tandem_hal::Backend) -> Error {
    Error::new(
        Kind::Refused,
        format!("the {backend} backend, which this build of the package lacks"),
    )
}

/// One buffer of backend `A`.
struct Core<A: Backend> {
    held: HeldBuffer<A>,
}

impl<A: Backend> Core<A> {
    fn check_len(&self, len: usize) -> Result<(), Error> {
        if len == self.held.len() {
            return Ok(());
        }
        Err(Error::new(
            Kind::Shape,
            format!("{len} bytes for a buffer of {}", self.held.len()),
        ))
    }
}

impl<A: Backend> AnyBuffer for Core<A> {
    fn id(&self) -> u64 {
        self.held.id().0
    }

    fn len(&self) -> usize {
        self.held.len()
    }

    fn data(&self) -> u64 {
        self.held.device_ptr()
    }

    fn dl_device(&self) -> DLDevice {
        DLDevice {
            device_type: A::DL_DEVICE_TYPE,
            // Ordinals are small; the daemon counts devices in a u32.
            device_id: i32::try_from(self.held.device()).unwrap_or(i32::MAX),
        }
    }

    fn sealed(&self) -> bool {
        self.held.is_sealed()
    }

    fn seal(&self, stream: Option<i64>) -> Result<(), Error> {
        let stream = A::producer_stream(stream)?;
        let (_device, own) = self.held.client().stream(self.held.device())?;
        self.held
            .seal_with(|holder, event| A::record_seal(holder, &own, event, stream))?;
        if A::SEAL_RUNS_IN_PROCESS {
            self.held.wait_for_seal()?;
        }
        Ok(())
    }

    fn order_stream(&self, stream: Option<i64>) -> Result<(), Error> {
        let Some(stream) = A::consumer_stream(stream)? else {
            return Ok(());
        };
        // The writer orders its own work.
        self.held
            .with_sealed(|buffer| A::order_stream(buffer, stream))
            .unwrap_or(Ok(()))
    }

    fn wait_for_seal(&self) -> Result<(), Error> {
        Ok(self.held.wait_for_seal()?)
    }

    fn host_address(&self) -> Option<*mut u8> {
        A::host_address(self.held.device_ptr())
    }

    fn read_host(&self) -> Result<Vec<u8>, Error> {
        Ok(self.held.to_vec()?)
    }

    fn write_host(&self, bytes: &[u8]) -> Result<(), Error> {
        self.check_len(bytes.len())?;
        Ok(self.held.write(0, bytes)?)
    }

    fn copy_in(&self, src: &Imported<'_>) -> Result<(), Error> {
        self.check_len(src.len)?;
        let (device, _stream) = self.held.client().stream(self.held.device())?;
        self.held
            .with_writable(|buffer| A::copy_in(&device, &*buffer, src))?
    }

    fn synchronize_device(&self) -> Result<(), Error> {
        let device = self.held.client().device(self.held.device())?;
        Ok(tandem_hal::GpuDevice::synchronize(&*device)?)
    }
}
