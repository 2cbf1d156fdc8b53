//! `tandem info`: the backends compiled in, their devices and properties,
//! as text or JSON.

use clap::Args;
use serde::Serialize;
use tandem_hal::{GpuApi, GpuDevice, HostApi};

/// `tandem info`'s options.
#[derive(Args, Debug)]
pub(crate) struct InfoArgs {
    /// Prints the backends and devices as JSON.
    #[arg(long)]
    json: bool,
}

/// One backend in `tandem info --json`.
#[derive(Serialize)]
struct BackendInfo {
    backend: &'static str,
    compiled_in: bool,
    /// Why it could not be used, if so.
    error: Option<String>,
    devices: Vec<DeviceInfo>,
}

/// One device in `tandem info --json`.
#[derive(Serialize)]
struct DeviceInfo {
    ordinal: usize,
    /// Why it could not be opened; the other fields are then empty.
    error: Option<String>,
    name: String,
    arch: String,
    total_memory: u64,
    multiprocessors: u32,
    warp_size: u32,
    can_map_host_memory: bool,
    host_native_atomics: bool,
    pci_bus_id: Option<String>,
    host_numa_node: Option<u32>,
    numa_source: String,
}

fn list_devices<A: GpuApi>(backend: &'static str) -> BackendInfo {
    let mut info = BackendInfo {
        backend,
        compiled_in: true,
        error: None,
        devices: Vec::new(),
    };
    match A::load().and_then(|api| Ok((api.device_count()?, api))) {
        Err(e) => info.error = Some(e.to_string()),
        Ok((count, api)) => {
            for ordinal in 0..count {
                let device = match api.device(ordinal).and_then(|d| d.properties()) {
                    Ok(p) => DeviceInfo {
                        ordinal,
                        error: None,
                        name: p.name,
                        arch: p.arch,
                        total_memory: p.total_memory,
                        multiprocessors: p.multiprocessor_count,
                        warp_size: p.warp_size,
                        can_map_host_memory: p.can_map_host_memory,
                        host_native_atomics: p.host_native_atomics,
                        pci_bus_id: p.pci_bus_id,
                        host_numa_node: p.host_numa_node,
                        numa_source: format!("{:?}", p.numa_source),
                    },
                    Err(e) => DeviceInfo {
                        ordinal,
                        error: Some(e.to_string()),
                        name: String::new(),
                        arch: String::new(),
                        total_memory: 0,
                        multiprocessors: 0,
                        warp_size: 0,
                        can_map_host_memory: false,
                        host_native_atomics: false,
                        pci_bus_id: None,
                        host_numa_node: None,
                        numa_source: String::new(),
                    },
                };
                info.devices.push(device);
            }
        }
    }
    info
}

/// A backend left out of this build.
#[cfg(not(all(feature = "cuda", feature = "hip")))]
fn not_compiled(backend: &'static str, feature: &str) -> BackendInfo {
    BackendInfo {
        backend,
        compiled_in: false,
        error: Some(format!("not compiled in (build with --features {feature})")),
        devices: Vec::new(),
    }
}

/// `tandem info`.
pub(crate) fn info(args: InfoArgs) -> Result<(), String> {
    let backends = [
        list_devices::<HostApi>("host"),
        #[cfg(feature = "cuda")]
        list_devices::<tandem_hal_cuda::CudaApi>("cuda"),
        #[cfg(not(feature = "cuda"))]
        not_compiled("cuda", "cuda"),
        #[cfg(feature = "hip")]
        list_devices::<tandem_hal_hip::HipApi>("hip"),
        #[cfg(not(feature = "hip"))]
        not_compiled("hip", "hip"),
    ];
    if args.json {
        let text = serde_json::to_string_pretty(&backends).map_err(|e| e.to_string())?;
        println!("{text}");
        return Ok(());
    }
    for b in &backends {
        let label = match b.backend {
            "host" => "host (CPU device)",
            "cuda" => "CUDA",
            _ => "HIP",
        };
        match &b.error {
            Some(why) if !b.compiled_in => println!("{label}: {why}"),
            Some(why) => println!("{label}: unavailable ({why})"),
            None => println!("{label}: {} device(s)", b.devices.len()),
        }
        for d in &b.devices {
            if let Some(why) = &d.error {
                println!("  [{}] cannot open: {why}", d.ordinal);
                continue;
            }
            println!(
                "  [{}] {} ({}), {} MiB, {} SMs/CUs/threads, warp {}",
                d.ordinal,
                d.name,
                d.arch,
                d.total_memory >> 20,
                d.multiprocessors,
                d.warp_size
            );
            println!(
                "      maps host memory: {}, host-native atomics: {}, PCI {}, host NUMA node {} ({})",
                d.can_map_host_memory,
                d.host_native_atomics,
                d.pci_bus_id.as_deref().unwrap_or("-"),
                d.host_numa_node
                    .map_or("unknown".to_string(), |n| n.to_string()),
                d.numa_source
            );
        }
    }
    Ok(())
}
