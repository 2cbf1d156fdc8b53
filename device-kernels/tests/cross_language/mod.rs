//! The cross-language test bodies, generic over the backend: the device
//! kernels against tandem-shm-core on the same bytes. Each
//! `tests/*_cross_language.rs` of this crate runs its part on the CPU device;
//! tandem-tests' `device_kernels` test includes this whole module and runs
//! it on CUDA and HIP.

pub mod future;
pub mod harness;
pub mod mpmc;
pub mod ser;
pub mod size_class;
