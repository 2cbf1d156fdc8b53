//! A bounded single-producer single-consumer ring in shared memory.
//!
//! The producer and the consumer hand each slot over through the slot's own
//! sequence number (the MPMC ring's protocol, [`RingSlotHeader`], without
//! the tickets' compare-and-swap): the producer of position `t` waits for
//! nothing, it finds the slot free (`seq == 2t`) or reports full, fills it and
//! publishes `2t + 1`; the consumer finds it full or reports empty, reads it
//! and frees it for the next lap. So neither side ever reads the other's
//! index: the only cache lines that travel between the two cores are the
//! slots, which carry the data anyway. (An index-based SPSC ring, like rtrb,
//! re-reads the producer's `tail` whenever its consumer has caught up, which
//! is most of the time when the consumer is the faster side: one more line
//! moved per item.)
//!
//! `tail` (next position to write) and `head` (next to read) are still
//! stored in the header after every operation, each by its one writer and
//! read by nobody on the hot path, so their lines stay put: they tell
//! [`SpscRing::len`] and a producer or consumer taking over (after a
//! process died) where the ring stands.
//!
//! [`RingSlotHeader`]: crate::layout::RingSlotHeader
//!
//! A full ring refuses the push (back-pressure) and returns the item; it
//! never overwrites unread data.

use core::fmt;
use core::marker::PhantomData;

use crate::layout::ring_kind;
use crate::pod::ShmSafe;
use crate::ring::{free_for, full_for, RingError, RingShape, RingView};
use crate::sync::Ordering;

/// A handle to an SPSC ring living in a region; hands out the one producer
/// and the one consumer.
pub struct SpscRing<'r, T: ShmSafe> {
    view: RingView<'r>,
    _elem: PhantomData<T>,
}

// SAFETY: the handle only reads validated, immutable header fields and the
// atomic indices; sending it or sharing it between threads is what several
// processes attached to the ring already do. `T: ShmSafe` is plain bytes with
// no meaning tied to one thread or address space.
unsafe impl<T: ShmSafe> Send for SpscRing<'_, T> {}
// SAFETY: as for `Send`; every method takes `&self` and touches shared state
// only through atomics.
unsafe impl<T: ShmSafe> Sync for SpscRing<'_, T> {}

impl<'r, T: ShmSafe> SpscRing<'r, T> {
    const SHAPE: RingShape = RingShape::new::<T>(ring_kind::SPSC);

    /// Bytes of region a ring of `capacity` elements needs (saturating at
    /// `usize::MAX`; `init_in` rejects capacities that are not powers of two).
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

    /// The producer side.
    ///
    /// # Safety
    /// At most one producer may exist for this ring at a time, across all
    /// handles, processes and kernels: two producers would write the same
    /// slot. A new producer may take over once the previous one is gone.
    pub unsafe fn producer(&self) -> SpscProducer<'r, T> {
        // Acquire: pairs with the previous producer's Release store of tail,
        // so its slot writes are ours to build on.
        let tail = self.view.header.tail.value.load(Ordering::Acquire);
        SpscProducer {
            view: self.view,
            tail,
            _elem: PhantomData,
        }
    }

    /// The consumer side.
    ///
    /// # Safety
    /// At most one consumer may exist for this ring at a time, across all
    /// handles, processes and kernels: two consumers would both take an item.
    /// A new consumer may take over once the previous one is gone.
    pub unsafe fn consumer(&self) -> SpscConsumer<'r, T> {
        // Acquire: pairs with the previous consumer's Release store of head.
        let head = self.view.header.head.value.load(Ordering::Acquire);
        SpscConsumer {
            view: self.view,
            head,
            _elem: PhantomData,
        }
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.view.capacity()
    }

    /// Items in the ring: an estimate when the producer or consumer is
    /// active elsewhere.
    pub fn len(&self) -> usize {
        self.view.approximate_len()
    }

    /// Whether [`len`](Self::len) is zero (an estimate, likewise).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: ShmSafe> Clone for SpscRing<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ShmSafe> Copy for SpscRing<'_, T> {}

impl<T: ShmSafe> fmt::Debug for SpscRing<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpscRing")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

/// The writing end of an [`SpscRing`].
pub struct SpscProducer<'r, T: ShmSafe> {
    view: RingView<'r>,
    /// Next position to write; only this producer stores `header.tail`, so
    /// the local copy is always current.
    tail: u64,
    _elem: PhantomData<T>,
}

// SAFETY: the producer is the one writer of its slots and of `tail`; moving
// it to another thread moves that role with it (processes do the same across
// address spaces). `T: ShmSafe` is plain bytes.
unsafe impl<T: ShmSafe> Send for SpscProducer<'_, T> {}

impl<T: ShmSafe> SpscProducer<'_, T> {
    const STRIDE: usize = SpscRing::<T>::SHAPE.stride;

    /// Fills the slot of position `tail` with `item` if it is free, and
    /// publishes it; false when it still holds an unread item (full).
    #[inline(always)]
    fn fill(&self, tail: u64, item: T) -> bool {
        let (seq, slot) = self.view.slot(tail, Self::STRIDE);
        // Acquire: pairs with the consumer's Release store that freed the
        // slot, so its read of the old element has finished before we
        // overwrite it. Anything but "free for this position" refuses (full,
        // or a corrupt sequence), never overwrites.
        if seq.load(Ordering::Acquire) != free_for(tail) {
            return false;
        }
        // SAFETY: the slot is free for our position and only this producer
        // writes slots.
        unsafe { SpscRing::<T>::SHAPE.write_elem(slot, item) };
        // Release: pairs with the consumer's Acquire load of `seq`,
        // publishing the element.
        seq.store(full_for(tail), Ordering::Release);
        true
    }

    /// Records `tail` in the header (for `len` and a later producer).
    #[inline(always)]
    fn announce(&self) {
        // Release: a producer taking over (Acquire in `SpscRing::producer`)
        // then sees our slot writes.
        self.view
            .header
            .tail
            .value
            .store(self.tail, Ordering::Release);
    }

    /// Appends `item`, or gives it back when the ring is full.
    #[inline]
    pub fn try_push(&mut self, item: T) -> Result<(), T> {
        if !self.fill(self.tail, item) {
            return Err(item);
        }
        self.tail = self.tail.wrapping_add(1);
        self.announce();
        Ok(())
    }

    /// Pushes items from the front of `items` until the ring is full;
    /// returns how many were pushed. Records the new tail once.
    pub fn push_slice(&mut self, items: &[T]) -> usize {
        let pushed = items
            .iter()
            .take_while(|&&item| {
                let filled = self.fill(self.tail, item);
                self.tail = self.tail.wrapping_add(u64::from(filled));
                filled
            })
            .count();
        if pushed > 0 {
            self.announce();
        }
        pushed
    }

    /// Items in the ring as this producer sees it (an estimate while the
    /// consumer is active).
    pub fn len(&self) -> usize {
        // Relaxed: an estimate; no data is read on its strength.
        let head = self.view.header.head.value.load(Ordering::Relaxed);
        self.view.occupied(head, self.tail)
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.view.capacity()
    }
}

impl<T: ShmSafe> fmt::Debug for SpscProducer<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpscProducer")
            .field("tail", &self.tail)
            .finish()
    }
}

/// The reading end of an [`SpscRing`].
pub struct SpscConsumer<'r, T: ShmSafe> {
    view: RingView<'r>,
    /// Next position to read; only this consumer stores `header.head`.
    head: u64,
    _elem: PhantomData<T>,
}

// SAFETY: as for `SpscProducer`, with the consumer's role.
unsafe impl<T: ShmSafe> Send for SpscConsumer<'_, T> {}

impl<T: ShmSafe> SpscConsumer<'_, T> {
    const STRIDE: usize = SpscRing::<T>::SHAPE.stride;

    /// Takes the item of position `head` if it is published, and frees the
    /// slot for the next lap.
    #[inline(always)]
    fn take(&self, head: u64) -> Option<T> {
        let (seq, slot) = self.view.slot(head, Self::STRIDE);
        // Acquire: pairs with the producer's Release store of `seq`, so its
        // element is visible.
        if seq.load(Ordering::Acquire) != full_for(head) {
            return None;
        }
        // SAFETY: the slot holds the published item of our position and the
        // producer will not touch it until we free it below.
        let item = unsafe { SpscRing::<T>::SHAPE.read_elem(slot) };
        // Release: pairs with the next lap's Acquire load in `fill`, so our
        // read finishes before the producer overwrites the slot.
        let next_lap = head.wrapping_add(self.view.mask + 1);
        seq.store(free_for(next_lap), Ordering::Release);
        Some(item)
    }

    /// Records `head` in the header (for `len` and a later consumer).
    #[inline(always)]
    fn announce(&self) {
        // Release: a consumer taking over (Acquire in `SpscRing::consumer`)
        // then continues after our reads.
        self.view
            .header
            .head
            .value
            .store(self.head, Ordering::Release);
    }

    /// Takes the oldest item, or `None` when the ring is empty.
    #[inline]
    pub fn try_pop(&mut self) -> Option<T> {
        let item = self.take(self.head)?;
        self.head = self.head.wrapping_add(1);
        self.announce();
        Some(item)
    }

    /// Pops into the front of `out` until it is full or the ring is empty;
    /// returns how many were taken. Records the new head once.
    pub fn pop_slice(&mut self, out: &mut [T]) -> usize {
        let mut taken = 0;
        for dst in out.iter_mut() {
            let Some(item) = self.take(self.head) else {
                break;
            };
            *dst = item;
            self.head = self.head.wrapping_add(1);
            taken += 1;
        }
        if taken > 0 {
            self.announce();
        }
        taken
    }

    /// Items in the ring as this consumer sees it (an estimate while the
    /// producer is active).
    pub fn len(&self) -> usize {
        // Relaxed: an estimate; no data is read on its strength.
        let tail = self.view.header.tail.value.load(Ordering::Relaxed);
        self.view.occupied(self.head, tail)
    }

    /// Whether [`len`](Self::len) is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.view.capacity()
    }
}

impl<T: ShmSafe> fmt::Debug for SpscConsumer<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpscConsumer")
            .field("head", &self.head)
            .finish()
    }
}
