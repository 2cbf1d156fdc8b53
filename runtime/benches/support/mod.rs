//! What the runtime's benches share: microseconds for their rows, and the
//! way a CUDA part that cannot run says so (a failure under
//! `TANDEM_REQUIRE_GPU=1`, never a quiet skip).

use std::time::Duration;

/// `d` in microseconds.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Prints `CUDA: skipped: {why}`, or exits 1 when `TANDEM_REQUIRE_GPU=1`
/// asks for a GPU.
pub fn skip_cuda(why: &str) {
    if std::env::var("TANDEM_REQUIRE_GPU").as_deref() == Ok("1") {
        eprintln!("CUDA: {why} (or not compiled in), but TANDEM_REQUIRE_GPU=1");
        std::process::exit(1);
    }
    println!("CUDA: skipped: {why}");
}
