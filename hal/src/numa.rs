//! Vendor-neutral NUMA helpers (Linux): where a PCI device sits, where a page
//! lives, and binding memory to a node. Every backend uses these; the host
//! backend also uses [`node_of_current_cpus`] for its own properties.
//!
//! Errors are reported as [`GpuError`]s of [`Backend::Host`]: the OS, not a
//! GPU vendor, is the party that failed.

use std::path::Path;

use crate::error::{Backend, ErrorKind, GpuError, GpuResult};

// From <linux/mempolicy.h>; libc does not export the flag values.
/// `mbind` flag: fail if pages cannot be placed as asked.
const MPOL_MF_STRICT: libc::c_uint = 1 << 0;
/// `mbind` flag: move pages this process already faulted in.
const MPOL_MF_MOVE: libc::c_uint = 1 << 1;
/// The kernel refuses node masks longer than one page of bits.
const MAX_NODE_MASK_BITS: u32 = 4096 * 8;

fn os_error(call: &'static str) -> GpuError {
    let errno = std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO);
    GpuError::new(Backend::Host, call, ErrorKind::Os { errno })
}

/// The NUMA node of a PCI device, from
/// `/sys/bus/pci/devices/<bus id>/numa_node`. Accepts CUDA's form
/// (`00000000:17:00.0`), the sysfs form (`0000:17:00.0`, any case) and a bare
/// `17:00.0` (domain 0). `None` if the id is malformed, the device is absent,
/// or the kernel reports no node (`-1`, a machine without NUMA).
pub fn numa_node_of_pci(bus_id: &str) -> Option<u32> {
    let name = sysfs_pci_name(bus_id)?;
    let text = std::fs::read_to_string(
        Path::new("/sys/bus/pci/devices")
            .join(name)
            .join("numa_node"),
    )
    .ok()?;
    u32::try_from(text.trim().parse::<i64>().ok()?).ok()
}

/// Normalises a PCI bus id to its sysfs directory name
/// (`dddd:bb:dd.f`, lowercase hex). Rejects anything else, so the result is
/// safe to join onto a path.
fn sysfs_pci_name(bus_id: &str) -> Option<String> {
    let bus_id = bus_id.trim();
    let (domain, rest) = match bus_id.matches(':').count() {
        1 => (0, bus_id),
        2 => {
            let (domain, rest) = bus_id.split_once(':')?;
            (u32::from_str_radix(domain, 16).ok()?, rest)
        }
        _ => return None,
    };
    let (bus, dev_fn) = rest.split_once(':')?;
    let (device, function) = dev_fn.split_once('.')?;
    let hex = |s: &str, max: u32| {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(s, 16).ok().filter(|v| *v <= max)
    };
    let (bus, device, function) = (hex(bus, 0xff)?, hex(device, 0x1f)?, hex(function, 0x7)?);
    if domain > 0xffff {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

/// Parses the kernel's list format (`0-3,8,10-11`) into its members.
/// `None` if malformed.
fn parse_id_list(text: &str) -> Option<Vec<u32>> {
    let mut ids = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let id = part.parse::<u32>().ok()?;
                (id, id)
            }
        };
        if first > last {
            return None;
        }
        ids.extend(first..=last);
    }
    Some(ids)
}

/// The nodes with memory or CPUs online, from
/// `/sys/devices/system/node/online`. Empty if the kernel has no NUMA
/// support compiled in (the file is absent).
pub fn online_nodes() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/node/online")
        .ok()
        .and_then(|t| parse_id_list(&t))
        .unwrap_or_default()
}

/// The CPUs this process may run on (`sched_getaffinity`), ascending;
/// empty if the call fails.
pub fn allowed_cpus() -> Vec<u32> {
    // SAFETY: cpu_set_t is plain bits; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is us.
    let rc = unsafe { libc::sched_getaffinity(0, core::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    let max_cpus = 8 * core::mem::size_of::<libc::cpu_set_t>();
    (0..max_cpus)
        // SAFETY: CPU_ISSET reads bit `cpu` of `set`, which is < the set's size in bits.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .map(|cpu| cpu as u32)
        .collect()
}

/// The CPUs the kernel lists as local to a PCI device
/// (`/sys/bus/pci/devices/<bus id>/local_cpulist`: those of its NUMA node),
/// ascending. `None` if the id is malformed or the file is absent or
/// unreadable. Accepts the bus id forms of [`numa_node_of_pci`].
pub fn local_cpus_of_pci(bus_id: &str) -> Option<Vec<u32>> {
    let name = sysfs_pci_name(bus_id)?;
    let text = std::fs::read_to_string(
        Path::new("/sys/bus/pci/devices")
            .join(name)
            .join("local_cpulist"),
    )
    .ok()?;
    parse_id_list(&text).filter(|cpus| !cpus.is_empty())
}

/// `cpus` reordered so that each physical core comes once before any comes
/// twice: the first CPU of every core (by package, then core id, from
/// `/sys/devices/system/cpu/cpu<N>/topology`), then the second, and so on.
/// Threads pinned one a CPU in this order share a core only once there are
/// more of them than cores. A CPU whose topology the kernel does not give
/// counts as a core of its own.
pub fn cpus_by_core(cpus: &[u32]) -> Vec<u32> {
    let topology = |cpu: u32, file: &str| -> Option<u32> {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{file}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    order_by_core(cpus, |cpu| {
        match (
            topology(cpu, "physical_package_id"),
            topology(cpu, "core_id"),
        ) {
            (Some(package), Some(core)) => Some((package, core)),
            _ => None,
        }
    })
}

/// [`cpus_by_core`] with `core_of` giving a CPU's (package, core id), or
/// `None` for a CPU that counts as a core of its own. Stable: CPUs of the
/// same rank keep their order in `cpus`.
fn order_by_core(cpus: &[u32], core_of: impl Fn(u32) -> Option<(u32, u32)>) -> Vec<u32> {
    let mut seen: std::collections::HashMap<(u32, u32), u32> = std::collections::HashMap::new();
    // (the CPU's rank among its core's, 0 for the first; its place; the CPU)
    let mut ranked: Vec<(u32, usize, u32)> = cpus
        .iter()
        .enumerate()
        .map(|(at, &cpu)| {
            let rank = core_of(cpu).map_or(0, |core| {
                let seen = seen.entry(core).or_insert(0);
                *seen += 1;
                *seen - 1
            });
            (rank, at, cpu)
        })
        .collect();
    ranked.sort_unstable();
    ranked.into_iter().map(|(_, _, cpu)| cpu).collect()
}

/// Restricts the calling thread to `cpus` (`sched_setaffinity`). An empty
/// list, or CPUs past what a `cpu_set_t` holds, is `InvalidArgument`; CPUs
/// the process may not use are the OS's `EINVAL`.
pub fn pin_current_thread(cpus: &[u32]) -> GpuResult<()> {
    let max_cpus = 8 * core::mem::size_of::<libc::cpu_set_t>();
    if cpus.is_empty() || cpus.iter().any(|&cpu| cpu as usize >= max_cpus) {
        return Err(GpuError::new(
            Backend::Host,
            "sched_setaffinity",
            ErrorKind::InvalidArgument(format!(
                "CPUs {cpus:?}: none, or past the {max_cpus} a CPU set holds"
            )),
        ));
    }
    // SAFETY: cpu_set_t is plain bits; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu` < the set's size in bits (checked above).
        unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    }
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is the
    // calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, core::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(os_error("sched_setaffinity"));
    }
    Ok(())
}

/// `cpus` as the kernel's list format (`0-3,8,10-11`); `cpus` ascending.
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let first = cpus[i];
        let mut last = first;
        while i + 1 < cpus.len() && cpus[i + 1] == last + 1 {
            i += 1;
            last = cpus[i];
        }
        parts.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
        i += 1;
    }
    parts.join(",")
}

/// The node every CPU this process may run on belongs to, or `None` if the
/// allowed CPUs span several nodes (or the topology is unreadable).
pub fn node_of_current_cpus() -> Option<u32> {
    let allowed = allowed_cpus();
    if allowed.is_empty() {
        return None;
    }
    let mut found = None;
    for node in online_nodes() {
        let cpulist =
            std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist")).ok()?;
        if parse_id_list(&cpulist)?
            .into_iter()
            .any(|cpu| allowed.binary_search(&cpu).is_ok())
        {
            if found.is_some() {
                return None;
            }
            found = Some(node);
        }
    }
    found
}

/// Binds the pages of `[ptr, ptr + len)` to NUMA node `node` (`mbind` with
/// `MPOL_BIND`, moving pages already faulted in and failing if any cannot be
/// moved). `ptr` must be page-aligned. Changing placement never changes the
/// bytes, so this is safe; an unmapped range is the OS's `EFAULT`/`ENOMEM`.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "never dereferenced here: the kernel validates the range and moving pages keeps their contents"
)]
pub fn bind_to_node(ptr: *mut u8, len: usize, node: u32) -> GpuResult<()> {
    let invalid =
        |what: String| GpuError::new(Backend::Host, "mbind", ErrorKind::InvalidArgument(what));
    if len == 0 {
        return Err(GpuError::new(
            Backend::Host,
            "mbind",
            ErrorKind::InvalidSize { bytes: 0 },
        ));
    }
    if (ptr as usize) % page_size() != 0 {
        return Err(invalid(format!("address {ptr:p} is not page-aligned")));
    }
    if node >= MAX_NODE_MASK_BITS {
        return Err(invalid(format!(
            "node {node} exceeds the kernel's node mask"
        )));
    }
    let word_bits = 8 * core::mem::size_of::<libc::c_ulong>() as u32;
    let mut mask: Vec<libc::c_ulong> = vec![0; (node / word_bits + 1) as usize];
    mask[(node / word_bits) as usize] |= 1 << (node % word_bits);
    // The kernel reads `maxnode - 1` bits (a historical off-by-one that libnuma
    // also compensates for), so pass one more than the mask holds.
    let maxnode = (mask.len() as u32 * word_bits + 1) as libc::c_ulong;
    // SAFETY: mbind only reads `mask` (live, `maxnode - 1` bits long) and
    // changes page placement of our own mapping, never its contents; the
    // kernel validates the range.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            ptr,
            len,
            libc::MPOL_BIND,
            mask.as_ptr(),
            maxnode,
            MPOL_MF_MOVE | MPOL_MF_STRICT,
        )
    };
    if rc != 0 {
        return Err(os_error("mbind"));
    }
    Ok(())
}

/// The NUMA node holding the page that contains `ptr`, or `None` if the page
/// is not placed yet (never written), is the shared zero page, or the address
/// is not mapped.
///
/// Uses `move_pages` in query mode rather than `get_mempolicy(MPOL_F_ADDR |
/// MPOL_F_NODE)`: the latter faults a missing page in for reading, which maps
/// the shared zero page and reports *its* node, not where the data will live.
/// Querying has no side effect, so this is safe for any address; write the
/// page first to place it.
pub fn node_of_address(ptr: *const u8) -> Option<u32> {
    let page = (ptr as usize & !(page_size() - 1)) as *mut libc::c_void;
    let mut status: libc::c_int = -1;
    // SAFETY: query mode (null `nodes`): the kernel reads one page address
    // from `page` and writes one status into `status`, both live locals.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            1 as libc::c_ulong,
            &page as *const *mut libc::c_void,
            core::ptr::null::<libc::c_int>(),
            &mut status as *mut libc::c_int,
            0,
        )
    };
    if rc != 0 {
        return None;
    }
    u32::try_from(status).ok()
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_format_as_the_kernel_writes_them() {
        assert_eq!(format_cpu_list(&[]), "");
        assert_eq!(format_cpu_list(&[3]), "3");
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        let text = "0-3,8,10-11";
        assert_eq!(format_cpu_list(&parse_id_list(text).unwrap()), text);
    }

    #[test]
    fn cpus_order_one_per_core_before_any_core_twice() {
        // Two packages of two cores with two threads each, numbered as
        // Linux numbers them (siblings 8 apart), and a CPU of no known core.
        let core_of = |cpu: u32| match cpu {
            0..=3 => Some((cpu / 2, cpu % 2)),
            8..=11 => Some(((cpu - 8) / 2, (cpu - 8) % 2)),
            _ => None,
        };
        let cpus = [0, 1, 2, 3, 8, 9, 10, 11, 40];
        assert_eq!(
            order_by_core(&cpus, core_of),
            vec![0, 1, 2, 3, 40, 8, 9, 10, 11]
        );
        // Siblings listed side by side.
        let cpus = [0, 8, 1, 9];
        assert_eq!(order_by_core(&cpus, core_of), vec![0, 1, 8, 9]);
        assert_eq!(order_by_core(&[], core_of), Vec::<u32>::new());
        // On this machine: the same CPUs, each once.
        let allowed = allowed_cpus();
        let mut ordered = cpus_by_core(&allowed);
        ordered.sort_unstable();
        assert_eq!(ordered, allowed);
    }

    #[test]
    fn a_thread_pins_to_cpus_it_may_use_and_refuses_none() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty(), "a running process has CPUs");
        // In a thread of its own, so the test runner's threads keep theirs.
        let first = allowed[0];
        std::thread::spawn(move || {
            pin_current_thread(&[first]).unwrap();
            assert_eq!(allowed_cpus(), vec![first]);
        })
        .join()
        .unwrap();
        assert!(pin_current_thread(&[]).is_err());
        assert!(pin_current_thread(&[u32::MAX]).is_err());
        assert_eq!(local_cpus_of_pci("not a bus id"), None);
    }

    #[test]
    fn pci_names_normalise_to_sysfs_form() {
        assert_eq!(
            sysfs_pci_name("00000000:17:00.0").as_deref(),
            Some("0000:17:00.0")
        );
        assert_eq!(
            sysfs_pci_name("0000:C1:00.0").as_deref(),
            Some("0000:c1:00.0")
        );
        assert_eq!(sysfs_pci_name("17:1f.7").as_deref(), Some("0000:17:1f.7"));
        assert_eq!(
            sysfs_pci_name("0001:00:02.1").as_deref(),
            Some("0001:00:02.1")
        );
        for bad in [
            "",
            "17",
            "17:00",
            "../../etc:00.0",
            "0000:17:20.0",
            "0000:17:00.8",
            "1:2:3:4.0",
            "10000:00:00.0",
        ] {
            assert_eq!(sysfs_pci_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn absent_pci_device_has_no_node() {
        assert_eq!(numa_node_of_pci("ffff:ff:1f.7"), None);
        assert_eq!(numa_node_of_pci("not a bus id"), None);
    }

    #[test]
    fn id_lists_parse() {
        assert_eq!(parse_id_list("0\n"), Some(vec![0]));
        assert_eq!(parse_id_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_id_list(""), Some(vec![]));
        assert_eq!(parse_id_list("3-1"), None);
        assert_eq!(parse_id_list("a"), None);
    }

    fn anonymous_pages(len: usize) -> *mut u8 {
        // SAFETY: a fresh private anonymous mapping; checked below.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p.cast()
    }

    #[test]
    fn bind_to_online_node_places_pages_there() {
        let nodes = online_nodes();
        assert!(!nodes.is_empty(), "this machine reports no NUMA node");
        let len = 4 * page_size();
        let p = anonymous_pages(len);
        assert_eq!(
            node_of_address(p),
            None,
            "an untouched page has no node yet"
        );
        bind_to_node(p, len, nodes[0]).unwrap();
        // SAFETY: `p` is our live mapping of `len` bytes.
        unsafe { p.write_bytes(0xA5, len) };
        assert_eq!(node_of_address(p), Some(nodes[0]));
        // SAFETY: an interior address of the same mapping.
        assert_eq!(node_of_address(unsafe { p.add(len - 1) }), Some(nodes[0]));
        // SAFETY: unmapping what we mapped; nothing uses it afterwards.
        unsafe { libc::munmap(p.cast(), len) };
    }

    #[test]
    fn bind_errors_are_typed() {
        let len = page_size();
        let p = anonymous_pages(len);
        let err = bind_to_node(p, len, 999).unwrap_err();
        assert_eq!(
            err.kind,
            ErrorKind::Os {
                errno: libc::EINVAL
            }
        );
        // SAFETY: one byte into our mapping.
        let err = bind_to_node(unsafe { p.add(1) }, len - 1, 0).unwrap_err();
        assert!(matches!(err.kind, ErrorKind::InvalidArgument(_)), "{err}");
        assert!(matches!(
            bind_to_node(p, 0, 0).unwrap_err().kind,
            ErrorKind::InvalidSize { .. }
        ));
        assert!(matches!(
            bind_to_node(p, len, u32::MAX).unwrap_err().kind,
            ErrorKind::InvalidArgument(_)
        ));
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(p.cast(), len) };
    }

    #[test]
    fn current_cpus_belong_to_an_online_node() {
        if let Some(node) = node_of_current_cpus() {
            assert!(online_nodes().contains(&node));
        } else {
            assert!(
                online_nodes().len() != 1,
                "one online node, but the CPU set was not placed on it"
            );
        }
    }
}
