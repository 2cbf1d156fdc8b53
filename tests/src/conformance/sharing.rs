//! Memory shared between processes, within one process: IPC handles and
//! fd-shareable memory, and the garbage and bad sizes they must refuse (the
//! two-process half is `crate::ipc`).

use tandem_hal::checks::MAX_ALLOCATION;
use tandem_hal::{
    DeviceMemory, ErrorKind, EventFlags, GpuApi, GpuDevice, IpcMemHandle, LaunchConfig,
    MemoryAccess, ShareableHandle,
};

use crate::support::{
    assert_invalid_size, fill_u32, fill_u32_and_wait, kernels, kind, pattern, read_u32s,
};

/// Opening a handle in the process that exported it is `IpcSameProcess`.
pub fn ipc_same_process_open_is_refused<A: GpuApi>(device: &A::Device) {
    let memory = device.alloc_device_exportable(4096).unwrap();
    assert!(memory.len() >= 4096);
    let handle = device.ipc_export_memory(&memory).unwrap();
    assert_eq!(
        kind(device.ipc_open_memory(&handle)),
        ErrorKind::IpcSameProcess
    );
    let event = device
        .create_event(EventFlags {
            timing: false,
            interprocess: true,
        })
        .unwrap();
    let handle = device.ipc_export_event(&event).unwrap();
    assert_eq!(
        kind(device.ipc_open_event(&handle)),
        ErrorKind::IpcSameProcess
    );
}

/// 64 random bytes (and 64 zeros) are an `InvalidIpcHandle`, not a crash.
pub fn garbage_ipc_handles_are_invalid<A: GpuApi>(device: &A::Device) {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new();
    let mut bytes = [0u8; 64];
    for (i, chunk) in bytes.chunks_exact_mut(8).enumerate() {
        let mut hasher = random.build_hasher();
        hasher.write_usize(i);
        chunk.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    for handle in [IpcMemHandle(bytes), IpcMemHandle([0; 64])] {
        let kind = kind(device.ipc_open_memory(&handle));
        assert!(
            matches!(kind, ErrorKind::InvalidIpcHandle(_)),
            "{handle:?}: {kind:?}"
        );
    }
}

/// Shareable memory survives an export and an import in this process: the
/// import sees the owner's bytes, the owner sees what is written through the
/// import (by a copy and by a kernel), and the import stays readable after
/// the owner is dropped. Every export is a new handle (a new fd). A legacy
/// handle (CUDA or HIP without fd handles) may not be imported by its
/// exporter: `IpcSameProcess`, and the test ends there.
pub fn shareable_memory_round_trips<A: GpuApi>(device: &A::Device) {
    // Not a multiple of any page or granularity: `len` is what was asked for.
    const LEN: usize = (64 << 10) + 12;
    const WORDS: usize = LEN / 4;
    let owner = device.alloc_shareable(LEN).unwrap();
    assert_eq!(owner.len(), LEN);
    let bytes = pattern(LEN, 5);
    device.copy_to_device(&owner, 0, &bytes).unwrap();
    let handle = device.export_shareable(&owner).unwrap();
    assert_eq!(handle.len(), LEN);
    let handle = match handle {
        ShareableHandle::Ipc { .. } => {
            let kind = kind(device.import_shareable(handle, MemoryAccess::ReadWrite));
            assert_eq!(kind, ErrorKind::IpcSameProcess);
            return;
        }
        ShareableHandle::Fd { ref fd, size, .. } => {
            assert!(size >= LEN, "{size}");
            use std::os::fd::AsRawFd;
            let again = device.export_shareable(&owner).unwrap();
            match &again {
                ShareableHandle::Fd { fd: other, .. } => {
                    assert_ne!(other.as_raw_fd(), fd.as_raw_fd(), "a new fd per export")
                }
                other => panic!("{other:?}"),
            }
            handle
        }
    };
    let import = device
        .import_shareable(handle, MemoryAccess::ReadWrite)
        .unwrap();
    assert_eq!(import.len(), LEN);
    let mut back = vec![0u8; LEN];
    device.copy_from_device(&mut back, &import, 0).unwrap();
    assert_eq!(back, bytes, "the owner's bytes, read through the import");
    // A read-only import reads the same bytes (that a store through it
    // faults is shown in a child process: cli/tests/share_fork.rs).
    let reader = device
        .import_shareable(
            device.export_shareable(&owner).unwrap(),
            MemoryAccess::ReadOnly,
        )
        .unwrap();
    device.copy_from_device(&mut back, &reader, 0).unwrap();
    assert_eq!(
        back, bytes,
        "the owner's bytes, read through a read-only import"
    );
    drop(reader);

    let patch = pattern(100, 99);
    device.copy_to_device(&import, 1000, &patch).unwrap();
    let mut seen = vec![0u8; 100];
    device.copy_from_device(&mut seen, &owner, 1000).unwrap();
    assert_eq!(
        seen, patch,
        "written through the import, read through the owner"
    );

    let target = (import.device_ptr(), WORDS);
    fill_u32_and_wait(device, LaunchConfig::linear(8, 64), target, 0x5eed);
    assert!(read_u32s(device, &owner, WORDS)
        .iter()
        .all(|&v| v == 0x5eed));

    drop(owner);
    assert!(
        read_u32s(device, &import, WORDS)
            .iter()
            .all(|&v| v == 0x5eed),
        "the import outlives its owner"
    );
}

/// An import dropped while kernels queued on a stream still write through
/// it stays mapped until they are done: they finish without fault, the
/// stream reports no error, and the owner sees their last value (a DLPack
/// consumer drops its tensor as soon as its last kernel is queued).
pub fn shareable_import_outlives_queued_kernels<A: GpuApi>(device: &A::Device) {
    // Enough queued work that the drop comes while most of it waits.
    const LEN: usize = 8 << 20;
    const WORDS: usize = LEN / 4;
    const LAUNCHES: u32 = 32;
    let owner = device.alloc_shareable(LEN).unwrap();
    let handle = device.export_shareable(&owner).unwrap();
    if matches!(handle, ShareableHandle::Ipc { .. }) {
        // A legacy handle cannot be imported by its exporter (see above).
        return;
    }
    let import = device
        .import_shareable(handle, MemoryAccess::ReadWrite)
        .unwrap();
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let target = (import.device_ptr(), WORDS);
    for value in 1..=LAUNCHES {
        fill_u32(
            device,
            &module,
            LaunchConfig::linear(64, 256),
            target,
            value,
            &stream,
        );
    }
    drop(import);
    device
        .synchronize_stream(&stream)
        .expect("the kernels queued before the drop ran on mapped memory");
    assert!(
        read_u32s(device, &owner, WORDS)
            .iter()
            .all(|&v| v == LAUNCHES),
        "every queued kernel wrote through the dropped import"
    );
}

/// Zero, absurd and larger-than-the-device sizes are `InvalidSize`.
pub fn shareable_bad_sizes_are_refused<A: GpuApi>(device: &A::Device) {
    let total = device.properties().unwrap().total_memory;
    let beyond = usize::try_from(total + 1).unwrap_or(usize::MAX);
    for bytes in [0, beyond, MAX_ALLOCATION + 1, usize::MAX] {
        assert_invalid_size(device.alloc_shareable(bytes));
    }
}

/// Descriptors that are no allocation (`/dev/null`, a socket), a handle
/// claiming more than its allocation holds, and legacy garbage are
/// `InvalidIpcHandle`, never a crash.
pub fn shareable_garbage_is_refused<A: GpuApi>(device: &A::Device) {
    const SIZE: usize = 2 << 20;
    let refused = |handle: ShareableHandle, what: &str| {
        let kind = kind(device.import_shareable(handle, MemoryAccess::ReadOnly));
        assert!(
            matches!(kind, ErrorKind::InvalidIpcHandle(_)),
            "{what}: expected InvalidIpcHandle, got {kind:?}"
        );
    };
    let null = std::fs::File::open("/dev/null").unwrap();
    let fd = |size, len| ShareableHandle::Fd {
        fd: null.try_clone().unwrap().into(),
        size,
        len,
    };
    refused(fd(SIZE, 4096), "/dev/null");
    refused(fd(SIZE, SIZE + 1), "/dev/null, len beyond size");
    let (socket, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
    let socket = ShareableHandle::Fd {
        fd: socket.into(),
        size: SIZE,
        len: SIZE,
    };
    refused(socket, "a socket");
    let legacy = ShareableHandle::Ipc {
        handle: IpcMemHandle([0; 64]),
        offset: 0,
        len: 4096,
    };
    refused(legacy, "64 zero bytes");

    let owner = device.alloc_shareable(4096).unwrap();
    let export = || match device.export_shareable(&owner).unwrap() {
        ShareableHandle::Fd { fd, size, .. } => Some((fd, size)),
        ShareableHandle::Ipc { .. } => None, // its exporter may not open it
    };
    if let Some((fd, size)) = export() {
        refused(
            ShareableHandle::Fd {
                fd,
                size,
                len: size + 1,
            },
            "len beyond size",
        );
    }
    if let Some((fd, size)) = export() {
        refused(
            ShareableHandle::Fd {
                fd,
                size: size * 2,
                len: size * 2,
            },
            "size beyond the allocation",
        );
    }
}

/// One `#[test]` per behaviour above for backend `$api`, in a module
/// `sharing`.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_sharing_tests {
    ($api:ty) => {
        mod sharing {
            $crate::stamp_device_tests!($api, sharing: [
                ipc_same_process_open_is_refused,
                garbage_ipc_handles_are_invalid,
                shareable_memory_round_trips,
                shareable_import_outlives_queued_kernels,
                shareable_bad_sizes_are_refused,
                shareable_garbage_is_refused,
            ]);
        }
    };
}
