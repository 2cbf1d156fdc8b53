//! What docs/operations.md hands operators is checked: the systemd units pass
//! `systemd-analyze verify` and their command lines are ones `tandem` takes, the alert rules
//! pass `promtool check rules` and fire in `promtool test rules`, and the metrics tables name
//! exactly the series the services serve. The tools come from `.ci/run` (systemd,
//! prometheus); without them a part says it skipped, and under CI=true fails.

mod common;

use common::scrape::{free_addr, scrape};
use common::{start_service, tool_or_skip, Cleanup};

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// The unit files, embedded: a GPU bundle runs this test away from the source tree.
const UNITS: [(&str, &str); 3] = [
    (
        "tandem.service",
        include_str!("../../packaging/systemd/tandem.service"),
    ),
    (
        "tandem-blob.service",
        include_str!("../../packaging/systemd/tandem-blob.service"),
    ),
    (
        "tandem-share.service",
        include_str!("../../packaging/systemd/tandem-share.service"),
    ),
];
const ALERTS: &str = include_str!("../../packaging/prometheus/tandem-alerts.yml");
const ALERT_TESTS: &str = include_str!("../../packaging/prometheus/tandem-alerts.test.yml");
const OPERATIONS_MD: &str = include_str!("../../docs/operations.md");

/// Where the units expect the binary; the tests put the one cargo built there instead.
const INSTALLED: &str = "/usr/local/bin/tandem";

#[test]
fn the_units_pass_systemd_analyze_verify() {
    let Some(analyze) = tool_or_skip("systemd-analyze", "TANDEM_SYSTEMD_ANALYZE") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let built = common::tandem_exe();
    let copies: Vec<PathBuf> = UNITS
        .iter()
        .map(|(name, text)| {
            assert!(text.contains(&format!("ExecStart={INSTALLED} ")), "{name}");
            let copy = dir.path().join(name);
            std::fs::write(&copy, text.replace(INSTALLED, built.to_str().unwrap())).unwrap();
            copy
        })
        .collect();
    let out = Command::new(analyze)
        .arg("verify")
        .args(&copies)
        .output()
        .unwrap();
    let said = common::text(&out.stderr);
    // verify exits 0 on unknown keys, which it only warns about.
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

#[test]
fn the_units_command_lines_are_ones_tandem_takes() {
    for (name, text) in UNITS {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap();
        let args: Vec<&str> = line.split_whitespace().skip(1).collect();
        // Every flag parses (a wrong one fails before --help is reached).
        let out = Command::new(common::tandem_exe())
            .args(&args)
            .arg("--help")
            .output()
            .unwrap();
        let said = common::text(&out.stderr);
        assert!(out.status.success(), "{name}: {said}");
    }
}

#[test]
fn the_alert_rules_pass_promtool() {
    let Some(promtool) = tool_or_skip("promtool", "TANDEM_PROMTOOL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tandem-alerts.yml"), ALERTS).unwrap();
    std::fs::write(dir.path().join("tandem-alerts.test.yml"), ALERT_TESTS).unwrap();
    for args in [
        ["check", "rules", "tandem-alerts.yml"],
        ["test", "rules", "tandem-alerts.test.yml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let said = format!("{}{}", common::text(&out.stdout), common::text(&out.stderr));
        assert!(
            out.status.success() && said.contains("SUCCESS"),
            "{args:?}: {said}"
        );
    }
}

/// The series names a scrape declares (`# TYPE name kind`).
fn declared(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn operations_md_names_exactly_the_series_served() {
    let mut cleanup = Cleanup::default();
    let dir = tempfile::tempdir().unwrap();
    let (run_at, blob_at, share_at) = (free_addr(), free_addr(), free_addr());
    let toml = dir.path().join("blob.toml");
    let store = format!(
        "workers = 1\ndevices = []\n[blob]\nmetadata = {:?}\n[[blob.targets]]\n\
         kind = \"ram\"\ncapacity = 1048576\nscore = 1.0\n",
        dir.path().join("meta.redb")
    );
    std::fs::write(&toml, store).unwrap();
    let toml = toml.to_str().unwrap();
    let (run_m, blob_m, share_m) = (
        run_at.to_string(),
        blob_at.to_string(),
        share_at.to_string(),
    );
    start_service(&["run", "--metrics", &run_m], &mut cleanup);
    start_service(
        &["blob", "run", "--config", toml, "--metrics", &blob_m],
        &mut cleanup,
    );
    let socket = dir.path().join("s.sock");
    let share = [
        "share",
        "serve",
        "--backend",
        "host",
        "--metrics",
        &share_m,
        "--socket",
    ];
    start_service(
        &[&share[..], &[socket.to_str().unwrap()]].concat(),
        &mut cleanup,
    );
    // Series with no rows yet (no client attached) are declared all the same.
    let mut served = BTreeSet::new();
    for addr in [run_at, blob_at, share_at] {
        served.extend(declared(&scrape(addr)));
    }
    let listed: BTreeSet<String> = OPERATIONS_MD
        .lines()
        .filter_map(|l| l.strip_prefix("| `tandem_")?.split('`').next())
        .map(|name| format!("tandem_{name}"))
        .collect();
    assert_eq!(
        listed, served,
        "docs/operations.md's tables against the scrapes"
    );
}
