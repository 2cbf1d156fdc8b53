//! FutureShm: every error, the submit / complete / wait protocol, stop and
//! timeout handling, and a waiter and completer on two mappings of one memfd.

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tandem_shm_core::layout::{future_flags, FutureShmHeader, FUTURE_COPY_SPACE_OFFSET};
use tandem_shm_core::Segment;
use tandem_shm_core::SerError;
use tandem_shm_core::{AllocatorId, ShmPtr};
use tandem_shm_core::{
    FillError, FutureError, FutureShm, WaitOutcome, RC_OUTPUT_FAILED, RC_OUTPUT_TOO_LARGE,
};

/// A 64-byte-aligned heap region.
struct Region {
    lines: Vec<Line>,
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

impl Region {
    fn new(len: usize) -> Self {
        Region {
            lines: vec![Line([0xA5; 64]); len.div_ceil(64)],
        }
    }

    fn ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr().cast()
    }

    fn len(&self) -> usize {
        self.lines.len() * 64
    }
}

const SPACE: u32 = 64;

/// A fresh future with `SPACE` bytes of copy space in `region`.
fn future(region: &mut Region) -> FutureShm<'_> {
    let len = region.len();
    // SAFETY: the region is exclusively borrowed for the handle's lifetime.
    unsafe { FutureShm::init_in(region.ptr(), len, SPACE) }.expect("init")
}

fn header(region: &mut Region) -> *mut FutureShmHeader {
    region.ptr().cast()
}

fn no_stop() -> AtomicU32 {
    AtomicU32::new(0)
}

#[test]
fn required_bytes_is_header_plus_copy_space() {
    assert_eq!(FutureShm::required_bytes(0), FUTURE_COPY_SPACE_OFFSET);
    assert_eq!(
        FutureShm::required_bytes(100),
        FUTURE_COPY_SPACE_OFFSET + 100
    );
}

#[test]
fn init_refuses_bad_regions() {
    let mut region = Region::new(256);
    let base = region.ptr();
    // SAFETY: the region is live and exclusively ours; every call here is
    // expected to refuse its arguments before touching memory.
    unsafe {
        assert_eq!(
            FutureShm::init_in(std::ptr::null_mut(), 256, 8).unwrap_err(),
            FutureError::NullRegion
        );
        assert_eq!(
            FutureShm::init_in(base.add(8), 200, 8).unwrap_err(),
            FutureError::Misaligned {
                address: base as usize + 8,
                required: 16
            }
        );
        assert_eq!(
            FutureShm::init_in(base, 100, 100).unwrap_err(),
            FutureError::RegionTooSmall {
                needed: FUTURE_COPY_SPACE_OFFSET + 100,
                available: 100
            }
        );
    }
}

#[test]
fn attach_checks_stored_copy_space_and_flags() {
    let mut region = Region::new(256);
    let len = region.len();
    let base = region.ptr();
    // SAFETY: the region is live and exclusively used by this test.
    unsafe {
        FutureShm::init_in(base, len, 200).unwrap();
        let attached = FutureShm::attach(base, len).unwrap();
        assert_eq!(attached.copy_space_size(), 200);
        assert_eq!(
            FutureShm::attach(base, 100).unwrap_err(),
            FutureError::RegionTooSmall {
                needed: FUTURE_COPY_SPACE_OFFSET + 200,
                available: 100
            }
        );
        assert_eq!(
            FutureShm::attach(base, 8).unwrap_err(),
            FutureError::RegionTooSmall {
                needed: FUTURE_COPY_SPACE_OFFSET,
                available: 8
            }
        );
        (*base.cast::<FutureShmHeader>())
            .flags
            .store(1 << 9, Ordering::Relaxed);
        assert_eq!(
            FutureShm::attach(base, len).unwrap_err(),
            FutureError::UnknownFlags(1 << 9)
        );
    }
}

#[test]
fn input_round_trip_through_a_second_handle() {
    let mut region = Region::new(256);
    let len = region.len();
    let base = region.ptr();
    // SAFETY: single-threaded; the submitter is done before the completer
    // role starts, and the region outlives both handles.
    unsafe {
        let submitter = FutureShm::init_in(base, len, SPACE).unwrap();
        assert_eq!(submitter.input(), Ok(&[][..]), "no input yet");
        assert_eq!(submitter.write_input_value("job-7"), Ok(9));
        assert_ne!(submitter.flags() & future_flags::COPY_FROM_CLIENT, 0);
        let completer = FutureShm::attach(base, len).unwrap();
        assert_eq!(completer.read_input::<&str>(), Ok("job-7"));
        assert_eq!(completer.input().unwrap().len(), 9);
    }
}

#[test]
fn input_too_large_or_failing_leaves_no_input() {
    let mut region = Region::new(256);
    let f = future(&mut region);
    // SAFETY: single-threaded submitter.
    unsafe {
        f.write_input(|buf| {
            buf[0] = 1;
            Ok::<_, ()>(1)
        })
        .unwrap();
        let big = [0u8; SPACE as usize];
        assert_eq!(
            f.write_input_value(&big[..]),
            Err(FutureError::CopySpaceTooSmall {
                needed: 4 + SPACE as usize,
                available: SPACE as usize
            })
        );
        assert_eq!(f.flags() & future_flags::COPY_FROM_CLIENT, 0);
        assert_eq!(f.input(), Ok(&[][..]));

        assert_eq!(
            f.write_input(|_| Err::<usize, _>("disk on fire")),
            Err(FillError::Fill("disk on fire"))
        );
        assert_eq!(f.input(), Ok(&[][..]));
    }
}

#[test]
fn complete_then_wait_and_read_output() {
    let mut region = Region::new(256);
    let f = future(&mut region);
    assert_eq!(f.output(), Err(FutureError::NotComplete));
    assert_eq!(f.return_code(), Err(FutureError::NotComplete));
    assert!(!f.is_complete());
    // SAFETY: single-threaded; this test is the only completer.
    unsafe { f.complete_value(7, &1234u32) }.unwrap();
    assert!(f.is_complete());
    assert_eq!(
        f.wait(&no_stop(), || false),
        WaitOutcome::Completed { return_code: 7 }
    );
    assert_eq!(f.return_code(), Ok(7));
    assert_eq!(f.output(), Ok(&1234u32.to_le_bytes()[..]));
    assert_eq!(f.read_output::<u32>(), Ok(1234));
    // SAFETY: as above.
    assert_eq!(unsafe { f.input() }, Err(FutureError::AlreadyComplete));
    // SAFETY: as above.
    let late = unsafe { f.write_input_value(&1u8) };
    assert_eq!(late, Err(FutureError::AlreadyComplete));
}

#[test]
fn second_complete_is_refused_and_changes_nothing() {
    let mut region = Region::new(256);
    let f = future(&mut region);
    // SAFETY: single-threaded sole completer.
    unsafe {
        f.complete_value(1, "first").unwrap();
        assert_eq!(
            f.complete_value(2, "second"),
            Err(FutureError::AlreadyComplete)
        );
    }
    assert_eq!(f.return_code(), Ok(1));
    assert_eq!(f.read_output::<&str>(), Ok("first"));
}

#[test]
fn output_too_large_completes_with_error_code() {
    let mut region = Region::new(256);
    let f = future(&mut region);
    let big = vec![7u8; SPACE as usize];
    // SAFETY: single-threaded sole completer.
    let result = unsafe { f.complete_value(0, &big) };
    assert_eq!(
        result,
        Err(FutureError::CopySpaceTooSmall {
            needed: 4 + SPACE as usize,
            available: SPACE as usize
        })
    );
    assert_eq!(
        f.wait(&no_stop(), || false),
        WaitOutcome::Completed {
            return_code: RC_OUTPUT_TOO_LARGE
        }
    );
    assert_eq!(f.output(), Ok(&[][..]), "never truncated");
}

#[test]
fn closure_reported_sizes_and_failures() {
    let mut region = Region::new(256);
    let f = future(&mut region);
    // SAFETY: single-threaded sole completer.
    let result = unsafe { f.complete(0, |buf| Ok::<_, ()>(buf.len() + 1)) };
    assert_eq!(
        result,
        Err(FillError::Future(FutureError::CopySpaceTooSmall {
            needed: SPACE as usize + 1,
            available: SPACE as usize
        }))
    );
    assert_eq!(f.return_code(), Ok(RC_OUTPUT_TOO_LARGE));

    let mut region = Region::new(256);
    let f = future(&mut region);
    // SAFETY: as above.
    let result = unsafe { f.complete(0, |_| Err::<usize, _>(5u8)) };
    assert_eq!(result, Err(FillError::Fill(5)));
    assert_eq!(f.return_code(), Ok(RC_OUTPUT_FAILED));
    assert_eq!(f.output(), Ok(&[][..]));
}

#[test]
fn corrupt_lengths_are_refused() {
    let mut region = Region::new(256);
    let hdr = header(&mut region);
    let f = future(&mut region);
    // SAFETY: single-threaded; the header is initialised, and a peer writing
    // nonsense lengths is what is simulated.
    unsafe {
        f.write_input_value(&1u8).unwrap();
        (*hdr).input_len.store(SPACE + 1, Ordering::Relaxed);
        assert_eq!(
            f.input(),
            Err(FutureError::CorruptLength {
                len: SPACE + 1,
                copy_space: SPACE
            })
        );
        f.complete_value(0, &1u8).unwrap();
        (*hdr).output_len.store(u32::MAX, Ordering::Relaxed);
    }
    assert_eq!(
        f.output(),
        Err(FutureError::CorruptLength {
            len: u32::MAX,
            copy_space: SPACE
        })
    );
}

#[test]
fn wait_with_stop_raised_stops() {
    let mut region = Region::new(256);
    let f = future(&mut region);
    let stop = AtomicU32::new(1);
    assert_eq!(f.wait(&stop, || false), WaitOutcome::Stopped);
}

#[test]
fn wait_with_expired_deadline_times_out() {
    let mut region = Region::new(256);
    let f = future(&mut region);
    assert_eq!(f.wait(&no_stop(), || true), WaitOutcome::TimedOut);
    let mut polls = 0;
    let outcome = f.wait(&no_stop(), || {
        polls += 1;
        polls > 20
    });
    assert_eq!(outcome, WaitOutcome::TimedOut);
    assert_eq!(polls, 21);

    let timeout = Duration::from_millis(20);
    let start = Instant::now();
    assert_eq!(f.wait_timeout(&no_stop(), timeout), WaitOutcome::TimedOut);
    assert!(start.elapsed() >= timeout);
}

#[test]
fn completion_wins_over_stop_and_deadline() {
    let mut region = Region::new(256);
    let f = future(&mut region);
    // SAFETY: single-threaded sole completer.
    unsafe { f.complete_value(3, &0u8) }.unwrap();
    let stop = AtomicU32::new(1);
    assert_eq!(
        f.wait(&stop, || true),
        WaitOutcome::Completed { return_code: 3 }
    );
}

#[test]
fn completion_before_stop_is_never_reported_as_stopped() {
    for round in 0..200 {
        let mut region = Region::new(256);
        let f = future(&mut region);
        let stop = AtomicU32::new(0);
        thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: this thread is the only completer.
                unsafe { f.complete_value(round, &round) }.unwrap();
                stop.store(1, Ordering::Release);
            });
            match f.wait_timeout(&stop, Duration::from_secs(10)) {
                WaitOutcome::Completed { return_code } => assert_eq!(return_code, round),
                other => panic!("round {round}: {other:?}"),
            }
        });
        assert_eq!(f.read_output::<i32>(), Ok(round));
    }
}

#[test]
fn user_flags_and_payload_then_reset() {
    let mut region = Region::new(256);
    let f = future(&mut region);
    assert_eq!(f.set_user_flags(1 << 16 | 1 << 31), Ok(0));
    assert_eq!(
        f.set_user_flags(future_flags::COMPLETE),
        Err(FutureError::NotUserFlags(future_flags::COMPLETE))
    );
    assert_eq!(
        f.clear_user_flags(1 << 3),
        Err(FutureError::NotUserFlags(1 << 3))
    );
    assert_eq!(f.clear_user_flags(1 << 16), Ok(1 << 16 | 1 << 31));
    assert_eq!(f.flags(), 1 << 31);
    assert!(!f.is_complete());

    assert_eq!(f.payload(), None);
    let task = ShmPtr::new(AllocatorId::new(3, 4), 4096);
    // SAFETY: single-threaded submitter, then sole completer, then reset
    // with no other user.
    unsafe {
        f.set_payload(task);
        assert_eq!(f.payload(), Some(task));
        f.write_input_value(&5u16).unwrap();
        f.complete_value(0, &6u16).unwrap();
        f.reset();
    }
    assert_eq!(f.flags(), 0);
    assert_eq!(f.payload(), None);
    assert_eq!(f.output(), Err(FutureError::NotComplete));
    // SAFETY: as above.
    unsafe {
        assert_eq!(f.input(), Ok(&[][..]));
        f.complete_value(9, &10u16).unwrap();
    }
    assert_eq!(f.read_output::<u16>(), Ok(10));
}

#[test]
fn waiter_and_completer_on_two_mappings_of_one_memfd() {
    let len = FutureShm::required_bytes(256);
    let segment = Segment::create_anonymous(len).unwrap();
    let second = segment.map_again().unwrap();
    assert_ne!(segment.as_ptr(), second.as_ptr());
    // SAFETY: both mappings cover the same fresh pages; the future is
    // initialised through the first before the second attaches, and both
    // mappings outlive the handles (dropped at the end of the test).
    let (waiter, completer) = unsafe {
        let waiter = FutureShm::init_in(segment.as_ptr(), segment.len(), 256).unwrap();
        waiter.write_input_value("ping").unwrap();
        (
            waiter,
            FutureShm::attach(second.as_ptr(), second.len()).unwrap(),
        )
    };
    let stop = no_stop();
    thread::scope(|s| {
        s.spawn(|| {
            // The thread spawn publishes the input, as a queue push would.
            // SAFETY: this thread is the only completer.
            unsafe {
                let input: &str = completer.read_input().unwrap();
                assert_eq!(input, "ping");
                let reply = format!("{input}-pong");
                thread::sleep(Duration::from_millis(5));
                completer.complete_value(200, &reply).unwrap();
            }
        });
        assert_eq!(
            waiter.wait_timeout(&stop, Duration::from_secs(10)),
            WaitOutcome::Completed { return_code: 200 }
        );
    });
    assert_eq!(waiter.read_output::<&str>(), Ok("ping-pong"));
}

#[test]
fn errors_display() {
    let text = FutureError::CopySpaceTooSmall {
        needed: 80,
        available: 64,
    }
    .to_string();
    assert!(text.contains("80") && text.contains("64"), "{text}");
    let fill: FillError<SerError> = FillError::Fill(SerError::InvalidUtf8);
    assert!(fill.to_string().contains("UTF-8"));
}
