//! How long a thread takes to read the same 64 cache lines again, busy and after sleeping
//! 100 ms or 1 s: what a request path that touches that many lines pays after an idle pause,
//! whatever it does with them. The argument is the stride in u64s between the lines: 8 puts
//! all 64 in one 4 KiB page, 512 puts each on a page of its own (a TLB miss each when cold).
//!
//! `rustc -O -o cold docs/perf/probes/2026-12-01-cold-lines.rs && ./cold 8 && ./cold 512`
use std::hint::black_box;
use std::time::{Duration, Instant};

fn main() {
    let words = (64 << 20) / 8; // 64 MiB, larger than the caches
    let buf: Vec<u64> = (0..words as u64).collect();
    let stride: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("a stride in u64s"))
        .unwrap_or(512);
    let lines: Vec<usize> = (0..64).map(|i| (i * stride) % words).collect();
    let read = || lines.iter().fold(0u64, |s, &i| s.wrapping_add(black_box(buf[black_box(i)])));
    for (label, pause) in [("busy", 0u64), ("after 100ms", 100), ("after 1s", 1000)] {
        let mut took: Vec<u128> = (0..5)
            .map(|_| {
                if pause > 0 {
                    std::thread::sleep(Duration::from_millis(pause));
                } else {
                    black_box(read());
                }
                let start = Instant::now();
                black_box(read());
                start.elapsed().as_nanos()
            })
            .collect();
        took.sort();
        println!("{label}: the same 64 lines read again: median {} ns, all {took:?}", took[2]);
    }
}
