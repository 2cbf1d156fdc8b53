//! Two processes exchanging records through shm-core alone: one shared
//! segment, mapped at a different address in each, holding a size-class
//! allocator (the records' bytes) and an SPSC ring (the records' `ShmPtr`s).
//!
//! ```sh
//! cargo run -p tandem-examples --bin exchange -- produce my-exchange 100000 &
//! cargo run -p tandem-examples --bin exchange -- consume my-exchange
//! ```
//!
//! The producer allocates a block, writes a record into it and publishes its
//! `ShmPtr` through the ring; the consumer verifies and frees it. A record is
//! only ever reachable once it is complete (the ring's push is the Release that
//! publishes it), so a producer that dies mid-stream leaves nothing half-written
//! in view: the consumer drains what was sent, removes the dead producer's
//! segment and exits 3 (`error: producer (pid N) died mid-stream; ...`); a
//! producer whose consumer dies exits 3 likewise. The segment starts with the
//! runtime's [`OwnerRecord`], so a producer starting on a dead one's name
//! reclaims it and `tandem clean` removes it.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use tandem_process::{OwnerRecord, ProcessIdentity, ProcessState};
use tandem_runtime::{create_owned_segment, remove_stale_segment};
use tandem_shm_core::{AllocError, AllocatorId, Segment, ShmPtr, SizeClassAllocator, SpscRing};

/// Segment header, at offset 0.
#[repr(C, align(64))]
struct ExchangeHeader {
    /// The producer (the segment's owner), published with [`EXCHANGE_KIND`]
    /// once everything below and the allocator and ring are initialised.
    owner: OwnerRecord,
    /// 1 once the producer has pushed its last record.
    done: AtomicU32,
    /// 1 once the consumer has attached (the producer may then drop its name);
    /// `consumer_pid` and `consumer_start_time` are written before it.
    consumer_attached: AtomicU32,
    /// The consumer, once attached.
    consumer_pid: AtomicU32,
    records_planned: AtomicU64,
    /// The consumer's start time ([`ProcessIdentity::start_time`]), once attached.
    consumer_start_time: AtomicU64,
}

static_assertions::assert_eq_size!(ExchangeHeader, [u8; 64]);
static_assertions::const_assert_eq!(memoffset::offset_of!(ExchangeHeader, owner), 0);
static_assertions::const_assert_eq!(memoffset::offset_of!(ExchangeHeader, done), 24);
static_assertions::const_assert_eq!(memoffset::offset_of!(ExchangeHeader, consumer_attached), 28);
static_assertions::const_assert_eq!(memoffset::offset_of!(ExchangeHeader, consumer_pid), 32);
static_assertions::const_assert_eq!(memoffset::offset_of!(ExchangeHeader, records_planned), 40);
static_assertions::const_assert_eq!(
    memoffset::offset_of!(ExchangeHeader, consumer_start_time),
    48
);

/// The [`OwnerRecord`] kind of an exchange segment ("XCHG").
const EXCHANGE_KIND: u32 = u32::from_be_bytes(*b"XCHG");
/// How long a producer waits for a consumer to attach.
const ATTACH_LIMIT: Duration = Duration::from_secs(30);
/// How often a blocked producer looks for its consumer in `/proc`.
const PEER_CHECK_PERIOD: Duration = Duration::from_millis(1);
const ALLOCATOR_OFFSET: usize = 4096;
const ALLOCATOR_BYTES: usize = 8 << 20;
const RING_OFFSET: usize = ALLOCATOR_OFFSET + ALLOCATOR_BYTES;
const RING_CAPACITY: u32 = 1024;
const ALLOCATOR_ID: AllocatorId = AllocatorId::new(7, 0);

/// Bytes the segment needs.
fn segment_bytes() -> usize {
    RING_OFFSET + SpscRing::<ShmPtr<u8>>::required_bytes(RING_CAPACITY)
}

/// Each record: `seq`, payload length, FNV-1a of the payload, then the payload,
/// a function of `seq` so the consumer can check every byte.
const RECORD_HEADER: usize = 16;

fn payload_len(seq: u64) -> usize {
    16 + (seq % 241) as usize
}

fn payload_byte(seq: u64, i: usize) -> u8 {
    (seq.wrapping_mul(31).wrapping_add(i as u64)) as u8
}

fn fnv1a(bytes: impl Iterator<Item = u8>) -> u32 {
    bytes.fold(0x811c_9dc5, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

/// What went wrong in a peer.
#[derive(Debug)]
enum ExchangeError {
    /// Creating, opening or checking the shared segment failed.
    Setup(String),
    /// A record was not what the producer wrote, or the allocator leaked
    /// once every record was consumed.
    Corrupt(String),
    /// The producer died; `received` records arrived intact before that.
    ProducerDied {
        /// The producer's process id.
        pid: u32,
        /// Records received intact.
        received: u64,
    },
    /// The consumer died; `sent` records had been pushed to it.
    ConsumerDied {
        /// The consumer's process id.
        pid: u32,
        /// Records pushed before it died.
        sent: u64,
    },
    /// No consumer attached before the producer gave up waiting.
    ConsumerNeverAttached,
}

impl std::fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExchangeError::Setup(why) => write!(f, "setup failed: {why}"),
            ExchangeError::Corrupt(why) => write!(f, "corrupt record: {why}"),
            ExchangeError::ProducerDied { pid, received } => write!(
                f,
                "producer (pid {pid}) died mid-stream; {received} records received intact, in order"
            ),
            ExchangeError::ConsumerDied { pid, sent } => write!(
                f,
                "consumer (pid {pid}) died mid-stream; {sent} records were sent"
            ),
            ExchangeError::ConsumerNeverAttached => {
                write!(f, "no consumer attached within the time limit")
            }
        }
    }
}

impl std::error::Error for ExchangeError {}

fn setup(what: &str, e: impl std::fmt::Display) -> ExchangeError {
    ExchangeError::Setup(format!("{what}: {e}"))
}

struct Mapped<'s> {
    header: &'s ExchangeHeader,
    allocator: SizeClassAllocator<'s>,
    ring: SpscRing<'s, ShmPtr<u8>>,
}

/// Runs the producer: creates segment `name`, prints `ready <base address>`,
/// sends `records` records, and waits (bounded) for a consumer to attach so
/// that the name outlives its own exit.
fn produce(name: &str, records: u64) -> Result<(), ExchangeError> {
    let segment = create_owned_segment(name, segment_bytes()).map_err(|e| setup("create", e))?;
    let base = segment.as_ptr();
    // SAFETY: the segment is fresh, page-aligned and `segment_bytes()` long;
    // each structure gets its own disjoint range and nobody else has attached
    // (the magic is not yet published).
    let mapped = unsafe {
        let header = &*(base as *const ExchangeHeader);
        // Relaxed: published by the owner record below.
        header.records_planned.store(records, Ordering::Relaxed);
        let allocator =
            SizeClassAllocator::init_in(base.add(ALLOCATOR_OFFSET), ALLOCATOR_BYTES, ALLOCATOR_ID)
                .map_err(|e| setup("allocator", e))?;
        let ring = SpscRing::init_in(
            base.add(RING_OFFSET),
            segment_bytes() - RING_OFFSET,
            RING_CAPACITY,
        )
        .map_err(|e| setup("ring", e))?;
        // Last: a consumer that sees the owner published sees all of the above.
        header.owner.publish(EXCHANGE_KIND);
        Mapped {
            header,
            allocator,
            ring,
        }
    };
    announce(&format!("ready {:#x}", base as usize));

    // SAFETY: this process is the ring's only producer.
    let mut producer = unsafe { mapped.ring.producer() };
    let mut consumer = ConsumerWatch::new(mapped.header);
    for seq in 0..records {
        let len = payload_len(seq);
        let block = loop {
            match mapped.allocator.allocate((RECORD_HEADER + len) as u64, 16) {
                Ok(block) => break block,
                // Back-pressure: the consumer frees blocks as it drains.
                Err(AllocError::Exhausted { .. }) => consumer.wait(seq)?,
                Err(e) => return Err(setup("allocate", e)),
            }
        };
        let full = mapped
            .allocator
            .to_full(block)
            .map_err(|e| setup("to_full", e))?;
        // SAFETY: the block is ours alone until its ShmPtr is pushed, and holds
        // RECORD_HEADER + len bytes.
        unsafe {
            let p = full.ptr;
            p.cast::<u64>().write_unaligned(seq);
            p.add(8).cast::<u32>().write_unaligned(len as u32);
            p.add(12)
                .cast::<u32>()
                .write_unaligned(fnv1a((0..len).map(|i| payload_byte(seq, i))));
            for i in 0..len {
                p.add(RECORD_HEADER + i).write(payload_byte(seq, i));
            }
        }
        let mut item = block;
        while let Err(back) = producer.try_push(item) {
            item = back;
            consumer.wait(seq)?;
        }
    }
    mapped.header.done.store(1, Ordering::Release);
    announce(&format!("sent {records}"));

    // Acquire pairs with the consumer's Release of `consumer_attached`. Only
    // the attachment is awaited: everything is sent, and a consumer that
    // attached may well have drained the ring and exited by the next look,
    // which is no death mid-stream.
    while mapped.header.consumer_attached.load(Ordering::Acquire) == 0 {
        consumer.within_attach_limit()?;
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// A producer's view of its consumer while it waits on it (full ring, no
/// free blocks, not attached yet): ends the wait with an error once the
/// consumer is gone, or when none attached within [`ATTACH_LIMIT`].
struct ConsumerWatch<'h> {
    header: &'h ExchangeHeader,
    since: Instant,
    last_check: Instant,
}

impl<'h> ConsumerWatch<'h> {
    fn new(header: &'h ExchangeHeader) -> Self {
        let now = Instant::now();
        Self {
            header,
            since: now,
            last_check: now,
        }
    }

    /// An error once no consumer attached within [`ATTACH_LIMIT`].
    fn within_attach_limit(&self) -> Result<(), ExchangeError> {
        if self.since.elapsed() > ATTACH_LIMIT {
            return Err(ExchangeError::ConsumerNeverAttached);
        }
        Ok(())
    }

    /// Yields once; an error if the consumer died (after `sent` records) or
    /// never came.
    fn wait(&mut self, sent: u64) -> Result<(), ExchangeError> {
        std::thread::yield_now();
        let now = Instant::now();
        if now.duration_since(self.last_check) < PEER_CHECK_PERIOD {
            return Ok(());
        }
        self.last_check = now;
        // Acquire pairs with the consumer's Release of `consumer_attached`,
        // after it wrote its identity.
        if self.header.consumer_attached.load(Ordering::Acquire) == 0 {
            return self.within_attach_limit();
        }
        let consumer = ProcessIdentity {
            // Relaxed: ordered by the Acquire above.
            pid: self.header.consumer_pid.load(Ordering::Relaxed),
            start_time: self.header.consumer_start_time.load(Ordering::Relaxed),
        };
        if consumer.state() == ProcessState::Gone {
            return Err(ExchangeError::ConsumerDied {
                pid: consumer.pid,
                sent,
            });
        }
        Ok(())
    }
}

/// Runs the consumer: opens segment `name` at another address, verifies and
/// frees every record, and returns how many arrived. Prints `attached <base>`
/// and `received <n>` progress lines.
fn consume(name: &str) -> Result<u64, ExchangeError> {
    // Map something first so this process's mapping of the segment cannot land
    // at the producer's address even with address randomisation off.
    let _shift = Segment::create_anonymous(1 << 20).map_err(|e| setup("shift mapping", e))?;
    let segment = Segment::open_named(name).map_err(|e| setup("open", e))?;
    if segment.len() < segment_bytes() {
        return Err(setup("open", format!("segment is {} bytes", segment.len())));
    }
    let base = segment.as_ptr();
    // SAFETY: the segment is at least segment_bytes() long and page-aligned;
    // the header is only accessed through atomics.
    let header = unsafe { &*(base as *const ExchangeHeader) };
    let producer = match header.owner.owner() {
        Some((producer, EXCHANGE_KIND)) => producer,
        Some((_, kind)) => {
            return Err(setup(
                "open",
                format!("not an exchange segment (kind {kind:#x})"),
            ))
        }
        None => return Err(setup("open", "segment not initialised by a producer")),
    };
    // SAFETY: the published owner record (read with Acquire) shows both
    // structures were initialised in place.
    let mapped = unsafe {
        Mapped {
            header,
            allocator: SizeClassAllocator::attach(base.add(ALLOCATOR_OFFSET), ALLOCATOR_BYTES)
                .map_err(|e| setup("attach allocator", e))?,
            ring: SpscRing::attach(base.add(RING_OFFSET), segment_bytes() - RING_OFFSET)
                .map_err(|e| setup("attach ring", e))?,
        }
    };
    let me = ProcessIdentity::current();
    // Relaxed: published by the Release of `consumer_attached` below.
    mapped.header.consumer_pid.store(me.pid, Ordering::Relaxed);
    mapped
        .header
        .consumer_start_time
        .store(me.start_time, Ordering::Relaxed);
    mapped.header.consumer_attached.store(1, Ordering::Release);
    announce(&format!("attached {:#x}", base as usize));
    let pid = producer.pid;
    // SAFETY: this process is the ring's only consumer.
    let mut consumer = unsafe { mapped.ring.consumer() };
    let mut received = 0u64;
    let mut idle_since: Option<Instant> = None;
    loop {
        if let Some(block) = consumer.try_pop() {
            check_record(&mapped, block, received)?;
            received += 1;
            if received % 10_000 == 0 {
                announce(&format!("received {received}"));
            }
            idle_since = None;
            continue;
        }
        // Acquire pairs with the producer's Release of `done`, after its last push.
        if mapped.header.done.load(Ordering::Acquire) == 1 && consumer.is_empty() {
            break;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() > Duration::from_millis(2) && producer.state() == ProcessState::Gone {
            // Everything pushed before the death is complete: drain it.
            while let Some(block) = consumer.try_pop() {
                check_record(&mapped, block, received)?;
                received += 1;
            }
            // The creator can no longer remove the name; do it for it. A
            // failure leaves it to `tandem clean`, and the error below stands.
            let _ = remove_stale_segment(name);
            return Err(ExchangeError::ProducerDied { pid, received });
        }
        std::thread::yield_now();
    }
    let stats = mapped.allocator.stats().map_err(|e| setup("stats", e))?;
    if stats.free_bytes() != stats.carved_bytes {
        return Err(ExchangeError::Corrupt(format!(
            "allocator leaked: {} bytes carved, {} free",
            stats.carved_bytes,
            stats.free_bytes()
        )));
    }
    announce(&format!(
        "received {received} records intact; allocator: {} bytes carved, all free",
        stats.carved_bytes
    ));
    Ok(received)
}

fn check_record(m: &Mapped<'_>, block: ShmPtr<u8>, expected_seq: u64) -> Result<(), ExchangeError> {
    let full = m
        .allocator
        .to_full(block)
        .map_err(|e| ExchangeError::Corrupt(format!("bad pointer {block:?}: {e}")))?;
    // SAFETY: `to_full` checked the pointer lies in this allocator's heap; the
    // block is complete (published by the push) and now ours alone.
    let (seq, len, sum, payload_ok) = unsafe {
        let p = full.ptr;
        let seq = p.cast::<u64>().read_unaligned();
        let len = p.add(8).cast::<u32>().read_unaligned() as usize;
        let sum = p.add(12).cast::<u32>().read_unaligned();
        let ok = len == payload_len(expected_seq)
            && fnv1a((0..len).map(|i| p.add(RECORD_HEADER + i).read())) == sum
            && (0..len).all(|i| p.add(RECORD_HEADER + i).read() == payload_byte(expected_seq, i));
        (seq, len, sum, ok)
    };
    if seq != expected_seq || !payload_ok {
        return Err(ExchangeError::Corrupt(format!(
            "expected record {expected_seq}, found seq {seq} len {len} sum {sum:#x}"
        )));
    }
    m.allocator
        .free(block)
        .map_err(|e| ExchangeError::Corrupt(format!("free of record {seq}: {e}")))
}

fn announce(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout only loses progress lines; the exit status still tells.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// `exchange produce` / `exchange consume`.
#[derive(Parser, Debug)]
#[command(version)]
enum Cli {
    /// Creates the segment and sends `records` records through it.
    Produce {
        /// The shared-memory segment's name.
        segment: String,
        /// How many records to send.
        records: u64,
    },
    /// Attaches to the segment and receives until the producer is done.
    Consume {
        /// The shared-memory segment's name.
        segment: String,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse() {
        Cli::Produce { segment, records } => produce(&segment, records),
        Cli::Consume { segment } => consume(&segment).map(|_| ()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("exchange: {e}");
            println!("error: {e}");
            ExitCode::from(match e {
                ExchangeError::ProducerDied { .. } | ExchangeError::ConsumerDied { .. } => 3,
                _ => 2,
            })
        }
    }
}
