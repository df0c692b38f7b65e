//! The word store's sweeps: its keys are forgotten in place, by a pass that retires
//! each forgettable word and removes it (see `crate::evict`, "The word store's
//! sweeps").

use super::{Eviction, Keys};
use crate::algorithm::{Algorithm, Retirement};
use crate::store::InPlace;
use std::hash::{BuildHasher, Hash};

/// Keys visited between two refreshes of the instant a sweep forgets as of.
const REFRESH: u32 = 256;

/// One pass over the word store, calling `pause` where the store holds no lock (see
/// `InPlace::retain`); the caller holds the schedule. Returns how many keys it forgot.
///
/// The instant keys must be forgettable at moves forward every [`REFRESH`] keys
/// visited (raising the watermark and waiting out the insertions first, as the
/// protocol requires), so a long pass also forgets keys that went idle while it ran,
/// and what it keeps is the active set, not everything inserted meanwhile.
pub(crate) fn sweep<K, A, S>(
    eviction: &Eviction,
    keys: &Keys<'_, K, A, S>,
    now: impl Fn() -> u64,
    pause: impl FnMut(),
) -> usize
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A::State: 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    let Some(words) = keys.store.words() else {
        return 0;
    };
    // The watermark raised to `now - margin`, then every insertion that may have read
    // the old one waited out, before anything is retired.
    let raise = |now: u64| {
        let at = now.saturating_sub(eviction.margin);
        eviction.watermark.raise(at);
        keys.store.insertions().flip_and_wait();
        at
    };
    let began = now();
    let mut at = raise(began);
    let (mut visited, mut forgotten, mut kept) = (0u32, 0, 0);
    // The earliest instant any kept key could be forgotten.
    let mut kept_until = u64::MAX;
    let keep = |state: &A::State| {
        if eviction.sweeper.stopping() {
            return true; // the limiter is being dropped: end early
        }
        visited = visited.wrapping_add(1);
        if visited % REFRESH == 0 {
            at = raise(now());
        }
        match keys.algorithm.retire_if_forgettable(state, at) {
            Retirement::Kept(until) => {
                kept += 1;
                kept_until = kept_until.min(until);
                true
            }
            // Replaced by its mover soon, with a state of its own; or moved to a
            // larger table, where the copy is kept.
            Retirement::Moving | Retirement::Relocated => {
                kept += 1;
                kept_until = kept_until.min(at);
                true
            }
            Retirement::Retired => {
                forgotten += 1;
                false
            }
            // Retired by an earlier call for this entry: every retired entry is
            // removable.
            Retirement::AlreadyRetired => false,
        }
    };
    words.retain(keep, pause);
    eviction
        .schedule
        .swept(eviction.margin, kept, began, kept_until);
    eviction.tally.forgot(forgotten);
    forgotten
}
