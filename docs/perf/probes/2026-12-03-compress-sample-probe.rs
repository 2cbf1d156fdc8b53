//! What a dynamic put's compressibility test costs on 4 KiB of random bytes: zstd level 1
//! (a reused context, as blob/src/compress.rs keeps them), zstd at faster levels and with a
//! fresh context, lz4, a byte-entropy count, and a 1 MiB memcpy for scale.
//!
//! Built as the `src/main.rs` of a scratch crate depending on `zstd = "=0.13.5"` and
//! `lz4_flex = "=0.11.7"` (the workspace's versions), `cargo build --release`.
use std::time::Instant;
fn main() {
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let data: Vec<u8> = (0..(1 << 20)).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u8 }).collect();
    let sample = &data[..4096];
    let n = 2000;
    let mut out = vec![0u8; 4096 * 7 / 8];
    let mut z = zstd::bulk::Compressor::new(1).unwrap();
    for level in [1, -1, -5] {
        let mut z = zstd::bulk::Compressor::new(level).unwrap();
        let t = Instant::now();
        let mut fits = 0;
        for _ in 0..n { if z.compress_to_buffer(sample, &mut out[..]).is_ok() { fits += 1; } }
        println!("zstd level {level}, reused context: {:.2} us a 4 KiB sample ({fits} fit)", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    let t = Instant::now();
    for _ in 0..200 { let mut z = zstd::bulk::Compressor::new(1).unwrap(); let _ = z.compress_to_buffer(sample, &mut out[..]); }
    println!("zstd level 1, fresh context: {:.2} us", t.elapsed().as_secs_f64() * 1e6 / 200.0);
    let mut lz = vec![0u8; lz4_flex::block::get_maximum_output_size(4096)];
    let t = Instant::now();
    for _ in 0..n { let _ = lz4_flex::block::compress_into(sample, &mut lz[..]); }
    println!("lz4: {:.2} us a 4 KiB sample", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    let entropy = |b: &[u8]| { let mut h = [0u32; 256]; for &x in b { h[x as usize] += 1; } let n = b.len() as f64; h.iter().filter(|&&c| c > 0).map(|&c| { let p = c as f64 / n; -p * p.log2() }).sum::<f64>() };
    let t = Instant::now();
    let mut e = 0.0;
    for _ in 0..n { e = entropy(std::hint::black_box(sample)); }
    println!("byte entropy of a 4 KiB sample: {:.2} us ({e:.3} bits a byte)", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    let mut dst = vec![0u8; 1 << 20];
    let t = Instant::now();
    for _ in 0..200 { dst.copy_from_slice(&data); std::hint::black_box(&dst); }
    println!("memcpy 1 MiB: {:.2} us", t.elapsed().as_secs_f64() * 1e6 / 200.0);
    // interleaved with 1 MiB copies, as puts do (the sample test after the cache was swept)
    let t = Instant::now();
    let mut tz = 0f64;
    for _ in 0..200 { dst.copy_from_slice(&data); std::hint::black_box(&dst); let s = Instant::now(); let _ = z.compress_to_buffer(&data[(1<<19)..(1<<19)+4096], &mut out[..]); tz += s.elapsed().as_secs_f64(); }
    let t2 = Instant::now();
    let mut tl = 0f64;
    for _ in 0..200 { dst.copy_from_slice(&data); std::hint::black_box(&dst); let s = Instant::now(); let _ = lz4_flex::block::compress_into(&data[(1<<19)..(1<<19)+4096], &mut lz[..]); let _ = entropy(&data[(1<<19)..(1<<19)+4096]); tl += s.elapsed().as_secs_f64(); }
    let _ = t2;
    println!("lz4 + byte entropy after each 1 MiB copy: {:.2} us a sample", tl * 1e6 / 200.0);
    println!("zstd level 1 after each 1 MiB copy: {:.2} us a sample (whole loop {:.2} us a round)", tz * 1e6 / 200.0, t.elapsed().as_secs_f64() * 1e6 / 200.0);
}
