//! What the SPSC and MPMC rings share: the [`RingHeader`] at offset 0 of the
//! region, how slots of an element type are laid out after it, in-place
//! initialisation (magic word published last) and validation on attach, and
//! [`RingError`].
//!
//! A ring's geometry (capacity, element layout) is read from shared memory
//! once, validated, and then kept in the handle: a peer that later scribbles
//! over the header cannot make a handle index outside its slot array.

use core::fmt;
use core::marker::PhantomData;
use core::mem::{align_of, size_of};
use core::ptr::{addr_of, addr_of_mut, NonNull};

use crate::layout::{
    magic, PaddedAtomicU64, RingHeader, RingSlotHeader, CACHE_LINE, RING_SLOTS_OFFSET,
};
use crate::pod::ShmSafe;
use crate::sync::{spin_hint, AtomicU64, Ordering};

/// The sequence number of a slot free for the producer of position `pos`
/// (see [`RingSlotHeader`]).
#[inline(always)]
pub(crate) fn free_for(pos: u64) -> u64 {
    pos.wrapping_mul(2)
}

/// The sequence number of a slot holding the item of position `pos`.
#[inline(always)]
pub(crate) fn full_for(pos: u64) -> u64 {
    free_for(pos).wrapping_add(1)
}

/// Exponential pause after losing a race for a ticket (as crossbeam's queues
/// do): retrying at once keeps the contending cores trading the index's cache
/// line back and forth, which under real parallelism costs more than the
/// pause.
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// At most 2^6 pause instructions per retry.
    const LIMIT: u32 = 6;

    pub(crate) fn new() -> Self {
        Self { step: 0 }
    }

    pub(crate) fn pause(&mut self) {
        for _ in 0..1u32 << self.step {
            spin_hint();
        }
        self.step = (self.step + 1).min(Self::LIMIT);
    }
}

/// Why a ring (or a lane queue of rings) could not be initialised or attached.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RingError {
    /// The region is shorter than the structure needs.
    RegionTooSmall {
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes there are.
        available: usize,
    },
    /// The region pointer is null.
    NullRegion,
    /// The region does not start on the alignment its header needs.
    Misaligned {
        /// The region's address.
        address: usize,
        /// The alignment the header needs.
        required: usize,
    },
    /// The region holds no initialised structure of this family.
    BadMagic {
        /// The word found where the magic belongs.
        found: u32,
    },
    /// The region holds a ring of another kind (`layout::ring_kind`).
    WrongKind {
        /// The kind asked for.
        expected: u32,
        /// The kind in the header.
        found: u32,
    },
    /// Capacities (and lane depths) must be powers of two ...
    CapacityNotPowerOfTwo(u32),
    /// ... and not zero.
    ZeroCapacity,
    /// A lane queue needs at least one lane.
    ZeroLanes,
    /// The ring was initialised for another element type.
    ElementMismatch {
        /// Size of the element type attaching.
        expected_size: u32,
        /// Size the ring was initialised for.
        found_size: u32,
        /// Alignment of the element type attaching.
        expected_align: u32,
        /// Alignment the ring was initialised for.
        found_align: u32,
    },
    /// A header field derived from the others holds the wrong value: the
    /// header is corrupt or was written by an incompatible version.
    HeaderMismatch {
        /// The header field.
        field: &'static str,
        /// The value the other fields imply.
        expected: u64,
        /// The value it holds.
        found: u64,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::RegionTooSmall { needed, available } => {
                write!(
                    f,
                    "region too small: {needed} bytes needed, {available} available"
                )
            }
            Self::NullRegion => f.write_str("region pointer is null"),
            Self::Misaligned { address, required } => {
                write!(
                    f,
                    "region at {address:#x} is not aligned to {required} bytes"
                )
            }
            Self::BadMagic { found } => write!(f, "no initialised header (magic {found:#010x})"),
            Self::WrongKind { expected, found } => {
                write!(f, "ring kind {found}, expected {expected}")
            }
            Self::CapacityNotPowerOfTwo(c) => write!(f, "capacity {c} is not a power of two"),
            Self::ZeroCapacity => f.write_str("capacity is zero"),
            Self::ZeroLanes => f.write_str("a lane queue needs at least one lane"),
            Self::ElementMismatch {
                expected_size,
                found_size,
                expected_align,
                found_align,
            } => write!(
                f,
                "element type mismatch: ring holds size {found_size} align {found_align}, \
                 handle expects size {expected_size} align {expected_align}"
            ),
            Self::HeaderMismatch {
                field,
                expected,
                found,
            } => write!(f, "corrupt header: {field} is {found}, expected {expected}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RingError {}

/// Checks a capacity (or lane depth) read from the caller or from a header.
pub(crate) fn check_capacity(capacity: u32) -> Result<(), RingError> {
    if capacity == 0 {
        Err(RingError::ZeroCapacity)
    } else if !capacity.is_power_of_two() {
        Err(RingError::CapacityNotPowerOfTwo(capacity))
    } else {
        Ok(())
    }
}

/// Checks that `region` is non-null, aligned to `align` and at least `needed`
/// bytes long.
pub(crate) fn check_region(
    region: *mut u8,
    len: usize,
    align: usize,
    needed: usize,
) -> Result<(), RingError> {
    if region.is_null() {
        return Err(RingError::NullRegion);
    }
    let address = region as usize;
    if address % align != 0 {
        return Err(RingError::Misaligned {
            address,
            required: align,
        });
    }
    if len < needed {
        return Err(RingError::RegionTooSmall {
            needed,
            available: len,
        });
    }
    Ok(())
}

/// The magic word of a header, as an atomic.
///
/// `layout` keeps magic words plain integers (written once, read by the C++
/// mirror as such), but the one store that publishes an initialised header
/// must be a Release store, and the attacher's load an Acquire load, so that
/// whoever sees the magic also sees every field and slot written before it.
/// This is the only atomic not taken from `crate::sync`: loom has no way to
/// view a foreign `u32` as one of its atomics; loom models initialise before
/// spawning threads, so nothing they check depends on it.
///
/// # Safety
/// `word` must be valid, 4-aligned, and accessed only atomically (or before
/// publication) for `'a`.
unsafe fn magic_word<'a>(word: *mut u32) -> &'a core::sync::atomic::AtomicU32 {
    // SAFETY: forwarded to the caller; `AtomicU32` has the size and alignment
    // of `u32`.
    unsafe { core::sync::atomic::AtomicU32::from_ptr(word) }
}

/// Publishes an initialised header by storing its magic word last.
///
/// # Safety
/// As [`magic_word`]; every other field must already be written.
pub(crate) unsafe fn publish_magic(word: *mut u32, value: u32) {
    // SAFETY: forwarded to the caller.
    let word = unsafe { magic_word(word) };
    // Release: pairs with the Acquire in `read_magic`, so an attacher that
    // sees the magic sees the header fields and slots written before it.
    word.store(value, Ordering::Release);
}

/// Reads a header's magic word; see [`publish_magic`].
///
/// # Safety
/// As [`magic_word`].
pub(crate) unsafe fn read_magic(word: *mut u32) -> u32 {
    // SAFETY: forwarded to the caller.
    let word = unsafe { magic_word(word) };
    // Acquire: pairs with the Release in `publish_magic`.
    word.load(Ordering::Acquire)
}

/// Under loom, every slot also holds a loom cell standing for the slot's
/// bytes: element writes and reads go through it, so the model checker sees
/// them and reports a slot read that is not ordered after its write (or a
/// slot overwritten while still being read) — it cannot see the raw bytes.
#[cfg(loom)]
type SlotShadow = loom::cell::UnsafeCell<()>;

/// How a ring of one kind lays out slots of one element type: per-slot
/// metadata (MPMC: a [`RingSlotHeader`]), then the element at `elem_offset`,
/// slots `stride` bytes apart starting at [`RING_SLOTS_OFFSET`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct RingShape {
    pub(crate) kind: u32,
    pub(crate) elem_size: u32,
    pub(crate) elem_align: u32,
    pub(crate) elem_offset: usize,
    pub(crate) stride: usize,
    #[cfg(loom)]
    shadow_offset: usize,
}

const fn round_up(n: usize, align: usize) -> usize {
    (n + align - 1) & !(align - 1)
}

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

impl RingShape {
    /// The shape of a `kind` ring of `T`. Evaluate only in a constant: the
    /// assertions then reject, at compile time, element types aligned beyond
    /// a cache line (slots start at a 64-byte offset) or too large for the
    /// header's `u32` fields.
    pub(crate) const fn new<T: ShmSafe>(kind: u32) -> Self {
        Self::with_layout(kind, size_of::<T>(), align_of::<T>())
    }

    /// The shape of a `kind` ring whose elements are `size` bytes aligned to
    /// `align` (as [`new`](Self::new)).
    pub(crate) const fn with_layout(kind: u32, size: usize, align: usize) -> Self {
        assert!(
            align <= CACHE_LINE,
            "ring elements may be aligned to at most 64 bytes"
        );
        // Every slot starts with its sequence number (every kind).
        let elem_offset = round_up(size_of::<RingSlotHeader>(), align);
        let elem_end = elem_offset + size;
        let slot_align = max(align, align_of::<RingSlotHeader>());
        #[cfg(loom)]
        let (shadow_offset, elem_end, slot_align) = {
            let at = round_up(elem_end, align_of::<SlotShadow>());
            (
                at,
                at + size_of::<SlotShadow>(),
                max(slot_align, align_of::<SlotShadow>()),
            )
        };
        let stride = round_up(elem_end, slot_align);
        assert!(
            stride <= u32::MAX as usize,
            "ring elements must be smaller than 4 GiB"
        );
        Self {
            kind,
            elem_size: size as u32,
            elem_align: align as u32,
            elem_offset,
            stride,
            #[cfg(loom)]
            shadow_offset,
        }
    }

    /// Bytes a ring of `capacity` slots needs (saturating: a capacity no
    /// region can hold yields `usize::MAX`).
    pub(crate) fn required_bytes(&self, capacity: u32) -> usize {
        (capacity as usize)
            .saturating_mul(self.stride)
            .saturating_add(RING_SLOTS_OFFSET)
    }

    /// Validates the arguments, writes a fresh header (empty ring) and every
    /// slot's sequence number (free for the producer of position `index`),
    /// then publishes the magic word.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`,
    /// and nobody else may access it during this call.
    pub(crate) unsafe fn init<'r>(
        &self,
        region: *mut u8,
        len: usize,
        capacity: u32,
    ) -> Result<RingView<'r>, RingError> {
        self.check_fits(region, len, capacity)?;
        let header = region.cast::<RingHeader>();
        // SAFETY: the region is valid, aligned and large enough (checked
        // above); fields are written through raw pointers, the atomics with
        // `new` (loom's cannot come from zeroed bytes). The stride fits in a
        // u32 (asserted in `new`).
        unsafe {
            addr_of_mut!((*header).kind).write(self.kind);
            addr_of_mut!((*header).capacity).write(capacity);
            addr_of_mut!((*header).elem_size).write(self.elem_size);
            addr_of_mut!((*header).elem_align).write(self.elem_align);
            addr_of_mut!((*header).slot_stride).write(self.stride as u32);
            PaddedAtomicU64::init_at(addr_of_mut!((*header).head), 0);
            PaddedAtomicU64::init_at(addr_of_mut!((*header).tail), 0);
        }
        // SAFETY: RING_SLOTS_OFFSET + capacity * stride <= len (checked).
        let slots = unsafe { region.add(RING_SLOTS_OFFSET) };
        for index in 0..u64::from(capacity) {
            // SAFETY: index < capacity, so the slot lies inside the region.
            let slot = unsafe { slots.add(index as usize * self.stride) };
            #[cfg(loom)]
            // SAFETY: the shadow lies inside the slot, suitably aligned.
            unsafe {
                slot.add(self.shadow_offset)
                    .cast::<SlotShadow>()
                    .write(SlotShadow::new(()));
            }
            // SAFETY: every slot starts with its 8-aligned sequence number.
            unsafe {
                addr_of_mut!((*slot.cast::<RingSlotHeader>()).seq)
                    .write(AtomicU64::new(free_for(index)));
            }
        }
        // SAFETY: every field and slot is written; magic is at offset 0 of
        // the 64-aligned header.
        unsafe { publish_magic(addr_of_mut!((*header).magic), magic::RING) };
        // SAFETY: initialised and aligned just above; valid for 'r per the
        // caller.
        Ok(unsafe { RingView::new(region, capacity) })
    }

    /// Validates the header in `region` against this shape and returns a view
    /// sized from the validated capacity.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`,
    /// and must not be re-initialised while the view is in use.
    pub(crate) unsafe fn attach<'r>(
        &self,
        region: *mut u8,
        len: usize,
    ) -> Result<RingView<'r>, RingError> {
        check_region(region, len, align_of::<RingHeader>(), RING_SLOTS_OFFSET)?;
        let header = region.cast::<RingHeader>();
        // SAFETY: the header lies in the region (checked above).
        let found = unsafe { read_magic(addr_of_mut!((*header).magic)) };
        if found != magic::RING {
            return Err(RingError::BadMagic { found });
        }
        // SAFETY: the magic was read with Acquire, so these plain fields,
        // written once before it, are initialised and no longer written.
        let (kind, capacity, elem_size, elem_align, stride) = unsafe {
            (
                addr_of!((*header).kind).read(),
                addr_of!((*header).capacity).read(),
                addr_of!((*header).elem_size).read(),
                addr_of!((*header).elem_align).read(),
                addr_of!((*header).slot_stride).read(),
            )
        };
        if kind != self.kind {
            return Err(RingError::WrongKind {
                expected: self.kind,
                found: kind,
            });
        }
        if (elem_size, elem_align) != (self.elem_size, self.elem_align) {
            return Err(RingError::ElementMismatch {
                expected_size: self.elem_size,
                found_size: elem_size,
                expected_align: self.elem_align,
                found_align: elem_align,
            });
        }
        if stride as usize != self.stride {
            return Err(RingError::HeaderMismatch {
                field: "slot_stride",
                expected: self.stride as u64,
                found: u64::from(stride),
            });
        }
        self.check_fits(region, len, capacity)?;
        // SAFETY: initialised (magic seen), aligned, and `capacity` slots fit
        // in the region (checked above).
        Ok(unsafe { RingView::new(region, capacity) })
    }

    /// Whether a ring of `capacity` slots of this shape fits in `len` bytes at `region`, which
    /// must be aligned for its header.
    fn check_fits(&self, region: *mut u8, len: usize, capacity: u32) -> Result<(), RingError> {
        check_capacity(capacity)?;
        check_region(
            region,
            len,
            align_of::<RingHeader>(),
            self.required_bytes(capacity),
        )
    }

    /// Writes `value` as the element of `slot`.
    ///
    /// # Safety
    /// `slot` must be a slot of a ring of this shape for `T`, owned by the
    /// caller for writing (its protocol says nobody else reads or writes it).
    #[inline(always)]
    pub(crate) unsafe fn write_elem<T: ShmSafe>(&self, slot: *mut u8, value: T) {
        // SAFETY: the element lies inside the slot at an offset aligned for
        // `T` (slots are stride-aligned from a 64-aligned start).
        let elem = unsafe { slot.add(self.elem_offset).cast::<T>() };
        #[cfg(not(loom))]
        // SAFETY: see above; the caller owns the slot.
        unsafe {
            elem.write(value)
        };
        #[cfg(loom)]
        // SAFETY: as above; the shadow was initialised with the slot.
        unsafe {
            (*slot.add(self.shadow_offset).cast::<SlotShadow>()).with_mut(|_| elem.write(value))
        };
    }

    /// Reads the element of `slot`.
    ///
    /// # Safety
    /// `slot` must be a slot of a ring of this shape for `T` whose element
    /// the caller owns for reading (written before, ordered by the protocol).
    #[inline(always)]
    pub(crate) unsafe fn read_elem<T: ShmSafe>(&self, slot: *mut u8) -> T {
        // SAFETY: as in `write_elem`.
        let elem = unsafe { slot.add(self.elem_offset).cast::<T>() };
        let value;
        #[cfg(not(loom))]
        {
            // SAFETY: see above; `T: ShmSafe` makes any bytes a valid value.
            value = unsafe { elem.read() };
        }
        #[cfg(loom)]
        {
            // SAFETY: as above; the shadow was initialised with the slot.
            value = unsafe {
                (*slot.add(self.shadow_offset).cast::<SlotShadow>()).with(|_| elem.read())
            };
        }
        value
    }
}

/// A validated ring in a region: its header and slot array. The mask is a
/// local copy of the validated capacity, never re-read from shared memory.
#[derive(Clone, Copy)]
pub(crate) struct RingView<'r> {
    pub(crate) header: &'r RingHeader,
    slots: NonNull<u8>,
    pub(crate) mask: u64,
    _region: PhantomData<&'r [u8]>,
}

impl<'r> RingView<'r> {
    /// # Safety
    /// `region` must hold an initialised, 64-aligned ring header of
    /// `capacity` (a power of two) slots, followed by those slots, valid for
    /// `'r`.
    pub(crate) unsafe fn new(region: *mut u8, capacity: u32) -> Self {
        Self {
            // SAFETY: initialised and aligned, per the caller.
            header: unsafe { &*region.cast::<RingHeader>() },
            // SAFETY: region is non-null and the slots follow the header.
            slots: unsafe { NonNull::new_unchecked(region.add(RING_SLOTS_OFFSET)) },
            mask: u64::from(capacity) - 1,
            _region: PhantomData,
        }
    }

    /// The number of slots.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.mask as usize + 1
    }

    /// The slot that position (index or ticket) `pos` maps to, and its
    /// sequence number.
    #[inline(always)]
    pub(crate) fn slot(&self, pos: u64, stride: usize) -> (&'r AtomicU64, *mut u8) {
        let index = (pos & self.mask) as usize;
        // SAFETY: index <= mask < capacity, and `capacity` slots of `stride`
        // bytes lie in the region (validated when the view was made).
        let slot = unsafe { self.slots.as_ptr().add(index * stride) };
        // SAFETY: every slot starts with its sequence number, initialised
        // before the ring was published, valid for 'r.
        let seq = unsafe { &(*slot.cast::<RingSlotHeader>()).seq };
        (seq, slot)
    }

    /// `tail - head` as a count of items: clamped to the capacity, and 0
    /// when `tail` is behind `head` (only a corrupt peer can cause that), so
    /// that no count read from shared memory exceeds the slot array.
    #[inline]
    pub(crate) fn occupied(&self, head: u64, tail: u64) -> usize {
        let len = tail.wrapping_sub(head);
        if (len as i64) < 0 {
            0
        } else {
            len.min(self.mask + 1) as usize
        }
    }

    /// Items in the ring from a snapshot of both indices: stale by the time
    /// it is returned, so only an estimate.
    pub(crate) fn approximate_len(&self) -> usize {
        // Relaxed: an estimate; nothing is read on the strength of it. Head
        // is read first, so tail (read later, never behind head) gives a
        // non-negative difference, which `occupied` clamps if the ring moved
        // by more than its capacity in between.
        let head = self.header.head.value.load(Ordering::Relaxed);
        let tail = self.header.tail.value.load(Ordering::Relaxed);
        self.occupied(head, tail)
    }
}
