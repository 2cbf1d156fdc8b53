//! Streams and events, destroyed once on drop.

use core::ptr;
use core::time::Duration;

use hip_runtime_sys::{
    hipError_t, hipEventCreateWithFlags, hipEventDefault, hipEventDestroy, hipEventDisableTiming,
    hipEventElapsedTime, hipEventInterprocess, hipEventQuery, hipEvent_t, hipStreamCreateWithFlags,
    hipStreamDestroy, hipStreamNonBlocking, hipStream_t,
};
use tandem_hal::{ErrorKind, EventFlags, GpuResult};

use crate::context::bind_device;
use crate::error::{check, hip_error, vendor_kind};

/// An in-order stream that does not synchronise with the null stream.
#[derive(Debug)]
pub struct HipStream {
    raw: hipStream_t,
    ordinal: i32,
}

// SAFETY: a hipStream_t is an opaque runtime handle; the runtime accepts work
// on it from any thread.
unsafe impl Send for HipStream {}
// SAFETY: shared access only passes the handle to thread-safe HIP calls.
unsafe impl Sync for HipStream {}

impl HipStream {
    /// `hipStreamCreateWithFlags(NonBlocking)` on the current device `ordinal`.
    pub(crate) fn create(ordinal: i32) -> GpuResult<Self> {
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check("hipStreamCreateWithFlags", unsafe {
            hipStreamCreateWithFlags(&mut raw, hipStreamNonBlocking)
        })?;
        Ok(HipStream { raw, ordinal })
    }

    pub(crate) fn raw(&self) -> hipStream_t {
        self.raw
    }
}

impl Drop for HipStream {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; the stream is destroyed once.
        let _ = bind_device(self.ordinal);
        // SAFETY: `raw` was created by hipStreamCreateWithFlags and is
        // destroyed only here.
        let _ = unsafe { hipStreamDestroy(self.raw) };
    }
}

/// An event, created here or opened from another process's handle.
#[derive(Debug)]
pub struct HipEvent {
    raw: hipEvent_t,
    /// The flags in effect (interprocess events never time).
    flags: EventFlags,
    ordinal: i32,
}

// SAFETY: a hipEvent_t is an opaque runtime handle usable from any thread.
unsafe impl Send for HipEvent {}
// SAFETY: shared access only passes the handle to thread-safe HIP calls.
unsafe impl Sync for HipEvent {}

/// HIP event flags for `flags`, and the flags actually in effect: an
/// interprocess event must disable timing (vendor rule, as in CUDA).
pub(crate) fn event_flags(flags: EventFlags) -> (u32, EventFlags) {
    if flags.interprocess {
        (
            hipEventInterprocess | hipEventDisableTiming,
            EventFlags {
                timing: false,
                interprocess: true,
            },
        )
    } else if flags.timing {
        (hipEventDefault, flags)
    } else {
        (hipEventDisableTiming, flags)
    }
}

impl HipEvent {
    /// `hipEventCreateWithFlags` on the current device `ordinal`.
    pub(crate) fn create(ordinal: i32, flags: EventFlags) -> GpuResult<Self> {
        let (raw_flags, flags) = event_flags(flags);
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check("hipEventCreateWithFlags", unsafe {
            hipEventCreateWithFlags(&mut raw, raw_flags)
        })?;
        Ok(HipEvent {
            raw,
            flags,
            ordinal,
        })
    }

    /// Takes ownership of an event the runtime opened from an IPC handle.
    pub(crate) fn from_ipc(raw: hipEvent_t, ordinal: i32) -> Self {
        HipEvent {
            raw,
            flags: EventFlags {
                timing: false,
                interprocess: true,
            },
            ordinal,
        }
    }

    pub(crate) fn raw(&self) -> hipEvent_t {
        self.raw
    }

    /// The flags in effect for this event.
    pub fn flags(&self) -> EventFlags {
        self.flags
    }

    /// `hipEventQuery`: `hipErrorNotReady` is "not yet", not an error.
    pub(crate) fn query(&self) -> GpuResult<bool> {
        // SAFETY: `raw` is a live event owned by `self`.
        match unsafe { hipEventQuery(self.raw) } {
            hipError_t::hipSuccess => Ok(true),
            hipError_t::hipErrorNotReady => Ok(false),
            failure => Err(hip_error("hipEventQuery", vendor_kind(failure))),
        }
    }

    /// Time from `start` to `end`, both recorded timing events, asked on
    /// device `ordinal`.
    pub(crate) fn elapsed(ordinal: i32, start: &HipEvent, end: &HipEvent) -> GpuResult<Duration> {
        if !start.flags.timing || !end.flags.timing {
            return Err(hip_error(
                "elapsed",
                ErrorKind::InvalidArgument("both events must be created with timing".into()),
            ));
        }
        bind_device(ordinal)?;
        let mut ms = 0f32;
        // SAFETY: both events are live; `ms` is a valid out-pointer.
        check("hipEventElapsedTime", unsafe {
            hipEventElapsedTime(&mut ms, start.raw, end.raw)
        })?;
        Duration::try_from_secs_f64(f64::from(ms) / 1e3).map_err(|_| {
            hip_error(
                "hipEventElapsedTime",
                ErrorKind::InvalidArgument(format!("end precedes start by {} ms", -ms)),
            )
        })
    }
}

impl Drop for HipEvent {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; the event is destroyed once
        // (for an opened IPC event this releases only this process's view).
        let _ = bind_device(self.ordinal);
        // SAFETY: `raw` is owned by `self` and destroyed only here.
        let _ = unsafe { hipEventDestroy(self.raw) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interprocess_events_never_time() {
        let (raw, effective) = event_flags(EventFlags {
            timing: true,
            interprocess: true,
        });
        assert_eq!(raw, hipEventInterprocess | hipEventDisableTiming);
        assert!(!effective.timing && effective.interprocess);
    }

    #[test]
    fn plain_events_time_only_when_asked() {
        let timing = EventFlags {
            timing: true,
            interprocess: false,
        };
        assert_eq!(event_flags(timing), (hipEventDefault, timing));
        assert_eq!(
            event_flags(EventFlags::default()),
            (hipEventDisableTiming, EventFlags::default())
        );
    }
}
