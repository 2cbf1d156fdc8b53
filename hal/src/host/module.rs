//! Kernel modules of the CPU device: a library's host table, checked against
//! its declared signatures when loaded.

use super::error::host_error;
use crate::artifacts::ModuleArtifacts;
use crate::error::{ErrorKind, GpuResult};
use crate::host_abi::HostKernelFn;
use crate::types::ArgKind;

/// A launchable kernel of a [`HostModule`].
#[derive(Clone, Copy, Debug)]
pub struct HostKernelEntry {
    pub(crate) name: &'static str,
    pub(crate) entry: HostKernelFn,
    pub(crate) params: &'static [ArgKind],
}

impl HostKernelEntry {
    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// Its declared parameter types.
    pub fn params(&self) -> &'static [ArgKind] {
        self.params
    }
}

/// A loaded library: the entries of its host table that have a declared
/// signature.
#[derive(Debug)]
pub struct HostModule {
    name: String,
    kernels: Vec<HostKernelEntry>,
}

impl HostModule {
    /// Loads `artifacts.host_table`: `UnsupportedArtifact` if there is none,
    /// `InvalidArgument` if an entry's parameters disagree with its declared
    /// signature (the two were built from different sources).
    pub(crate) fn load(artifacts: &ModuleArtifacts<'_>) -> GpuResult<Self> {
        const CALL: &str = "load_module";
        let table = artifacts.host_table.ok_or_else(|| {
            host_error(
                CALL,
                ErrorKind::UnsupportedArtifact(format!(
                    "library `{}` has no host table",
                    artifacts.name
                )),
            )
        })?;
        let mut kernels = Vec::with_capacity(table.len());
        for entry in table {
            let Some(signature) = artifacts.signature(entry.name) else {
                continue;
            };
            if signature.params != entry.params {
                return Err(host_error(
                    CALL,
                    ErrorKind::InvalidArgument(format!(
                        "host entry `{}` takes {:?}, its signature declares {:?}",
                        entry.name, entry.params, signature.params
                    )),
                ));
            }
            kernels.push(HostKernelEntry {
                name: entry.name,
                entry: entry.entry,
                params: entry.params,
            });
        }
        Ok(Self {
            name: artifacts.name.to_owned(),
            kernels,
        })
    }

    /// The module's library name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn kernel(&self, name: &str) -> GpuResult<HostKernelEntry> {
        self.kernels
            .iter()
            .find(|k| k.name == name)
            .copied()
            .ok_or_else(|| host_error("kernel", ErrorKind::KernelNotFound(name.to_owned())))
    }
}
