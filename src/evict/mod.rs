//! Bounded memory: keyed limiters forget keys that carry no information. This module
//! holds the protocol and when it runs; how to use it is in
//! [`guide::bounded_memory`](crate::guide::bounded_memory).
//!
//! # Which keys are forgotten
//! A key is forgotten only when its state is *forgettable* as of `now - margin`: from
//! then on, every request would answer exactly as it would on a brand-new key, and
//! leave the same state behind. For the token bucket that is a bucket already full
//! at that instant (full again at a grid point no later than it); for the other
//! algorithms, the
//! equivalent (see each algorithm's `forgettable`). A throttled key is never
//! forgotten, so forgetting never hands a client a fresh allowance. Forgetting never
//! changes a decision, reconfigured or not: a key whose quota changed since its last
//! request is judged by its own rules, and a key with its whole allowance moves to a
//! new quota as a new key would (see [`crate::per_key`]), so forgetting it first makes
//! no difference.
//!
//! # The protocol, and why it is exact
//! A thread may already hold a key's state word when the sweeper removes it. If that
//! thread then took a token from the removed word while the next request created a
//! fresh one, the client would get more than its limit. So the sweeper never removes a
//! live word:
//!
//! 1. it raises the limiter's *watermark* to `now - margin`;
//! 2. for each forgettable word, it compare-and-sets the word from the value it
//!    checked to `RETIRED` (a value no state uses) — this succeeds only if nobody
//!    changed the word since, and after it nobody can;
//! 3. it removes retired entries from the store — every one it meets, whoever retired
//!    it (the store may show it an entry twice). A word frozen while its key moves to
//!    a new quota carries a marker of its own, `MOVED`, and is never removed: its
//!    mover replaces it.
//!
//! An acquirer whose load or CAS finds `RETIRED` helps remove the entry and looks the
//! key up again, finding or inserting a fresh state. Exactly one of "the sweeper
//! retires the word" and "an acquirer changes it" wins the CAS, so no update is ever
//! applied to a forgotten word. And the forgotten state and the fresh one answer every
//! reading at or after the watermark identically; a request whose clock reading is
//! older than the watermark (a reading taken before a long preemption, or on a core
//! whose clock lags by more than the margin) uses the watermark as its reading instead
//! — a legitimate, slightly later reading — so stale readings never meet a fresh state.
//!
//! **Invariant:** every word a request changes is one that the store held and that was
//! not retired at that moment (or, for a new key's first request, the word it is
//! about to store, before any other thread can see it), and every request's reading
//! is at least the watermark of any forgetting it can observe. A new key's first
//! request takes no lock to keep this: it registers its insertion before it reads the
//! watermark, and a sweep waits for the insertions registered before it raised the
//! watermark before it retires anything (`src/evict/insertions.rs`). Model-checked in
//! `loom-tests/tests/eviction.rs`: model 6 with a mutant that removes without
//! retiring, model 11 (the retire's Release, or the sweep's fence after the raise,
//! publishing the watermark to the reader's Acquire fence) with a mutant that has
//! neither, model 16 (a new key's first request, applied before its state is
//! published, against a sweep that forgets the key) with mutants that read the
//! watermark before registering and that sweep without waiting, and model 11t (model
//! 11 through `try_acquire`'s loop, `admit_word`) with a mutant that skips its
//! Acquire fence; loom rejects all five.
//!
//! # When sweeping happens — and why no request pays for it
//! A sweep is due when the store holds twice the keys the last sweep kept (at least
//! [`MIN_SWEEP_KEYS`] keys), once it could forget something: not before a margin has
//! passed since the earliest instant at which a key the last sweep kept becomes
//! forgettable (each algorithm's `forgettable_from`), nor since the instant that
//! sweep began, whichever is first. A request that takes something leaves its key
//! forgettable only after its reading, so no sweep before that could forget a key
//! taken from since; a key left as good as new (a first request denied or of cost 0,
//! a take refunded) or taken from at a lagging reading may wait those extra moments —
//! at most one margin after the last sweep began. A limiter counts as swept at its
//! epoch, keeping nothing: while it fills in its first margin, or while a crowd of new
//! keys arrives at a limiter whose every key is recent, no sweep runs, since none could
//! forget a key that was taken from (each doubling of the store used to sweep it in
//! vain; results/ANALYSIS.md, "Sweeps that cannot forget"). A clock that stands still
//! or steps back (a reading no later than the last sweep's start) is not waited for:
//! sweeps are then due by size alone, as before. An insertion that finds a sweep due
//! only asks the limiter's own sweeper thread for it (started lazily with the first
//! request for a sweep, or for the preparation of the word store's next tables, named
//! `turnstile-sweeper`, stopped and joined when the limiter is dropped): **the
//! per-request bound is zero keys visited.** Insertions look at the store's size on about
//! one in [`SIZE_SAMPLE`] insertions (a per-thread random draw; counting sums sixteen
//! per-thread cells), so a sweep is asked for a few dozen insertions late.
//!
//! On the default store (papaya, `src/store/papaya.rs`) the sweeper asks about every
//! key and removes those it retired with no lock, and so does every request: a
//! lookup, a new key's insertion, the removal of a forgotten state it meets. papaya
//! frees a removed entry through its epoch-based reclamation once no reader can hold
//! it, on whichever thread's reclamation batch it falls in, and grows by itself, each
//! insertion during a resize copying a chunk of 8 slots. A sweep waits for the new
//! keys' insertions that were in flight when it began (each one papaya insertion);
//! no request waits for a sweep. A limiter built with `expected_keys(n)` starts with
//! the table for `n` keys and meets no growth below that.
//!
//! The opt-in word store (`Builder::word_store`, `src/store/words/`) keeps the four
//! single-word algorithms' keys and words side by side in 1,024 segments, each a
//! table of its own, under segment locks: an insertion, a removal, a step of a growth
//! and a sweep's removals each hold one. A
//! forgotten key's slot is marked removed, never reused in its table, and left behind
//! when the segment's table next grows (to a table sized for the keys it holds then:
//! smaller, after a sweep that forgot many). **Per request, its growth costs at most
//! the move of one group of 8 keys and, when its segment's table is full, the
//! allocation of the next one** — of up to about 3,500 keys of room (68 KB for `u64`
//! keys, its pages touched at once), while the sweeper thread keeps up: from 2,048
//! keys of room on it grows a segment's table ahead (at 3/4 full; allocated and its
//! pages touched without the segment's lock) and drains the outgrown one; a table
//! that fills first grows on the request that finds it full. A growth publishes the
//! new table and leaves the old one draining: every insertion into the segment first
//! moves one group of it (with a sweeper thread, only when the drain falls behind),
//! freezing each word (`RETIRED`) before it copies it; the last move unpublishes the
//! old table, which that request's thread frees once no lookup holds it (keys that
//! own memory are dropped with it). No request holds a segment's lock longer than
//! one such step (loom model 17; results/ANALYSIS.md, "A growth that drains").
//! Without a sweeper thread (`manual_eviction()`) requests grow every table and drain
//! it a group per insertion. The sliding log's and per-key quotas' states are not
//! single words and stay in papaya on either choice.
//!
//! No request waits for a sweep, however far the thread falls behind. A thread that
//! cannot keep up (a machine overloaded, the thread starved of CPU, or churn faster
//! than one thread can sweep: on papaya a single thread streaming new keys at full
//! speed outruns it) lets the store grow past twice the active keys until it catches
//! up; an insertion that finds it four times behind only checks, without a lock,
//! that it is running. Earlier, such an insertion swept itself or waited for the
//! sweep running: on papaya that put requests to sleep for up to 1.5 s under churn
//! (results/ANALYSIS.md, "papaya by default"). The bound that holds whatever the
//! thread does is `max_keys` (below), answered at the cap without waiting. If the OS
//! refuses to start the thread (or a sweep panicked and ended it), an insertion that
//! finds a sweep due sweeps itself, unless a sweep is running, as a limiter without a
//! thread must.
//!
//! The settings — the margin, presizing, the store, `manual_eviction()` with
//! [`BackgroundSweeper`], and the `max_keys` cap with its [`Overflow`] answers — are in
//! [the guide](crate::guide::bounded_memory), which also says which store to pick.
//!
//! A sweep costs the sweeper thread about 65 ns per key kept and 110 ns per key
//! forgotten, on a 2-core EPYC VM (1M keys: 63–71 ms, 107–129 ms; results/ANALYSIS.md,
//! "A new key's barriers").

mod insertions;
pub(crate) mod maintenance;

use crate::Quota;
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, Unpoisoned};
use insertions::Insertions;
pub(crate) use insertions::Registration;
use std::time::Duration;

/// A keyed limiter's memory at a glance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyStats {
    /// Keys with state now.
    pub keys: usize,
    /// Keys forgotten so far.
    pub evicted: u64,
    /// Requests that met the `max_keys` cap with nothing to forget and went to the
    /// [`Overflow`] policy.
    pub overflowed: u64,
}

/// A store smaller than this is not swept automatically.
#[cfg(not(turnstile_shuttle))]
pub const MIN_SWEEP_KEYS: usize = 1024;
/// A store smaller than this is not swept automatically: under `--cfg turnstile_shuttle`
/// two keys, so that a shuttle test with a handful of keys reaches the sweeper thread.
#[cfg(turnstile_shuttle)]
pub const MIN_SWEEP_KEYS: usize = 2;

/// Insertions look at the store's size about once in this many (a per-thread random
/// draw).
pub const SIZE_SAMPLE: u32 = 64;

/// `next_sweep` while a requested sweep has not finished: no insertion asks again.
const REQUESTED: u64 = u64::MAX;

/// What an insertion should do about forgetting keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterInsertion {
    /// Nothing.
    Nothing,
    /// Ask the sweeper thread for a sweep (this insertion is the one that asks).
    Request,
    /// The store outgrew its bound while the requested sweep is unfinished: sweep here.
    SweepHere,
}

/// Whether this insertion is one of the one-in-[`SIZE_SAMPLE`] that look at the size.
/// Never under loom: its models sweep on demand, and a counter kept across their
/// executions would make them nondeterministic.
#[cfg(turnstile_loom)]
#[inline]
pub(crate) fn sampled() -> bool {
    false
}

/// Whether this insertion looks at the size: every one under shuttle, so that its
/// tests' few insertions ask for sweeps, and a failing schedule replays (a draw kept
/// across executions would differ between the run and the replay).
#[cfg(turnstile_shuttle)]
#[inline]
pub(crate) fn sampled() -> bool {
    true
}

/// Whether this insertion is one of the one-in-[`SIZE_SAMPLE`] that look at the size:
/// a per-thread xorshift draw, so that no limiter is left out by phase (a thread that
/// inserts into two limiters in turn would starve one of them with a counter) and a
/// short-lived thread samples as often as a long-lived one.
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
#[inline]
pub(crate) fn sampled() -> bool {
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

/// What a limiter at its `max_keys` cap does with a new key when nothing can be
/// forgotten (an attacker rotating client ids faster than buckets refill).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Fail closed: the request is answered [`Decision::Overflow`](crate::Decision::Overflow)
    /// and the key gets no state.
    Deny,
    /// Every new key that finds no room shares one overflow allowance under this
    /// quota, so unknown clients keep a small, bounded service during an attack.
    Shared(Quota),
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

/// A limiter's forgetting bookkeeping.
pub(crate) struct Watermark {
    /// Only keys forgettable as of `now - margin` are forgotten (nanoseconds).
    pub(crate) margin: u64,
    automatic: bool,
    pub(crate) max_keys: usize,
    /// Every key forgotten so far was forgettable as of this time (ns since epoch).
    watermark: AtomicU64,
    /// New keys' insertions in flight, which a sweep waits for after raising the
    /// watermark (`insertions.rs`).
    insertions: Insertions,
    /// Store size at which an insertion asks for a sweep; `REQUESTED` while one is
    /// asked for and unfinished.
    next_sweep: AtomicU64,
    /// No automatic sweep before this instant (ns since epoch): until then none could
    /// forget a key (see "When sweeping happens").
    useful_from: AtomicU64,
    /// When the last sweep began (ns since epoch): a reading no later than it means
    /// the clock stands still or stepped back, and then `useful_from` is not waited
    /// for.
    last_began: AtomicU64,
    /// Store size at which an insertion sweeps itself, the sweeper thread having fallen
    /// behind: four times the size after the last sweep, or twice the size at which
    /// the running sweep was asked for, whichever is larger.
    overloaded_at: AtomicU64,
    /// When the last sweep at the cap began (ns since epoch).
    last_cap_sweep: AtomicU64,
    /// One sweep at a time.
    lock: Mutex<()>,
    evicted: AtomicU64,
    overflowed: AtomicU64,
}

impl Watermark {
    pub(crate) fn new(settings: &EvictionSettings, expected_keys: usize) -> Self {
        let first_sweep = (2 * expected_keys).max(MIN_SWEEP_KEYS) as u64;
        Self {
            margin: crate::clock::duration_to_nanos(settings.margin),
            automatic: settings.automatic,
            max_keys: settings.max_keys.map_or(usize::MAX, |(n, _)| n),
            watermark: AtomicU64::new(0),
            insertions: Insertions::new(),
            next_sweep: AtomicU64::new(first_sweep),
            // As if a sweep had begun at the epoch and kept nothing.
            useful_from: AtomicU64::new(crate::clock::duration_to_nanos(settings.margin)),
            last_began: AtomicU64::new(0),
            overloaded_at: AtomicU64::new(2 * first_sweep),
            last_cap_sweep: AtomicU64::new(0),
            lock: Mutex::new(()),
            evicted: AtomicU64::new(0),
            overflowed: AtomicU64::new(0),
        }
    }

    /// `now` raised to the watermark: a reading older than the latest forgetting is
    /// replaced by the watermark, a later (and still past) instant.
    #[inline]
    pub(crate) fn reading(&self, now: u64) -> u64 {
        // Relaxed: callers load it after finding the key's word — through the store's
        // Acquire lookup, or the Acquire fence taken on seeing RETIRED — or, for a new
        // key's first request, after registering its insertion (the SeqCst fence in
        // `Insertions::register`): a sweep whose raise that load misses waits for the
        // insertion before it retires anything. Each orders it after the sweeper's
        // raise (sequenced before its Release retire CAS and before the removal). Any
        // older value is a watermark no fresh word depends on.
        now.max(self.watermark.load(Ordering::Relaxed))
    }

    /// Starts a sweep at `now` (or moves a running one on to it): raises the
    /// watermark, waits for the new keys' insertions that may have read the old one,
    /// and returns the instant keys must be forgettable at. The caller holds the sweep
    /// lock.
    pub(crate) fn begin(&self, now: u64) -> u64 {
        let at = now.saturating_sub(self.margin);
        // Relaxed: sequenced before every retire CAS (Release) of this sweep, which
        // publishes it, and before the phase flip (Release), which publishes it to
        // new insertions; see `reading`.
        self.watermark.fetch_max(at, Ordering::Relaxed);
        self.insertions.flip_and_wait();
        at
    }

    /// Registers a new key's insertion, before its first request reads the watermark
    /// (`reading`); held until the state is published or the insertion lost.
    #[inline]
    pub(crate) fn register_insertion(&self) -> Registration<'_> {
        self.insertions.register()
    }

    /// Records a finished sweep that began at `began`, forgot `forgotten` keys and
    /// kept `kept`, none of which is forgettable before `kept_until`: the next is due
    /// when the store has twice as many keys as it kept, and useful no earlier than a
    /// margin after `kept_until` or `began`, whichever is first.
    pub(crate) fn end(&self, forgotten: usize, kept: usize, began: u64, kept_until: u64) {
        // Relaxed: a statistic.
        self.evicted.fetch_add(forgotten as u64, Ordering::Relaxed);
        let useful_from = kept_until.min(began).saturating_add(self.margin);
        let next = (2 * kept).max(MIN_SWEEP_KEYS) as u64;
        // Relaxed: published by the Release store of `next_sweep` below.
        self.useful_from.store(useful_from, Ordering::Relaxed);
        self.last_began.store(began, Ordering::Relaxed);
        self.overloaded_at.store(2 * next, Ordering::Relaxed);
        // Release: an insertion that reads this threshold (Acquire) also reads the
        // others of this sweep, not an earlier sweep's.
        self.next_sweep.store(next, Ordering::Release);
    }

    /// What an insertion at `now` that left `len` keys should do.
    pub(crate) fn after_insertion(&self, len: usize, now: u64) -> AfterInsertion {
        if !self.automatic {
            return AfterInsertion::Nothing;
        }
        // Acquire: pairs with the Release stores of `end` and of the claim below, so
        // the thresholds read next are this sweep's (heuristics: they guard no other
        // memory, and the compare-and-set only picks the one insertion that asks).
        let next = self.next_sweep.load(Ordering::Acquire);
        let clock_moved = now > self.last_began.load(Ordering::Relaxed);
        if clock_moved && now < self.useful_from.load(Ordering::Relaxed) {
            return AfterInsertion::Nothing;
        }
        let len = len as u64;
        if len >= next {
            // The store may have grown far past `next` while no sweep could forget
            // anything: the thread is behind only once the store doubles again while the
            // sweep asked for now runs. Raised before the claim publishes it, and
            // again after it, in case a sweep ended in between and lowered it.
            self.overloaded_at.fetch_max(2 * len, Ordering::Relaxed);
            // Release: publishes the raise to insertions that see REQUESTED.
            let claimed = self.next_sweep.compare_exchange(
                next,
                REQUESTED,
                Ordering::Release,
                Ordering::Relaxed,
            );
            return match claimed {
                Ok(_) => {
                    self.overloaded_at.fetch_max(2 * len, Ordering::Relaxed);
                    AfterInsertion::Request
                }
                Err(_) => AfterInsertion::Nothing,
            };
        }
        if len >= self.overloaded_at.load(Ordering::Relaxed) {
            AfterInsertion::SweepHere
        } else {
            AfterInsertion::Nothing
        }
    }

    /// Whether sweeps run on their own (not `manual_eviction()`).
    pub(crate) fn automatic(&self) -> bool {
        self.automatic
    }

    /// Whether a new key at the cap may ask for a sweep now (at most once per margin,
    /// so an attack at the cap cannot keep the sweeper busy).
    pub(crate) fn cap_sweep_allowed(&self, now: u64) -> bool {
        // Relaxed: a rate limit on sweeping; it guards no other memory.
        let last = self.last_cap_sweep.load(Ordering::Relaxed);
        let period = self.margin.max(1_000_000);
        now.saturating_sub(last) >= period
            && self
                .last_cap_sweep
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// The wait until a request at the cap may sweep again: `Decision::Overflow`'s hint.
    pub(crate) fn next_cap_sweep_in(&self, now: u64) -> Duration {
        // Relaxed: as in `cap_sweep_allowed`.
        let last = self.last_cap_sweep.load(Ordering::Relaxed);
        let period = self.margin.max(1_000_000);
        // Saturating: near the end of the clock the next sweep is at its end.
        Duration::from_nanos(last.saturating_add(period).saturating_sub(now).max(1))
    }

    /// Holds the sweep lock, waiting for a running sweep to finish.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unpoisoned()
    }

    /// Holds the sweep lock if no sweep is running.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, ()>> {
        self.lock.try_lock().ok()
    }

    pub(crate) fn count_overflow(&self) {
        // Relaxed: a statistic.
        self.overflowed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> (u64, u64) {
        // Relaxed: statistics.
        (
            self.evicted.load(Ordering::Relaxed),
            self.overflowed.load(Ordering::Relaxed),
        )
    }
}

/// A thread that sweeps a limiter on a fixed period, from
/// [`KeyedLimiter::sweep_in_background`](crate::KeyedLimiter::sweep_in_background).
/// Dropping the handle stops the thread (and waits for it); so does dropping the
/// limiter.
// Not under shuttle either: a thread woken by wall time, which shuttle does not model
// (its tests drive sweeps through the limiter's own sweeper thread).
#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
#[derive(Debug)]
pub struct BackgroundSweeper {
    stop: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
impl BackgroundSweeper {
    /// Runs `sweep` every `period` until stopped, or until `sweep` returns false.
    pub(crate) fn spawn(
        period: Duration,
        mut sweep: impl FnMut() -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let signal = std::sync::Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("turnstile-sweeper".into())
            .spawn(move || {
                let (stopped, wake) = &*signal;
                let mut stopped = stopped.lock().unpoisoned();
                loop {
                    let (guard, _) = wake.wait_timeout(stopped, period).unpoisoned();
                    stopped = guard;
                    if *stopped {
                        return;
                    }
                    // Sweep without holding the stop flag's lock.
                    drop(stopped);
                    if !sweep() {
                        return;
                    }
                    stopped = signal.0.lock().unpoisoned();
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

#[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
impl Drop for BackgroundSweeper {
    fn drop(&mut self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unpoisoned() = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn sweeper() -> Watermark {
        Watermark::new(&EvictionSettings::default(), 0)
    }

    #[test]
    fn no_sweep_is_asked_for_before_one_could_forget_a_key() {
        let sweeper = sweeper();
        // A new limiter counts as swept at its epoch: nothing is forgettable within
        // the first margin (1 s), however large the store.
        let big = 100 * MIN_SWEEP_KEYS;
        assert_eq!(
            sweeper.after_insertion(big, SECOND - 1),
            AfterInsertion::Nothing
        );
        assert_eq!(
            sweeper.after_insertion(big, SECOND),
            AfterInsertion::Request
        );
        // The store kept growing while no sweep could run: the thread is behind only
        // once it doubles again while the sweep asked for now runs.
        assert_eq!(
            sweeper.after_insertion(2 * big - 1, SECOND),
            AfterInsertion::Nothing
        );
        assert_eq!(
            sweeper.after_insertion(2 * big, SECOND),
            AfterInsertion::SweepHere
        );
    }

    #[test]
    fn the_next_sweep_waits_for_the_first_kept_key_to_become_forgettable() {
        let sweeper = sweeper();
        // A sweep began at 10 s (forgetting what was forgettable at 9 s) and kept keys
        // forgettable from 9.5 s on at the earliest: none can be forgotten before
        // 10.5 s.
        sweeper.end(0, MIN_SWEEP_KEYS, 10 * SECOND, 9 * SECOND + SECOND / 2);
        let due = 2 * MIN_SWEEP_KEYS;
        let useful = 10 * SECOND + SECOND / 2;
        assert_eq!(
            sweeper.after_insertion(due, useful - 1),
            AfterInsertion::Nothing
        );
        assert_eq!(
            sweeper.after_insertion(due, useful),
            AfterInsertion::Request
        );
        // Kept keys forgettable only later than the sweep's start (or none kept): a
        // key written after the start could be forgettable a margin after it.
        sweeper.end(0, MIN_SWEEP_KEYS, 20 * SECOND, u64::MAX);
        assert_eq!(
            sweeper.after_insertion(due, 21 * SECOND - 1),
            AfterInsertion::Nothing
        );
        assert_eq!(
            sweeper.after_insertion(due, 21 * SECOND),
            AfterInsertion::Request
        );
    }

    #[test]
    fn a_clock_that_stands_still_or_steps_back_is_not_waited_for() {
        let sweeper = sweeper();
        let big = 100 * MIN_SWEEP_KEYS;
        // Stuck at the epoch: keys as good as new (a denied first request, a refunded
        // take) are forgettable there, and must not pile up.
        assert_eq!(sweeper.after_insertion(big, 0), AfterInsertion::Request);
        sweeper.end(0, MIN_SWEEP_KEYS, 10 * SECOND, u64::MAX);
        let due = 2 * MIN_SWEEP_KEYS;
        assert_eq!(
            sweeper.after_insertion(due, 10 * SECOND),
            AfterInsertion::Request
        );
        sweeper.end(0, MIN_SWEEP_KEYS, 10 * SECOND, u64::MAX);
        assert_eq!(
            sweeper.after_insertion(due, 5 * SECOND),
            AfterInsertion::Request
        );
    }

    #[test]
    fn a_thread_behind_by_four_times_the_kept_keys_makes_insertions_sweep() {
        let sweeper = sweeper();
        sweeper.end(0, MIN_SWEEP_KEYS, 0, 0);
        let now = 2 * SECOND;
        assert_eq!(
            sweeper.after_insertion(2 * MIN_SWEEP_KEYS, now),
            AfterInsertion::Request
        );
        assert_eq!(
            sweeper.after_insertion(4 * MIN_SWEEP_KEYS - 1, now),
            AfterInsertion::Nothing
        );
        assert_eq!(
            sweeper.after_insertion(4 * MIN_SWEEP_KEYS, now),
            AfterInsertion::SweepHere
        );
    }
}
