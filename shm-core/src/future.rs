//! [`FutureShm`]: a completion record in shared memory, through which a
//! submitter hands a task's input to whoever completes it and waits for the
//! return code and output.
//!
//! The record is a [`FutureShmHeader`] at offset 0 of its block, followed by
//! `copy_space_size` bytes of copy space at [`FUTURE_COPY_SPACE_OFFSET`]. The
//! copy space holds the serialized input until the task is completed and the
//! serialized output afterwards (the completer's output overwrites the input).
//!
//! # Protocol and memory ordering
//!
//! 1. **Submit.** The submitter, sole owner of a fresh or [`reset`] future,
//!    fills the input ([`write_input`], [`set_payload`]) with plain and
//!    `Relaxed` stores, then publishes the future by pushing it into a queue.
//!    The queue's push is a `Release` and the completer's pop an `Acquire`, so
//!    that edge is what makes the input visible to the completer; nothing in
//!    the future itself needs to be stronger.
//! 2. **Complete.** The single completer reads the input ([`input`]), writes
//!    the output into the copy space, stores the return code and output length
//!    (`Relaxed`), then sets [`COMPLETE`] with a `fetch_or(.., Release)`.
//! 3. **Wait.** A waiter loads the flags with `Acquire`; once it sees
//!    `COMPLETE`, it has synchronised with the completer's `Release` and so
//!    sees the return code, output length and copy space as written.
//!
//! Parties may be threads, other processes mapping the same pages at other
//! addresses, or GPU kernels (through the C++ mirror); the handle keeps no
//! state beyond the validated geometry, so every party builds its own.
//!
//! Lengths written by a peer are never trusted: an input or output length past
//! the copy space is [`FutureError::CorruptLength`], and the copy-space size
//! is read once on attach, checked against the region and kept in the handle.
//!
//! [`reset`]: FutureShm::reset
//! [`write_input`]: FutureShm::write_input
//! [`set_payload`]: FutureShm::set_payload
//! [`input`]: FutureShm::input
//! [`COMPLETE`]: future_flags::COMPLETE

use core::fmt;
use core::marker::PhantomData;
use core::mem::align_of;
use core::ptr::{self, addr_of, addr_of_mut, NonNull};

use crate::layout::{future_flags, FutureShmHeader, ShmPtr, FUTURE_COPY_SPACE_OFFSET};
use crate::ser::{serialized_len, Deserialize, Reader, SerError, Serialize, Writer};
use crate::sync::{spin_hint, AtomicI32, AtomicU32, Ordering};

/// Every flag bit with a meaning; any other bit set means the header is not a
/// future (or was written by an incompatible version).
const KNOWN_FLAGS: u32 = future_flags::COMPLETE
    | future_flags::COPY_FROM_CLIENT
    | future_flags::POINTER
    | future_flags::SUCCEEDED
    | future_flags::USER_MASK;

/// Return codes at or below this value are reserved for the ones Tandem
/// itself stores; tasks should use other values so a waiter can tell them
/// apart.
pub const RC_RESERVED_MAX: i32 = i32::MIN + 0xFFFF;

/// Stored instead of the task's return code when its output did not fit the
/// copy space. The output is then empty: it is never truncated, since a
/// truncated serialization could read back as a different, valid value.
pub const RC_OUTPUT_TOO_LARGE: i32 = i32::MIN;

/// Stored instead of the task's return code when writing its output failed
/// (the output closure or the value's serialization returned an error). The
/// output is then empty.
pub const RC_OUTPUT_FAILED: i32 = i32::MIN + 1;

/// Why a future could not be set up or used.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FutureError {
    /// The region pointer is null.
    NullRegion,
    /// The region is not aligned for a [`FutureShmHeader`].
    Misaligned {
        /// The region's address.
        address: usize,
        /// The alignment it needs.
        required: usize,
    },
    /// The region is shorter than the header plus its copy space.
    RegionTooSmall {
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes there are.
        available: usize,
    },
    /// The header holds flag bits no version of the protocol defines.
    UnknownFlags(u32),
    /// An input or output does not fit the copy space.
    CopySpaceTooSmall {
        /// Bytes to copy.
        needed: usize,
        /// Bytes of copy space.
        available: usize,
    },
    /// A length read from shared memory lies past the copy space: the peer
    /// that wrote it is broken or the memory is not a future.
    CorruptLength {
        /// The length read.
        len: u32,
        /// Bytes of copy space.
        copy_space: u32,
    },
    /// The future is already complete (a second completion, or input written
    /// or read after completion).
    AlreadyComplete,
    /// The future is not complete yet, so it has no output or return code.
    NotComplete,
    /// Bits outside [`future_flags::USER_MASK`] passed as user flags.
    NotUserFlags(u32),
    /// Serializing the input or output, or deserializing them, failed.
    Ser(SerError),
}

impl fmt::Display for FutureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NullRegion => f.write_str("region pointer is null"),
            Self::Misaligned { address, required } => {
                write!(
                    f,
                    "region at {address:#x} is not aligned to {required} bytes"
                )
            }
            Self::RegionTooSmall { needed, available } => {
                write!(
                    f,
                    "region too small: {needed} bytes needed, {available} available"
                )
            }
            Self::UnknownFlags(flags) => {
                write!(
                    f,
                    "header flags {flags:#010x} hold undefined bits: not a future"
                )
            }
            Self::CopySpaceTooSmall { needed, available } => write!(
                f,
                "copy space too small: {needed} bytes needed, {available} available"
            ),
            Self::CorruptLength { len, copy_space } => write!(
                f,
                "stored length {len} exceeds the copy space of {copy_space} bytes"
            ),
            Self::AlreadyComplete => f.write_str("future is already complete"),
            Self::NotComplete => f.write_str("future is not complete"),
            Self::NotUserFlags(bits) => {
                write!(f, "flags {bits:#010x} are outside the user mask")
            }
            Self::Ser(e) => write!(f, "serialization failed: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for FutureError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Ser(e) => Some(e),
            _ => None,
        }
    }
}

impl From<SerError> for FutureError {
    fn from(e: SerError) -> Self {
        Self::Ser(e)
    }
}

/// Why filling the copy space through a caller's closure failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FillError<E> {
    /// The future refused (already complete, output too large, ...).
    Future(FutureError),
    /// The caller's closure returned this error.
    Fill(E),
}

impl<E: fmt::Display> fmt::Display for FillError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Future(e) => e.fmt(f),
            Self::Fill(e) => write!(f, "filling the copy space failed: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl<E: std::error::Error + 'static> std::error::Error for FillError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Future(e) => Some(e),
            Self::Fill(e) => Some(e),
        }
    }
}

impl<E> From<FutureError> for FillError<E> {
    fn from(e: FutureError) -> Self {
        Self::Future(e)
    }
}

impl From<FillError<SerError>> for FutureError {
    fn from(e: FillError<SerError>) -> Self {
        match e {
            FillError::Future(e) => e,
            FillError::Fill(e) => Self::Ser(e),
        }
    }
}

/// How a wait ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WaitOutcome {
    /// The future completed with this return code.
    Completed {
        /// What the completer published.
        return_code: i32,
    },
    /// The stop flag was raised before completion was seen.
    Stopped,
    /// The caller's deadline passed before completion was seen.
    TimedOut,
}

/// A handle on a future living in a region valid for `'r`.
///
/// The handle is a view: copying it or building another over a second mapping
/// of the same pages gives more views of the one future. Operations that
/// touch the copy space or plain header fields outside the protocol's order
/// are `unsafe` and say which role may call them when; everything else works
/// through atomics and is safe from any thread.
#[derive(Clone, Copy)]
pub struct FutureShm<'r> {
    header: NonNull<FutureShmHeader>,
    /// Read once (on init or attach) and validated against the region, so a
    /// peer rewriting the header cannot widen our copy-space slices.
    copy_space_size: u32,
    _region: PhantomData<&'r [u8]>,
}

// SAFETY: the handle is a pointer into shared memory plus an immutable size.
// All state shared between parties is reached either through atomics (safe
// methods) or through `unsafe` methods whose contracts forbid concurrent
// access; `output` reads the copy space only after an `Acquire` load observed
// COMPLETE, after which the protocol freezes it until the `unsafe` `reset`.
unsafe impl Send for FutureShm<'_> {}
// SAFETY: as for `Send`; no method relies on being called from one thread.
unsafe impl Sync for FutureShm<'_> {}

impl fmt::Debug for FutureShm<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FutureShm")
            .field("header", &self.header)
            .field("copy_space_size", &self.copy_space_size)
            .field("flags", &self.flags())
            .finish()
    }
}

impl<'r> FutureShm<'r> {
    /// Bytes a future with `copy_space` bytes of copy space occupies. Saturates
    /// at `usize::MAX` on targets where the sum would overflow (no region can
    /// be that large, so `init_in` then reports `RegionTooSmall`).
    pub const fn required_bytes(copy_space: u32) -> usize {
        FUTURE_COPY_SPACE_OFFSET.saturating_add(copy_space as usize)
    }

    /// Checks a region's address and that it holds at least `needed` bytes.
    #[inline]
    fn check_region(mem: *mut u8, len: usize, needed: usize) -> Result<NonNull<u8>, FutureError> {
        let mem = NonNull::new(mem).ok_or(FutureError::NullRegion)?;
        let required = align_of::<FutureShmHeader>();
        if mem.as_ptr() as usize % required != 0 {
            return Err(FutureError::Misaligned {
                address: mem.as_ptr() as usize,
                required,
            });
        }
        if len < needed {
            return Err(FutureError::RegionTooSmall {
                needed,
                available: len,
            });
        }
        Ok(mem)
    }

    /// Initialises a future with `copy_space` bytes of copy space at `mem`,
    /// in place: not complete, no input, no payload.
    ///
    /// # Safety
    /// `mem` must be valid for reads and writes of `len` bytes for `'r`, and no
    /// one else may use those bytes while this runs; others may attach once
    /// the caller has published the region (with `Release`, e.g. a queue).
    #[inline]
    pub unsafe fn init_in(mem: *mut u8, len: usize, copy_space: u32) -> Result<Self, FutureError> {
        let mem = Self::check_region(mem, len, Self::required_bytes(copy_space))?;
        let header = mem.cast::<FutureShmHeader>();
        let h = header.as_ptr();
        // SAFETY: `h` is aligned and the region holds the header (checked);
        // the caller grants exclusive access. Each field is written through a
        // raw field pointer, atomics with `new` (loom atomics cannot be
        // conjured from bytes), so no reference to uninitialised memory exists.
        unsafe {
            ptr::write(addr_of_mut!((*h).flags), AtomicU32::new(0));
            ptr::write(addr_of_mut!((*h).return_code), AtomicI32::new(0));
            ptr::write(addr_of_mut!((*h).copy_space_size), copy_space);
            ptr::write(addr_of_mut!((*h).input_len), AtomicU32::new(0));
            ptr::write(addr_of_mut!((*h).output_len), AtomicU32::new(0));
            ptr::write(addr_of_mut!((*h).notify), 0);
            ptr::write(addr_of_mut!((*h).payload), ShmPtr::null());
        }
        Ok(FutureShm {
            header,
            copy_space_size: copy_space,
            _region: PhantomData,
        })
    }

    /// Attaches to a future initialised by [`init_in`](Self::init_in),
    /// possibly by another process at another address. Checks the alignment,
    /// that the stored copy-space size fits `len`, and that no undefined flag
    /// bits are set.
    ///
    /// # Safety
    /// `mem` must be valid for reads and writes of `len` bytes for `'r`, and
    /// hold a future whose initialisation happened-before this call (e.g. it
    /// was received through a queue or a `Release`/`Acquire` handshake).
    pub unsafe fn attach(mem: *mut u8, len: usize) -> Result<Self, FutureError> {
        let mem = Self::check_region(mem, len, FUTURE_COPY_SPACE_OFFSET)?;
        let header = mem.cast::<FutureShmHeader>();
        // SAFETY: the header lies in the region (checked) and was initialised
        // before this call (caller's contract); `copy_space_size` is written
        // only by `init_in`, so this plain read races with nothing.
        let copy_space = unsafe { ptr::read(addr_of!((*header.as_ptr()).copy_space_size)) };
        let needed = Self::required_bytes(copy_space);
        if len < needed {
            return Err(FutureError::RegionTooSmall {
                needed,
                available: len,
            });
        }
        let future = FutureShm {
            header,
            copy_space_size: copy_space,
            _region: PhantomData,
        };
        let flags = future.flags();
        if flags & !KNOWN_FLAGS != 0 {
            return Err(FutureError::UnknownFlags(flags));
        }
        Ok(future)
    }

    fn flags_atomic(&self) -> &AtomicU32 {
        // SAFETY: the header is initialised and lives for 'r (constructor
        // contracts); the reference covers the atomic field only.
        unsafe { &*addr_of!((*self.header.as_ptr()).flags) }
    }

    fn return_code_atomic(&self) -> &AtomicI32 {
        // SAFETY: as in `flags_atomic`.
        unsafe { &*addr_of!((*self.header.as_ptr()).return_code) }
    }

    fn input_len_atomic(&self) -> &AtomicU32 {
        // SAFETY: as in `flags_atomic`.
        unsafe { &*addr_of!((*self.header.as_ptr()).input_len) }
    }

    fn output_len_atomic(&self) -> &AtomicU32 {
        // SAFETY: as in `flags_atomic`.
        unsafe { &*addr_of!((*self.header.as_ptr()).output_len) }
    }

    fn copy_space_ptr(&self) -> *mut u8 {
        // SAFETY: the copy space starts right after the header, inside the
        // region (its size was checked against the region's length).
        unsafe {
            self.header
                .as_ptr()
                .cast::<u8>()
                .add(FUTURE_COPY_SPACE_OFFSET)
        }
    }

    /// The copy space, for a writer that the protocol makes its only user.
    ///
    /// # Safety
    /// No one else may read or write the copy space while the slice lives.
    #[allow(clippy::mut_from_ref, reason = "exclusivity is the caller's contract")]
    unsafe fn copy_space_mut(&self) -> &mut [u8] {
        // SAFETY: the copy space is `copy_space_size` bytes inside the region;
        // exclusivity is the caller's contract.
        unsafe {
            core::slice::from_raw_parts_mut(self.copy_space_ptr(), self.copy_space_size as usize)
        }
    }

    /// The first `len` bytes of the copy space, refusing lengths a peer wrote
    /// past its end.
    ///
    /// # Safety
    /// No one may write those bytes while the slice lives.
    unsafe fn copy_space_prefix(&self, len: u32) -> Result<&[u8], FutureError> {
        if len > self.copy_space_size {
            return Err(FutureError::CorruptLength {
                len,
                copy_space: self.copy_space_size,
            });
        }
        // SAFETY: `len` is within the copy space (checked); no writer while
        // the slice lives is the caller's contract.
        Ok(unsafe { core::slice::from_raw_parts(self.copy_space_ptr(), len as usize) })
    }

    /// Bytes of copy space (input and output each must fit in it).
    pub fn copy_space_size(&self) -> u32 {
        self.copy_space_size
    }

    /// The current flags. `Acquire`, so that a party seeing a flag another
    /// set with `Release` (COMPLETE, user flags) also sees what preceded it.
    pub fn flags(&self) -> u32 {
        self.flags_atomic().load(Ordering::Acquire)
    }

    /// Whether the result is published. `Acquire`: pairs with the completer's
    /// `Release` `fetch_or`, so `true` makes the output readable.
    pub fn is_complete(&self) -> bool {
        self.flags() & future_flags::COMPLETE != 0
    }

    // -- submitter -------------------------------------------------------

    /// Fills the input: `fill` gets the whole copy space and returns how many
    /// bytes of input it wrote. Records the length and sets
    /// [`future_flags::COPY_FROM_CLIENT`]. Returns the input length.
    ///
    /// If `fill` fails, or returns a length past the copy space
    /// ([`FutureError::CopySpaceTooSmall`]; returning the length it would need
    /// is the way to report that), the future is left with no input, so a
    /// partial input can never be taken for a whole one.
    ///
    /// The stores are `Relaxed`: the input becomes visible to the completer
    /// through the publication of the future (a queue push, `Release`).
    ///
    /// # Safety
    /// Submitter only, before publishing the future: no one else may use the
    /// copy space during the call.
    pub unsafe fn write_input<E>(
        &self,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, FillError<E>> {
        let flags = self.flags_atomic();
        if flags.load(Ordering::Relaxed) & future_flags::COMPLETE != 0 {
            return Err(FutureError::AlreadyComplete.into());
        }
        // Withdraw any earlier input first so a failure leaves none.
        flags.fetch_and(!future_flags::COPY_FROM_CLIENT, Ordering::Relaxed);
        self.input_len_atomic().store(0, Ordering::Relaxed);
        // SAFETY: the submitter owns the unpublished future (caller contract).
        let written = fill(unsafe { self.copy_space_mut() }).map_err(FillError::Fill)?;
        let len = self.fits_copy_space(written)?;
        self.input_len_atomic().store(len, Ordering::Relaxed);
        flags.fetch_or(future_flags::COPY_FROM_CLIENT, Ordering::Relaxed);
        Ok(written)
    }

    /// `len` as a `u32` if it fits the copy space.
    fn fits_copy_space(&self, len: usize) -> Result<u32, FutureError> {
        u32::try_from(len)
            .ok()
            .filter(|&len| len <= self.copy_space_size)
            .ok_or(FutureError::CopySpaceTooSmall {
                needed: len,
                available: self.copy_space_size as usize,
            })
    }

    /// Serializes `value` as the input (see [`write_input`](Self::write_input)).
    /// A value larger than the copy space is [`FutureError::CopySpaceTooSmall`]
    /// with its full serialized length.
    ///
    /// # Safety
    /// As for [`write_input`](Self::write_input).
    pub unsafe fn write_input_value<T: Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<usize, FutureError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.write_input(|buf| serialize_into(buf, value)) }.map_err(FutureError::from)
    }

    /// Makes this a pointer future: stores `payload` (a task object) and sets
    /// [`future_flags::POINTER`]. `Relaxed`, published with the future.
    ///
    /// # Safety
    /// Submitter only, before publishing the future: no one else may read the
    /// payload during the call.
    pub unsafe fn set_payload(&self, payload: ShmPtr<u8>) {
        // SAFETY: the field is inside the header; no concurrent reader is the
        // caller's contract.
        unsafe { ptr::write(addr_of_mut!((*self.header.as_ptr()).payload), payload) };
        self.flags_atomic()
            .fetch_or(future_flags::POINTER, Ordering::Relaxed);
    }

    /// Sets [`FutureShmHeader::notify`].
    ///
    /// # Safety
    /// Submitter only, before publishing the future: no one else may read the
    /// field during the call.
    pub unsafe fn set_notify(&self, notify: u32) {
        // SAFETY: the field is inside the header; no concurrent reader is the
        // caller's contract.
        unsafe { ptr::write(addr_of_mut!((*self.header.as_ptr()).notify), notify) };
    }

    /// [`FutureShmHeader::notify`], as the submitter set it before publishing
    /// (read by whoever received the future through the publication).
    pub fn notify(&self) -> u32 {
        // SAFETY: the field is inside the header and written only before
        // publication, which happened-before any holder of this handle read
        // the future's pointer from a queue (Release/Acquire).
        unsafe { ptr::read(addr_of!((*self.header.as_ptr()).notify)) }
    }

    /// The task object of a pointer future, `None` if
    /// [`future_flags::POINTER`] is not set.
    pub fn payload(&self) -> Option<ShmPtr<u8>> {
        if self.flags() & future_flags::POINTER == 0 {
            return None;
        }
        // SAFETY: the field is inside the header and is written only by
        // `init_in`, `set_payload` and `reset`, whose contracts exclude
        // concurrent readers.
        Some(unsafe { ptr::read(addr_of!((*self.header.as_ptr()).payload)) })
    }

    // -- completer -------------------------------------------------------

    /// The input bytes (empty if the submitter wrote none).
    /// [`FutureError::AlreadyComplete`] once completed, because the output
    /// has overwritten the input.
    ///
    /// The loads are `Relaxed`: the completer received the future through a
    /// queue pop (`Acquire`) that synchronised with the submitter's push.
    ///
    /// # Safety
    /// Completer only, after receiving the published future, and no one may
    /// complete it while the returned slice lives.
    pub unsafe fn input(&self) -> Result<&[u8], FutureError> {
        let flags = self.flags_atomic().load(Ordering::Relaxed);
        if flags & future_flags::COMPLETE != 0 {
            return Err(FutureError::AlreadyComplete);
        }
        if flags & future_flags::COPY_FROM_CLIENT == 0 {
            return Ok(&[]);
        }
        let len = self.input_len_atomic().load(Ordering::Relaxed);
        // SAFETY: no writer until completion (caller contract).
        unsafe { self.copy_space_prefix(len) }
    }

    /// Deserializes a `T` from the input, which may borrow from the copy space.
    ///
    /// # Safety
    /// As for [`input`](Self::input), for as long as the value borrows.
    pub unsafe fn read_input<'s, T: Deserialize<'s>>(&'s self) -> Result<T, FutureError> {
        // SAFETY: forwarded caller contract.
        let input = unsafe { self.input() }?;
        Ok(Reader::new(input).get()?)
    }

    /// Completes the future: `write_output` gets the whole copy space and
    /// returns how many bytes of output it wrote; then the return code and
    /// output length are stored and [`future_flags::COMPLETE`] is published
    /// with a `Release` `fetch_or`. Waiters are released in every case below
    /// except the first, so a failing completer never leaves them hanging:
    ///
    /// * already complete: nothing is written, [`FutureError::AlreadyComplete`];
    /// * `write_output` returns a length past the copy space (return the length
    ///   you would need to report this): completed with
    ///   [`RC_OUTPUT_TOO_LARGE`] and empty output, and
    ///   [`FutureError::CopySpaceTooSmall`] is returned. Output is never
    ///   truncated;
    /// * `write_output` fails: completed with [`RC_OUTPUT_FAILED`] and empty
    ///   output, and its error is returned as [`FillError::Fill`].
    ///
    /// The return code and length are stored `Relaxed`: they are ordered before
    /// the `Release` flag update, which a waiter reads with `Acquire`.
    ///
    /// # Safety
    /// Completer only: the one party that took the task (no concurrent
    /// completion), with no slice from [`input`](Self::input) still alive
    /// (the output overwrites the input).
    pub unsafe fn complete<E>(
        &self,
        return_code: i32,
        write_output: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<(), FillError<E>> {
        // Relaxed: this only refuses a sequential second completion; the
        // single-completer contract rules out a concurrent one.
        if self.flags_atomic().load(Ordering::Relaxed) & future_flags::COMPLETE != 0 {
            return Err(FutureError::AlreadyComplete.into());
        }
        // SAFETY: sole completer and no live input slice (caller contract);
        // waiters read the copy space only after COMPLETE, set below.
        let written = write_output(unsafe { self.copy_space_mut() });
        let (code, len, result) = match written {
            Ok(written) => match self.fits_copy_space(written) {
                Ok(len) => (return_code, len, Ok(())),
                Err(e) => (RC_OUTPUT_TOO_LARGE, 0, Err(FillError::Future(e))),
            },
            Err(e) => (RC_OUTPUT_FAILED, 0, Err(FillError::Fill(e))),
        };
        self.return_code_atomic().store(code, Ordering::Relaxed);
        self.output_len_atomic().store(len, Ordering::Relaxed);
        // Release: publishes the copy space, return code and output length to
        // waiters that load COMPLETE with Acquire.
        let done = if code == 0 {
            future_flags::COMPLETE | future_flags::SUCCEEDED
        } else {
            future_flags::COMPLETE
        };
        let previous = self.flags_atomic().fetch_or(done, Ordering::Release);
        if previous & future_flags::COMPLETE != 0 {
            return Err(FutureError::AlreadyComplete.into());
        }
        result
    }

    /// Completes with `value` serialized as the output (see
    /// [`complete`](Self::complete)). A value larger than the copy space
    /// completes with [`RC_OUTPUT_TOO_LARGE`] and returns
    /// [`FutureError::CopySpaceTooSmall`] with its full serialized length.
    ///
    /// # Safety
    /// As for [`complete`](Self::complete).
    pub unsafe fn complete_value<T: Serialize + ?Sized>(
        &self,
        return_code: i32,
        value: &T,
    ) -> Result<(), FutureError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.complete(return_code, |buf| serialize_into(buf, value)) }
            .map_err(FutureError::from)
    }

    // -- waiter ----------------------------------------------------------

    /// The return code and output length, if complete. `Acquire` on the flags
    /// pairs with the completer's `Release`; the fields behind it are then
    /// final and read `Relaxed`.
    fn completed_code(&self) -> Option<i32> {
        self.is_complete()
            .then(|| self.return_code_atomic().load(Ordering::Relaxed))
    }

    /// The stored return code; [`FutureError::NotComplete`] before completion.
    pub fn return_code(&self) -> Result<i32, FutureError> {
        self.completed_code().ok_or(FutureError::NotComplete)
    }

    /// The output bytes; [`FutureError::NotComplete`] before completion.
    pub fn output(&self) -> Result<&[u8], FutureError> {
        if !self.is_complete() {
            return Err(FutureError::NotComplete);
        }
        // Relaxed: ordered by the Acquire in `is_complete` (see there).
        let len = self.output_len_atomic().load(Ordering::Relaxed);
        // SAFETY: after COMPLETE the copy space is frozen until `reset`, whose
        // contract excludes concurrent users such as this slice.
        unsafe { self.copy_space_prefix(len) }
    }

    /// Deserializes a `T` from the output, which may borrow from it.
    pub fn read_output<'s, T: Deserialize<'s>>(&'s self) -> Result<T, FutureError> {
        Ok(Reader::new(self.output()?).get()?)
    }

    /// Waits for completion until the `stop` flag (nonzero = stop; may live in
    /// shared memory) is raised or `expired` returns `true`.
    ///
    /// Completion wins: it is checked first on every round, and again after a
    /// stop or expiry is seen, so a future completed before the stop was
    /// raised is always reported as [`WaitOutcome::Completed`].
    ///
    /// Between rounds the waiter backs off: it spins with a CPU hint for
    /// about 127 hint instructions (a few microseconds, to catch fast GPU or
    /// peer completions at full speed), then (with `std`) yields its time
    /// slice 10 times, then sleeps, from 1 µs doubling up to 100 µs per round.
    /// A long wait thus costs almost no CPU, and a completion is noticed at
    /// most about 100 µs (plus the OS timer slack) after it happens. Without
    /// `std` it keeps spinning with the hint; `expired` is polled every round.
    pub fn wait(&self, stop: &AtomicU32, mut expired: impl FnMut() -> bool) -> WaitOutcome {
        let mut backoff = Backoff::default();
        loop {
            if let Some(return_code) = self.completed_code() {
                return WaitOutcome::Completed { return_code };
            }
            // Acquire: a completion that happened-before the stop was raised
            // is then visible to the completion re-check below.
            if stop.load(Ordering::Acquire) != 0 {
                return self.completed_or(WaitOutcome::Stopped);
            }
            if expired() {
                return self.completed_or(WaitOutcome::TimedOut);
            }
            backoff.snooze();
        }
    }

    /// [`wait`](Self::wait) with a deadline `timeout` from now.
    #[cfg(feature = "std")]
    pub fn wait_timeout(&self, stop: &AtomicU32, timeout: std::time::Duration) -> WaitOutcome {
        // A deadline too far to represent never expires.
        let deadline = std::time::Instant::now().checked_add(timeout);
        self.wait(stop, || {
            deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline)
        })
    }

    fn completed_or(&self, outcome: WaitOutcome) -> WaitOutcome {
        match self.completed_code() {
            Some(return_code) => WaitOutcome::Completed { return_code },
            None => outcome,
        }
    }

    // -- user flags and reuse --------------------------------------------

    /// Sets user flag bits (inside [`future_flags::USER_MASK`]) with a
    /// `Release` RMW, so a party reading them with [`flags`](Self::flags)
    /// sees what the setter wrote before. Other bits are
    /// [`FutureError::NotUserFlags`]. Returns the flags before the update.
    pub fn set_user_flags(&self, bits: u32) -> Result<u32, FutureError> {
        Self::check_user_bits(bits)?;
        Ok(self.flags_atomic().fetch_or(bits, Ordering::AcqRel))
    }

    /// Clears user flag bits; as [`set_user_flags`](Self::set_user_flags).
    pub fn clear_user_flags(&self, bits: u32) -> Result<u32, FutureError> {
        Self::check_user_bits(bits)?;
        Ok(self.flags_atomic().fetch_and(!bits, Ordering::AcqRel))
    }

    fn check_user_bits(bits: u32) -> Result<(), FutureError> {
        if bits & !future_flags::USER_MASK != 0 {
            return Err(FutureError::NotUserFlags(bits));
        }
        Ok(())
    }

    /// Returns the future to its initial state (not complete, no input, no
    /// payload, user flags cleared) for reuse; the copy-space size stays.
    ///
    /// The stores are `Relaxed`: the next submission publishes the future
    /// again through a queue (`Release`).
    ///
    /// # Safety
    /// No one else may use the future (any view of it, in any process)
    /// during or after the call until it is published again, and no slice
    /// from [`output`](Self::output) or [`input`](Self::input) may be alive.
    pub unsafe fn reset(&self) {
        self.flags_atomic().store(0, Ordering::Relaxed);
        self.return_code_atomic().store(0, Ordering::Relaxed);
        self.input_len_atomic().store(0, Ordering::Relaxed);
        self.output_len_atomic().store(0, Ordering::Relaxed);
        // SAFETY: inside the header; exclusive access is the caller's contract.
        unsafe {
            ptr::write(
                addr_of_mut!((*self.header.as_ptr()).payload),
                ShmPtr::null(),
            )
        };
    }
}

/// Serializes `value` into `buf` for a copy-space fill closure: its length,
/// or its full length if that exceeds `buf` (which the future reports as
/// [`FutureError::CopySpaceTooSmall`] instead of writing a truncated value).
fn serialize_into<T: Serialize + ?Sized>(buf: &mut [u8], value: &T) -> Result<usize, SerError> {
    let needed = serialized_len(value)?;
    if needed > buf.len() {
        return Ok(needed);
    }
    let mut writer = Writer::new(buf);
    writer.put(value)?;
    Ok(writer.position())
}

/// The waiter's backoff schedule (see [`FutureShm::wait`]).
#[derive(Default)]
struct Backoff {
    round: u32,
}

/// Rounds `0..=SPIN_ROUNDS` spin `2^round` hints each (127 in all).
const SPIN_ROUNDS: u32 = 6;
/// Rounds after the spinning ones that yield the time slice.
#[cfg(all(feature = "std", not(loom)))]
const YIELD_ROUNDS: u32 = 10;
/// First sleep, in microseconds; each later one doubles ...
#[cfg(all(feature = "std", not(loom)))]
const SLEEP_MIN_US: u64 = 1;
/// ... up to this.
#[cfg(all(feature = "std", not(loom)))]
const SLEEP_MAX_US: u64 = 100;

impl Backoff {
    fn snooze(&mut self) {
        // Under loom every hint is a scheduling point: one per round keeps
        // the explored state space small.
        if cfg!(loom) {
            spin_hint();
            return;
        }
        let round = self.round;
        self.round = self.round.saturating_add(1);
        if round <= SPIN_ROUNDS {
            for _ in 0..1u32 << round {
                spin_hint();
            }
            return;
        }
        #[cfg(all(feature = "std", not(loom)))]
        {
            let past_spin = round - SPIN_ROUNDS - 1;
            if past_spin < YIELD_ROUNDS {
                std::thread::yield_now();
            } else {
                // Capping the shift keeps it far from overflow; the cap on
                // the sleep itself is SLEEP_MAX_US.
                let doublings = (past_spin - YIELD_ROUNDS).min(16);
                let micros = (SLEEP_MIN_US << doublings).min(SLEEP_MAX_US);
                std::thread::sleep(std::time::Duration::from_micros(micros));
            }
        }
        #[cfg(not(all(feature = "std", not(loom))))]
        for _ in 0..1u32 << SPIN_ROUNDS {
            spin_hint();
        }
    }
}
