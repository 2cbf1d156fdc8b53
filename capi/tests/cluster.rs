//! The C ABI's fetch from another node: an etcd and two share daemons as two nodes
//! (`tandem share serve --config`, UCX on TCP), a buffer exported on one fetched through the
//! other's `tandem_share_fetch`, byte for byte, and each refusal its status code. Skipped,
//! saying why, without etcd and NIXL (`TANDEM_ETCD`, `TANDEM_NIXL_LIBRARY`);
//! `TANDEM_REQUIRE_CLUSTER=1` makes their absence a failure.

use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::process::Child;
use std::ptr::null_mut;

use tandem::layout::Status;
use tandem::*;
use tandem_tests::cluster::{
    check_pattern, fill_pattern, needs_or_skip, node_files, serve_command, Etcd, NodeFiles, TOKEN,
};

mod common;
use common::{expect, message};

/// A daemon this test started: stopped (stdin closed) when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

fn start(tandem: &std::path::Path, files: &NodeFiles) -> Daemon {
    let mut command = serve_command(tandem, files, "host");
    command.env("RUST_LOG", "warn");
    let mut child = command.spawn().expect("tandem share serve");
    let out = child.stdout.take().expect("stdout");
    let daemon = Daemon(child);
    let ready = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.starts_with("ready"));
    assert!(ready, "no ready line");
    daemon
}

fn c(text: &str) -> CString {
    CString::new(text).unwrap()
}

#[test]
fn a_buffer_of_another_node_is_fetched_byte_for_byte_and_refusals_have_codes() {
    let Some(needs) = needs_or_skip() else { return };
    let Ok(bin) = tandem_process::find_tandem_binary() else {
        panic!("no tandem binary (cargo build -p tandem-cli --bin tandem)");
    };
    let etcd = Etcd::start(&needs.etcd).unwrap();
    let a_files = node_files(
        "node-a",
        Ipv4Addr::LOCALHOST,
        &etcd.endpoint(),
        TOKEN,
        &needs.nixl,
        10,
    );
    let b_files = node_files(
        "node-b",
        Ipv4Addr::new(127, 0, 0, 2),
        &etcd.endpoint(),
        TOKEN,
        &needs.nixl,
        10,
    );
    let _a = start(&bin, &a_files);
    let _b = start(&bin, &b_files);
    let socket = |files: &NodeFiles| c(files.socket.to_str().unwrap());
    const BYTES: usize = 4 << 20;
    let mut data = vec![0u8; BYTES];
    fill_pattern(&mut data);
    let (mut a, mut b, mut writer, mut copy) = (null_mut(), null_mut(), null_mut(), null_mut());
    let (mut exported, mut private) = (0u64, 0u64);
    // SAFETY: every call passes valid pointers of the lengths given.
    unsafe {
        expect(
            tandem_share_connect(socket(&a_files).as_ptr(), &mut a),
            Status::Ok,
        );
        expect(
            tandem_share_connect(socket(&b_files).as_ptr(), &mut b),
            Status::Ok,
        );
        for id in [&mut exported, &mut private] {
            expect(
                tandem_share_create(a, 0, BYTES, id, &mut writer),
                Status::Ok,
            );
            expect(
                tandem_share_buffer_write(writer, 0, data.as_ptr(), BYTES),
                Status::Ok,
            );
            expect(tandem_share_buffer_seal(writer), Status::Ok);
            expect(tandem_share_buffer_close(writer), Status::Ok);
        }
        expect(tandem_share_export(a, exported), Status::Ok);
        let remote = c(&format!("node-a/{exported}"));
        expect(
            tandem_share_fetch(b, remote.as_ptr(), 0, &mut copy),
            Status::Ok,
        );
        let mut back = vec![0u8; BYTES];
        expect(
            tandem_share_buffer_read(copy, 0, back.as_mut_ptr(), BYTES),
            Status::Ok,
        );
        assert_eq!(check_pattern(&back), Ok(()), "the copy's bytes");
        expect(tandem_share_buffer_close(copy), Status::Ok);
        let refusals = [
            (format!("node-a/{private}"), Status::Refused, "not exported"),
            ("node-z/1".to_owned(), Status::NotFound, "node"),
            ("node-a/1".to_owned(), Status::NotFound, "no buffer"),
            ("node-a".to_owned(), Status::InvalidArgument, "NODE/ID"),
        ];
        for (remote, status, says) in refusals {
            expect(
                tandem_share_fetch(b, c(&remote).as_ptr(), 0, &mut copy),
                status,
            );
            assert!(message().contains(says), "{remote}: {}", message());
        }
        expect(
            tandem_share_fetch(b, null_mut(), 0, &mut copy),
            Status::NullPointer,
        );
        expect(tandem_share_close(a), Status::Ok);
        expect(tandem_share_close(b), Status::Ok);
    }
}
