//! Building blocks that live in shared memory and are used alike by host
//! processes and GPU kernels: offset pointers, a bump arena and a freeing
//! allocator, lock-free rings and the runtime's lane queue, completion futures,
//! and a compact serializer.
//!
//! Everything here is initialised *in place* in a raw region (no constructor
//! runs, as on a device) and attached to by other processes that map the same
//! bytes at another address. All shared layouts are in [`layout`].
#![cfg_attr(not(feature = "std"), no_std)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod layout;
pub mod pod;
pub(crate) mod sync;

pub use pod::ShmSafe;
pub use layout::{AllocatorId, BackendKind, FullPtr, MemoryBackend, OffsetPtr, ShmPtr};
