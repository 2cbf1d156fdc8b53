//! A shared buffer as this process holds it, whatever its backend: the
//! writer's until sealed, read-only after, mapped while the Python object
//! or any array lent its memory lives.

use std::sync::{Arc, Mutex, PoisonError};

use tandem_hal::{DeviceMemory, GpuDevice};
use tandem_share::{GpuBuffer, HostMirror, MutableGpuBuffer, ObjectId};

use crate::backend::Backend;
use crate::dlpack::Imported;
use crate::errors::{Error, Kind};
use crate::layout::DLDevice;
use crate::share::ClientOf;

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
}

/// The state of one buffer: taken out only while a seal runs, under the
/// lock, so the mapping is always held by someone.
enum State<A: Backend> {
    Writable(MutableGpuBuffer<A>),
    Sealed(GpuBuffer<A>),
}

/// One buffer of backend `A`.
pub(crate) struct Core<A: Backend> {
    client: Arc<ClientOf<A>>,
    id: ObjectId,
    len: usize,
    data: u64,
    device: usize,
    state: Mutex<Option<State<A>>>,
}

impl<A: Backend> Core<A> {
    pub(crate) fn writable(client: Arc<ClientOf<A>>, buffer: MutableGpuBuffer<A>) -> Self {
        Self {
            id: buffer.id(),
            len: buffer.len(),
            data: buffer.device_ptr(),
            device: buffer.device().ordinal(),
            client,
            state: Mutex::new(Some(State::Writable(buffer))),
        }
    }

    pub(crate) fn sealed(client: Arc<ClientOf<A>>, buffer: GpuBuffer<A>) -> Self {
        Self {
            id: buffer.id(),
            len: buffer.len(),
            data: buffer.device_ptr(),
            device: buffer.device().ordinal(),
            client,
            state: Mutex::new(Some(State::Sealed(buffer))),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Option<State<A>>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sealed_error(&self) -> Error {
        Error::new(
            Kind::Sealed,
            format!("shared buffer {} is sealed: read-only", self.id),
        )
    }
}

/// The state when no seal is running (one always puts it back).
fn present<A: Backend>(state: &mut Option<State<A>>) -> &mut State<A> {
    state
        .as_mut()
        .expect("a seal puts the state back before it unlocks")
}

impl<A: Backend> AnyBuffer for Core<A> {
    fn id(&self) -> u64 {
        self.id.0
    }

    fn len(&self) -> usize {
        self.len
    }

    fn data(&self) -> u64 {
        self.data
    }

    fn dl_device(&self) -> DLDevice {
        DLDevice {
            device_type: A::DL_DEVICE_TYPE,
            // Ordinals are small; the daemon counts devices in a u32.
            device_id: i32::try_from(self.device).unwrap_or(i32::MAX),
        }
    }

    fn sealed(&self) -> bool {
        matches!(present(&mut self.state()), State::Sealed(_))
    }

    fn seal(&self, stream: Option<i64>) -> Result<(), Error> {
        let stream = A::producer_stream(stream)?;
        let mut state = self.state();
        let buffer = match state.take() {
            Some(State::Writable(buffer)) => buffer,
            sealed => {
                *state = sealed;
                return Err(self.sealed_error());
            }
        };
        let (device, own) = match self.client.device(self.device) {
            Ok(device) => device,
            Err(e) => {
                *state = Some(State::Writable(buffer));
                return Err(e);
            }
        };
        match A::seal(&self.client.share, &device, &own, buffer, stream) {
            Ok(sealed) => {
                let recorded = if A::SEAL_RUNS_IN_PROCESS {
                    sealed.wait_for_seal()
                } else {
                    Ok(())
                };
                *state = Some(State::Sealed(sealed));
                Ok(recorded?)
            }
            Err((e, buffer)) => {
                *state = Some(State::Writable(buffer));
                Err(e)
            }
        }
    }

    fn order_stream(&self, stream: Option<i64>) -> Result<(), Error> {
        let Some(stream) = A::consumer_stream(stream)? else {
            return Ok(());
        };
        match present(&mut self.state()) {
            // The writer orders its own work.
            State::Writable(_) => Ok(()),
            State::Sealed(buffer) => A::order_stream(buffer, stream),
        }
    }

    fn wait_for_seal(&self) -> Result<(), Error> {
        match present(&mut self.state()) {
            State::Writable(_) => Ok(()),
            State::Sealed(buffer) => Ok(buffer.wait_for_seal()?),
        }
    }

    fn host_address(&self) -> Option<*mut u8> {
        A::host_address(self.data)
    }

    fn read_host(&self) -> Result<Vec<u8>, Error> {
        let mut state = self.state();
        match present(&mut state) {
            State::Writable(buffer) => {
                // A look, not a mirror: nothing is to be copied back.
                let (device, _stream) = self.client.device(self.device)?;
                let mut bytes = vec![0u8; self.len];
                device.copy_from_device(&mut bytes, &*buffer, 0)?;
                Ok(bytes)
            }
            State::Sealed(buffer) => Ok(HostMirror::new(&*buffer, true)?.to_vec()),
        }
    }

    fn write_host(&self, bytes: &[u8]) -> Result<(), Error> {
        let mut state = self.state();
        let State::Writable(buffer) = present(&mut state) else {
            return Err(self.sealed_error());
        };
        if bytes.len() != self.len {
            return Err(Error::new(
                Kind::Shape,
                format!("{} bytes for a buffer of {}", bytes.len(), self.len),
            ));
        }
        let mut mirror = HostMirror::new(buffer, false)?;
        mirror.copy_from_slice(bytes);
        Ok(mirror.finish()?)
    }

    fn copy_in(&self, src: &Imported<'_>) -> Result<(), Error> {
        let mut state = self.state();
        let State::Writable(buffer) = present(&mut state) else {
            return Err(self.sealed_error());
        };
        if src.len != self.len {
            return Err(Error::new(
                Kind::Shape,
                format!("{} bytes for a buffer of {}", src.len, self.len),
            ));
        }
        let (device, _stream) = self.client.device(self.device)?;
        A::copy_in(&device, &*buffer, src)
    }
}
