//! A range read of a sealed shared buffer returns that range's bytes: 4 KiB
//! at an unaligned offset of a 64 MiB buffer, through a share daemon
//! spawned for the test. (That only the range is copied, not the whole
//! buffer, is what `cargo bench -p tandem-capi --bench boundary` shows:
//! it prints the two reads' times side by side.)

use std::ffi::CString;
use std::ptr::null_mut;

use tandem::layout::Status;
use tandem::*;

mod common;
use common::{expect, message};

const BUFFER: usize = 64 << 20;
const RANGE: usize = 4 << 10;
/// Not a multiple of any page or chunk size.
const OFFSET: usize = (40 << 20) + 4097;

#[test]
fn a_range_of_a_sealed_buffer_reads_back_its_own_bytes() {
    let Ok(bin) = tandem_process::find_tandem_binary() else {
        println!("skipped: no tandem binary (cargo build -p tandem-cli --bin tandem)");
        return;
    };
    let bin = CString::new(bin.into_os_string().into_encoded_bytes()).expect("a path");
    let data: Vec<u8> = (0..BUFFER)
        .map(|i| (i % 251) as u8 ^ (i >> 20) as u8)
        .collect();
    let (mut share, mut writer, mut reader, mut id) = (null_mut(), null_mut(), null_mut(), 0);
    // SAFETY: every call passes valid pointers of the lengths given.
    unsafe {
        expect(tandem_share_spawn(bin.as_ptr(), &mut share), Status::Ok);
        expect(
            tandem_share_create(share, 0, BUFFER, &mut id, &mut writer),
            Status::Ok,
        );
        expect(
            tandem_share_buffer_write(writer, 0, data.as_ptr(), BUFFER),
            Status::Ok,
        );
        expect(tandem_share_buffer_seal(writer), Status::Ok);
        expect(tandem_share_get(share, id, 0, &mut reader), Status::Ok);
        for buffer in [reader, writer] {
            let mut back = vec![0u8; RANGE];
            expect(
                tandem_share_buffer_read(buffer, OFFSET, back.as_mut_ptr(), RANGE),
                Status::Ok,
            );
            assert!(back == data[OFFSET..OFFSET + RANGE], "the range's bytes");
            // The range's end is checked against the buffer's, naming both.
            expect(
                tandem_share_buffer_read(buffer, BUFFER - RANGE + 1, back.as_mut_ptr(), RANGE),
                Status::InvalidArgument,
            );
            assert!(
                message().contains("offset") && message().contains("len"),
                "{}",
                message()
            );
        }
        expect(tandem_share_delete(share, id), Status::Ok);
        expect(tandem_share_buffer_close(reader), Status::Ok);
        expect(tandem_share_buffer_close(writer), Status::Ok);
        expect(tandem_share_close(share), Status::Ok);
    }
}
