//! The backends a Python process reaches memory on: the CPU device always,
//! CUDA with the `cuda` feature. What differs between them (where the host
//! can read a buffer, what a writer's seal is recorded on, how a consumer's
//! stream is ordered after a seal, how another library's memory is copied)
//! is this trait; everything else is generic.

use tandem_hal::{DeviceMemory, GpuApi, GpuDevice, GpuResult, HostApi};
use tandem_share::GpuBuffer;

use crate::dlpack::{Imported, Place};
use crate::errors::{Error, Kind};
use crate::layout::DL_CPU;

/// `CU_STREAM_LEGACY`: the legacy default stream of the current context, as
/// a raw handle (DLPack's and `__cuda_array_interface__`'s value 1).
pub(crate) const LEGACY_STREAM: i64 = 1;

/// A backend as the package uses it.
pub(crate) trait Backend: GpuApi {
    /// Its DLPack device type.
    const DL_DEVICE_TYPE: i32;

    /// The host address of `device_ptr`, memory of this backend, where the
    /// host reads it at the same address (the CPU device); else `None`.
    fn host_address(device_ptr: u64) -> Option<*mut u8>;

    /// The stream a writer's `seal(stream=...)` named (a raw handle, `None`
    /// when none was), checked: what [`seal`](Self::seal) records on.
    fn producer_stream(stream: Option<i64>) -> Result<usize, Error>;

    /// Records a seal's `event` on `holder` (the buffer's device) once the
    /// work queued so far on `stream` (from
    /// [`producer_stream`](Self::producer_stream)) is done; `own` is the
    /// client's stream of the holder. What `HeldBuffer::seal_with` calls.
    fn record_seal(
        holder: &Self::Device,
        own: &<Self::Device as GpuDevice>::Stream,
        event: &<Self::Device as GpuDevice>::Event,
        stream: usize,
    ) -> GpuResult<()>;

    /// Whether a seal's record runs on a thread of this process (the CPU
    /// device's streams): the seal then waits for it, as a writer that
    /// exits right after sealing would take the unrun record with it and
    /// its readers would wait on the seal for ever.
    const SEAL_RUNS_IN_PROCESS: bool;

    /// The stream a consumer named (DLPack's `__dlpack__(stream=...)`
    /// value), checked: `None` when it asks for no ordering.
    fn consumer_stream(stream: Option<i64>) -> Result<Option<usize>, Error>;

    /// Orders what the consumer queues on `stream` (from
    /// [`consumer_stream`](Self::consumer_stream)) after `buffer`'s seal.
    fn order_stream(buffer: &GpuBuffer<Self>, stream: usize) -> Result<(), Error>;

    /// Copies `src`, another library's memory, into `dst` from its start;
    /// complete on return.
    fn copy_in(
        device: &Self::Device,
        dst: &impl DeviceMemory<Api = Self>,
        src: &Imported<'_>,
    ) -> Result<(), Error>;
}

impl Backend for HostApi {
    const DL_DEVICE_TYPE: i32 = DL_CPU;
    const SEAL_RUNS_IN_PROCESS: bool = true;

    fn host_address(device_ptr: u64) -> Option<*mut u8> {
        // The CPU device's memory is host memory at its device address
        // (its `HostMemory` impls return `device_ptr` as `host_ptr`).
        Some(device_ptr as *mut u8)
    }

    /// The CPU device has no streams: `None` only.
    fn producer_stream(stream: Option<i64>) -> Result<usize, Error> {
        match stream {
            None => Ok(0),
            Some(other) => Err(Error::new(
                Kind::Stream,
                format!("stream {other} for the CPU device, which has no streams: pass None"),
            )),
        }
    }

    /// The device's threads are waited for, then the seal is recorded on
    /// the client's stream.
    fn record_seal(
        holder: &Self::Device,
        own: &<Self::Device as GpuDevice>::Stream,
        event: &<Self::Device as GpuDevice>::Event,
        _stream: usize,
    ) -> GpuResult<()> {
        holder.synchronize()?;
        holder.record_event(event, own)
    }

    /// The CPU has no streams: the standard's `None` only (or `-1`, no
    /// ordering asked).
    fn consumer_stream(stream: Option<i64>) -> Result<Option<usize>, Error> {
        match stream {
            None => Ok(Some(0)),
            Some(-1) => Ok(None),
            Some(other) => Err(Error::new(
                Kind::Export,
                format!("stream {other} for CPU memory: only None is allowed"),
            )),
        }
    }

    /// The host itself waits for the writer's work.
    fn order_stream(buffer: &GpuBuffer<Self>, _stream: usize) -> Result<(), Error> {
        Ok(buffer.wait_for_seal()?)
    }

    fn copy_in(
        device: &Self::Device,
        dst: &impl DeviceMemory<Api = Self>,
        src: &Imported<'_>,
    ) -> Result<(), Error> {
        Ok(device.copy_to_device(dst, 0, host_bytes(src)?)?)
    }
}

/// `imported`'s bytes, when they are host memory.
pub(crate) fn host_bytes<'a>(imported: &'a Imported<'_>) -> Result<&'a [u8], Error> {
    if imported.place != Place::Host {
        return Err(no_device(imported.place));
    }
    if imported.len == 0 {
        return Ok(&[]);
    }
    // SAFETY: a compact host tensor of `len` bytes, kept alive by its
    // capsule, which `imported` holds for `'a`.
    Ok(unsafe { std::slice::from_raw_parts(imported.data as *const u8, imported.len) })
}

/// `imported`'s bytes, writable, when they are host memory the producer
/// did not mark read-only.
pub(crate) fn host_bytes_mut<'a>(imported: &'a mut Imported<'_>) -> Result<&'a mut [u8], Error> {
    if imported.place != Place::Host {
        return Err(no_device(imported.place));
    }
    if imported.read_only {
        return Err(Error::new(
            Kind::Unsupported,
            "the output tensor is read-only",
        ));
    }
    if imported.len == 0 {
        return Ok(&mut []);
    }
    // SAFETY: as for `host_bytes`; the producer lent it writable, and the
    // exclusive borrow of `imported` keeps this the only slice of it.
    Ok(unsafe { std::slice::from_raw_parts_mut(imported.data as *mut u8, imported.len) })
}

fn no_device(place: Place) -> Error {
    Error::new(
        Kind::Unsupported,
        format!("memory on {place:?}, which this build of the package does not reach"),
    )
}

#[cfg(feature = "cuda")]
pub(crate) use cuda::{read_device, write_device};

#[cfg(not(feature = "cuda"))]
/// Device memory's bytes: a build without CUDA reaches none.
pub(crate) fn read_device(imported: &Imported<'_>) -> Result<Vec<u8>, Error> {
    Err(no_device(imported.place))
}

#[cfg(not(feature = "cuda"))]
/// Writes device memory: a build without CUDA reaches none.
pub(crate) fn write_device(imported: &mut Imported<'_>, _bytes: &[u8]) -> Result<(), Error> {
    Err(no_device(imported.place))
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::marker::PhantomData;
    use std::sync::OnceLock;

    use tandem_hal::{DeviceMemory, GpuApi, GpuDevice, GpuResult};
    use tandem_hal_cuda::{CudaApi, CudaDevice};
    use tandem_share::GpuBuffer;

    use super::{host_bytes, Backend};
    use crate::dlpack::{Imported, Place};
    use crate::errors::{Error, Kind};
    use crate::layout::DL_CUDA;

    /// [`super::LEGACY_STREAM`] as the driver takes it.
    const LEGACY_STREAM: usize = super::LEGACY_STREAM as usize;

    /// Another library's CUDA memory, lent through its DLPack capsule.
    struct Foreign<'a> {
        ptr: u64,
        len: usize,
        _capsule: PhantomData<&'a ()>,
    }

    impl<'a> Foreign<'a> {
        fn of(imported: &'a Imported<'_>) -> Self {
            Self {
                ptr: imported.data,
                len: imported.len,
                _capsule: PhantomData,
            }
        }
    }

    // SAFETY: built only from a CUDA DLPack tensor (checked by `Place`) of
    // `len` compact bytes whose capsule outlives `'a`; both values are
    // fixed. It is written only when its producer lent it writable.
    unsafe impl DeviceMemory for Foreign<'_> {
        type Api = CudaApi;
        fn device_ptr(&self) -> u64 {
            self.ptr
        }
        fn len(&self) -> usize {
            self.len
        }
    }

    impl Backend for CudaApi {
        const DL_DEVICE_TYPE: i32 = DL_CUDA;
        /// The GPU runs the record.
        const SEAL_RUNS_IN_PROCESS: bool = false;

        fn host_address(_device_ptr: u64) -> Option<*mut u8> {
            None
        }

        /// `__cuda_array_interface__`'s values: `None` and 1 the legacy
        /// default stream (its record waits for the work of every blocking
        /// stream of the context: PyTorch's and CuPy's default ones, not
        /// streams made non-blocking, such as PyTorch's side streams), 2
        /// the per-thread default one, 0 refused (ambiguous), anything
        /// else a stream's handle.
        fn producer_stream(stream: Option<i64>) -> Result<usize, Error> {
            match stream {
                None => Ok(LEGACY_STREAM),
                Some(0) => Err(Error::new(
                    Kind::Stream,
                    "stream 0 is ambiguous for CUDA: pass 1 (legacy default) or 2 (per-thread)",
                )),
                Some(raw) => usize::try_from(raw).map_err(|_| {
                    Error::new(Kind::Stream, format!("stream {raw} is not a CUDA stream"))
                }),
            }
        }

        /// The seal's event recorded on the writer's stream: no host wait.
        fn record_seal(
            holder: &CudaDevice,
            _own: &<CudaDevice as GpuDevice>::Stream,
            event: &<CudaDevice as GpuDevice>::Event,
            stream: usize,
        ) -> GpuResult<()> {
            // SAFETY: `seal(stream=...)` names a stream of the buffer's
            // device, as a DLPack consumer does, or one of the special
            // handles.
            unsafe { holder.foreign_stream_record_event(stream, event) }
        }

        /// The standard's CUDA values: `None` and 1 the legacy default
        /// stream, 2 the per-thread default one, -1 no ordering, 0
        /// refused (ambiguous), anything else a stream's handle.
        fn consumer_stream(stream: Option<i64>) -> Result<Option<usize>, Error> {
            match stream {
                Some(-1) => Ok(None),
                Some(0) => Err(Error::new(
                    Kind::Export,
                    "stream 0 is ambiguous for CUDA: pass 1 (legacy default) or 2 (per-thread)",
                )),
                None => Ok(Some(LEGACY_STREAM)),
                Some(raw) => usize::try_from(raw).map(Some).map_err(|_| {
                    Error::new(Kind::Export, format!("stream {raw} is not a CUDA stream"))
                }),
            }
        }

        fn order_stream(buffer: &GpuBuffer<Self>, raw: usize) -> Result<(), Error> {
            if let Some(event) = buffer.pending_seal()? {
                // SAFETY: DLPack's consumer passes a stream of the device
                // `__dlpack_device__` named, the buffer's, or one of the
                // special handles.
                unsafe { buffer.device().foreign_stream_wait_event(raw, event) }?;
            }
            Ok(())
        }

        fn copy_in(
            device: &CudaDevice,
            dst: &impl DeviceMemory<Api = Self>,
            src: &Imported<'_>,
        ) -> Result<(), Error> {
            match src.place {
                Place::Host => Ok(device.copy_to_device(dst, 0, host_bytes(src)?)?),
                Place::Cuda(_) => {
                    Ok(device.copy_device_to_device(dst, 0, &Foreign::of(src), 0, src.len)?)
                }
            }
        }
    }

    /// This process's CUDA devices, opened on first use.
    fn device(ordinal: usize) -> Result<CudaDevice, Error> {
        static API: OnceLock<Result<CudaApi, String>> = OnceLock::new();
        let api = API
            .get_or_init(|| CudaApi::load().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Error::new(Kind::NoDevice, e.clone()))?;
        Ok(api.device(ordinal)?)
    }

    /// A CUDA tensor's bytes, copied to the host.
    pub(crate) fn read_device(imported: &Imported<'_>) -> Result<Vec<u8>, Error> {
        let Place::Cuda(ordinal) = imported.place else {
            return Ok(host_bytes(imported)?.to_vec());
        };
        let mut bytes = vec![0u8; imported.len];
        device(ordinal)?.copy_from_device(&mut bytes, &Foreign::of(imported), 0)?;
        Ok(bytes)
    }

    /// Writes `bytes` into a CUDA tensor lent writable.
    pub(crate) fn write_device(imported: &mut Imported<'_>, bytes: &[u8]) -> Result<(), Error> {
        let Place::Cuda(ordinal) = imported.place else {
            return Err(Error::new(Kind::Unsupported, "not CUDA memory"));
        };
        if imported.read_only {
            return Err(Error::new(
                Kind::Unsupported,
                "the output tensor is read-only",
            ));
        }
        Ok(device(ordinal)?.copy_to_device(&Foreign::of(imported), 0, bytes)?)
    }
}
