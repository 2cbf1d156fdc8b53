//! One side of the two-process shm-core exchange:
//! `shm_peer produce <segment name> <records>` or `shm_peer consume <segment name>`.
//! Exit status: 0 done, 2 bad usage or setup/corruption error, 3 the producer died
//! mid-stream (after the records sent so far were received intact).

use std::process::ExitCode;

use tandem_tests::shm_exchange::{consume, produce, ExchangeError};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [role, name, records] if role == "produce" => match records.parse::<u64>() {
            Ok(records) => produce(name, records),
            Err(e) => {
                eprintln!("shm_peer: bad record count {records:?}: {e}");
                return ExitCode::from(2);
            }
        },
        [role, name] if role == "consume" => consume(name).map(|_| ()),
        _ => {
            eprintln!("usage: shm_peer produce <segment> <records> | shm_peer consume <segment>");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shm_peer: {e}");
            println!("error: {e}");
            ExitCode::from(match e {
                ExchangeError::ProducerDied { .. } => 3,
                _ => 2,
            })
        }
    }
}
