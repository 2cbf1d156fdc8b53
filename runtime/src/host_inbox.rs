//! The host route into a device segment's GPU service, as one process sees
//! it: the from-host ring that host threads push task records into
//! (`submit_to_gpu`), and the reply futures the process recycles between
//! those submits.

use tandem_shm_core::{BlockPool, LlRing};

use crate::layout::{task_record, HOST_REPLY_BYTES};

/// Reply futures a process keeps back for its next submits: eight fill the
/// pool's one cache line, and a thread that waits for each task before the
/// next reuses one.
const KEPT_REPLIES: usize = 8;

/// A device segment's from-host ring and this process's recycled reply
/// futures.
///
/// A submit after a pause pays for every cache line and page it touches
/// (docs/perf/2026-12-01-dev-vm-2core-cold-lines.md): one that allocates its reply
/// future walks the heap's code, its class's list head and the block's
/// header, where one that takes a kept future touches the pool's line and a
/// block it wrote before. The kept futures are blocks of the segment's heap,
/// allocated as futures of [`reply_space`](Self::reply_space) bytes of copy
/// space and given back by a `Pending` whose task was answered; the segment
/// frees what is left when it goes.
pub(crate) struct HostInbox {
    ring: LlRing<'static>,
    reply_space: Option<u32>,
    replies: BlockPool<KEPT_REPLIES>,
}

impl HostInbox {
    /// The route through `ring`, in a segment whose futures have
    /// `copy_space` bytes of copy space.
    pub(crate) fn new(ring: LlRing<'static>, copy_space: u32) -> Self {
        let reply_space = copy_space
            .checked_add(HOST_REPLY_BYTES as u32)
            .filter(|&space| task_record::copy_space(task_record::lengths(0, space)).is_some());
        Self {
            ring,
            reply_space,
            replies: BlockPool::new(),
        }
    }

    /// The ring host threads push into.
    pub(crate) fn ring(&self) -> &LlRing<'static> {
        &self.ring
    }

    /// The copy space of a reply future: the reply, then the segment's copy
    /// space for the output. `None` when a record's `LENGTHS` word cannot
    /// name that much: tasks then go in a future of their own.
    pub(crate) fn reply_space(&self) -> Option<u32> {
        self.reply_space
    }

    /// The kept reply futures, by segment offset.
    pub(crate) fn replies(&self) -> &BlockPool<KEPT_REPLIES> {
        &self.replies
    }

    /// Empties the pool of reply futures, for the segment to free them.
    pub(crate) fn drain_replies(&mut self) -> impl Iterator<Item = u64> + '_ {
        self.replies.drain()
    }
}
