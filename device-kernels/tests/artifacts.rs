//! The library's forms agree with each other and with kernels.toml.

use std::process::Command;

use tandem_device_kernels::{library, CUDA_SOURCE, HOST_TABLE, SIGNATURES};

#[test]
fn every_signature_has_a_host_entry_with_the_same_params() {
    let lib = library();
    let table = lib.host_table.expect("host table");
    assert_eq!(table.len(), SIGNATURES.len());
    for sig in SIGNATURES {
        let entry = HOST_TABLE
            .iter()
            .find(|k| k.name == sig.name)
            .expect("host entry");
        assert_eq!(entry.params, sig.params, "{}", sig.name);
        assert_eq!(lib.signature(sig.name), Some(sig));
    }
    assert_eq!(lib.name, "tandem-device-kernels");
}

#[test]
fn cuda_source_is_self_contained_and_declares_every_kernel() {
    assert!(
        !CUDA_SOURCE.contains("#include"),
        "NVRTC has no include path"
    );
    for sig in SIGNATURES {
        assert!(
            CUDA_SOURCE.contains(&format!("TANDEM_KERNEL {}(", sig.name)),
            "{} is defined in the embedded source",
            sig.name
        );
    }
}

/// The embedded source also compiles as plain host C++ with no system header
/// available: the strongest self-containment check possible without nvcc.
#[test]
fn cuda_source_compiles_without_any_system_header() {
    let Some(cxx) = ["c++", "g++", "clang++"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
    else {
        println!("skipped: no C++ compiler on PATH");
        return;
    };
    let dir = std::env::temp_dir().join(format!("tandem-dk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("embedded.cpp");
    std::fs::write(&file, CUDA_SOURCE).unwrap();
    let out = Command::new(cxx)
        .args([
            "-std=c++17",
            "-fsyntax-only",
            "-nostdinc",
            "-nostdinc++",
            "-x",
            "c++",
        ])
        .arg(&file)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
