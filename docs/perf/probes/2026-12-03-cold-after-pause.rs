//! What a thread's first reads of one page cost after a pause, by how the pause was spent:
//! asleep (plain), asleep with another page read first (otherfirst), in 1 ms naps (naps),
//! spinning on the clock (spin), or asleep while another thread reads the same lines every
//! 1, 5 or 10 ms (keeper1, keeper5, keeper10). 16 lines of one 4 KiB page, 5 pauses of 1 s each.
//!
//! `rustc -O -o cold-after-pause cold-after-pause.rs && ./cold-after-pause MODE`
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let words = (64 << 20) / 8;
    let buf: Arc<Vec<u64>> = Arc::new((0..words as u64).collect());
    let mode = std::env::args().nth(1).unwrap_or_else(|| "plain".into());
    let lines: Vec<usize> = (0..16).map(|i| 12345 * 512 + i * 8).collect();
    let read = |b: &Vec<u64>, l: &[usize]| l.iter().fold(0u64, |s, &i| s.wrapping_add(black_box(b[black_box(i)])));
    let stop = Arc::new(AtomicBool::new(false));
    let period = match mode.as_str() { "keeper1" => 1, "keeper5" => 5, "keeper10" => 10, _ => 0 };
    let keeper = (period > 0).then(|| {
        let (b, s, l) = (buf.clone(), stop.clone(), lines.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                black_box(read(&b, &l));
                std::thread::sleep(Duration::from_millis(period));
            }
        })
    });
    let other = 999 * 512usize;
    let pause = Duration::from_secs(1);
    let mut took: Vec<(u128, u128)> = (0..5)
        .map(|_| {
            match mode.as_str() {
                "naps" => { let t = Instant::now(); while t.elapsed() < pause { std::thread::sleep(Duration::from_millis(1)); } }
                "spin" => { let t = Instant::now(); while t.elapsed() < pause { std::hint::spin_loop(); } }
                _ => std::thread::sleep(pause),
            }
            let t0 = Instant::now();
            if mode == "otherfirst" { black_box(buf[black_box(other)]); }
            let t1 = Instant::now();
            black_box(read(&buf, &lines));
            let t2 = Instant::now();
            ((t1 - t0).as_nanos(), (t2 - t1).as_nanos())
        })
        .collect();
    took.sort_by_key(|x| x.1);
    println!("{mode:>10} after 1s: 16 lines of one page: median {} ns (before them {} ns); all {:?}", took[2].1, took[2].0, took);
    stop.store(true, Ordering::Relaxed);
    if let Some(k) = keeper { k.join().unwrap(); }
}
