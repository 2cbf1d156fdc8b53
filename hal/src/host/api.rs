//! [`HostApi`], the CPU device backend, and how many devices it reports. Its
//! [`GpuApi`](crate::GpuApi) implementation is in `device.rs`, next to the
//! devices it hands out, so that this module sits below every resource that
//! names the backend.

use super::error::host_error;
use crate::error::{ErrorKind, GpuResult};

/// Environment variable that sets how many devices [`HostApi::load`] reports.
///
/// [`HostApi::load`]: crate::GpuApi::load
pub const DEVICES_ENV: &str = "TANDEM_HOST_DEVICES";

/// The CPU device backend. Always loads.
#[derive(Clone, Copy, Debug)]
pub struct HostApi {
    devices: usize,
}

impl HostApi {
    /// A backend that pretends to have `devices` devices (0 is allowed: a
    /// machine without devices).
    pub fn with_devices(devices: usize) -> Self {
        Self { devices }
    }

    /// One device, or as many as [`DEVICES_ENV`] says; a value that is not a
    /// number is `InvalidArgument`.
    pub(super) fn from_env() -> GpuResult<Self> {
        let devices = match std::env::var(DEVICES_ENV) {
            Err(std::env::VarError::NotPresent) => 1,
            Ok(text) => text.trim().parse().map_err(|_| {
                host_error(
                    "load",
                    ErrorKind::InvalidArgument(format!(
                        "{DEVICES_ENV}={text:?} is not a device count"
                    )),
                )
            })?,
            Err(std::env::VarError::NotUnicode(text)) => {
                return Err(host_error(
                    "load",
                    ErrorKind::InvalidArgument(format!(
                        "{DEVICES_ENV}={text:?} is not a device count"
                    )),
                ))
            }
        };
        Ok(Self::with_devices(devices))
    }

    /// How many devices this backend reports.
    pub(super) fn devices(&self) -> usize {
        self.devices
    }
}
