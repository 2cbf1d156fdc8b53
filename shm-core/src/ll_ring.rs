//! A bounded MPMC ring of small records that need no fence to publish: every
//! 8-byte word of a record carries its own tag ("LL", for low latency, as in
//! NCCL's LL protocol), so a consumer can tell a whole record from a torn one
//! by reading it.
//!
//! Why: a GPU thread that publishes data in host memory behind a flag must put
//! a system-scope fence between the two (the link may reorder its stores), and
//! that fence alone costs a sizeable part of a whole host round trip
//! (docs/design/pcie.md, "Publishing without a fence"). A single 8-byte store,
//! though, arrives whole. So a record is a tagged length word and up to
//! [`LL_RECORD_WORDS`] tagged data words ([`LlSlot`]), each written with one
//! relaxed 8-byte store in any order; it is published for position `t` once
//! every word carries tag `(2t + 1) as u32`, which differs from the tags of the
//! slot's other laps.
//!
//! Tickets and turns are Vyukov's, as in [`MpmcRing`](crate::MpmcRing): the
//! slot's sequence number `2t` says it is free for the producer of position
//! `t`. Only consumers (and the initialiser) write it: the producer's
//! publication is the words themselves. A consumer reads a whole record
//! before it claims the position with its CAS on `head`: a record not yet
//! whole is "empty for now", so no consumer ever waits on a producer, and a
//! producer that dies midway leaves its position unusable (as in
//! `MpmcRing`), never a consumer spinning. Because the reads come first, a
//! `head` past a position (moved with Release) also says its slot is free
//! to rewrite: producers that count their tickets elsewhere (GPU threads)
//! need nothing else.
//!
//! Data outside the record (a future's copy space) still needs ordering: a
//! producer that wrote any issues a Release fence before the words, and the
//! consumer an Acquire fence after it claimed the record ([`LlRing::try_pop`]
//! always does; on x86 it is free).

use core::fmt;
use core::mem::{align_of, size_of};
use core::ptr::addr_of_mut;

use crate::cache_hint::demote_lines;
use crate::layout::{ring_kind, LlSlot, LL_RECORD_WORDS};
use crate::ring::{free_for, full_for, Backoff, RingError, RingShape, RingView};
use crate::sync::{fence, AtomicU64, Ordering};

/// Up to [`LL_RECORD_WORDS`] 32-bit words: what a producer pushes and a
/// consumer pops.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LlRecord {
    len: u32,
    words: [u32; LL_RECORD_WORDS],
}

impl LlRecord {
    /// A record of `data`, or `None` when it has more than
    /// [`LL_RECORD_WORDS`] words.
    #[inline]
    pub fn new(data: &[u32]) -> Option<Self> {
        let mut words = [0; LL_RECORD_WORDS];
        words.get_mut(..data.len())?.copy_from_slice(data);
        Some(Self {
            len: data.len() as u32,
            words,
        })
    }

    /// A record of `N` words, `N` checked at compile time.
    pub const fn from_array<const N: usize>(data: [u32; N]) -> Self {
        const {
            assert!(
                N <= LL_RECORD_WORDS,
                "an LL record holds at most LL_RECORD_WORDS words"
            )
        };
        let mut words = [0; LL_RECORD_WORDS];
        let mut i = 0;
        while i < N {
            words[i] = data[i];
            i += 1;
        }
        Self {
            len: N as u32,
            words,
        }
    }

    /// The record's words.
    #[inline]
    pub fn words(&self) -> &[u32] {
        &self.words[..self.len as usize]
    }
}

impl fmt::Debug for LlRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LlRecord").field(&self.words()).finish()
    }
}

/// The tag every word of position `ticket`'s record carries: odd, so never
/// the 0 a slot is initialised with, and different for each lap of a slot
/// (laps are `2 * capacity` apart, capacity below 2^31).
#[inline(always)]
pub fn ll_tag(ticket: u64) -> u32 {
    full_for(ticket) as u32
}

/// A tagged word.
#[inline(always)]
fn tagged(tag: u32, data: u32) -> u64 {
    u64::from(tag) << 32 | u64::from(data)
}

/// What reading a slot for one position found.
enum Seen {
    /// The whole record of the position.
    Whole(LlRecord),
    /// Some word is still from an earlier lap: not (wholly) published yet.
    NotYet,
    /// A word from a later lap: the position was consumed already.
    Passed,
}

/// A handle to an LL ring living in a region. Any number of handles, in any
/// number of threads and processes, may push and pop concurrently; GPU
/// producers take their positions from device tickets instead (tandem/ll_ring.h).
#[derive(Clone, Copy)]
pub struct LlRing<'r> {
    view: RingView<'r>,
}

// SAFETY: every shared access goes through atomics (the header's counters,
// the slots' sequence numbers and words); a handle holds only validated
// geometry, so it may move to and be shared by other threads, as it may be
// by other processes.
unsafe impl Send for LlRing<'_> {}
// SAFETY: as for `Send`; all methods take `&self`.
unsafe impl Sync for LlRing<'_> {}

impl<'r> LlRing<'r> {
    pub(crate) const SHAPE: RingShape = RingShape::with_layout(
        ring_kind::LL,
        size_of::<[AtomicU64; 1 + LL_RECORD_WORDS]>(),
        align_of::<AtomicU64>(),
    );

    /// Bytes of region a ring of `capacity` slots needs (saturating).
    pub fn required_bytes(capacity: u32) -> usize {
        Self::SHAPE.required_bytes(capacity)
    }

    /// Initialises an empty ring of `capacity` slots (a power of two, below
    /// 2^31) in place at `region`, which must be 64-byte aligned and at least
    /// [`required_bytes`](Self::required_bytes) long.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`,
    /// and nobody may use it during this call.
    pub unsafe fn init_in(region: *mut u8, len: usize, capacity: u32) -> Result<Self, RingError> {
        if capacity > 1 << 30 {
            return Err(RingError::HeaderMismatch {
                field: "capacity (LL rings hold at most 2^30 slots)",
                expected: 1 << 30,
                found: u64::from(capacity),
            });
        }
        // SAFETY: forwarded to the caller. The header and sequence numbers
        // are written and the magic published ...
        let view = unsafe { Self::SHAPE.init(region, len, capacity)? };
        for index in 0..u64::from(capacity) {
            let (_, slot) = view.slot(index, Self::SHAPE.stride);
            // ... before these words, which nobody can see yet either: the
            // caller publishes the ring (its own magic, or a queue's) later,
            // or keeps it to itself during the call. Tag 0 matches no
            // position. SAFETY: each slot is an `LlSlot` (the shape's elements
            // are its words), 8-aligned, inside the region.
            unsafe {
                let words = addr_of_mut!((*slot.cast::<LlSlot>()).words);
                for w in 0..=LL_RECORD_WORDS {
                    addr_of_mut!((*words)[w]).write(AtomicU64::new(0));
                }
            }
        }
        Ok(Self { view })
    }

    /// Attaches to a ring another handle initialised, after validating its
    /// header.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`
    /// and must not be re-initialised while this handle is in use.
    pub unsafe fn attach(region: *mut u8, len: usize) -> Result<Self, RingError> {
        // SAFETY: forwarded to the caller.
        let view = unsafe { Self::SHAPE.attach(region, len)? };
        Ok(Self { view })
    }

    /// A handle to an already validated ring.
    ///
    /// # Safety
    /// As [`RingView::new`]; the ring must be an LL ring.
    pub(crate) unsafe fn from_validated(region: *mut u8, capacity: u32) -> Self {
        Self {
            // SAFETY: forwarded to the caller.
            view: unsafe { RingView::new(region, capacity) },
        }
    }

    /// The slot of `pos`: its sequence number and words.
    #[inline(always)]
    fn slot(&self, pos: u64) -> (&'r AtomicU64, &'r [AtomicU64; 1 + LL_RECORD_WORDS]) {
        let (seq, slot) = self.view.slot(pos, Self::SHAPE.stride);
        // SAFETY: every slot is an `LlSlot`, initialised before the ring was
        // published and valid for 'r; its words are only accessed atomically.
        (seq, unsafe { &(*slot.cast::<LlSlot>()).words })
    }

    /// Appends `record`, or gives it back when the ring is full (including
    /// while the consumer of the slot's previous lap is still reading it).
    /// The record needs no ordering; a producer that also wrote memory the
    /// consumer will read issues `fence(Release)` before calling.
    pub fn try_push(&self, record: LlRecord) -> Result<(), LlRecord> {
        self.try_push_ticket(record).map(drop)
    }

    /// [`try_push`](Self::try_push), also giving the position the record
    /// took, whose [`ll_tag`] a consumer may answer under.
    #[inline]
    pub fn try_push_ticket(&self, record: LlRecord) -> Result<u64, LlRecord> {
        let tail = &self.view.header.tail.value;
        // Relaxed: as in `MpmcRing::try_push`, the slot's sequence number
        // decides whose turn it is.
        let mut ticket = tail.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            let (seq, _) = self.slot(ticket);
            // Acquire: pairs with the Release store of the consumer that
            // freed the slot, so its reads of the old record are finished
            // before we overwrite it.
            match seq.load(Ordering::Acquire).wrapping_sub(free_for(ticket)) as i64 {
                0 => match tail.compare_exchange_weak(
                    ticket,
                    ticket.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        self.write(ticket, &record);
                        return Ok(ticket);
                    }
                    Err(current) => {
                        ticket = current;
                        backoff.pause();
                    }
                },
                lag if lag < 0 => return Err(record),
                _ => {
                    backoff.pause();
                    ticket = tail.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// Hints the CPU to move the lines of position `ticket`'s slot out of
    /// this core's caches ([`demote_lines`]): for a producer whose consumer
    /// is a device polling the slot across PCIe, once the record is in.
    #[inline]
    pub fn demote_slot(&self, ticket: u64) {
        let (seq, _) = self.slot(ticket);
        // The slot starts at its sequence word.
        demote_lines((seq as *const AtomicU64).cast(), size_of::<LlSlot>());
    }

    /// Writes `record` as position `ticket`'s, whose slot the caller owns.
    #[inline]
    fn write(&self, ticket: u64, record: &LlRecord) {
        let (_, words) = self.slot(ticket);
        let tag = ll_tag(ticket);
        // Relaxed, data words first: every word is checked on its own, so the
        // order is only a courtesy to consumers polling the length word.
        for (word, &data) in words[1..].iter().zip(record.words()) {
            word.store(tagged(tag, data), Ordering::Relaxed);
        }
        words[0].store(tagged(tag, record.len), Ordering::Relaxed);
    }

    /// Reads the slot of `ticket` as that position's record.
    fn read(&self, ticket: u64) -> Seen {
        let (_, words) = self.slot(ticket);
        let tag = ll_tag(ticket);
        let check = |word: u64| match (word >> 32) as u32 {
            t if t == tag => None,
            // Laps are 2 * capacity tags apart, far below 2^31.
            t if (t.wrapping_sub(tag) as i32) > 0 => Some(Seen::Passed),
            _ => Some(Seen::NotYet),
        };
        // Relaxed: each word is atomic and self-describing; what the words
        // alone do not carry is ordered by the fences of `try_pop`.
        let first = words[0].load(Ordering::Relaxed);
        if let Some(seen) = check(first) {
            return seen;
        }
        // A length past the slot is a corrupt producer's: the record is
        // taken (so the ring moves on) as an empty one.
        let len = (first as u32) as usize;
        let mut record = LlRecord {
            len: 0,
            words: [0; LL_RECORD_WORDS],
        };
        if len <= LL_RECORD_WORDS {
            for (out, word) in record.words[..len].iter_mut().zip(&words[1..]) {
                let word = word.load(Ordering::Relaxed);
                if let Some(seen) = check(word) {
                    return seen;
                }
                *out = word as u32;
            }
            record.len = len as u32;
        }
        Seen::Whole(record)
    }

    /// Takes the oldest record, or `None` when the ring is empty (including
    /// while the next record's producer is still writing it).
    pub fn try_pop(&self) -> Option<LlRecord> {
        let head = &self.view.header.head.value;
        // Relaxed: as in `try_push`.
        let mut ticket = head.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            match self.read(ticket) {
                // Release on success: our reads of the record happen-before
                // anything a producer does after it sees `head` past it (GPU
                // producers take that as the slot being free: tandem/ll_ring.h).
                Seen::Whole(record) => match head.compare_exchange_weak(
                    ticket,
                    ticket.wrapping_add(1),
                    Ordering::Release,
                    Ordering::Relaxed,
                ) {
                    // The words read before the CAS are the position's: its
                    // slot cannot be rewritten before its consumer (we) frees
                    // it below.
                    Ok(_) => {
                        // Acquire: with the producer's Release fence before
                        // its words (which we read), makes whatever it wrote
                        // before them visible to our caller.
                        fence(Ordering::Acquire);
                        let (seq, _) = self.slot(ticket);
                        let next_lap = ticket.wrapping_add(self.view.mask + 1);
                        // Release: pairs with the next lap's producer's
                        // Acquire load of `seq`, so our reads of the words
                        // finish before it overwrites them.
                        seq.store(free_for(next_lap), Ordering::Release);
                        return Some(record);
                    }
                    Err(current) => {
                        ticket = current;
                        backoff.pause();
                    }
                },
                Seen::NotYet => return None,
                Seen::Passed => {
                    backoff.pause();
                    ticket = head.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// [`try_pop`](Self::try_pop) for a ring with one consumer: the caller
    /// is the only thread (of any process) that pops this ring. It moves
    /// `head` with a store, not a compare-and-swap: on x86 that is a plain
    /// store instead of a locked instruction, which waited for every store
    /// before it to reach the cache (a runtime worker's answer to the
    /// previous task, a line the GPU had just read). Two callers at once
    /// could both take one record; nothing worse (every access is atomic).
    pub fn try_pop_sole(&self) -> Option<LlRecord> {
        let head = &self.view.header.head.value;
        // Relaxed: only this consumer stores `head`.
        let ticket = head.load(Ordering::Relaxed);
        match self.read(ticket) {
            Seen::Whole(record) => {
                // Release: our reads of the record happen-before anything a
                // producer does after it sees `head` past it (as in try_pop).
                head.store(ticket.wrapping_add(1), Ordering::Release);
                // Acquire, and the Release of `seq`: as in try_pop.
                fence(Ordering::Acquire);
                let (seq, _) = self.slot(ticket);
                seq.store(
                    free_for(ticket.wrapping_add(self.view.mask + 1)),
                    Ordering::Release,
                );
                Some(record)
            }
            // A record at `head` that is already past is only seen by a
            // second consumer, which the caller promised there is not.
            Seen::NotYet | Seen::Passed => None,
        }
    }

    /// How many positions host producers have claimed (the ring's `tail`):
    /// every record a host producer pushes lies before it once its push has
    /// claimed a slot. GPU producers count on device tickets instead, which
    /// this does not see. `Relaxed`: a caller that needs a producer's claims
    /// visible orders them itself (e.g. by seeing that producer gone).
    pub fn claimed(&self) -> u64 {
        self.view.header.tail.value.load(Ordering::Relaxed)
    }

    /// How many positions consumers have taken (the ring's `head`): every
    /// record before it has been popped. `Acquire`: pairs with the `Release`
    /// of the pop that moved it, so whatever those consumers did before
    /// (reading the records) happened-before the caller's next steps.
    pub fn taken(&self) -> u64 {
        self.view.header.head.value.load(Ordering::Acquire)
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.view.capacity()
    }

    /// Records in the ring, estimated from the two counters (as
    /// `MpmcRing::len`). GPU producers count on device tickets, not `tail`:
    /// their records are not counted.
    pub fn len(&self) -> usize {
        self.view.approximate_len()
    }

    /// Whether [`len`](Self::len) is zero (an estimate, likewise).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for LlRing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlRing")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    extern crate std;

    use std::alloc::{alloc_zeroed, dealloc, Layout};

    use super::*;

    /// A producer's words landing one by one, in any order: the record is
    /// taken only once the last of them is there, and a corrupt length is
    /// taken as an empty record so the ring moves on.
    #[test]
    fn a_record_is_taken_only_whole() {
        let len = LlRing::required_bytes(4);
        let layout = Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: a non-zero size.
        let region = unsafe { alloc_zeroed(layout) };
        // SAFETY: a fresh 4096-aligned region of `len` bytes, freed below.
        let ring = unsafe { LlRing::init_in(region, len, 4) }.unwrap();
        let (_, words) = ring.slot(0);
        let tag = ll_tag(0);
        words[2].store(tagged(tag, 8), Ordering::Relaxed);
        assert_eq!(ring.try_pop(), None, "no length word yet");
        words[0].store(tagged(tag, 3), Ordering::Relaxed);
        words[1].store(tagged(tag, 7), Ordering::Relaxed);
        assert_eq!(ring.try_pop(), None, "word 3 is still the initial one");
        words[3].store(tagged(tag, 9), Ordering::Relaxed);
        assert_eq!(ring.try_pop(), Some(LlRecord::from_array([7, 8, 9])));
        assert_eq!(ring.try_pop(), None);
        let (_, words) = ring.slot(1);
        words[0].store(tagged(ll_tag(1), 99), Ordering::Relaxed);
        assert_eq!(ring.try_pop().map(|r| r.words().len()), Some(0));
        // SAFETY: allocated above with this layout; the ring is not used again.
        unsafe { dealloc(region, layout) };
    }
}
