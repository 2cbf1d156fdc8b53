//! The NIXL this machine has: it carries every function Tandem calls, and two agents of it
//! move bytes (UCX over loopback). Skipped, saying why, without a NIXL
//! (`TANDEM_NIXL_LIBRARY`); `TANDEM_REQUIRE_CLUSTER=1` makes that a failure.

use std::sync::Arc;

use tandem_nixl::{missing_symbols, Agent, Memory, Nixl, NixlError, Region, SYMBOLS};
use tandem_tests::cluster::nixl_or_skip;

#[test]
fn the_library_has_every_function_tandem_calls() {
    let Some(path) = nixl_or_skip() else { return };
    assert_eq!(missing_symbols(&path).unwrap(), Vec::<&str>::new());
    assert!(SYMBOLS.len() > 20, "{SYMBOLS:?}");
    let nixl = Nixl::load(Some(&path)).unwrap();
    assert_eq!(nixl.path(), path);
}

#[test]
fn a_missing_library_is_a_typed_error_naming_where_it_looked() {
    let error = Nixl::load(Some(std::path::Path::new("/nonexistent/libnixl_capi.so")))
        .err()
        .unwrap();
    assert!(matches!(error, NixlError::NotFound { .. }), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("/nonexistent/libnixl_capi.so") && text.contains("nixl-cu13"),
        "{text}"
    );
}

fn host(bytes: &[u8], tag: u64) -> Region {
    Region {
        addr: bytes.as_ptr() as u64,
        len: bytes.len(),
        device: tag,
        memory: Memory::Host,
    }
}

#[test]
fn two_agents_read_host_memory_byte_for_byte() {
    let Some(path) = nixl_or_skip() else { return };
    let nixl = Nixl::load(Some(&path)).unwrap();
    let source: Vec<u8> = (0..1 << 20).map(|i: u32| (i * 7 + 3) as u8).collect();
    let mut target = vec![0u8; source.len()];
    let owner = Agent::new(Arc::clone(&nixl), "library-test-owner").unwrap();
    let reader = Agent::new(nixl, "library-test-reader").unwrap();
    let remote = host(&source, 5);
    let local = host(&target, 0);
    // SAFETY: both vectors outlive their registrations (dropped first, below).
    let (owned, read_into) = unsafe { (owner.register(remote), reader.register(local)) };
    let (owned, read_into) = (owned.unwrap(), read_into.unwrap());
    let name = reader
        .load_remote(&owner.connection_metadata().unwrap())
        .unwrap();
    assert_eq!(name, "library-test-owner");
    reader
        .load_remote(&owner.region_metadata(&remote).unwrap())
        .unwrap();
    let mut transfer = reader.read(&local, &remote, &name).unwrap();
    let started = std::time::Instant::now();
    while !transfer.poll().unwrap() {
        assert!(started.elapsed().as_secs() < 60, "the read did not finish");
        std::thread::yield_now();
    }
    drop(transfer);
    drop((owned, read_into));
    target.truncate(source.len());
    assert!(target == source, "the bytes read differ from the source");
}
