//! What a handler can reach besides its argument bytes: the memory of the
//! segment its task came through, where a caller passes data by reference (a
//! `ShmPtr` into that segment's heap) instead of through the task's copy
//! space.

use std::fmt;
use std::marker::PhantomData;

use tandem_shm_core::{AllocatorId, ShmPtr};

use crate::segment::QueueSegment;

/// A handler's view of its caller: [`caller_bytes`](Self::caller_bytes)
/// resolves a `ShmPtr` the task carries into bytes of the caller's segment,
/// checked to lie inside it.
#[derive(Clone, Copy, Debug)]
pub struct TaskContext<'a> {
    segment: Option<&'a QueueSegment>,
}

impl<'a> TaskContext<'a> {
    /// The context of a task that came through `segment`.
    pub(crate) fn of(segment: &'a QueueSegment) -> Self {
        Self {
            segment: Some(segment),
        }
    }

    /// A context with no caller memory, for calling handlers with no
    /// runtime ([`crate::Registry::call`]): every pointer is refused.
    pub const fn detached() -> Self {
        Self { segment: None }
    }

    /// The segment the task came through (its id and length), if any.
    pub fn segment(&self) -> Option<(AllocatorId, u64)> {
        self.segment.map(|s| (s.id(), s.len() as u64))
    }

    /// The `len` bytes at `ptr` in the caller's segment: a
    /// [`CallerMemoryError`] unless `ptr` names that segment and the whole
    /// range lies inside it (past its header).
    pub fn caller_bytes(
        &self,
        ptr: ShmPtr<u8>,
        len: u64,
    ) -> Result<SharedBytes<'a>, CallerMemoryError> {
        let error = || CallerMemoryError {
            ptr,
            len,
            segment: self.segment(),
        };
        let segment = self.segment.ok_or_else(error)?;
        let bytes = usize::try_from(len).map_err(|_| error())?;
        let at = segment.resolve(ptr, bytes).map_err(|_| error())?;
        Ok(SharedBytes {
            at,
            len: bytes,
            _segment: PhantomData,
        })
    }
}

/// Bytes of a caller's shared memory. The caller (a kernel thread, another
/// process) can reach them too, so they are copied in and out, never lent as
/// a Rust slice; by the task protocol the caller leaves them alone until its
/// task completes.
#[derive(Debug)]
pub struct SharedBytes<'a> {
    at: *mut u8,
    len: usize,
    _segment: PhantomData<&'a QueueSegment>,
}

// SAFETY: the bytes live in a shared mapping that outlives 'a (the segment),
// not in thread-local state; concurrent access is what the copy methods'
// contract is about, not which thread holds the view.
unsafe impl Send for SharedBytes<'_> {}
// SAFETY: as for Send; every method copies through a raw pointer.
unsafe impl Sync for SharedBytes<'_> {}

impl SharedBytes<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `dst.len()` bytes starting at byte `at` of the view into
    /// `dst`; `false` (and nothing copied) when the range is not inside.
    pub fn copy_to(&self, at: usize, dst: &mut [u8]) -> bool {
        if !self.inside(at, dst.len()) {
            return false;
        }
        // SAFETY: [at, at + len) lies inside the view (checked), which lies
        // inside the mapping (`caller_bytes` resolved it); `dst` is ours and
        // cannot overlap shared memory we only hold as a raw pointer.
        unsafe { std::ptr::copy_nonoverlapping(self.at.add(at), dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Copies `src` into the view starting at byte `at`; `false` (and
    /// nothing copied) when the range is not inside.
    pub fn copy_from(&self, at: usize, src: &[u8]) -> bool {
        if !self.inside(at, src.len()) {
            return false;
        }
        // SAFETY: as in `copy_to`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.at.add(at), src.len()) };
        true
    }

    fn inside(&self, at: usize, len: usize) -> bool {
        at.checked_add(len).is_some_and(|end| end <= self.len)
    }
}

/// A pointer a task carried that does not name `len` bytes of its caller's
/// segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CallerMemoryError {
    /// The pointer.
    pub ptr: ShmPtr<u8>,
    /// The bytes asked for.
    pub len: u64,
    /// The caller's segment (id, length), if the task came through one.
    pub segment: Option<(AllocatorId, u64)>,
}

impl fmt::Display for CallerMemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.segment {
            Some((id, len)) => write!(
                f,
                "{} bytes at {:?} are not inside the caller's segment ({id:?}, {len} bytes)",
                self.len, self.ptr
            ),
            None => write!(
                f,
                "{} bytes at {:?}: no caller segment (a detached context)",
                self.len, self.ptr
            ),
        }
    }
}

impl std::error::Error for CallerMemoryError {}
