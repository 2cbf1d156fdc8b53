//! The two-process IPC test, both sides. The parent (a `#[test]`) exports
//! memory and an interprocess event and spawns the `ipc_child` binary, which
//! opens both, adds to the memory with a kernel and records the event; the
//! parent waits on its own event and checks the data.
//!
//! Child command line: `ipc_child <backend> add <memory hex> <event hex> <n> <delta>`
//! or `ipc_child <backend> stale <memory hex>`. The child reports on stdout
//! ([`CHILD_RECORDED`], [`CHILD_STALE_OK`]) and, in `add` mode, waits for a
//! line on stdin before it exits, so its mappings outlive the parent's checks.
//! A child that hangs or fails is killed and reaped by [`Child`]'s drop.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use tandem_hal::{
    Backend, DeviceMemory, ErrorKind, EventFlags, GpuApi, GpuDevice, IpcEventHandle, IpcMemHandle,
    KernelArg, LaunchConfig,
};

use crate::support::{fill_u32, kernels, launch, read_u32s};

/// Printed by the child once it has recorded the event after its kernel.
pub const CHILD_RECORDED: &str = "recorded";
/// Printed by the child when opening a freed handle failed as it should.
pub const CHILD_STALE_OK: &str = "stale-ok";
/// How long the parent waits for any step of the child (it may compile
/// kernels with NVRTC on first use).
const CHILD_STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// Lowercase hex of handle (or any) bytes.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Handle bytes from [`to_hex`]'s form; `None` if malformed.
pub fn from_hex(text: &str) -> Option<[u8; 64]> {
    let text = text.as_bytes();
    if text.len() != 128 {
        return None;
    }
    let mut out = [0u8; 64];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = u8::from_str_radix(core::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

/// A spawned child process, killed and reaped on drop unless it was waited for.
pub struct Child {
    process: std::process::Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    reaped: bool,
}

impl Child {
    /// Starts `exe args...` with piped stdin and stdout.
    pub fn spawn(exe: &Path, args: &[String]) -> std::io::Result<Self> {
        let mut process = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = process.stdin.take();
        let stdout = process
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout pipe"))?;
        let (sender, lines) = mpsc::channel();
        // Reads on a thread so the parent can wait with a timeout; it ends
        // when the child's stdout closes.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            process,
            stdin,
            lines,
            reaped: false,
        })
    }

    /// The child's next stdout line, or an error after `timeout` or at its exit.
    pub fn next_line(&self, timeout: Duration) -> Result<String, String> {
        self.lines.recv_timeout(timeout).map_err(|e| match e {
            RecvTimeoutError::Timeout => format!("child said nothing for {timeout:?}"),
            RecvTimeoutError::Disconnected => "child closed its stdout".to_owned(),
        })
    }

    /// Sends one line to the child's stdin.
    pub fn send_line(&mut self, line: &str) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("stdin closed"))?;
        writeln!(stdin, "{line}")?;
        stdin.flush()
    }

    /// Kills the child (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        // It may have exited already: then kill fails harmlessly, and wait
        // reaps it either way.
        let _ = self.process.kill();
        let _ = self.process.wait();
        self.reaped = true;
    }

    /// Waits up to `timeout` for the child to exit (closing its stdin first).
    pub fn wait(&mut self, timeout: Duration) -> Result<ExitStatus, String> {
        drop(self.stdin.take());
        let deadline = Instant::now() + timeout;
        loop {
            match self.process.try_wait() {
                Ok(Some(status)) => {
                    self.reaped = true;
                    return Ok(status);
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => return Err(format!("child still running after {timeout:?}")),
                Err(e) => return Err(format!("waiting for the child: {e}")),
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            // Best effort: the child may have exited already (then kill fails
            // harmlessly); wait reaps it either way.
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }
}

/// Parent side: the child adds `delta` to exported memory filled with 7 and
/// records an exported event; the parent waits on the event and sees `7 + delta`.
pub fn add_in_child_process<A: GpuApi>(device: &A::Device, child_exe: &Path) {
    const N: usize = 1 << 16;
    const DELTA: u32 = 5;
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let memory = device.alloc_device_exportable(N * 4).unwrap();
    let target = (memory.device_ptr(), N);
    fill_u32(
        device,
        &module,
        LaunchConfig::linear(64, 256),
        target,
        7,
        &stream,
    );
    device.synchronize_stream(&stream).unwrap();
    let event = device
        .create_event(EventFlags {
            timing: false,
            interprocess: true,
        })
        .unwrap();
    let memory_handle = device.ipc_export_memory(&memory).unwrap();
    let event_handle = device.ipc_export_event(&event).unwrap();
    let args = [
        A::BACKEND.to_string(),
        "add".into(),
        to_hex(&memory_handle.0),
        to_hex(&event_handle.0),
        N.to_string(),
        DELTA.to_string(),
    ];
    let mut child = Child::spawn(child_exe, &args).unwrap();
    let line = child.next_line(CHILD_STEP_TIMEOUT).unwrap();
    assert_eq!(line, CHILD_RECORDED, "unexpected child output");
    device.synchronize_event(&event).unwrap();
    assert!(device.query_event(&event).unwrap());
    let seen = read_u32s(device, &memory, N);
    assert!(
        seen.iter().all(|&v| v == 7 + DELTA),
        "first values {:?}",
        &seen[..8]
    );
    child.send_line("done").unwrap();
    let status = child.wait(CHILD_STEP_TIMEOUT).unwrap();
    assert!(status.success(), "child failed: {status}");
}

/// Parent side: a handle whose exporter freed the memory fails to open in
/// another process (`IpcStale` on the host backend; on GPUs, whose drivers
/// cannot tell it from garbage, also `InvalidIpcHandle` or a vendor error).
pub fn stale_handle_in_child_process<A: GpuApi>(device: &A::Device, child_exe: &Path) {
    let memory = device.alloc_device_exportable(4096).unwrap();
    let handle = device.ipc_export_memory(&memory).unwrap();
    drop(memory);
    let args = [A::BACKEND.to_string(), "stale".into(), to_hex(&handle.0)];
    let mut child = Child::spawn(child_exe, &args).unwrap();
    let line = child.next_line(CHILD_STEP_TIMEOUT).unwrap();
    assert_eq!(line, CHILD_STALE_OK);
    let status = child.wait(CHILD_STEP_TIMEOUT).unwrap();
    assert!(status.success(), "child failed: {status}");
}

fn handle_arg(args: &[String], i: usize) -> Result<[u8; 64], String> {
    let text = args.get(i).ok_or_else(|| format!("missing argument {i}"))?;
    from_hex(text).ok_or_else(|| format!("argument {i} is not a 64-byte hex handle"))
}

fn number_arg<T: core::str::FromStr>(args: &[String], i: usize) -> Result<T, String> {
    let text = args.get(i).ok_or_else(|| format!("missing argument {i}"))?;
    text.parse()
        .map_err(|_| format!("argument {i} ({text:?}) is not a number"))
}

/// Child side, after the backend name: `add ...` or `stale ...` (see the
/// module docs). Errors are reported by the caller and make it exit non-zero.
pub fn child_main<A: GpuApi>(args: &[String]) -> Result<(), String> {
    let api = A::load().map_err(|e| e.to_string())?;
    let device = api.device(0).map_err(|e| e.to_string())?;
    match args.first().map(String::as_str) {
        Some("add") => child_add::<A>(&device, args),
        Some("stale") => {
            let handle = IpcMemHandle(handle_arg(args, 1)?);
            match (
                A::BACKEND,
                device.ipc_open_memory(&handle).map(|m| m.device_ptr()),
            ) {
                (Backend::Host, Err(e)) if matches!(e.kind, ErrorKind::IpcStale(_)) => {}
                // A GPU driver cannot tell a freed allocation's handle from
                // garbage, so a vendor error or `InvalidIpcHandle` is right too.
                (Backend::Cuda | Backend::Hip, Err(e))
                    if matches!(
                        e.kind,
                        ErrorKind::IpcStale(_)
                            | ErrorKind::InvalidIpcHandle(_)
                            | ErrorKind::Vendor { .. }
                    ) => {}
                (_, other) => return Err(format!("opening a freed handle gave {other:?}")),
            }
            println!("{CHILD_STALE_OK}");
            Ok(())
        }
        other => Err(format!("unknown mode {other:?}")),
    }
}

fn child_add<A: GpuApi>(device: &A::Device, args: &[String]) -> Result<(), String> {
    let memory_handle = IpcMemHandle(handle_arg(args, 1)?);
    let event_handle = IpcEventHandle(handle_arg(args, 2)?);
    let n: u64 = number_arg(args, 3)?;
    let delta: u32 = number_arg(args, 4)?;
    let memory = device
        .ipc_open_memory(&memory_handle)
        .map_err(|e| e.to_string())?;
    let again = device
        .ipc_open_memory(&memory_handle)
        .map_err(|e| e.to_string())?;
    if again.device_ptr() != memory.device_ptr() {
        return Err("opening one handle twice mapped it twice".into());
    }
    drop(again);
    if memory.len() < n as usize * 4 {
        return Err(format!("opened {} bytes, expected {}", memory.len(), n * 4));
    }
    let event = device
        .ipc_open_event(&event_handle)
        .map_err(|e| e.to_string())?;
    let module = kernels(device);
    let stream = device.create_stream().map_err(|e| e.to_string())?;
    launch(
        device,
        &module,
        "tandem_add_u32",
        LaunchConfig::linear(64, 256),
        &[
            KernelArg::Ptr(memory.device_ptr()),
            KernelArg::U64(n),
            KernelArg::U32(delta),
        ],
        &stream,
    );
    device
        .record_event(&event, &stream)
        .map_err(|e| e.to_string())?;
    println!("{CHILD_RECORDED}");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    // Keep the mapping and the event until the parent has checked.
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    device
        .synchronize_stream(&stream)
        .map_err(|e| e.to_string())
}

/// One `#[test]` per two-process behaviour above for backend `$api`, in a
/// module `ipc`; `$child_exe` is the path of the `ipc_child` binary.
#[doc(hidden)]
#[macro_export]
macro_rules! ipc_tests {
    ($api:ty, $child_exe:expr) => {
        mod ipc {
            #[test]
            fn add_in_child_process() {
                let label = "ipc::add_in_child_process";
                if let Some(device) = $crate::gpu::device_or_skip::<$api>(label) {
                    $crate::ipc::add_in_child_process::<$api>(&device, &$child_exe);
                }
            }

            #[test]
            fn stale_handle_in_child_process() {
                let label = "ipc::stale_handle_in_child_process";
                if let Some(device) = $crate::gpu::device_or_skip::<$api>(label) {
                    $crate::ipc::stale_handle_in_child_process::<$api>(&device, &$child_exe);
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let bytes: [u8; 64] = core::array::from_fn(|i| (i * 37) as u8);
        assert_eq!(from_hex(&to_hex(&bytes)), Some(bytes));
        assert_eq!(from_hex("00"), None);
        assert_eq!(from_hex(&"zz".repeat(64)), None);
    }
}
