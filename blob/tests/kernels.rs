//! The blob store on the runtime's task path, on every backend compiled in:
//! `tandem/blob.h`'s values equal `tandem_blob::wire`'s; many kernel threads
//! put and get blobs of their own at once (RAM and file targets) and every
//! byte comes back; errors come back as codes and the runtime lives on; host
//! code calls the same pool through `BlobCaller`; kernels' blobs on the object
//! tier are read by another store sharing the bucket. Without a GPU the CUDA and
//! HIP cases print "skipped: no CUDA device" (a failure with
//! `TANDEM_REQUIRE_GPU=1`); the CPU device's never skip.

mod common;

use std::sync::Arc;
use std::time::Duration;
use tandem_blob::BlobPut;

use tandem_blob::demo::{
    pattern, BlobKernels, PutGetLaunch, PutGetMode, PutGetOutcome, WIRE_VALUES,
};
use tandem_blob::pool::Put;
use tandem_blob::wire::{self, code, method, SharedRef};
use tandem_blob::{
    BlobCaller, BlobStore, CallError, Persistence, PutContext, Score, StoreConfig, TagId,
};
use tandem_hal::{GpuApi, GpuResult};
use tandem_runtime::{DeviceSelection, Runtime};
use tandem_shm_core::{AllocatorId, ShmPtr};

/// A RAM target (score 1.0) and a file target (score 0.5) of 64 MiB each.
fn store(dir: &tempfile::TempDir) -> Arc<BlobStore> {
    let config = StoreConfig::ram_and_file(dir.path(), 64 << 20);
    Arc::new(BlobStore::open(&config).expect("open the store"))
}

fn runtime<A: GpuApi>(api: A, store: &Arc<BlobStore>) -> Runtime<A> {
    runtime_on(api, store, DeviceSelection::Only(vec![0]))
}

fn runtime_on<A: GpuApi>(api: A, store: &Arc<BlobStore>, devices: DeviceSelection) -> Runtime<A> {
    common::blob_runtime(api, store, devices, 96 << 20)
}

/// (blocks, threads): many threads on a GPU, what the CPU device runs well.
fn grid<A: GpuApi>() -> (u32, u32) {
    if A::BACKEND == tandem_hal::Backend::Host {
        (4, 16)
    } else {
        (66, 64)
    }
}

/// What `tandem_blob_wire` must report, in its order.
fn expected_wire() -> Vec<u64> {
    let mut v = vec![
        u64::from(wire::POOL),
        u64::from(method::TAG),
        u64::from(method::PUT),
        u64::from(method::GET),
        u64::from(method::STAT),
        u64::from(method::DELETE),
        u64::from(method::LIST),
        u64::from(method::IDENTIFY),
        u64::from(method::FIND_TAG),
    ];
    v.extend(
        [
            code::EMPTY_NAME,
            code::NAME_TOO_LONG,
            code::UNKNOWN_TAG,
            code::NOT_FOUND,
            code::OUT_OF_RANGE,
            code::EMPTY_RANGE,
            code::TOO_LARGE,
            code::NO_SPACE,
            code::BAD_SCORE,
            code::FILL,
            code::TARGET_CREATE,
            code::TARGET_SIZE,
            code::TARGET_IO,
            code::TARGET_MISMATCH,
            code::CONFIG,
            code::METADATA,
            code::CORRUPT,
            code::CONTROL_IN_NAME,
            code::BAD_POINTER,
            code::BUFFER_TOO_SMALL,
        ]
        .map(|c| c as u64),
    );
    v.push(wire::MAX_NAME_BYTES as u64);
    v.push(u64::from(wire::COPY_SPACE));
    v.extend(
        [
            code::CORRUPT_FRAME,
            code::BAD_CONTEXT,
            code::NO_TARGET_FOR,
            code::CLASS_TOO_LOW,
        ]
        .map(|c| c as u64),
    );
    v.extend(
        [
            wire::compress::SKIP,
            wire::compress::STATIC,
            wire::compress::DYNAMIC,
            wire::codec::LZ4,
            wire::codec::ZSTD,
            wire::preset::BALANCED,
            wire::preset::FAST,
            wire::preset::BEST,
            wire::persistence::VOLATILE,
            wire::persistence::TEMPORARY,
            wire::persistence::LONG_TERM,
        ]
        .map(u64::from),
    );
    v.push(size_of::<wire::PutContext>() as u64);
    v.extend(
        [
            std::mem::offset_of!(wire::PutContext, compress),
            std::mem::offset_of!(wire::PutContext, codec),
            std::mem::offset_of!(wire::PutContext, preset),
            std::mem::offset_of!(wire::PutContext, persistence),
        ]
        .map(|o| o as u64),
    );
    assert_eq!(v.len(), WIRE_VALUES);
    v
}

fn assert_all_ok(outcome: &PutGetOutcome, what: &str) {
    assert_eq!(
        outcome.failed_threads(),
        0,
        "{what}: first failure (rank, status, code) {:?}",
        outcome.first_failure()
    );
}

fn wire_matches_the_header<A: GpuApi>(api: A) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir);
    let runtime = runtime(api, &store);
    let kernels = BlobKernels::load(&runtime.devices()[0]).expect("load the blob kernels");
    assert_eq!(kernels.wire().expect("wire kernel"), expected_wire());
    drop(kernels);
    runtime.shutdown().expect("shutdown");
}

fn kernel_threads_put_and_get_their_blobs<A: GpuApi>(api: A) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir);
    let runtime = runtime(api, &store);
    let (blocks, threads) = grid::<A>();
    let mut kernels = BlobKernels::load(&runtime.devices()[0]).expect("load the blob kernels");
    let rounds = 3;
    for (tag_name, score, blob_bytes, durable) in [
        ("ram", Score::AUTO, 4096u64, false),
        ("file", Score(0.5), 4096 + 100, true),
    ] {
        let tag = store.get_or_create_tag(tag_name).expect("tag");
        let launch = PutGetLaunch {
            score,
            ..PutGetLaunch::new(
                (blocks, threads),
                tag,
                blob_bytes,
                rounds,
                PutGetMode::PutGetCheck,
            )
        };
        let outcome = kernels.put_get(&launch).expect("launch");
        assert_all_ok(&outcome, tag_name);
        // What the kernel left is what the host reads: the last round's bytes.
        let mut back = vec![0u8; blob_bytes as usize];
        for rank in 0..u64::from(blocks * threads) {
            let name = format!("k{rank}");
            let stat = store.stat(tag, &name).expect("stat");
            assert_eq!((stat.size, stat.durable), (blob_bytes, durable), "{name}");
            store.get(tag, &name, 0, &mut back).expect("get");
            for (i, &b) in back.iter().enumerate() {
                assert_eq!(
                    b,
                    pattern(rank, rounds - 1, i as u64),
                    "{tag_name}/{name} byte {i}"
                );
            }
        }
        // One blob per block, filled and checked by the block's threads.
        let outcome = kernels
            .put_get(&PutGetLaunch {
                mode: PutGetMode::BlockPutGetCheck,
                blob_bytes: 64 << 10,
                ..launch
            })
            .expect("block launch");
        assert_all_ok(&outcome, "per block");
        assert_eq!(store.stat(tag, "b0").expect("stat").size, 64 << 10);
        // Gets of what an earlier launch put.
        let outcome = kernels
            .put_get(&PutGetLaunch {
                mode: PutGetMode::Get,
                rounds: 1,
                ..launch
            })
            .expect("get launch");
        assert_all_ok(&outcome, "gets");
    }
    drop(kernels);
    runtime.shutdown().expect("shutdown");
}

fn kernel_errors_come_back_as_codes<A: GpuApi>(api: A) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir);
    let runtime = runtime(api, &store);
    let mut kernels = BlobKernels::load(&runtime.devices()[0]).expect("load the blob kernels");
    let launch = PutGetLaunch::new((2, 8), TagId(0xdead), 64, 1, PutGetMode::PutGetCheck);
    let outcome = kernels.put_get(&launch).expect("launch");
    assert!(
        outcome.status.iter().all(|&s| s == 0),
        "{:?}",
        outcome.status
    );
    assert!(
        outcome.codes.iter().all(|&c| c == code::UNKNOWN_TAG),
        "{:?}",
        outcome.codes
    );
    let tag = store.get_or_create_tag("t").expect("tag");
    let cases = [
        (PutGetMode::Get, Score::AUTO, code::NOT_FOUND),
        (PutGetMode::PutGetCheck, Score(2.0), code::BAD_SCORE),
    ];
    for (mode, score, expected) in cases {
        let outcome = kernels
            .put_get(&PutGetLaunch {
                tag,
                mode,
                score,
                ..launch
            })
            .expect("launch");
        assert!(
            outcome.codes.iter().all(|&c| c == expected),
            "{mode:?}: {:?}",
            outcome.codes
        );
    }
    // The runtime lives on: a clean launch after the errors.
    let outcome = kernels
        .put_get(&PutGetLaunch { tag, ..launch })
        .expect("launch");
    assert_all_ok(&outcome, "after errors");
    drop(kernels);
    runtime.shutdown().expect("shutdown");
}

/// Kernels put their blobs to the object tier (score 0.0), through the same
/// calls; another store on the same bucket (another node, with no runtime)
/// reads every byte, rewrites them, and the kernels get them back.
fn kernels_share_blobs_through_the_object_tier<A: GpuApi>(api: A) {
    use tandem_blob::object_store::{memory::InMemory, ObjectStore};
    use tandem_blob::{ObjectConfig, TargetConfig};
    let bucket: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let open = |dir: &tempfile::TempDir| {
        let mut config = StoreConfig::ram_and_file(dir.path(), 16 << 20);
        config
            .targets
            .push(TargetConfig::object(ObjectConfig::new(None, "memory")));
        Arc::new(BlobStore::open_with_object_store(&config, Arc::clone(&bucket)).expect("open"))
    };
    let (here_dir, there_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (here, there) = (open(&here_dir), open(&there_dir));
    let runtime = runtime(api, &here);
    let (blocks, threads) = grid::<A>();
    let mut kernels = BlobKernels::load(&runtime.devices()[0]).expect("load the blob kernels");
    let tag = here.get_or_create_tag("shared").expect("tag");
    let blob_bytes = 4096 + 100;
    let launch = PutGetLaunch {
        score: Score(0.0),
        ..PutGetLaunch::new(
            (blocks, threads),
            tag,
            blob_bytes,
            1,
            PutGetMode::PutGetCheck,
        )
    };
    assert_all_ok(
        &kernels.put_get(&launch).expect("launch"),
        "puts to the bucket",
    );
    let their_tag = there
        .tag("shared")
        .expect("tag")
        .expect("the bucket has it");
    let mut back = vec![0u8; blob_bytes as usize];
    for rank in 0..u64::from(blocks * threads) {
        let name = format!("k{rank}");
        assert_eq!(here.stat(tag, &name).expect("stat").targets, [2], "{name}");
        there.get(their_tag, &name, 0, &mut back).expect("get");
        for (i, b) in back.iter_mut().enumerate() {
            assert_eq!(*b, pattern(rank, 0, i as u64), "{name} byte {i}");
            *b = !*b;
        }
        there
            .put(&BlobPut::new(their_tag, &name), &back)
            .expect("rewrite");
    }
    let gets = PutGetLaunch {
        mode: PutGetMode::Get,
        ..launch
    };
    assert_all_ok(
        &kernels.put_get(&gets).expect("get launch"),
        "gets from the bucket",
    );
    drop(kernels);
    runtime.shutdown().expect("shutdown");
}

/// Kernels on two devices of one runtime share its store: while both put
/// (device 0 a tag of its own, device 1 puts, gets and compares in another),
/// and then while both get, each device's kernels read back byte for byte
/// the blobs the other device's kernels put.
fn kernels_on_two_devices_share_blobs<A: GpuApi>(load: impl Fn() -> GpuResult<A>) {
    let api = load().expect("the backend, loaded once already");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir);
    let runtime = runtime_on(api, &store, DeviceSelection::Only(vec![0, 1]));
    let (blocks, threads) = grid::<A>();
    let [first, second] = runtime.devices() else {
        panic!("two devices");
    };
    let mut kernels = [
        BlobKernels::load(first).expect("blob kernels on device 0"),
        BlobKernels::load(second).expect("blob kernels on device 1"),
    ];
    let tags = [
        store.get_or_create_tag("from-device-0").expect("tag"),
        store.get_or_create_tag("from-device-1").expect("tag"),
    ];
    // Both tags' blobs fit the RAM target (one page each).
    let blob_bytes = 2048 + 24;
    let launch = |tag, mode| PutGetLaunch::new((blocks, threads), tag, blob_bytes, 1, mode);
    let [zero, one] = &mut kernels;
    let (put0, put1) = std::thread::scope(|s| {
        let put0 = s.spawn(|| zero.put_get(&launch(tags[0], PutGetMode::Put)));
        let put1 = one.put_get(&launch(tags[1], PutGetMode::Put));
        (put0.join().expect("device 0's thread"), put1)
    });
    assert_all_ok(&put0.expect("device 0 puts"), "device 0 puts");
    assert_all_ok(&put1.expect("device 1 puts"), "device 1 puts");
    let (get0, get1) = std::thread::scope(|s| {
        let get0 = s.spawn(|| zero.put_get(&launch(tags[1], PutGetMode::GetCheck)));
        let get1 = one.put_get(&launch(tags[0], PutGetMode::GetCheck));
        (get0.join().expect("device 0's thread"), get1)
    });
    assert_all_ok(
        &get0.expect("device 0 gets"),
        "device 0 gets device 1's blobs",
    );
    assert_all_ok(
        &get1.expect("device 1 gets"),
        "device 1 gets device 0's blobs",
    );
    let first = store.stat(tags[0], "k0").expect("a blob device 0 put");
    assert_eq!(first.size, blob_bytes);
    drop(kernels);
    runtime.shutdown().expect("shutdown");
}

/// Kernels put in a context: compressed (static and dynamic, each codec), at a persistence
/// level; they get their bytes back, and the store says how it keeps them.
fn kernels_put_compressed_blobs<A: GpuApi>(api: A) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir);
    let runtime = runtime(api, &store);
    // Every thread's buffer of several frames comes from its block's share of the segment's
    // arena: the CPU device's grid, on every backend, keeps them inside it.
    let (blocks, threads) = (4, 16);
    let mut kernels = BlobKernels::load(&runtime.devices()[0]).expect("load the blob kernels");
    // Several frames each; the pattern repeats every 256 bytes, so it compresses.
    let blob_bytes = 150_000u64;
    for (tag_name, compression, persistence) in [
        ("zstd", "zstd:fast", Persistence::Volatile),
        ("lz4", "lz4", Persistence::LongTerm),
        ("dynamic", "dynamic:zstd:best", Persistence::Temporary),
    ] {
        let tag = store.get_or_create_tag(tag_name).expect("tag");
        let context = PutContext {
            compression: compression.parse().expect("a compression"),
            persistence,
        };
        let launch = PutGetLaunch {
            context,
            ..PutGetLaunch::new(
                (blocks, threads),
                tag,
                blob_bytes,
                2,
                PutGetMode::PutGetCheck,
            )
        };
        assert_all_ok(&kernels.put_get(&launch).expect("launch"), tag_name);
        let stat = store.stat(tag, "k0").expect("stat");
        assert_eq!(stat.size, blob_bytes, "{tag_name}");
        assert!(stat.persistence >= persistence, "{tag_name}: {stat:?}");
        assert!(!stat.codecs.is_empty(), "{tag_name}: {stat:?}");
        assert!(stat.stored < blob_bytes / 4, "{tag_name}: {stat:?}");
        let outcome = kernels
            .put_get(&PutGetLaunch {
                mode: PutGetMode::BlockPutGetCheck,
                blob_bytes: 1 << 17,
                ..launch
            })
            .expect("block launch");
        assert_all_ok(&outcome, tag_name);
    }
    drop(kernels);
    runtime.shutdown().expect("shutdown");
}

tandem_tests::backend_tests!(
    wire_matches_the_header,
    kernel_threads_put_and_get_their_blobs,
    kernels_put_compressed_blobs,
    kernel_errors_come_back_as_codes,
    kernels_share_blobs_through_the_object_tier;
    two_devices: kernels_on_two_devices_share_blobs,
);

/// Host code in the runtime's process, through the task path.
#[test]
fn host_calls_through_the_task_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(&dir);
    let runtime = runtime_on(
        tandem_hal::HostApi::with_devices(0),
        &store,
        DeviceSelection::Only(vec![]),
    );
    let blobs = BlobCaller::new(&runtime).with_timeout(Duration::from_secs(30));
    let tag = blobs.get_or_create_tag("host").expect("tag");
    assert_eq!(blobs.get_or_create_tag("host").expect("again"), tag);
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(
        blobs
            .put(&BlobPut::new(tag, "a").score(Score(0.5)), &data)
            .expect("put"),
        10_000
    );
    // Past the end extends, the hole reads as zeros.
    assert_eq!(
        blobs
            .put(&BlobPut::new(tag, "a").at(12_000), b"tail")
            .expect("extend"),
        12_004
    );
    let mut back = vec![1u8; 12_004];
    blobs.get(tag, "a", 0, &mut back).expect("get");
    assert_eq!(&back[..10_000], &data[..]);
    assert!(back[10_000..12_000].iter().all(|&b| b == 0));
    assert_eq!(&back[12_000..], b"tail");
    let info = blobs.stat(tag, "a").expect("stat");
    // Put at score 0.5 first: a durable blob, on the file target (index 1).
    assert_eq!((info.size, info.durable, info.targets), (12_004, 1, 0b10));
    assert_eq!(
        blobs.put(&BlobPut::new(tag, "b"), b"bee").expect("put b"),
        3
    );
    assert_eq!(blobs.list_blobs(tag).expect("list"), ["a", "b"]);
    assert!(blobs
        .list_tags()
        .expect("tags")
        .contains(&"host".to_string()));
    assert_eq!(
        blobs.list_blobs(TagId(77)),
        Err(CallError::Blob(code::UNKNOWN_TAG))
    );
    blobs.delete(tag, "b").expect("delete b");

    // A tag looked up is not made; the store answers who it is.
    assert_eq!(blobs.tag("host"), Ok(Some(tag)));
    assert_eq!(blobs.tag("never"), Ok(None));
    assert!(!blobs.list_tags().expect("tags").contains(&"never".into()));
    assert_eq!(blobs.identity(), Ok(store.identity()));

    // One buffer carries a stream of puts and gets, and comes back each time.
    let buffer = runtime.allocate_shared(4096).expect("buffer");
    let mut buffer = buffer;
    for round in 0..3u8 {
        buffer.write(0, &[round; 4096]);
        let (size, back) = blobs
            .put_from(
                &BlobPut::new(tag, "s").at(u64::from(round) * 4096),
                buffer,
                4096,
            )
            .expect("put_from");
        assert_eq!(size, (u64::from(round) + 1) * 4096);
        buffer = back;
    }
    let buffer = blobs
        .get_into(tag, "s", 4096, buffer, 100)
        .expect("get_into");
    let mut part = [0u8; 100];
    buffer.read(0, &mut part);
    assert_eq!(part, [1u8; 100]);
    assert_eq!(
        blobs
            .put_from(&BlobPut::new(tag, "s"), buffer, 4097)
            .map(|(size, _)| size),
        Err(CallError::Blob(code::BAD_POINTER)),
        "a length past the buffer's end"
    );
    blobs.delete(tag, "s").expect("delete s");

    let mut past = [0u8; 8];
    assert_eq!(
        blobs.get(tag, "a", 12_000, &mut past),
        Err(CallError::Blob(code::OUT_OF_RANGE))
    );
    assert_eq!(blobs.stat(tag, "b"), Err(CallError::Blob(code::NOT_FOUND)));
    assert_eq!(
        blobs.put(&BlobPut::new(TagId(77), "a"), b"x"),
        Err(CallError::Blob(code::UNKNOWN_TAG))
    );
    assert_eq!(
        blobs.put(&BlobPut::new(tag, ""), b"x"),
        Err(CallError::Blob(code::EMPTY_NAME))
    );
    let long = "n".repeat(wire::MAX_NAME_BYTES + 1);
    assert_eq!(
        blobs.put(&BlobPut::new(tag, &long), b"x"),
        Err(CallError::Blob(code::NAME_TOO_LONG))
    );
    assert_eq!(
        blobs.put(&BlobPut::new(tag, "a"), &[]),
        Err(CallError::Blob(code::EMPTY_RANGE))
    );
    assert_eq!(
        blobs.put(&BlobPut::new(tag, "a").at(u64::MAX - 2), b"xyz"),
        Err(CallError::Blob(code::TOO_LARGE))
    );
    let err = blobs.stat(tag, "b").unwrap_err().to_string();
    assert!(err.contains("no such blob"), "{err}");

    // A data pointer outside the caller's segment: refused, nothing written.
    let segment = runtime.cpu_segment();
    let foreign = ShmPtr::new(
        AllocatorId::new(segment.id().major, segment.id().minor + 1),
        4096,
    );
    let bad = Put {
        tag: tag.0,
        name: "c".into(),
        offset: 0,
        len: 16,
        data: SharedRef::from(foreign),
        score: -1.0,
        context: wire::PutContext::default(),
    };
    let stop = std::sync::atomic::AtomicU32::new(0);
    let result = runtime
        .submit(tandem_runtime::Route::lane(0), &bad)
        .expect("submit")
        .wait(&stop, None);
    assert_eq!(
        result.map_err(CallError::from),
        Err(CallError::Blob(code::BAD_POINTER))
    );
    assert_eq!(blobs.stat(tag, "c"), Err(CallError::Blob(code::NOT_FOUND)));

    // A context no PutContext makes: refused before any byte is read.
    let odd = Put {
        context: wire::PutContext {
            compress: 9,
            ..wire::PutContext::default()
        },
        ..bad
    };
    let result = runtime
        .submit(tandem_runtime::Route::lane(0), &odd)
        .expect("submit")
        .wait(&stop, None);
    assert_eq!(
        result.map_err(CallError::from),
        Err(CallError::Blob(code::BAD_CONTEXT))
    );
    // In a context, through the same path: compressed, read back whole.
    let smooth: Vec<u8> = (0..300_000u32).map(|i| (i / 1000) as u8).collect();
    let context = PutContext {
        compression: "zstd:balanced".parse().expect("a compression"),
        persistence: Persistence::LongTerm,
    };
    blobs
        .put(&BlobPut::new(tag, "z").context(context), &smooth)
        .expect("a compressed put");
    let info = blobs.stat(tag, "z").expect("stat");
    assert_eq!((info.size, info.durable), (smooth.len() as u64, 1));
    let mut back = vec![0; smooth.len()];
    blobs.get(tag, "z", 0, &mut back).expect("get");
    assert!(back == smooth);

    blobs.delete(tag, "a").expect("delete");
    assert_eq!(blobs.stat(tag, "a"), Err(CallError::Blob(code::NOT_FOUND)));
    // Every buffer went back to the heap.
    let stats = segment.heap().stats().expect("stats");
    assert_eq!(stats.free_bytes(), stats.carved_bytes);
    runtime.shutdown().expect("shutdown");
}
