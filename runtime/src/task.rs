//! Tasks: what a submitter puts in a future and what a waiter gets back.
//!
//! A task's bytes are a [`TaskHeader`] (pool, method, argument length,
//! version) followed by the serialized arguments. A *copy future* carries them
//! in its copy space (usable from the host and from kernels); a *pointer
//! future* carries them in a separate heap block named by its payload (zero
//! copy, runtime-internal). Either way the output comes back serialized in
//! the copy space, with a return code: 0 or a handler's own code, or one of
//! the `RC_*` codes below, which the runtime stores itself.

use std::fmt;

use tandem_shm_core::FutureError;
use tandem_shm_core::{serialized_len, Deserialize, SerError, Serialize, Writer};
use tandem_shm_core::{RC_OUTPUT_FAILED, RC_OUTPUT_TOO_LARGE, RC_RESERVED_MAX};

use crate::layout::{TaskHeader, TASK_HEADER_BYTES, TASK_VERSION};
// The codes the runtime stores itself: part of the task API, defined with
// the rest of the wire format.
pub use crate::layout::{
    RC_BAD_ARGS, RC_BAD_TASK, RC_HANDLER_PANICKED, RC_UNKNOWN_METHOD, RC_UNKNOWN_POOL,
};

/// A pool (module) id.
pub type PoolId = u32;
/// A method id within a pool.
pub type MethodId = u32;

/// The smallest copy space a future may have: a task header and a little.
pub(crate) const MIN_COPY_SPACE: u32 = 64;

/// What a return code means, for messages.
pub(crate) fn describe_rc(rc: i32) -> String {
    match rc {
        0 => "ok".into(),
        RC_UNKNOWN_POOL => "unknown pool".into(),
        RC_UNKNOWN_METHOD => "unknown method".into(),
        RC_BAD_TASK => "malformed task".into(),
        RC_BAD_ARGS => "arguments do not deserialize".into(),
        RC_HANDLER_PANICKED => "handler panicked".into(),
        RC_OUTPUT_TOO_LARGE => "output larger than the copy space".into(),
        RC_OUTPUT_FAILED => "output could not be written".into(),
        rc if rc <= RC_RESERVED_MAX => format!("reserved code {rc}"),
        rc => format!("handler code {rc}"),
    }
}

/// A typed task definition: its arguments are `Self`, serialized.
pub trait Task: Serialize {
    /// The pool that handles it.
    const POOL: PoolId;
    /// Its method id within the pool.
    const METHOD: MethodId;
    /// What a successful handler returns.
    type Output: for<'a> Deserialize<'a>;
}

/// How a submitted task ended, other than successfully.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum TaskError {
    /// The task's serialized form does not fit the future's copy space.
    ArgsTooLarge {
        /// Bytes the header and arguments take.
        needed: usize,
        /// Bytes of copy space.
        available: usize,
    },
    /// The arguments could not be serialized.
    Ser(SerError),
    /// The handler (or the runtime) completed it with this nonzero code.
    Failed {
        /// The code: a handler's own, or one of the runtime's `RC_*`.
        return_code: i32,
    },
    /// Completed with code 0, but the output did not deserialize as expected.
    BadOutput(SerError),
    /// The stop flag was raised before completion.
    Stopped,
    /// The deadline passed before completion.
    TimedOut,
    /// The runtime died (its process gone, or it shut down) before completion.
    RuntimeDead {
        /// The runtime's process id.
        pid: u32,
    },
    /// The queue stayed full past the deadline (back-pressure; nothing dropped).
    QueueFull,
    /// The segment's heap has no room for another future now.
    OutOfMemory(String),
    /// The future itself refused an operation (e.g. a corrupt output length
    /// written by a broken peer).
    Future(FutureError),
    /// No served device has this index.
    NoSuchDevice {
        /// The index asked for.
        device: usize,
        /// How many devices the runtime serves.
        devices: usize,
    },
    /// The segment has no GPU inbox (it is not a device segment).
    NoGpuInbox,
    /// This client's heap (its quota, `client_heap_bytes`) is used up by the
    /// futures it holds; other clients are not affected.
    ClientQuota {
        /// The client's heap, in bytes.
        quota_bytes: u64,
        /// Futures the client holds.
        futures: u64,
    },
    /// This client's heap has the bytes free for the request, but not in
    /// one piece: its live blocks sit between the free ones, so no free
    /// block (merged with its free neighbours as far as they go) holds it.
    /// Freeing what lies between, or smaller requests, help; raising
    /// `client_heap_bytes` does too.
    ClientHeapFragmented {
        /// The client's heap, in bytes.
        quota_bytes: u64,
        /// Bytes the request needs (its block, header included).
        needed_bytes: u64,
        /// Bytes of the heap that are free.
        free_bytes: u64,
        /// The largest block a request could get, its free neighbours
        /// merged in, in bytes (smaller than `needed_bytes`).
        largest_free_block: u64,
    },
    /// The client was made in another process, which this one was forked
    /// from: its slot and futures are that process's (attach again here).
    ForkedClient {
        /// The process the client was made in.
        pid: u32,
    },
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ArgsTooLarge { needed, available } => write!(
                f,
                "task needs {needed} bytes but the copy space holds {available}"
            ),
            Self::Ser(e) => write!(f, "cannot serialize the arguments: {e}"),
            Self::Failed { return_code } => {
                write!(
                    f,
                    "task failed: {} ({return_code})",
                    describe_rc(*return_code)
                )
            }
            Self::BadOutput(e) => write!(f, "task output does not deserialize: {e}"),
            Self::Stopped => f.write_str("stopped before the task completed"),
            Self::TimedOut => f.write_str("deadline passed before the task completed"),
            Self::RuntimeDead { pid } => {
                write!(f, "runtime (pid {pid}) died before the task completed")
            }
            Self::QueueFull => f.write_str("queue stayed full until the deadline"),
            Self::OutOfMemory(why) => write!(f, "no memory for the task: {why}"),
            Self::Future(e) => write!(f, "future: {e}"),
            Self::NoSuchDevice { device, devices } => {
                write!(f, "no device {device}: the runtime serves {devices}")
            }
            Self::NoGpuInbox => f.write_str("the segment has no GPU inbox"),
            Self::ClientQuota {
                quota_bytes,
                futures,
            } => write!(
                f,
                "client quota of {quota_bytes} bytes used up by {futures} outstanding futures: \
                 wait for or drop pending tasks, or raise client_heap_bytes"
            ),
            Self::ClientHeapFragmented {
                quota_bytes,
                needed_bytes,
                free_bytes,
                largest_free_block,
            } => write!(
                f,
                "client heap fragmented: {free_bytes} of its {quota_bytes} bytes are free, but \
                 the largest free block has {largest_free_block} and the request needs \
                 {needed_bytes}: free the buffers or futures between them, or raise \
                 client_heap_bytes"
            ),
            Self::ForkedClient { pid } => write!(
                f,
                "this runtime client was made in process {pid}, which this process was forked \
                 from: its client slot is that process's; attach a client of this process's own"
            ),
        }
    }
}

impl std::error::Error for TaskError {}

/// Serializes `header` + `args` into `buf`; returns the bytes written, or
/// [`TaskError::ArgsTooLarge`] with the full length when they do not fit
/// (never truncated).
pub(crate) fn encode_task<T: Serialize + ?Sized>(
    pool: PoolId,
    method: MethodId,
    args: &T,
    buf: &mut [u8],
) -> Result<usize, TaskError> {
    let args_len = serialized_len(args).map_err(TaskError::Ser)?;
    let needed = TASK_HEADER_BYTES + args_len;
    let args_len = u32::try_from(args_len).map_err(|_| TaskError::Ser(SerError::LengthOverflow))?;
    if needed > buf.len() {
        return Err(TaskError::ArgsTooLarge {
            needed,
            available: buf.len(),
        });
    }
    let mut w = Writer::new(buf);
    let header = TaskHeader {
        pool,
        method,
        args_len,
        version: TASK_VERSION,
    };
    w.put(&header).map_err(TaskError::Ser)?;
    w.put(args).map_err(TaskError::Ser)?;
    Ok(w.position())
}

/// Splits task bytes into the header and the argument bytes, checking the
/// version and that the lengths agree. `None`: not a task.
pub(crate) fn decode_task(bytes: &[u8]) -> Option<(TaskHeader, &[u8])> {
    let header = TaskHeader::read(bytes)?;
    let args = bytes.get(TASK_HEADER_BYTES..)?;
    (header.version == TASK_VERSION && args.len() == header.args_len as usize)
        .then_some((header, args))
}

/// `math` pool: the tasks the demo, tests and benchmarks use (and the echo
/// kernel sends). Registered by [`crate::Registry::with_builtins`].
pub mod math {
    use tandem_shm_core::impl_serialize_fields;

    use super::{MethodId, PoolId, Task};
    use crate::layout::math_pool::SUM_VALUES;

    // The ids are wire constants: kernels send math tasks too.
    pub use crate::layout::math_pool::{ADD, NOOP, POOL, SUM};

    /// Arguments of [`ADD`].
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct Add {
        /// The first addend.
        pub a: u64,
        /// The second addend.
        pub b: u64,
    }
    impl_serialize_fields!(Add { a, b });

    impl Task for Add {
        const POOL: PoolId = POOL;
        const METHOD: MethodId = ADD;
        type Output = u64;
    }

    /// Arguments of [`SUM`].
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct Sum {
        /// The values to add up (wrapping).
        pub values: [u64; SUM_VALUES],
    }
    impl_serialize_fields!(Sum { values });

    impl Task for Sum {
        const POOL: PoolId = POOL;
        const METHOD: MethodId = SUM;
        type Output = u64;
    }

    /// Arguments of [`NOOP`] (none).
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    pub struct Noop;

    impl_serialize_fields!(Noop {});

    impl Task for Noop {
        const POOL: PoolId = POOL;
        const METHOD: MethodId = NOOP;
        type Output = Noop;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_and_refusals() {
        let mut buf = [0u8; 64];
        let len = encode_task(1, 2, &math::Add { a: 7, b: 9 }, &mut buf).expect("fits");
        assert_eq!(len, TASK_HEADER_BYTES + 16);
        let (header, args) = decode_task(&buf[..len]).expect("a task");
        assert_eq!((header.pool, header.method, header.args_len), (1, 2, 16));
        // The header alone, as the workers read a pointer task's first bytes.
        assert_eq!(TaskHeader::read(&buf[..TASK_HEADER_BYTES]), Some(header));
        assert_eq!(TaskHeader::read(&buf[..TASK_HEADER_BYTES - 1]), None);
        assert_eq!(args.len(), 16);
        // Lengths that disagree, a short header, a wrong version.
        assert!(decode_task(&buf[..len - 1]).is_none());
        assert!(decode_task(&buf[..10]).is_none());
        let mut wrong_version = buf;
        wrong_version[12] = 9;
        assert!(decode_task(&wrong_version[..len]).is_none());
        // Too large: the full length is reported, nothing truncated.
        assert_eq!(
            encode_task(1, 2, &[0u8; 60][..], &mut buf),
            Err(TaskError::ArgsTooLarge {
                needed: TASK_HEADER_BYTES + 64,
                available: 64
            })
        );
    }

    #[test]
    fn runtime_codes_are_reserved_and_distinct() {
        let codes = [
            RC_UNKNOWN_POOL,
            RC_UNKNOWN_METHOD,
            RC_BAD_TASK,
            RC_BAD_ARGS,
            RC_HANDLER_PANICKED,
            RC_OUTPUT_TOO_LARGE,
            RC_OUTPUT_FAILED,
        ];
        for (i, a) in codes.iter().enumerate() {
            assert!(*a <= RC_RESERVED_MAX);
            assert!(codes[i + 1..].iter().all(|b| a != b));
        }
    }
}
