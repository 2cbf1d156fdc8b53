//! The runtime's wire format, every constant and layout of it in one place:
//! the header at offset 0 of every queue segment (the CPU segment and one per
//! device), the task header at the start of every task's bytes, the words of
//! a lane record, the notify word, the return codes the runtime stores, the
//! device tickets' indices and the ids of the built-in `math` pool. What
//! kernels read is mirrored in `device-kernels/include/tandem/runtime/layout.h`
//! (static_asserts there repeat the ones below) and compared with it, item
//! by item, when this crate compiles (`cpp_mirror` below); the rest is
//! host-only. Other modules use these, never the numbers.
//!
//! A queue segment is laid out as
//!
//! ```text
//! 0              SegmentHeader (one page reserved)
//! queue_offset   LaneQueue: lanes x 2 priorities of task records (task_record)
//! heap_offset    SizeClassAllocator: futures and payloads the host allocates
//! arena_offset   ArenaAllocator: futures kernels allocate (per-block carves)
//! ```
//!
//! The CPU segment's header page also holds the runtime's status block
//! (host-only), at `status::STATUS_BLOCK_OFFSET` (2048) after the header.
//!
//! A device segment's queue region also holds, after the lane queue, the
//! LL ring of task records (`task_record`) host threads send to the device's
//! GPU service kernel (tandem/runtime/service.h, `rt_serve`) through; it
//! answers a task carried in its record in the future's [`HostReply`]. Kernels
//! send to it through the device inbox ([`device_inbox`]), in device memory,
//! and get its answers in the reply region
//! ([`SegmentHeader::device_replies`]), in their own device's memory. A ring
//! side whose threads are all on the GPU counts its tickets in device memory
//! ([`SegmentHeader::device_tickets`], indices in [`device_ticket`]).
//!
//! Every future a task record names is given by its byte offset from the
//! segment's base, so it means the same future to the host (host address) and
//! to a kernel (device address), whichever allocator the future came from.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};

use tandem_shm_core::AllocatorId;
use tandem_shm_core::Reader;

/// `SegmentHeader::magic` once the segment is fully initialised ("TNDMRTSG").
pub const SEGMENT_MAGIC: u64 = 0x544e_444d_5254_5347;
/// Layout version; bumped on any change to this file or to what the
/// segment's other shared words mean (client slots, heaps).
pub const SEGMENT_VERSION: u32 = 16;
/// Bytes reserved for the header at the start of a segment (one page, so
/// the queue and allocators start page-aligned).
pub const SEGMENT_HEADER_RESERVED: usize = 4096;

/// `SegmentHeader::kind`.
pub mod segment_kind {
    /// Host clients' queues (named shared memory).
    pub const CPU: u32 = 0;
    /// A device's queues (pinned host memory mapped into the device).
    pub const DEVICE: u32 = 1;
}

/// A device's device inbox ([`SegmentHeader::device_inbox`]), in device
/// memory, through which kernels send tasks to the device's GPU service: a
/// header (`RtInboxHeader` in tandem/runtime/layout.h), then [`PARTS`] parts of
/// slots (`RtInboxSlot`), [`SLOTS_PER_DEPTH`] x [`DEPTH`] in all: for
/// kernels of the device itself [`DEPTH`] slots leased to a sending thread
/// each for its block's launch ([`SegmentHeader::kernel_epoch`]) and half
/// that claimed for each task by blocks that come once the leases are
/// spent; for kernels of other devices two parts of a quarter, leased and
/// claimed likewise. A sender thread claims its slot (a leased one for its
/// first task only), writes its task there in words tagged with the slot's
/// lap, and the service frees the slot once it has read them. The header
/// also counts, by kernel epoch, the segment's kernel arena and reply region
/// carved by blocks (`rt_init`): RMWs of device memory, which are atomic on
/// every platform, where a GPU's RMWs of host memory are atomic only as far
/// as the link carries them. The host only zeroes it: a
/// zeroed slot is free at lap 0, a zeroed header says no service has sized
/// the parts yet.
///
/// [`SLOTS_PER_DEPTH`]: device_inbox::SLOTS_PER_DEPTH
///
/// [`PARTS`]: device_inbox::PARTS
/// [`DEPTH`]: device_inbox::DEPTH
pub mod device_inbox {
    /// Slots of the device's own leased part, a power of two (at least 4):
    /// the most a service keeps hot, and so the most senders of one device
    /// that need not claim theirs for each task.
    pub const DEPTH: u32 = 16384;
    /// Parts: the device's own kernels' leased and shared, other devices'
    /// kernels' leased and shared.
    pub const PARTS: usize = 4;
    /// Slots of the inbox per slot of depth: the parts have `depth`, a half,
    /// a quarter and a quarter of it.
    pub const SLOTS_PER_DEPTH: usize = 2;
    /// Bytes of the header, which the parts follow.
    pub const HEADER_BYTES: usize = 128;
    /// Bytes of a slot (two cache lines).
    pub const SLOT_BYTES: usize = 128;

    /// Bytes of an inbox of `depth` slots a part.
    pub const fn bytes(depth: u32) -> usize {
        HEADER_BYTES + SLOTS_PER_DEPTH * depth as usize * SLOT_BYTES
    }
}

/// Where the GPU service answers a host thread's task that travelled in its
/// from-host record (`Runtime::submit_to_gpu`): the first
/// [`HOST_REPLY_BYTES`] of the task's future's copy space (allocated that
/// much larger), the output right after. An answer without output is the
/// `answer` word alone ([`host_reply::answer`], with
/// [`host_reply::NO_OUTPUT`]). An output of at most
/// [`host_reply::TAGGED_MAX`] bytes that the copy space holds twice over
/// goes in tagged words ([`host_reply::TAGGED`]), then the word, with no
/// fence; a larger one goes in bytes, with `output_len`, then one
/// system-scope fence, then the word. The host cleared `answer` before
/// pushing the record. `RtHostReply` in tandem/runtime/layout.h.
#[repr(C)]
#[derive(Debug)]
pub struct HostReply {
    /// 0 until answered, then [`host_reply::answer`].
    pub answer: AtomicU64,
    /// Bytes of output after the reply.
    pub output_len: AtomicU32,
    /// Unused: keeps the output 16-aligned.
    pub reserved: u32,
}

/// Bytes of a [`HostReply`], which its output follows.
pub const HOST_REPLY_BYTES: usize = 16;

/// [`HostReply::answer`]: the return code in the high half, and flags
/// (never 0) in the low half.
pub mod host_reply {
    /// Set in every answer.
    pub const ANSWERED: u64 = 1;
    /// Set in an answer without output: the service stored the answer word
    /// alone, not `output_len`.
    pub const NO_OUTPUT: u64 = 2;
    /// Set in a success whose output follows the reply in tagged words: in
    /// each 8-byte word, four output bytes (little-endian) below the
    /// record's tag (`ll_tag` of its from-host ring position) above, so
    /// each word says by itself whether it has landed and the service needs
    /// no fence before the answer (a system-scope fence is about a PCIe
    /// round trip). The output's length is in the answer, at
    /// [`TAGGED_LEN_SHIFT`]; `output_len` is not written.
    pub const TAGGED: u64 = 4;
    /// Where a [`TAGGED`] answer holds its output's length.
    pub const TAGGED_LEN_SHIFT: u32 = 8;
    /// The bits of that length.
    pub const TAGGED_LEN_MASK: u64 = 0x3FF;
    /// The longest output the service tags (longer ones, or ones the copy
    /// space does not hold twice over, go in bytes behind a fence): the
    /// submitter clears the copy space's first [`TAGGED_WORDS`] words with
    /// the answer, so no word of an earlier use of those bytes can pass for
    /// this task's, whatever it held (a clear word's tag, 0, is no
    /// position's).
    pub const TAGGED_MAX: u32 = 32;
    /// The words [`TAGGED_MAX`] bytes take, four a word.
    pub const TAGGED_WORDS: usize = TAGGED_MAX as usize / 4;

    /// The answer of return code `return_code`.
    pub const fn answer(return_code: i32) -> u64 {
        (return_code as u32 as u64) << 32 | ANSWERED
    }

    /// Whether an answer comes with output (tagged, or its `output_len`
    /// was stored).
    pub const fn has_output(answer: u64) -> bool {
        answer & NO_OUTPUT == 0
    }

    /// The output length of a [`TAGGED`] answer; `None` for another.
    pub const fn tagged_len(answer: u64) -> Option<u32> {
        if answer & TAGGED != 0 {
            Some(((answer >> TAGGED_LEN_SHIFT) & TAGGED_LEN_MASK) as u32)
        } else {
            None
        }
    }

    /// The return code of an answer, or `None` while it is not one.
    pub const fn return_code(answer: u64) -> Option<i32> {
        if answer & ANSWERED != 0 {
            Some((answer >> 32) as u32 as i32)
        } else {
            None
        }
    }
}

/// Whether a kernel on one device may reach another device's segment: the
/// word a kernel hands `rt_init_peer` (tandem/runtime/layout.h, `rt_peer`),
/// which the host found with [`crate::Runtime::peer_route`].
pub mod peer_access {
    /// The kernel's device addresses the peer's device memory directly.
    pub const REACHABLE: u32 = 1;
    /// It does not: the kernel touches nothing of the peer's.
    pub const UNREACHABLE: u32 = 2;
}

/// Where each of a device segment's device tickets (`tandem::DeviceTickets`,
/// `tandem_device_kernels::DEVICE_TICKETS_BYTES` each) sits: [`PER_LANE`]
/// per lane, the producers of lane `l` at priority `p` (0 high, 1 low) at
/// `PER_LANE * l + p`, then, from `PER_LANE * lanes`, the GPU service's
/// counters in the order below. Mirrored in tandem/runtime/layout.h
/// (`rt_ticket`, whose `RtTicket` computes the indices from these constants).
///
/// [`PER_LANE`]: device_ticket::PER_LANE
pub mod device_ticket {
    /// Tickets per lane: its producers at each priority.
    pub const PER_LANE: u32 = 2;
    /// After the lanes' tickets: the GPU service's tickets on the
    /// from-host ring.
    pub const INBOX_FROM_HOST_CONSUMERS: u32 = 0;
    /// Tickets after the lanes' (the GPU service's).
    pub const INBOX: u32 = 1;

    /// How many a segment of `lanes` lanes has.
    pub const fn count(lanes: u32) -> u32 {
        PER_LANE * lanes + INBOX
    }
}

/// `SegmentHeader::state`.
pub mod runtime_state {
    /// Being set up; no worker polls yet.
    pub const STARTING: u32 = 0;
    /// Workers are polling: tasks pushed now will be completed.
    pub const READY: u32 = 1;
    /// The runtime is shutting down or gone; nothing new will be completed.
    pub const STOPPED: u32 = 2;
}

// Runtime return codes, in shm-core's reserved range (above its own two).
/// No pool with the task's pool id is registered.
pub const RC_UNKNOWN_POOL: i32 = i32::MIN + 16;
/// The pool has no such method.
pub const RC_UNKNOWN_METHOD: i32 = i32::MIN + 17;
/// The task's bytes are not a task (short, bad version, lengths disagree).
pub const RC_BAD_TASK: i32 = i32::MIN + 18;
/// The arguments did not deserialize as the method's argument type.
pub const RC_BAD_ARGS: i32 = i32::MIN + 19;
/// The handler panicked; the worker caught it and lives on.
pub const RC_HANDLER_PANICKED: i32 = i32::MIN + 20;

/// Ids of the built-in `math` pool ([`crate::task::math`]), which the
/// runtime's own kernels send tasks of and the GPU service serves on the
/// device: wire constants, as kernels name them. Mirrored in
/// tandem/runtime/layout.h (`rt_math`).
pub mod math_pool {
    /// The pool id.
    pub const POOL: u32 = 1;
    /// `noop()`: returns nothing.
    pub const NOOP: u32 = 0;
    /// `add(a, b)`: returns `a + b` (wrapping).
    pub const ADD: u32 = 1;
    /// `sum(values)`: returns the wrapping sum of [`SUM_VALUES`] `u64`s,
    /// whose 48 bytes of arguments do not fit a lane record, so a kernel
    /// sends it through the copy space.
    pub const SUM: u32 = 2;
    /// The `u64`s a `sum` adds.
    pub const SUM_VALUES: usize = 6;
}

/// `AllocatorId::major` of every runtime segment ("TNRT"); the minor is the
/// segment index (0 = CPU, 1 + ordinal = device).
pub const SEGMENT_ID_MAJOR: u32 = 0x544e_5254;
/// `AllocatorId::major` of a segment's size-class heap.
pub const HEAP_ID_MAJOR: u32 = 0x544e_4850;
/// `AllocatorId::major` of a segment's kernel arena.
pub const ARENA_ID_MAJOR: u32 = 0x544e_4152;

/// The header at offset 0 of a queue segment. Written once at setup (plain
/// fields before `magic`, which is published with `Release`), except the
/// atomics, which are live.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct SegmentHeader {
    /// [`SEGMENT_MAGIC`] once everything in the segment is initialised.
    pub magic: AtomicU64,
    /// [`SEGMENT_VERSION`].
    pub version: u32,
    /// A [`segment_kind`] value.
    pub kind: u32,
    /// The id of this segment's allocators and of every inbox pointer.
    pub id: AllocatorId,
    /// The device this segment serves; -1 for the CPU segment.
    pub device_ordinal: i32,
    /// The NUMA node the pages were found on after binding; -1 if unknown.
    /// Written once before `magic` is published (`Relaxed`).
    pub numa_node: AtomicI32,
    /// Length of the whole segment.
    pub segment_bytes: u64,
    /// Where the lane queue starts, and its length.
    pub queue_offset: u64,
    /// The lane queue's length.
    pub queue_bytes: u64,
    /// Where the size-class heap starts, and its length.
    pub heap_offset: u64,
    /// The heap's length.
    pub heap_bytes: u64,
    /// Where the kernel arena starts, and its length.
    pub arena_offset: u64,
    /// The kernel arena's length.
    pub arena_bytes: u64,
    /// Lanes of the queue (each with two priorities).
    pub num_lanes: u32,
    /// Copy space a future should have to carry typical tasks.
    pub copy_space: u32,
    /// Process id of the runtime serving this segment (with
    /// `runtime_start_time`, its process identity: the owner).
    pub runtime_pid: AtomicU32,
    /// A [`runtime_state`] value.
    pub state: AtomicU32,
    /// `CLOCK_MONOTONIC` nanoseconds (one clock for every process of the
    /// machine) of the runtime's last beat, stored every
    /// [`crate::HEARTBEAT_PERIOD`]; how far it lags says for how long the
    /// runtime has not answered (hung, or stopped), not that it is dead.
    pub heartbeat: AtomicU64,
    /// Raised (nonzero) by the host to release every kernel waiting with it.
    pub stop: AtomicU32,
    /// The device inbox's depth ([`device_inbox::DEPTH`]: slots of its
    /// largest part); 0 in the CPU segment.
    pub device_inbox_depth: u32,
    /// Device address of the segment's device tickets, [`device_ticket::count`]
    /// `tandem::DeviceTickets` in device memory; 0 in the CPU segment. The
    /// lane queue's producers (kernels) and the inbox's GPU sides take their
    /// tickets there with a device-memory fetch_add (tandem/mpmc.h, "Device
    /// tickets") instead of an RMW on a ring counter in host memory; the
    /// workers (and host submitters to the inbox) use the rings as usual.
    pub device_tickets: u64,
    /// Where the GPU service's from-host ring starts (inside the queue
    /// region); 0 when the segment has none (the CPU segment).
    pub inbox_offset: u64,
    /// Bytes of the from-host ring.
    pub inbox_ring_bytes: u64,
    /// Slots of the from-host ring.
    pub inbox_depth: u32,
    /// Raised (nonzero) by the host to end the GPU service kernel once the
    /// inbox is drained.
    pub service_stop: AtomicU32,
    /// Device address of the device inbox ([`device_inbox`]): its header,
    /// then its slots, in device memory; 0 in the CPU segment.
    pub device_inbox: u64,
    /// The runtime process's start time (clock ticks after boot,
    /// as `/proc/<pid>/stat` gives it), so that a later process
    /// reusing `runtime_pid` is not taken for the owner. Written before
    /// `magic` is published.
    pub runtime_start_time: u64,
    /// Where the host clients' region ([`ClientTable`](crate::ClientTable): their slot table
    /// and per-client heaps) starts, and its length; 0 and 0 in device
    /// segments. Host-only: kernels never read it.
    pub clients_offset: u64,
    /// The host clients' region's length.
    pub clients_bytes: u64,
    /// Device address of the reply region: device memory from which each
    /// block of a kernel that sends to GPU services carves a reply word and
    /// cell per thread (`rt_init`), where the services answer; 0 in the CPU
    /// segment. Never touched by the host.
    pub device_replies: u64,
    /// The reply region's length.
    pub device_replies_bytes: u64,
    /// Unused (zero): the reply region's count, and the kernel arena's, are
    /// in the device inbox's header, in device memory
    /// ([`device_inbox`]).
    pub reserved: u64,
    /// Raised with every reset of the kernel arena
    /// ([`QueueSegment::reset_kernel_arena`](crate::QueueSegment::reset_kernel_arena)):
    /// the device inbox's leases of slots to sending threads
    /// (`RtInboxHeader::leased`) and its counts of the kernel arena and the
    /// reply region carved by blocks are one epoch's, as a lease or a carve
    /// lasts as long as its block. 32 bits of it count.
    pub kernel_epoch: AtomicU64,
    /// What the GPU services on this segment did, summed over their threads
    /// and every service that ran: tasks run and answered from kernels (the
    /// device inbox), and of those, answered with a nonzero return code.
    /// The service's threads add to these counts now and then (`rt_serve`),
    /// so they lag a busy service a little; the host only reads them. 0 in
    /// the CPU segment.
    pub service_kernel_tasks: AtomicU64,
    /// See [`service_kernel_tasks`](Self::service_kernel_tasks).
    pub service_kernel_failed: AtomicU64,
    /// The same for tasks from the host (the from-host ring).
    pub service_host_tasks: AtomicU64,
    /// See [`service_host_tasks`](Self::service_host_tasks).
    pub service_host_failed: AtomicU64,
    /// Entries of either route that named no future of the segment
    /// (skipped: nothing could be answered).
    pub service_skipped: AtomicU64,
}

impl SegmentHeader {
    /// The process that serves this segment: its runtime.
    pub(crate) fn owner(&self) -> tandem_process::ProcessIdentity {
        tandem_process::ProcessIdentity {
            // Relaxed: written once before the magic was published, which
            // whoever holds this header acquired.
            pid: self.runtime_pid.load(core::sync::atomic::Ordering::Relaxed),
            start_time: self.runtime_start_time,
        }
    }
}

/// The words of a lane record (shm-core's `LlRecord`, tagged words that need
/// no fence to publish): which future a task completes, where its submitter
/// waits, and, for a task small enough, the task itself.
///
/// A record of [`IN_FUTURE_WORDS`](task_record::IN_FUTURE_WORDS) words has
/// its task in the future (copy space, or payload for a pointer future),
/// published by a Release fence before the record. A longer record is an
/// inline task: pool, method, argument bytes, then the arguments, four
/// little-endian bytes a word; its future is not written by the submitter at
/// all (the worker re-arms it, `FutureShm::reset`, when the answer needs
/// it: see [`notify_word`]). Mirrored in tandem/runtime/layout.h (`rt_record`).
pub mod task_record {
    use tandem_shm_core::layout::LL_RECORD_WORDS;

    /// The future's byte offset in the segment.
    pub const FUTURE: usize = 0;
    /// The byte offset of the submitter's notify word (a u32); 0 for none.
    pub const NOTIFY: usize = 1;
    /// The task's token, which the completer's [`notify_word`] carries.
    ///
    /// [`notify_word`]: super::notify_word
    pub const TOKEN: usize = 2;
    /// Words of a record whose task is in the future.
    pub const IN_FUTURE_WORDS: usize = 3;
    /// An inline task's pool.
    pub const POOL: usize = 3;
    /// An inline task's method.
    pub const METHOD: usize = 4;
    /// An inline task's lengths: its argument bytes in the low
    /// [`ARGS_LEN_BITS`] bits, its future's copy-space bytes above them (0:
    /// not given, up to [`COPY_SPACE_MAX`]; see [`lengths`]).
    pub const LENGTHS: usize = 5;
    /// Its first argument word.
    pub const ARGS: usize = 6;
    /// Argument bytes an inline task may carry.
    pub const INLINE_ARGS_MAX: usize = (LL_RECORD_WORDS - ARGS) * 4;
    /// Bits of the [`LENGTHS`] word that hold the argument bytes.
    pub const ARGS_LEN_BITS: u32 = 8;
    /// The largest copy space a [`LENGTHS`] word can give.
    pub const COPY_SPACE_MAX: u32 = u32::MAX >> ARGS_LEN_BITS;

    /// The [`LENGTHS`] word of an inline task of `args_len` argument bytes
    /// (at most [`INLINE_ARGS_MAX`]) whose future has `copy_space` bytes of
    /// copy space; a copy space past [`COPY_SPACE_MAX`] is left out. Given
    /// it, a worker sizes the task's output without reading the future, and
    /// answers a task with no output through the notify word alone, never
    /// touching the future: with tens of thousands of kernel threads, their
    /// futures' lines are not in any cache.
    pub const fn lengths(args_len: u32, copy_space: u32) -> u32 {
        let given = if copy_space <= COPY_SPACE_MAX {
            copy_space
        } else {
            0
        };
        (given << ARGS_LEN_BITS) | (args_len & ((1 << ARGS_LEN_BITS) - 1))
    }

    /// The argument bytes of a [`LENGTHS`] word.
    pub const fn args_len(lengths: u32) -> usize {
        (lengths & ((1 << ARGS_LEN_BITS) - 1)) as usize
    }

    /// The copy space a [`LENGTHS`] word gives, if it gives one.
    pub const fn copy_space(lengths: u32) -> Option<usize> {
        match lengths >> ARGS_LEN_BITS {
            0 => None,
            bytes => Some(bytes as usize),
        }
    }
}

/// The word a completer stores at a record's `NOTIFY` offset once the task
/// is answered (Release; the kernel thread polls it with acquire): the
/// record's token above two flags. Mirrored in tandem/runtime/layout.h
/// (`rt_notify`).
pub mod notify_word {
    /// The task succeeded: return code 0, which the kernel then need not
    /// read from the future.
    pub const SUCCEEDED: u32 = 1;
    /// An inline task's answer with return code 0 and no output, which the
    /// word alone carries: the completer left the future as it was (the
    /// kernel reads no output from it). Set only with [`SUCCEEDED`].
    pub const NO_OUTPUT: u32 = 2;
    /// Bits below the token.
    pub const TOKEN_SHIFT: u32 = 2;
    /// The largest token: kernels count theirs 1..=TOKEN_MAX, so a cleared
    /// word (0) is never an answer.
    pub const TOKEN_MAX: u32 = u32::MAX >> TOKEN_SHIFT;

    /// The word answering the task of `token`.
    pub const fn answer(token: u32, succeeded: bool, no_output: bool) -> u32 {
        token << TOKEN_SHIFT | (no_output as u32) << 1 | succeeded as u32
    }
}

/// The task header: the first [`TASK_HEADER_BYTES`] of a task's bytes (a
/// copy future's input, or a pointer future's payload), serialized as four
/// little-endian `u32`s, followed by `args_len` bytes of serialized
/// arguments.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TaskHeader {
    /// The pool (module) that handles the task.
    pub pool: u32,
    /// The method within the pool.
    pub method: u32,
    /// Bytes of serialized arguments after the header.
    pub args_len: u32,
    /// [`TASK_VERSION`]; anything else is refused.
    pub version: u32,
}

impl TaskHeader {
    /// The header at the start of `bytes` (the four little-endian `u32`s of
    /// its serialized form), or `None` when `bytes` is shorter. Checks
    /// nothing else: `task::decode_task` checks the version and lengths.
    pub fn read(bytes: &[u8]) -> Option<Self> {
        Reader::new(bytes).get().ok()
    }
}

/// Bytes of a serialized [`TaskHeader`].
pub const TASK_HEADER_BYTES: usize = 16;
/// `TaskHeader::version`.
pub const TASK_VERSION: u32 = 1;

static_assertions::assert_eq_size!(SegmentHeader, [u8; 256]);
static_assertions::const_assert_eq!(core::mem::align_of::<SegmentHeader>(), 64);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, magic), 0);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, version), 8);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, kind), 12);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, id), 16);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, device_ordinal), 24);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, numa_node), 28);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, segment_bytes), 32);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, queue_offset), 40);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, queue_bytes), 48);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, heap_offset), 56);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, heap_bytes), 64);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, arena_offset), 72);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, arena_bytes), 80);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, num_lanes), 88);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, copy_space), 92);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, runtime_pid), 96);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, state), 100);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, heartbeat), 104);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, stop), 112);
static_assertions::const_assert_eq!(
    memoffset::offset_of!(SegmentHeader, device_inbox_depth),
    116
);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, device_tickets), 120);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, inbox_offset), 128);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, inbox_ring_bytes), 136);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, inbox_depth), 144);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, service_stop), 148);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, device_inbox), 152);
static_assertions::const_assert_eq!(
    memoffset::offset_of!(SegmentHeader, runtime_start_time),
    160
);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, clients_offset), 168);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, clients_bytes), 176);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, device_replies), 184);
static_assertions::const_assert_eq!(
    memoffset::offset_of!(SegmentHeader, device_replies_bytes),
    192
);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, reserved), 200);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, kernel_epoch), 208);
static_assertions::const_assert_eq!(
    memoffset::offset_of!(SegmentHeader, service_kernel_tasks),
    216
);
static_assertions::const_assert_eq!(memoffset::offset_of!(SegmentHeader, service_skipped), 248);
static_assertions::const_assert!(device_inbox::DEPTH.is_power_of_two());
static_assertions::const_assert!(core::mem::size_of::<SegmentHeader>() <= SEGMENT_HEADER_RESERVED);

static_assertions::const_assert!(task_record::INLINE_ARGS_MAX < 1 << task_record::ARGS_LEN_BITS);

static_assertions::assert_eq_size!(HostReply, [u8; HOST_REPLY_BYTES]);
static_assertions::const_assert_eq!(memoffset::offset_of!(HostReply, output_len), 8);
static_assertions::const_assert_eq!(HOST_REPLY_BYTES % 16, 0);

static_assertions::assert_eq_size!(TaskHeader, [u8; TASK_HEADER_BYTES]);
static_assertions::const_assert_eq!(memoffset::offset_of!(TaskHeader, pool), 0);
static_assertions::const_assert_eq!(memoffset::offset_of!(TaskHeader, method), 4);
static_assertions::const_assert_eq!(memoffset::offset_of!(TaskHeader, args_len), 8);
static_assertions::const_assert_eq!(memoffset::offset_of!(TaskHeader, version), 12);

// tandem/runtime/layout.h mirrors this file for kernels: what a C++ compiler
// makes of it (bindgen's, committed in tandem-device-kernels) must agree, field
// by field and constant by constant, or this crate does not compile.
mod cpp_mirror {
    use tandem_device_kernels::runtime_mirror::root::tandem as c;
    use tandem_device_kernels::{assert_same_layout, assert_same_value};
    use tandem_shm_core::Priority;

    use super::*;

    assert_same_layout!(
        SegmentHeader,
        c::RuntimeSegmentHeader {
            magic,
            version,
            kind,
            id,
            device_ordinal,
            numa_node,
            segment_bytes,
            queue_offset,
            queue_bytes,
            heap_offset,
            heap_bytes,
            arena_offset,
            arena_bytes,
            num_lanes,
            copy_space,
            runtime_pid,
            state,
            heartbeat,
            stop,
            device_inbox_depth,
            device_tickets,
            inbox_offset,
            inbox_ring_bytes,
            inbox_depth,
            service_stop,
            device_inbox,
            runtime_start_time,
            clients_offset,
            clients_bytes,
            device_replies,
            device_replies_bytes,
            reserved,
            kernel_epoch,
            service_kernel_tasks,
            service_kernel_failed,
            service_host_tasks,
            service_host_failed,
            service_skipped,
        }
    );
    assert_same_layout!(
        TaskHeader,
        c::TaskHeader {
            pool,
            method,
            args_len,
            version
        }
    );
    assert_same_layout!(
        HostReply,
        c::RtHostReply {
            answer,
            output_len,
            reserved
        }
    );
    assert_same_value! {
        SEGMENT_MAGIC => c::RT_SEGMENT_MAGIC,
        HOST_REPLY_BYTES => c::RT_HOST_REPLY_BYTES,
        host_reply::ANSWERED => c::RT_HOST_REPLY_ANSWERED,
        host_reply::NO_OUTPUT => c::RT_HOST_REPLY_NO_OUTPUT,
        host_reply::TAGGED => c::RT_HOST_REPLY_TAGGED,
        host_reply::TAGGED_LEN_SHIFT => c::RT_HOST_REPLY_TAGGED_LEN_SHIFT,
        host_reply::TAGGED_LEN_MASK => c::RT_HOST_REPLY_TAGGED_LEN_MASK,
        host_reply::TAGGED_MAX => c::RT_HOST_REPLY_TAGGED_MAX,
        SEGMENT_VERSION => c::RT_SEGMENT_VERSION,
        TASK_VERSION => c::RT_TASK_VERSION,
        TASK_HEADER_BYTES => c::RT_TASK_HEADER_BYTES,
        SEGMENT_HEADER_RESERVED => c::RT_SEGMENT_HEADER_RESERVED,
        device_inbox::SLOT_BYTES => c::rt_inbox::SLOT_BYTES,
        device_inbox::HEADER_BYTES => c::rt_inbox::HEADER_BYTES,
        device_inbox::PARTS => c::rt_inbox::PARTS,
        device_inbox::SLOTS_PER_DEPTH => c::rt_inbox::SLOTS_PER_DEPTH,
        task_record::FUTURE => c::rt_record::FUTURE,
        task_record::NOTIFY => c::rt_record::NOTIFY,
        task_record::TOKEN => c::rt_record::TOKEN,
        task_record::IN_FUTURE_WORDS => c::rt_record::IN_FUTURE_WORDS,
        task_record::POOL => c::rt_record::POOL,
        task_record::METHOD => c::rt_record::METHOD,
        task_record::LENGTHS => c::rt_record::LENGTHS,
        task_record::ARGS => c::rt_record::ARGS,
        task_record::INLINE_ARGS_MAX => c::rt_record::INLINE_ARGS_MAX,
        task_record::ARGS_LEN_BITS => c::rt_record::ARGS_LEN_BITS,
        task_record::COPY_SPACE_MAX => c::rt_record::COPY_SPACE_MAX,
        notify_word::SUCCEEDED => c::rt_notify::SUCCEEDED,
        notify_word::NO_OUTPUT => c::rt_notify::NO_OUTPUT,
        notify_word::TOKEN_SHIFT => c::rt_notify::TOKEN_SHIFT,
        notify_word::TOKEN_MAX => c::rt_notify::TOKEN_MAX,
        RC_UNKNOWN_POOL => c::RT_RC_UNKNOWN_POOL,
        RC_UNKNOWN_METHOD => c::RT_RC_UNKNOWN_METHOD,
        RC_BAD_TASK => c::RT_RC_BAD_TASK,
        RC_BAD_ARGS => c::RT_RC_BAD_ARGS,
        RC_HANDLER_PANICKED => c::RT_RC_HANDLER_PANICKED,
        Priority::High => c::rt_priority_high,
        Priority::Low => c::rt_priority_low,
        peer_access::REACHABLE => c::rt_peer_reachable,
        peer_access::UNREACHABLE => c::rt_peer_unreachable,
        device_ticket::PER_LANE => c::rt_ticket::PER_LANE,
        device_ticket::INBOX_FROM_HOST_CONSUMERS => c::rt_ticket::INBOX_FROM_HOST_CONSUMERS,
        device_ticket::INBOX => c::rt_ticket::INBOX,
        math_pool::POOL => c::rt_math::POOL,
        math_pool::NOOP => c::rt_math::NOOP,
        math_pool::ADD => c::rt_math::ADD,
        math_pool::SUM => c::rt_math::SUM,
        math_pool::SUM_VALUES => c::rt_math::SUM_VALUES,
    }
}

tandem_shm_core::impl_serialize_fields!(TaskHeader {
    pool,
    method,
    args_len,
    version
});
