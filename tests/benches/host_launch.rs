//! Launch overhead of the CPU device (the host backend): an empty kernel
//! launched through `GpuApi` and synchronised, for a few grid shapes, next to
//! the cost of spawning and joining one OS thread (what a launch would cost
//! without the backend's thread pool) measured in the same run.

use std::time::{Duration, Instant};

use tandem_hal::{GpuApi, GpuDevice, HostApi, LaunchConfig};
use tandem_tests::conformance::kernels;

/// Median time of `op` over `reps` calls after a warm-up.
fn median(reps: usize, mut op: impl FnMut()) -> Duration {
    for _ in 0..reps / 10 + 1 {
        op();
    }
    let mut times: Vec<Duration> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            op();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[reps / 2]
}

fn main() {
    let api = HostApi::load().expect("the host backend always loads");
    let device = api.device(0).expect("host device 0");
    let module = kernels(&device);
    let kernel = device
        .kernel(&module, tandem_device_kernels::names::TANDEM_EMPTY)
        .expect("tandem_empty");
    let stream = device.create_stream().expect("stream");

    let thread_spawn = median(2000, || std::thread::spawn(|| {}).join().expect("join"));
    println!("CPU device launch overhead (empty kernel, launch + stream sync, median):");
    println!(
        "  reference: std::thread spawn + join        {:>9.2} us",
        us(thread_spawn)
    );
    for (label, config) in [
        ("1 block x 1 thread", LaunchConfig::linear(1, 1)),
        ("1 block x 32 threads", LaunchConfig::linear(1, 32)),
        ("4 blocks x 256 threads", LaunchConfig::linear(4, 256)),
    ] {
        let t = median(500, || {
            // SAFETY: `tandem_empty` takes no arguments and touches no memory.
            unsafe { device.launch(&kernel, &config, &[], &stream) }.expect("launch");
            device.synchronize_stream(&stream).expect("sync");
        });
        println!(
            "  {label:<24} launch + sync         {:>9.2} us  ({:.2}x a thread spawn)",
            us(t),
            t.as_secs_f64() / thread_spawn.as_secs_f64()
        );
    }
    let batch = 1000;
    let config = LaunchConfig::linear(1, 1);
    let t = median(9, || {
        for _ in 0..batch {
            // SAFETY: as above.
            unsafe { device.launch(&kernel, &config, &[], &stream) }.expect("launch");
        }
        device.synchronize_stream(&stream).expect("sync");
    });
    println!(
        "  1000 launches, one sync                    {:>9.2} us per launch",
        us(t) / batch as f64
    );
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
