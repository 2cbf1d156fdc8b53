//! The child of the two-process IPC test (see `tandem_tests::ipc`):
//! `ipc_child <backend> <mode> <args...>`, exit status 0 on success.

use std::process::ExitCode;

use tandem_tests::ipc::child_main;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let outcome = match args.first().map(String::as_str) {
        Some("host") => child_main::<tandem_hal::HostApi>(rest),
        #[cfg(feature = "cuda")]
        Some("cuda") => child_main::<tandem_hal_cuda::CudaApi>(rest),
        #[cfg(feature = "hip")]
        Some("hip") => child_main::<tandem_hal_hip::HipApi>(rest),
        other => Err(format!("backend {other:?} is not built into this binary")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("ipc_child: {why}");
            ExitCode::FAILURE
        }
    }
}
