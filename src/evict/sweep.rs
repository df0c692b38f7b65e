//! The word store's sweeps: its keys are forgotten in place, by a pass over its
//! segments that retires each forgettable word and removes it, taken in parts by
//! new keys' insertions (shares) and by the sweeper thread (a walk) — see
//! `crate::evict`, "The word store's sweeps".

use super::cycle::{Left, Role};
use super::schedule::Stage;
use super::{Eviction, Keys};
use crate::algorithm::{Algorithm, Retirement};
use crate::store::{InPlace, Judged};
use crate::sync::mutants::{Mutant, active};
use crate::sync::yield_now;
use std::cell::Cell;
use std::hash::{BuildHasher, Hash};

/// Words the sweeper thread's walk judges between two refreshes of the instant a
/// pass forgets as of.
const REFRESH: usize = 256;

/// What forgetting makes of `state` as of `at`, counting what it retires in
/// `forgotten`.
fn judge<K, A: Algorithm<K>>(
    algorithm: &A,
    state: &A::State,
    at: u64,
    forgotten: &Cell<usize>,
) -> Judged {
    match algorithm.retire_if_forgettable(state, at) {
        Retirement::Kept(until) => Judged::Kept(until),
        // Replaced by its mover soon, with a state of its own; or moved to a larger
        // table, where the copy is kept.
        Retirement::Moving | Retirement::Relocated => Judged::Kept(at),
        Retirement::Retired => {
            forgotten.set(forgotten.get() + 1);
            Judged::Removed
        }
        // Retired by an earlier call for this entry: every retired entry is removable.
        Retirement::AlreadyRetired => Judged::Removed,
    }
}

/// A new key's share of the open pass, at `now` (its request's reading): a few
/// groups of a part no one else holds (`InPlace::sweep_share`), never a wait. (Not
/// under loom, whose stand-in for the word store takes none.)
#[cfg_attr(turnstile_loom, allow(dead_code))]
pub(crate) fn share<K, A, S>(eviction: &Eviction, keys: &Keys<'_, K, A, S>, now: u64)
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A::State: 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    let Some(words) = keys.store.words() else {
        return;
    };
    let forgotten = Cell::new(0);
    // The mutant judges as of the request's own reading, which may be later than the
    // watermark the pass raised.
    let own = active(Mutant::ShareAtItsOwnReading).then_some(now);
    words.sweep_share(&eviction.pass, |state, at| {
        judge(keys.algorithm, state, own.unwrap_or(at), &forgotten)
    });
    eviction.tally.forgot(forgotten.get());
}

/// The sweeper thread's (or a caller's that may wait) walk over every part of the
/// open pass the shares have not finished, `breathe` between holds of a part's lock
/// (its `false`: stop). Every [`REFRESH`] words judged, the pass's instant moves up
/// to `now() - margin` (the watermark raised and the insertions waited out first, if
/// the schedule is free to take: the thread does not hold it while it walks), so a
/// long walk also forgets keys that went idle while it ran. Returns whether it walked
/// to the end.
pub(crate) fn walk<K, A, S>(
    eviction: &Eviction,
    keys: &Keys<'_, K, A, S>,
    now: impl Fn() -> u64,
    held: bool,
    mut breathe: impl FnMut() -> bool,
) -> bool
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A::State: 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    let Some(words) = keys.store.words() else {
        return true;
    };
    let forgotten = Cell::new(0);
    let judged = Cell::new(0usize);
    let refresh = || {
        let schedule_held = if held {
            None
        } else {
            match eviction.schedule.try_lock() {
                Some(guard) => Some(guard),
                None => return,
            }
        };
        // The pass may have closed (the shares finished it) while the schedule was
        // not held: nothing to refresh then.
        if eviction.pass.open_generation().is_some() {
            let at = now().saturating_sub(eviction.margin);
            if at > eviction.pass.at() {
                eviction.watermark.raise(at);
                keys.store.insertions().flip_and_wait();
                eviction.pass.refresh(at);
            }
        }
        drop(schedule_held);
    };
    let finished = words.sweep_walk(
        &eviction.pass,
        |state, at| {
            judged.set(judged.get() + 1);
            judge(keys.algorithm, state, at, &forgotten)
        },
        || {
            if judged.get() >= REFRESH {
                judged.set(0);
                refresh();
            }
            eviction.tally.forgot(forgotten.replace(0));
            breathe()
        },
    );
    eviction.tally.forgot(forgotten.replace(0));
    finished
}

/// The word store's schedule, taken by its holder as far as `role` may at `now`: a
/// pass opened when one is due (a request raises the watermark and flips the
/// insertions' phase, and opens the pass at a later look once they are settled; the
/// thread and `evict_idle` wait for them), and closed once its parts are all done.
/// `Left::Draining` while a pass is open with parts left.
pub(crate) fn advance<K, A, S>(
    eviction: &Eviction,
    keys: &Keys<'_, K, A, S>,
    now: u64,
    role: Role,
) -> Left
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A::State: 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    let Some(words) = keys.store.words() else {
        return Left::Waiting;
    };
    let schedule = &eviction.schedule;
    let insertions = keys.store.insertions();
    loop {
        match schedule.stage() {
            Stage::Draining => {
                if !eviction.pass.done() {
                    return Left::Draining;
                }
                close(eviction);
                if role == Role::Manual {
                    return Left::Waiting;
                }
            }
            Stage::Settling => {
                if !insertions.settled() {
                    if role == Role::Request {
                        return Left::ForTheThread;
                    }
                    yield_now();
                    continue;
                }
                // The instant was recorded when the watermark was raised.
                let at = schedule.drain_at();
                eviction
                    .pass
                    .open(at, schedule.rotated_at(), words.sweep_parts());
                schedule.set_stage(Stage::Draining);
            }
            _ => {
                // Due by size, or asked for by a request at the cap.
                if !(schedule.sweep_due(keys.store.len(), now) || schedule.room_wanted()) {
                    return Left::Waiting;
                }
                let at = now.saturating_sub(eviction.margin);
                eviction.watermark.raise(at);
                schedule.drain_from(at);
                // The pass's beginning, kept where the ring keeps its rotation's.
                schedule.rotated(now);
                if role == Role::Request {
                    // The cheap steps only: no wait for other threads' insertions.
                    if !insertions.flip() {
                        return Left::Waiting;
                    }
                } else {
                    insertions.flip_and_wait();
                }
                schedule.set_stage(Stage::Settling);
            }
        }
    }
}

/// Closes the open pass, whose parts are all done: the next is scheduled from what
/// it kept. For the schedule's holder.
fn close(eviction: &Eviction) {
    let closed = eviction.pass.close();
    eviction.schedule.swept(
        eviction.margin,
        closed.kept,
        closed.began,
        closed.kept_until,
    );
    eviction.schedule.set_stage(Stage::Idle);
    eviction.schedule.room_made();
}

/// A whole pass now, for a caller that holds the schedule and may wait (`evict_idle`,
/// a request at the cap with no thread): any pass under way finished first, then one
/// opened at `now()` and walked to its end, `pause` between holds. Returns how many
/// keys it forgot.
pub(crate) fn sweep<K, A, S>(
    eviction: &Eviction,
    keys: &Keys<'_, K, A, S>,
    now: impl Fn() -> u64,
    mut pause: impl FnMut(),
) -> usize
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A::State: 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    let before = eviction.tally().0;
    // Twice: the pass under way, if any, then one opened now (asked for as the cap
    // asks, so that it is due whatever the store holds).
    for _ in 0..2 {
        while advance(eviction, keys, now(), Role::Manual) == Left::Draining {
            walk(eviction, keys, &now, true, || {
                pause();
                true
            });
        }
        eviction.schedule.want_room();
    }
    eviction.schedule.room_made();
    (eviction.tally().0 - before) as usize
}
