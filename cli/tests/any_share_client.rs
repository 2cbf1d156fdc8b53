//! `AnyShareClient`, the share client the C and Python fronts hold whatever
//! the backend: started on the backend `auto` picks, another process's
//! connect finds the daemon's backend by itself, a buffer goes from writer
//! to reader through `AnyHeldBuffer`, and a daemon of a backend this build
//! lacks (one spoken by hand here) is refused by name before any mapping.

mod common;

use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::thread;
use std::time::Duration;

use tandem_backends::{AnyApi, Backend, BackendChoice};
use tandem_share::testing::{recv_frame, Reply, Request};
use tandem_share::{AnyShareClient, DaemonStatus, ObjectId, ShareError, WireBackend};

#[test]
fn auto_spawns_on_the_backend_auto_loads_and_connect_finds_it() {
    let exe = common::tandem_exe();
    let writer = AnyShareClient::spawn(BackendChoice::Auto, Some(&exe)).expect("spawning");
    let expected = AnyApi::load(BackendChoice::Auto).unwrap().backend();
    assert_eq!(writer.backend(), expected);
    assert_eq!(writer.status().unwrap().backend, WireBackend::of(expected));

    let reader = AnyShareClient::connect(writer.socket_path()).expect("connecting");
    assert_eq!(reader.backend(), expected);
    assert_eq!(reader.daemon_pid(), writer.daemon_pid());

    let buffer = writer.create(0, 4096).unwrap();
    assert_eq!((buffer.len(), buffer.device()), (4096, 0));
    assert_eq!(buffer.backend(), expected);
    assert!(!buffer.is_sealed());
    buffer.write(0, &[3; 4096]).unwrap();
    buffer.write(100, b"tandem").unwrap();
    buffer.seal().unwrap();
    assert!(buffer.is_sealed());
    assert!(matches!(
        buffer.write(0, b"x"),
        Err(ShareError::NotWriter(_))
    ));

    let id = buffer.id();
    let opened = reader.get(id, None, Duration::from_secs(5)).unwrap();
    opened.wait_for_seal().unwrap();
    assert!(opened.is_sealed());
    let mut word = [0u8; 6];
    opened.read(100, &mut word).unwrap();
    assert_eq!(&word, b"tandem");
    assert_eq!(
        opened.to_vec().unwrap().iter().filter(|&&b| b == 3).count(),
        4090
    );

    assert!(reader.list().unwrap().iter().any(|info| info.id == id));
    reader.delete(id).unwrap();
    assert!(reader.stat(id).unwrap().deleted);
    assert!(matches!(
        reader.get(id, None, Duration::from_millis(10)),
        Err(ShareError::Deleted(_))
    ));
    assert!(matches!(
        writer.get(ObjectId(u64::MAX), Some(0), Duration::from_millis(10)),
        Err(ShareError::UnknownId(_))
    ));
}

#[test]
fn the_host_backend_is_had_by_name() {
    let exe = common::tandem_exe();
    let client = AnyShareClient::spawn(BackendChoice::Only(Backend::Host), Some(&exe)).unwrap();
    assert_eq!(client.backend(), Backend::Host);
    assert!(matches!(
        client.create(0, 0),
        Err(ShareError::InvalidSize { bytes: 0 })
    ));
    assert!(matches!(client.create(7, 64), Err(ShareError::NoDevice(_))));
}

#[test]
fn no_daemon_is_no_daemon() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        AnyShareClient::connect(&dir.path().join("none.sock")),
        Err(ShareError::NoDaemon { .. })
    ));
}

#[test]
fn a_daemon_of_a_backend_this_build_lacks_is_refused_by_name() {
    let Some(lacking) = [Backend::Hip, Backend::Cuda]
        .into_iter()
        .find(|b| !BackendChoice::is_built(*b))
    else {
        println!("skipped: this build has every backend");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fake.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            thread::spawn(move || answer_as(stream, WireBackend::of(lacking)));
        }
    });
    match AnyShareClient::connect(&socket) {
        Err(ShareError::Refused(why)) => {
            assert!(why.contains(&lacking.to_string()), "{why}");
            assert!(why.contains("feature"), "{why}");
        }
        Err(other) => panic!("expected Refused, got {other}"),
        Ok(_) => panic!("expected Refused, got a client"),
    }
}

/// A daemon of `backend` as far as an inspector sees: Hello and Status.
fn answer_as(mut stream: UnixStream, backend: WireBackend) {
    while let Ok(received) = recv_frame(&stream, Some(Duration::from_secs(5))) {
        let reply = match Request::decode(&received.frame) {
            Ok(Request::Hello { .. }) => Reply::Hello {
                pid: std::process::id(),
                backend,
                devices: 1,
            },
            Ok(Request::Status) => Reply::Status(DaemonStatus {
                pid: std::process::id(),
                backend,
                devices: 1,
                objects: 0,
                bytes: 0,
                leases: 0,
                clients: 1,
                kept: 0,
                kept_bytes: 0,
                sets: 0,
                set_versions: 0,
                set_bytes: 0,
            }),
            _ => return,
        };
        if stream.write_all(&reply.encode()).is_err() {
            return;
        }
    }
}
