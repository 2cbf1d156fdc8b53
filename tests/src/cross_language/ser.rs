//! tandem/ser.h against tandem-shm-core's serializer: C++ writes what Rust
//! reads and the reverse, byte for byte; undersized buffers, truncated input
//! and invalid bools fail the same way on both sides, with no partial value.

use proptest::prelude::*;
use tandem_device_kernels::names;
use tandem_hal::{GpuApi, KernelArg};
use tandem_shm_core::impl_serialize_fields;
use tandem_shm_core::{serialized_len, Reader, SerError, Writer};

use super::harness::{check, Gpu};

/// `tandem::ser_status` values.
mod ser_status {
    pub const OK: u64 = 0;
    pub const BUFFER_TOO_SMALL: u64 = 1;
    pub const UNEXPECTED_END: u64 = 2;
    pub const INVALID_BOOL: u64 = 3;
}

/// The record of kernels/ser.cu, field for field.
#[derive(Clone, Debug)]
struct Sample {
    pub a: u8,
    pub b: u16,
    pub c: u32,
    pub d: u64,
    pub e: i8,
    pub f: i16,
    pub g: i32,
    pub h: i64,
    pub x: f32,
    pub y: f64,
    pub flag: bool,
    pub bytes: Vec<u8>,
}
impl_serialize_fields!(Sample {
    a,
    b,
    c,
    d,
    e,
    f,
    g,
    h,
    x,
    y,
    flag,
    bytes
});

/// Where the bool of a serialized sample is: after the fixed-width fields.
const BOOL_OFFSET: usize = 1 + 2 + 4 + 8 + 1 + 2 + 4 + 8 + 4 + 8;

/// Scalar words of a sample (`SAMPLE_SCALARS` of kernels/ser.cu).
const SCALARS: usize = 11;

impl Sample {
    /// The scalar fields as the kernels take them: bit patterns,
    /// zero-extended (so NaN payloads compare exactly).
    pub fn words(&self) -> [u64; SCALARS] {
        [
            u64::from(self.a),
            u64::from(self.b),
            u64::from(self.c),
            self.d,
            u64::from(self.e as u8),
            u64::from(self.f as u16),
            u64::from(self.g as u32),
            self.h as u64,
            u64::from(self.x.to_bits()),
            self.y.to_bits(),
            u64::from(self.flag),
        ]
    }
}

/// Any sample, NaNs with payloads and infinities included.
fn samples() -> impl Strategy<Value = Sample> {
    let scalars = (
        any::<(u8, u16, u32, u64)>(),
        any::<(i8, i16, i32, i64)>(),
        any::<u32>().prop_map(f32::from_bits),
        any::<u64>().prop_map(f64::from_bits),
        any::<bool>(),
    );
    (scalars, proptest::collection::vec(any::<u8>(), 0..64)).prop_map(
        |(((a, b, c, d), (e, f, g, h), x, y, flag), bytes)| Sample {
            a,
            b,
            c,
            d,
            e,
            f,
            g,
            h,
            x,
            y,
            flag,
            bytes,
        },
    )
}

/// Rust's serialization of `sample`.
fn rust_bytes(sample: &Sample) -> Vec<u8> {
    let mut buf = vec![0u8; serialized_len(sample).expect("length")];
    Writer::new(&mut buf).put(sample).expect("fits");
    buf
}

/// C++ writes `sample` into a buffer of `buf_len` bytes; Rust reads it back
/// equal (bytes identical to Rust's own serialization). When the buffer is
/// too small both writers fail alike: same needed length, no partial record.
fn cpp_writes_rust_reads<A: GpuApi>(gpu: &Gpu<A>, sample: &Sample, buf_len: usize) {
    let buf = gpu.shared(buf_len.max(1));
    let words = gpu.shared(SCALARS * 8);
    for (i, &w) in sample.words().iter().enumerate() {
        // SAFETY: in bounds (SCALARS words); no kernel runs yet.
        unsafe { words.host().cast::<u64>().add(i).write(w) };
    }
    let bytes = gpu.shared(sample.bytes.len().max(1));
    // SAFETY: the buffer holds at least `bytes.len()` bytes; no kernel runs.
    unsafe {
        bytes
            .host()
            .copy_from_nonoverlapping(sample.bytes.as_ptr(), sample.bytes.len())
    };
    let out = gpu.shared(3 * 8);
    // SAFETY: every pointer covers what the kernel reads or writes.
    unsafe {
        gpu.run_one(
            names::TANDEM_SER_WRITE_SAMPLE,
            &[
                buf.arg(),
                KernelArg::U64(buf_len as u64),
                words.arg(),
                bytes.arg(),
                KernelArg::U64(sample.bytes.len() as u64),
                out.arg(),
            ],
        )
    };
    let (status, position, needed) = (out.read::<u64>(0), out.read::<u64>(1), out.read::<u64>(2));
    let want = rust_bytes(sample);
    let mut rust_buf = vec![0u8; buf_len];
    let mut rust_writer = Writer::new(&mut rust_buf);
    match rust_writer.put(sample) {
        Ok(()) => {
            assert_eq!((status, position), (ser_status::OK, want.len() as u64));
            let written = &buf.bytes()[..want.len()];
            assert_eq!(written, &want[..], "C++ bytes are Rust's bytes");
            let back: Sample = Reader::new(written).get().expect("Rust reads C++'s sample");
            assert_eq!(back.words(), sample.words());
            assert_eq!(back.bytes, sample.bytes);
        }
        Err(SerError::BufferTooSmall {
            needed: rust_needed,
            available,
        }) => {
            assert_eq!(available, buf_len);
            assert_eq!(
                (status, position),
                (ser_status::BUFFER_TOO_SMALL, 0),
                "no partial record"
            );
            assert_eq!(
                needed, rust_needed as u64,
                "both report the whole record's length"
            );
            assert_eq!(rust_writer.position(), 0);
        }
        Err(other) => panic!("writing a sample cannot fail with {other:?}"),
    }
}

/// What `tandem_ser_read_sample` makes of `input`: (status, position,
/// scalar words, the byte string).
fn cpp_read<A: GpuApi>(gpu: &Gpu<A>, input: &[u8]) -> (u64, u64, [u64; SCALARS], Vec<u8>) {
    let buf = gpu.shared(input.len().max(1));
    // SAFETY: the buffer holds at least `input.len()` bytes; no kernel runs.
    unsafe {
        buf.host()
            .copy_from_nonoverlapping(input.as_ptr(), input.len())
    };
    let words = gpu.shared(SCALARS * 8);
    let out = gpu.shared(4 * 8);
    // SAFETY: every pointer covers what the kernel reads or writes.
    unsafe {
        gpu.run_one(
            names::TANDEM_SER_READ_SAMPLE,
            &[
                buf.arg(),
                KernelArg::U64(input.len() as u64),
                words.arg(),
                out.arg(),
            ],
        )
    };
    let scalars = core::array::from_fn(|i| words.read::<u64>(i));
    let (offset, len) = (out.read::<u64>(2) as usize, out.read::<u64>(3) as usize);
    let string = if out.read::<u64>(0) == ser_status::OK {
        input[offset..offset + len].to_vec()
    } else {
        Vec::new()
    };
    (out.read(0), out.read(1), scalars, string)
}

/// Rust writes `sample`, C++ reads it back equal; `cut` bytes short it
/// fails with unexpected_end and consumes nothing, and a bool byte of 2 is
/// refused as Rust refuses it.
fn rust_writes_cpp_reads<A: GpuApi>(gpu: &Gpu<A>, sample: &Sample, cut: usize) {
    let input = rust_bytes(sample);
    let (status, position, words, bytes) = cpp_read(gpu, &input);
    assert_eq!((status, position), (ser_status::OK, input.len() as u64));
    assert_eq!(words, sample.words(), "C++ reads Rust's scalars");
    assert_eq!(bytes, sample.bytes, "C++ reads Rust's byte string");

    let short = &input[..input.len() - cut.clamp(1, input.len())];
    let (status, position, _, _) = cpp_read(gpu, short);
    assert_eq!((status, position), (ser_status::UNEXPECTED_END, 0));
    assert!(matches!(
        Reader::new(short).get::<Sample>(),
        Err(SerError::UnexpectedEnd { .. })
    ));

    let mut bad_bool = input.clone();
    bad_bool[BOOL_OFFSET] = 2;
    let (status, position, _, _) = cpp_read(gpu, &bad_bool);
    assert_eq!((status, position), (ser_status::INVALID_BOOL, 0));
    assert!(matches!(
        Reader::new(&bad_bool).get::<Sample>(),
        Err(SerError::InvalidBool(2))
    ));
}

/// C++ writes random records into buffers from 20 bytes short of the record
/// to 20 bytes over, and Rust reads what it wrote.
pub fn cpp_writes_what_rust_reads<A: GpuApi>(gpu: &Gpu<A>) {
    check(file!(), 24, (samples(), -20i64..20), |(sample, spare)| {
        let len = serialized_len(&sample).unwrap() as i64 + spare;
        cpp_writes_rust_reads(gpu, &sample, len.max(0) as usize);
        Ok(())
    });
}

/// Rust writes random records, and C++ reads them, whole and cut short.
pub fn rust_writes_what_cpp_reads<A: GpuApi>(gpu: &Gpu<A>) {
    check(file!(), 24, (samples(), 1usize..100), |(sample, cut)| {
        rust_writes_cpp_reads(gpu, &sample, cut);
        Ok(())
    });
}

/// One `#[test]` per behaviour above for backend `$api`, in a module
/// `ser`.
#[doc(hidden)]
#[macro_export]
macro_rules! cross_language_ser_tests {
    ($api:ty) => {
        mod ser {
            $crate::stamp_cross_language_tests!($api, ser: [
                cpp_writes_what_rust_reads,
                rust_writes_what_cpp_reads,
            ]);
        }
    };
}
