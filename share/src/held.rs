//! A shared buffer as a language front holds it (the C ABI's handle, a
//! Python object): one value whatever its state, its writer's until sealed,
//! read-only after, behind a lock, so that any thread may call it and the
//! seal swaps the state in place. Each front keeps only its language's
//! conventions on top.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tandem_hal::{DeviceMemory, GpuApi, GpuDevice, GpuResult};

use crate::buffer::{GpuBuffer, HostMirror, MutableGpuBuffer};
use crate::client::ShareClient;
use crate::error::ShareError;
use crate::wire::ObjectId;

/// A shared buffer held by a front: see the module docs.
pub struct HeldBuffer<A: GpuApi> {
    client: ShareClient<A>,
    id: ObjectId,
    len: usize,
    device_ptr: u64,
    device: usize,
    /// `None` only while a seal runs, under the lock: it puts the state
    /// back, sealed or not, before it unlocks.
    state: Mutex<Option<State<A>>>,
}

enum State<A: GpuApi> {
    Writable(MutableGpuBuffer<A>),
    Sealed(GpuBuffer<A>),
}

impl<A: GpuApi> HeldBuffer<A> {
    /// A writer's buffer, fresh from [`ShareClient::create_buffer`].
    pub fn writable(client: ShareClient<A>, buffer: MutableGpuBuffer<A>) -> Self {
        let (id, len, ptr, device) = (
            buffer.id(),
            buffer.len(),
            buffer.device_ptr(),
            buffer.device().ordinal(),
        );
        Self::holding(client, (id, len, ptr, device), State::Writable(buffer))
    }

    /// A reader's buffer, from [`ShareClient::get_buffer`] and the like.
    pub fn sealed(client: ShareClient<A>, buffer: GpuBuffer<A>) -> Self {
        let (id, len, ptr, device) = (
            buffer.id(),
            buffer.len(),
            buffer.device_ptr(),
            buffer.device().ordinal(),
        );
        Self::holding(client, (id, len, ptr, device), State::Sealed(buffer))
    }

    /// A held `state`, given its buffer's id, length, address and device
    /// ordinal (constant whatever the state).
    fn holding(
        client: ShareClient<A>,
        (id, len, device_ptr, device): (ObjectId, usize, u64, usize),
        state: State<A>,
    ) -> Self {
        Self {
            client,
            id,
            len,
            device_ptr,
            device,
            state: Mutex::new(Some(state)),
        }
    }

    /// Its id.
    pub fn id(&self) -> ObjectId {
        self.id
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never: buffers hold at least a byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its address on the device it is mapped for (constant).
    pub fn device_ptr(&self) -> u64 {
        self.device_ptr
    }

    /// The ordinal of the device it is mapped for.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The client it came from.
    pub fn client(&self) -> &ShareClient<A> {
        &self.client
    }

    /// Whether it is sealed (read-only).
    pub fn is_sealed(&self) -> bool {
        matches!(self.present().as_ref(), Some(State::Sealed(_)))
    }

    /// Copies `data` to `offset`: the writer's only, before the seal
    /// ([`ShareError::NotWriter`] after). Blocks until copied.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), ShareError> {
        self.check_range(offset, data.len())?;
        self.with_writable(|buffer| Ok(buffer.device().copy_to_device(buffer, offset, data)?))?
    }

    /// Copies the `out.len()` bytes at `offset` to `out`, and only those: a
    /// writer's as they are, a sealed one's once the writer's work is done.
    /// Blocks until copied.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), ShareError> {
        self.check_range(offset, out.len())?;
        match self.present().as_ref().expect(PRESENT) {
            State::Writable(buffer) => Ok(buffer.device().copy_from_device(out, buffer, offset)?),
            State::Sealed(buffer) => {
                buffer.wait_for_seal()?;
                Ok(buffer.device().copy_from_device(out, buffer, offset)?)
            }
        }
    }

    /// All of it, copied to the host (for a sealed one, once the writer's
    /// work is done).
    pub fn to_vec(&self) -> Result<Vec<u8>, ShareError> {
        match self.present().as_ref().expect(PRESENT) {
            State::Writable(buffer) => {
                let mut bytes = vec![0u8; self.len];
                buffer.device().copy_from_device(&mut bytes, buffer, 0)?;
                Ok(bytes)
            }
            State::Sealed(buffer) => Ok(HostMirror::new(buffer, true)?.to_vec()),
        }
    }

    /// Runs `work` on the writer's buffer; [`ShareError::NotWriter`] once
    /// it is sealed.
    pub fn with_writable<T>(
        &self,
        work: impl FnOnce(&mut MutableGpuBuffer<A>) -> T,
    ) -> Result<T, ShareError> {
        match self.present().as_mut().expect(PRESENT) {
            State::Writable(buffer) => Ok(work(buffer)),
            State::Sealed(_) => Err(ShareError::NotWriter(self.id)),
        }
    }

    /// Runs `work` on the sealed buffer; `None` while it is the writer's.
    pub fn with_sealed<T>(&self, work: impl FnOnce(&GpuBuffer<A>) -> T) -> Option<T> {
        match self.present().as_ref().expect(PRESENT) {
            State::Writable(_) => None,
            State::Sealed(buffer) => Some(work(buffer)),
        }
    }

    /// Blocks until the writer's work is done (nothing for the writer,
    /// whose work is its own to wait for).
    pub fn wait_for_seal(&self) -> Result<(), ShareError> {
        self.with_sealed(GpuBuffer::wait_for_seal).unwrap_or(Ok(()))
    }

    /// Seals it once the work queued so far on the client's own stream of
    /// its device ([`ShareClient::stream`]) is done, and waits for the
    /// seal's record, so the process may exit as soon as this returns (a
    /// record left queued would go with it, and readers would wait on it
    /// for ever). For callers whose own work on the buffer is complete.
    pub fn seal(&self) -> Result<(), ShareError> {
        let (_device, stream) = self.client.stream(self.device)?;
        self.seal_with(|holder, event| holder.record_event(event, &stream))?;
        self.wait_for_seal()
    }

    /// Seals it, `record` recording the seal's event (given the device
    /// holding the buffer and the event) on a stream whose work so far
    /// completes it ([`ShareClient::try_seal_with`]); does not wait for the
    /// record. [`ShareError::NotWriter`] if sealed already; a failed seal
    /// leaves it the writer's.
    pub fn seal_with(
        &self,
        record: impl FnOnce(&A::Device, &<A::Device as GpuDevice>::Event) -> GpuResult<()>,
    ) -> Result<(), ShareError> {
        let mut state = self.present();
        let buffer = match state.take().expect(PRESENT) {
            State::Writable(buffer) => buffer,
            sealed @ State::Sealed(_) => {
                *state = Some(sealed);
                return Err(ShareError::NotWriter(self.id));
            }
        };
        match self.client.try_seal_with(buffer, record) {
            Ok(sealed) => {
                *state = Some(State::Sealed(sealed));
                Ok(())
            }
            Err((e, buffer)) => {
                *state = Some(State::Writable(buffer));
                Err(e)
            }
        }
    }

    fn present(&self) -> MutexGuard<'_, Option<State<A>>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), ShareError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(ShareError::OutOfRange {
                id: self.id,
                offset,
                len,
                buffer: self.len,
            }),
        }
    }
}

/// A seal puts the state back before it unlocks.
const PRESENT: &str = "a seal puts the state back before it unlocks";
