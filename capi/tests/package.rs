//! The C library as installed (`cargo xtask install-capi`, which the `cpp`
//! leg of `cargo xtask test` runs into the folder it names in
//! `$TANDEM_CAPI_PREFIX`): `libtandem.so.X.Y.Z` with its SONAME and the two
//! symlinks a distribution ships, only `tandem_*` symbols exported, a
//! pkg-config file a plain C11 program builds and runs with, a CMake package
//! whose every target's file exists; and `tandem.h` compiles at the
//! standards it claims.
//!
//! Without the variable (or `cc`, `c++`) a test says it skipped; with
//! `TANDEM_REQUIRE_CPP=1` (the leg sets it) that is a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn required() -> bool {
    std::env::var("TANDEM_REQUIRE_CPP").is_ok_and(|v| v == "1")
}

/// Says why the test skips, or fails when it may not.
fn skip(why: &str) {
    assert!(!required(), "TANDEM_REQUIRE_CPP=1 but {why}");
    println!("skipped: {why}");
}

/// The installed prefix, or None after [`skip`].
fn prefix() -> Option<PathBuf> {
    match std::env::var_os("TANDEM_CAPI_PREFIX") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            skip("TANDEM_CAPI_PREFIX is not set (`cargo xtask test cpp` installs and sets it)");
            None
        }
    }
}

fn soname() -> String {
    format!("libtandem.so.{}", env!("CARGO_PKG_VERSION_MAJOR"))
}

/// Runs `command`; its stdout, after asserting it succeeded.
fn run(command: &mut Command) -> String {
    let output: Output = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed: {text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

fn on_path(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

#[test]
fn the_library_file_its_soname_and_symlinks_are_a_distributions() {
    let Some(prefix) = prefix() else { return };
    let lib = prefix.join("lib");
    let file = format!("libtandem.so.{VERSION}");
    assert!(
        std::fs::symlink_metadata(lib.join(&file))
            .expect("the library file")
            .is_file(),
        "{file} is the file itself"
    );
    assert_eq!(
        std::fs::read_link(lib.join(soname())).expect("the SONAME symlink"),
        Path::new(&file)
    );
    assert_eq!(
        std::fs::read_link(lib.join("libtandem.so")).expect("the linker's symlink"),
        Path::new(&soname())
    );
    let dynamic = run(Command::new("readelf").arg("-d").arg(lib.join(&file)));
    assert!(
        dynamic.contains(&format!("Library soname: [{}]", soname())),
        "{dynamic}"
    );
}

#[test]
fn only_tandem_symbols_are_exported() {
    let Some(prefix) = prefix() else { return };
    let library = prefix.join("lib").join(format!("libtandem.so.{VERSION}"));
    let symbols = run(Command::new("nm")
        .args(["-D", "--defined-only", "--format=posix"])
        .arg(&library));
    let names: Vec<&str> = symbols
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(names.contains(&"tandem_version"), "{symbols}");
    let foreign: Vec<&&str> = names
        .iter()
        .filter(|name| !name.starts_with("tandem_"))
        .collect();
    assert!(foreign.is_empty(), "exported besides tandem_*: {foreign:?}");
}

#[test]
fn a_c11_program_builds_with_pkg_config_and_runs() {
    let Some(prefix) = prefix() else { return };
    if !on_path("pkg-config") || !on_path("cc") {
        return skip("pkg-config or cc is not on PATH (.ci/run installs them)");
    }
    let dir = tempfile::tempdir().expect("a temporary folder");
    let source = dir.path().join("version.c");
    std::fs::write(
        &source,
        r#"#include <stdio.h>
#include <string.h>
#include <tandem.h>

int main(void) {
  uint32_t major = 0, minor = 0, patch = 0;
  if (strcmp(tandem_version(), TANDEM_VERSION_STRING) != 0) {
    fprintf(stderr, "library %s, header %s\n", tandem_version(), TANDEM_VERSION_STRING);
    return 1;
  }
  if (tandem_version_numbers(&major, &minor, &patch) != TANDEM_STATUS_OK || major != TANDEM_VERSION_MAJOR ||
      minor != TANDEM_VERSION_MINOR || patch != TANDEM_VERSION_PATCH) {
    fprintf(stderr, "numbers %u.%u.%u\n", (unsigned)major, (unsigned)minor, (unsigned)patch);
    return 1;
  }
  printf("tandem %s\n", tandem_version());
  return 0;
}
"#,
    )
    .expect("writing the program");
    let exe = dir.path().join("version");
    let pkgconfig = prefix.join("lib").join("pkgconfig");
    // As a user types it: the flags come from pkg-config, through the shell.
    run(Command::new("sh")
        .arg("-c")
        .arg(r#"cc -std=c11 -pedantic-errors -Wall -Wextra -Werror "$1" -o "$2" $(pkg-config --cflags --libs tandem)"#)
        .args(["sh".as_ref(), source.as_os_str(), exe.as_os_str()])
        .env("PKG_CONFIG_PATH", &pkgconfig));
    let needed = run(Command::new("readelf").arg("-d").arg(&exe));
    assert!(
        needed.contains(&format!("Shared library: [{}]", soname())),
        "the program needs the SONAME, not the file: {needed}"
    );
    let said = run(Command::new(&exe).env("LD_LIBRARY_PATH", prefix.join("lib")));
    assert_eq!(said.trim(), format!("tandem {VERSION}"));
}

#[test]
fn every_target_the_cmake_package_declares_is_installed() {
    let Some(prefix) = prefix() else { return };
    let config = std::fs::read_to_string(prefix.join("lib/cmake/Tandem/TandemConfig.cmake"))
        .expect("TandemConfig.cmake");
    let targets = config.matches("add_library(").count();
    let locations: Vec<&str> = config
        .lines()
        .filter_map(|line| {
            line.trim()
                .strip_prefix("IMPORTED_LOCATION \"${_tandem_prefix}/")
        })
        .map(|rest| rest.trim_end_matches('"'))
        .collect();
    assert!(targets > 0, "no target declared");
    assert_eq!(locations.len(), targets, "a target without a location");
    for location in locations {
        assert!(
            prefix.join(location).exists(),
            "declared and not installed: {location}"
        );
    }
    assert!(
        config.contains(&format!("IMPORTED_SONAME \"{}\"", soname())),
        "the package's SONAME is the library's"
    );
}

#[test]
fn the_header_compiles_at_the_standards_it_claims() {
    // Relative to the crate's folder, the working folder of its tests under cargo and in the
    // GPU bundle (which carries it: capi/gpu-bundle-files.txt).
    let header = Path::new("include");
    let claim = "C99 and later, C++11 and later";
    assert!(
        std::fs::read_to_string(header.join("tandem.h"))
            .expect("tandem.h")
            .contains(claim),
        "tandem.h states `{claim}`"
    );
    let dir = tempfile::tempdir().expect("a temporary folder");
    let source = dir.path().join("include_only.c");
    std::fs::write(
        &source,
        "#include \"tandem.h\"\nint main(void) { return tandem_version() == 0; }\n",
    )
    .expect("writing the unit");
    for (compiler, language, standards) in [
        ("cc", "c", &["c99", "c11", "c17"][..]),
        ("c++", "c++", &["c++11", "c++17"][..]),
    ] {
        if !on_path(compiler) {
            skip(&format!("`{compiler}` is not on PATH"));
            continue;
        }
        for standard in standards {
            run(Command::new(compiler)
                .args(["-x", language])
                .arg(format!("-std={standard}"))
                .args([
                    "-pedantic-errors",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-fsyntax-only",
                    "-I",
                ])
                .arg(header)
                .arg(&source));
        }
    }
}
