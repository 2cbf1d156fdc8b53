//! The C boundary's cost: a task's round trip (the math pool's add) and a
//! 4 KiB blob put from host code, through the C ABI (`tandem_client_add`,
//! `tandem_blob_put`) against the Rust client doing the same
//! (`Client::call`, `BlobCaller::put`), in one run against one runtime.
//! Both clients attach to the runtime's CPU segment as another process's
//! would; rounds alternate which goes first so drift hits both, and each row
//! prints the medians of the rounds and their ratio (C / Rust).
//!
//! Then a range read of a sealed shared buffer (`tandem_share_buffer_read`
//! of 4 KiB) beside a read of the whole 64 MiB buffer, through a share
//! daemon it spawns (the `tandem` binary; the rows say they skipped
//! without it): a range read copies only the range, so it costs a small
//! part of the whole one.
//!
//! `cargo bench -p tandem-capi --bench boundary`

use std::ffi::CString;
use std::ptr::null_mut;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tandem_blob::BlobPut;

use tandem::layout::Status;
use tandem::{
    tandem_blob_put, tandem_blob_tag, tandem_client_add, tandem_client_attach, tandem_client_close,
    tandem_share_buffer_close, tandem_share_buffer_read, tandem_share_buffer_seal,
    tandem_share_close, tandem_share_create, tandem_share_spawn,
};
use tandem_blob::{pool, wire, BlobCaller, BlobStore, StoreConfig};
use tandem_hal::HostApi;
use tandem_runtime::{math, Client, Config, Registry, Route, Runtime};

const ROUNDS: usize = 7;
const ROUND_TRIPS: u32 = 2000;
const PUTS: u32 = 300;
const BLOB_BYTES: usize = 4096;
const SHARED_BYTES: usize = 64 << 20;
const RANGE_BYTES: usize = 4096;
const RANGE_READS: u32 = 200;
const WHOLE_READS: u32 = 5;

/// The median of `samples` (per-operation times).
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Times `ops` calls of `op`, per call.
fn per_op(ops: u32, mut op: impl FnMut(u32)) -> Duration {
    let started = Instant::now();
    for i in 0..ops {
        op(i);
    }
    started.elapsed() / ops
}

fn row(what: &str, rust: Duration, c: Duration) {
    println!(
        "{what:<28} {:>10.2} us {:>10.2} us {:>8.3}x",
        rust.as_secs_f64() * 1e6,
        c.as_secs_f64() * 1e6,
        c.as_secs_f64() / rust.as_secs_f64()
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = BlobStore::open(&StoreConfig::ram_and_file(dir.path(), 256 << 20))?;
    let mut registry = Registry::with_builtins();
    pool::register(&mut registry, Arc::new(store))?;
    let config = Config {
        cpu_segment_name: Some(format!("tandem-capi-bench-{}", std::process::id())),
        // Host clients' blob calls need the pool's copy space.
        copy_space: Config::default().copy_space.max(wire::COPY_SPACE),
        ..Config::default()
    };
    let runtime = Runtime::<HostApi>::start(config, registry)?;
    let name = runtime
        .cpu_segment()
        .name()
        .ok_or("the CPU segment has no name")?
        .to_owned();

    let rust = Client::attach(&name)?;
    let blobs = BlobCaller::new(&rust);
    let mut c = null_mut();
    let c_name = CString::new(name)?;
    // SAFETY: a NUL-terminated name and a writable output.
    if unsafe { tandem_client_attach(c_name.as_ptr(), &mut c) } != Status::Ok {
        return Err("tandem_client_attach failed".into());
    }
    let stop = AtomicU32::new(0);
    let tag = blobs.get_or_create_tag("bench")?;
    let mut c_tag = 0;
    // SAFETY: a live handle, a NUL-terminated name, a writable output.
    let tagged = unsafe { tandem_blob_tag(c, c"bench".as_ptr(), 0, &mut c_tag) };
    assert_eq!(tagged, Status::Ok);
    let data = vec![7u8; BLOB_BYTES];
    let names: Vec<CString> = (0..PUTS)
        .map(|i| CString::new(format!("b{i}")).expect("a name"))
        .collect();

    let rust_round = || {
        let trip = per_op(ROUND_TRIPS, |i| {
            let sum = rust
                .call(
                    Route::lane(0),
                    &math::Add { a: i.into(), b: 1 },
                    &stop,
                    None,
                )
                .expect("a round trip");
            assert_eq!(sum, u64::from(i) + 1);
        });
        let put = per_op(PUTS, |i| {
            let name = names[i as usize].to_str().expect("ASCII");
            blobs.put(&BlobPut::new(tag, name), &data).expect("a put");
        });
        (trip, put)
    };
    let c_round = || {
        let trip = per_op(ROUND_TRIPS, |i| {
            let mut sum = 0;
            // SAFETY: a live handle and a writable output.
            let status = unsafe { tandem_client_add(c, 0, i.into(), 1, 0, &mut sum) };
            assert_eq!((status, sum), (Status::Ok, u64::from(i) + 1));
        });
        let put = per_op(PUTS, |i| {
            // SAFETY: a live handle, a NUL-terminated name, `data` of its length.
            let status = unsafe {
                tandem_blob_put(
                    c,
                    c_tag,
                    names[i as usize].as_ptr(),
                    0,
                    data.as_ptr(),
                    data.len(),
                    0,
                    null_mut(),
                )
            };
            assert_eq!(status, Status::Ok);
        });
        (trip, put)
    };
    let (mut rust_trip, mut c_trip, mut rust_put, mut c_put) = (vec![], vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        // Each side goes first in every other round, so that neither only
        // ever runs on a warmer store.
        let (r, c) = if round % 2 == 0 {
            let r = rust_round();
            (r, c_round())
        } else {
            let c = c_round();
            (rust_round(), c)
        };
        rust_trip.push(r.0);
        rust_put.push(r.1);
        c_trip.push(c.0);
        c_put.push(c.1);
    }
    println!("tandem-capi boundary: median of {ROUNDS} rounds, per operation, host backend");
    println!(
        "{:<28} {:>13} {:>13} {:>9}",
        "operation", "Rust client", "C ABI", "C/Rust"
    );
    row("task round trip (add)", median(rust_trip), median(c_trip));
    row("blob put, 4 KiB", median(rust_put), median(c_put));
    assert_eq!(tandem_client_close(c), Status::Ok);
    // The clients detach before the runtime stops.
    drop(rust);
    runtime.shutdown()?;
    share_reads()
}

/// Prints a 4 KiB range read of a sealed 64 MiB shared buffer beside a
/// read of all of it, medians of [`ROUNDS`] rounds.
fn share_reads() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(bin) = tandem_process::find_tandem_binary() else {
        println!("share reads: skipped: no tandem binary (cargo build -p tandem-cli --bin tandem)");
        return Ok(());
    };
    let bin = CString::new(bin.into_os_string().into_encoded_bytes())?;
    let (mut share, mut buffer, mut id) = (null_mut(), null_mut(), 0);
    // SAFETY: a NUL-terminated path and writable outputs.
    unsafe {
        if tandem_share_spawn(bin.as_ptr(), &mut share) != Status::Ok
            || tandem_share_create(share, 0, SHARED_BYTES, &mut id, &mut buffer) != Status::Ok
        {
            return Err("spawning a share daemon and creating a buffer failed".into());
        }
    }
    // Sealed, reads take the path a reader's do: after the seal, from the
    // buffer's device.
    assert_eq!(tandem_share_buffer_seal(buffer), Status::Ok);
    let mut out = vec![0u8; SHARED_BYTES];
    let read = |offset: usize, out: &mut [u8]| {
        // SAFETY: a live handle and `out` writable for its length.
        let status =
            unsafe { tandem_share_buffer_read(buffer, offset, out.as_mut_ptr(), out.len()) };
        assert_eq!(status, Status::Ok);
    };
    let (mut range, mut whole) = (vec![], vec![]);
    for _ in 0..ROUNDS {
        range.push(per_op(RANGE_READS, |i| {
            let offset = (i as usize * 7919 * RANGE_BYTES) % (SHARED_BYTES - RANGE_BYTES);
            read(offset, &mut out[..RANGE_BYTES]);
        }));
        whole.push(per_op(WHOLE_READS, |_| read(0, &mut out)));
    }
    let (range, whole) = (median(range), median(whole));
    println!(
        "{:<28} {:>13} {:>13} {:>9}",
        "shared buffer read (C ABI)", "4 KiB range", "whole 64 MiB", "whole/range"
    );
    println!(
        "{:<28} {:>10.2} us {:>10.2} us {:>8.1}x",
        "tandem_share_buffer_read",
        range.as_secs_f64() * 1e6,
        whole.as_secs_f64() * 1e6,
        whole.as_secs_f64() / range.as_secs_f64()
    );
    assert_eq!(tandem_share_buffer_close(buffer), Status::Ok);
    assert_eq!(tandem_share_close(share), Status::Ok);
    Ok(())
}
