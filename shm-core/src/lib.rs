//! Building blocks that live in shared memory and are used alike by host
//! processes and GPU kernels: offset pointers, a bump arena and a freeing
//! allocator, lock-free rings and the runtime's lane queue, completion futures,
//! and a compact serializer.
//!
//! Everything here is initialised *in place* in a raw region (no constructor
//! runs, as on a device) and attached to by other processes that map the same
//! bytes at another address.
//!
//! # The front
//!
//! What a user writes against is re-exported here, at the crate root; the
//! modules are private, so how a structure walks its bytes can change without
//! breaking a user. One module is public: [`layout`], every `#[repr(C)]`
//! header and constant that C++ kernels share (the device-kernels crate checks
//! its mirrors against them), which a caller sizing or placing a structure
//! needs by name. Each other public item is here for one of these jobs:
//!
//! * **Naming shared memory.** [`ShmPtr`] (allocator id + offset, meaningful
//!   in every process), [`OffsetPtr`], [`FullPtr`] (with the local address),
//!   [`AllocatorId`], [`MemoryBackend`] and [`BackendKind`] (a region as a
//!   kernel receives it); [`ShmSafe`] marks the plain-bytes types allowed in
//!   it; [`PtrError`] is a pointer that does not resolve; [`REGION_ALIGN`] the
//!   alignment every region starts at.
//! * **Allocating in it.** [`ArenaAllocator`] (a bump arena, per-thread
//!   [`ThreadArena`](layout::ThreadArena) carves) and [`SizeClassAllocator`]
//!   (freeing, with a per-thread [`SizeClassCache`], [`SizeClassStats`]);
//!   [`block_size`], [`HEAP_ALIGN`], [`MAX_ALIGN`] and [`MAX_BLOCK`] size a
//!   heap and its requests, [`CACHE_BIN_CAPACITY`] and [`CACHE_BIN_BYTES`]
//!   bound what a cache holds back; failures are
//!   [`AllocError`]. A [`BlockPool`] keeps a few free blocks of one size
//!   back for a hot path, shared by a process's threads.
//! * **Passing work.** [`SpscRing`] ([`SpscProducer`], [`SpscConsumer`]),
//!   [`MpmcRing`], [`LlRing`] of [`LlRecord`]s (records that need no fence),
//!   and the runtime's [`LaneQueue`] (lanes by [`Priority`], read through a
//!   [`LaneCursor`]; [`PushError`], [`NoSuchLane`]); a ring that does not
//!   attach is a [`RingError`]. [`demote_lines`] moves what a device is about
//!   to read out of the writing core's caches.
//! * **Answering.** [`FutureShm`], a completion future waited on from either
//!   side ([`WaitOutcome`]; [`FutureError`], [`FillError`]); the return
//!   codes the future itself sets are [`RC_OUTPUT_TOO_LARGE`],
//!   [`RC_OUTPUT_FAILED`], at most [`RC_RESERVED_MAX`].
//! * **Encoding.** [`Writer`], [`Reader`], the [`Serialize`] and
//!   [`Deserialize`] traits (and `impl_serialize_fields!`), [`serialized_len`],
//!   [`SerError`]: the task wire format both sides read.
//! * **Named segments** (`std` on Unix). [`Segment`] in [`SHM_DIR`] (names
//!   checked: [`NameError`], [`MAX_NAME_LEN`]), [`Mapping`] of one,
//!   [`SegmentProbe`] to look at one without taking it, [`SegmentError`];
//!   [`unlink_created_names`] removes what this process created, for a
//!   signal handler's last act.
//!
//! # Module layers
//!
//! Bottom up: `layout`, `pod` and `sync` (the atomics, loom's under
//! `--cfg loom`); `ptr`, `region`, `alloc_error`, `block_pool`, `cache_hint`; `ring` (the
//! shape every ring shares), then `spsc`, `mpmc`, `ll_ring` and
//! `lane_queue`; `arena`, `size_class`; `future`, `ser`; `segment`.
#![cfg_attr(not(feature = "std"), no_std)]

#[cfg(feature = "alloc")]
extern crate alloc;

mod alloc_error;
mod arena;
mod block_pool;
mod cache_hint;
mod future;
mod lane_queue;
pub mod layout;
mod ll_ring;
mod mpmc;
mod pod;
mod ptr;
mod region;
mod ring;
#[cfg(all(feature = "std", unix))]
mod segment;
mod ser;
mod size_class;
mod spsc;
pub(crate) mod sync;

pub use alloc_error::AllocError;
pub use arena::ArenaAllocator;
pub use block_pool::BlockPool;
pub use cache_hint::demote_lines;
pub use future::{
    FillError, FutureError, FutureShm, WaitOutcome, RC_OUTPUT_FAILED, RC_OUTPUT_TOO_LARGE,
    RC_RESERVED_MAX,
};
pub use lane_queue::{LaneCursor, LaneQueue, NoSuchLane, Priority, PushError};
pub use layout::{AllocatorId, BackendKind, FullPtr, MemoryBackend, OffsetPtr, ShmPtr};
pub use ll_ring::{ll_tag, LlRecord, LlRing};
pub use mpmc::MpmcRing;
pub use pod::ShmSafe;
pub use ptr::PtrError;
pub use region::REGION_ALIGN;
pub use ring::RingError;
#[cfg(all(feature = "std", unix))]
pub use segment::{
    unlink_created_names, Mapping, NameError, Segment, SegmentError, SegmentProbe, MAX_NAME_LEN,
    SHM_DIR,
};
pub use ser::{serialized_len, Deserialize, Reader, SerError, Serialize, Writer};
pub use size_class::cache::{BIN_BYTES as CACHE_BIN_BYTES, BIN_CAPACITY as CACHE_BIN_CAPACITY};
pub use size_class::{
    block_size, SizeClassAllocator, SizeClassCache, SizeClassStats, HEAP_ALIGN, MAX_ALIGN,
    MAX_BLOCK,
};
pub use spsc::{SpscConsumer, SpscProducer, SpscRing};
