//! The library through tandem-hal's host backend, as the runtime uses it:
//! load_module(library()), launch with a checked signature, copy back.

use tandem_device_kernels::{library, names};
use tandem_hal::{DeviceMemory, Dim3, GpuApi, GpuDevice, HostApi, KernelArg, LaunchConfig};

fn to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn from_bytes(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn add_then_block_sum_through_the_host_backend() {
    let api = HostApi::load().unwrap();
    let dev = api.device(0).unwrap();
    let module = dev.load_module(&library()).unwrap();
    let add = dev.kernel(&module, names::TANDEM_ADD_U32).unwrap();
    let sum = dev.kernel(&module, names::TANDEM_BLOCK_SUM_U32).unwrap();
    let stream = dev.create_stream().unwrap();

    let input: Vec<u32> = (0..1000u32).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
    let data = dev.alloc_device(input.len() * 4).unwrap();
    dev.copy_to_device(&data, 0, &to_bytes(&input)).unwrap();
    let config = LaunchConfig {
        grid: Dim3::new(2, 2, 1),
        block: Dim3::new(8, 2, 3),
        shared_mem_bytes: 0,
    };
    let blocks = config.grid.count().unwrap() as usize;
    let out = dev.alloc_device(blocks * 4).unwrap();
    let n = KernelArg::U64(input.len() as u64);

    // SAFETY: `data` holds `n` u32s and `out` one u32 per block; both live
    // until the stream is synchronized below.
    unsafe {
        dev.launch(
            &add,
            &config,
            &[KernelArg::Ptr(data.device_ptr()), n, KernelArg::U32(3)],
            &stream,
        )
        .unwrap();
        dev.launch(
            &sum,
            &config,
            &[
                KernelArg::Ptr(data.device_ptr()),
                KernelArg::Ptr(out.device_ptr()),
                n,
            ],
            &stream,
        )
        .unwrap();
    }
    dev.synchronize_stream(&stream).unwrap();

    let mut back = vec![0u8; input.len() * 4];
    dev.copy_from_device(&mut back, &data, 0).unwrap();
    let added: Vec<u32> = input.iter().map(|v| v.wrapping_add(3)).collect();
    assert_eq!(from_bytes(&back), added);

    let mut sums = vec![0u8; blocks * 4];
    dev.copy_from_device(&mut sums, &out, 0).unwrap();
    let threads = (blocks * 48) as u64;
    let mut expected = vec![0u32; blocks];
    for (i, v) in added.iter().enumerate() {
        let b = ((i as u64 % threads) / 48) as usize;
        expected[b] = expected[b].wrapping_add(*v);
    }
    assert_eq!(from_bytes(&sums), expected);
}

#[test]
fn a_launch_with_wrong_arguments_is_refused() {
    let api = HostApi::load().unwrap();
    let dev = api.device(0).unwrap();
    let module = dev.load_module(&library()).unwrap();
    let fill = dev.kernel(&module, names::TANDEM_FILL_U32).unwrap();
    let stream = dev.create_stream().unwrap();
    // SAFETY: refused before anything runs (wrong argument kinds).
    let refused = unsafe {
        dev.launch(
            &fill,
            &LaunchConfig::linear(1, 1),
            &[KernelArg::U32(0), KernelArg::U32(1)],
            &stream,
        )
    };
    assert!(refused.is_err());
    assert!(dev.kernel(&module, "tandem_no_such_kernel").is_err());
}
