//! A bounded multi-producer multi-consumer ring in shared memory: Dmitry
//! Vyukov's bounded queue, which needs only 64-bit loads, stores and CAS, so
//! GPU kernels can run the same algorithm on the same bytes.
//!
//! `tail` is the next enqueue ticket and `head` the next dequeue ticket. Every
//! slot carries a sequence number (`RingSlotHeader::seq`) saying whose turn
//! it is: `seq == 2t` means free for the producer holding ticket `t`;
//! `seq == 2t + 1` means it holds the item for the consumer holding ticket
//! `t`, who then frees it for the next lap with `seq = 2(t + capacity)`. A
//! party claims a ticket with a CAS on `tail`/`head` only after the slot's
//! sequence says it is its turn, and publishes its work with a Release store
//! of `seq`. (Vyukov's original uses `t`, `t + 1` and `t + capacity`, which
//! cannot tell "full for ticket t" from "free for ticket t + 1" when the
//! capacity is 1; doubling keeps the three states apart for every capacity.)
//!
//! `try_push` and `try_pop` never wait: when the slot at the next ticket is
//! not yet released by the previous lap's consumer (or not yet filled by its
//! producer) they report full (or empty), even if that peer is only midway
//! through its copy. A peer that dies mid-operation therefore cannot hang the
//! others; it leaves its one slot unusable instead.

use core::fmt;
use core::marker::PhantomData;

use crate::layout::ring_kind;
use crate::pod::ShmSafe;
use crate::ring::{free_for, full_for, Backoff, RingError, RingShape, RingView};
use crate::sync::Ordering;

/// A handle to an MPMC ring living in a region. Any number of handles, in
/// any number of threads and processes, may push and pop concurrently.
pub struct MpmcRing<'r, T: ShmSafe> {
    view: RingView<'r>,
    _elem: PhantomData<T>,
}

// SAFETY: every shared access goes through the atomics of the header and the
// slots' sequence numbers, and a slot's element is touched only by the one
// party whose turn the sequence number gives; that is exactly what makes the
// ring safe to use from several processes, so also from several threads.
// `T: ShmSafe` is plain bytes with no meaning tied to one thread.
unsafe impl<T: ShmSafe> Send for MpmcRing<'_, T> {}
// SAFETY: as for `Send`; all methods take `&self`.
unsafe impl<T: ShmSafe> Sync for MpmcRing<'_, T> {}

impl<T: ShmSafe> Clone for MpmcRing<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ShmSafe> Copy for MpmcRing<'_, T> {}

impl<'r, T: ShmSafe> MpmcRing<'r, T> {
    pub(crate) const SHAPE: RingShape = RingShape::new::<T>(ring_kind::MPMC);
    const STRIDE: usize = Self::SHAPE.stride;

    /// Bytes of region a ring of `capacity` elements needs (saturating at
    /// `usize::MAX`; `init_in` rejects capacities that are not powers of two).
    /// Each slot is an 8-byte sequence number followed by the element:
    /// `round_up(round_up(8, align) + size, max(8, align))` bytes.
    pub fn required_bytes(capacity: u32) -> usize {
        Self::SHAPE.required_bytes(capacity)
    }

    /// Initialises an empty ring of `capacity` slots (a power of two) in
    /// place at `region`, which must be 64-byte aligned and at least
    /// [`required_bytes`](Self::required_bytes) long.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`,
    /// and nobody (no other handle, process or kernel) may use it during this
    /// call. Re-initialising a ring others are attached to is undefined.
    pub unsafe fn init_in(region: *mut u8, len: usize, capacity: u32) -> Result<Self, RingError> {
        // SAFETY: forwarded to the caller.
        let view = unsafe { Self::SHAPE.init(region, len, capacity)? };
        Ok(Self {
            view,
            _elem: PhantomData,
        })
    }

    /// Attaches to a ring another handle (perhaps in another process, at
    /// another address) initialised, after validating its header.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`
    /// and must not be re-initialised while this handle is in use.
    pub unsafe fn attach(region: *mut u8, len: usize) -> Result<Self, RingError> {
        // SAFETY: forwarded to the caller.
        let view = unsafe { Self::SHAPE.attach(region, len)? };
        Ok(Self {
            view,
            _elem: PhantomData,
        })
    }

    /// Appends `item`, or gives it back when the ring is full (including the
    /// moment while the consumer of the slot's previous lap is still copying
    /// out of it).
    #[inline]
    pub fn try_push(&self, item: T) -> Result<(), T> {
        let tail = &self.view.header.tail.value;
        // Relaxed: tickets only pick a slot; whether it is ours is decided by
        // the slot's sequence number, read with Acquire below.
        let mut ticket = tail.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            let (seq, slot) = self.view.slot(ticket, Self::STRIDE);
            // Acquire: pairs with the Release store of the consumer that
            // freed this slot, so its read of the old element is finished
            // before we overwrite it.
            let turn = seq.load(Ordering::Acquire);
            match turn.wrapping_sub(free_for(ticket)) as i64 {
                0 => {
                    // Relaxed: the CAS only arbitrates between producers that
                    // all saw the slot free; the data hand-off is ordered by
                    // `seq`. Weak: a spurious failure just loops.
                    match tail.compare_exchange_weak(
                        ticket,
                        ticket.wrapping_add(1),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            // SAFETY: winning the CAS for a ticket whose slot
                            // was free makes the slot ours until we release it.
                            unsafe { Self::SHAPE.write_elem(slot, item) };
                            // Release: pairs with the consumer's Acquire load
                            // of `seq`, publishing the element.
                            seq.store(full_for(ticket), Ordering::Release);
                            return Ok(());
                        }
                        Err(current) => {
                            ticket = current;
                            backoff.pause();
                        }
                    }
                }
                // The slot still holds the item of the previous lap: full.
                lag if lag < 0 => return Err(item),
                // Another producer took this ticket already: catch up. The
                // pause also lets the model checker see this as a spin that
                // another thread must end (a reload may keep returning a
                // stale ticket until the newer one becomes visible).
                _ => {
                    backoff.pause();
                    ticket = tail.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// Takes the oldest available item, or `None` when the ring is empty
    /// (including the moment while the producer of the next item is still
    /// copying into its slot).
    #[inline]
    pub fn try_pop(&self) -> Option<T> {
        let head = &self.view.header.head.value;
        // Relaxed: as for `tail` in `try_push`.
        let mut ticket = head.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            let (seq, slot) = self.view.slot(ticket, Self::STRIDE);
            // Acquire: pairs with the producer's Release store of `seq`, so
            // its element is visible.
            let turn = seq.load(Ordering::Acquire);
            match turn.wrapping_sub(full_for(ticket)) as i64 {
                0 => {
                    // Relaxed / weak: as in `try_push`.
                    match head.compare_exchange_weak(
                        ticket,
                        ticket.wrapping_add(1),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            // SAFETY: the slot holds the item for our ticket,
                            // published (Acquire above) and ours to read until
                            // we release it.
                            let item = unsafe { Self::SHAPE.read_elem(slot) };
                            // Release: pairs with the next lap's producer's
                            // Acquire load of `seq`, so our read finishes
                            // before it overwrites the slot.
                            let next_lap = ticket.wrapping_add(self.view.mask + 1);
                            seq.store(free_for(next_lap), Ordering::Release);
                            return Some(item);
                        }
                        Err(current) => {
                            ticket = current;
                            backoff.pause();
                        }
                    }
                }
                // The slot is not filled for this ticket yet: empty.
                lag if lag < 0 => return None,
                // Another consumer took this ticket already: catch up (and
                // pause, as in `try_push`).
                _ => {
                    backoff.pause();
                    ticket = head.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// Takes up to `out.len()` of the oldest items into the front of `out`
    /// and returns how many: the run of consecutive filled slots at the
    /// head, claimed with one compare-and-swap. Many consumers then trade
    /// the head's cache line once per run instead of once per item. 0 when
    /// the ring is empty (or the next item is still being written), as
    /// [`try_pop`](Self::try_pop) returns `None`; a run stops at the first
    /// slot not yet filled, so items behind a slow producer wait for it.
    #[inline]
    pub fn try_pop_many(&self, out: &mut [T]) -> usize {
        let head = &self.view.header.head.value;
        let max = out.len() as u64;
        if max == 0 {
            return 0;
        }
        // Relaxed: as for `tail` in `try_push`.
        let mut ticket = head.load(Ordering::Relaxed);
        let mut backoff = Backoff::new();
        loop {
            // Count the filled slots from `ticket` on. Acquire on each:
            // pairs with its producer's Release store of `seq`, so the
            // element read below is visible.
            let mut run = 0;
            let mut first_lag = 0;
            while run < max {
                let at = ticket.wrapping_add(run);
                let (seq, _) = self.view.slot(at, Self::STRIDE);
                let lag = seq.load(Ordering::Acquire).wrapping_sub(full_for(at)) as i64;
                if lag != 0 {
                    if run == 0 {
                        first_lag = lag;
                    }
                    break;
                }
                run += 1;
            }
            if run == 0 {
                if first_lag < 0 {
                    return 0; // not filled for this ticket yet: empty
                }
                // Another consumer took this ticket already: catch up.
                backoff.pause();
                ticket = head.load(Ordering::Relaxed);
                continue;
            }
            // Relaxed / weak: as in `try_push`. Winning the CAS from `ticket`
            // means no consumer has claimed any ticket from `ticket` on, and
            // only a ticket's consumer moves its slot off "full", so all
            // `run` slots still hold the items seen above.
            match head.compare_exchange_weak(
                ticket,
                ticket.wrapping_add(run),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    let next_lap = self.view.mask + 1;
                    for (i, out) in out.iter_mut().take(run as usize).enumerate() {
                        let at = ticket.wrapping_add(i as u64);
                        let (seq, slot) = self.view.slot(at, Self::STRIDE);
                        // SAFETY: as in `try_pop`: the slot holds the item for
                        // a ticket we won, published (Acquire above).
                        *out = unsafe { Self::SHAPE.read_elem(slot) };
                        // Release: as in `try_pop`, per slot, so a producer
                        // of the next lap may take each slot as soon as it
                        // is read.
                        seq.store(free_for(at.wrapping_add(next_lap)), Ordering::Release);
                    }
                    return run as usize;
                }
                Err(current) => {
                    ticket = current;
                    backoff.pause();
                }
            }
        }
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.view.capacity()
    }

    /// Items in the ring, estimated from the two tickets: with pushes and
    /// pops in flight it may count items still being written or already
    /// being read, and is stale when returned. Never exceeds the capacity.
    pub fn len(&self) -> usize {
        self.view.approximate_len()
    }

    /// Whether [`len`](Self::len) is zero (an estimate, likewise).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: ShmSafe> fmt::Debug for MpmcRing<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpmcRing")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}
