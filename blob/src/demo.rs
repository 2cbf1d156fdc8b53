//! Launching the blob store's own kernels (`kernels/blob.cu`) on a served
//! device: kernel threads putting and getting blobs through the device's
//! queue segment, and the wire check. What the tests, the bench and
//! `tandem demo` and `tandem blob demo` run; a kernel of one's own includes `tandem/blob.h`
//! and needs none of it.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tandem_hal::{EventFlags, GpuApi, GpuDevice, KernelArg, LaunchConfig};
use tandem_runtime::{DeviceQueues, RuntimeError, SharedBuffer};

use crate::kernels;
use crate::{PutContext, Score, TagId};

/// What each thread of a [`PutGetLaunch`] does per round.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PutGetMode {
    /// Put its blob, get it back and compare every byte.
    PutGetCheck = 0,
    /// Put only.
    Put = 1,
    /// Get only (a blob an earlier launch put).
    Get = 2,
    /// Per block: its threads fill one buffer together (coalesced) and
    /// thread 0 puts it as blob `b<block>` (`blob_bytes` a multiple of 8).
    BlockPut = 3,
    /// Per block: thread 0 gets blob `b<block>`.
    BlockGet = 4,
    /// Per block: put, get back, and the block's threads compare.
    BlockPutGetCheck = 5,
    /// Get and compare with the bytes a [`PutGetMode::Put`] launch wrote
    /// (its first round's, which each of its rounds puts): blobs another
    /// kernel put, on this device or another.
    GetCheck = 6,
}

/// One launch of `tandem_blob_put_get`: thread r works on blob `k<r>` of
/// `tag` (the block modes: block b on blob `b<b>`).
#[derive(Clone, Copy, Debug)]
pub struct PutGetLaunch {
    /// Blocks of the grid.
    pub blocks: u32,
    /// Threads per block.
    pub threads: u32,
    /// The tag every blob goes in.
    pub tag: TagId,
    /// Bytes of each blob.
    pub blob_bytes: u64,
    /// Rounds per thread (each with new bytes).
    pub rounds: u64,
    /// What each round does.
    pub mode: PutGetMode,
    /// Placement of the puts.
    pub score: Score,
    /// Compression and persistence of the puts.
    pub context: PutContext,
    /// Spin rounds a full lane or a wait may take before a thread gives up.
    pub spin_budget: u64,
}

impl PutGetLaunch {
    /// `grid` (blocks, threads per block) doing `rounds` rounds of `mode` on blobs of
    /// `blob_bytes` in `tag`; the rest as most launches want it, changed by field: placement
    /// left to the store, the default context, and a spin budget no healthy runtime exhausts.
    pub fn new(
        grid: (u32, u32),
        tag: TagId,
        blob_bytes: u64,
        rounds: u64,
        mode: PutGetMode,
    ) -> Self {
        Self {
            blocks: grid.0,
            threads: grid.1,
            tag,
            blob_bytes,
            rounds,
            mode,
            score: Score::AUTO,
            context: PutContext::default(),
            spin_budget: 1 << 40,
        }
    }
}

/// Byte `i` of round `round` of thread `rank`'s blob, as the kernels write
/// it (`kernels/blob.cu`'s `pattern`): what a host check compares with.
pub fn pattern(rank: u64, round: u64, i: u64) -> u8 {
    (rank
        .wrapping_mul(131)
        .wrapping_add(round.wrapping_mul(31))
        .wrapping_add(i.wrapping_mul(7))
        .wrapping_add(i >> 8)) as u8
}

/// `status` of a thread whose get returned other bytes than it put.
pub const STATUS_MISMATCH: u32 = 1000;

/// What a [`PutGetLaunch`] did.
#[derive(Clone, Debug)]
pub struct PutGetOutcome {
    /// Per thread: its `rt_status` (0 ok), or [`STATUS_MISMATCH`].
    pub status: Vec<u32>,
    /// Per thread: the first nonzero blob code a call returned (0: none).
    pub codes: Vec<i32>,
    /// Launch to synchronisation.
    pub elapsed: Duration,
}

impl PutGetOutcome {
    /// Threads that did not end with status 0 and code 0.
    pub fn failed_threads(&self) -> usize {
        self.status
            .iter()
            .zip(&self.codes)
            .filter(|&(&s, &c)| s != 0 || c != 0)
            .count()
    }

    /// The first failed thread: (rank, status, code).
    pub fn first_failure(&self) -> Option<(usize, u32, i32)> {
        self.status
            .iter()
            .zip(&self.codes)
            .enumerate()
            .find(|(_, (&s, &c))| s != 0 || c != 0)
            .map(|(rank, (&s, &c))| (rank, s, c))
    }
}

/// One launch of `tandem_blob_put_stream`: thread r puts blob `k<r>` of
/// `tag` round after round and publishes how many of its puts were
/// acknowledged. Round n's bytes: the pattern of [`PutGetMode::PutGetCheck`]'s
/// round n, its first eight bytes overwritten by the stamp `(r << 40) | n`
/// (little-endian), which tells a reader which put it found.
#[derive(Clone, Copy, Debug)]
pub struct PutStreamLaunch {
    /// Blocks of the grid.
    pub blocks: u32,
    /// Threads per block.
    pub threads: u32,
    /// The tag every blob goes in.
    pub tag: TagId,
    /// Bytes of each blob, at least 8 (the stamp).
    pub blob_bytes: u64,
    /// Puts per thread (`u64::MAX`: until stopped or killed).
    pub rounds: u64,
    /// Placement of the puts.
    pub score: Score,
    /// Spin rounds a full lane or a wait may take before a thread gives up.
    pub spin_budget: u64,
}

/// The blob kernels, loaded on one served device.
pub struct BlobKernels<'q, A: GpuApi> {
    queues: &'q DeviceQueues<A>,
    stream: <A::Device as GpuDevice>::Stream,
    put_get: <A::Device as GpuDevice>::Kernel,
    put_stream: <A::Device as GpuDevice>::Kernel,
    wire: <A::Device as GpuDevice>::Kernel,
    _module: <A::Device as GpuDevice>::Module,
    /// Every future of the launches so far completed: the kernel arena may
    /// be taken back before the next.
    arena_reusable: bool,
}

/// `context` as `tandem_blob_put_get`'s parameter carries it: its wire
/// fields a byte each, the first lowest (`kernels/blob.cu`'s
/// `unpack_context`).
fn packed_context(context: &PutContext) -> u32 {
    let w = context.to_wire();
    u32::from_le_bytes([w.compress, w.codec, w.preset, w.persistence])
}

/// Values `tandem_blob_wire` reports.
pub const WIRE_VALUES: usize = 51;

impl<'q, A: GpuApi> BlobKernels<'q, A> {
    /// Loads the kernels on `queues`' device.
    pub fn load(queues: &'q DeviceQueues<A>) -> Result<Self, RuntimeError> {
        let device = queues.device();
        let module = device.load_module(&kernels::library())?;
        Ok(Self {
            put_get: device.kernel(&module, kernels::names::TANDEM_BLOB_PUT_GET)?,
            put_stream: device.kernel(&module, kernels::names::TANDEM_BLOB_PUT_STREAM)?,
            wire: device.kernel(&module, kernels::names::TANDEM_BLOB_WIRE)?,
            stream: device.create_stream()?,
            _module: module,
            queues,
            arena_reusable: true,
        })
    }

    fn buffer(&self, len: usize) -> Result<(SharedBuffer<'q>, u64), RuntimeError> {
        let buffer = self
            .queues
            .allocate_shared(len)
            .map_err(|e| RuntimeError::Process(format!("kernel result buffer: {e}")))?;
        let at = self
            .queues
            .device_address(&buffer)
            .expect("a block of this device's own segment");
        Ok((buffer, at))
    }

    /// What `tandem/blob.h` holds: ids, codes and limits, in
    /// `tandem_blob_wire`'s order.
    pub fn wire(&self) -> Result<Vec<u64>, RuntimeError> {
        let (out, at) = self.buffer(WIRE_VALUES * 8)?;
        // SAFETY: one thread writes WIRE_VALUES u64s to `out`, which lives
        // until after the synchronisation.
        unsafe {
            self.queues.device().launch(
                &self.wire,
                &LaunchConfig::linear(1, 1),
                &[KernelArg::Ptr(at)],
                &self.stream,
            )
        }?;
        self.queues.device().synchronize_stream(&self.stream)?;
        let mut bytes = vec![0u8; WIRE_VALUES * 8];
        out.read(0, &mut bytes);
        Ok(bytes
            .chunks_exact(8)
            .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
            .collect())
    }

    /// The arguments both blob kernels start with: the device segment (base, length), then
    /// the launch's tag, blob size and rounds.
    fn leading_args(&self, tag: TagId, blob_bytes: u64, rounds: u64) -> [KernelArg<'static>; 5] {
        [
            KernelArg::Ptr(self.queues.kernel_backend().base),
            KernelArg::U64(self.queues.segment().len() as u64),
            KernelArg::U64(tag.0),
            KernelArg::U64(blob_bytes),
            KernelArg::U64(rounds),
        ]
    }

    /// Runs `launch` to the end (a raised stop word ends the threads'
    /// waits).
    pub fn put_get(&mut self, launch: &PutGetLaunch) -> Result<PutGetOutcome, RuntimeError> {
        let threads = launch.blocks as usize * launch.threads as usize;
        let (status, status_at) = self.buffer(threads.max(1) * 4)?;
        let (codes, codes_at) = self.buffer(threads.max(1) * 4)?;
        if self.arena_reusable {
            // SAFETY: the previous launch (if any) was synchronised and every
            // one of its futures completed (arena_reusable); launches are
            // serialised by `&mut self`.
            unsafe { self.queues.segment().reset_kernel_arena() };
        }
        let args = [
            &self.leading_args(launch.tag, launch.blob_bytes, launch.rounds)[..],
            &[
                KernelArg::U32(launch.mode as u32),
                KernelArg::F32(launch.score.0),
                KernelArg::U32(packed_context(&launch.context)),
                KernelArg::Ptr(self.queues.stop_flag_device_ptr()),
                KernelArg::U64(launch.spin_budget),
                KernelArg::Ptr(status_at),
                KernelArg::Ptr(codes_at),
            ],
        ]
        .concat();
        let device = self.queues.device();
        let started = Instant::now();
        // SAFETY: the segment stays registered while `queues` lives; the
        // result buffers hold an entry per thread and live until after the
        // synchronisation.
        unsafe {
            device.launch(
                &self.put_get,
                &LaunchConfig::linear(launch.blocks, launch.threads),
                &args,
                &self.stream,
            )
        }?;
        device.synchronize_stream(&self.stream)?;
        let elapsed = started.elapsed();
        let read = |buffer: &SharedBuffer<'_>| {
            let mut bytes = vec![0u8; threads * 4];
            buffer.read(0, &mut bytes);
            bytes
                .chunks_exact(4)
                .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
                .collect::<Vec<u32>>()
        };
        let outcome = PutGetOutcome {
            status: read(&status),
            codes: read(&codes).into_iter().map(|c| c as i32).collect(),
            elapsed,
        };
        // A thread that gave up (stopped, budget spent) may have left a task
        // in flight, whose future lives in the arena.
        self.arena_reusable = outcome
            .status
            .iter()
            .all(|&s| s == 0 || s == STATUS_MISMATCH);
        Ok(outcome)
    }

    /// Launches `launch` and, while it runs, calls `watch` about every
    /// `interval` with each thread's acknowledged puts (`acks[r]` = n: the
    /// puts of rounds `0..n` of thread r returned ok), read with `Acquire`
    /// as the kernel publishes them; once more when it has ended. Returns
    /// the final acks. A thread that ends below `launch.rounds` stopped on
    /// an error.
    ///
    /// `watch` returning [`ControlFlow::Break`] raises the device segment's
    /// stop word (ending every wait of every kernel on this device), waits
    /// for the kernel and lowers the word again.
    pub fn put_stream(
        &mut self,
        launch: &PutStreamLaunch,
        interval: Duration,
        mut watch: impl FnMut(&[u64]) -> ControlFlow<()>,
    ) -> Result<Vec<u64>, RuntimeError> {
        let threads = launch.blocks as usize * launch.threads as usize;
        let (mut acks, acks_at) = self.buffer(threads.max(1) * 8)?;
        acks.write(0, &vec![0u8; acks.len()]);
        let segment = self.queues.segment();
        let offset = usize::try_from(acks.ptr().off).expect("an offset in a mapped segment");
        // SAFETY: the block lies inside the segment's mapping (the heap gave
        // it), which lives as long as `queues`.
        let host = unsafe { segment.base().add(offset) }.cast::<AtomicU64>();
        assert!(host.is_aligned(), "heap blocks are 16-byte aligned");
        // SAFETY: `threads` aligned u64s in a block this call owns until it
        // returns; the kernel only stores to them atomically.
        let words = unsafe { std::slice::from_raw_parts(host.cast_const(), threads) };
        let read = || -> Vec<u64> { words.iter().map(|w| w.load(Ordering::Acquire)).collect() };
        if self.arena_reusable {
            // SAFETY: as in `put_get`.
            unsafe { segment.reset_kernel_arena() };
        }
        let args = [
            &self.leading_args(launch.tag, launch.blob_bytes, launch.rounds)[..],
            &[
                KernelArg::F32(launch.score.0),
                KernelArg::Ptr(self.queues.stop_flag_device_ptr()),
                KernelArg::U64(launch.spin_budget),
                KernelArg::Ptr(acks_at),
            ],
        ]
        .concat();
        let device = self.queues.device();
        let done = device.create_event(EventFlags::default())?;
        // SAFETY: the segment stays registered while `queues` lives; `acks`
        // holds a word per thread and lives until after the synchronisation.
        unsafe {
            device.launch(
                &self.put_stream,
                &LaunchConfig::linear(launch.blocks, launch.threads),
                &args,
                &self.stream,
            )
        }?;
        // From here until the kernel has ended, leaving early (an error, a
        // panic in `watch`) would free `acks` under its stores: the guard
        // stops and waits for it first.
        let mut running = Running {
            queues: self.queues,
            stream: &self.stream,
            stopped: false,
            ended: false,
        };
        device.record_event(&done, &self.stream)?;
        while !device.query_event(&done)? {
            if !running.stopped && watch(&read()).is_break() {
                self.queues.raise_stop();
                running.stopped = true;
            }
            std::thread::sleep(interval);
        }
        device.synchronize_stream(&self.stream)?;
        running.ended = true;
        drop(running);
        let last = read();
        let _ = watch(&last);
        // A thread that stopped short may have left a put in flight, whose
        // future lives in the arena.
        self.arena_reusable = last.iter().all(|&n| n == launch.rounds);
        Ok(last)
    }
}

/// A launched `tandem_blob_put_stream`: dropped before it has ended, it
/// raises the stop word and waits for the kernel; a stop it raised is
/// lowered again either way.
struct Running<'a, A: GpuApi> {
    queues: &'a DeviceQueues<A>,
    stream: &'a <A::Device as GpuDevice>::Stream,
    stopped: bool,
    ended: bool,
}

impl<A: GpuApi> Drop for Running<'_, A> {
    fn drop(&mut self) {
        if !self.ended {
            self.queues.raise_stop();
            self.stopped = true;
            // Nothing better to do with an error here: the launch's own
            // error is already on its way up.
            let _ = self.queues.device().synchronize_stream(self.stream);
        }
        if self.stopped {
            self.queues.clear_stop();
        }
    }
}
