//! Tandem's cross-crate tests. The library holds the backend conformance
//! suite, written once over [`tandem_hal::GpuApi`] ([`conformance`]), the
//! device kernels' cross-language suite, written the same way
//! ([`cross_language`]), the one way GPU tests find a device or skip
//! ([`gpu`]), both sides of the two-process IPC test ([`ipc`]; the child is
//! the `ipc_child` binary), kernels of client processes on device queues of
//! their own ([`client_queues`]; the `client_queues_child` binary), the helpers tests and benches share
//! ([`support`]), the benchmarks' yardsticks ([`measure`]), a real
//! Garage S3 cluster on loopback for the object-tier tests ([`garage`]),
//! and an etcd and NIXL for the share daemon's cluster tests ([`cluster`]).
//! Each suite file lists its behaviours in a macro at its bottom;
//! [`conformance_tests!`] and [`cross_language_tests!`] stamp one `#[test]`
//! per behaviour for a backend (`tests/conformance.rs`,
//! `tests/cross_language.rs`).

pub mod client_queues;
pub mod cluster;
pub mod conformance;
pub mod cross_language;
pub mod garage;
pub mod gpu;
pub mod ipc;
pub mod measure;
pub mod support;

/// `None` after printing why the test `label` is skipped (`why`), or, when the environment
/// variable `require_env` is `1` (a machine that must run it), a panic that fails the test.
fn skip_unless_required<T>(require_env: &str, label: &str, why: &str) -> Option<T> {
    if std::env::var(require_env).as_deref() == Ok("1") {
        panic!("{label}: {why}, but {require_env}=1 requires it");
    }
    println!("{label}: skipped: {why}");
    None
}
