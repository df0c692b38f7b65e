//! Bounded memory: keyed limiters forget keys that carry no information. This module
//! holds the protocol, when it runs and who runs it; how to use it is in
//! [`guide::bounded_memory`](crate::guide::bounded_memory).
//!
//! # Which keys are forgotten
//! A key is forgotten only when its state is *forgettable* as of `now - margin`: from
//! then on, every request would answer exactly as it would on a brand-new key, and
//! leave the same state behind. For the token bucket that is a bucket already full
//! at that instant (full again at a grid point no later than it); for the other
//! algorithms, the equivalent (see each algorithm's `forgettable`). A throttled key
//! is never forgotten, so forgetting never hands a client a fresh allowance. Forgetting
//! never changes a decision, reconfigured or not: a key whose quota changed since its
//! last request is judged by its own rules, and a key with its whole allowance moves
//! to a new quota as a new key would (see [`crate::per_key`]), so forgetting it first
//! makes no difference.
//!
//! # Why forgetting is exact
//! A thread may already hold a key's state when it is forgotten. If that thread then
//! took a token from the forgotten state while the next request created a fresh one,
//! the client would get more than its limit. So no live state is ever dropped:
//!
//! 1. the *watermark* is raised to `now - margin`, and the insertions that began
//!    before are waited out (the handshake of `store/insertions.rs`);
//! 2. each forgettable state is *retired*: a compare-and-set from the value checked to
//!    a marker no state uses (`RETIRED`), which succeeds only if nobody changed the
//!    state since, and after which nobody can;
//! 3. retired states are removed from the store.
//!
//! A request that meets a retired state looks again and finds the key absent (or a
//! fresh state). Exactly one of "the state is retired" and "a request changes it" wins
//! the compare-and-set, so no request is ever applied to a forgotten state. And the
//! forgotten state and a fresh one answer every reading at or after the watermark
//! identically; a request whose clock reading is older than the watermark (a reading
//! taken before a long preemption, or on a core whose clock lags by more than the
//! margin) uses the watermark as its reading instead — a legitimate, slightly later
//! reading — so stale readings never meet a fresh state. A new key's first request is
//! applied to its state before the state is stored, at the watermark as read after
//! its insertion registered; a forgetting that raised the watermark later waits for
//! that insertion to be done before it retires anything. Model-checked in
//! `loom-tests/tests/eviction.rs` (models 6, 11, 11t, 16, each with a mutant).
//!
//! # The ring's cycle
//! The default store is a ring of three papaya maps (`store/ring/`): new keys go to the
//! young map, and a key still found in the old one is relocated into the young one by
//! the request that finds it. Forgetting is a cycle:
//!
//! 1. **rotate** — once the young map holds [`MIN_SWEEP_KEYS`] keys (any, when a
//!    request at the cap asked for room), the last drain is over and the first margin
//!    has passed: the young map becomes old, the spare young;
//! 2. **claims close** — as soon as the insertions begun before the rotation are done
//!    (a new key's insertion meanwhile first claims its place in the old map, so that
//!    none of them can give a key a second state);
//! 3. **age** — for one margin (skipped by `evict_idle` and when the cap asked for
//!    room), so that a state that already carried no information at the rotation, and
//!    was not touched since, is forgettable when the old map drains (keys that are
//!    touched move to the young map at their next request); meanwhile the sweeper
//!    thread finishes a resize the old map was left in (papaya grows a table through
//!    the writes that follow, and none follow now), so that the drain opens without a
//!    copy to make first;
//! 4. **raise the watermark** to `now - margin` and wait out the insertions begun
//!    before (the protocol above);
//! 5. **drain** the old map, in regions that threads take in turn (each region a
//!    class of its entries, walked by its own pass over the whole map, so that
//!    opening a drain places nothing): each state retired and removed if
//!    forgettable, else relocated into the young map and removed. Once
//!    every region is done and the old map is empty, the schedule's holder ends the
//!    drain (only it changes the view), and the next rotation may come; entries left
//!    (a key moving to a new quota as the pass went by) take another pass.
//!
//! Forgetting a key so costs its visit in a pass over the old map (no lookup of it, no
//! removal from the young one; each region's pass steps over the other regions'
//! entries), and the keys held are those of about the last two to three margins, at
//! one request thread or two (`results/memory-stream.md`): memory follows the keys that carried information
//! lately, whatever the stream of new keys. A clock that steps back is not waited for;
//! one that stands still ages nothing (no key it has seen taken from can become
//! forgettable). The ring's steps are model-checked in `loom-tests/tests/ring.rs`
//! (models 18–20: a relocation racing takes, a new key at a rotation, a peek racing a
//! relocation, each with mutants).
//!
//! # Who does the work — and what a request pays
//! The limiter's own sweeper thread (`sweeper.rs`, started lazily, stopped and joined
//! when the limiter is dropped) takes every step of the cycle and drains in chunks,
//! giving up its CPU between them. A request never waits for the thread (the one
//! request that opens a drain the thread left overdue may wait inside papaya for the
//! old map's resize to finish, below):
//!
//! - about one insertion in [`SIZE_SAMPLE`] (a per-thread random draw) takes the
//!   cycle's cheap steps itself (a rotation, closing claims, raising the watermark,
//!   ending a drain: each a few atomic operations, none of which waits) if no one else
//!   holds the schedule (it only tries), and wakes the thread — starting it on first
//!   use — for the rest, waits for other threads' insertions included;
//! - while the old map drains, every new key's insertion drains a share of it
//!   (`cycle::SHARE` entries), unless other threads hold every region left at that
//!   moment: then the share is owed, and paid with the thread's next share that gets
//!   a region (at most `cycle::MAX_SHARE` entries in one). So the old map empties as
//!   fast as the young one fills, whatever the thread gets of the CPU (two request
//!   threads on two cores leave it little);
//! - a share that finishes a region leaves the region's pass to the thread (waking
//!   it) rather than dropping it: the pass's epoch guard, held since the drain
//!   opened, held back the frees of everything retired meanwhile, and the thread
//!   that ends it frees them all (under churn, a margin's forgotten keys: a request
//!   that did took up to 0.67 s in one call, `results/issue-45.md`);
//! - closing a rotation's claims wakes the thread (starting it on first use) to
//!   finish the old map's resize while it ages;
//! - opening a drain (papaya's pass, which finishes a resize the old map is still in,
//!   helping other threads' parts of its copy) is the thread's, unless the limiter
//!   has none (its start failed, or a drain panicked and ended it) or the thread has
//!   not opened it an eighth of a margin after it became due; then the insertion that
//!   finds it due takes it: the one request's work that is not bounded by a few
//!   entries (when the thread never finished the resize), the price of a bound on
//!   memory when the thread gets no CPU at all.
//!
//! # The word store's sweeps
//! The opt-in word store (`Builder::word_store`, `store/words/`) forgets in place, by
//! passes over its segments (`sweep.rs`). A pass is due when the store holds twice
//! the keys the last one kept (at least [`MIN_SWEEP_KEYS`]), once one could forget
//! something: not before a margin has passed since the earliest instant at which a
//! kept key becomes forgettable, nor since the last pass began, whichever is first.
//! Who does the work:
//!
//! - **opening** — the watermark raised to `now - margin` and the insertion handshake
//!   flipped, then, once the insertions begun before are done, the pass published
//!   with that instant: a few atomic operations, with no resize to finish first (the
//!   ring's reason to leave its opening to the thread), so a sampled insertion that
//!   finds a pass due takes these steps itself if the schedule is free (it only
//!   tries), looking again at a later sampled insertion while the insertions are not
//!   done, and asks the thread, which waits them out where a request would not;
//! - **the pass** — while one is open, every new key's insertion takes a share (two
//!   groups of a segment, up to 16 keys, in the first of up to four segments from a
//!   shared hint that no one holds and the pass has not finished: `try_lock` only,
//!   never a wait), and the sweeper thread walks every segment the shares have not
//!   finished, from the last, eight groups per hold of a segment's lock, pausing
//!   between holds (it holds the schedule only to open and close, not while it
//!   walks). Each segment's place in the pass is kept under its lock, and whoever
//!   judges its last group counts what it kept in the pass, once. So a stream of new
//!   keys pays for its own forgetting whatever the thread gets of the CPU (two request
//!   threads on two cores leave it little);
//! - **closing** — once every segment is finished, whoever holds the schedule next (a
//!   sampled insertion, or the thread after its walk) closes the pass and schedules
//!   the next from what it kept.
//!
//! A pass forgets as of the instant it was opened with, which the thread's walk
//! moves up every 256 keys it judges (raising the watermark and waiting out the
//! insertions first, when the schedule is free), so a long pass also forgets keys
//! that went idle while it ran. `evict_idle`, and a request at the cap with no
//! thread, finish the pass under way and walk a whole new one themselves. Without a
//! thread (its start failed), new keys' shares sweep every pass. The word store's
//! segments and their growth are its own (`store/words/`). Shares and the walk are
//! run whole under shuttle (`shuttle-tests/tests/word_sweeps.rs`: two threads' shares
//! and the thread's walk against a request whose reading lags, with a mutant whose
//! shares judge as of their own reading, which the model catches); that each segment
//! is counted once per pass, a growth mid-pass included, is the store's unit tests'.

//! # The key cap
//! The bound that holds whatever the thread does, on either store, is `max_keys`: at
//! the cap a new key is answered at once by the [`Overflow`] policy, never stored and
//! never waited on, and asks for room (automatic forgetting only) at most once per
//! margin and never more often than once a millisecond. The settings — the
//! margin, presizing, the store, `manual_eviction()` with [`BackgroundSweeper`], and the
//! cap — are in [the guide](crate::guide::bounded_memory), which also says which store
//! to pick.
//!
//! What a forgotten key costs, and the memory a stream of new keys leaves behind, are
//! measured in `results/` (`benches/memory.rs`).

// The public types of these modules are named once, at the crate root (`lib.rs`).
pub(crate) mod cap;
mod cycle;
mod schedule;
pub(crate) mod stats;
mod sweep;
pub(crate) mod sweeper;
mod watermark;

pub(crate) use cap::{Overflow, SharedAllowance};
pub use schedule::MIN_SWEEP_KEYS;
pub(crate) use stats::KeyStats;
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
pub(crate) use sweeper::BackgroundSweeper;
pub(crate) use sweeper::Sweeper;
pub(crate) use watermark::Watermark;

use crate::algorithm::Algorithm;
use crate::store::{KeyedStore, Pass};
use crate::sync::{AtomicU64, Ordering};
use cycle::{Left, Role};
use schedule::{Schedule, Stage};
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

/// Insertions look at the store's size about once in this many (a per-thread random
/// draw).
pub const SIZE_SAMPLE: u32 = 64;

/// Whether this insertion is one of the one-in-[`SIZE_SAMPLE`] that look at the size.
/// Never under loom: its models forget on demand, and a counter kept across their
/// executions would make them nondeterministic.
#[cfg(turnstile_loom)]
#[inline]
fn sampled() -> bool {
    false
}

/// Whether this insertion looks at the size: every one under shuttle, so that its
/// tests' few insertions reach the cycle, and a failing schedule replays (a draw kept
/// across executions would differ between the run and the replay).
#[cfg(turnstile_shuttle)]
#[inline]
fn sampled() -> bool {
    true
}

/// Whether this insertion is one of the one-in-[`SIZE_SAMPLE`] that look at the size:
/// a per-thread xorshift draw, so that no limiter is left out by phase (a thread that
/// inserts into two limiters in turn would starve one of them with a counter) and a
/// short-lived thread samples as often as a long-lived one.
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
#[inline]
fn sampled() -> bool {
    thread_local! {
        static STATE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    STATE.with(|state| {
        let mut x = state.get();
        if x == 0 {
            // Seeded from this thread's slot address: distinct per thread, never 0.
            x = (state as *const _ as usize as u32) | 1;
        }
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        state.set(x);
        x % SIZE_SAMPLE == 0
    })
}

/// How a keyed limiter forgets keys; set through the builder.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EvictionSettings {
    pub(crate) margin: Duration,
    pub(crate) automatic: bool,
    pub(crate) max_keys: Option<(usize, Overflow)>,
}

impl Default for EvictionSettings {
    fn default() -> Self {
        Self {
            margin: Duration::from_secs(1),
            automatic: true,
            max_keys: None,
        }
    }
}

/// A keyed limiter's keys as forgetting sees them: its store and its algorithm.
pub(crate) struct Keys<'a, K, A: Algorithm<K>, S: BuildHasher> {
    pub(crate) store: &'a KeyedStore<K, A::State, S>,
    pub(crate) algorithm: &'a A,
}

/// Keys forgotten and requests overflowed, so far.
struct Tally {
    evicted: AtomicU64,
    overflowed: AtomicU64,
}

impl Tally {
    fn forgot(&self, keys: usize) {
        if keys > 0 {
            // Relaxed: a statistic.
            self.evicted.fetch_add(keys as u64, Ordering::Relaxed);
        }
    }
}

/// A keyed limiter's forgetting: its settings, its watermark, its schedule, its tally
/// and its sweeper thread.
pub(crate) struct Eviction {
    /// Only keys forgettable as of `now - margin` are forgotten (nanoseconds).
    margin: u64,
    /// Whether keys are forgotten without `evict_idle` (not `manual_eviction()`).
    automatic: bool,
    /// The key cap (`usize::MAX`: none).
    pub(crate) max_keys: usize,
    watermark: Watermark,
    schedule: Schedule,
    /// The word store's pass of forgetting, open or last closed.
    pass: Pass,
    tally: Tally,
    /// The limiter's own sweeper thread.
    pub(crate) sweeper: Sweeper,
}

impl Eviction {
    /// The forgetting of a limiter built with `settings`, expecting `expected_keys`,
    /// whose thread is `sweeper`.
    pub(crate) fn new(settings: &EvictionSettings, expected_keys: usize, sweeper: Sweeper) -> Self {
        let margin = crate::clock::duration_to_nanos(settings.margin);
        Self {
            margin,
            automatic: settings.automatic,
            max_keys: settings.max_keys.map_or(usize::MAX, |(n, _)| n),
            watermark: Watermark::new(),
            schedule: Schedule::new(margin, expected_keys),
            pass: Pass::new(),
            tally: Tally {
                evicted: AtomicU64::new(0),
                overflowed: AtomicU64::new(0),
            },
            sweeper,
        }
    }

    /// `now` raised to the watermark (see [`Watermark::reading`]).
    #[inline(always)]
    pub(crate) fn reading(&self, now: u64) -> u64 {
        self.watermark.reading(now)
    }

    /// Keys forgotten so far, and requests that met the cap with nothing to forget.
    pub(crate) fn tally(&self) -> (u64, u64) {
        // Relaxed: statistics.
        (
            self.tally.evicted.load(Ordering::Relaxed),
            self.tally.overflowed.load(Ordering::Relaxed),
        )
    }

    /// After a new key's insertion at `now`: a share of the drain (the word store: the
    /// pass) under way, and on about one in [`SIZE_SAMPLE`] the cycle's (the word
    /// store's schedule's) cheap steps (see the module docs).
    #[inline]
    pub(crate) fn after_insertion<K, A, S>(&self, keys: &Keys<'_, K, A, S>, now: u64)
    where
        A: Algorithm<K>,
        K: Hash + Eq + Clone + Send + Sync + 'static,
        A::State: 'static,
        S: BuildHasher + Clone + Send + Sync + 'static,
    {
        if self.schedule.stage() == Stage::Draining {
            self.share(keys, now);
        }
        if sampled() {
            self.upkeep(keys, now);
        }
    }

    /// A new key's share of the drain (the word store: the pass) under way.
    #[cold]
    fn share<K, A, S>(&self, keys: &Keys<'_, K, A, S>, now: u64)
    where
        A: Algorithm<K>,
        K: Hash + Eq + Clone + Send + Sync + 'static,
        A::State: 'static,
        S: BuildHasher + Clone + Send + Sync + 'static,
    {
        if keys.store.words().is_some() {
            if !self.pass.is_open() {
                return;
            }
            // Not under loom, whose stand-in for the word store takes no share (the
            // shuttle tests check the real one's).
            #[cfg(not(turnstile_loom))]
            sweep::share(self, keys, now);
            let _ = now;
            return;
        }
        thread_local! {
            /// Entries this thread's skipped shares owe (see `cycle::MAX_SHARE`), paid
            /// to whichever drain it next gets a region of.
            static OWED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        }
        let owed = OWED.with(std::cell::Cell::get);
        let budget = (cycle::SHARE + owed).min(cycle::MAX_SHARE);
        let drained = cycle::drain(self, keys, budget, false);
        OWED.with(|cell| cell.set(if drained.busy { budget } else { 0 }));
        if drained.spent {
            // The region this share finished leaves its pass to the thread, whose
            // release frees what the pass's guard held back (`store/ring/`'s `Slot`);
            // with manual forgetting, to `evict_idle`, which releases it at its end.
            // When the thread is gone, the request releases it: the fallback's price.
            if self.automatic && !self.sweeper.absent() {
                self.sweeper.request();
            } else if self.automatic
                && let Some(ring) = keys.store.ring()
            {
                ring.release_spent();
            }
        }
    }

    /// A sampled insertion's look at the schedule: the cycle's cheap steps if no one
    /// holds it, the sweeper thread asked for the rest.
    #[cold]
    #[inline(never)]
    fn upkeep<K, A, S>(&self, keys: &Keys<'_, K, A, S>, now: u64)
    where
        A: Algorithm<K>,
        K: Hash + Eq + Clone + Send + Sync + 'static,
        A::State: 'static,
        S: BuildHasher + Clone + Send + Sync + 'static,
    {
        if !self.automatic {
            return;
        }
        if let Some(words) = keys.store.words() {
            if crate::store::InPlace::wants_preparation(words) {
                // The store's next memory, made ready by the sweeper thread before
                // requests reach it (the word store: segments' tables grown ahead and
                // drained).
                self.sweeper.request_preparation();
            }
            // The schedule's cheap steps (a pass opened, once its insertions are
            // done, or closed), and the thread asked for its walk (or, when it has
            // none, new keys' shares sweep the whole pass).
            let Some(_held) = self.schedule.try_lock() else {
                // Its holder may have looked before this key made a pass due: the
                // thread is asked, so that the pass is not left for a later look.
                if self.schedule.sweep_due(keys.store.len(), now) {
                    self.sweeper.request();
                }
                return;
            };
            if sweep::advance(self, keys, now, Role::Request) != Left::Waiting {
                self.sweeper.request();
            }
            return;
        }
        let Some(_held) = self.schedule.try_lock() else {
            return;
        };
        if cycle::advance(self, keys, || now, Role::Request, &mut 0) == Left::ForTheThread {
            self.sweeper.request();
        }
    }

    /// The sweeper thread's work on a wake-up: the cycle as far as it goes now, or
    /// the word store's sweep. `breathe` is called where the thread holds nothing of
    /// the store, and may yield its CPU there. Returns how many keys it forgot, and
    /// how long it took, if it forgot any; `None` once the limiter is being dropped.
    #[cfg_attr(turnstile_loom, allow(dead_code))]
    pub(crate) fn work<K, A, S>(
        &self,
        keys: &Keys<'_, K, A, S>,
        now: impl Fn() -> u64,
        breathe: impl FnMut(),
    ) -> Option<(usize, Duration)>
    where
        A: Algorithm<K>,
        K: Hash + Eq + Clone + Send + Sync + 'static,
        A::State: 'static,
        S: BuildHasher + Clone + Send + Sync + 'static,
    {
        let started = std::time::Instant::now();
        let before = self.tally().0;
        if keys.store.words().is_some() {
            // The schedule held for its steps only, not for the walk: requests close
            // a pass their shares finished, and open the next, meanwhile.
            let left = {
                let _held = self.schedule.lock();
                sweep::advance(self, keys, now(), Role::Thread)
            };
            if left == Left::Draining {
                let mut breathe = breathe;
                sweep::walk(self, keys, &now, false, || {
                    breathe();
                    !self.sweeper.stopping()
                });
                let _held = self.schedule.lock();
                // The pass closed, and the next opened if it is due already: then the
                // thread comes back for its walk, asked now.
                if sweep::advance(self, keys, now(), Role::Thread) == Left::Draining {
                    self.sweeper.request();
                }
            }
        } else {
            // The schedule held for its steps only, not for the drain, which has its
            // own locks: one cycle's drain a wake-up, and the next cycle when a
            // request finds it due. One reading for each turn of steps, whatever stage
            // it finds, taken once the schedule is held: a reading taken before could
            // be older than a rotation another holder recorded meanwhile, and would
            // read as a clock stepped back (which ends the aging at once).
            let advance = || {
                let _held = self.schedule.lock();
                let at = now();
                cycle::advance(self, keys, || at, Role::Thread, &mut 0)
            };
            // The passes of regions requests' shares finished (what their guards
            // held back freed here, not on a request): first, and again after a
            // drain, whose last regions are often a share's.
            let release = || {
                if let Some(ring) = keys.store.ring() {
                    ring.release_spent();
                }
            };
            release();
            match advance() {
                Left::Draining => {
                    cycle::drain_out(self, keys, breathe, || self.sweeper.stopping());
                    release();
                    // The drain ended (or another pass opened, for entries left): then
                    // the thread comes back for that pass on its next wake-up, asked
                    // now.
                    if advance() == Left::Draining {
                        self.sweeper.request();
                    }
                }
                Left::Waiting if self.schedule.stage() == Stage::Aging => {
                    // A resize the old map was left in, finished while it ages (a
                    // copy of the map at worst), rather than when its drain opens,
                    // where a starved thread held every share off until it was done
                    // (2 request threads on 2 cores: up to 1.7 margins of new keys
                    // meanwhile). Without the schedule: nothing writes the old map
                    // once its claims are closed, and requests may take the cycle's
                    // steps meanwhile.
                    if let Some(ring) = keys.store.ring() {
                        ring.finish_old_resize();
                    }
                }
                Left::Waiting | Left::ForTheThread => {}
            }
        }
        if self.sweeper.stopping() {
            return None;
        }
        let forgotten = (self.tally().0 - before) as usize;
        Some((forgotten, started.elapsed()))
    }

    /// Room at the cap made on this request, for a limiter whose thread is gone (the
    /// OS refused one, or a drain panicked and ended it): no new key is inserted at
    /// the cap, so no share would ever drain, and this is the one request in a margin
    /// that asks. It does the thread's work — a word store's sweep, or the ring's
    /// cycle as far as a drain and the drain itself — unless another thread holds the
    /// schedule (never waited for); a fallback, unbounded as the thread's work is.
    #[cold]
    fn make_room_here<K, A, S>(&self, keys: &Keys<'_, K, A, S>, now: u64)
    where
        A: Algorithm<K>,
        K: Hash + Eq + Clone + Send + Sync + 'static,
        A::State: 'static,
        S: BuildHasher + Clone + Send + Sync + 'static,
    {
        if keys.store.words().is_some() {
            if let Some(_held) = self.schedule.try_lock() {
                sweep::sweep(self, keys, || now, || {});
            }
            return;
        }
        // At most two turns: the drain, then its end (and perhaps the next rotation).
        for _ in 0..2 {
            let left = {
                let Some(_held) = self.schedule.try_lock() else {
                    return;
                };
                cycle::advance(self, keys, || now, Role::Thread, &mut 0)
            };
            if left != Left::Draining {
                return;
            }
            cycle::drain_out(self, keys, || {}, || false);
        }
    }

    /// Forgets every key whose state has carried no information for the margin, now;
    /// returns how many. Waits for a cycle or sweep under way, and for the insertions
    /// it must. `pause` as for the word store's `sweep_walk`.
    pub(crate) fn evict_idle<K, A, S>(
        &self,
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
        let _held = self.schedule.lock();
        if keys.store.words().is_some() {
            return sweep::sweep(self, keys, now, pause);
        }
        let before = self.tally().0;
        // Any cycle under way finished, then one more begun now, so that every key
        // held now is judged as of now; the schedule held throughout.
        let mut rotations_owed = 1;
        let mut pause = pause;
        while cycle::advance(self, keys, &now, Role::Manual, &mut rotations_owed) == Left::Draining
        {
            cycle::drain_out(self, keys, &mut pause, || false);
        }
        if let Some(ring) = keys.store.ring() {
            // The passes of regions requests' shares finished meanwhile.
            ring.release_spent();
        }
        (self.tally().0 - before) as usize
    }

    /// A new key at the cap at `now`: asks for room (at most once per margin, so an
    /// attack at the cap cannot keep the sweeper busy), counts the overflow, and
    /// answers by the `overflow` allowance at `reading`, or `Decision::Overflow`.
    #[cold]
    pub(crate) fn at_cap<K, A, S>(
        &self,
        keys: &Keys<'_, K, A, S>,
        now: u64,
        cost: u32,
        overflow: Option<&SharedAllowance>,
    ) -> crate::Decision
    where
        A: Algorithm<K>,
        K: Hash + Eq + Clone + Send + Sync + 'static,
        A::State: 'static,
        S: BuildHasher + Clone + Send + Sync + 'static,
    {
        let period = self.margin.max(1_000_000);
        if self.automatic && self.schedule.cap_sweep_allowed(now, period) {
            self.schedule.want_room();
            if !self.sweeper.request() {
                self.make_room_here(keys, now);
            }
        }
        // Relaxed: a statistic.
        self.tally.overflowed.fetch_add(1, Ordering::Relaxed);
        let retry_after = self.schedule.next_cap_sweep_in(now, period);
        match overflow {
            Some(shared) => match shared.acquire(self.reading(now), cost) {
                crate::Decision::Overflow { .. } => crate::Decision::Overflow {
                    retry_hint: retry_after,
                },
                decision => decision,
            },
            None => crate::Decision::Overflow {
                retry_hint: retry_after,
            },
        }
    }
}
