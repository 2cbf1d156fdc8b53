//! The runtime and the clients of the client device queue tests (see
//! `tandem_tests::client_queues`): `client_queues_child <backend> <mode>
//! <args...>`, exit status 0 on success.

use std::process::ExitCode;

use tandem_tests::client_queues::child_main;

fn main() -> ExitCode {
    // Quiet unless asked: the tests' output is the children's stderr too.
    if std::env::var_os("RUST_LOG").is_some() {
        tandem_runtime::init_logging();
    }
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
            eprintln!("client_queues_child: {why}");
            ExitCode::FAILURE
        }
    }
}
