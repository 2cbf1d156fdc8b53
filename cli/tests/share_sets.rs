//! The share daemon's named sets end to end on the CPU device: a daemon in
//! a child process, publishers and readers in this process and in others,
//! versions, bad input, and publishers killed at every step of a publish.
//!
//! Other processes are this test binary run again with [`ROLE_ENV`] set
//! (see [`sets_child_role`]).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tandem_hal::{GpuApi, HostApi};
use tandem_share::{
    ErrorCode, HostMirror, Inspector, ObjectId, SetInfo, ShareClient, ShareError, MAX_SET_NAME,
};

const ROLE_ENV: &str = "TANDEM_SETS_TEST_ROLE";

fn daemon() -> ShareClient<HostApi> {
    ShareClient::spawn_daemon_with(HostApi::load().expect("host api"), &common::tandem_exe())
        .expect("starting the share daemon")
}

/// What a publish has done when the publisher stops there.
const STEPS: [&str; 5] = ["created", "staged", "sealed", "manifest", "bound"];

/// Publishes set `name` as version holding a manifest of `manifest` and
/// buffers filled with each byte of `fills`, calling `at` after each step
/// of [`STEPS`].
fn publish(
    client: &ShareClient<HostApi>,
    name: &str,
    manifest: &[u8],
    fills: &[u8],
    mut at: impl FnMut(&str),
) -> Result<SetInfo, ShareError> {
    let (_, stream) = client.stream(0)?;
    let mut made = Vec::new();
    for len in core::iter::once(manifest.len()).chain(fills.iter().map(|_| 4096)) {
        made.push(client.create_buffer(0, len)?);
    }
    at(STEPS[0]);
    for (id, _) in &made {
        client.stage(*id, name)?;
    }
    at(STEPS[1]);
    let mut sealed = Vec::new();
    let mut made = made.into_iter();
    let (manifest_id, mut manifest_buffer) = made.next().expect("a manifest");
    for ((id, mut buffer), &fill) in made.zip(fills) {
        HostMirror::new(&mut buffer, false)?.fill(fill);
        sealed.push((id, client.seal(buffer, &stream)?));
    }
    at(STEPS[2]);
    HostMirror::new(&mut manifest_buffer, false)?.copy_from_slice(manifest);
    let _manifest = client.seal(manifest_buffer, &stream)?;
    at(STEPS[3]);
    let ids: Vec<ObjectId> = sealed.iter().map(|(id, _)| *id).collect();
    let bound = client.bind_set(name, manifest_id, &ids, fills.len() as u32)?;
    at(STEPS[4]);
    Ok(bound)
}

/// The bytes of buffer `id`, opened by `client`.
fn read(client: &ShareClient<HostApi>, id: ObjectId) -> Vec<u8> {
    let (_, stream) = client.stream(0).expect("a stream");
    let buffer = client.get_buffer(id, &stream).expect("opening");
    let bytes = HostMirror::new(&buffer, true).expect("mirror").to_vec();
    bytes
}

fn code(e: ShareError) -> ErrorCode {
    match e {
        ShareError::Daemon { code, .. } => code,
        ShareError::UnknownSet(_) => ErrorCode::UnknownSet,
        ShareError::SetPublishing(_) => ErrorCode::SetPublishing,
        ShareError::BadSetName(_) => ErrorCode::BadSetName,
        ShareError::Deleted(_) => ErrorCode::Deleted,
        ShareError::UnknownId(_) => ErrorCode::UnknownId,
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn a_set_is_bound_whole_looked_up_by_name_and_versioned() {
    let client = daemon();
    let v1 = publish(&client, "model", b"manifest one", &[1, 2], |_| {}).expect("publish");
    assert_eq!((v1.name.as_str(), v1.version, v1.tensors), ("model", 1, 2));
    assert_eq!(v1.bytes, 2 * 4096 + b"manifest one".len() as u64);
    assert_eq!(client.lookup_set("model", None).expect("lookup"), v1);
    assert_eq!(read(&client, v1.manifest), b"manifest one");
    assert!(read(&client, v1.buffers[1]).iter().all(|&b| b == 2));

    // Another client, as a process started later would be, finds it by name.
    let other = ShareClient::connect(HostApi::load().unwrap(), client.socket_path()).unwrap();
    let found = other.lookup_set("model", None).expect("lookup");
    assert!(read(&other, found.buffers[0]).iter().all(|&b| b == 1));
    let (_, stream) = other.stream(0).unwrap();
    let held_v1 = other.get_buffer(v1.buffers[0], &stream).expect("open v1");

    let v2 = publish(&client, "model", b"two", &[3], |_| {}).expect("v2");
    assert_eq!(v2.version, 2);
    assert_eq!(client.lookup_set("model", None).unwrap(), v2);
    assert_eq!(client.lookup_set("model", Some(1)).unwrap(), v1);
    assert_eq!(
        code(client.lookup_set("model", Some(0)).unwrap_err()),
        ErrorCode::UnknownSet
    );
    // A third version retires the first: deleted, alive for its holder.
    let v3 = publish(&client, "model", b"three", &[4], |_| {}).expect("v3");
    assert_eq!(v3.version, 3);
    assert_eq!(
        code(client.lookup_set("model", Some(1)).unwrap_err()),
        ErrorCode::UnknownSet
    );
    assert!(client.stat(v1.buffers[0]).expect("held").deleted);
    assert!(matches!(
        client.stat(v1.buffers[1]),
        Err(ShareError::UnknownId(_))
    ));
    assert!(HostMirror::new(&held_v1, true)
        .unwrap()
        .iter()
        .all(|&b| b == 1));
    drop(held_v1);
    assert!(matches!(
        client.stat(v1.buffers[0]),
        Err(ShareError::UnknownId(_))
    ));

    let listed = Inspector::connect(client.socket_path())
        .unwrap()
        .list_sets()
        .unwrap();
    assert_eq!(listed, vec![v2.clone(), v3.clone()]);
    // A set's buffer is deleted with its set, not alone.
    assert_eq!(
        code(client.delete(v3.buffers[0]).unwrap_err()),
        ErrorCode::NotPermitted
    );
    client.delete_set("model").expect("delete");
    assert_eq!(
        code(client.lookup_set("model", None).unwrap_err()),
        ErrorCode::UnknownSet
    );
    assert_eq!(
        code(client.delete_set("model").unwrap_err()),
        ErrorCode::UnknownSet
    );
    assert!(client.list_sets().unwrap().is_empty());
    assert!(client.list().unwrap().is_empty(), "every buffer is freed");
}

#[test]
fn bad_names_and_half_publishes_are_refused() {
    let client = daemon();
    for name in ["", "a\nb", &"x".repeat(MAX_SET_NAME + 1)] {
        assert_eq!(
            code(client.lookup_set(name, None).unwrap_err()),
            ErrorCode::BadSetName
        );
    }
    assert_eq!(
        code(client.lookup_set("none", None).unwrap_err()),
        ErrorCode::UnknownSet
    );
    let (_, stream) = client.stream(0).unwrap();
    let (manifest, manifest_buffer) = client.create_buffer(0, 16).unwrap();
    let (data, data_buffer) = client.create_buffer(0, 16).unwrap();
    let (loose, loose_buffer) = client.create_buffer(0, 16).unwrap();
    client.stage(manifest, "half").unwrap();
    client.stage(data, "half").unwrap();
    // Staged twice, or for another set.
    assert_eq!(
        code(client.stage(data, "other").unwrap_err()),
        ErrorCode::NotPermitted
    );
    // Being published: no version to look up yet.
    assert_eq!(
        code(client.lookup_set("half", None).unwrap_err()),
        ErrorCode::SetPublishing
    );
    // Another client cannot open a staged buffer until the bind.
    let other = ShareClient::connect(HostApi::load().unwrap(), client.socket_path()).unwrap();
    let (_, other_stream) = other.stream(0).unwrap();
    assert!(matches!(
        other.get_buffer_within(data, &other_stream, Duration::from_millis(50)),
        Err(ShareError::NotSealed { .. })
    ));
    // Not sealed yet.
    assert_eq!(
        code(client.bind_set("half", manifest, &[data], 1).unwrap_err()),
        ErrorCode::NotSealed
    );
    let _manifest = client.seal(manifest_buffer, &stream).unwrap();
    let _data = client.seal(data_buffer, &stream).unwrap();
    let _loose = client.seal(loose_buffer, &stream).unwrap();
    // A sealed buffer cannot be staged; one not staged cannot be bound.
    assert_eq!(
        code(client.stage(loose, "half").unwrap_err()),
        ErrorCode::AlreadySealed
    );
    assert_eq!(
        code(
            client
                .bind_set("half", manifest, &[data, loose], 2)
                .unwrap_err()
        ),
        ErrorCode::NotWriter
    );
    assert_eq!(
        code(
            client
                .bind_set("half", manifest, &[data, data], 2)
                .unwrap_err()
        ),
        ErrorCode::NotPermitted
    );
    // Staged by another client: not its to bind.
    assert_eq!(
        code(other.bind_set("half", manifest, &[data], 1).unwrap_err()),
        ErrorCode::NotWriter
    );
    let bound = client.bind_set("half", manifest, &[data], 1).expect("bind");
    assert_eq!(bound.version, 1);
    assert!(other
        .get_buffer_within(data, &other_stream, Duration::from_secs(5))
        .is_ok());
}

/// A publisher killed after each step of a publish leaves the set whole
/// (killed after the bind) or absent, and none of its buffers but the set's.
#[test]
fn a_publisher_killed_at_any_step_leaves_the_set_whole_or_absent() {
    let client = daemon();
    let socket = client.socket_path().to_str().expect("utf-8").to_owned();
    for step in STEPS {
        let name = format!("killed-after-{step}");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sets_child_role",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_ENV, format!("{socket} {name} {step}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .expect("re-running the test binary");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // The test harness may have started the line with the test's name.
        let said = lines.find_map(|l| {
            let line = l.ok()?;
            line.split_once("stopped at ").map(|(_, at)| at.to_owned())
        });
        assert_eq!(said.as_deref(), Some(step));
        child.kill().unwrap();
        child.wait().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let buffers = client.list().unwrap();
            let sets = client.list_sets().unwrap();
            let whole = match step {
                "bound" => {
                    let set = client.lookup_set(&name, None).expect("bound set survives");
                    assert!(read(&client, set.buffers[0]).iter().all(|&b| b == 9));
                    client.delete_set(&name).unwrap();
                    true
                }
                _ => {
                    assert!(sets.is_empty(), "{step}: {sets:?}");
                    buffers.is_empty()
                }
            };
            if whole {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{step}: left {buffers:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A child's role, when [`ROLE_ENV`] is set (`SOCKET NAME STEP`): publishes
/// set NAME, says `stopped at STEP` once there, and waits to be killed. Without
/// it (a normal test run), nothing.
#[test]
fn sets_child_role() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let args: Vec<&str> = role.split(' ').collect();
    let client = ShareClient::connect(HostApi::load().unwrap(), Path::new(args[0])).unwrap();
    let _ = publish(&client, args[1], b"manifest", &[9], |at| {
        if at == args[2] {
            println!("stopped at {at}");
            std::thread::sleep(Duration::from_secs(60));
        }
    });
}

/// `tandem share ls` shows the sets after the buffers; `ls --sets` only
/// them, `--json` as objects with the text's fields; `rm --set` deletes one.
#[test]
fn ls_shows_the_sets() {
    let client = daemon();
    let bound = publish(&client, "ls-model", b"m", &[5, 6, 7], |_| {}).expect("publish");
    let socket = client.socket_path().to_str().expect("utf-8");
    let ls = |extra: &[&str]| {
        let out = common::tandem()
            .args(["share", "ls", "--socket", socket])
            .args(extra)
            .output()
            .expect("tandem share ls");
        assert!(out.status.success(), "{}", common::text(&out.stderr));
        common::text(&out.stdout)
    };
    let text = ls(&[]);
    let row = text
        .lines()
        .find(|l| l.starts_with("ls-model"))
        .unwrap_or_else(|| panic!("no set row in {text}"));
    let fields: Vec<&str> = row.split_whitespace().collect();
    let bytes = bound.bytes.to_string();
    assert_eq!(fields[..4], ["ls-model", "1", "3", bytes.as_str()], "{row}");
    let json: serde_json::Value = serde_json::from_str(&ls(&["--sets", "--json"])).unwrap();
    assert_eq!(json[0]["name"], "ls-model");
    assert_eq!(json[0]["version"], 1);
    assert_eq!(json[0]["tensors"], 3);
    assert_eq!(json[0]["bytes"], bound.bytes);
    assert_eq!(json[0]["manifest"], bound.manifest.0);
    assert_eq!(json[0]["buffers"].as_array().map(Vec::len), Some(3));
    // The buffers' listing keeps its shape: one array of buffers.
    let buffers: serde_json::Value = serde_json::from_str(&ls(&["--json"])).unwrap();
    assert_eq!(buffers.as_array().map(Vec::len), Some(4));
    // `status` counts the sets, their versions and their bytes.
    publish(&client, "ls-model", b"m2", &[8], |_| {}).expect("a second version");
    let status = common::tandem()
        .args(["share", "status", "--json", "--socket", socket])
        .output()
        .expect("tandem share status");
    let totals: serde_json::Value = serde_json::from_str(&common::text(&status.stdout)).unwrap();
    let second = client
        .lookup_set("ls-model", None)
        .expect("the latest")
        .bytes;
    assert_eq!(totals["sets"], 1, "{totals}");
    assert_eq!(totals["set_versions"], 2, "{totals}");
    assert_eq!(totals["set_bytes"], bound.bytes + second, "{totals}");
    let rm = |args: &[&str]| {
        common::tandem()
            .args(["share", "rm", "--socket", socket])
            .args(args)
            .output()
            .expect("tandem share rm")
    };
    // A set's buffer goes with its set, not alone.
    let refused = rm(&[&bound.buffers[0].0.to_string()]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(common::text(&refused.stderr).contains("delete the set"));
    assert!(rm(&["--set", "ls-model"]).status.success());
    assert!(client.list_sets().unwrap().is_empty());
    let gone = rm(&["--set", "ls-model"]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(common::text(&gone.stderr).contains("no set \"ls-model\""));
    // A buffer's id or a set, not both, not neither.
    assert_eq!(rm(&["1", "--set", "x"]).status.code(), Some(2));
    assert_eq!(rm(&[]).status.code(), Some(2));
}

/// A daemon serving with `--max-sets 1` refuses a bind of a second name as
/// busy, and binds it once the first is deleted; versions of a held name
/// are no new set.
#[test]
fn binds_of_new_names_beyond_max_sets_are_busy() {
    let socket =
        tandem_share::runtime_dir().join(format!("share-sets-test-{}.sock", std::process::id()));
    let mut child = common::tandem()
        .args(["share", "serve", "--backend", "host", "--max-sets", "1"])
        .arg("--socket")
        .arg(&socket)
        .args(["--announce", "--exit-on-stdin-eof"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the share daemon");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().and_then(Result::ok).unwrap_or_default();
    let _cleanup = common::Cleanup {
        children: vec![child],
        files: vec![socket.clone()],
    };
    assert!(ready.starts_with("ready "), "{ready}");
    let client = ShareClient::connect(HostApi::load().unwrap(), &socket).unwrap();
    publish(&client, "first", b"m", &[1], |_| {}).expect("a first set");
    publish(&client, "first", b"m", &[2], |_| {}).expect("its second version");
    let refused = publish(&client, "second", b"m", &[3], |_| {}).unwrap_err();
    assert!(matches!(refused, ShareError::Busy(_)), "{refused}");
    client.delete_set("first").unwrap();
    publish(&client, "second", b"m", &[3], |_| {}).expect("room again");
    client.delete_set("second").unwrap();
    assert!(
        client.list().unwrap().is_empty(),
        "the refused publish left nothing"
    );
}
