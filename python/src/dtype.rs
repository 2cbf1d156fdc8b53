//! Element types by name, as NumPy, PyTorch and CuPy spell them
//! (`"float32"`), and their DLPack codes.

use crate::errors::{Error, Kind};
use crate::layout::{type_code, DLDataType};

/// One element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dtype(pub(crate) DLDataType);

/// Every name a view takes, with its code and width in bits.
const NAMES: &[(&str, u8, u8)] = &[
    ("bool", type_code::BOOL, 8),
    ("int8", type_code::INT, 8),
    ("int16", type_code::INT, 16),
    ("int32", type_code::INT, 32),
    ("int64", type_code::INT, 64),
    ("uint8", type_code::UINT, 8),
    ("uint16", type_code::UINT, 16),
    ("uint32", type_code::UINT, 32),
    ("uint64", type_code::UINT, 64),
    ("float16", type_code::FLOAT, 16),
    ("float32", type_code::FLOAT, 32),
    ("float64", type_code::FLOAT, 64),
    ("bfloat16", type_code::BFLOAT, 16),
    ("complex64", type_code::COMPLEX, 64),
    ("complex128", type_code::COMPLEX, 128),
];

impl Dtype {
    /// Raw bytes: what a buffer is before it is viewed as anything else.
    pub(crate) const BYTES: Dtype = Dtype(DLDataType {
        code: type_code::UINT,
        bits: 8,
        lanes: 1,
    });

    /// The type called `name`.
    pub(crate) fn parse(name: &str) -> Result<Self, Error> {
        NAMES
            .iter()
            .find(|(known, _, _)| *known == name)
            .map(|&(_, code, bits)| {
                Dtype(DLDataType {
                    code,
                    bits,
                    lanes: 1,
                })
            })
            .ok_or_else(|| {
                let known: Vec<&str> = NAMES.iter().map(|(n, _, _)| *n).collect();
                Error::new(
                    Kind::Dtype,
                    format!("unknown dtype {name:?}: one of {}", known.join(", ")),
                )
            })
    }

    /// Its name, `None` for a type no name here stands for.
    pub(crate) fn name(self) -> Option<&'static str> {
        NAMES
            .iter()
            .find(|&&(_, code, bits)| {
                self.0.code == code && self.0.bits == bits && self.0.lanes == 1
            })
            .map(|(name, _, _)| *name)
    }

    /// Bytes per element; `None` for packed types narrower than a byte.
    pub(crate) fn itemsize(self) -> Option<usize> {
        let bits = usize::from(self.0.bits) * usize::from(self.0.lanes);
        (bits % 8 == 0 && bits > 0).then_some(bits / 8)
    }
}
