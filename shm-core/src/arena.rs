//! A lock-free bump arena placed in a shared region ([`ArenaHeader`] at offset
//! 0), and the per-thread sub-arenas ([`ThreadArena`]) carved from it.
//!
//! The arena never frees single allocations: memory comes back all at once
//! with [`ArenaAllocator::reset`]. Its cursor only moves through a
//! compare-and-swap that installs the end of a reservation that was checked to
//! fit, so a failed allocation never moves it and concurrent allocations can
//! never overlap. A [`ThreadArena`] takes one such reservation and then
//! allocates from it with plain arithmetic, which is what GPU threads use on
//! the hot path.

use core::fmt;
use core::marker::PhantomData;
use core::mem::size_of;
use core::ptr::addr_of_mut;

use crate::alloc_error::AllocError;
use crate::layout::{
    magic, AllocatorId, ArenaHeader, BackendKind, FullPtr, MemoryBackend, PaddedAtomicU64, ShmPtr,
    ThreadArena, CACHE_LINE,
};
use crate::ptr::PtrError;
use crate::region::{address, align_up, check_region, check_request, load_magic, publish_magic};
use crate::sync::Ordering;

/// A handle on a bump arena living in a shared region. Handles are cheap to
/// copy; every copy (and every handle attached in another process) allocates
/// from the same cursor.
#[derive(Clone, Copy)]
pub struct ArenaAllocator<'r> {
    header: &'r ArenaHeader,
    /// The region's base in this process (where the header is).
    base: *mut u8,
    _region: PhantomData<&'r [u8]>,
}

// SAFETY: the handle reads header fields that are immutable once the header is
// published, and changes shared state only through the atomic cursor. `base`
// is used for address arithmetic and to build pointers the caller dereferences
// under its own `unsafe`. Nothing in the handle is tied to a thread.
unsafe impl Send for ArenaAllocator<'_> {}
// SAFETY: as above; every method takes `&self` and is safe to run concurrently.
unsafe impl Sync for ArenaAllocator<'_> {}

impl<'r> ArenaAllocator<'r> {
    /// Places a new arena in `len` bytes at `region`: writes the header in
    /// place, with the heap starting right after it, and publishes it.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`,
    /// not in use by any other handle or structure while it is initialised,
    /// and accessed from now on only through allocator handles and the
    /// allocations they return.
    pub unsafe fn init_in(
        region: *mut u8,
        len: usize,
        id: AllocatorId,
    ) -> Result<Self, AllocError> {
        let heap_begin = size_of::<ArenaHeader>();
        check_region(region, len, heap_begin)?;
        if id.is_null() {
            return Err(AllocError::NullAllocatorId);
        }
        let header = region.cast::<ArenaHeader>();
        // SAFETY: `check_region` verified `region` is non-null, 64-byte
        // aligned (the header's alignment) and at least a header long; the
        // caller guarantees exclusive access. Fields are written one by one,
        // atomics through `new`, and the magic last through `publish_magic`
        // (Release), so an attacher seeing the magic sees the whole header.
        unsafe {
            addr_of_mut!((*header).id).write(id);
            addr_of_mut!((*header).heap_begin).write(heap_begin as u64);
            addr_of_mut!((*header).heap_end).write(len as u64);
            PaddedAtomicU64::init_at(addr_of_mut!((*header).cursor), heap_begin as u64);
            publish_magic(addr_of_mut!((*header).magic), magic::ARENA);
            Self::attach(region, len)
        }
    }

    /// Attaches to an arena initialised (by [`init_in`](Self::init_in), in
    /// this or another process) in the region mapped at `region`.
    ///
    /// # Safety
    /// `region` must be valid for reads and writes of `len` bytes for `'r`
    /// and, if it holds an arena, accessed only through allocator handles and
    /// the allocations they return.
    pub unsafe fn attach(region: *mut u8, len: usize) -> Result<Self, AllocError> {
        check_region(region, len, size_of::<ArenaHeader>())?;
        let header = region.cast::<ArenaHeader>();
        // SAFETY: `check_region` verified the header lies in the region and is
        // aligned; the magic is only ever accessed atomically.
        let found = unsafe { load_magic(addr_of_mut!((*header).magic)) };
        if found != magic::ARENA {
            return Err(AllocError::BadMagic { found });
        }
        // SAFETY: the magic's Acquire load made the published header visible;
        // its plain fields are never written again, so a shared reference is
        // sound for `'r`.
        let header = unsafe { &*header };
        let heap_end = header.heap_end;
        if heap_end > len as u64 {
            return Err(AllocError::RegionTooSmall {
                needed: heap_end,
                available: len as u64,
            });
        }
        if header.id.is_null()
            || header.heap_begin < size_of::<ArenaHeader>() as u64
            || header.heap_begin > heap_end
        {
            return Err(AllocError::CorruptHeader);
        }
        Ok(ArenaAllocator {
            header,
            base: region,
            _region: PhantomData,
        })
    }

    /// Allocates `size` bytes whose address (in this process) is aligned to
    /// `align`, a power of two. Alignments up to
    /// [`REGION_ALIGN`](crate::REGION_ALIGN) hold in every mapping of the
    /// region; larger ones in every mapping whose base is aligned as far
    /// (page-aligned mappings: up to the page size).
    pub fn allocate(&self, size: u64, align: u64) -> Result<ShmPtr<u8>, AllocError> {
        check_request(size, align)?;
        let off = self.reserve(size, align)?;
        Ok(ShmPtr::new(self.header.id, off))
    }

    /// [`allocate`](Self::allocate), also returning the local address.
    pub fn allocate_full(&self, size: u64, align: u64) -> Result<FullPtr<u8>, AllocError> {
        let shm = self.allocate(size, align)?;
        Ok(FullPtr {
            ptr: self.base.wrapping_add(shm.off as usize),
            shm,
        })
    }

    /// Reserves `size` bytes for one thread's [`ThreadArena`] with one atomic
    /// operation (when uncontended). The sub-arena starts on a cache line of
    /// its own, so threads allocating from neighbouring sub-arenas do not
    /// share lines at their starts.
    pub fn carve(&self, size: u64) -> Result<ThreadArena, AllocError> {
        check_request(size, 1)?;
        let cursor = self.reserve(size, CACHE_LINE as u64)?;
        Ok(ThreadArena {
            id: self.header.id,
            cursor,
            end: cursor + size,
        })
    }

    /// Takes back every allocation at once.
    ///
    /// # Safety
    /// No allocation (and no [`ThreadArena`]) of this arena may be in use, in
    /// any process, and none may be used after this call.
    pub unsafe fn reset(&self) {
        // Release pairs with the Acquire of the cursor in `reserve`: whoever
        // allocates reset memory next is ordered after this call, and so after
        // the (caller-synchronised) end of the previous allocations' use.
        self.header
            .cursor
            .value
            .store(self.header.heap_begin, Ordering::Release);
    }

    /// Bytes handed out since initialisation or the last reset, alignment
    /// padding included.
    pub fn used(&self) -> u64 {
        // Relaxed: a statistic, ordered with nothing.
        let cursor = self.header.cursor.value.load(Ordering::Relaxed);
        cursor.min(self.header.heap_end) - self.header.heap_begin
    }

    /// Bytes of the heap (the region less the header).
    pub fn capacity(&self) -> u64 {
        self.header.heap_end - self.header.heap_begin
    }

    /// The allocator id every pointer from this arena carries.
    pub fn id(&self) -> AllocatorId {
        self.header.id
    }

    /// A descriptor of this arena's region in this process, for resolving
    /// its pointers (see [`ShmPtr::to_full`]).
    pub fn backend(&self, kind: BackendKind) -> MemoryBackend {
        MemoryBackend::new(self.header.id, kind, self.base, self.header.heap_end)
    }

    /// Resolves a pointer of this arena in this process.
    pub fn to_full<T>(&self, ptr: ShmPtr<T>) -> Result<FullPtr<T>, PtrError> {
        ptr.to_full(&self.backend(BackendKind::HostShm))
    }

    /// Moves the cursor past `size` bytes aligned to `align` and returns their
    /// offset. A compare-and-swap loop rather than `fetch_add`: the cursor
    /// only ever takes the end of a reservation that was checked to fit, so a
    /// request that does not fit leaves it alone (smaller ones may still
    /// succeed, and the cursor cannot run past the heap or overflow), and
    /// alignment padding is exact instead of a worst-case `align - 1`.
    fn reserve(&self, size: u64, align: u64) -> Result<u64, AllocError> {
        let heap_begin = self.header.heap_begin;
        let heap_end = self.header.heap_end;
        if size > heap_end - heap_begin {
            return Err(AllocError::TooLarge {
                requested: size,
                max: heap_end - heap_begin,
            });
        }
        let base = address(self.base);
        let cursor = &self.header.cursor.value;
        // Acquire (here and on both CAS outcomes) pairs with `reset`'s Release:
        // every later value of the cursor is written by an RMW and so extends
        // the release sequence of the last reset. Exclusivity of the returned
        // range needs no ordering at all, only the atomicity of the CAS.
        let mut current = cursor.load(Ordering::Acquire);
        loop {
            let exhausted = AllocError::Exhausted {
                requested: size,
                available: heap_end.saturating_sub(current),
            };
            // Align the absolute address; `base + current` cannot overflow for
            // a mapped region, but `current` comes from shared memory.
            let start = base
                .checked_add(current)
                .and_then(|addr| align_up(addr, align))
                .map(|addr| addr - base)
                .ok_or(exhausted)?;
            let end = start.checked_add(size).ok_or(exhausted)?;
            if end > heap_end {
                return Err(exhausted);
            }
            match cursor.compare_exchange_weak(current, end, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return Ok(start),
                Err(actual) => current = actual,
            }
        }
    }
}

impl fmt::Debug for ArenaAllocator<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArenaAllocator")
            .field("id", &self.header.id)
            .field("base", &self.base)
            .field("used", &self.used())
            .field("capacity", &self.capacity())
            .finish()
    }
}

/// Allocation from a sub-arena: plain arithmetic on the owner's copy, no
/// atomics. Offsets are relative to the parent arena's region, and alignment
/// is of the offset: the region base is at least
/// [`REGION_ALIGN`](crate::REGION_ALIGN)-aligned in every mapping, so
/// alignments up to that hold for the address everywhere (larger ones where
/// the base is aligned as far, e.g. up to the page size for mappings).
impl ThreadArena {
    /// Allocates `size` bytes at an offset aligned to `align` (a power of two).
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<ShmPtr<u8>, AllocError> {
        check_request(size, align)?;
        let exhausted = AllocError::Exhausted {
            requested: size,
            available: self.remaining(),
        };
        let start = align_up(self.cursor, align).ok_or(exhausted)?;
        let end = start.checked_add(size).ok_or(exhausted)?;
        if end > self.end {
            return Err(exhausted);
        }
        self.cursor = end;
        Ok(ShmPtr::new(self.id, start))
    }

    /// Bytes not yet handed out.
    pub fn remaining(&self) -> u64 {
        self.end.saturating_sub(self.cursor)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const ID: AllocatorId = AllocatorId::new(1, 2);

    #[repr(C, align(4096))]
    struct Region([u8; 8192]);

    fn region() -> Box<Region> {
        Box::new(Region([0; 8192]))
    }

    #[test]
    fn init_then_attach_sees_the_same_arena() {
        let mut r = region();
        let base = r.0.as_mut_ptr();
        // SAFETY: `r` outlives both handles and is used only through them.
        let (a, b) = unsafe {
            (
                ArenaAllocator::init_in(base, 8192, ID).unwrap(),
                ArenaAllocator::attach(base, 8192).unwrap(),
            )
        };
        assert_eq!(b.id(), ID);
        assert_eq!(a.capacity(), 8192 - 128);
        let p = a.allocate(100, 8).unwrap();
        let q = b.allocate(100, 8).unwrap();
        assert_eq!(p.off, 128);
        assert_eq!(q.off, 232);
        assert_eq!(b.used(), 204);
    }

    #[test]
    fn init_and_attach_errors() {
        let mut r = region();
        let base = r.0.as_mut_ptr();
        // SAFETY: every call stays inside `r`, which outlives the handles.
        unsafe {
            assert_eq!(
                ArenaAllocator::attach(base, 8192).unwrap_err(),
                AllocError::BadMagic { found: 0 }
            );
            assert_eq!(
                ArenaAllocator::init_in(base.add(8), 1024, ID).unwrap_err(),
                AllocError::BadRegionBase {
                    addr: address(base) + 8
                }
            );
            assert_eq!(
                ArenaAllocator::init_in(core::ptr::null_mut(), 1024, ID).unwrap_err(),
                AllocError::BadRegionBase { addr: 0 }
            );
            assert_eq!(
                ArenaAllocator::init_in(base, 100, ID).unwrap_err(),
                AllocError::RegionTooSmall {
                    needed: 128,
                    available: 100
                }
            );
            assert_eq!(
                ArenaAllocator::init_in(base, 1024, AllocatorId::NULL).unwrap_err(),
                AllocError::NullAllocatorId
            );
            ArenaAllocator::init_in(base, 4096, ID).unwrap();
            assert_eq!(
                ArenaAllocator::attach(base, 2048).unwrap_err(),
                AllocError::RegionTooSmall {
                    needed: 4096,
                    available: 2048
                }
            );
            // A header whose heap starts inside the header is refused.
            addr_of_mut!((*base.cast::<ArenaHeader>()).heap_begin).write(8);
            assert_eq!(
                ArenaAllocator::attach(base, 4096).unwrap_err(),
                AllocError::CorruptHeader
            );
        }
    }

    #[test]
    fn request_errors_and_exhaustion() {
        let mut r = region();
        // SAFETY: `r` outlives the handle.
        let arena = unsafe { ArenaAllocator::init_in(r.0.as_mut_ptr(), 1024, ID).unwrap() };
        assert_eq!(arena.allocate(0, 8), Err(AllocError::ZeroSize));
        assert_eq!(arena.allocate(8, 0), Err(AllocError::BadAlignment(0)));
        assert_eq!(arena.allocate(8, 24), Err(AllocError::BadAlignment(24)));
        assert_eq!(
            arena.allocate(2000, 8),
            Err(AllocError::TooLarge {
                requested: 2000,
                max: 896
            })
        );
        arena.allocate(800, 8).unwrap();
        assert_eq!(
            arena.allocate(100, 8),
            Err(AllocError::Exhausted {
                requested: 100,
                available: 96
            })
        );
        // The failure left the cursor alone: what fits still fits.
        assert_eq!(arena.allocate(96, 8).unwrap().off, 928);
        assert_eq!(arena.used(), arena.capacity());
        // SAFETY: nothing allocated above is in use.
        unsafe { arena.reset() };
        assert_eq!(arena.used(), 0);
        assert_eq!(arena.allocate(8, 8).unwrap().off, 128);
    }

    #[test]
    fn large_alignment_is_of_the_address() {
        let mut r = region();
        // SAFETY: `r` outlives the handle.
        let arena = unsafe { ArenaAllocator::init_in(r.0.as_mut_ptr(), 8192, ID).unwrap() };
        let full = arena.allocate_full(10, 4096).unwrap();
        assert_eq!(full.ptr.addr() % 4096, 0);
        assert_eq!(arena.to_full(full.shm).unwrap().ptr, full.ptr);
        assert_eq!(
            arena.allocate(10, 8192),
            Err(AllocError::Exhausted {
                requested: 10,
                available: 8192 - 4096 - 10
            })
        );
    }

    #[test]
    fn thread_arena_allocates_inside_its_carve() {
        let mut r = region();
        // SAFETY: `r` outlives the handle.
        let arena = unsafe { ArenaAllocator::init_in(r.0.as_mut_ptr(), 8192, ID).unwrap() };
        arena.allocate(1, 1).unwrap();
        let mut sub = arena.carve(256).unwrap();
        assert_eq!(sub.cursor % 64, 0);
        assert_eq!(sub.remaining(), 256);
        let a = sub.allocate(10, 1).unwrap();
        let b = sub.allocate(16, 16).unwrap();
        assert_eq!(b.off, a.off + 16);
        assert_eq!(b.alloc_id, ID);
        assert_eq!(sub.remaining(), 256 - 32);
        assert_eq!(
            sub.allocate(300, 1),
            Err(AllocError::Exhausted {
                requested: 300,
                available: 224
            })
        );
        assert_eq!(sub.allocate(0, 1), Err(AllocError::ZeroSize));
        assert_eq!(sub.allocate(1, 3), Err(AllocError::BadAlignment(3)));
        assert_eq!(arena.carve(0).unwrap_err(), AllocError::ZeroSize);
    }
}
