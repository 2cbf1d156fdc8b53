//! Tandem's runtime and the `tandem` binary.
//!
//! [`exchange`] is the two-process shm-core exchange that `tandem demo` runs.

pub mod exchange;
