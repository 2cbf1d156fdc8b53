//! The wire spoken by hand, for tests of a daemon against clients that
//! misbehave (a frame started and never finished, a connection that never
//! says Hello, garbage): `cli/tests/share_limits.rs` and
//! `cli/tests/share.rs`. Behind the `testing` feature, because these tests
//! start the `tandem` binary and so cannot live in this crate; not API,
//! and free to change with the wire.

pub use crate::transport::recv_frame;
pub use crate::wire::{Reply, Request};
