//! Bad input at the C boundary returns a code and a message naming the
//! argument, never a crash: null pointers (null handles included), zero and
//! oversized sizes, closed, foreign and made-up handles, unknown ids and
//! device ordinals, segment names that do not exist or cannot, strings that
//! are not UTF-8, and calls that fail on a runtime that does not serve what
//! they ask.

use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};

use tandem::layout::{Dim3, HostKernel, QueueSegmentInfo, SetVersion, Status};
use tandem::*;

mod common;
use common::{expect, message};

/// [`expect`], and the message names `argument`.
fn expect_naming(status: Status, want: Status, argument: &str) {
    expect(status, want);
    assert!(
        message().starts_with(argument),
        "the message names `{argument}`: {}",
        message()
    );
}

const SEGMENT: &CStr = c"tandem-capi-no-such-segment";

#[test]
fn null_pointers_null_handles_included_are_null_pointer_naming_the_argument() {
    // SAFETY: every call below passes null or valid pointers, as the C contract allows.
    unsafe {
        expect_naming(
            tandem_client_attach(null(), &mut null_mut()),
            Status::NullPointer,
            "segment",
        );
        expect_naming(
            tandem_client_attach(SEGMENT.as_ptr(), null_mut()),
            Status::NullPointer,
            "out",
        );
        expect_naming(
            tandem_client_runtime_pid(null(), &mut 0),
            Status::NullPointer,
            "client",
        );
        expect_naming(
            tandem_client_add(null(), 0, 1, 2, 0, &mut 0),
            Status::NullPointer,
            "client",
        );
        expect_naming(
            tandem_client_check_runtime(null()),
            Status::NullPointer,
            "client",
        );
        expect_naming(
            tandem_blob_tag(null(), c"t".as_ptr(), 0, &mut 0),
            Status::NullPointer,
            "client",
        );
        expect_naming(
            tandem_blob_put(null(), 1, c"b".as_ptr(), 0, null(), 0, 0, null_mut()),
            Status::NullPointer,
            "client",
        );
        expect_naming(
            tandem_device_queues_open(null(), 0, &mut null_mut()),
            Status::NullPointer,
            "client",
        );
        expect_naming(
            tandem_device_queues_segment(null(), null_mut()),
            Status::NullPointer,
            "queues",
        );
        expect_naming(
            tandem_device_queues_stop(null()),
            Status::NullPointer,
            "queues",
        );
        expect_naming(
            tandem_share_connect(null(), &mut null_mut()),
            Status::NullPointer,
            "socket",
        );
        expect_naming(
            tandem_share_create(null(), 0, 16, &mut 0, &mut null_mut()),
            Status::NullPointer,
            "share",
        );
        expect_naming(tandem_share_delete(null(), 1), Status::NullPointer, "share");
        expect_naming(
            tandem_share_buffer_read(null(), 0, null_mut(), 4),
            Status::NullPointer,
            "out",
        );
        let mut byte = 0u8;
        expect_naming(
            tandem_share_buffer_read(null(), 0, &mut byte, 1),
            Status::NullPointer,
            "buffer",
        );
        expect_naming(
            tandem_share_buffer_seal(null()),
            Status::NullPointer,
            "buffer",
        );
        expect_naming(
            tandem_status_json(null(), null_mut(), 0, null_mut()),
            Status::NullPointer,
            "len",
        );
        // Named sets: the handle, the name, the outputs.
        expect_naming(
            tandem_share_stage(null(), 1, c"model".as_ptr()),
            Status::NullPointer,
            "share",
        );
        expect_naming(
            tandem_share_bind_set(null(), null(), 1, null(), 0, 0, null_mut()),
            Status::NullPointer,
            "name",
        );
        let mut version = SetVersion::default();
        expect_naming(
            tandem_share_lookup_set(null(), c"model".as_ptr(), 0, null_mut(), null_mut(), 0),
            Status::NullPointer,
            "out",
        );
        expect_naming(
            tandem_share_lookup_set(null(), c"model".as_ptr(), 0, &mut version, null_mut(), 0),
            Status::NullPointer,
            "share",
        );
        expect_naming(
            tandem_share_list_sets_json(null(), null_mut(), 0, null_mut()),
            Status::NullPointer,
            "len",
        );
        expect_naming(
            tandem_share_delete_set(null(), null()),
            Status::NullPointer,
            "name",
        );
    }
    // Closing null is a no-op, as free(NULL).
    expect(tandem_client_close(null_mut()), Status::Ok);
    expect(tandem_device_queues_close(null_mut()), Status::Ok);
    expect(tandem_share_close(null_mut()), Status::Ok);
    expect(tandem_share_buffer_close(null_mut()), Status::Ok);
    assert!(
        message().is_empty(),
        "a call that succeeded clears the message"
    );
}

#[test]
fn made_up_and_foreign_handles_are_closed_handles() {
    let made_up = 0xdead_beef_usize as *mut ClientHandle;
    // SAFETY: handles are keys, never dereferenced: any value is allowed.
    unsafe {
        expect(
            tandem_client_runtime_pid(made_up, &mut 0),
            Status::ClosedHandle,
        );
        expect(
            tandem_client_add(made_up, 0, 1, 2, 0, &mut 0),
            Status::ClosedHandle,
        );
        let foreign = made_up.cast::<ShareHandle>();
        expect_naming(
            tandem_share_daemon_pid(foreign, &mut 0),
            Status::ClosedHandle,
            "share: not a live tandem_share",
        );
    }
    expect_naming(
        tandem_client_close(made_up),
        Status::ClosedHandle,
        "client: not a live tandem_client",
    );
}

#[test]
fn attaching_to_no_runtime_is_not_found_and_to_a_malformed_name_invalid() {
    let mut client = null_mut();
    // SAFETY: valid strings and outputs.
    unsafe {
        expect_naming(
            tandem_client_attach(SEGMENT.as_ptr(), &mut client),
            Status::NotFound,
            "segment \"tandem-capi-no-such-segment\"",
        );
        assert!(client.is_null(), "no handle on failure");
        for malformed in [c"", c"a/b", c".."] {
            expect_naming(
                tandem_client_attach(malformed.as_ptr(), &mut client),
                Status::InvalidArgument,
                "segment",
            );
            assert!(client.is_null(), "no handle on failure");
        }
    }
}

#[test]
fn strings_that_are_not_utf8_are_invalid() {
    let bad = [0xffu8, 0xfe, 0];
    // SAFETY: NUL-terminated bytes.
    let status = unsafe { tandem_client_attach(bad.as_ptr().cast::<c_char>(), &mut null_mut()) };
    expect_naming(status, Status::InvalidArgument, "segment");
}

#[test]
fn status_of_no_runtime_is_not_found() {
    let mut buf = [0 as c_char; 64];
    let mut len = 0;
    // SAFETY: a valid string, a buffer of its length, an output.
    let status =
        unsafe { tandem_status_json(SEGMENT.as_ptr(), buf.as_mut_ptr(), buf.len(), &mut len) };
    expect(status, Status::NotFound);
}

#[test]
fn the_version_is_cargos_and_the_headers() {
    // SAFETY: static and NUL-terminated.
    let version = unsafe { CStr::from_ptr(tandem_version()) };
    assert_eq!(version.to_str(), Ok(env!("CARGO_PKG_VERSION")));
    let (mut major, mut minor, mut patch) = (u32::MAX, u32::MAX, u32::MAX);
    // SAFETY: three writable outputs.
    let status = unsafe { tandem_version_numbers(&mut major, &mut minor, &mut patch) };
    expect(status, Status::Ok);
    assert_eq!(
        format!("{major}.{minor}.{patch}"),
        env!("CARGO_PKG_VERSION")
    );
    // SAFETY: null outputs are skipped.
    let status = unsafe { tandem_version_numbers(null_mut(), &mut minor, null_mut()) };
    expect(status, Status::Ok);
    let header = include_str!("../include/tandem.h");
    for line in [
        format!("#define TANDEM_VERSION_MAJOR {major}"),
        format!("#define TANDEM_VERSION_MINOR {minor}"),
        format!("#define TANDEM_VERSION_PATCH {patch}"),
        format!(
            "#define TANDEM_VERSION_STRING \"{}\"",
            env!("CARGO_PKG_VERSION")
        ),
    ] {
        assert!(header.contains(&line), "tandem.h lacks `{line}`");
    }
}

#[test]
fn a_launch_with_bad_descriptors_is_refused_before_it_runs() {
    let kernel = HostKernel {
        name: null(),
        entry: None,
        param_kinds: null(),
        param_count: 0,
    };
    let dim = Dim3 { x: 1, y: 1, z: 1 };
    // SAFETY: descriptors and handles the contract allows (nulls, made-up keys).
    unsafe {
        expect_naming(
            tandem_device_queues_launch_cpu(null(), &kernel, dim, dim, 0, null()),
            Status::NullPointer,
            "queues",
        );
        let made_up = 7usize as *const DeviceQueuesHandle;
        expect(
            tandem_device_queues_launch_cpu(made_up, &kernel, dim, dim, 0, null()),
            Status::ClosedHandle,
        );
        let mut segment = QueueSegmentInfo {
            base: 0,
            len: 0,
            stop: 0,
        };
        expect(
            tandem_device_queues_segment(made_up, &mut segment),
            Status::ClosedHandle,
        );
    }
}

mod with_a_runtime {
    //! Calls on live handles: a runtime forked for the test, and a share
    //! daemon spawned for it.

    use super::*;
    use std::ffi::CString;

    /// The `tandem` binary (`find_tandem_binary`: `$TANDEM_BIN`, else next
    /// to this test's folder).
    fn tandem_bin() -> Option<CString> {
        let path = tandem_process::find_tandem_binary().ok()?;
        Some(CString::new(path.into_os_string().into_encoded_bytes()).expect("a path"))
    }

    #[test]
    fn closed_handles_sizes_and_unknown_ids_are_codes() {
        let Some(bin) = tandem_bin() else {
            println!("skipped: no tandem binary (cargo build -p tandem-cli --bin tandem)");
            return;
        };
        let mut client = null_mut();
        // SAFETY: every call below passes valid or deliberately bad arguments
        // the C contract allows.
        unsafe {
            expect(
                tandem_client_fork(bin.as_ptr(), null(), &mut client),
                Status::Ok,
            );
            let mut sum = 0;
            expect(
                tandem_client_add(client, 0, 2, 3, 10_000, &mut sum),
                Status::Ok,
            );
            assert_eq!(sum, 5);
            // `tandem run` serves no blob store: the pool is unknown.
            let mut tag = 0;
            expect(
                tandem_blob_tag(client, c"t".as_ptr(), 10_000, &mut tag),
                Status::TaskFailed,
            );
            // Sizes: an empty put and get are refused before any task.
            let byte = 0u8;
            expect(
                tandem_blob_put(client, 1, c"b".as_ptr(), 0, &byte, 0, 0, null_mut()),
                Status::InvalidArgument,
            );
            expect(
                tandem_blob_get(client, 1, c"b".as_ptr(), 0, null_mut(), 0, 0),
                Status::InvalidArgument,
            );
            expect_naming(
                tandem_blob_put(
                    client,
                    1,
                    c"b".as_ptr(),
                    0,
                    &byte,
                    usize::MAX,
                    0,
                    null_mut(),
                ),
                Status::InvalidArgument,
                "data",
            );
            // A device that does not exist: NOT_FOUND, as for a share below.
            let mut none = null_mut();
            expect(
                tandem_device_queues_open(client, 99, &mut none),
                Status::NotFound,
            );
            assert!(message().contains("99"), "{}", message());
            assert!(none.is_null(), "no handle on failure");
            // Device queues, and a launch of a kernel that has no entry.
            let mut queues = null_mut();
            expect(
                tandem_device_queues_open(client, 0, &mut queues),
                Status::Ok,
            );
            let mut segment = QueueSegmentInfo {
                base: 0,
                len: 0,
                stop: 0,
            };
            expect(
                tandem_device_queues_segment(queues, &mut segment),
                Status::Ok,
            );
            assert!(segment.base != 0 && segment.len != 0 && segment.stop > segment.base);
            let kernel = HostKernel {
                name: c"k".as_ptr(),
                entry: None,
                param_kinds: null(),
                param_count: 0,
            };
            let dim = Dim3 { x: 1, y: 1, z: 1 };
            expect(
                tandem_device_queues_launch_cpu(queues, &kernel, dim, dim, 0, null()),
                Status::NullPointer,
            );
            let kinds = [99u32];
            let kernel = HostKernel {
                entry: Some(never_called),
                param_kinds: kinds.as_ptr(),
                param_count: 1,
                ..kernel
            };
            let arg = 0u32;
            let args = [(&arg as *const u32).cast::<std::ffi::c_void>()];
            expect_naming(
                tandem_device_queues_launch_cpu(queues, &kernel, dim, dim, 0, args.as_ptr()),
                Status::InvalidArgument,
                "kernel->param_kinds[0]",
            );
            // The client stays attached while its queues are open; both
            // close once, and twice is a code.
            expect(tandem_client_close(client), Status::Ok);
            expect(
                tandem_device_queues_segment(queues, &mut segment),
                Status::Ok,
            );
            expect(tandem_device_queues_close(queues), Status::Ok);
            expect(tandem_device_queues_close(queues), Status::ClosedHandle);
            expect(tandem_client_close(client), Status::ClosedHandle);
            expect(
                tandem_client_add(client, 0, 2, 3, 0, &mut sum),
                Status::ClosedHandle,
            );

            // The share daemon: zero and oversized sizes, unknown ids, a
            // second seal, a write past the end.
            let mut share = null_mut();
            expect(tandem_share_spawn(bin.as_ptr(), &mut share), Status::Ok);
            let (mut id, mut buffer) = (0, null_mut());
            expect_naming(
                tandem_share_create(share, 0, 0, &mut id, &mut buffer),
                Status::InvalidArgument,
                "bytes",
            );
            expect(
                tandem_share_create(share, 99, 64, &mut id, &mut buffer),
                Status::NotFound,
            );
            assert!(message().contains("99"), "{}", message());
            expect(
                tandem_share_create(share, 0, usize::MAX, &mut id, &mut buffer),
                Status::InvalidArgument,
            );
            expect(
                tandem_share_create(share, 0, 64, &mut id, &mut buffer),
                Status::Ok,
            );
            let data = [7u8; 65];
            expect_naming(
                tandem_share_buffer_write(buffer, 0, data.as_ptr(), 65),
                Status::InvalidArgument,
                "offset 0 + len 65",
            );
            expect(
                tandem_share_buffer_write(buffer, usize::MAX, data.as_ptr(), 2),
                Status::InvalidArgument,
            );
            expect(
                tandem_share_buffer_write(buffer, 0, data.as_ptr(), 64),
                Status::Ok,
            );
            expect(tandem_share_buffer_seal(buffer), Status::Ok);
            expect(tandem_share_buffer_seal(buffer), Status::Refused);
            expect(
                tandem_share_buffer_write(buffer, 0, data.as_ptr(), 1),
                Status::Refused,
            );
            let mut reader = null_mut();
            expect(
                tandem_share_get(share, id + 1000, 100, &mut reader),
                Status::NotFound,
            );
            expect(tandem_share_get(share, id, 0, &mut reader), Status::Ok);
            let mut back = [0u8; 64];
            expect(
                tandem_share_buffer_read(reader, 0, back.as_mut_ptr(), 64),
                Status::Ok,
            );
            assert_eq!(back, [7u8; 64]);
            expect(tandem_share_delete(share, id), Status::Ok);
            expect(tandem_share_delete(share, id + 1000), Status::NotFound);
            expect(tandem_share_buffer_close(reader), Status::Ok);
            expect(tandem_share_buffer_close(buffer), Status::Ok);
            expect(tandem_share_buffer_close(buffer), Status::ClosedHandle);
            expect(tandem_share_close(share), Status::Ok);
            expect(tandem_share_close(share), Status::ClosedHandle);
        }
    }

    /// A CPU-device kernel entry the launch must refuse before calling.
    unsafe extern "C" fn never_called(
        _: *const std::ffi::c_void,
        _: *const *const std::ffi::c_void,
    ) {
        panic!("a refused launch ran its kernel");
    }
}
