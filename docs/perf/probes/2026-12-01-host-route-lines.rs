//! The cache lines and pages one host-route submit touches, for valgrind's
//! lackey to record: `valgrind --tool=lackey --trace-mem=yes
//! --trace-sched=yes <this binary> 2> trace`, then
//! `python3 2026-12-01-host-route-lines.py <this binary> <the address printed>
//! trace`.
//! Forty round trips on the CPU device's GPU service warm the route; the
//! forty-first is fenced by loads of three marker words (its start, its
//! submit's end, its wait and drop's end).
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

use tandem_hal::HostApi;
use tandem_runtime::{math, Config, DeviceSelection, GpuService, Registry, Runtime};

static MARKER: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];

fn main() {
    let config = Config {
        workers: 1,
        devices: DeviceSelection::Only(vec![0]),
        ..Config::default()
    };
    let runtime = Runtime::start_with(HostApi::with_devices(1), config, Registry::with_builtins())
        .expect("runtime");
    let service = GpuService::start(&runtime.devices()[0], 1, 1).expect("service");
    let stop = AtomicU32::new(0);
    println!("{:x}", &MARKER as *const _ as usize);
    for i in 0..41 {
        let marked = i == 40;
        if marked {
            MARKER[0].load(SeqCst);
        }
        let mut pending = runtime.submit_to_gpu(0, &math::Noop, None).expect("submit");
        if marked {
            MARKER[8].load(SeqCst);
        }
        pending.wait(&stop, None).expect("wait");
        drop(pending);
        if marked {
            MARKER[15].load(SeqCst);
        }
    }
    service.stop().expect("stop");
}
