//! The `tandem` binary's command line: help and version everywhere, usage
//! errors that name the problem and exit 2, JSON that parses, the demo's
//! wording and verdict, and the example configuration.

mod common;

use std::process::{Output, Stdio};

use tandem_runtime::Config;

fn tandem(args: &[&str]) -> Output {
    common::tandem().args(args).output().expect("run tandem")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const SUBCOMMANDS: [&[&str]; 7] = [
    &[],
    &["demo"],
    &["run"],
    &["info"],
    &["status"],
    &["clean"],
    &["blob"],
];

#[test]
fn every_subcommand_has_help() {
    for words in SUBCOMMANDS {
        for flag in ["--help", "-h"] {
            let args: Vec<&str> = words.iter().copied().chain([flag]).collect();
            let out = tandem(&args);
            assert!(out.status.success(), "tandem {args:?}: {:?}", out.status);
            let help = text(&out.stdout);
            let usage = format!("Usage: tandem {}", words.join(" "));
            assert!(help.contains(usage.trim_end()), "tandem {args:?}:\n{help}");
        }
    }
    let run = text(&tandem(&["run", "--help"]).stdout);
    for flag in ["--config <FILE>", "--announce", "--exit-on-stdin-eof"] {
        assert!(run.contains(flag), "run --help lacks {flag}:\n{run}");
    }
}

#[test]
fn version_is_the_packages() {
    for words in [&[][..], &["status"][..]] {
        let args: Vec<&str> = words.iter().copied().chain(["--version"]).collect();
        let out = tandem(&args);
        assert!(out.status.success());
        // clap names a subcommand's version `tandem-<subcommand>`.
        let program = std::iter::once("tandem").chain(words.iter().copied());
        assert_eq!(
            text(&out.stdout).trim(),
            format!(
                "{} {}",
                program.collect::<Vec<_>>().join("-"),
                env!("CARGO_PKG_VERSION")
            )
        );
    }
}

#[test]
fn usage_errors_say_what_is_wrong_and_exit_2() {
    let cases: [(&[&str], &str); 7] = [
        (&[], "Usage: tandem <COMMAND>"),
        (&["serve"], "unrecognized subcommand 'serve'"),
        (&["run", "--bogus"], "unexpected argument '--bogus'"),
        (
            &["run", "--config"],
            "a value is required for '--config <FILE>'",
        ),
        // A flag of another subcommand.
        (
            &["info", "--segment", "x"],
            "unexpected argument '--segment'",
        ),
        (
            &["status", "--segment"],
            "a value is required for '--segment <NAME>'",
        ),
        (&["exchange"], "unrecognized subcommand 'exchange'"),
    ];
    for (args, message) in cases {
        let out = tandem(args);
        assert_eq!(out.status.code(), Some(2), "tandem {args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(message), "tandem {args:?}: {err}");
    }
}

#[test]
fn info_json_lists_the_host_backend() {
    let out = tandem(&["info", "--json"]);
    assert!(out.status.success());
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("info JSON");
    let backends = info.as_array().expect("an array of backends");
    let names: Vec<&str> = backends
        .iter()
        .map(|b| b["backend"].as_str().expect("backend name"))
        .collect();
    assert_eq!(names, ["host", "cuda", "hip"]);
    let host = &backends[0];
    assert_eq!(host["compiled_in"], true);
    assert_eq!(host["error"], serde_json::Value::Null);
    let devices = host["devices"].as_array().expect("devices");
    assert!(!devices.is_empty());
    assert_eq!(devices[0]["ordinal"], 0);
    assert!(devices[0]["warp_size"].as_u64().is_some());
}

#[test]
fn demo_says_where_it_ran_and_ends_with_its_verdict() {
    let out = tandem(&["demo", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("demo JSON");
    assert_eq!(report["ok"], true);
    assert_eq!(report["failed"], 0);
    assert!(report["to_workers"]["tasks"].as_u64() > Some(0));
    assert!(report["host_round_trip"]["p50_us"].as_f64() > Some(0.0));
    let device = report["device"].as_str().expect("device").to_owned();

    let out = tandem(&["demo"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    let verdict = lines.last().expect("output");
    // "demo: N tasks (W to workers, S to services, B blob calls), 0 failed:
    // ok": the parts add up, each from the lines above.
    let figures: Vec<u64> = verdict
        .strip_prefix("demo: ")
        .and_then(|rest| rest.strip_suffix(", 0 failed: ok"))
        .unwrap_or_else(|| panic!("verdict line {verdict:?}"))
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let [tasks, workers, services, blob] = figures[..] else {
        panic!("verdict line {verdict:?}");
    };
    assert_eq!(tasks, workers + services + blob, "{verdict}");
    let devices = report["devices"].as_array().expect("devices");
    assert!(!devices.is_empty());
    let sum = |f: &dyn Fn(&serde_json::Value) -> u64| devices.iter().map(f).sum::<u64>();
    let peers: u64 = report["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .filter(|p| p["access"] == "direct")
        .map(|p| p["launch"]["tasks"].as_u64().unwrap())
        .sum();
    assert_eq!(
        services,
        report["to_services"]["tasks"].as_u64().unwrap()
            + sum(&|d| d["host_to_service_round_trip"]["samples"].as_u64().unwrap())
            + peers
    );
    // Every task sent to a service was run by one, and each device's line
    // says how many its ran.
    assert_eq!(sum(&|d| d["service_ran"].as_u64().unwrap()), services);
    for d in devices {
        let line = format!(
            "device {}'s service ran {} tasks",
            d["ordinal"],
            d["service_ran"].as_u64().unwrap()
        );
        assert!(stdout.contains(&line), "{line}:\n{stdout}");
    }
    assert!(workers > report["to_workers"]["tasks"].as_u64().unwrap());
    assert_eq!(
        report["blob_puts"].as_u64().unwrap() + report["blob_gets"].as_u64().unwrap(),
        blob
    );
    // Nobody configured the workers: no warning about their number.
    assert!(
        !text(&out.stderr).contains("workers"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        report["tasks"].as_u64(),
        Some(tasks),
        "same figures as JSON"
    );
    if device == "CPU device" {
        assert!(stdout.contains("device service (a persistent kernel on the CPU device)"));
        assert!(
            !stdout.contains("GPU"),
            "GPU wording on the CPU device:\n{stdout}"
        );
    } else {
        assert_eq!(device, "GPU");
        assert!(stdout.contains("GPU service"), "{stdout}");
    }
    for line in &lines {
        assert!(line.len() <= 100, "a {}-column line: {line}", line.len());
    }
}

#[test]
fn the_example_config_parses_to_the_defaults() {
    // Embedded at build time: the test binary also runs away from the
    // sources (a GPU bundle).
    let config =
        Config::from_toml(include_str!("../../tandem.example.toml")).expect("tandem.example.toml");
    assert_eq!(
        config,
        Config {
            cpu_segment_name: Some("tandem-example".into()),
            ..Config::default()
        },
        "tandem.example.toml should show every key at its default"
    );
}

/// A configuration listing a device twice is refused before anything
/// starts, naming the key and the device.
#[test]
fn a_device_listed_twice_is_a_config_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tandem.toml");
    std::fs::write(
        &config,
        "devices = [0, 0]
",
    )
    .expect("write config");
    let out = tandem(&["run", "--config", config.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("`devices`") && err.contains("device 0 is listed more than once"),
        "{err}"
    );
}

/// A command whose reader went away (`tandem info | head -0`) ends as
/// other commands do, by SIGPIPE, without a panic's message.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::ExitStatusExt;
    let mut ends = [0; 2];
    // SAFETY: pipe(2) writes two descriptors into `ends`.
    assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
    // SAFETY: both are fresh descriptors this test owns alone.
    let (reader, writer) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    drop(reader);
    let out = common::tandem()
        .arg("info")
        .stdout(std::process::Stdio::from(writer))
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run tandem");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{out:?}");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

/// A demo whose reader goes away (its stdout a pipe closed at once) runs to
/// its end and cleans up, without a panic over the lost lines: `tandem demo`
/// and `tandem blob demo`.
#[test]
fn a_demo_whose_reader_left_ends_without_a_panic() {
    for args in [&["demo"][..], &["blob", "demo"]] {
        a_demo_ends_without_a_panic(args);
    }
}

fn a_demo_ends_without_a_panic(args: &[&str]) {
    let mut demo = common::tandem()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(demo.stdout.take());
    let out = demo.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
