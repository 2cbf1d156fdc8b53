//! A host thread's `submit_to_gpu` + wait on the CPU device's GPU service,
//! busy and after a pause: medians of the submit, of the wait and drop, and
//! of the whole round trip. `cold_probe [pause_ms] [rounds]`.
use std::time::{Duration, Instant};
use tandem_hal::HostApi;
use tandem_runtime::{math, Config, DeviceSelection, GpuService, Registry, Runtime};

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("a number"));
    let pause = Duration::from_millis(args.next().unwrap_or(100));
    let rounds = args.next().unwrap_or(15) as usize;
    let config = Config {
        workers: 1,
        devices: DeviceSelection::Only(vec![0]),
        ..Config::default()
    };
    let rt = Runtime::start_with(HostApi::with_devices(1), config, Registry::with_builtins())
        .expect("runtime");
    let service = GpuService::start(&rt.devices()[0], 1, 4).expect("service");
    let stop = std::sync::atomic::AtomicU32::new(0);
    let one = || {
        let t0 = Instant::now();
        let mut pending = rt.submit_to_gpu(0, &math::Noop, None).expect("submit");
        let t1 = Instant::now();
        pending.wait(&stop, None).expect("wait");
        drop(pending);
        (t1 - t0, t1.elapsed())
    };
    let median = |mut v: Vec<Duration>| {
        v.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        format!(
            "{:5.2} us ({:.2} - {:.2})",
            us(v[v.len() / 2]),
            us(v[0]),
            us(v[v.len() - 1])
        )
    };
    let report = |name: &str, runs: Vec<(Duration, Duration)>| {
        println!(
            "{name}: submit {}, wait and drop {}, round trip {}",
            median(runs.iter().map(|r| r.0).collect()),
            median(runs.iter().map(|r| r.1).collect()),
            median(runs.iter().map(|r| r.0 + r.1).collect())
        );
    };
    for _ in 0..20_000 {
        one();
    }
    report("busy", (0..rounds * 100).map(|_| one()).collect());
    let idle = (0..rounds)
        .map(|_| {
            std::thread::sleep(pause);
            one()
        })
        .collect();
    report(&format!("after {pause:?}"), idle);
    service.stop().expect("stop");
}
