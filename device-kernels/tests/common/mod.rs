//! A minimal CPU-device launcher written against the C ABI alone: it calls the
//! generated `tandem_host_*` entries from `HOST_TABLE` with hand-built
//! `HostThreadCtx`s, one OS thread per GPU thread, a `std::sync::Barrier` per
//! block. It proves the ABI independently of tandem-hal's host backend.

use std::ffi::c_void;
use std::sync::Barrier;

use tandem_device_kernels::HOST_TABLE;
use tandem_hal::host_abi::{HostThreadCtx, HOST_STATIC_SHARED_BYTES};
use tandem_hal::{check_args, Dim3, KernelArg};

/// Raw pointers a block's threads share; valid for the whole `thread::scope`.
#[derive(Clone, Copy)]
struct BlockShared {
    shared_mem: *mut u8,
    barrier: *const Barrier,
    args: *const *const c_void,
}
// SAFETY: the pointees (shared memory, barrier, argument array) outlive the
// scoped threads and are used the way a GPU block uses them: the kernel
// synchronizes its own shared-memory accesses through the barrier.
unsafe impl Send for BlockShared {}

unsafe extern "C" fn std_barrier(ctx: *const HostThreadCtx) {
    // SAFETY: the launcher points `barrier_state` at a `Barrier` that lives
    // until every thread of the block has returned.
    let barrier = unsafe { &*(*ctx).barrier_state.cast::<Barrier>() };
    barrier.wait();
}

/// Every index of a box of `dim`, x fastest.
pub fn indices(dim: Dim3) -> impl Iterator<Item = Dim3> {
    (0..dim.z).flat_map(move |z| {
        (0..dim.y).flat_map(move |y| (0..dim.x).map(move |x| Dim3::new(x, y, z)))
    })
}

/// Runs kernel `name` over `grid` x `block`, blocks one after another, and
/// returns once every thread has returned. Panics on a launch the GPU would
/// refuse (test helper).
pub fn launch(name: &str, grid: Dim3, block: Dim3, dynamic_shared: u32, args: &[KernelArg<'_>]) {
    let kernel = HOST_TABLE
        .iter()
        .find(|k| k.name == name)
        .expect("kernel in HOST_TABLE");
    check_args(name, kernel.params, args).expect("arguments match the signature");
    let threads = block.count().expect("block size") as usize;
    assert!((1..=1024).contains(&threads), "1..=1024 threads per block");
    let values: Vec<*const c_void> = args.iter().map(KernelArg::value_ptr).collect();

    // u128 elements: the ABI promises 16-aligned shared memory.
    let shared_len = (HOST_STATIC_SHARED_BYTES + dynamic_shared) as usize;
    let mut shared = vec![0u128; shared_len.div_ceil(16)];
    for block_idx in indices(grid) {
        let barrier = Barrier::new(threads);
        let block_shared = BlockShared {
            shared_mem: shared.as_mut_ptr().cast(),
            barrier: &barrier,
            args: values.as_ptr(),
        };
        std::thread::scope(|s| {
            for thread_idx in indices(block) {
                let entry = kernel.entry;
                std::thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn_scoped(s, move || {
                        let b = block_shared;
                        let ctx = HostThreadCtx {
                            thread_idx,
                            block_idx,
                            block_dim: block,
                            grid_dim: grid,
                            shared_mem: b.shared_mem,
                            dynamic_shared_bytes: dynamic_shared,
                            _reserved: 0,
                            barrier: std_barrier,
                            barrier_state: b.barrier.cast(),
                        };
                        // SAFETY: `ctx` describes this thread of a valid
                        // launch, `args` holds one pointer per declared
                        // parameter (checked above) to a value of its kind,
                        // and every pointer argument the tests pass covers
                        // the range the kernel touches.
                        unsafe { entry(&ctx, b.args) };
                    })
                    .expect("spawn a CPU-device thread");
            }
        });
    }
}
