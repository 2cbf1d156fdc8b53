//! Where benchmark threads run. A cross-thread comparison is only fair when
//! every queue's threads run on the same CPUs: left to the scheduler, on a
//! many-core host one run's producer and consumer may share a physical core
//! (SMT siblings, sharing L1) and the next run's sit in different last-level
//! caches, which moves throughput more than the queues differ.
//! [`Pinning::choose`] picks distinct physical cores, sharing a last-level
//! cache and NUMA node where sysfs says which do, among the CPUs this process
//! may use; each benchmark thread then pins itself with [`Pinning::pin_current`].

use std::io;

/// The CPUs a benchmark's threads are pinned to (thread `i` to `cpus[i]`),
/// or none, and why.
pub struct Pinning {
    /// Empty when the threads are left to the scheduler.
    cpus: Vec<usize>,
    /// How the CPUs were chosen, or why none were.
    how: String,
}

impl Pinning {
    /// Chooses one CPU for each of `threads` threads: distinct physical cores
    /// sharing a last-level cache if some cache has enough, else sharing a
    /// NUMA node, else any distinct cores, else SMT siblings; with fewer
    /// usable CPUs than threads (or where pinning fails) the threads are not
    /// pinned.
    pub fn choose(threads: usize) -> Self {
        let cpus = match usable_cpus() {
            Ok(cpus) => cpus,
            Err(why) => return Self::unpinned(why),
        };
        let Some((chosen, how)) = pick(&cpus, threads) else {
            return Self::unpinned(format!(
                "{threads} threads, only {} CPU(s) usable",
                cpus.len()
            ));
        };
        // Probe from a throwaway thread, so that a refusal (a container
        // without the permission, say) shows here and not mid-benchmark, and
        // the calling thread's affinity, which threads it spawns inherit,
        // stays as it was.
        let probe = std::thread::spawn({
            let chosen = chosen.clone();
            move || chosen.iter().try_for_each(|&cpu| set_affinity(cpu))
        });
        match probe.join().expect("affinity probe thread") {
            Ok(()) => Self { cpus: chosen, how },
            Err(err) => Self::unpinned(format!("sched_setaffinity failed: {err}")),
        }
    }

    fn unpinned(why: String) -> Self {
        Self {
            cpus: Vec::new(),
            how: why,
        }
    }

    /// Pins the calling thread to the CPU chosen for thread `index`; does
    /// nothing when the threads are not pinned.
    pub fn pin_current(&self, index: usize) {
        if let Some(&cpu) = self.cpus.get(index) {
            set_affinity(cpu).expect("pinning to a CPU that accepted the probe");
        }
    }

    /// One line naming each role's CPU (`roles[i]` is thread `i`), and how
    /// they were chosen.
    pub fn describe(&self, roles: &[&str]) -> String {
        if self.cpus.is_empty() {
            return format!("not pinned ({})", self.how);
        }
        let placed: Vec<String> = roles
            .iter()
            .zip(&self.cpus)
            .map(|(role, cpu)| format!("{role} on CPU {cpu}"))
            .collect();
        format!("{} ({})", placed.join(", "), self.how)
    }
}

/// A CPU this process may run on, and what it shares with others.
struct Cpu {
    id: usize,
    /// The CPUs of its physical core (SMT siblings included), as sysfs lists them.
    core: String,
    /// The CPUs sharing its last-level cache, if sysfs says.
    llc: Option<String>,
    node: Option<usize>,
}

/// Up to `threads` CPUs from `cpus` (sorted by id), as local to each other as
/// the topology allows, with a description; `None` when there are too few.
fn pick(cpus: &[Cpu], threads: usize) -> Option<(Vec<usize>, String)> {
    // One CPU per physical core: the lowest-numbered usable one.
    let mut cores: Vec<&Cpu> = Vec::new();
    for cpu in cpus {
        if !cores.iter().any(|c| c.core == cpu.core) {
            cores.push(cpu);
        }
    }
    let node = |cpu: &Cpu| {
        cpu.node
            .map_or(String::new(), |n| format!(", NUMA node {n}"))
    };
    if let Some(group) = first_group(&cores, threads, |c| {
        c.llc.as_ref().map(|llc| format!("{:?} {llc}", c.node))
    }) {
        let llc = group[0].llc.as_deref().unwrap_or_default();
        let how = format!(
            "distinct physical cores sharing a last-level cache (CPUs {llc}){}",
            node(group[0])
        );
        return Some((ids(&group), how));
    }
    if let Some(group) = first_group(&cores, threads, |c| c.node.map(|n| n.to_string())) {
        let how = format!(
            "distinct physical cores{}; no last-level cache has {threads} of them",
            node(group[0])
        );
        return Some((ids(&group), how));
    }
    if cores.len() >= threads {
        let how = "distinct physical cores, across NUMA nodes or of unknown topology".to_owned();
        return Some((ids(&cores[..threads]), how));
    }
    if cpus.len() >= threads {
        // Every core once, then their SMT siblings.
        let siblings = cpus.iter().filter(|c| !cores.iter().any(|k| k.id == c.id));
        let chosen: Vec<&Cpu> = cores
            .iter()
            .copied()
            .chain(siblings)
            .take(threads)
            .collect();
        let how = format!(
            "only {} physical cores: some threads share one (SMT)",
            cores.len()
        );
        return Some((ids(&chosen), how));
    }
    None
}

/// The first `threads` members of the first group, in CPU order, with that
/// many members, where `key` groups CPUs (`None`: in no group).
fn first_group<'a>(
    cpus: &[&'a Cpu],
    threads: usize,
    key: impl Fn(&Cpu) -> Option<String>,
) -> Option<Vec<&'a Cpu>> {
    let mut groups: Vec<(String, Vec<&Cpu>)> = Vec::new();
    for &cpu in cpus {
        let Some(k) = key(cpu) else { continue };
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(cpu),
            None => groups.push((k, vec![cpu])),
        }
    }
    let (_, mut members) = groups.into_iter().find(|(_, m)| m.len() >= threads)?;
    members.truncate(threads);
    Some(members)
}

fn ids(cpus: &[&Cpu]) -> Vec<usize> {
    cpus.iter().map(|c| c.id).collect()
}

/// The CPUs the calling thread may run on, with their topology from sysfs.
#[cfg(target_os = "linux")]
fn usable_cpus() -> Result<Vec<Cpu>, String> {
    use std::fs;

    let read = |path: String| fs::read_to_string(path).ok().map(|s| s.trim().to_owned());
    // SAFETY: `cpu_set_t` is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable `cpu_set_t` of the size passed; pid 0 is
    // the calling thread.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } != 0 {
        return Err(format!(
            "sched_getaffinity failed: {}",
            io::Error::last_os_error()
        ));
    }
    let cpus = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` < CPU_SETSIZE, inside the set.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .map(|id| {
            let dir = format!("/sys/devices/system/cpu/cpu{id}");
            let core = read(format!("{dir}/topology/core_cpus_list"))
                .or_else(|| read(format!("{dir}/topology/thread_siblings_list")))
                // Unknown: count every CPU as a core of its own.
                .unwrap_or_else(|| id.to_string());
            // The last-level cache is the data or unified cache of the
            // highest level (usually cache/index3, the L3).
            let llc = fs::read_dir(format!("{dir}/cache"))
                .into_iter()
                .flatten()
                .filter_map(|entry| {
                    let cache = entry.ok()?.path().to_str()?.to_owned();
                    let level: u32 = read(format!("{cache}/level"))?.parse().ok()?;
                    let kind = read(format!("{cache}/type"))?;
                    (kind != "Instruction").then_some((level, cache))
                })
                .max_by_key(|(level, _)| *level)
                .and_then(|(_, cache)| read(format!("{cache}/shared_cpu_list")));
            let node = fs::read_dir(&dir).ok().and_then(|entries| {
                entries.filter_map(Result::ok).find_map(|entry| {
                    entry
                        .file_name()
                        .to_str()?
                        .strip_prefix("node")?
                        .parse()
                        .ok()
                })
            });
            Cpu {
                id,
                core,
                llc,
                node,
            }
        })
        .collect();
    Ok(cpus)
}

#[cfg(not(target_os = "linux"))]
fn usable_cpus() -> Result<Vec<Cpu>, String> {
    Err("pinning is implemented for Linux only".to_owned())
}

/// Restricts the calling thread to `cpu`.
#[cfg(target_os = "linux")]
fn set_affinity(cpu: usize) -> io::Result<()> {
    // SAFETY: as in `usable_cpus`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from `sched_getaffinity`'s set, so it is below
    // CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed; pid 0 is the
    // calling thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn set_affinity(_cpu: usize) -> io::Result<()> {
    // Never called: `usable_cpus` offers no CPUs here.
    Err(io::ErrorKind::Unsupported.into())
}
