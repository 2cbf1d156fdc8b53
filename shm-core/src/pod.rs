//! Which values may be copied into shared memory.

/// Plain data that may be copied byte for byte into memory another process or
/// a GPU kernel reads: `#[repr(C)]` (or a primitive), no pointers or
/// references that mean something in one address space only, no `Drop`, and
/// every bit pattern the writer can produce is a valid value for the reader.
///
/// # Safety
/// Implement only for types meeting every condition above. Rings and futures
/// copy `T` with `ptr::read`/`ptr::write` and rely on it.
pub unsafe trait ShmSafe: Copy + 'static {}

macro_rules! shm_safe_primitives {
    ($($t:ty),*) => { $(
        // SAFETY: primitive integers and floats are plain bytes with no invalid
        // bit patterns and no address-space-specific meaning.
        unsafe impl ShmSafe for $t {}
    )* };
}
shm_safe_primitives!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

// SAFETY: an array of plain data is plain data.
unsafe impl<T: ShmSafe, const N: usize> ShmSafe for [T; N] {}
// SAFETY: `repr(C)` pair of u32, every bit pattern valid.
unsafe impl ShmSafe for crate::layout::AllocatorId {}
// SAFETY: an allocator id and an offset; meaningful in every process that
// attaches to the allocator, which is the point of the type.
unsafe impl<T: 'static> ShmSafe for crate::layout::ShmPtr<T> {}
// SAFETY: `repr(C)`, all integer fields; `kind` is validated on use.
unsafe impl ShmSafe for crate::layout::MemoryBackend {}
