//! `HeldBuffer`, a shared buffer as the C and Python fronts hold it, on the
//! CPU device: writes and reads of a range touch only that range, the
//! writer's writes end at the seal (`NotWriter` after), ranges past the end
//! are `OutOfRange` naming offset and length, a second seal is refused, and
//! a reader's copy of the buffer holds what the writer wrote.

mod common;

use tandem_hal::{GpuApi, HostApi};
use tandem_share::{HeldBuffer, ShareClient, ShareError};

#[test]
fn a_held_buffer_from_writer_to_reader() {
    let client = ShareClient::spawn_daemon_with(HostApi::load().unwrap(), &common::tandem_exe())
        .expect("starting the share daemon");
    let (id, buffer) = client.create_buffer(0, 1 << 16).unwrap();
    let writer = HeldBuffer::writable(client.clone(), buffer);
    assert!(!writer.is_sealed() && writer.len() == 1 << 16 && writer.id() == id);
    writer.write(0, &[1; 1 << 16]).unwrap();
    writer.write(1000, &[7; 24]).unwrap();
    match writer.write((1 << 16) - 4, &[0; 8]) {
        Err(ShareError::OutOfRange {
            offset,
            len,
            buffer,
            ..
        }) => assert_eq!((offset, len, buffer), ((1 << 16) - 4, 8, 1 << 16)),
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    assert!(matches!(
        writer.write(usize::MAX, &[0; 2]),
        Err(ShareError::OutOfRange { .. })
    ));
    let mut seen = [0u8; 32];
    writer.read(996, &mut seen).unwrap();
    assert_eq!(&seen[..4], &[1; 4]);
    assert_eq!(&seen[4..28], &[7; 24]);
    writer.seal().unwrap();
    assert!(writer.is_sealed());
    assert!(matches!(
        writer.write(0, &[2]),
        Err(ShareError::NotWriter(_))
    ));
    assert!(matches!(writer.seal(), Err(ShareError::NotWriter(_))));

    let stream = client.stream(0).unwrap().1;
    let reader = HeldBuffer::sealed(client.clone(), client.get_buffer(id, &stream).unwrap());
    let mut range = [0u8; 24];
    reader.read(1000, &mut range).unwrap();
    assert_eq!(range, [7; 24]);
    let all = reader.to_vec().unwrap();
    assert_eq!(all.len(), 1 << 16);
    assert_eq!(all.iter().filter(|&&b| b == 7).count(), 24);
    assert!(reader.with_sealed(|sealed| sealed.id() == id).unwrap());
    assert!(matches!(
        reader.with_writable(|_| ()),
        Err(ShareError::NotWriter(_))
    ));
}
