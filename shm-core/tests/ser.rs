//! The serializer: exact bytes (the C++ mirror depends on them), round trips,
//! all-or-nothing puts and gets, and every decoding error.

use proptest::prelude::*;
use tandem_shm_core::impl_serialize_fields;
use tandem_shm_core::{serialized_len, Reader, SerError, Writer};

/// One value of each kind the encoding knows.
#[derive(Clone, Debug)]
enum Value {
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Bytes(Vec<u8>),
    Str(String),
    Array([u16; 3]),
}

impl Value {
    fn put(&self, w: &mut Writer<'_>) -> Result<(), SerError> {
        match self {
            Value::U8(v) => w.put_u8(*v),
            Value::U16(v) => w.put_u16(*v),
            Value::U32(v) => w.put_u32(*v),
            Value::U64(v) => w.put_u64(*v),
            Value::I8(v) => w.put_i8(*v),
            Value::I16(v) => w.put_i16(*v),
            Value::I32(v) => w.put_i32(*v),
            Value::I64(v) => w.put_i64(*v),
            Value::F32(v) => w.put_f32(*v),
            Value::F64(v) => w.put_f64(*v),
            Value::Bool(v) => w.put_bool(*v),
            Value::Bytes(v) => w.put_bytes(v),
            Value::Str(v) => w.put_str(v),
            Value::Array(v) => w.put(v),
        }
    }

    /// Reads a value of the same kind as `self`.
    fn get_like(&self, r: &mut Reader<'_>) -> Result<Value, SerError> {
        Ok(match self {
            Value::U8(_) => Value::U8(r.get_u8()?),
            Value::U16(_) => Value::U16(r.get_u16()?),
            Value::U32(_) => Value::U32(r.get_u32()?),
            Value::U64(_) => Value::U64(r.get_u64()?),
            Value::I8(_) => Value::I8(r.get_i8()?),
            Value::I16(_) => Value::I16(r.get_i16()?),
            Value::I32(_) => Value::I32(r.get_i32()?),
            Value::I64(_) => Value::I64(r.get_i64()?),
            Value::F32(_) => Value::F32(r.get_f32()?),
            Value::F64(_) => Value::F64(r.get_f64()?),
            Value::Bool(_) => Value::Bool(r.get_bool()?),
            Value::Bytes(_) => Value::Bytes(r.get_bytes()?.to_vec()),
            Value::Str(_) => Value::Str(r.get_str()?.to_owned()),
            Value::Array(_) => Value::Array(r.get()?),
        })
    }

    /// Encoded size, from the specification rather than the implementation.
    fn encoded_len(&self) -> usize {
        match self {
            Value::U8(_) | Value::I8(_) | Value::Bool(_) => 1,
            Value::U16(_) | Value::I16(_) => 2,
            Value::U32(_) | Value::I32(_) | Value::F32(_) => 4,
            Value::U64(_) | Value::I64(_) | Value::F64(_) => 8,
            Value::Bytes(v) => 4 + v.len(),
            Value::Str(v) => 4 + v.len(),
            Value::Array(_) => 6,
        }
    }

    /// Equality with floats compared by bits, so NaNs round-trip exactly.
    fn same(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::F32(a), Value::F32(b)) => a.to_bits() == b.to_bits(),
            (Value::F64(a), Value::F64(b)) => a.to_bits() == b.to_bits(),
            _ => format!("{self:?}") == format!("{other:?}"),
        }
    }
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u8>().prop_map(Value::U8),
        any::<u16>().prop_map(Value::U16),
        any::<u32>().prop_map(Value::U32),
        any::<u64>().prop_map(Value::U64),
        any::<i8>().prop_map(Value::I8),
        any::<i16>().prop_map(Value::I16),
        any::<i32>().prop_map(Value::I32),
        any::<i64>().prop_map(Value::I64),
        any::<u32>().prop_map(|b| Value::F32(f32::from_bits(b))),
        any::<u64>().prop_map(|b| Value::F64(f64::from_bits(b))),
        any::<bool>().prop_map(Value::Bool),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::Bytes),
        ".{0,12}".prop_map(Value::Str),
        any::<[u16; 3]>().prop_map(Value::Array),
    ]
}

fn encode(values: &[Value]) -> Vec<u8> {
    let total: usize = values.iter().map(Value::encoded_len).sum();
    let mut buf = vec![0u8; total];
    let mut w = Writer::new(&mut buf);
    for v in values {
        v.put(&mut w).expect("buffer sized from the specification");
    }
    assert_eq!(w.position(), total);
    buf
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn round_trip(values in proptest::collection::vec(value(), 0..24)) {
        let buf = encode(&values);
        let mut r = Reader::new(&buf);
        for v in &values {
            let back = v.get_like(&mut r).expect("round trip");
            prop_assert!(v.same(&back), "{v:?} read back as {back:?}");
        }
        prop_assert_eq!(r.remaining(), 0);
    }

    /// A writer over any buffer shorter than the encoding fails, and what it
    /// reports as written is exactly the values that fit whole.
    #[test]
    fn truncated_write_fails_without_partial_values(
        values in proptest::collection::vec(value(), 1..16),
        cut in any::<prop::sample::Index>(),
    ) {
        let full = encode(&values);
        let len = cut.index(full.len());
        let mut buf = vec![0u8; len];
        let mut w = Writer::new(&mut buf);
        let mut whole = 0;
        let mut failed = false;
        for v in &values {
            let before = w.position();
            match v.put(&mut w) {
                Ok(()) => whole += v.encoded_len(),
                Err(SerError::BufferTooSmall { needed, available }) => {
                    prop_assert_eq!(w.position(), before);
                    prop_assert_eq!(needed, v.encoded_len());
                    prop_assert_eq!(available, len - before);
                    failed = true;
                    break;
                }
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
            }
        }
        prop_assert!(failed, "{len} of {} bytes held everything", full.len());
        prop_assert_eq!(w.position(), whole);
        prop_assert_eq!(w.written(), &full[..whole]);
    }

    /// A reader over any prefix of the encoding reads the values that are
    /// whole in it, then fails with UnexpectedEnd without moving.
    #[test]
    fn truncated_read_fails(
        values in proptest::collection::vec(value(), 1..16),
        cut in any::<prop::sample::Index>(),
    ) {
        let full = encode(&values);
        let len = cut.index(full.len());
        let mut r = Reader::new(&full[..len]);
        let mut failed = false;
        for v in &values {
            let before = r.position();
            match v.get_like(&mut r) {
                Ok(back) => prop_assert!(v.same(&back)),
                Err(SerError::UnexpectedEnd { .. }) => {
                    prop_assert_eq!(r.position(), before);
                    failed = true;
                    break;
                }
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
            }
        }
        prop_assert!(failed);
    }
}

#[test]
fn exact_bytes() {
    let mut buf = [0u8; 64];
    let mut w = Writer::new(&mut buf);
    w.put_u32(0x0102_0304).unwrap();
    w.put_i16(-2).unwrap();
    w.put_f32(1.0).unwrap();
    w.put_bool(true).unwrap();
    w.put_str("hi").unwrap();
    w.put_f64(-0.0).unwrap();
    w.put(&[7u8, 8]).unwrap();
    let expected: &[u8] = &[
        4, 3, 2, 1, // u32
        0xFE, 0xFF, // i16 -2
        0x00, 0x00, 0x80, 0x3F, // f32 1.0
        1,    // bool
        2, 0, 0, 0, b'h', b'i', // str
        0, 0, 0, 0, 0, 0, 0, 0x80, // f64 -0.0
        7, 8, // [u8; 2], no prefix
    ];
    assert_eq!(w.written(), expected);
}

#[test]
fn invalid_bool_is_refused_without_consuming() {
    let buf = [2u8];
    let mut r = Reader::new(&buf);
    assert_eq!(r.get_bool(), Err(SerError::InvalidBool(2)));
    assert_eq!(r.position(), 0);
    assert_eq!(r.get::<bool>(), Err(SerError::InvalidBool(2)));
}

#[test]
fn invalid_utf8_is_refused_without_consuming() {
    let buf = [2u8, 0, 0, 0, 0xC3, 0x28];
    let mut r = Reader::new(&buf);
    assert_eq!(r.get_str(), Err(SerError::InvalidUtf8));
    assert_eq!(r.position(), 0);
    // The same bytes are a fine byte string.
    assert_eq!(r.get_bytes(), Ok(&[0xC3, 0x28][..]));
}

#[test]
fn length_prefix_past_the_end() {
    let buf = [10u8, 0, 0, 0, 1, 2, 3];
    let mut r = Reader::new(&buf);
    assert_eq!(
        r.get_bytes(),
        Err(SerError::UnexpectedEnd {
            needed: 10,
            available: 3
        })
    );
    assert_eq!(r.position(), 0);
    assert_eq!(r.remaining(), 7);
}

#[test]
fn borrowed_strings_point_into_the_input() {
    let mut buf = [0u8; 32];
    let mut w = Writer::new(&mut buf);
    w.put("shared").unwrap();
    w.put(&b"bytes"[..]).unwrap();
    let len = w.position();
    let mut r = Reader::new(&buf[..len]);
    let s: &str = r.get().unwrap();
    let b: &[u8] = r.get().unwrap();
    assert_eq!((s, b), ("shared", &b"bytes"[..]));
    assert_eq!(s.as_ptr(), buf[4..].as_ptr());
}

#[test]
fn owned_strings_and_vectors() {
    let mut buf = [0u8; 32];
    let mut w = Writer::new(&mut buf);
    w.put(&String::from("owned")).unwrap();
    w.put(&vec![1u8, 2, 3]).unwrap();
    let len = w.position();
    let mut r = Reader::new(&buf[..len]);
    assert_eq!(r.get::<String>().unwrap(), "owned");
    assert_eq!(r.get::<Vec<u8>>().unwrap(), vec![1, 2, 3]);
}

#[derive(Clone, Debug, PartialEq)]
struct Extent {
    offset: u64,
    len: u32,
}
impl_serialize_fields!(Extent { offset, len });

#[derive(Clone, Debug, PartialEq)]
struct Request<'a> {
    name: &'a str,
    extents: [Extent; 2],
    weight: f64,
    sync: bool,
}
impl_serialize_fields!(Request<'a> { name, extents, weight, sync });

#[derive(Clone, Debug, PartialEq)]
struct Batch {
    id: u16,
    tag: String,
    first: Extent,
}
impl_serialize_fields!(Batch { id, tag, first });

fn sample_request() -> Request<'static> {
    Request {
        name: "journal",
        extents: [
            Extent {
                offset: 4096,
                len: 512,
            },
            Extent {
                offset: 1 << 40,
                len: 7,
            },
        ],
        weight: 0.25,
        sync: true,
    }
}

#[test]
fn nested_structs_round_trip() {
    let req = sample_request();
    let batch = Batch {
        id: 9,
        tag: "t".into(),
        first: req.extents[1].clone(),
    };
    let mut buf = [0u8; 128];
    let mut w = Writer::new(&mut buf);
    w.put(&req).unwrap();
    w.put(&batch).unwrap();
    let len = w.position();
    // name (4 + 7) + 2 extents (12 each) + f64 + bool, then 2 + (4 + 1) + 12.
    assert_eq!(len, 11 + 24 + 8 + 1 + 2 + 5 + 12);
    assert_eq!(serialized_len(&req), Ok(11 + 24 + 8 + 1));
    let mut r = Reader::new(&buf[..len]);
    assert_eq!(r.get::<Request>().unwrap(), req);
    assert_eq!(r.get::<Batch>().unwrap(), batch);
    assert_eq!(r.remaining(), 0);
}

#[test]
fn failing_composite_put_and_get_do_not_move() {
    let req = sample_request();
    let needed = serialized_len(&req).unwrap();
    let mut buf = vec![0u8; needed - 1];
    let mut w = Writer::new(&mut buf);
    w.put_u8(0xAA).unwrap();
    // The name and extents fit, the rest does not; the error is about the
    // whole value.
    assert_eq!(
        w.put(&req),
        Err(SerError::BufferTooSmall {
            needed,
            available: needed - 2
        })
    );
    assert_eq!(w.position(), 1);

    let mut full = vec![0u8; needed];
    let mut w = Writer::new(&mut full);
    w.put(&req).unwrap();
    let mut r = Reader::new(&full[..needed - 1]);
    assert!(matches!(
        r.get::<Request>(),
        Err(SerError::UnexpectedEnd { .. })
    ));
    assert_eq!(r.position(), 0);
}

#[test]
fn serialized_len_matches_the_bytes_written() {
    let batch = Batch {
        id: 1,
        tag: "a somewhat longer tag".into(),
        first: Extent { offset: 0, len: 0 },
    };
    let len = serialized_len(&batch).unwrap();
    let mut buf = vec![0u8; len];
    let mut w = Writer::new(&mut buf);
    w.put(&batch).unwrap();
    assert_eq!(w.position(), len);
    assert_eq!(w.remaining(), 0);
}

#[test]
fn errors_display() {
    let text = SerError::BufferTooSmall {
        needed: 8,
        available: 3,
    }
    .to_string();
    assert!(text.contains('8') && text.contains('3'), "{text}");
    assert!(SerError::InvalidBool(7).to_string().contains("0x07"));
}
