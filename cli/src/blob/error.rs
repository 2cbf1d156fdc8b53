//! Why a store command's call failed, however it reached the store.

use std::fmt;

use tandem_blob::wire::code;

/// Why a store call failed.
#[derive(Debug)]
pub(super) enum AccessError {
    /// The store refused it: its code ([`tandem_blob::wire::code`]) and
    /// what it said.
    Refused { code: i32, words: String },
    /// It did not get an answer (the runtime died, the input or output
    /// failed, ...).
    Failed(String),
}

impl AccessError {
    /// Whether the store said there is no such blob.
    pub(super) fn is_not_found(&self) -> bool {
        matches!(self, AccessError::Refused { code, .. } if *code == code::NOT_FOUND)
    }
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessError::Refused { words, .. } | AccessError::Failed(words) => f.write_str(words),
        }
    }
}

/// Why a put failed, and how much of its input the store took before.
#[derive(Debug)]
pub(super) struct PutError {
    /// Bytes of the input written (at the put's offset) by chunks that
    /// completed: a put in chunks is all or nothing per chunk.
    pub(super) written: u64,
    pub(super) error: AccessError,
}

impl From<AccessError> for PutError {
    fn from(error: AccessError) -> Self {
        PutError { written: 0, error }
    }
}
