//! What the runtime's integration tests that start the `tandem` binary
//! share: where the binary is, a guard that kills children and removes
//! files however a test ends, and a child's stdout as lines.

// Each test file is its own crate and uses a part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::mpsc;

/// The `tandem` binary: `$TANDEM_BIN_DIR/tandem` when set (a GPU bundle
/// carries the binary away from the build machine), else the one cargo built
/// for this package.
pub fn tandem_exe() -> PathBuf {
    match std::env::var_os("TANDEM_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("tandem"),
        None => env!("CARGO_BIN_EXE_tandem").into(),
    }
}

/// `tandem` with warnings-only logs (tests read its stdout, not its logs).
pub fn tandem() -> Command {
    let mut cmd = Command::new(tandem_exe());
    cmd.env("RUST_LOG", "warn");
    cmd
}

/// Kills and reaps its children and removes its files when dropped, so a
/// failing test leaves no process or segment behind.
#[derive(Default)]
pub struct Cleanup {
    pub children: Vec<Child>,
    pub files: Vec<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for child in &mut self.children {
            // Already reaped, or killed now: errors leave nothing to do.
            let _ = child.kill();
            let _ = child.wait();
        }
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Each stdout line of `child` (spawned with a piped stdout), through a
/// channel fed by a thread.
pub fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
