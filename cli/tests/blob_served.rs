//! `tandem blob put`, `get`, `ls`, `stat` and `rm` through a running
//! `tandem blob run` (a child of the test, on the CPU device): found by the
//! store it serves, or named with `--segment`; a second runtime serving
//! another store is never taken for it; a piped put larger than the
//! client's heap streams in bounded memory, and so does a get; a runtime
//! killed in the middle of a put ends the command with an error, not a
//! hang.

mod common;

use common::{blob, blob_command, blob_fails, text};

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `tandem blob args...` expecting success: its stdout.
fn ok(args: &[&str]) -> String {
    let out = blob(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// A runtime configuration (CPU queues only, the default client heap) with
/// a store in `dir` as `[blob]`: one file target of `capacity` bytes.
fn config(dir: &Path, capacity: u64) -> String {
    let text = format!(
        "workers = 2\ndevices = []\n[blob]\nmetadata = {:?}\n\
         [[blob.targets]]\nkind = \"file\"\npath = {:?}\ncapacity = {capacity}\nscore = 0.5\n",
        dir.join("meta.redb"),
        dir.join("target0.dat"),
    );
    let path = dir.join("tandem.toml");
    std::fs::write(&path, text).expect("write config");
    path.to_str().expect("utf-8 path").into()
}

/// A running runtime: `tandem blob run` or `tandem run`, stopped by
/// closing its stdin (or killed by the cleanup if the test fails first).
struct Runtime {
    /// Its CPU segment.
    segment: String,
    pid: u32,
    /// The index of its child in the cleanup.
    child: usize,
}

fn start(args: &[&str], cleanup: &mut common::Cleanup) -> Runtime {
    let mut child = common::tandem()
        .args(args)
        .args(["--announce", "--exit-on-stdin-eof"])
        .env_remove("TANDEM_BLOB_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the runtime");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    cleanup.children.push(child);
    let ready = lines.next().expect("a ready line").expect("stdout");
    let mut words = ready
        .strip_prefix("ready ")
        .unwrap_or_else(|| panic!("ready line {ready:?}"))
        .split(' ');
    Runtime {
        segment: words.next().expect("segment").into(),
        pid: words.next().and_then(|p| p.parse().ok()).expect("pid"),
        child: cleanup.children.len() - 1,
    }
}

/// Closes the runtime's stdin, which stops it, and checks it ended well.
fn stop(runtime: &Runtime, cleanup: &mut common::Cleanup) {
    let child = &mut cleanup.children[runtime.child];
    drop(child.stdin.take());
    assert!(child.wait().expect("wait").success(), "the runtime's exit");
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// Writes `data` to `stdin` from a thread, then closes it.
fn feed(mut stdin: ChildStdin, data: Vec<u8>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        // The command may have failed and left: its error is the test's.
        let _ = stdin.write_all(&data);
    })
}

/// Waits for `child`: its exit status, and the most resident memory it was
/// seen holding (`VmHWM`, sampled while it runs: wait4's `ru_maxrss` would
/// count this test process's memory, which the child shared until its exec).
fn wait_with_peak(child: &mut Child) -> (ExitStatus, u64) {
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        let high_water = std::fs::read_to_string(&status_file)
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            });
        peak = peak.max(high_water.unwrap_or(0) * 1024);
        if let Some(status) = child.try_wait().expect("wait") {
            return (status, peak);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A put and a listing through the runtime, a second runtime serving
/// another store, and `--segment`.
#[test]
fn the_commands_go_through_the_runtime_serving_their_store() {
    let mut cleanup = common::Cleanup::default();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = config(dir_a.path(), 16 << 20);
    let b = config(dir_b.path(), 16 << 20);
    let runtime_a = start(&["blob", "run", "--config", &a], &mut cleanup);
    let runtime_b = start(&["blob", "run", "--config", &b], &mut cleanup);
    let plain = start(&["run"], &mut cleanup);

    let file = dir_a.path().join("input.bin");
    let data = pattern(1, 300_000);
    std::fs::write(&file, &data).unwrap();
    let input = file.to_str().unwrap();
    let said = ok(&["put", input, "--config", &a, "--tag", "files"]);
    assert!(said.contains("put files/input.bin: 300000 bytes"), "{said}");
    assert!(said.contains("durable"), "{said}");
    // A pipe, as standard input.
    let mut put = blob_command(&[
        "put", "-", "--config", &a, "--tag", "files", "--name", "piped",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let feeder = feed(put.stdin.take().unwrap(), data[..200_000].to_vec());
    let out = put.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("put files/piped: 200000 bytes"));
    let said = ok(&[
        "put", input, "--config", &b, "--tag", "other", "--name", "b",
    ]);
    assert!(said.contains("put other/b: 300000 bytes"), "{said}");

    // Each store's listing is its own.
    let tags = ok(&["ls", "--config", &a]);
    let row = tags.lines().find(|l| l.ends_with(" files")).expect(&tags);
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>()[1..],
        ["2", "500000", "files"]
    );
    assert!(!tags.contains("other"), "{tags}");
    assert!(!ok(&["ls", "--config", &b]).contains("files"));
    let blobs = ok(&["ls", "--config", &a, "--tag", "files"]);
    for (name, size) in [("input.bin", "300000"), ("piped", "200000")] {
        let row = blobs.lines().find(|l| l.ends_with(name)).expect(&blobs);
        assert!(
            row.trim_start().starts_with(&format!("{size} durable")),
            "{row}"
        );
    }
    let stat = ok(&["stat", "piped", "--config", &a, "--tag", "files"]);
    assert!(stat.contains("size     200000"), "{stat}");
    assert!(stat.contains("target0.dat"), "{stat}");

    // Back byte for byte: to stdout, to a file, a part.
    let out = blob(&["get", "input.bin", "--config", &a, "--tag", "files"]);
    assert!(
        out.status.success() && out.stdout == data,
        "{}",
        text(&out.stderr)
    );
    let back = dir_a.path().join("back.bin");
    let back_s = back.to_str().unwrap();
    ok(&[
        "get", "piped", "--config", &a, "--tag", "files", "-o", back_s,
    ]);
    assert!(std::fs::read(&back).unwrap() == data[..200_000]);
    let out = blob(&[
        "get", "piped", "--config", &a, "--tag", "files", "--offset", "1000", "--len", "5",
    ]);
    assert_eq!(out.stdout, data[1000..1005]);

    // `--segment`: the runtime serving this store, or a refusal.
    let by_name = ok(&["ls", "--config", &a, "--segment", &runtime_a.segment]);
    assert!(by_name.contains(" files"), "{by_name}");
    let err = blob_fails(&["ls", "--config", &a, "--segment", &runtime_b.segment]);
    assert!(err.contains("serves another store"), "{err}");
    assert!(
        err.contains(&dir_a.path().join("meta.redb").display().to_string()),
        "{err}"
    );
    let err = blob_fails(&["ls", "--config", &a, "--segment", &plain.segment]);
    assert!(err.contains("serves no blob store"), "{err}");
    let err = blob_fails(&["ls", "--config", &a, "--segment", "tandem-no-such-segment"]);
    assert!(err.contains("tandem-no-such-segment"), "{err}");

    // Errors, as without a runtime; a look makes no tag.
    let err = blob_fails(&["stat", "x", "--config", &a, "--tag", "nope"]);
    assert!(err.contains("unknown tag \"nope\""), "{err}");
    assert!(!ok(&["ls", "--config", &a]).contains("nope"));
    let err = blob_fails(&["get", "missing", "--config", &a, "--tag", "files"]);
    assert!(
        err.contains("blob \"missing\" not found in tag \"files\""),
        "{err}"
    );
    let err = blob_fails(&[
        "get", "piped", "--config", &a, "--tag", "files", "--offset", "199999", "--len", "2",
    ]);
    assert!(err.contains("size 200000"), "{err}");

    let said = ok(&["rm", "piped", "--config", &a, "--tag", "files"]);
    assert!(said.contains("removed files/piped"), "{said}");
    let err = blob_fails(&["rm", "piped", "--config", &a, "--tag", "files"]);
    assert!(err.contains("not found"), "{err}");

    for runtime in [&runtime_a, &runtime_b, &plain] {
        stop(runtime, &mut cleanup);
    }
    // What went through the runtimes is in their stores, opened directly now.
    let out = blob(&["get", "input.bin", "--config", &a, "--tag", "files"]);
    assert!(out.stdout == data, "{}", text(&out.stderr));
    let out = blob(&["get", "b", "--config", &b, "--tag", "other"]);
    assert!(out.stdout == data, "{}", text(&out.stderr));
    assert!(!ok(&["ls", "--config", &a, "--tag", "files"]).contains("piped"));
}

/// `put` and `stat` through a runtime say how a blob is kept (its
/// persistence level, the bytes it takes, its codecs) as they do on the
/// store opened directly.
#[test]
fn served_put_and_stat_say_how_the_blob_is_kept() {
    let mut cleanup = common::Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let a = config(dir.path(), 16 << 20);
    // Zeros compress: the stored bytes differ from the size.
    let file = dir.path().join("zeros.bin");
    std::fs::write(&file, vec![0u8; 1 << 20]).unwrap();
    let input = file.to_str().unwrap();
    let put = |name: &str| {
        ok(&[
            "put",
            input,
            "--config",
            &a,
            "--tag",
            "t",
            "--name",
            name,
            "--compress",
            "zstd:fast",
            "--persistence",
            "temporary",
        ])
    };
    let stat = |name: &str| ok(&["stat", name, "--config", &a, "--tag", "t"]);
    let direct = (put("same"), stat("same"));
    ok(&["rm", "same", "--config", &a, "--tag", "t"]);
    let runtime = start(&["blob", "run", "--config", &a], &mut cleanup);
    let served = (put("same"), stat("same"));
    stop(&runtime, &mut cleanup);

    assert_eq!(served.0, direct.0);
    assert!(
        served.0.contains("durable (temporary), stored ") && served.0.contains(" bytes, zstd"),
        "{}",
        served.0
    );
    let line = |text: &str, key: &str| {
        text.lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} line in {text}"))
            .to_owned()
    };
    for key in ["class ", "stored "] {
        assert_eq!(line(&served.1, key), line(&direct.1, key));
    }
    assert_eq!(line(&served.1, "class "), "class    durable (temporary)");
    let stored = line(&served.1, "stored ");
    assert!(stored.ends_with(" bytes, zstd"), "{stored}");
    assert_ne!(stored, format!("stored   {} bytes, zstd", 1 << 20));
}

/// Bytes a piped put or a get moves in the memory test: more than a
/// command may hold at once.
const LARGE: usize = 64 << 20;
/// The most a command moving `LARGE` bytes may hold resident.
const PEAK_BOUND: u64 = 40 << 20;

/// Pipes `data` into `tandem blob put - args...`: its output and peak memory.
fn put_piped(args: &[&str], data: Vec<u8>) -> (Output, u64) {
    let mut child = blob_command(&[&["put", "-"][..], args].concat())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let feeder = feed(child.stdin.take().unwrap(), data);
    let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (stdout, stderr) = (read_all(stdout), read_all(stderr));
    let (status, peak) = wait_with_peak(&mut child);
    feeder.join().unwrap();
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    (
        Output {
            status,
            stdout,
            stderr,
        },
        peak,
    )
}

/// Reads `from` to its end in a thread.
fn read_all(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        from.read_to_end(&mut bytes).expect("read a child's output");
        bytes
    })
}

/// A piped put of more than the client's heap, through the runtime and
/// directly, and a get of it to a pipe, each in bounded memory.
#[test]
fn large_pipes_stream_in_bounded_memory() {
    let mut cleanup = common::Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2 * LARGE as u64);
    let runtime = start(&["blob", "run", "--config", &cfg], &mut cleanup);
    let data = pattern(2, LARGE);

    let args = ["--config", &cfg, "--tag", "big", "--name", "served"];
    let (out, peak) = put_piped(&args, data.clone());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&format!("{LARGE} bytes")));
    assert!(
        peak < PEAK_BOUND,
        "a put through the runtime held {peak} bytes"
    );

    let mut get = blob_command(&["get", "served", "--config", &cfg, "--tag", "big"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let reader = read_all(get.stdout.take().unwrap());
    let (status, peak) = wait_with_peak(&mut get);
    let back = reader.join().unwrap();
    assert!(status.success());
    assert!(back == data, "the blob came back different");
    assert!(
        peak < PEAK_BOUND,
        "a get through the runtime held {peak} bytes"
    );

    stop(&runtime, &mut cleanup);
    let args = ["--config", &cfg, "--tag", "big", "--name", "direct"];
    let (out, peak) = put_piped(&args, data.clone());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        peak < PEAK_BOUND,
        "a put to the store opened directly held {peak} bytes"
    );
    let out = blob(&["get", "direct", "--config", &cfg, "--tag", "big"]);
    assert!(out.stdout == data, "{}", text(&out.stderr));
}

/// The runtime killed while a piped put goes through it: the put ends
/// with an error naming the runtime, in bounded time.
#[test]
fn a_runtime_killed_mid_put_fails_the_put() {
    let mut cleanup = common::Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 16 << 20);
    let runtime = start(&["blob", "run", "--config", &cfg], &mut cleanup);
    let mut put = blob_command(&["put", "-", "--config", &cfg, "--tag", "t", "--name", "x"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = put.stdin.take().unwrap();
    // Chunks go through before the kill (the put waits for more input).
    stdin.write_all(&pattern(3, 1 << 20)).unwrap();
    let blob_listed = Instant::now();
    while !text(&blob(&["ls", "--config", &cfg, "--tag", "t"]).stdout).contains(" x") {
        assert!(
            blob_listed.elapsed() < Duration::from_secs(30),
            "no chunk arrived"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let child = &mut cleanup.children[runtime.child];
    child.kill().unwrap();
    child.wait().unwrap();
    // More input: the next chunk meets the dead runtime.
    let _ = stdin.write_all(&pattern(4, 1 << 20));
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(60);
    while put.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the put hangs");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = put.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.starts_with("tandem blob: "), "{err}");
    assert!(
        err.contains(&format!(
            "the runtime of segment {} (pid {})",
            runtime.segment, runtime.pid
        )) && err.contains("died"),
        "{err}"
    );
    // The client removed the dead runtime's segment on its way out.
    assert!(
        !std::path::Path::new("/dev/shm")
            .join(&runtime.segment)
            .exists(),
        "{} left behind",
        runtime.segment
    );
    // The store is free again, and opens directly.
    ok(&["ls", "--config", &cfg]);
}
