//! Compile-time proof that the C++ mirrors in `include/tandem/layout.h` and
//! `include/tandem/host_abi.h` have the bytes of tandem-shm-core's and
//! tandem-hal's Rust types.
//!
//! bindgen's reading of the headers is committed (`src/generated/cpp_layout.rs`:
//! how clang lays the C++ structs out; see `mirror` for what keeps it current);
//! every [`assert_same_layout!`] below compares
//! size, alignment and each field's offset in `const` evaluation, so a drift
//! on either side fails the build with a message naming the type and field.

use crate::mirror::layout_mirror::root::tandem as c;
use crate::{assert_same_layout, assert_same_value};
use tandem_hal::host_abi::HostThreadCtx;
use tandem_hal::Dim3;
use tandem_shm_core::layout::{self as rs, AllocatorId, MemoryBackend};

// hal's host ABI.
assert_same_layout!(Dim3, c::Dim3 { x, y, z });
assert_same_layout!(
    HostThreadCtx,
    c::HostThreadCtx {
        thread_idx,
        block_idx,
        block_dim,
        grid_dim,
        shared_mem,
        dynamic_shared_bytes,
        _reserved,
        barrier,
        barrier_state,
    }
);

// shm-core's shared layouts.
assert_same_layout!(AllocatorId, c::AllocatorId { major, minor });
assert_same_layout!(rs::OffsetPtr<u64>, c::OffsetPtr { .. });
assert_same_layout!(rs::ShmPtr<u8>, c::ShmPtr { alloc_id, off, .. });
assert_same_layout!(rs::FullPtr<u8>, c::FullPtr<u8> { ptr, shm, .. });
assert_same_layout!(
    MemoryBackend,
    c::MemoryBackend {
        id,
        kind,
        flags,
        base,
        capacity
    }
);
assert_same_layout!(rs::PaddedAtomicU64, c::PaddedAtomicU64 { value });
assert_same_layout!(rs::FreeList, c::FreeList { head, readers });
assert_same_layout!(
    rs::ArenaHeader,
    c::ArenaHeader {
        magic,
        id,
        heap_begin,
        heap_end,
        cursor
    }
);
assert_same_layout!(rs::ThreadArena, c::ThreadArena { id, cursor, end });
assert_same_layout!(
    rs::SizeClassHeader,
    c::SizeClassHeader {
        magic,
        id,
        heap_begin,
        heap_end,
        bump,
        free_lists,
    }
);
assert_same_layout!(rs::BlockHeader, c::BlockHeader { state, class => class_, next });
assert_same_layout!(
    rs::RingHeader,
    c::RingHeader {
        magic,
        kind,
        capacity,
        elem_size,
        elem_align,
        slot_stride,
        head,
        tail,
    }
);
assert_same_layout!(rs::RingSlotHeader, c::RingSlotHeader { seq });
assert_same_layout!(rs::LlSlot, c::LlSlot { seq, words });
assert_same_layout!(
    rs::LaneQueueHeader,
    c::LaneQueueHeader {
        magic,
        num_lanes,
        depth,
        elem_size,
        ring_bytes,
    }
);
assert_same_layout!(
    rs::FutureShmHeader,
    c::FutureShmHeader {
        flags,
        return_code,
        copy_space_size,
        input_len,
        output_len,
        notify,
        payload,
    }
);

assert_same_value! {
    rs::CACHE_LINE => c::CACHE_LINE,
    rs::magic::ARENA => c::magic::ARENA,
    rs::magic::SIZE_CLASS => c::magic::SIZE_CLASS,
    rs::magic::RING => c::magic::RING,
    rs::magic::LANE_QUEUE => c::magic::LANE_QUEUE,
    rs::magic::BLOCK_ALLOCATED => c::magic::BLOCK_ALLOCATED,
    rs::magic::BLOCK_FREE => c::magic::BLOCK_FREE,
    rs::OFFSET_PTR_NULL => c::OFFSET_PTR_NULL,
    rs::BackendKind::HostShm => c::backend_kind::HOST_SHM,
    rs::BackendKind::Pinned => c::backend_kind::PINNED,
    rs::BackendKind::Device => c::backend_kind::DEVICE,
    rs::BackendKind::Managed => c::backend_kind::MANAGED,
    rs::SIZE_CLASSES => c::SIZE_CLASSES,
    rs::MIN_BLOCK => c::MIN_BLOCK,
    rs::ring_kind::SPSC => c::ring_kind::SPSC,
    rs::ring_kind::MPMC => c::ring_kind::MPMC,
    rs::ring_kind::LL => c::ring_kind::LL,
    rs::LL_RECORD_WORDS => c::LL_RECORD_WORDS,
    crate::NEARLY_EMPTY_MIN_CAPACITY => c::NEARLY_EMPTY_MIN_CAPACITY,
    rs::RING_SLOTS_OFFSET => c::RING_SLOTS_OFFSET,
    rs::LANE_QUEUE_RINGS_OFFSET => c::LANE_QUEUE_RINGS_OFFSET,
    rs::future_flags::COMPLETE => c::future_flags::COMPLETE,
    rs::future_flags::COPY_FROM_CLIENT => c::future_flags::COPY_FROM_CLIENT,
    rs::future_flags::POINTER => c::future_flags::POINTER,
    rs::future_flags::SUCCEEDED => c::future_flags::SUCCEEDED,
    rs::future_flags::USER_MASK => c::future_flags::USER_MASK,
    rs::FUTURE_COPY_SPACE_OFFSET => c::FUTURE_COPY_SPACE_OFFSET,
}
