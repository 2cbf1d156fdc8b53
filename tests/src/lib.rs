//! Tandem's cross-crate tests. The library holds the backend conformance
//! suite, written once over [`tandem_hal::GpuApi`] ([`conformance`]), the one
//! way GPU tests find a device or skip ([`gpu`]), and both sides of the
//! two-process IPC test ([`ipc`]; the child is the `ipc_child` binary).
//! `tests/conformance.rs` stamps one `#[test]` per behaviour per backend.

pub mod conformance;
pub mod gpu;
pub mod ipc;
