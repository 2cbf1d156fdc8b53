//! The `tandem blob` binary: a runtime serving the blob pool to a client in
//! another process (started through `Client::fork_runtime_with`, the store
//! configured by `TANDEM_BLOB_CONFIG`), the store commands (`put`, `ls`,
//! `stat`, `get`, `rm`) on a store no runtime serves and their errors
//! (`blob_served.rs` has them through a runtime), and the demo's verdict.

mod common;

use common::{blob, blob_fails, text};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use tandem_blob::BlobPut;

use tandem_blob::wire::{self, code};
use tandem_blob::{BlobCaller, CallError, Score, TagId};
use tandem_runtime::{Config, DeviceSelection};

/// `tandem` (`tandem blob ...` are the commands under test).
fn exe() -> PathBuf {
    common::tandem_exe()
}

/// A store configuration (the `StoreConfig` fields) in `dir`: a RAM target
/// when `ram`, and a file target.
fn store_toml(dir: &Path, ram: bool) -> String {
    let mut text = format!("metadata = {:?}\n", dir.join("meta.redb"));
    if ram {
        text.push_str("[[targets]]\nkind = \"ram\"\ncapacity = 16777216\nscore = 1.0\n");
    }
    text.push_str(&format!(
        "[[targets]]\nkind = \"file\"\npath = {:?}\ncapacity = 16777216\nscore = 0.5\n",
        dir.join("target0.dat")
    ));
    text
}

/// A runtime configuration (CPU queues only) with the store as `[blob]`.
fn runtime_toml(dir: &Path) -> PathBuf {
    let store = store_toml(dir, false).replace("[[targets]]", "[[blob.targets]]");
    let text = format!("workers = 1\ndevices = []\n[blob]\n{store}");
    let path = dir.join("tandem.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    tandem_tests::support::xorshift_bytes(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1, len)
}

/// A script that runs `tandem blob` with `TANDEM_BLOB_CONFIG` set, so that
/// this test process's environment stays as it is (other tests run beside).
fn wrapper(dir: &Path, store_config: &Path) -> PathBuf {
    let path = dir.join("tandem-blob-wrapper");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nTANDEM_BLOB_CONFIG={:?} RUST_LOG=warn exec {:?} blob \"$@\"\n",
            store_config,
            exe()
        ),
    )
    .expect("write wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// What a call the store refuses with `code` returns.
fn blob_err<T>(code: i32) -> Result<T, CallError> {
    Err(CallError::Blob(code))
}

#[test]
fn a_client_in_another_process_calls_the_blob_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store_config = dir.path().join("store.toml");
    std::fs::write(&store_config, store_toml(dir.path(), true)).expect("store config");
    let config = Config {
        workers: 2,
        devices: DeviceSelection::Only(vec![]),
        cpu_segment_size: 8 << 20,
        // Room for the blobs' buffers: freed blocks stay in their size
        // class, so a heap of the default size runs out over many sizes.
        max_clients: 2,
        client_heap_bytes: 1 << 20,
        ..Config::default()
    };
    // copy_space is left at its default: `run` raises it for blob tasks.
    assert!(config.copy_space < wire::COPY_SPACE);
    let client = common::fork_script(&wrapper(dir.path(), &store_config), &config);
    let caller = BlobCaller::new(&client);

    let tag = caller.get_or_create_tag("process").expect("tag");
    assert_eq!(caller.get_or_create_tag("process"), Ok(tag));
    let long_name = "n".repeat(wire::MAX_NAME_BYTES);
    for (i, (name, len, score)) in [
        ("small", 100usize, Score::AUTO),
        ("pages", 3 * 4096 + 5, Score(0.5)),
        (long_name.as_str(), 40_000, Score(1.0)),
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(i as u64, len);
        assert_eq!(
            caller.put(&BlobPut::new(tag, name).score(score), &data),
            Ok(len as u64)
        );
        assert_eq!(caller.stat(tag, name).map(|s| s.size), Ok(len as u64));
        let mut back = vec![0u8; len];
        caller.get(tag, name, 0, &mut back).expect("get");
        assert!(back == data, "{name}: bytes differ");
        // A part, and an overwrite that extends with a hole.
        let mut part = vec![0u8; 10];
        caller.get(tag, name, 50, &mut part).expect("get part");
        assert_eq!(part, data[50..60]);
        let end = len as u64 + 5000;
        assert_eq!(
            caller.put(&BlobPut::new(tag, name).at(end).score(score), b"tail"),
            Ok(end + 4)
        );
        let mut hole = vec![1u8; 5004];
        caller
            .get(tag, name, len as u64, &mut hole)
            .expect("get hole");
        assert!(hole[..5000].iter().all(|&b| b == 0) && &hole[5000..] == b"tail");
    }

    // Typed errors, and the runtime lives on ('small' is 5104 bytes now).
    let mut out = [0u8; 8];
    assert_eq!(
        caller.get(tag, "missing", 0, &mut out),
        blob_err(code::NOT_FOUND)
    );
    assert_eq!(
        caller.stat(TagId(9999), "small"),
        blob_err(code::UNKNOWN_TAG)
    );
    assert_eq!(
        caller.get(tag, "small", 5100, &mut out),
        blob_err(code::OUT_OF_RANGE)
    );
    assert_eq!(
        caller.put(&BlobPut::new(tag, "x").score(Score(2.0)), b"abc"),
        blob_err(code::BAD_SCORE)
    );
    assert_eq!(caller.stat(tag, ""), blob_err(code::EMPTY_NAME));
    let too_long = "n".repeat(wire::MAX_NAME_BYTES + 1);
    assert_eq!(caller.stat(tag, &too_long), blob_err(code::NAME_TOO_LONG));
    assert_eq!(
        caller.put(&BlobPut::new(tag, "x").at(u64::MAX - 1), b"abc"),
        blob_err(code::TOO_LARGE)
    );

    for name in ["small", "pages", long_name.as_str()] {
        assert_eq!(caller.delete(tag, name), Ok(()));
        assert_eq!(caller.stat(tag, name), blob_err(code::NOT_FOUND));
        assert_eq!(caller.delete(tag, name), blob_err(code::NOT_FOUND));
    }
    assert_eq!(caller.put(&BlobPut::new(tag, "again"), b"alive"), Ok(5));

    // Every buffer and future went back to the client's heap.
    let slot = client
        .segment()
        .clients()
        .and_then(|t| t.slot(client.slot()))
        .expect("the client's slot");
    assert_eq!((slot.bytes_in_use, slot.futures), (0, 0), "{slot:?}");
    drop(client);
}

#[test]
fn every_subcommand_has_help_and_usage_errors_exit_2() {
    for words in [
        &[][..],
        &["run"],
        &["put"],
        &["get"],
        &["ls"],
        &["stat"],
        &["rm"],
        &["demo"],
    ] {
        let args: Vec<&str> = words.iter().copied().chain(["--help"]).collect();
        let out = blob(&args);
        assert!(out.status.success(), "{args:?}");
        let usage = format!("Usage: tandem blob {}", words.join(" "));
        assert!(text(&out.stdout).contains(usage.trim_end()), "{args:?}");
    }
    for (args, message) in [
        (&["get", "x"][..], "--tag <TAG>"),
        (&["put", "--tag", "t"], "<FILE>"),
        (&["ls", "--bogus"], "unexpected argument '--bogus'"),
        (&["serve"], "unrecognized subcommand 'serve'"),
    ] {
        let out = blob(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains(message), "{args:?}");
    }
}

#[test]
fn the_store_commands_put_list_get_and_remove() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = runtime_toml(dir.path());
    let cfg = config.to_str().expect("utf-8 path");
    let file = dir.path().join("input.bin");
    let data = pattern(7, 300_000);
    std::fs::write(&file, &data).expect("input");
    let input = file.to_str().expect("utf-8 path");

    let out = blob(&["put", input, "--config", cfg, "--tag", "files"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("put files/input.bin: 300000 bytes"));
    let out = blob(&[
        "put", input, "--config", cfg, "--tag", "files", "--name", "two", "--score", "0.5",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let tags = text(&blob(&["ls", "--config", cfg]).stdout);
    let row = tags
        .lines()
        .find(|l| l.ends_with(" files"))
        .expect("tag row");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>()[1..],
        ["2", "600000", "files"]
    );
    let blobs = text(&blob(&["ls", "--config", cfg, "--tag", "files"]).stdout);
    for name in ["input.bin", "two"] {
        let row = blobs.lines().find(|l| l.ends_with(name)).expect("blob row");
        assert!(row.trim_start().starts_with("300000 durable"), "{row}");
    }
    let stat = text(&blob(&["stat", "two", "--config", cfg, "--tag", "files"]).stdout);
    assert!(
        stat.contains("size     300000") && stat.contains("class    durable"),
        "{stat}"
    );

    // In a context: compressed, long-term; stat says how it is kept.
    let smooth: Vec<u8> = (0..200_000u32).map(|i| (i / 512) as u8).collect();
    let smooth_file = dir.path().join("smooth.bin");
    std::fs::write(&smooth_file, &smooth).expect("input");
    let out = blob(&[
        "put",
        smooth_file.to_str().expect("utf-8 path"),
        "--config",
        cfg,
        "--tag",
        "files",
        "--compress",
        "zstd:fast",
        "--persistence",
        "long-term",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("durable (long-term)"),
        "{}",
        text(&out.stdout)
    );
    let stat = text(&blob(&["stat", "smooth.bin", "--config", cfg, "--tag", "files"]).stdout);
    assert!(
        stat.contains("class    durable (long-term)") && stat.contains(", zstd"),
        "{stat}"
    );
    let out = blob(&["get", "smooth.bin", "--config", cfg, "--tag", "files"]);
    assert!(out.stdout == smooth, "compressed blob differs");
    let out = blob(&["rm", "smooth.bin", "--config", cfg, "--tag", "files"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A value clap refuses: a usage error.
    let out = blob(&[
        "put",
        input,
        "--config",
        cfg,
        "--tag",
        "files",
        "--compress",
        "gzip",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("the codec is zstd or lz4"),
        "{}",
        text(&out.stderr)
    );

    // Back byte for byte: to stdout, to a file, and a part.
    let out = blob(&["get", "input.bin", "--config", cfg, "--tag", "files"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stdout == data, "stdout differs");
    let back = dir.path().join("back.bin");
    let back_s = back.to_str().expect("utf-8 path");
    let out = blob(&[
        "get", "two", "--config", cfg, "--tag", "files", "-o", back_s,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(std::fs::read(&back).expect("back") == data, "file differs");
    let out = blob(&[
        "get", "two", "--config", cfg, "--tag", "files", "--offset", "1000", "--len", "5",
    ]);
    assert_eq!(out.stdout, data[1000..1005]);

    let out = blob(&["rm", "two", "--config", cfg, "--tag", "files"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("removed files/two"));

    // Errors.
    let err = blob_fails(&["get", "two", "--config", cfg, "--tag", "files"]);
    assert!(
        err.contains("blob \"two\" not found in tag \"files\""),
        "{err}"
    );
    let err = blob_fails(&["stat", "x", "--config", cfg, "--tag", "nope"]);
    assert!(err.contains("unknown tag \"nope\""), "{err}");
    let err = blob_fails(&[
        "get",
        "input.bin",
        "--config",
        cfg,
        "--tag",
        "files",
        "--offset",
        "299999",
        "--len",
        "2",
    ]);
    assert!(err.contains("size 300000"), "{err}");
    let err = blob_fails(&["ls"]);
    assert!(err.contains("no store configuration"), "{err}");
    let bare = dir.path().join("bare.toml");
    std::fs::write(&bare, "workers = 1\n").expect("bare config");
    let err = blob_fails(&["ls", "--config", bare.to_str().expect("utf-8")]);
    assert!(err.contains("has no [blob] table"), "{err}");

    // A running runtime holds the store: the commands go through it.
    let mut child = Command::new(exe())
        .arg("blob")
        .args(["run", "--config", cfg, "--announce", "--exit-on-stdin-eof"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("tandem blob run");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready = lines.next().expect("a line").expect("stdout");
    assert!(ready.starts_with("ready "), "{ready}");
    let out = blob(&["ls", "--config", cfg, "--tag", "files"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("input.bin"));
    let err = blob_fails(&["run", "--config", cfg]);
    assert!(err.contains("is in use"), "{err}");
    drop(child.stdin.take());
    assert!(child.wait().expect("wait").success());
    // Released again, and durable.
    let out = blob(&["get", "input.bin", "--config", cfg, "--tag", "files"]);
    assert!(out.stdout == data, "after the runtime");
}

/// `tandem blob args...` run as `cmd` would be, logging at `info`.
fn blob_with(args: &[&str], cmd: impl FnOnce(&mut Command)) -> Output {
    let mut command = Command::new(exe());
    command
        .arg("blob")
        .args(args)
        .env("RUST_LOG", "info")
        .env_remove("TANDEM_BLOB_CONFIG");
    cmd(&mut command);
    command.output().expect("run tandem blob")
}

/// Pipes have no length, a closed stdout takes no bytes, and a look at a
/// store never made makes nothing (nor talks of a runtime's copy space).
#[test]
fn pipes_a_closed_stdout_and_a_store_never_made() {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = runtime_toml(dir.path());
    let config = config.to_str().unwrap();
    let before: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    for look in [
        &["ls", "--config", config][..],
        &["stat", "x", "--tag", "t", "--config", config],
        &["get", "x", "--tag", "t", "--config", config],
        &["rm", "x", "--tag", "t", "--config", config],
    ] {
        let out = blob_with(look, |_| {});
        assert!(!out.status.success(), "{look:?}");
        let said = text(&out.stderr);
        assert!(said.contains("nothing was ever put"), "{look:?}: {said}");
        assert!(!said.contains("copy_space"), "{look:?}: {said}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        before.len(),
        "a look made files"
    );

    let mut put = Command::new(exe())
        .args(["blob", "put", "/dev/stdin", "--name", "piped", "--tag", "t"])
        .args(["--config", config])
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    put.stdin.take().unwrap().write_all(b"hi\n").unwrap();
    let out = put.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("3 bytes"),
        "{}",
        text(&out.stdout)
    );
    assert!(!text(&out.stderr).contains("copy_space"));
    let got = blob(&["get", "piped", "--tag", "t", "--config", config]);
    assert_eq!(got.stdout, b"hi\n");

    let closed = blob_with(&["get", "piped", "--tag", "t", "--config", config], |c| {
        // SAFETY: close(2) in the child before exec; nothing else runs there.
        unsafe {
            c.pre_exec(|| {
                libc::close(1);
                Ok(())
            });
        }
    });
    assert!(
        !closed.status.success(),
        "a get to a closed stdout succeeded"
    );
    assert!(text(&closed.stderr).contains("stdout is closed"));
}

/// An empty input (standard input empty or closed, an empty file) is
/// refused naming the FILE argument and saying the store keeps no empty
/// blobs, before the store is reached.
#[test]
fn an_empty_input_is_refused_naming_it() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = runtime_toml(dir.path());
    let config = config.to_str().unwrap();
    let put = ["put", "-", "--name", "e", "--tag", "t", "--config", config];
    let empty_pipe = blob_with(&put, |c| {
        c.stdin(Stdio::piped());
    });
    let closed = blob_with(&put, |c| {
        // SAFETY: close(2) in the child before exec; nothing else runs there.
        unsafe {
            c.pre_exec(|| {
                libc::close(0);
                Ok(())
            });
        }
    });
    for out in [&empty_pipe, &closed] {
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
        let err = text(&out.stderr);
        assert!(err.contains("FILE `-`: standard input was empty"), "{err}");
        assert!(err.contains("the store keeps no empty blobs"), "{err}");
        assert!(!err.contains("zero-length range"), "{err}");
    }
    let file = dir.path().join("empty.bin");
    std::fs::write(&file, b"").unwrap();
    let out = blob(&[
        "put",
        file.to_str().unwrap(),
        "--tag",
        "t",
        "--config",
        config,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("FILE {} is empty", file.display())),
        "{err}"
    );
    assert!(
        !dir.path().join("meta.redb").exists(),
        "an empty put made the store"
    );
}

/// A get that cannot succeed leaves its output file as it was; a put from
/// an endless device stops and leaves no blob; a file longer than a blob
/// can take is refused.
#[test]
fn failed_gets_keep_their_output_and_endless_puts_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = runtime_toml(dir.path());
    let config = config.to_str().unwrap();
    let data = dir.path().join("data");
    std::fs::write(&data, b"abc").unwrap();
    let data = data.to_str().unwrap();
    assert!(
        blob(&["put", data, "--name", "x", "--tag", "t", "--config", config])
            .status
            .success()
    );
    let out = dir.path().join("out.txt");
    std::fs::write(&out, "kept").unwrap();
    let out = out.to_str().unwrap();
    for args in [
        &["get", "none", "--len", "2"][..],
        &["get", "x", "--offset", "1", "--len", "100"],
        &["get", "x", "--offset", "3"],
    ] {
        let got = blob(&[args, &["--tag", "t", "--config", config, "-o", out]].concat());
        assert!(!got.status.success(), "{args:?}");
        assert_eq!(std::fs::read_to_string(out).unwrap(), "kept", "{args:?}");
    }
    let endless = blob(&[
        "put",
        "/dev/zero",
        "--name",
        "z",
        "--tag",
        "t",
        "--config",
        config,
    ]);
    assert!(!endless.status.success());
    // It fills the store in chunks until one finds no room; the blob they
    // made goes.
    let said = text(&endless.stderr);
    assert!(
        said.contains("no space") && said.contains("was removed"),
        "{said}"
    );
    let gone = blob(&["stat", "z", "--tag", "t", "--config", config]);
    assert!(
        text(&gone.stderr).contains("not found"),
        "{}",
        text(&gone.stderr)
    );
    // A file longer than a blob can take is refused before anything is put.
    let sparse = dir.path().join("sparse");
    std::fs::File::create(&sparse)
        .and_then(|f| f.set_len(17 << 20))
        .unwrap();
    let long = blob(&[
        "put",
        sparse.to_str().unwrap(),
        "--tag",
        "t",
        "--config",
        config,
    ]);
    assert!(
        text(&long.stderr).contains("holds more than the 16777216 bytes this blob can take"),
        "{}",
        text(&long.stderr)
    );
}

#[test]
fn the_demo_ends_with_its_verdict() {
    let out = blob(&["demo"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let verdict = stdout.lines().last().expect("output");
    let rest = verdict
        .strip_prefix("blob demo: ")
        .and_then(|r| r.strip_suffix(" failed: ok"))
        .unwrap_or_else(|| panic!("verdict {verdict:?}"));
    let counts: Vec<u64> = rest
        .split(", ")
        .map(|part| {
            part.split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("count")
        })
        .collect();
    assert_eq!(counts.len(), 3, "{verdict}");
    assert!(
        counts[0] > 0 && counts[1] >= counts[0] && counts[2] == 0,
        "{verdict}"
    );
    assert!(stdout.contains("puts/s"), "{stdout}");
}
