//! The cross-language suite: the device kernels' C++ (tandem/arena.h,
//! future.h, mpmc.h, ser.h, size_class.h) against tandem-shm-core on the same
//! bytes, written once over [`tandem_hal::GpuApi`]. Every `pub fn` of a module
//! is one behaviour, run on a [`harness::Gpu`] at that backend's scale;
//! `tests/cross_language.rs` stamps one `#[test]` per behaviour per backend.

pub mod arena;
pub mod future;
pub mod harness;
pub mod mpmc;
pub mod ser;
pub mod size_class;
