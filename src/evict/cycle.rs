//! The ring's cycle of forgetting (see `crate::evict`, "The ring's cycle"): rotate,
//! let the claims of the rotation close, let the old generation age a margin, raise
//! the watermark and wait out the insertions that may have read the old one, then
//! drain. Each step is taken by whoever holds the schedule; how far a caller may go is
//! its [`Role`].

use super::schedule::{MIN_SWEEP_KEYS, Stage};
use super::{Eviction, Keys};
use crate::algorithm::{Algorithm, Retirement};
use crate::store::Relocator;
use crate::store::ring::Drained;
use crate::sync::yield_now;
use std::hash::{BuildHasher, Hash};

/// Entries of its region's class the sweeper thread drains in one hold of a region
/// (about eight times as many entries walked, the other classes' stepped over; a few
/// microseconds): a thread the OS deschedules while it holds a region keeps every
/// share from that region meanwhile, so the holds are short.
const CHUNK: usize = 32;

/// Entries of the old generation a new key's insertion drains while a drain is under
/// way: the request's share, so that the old generation empties as fast as the young
/// one fills whatever the sweeper thread gets of the CPU (a stream of new keys needs
/// one forgotten per key inserted, and a share of two leaves room for the relocations).
pub(crate) const SHARE: usize = 4;

/// The most a share may take with what this thread owes: shares skipped because every
/// region left was held by another thread (near a drain's end, two or three threads
/// meet on the last regions, and a sweeper thread preempted inside its chunk holds
/// one for a time slice) are owed, and paid with the next share that gets a region,
/// up to this many entries of its region's class in all (about eight times as many
/// walked): a bounded step for one request (a few microseconds of removals), so that
/// skipped shares do not leave the drain to the thread.
pub(crate) const MAX_SHARE: usize = 8 * SHARE;

/// Who takes the cycle's steps, and how far they may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A request (a sampled insertion): the cheap steps, never a wait; a drain is
    /// opened only when the thread cannot (none, or overdue by an eighth of a
    /// margin).
    Request,
    /// The sweeper thread: every step, the drain in chunks.
    Thread,
    /// `evict_idle`: a whole cycle now, aging skipped, waiting where it must.
    Manual,
}

/// Where the cycle was left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Left {
    /// Nothing more to do now.
    Waiting,
    /// The sweeper thread has a step to take (wait for insertions, open the drain,
    /// drain).
    ForTheThread,
    /// The drain is open: whoever may drains it ([`drain_out`]).
    Draining,
}

/// Takes the ring's cycle's steps as far as `role` may at `now`, up to an open drain,
/// which the caller drains ([`drain_out`]) and then comes back (for `Manual`, through
/// one whole cycle begun after any left unfinished: `rotations_owed` counts the one
/// still to begin). The caller holds the schedule.
pub(crate) fn advance<K, A, S>(
    eviction: &Eviction,
    keys: &Keys<'_, K, A, S>,
    now: impl Fn() -> u64,
    role: Role,
    rotations_owed: &mut usize,
) -> Left
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A::State: 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    let Some(ring) = keys.store.ring() else {
        return Left::Waiting;
    };
    let schedule = &eviction.schedule;
    loop {
        match schedule.stage() {
            Stage::Idle => {
                // Not within the first margin: no key taken from can be forgettable
                // before it, and an early rotation only makes new keys look in the
                // old map (a limiter counts as rotated at its epoch).
                let due = match role {
                    Role::Manual => *rotations_owed > 0,
                    _ if schedule.room_wanted() => eviction.automatic && ring.young_len() > 0,
                    _ => {
                        eviction.automatic
                            && ring.young_len() >= MIN_SWEEP_KEYS
                            && now() >= eviction.margin
                    }
                };
                if !due {
                    return Left::Waiting;
                }
                if !ring.rotate() {
                    // The insertions of the drain's flip are not all done (a moment).
                    if role == Role::Request {
                        return Left::Waiting;
                    }
                    yield_now();
                    continue;
                }
                *rotations_owed = rotations_owed.saturating_sub(1);
                schedule.rotated(now());
                schedule.set_stage(Stage::Claims);
            }
            Stage::Claims => {
                if ring.close_claims() {
                    schedule.set_stage(Stage::Aging);
                    if role == Role::Request {
                        // The old map may have been left mid-resize: the thread's to
                        // finish while it ages (`Eviction::work`).
                        return Left::ForTheThread;
                    }
                } else if role == Role::Request {
                    // Not a request's to wait for: the thread's, which yields until
                    // they are done (if no request came after this one, nothing else
                    // would take the cycle on).
                    return Left::ForTheThread;
                } else {
                    // Insertions begun before the rotation: each one papaya insertion.
                    yield_now();
                }
            }
            Stage::Aging => {
                let now = now();
                let rotated = schedule.rotated_at();
                // A clock that stepped back is not waited for: the watermark keeps its
                // lagging readings exact, and a margin of them may never come.
                let aged = now >= rotated.saturating_add(eviction.margin) || now < rotated;
                // At the key cap, room now: what was touched lately is relocated.
                if !aged && role != Role::Manual && !schedule.room_wanted() {
                    return Left::Waiting;
                }
                let at = now.saturating_sub(eviction.margin);
                eviction.watermark.raise(at);
                schedule.drain_from(at);
                if !ring.insertions().flip() {
                    // Claims closed only once the rotation's flip settled: unreachable
                    // but harmless.
                    return Left::Waiting;
                }
                schedule.set_stage(Stage::Settling);
            }
            Stage::Settling => {
                if !ring.insertions().settled() {
                    if role == Role::Request {
                        // As for claims: the thread waits for them.
                        return Left::ForTheThread;
                    }
                    yield_now();
                    continue;
                }
                // Opening the drain finishes a resize of the old map that the thread
                // did not finish while it aged (papaya's pass does, waiting for other
                // threads' parts of the copy): the thread's work (a request asks for
                // it, starting the thread if it is not yet), unless there is none to
                // do it, or it has not for an eighth of a margin.
                let overdue = now()
                    >= schedule
                        .drain_at()
                        .saturating_add(eviction.margin.saturating_add(eviction.margin / 8));
                if role == Role::Request && !eviction.sweeper.absent() && !overdue {
                    return Left::ForTheThread;
                }
                ring.open_drain();
                schedule.set_stage(Stage::Draining);
            }
            Stage::Draining => {
                if ring.finish_drain() {
                    // Drained (by the thread's steps or requests' shares).
                    schedule.set_stage(Stage::Idle);
                    schedule.room_made();
                    continue;
                }
                // A drain whose regions are all done with entries left (keys moving to
                // a new quota, or relocated by requests as a pass went by) takes
                // another pass; this opens it (and does nothing while regions are
                // left). The thread's work, unless there is no thread.
                if role != Role::Request || eviction.sweeper.absent() {
                    ring.open_drain();
                }
                return match role {
                    // Requests drain by their shares (`Eviction::share`).
                    Role::Request => Left::ForTheThread,
                    _ => Left::Draining,
                };
            }
        }
    }
}

/// Drains the open drain in chunks until it is over, or no region is left to take
/// (regions all done with entries left: the schedule opens another pass), or `stop`
/// says so; `breathe` between chunks, holding nothing of the store.
pub(crate) fn drain_out<K, A, S>(
    eviction: &Eviction,
    keys: &Keys<'_, K, A, S>,
    mut breathe: impl FnMut(),
    stop: impl Fn() -> bool,
) where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A::State: 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    loop {
        let drained = drain(eviction, keys, CHUNK, true);
        if drained.done || stop() {
            return;
        }
        if !drained.open && drained.forgotten + drained.relocated == 0 {
            // Nothing to take: the last regions are done (by others, or with entries
            // left); the caller's next step of the schedule settles which. A share
            // may be between finishing the last region and saying so: the yield lets
            // it (a caller that comes straight back must not spin on it).
            yield_now();
            return;
        }
        breathe();
    }
}

/// Up to `budget` steps of the drain under way, forgetting what is forgettable as of
/// the instant the drain was opened for; counted in the limiter's tally.
pub(crate) fn drain<K, A, S>(
    eviction: &Eviction,
    keys: &Keys<'_, K, A, S>,
    budget: usize,
    wait: bool,
) -> Drained
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A::State: 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    let Some(ring) = keys.store.ring() else {
        return Drained::default();
    };
    let judge = |state: &A::State| -> Retirement {
        // Read under the drain's lock, which the drain's opener took after recording
        // it: the instant of the drain under way, or an earlier one (never later).
        let at = eviction.schedule.drain_at();
        keys.algorithm.retire_if_forgettable(state, at)
    };
    let drained = ring.drain(budget, wait, judge, &Relocator::<A, K>::of(keys.algorithm));
    eviction.tally.forgot(drained.forgotten);
    drained
}
