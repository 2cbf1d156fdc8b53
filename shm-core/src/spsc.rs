//! A bounded single-producer single-consumer ring in shared memory.
//!
//! `tail` (next slot to write) is stored only by the producer and `head` (next
//! slot to read) only by the consumer; both are free-running 64-bit counters,
//! masked to a slot. Each side keeps its own index locally and a cached copy
//! of the other side's, and re-reads the shared atomic only when the cache
//! says full (producer) or empty (consumer) — so in steady state a push or pop
//! touches the peer's cache line once per lap, not once per item.
//!
//! A full ring refuses the push (back-pressure) and returns the item; it
//! never overwrites unread data.

use core::fmt;
use core::marker::PhantomData;

use crate::layout::ring_kind;
use crate::pod::ShmSafe;
use crate::ring::{RingError, RingShape, RingView};
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
        // SAFETY: forwarded to the caller. SPSC slots need no initialisation.
        let view = unsafe { Self::SHAPE.init(region, len, capacity, |_, _| {})? };
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
        // Acquire on tail: pairs with the previous producer's Release store,
        // so its slot writes are ours to build on. Acquire on head: as in
        // `try_push`.
        let tail = self.view.header.tail.value.load(Ordering::Acquire);
        let cached_head = self.view.header.head.value.load(Ordering::Acquire);
        SpscProducer {
            view: self.view,
            tail,
            cached_head,
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
        // Acquire on head: pairs with the previous consumer's Release store.
        // Acquire on tail: as in `try_pop`.
        let head = self.view.header.head.value.load(Ordering::Acquire);
        let cached_tail = self.view.header.tail.value.load(Ordering::Acquire);
        SpscConsumer {
            view: self.view,
            head,
            cached_tail,
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
    /// The consumer's `head` as last read; stale means "less free space than
    /// there really is", never more.
    cached_head: u64,
    _elem: PhantomData<T>,
}

// SAFETY: the producer is the one writer of its slots and of `tail`; moving
// it to another thread moves that role with it (processes do the same across
// address spaces). `T: ShmSafe` is plain bytes.
unsafe impl<T: ShmSafe> Send for SpscProducer<'_, T> {}

impl<T: ShmSafe> SpscProducer<'_, T> {
    const STRIDE: usize = SpscRing::<T>::SHAPE.stride;

    /// Appends `item`, or gives it back when the ring is full.
    #[inline]
    pub fn try_push(&mut self, item: T) -> Result<(), T> {
        let tail = self.tail;
        // wrapping_sub > mask: full (or a corrupt head ahead of tail, which
        // also refuses rather than overwriting).
        if tail.wrapping_sub(self.cached_head) > self.view.mask {
            // Acquire: pairs with the consumer's Release store of head, so
            // its read of the slot we are about to reuse has finished.
            self.cached_head = self.view.header.head.value.load(Ordering::Acquire);
            if tail.wrapping_sub(self.cached_head) > self.view.mask {
                return Err(item);
            }
        }
        let slot = self.view.slot(tail, Self::STRIDE);
        // SAFETY: the slot at `tail` is free (tail - head < capacity) and only
        // this producer writes slots.
        unsafe { SpscRing::<T>::SHAPE.write_elem(slot, item) };
        self.tail = tail.wrapping_add(1);
        // Release: pairs with the consumer's Acquire load of tail, making the
        // element written above visible before the index that announces it.
        self.view
            .header
            .tail
            .value
            .store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Pushes items from the front of `items` until the ring is full;
    /// returns how many were pushed. Announces them with one index store.
    pub fn push_slice(&mut self, items: &[T]) -> usize {
        let tail = self.tail;
        let mut free = self.free_slots(tail);
        if free < items.len() as u64 {
            // Acquire: as in `try_push`.
            self.cached_head = self.view.header.head.value.load(Ordering::Acquire);
            free = self.free_slots(tail);
        }
        let count = free.min(items.len() as u64);
        for (offset, item) in (0..count).zip(items) {
            let slot = self.view.slot(tail.wrapping_add(offset), Self::STRIDE);
            // SAFETY: tail..tail+count are free slots (count <= free), only
            // this producer writes slots.
            unsafe { SpscRing::<T>::SHAPE.write_elem(slot, *item) };
        }
        if count > 0 {
            self.tail = tail.wrapping_add(count);
            // Release: as in `try_push`.
            self.view
                .header
                .tail
                .value
                .store(self.tail, Ordering::Release);
        }
        count as usize
    }

    /// Free slots according to the cached head (0 for a corrupt head).
    fn free_slots(&self, tail: u64) -> u64 {
        (self.view.mask + 1).saturating_sub(tail.wrapping_sub(self.cached_head))
    }

    /// Items in the ring; the consumer may be taking some meanwhile.
    pub fn len(&self) -> usize {
        // Relaxed: a count; nothing is read on the strength of it.
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
            .field("cached_head", &self.cached_head)
            .finish()
    }
}

/// The reading end of an [`SpscRing`].
pub struct SpscConsumer<'r, T: ShmSafe> {
    view: RingView<'r>,
    /// Next position to read; only this consumer stores `header.head`.
    head: u64,
    /// The producer's `tail` as last read; stale means "fewer items than
    /// there really are", never more.
    cached_tail: u64,
    _elem: PhantomData<T>,
}

// SAFETY: as for `SpscProducer`, with the consumer's role.
unsafe impl<T: ShmSafe> Send for SpscConsumer<'_, T> {}

impl<T: ShmSafe> SpscConsumer<'_, T> {
    const STRIDE: usize = SpscRing::<T>::SHAPE.stride;

    /// Takes the oldest item, or `None` when the ring is empty.
    #[inline]
    pub fn try_pop(&mut self) -> Option<T> {
        let head = self.head;
        if head == self.cached_tail {
            // Acquire: pairs with the producer's Release store of tail, so
            // the elements it announces are visible.
            self.cached_tail = self.view.header.tail.value.load(Ordering::Acquire);
            if head == self.cached_tail {
                return None;
            }
        }
        let slot = self.view.slot(head, Self::STRIDE);
        // SAFETY: head != tail, so the producer wrote this slot and announced
        // it (Acquire above), and will not touch it until head moves past it.
        let item = unsafe { SpscRing::<T>::SHAPE.read_elem(slot) };
        self.head = head.wrapping_add(1);
        // Release: pairs with the producer's Acquire load of head, so our
        // read of the slot finishes before the producer may reuse it.
        self.view
            .header
            .head
            .value
            .store(self.head, Ordering::Release);
        Some(item)
    }

    /// Pops into the front of `out` until it is full or the ring is empty;
    /// returns how many were taken. Frees them with one index store.
    pub fn pop_slice(&mut self, out: &mut [T]) -> usize {
        let head = self.head;
        if self.cached_tail.wrapping_sub(head) < out.len() as u64 {
            // Acquire: as in `try_pop`.
            self.cached_tail = self.view.header.tail.value.load(Ordering::Acquire);
        }
        let count = self.view.occupied(head, self.cached_tail).min(out.len()) as u64;
        for (offset, dst) in (0..count).zip(out.iter_mut()) {
            let slot = self.view.slot(head.wrapping_add(offset), Self::STRIDE);
            // SAFETY: head..head+count were announced by the producer
            // (Acquire above) and are ours until head moves past them.
            *dst = unsafe { SpscRing::<T>::SHAPE.read_elem(slot) };
        }
        if count > 0 {
            self.head = head.wrapping_add(count);
            // Release: as in `try_pop`.
            self.view
                .header
                .head
                .value
                .store(self.head, Ordering::Release);
        }
        count as usize
    }

    /// Items in the ring; the producer may be adding some meanwhile.
    pub fn len(&self) -> usize {
        // Relaxed: a count; `try_pop` re-reads tail with Acquire before
        // reading any slot.
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
            .field("cached_tail", &self.cached_tail)
            .finish()
    }
}
