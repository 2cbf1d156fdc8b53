//! Streams and events: work in order, events recorded, queried and timed,
//! streams waiting on events.

use tandem_hal::{DeviceMemory, EventFlags, GpuApi, GpuDevice, KernelArg, LaunchConfig};

use crate::support::{fill_u32, kernels, launch, u32_bytes};

/// A stream runs its work in order: fill, then add, then the copy back.
pub fn stream_work_runs_in_order<A: GpuApi>(device: &A::Device) {
    const N: usize = 1 << 16;
    let buffer = device.alloc_device(N * 4).unwrap();
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let data = KernelArg::Ptr(buffer.device_ptr());
    device.fill_async(&stream, &buffer, 0, N * 4, 0xff).unwrap();
    let config = LaunchConfig::linear(32, 256);
    fill_u32(
        device,
        &module,
        config,
        (buffer.device_ptr(), N),
        3,
        &stream,
    );
    launch(
        device,
        &module,
        "tandem_add_u32",
        config,
        &[data, KernelArg::U64(N as u64), KernelArg::U32(4)],
        &stream,
    );
    let mut back = vec![0u8; N * 4];
    // SAFETY: `back` is neither read nor moved until the stream is synchronised.
    unsafe { device.copy_from_device_async(&stream, &mut back, &buffer, 0) }.unwrap();
    device.synchronize_stream(&stream).unwrap();
    assert_eq!(back, u32_bytes(&vec![7; N]));
}

/// Events record, query, synchronise and time.
pub fn events_record_query_and_time<A: GpuApi>(device: &A::Device) {
    let timing = EventFlags {
        timing: true,
        interprocess: false,
    };
    let start = device.create_event(timing).unwrap();
    let end = device.create_event(timing).unwrap();
    let module = kernels(device);
    let stream = device.create_stream().unwrap();
    let buffer = device.alloc_device(1 << 20).unwrap();
    device.record_event(&start, &stream).unwrap();
    let target = (buffer.device_ptr(), 1 << 18);
    fill_u32(
        device,
        &module,
        LaunchConfig::linear(16, 256),
        target,
        1,
        &stream,
    );
    device.record_event(&end, &stream).unwrap();
    device.synchronize_event(&end).unwrap();
    assert!(device.query_event(&end).unwrap());
    assert!(
        device.query_event(&start).unwrap(),
        "an earlier record of the same stream"
    );
    let elapsed = device.elapsed(&start, &end).unwrap();
    assert!(elapsed.as_secs() < 60, "{elapsed:?}");
    device.synchronize_stream(&stream).unwrap();
}

/// Work on one stream waits for an event recorded on another.
pub fn streams_wait_on_events<A: GpuApi>(device: &A::Device) {
    const N: usize = 1 << 18;
    const ROUNDS: u32 = 8;
    let buffer = device.alloc_device(N * 4).unwrap();
    let module = kernels(device);
    let producer = device.create_stream().unwrap();
    let consumer = device.create_stream().unwrap();
    let done = device.create_event(EventFlags::default()).unwrap();
    let data = KernelArg::Ptr(buffer.device_ptr());
    let config = LaunchConfig::linear(16, 256);
    fill_u32(
        device,
        &module,
        config,
        (buffer.device_ptr(), N),
        1,
        &producer,
    );
    for _ in 0..ROUNDS {
        launch(
            device,
            &module,
            "tandem_add_u32",
            config,
            &[data, KernelArg::U64(N as u64), KernelArg::U32(1)],
            &producer,
        );
    }
    device.record_event(&done, &producer).unwrap();
    device.stream_wait_event(&consumer, &done).unwrap();
    let mut back = vec![0u8; N * 4];
    // SAFETY: `back` is neither read nor moved until the consumer is synchronised.
    unsafe { device.copy_from_device_async(&consumer, &mut back, &buffer, 0) }.unwrap();
    device.synchronize_stream(&consumer).unwrap();
    assert_eq!(back, u32_bytes(&vec![1 + ROUNDS; N]));
    device.synchronize_stream(&producer).unwrap();
}

/// One `#[test]` per behaviour above for backend `$api`, in a module
/// `streams`.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_streams_tests {
    ($api:ty) => {
        mod streams {
            $crate::stamp_device_tests!($api, streams: [
                stream_work_runs_in_order,
                events_record_query_and_time,
                streams_wait_on_events,
            ]);
        }
    };
}
