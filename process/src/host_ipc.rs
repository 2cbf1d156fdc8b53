//! The names of the CPU device's IPC segments, `tdm-<pid>-<sequence>` (both
//! hex): the host backend (`tandem_hal::host`) names each memory or event
//! segment it exports so, and whoever finds one left behind reads its
//! exporter back from the name, the segment having no header to say it.

use tandem_shm_core::SegmentProbe;
use tandem_shm_core::SHM_DIR;

use crate::stale::{staleness, SegmentOwner, Staleness};

/// What every CPU device IPC segment's name starts with.
const PREFIX: &str = "tdm-";

/// The name of the `sequence`th IPC segment that process `exporter` makes.
/// Distinct for distinct arguments, and at most 29 bytes.
pub fn host_ipc_segment_name(exporter: u32, sequence: u64) -> String {
    format!("{PREFIX}{exporter:x}-{sequence:x}")
}

/// The exporter of a CPU device IPC segment named `name`, if that is what
/// the name is ([`host_ipc_segment_name`]'s inverse).
pub fn host_ipc_exporter(name: &str) -> Option<u32> {
    let (pid, sequence) = name.strip_prefix(PREFIX)?.split_once('-')?;
    u64::from_str_radix(sequence, 16).ok()?;
    u32::from_str_radix(pid, 16).ok()
}

/// Removes the CPU device IPC segments that process `pid`, now dead,
/// exported and nobody holds: what a parent does after its child service
/// was killed. Returns how many it removed.
pub fn remove_host_ipc_segments_of(pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir(SHM_DIR) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
        .filter(|name| host_ipc_exporter(name) == Some(pid))
        .filter(|name| remove_if_stale(name, pid))
        .count()
}

/// Removes the IPC segment `name` of exporter `pid` unless someone holds it
/// (or it went meanwhile); whether it did.
fn remove_if_stale(name: &str, pid: u32) -> bool {
    let Ok(probe) = SegmentProbe::open(name) else {
        return false;
    };
    match staleness(&probe, SegmentOwner::HostIpcExporter(pid)) {
        Staleness::Stale(stale) if probe.unlink().unwrap_or(false) => {
            tracing::info!("removed stale segment {stale}");
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_shm_core::Segment;

    #[test]
    fn a_name_gives_back_its_exporter() {
        for (pid, sequence) in [(0, 0), (4242, 0x1f), (u32::MAX, u64::MAX)] {
            let name = host_ipc_segment_name(pid, sequence);
            assert!(name.len() <= 29, "{name}");
            assert_eq!(host_ipc_exporter(&name), Some(pid), "{name}");
        }
        for other in ["tandem-12-0", "tdm-12", "tdm-xy-1", "tdm-12-zz", "tdm--1"] {
            assert_eq!(host_ipc_exporter(other), None, "{other}");
        }
    }

    #[test]
    fn a_dead_exporters_unheld_segments_go_held_ones_stay() {
        // A pid that is no process: beyond the kernel's pid limit. The
        // sequences are this test process's pid, so that runs at once do
        // not share names.
        let dead = 1u32 << 23;
        let sequence = u64::from(std::process::id()) << 8;
        let left = host_ipc_segment_name(dead, sequence);
        let path = std::ffi::CString::new(format!("/{left}")).expect("path");
        // SAFETY: plain calls with a NUL-terminated path; the fd is closed,
        // which leaves the name unheld, as a killed exporter leaves it.
        unsafe {
            let fd = libc::shm_open(
                path.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            );
            assert!(fd >= 0, "cannot create {left}");
            libc::close(fd);
        }
        let held = Segment::create_named(&host_ipc_segment_name(dead, sequence + 1), 4096)
            .expect("a held segment");
        assert!(remove_host_ipc_segments_of(dead) >= 1);
        assert!(SegmentProbe::open(&left).is_err(), "{left} was left");
        assert!(SegmentProbe::open(held.name().expect("named")).is_ok());
    }
}
