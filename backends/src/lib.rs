//! Which backend a program runs on, chosen at run time.
//!
//! Tandem's work is generic over [`GpuApi`]; a program (the CLI, the C ABI,
//! the Python package, a runtime of one's own) picks the backend once, at
//! run time, from what the build has and the machine answers. This crate is
//! that one choice, so that every front picks alike:
//!
//! * [`BackendChoice`] is a choice as a user names it (`auto`, `host`,
//!   `cuda`, `hip`), parsed with the build's backends in mind: a name of a
//!   backend left out of the build is refused when parsed
//!   ([`BackendChoiceError`]), whichever front parsed it.
//! * [`AnyApi`] is a loaded backend whatever it is, for code that holds one
//!   of each kind in an enum (the share client's); [`AnyApi::load`] loads
//!   the one chosen. `auto` is CUDA when built with it and a device
//!   answers, else HIP likewise, else the CPU device.
//! * [`OnBackend`] is generic work, which [`on_backend`] and
//!   [`on_best_backend`] run on the backend chosen. [`Backend`] names it.
//!
//! [`GpuApi`]: tandem_hal::GpuApi

mod any_api;
mod choice;

pub use any_api::{on_backend, on_best_backend, AnyApi, OnBackend};
pub use choice::{BackendChoice, BackendChoiceError};
pub use tandem_hal::Backend;
