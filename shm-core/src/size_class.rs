//! The freeing allocator: power-of-two size classes with lock-free free lists,
//! placed in a shared region ([`SizeClassHeader`] at offset 0).

use core::fmt;
use core::marker::PhantomData;
use core::mem::size_of;
use core::ptr::{addr_of, addr_of_mut};

use crate::alloc_error::AllocError;
use crate::layout::{
    magic, AllocatorId, BackendKind, BlockHeader, FreeList, FullPtr, MemoryBackend,
    PaddedAtomicU64, ShmPtr, SizeClassHeader, MIN_BLOCK, SIZE_CLASSES,
};
use crate::ptr::PtrError;
use crate::region::{
    address, align_down, align_up, check_region, check_request, load_magic, publish_magic,
};
use crate::sync::{fence, yield_now, AtomicU32, AtomicU64, Ordering};

pub mod cache;
pub use cache::SizeClassCache;

/// Offset of the heap from the region base. Blocks are aligned relative to it,
/// so it bounds the alignment the allocator can give.
pub const HEAP_ALIGN: u64 = 4096;
/// The largest alignment [`SizeClassAllocator::allocate`] accepts.
pub const MAX_ALIGN: u64 = HEAP_ALIGN;
/// The largest block, header included.
pub const MAX_BLOCK: u64 = MIN_BLOCK << (SIZE_CLASSES - 1);

/// Bytes a block header occupies before user data (16 in real builds).
const HEADER: u64 = (size_of::<BlockHeader>() as u64).next_multiple_of(MIN_DATA_ALIGN);
/// Alignment every allocation gets without asking.
const MIN_DATA_ALIGN: u64 = 16;
// The smallest block must hold a header (gap blocks are as small as MIN_BLOCK).
const _: () = assert!(HEADER <= MIN_BLOCK);

/// `BlockHeader::state` of a block start whose allocation's header is inside
/// the block (an over-aligned allocation); neither `BLOCK_ALLOCATED` nor
/// `BLOCK_FREE`, so a free aimed at the block start is refused.
const BLOCK_HOLDS_ALIGNED: u32 = 0;

/// Free-list head packing: offsets are stored divided by 16 in the low bits.
const OFFSET_SHIFT: u32 = 4;
const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const TAG_MASK: u64 = (1 << (64 - OFFSET_BITS)) - 1;
/// Offsets must fit the head's 40 bits after division by 16 (16 TiB).
const MAX_HEAP_END: u64 = 1 << (OFFSET_BITS + OFFSET_SHIFT);

/// Bytes of a class-`class` block, header included.
pub const fn block_size(class: usize) -> u64 {
    MIN_BLOCK << class
}

/// The largest block (at most [`MAX_BLOCK`]) that lies naturally aligned in
/// `[start, end)`, offsets from the heap start; 0 if not even the smallest.
#[cfg(feature = "alloc")]
fn largest_aligned_block(start: u64, end: u64) -> u64 {
    (0..SIZE_CLASSES)
        .rev()
        .map(block_size)
        .find(|&size| {
            start
                .checked_next_multiple_of(size)
                .and_then(|at| at.checked_add(size))
                .is_some_and(|block_end| block_end <= end)
        })
        .unwrap_or(0)
}

/// Offset of user data from its block's start for a given alignment.
const fn data_offset(align: u64) -> u64 {
    if align <= MIN_DATA_ALIGN {
        HEADER
    } else {
        // Room for the block's header and the allocation's own one.
        (2 * HEADER).next_multiple_of(align)
    }
}

fn pack_head(off: u64, tag: u64) -> u64 {
    ((tag & TAG_MASK) << OFFSET_BITS) | (off >> OFFSET_SHIFT)
}

fn head_offset(head: u64) -> u64 {
    (head & OFFSET_MASK) << OFFSET_SHIFT
}

fn head_tag(head: u64) -> u64 {
    head >> OFFSET_BITS
}

/// Blocks linked through their `next` words from `first` to `last`: a run
/// taken off a free list by one pop, or a chain a merge builds.
#[derive(Clone, Copy, Debug)]
struct Chain {
    first: u64,
    last: u64,
    count: u64,
}

impl Chain {
    const EMPTY: Chain = Chain {
        first: 0,
        last: 0,
        count: 0,
    };
}

/// How many times a merge checks a list's readers before it gives up on
/// them (one that died in the middle of a pop never leaves); between checks
/// it yields, so a reader descheduled on a busy machine gets to finish.
#[cfg(not(loom))]
const DRAIN_PATIENCE: u32 = 1 << 14;
#[cfg(loom)]
const DRAIN_PATIENCE: u32 = 4;

/// A pop or walk of a class's free list in progress, counted in the list's
/// `readers` from [`enter`](Self::enter) to drop, so that a merge can wait
/// until no one still reads the headers of blocks it took (see
/// [`SizeClassAllocator::merge_below`]).
struct ListReader<'a> {
    readers: &'a AtomicU64,
}

impl<'a> ListReader<'a> {
    /// Counts a reader of `list`; the caller loads the list's head after
    /// this returns.
    #[inline]
    fn enter(list: &'a FreeList) -> Self {
        // Relaxed increment, then a SeqCst fence before the caller's load of
        // the head: with the SeqCst fence between a merge's take of the list
        // and its load of `readers` (`readers_drained`), this is the
        // store-buffering pattern, so either the merge sees this increment,
        // or this reader's load of the head sees the take (and never the
        // taken blocks).
        list.readers.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        ListReader {
            readers: &list.readers,
        }
    }
}

impl Drop for ListReader<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release pairs with the Acquire load of `readers_drained`: every
        // read this reader made of block headers happens before a merge that
        // sees the count it leaves goes on to give those bytes out.
        self.readers.fetch_sub(1, Ordering::Release);
    }
}

/// How a free marks the block it has checked as free.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Claim {
    /// A compare-and-swap of the block's state from allocated to free: of
    /// two frees of one pointer that race, in any processes, exactly one
    /// wins and the other is a `DoubleFree`.
    Arbitrated,
    /// A store of the free state, after the load that found the block
    /// allocated: a second free that happens after the first is still a
    /// `DoubleFree`, two that race can both pass; one locked instruction
    /// less on x86 ([`SizeClassCache`]'s frees: see its "Racing frees").
    Store,
}

/// A snapshot of a size-class allocator, for debugging and tests. Exact only
/// while no one allocates or frees concurrently.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SizeClassStats {
    /// Bytes of the heap.
    pub heap_bytes: u64,
    /// Bytes the bump cursor has carved into blocks so far.
    pub carved_bytes: u64,
    /// Blocks on each class's free list.
    pub free_blocks: [u64; SIZE_CLASSES],
}

impl SizeClassStats {
    /// Bytes (headers included) sitting on free lists.
    pub fn free_bytes(&self) -> u64 {
        (0..SIZE_CLASSES)
            .map(|class| self.free_blocks[class] * block_size(class))
            .sum()
    }

    /// Bytes of the heap the bump cursor has not carved yet.
    pub fn uncarved_bytes(&self) -> u64 {
        self.heap_bytes - self.carved_bytes
    }

    /// Bytes of the largest block on a free list (header included); 0 when
    /// the lists are empty.
    pub fn largest_free_block(&self) -> u64 {
        (0..SIZE_CLASSES)
            .rev()
            .find(|&class| self.free_blocks[class] > 0)
            .map_or(0, block_size)
    }

    /// Bytes (headers included) that requests of `size` bytes aligned to
    /// `align` can take as things stand: the blocks on the lists of the
    /// request's class and larger ones (split on the way), and the whole
    /// blocks of its class that fit the uncarved rest of the heap. Free
    /// blocks of smaller classes only count once merged into larger ones,
    /// which a request does when it would otherwise fail: a heap whose
    /// [`free_bytes`](Self::free_bytes) plus
    /// [`uncarved_bytes`](Self::uncarved_bytes) cover a request that just
    /// failed, while this is 0, is fragmented (live blocks sit between the
    /// free ones), not full.
    pub fn usable_bytes(&self, size: u64, align: u64) -> Result<u64, AllocError> {
        let class = SizeClassAllocator::class_for(size, align)?;
        let block = block_size(class);
        let listed: u64 = (class..SIZE_CLASSES)
            .map(|larger| self.free_blocks[larger] * block_size(larger))
            .sum();
        // The heap start is aligned for every class, so the cursor's
        // offset from it tells where the next block of the class starts.
        let next_start = self.carved_bytes.next_multiple_of(block);
        let carvable = self.heap_bytes.saturating_sub(next_start) / block * block;
        Ok(listed + carvable)
    }
}

/// A handle on a size-class allocator living in a shared region. Handles are
/// cheap to copy; all copies, in every process, share the same heap.
///
/// Each [`allocate`](Self::allocate) and [`free`](Self::free) is a
/// compare-and-swap on its class's list head, which every user shares; a
/// thread that allocates and frees often should go through a
/// [`SizeClassCache`] instead. The uncached path is the one to use where
/// every free block must be on a list at once (a leak check through
/// [`stats`](Self::stats)) or for occasional allocations.
///
/// # Design
///
/// * The heap starts [`HEAP_ALIGN`] bytes into the region. Class `c` blocks are
///   `MIN_BLOCK << c` bytes, header included, and *naturally aligned*: a block
///   of `s` bytes starts at a multiple of `s` from the heap start. Blocks are
///   carved from the bump cursor; the padding that aligning a carve skips is
///   itself cut into naturally aligned smaller blocks and put on their free
///   lists, so no byte is lost. A request whose list is empty and which the
///   cursor can no longer carve splits a larger free block, else merges free
///   buddies (see [Splitting and merging](#splitting-and-merging)).
/// * User data follows a [`BlockHeader`], so it is 16-byte aligned. For an
///   alignment `a > 16` (up to [`MAX_ALIGN`]) the data starts `a` bytes (at
///   least two headers) into a block of at least `2a` bytes, hence aligned; a
///   second header right before the data lets `free` find the block, whose own
///   header is then marked as holding such an allocation.
/// * Free lists are Treiber stacks whose heads pack a 24-bit ABA tag above
///   a 40-bit (offset / 16); offset 0 (the region header) means empty. Every
///   successful push or pop (and a merge's take of a whole list) bumps the
///   tag, so a pop that read a stale `next` fails its compare-and-swap unless
///   2^24 list operations happened in between.
/// * Everything in shared memory is an offset, so any process that maps the
///   region (at any address aligned as in [`SizeClassAllocator::allocate`])
///   can allocate and free.
/// * A thread that allocates and frees often goes through a
///   [`SizeClassCache`]: per-class stacks of free blocks
///   in its own memory, refilled from and flushed to the shared lists a run
///   at a time, each run with one compare-and-swap of the list head (a pop
///   that walks several links, a push of a whole chain).
///
/// # Splitting and merging
///
/// A heap that once held many blocks of one size must serve another size
/// once they are freed: a client heap that held large shared buffers then
/// serves small futures, or the reverse. So a request fails only when no
/// free memory, merged as far as it goes, holds a naturally aligned block
/// of its class (tried in this order):
///
/// * its class's list (the fast path);
/// * the bump cursor;
/// * a split: the smallest larger free block is popped, its upper halves go
///   on the lists of the classes below, and the lowest piece is the request's.
///   Blocks are naturally aligned powers of two, so each half is a naturally
///   aligned block of the class below: every list still holds whole blocks
///   of its class, linked through header words that are always atomics;
/// * a merge: the lists of the smaller classes are taken whole, sorted by
///   offset and paired with their buddies from the smallest class up; the
///   unpaired blocks go back.
///
/// Splitting never puts a header where a pop could be reading (a block's
/// interior is on no list). Merging does: the upper buddy's header becomes
/// the inside of the merged block, which its next owner writes, while a pop
/// that loaded that block as its list's head before the merge took the list
/// may not have read its `next` word yet. A tagged Treiber stack makes such a
/// stale read harmless to the list (the pop's compare-and-swap fails), but
/// it would race with the owner's plain writes. So every pop (and every walk
/// of [`SizeClassAllocator::stats`]) counts itself in its list's
/// [`readers`](crate::layout::FreeList::readers) from before its load of the
/// head to its last read of a link, and a merge gives nothing out until it
/// has seen every list it took without readers: a fence on each side makes
/// sure that a pop the merge does not see cannot see the taken blocks. A
/// reader that never leaves (its process died mid-pop) makes merges of the
/// classes above give up after a while: the request then fails as it would
/// have without merging, and the heap is otherwise unaffected.
///
/// What it costs: a pop (the uncached allocation's, a cache's refill) pays
/// an increment, a SeqCst fence and a decrement on its list's cache line,
/// which it holds anyway; a cached allocation that hits its bin pays
/// nothing. A split costs a pop and a push per class it halves through. A
/// merge sorts every free block of the classes below the request (O(n log n)
/// over their links) and is taken only when the request would otherwise
/// fail.
///
/// Blocks in a [`SizeClassCache`] are on no list, so a merge does not see
/// them: a heap whose free memory sits in caches can still fail a request
/// (flush them, as for any other request). Concurrent merges each merge the
/// blocks they took, so they need no lock; while a merge holds blocks,
/// others cannot allocate them, as with blocks held in a cache.
#[derive(Clone, Copy)]
pub struct SizeClassAllocator<'r> {
    header: &'r SizeClassHeader,
    /// The region's base in this process (where the header is).
    base: *mut u8,
    _region: PhantomData<&'r [u8]>,
}

// SAFETY: the handle reads header fields that are immutable once published and
// changes shared state only through atomics (bump cursor, list heads, block
// states and links) or in blocks it has exclusively claimed through them.
// `base` is used for address arithmetic only; nothing is tied to a thread.
unsafe impl Send for SizeClassAllocator<'_> {}
// SAFETY: as above; every method takes `&self` and is safe to run concurrently.
unsafe impl Sync for SizeClassAllocator<'_> {}

impl<'r> SizeClassAllocator<'r> {
    /// Places a new allocator in `len` bytes at `region`: writes the header in
    /// place and publishes it. The heap is `[HEAP_ALIGN, len)` (capped at
    /// 16 TiB, what free-list heads can address).
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`,
    /// not in use by anything else while it is initialised, and accessed from
    /// now on only through allocator handles and the allocations they return.
    pub unsafe fn init_in(
        region: *mut u8,
        len: usize,
        id: AllocatorId,
    ) -> Result<Self, AllocError> {
        check_region(region, len, size_of::<SizeClassHeader>())?;
        if id.is_null() {
            return Err(AllocError::NullAllocatorId);
        }
        let heap_begin = (size_of::<SizeClassHeader>() as u64).next_multiple_of(HEAP_ALIGN);
        let heap_end = align_down((len as u64).min(MAX_HEAP_END), MIN_BLOCK);
        if heap_end < heap_begin + MIN_BLOCK {
            return Err(AllocError::RegionTooSmall {
                needed: heap_begin + MIN_BLOCK,
                available: len as u64,
            });
        }
        let header = region.cast::<SizeClassHeader>();
        // SAFETY: `check_region` verified `region` is non-null, 64-byte aligned
        // (the header's alignment) and a header long; the caller guarantees
        // exclusive access. Fields are written one by one, atomics through
        // `new`, and the magic last with Release (`publish_magic`).
        unsafe {
            addr_of_mut!((*header).id).write(id);
            addr_of_mut!((*header).heap_begin).write(heap_begin);
            addr_of_mut!((*header).heap_end).write(heap_end);
            PaddedAtomicU64::init_at(addr_of_mut!((*header).bump), heap_begin);
            let lists = addr_of_mut!((*header).free_lists).cast::<FreeList>();
            for class in 0..SIZE_CLASSES {
                FreeList::init_at(lists.add(class), pack_head(0, 0));
            }
            publish_magic(addr_of_mut!((*header).magic), magic::SIZE_CLASS);
            Self::attach(region, len)
        }
    }

    /// Attaches to an allocator initialised (in this or another process) in
    /// the region mapped at `region`.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`
    /// and, if it holds an allocator, accessed only through allocator handles
    /// and the allocations they return.
    pub unsafe fn attach(region: *mut u8, len: usize) -> Result<Self, AllocError> {
        check_region(region, len, size_of::<SizeClassHeader>())?;
        let header = region.cast::<SizeClassHeader>();
        // SAFETY: the header lies in the region and is aligned (checked above);
        // the magic is only ever accessed atomically.
        let found = unsafe { load_magic(addr_of_mut!((*header).magic)) };
        if found != magic::SIZE_CLASS {
            return Err(AllocError::BadMagic { found });
        }
        // SAFETY: the magic's Acquire load made the published header visible;
        // its plain fields are never written again.
        let header = unsafe { &*header };
        if header.heap_end > len as u64 {
            return Err(AllocError::RegionTooSmall {
                needed: header.heap_end,
                available: len as u64,
            });
        }
        if header.id.is_null()
            || header.heap_begin < size_of::<SizeClassHeader>() as u64
            || header.heap_begin % HEAP_ALIGN != 0
            || header.heap_begin > header.heap_end
            || header.heap_end > MAX_HEAP_END
        {
            return Err(AllocError::CorruptHeader);
        }
        Ok(SizeClassAllocator {
            header,
            base: region,
            _region: PhantomData,
        })
    }

    /// The class that serves `size` bytes aligned to `align`.
    // Inlinable across crates: every allocation asks, and a caller's
    // constant size and alignment fold to a constant class (left as a call,
    // it cost up to a third of a cached allocate+free pair).
    #[inline]
    pub fn class_for(size: u64, align: u64) -> Result<usize, AllocError> {
        check_request(size, align)?;
        if align > MAX_ALIGN {
            return Err(AllocError::BadAlignment(align));
        }
        let pad = data_offset(align);
        let too_large = AllocError::TooLarge {
            requested: size,
            max: MAX_BLOCK - pad,
        };
        let block = size
            .checked_add(pad)
            .and_then(u64::checked_next_power_of_two)
            .ok_or(too_large)?
            .max(MIN_BLOCK);
        if block > MAX_BLOCK {
            return Err(too_large);
        }
        Ok((block / MIN_BLOCK).trailing_zeros() as usize)
    }

    /// Allocates `size` bytes aligned to `align` (a power of two up to
    /// [`MAX_ALIGN`]), from the class's free list if it has a block, else by
    /// carving a new block, else by splitting a larger free block, else by
    /// merging free buddies (see [Splitting and merging](Self#splitting-and-merging)): it fails
    /// only when no free memory of the heap, merged as far as it can be,
    /// holds a block of the request's class. Offsets are aligned relative to the region base,
    /// so the address is aligned wherever the mapping's base is aligned at
    /// least as far; an alignment beyond this mapping's base alignment is
    /// refused with `BadAlignment`.
    pub fn allocate(&self, size: u64, align: u64) -> Result<ShmPtr<u8>, AllocError> {
        let (class, pad) = self.request(size, align)?;
        let block = match self.pop_run(class, 1)? {
            Some(run) => run.first,
            None => self.take_fresh(class, size)?,
        };
        // SAFETY: the pop, carve, split or merge made the block ours alone.
        Ok(unsafe { self.hand_out(block, class, pad) })
    }

    /// Checks a request against this mapping: its class and the offset of
    /// the data in the block.
    #[inline]
    fn request(&self, size: u64, align: u64) -> Result<(usize, u64), AllocError> {
        let class = Self::class_for(size, align)?;
        if align > 1 << address(self.base).trailing_zeros() {
            return Err(AllocError::BadAlignment(align));
        }
        Ok((class, data_offset(align)))
    }

    /// Marks a free block of `class` allocated and returns the pointer to its
    /// data, `pad` bytes in.
    ///
    /// # Safety
    /// `block` is a class-`class` block whose header marks it free, taken off
    /// a free list or carved by the caller: exclusively the caller's.
    #[inline]
    unsafe fn hand_out(&self, block: u64, class: usize, pad: u64) -> ShmPtr<u8> {
        // The block's header existed before we got it: a pop that loaded this
        // block as a list head just before we took it may still read its
        // `next`, so the header is updated field by field, atomically, never
        // rewritten whole.
        // SAFETY: `block` is a block of the heap, exclusively ours.
        let block_state = unsafe { self.state(block) };
        if pad == HEADER {
            // Relaxed: whoever frees the block received the pointer through
            // its own synchronisation, which orders this store before it.
            block_state.store(magic::BLOCK_ALLOCATED, Ordering::Relaxed);
        } else {
            block_state.store(BLOCK_HOLDS_ALIGNED, Ordering::Relaxed);
            // SAFETY: the allocation's header lies inside our block past the
            // block's own header, where only the block's owner ever writes.
            unsafe { self.write_header(block + pad - HEADER, class, magic::BLOCK_ALLOCATED, 0) };
        }
        ShmPtr::new(self.header.id, block + pad)
    }

    /// [`allocate`](Self::allocate), also returning the local address.
    pub fn allocate_full(&self, size: u64, align: u64) -> Result<FullPtr<u8>, AllocError> {
        let shm = self.allocate(size, align)?;
        Ok(FullPtr {
            ptr: self.base.wrapping_add(shm.off as usize),
            shm,
        })
    }

    /// Returns an allocation to its class's free list.
    ///
    /// Checks that the pointer is this allocator's, inside the heap, the data
    /// start of an allocated block (its header's state and class agree with
    /// the block geometry), and claims the block by a compare-and-swap of its
    /// state, so a second free of the same pointer is a `DoubleFree`, even
    /// one racing the first from another process (unlike a
    /// [`SizeClassCache`]'s free: see its "Racing frees"). The
    /// checks read the header before the pointer: they catch stale and wild
    /// pointers, but a wild pointer into another live allocation reads bytes
    /// its owner may be writing, so they are a guard, not a proof.
    pub fn free(&self, ptr: ShmPtr<u8>) -> Result<(), AllocError> {
        let (class, block) = self.claim(ptr, Claim::Arbitrated)?;
        self.push_chain(class, block, block);
        Ok(())
    }

    /// The checks and the claim of a free: on success the block (its class
    /// and start) is marked free, as `how` says, and is the caller's, to put
    /// on a list or in a cache.
    #[inline]
    fn claim(&self, ptr: ShmPtr<u8>, how: Claim) -> Result<(usize, u64), AllocError> {
        if ptr.alloc_id != self.header.id {
            return Err(AllocError::WrongAllocator {
                expected: self.header.id,
                found: ptr.alloc_id,
            });
        }
        let data = ptr.off;
        let not_owned = AllocError::NotOwned { off: data };
        let heap_begin = self.header.heap_begin;
        if data % MIN_DATA_ALIGN != 0 || data < heap_begin + HEADER || data >= self.header.heap_end
        {
            return Err(not_owned);
        }
        let header_off = data - HEADER;
        // SAFETY: `header_off` is 16-aligned and inside the heap.
        let state = unsafe { self.state(header_off) };
        // Relaxed: with `Claim::Arbitrated` an early check (the CAS below
        // decides); with `Claim::Store` the check, which reads FREE if a free
        // of the block happened before this one (coherence). The block's
        // contents are handed on by the push's Release either way.
        match state.load(Ordering::Relaxed) {
            magic::BLOCK_ALLOCATED => {}
            magic::BLOCK_FREE => return Err(AllocError::DoubleFree { off: data }),
            _ => return Err(not_owned),
        }
        // SAFETY: as above; the class is written before the header is handed
        // out and never changes while the block is allocated.
        let class = unsafe { self.class(header_off) };
        if class >= SIZE_CLASSES {
            return Err(not_owned);
        }
        let size = block_size(class);
        let block = heap_begin + align_down(header_off - heap_begin, size);
        // Relaxed: the block was carved before the pointer reached us, so the
        // cursor we read is at least past it if the pointer is genuine.
        let carved_end = self.header.bump.value.load(Ordering::Relaxed);
        if block.checked_add(size).is_none_or(|end| end > carved_end) {
            return Err(not_owned);
        }
        let aligned = data - block != HEADER;
        if aligned {
            // SAFETY: `block` is a block start inside the carved heap.
            let (block_state, block_class) = unsafe { (self.state(block), self.class(block)) };
            if data - block < 2 * HEADER
                || block_state.load(Ordering::Relaxed) != BLOCK_HOLDS_ALIGNED
                || block_class != class
            {
                return Err(not_owned);
            }
        }
        match how {
            // Relaxed: atomicity alone makes one of two racing frees win.
            Claim::Arbitrated => {
                state
                    .compare_exchange(
                        magic::BLOCK_ALLOCATED,
                        magic::BLOCK_FREE,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .map_err(|_| AllocError::DoubleFree { off: data })?;
            }
            // Relaxed: as the load above.
            Claim::Store => state.store(magic::BLOCK_FREE, Ordering::Relaxed),
        }
        if aligned {
            // SAFETY: we own the block until it is pushed.
            unsafe { self.state(block) }.store(magic::BLOCK_FREE, Ordering::Relaxed);
        }
        Ok((class, block))
    }

    /// Counts carved bytes and free blocks by walking every free list.
    /// Meant for debugging and tests: exact only while the allocator is
    /// quiescent; a list that does not end within the heap's worth of blocks
    /// is reported as corrupt.
    pub fn stats(&self) -> Result<SizeClassStats, AllocError> {
        let heap_bytes = self.header.heap_end - self.header.heap_begin;
        let mut free_blocks = [0; SIZE_CLASSES];
        for (class, count) in free_blocks.iter_mut().enumerate() {
            let list = &self.header.free_lists[class];
            // A reader, so that no merge gives out a block whose header the
            // walk may still read.
            let _reader = ListReader::enter(list);
            // Acquire pairs with the pushes' Release: the links of every
            // block on the list are visible.
            let mut off = head_offset(list.head.load(Ordering::Acquire));
            while off != 0 {
                if !self.is_block(class, off) || *count >= heap_bytes / block_size(class) {
                    return Err(AllocError::CorruptFreeList { class, off });
                }
                *count += 1;
                // SAFETY: `off` is a block of this class inside the heap.
                off = unsafe { self.next(off) }.load(Ordering::Relaxed);
            }
        }
        // Relaxed: a statistic.
        let bump = self.header.bump.value.load(Ordering::Relaxed);
        Ok(SizeClassStats {
            heap_bytes,
            carved_bytes: bump.saturating_sub(self.header.heap_begin),
            free_blocks,
        })
    }

    /// Bytes (header included) of the largest block a request could get
    /// now: the largest naturally aligned block of the heap that is all
    /// free, in blocks on the lists (which a request merges and splits as
    /// needed) or never carved; 0 when there is none. A request of `size`
    /// bytes aligned to `align` fits when its class's block is no larger.
    /// Walks the lists as [`stats`](Self::stats) does, so it is a snapshot
    /// only while no one allocates or frees; blocks in caches are not free.
    #[cfg(feature = "alloc")]
    pub fn largest_servable_block(&self) -> Result<u64, AllocError> {
        let heap_begin = self.header.heap_begin;
        let heap_bytes = self.header.heap_end - heap_begin;
        // Free blocks as (start, end) from the heap start.
        let mut free = alloc::vec::Vec::new();
        for class in 0..SIZE_CLASSES {
            let list = &self.header.free_lists[class];
            // A reader, as in `stats`.
            let _reader = ListReader::enter(list);
            let size = block_size(class);
            let mut count = 0;
            // Acquire: as in `stats`.
            let mut off = head_offset(list.head.load(Ordering::Acquire));
            while off != 0 {
                if !self.is_block(class, off) || count >= heap_bytes / size {
                    return Err(AllocError::CorruptFreeList { class, off });
                }
                count += 1;
                free.push((off - heap_begin, off - heap_begin + size));
                // SAFETY: `off` is a block of this class inside the heap.
                off = unsafe { self.next(off) }.load(Ordering::Relaxed);
            }
        }
        free.sort_unstable();
        // Relaxed: a snapshot.
        let carved = self
            .header
            .bump
            .value
            .load(Ordering::Relaxed)
            .saturating_sub(heap_begin);
        let mut largest = largest_aligned_block(carved, heap_bytes);
        let mut ranges = free.into_iter().peekable();
        while let Some((start, mut end)) = ranges.next() {
            while let Some(&(next_start, next_end)) = ranges.peek() {
                if next_start != end {
                    break;
                }
                end = next_end;
                ranges.next();
            }
            largest = largest.max(largest_aligned_block(start, end));
        }
        Ok(largest)
    }

    /// The allocator id every pointer from this allocator carries.
    pub fn id(&self) -> AllocatorId {
        self.header.id
    }

    /// A descriptor of this allocator's region in this process.
    pub fn backend(&self, kind: BackendKind) -> MemoryBackend {
        MemoryBackend::new(self.header.id, kind, self.base, self.header.heap_end)
    }

    /// Resolves a pointer of this allocator in this process.
    pub fn to_full<T>(&self, ptr: ShmPtr<T>) -> Result<FullPtr<T>, PtrError> {
        ptr.to_full(&self.backend(BackendKind::HostShm))
    }

    /// Whether `off` is a whole class-`class` block inside the heap.
    fn is_block(&self, class: usize, off: u64) -> bool {
        let size = block_size(class);
        let heap_begin = self.header.heap_begin;
        off >= heap_begin
            && (off - heap_begin) & (size - 1) == 0
            && off
                .checked_add(size)
                .is_some_and(|end| end <= self.header.heap_end)
    }

    /// Takes up to `want` (at least 1) blocks off the class's free list with
    /// one compare-and-swap; `None` when the list is empty. With `want` 1
    /// this is a plain Treiber pop; more takes what as many pops in a row
    /// would have taken. The run's blocks stay linked through their `next`
    /// words from `first` to `last`; `last`'s link is stale.
    fn pop_run(&self, class: usize, want: u32) -> Result<Option<Chain>, AllocError> {
        let list = &self.header.free_lists[class];
        // Counted from before the head is loaded until the last link is read.
        let _reader = ListReader::enter(list);
        let head = &list.head;
        // Acquire (load and both CAS outcomes) pairs with the Release of the
        // push that put the first block on the list. The blocks under it were
        // pushed earlier, and every later change of the head is an RMW, which
        // continues their pushes' release sequences: so every link we walk
        // and the previous owners' writes to the blocks happen before we read
        // or reuse them. A head written by a pop still synchronises.
        let mut current = head.load(Ordering::Acquire);
        loop {
            let first = head_offset(current);
            if first == 0 {
                return Ok(None);
            }
            if !self.is_block(class, first) {
                return Err(AllocError::CorruptFreeList { class, off: first });
            }
            // The blocks may have been popped and reused since we loaded the
            // head: `next` is only ever written atomically (so reading it is
            // not a race) and then the tag has moved, so the CAS below fails
            // and no stale link is ever installed. Relaxed: the Acquire above
            // already ordered the pushes that wrote the links before us. A
            // link that is not a block of the class (only possible in a stale
            // walk, or a corrupt list) is never followed: the run ends there,
            // and if the CAS succeeds it was the list's real link, installed
            // as pops in a row would have, for the next pop to report.
            let (mut last, mut count) = (first, 1u64);
            // SAFETY: `first` is a block of this class inside the heap.
            let mut after = unsafe { self.next(first) }.load(Ordering::Relaxed);
            while count < u64::from(want) && after != 0 && self.is_block(class, after) {
                last = after;
                count += 1;
                // SAFETY: checked just above to be a block of the heap.
                after = unsafe { self.next(last) }.load(Ordering::Relaxed);
            }
            let replacement = pack_head(after, head_tag(current) + 1);
            match head.compare_exchange_weak(
                current,
                replacement,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(Some(Chain { first, last, count })),
                Err(actual) => current = actual,
            }
        }
    }

    /// Puts the chain `first -> ... -> last` (linked through `next`, every
    /// block of `class`, marked free and owned by the caller) on the class's
    /// free list with one compare-and-swap. With `first == last` this is a
    /// plain Treiber push; a longer chain is what as many pushes could have
    /// built, and it bumps the tag once, which keeps the ABA argument: every
    /// successful change of the head moves the tag.
    fn push_chain(&self, class: usize, first: u64, last: u64) {
        let head = &self.header.free_lists[class].head;
        // Relaxed: the value only seeds the CAS, which checks it.
        let mut current = head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `last` is a block of this class that we own.
            unsafe { self.next(last) }.store(head_offset(current), Ordering::Relaxed);
            // Release pairs with the Acquire in `pop_run` and `stats`: the
            // links of the chain, the one just stored, and everything done
            // with the blocks before they were freed happen before the next
            // owner sees them.
            match head.compare_exchange_weak(
                current,
                pack_head(first, head_tag(current) + 1),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// A free block of `class` for a request whose list was empty: carved
    /// from the bump cursor, else split from the smallest free block of a
    /// larger class, else merged from free buddies of the smaller classes;
    /// `requested` is the user's size, for the error. The block's header
    /// marks it free and of `class`; it is the caller's alone.
    ///
    /// It fails (`Exhausted`) only when none of the three finds the memory:
    /// then no free block on a list, merged with its free buddies as far as
    /// they go, holds a block of `class`, and neither does the uncarved rest
    /// of the heap. Blocks held in caches, or taken off the lists by another
    /// thread's merge at that moment, are not seen.
    #[cold]
    fn take_fresh(&self, class: usize, requested: u64) -> Result<u64, AllocError> {
        match self.carve(class, 1, requested) {
            Err(AllocError::Exhausted { .. }) => {}
            carved => return carved,
        }
        if let Some(block) = self.split_larger(class)? {
            return Ok(block);
        }
        if let Some(block) = self.merge_below(class)? {
            return Ok(block);
        }
        // Relaxed: a figure for the error.
        let bump = self.header.bump.value.load(Ordering::Relaxed);
        Err(AllocError::Exhausted {
            requested,
            available: self.header.heap_end.saturating_sub(bump),
        })
    }

    /// Pops a block of the smallest larger class that has one and splits it
    /// down to `class`: at each halving the upper half goes on its class's
    /// list and the lower half is split further; the last lower half is
    /// returned, marked free and of `class`, the caller's.
    ///
    /// Blocks are naturally aligned powers of two, so both halves of a block
    /// are naturally aligned blocks of the class below, and each starts where
    /// a header of that class may be: the free lists' invariants (a list's
    /// blocks are whole blocks of its class, their `next` words atomics) hold
    /// for the halves as they held for the whole. The upper halves' headers
    /// are written into the popped block's interior, which no one else
    /// reads: no list holds a block there (a merge that absorbed one waited
    /// for its readers, `merge_below`), so no pop or walk can be on its way
    /// to it.
    fn split_larger(&self, class: usize) -> Result<Option<u64>, AllocError> {
        for larger in class + 1..SIZE_CLASSES {
            // Relaxed: a hint that skips empty lists; the pop decides.
            if head_offset(self.header.free_lists[larger].head.load(Ordering::Relaxed)) == 0 {
                continue;
            }
            let Some(popped) = self.pop_run(larger, 1)? else {
                continue;
            };
            let block = popped.first;
            for half in (class..larger).rev() {
                let upper = block + block_size(half);
                // SAFETY: `upper` is inside the block we popped, 16-aligned,
                // and no one reads a header there (see above).
                unsafe { self.write_header(upper, half, magic::BLOCK_FREE, 0) };
                // The push's Release publishes the header to the next owner.
                self.push_chain(half, upper, upper);
            }
            // SAFETY: the block is ours since the pop.
            unsafe { self.set_class(block, class) };
            return Ok(Some(block));
        }
        Ok(None)
    }

    /// Merges the free blocks of every class below `class` with their free
    /// buddies, as far as they go, and returns one merged block of `class`
    /// (the others go on the lists), or `None` when no two buddies make one.
    ///
    /// 1. It takes the lists of the classes below `class` whole, each with
    ///    one compare-and-swap of the head to empty (no other thread can
    ///    then pop those blocks).
    /// 2. It waits until no reader is left on those lists: a pop that loaded
    ///    a head before the take may still read the `next` word of a block
    ///    it took, and once two buddies are merged the upper one's header is
    ///    inside the merged block, which a user will write. The readers'
    ///    count (`FreeList::readers`) and the SeqCst fences on both sides
    ///    make sure every such pop is counted (`ListReader::enter`); one
    ///    that does not finish within `DRAIN_PATIENCE` checks (a reader
    ///    that died in a pop never does) makes the merge give the blocks
    ///    back unmerged and return `None`.
    /// 3. From the smallest class up, it sorts the taken blocks by offset
    ///    (with the blocks merged from the class below), pairs each lower
    ///    buddy with the upper one right after it into a block of the next
    ///    class, and pushes the blocks left unpaired back on their list as
    ///    one chain.
    ///
    /// Only the blocks this merge took are merged, so concurrent merges
    /// work on disjoint sets and need no lock; while a merge holds blocks,
    /// others cannot allocate them (as with blocks held in a cache).
    #[cold]
    fn merge_below(&self, class: usize) -> Result<Option<u64>, AllocError> {
        let mut taken = [Chain::EMPTY; SIZE_CLASSES];
        for below in 0..class {
            match self.take_list(below) {
                Ok(chain) => taken[below] = chain,
                Err(e) => {
                    self.give_back(&taken[..below]);
                    return Err(e);
                }
            }
        }
        if taken.iter().all(|chain| chain.count == 0) {
            return Ok(None);
        }
        if !self.readers_drained(class) {
            self.give_back(&taken[..class]);
            return Ok(None);
        }
        let mut carried = Chain::EMPTY;
        for (below, chain) in taken.iter().enumerate().take(class) {
            let sorted = self.sort_chain(*chain);
            let all = self.merge_sorted(sorted.first, carried.first);
            let (unpaired, merged) = self.pair_buddies(below, all.first);
            if unpaired.count > 0 {
                self.push_chain(below, unpaired.first, unpaired.last);
            }
            carried = merged;
        }
        if carried.count == 0 {
            return Ok(None);
        }
        if carried.count > 1 {
            // Relaxed: a link of our own chain.
            // SAFETY: `carried.first` is a block of the heap that we hold.
            let second = unsafe { self.next(carried.first) }.load(Ordering::Relaxed);
            self.push_chain(class, second, carried.last);
        }
        Ok(Some(carried.first))
    }

    /// Pushes the chains a merge took, unmerged, back on their lists (the
    /// chain at index `c` is of class `c`).
    fn give_back(&self, taken: &[Chain]) {
        for (class, chain) in taken.iter().enumerate() {
            if chain.count > 0 {
                self.push_chain(class, chain.first, chain.last);
            }
        }
    }

    /// Takes the class's whole free list with one compare-and-swap (the
    /// head to empty, the tag moved) and checks it: every link a block of the
    /// class, no longer than the heap holds.
    fn take_list(&self, class: usize) -> Result<Chain, AllocError> {
        let head = &self.header.free_lists[class].head;
        // Relaxed: the value only seeds the CAS, which checks it.
        let mut current = head.load(Ordering::Relaxed);
        let first = loop {
            let first = head_offset(current);
            if first == 0 {
                return Ok(Chain::EMPTY);
            }
            // Acquire pairs with the Release of the pushes (the release
            // sequence of the head, as in `pop_run`): every link of the list
            // and its blocks' earlier owners' writes happen before our use.
            match head.compare_exchange_weak(
                current,
                pack_head(0, head_tag(current) + 1),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break first,
                Err(actual) => current = actual,
            }
        };
        let most = (self.header.heap_end - self.header.heap_begin) / block_size(class);
        let mut chain = Chain {
            first,
            last: first,
            count: 0,
        };
        let mut off = first;
        while off != 0 {
            if !self.is_block(class, off) || chain.count == most {
                return Err(AllocError::CorruptFreeList { class, off });
            }
            chain.last = off;
            chain.count += 1;
            // Relaxed: ordered by the Acquire above.
            // SAFETY: `off` is a block of this class inside the heap.
            off = unsafe { self.next(off) }.load(Ordering::Relaxed);
        }
        Ok(chain)
    }

    /// Whether every list below `class` was seen without readers after the
    /// lists were taken (`merge_below`, step 2).
    fn readers_drained(&self, class: usize) -> bool {
        // SeqCst: pairs with the fence in `ListReader::enter` (the
        // store-buffering pattern there): a reader that loaded a head from
        // before our take incremented `readers` before its fence, and this
        // fence follows our take, so the loads below see the increment.
        fence(Ordering::SeqCst);
        for list in &self.header.free_lists[..class] {
            let mut checks = 0;
            // Acquire pairs with the readers' Release decrements: what they
            // read happens before the merged blocks are given out.
            while list.readers.load(Ordering::Acquire) != 0 {
                checks += 1;
                if checks == DRAIN_PATIENCE {
                    return false;
                }
                yield_now();
            }
        }
        true
    }

    /// Sorts the chain (ours, its last link 0) by offset, relinking it: a
    /// bottom-up merge sort, which needs no memory beyond the links and no
    /// recursion (the kernels' mirror runs it on a GPU thread).
    fn sort_chain(&self, chain: Chain) -> Chain {
        let mut sorted = chain;
        let mut width = 1;
        while width < chain.count {
            let mut rest = sorted.first;
            sorted = Chain::EMPTY;
            while rest != 0 {
                let a = rest;
                let b = self.cut_after(a, width);
                rest = self.cut_after(b, width);
                let merged = self.merge_sorted(a, b);
                if sorted.count == 0 {
                    sorted = merged;
                } else {
                    // Relaxed: links of our own chains.
                    // SAFETY: a block of our chain.
                    unsafe { self.next(sorted.last) }.store(merged.first, Ordering::Relaxed);
                    sorted.last = merged.last;
                    sorted.count += merged.count;
                }
            }
            width *= 2;
        }
        sorted
    }

    /// Cuts the chain (ours) at `first` after `count` blocks; returns the
    /// block after the cut, 0 if the chain is not longer (or `first` is 0).
    fn cut_after(&self, first: u64, count: u64) -> u64 {
        if first == 0 {
            return 0;
        }
        let mut last = first;
        for _ in 1..count {
            // Relaxed: links of our own chain, here and below.
            // SAFETY: a block of our chain.
            let after = unsafe { self.next(last) }.load(Ordering::Relaxed);
            if after == 0 {
                return 0;
            }
            last = after;
        }
        // SAFETY: as above.
        let link = unsafe { self.next(last) };
        let after = link.load(Ordering::Relaxed);
        link.store(0, Ordering::Relaxed);
        after
    }

    /// Merges two sorted chains of ours (last links 0) into one.
    fn merge_sorted(&self, mut a: u64, mut b: u64) -> Chain {
        let mut merged = Chain::EMPTY;
        while a != 0 || b != 0 {
            let take_a = b == 0 || (a != 0 && a < b);
            let block = if take_a { a } else { b };
            // Relaxed: links of our own chains.
            // SAFETY: a block of one of our chains.
            let after = unsafe { self.next(block) }.load(Ordering::Relaxed);
            if take_a {
                a = after;
            } else {
                b = after;
            }
            self.append(&mut merged, block);
        }
        merged
    }

    /// Walks the sorted chain at `first` of class-`class` blocks (ours) and
    /// merges each lower buddy with its upper buddy when that follows it:
    /// returns the blocks left unpaired and the merged blocks of the next
    /// class, both sorted.
    fn pair_buddies(&self, class: usize, first: u64) -> (Chain, Chain) {
        let size = block_size(class);
        let (mut unpaired, mut merged) = (Chain::EMPTY, Chain::EMPTY);
        let mut block = first;
        while block != 0 {
            // Relaxed: links of our own chain.
            // SAFETY: a block of our chain, here and below.
            let after = unsafe { self.next(block) }.load(Ordering::Relaxed);
            let lower = (block - self.header.heap_begin) & size == 0;
            if lower && after == block + size {
                // SAFETY: as above.
                let beyond = unsafe { self.next(after) }.load(Ordering::Relaxed);
                // SAFETY: both buddies are ours; the upper one's header is
                // now inside the merged block, which no reader will read
                // (`merge_below` drained them).
                unsafe { self.set_class(block, class + 1) };
                self.append(&mut merged, block);
                block = beyond;
            } else {
                self.append(&mut unpaired, block);
                block = after;
            }
        }
        (unpaired, merged)
    }

    /// Appends `block` (ours) to the chain, its link set to 0.
    fn append(&self, chain: &mut Chain, block: u64) {
        // Relaxed: links of our own chain, published by a push's Release.
        // SAFETY: `block` and the chain's blocks are blocks of the heap that
        // we hold.
        unsafe {
            if chain.count == 0 {
                chain.first = block;
            } else {
                self.next(chain.last).store(block, Ordering::Relaxed);
            }
            self.next(block).store(0, Ordering::Relaxed);
        }
        chain.last = block;
        chain.count += 1;
    }

    /// Carves `count` consecutive new class-`class` blocks from the bump
    /// cursor with one compare-and-swap and returns the first; `requested`
    /// is the user's size, for the error. The blocks get headers marking
    /// them free, each linked to the next (the last to none), ready to be
    /// handed out or kept as a run. The skipped alignment padding goes to the
    /// smaller classes' free lists.
    fn carve(&self, class: usize, count: u32, requested: u64) -> Result<u64, AllocError> {
        let size = block_size(class);
        let heap_begin = self.header.heap_begin;
        let heap_end = self.header.heap_end;
        let bump = &self.header.bump.value;
        // Relaxed throughout: the cursor only hands out disjoint ranges, which
        // needs the CAS's atomicity and no ordering; blocks reach other
        // threads through free-list pushes (Release) or the caller.
        let mut current = bump.load(Ordering::Relaxed);
        loop {
            let carved = current
                .checked_sub(heap_begin)
                .filter(|carved| carved % MIN_BLOCK == 0)
                .ok_or(AllocError::CorruptHeader)?;
            let exhausted = AllocError::Exhausted {
                requested,
                available: heap_end.saturating_sub(current),
            };
            // The first block is aligned for the class, so each next one is.
            let start = align_up(carved, size)
                .and_then(|aligned| aligned.checked_add(heap_begin))
                .ok_or(exhausted)?;
            let end = size
                .checked_mul(u64::from(count))
                .and_then(|bytes| start.checked_add(bytes))
                .ok_or(exhausted)?;
            if end > heap_end {
                return Err(exhausted);
            }
            match bump.compare_exchange_weak(current, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.recycle_padding(current, start);
                    let mut at = start;
                    while at < end {
                        let next = if at + size < end { at + size } else { 0 };
                        // SAFETY: `[start, end)` was just carved for us
                        // alone, and no one has ever read a header there.
                        unsafe { self.write_header(at, class, magic::BLOCK_FREE, next) };
                        at += size;
                    }
                    return Ok(start);
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Cuts `[from, to)`, padding skipped to align a carve, into naturally
    /// aligned blocks (each as large as its start's alignment allows; sizes
    /// grow towards `to`, which is aligned to more than all of them) and frees
    /// them.
    fn recycle_padding(&self, from: u64, to: u64) {
        let mut at = from;
        while at < to {
            // `at > heap_begin` here: the heap start is aligned for every
            // class, so a carve from it skips nothing.
            let size = 1 << (at - self.header.heap_begin).trailing_zeros();
            let class = (size / MIN_BLOCK).trailing_zeros() as usize;
            // SAFETY: `[at, at + size)` was just carved for us alone, and no
            // one has ever read a header there.
            unsafe { self.write_header(at, class, magic::BLOCK_FREE, 0) };
            self.push_chain(class, at, at);
            at += size;
        }
    }

    fn header_ptr(&self, off: u64) -> *mut BlockHeader {
        self.base.wrapping_add(off as usize).cast()
    }

    /// Writes a whole block header at `off`, its link set to `next`.
    ///
    /// # Safety
    /// `off` is 16-aligned with a header's worth of heap bytes, owned by the
    /// caller, and no one else may access a header there concurrently.
    unsafe fn write_header(&self, off: u64, class: usize, state: u32, next: u64) {
        // SAFETY: per the contract; atomics are created with `new`.
        unsafe {
            self.header_ptr(off).write(BlockHeader {
                state: AtomicU32::new(state),
                class: class as u32,
                next: AtomicU64::new(next),
            });
        }
    }

    /// The state word of the header at `off`.
    ///
    /// # Safety
    /// `off` is 16-aligned and a header's worth of bytes fits in the heap.
    unsafe fn state(&self, off: u64) -> &AtomicU32 {
        // SAFETY: per the contract; the field is an atomic, shared by design.
        unsafe { &*addr_of!((*self.header_ptr(off)).state) }
    }

    /// The free-list link of the header at `off`.
    ///
    /// # Safety
    /// As for [`state`](Self::state).
    unsafe fn next(&self, off: u64) -> &AtomicU64 {
        // SAFETY: per the contract; the field is an atomic, shared by design.
        unsafe { &*addr_of!((*self.header_ptr(off)).next) }
    }

    /// The class recorded in the header at `off`.
    ///
    /// # Safety
    /// As for [`state`](Self::state).
    unsafe fn class(&self, off: u64) -> usize {
        // SAFETY: per the contract.
        unsafe { addr_of!((*self.header_ptr(off)).class).read() as usize }
    }

    /// Records `class` in the header at `off`, a block that is the caller's
    /// (split or merged): only its owner, or a free of a wild pointer (the
    /// checks of `claim` are a guard, not a proof), reads the field.
    ///
    /// # Safety
    /// As for [`state`](Self::state), and the block is the caller's.
    unsafe fn set_class(&self, off: u64, class: usize) {
        // SAFETY: per the contract.
        unsafe { addr_of_mut!((*self.header_ptr(off)).class).write(class as u32) }
    }
}

impl fmt::Debug for SizeClassAllocator<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SizeClassAllocator")
            .field("id", &self.header.id)
            .field("base", &self.base)
            .field("heap_begin", &self.header.heap_begin)
            .field("heap_end", &self.header.heap_end)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const ID: AllocatorId = AllocatorId::new(4, 0);
    const LEN: usize = 64 * 1024;

    #[repr(C, align(4096))]
    struct Region([u8; LEN]);

    fn region() -> Box<Region> {
        Box::new(Region([0; LEN]))
    }

    #[test]
    fn head_packing_round_trips() {
        let head = pack_head(0x1234_5670, 0xab_cdef);
        assert_eq!(head_offset(head), 0x1234_5670);
        assert_eq!(head_tag(head), 0xab_cdef);
        // The tag wraps instead of spilling into the offset.
        let wrapped = pack_head(16, TAG_MASK + 1);
        assert_eq!(head_tag(wrapped), 0);
        assert_eq!(head_offset(wrapped), 16);
        assert_eq!(
            head_offset(pack_head(MAX_HEAP_END - 16, 0)),
            MAX_HEAP_END - 16
        );
    }

    #[test]
    fn classes() {
        type A<'a> = SizeClassAllocator<'a>;
        assert_eq!(A::class_for(1, 1), Ok(0));
        assert_eq!(A::class_for(16, 16), Ok(0));
        assert_eq!(A::class_for(17, 8), Ok(1));
        assert_eq!(A::class_for(1, 32), Ok(1));
        assert_eq!(A::class_for(33, 32), Ok(2));
        assert_eq!(A::class_for(1, 4096), Ok(class_of_block(8192)));
        assert_eq!(A::class_for(MAX_BLOCK - 16, 8), Ok(SIZE_CLASSES - 1));
        assert_eq!(
            A::class_for(MAX_BLOCK, 8),
            Err(AllocError::TooLarge {
                requested: MAX_BLOCK,
                max: MAX_BLOCK - 16
            })
        );
        assert_eq!(
            A::class_for(u64::MAX, 8),
            Err(AllocError::TooLarge {
                requested: u64::MAX,
                max: MAX_BLOCK - 16
            })
        );
        assert_eq!(A::class_for(8, 8192), Err(AllocError::BadAlignment(8192)));
        assert_eq!(A::class_for(8, 12), Err(AllocError::BadAlignment(12)));
        assert_eq!(A::class_for(0, 8), Err(AllocError::ZeroSize));
    }

    fn class_of_block(block: u64) -> usize {
        (block / MIN_BLOCK).trailing_zeros() as usize
    }

    #[test]
    fn free_reuses_and_validates() {
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), LEN, ID).unwrap() };
        let a = alloc.allocate(20, 8).unwrap();
        assert_eq!(a.off, HEAP_ALIGN + 16);
        let carved = alloc.stats().unwrap().carved_bytes;
        assert_eq!(alloc.free(a), Ok(()));
        assert_eq!(alloc.free(a), Err(AllocError::DoubleFree { off: a.off }));
        let b = alloc.allocate(30, 16).unwrap();
        assert_eq!(b, a, "the freed block of the same class comes back");
        assert_eq!(alloc.stats().unwrap().carved_bytes, carved);

        let other = AllocatorId::new(5, 0);
        assert_eq!(
            alloc.free(ShmPtr::new(other, b.off)),
            Err(AllocError::WrongAllocator {
                expected: ID,
                found: other
            })
        );
        for off in [
            0,
            16,
            HEAP_ALIGN,
            b.off + 16,
            b.off + 1,
            LEN as u64,
            u64::MAX,
        ] {
            assert_eq!(
                alloc.free(ShmPtr::new(ID, off)),
                Err(AllocError::NotOwned { off }),
                "offset {off}"
            );
        }
        assert!(alloc.free(ShmPtr::null()).is_err());
        alloc.free(b).unwrap();
    }

    #[test]
    fn aligned_allocations_free_and_reject_the_block_start() {
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), LEN, ID).unwrap() };
        let p = alloc.allocate_full(100, 256).unwrap();
        assert_eq!(p.ptr.addr() % 256, 0);
        let block = p.shm.off - 256;
        assert_eq!(
            alloc.free(ShmPtr::new(ID, block + HEADER)),
            Err(AllocError::NotOwned {
                off: block + HEADER
            })
        );
        alloc.free(p.shm).unwrap();
        assert_eq!(
            alloc.free(p.shm),
            Err(AllocError::DoubleFree { off: p.shm.off })
        );
        // The block (class of 512 bytes) serves an ordinary request next.
        let q = alloc.allocate(400, 8).unwrap();
        assert_eq!(q.off, block + HEADER);
    }

    #[test]
    fn carving_padding_is_recycled_and_exhaustion_is_reported() {
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), LEN, ID).unwrap() };
        alloc.allocate(1, 1).unwrap(); // a 32-byte block at the heap start
        let big = alloc.allocate(1000, 8).unwrap(); // a 1 KiB block at +1 KiB
        assert_eq!(big.off, HEAP_ALIGN + 1024 + HEADER);
        let stats = alloc.stats().unwrap();
        // 32 + 64 + 128 + 256 + 512 bytes of padding went to free lists.
        assert_eq!(stats.free_blocks[..5], [1, 1, 1, 1, 1]);
        assert_eq!(stats.free_bytes() + 32 + 1024, stats.carved_bytes);

        let heap = LEN as u64 - HEAP_ALIGN;
        assert_eq!(stats.heap_bytes, heap);
        assert_eq!(
            alloc.allocate(heap, 8),
            Err(AllocError::Exhausted {
                requested: heap,
                available: heap - 2048
            })
        );
    }

    /// Allocates `size`-byte blocks until the heap is exhausted.
    fn fill(alloc: &SizeClassAllocator<'_>, size: u64) -> std::vec::Vec<ShmPtr<u8>> {
        let mut ptrs = std::vec::Vec::new();
        loop {
            match alloc.allocate(size, 8) {
                Ok(ptr) => ptrs.push(ptr),
                Err(AllocError::Exhausted { .. }) => return ptrs,
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
    }

    #[test]
    fn a_request_splits_a_larger_free_block_once_the_heap_is_carved() {
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), LEN, ID).unwrap() };
        let big = fill(&alloc, 4000);
        let heap = LEN as u64 - HEAP_ALIGN;
        assert_eq!(big.len() as u64, heap / 4096);
        alloc.free(big[0]).unwrap();
        let stats = alloc.stats().unwrap();
        assert_eq!(
            (stats.carved_bytes, stats.largest_free_block()),
            (heap, 4096)
        );
        assert_eq!(stats.usable_bytes(8, 8), Ok(4096));
        assert_eq!(stats.usable_bytes(5000, 8), Ok(0));
        assert_eq!(alloc.largest_servable_block(), Ok(4096));

        // The free 4 KiB block serves a small request: its lower 32 bytes,
        // the halves above go to the lists of the classes below.
        let small = alloc.allocate(8, 8).unwrap();
        assert_eq!(small.off, big[0].off);
        let stats = alloc.stats().unwrap();
        assert_eq!(stats.free_blocks[..8], [1, 1, 1, 1, 1, 1, 1, 0]);
        assert_eq!(stats.free_bytes(), 4096 - 32);
        // The whole block serves small requests, to the last byte.
        let mut smalls = std::vec![small];
        smalls.extend(fill(&alloc, 8));
        assert_eq!(smalls.len(), 4096 / 32);
        assert_eq!(alloc.stats().unwrap().free_bytes(), 0);
        for &p in &smalls {
            alloc.free(p).unwrap();
        }
        // Freed, the small blocks merge back into the 4 KiB one.
        assert_eq!(alloc.allocate(4000, 8).unwrap(), big[0]);
        let stats = alloc.stats().unwrap();
        assert_eq!(stats.free_bytes(), 0);
    }

    #[test]
    fn a_request_merges_free_buddies_when_nothing_larger_is_free() {
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), LEN, ID).unwrap() };
        let small = fill(&alloc, 8);
        let heap = LEN as u64 - HEAP_ALIGN;
        assert_eq!(small.len() as u64, heap / 32);
        // One live block in the first 32 KiB keeps it from merging whole.
        for &p in &small[1..] {
            alloc.free(p).unwrap();
        }
        let stats = alloc.stats().unwrap();
        assert_eq!(stats.free_bytes(), heap - 32);
        assert_eq!(stats.usable_bytes(30_000, 8), Ok(0));
        // Unmerged yet, the free blocks serve a 16 KiB block once merged.
        assert_eq!(stats.largest_free_block(), 32);
        assert_eq!(alloc.largest_servable_block(), Ok(16 << 10));
        assert_eq!(
            alloc.allocate(30_000, 8),
            Err(AllocError::Exhausted {
                requested: 30_000,
                available: 0
            }),
            "fragmented: a live block in every free 32 KiB"
        );
        // The failed request merged what it could: the halves beside the
        // live block (32 bytes .. 16 KiB) and the upper 28 KiB (16 + 8 +
        // 4 KiB), nothing lost.
        let stats = alloc.stats().unwrap();
        assert_eq!(stats.free_bytes(), heap - 32);
        assert_eq!(stats.largest_free_block(), 16 << 10);
        assert_eq!(stats.free_blocks[..10], [1, 1, 1, 1, 1, 1, 1, 2, 2, 2]);
        // The lowest block of a class comes first after a merge.
        let p = alloc.allocate(16_000, 8).unwrap();
        assert_eq!(p.off, HEAP_ALIGN + (16 << 10) + HEADER);
        alloc.free(p).unwrap();
        alloc.free(small[0]).unwrap();
        assert_eq!(alloc.largest_servable_block(), Ok(32 << 10));
        // Everything free: the first 32 KiB merge whole.
        assert_eq!(alloc.allocate(30_000, 8).unwrap().off, HEAP_ALIGN + HEADER);
    }

    #[test]
    fn init_attach_errors() {
        let mut r = region();
        let base = r.0.as_mut_ptr();
        // SAFETY: all calls stay inside `r`, which outlives the handles.
        unsafe {
            assert_eq!(
                SizeClassAllocator::attach(base, LEN).unwrap_err(),
                AllocError::BadMagic { found: 0 }
            );
            assert_eq!(
                SizeClassAllocator::init_in(base, 4096, ID).unwrap_err(),
                AllocError::RegionTooSmall {
                    needed: 4096 + 32,
                    available: 4096
                }
            );
            assert_eq!(
                SizeClassAllocator::init_in(base.add(32), LEN - 32, ID).unwrap_err(),
                AllocError::BadRegionBase {
                    addr: address(base) + 32
                }
            );
            // An arena's header is refused by its magic.
            crate::arena::ArenaAllocator::init_in(base, LEN, ID).unwrap();
            assert_eq!(
                SizeClassAllocator::attach(base, LEN).unwrap_err(),
                AllocError::BadMagic {
                    found: magic::ARENA
                }
            );
            SizeClassAllocator::init_in(base, LEN, ID).unwrap();
            assert!(SizeClassAllocator::attach(base, LEN).is_ok());
            assert_eq!(
                SizeClassAllocator::attach(base, LEN / 2).unwrap_err(),
                AllocError::RegionTooSmall {
                    needed: LEN as u64,
                    available: LEN as u64 / 2
                }
            );
        }
    }

    #[test]
    fn corrupt_free_list_is_reported() {
        let mut r = region();
        // SAFETY: `r` outlives the handle and is used only through it.
        let alloc = unsafe { SizeClassAllocator::init_in(r.0.as_mut_ptr(), LEN, ID).unwrap() };
        // A head pointing at an offset that is not a class-3 block.
        alloc.header.free_lists[3]
            .head
            .store(pack_head(HEAP_ALIGN + 16, 0), Ordering::Relaxed);
        let err = AllocError::CorruptFreeList {
            class: 3,
            off: HEAP_ALIGN + 16,
        };
        assert_eq!(alloc.allocate(200, 8), Err(err));
        assert_eq!(alloc.stats(), Err(err));
    }
}
