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

pub use layout::{AllocatorId, BackendKind, FullPtr, MemoryBackend, OffsetPtr, ShmPtr};
pub use pod::ShmSafe;

pub mod lane_queue;
pub mod ll_ring;
pub mod mpmc;
pub mod ring;
pub mod spsc;

pub use lane_queue::{LaneCursor, LaneQueue, NoSuchLane, Priority, PushError};
pub use ll_ring::{LlRecord, LlRing};
pub use mpmc::MpmcRing;
pub use ring::RingError;
pub use spsc::{SpscConsumer, SpscProducer, SpscRing};

pub mod future;
#[cfg(all(feature = "std", unix))]
pub mod segment;
pub mod ser;

pub use future::{FillError, FutureError, FutureShm, WaitOutcome};
#[cfg(all(feature = "std", unix))]
pub use segment::{Mapping, Segment, SegmentError, SegmentProbe};
pub use ser::{Deserialize, Reader, SerError, Serialize, Writer};

pub mod alloc_error;
pub mod arena;
pub mod ptr;
mod region;
pub mod size_class;

pub use alloc_error::AllocError;
pub use arena::ArenaAllocator;
pub use ptr::PtrError;
pub use region::REGION_ALIGN;
pub use size_class::{SizeClassAllocator, SizeClassCache, SizeClassStats};
