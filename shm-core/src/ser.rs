//! A compact serializer for fixed buffers such as a future's copy space.
//!
//! # Encoding
//!
//! The C++ mirror (`device-kernels`) produces and accepts exactly these bytes,
//! so the encoding is fixed and simple:
//!
//! * `u8`, `u16`, `u32`, `u64`, `i8`, `i16`, `i32`, `i64`: little-endian, fixed
//!   width (1, 2, 4, 8 bytes); signed values in two's complement.
//! * `f32`, `f64`: the IEEE 754 bit pattern (`to_bits`) as a little-endian
//!   `u32` / `u64`; every NaN payload survives the round trip.
//! * `bool`: one byte, `0` or `1`; any other byte is [`SerError::InvalidBool`].
//! * byte strings (`[u8]`, `Vec<u8>`) and strings (`str`, `String`): a `u32`
//!   little-endian length in bytes, then the bytes. Strings are validated as
//!   UTF-8 when read ([`SerError::InvalidUtf8`]); a length that does not fit a
//!   `u32` is [`SerError::LengthOverflow`] when written.
//! * `[T; N]`: the `N` elements back to back, with no length prefix (the
//!   length is part of the type).
//! * structs: their fields in declaration order (see
//!   [`impl_serialize_fields!`](crate::impl_serialize_fields)).
//!
//! There is no padding, no alignment and no self-description: reader and
//! writer must agree on the sequence of types.
//!
//! # Failure leaves no partial value
//!
//! A [`Writer::put`] that fails (buffer too small) leaves [`Writer::position`]
//! where it was before the call, so the bytes counted as written are always a
//! sequence of complete values; bytes past the position may have been
//! scribbled on and mean nothing. A failing [`Reader::get`] likewise leaves
//! [`Reader::position`] unchanged.

use core::fmt;

/// Why a value could not be written or read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SerError {
    /// Writing a value needs `needed` bytes but only `available` remain.
    BufferTooSmall {
        /// Bytes the value needs.
        needed: usize,
        /// Bytes left in the buffer.
        available: usize,
    },
    /// Reading a value needs `needed` bytes but only `available` remain.
    UnexpectedEnd {
        /// Bytes the value needs.
        needed: usize,
        /// Bytes left in the buffer.
        available: usize,
    },
    /// A `bool` byte that is neither 0 nor 1.
    InvalidBool(u8),
    /// A string's bytes are not UTF-8.
    InvalidUtf8,
    /// A length does not fit the `u32` prefix (write), a position overflowed
    /// `usize`, or a prefix does not fit `usize` on this target (read).
    LengthOverflow,
}

impl fmt::Display for SerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SerError::BufferTooSmall { needed, available } => write!(
                f,
                "buffer too small: value needs {needed} bytes, {available} available"
            ),
            SerError::UnexpectedEnd { needed, available } => write!(
                f,
                "unexpected end of input: value needs {needed} bytes, {available} remain"
            ),
            SerError::InvalidBool(byte) => write!(f, "invalid bool byte {byte:#04x}"),
            SerError::InvalidUtf8 => f.write_str("string is not valid UTF-8"),
            SerError::LengthOverflow => f.write_str("length does not fit the encoding"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SerError {}

/// Where a [`Writer`]'s bytes go.
enum Sink<'a> {
    /// A caller's buffer.
    Buffer(&'a mut [u8]),
    /// Nowhere: the writer only counts (see [`serialized_len`]).
    Count,
}

/// Writes values into a fixed buffer (or only counts their size).
pub struct Writer<'a> {
    sink: Sink<'a>,
    pos: usize,
}

impl<'a> Writer<'a> {
    /// A writer that fills `buf` from its start.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer {
            sink: Sink::Buffer(buf),
            pos: 0,
        }
    }

    /// A writer that stores nothing and only advances its position.
    fn counting() -> Writer<'static> {
        Writer {
            sink: Sink::Count,
            pos: 0,
        }
    }

    /// Bytes written so far (all of them complete values).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left in the buffer (`usize::MAX - position` when counting).
    pub fn remaining(&self) -> usize {
        match &self.sink {
            Sink::Buffer(buf) => buf.len() - self.pos,
            Sink::Count => usize::MAX - self.pos,
        }
    }

    /// The bytes written so far.
    pub fn written(&self) -> &[u8] {
        match &self.sink {
            Sink::Buffer(buf) => &buf[..self.pos],
            Sink::Count => &[],
        }
    }

    /// Appends `parts` as one unit: all of them or, if they do not fit,
    /// nothing (the position is unchanged).
    fn put_raw(&mut self, parts: &[&[u8]]) -> Result<(), SerError> {
        let needed = parts
            .iter()
            .try_fold(0usize, |sum, part| sum.checked_add(part.len()))
            .ok_or(SerError::LengthOverflow)?;
        let available = self.remaining();
        if needed > available {
            return Err(match self.sink {
                Sink::Buffer(_) => SerError::BufferTooSmall { needed, available },
                Sink::Count => SerError::LengthOverflow,
            });
        }
        if let Sink::Buffer(buf) = &mut self.sink {
            let mut at = self.pos;
            for part in parts {
                buf[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
        }
        self.pos += needed;
        Ok(())
    }

    /// Writes a `bool` as one byte, 0 or 1.
    pub fn put_bool(&mut self, value: bool) -> Result<(), SerError> {
        self.put_u8(u8::from(value))
    }

    /// Writes a `u32` length prefix then `bytes`; all or nothing.
    pub fn put_bytes(&mut self, bytes: &[u8]) -> Result<(), SerError> {
        let len = u32::try_from(bytes.len()).map_err(|_| SerError::LengthOverflow)?;
        self.put_raw(&[&len.to_le_bytes(), bytes])
    }

    /// Writes a string as its UTF-8 bytes with a `u32` length prefix.
    pub fn put_str(&mut self, value: &str) -> Result<(), SerError> {
        self.put_bytes(value.as_bytes())
    }

    /// Writes any [`Serialize`] value; on failure the position is unchanged
    /// even if the value is composite and some of its fields were written.
    /// [`SerError::BufferTooSmall`] then describes the whole value: its full
    /// length against the bytes that were available for it.
    pub fn put<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), SerError> {
        let start = self.pos;
        let available = self.remaining();
        value.serialize(self).map_err(|e| {
            self.pos = start;
            match e {
                // The failing field's own size says little about the value;
                // a counting pass (on this error path only) gives the whole.
                SerError::BufferTooSmall { .. } => match serialized_len(value) {
                    Ok(needed) => SerError::BufferTooSmall { needed, available },
                    Err(counting) => counting,
                },
                other => other,
            }
        })
    }
}

/// Reads values from a byte slice, borrowing strings and byte strings from it.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader starting at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Takes the next `len` bytes, or nothing if fewer remain.
    fn take(&mut self, len: usize) -> Result<&'a [u8], SerError> {
        let available = self.remaining();
        if len > available {
            return Err(SerError::UnexpectedEnd {
                needed: len,
                available,
            });
        }
        let bytes = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(bytes)
    }

    /// Takes exactly `N` bytes as an array.
    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], SerError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// Reads a `bool`; bytes other than 0 and 1 are [`SerError::InvalidBool`].
    pub fn get_bool(&mut self) -> Result<bool, SerError> {
        let start = self.pos;
        match self.get_u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => {
                self.pos = start;
                Err(SerError::InvalidBool(other))
            }
        }
    }

    /// Reads a `u32`-prefixed byte string, borrowed from the input.
    pub fn get_bytes(&mut self) -> Result<&'a [u8], SerError> {
        let start = self.pos;
        let result = self.get_u32().and_then(|len| {
            let len = usize::try_from(len).map_err(|_| SerError::LengthOverflow)?;
            self.take(len)
        });
        result.inspect_err(|_| self.pos = start)
    }

    /// Reads a `u32`-prefixed UTF-8 string, borrowed from the input.
    pub fn get_str(&mut self) -> Result<&'a str, SerError> {
        let start = self.pos;
        let bytes = self.get_bytes()?;
        core::str::from_utf8(bytes).map_err(|_| {
            self.pos = start;
            SerError::InvalidUtf8
        })
    }

    /// Reads any [`Deserialize`] value; on failure the position is unchanged.
    pub fn get<T: Deserialize<'a>>(&mut self) -> Result<T, SerError> {
        let start = self.pos;
        T::deserialize(self).inspect_err(|_| self.pos = start)
    }
}

/// Fixed-width little-endian `put_*` / `get_*` pairs for the numeric types.
macro_rules! numeric_accessors {
    ($($t:ty => $put:ident, $get:ident, $to_bits:expr, $from_bits:expr;)*) => {
        impl Writer<'_> {
            $(
                #[doc = concat!("Writes a `", stringify!($t), "`, little-endian.")]
                pub fn $put(&mut self, value: $t) -> Result<(), SerError> {
                    self.put_raw(&[&($to_bits)(value).to_le_bytes()])
                }
            )*
        }
        impl Reader<'_> {
            $(
                #[doc = concat!("Reads a little-endian `", stringify!($t), "`.")]
                pub fn $get(&mut self) -> Result<$t, SerError> {
                    let bytes = self.take_array()?;
                    Ok(($from_bits)(bytes))
                }
            )*
        }
        $(
            impl Serialize for $t {
                fn serialize(&self, w: &mut Writer<'_>) -> Result<(), SerError> {
                    w.$put(*self)
                }
            }
            impl Deserialize<'_> for $t {
                fn deserialize(r: &mut Reader<'_>) -> Result<Self, SerError> {
                    r.$get()
                }
            }
        )*
    };
}

numeric_accessors! {
    u8 => put_u8, get_u8, |v: u8| v, u8::from_le_bytes;
    u16 => put_u16, get_u16, |v: u16| v, u16::from_le_bytes;
    u32 => put_u32, get_u32, |v: u32| v, u32::from_le_bytes;
    u64 => put_u64, get_u64, |v: u64| v, u64::from_le_bytes;
    i8 => put_i8, get_i8, |v: i8| v, i8::from_le_bytes;
    i16 => put_i16, get_i16, |v: i16| v, i16::from_le_bytes;
    i32 => put_i32, get_i32, |v: i32| v, i32::from_le_bytes;
    i64 => put_i64, get_i64, |v: i64| v, i64::from_le_bytes;
    f32 => put_f32, get_f32, f32::to_bits, |b| f32::from_bits(u32::from_le_bytes(b));
    f64 => put_f64, get_f64, f64::to_bits, |b| f64::from_bits(u64::from_le_bytes(b));
}

/// A value that can be written with a [`Writer`].
pub trait Serialize {
    /// Writes `self` field by field.
    fn serialize(&self, w: &mut Writer<'_>) -> Result<(), SerError>;
}

/// A value that can be read with a [`Reader`], possibly borrowing from its
/// input for the lifetime `'a`.
pub trait Deserialize<'a>: Sized {
    /// Reads a value field by field.
    fn deserialize(r: &mut Reader<'a>) -> Result<Self, SerError>;
}

impl<T: Serialize + ?Sized> Serialize for &T {
    fn serialize(&self, w: &mut Writer<'_>) -> Result<(), SerError> {
        (**self).serialize(w)
    }
}

impl Serialize for bool {
    fn serialize(&self, w: &mut Writer<'_>) -> Result<(), SerError> {
        w.put_bool(*self)
    }
}

impl Deserialize<'_> for bool {
    fn deserialize(r: &mut Reader<'_>) -> Result<Self, SerError> {
        r.get_bool()
    }
}

impl<T: Serialize, const N: usize> Serialize for [T; N] {
    fn serialize(&self, w: &mut Writer<'_>) -> Result<(), SerError> {
        self.iter().try_for_each(|item| item.serialize(w))
    }
}

impl<'a, T: Deserialize<'a>, const N: usize> Deserialize<'a> for [T; N] {
    fn deserialize(r: &mut Reader<'a>) -> Result<Self, SerError> {
        let mut items = [(); N].map(|()| None);
        for slot in items.iter_mut() {
            *slot = Some(T::deserialize(r)?);
        }
        // Every slot was filled by the loop above, which returns early on error.
        Ok(items.map(|item| item.expect("every element was read")))
    }
}

impl Serialize for [u8] {
    fn serialize(&self, w: &mut Writer<'_>) -> Result<(), SerError> {
        w.put_bytes(self)
    }
}

impl<'a> Deserialize<'a> for &'a [u8] {
    fn deserialize(r: &mut Reader<'a>) -> Result<Self, SerError> {
        r.get_bytes()
    }
}

impl Serialize for str {
    fn serialize(&self, w: &mut Writer<'_>) -> Result<(), SerError> {
        w.put_str(self)
    }
}

impl<'a> Deserialize<'a> for &'a str {
    fn deserialize(r: &mut Reader<'a>) -> Result<Self, SerError> {
        r.get_str()
    }
}

#[cfg(feature = "alloc")]
mod owned {
    use super::{Deserialize, Reader, SerError, Serialize, Writer};
    use alloc::string::String;
    use alloc::vec::Vec;

    impl Serialize for Vec<u8> {
        fn serialize(&self, w: &mut Writer<'_>) -> Result<(), SerError> {
            w.put_bytes(self)
        }
    }

    impl Deserialize<'_> for Vec<u8> {
        fn deserialize(r: &mut Reader<'_>) -> Result<Self, SerError> {
            r.get_bytes().map(<[u8]>::to_vec)
        }
    }

    impl Serialize for String {
        fn serialize(&self, w: &mut Writer<'_>) -> Result<(), SerError> {
            w.put_str(self)
        }
    }

    impl Deserialize<'_> for String {
        fn deserialize(r: &mut Reader<'_>) -> Result<Self, SerError> {
            r.get_str().map(String::from)
        }
    }
}

/// The number of bytes `value` serializes to, found by a counting pass that
/// writes nothing. [`SerError::LengthOverflow`] if a length does not fit the
/// encoding or the total overflows `usize`.
pub fn serialized_len<T: Serialize + ?Sized>(value: &T) -> Result<usize, SerError> {
    let mut counter = Writer::counting();
    counter.put(value)?;
    Ok(counter.position())
}

/// Implements [`Serialize`] and [`Deserialize`] for a struct by its fields,
/// written and read in the order listed (list them in declaration order so
/// the C++ mirror's reading matches). Every field type must implement both
/// traits, so structs nest:
///
/// ```
/// use tandem_shm_core::impl_serialize_fields;
/// use tandem_shm_core::{Reader, Writer};
///
/// #[derive(Debug, PartialEq)]
/// struct Extent { offset: u64, len: u32 }
/// impl_serialize_fields!(Extent { offset, len });
///
/// #[derive(Debug, PartialEq)]
/// struct Request<'a> { name: &'a str, extent: Extent, sync: bool }
/// impl_serialize_fields!(Request<'a> { name, extent, sync });
///
/// let mut buf = [0u8; 64];
/// let mut w = Writer::new(&mut buf);
/// let req = Request { name: "log", extent: Extent { offset: 4096, len: 512 }, sync: true };
/// w.put(&req).unwrap();
/// let len = w.position();
/// assert_eq!(Reader::new(&buf[..len]).get::<Request>().unwrap(), req);
/// ```
#[macro_export]
macro_rules! impl_serialize_fields {
    ($name:ident < $lt:lifetime > { $($field:ident),* $(,)? }) => {
        impl<$lt> $crate::Serialize for $name<$lt> {
            $crate::impl_serialize_fields!(@serialize $($field)*);
        }
        impl<$lt> $crate::Deserialize<$lt> for $name<$lt> {
            $crate::impl_serialize_fields!(@deserialize $lt; $($field)*);
        }
    };
    ($name:ident { $($field:ident),* $(,)? }) => {
        impl $crate::Serialize for $name {
            $crate::impl_serialize_fields!(@serialize $($field)*);
        }
        impl<'de> $crate::Deserialize<'de> for $name {
            $crate::impl_serialize_fields!(@deserialize 'de; $($field)*);
        }
    };
    // The two methods, which both forms share.
    (@serialize $($field:ident)*) => {
        fn serialize(
            &self,
            w: &mut $crate::Writer<'_>,
        ) -> ::core::result::Result<(), $crate::SerError> {
            $( w.put(&self.$field)?; )*
            ::core::result::Result::Ok(())
        }
    };
    (@deserialize $lt:lifetime; $($field:ident)*) => {
        fn deserialize(
            r: &mut $crate::Reader<$lt>,
        ) -> ::core::result::Result<Self, $crate::SerError> {
            ::core::result::Result::Ok(Self { $( $field: r.get()?, )* })
        }
    };
}
