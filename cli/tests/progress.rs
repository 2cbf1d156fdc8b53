//! `tandem blob put` and `get` draw a progress bar on a terminal's stderr once a transfer has
//! taken a second, and nothing on a pipe or with `--quiet`. The terminal is a real
//! pseudo-terminal; the transfers are made slow by the test's pace on stdin or stdout.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

/// A pseudo-terminal of 40 rows and 120 columns: its controller side (read here) and the
/// terminal side (the child's stderr).
fn pty() -> (File, OwnedFd) {
    let (mut controller, mut terminal) = (-1, -1);
    let size = libc::winsize {
        ws_row: 40,
        ws_col: 120,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: the two descriptors are written through valid pointers to locals; no name buffer
    // or termios is asked for (null), and `size` lives across the call.
    let rc = unsafe {
        libc::openpty(
            &mut controller,
            &mut terminal,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty succeeded, so both are open descriptors that nothing else owns.
    unsafe {
        (
            File::from_raw_fd(controller),
            OwnedFd::from_raw_fd(terminal),
        )
    }
}

/// Everything the terminal shows until its last writer closes it.
fn read_all(mut controller: File) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once the child's side is closed everywhere: the end.
        while let Ok(n @ 1..) = controller.read(&mut buf) {
            seen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&seen).into_owned()
    })
}

/// A store of one file target, opened by each command.
fn config(dir: &Path) -> String {
    let text = format!(
        "[blob]\nmetadata = {:?}\n[[blob.targets]]\nkind = \"file\"\npath = {:?}\n\
         capacity = {}\nscore = 0.5\n",
        dir.join("meta.redb"),
        dir.join("t0.dat"),
        64 << 20
    );
    let path = dir.join("tandem.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Where the command's stderr goes.
enum Stderr {
    Terminal,
    Pipe,
}

/// `tandem blob ARGS` with stderr on `stderr`, its stdin fed 2 MiB over about 2 s: what
/// stderr showed.
fn slow_put(args: &[&str], stderr: Stderr) -> String {
    let mut command = common::blob_command(args);
    command
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    let shown = match stderr {
        Stderr::Terminal => {
            let (controller, terminal) = pty();
            command.stderr(Stdio::from(terminal));
            Some(read_all(controller))
        }
        Stderr::Pipe => {
            command.stderr(Stdio::piped());
            None
        }
    };
    let mut child = command.spawn().expect("start tandem blob put");
    // The terminal side now open only in the child: the reader ends when it exits.
    drop(command);
    let mut stdin = child.stdin.take().unwrap();
    for _ in 0..32 {
        stdin.write_all(&[5u8; 64 << 10]).unwrap();
        std::thread::sleep(Duration::from_millis(70));
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    match shown {
        Some(reader) => reader.join().unwrap(),
        None => common::text(&out.stderr),
    }
}

#[test]
fn a_slow_put_shows_its_bytes_and_rate_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let args = [
        "put", "-", "--config", &config, "--tag", "t", "--name", "slow",
    ];
    let shown = slow_put(&args, Stderr::Terminal);
    assert!(shown.contains("put t/slow"), "{shown:?}");
    assert!(shown.contains("iB/s"), "a rate: {shown:?}");
    assert!(
        shown.contains("MiB") || shown.contains("KiB"),
        "bytes: {shown:?}"
    );
}

#[test]
fn no_bar_on_a_pipe_or_with_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let args = [
        "put", "-", "--config", &config, "--tag", "t", "--name", "piped",
    ];
    let piped = slow_put(&args, Stderr::Pipe);
    assert!(
        !piped.contains("iB/s") && !piped.contains('\r'),
        "{piped:?}"
    );
    let quiet = [&args[..], &["--quiet"]].concat();
    let shown = slow_put(&quiet, Stderr::Terminal);
    assert!(!shown.contains("iB/s"), "{shown:?}");
}

#[test]
fn a_slow_get_shows_the_time_left() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let data = dir.path().join("data.bin");
    std::fs::write(&data, vec![9u8; 4 << 20]).unwrap();
    let put = [
        "put",
        data.to_str().unwrap(),
        "--config",
        &config,
        "--tag",
        "t",
    ];
    let out = Command::new(common::tandem_exe())
        .arg("blob")
        .args(put)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out.stderr));

    let (controller, terminal) = pty();
    let get = ["get", "data.bin", "--config", &config, "--tag", "t"];
    let mut command = common::blob_command(&get);
    command
        .env("TERM", "xterm")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(terminal));
    let reader = read_all(controller);
    let mut child = command.spawn().unwrap();
    drop(command);
    // Read at about 2 MiB/s: the get waits on the pipe, taking about 2 s.
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0;
    loop {
        match stdout.read(&mut buf).unwrap() {
            0 => break,
            n => got += n,
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(got, 4 << 20);
    let shown = reader.join().unwrap();
    assert!(shown.contains("get t/data.bin"), "{shown:?}");
    assert!(
        shown.contains("4.00 MiB") && shown.contains("left"),
        "{shown:?}"
    );
}
