//! Operations on the pointer types of [`layout`](crate::layout): self-relative
//! [`OffsetPtr`], portable [`ShmPtr`], process-local [`FullPtr`], and the
//! [`MemoryBackend`] descriptor that turns one into the other.
//!
//! Addresses that cross mappings (a `ShmPtr` resolved against a backend, an
//! `OffsetPtr` read in a copy of its segment) cannot carry Rust provenance
//! with them, so the functions that make such addresses expose the provenance
//! of the memory they are given (`expose_provenance`) and the ones that
//! resolve them use `with_exposed_provenance_mut`.

use core::fmt;
use core::marker::PhantomData;
use core::mem::{align_of, size_of};

use crate::layout::{
    AllocatorId, BackendKind, FullPtr, MemoryBackend, OffsetPtr, ShmPtr, OFFSET_PTR_NULL,
};

/// Why a pointer could not be converted or resolved.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PtrError {
    /// The pointer is null.
    Null,
    /// The pointer belongs to another allocator than the backend describes.
    WrongAllocator {
        /// The backend's allocator.
        expected: AllocatorId,
        /// The pointer's.
        found: AllocatorId,
    },
    /// `len` bytes at `off` do not fit in a region of `capacity` bytes.
    OutOfBounds {
        /// The pointer's offset.
        off: u64,
        /// Bytes of the pointee.
        len: u64,
        /// Bytes in the region.
        capacity: u64,
    },
    /// The resolved address is not aligned for the pointee type.
    Misaligned {
        /// The resolved address.
        addr: u64,
        /// The pointee type's alignment.
        align: u64,
    },
    /// A `MemoryBackend::kind` that names no [`BackendKind`].
    InvalidBackendKind(u32),
}

impl fmt::Display for PtrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Null => write!(f, "null pointer"),
            Self::WrongAllocator { expected, found } => write!(
                f,
                "pointer of allocator {}.{} resolved against backend {}.{}",
                found.major, found.minor, expected.major, expected.minor
            ),
            Self::OutOfBounds { off, len, capacity } => write!(
                f,
                "{len} bytes at offset {off:#x} exceed the backend's {capacity} bytes"
            ),
            Self::Misaligned { addr, align } => {
                write!(f, "address {addr:#x} is not aligned to {align}")
            }
            Self::InvalidBackendKind(kind) => write!(f, "invalid backend kind {kind}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for PtrError {}

// ---------------------------------------------------------------------------
// AllocatorId
// ---------------------------------------------------------------------------

impl AllocatorId {
    /// The id no allocator has; the allocator half of a null [`ShmPtr`].
    pub const NULL: AllocatorId = AllocatorId {
        major: u32::MAX,
        minor: u32::MAX,
    };

    /// An id from its two halves (by convention: the memory backend, and the
    /// allocator within it).
    pub const fn new(major: u32, minor: u32) -> Self {
        AllocatorId { major, minor }
    }

    /// Whether this is [`AllocatorId::NULL`].
    pub const fn is_null(&self) -> bool {
        self.major == u32::MAX && self.minor == u32::MAX
    }
}

// ---------------------------------------------------------------------------
// OffsetPtr
// ---------------------------------------------------------------------------

/// `OffsetPtr` is deliberately neither `Copy` nor `Clone`: its value is a
/// distance from its own address, so a copy placed elsewhere would point
/// somewhere else. Move it only together with its target (as part of the
/// segment holding both), and re-`set` it otherwise.
impl<T> OffsetPtr<T> {
    /// A null offset pointer.
    pub const fn null() -> Self {
        OffsetPtr {
            off: OFFSET_PTR_NULL,
            _target: PhantomData,
        }
    }

    /// Whether this pointer is null.
    pub const fn is_null(&self) -> bool {
        self.off == OFFSET_PTR_NULL
    }

    /// Points this pointer at `target` (null makes it null) by storing the
    /// distance from this pointer's own address.
    ///
    /// # Safety
    /// `target` must be null or lie in the same mapped segment as `self`, and
    /// the pointer must be read ([`get`](Self::get)) only where that segment
    /// is mapped as a whole; otherwise the distance means nothing.
    pub unsafe fn set(&mut self, target: *const T) {
        if target.is_null() {
            self.off = OFFSET_PTR_NULL;
            return;
        }
        let here = (self as *const Self).addr();
        // Exposed so that `get`, possibly in another mapping of the segment,
        // may rebuild a usable pointer from the bare address.
        let there = target.expose_provenance();
        // Two addresses of one segment are less than 2^63 apart, so the
        // wrapping difference is the signed distance and never the null value.
        self.off = there.wrapping_sub(here) as isize as i64;
    }

    /// The target's address in the mapping this pointer is read from.
    pub fn get(&self) -> *mut T {
        if self.is_null() {
            return core::ptr::null_mut();
        }
        let here = (self as *const Self).addr();
        core::ptr::with_exposed_provenance_mut(here.wrapping_add_signed(self.off as isize))
    }
}

impl<T> Default for OffsetPtr<T> {
    fn default() -> Self {
        Self::null()
    }
}

impl<T> fmt::Debug for OffsetPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_null() {
            write!(f, "OffsetPtr(null)")
        } else {
            write!(f, "OffsetPtr({:+})", self.off)
        }
    }
}

// ---------------------------------------------------------------------------
// ShmPtr
// ---------------------------------------------------------------------------

impl<T> ShmPtr<T> {
    /// The null portable pointer: `AllocatorId::NULL`, offset `u64::MAX`.
    pub const fn null() -> Self {
        ShmPtr {
            alloc_id: AllocatorId::NULL,
            off: u64::MAX,
            _target: PhantomData,
        }
    }

    /// A pointer `off` bytes into the region of allocator `alloc_id`.
    pub const fn new(alloc_id: AllocatorId, off: u64) -> Self {
        ShmPtr {
            alloc_id,
            off,
            _target: PhantomData,
        }
    }

    /// Whether this pointer names nothing: either half null (no allocator
    /// has the null id, and no region reaches offset `u64::MAX`).
    pub const fn is_null(&self) -> bool {
        self.alloc_id.is_null() || self.off == u64::MAX
    }

    /// The same location, as a pointer to `U`.
    pub const fn cast<U>(self) -> ShmPtr<U> {
        ShmPtr::new(self.alloc_id, self.off)
    }

    /// Resolves this pointer in the mapping `backend` describes, checking that
    /// it is non-null, belongs to the backend, that a whole `T` fits, and that
    /// the address is aligned for `T`.
    pub fn to_full(&self, backend: &MemoryBackend) -> Result<FullPtr<T>, PtrError> {
        if self.is_null() {
            return Err(PtrError::Null);
        }
        if self.alloc_id != backend.id {
            return Err(PtrError::WrongAllocator {
                expected: backend.id,
                found: self.alloc_id,
            });
        }
        let len = size_of::<T>() as u64;
        let out_of_bounds = PtrError::OutOfBounds {
            off: self.off,
            len,
            capacity: backend.capacity,
        };
        if !backend.contains(self.off, len) {
            return Err(out_of_bounds);
        }
        let addr = backend.base.checked_add(self.off).ok_or(out_of_bounds)?;
        let align = align_of::<T>() as u64;
        if addr % align != 0 {
            return Err(PtrError::Misaligned { addr, align });
        }
        let local = usize::try_from(addr).map_err(|_| out_of_bounds)?;
        Ok(FullPtr {
            ptr: core::ptr::with_exposed_provenance_mut(local),
            shm: *self,
        })
    }
}

// Manual impls: derives would demand the same traits of `T`, but comparing or
// printing a pointer never touches its target.
impl<T> PartialEq for ShmPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.alloc_id == other.alloc_id && self.off == other.off
    }
}
impl<T> Eq for ShmPtr<T> {}

impl<T> fmt::Debug for ShmPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_null() {
            write!(f, "ShmPtr(null)")
        } else {
            write!(
                f,
                "ShmPtr({}.{}+{:#x})",
                self.alloc_id.major, self.alloc_id.minor, self.off
            )
        }
    }
}

// SAFETY: a `ShmPtr` is two integers. It grants no access by itself: reaching
// the target takes resolving it against a backend and dereferencing the
// resulting raw pointer, which is `unsafe` and where the caller answers for
// `T`'s thread-safety. The `PhantomData<*mut T>` only records the pointee type.
unsafe impl<T> Send for ShmPtr<T> {}
// SAFETY: as above; `&ShmPtr` gives nothing but the two integers.
unsafe impl<T> Sync for ShmPtr<T> {}

// ---------------------------------------------------------------------------
// FullPtr
// ---------------------------------------------------------------------------

impl<T> FullPtr<T> {
    /// A null full pointer (null address, null portable pointer).
    pub const fn null() -> Self {
        FullPtr {
            ptr: core::ptr::null_mut(),
            shm: ShmPtr::null(),
        }
    }

    /// Whether either half is null.
    pub fn is_null(&self) -> bool {
        self.ptr.is_null() || self.shm.is_null()
    }

    /// The portable pointer for a local address inside `backend`'s region:
    /// `ptr` must lie in `[base, base + capacity)`, with a whole `T` in the
    /// region, aligned for `T`.
    pub fn from_local(backend: &MemoryBackend, ptr: *mut T) -> Result<FullPtr<T>, PtrError> {
        if ptr.is_null() {
            return Err(PtrError::Null);
        }
        let addr = ptr.addr() as u64;
        let len = size_of::<T>() as u64;
        let off = addr.wrapping_sub(backend.base);
        if addr < backend.base || !backend.contains(off, len) || off >= backend.capacity {
            return Err(PtrError::OutOfBounds {
                off,
                len,
                capacity: backend.capacity,
            });
        }
        let align = align_of::<T>() as u64;
        if addr % align != 0 {
            return Err(PtrError::Misaligned { addr, align });
        }
        Ok(FullPtr {
            ptr,
            shm: ShmPtr::new(backend.id, off),
        })
    }

    /// The same location, as a pointer to `U`.
    pub fn cast<U>(self) -> FullPtr<U> {
        FullPtr {
            ptr: self.ptr.cast(),
            shm: self.shm.cast(),
        }
    }
}

impl<T> fmt::Debug for FullPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FullPtr({:p}, {:?})", self.ptr, self.shm)
    }
}

// ---------------------------------------------------------------------------
// MemoryBackend
// ---------------------------------------------------------------------------

impl TryFrom<u32> for BackendKind {
    type Error = PtrError;

    fn try_from(kind: u32) -> Result<Self, PtrError> {
        match kind {
            0 => Ok(BackendKind::HostShm),
            1 => Ok(BackendKind::Pinned),
            2 => Ok(BackendKind::Device),
            3 => Ok(BackendKind::Managed),
            other => Err(PtrError::InvalidBackendKind(other)),
        }
    }
}

impl MemoryBackend {
    /// Describes `capacity` bytes at `base` (an address valid for whoever
    /// holds this descriptor) owned by allocator `id`.
    pub fn new(id: AllocatorId, kind: BackendKind, base: *mut u8, capacity: u64) -> Self {
        MemoryBackend {
            id,
            kind: kind as u32,
            flags: 0,
            // Exposed so that pointers resolved against this descriptor may
            // be dereferenced.
            base: base.expose_provenance() as u64,
            capacity,
        }
    }

    /// The kind of memory, validated (the field may come from a peer).
    pub fn kind(&self) -> Result<BackendKind, PtrError> {
        BackendKind::try_from(self.kind)
    }

    /// The region's base address.
    pub fn base_ptr(&self) -> *mut u8 {
        core::ptr::with_exposed_provenance_mut(self.base as usize)
    }

    /// Whether `len` bytes at offset `off` lie inside the region.
    pub fn contains(&self, off: u64, len: u64) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: AllocatorId = AllocatorId::new(3, 7);

    #[repr(C, align(64))]
    struct Buffer([u64; 16]);

    fn backend_over(buffer: &mut Buffer) -> MemoryBackend {
        let capacity = size_of::<Buffer>() as u64;
        MemoryBackend::new(
            ID,
            BackendKind::HostShm,
            buffer.0.as_mut_ptr().cast(),
            capacity,
        )
    }

    #[test]
    fn allocator_id_null() {
        assert!(AllocatorId::NULL.is_null());
        assert!(!ID.is_null());
        assert!(!AllocatorId::new(u32::MAX, 0).is_null());
    }

    #[test]
    fn null_pointers() {
        assert!(ShmPtr::<u64>::null().is_null());
        assert!(ShmPtr::<u64>::new(ID, u64::MAX).is_null());
        assert!(ShmPtr::<u64>::new(AllocatorId::NULL, 0).is_null());
        assert!(!ShmPtr::<u64>::new(ID, 0).is_null());
        assert!(FullPtr::<u64>::null().is_null());
        let p = OffsetPtr::<u64>::null();
        assert!(p.is_null());
        assert!(p.get().is_null());
        assert!(OffsetPtr::<u64>::default().is_null());
    }

    #[test]
    fn shm_to_full_to_shm_round_trip() {
        let mut buffer = Buffer([0; 16]);
        let backend = backend_over(&mut buffer);
        let shm = ShmPtr::<u64>::new(ID, 40);
        let full = shm.to_full(&backend).expect("in bounds and aligned");
        assert_eq!(full.shm, shm);
        assert_eq!(full.ptr.addr() as u64, backend.base + 40);
        // SAFETY: `full.ptr` is inside `buffer`, aligned for u64.
        unsafe { full.ptr.write(0xfeed) };
        assert_eq!(buffer.0[5], 0xfeed);
        let back = FullPtr::from_local(&backend, full.ptr).expect("inside the backend");
        assert_eq!(back.shm, shm);
        assert_eq!(back.cast::<u8>().shm, shm.cast::<u8>());
    }

    #[test]
    fn to_full_errors() {
        let mut buffer = Buffer([0; 16]);
        let backend = backend_over(&mut buffer);
        assert_eq!(
            ShmPtr::<u64>::null().to_full(&backend).unwrap_err(),
            PtrError::Null
        );
        let other = AllocatorId::new(9, 9);
        assert_eq!(
            ShmPtr::<u64>::new(other, 0).to_full(&backend).unwrap_err(),
            PtrError::WrongAllocator {
                expected: ID,
                found: other
            }
        );
        // The last u64 fits; one more byte does not.
        assert!(ShmPtr::<u64>::new(ID, 120).to_full(&backend).is_ok());
        assert_eq!(
            ShmPtr::<u64>::new(ID, 121).to_full(&backend).unwrap_err(),
            PtrError::OutOfBounds {
                off: 121,
                len: 8,
                capacity: 128
            }
        );
        // `off + len` overflows.
        assert!(matches!(
            ShmPtr::<u64>::new(ID, u64::MAX - 3)
                .to_full(&backend)
                .unwrap_err(),
            PtrError::OutOfBounds { .. }
        ));
        assert_eq!(
            ShmPtr::<u64>::new(ID, 4).to_full(&backend).unwrap_err(),
            PtrError::Misaligned {
                addr: backend.base + 4,
                align: 8
            }
        );
        // A zero-sized type fits at the very end.
        assert!(ShmPtr::<()>::new(ID, 128).to_full(&backend).is_ok());
    }

    #[test]
    fn from_local_errors() {
        let mut buffer = Buffer([0; 16]);
        let backend = backend_over(&mut buffer);
        let base = backend.base_ptr();
        assert_eq!(
            FullPtr::<u8>::from_local(&backend, core::ptr::null_mut()).unwrap_err(),
            PtrError::Null
        );
        let mut outside = 0u64;
        assert!(matches!(
            FullPtr::from_local(&backend, &mut outside as *mut u64).unwrap_err(),
            PtrError::OutOfBounds { .. }
        ));
        let end = base.wrapping_add(128);
        assert!(matches!(
            FullPtr::from_local(&backend, end).unwrap_err(),
            PtrError::OutOfBounds { off: 128, .. }
        ));
        // The last byte is inside, but a u64 starting there is not.
        assert!(FullPtr::from_local(&backend, base.wrapping_add(127)).is_ok());
        assert!(matches!(
            FullPtr::from_local(&backend, base.wrapping_add(124).cast::<u64>()).unwrap_err(),
            PtrError::OutOfBounds { off: 124, .. }
        ));
        assert!(matches!(
            FullPtr::from_local(&backend, base.wrapping_add(4).cast::<u64>()).unwrap_err(),
            PtrError::Misaligned { align: 8, .. }
        ));
    }

    #[test]
    fn backend_kind_and_bounds() {
        let mut buffer = Buffer([0; 16]);
        let mut backend = backend_over(&mut buffer);
        assert_eq!(backend.kind(), Ok(BackendKind::HostShm));
        for kind in [
            BackendKind::HostShm,
            BackendKind::Pinned,
            BackendKind::Device,
            BackendKind::Managed,
        ] {
            assert_eq!(BackendKind::try_from(kind as u32), Ok(kind));
        }
        backend.kind = 17;
        assert_eq!(backend.kind(), Err(PtrError::InvalidBackendKind(17)));
        assert!(backend.contains(0, 128));
        assert!(backend.contains(128, 0));
        assert!(!backend.contains(1, 128));
        assert!(!backend.contains(u64::MAX, 2));
        assert_eq!(backend.base_ptr(), buffer.0.as_mut_ptr().cast::<u8>());
    }

    #[test]
    fn offset_ptr_survives_a_copy_of_its_segment() {
        // A segment holding a pointer (at word 0) to its word 5.
        let mut original = Buffer([0; 16]);
        original.0[5] = 0xabcd;
        let segment = original.0.as_mut_ptr();
        let ptr_slot = segment.cast::<OffsetPtr<u64>>();
        // SAFETY: word 0 of the segment is 8-byte aligned and holds an
        // `OffsetPtr<u64>` (8 bytes); its target is word 5 of the same segment.
        unsafe {
            ptr_slot.write(OffsetPtr::null());
            (*ptr_slot).set(segment.add(5));
            assert_eq!((*ptr_slot).get(), segment.add(5));
        }

        let mut copy = Buffer([0; 16]);
        copy.0.copy_from_slice(&original.0);
        let copied = copy.0.as_mut_ptr();
        // Expose the copy, as a second mapping of a segment would be.
        let _ = copied.expose_provenance();
        // SAFETY: the copy holds the same bytes, so word 0 is the pointer.
        let target = unsafe { (*copied.cast::<OffsetPtr<u64>>()).get() };
        assert_eq!(target, copied.wrapping_add(5));
        // SAFETY: `target` is word 5 of `copy`.
        assert_eq!(unsafe { target.read() }, 0xabcd);

        // Setting to null, and to itself (offset 0 is not null).
        // SAFETY: as above.
        unsafe {
            (*ptr_slot).set(core::ptr::null());
            assert!((*ptr_slot).is_null());
            (*ptr_slot).set(segment);
            assert!(!(*ptr_slot).is_null());
            assert_eq!((*ptr_slot).get(), segment);
        }
    }
}
