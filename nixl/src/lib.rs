//! NIXL, NVIDIA's inference transfer library, loaded at run time as the
//! CUDA driver is: building Tandem needs no NIXL and no headers, and a
//! machine without it gets [`NixlError::NotFound`] from [`Nixl::load`],
//! naming where it looked, while everything else works as before.
//!
//! `library` declares the C functions of NIXL's C API this crate calls
//! (`libnixl_capi.so`, as NIXL's `wrapper.h` declares them) and resolves
//! them all at load; `locate` finds the library; `agent` is a safe agent
//! over them.

mod agent;
mod error;
mod library;
mod locate;

/// A loaded NIXL, an agent of it, what it registers and reads: what the
/// share daemon moves buffers between nodes with.
pub use agent::{Agent, Memory, Nixl, Region, Registration, Transfer};
/// Every failure of loading or calling NIXL.
pub use error::NixlError;
/// The functions this crate calls, and which a library lacks: for the test
/// that a NIXL has them all.
pub use library::{missing_symbols, SYMBOLS};
/// Where NIXL is looked for: for messages and configuration.
pub use locate::{find_library, LIBRARY_ENV, LIBRARY_NAME, PYTHON_PACKAGES};
