//! Which keys this process saw lately, without an entry per key: a key seen once gets
//! no lease entry (its one request is a plain check), and a key seen again within a
//! lifetime gets one, with the first sighting as its previous fetch, so the size rule
//! sees how soon it came back.
//!
//! A fixed table of [`SLOTS`] words (64 KiB a limiter), each the last key seen whose
//! hash lands there: 32 bits of its hash and the low 32 bits of the tick it was seen
//! at. Two keys in one slot overwrite each other, and two keys whose fingerprints
//! collide read as one: either only moves when a key gets its entry (a request later or
//! sooner), never a decision.

use super::hold::tick;
use crate::sync::{AtomicU64, Ordering};
use std::hash::BuildHasher;

/// Slots in the table: a power of two.
const SLOTS: usize = 8192;

/// The keys seen lately.
pub(super) struct Sightings {
    slots: Box<[AtomicU64]>,
    hasher: foldhash::fast::RandomState,
}

impl Sightings {
    pub(super) fn new() -> Self {
        Self {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// Records that `key` is seen at `now` (nanoseconds since the limiter's epoch), and
    /// says when it was seen before, if that was less than `within` nanoseconds ago
    /// (as far as the table remembers).
    pub(super) fn sighting(&self, key: &[u8], now: u64, within: u64) -> Option<u64> {
        let hash = self.hasher.hash_one(key);
        // In range: masked to the table's size.
        let slot = &self.slots[(hash as usize) & (SLOTS - 1)];
        // Never zero, so an empty slot matches no key.
        let fingerprint = (hash >> 32) | 1;
        let at = tick(now);
        // Relaxed: a hint for sizing leases; the slot guards no other memory.
        let before = slot.swap((fingerprint << 32) | (at & 0xFFFF_FFFF), Ordering::Relaxed);
        if before >> 32 != fingerprint {
            return None;
        }
        // Ticks since, modulo 2^32 (wrapping every 52 days: at worst a key gets its
        // entry one request early).
        let since = (at as u32).wrapping_sub(before as u32);
        let since = u64::from(since) << super::hold::TICK_SHIFT;
        (since < within).then(|| now.saturating_sub(since))
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_key_seen_again_within_the_window_is_remembered() {
        let seen = Sightings::new();
        assert_eq!(seen.sighting(b"k", 10 * MS, 100 * MS), None);
        let before = seen.sighting(b"k", 50 * MS, 100 * MS).unwrap();
        // The first sighting, to within a tick (2^20 ns): both readings are floored.
        assert!(before.abs_diff(10 * MS) < 1 << 20, "{before}");
        assert!(seen.sighting(b"other", 50 * MS, 100 * MS).is_none());
    }

    #[test]
    fn a_key_seen_again_after_the_window_counts_as_new() {
        let seen = Sightings::new();
        assert_eq!(seen.sighting(b"k", 0, 100 * MS), None);
        assert_eq!(seen.sighting(b"k", 200 * MS, 100 * MS), None);
        assert!(seen.sighting(b"k", 210 * MS, 100 * MS).is_some());
    }
}
