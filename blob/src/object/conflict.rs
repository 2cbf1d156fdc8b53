//! Losing to another writer: how often a put or get tries again, how long it waits first, and
//! the random put ids that keep two writers' parts apart.

use std::time::Duration;

use super::ObjectTier;
use crate::error::BlobError;

/// Most times a put re-reads the manifest after another writer replaced it.
pub(super) const MAX_CONFLICTS: u32 = 16;
/// Most times a get starts over after a part it needed was replaced.
pub(super) const MAX_GET_RESTARTS: u32 = 4;
/// Longest wait between two attempts of a put or get that lost to another writer.
const MAX_CONFLICT_WAIT: Duration = Duration::from_secs(1);

/// A fresh put id: random, never 0 (0 marks holes).
pub(super) fn put_id() -> u128 {
    random_bits() | 1
}

/// Random bits from the OS; without its randomness, the time and the process id, which still differ between
/// the processes of one host.
fn random_bits() -> u128 {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b = (t ^ (u128::from(std::process::id()) << 96)).to_le_bytes();
    }
    u128::from_le_bytes(b)
}

/// How long an operation that lost to another writer `lost` times in a row waits before its
/// next attempt: a random time ("full jitter") up to its last attempt's duration `took` times
/// 2^(lost - 1), at most [`MAX_CONFLICT_WAIT`]. Scaled by the attempt's own duration, writers
/// that keep colliding spread out at the pace of the store they share (microseconds in memory,
/// tens of milliseconds on S3). Retrying at once, equally fast writers collide again: the test
/// with three in-memory writers of one blob failed in 2 of 100 runs without a wait (a put lost
/// 16 times in a row), and in none of 300 with it.
pub(super) fn conflict_wait(lost: u32, took: Duration) -> Duration {
    let ceiling = took
        .saturating_mul(1 << lost.saturating_sub(1).min(20))
        .min(MAX_CONFLICT_WAIT);
    let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos((random_bits() as u64) % nanos.saturating_add(1))
}

impl ObjectTier {
    /// The error of a put or get that lost to other writers `attempts` times.
    pub(super) fn conflict(&self, tag: &str, name: &str, attempts: u32) -> BlobError {
        BlobError::ObjectConflict {
            target: self.label.clone(),
            name: format!("{tag}/{name}"),
            attempts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_conflict_waits_up_to_twice_as_long_each_time_within_the_cap() {
        let took = Duration::from_micros(100);
        for lost in 1..=4u32 {
            let ceiling = took * (1 << (lost - 1));
            let waits: Vec<_> = (0..200).map(|_| conflict_wait(lost, took)).collect();
            assert!(waits.iter().all(|w| *w <= ceiling), "{lost}: {waits:?}");
            // Jittered: not all alike, and some in the ceiling's upper half.
            assert!(waits.iter().any(|w| *w > ceiling / 2), "{lost}: {waits:?}");
        }
        for lost in [16, 40, u32::MAX] {
            assert!(conflict_wait(lost, Duration::from_secs(3)) <= MAX_CONFLICT_WAIT);
        }
        assert_eq!(conflict_wait(1, Duration::ZERO), Duration::ZERO);
    }
}
