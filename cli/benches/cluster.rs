//! A fetch from another node against NIXL with no Tandem in between, in one run, printed side
//! by side: two share daemons as two nodes (`tandem share serve --config`, UCX on TCP, an etcd
//! started here), a buffer exported on one and fetched through the other by a client of it,
//! each fetch timed from the call to the mapped copy; and two NIXL agents (in this process)
//! moving the same bytes over the same transport, each read timed from its request to its
//! completion, the memory registered and the metadata exchanged once beforehand. Rounds take
//! turns. Targets: 64 MiB and 1 GiB at >= 0.9x the raw agents' throughput; 4 KiB at <= 1.5x
//! their latency. Needs etcd and NIXL (`TANDEM_ETCD`, `TANDEM_NIXL_LIBRARY`); without them it
//! says so and measures nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_hal::{GpuDevice, HostApi};
use tandem_nixl::{Agent, Memory, Nixl, Region};
use tandem_share::{HostMirror, ShareClient};

#[path = "../tests/common/mod.rs"]
mod common;

/// The sizes, with how many fetches of each a round makes and the rounds.
const SIZES: [(usize, usize, usize); 3] = [(4 << 10, 200, 5), (64 << 20, 3, 5), (1 << 30, 1, 3)];

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Two agents of this process, one owning `bytes` of source, the other reading them.
struct Raw {
    reader: Agent,
    _owner: Agent,
    local: Region,
    remote: Region,
    _registrations: (tandem_nixl::Registration, tandem_nixl::Registration),
    _memory: (Vec<u8>, Vec<u8>),
}

impl Raw {
    fn new(nixl: &Arc<Nixl>, bytes: usize) -> Raw {
        let source = vec![7u8; bytes];
        let target = vec![0u8; bytes];
        let owner = Agent::new(Arc::clone(nixl), &format!("raw-owner-{bytes}")).unwrap();
        let reader = Agent::new(Arc::clone(nixl), &format!("raw-reader-{bytes}")).unwrap();
        let region = |v: &Vec<u8>, tag| Region {
            addr: v.as_ptr() as u64,
            len: v.len(),
            device: tag,
            memory: Memory::Host,
        };
        let (remote, local) = (region(&source, 1), region(&target, 2));
        // SAFETY: both vectors live in this struct, after the registrations drop.
        let registrations = unsafe {
            (
                owner.register(remote).unwrap(),
                reader.register(local).unwrap(),
            )
        };
        reader
            .load_remote(&owner.connection_metadata().unwrap())
            .unwrap();
        reader
            .load_remote(&owner.region_metadata(&remote).unwrap())
            .unwrap();
        Raw {
            reader,
            _owner: owner,
            local,
            remote,
            _registrations: registrations,
            _memory: (source, target),
        }
    }

    fn read(&self) -> Duration {
        let started = Instant::now();
        let owner = format!("raw-owner-{}", self.remote.len);
        let mut transfer = self.reader.read(&self.local, &self.remote, &owner).unwrap();
        while !transfer.poll().unwrap() {
            std::hint::spin_loop();
        }
        started.elapsed()
    }
}

fn main() {
    let Some(needs) = tandem_tests::cluster::needs_or_skip() else {
        return;
    };
    // SAFETY: set before any thread of this process reads the environment (UCX reads it
    // when the first agent starts).
    unsafe { std::env::set_var("UCX_TLS", "tcp") };
    let nodes = common::cluster::TwoNodes::start(&needs, 10);
    let a = ShareClient::connect(HostApi::with_devices(1), &nodes.a.socket).unwrap();
    let b = ShareClient::connect(HostApi::with_devices(1), &nodes.b.socket).unwrap();
    let nixl = Nixl::load(Some(&needs.nixl)).unwrap();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("cluster fetch vs raw NIXL (UCX_TLS=tcp, loopback, {cores} cores)");
    println!(
        "{:>10} {:>14} {:>14} {:>12} {:>12} {:>7}  target",
        "bytes", "tandem", "raw nixl", "tandem GB/s", "raw GB/s", "ratio"
    );
    for (bytes, per_round, rounds) in SIZES {
        let (id, mut buffer) = a.create_buffer(0, bytes).unwrap();
        HostMirror::new(&mut buffer, false).unwrap().fill(7);
        let stream = a.device(0).unwrap().create_stream().unwrap();
        drop(a.seal(buffer, &stream).unwrap());
        a.export(id).unwrap();
        let remote = format!("node-a/{id}");
        let raw = Raw::new(&nixl, bytes);
        // A first fetch and read of each: connections and first-touch out of the timings.
        let (local, copy) = b.fetch(&remote, 0).unwrap();
        drop(copy);
        b.delete(local).unwrap();
        raw.read();
        let (mut tandem, mut nixl_times) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for _ in 0..per_round {
                let started = Instant::now();
                let (local, copy) = b.fetch(&remote, 0).unwrap();
                tandem.push(started.elapsed());
                drop(copy);
                b.delete(local).unwrap();
            }
            for _ in 0..per_round {
                nixl_times.push(raw.read());
            }
        }
        let (t, r) = (median(tandem), median(nixl_times));
        let gbps = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e9;
        let (ratio, target) = if bytes <= 4 << 10 {
            (t.as_secs_f64() / r.as_secs_f64(), "latency <= 1.5x")
        } else {
            (gbps(t) / gbps(r), "throughput >= 0.9x")
        };
        println!(
            "{bytes:>10} {:>14?} {:>14?} {:>12.3} {:>12.3} {ratio:>6.2}x  {target}",
            t,
            r,
            gbps(t),
            gbps(r)
        );
        a.delete(id).unwrap();
    }
}
