//! The keyed limiter every algorithm runs in: a store of per-key states, the clock,
//! and the forgetting of idle keys (see [`crate::evict`]). Algorithms know nothing of
//! stores or forgetting; this module knows nothing of tokens or windows.

mod limiters;
mod reconfigure;
#[cfg(all(test, not(turnstile_loom)))]
mod try_acquire_tests;
#[cfg(all(test, not(turnstile_loom)))]
mod unshared_tests;

pub use limiters::{
    FixedWindow, Gcra, PerKeyFixedWindow, PerKeySlidingLog, PerKeyTokenBucket, SlidingLog,
    SlidingWindowCounter, TokenBucket,
};

use crate::evict::maintenance::Maintenance;
#[cfg(not(turnstile_loom))]
use crate::evict::maintenance::TurnTimer;

use crate::algorithm::{Algorithm, Blocked, Renewal, Retirement};
use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, Epoch, QuantaClock};
use crate::evict::{self, AfterInsertion, KeyStats, Overflow, Watermark};
use crate::store::{KeyedStore, Store};
use crate::sync::mutants::{Mutant, active};
use crate::sync::yield_now;
use crate::{Decision, KeyRef, Quota, RateLimiter};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

/// A keyed rate limiter running algorithm `A`: [`TokenBucket`](crate::TokenBucket),
/// [`FixedWindow`](crate::FixedWindow), [`SlidingWindowCounter`](crate::SlidingWindowCounter),
/// [`SlidingLog`](crate::SlidingLog) and [`Gcra`](crate::Gcra) are this type with
/// their own `A`; see each of them for what its limit means. With `A` a
/// [`PerKey`](crate::per_key::PerKey) wrapper, each key has its own quota and the
/// limiter can be reconfigured while it runs.
///
/// Keys are created on their first request and forgotten once their state carries no
/// information ([`crate::evict`]): memory follows the active keys, never a throttled
/// key's allowance, and no request pays for forgetting — the limiter's own sweeper
/// thread does, started when first needed and joined when the limiter is dropped. So
/// building one needs keys, hashers and clocks that can be shared with that thread:
/// `Send + Sync + 'static` (every key type in std and the usual hashers are). Keys
/// are also `Clone`, as governor's are: a new key's entry owns a copy, and moving a
/// key to a new quota replaces its entry with one that does too. States live in
/// papaya, a lock-free map, by default: looking up, inserting and removing keys take
/// no lock, and a thread stalled inside the key's `Hash`, `Eq` or `Clone` keeps no
/// other thread's request waiting (a request can wait only for a key being moved to
/// a new quota, or inside papaya for an entry a resize is copying);
/// [`Builder::word_store`] trades that for memory and churn speed. A key type's `Hash` and `Drop` must not panic:
/// the stores guarantee their own consistency only then. A panicking `Eq` or `Clone`,
/// resolver or clock reaches its caller and leaves the key usable (a move it
/// interrupts thaws the key).
pub struct KeyedLimiter<A, K, C = QuantaClock, S = DefaultHasher>
where
    A: Algorithm<K>,
    S: BuildHasher,
{
    /// Everything, shared with the sweeper thread (which holds it weakly).
    core: Arc<Core<A, K, C, S>>,
}

/// A keyed limiter's state: what its sweeper thread shares.
struct Core<A, K, C, S>
where
    A: Algorithm<K>,
    S: BuildHasher,
{
    states: KeyedStore<K, A::State, S>,
    algorithm: A,
    epoch: Epoch<C>,
    watermark: Watermark,
    maintenance: Maintenance,
    /// The allowance shared by new keys that find the store full, under
    /// `Overflow::Shared`.
    overflow: Option<SharedAllowance>,
    quota: Quota,
    /// Metrics and events, for a named limiter.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    observer: Option<Box<crate::observe::LimiterObserver>>,
}

/// The limiter's quota (each key's own, for the per-key ones, is its resolver's).
impl<A: Algorithm<K>, K, C, S: BuildHasher> std::fmt::Debug for KeyedLimiter<A, K, C, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.core.quota)
            .finish_non_exhaustive()
    }
}

impl<A: Algorithm<K>, K, C, S: BuildHasher> Drop for KeyedLimiter<A, K, C, S> {
    fn drop(&mut self) {
        // Joined here, on the dropping thread, so the limiter's own sweeper thread
        // never holds the last reference (a `BackgroundSweeper` from
        // `sweep_in_background` may, mid-sweep, and then frees the limiter itself).
        self.core.maintenance.stop();
    }
}

/// One allowance shared by every new key that finds the store full (`Overflow::Shared`):
/// a state of the limiter's algorithm under the overflow quota, never retired.
struct SharedAllowance(Box<dyn Fn(u64, u32) -> Decision + Send + Sync>);

impl SharedAllowance {
    fn new<R: Algorithm<()> + 'static>(rules: R) -> Self {
        let state = rules.create(&());
        let overflow = Decision::Overflow {
            retry_after: std::time::Duration::ZERO,
        };
        Self(Box::new(move |now, cost| {
            rules.acquire(&state, now, cost).unwrap_or(overflow)
        }))
    }
}

impl<A: Algorithm<K>, K: Hash + Eq + Clone> KeyedLimiter<A, K> {
    /// A builder for the clock, the hasher, the expected number of keys and how keys
    /// are forgotten.
    pub fn builder(quota: Quota) -> Builder<Self> {
        Builder::new(quota)
    }
}

impl<A, K, C, S> Builder<KeyedLimiter<A, K>, C, S>
where
    A: Algorithm<K, State = crate::sync::AtomicU64>,
    S: BuildHasher,
{
    /// Keeps the keys' state words in the word store instead of papaya: for
    /// memory-bound services with heavy key churn. The word store keeps each key and
    /// its 8-byte word side by side in a table of its own (no allocation per key):
    /// 23 heap bytes per `u64` key against papaya's 54, a new key's request in 796
    /// instructions against 1,083, sweeps about 20× faster, and a 10M-distinct-key
    /// stream held to 14–22 MB (five runs) where papaya's map outgrows its sweeper thread
    /// (results/ANALYSIS.md, "papaya by default"; 2-core EPYC VM). The price is locks:
    /// insertions, removals, sweeps and table growth take one of 1,024 segment locks,
    /// so a thread stalled while it holds one (descheduled, or inside the key's `Eq`,
    /// `Hash` or `Clone`) keeps every insertion into that segment waiting — on
    /// papaya no request waits for such a thread (`tests/stall.rs`). Lookups of
    /// stored keys take no lock on either store. Per-key limiters built from this builder
    /// ([`build_per_key`](Builder::build_per_key)) keep papaya: their states are not
    /// single words.
    pub fn word_store(mut self) -> Self {
        self.store = crate::store::StoreKind::Words;
        self
    }
}

impl<L, C: Clock, S: BuildHasher> Builder<L, C, S> {
    /// The limiter running `algorithm`, with `rules` making the shared overflow
    /// allowance's rules if there is one; its epoch is now.
    pub(crate) fn build_running<A, K, R, E>(
        self,
        algorithm: A,
        rules: impl Fn(&Quota) -> Result<R, E>,
    ) -> Result<KeyedLimiter<A, K, C, S>, E>
    where
        A: Algorithm<K> + 'static,
        K: Hash + Eq + Clone + Send + Sync + 'static,
        C: 'static,
        S: Clone + Send + Sync + 'static,
        R: Algorithm<()> + 'static,
    {
        let overflow = match self.eviction.max_keys {
            Some((_, Overflow::Shared(quota))) => Some(SharedAllowance::new(rules(&quota)?)),
            _ => None,
        };
        let automatic = self.eviction.automatic;
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        let observer = {
            let capped = self.eviction.max_keys.is_some();
            self.name
                .map(|name| Box::new(crate::observe::LimiterObserver::in_process(name, capped)))
        };
        let core = Arc::new_cyclic(|weak: &std::sync::Weak<Core<A, K, C, S>>| Core {
            states: KeyedStore::build(self.store, self.hasher, self.expected_keys),
            algorithm,
            epoch: Epoch::start(self.clock),
            watermark: Watermark::new(&self.eviction, self.expected_keys),
            maintenance: maintenance(automatic, weak.clone()),
            overflow,
            quota: self.quota,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            observer,
        });
        Ok(KeyedLimiter { core })
    }
}

/// The sweeper thread of a limiter whose sweeps are `automatic`: it holds the limiter
/// weakly, so it ends when the limiter is gone.
#[cfg(not(turnstile_loom))]
fn maintenance<A, K, C, S>(automatic: bool, core: std::sync::Weak<Core<A, K, C, S>>) -> Maintenance
where
    A: Algorithm<K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    if !automatic {
        return Maintenance::manual();
    }
    Maintenance::on_thread(move |wants| {
        let Some(limiter) = core.upgrade() else {
            return false;
        };
        let maintenance = &limiter.maintenance;
        // Called between steps of the store's work, holding none of its locks: the
        // thread's turn may end there (see `TurnTimer`); and whether to stop: the limiter
        // is being dropped, or a sweep is wanted (a thread behind on sweeps makes
        // insertions sweep themselves).
        let pace = TurnTimer::new();
        let stop = |sweep_wanted: bool| {
            pace.breathe();
            maintenance.stopping() || sweep_wanted || maintenance.sweep_requested()
        };
        if wants.prepare {
            // The word store's tables grown ahead and drained; at once given way to a
            // sweep wanted too, which bounds memory, and resumed after it (below).
            limiter.states.prepare(|| stop(wants.sweep));
        }
        if !wants.sweep {
            return true;
        }
        {
            let _sweeping = limiter.watermark.lock();
            limiter.sweep(|| pace.breathe());
        }
        if wants.prepare || limiter.states.wants_preparation() {
            // What was left for the sweep resumes (or what the store still wants: a
            // preparation an earlier sweep cut short), after the sweep lock is let go.
            limiter.states.prepare(|| stop(false));
        }
        true
    })
}

/// No thread under loom: sweeps happen on demand.
#[cfg(turnstile_loom)]
fn maintenance<A: Algorithm<K>, K, C, S: BuildHasher>(
    _: bool,
    _: std::sync::Weak<Core<A, K, C, S>>,
) -> Maintenance {
    Maintenance::manual()
}

impl<A, K, C, S> KeyedLimiter<A, K, C, S>
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + 'static,
    C: Clock,
    S: BuildHasher + Clone + 'static,
{
    /// Asks for `cost` tokens for `key`, all or nothing (see
    /// [`RateLimiter::acquire`]).
    #[inline]
    pub fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.core.acquire(key, cost)
    }

    /// Asks for one token for `key`: `acquire(key, 1).is_allowed()`, and the same
    /// step, asked only whether. A known key's request returns no [`Decision`]; for
    /// the token bucket and the GCRA it computes no `remaining` and no `retry_after`
    /// and reaches its verdict without dividing (a full bucket's new word still
    /// divides), while the other algorithms take their whole step. A new key, a key
    /// being forgotten or moved, and every request of a named limiter (whose metrics
    /// see each decision) take `acquire`'s path.
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.core.try_acquire(key)
    }

    /// What `key` has now, taking nothing and creating nothing (see
    /// [`RateLimiter::peek`]).
    pub fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.core.peek(key)
    }

    /// Gives back `cost` tokens an allowed request took but did not use (see
    /// [`RateLimiter::refund`]).
    pub fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.core.refund(key, cost)
    }

    /// The quota the limiter was built with (under a per-key resolver, its default).
    pub fn quota(&self) -> Quota {
        self.core.quota
    }

    /// Number of keys that have state.
    pub fn len(&self) -> usize {
        self.core.states.len()
    }

    /// Whether no key has state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys held now, keys forgotten so far, and requests that met the `max_keys`
    /// cap with nothing to forget.
    pub fn stats(&self) -> KeyStats {
        self.core.stats()
    }

    /// Forgets every key whose state has carried no information for the eviction
    /// margin; returns how many. Forgetting never changes a decision (see
    /// [`crate::evict`]). Waits for a sweep already running to finish.
    pub fn evict_idle(&self) -> usize {
        self.core.evict_idle(|| {})
    }

    /// Also sweeps every `period` on a thread of its own, whether or not the store has
    /// grown (the limiter's own sweeper runs only when a sweep is due). The thread
    /// holds the limiter weakly: it ends when the returned handle is dropped, or
    /// with the limiter.
    ///
    /// # Errors
    /// The OS refused to spawn the thread.
    #[cfg(not(any(turnstile_loom, turnstile_shuttle)))]
    pub fn sweep_in_background(
        &self,
        period: std::time::Duration,
    ) -> std::io::Result<crate::evict::BackgroundSweeper>
    where
        A: 'static,
        K: Send + Sync + 'static,
        C: 'static,
        S: Send + Sync + 'static,
    {
        let core = Arc::downgrade(&self.core);
        crate::evict::BackgroundSweeper::spawn(period, move || match core.upgrade() {
            Some(core) => {
                // A thread of its own: it yields as the limiter's own does (`TurnTimer`).
                let pace = TurnTimer::new();
                core.evict_idle(|| pace.breathe());
                true
            }
            None => false,
        })
    }

    /// The limiter's algorithm.
    pub(crate) fn algorithm(&self) -> &A {
        &self.core.algorithm
    }

    /// The raw state of `key`, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn with_state<Q, R>(&self, key: &Q, f: impl FnOnce(&A::State) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.core.states.get(key, f)
    }

    /// A broken sweep for a loom mutant: removes forgettable states without retiring
    /// them first.
    #[cfg(turnstile_loom)]
    pub(crate) fn sweep_without_retiring(&self, forgettable: impl Fn(&A::State, u64) -> bool) {
        let at = self.core.watermark.begin(self.core.epoch.elapsed());
        self.core
            .states
            .retain(|state| !forgettable(state, at), || {});
    }
}

impl<A, K, C, S> Core<A, K, C, S>
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + 'static,
    C: Clock,
    S: BuildHasher + Clone + 'static,
{
    /// Asks for `cost` tokens for `key`, all or nothing (see
    /// [`RateLimiter::acquire`]).
    #[inline]
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let reading = self.epoch.read();
        let now = reading.since;
        // The hot path: a known key, one lookup and one compare-and-set; anything
        // else is out of line (`acquire_new`, `acquire_blocked`).
        let decision = reading.tell(match self.look(key, now, cost) {
            Ok(decision) => decision,
            Err(blocked) => self.acquire_blocked(key, blocked, now, cost),
        });
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = &self.observer {
            observer.decided(key, &decision);
        }
        decision
    }

    /// `acquire(key, 1).is_allowed()`, with `acquire`'s hot path (one lookup, one step
    /// on the state found) asking the algorithm only whether ([`Algorithm::admit`]).
    /// Everything else is `acquire`'s own slow path, at the same reading: a new key
    /// (`acquire_new`, whose overflow answer at the key cap is the same), a blocked
    /// state (`acquire_blocked`: retired, moving, outdated), and a named limiter's every
    /// request, which its observer must see decided.
    #[inline]
    fn try_acquire<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if self.observer.is_some() {
            return self.try_acquire_observed(key);
        }
        let now = self.epoch.elapsed();
        let admit = |state: &A::State| self.algorithm.admit(state, self.watermark.reading(now), 1);
        // A miss is `look`'s: the new key's first request by `acquire_new`, under
        // the lookup's guard unless `create` runs user code.
        let new = || {
            self.acquire_new(key, now, 1)
                .map(|decision| decision.is_allowed())
        };
        let found = if A::CREATE_CALLS_USER_CODE {
            self.states.get(key, admit).unwrap_or_else(new)
        } else {
            self.states.get_or_else(key, admit, new)
        };
        match found {
            Ok(allowed) => allowed,
            Err(blocked) => self.try_acquire_blocked(key, blocked, now),
        }
    }

    /// `try_acquire` on a state it could not use: `acquire_blocked`, at the same
    /// reading, which clears what kept it and decides by the full step.
    #[cold]
    #[inline(never)]
    fn try_acquire_blocked<Q>(&self, key: &Q, blocked: Blocked, now: u64) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.acquire_blocked(key, blocked, now, 1).is_allowed()
    }

    /// A named limiter's `try_acquire`: the full `acquire`, so that its observer sees
    /// the decision.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cold]
    #[inline(never)]
    fn try_acquire_observed<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.acquire(key, 1).is_allowed()
    }

    /// What `key` has now, taking nothing and creating nothing (see
    /// [`RateLimiter::peek`]).
    fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let available =
            |state: &A::State| self.algorithm.available(state, self.watermark.reading(now));
        loop {
            match self.get_settled(key, available) {
                Some(Ok(available)) => return available,
                // No state, or a retired one: the key is as good as new.
                None | Some(Err(Blocked::Retired)) => {
                    return self
                        .algorithm
                        .fresh_available(|| key.to_key(), self.watermark.reading(now));
                }
                Some(Err(blocked)) => self.unblock(key, blocked, now),
            }
        }
    }

    /// Gives back `cost` tokens an allowed request took but did not use (see
    /// [`RateLimiter::refund`]).
    fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let refund = |state: &A::State| {
            self.algorithm
                .refund(state, self.watermark.reading(now), cost)
        };
        loop {
            match self.get_settled(key, refund) {
                // No state, or a retired one, was full: nothing to give back.
                None | Some(Ok(())) | Some(Err(Blocked::Retired)) => return,
                Some(Err(blocked)) => self.unblock(key, blocked, now),
            }
        }
    }

    /// `f` on `key`'s state, for a caller that takes a miss or a retired state to mean
    /// "no state": either, from the lock-free lookup, is looked at again under the
    /// store's lock. A lock-free lookup can miss a key whose entry a move is replacing
    /// (see the store contract), and can meet a word the word store froze while it
    /// grew the key's segment (`store/words/`), which it never shows under the lock.
    /// Loom model 13 checks the first, with a mutant that trusts the first miss.
    fn get_settled<Q, T>(
        &self,
        key: &Q,
        f: impl Fn(&A::State) -> Result<T, Blocked>,
    ) -> Option<Result<T, Blocked>>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        match self.states.get(key, &f) {
            None | Some(Err(Blocked::Retired)) => {}
            found => return found,
        }
        if active(Mutant::TrustFirstMiss) {
            return None;
        }
        self.states.get_locked(key, f)
    }

    /// Number of keys that have state.
    fn len(&self) -> usize {
        self.states.len()
    }

    /// Keys held now, keys forgotten so far, and requests that met the `max_keys`
    /// cap with nothing to forget.
    fn stats(&self) -> KeyStats {
        let (evicted, overflowed) = self.watermark.stats();
        KeyStats {
            keys: self.len(),
            evicted,
            overflowed,
        }
    }

    /// Forgets every key whose state has carried no information for the eviction
    /// margin; returns how many. Forgetting never changes a decision (see
    /// [`crate::evict`]). Waits for a sweep already running to finish. `pause` as
    /// for [`Store::retain`].
    fn evict_idle(&self, pause: impl FnMut()) -> usize {
        let _sweeping = self.watermark.lock();
        self.sweep(pause)
    }

    /// One pass over the store, calling `pause` where the store holds no lock (see
    /// [`Store::retain`]); the caller holds the sweep lock.
    ///
    /// The instant keys must be forgettable at moves forward every `REFRESH` keys
    /// visited (raising the watermark first, as the protocol requires), so a long pass
    /// also forgets keys that went idle while it ran, and what it keeps is the active
    /// set, not everything inserted meanwhile.
    fn sweep(&self, pause: impl FnMut()) -> usize {
        const REFRESH: u32 = 256;
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        let started = self.observer.as_ref().map(|_| std::time::Instant::now());
        let began = self.epoch.elapsed();
        let mut at = self.watermark.begin(began);
        let (mut visited, mut forgotten, mut kept) = (0u32, 0, 0);
        // The earliest instant any kept key could be forgotten.
        let mut kept_until = u64::MAX;
        let keep = |state: &A::State| {
            if self.maintenance.stopping() {
                return true; // the limiter is being dropped: end early
            }
            visited = visited.wrapping_add(1);
            if visited % REFRESH == 0 {
                at = self.watermark.begin(self.epoch.elapsed());
            }
            match self.algorithm.retire_if_forgettable(state, at) {
                Retirement::Kept(until) => {
                    kept += 1;
                    kept_until = kept_until.min(until);
                    true
                }
                // Replaced by its mover soon, with a state of its own.
                Retirement::Moving => {
                    kept += 1;
                    kept_until = kept_until.min(at);
                    true
                }
                Retirement::Retired => {
                    forgotten += 1;
                    false
                }
                // Retired by a race with another pass, or by an earlier call for this
                // entry: every retired entry is removable.
                Retirement::AlreadyRetired => false,
                // Its copy is the key's state elsewhere.
                Retirement::Relocated => false,
            }
        };
        self.states.retain(keep, pause);
        self.watermark.end(forgotten, kept, began, kept_until);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let (Some(observer), Some(started)) = (&self.observer, started) {
            observer.swept(forgotten, self.states.len(), started.elapsed());
        }
        forgotten
    }

    /// After an insertion: on about one in `SIZE_SAMPLE`, look at the store's size and
    /// ask the sweeper thread for a sweep if one is due (see `evict/`). Visits no key,
    /// and waits for none, unless the thread has fallen four times behind.
    #[inline]
    fn after_insertion(&self, now: u64) {
        // A named limiter's key gauge follows every insertion (sweeps set it too), so
        // it reads right between sweeps; only named limiters pay the count.
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = &self.observer {
            observer.keys(self.states.len());
        }
        if evict::sampled() {
            self.upkeep(self.watermark.after_insertion(self.states.len(), now));
            if self.watermark.automatic() && self.states.wants_preparation() {
                // The store's next memory, made ready by the sweeper thread before
                // requests reach it (the word store: segments' tables grown ahead and
                // drained). Without a thread (`manual_eviction()`), requests grow the
                // tables themselves.
                self.maintenance.request_preparation();
            }
        }
    }

    #[cold]
    fn upkeep(&self, upkeep: AfterInsertion) {
        match upkeep {
            AfterInsertion::Nothing => {}
            AfterInsertion::Request => {
                if !self.maintenance.request() {
                    // No thread to ask (the OS refused one): sweep here, as a limiter
                    // without a sweeper thread must.
                    self.sweep_here();
                }
            }
            // The thread is behind: it has been asked, and is never waited for (a
            // request that waited for a sweep slept up to 1.5 s under churn on papaya,
            // results/ANALYSIS.md, "papaya by default"); `max_keys` is the bound that
            // holds however far it falls behind. Only a limiter whose thread is not
            // running (the OS refused one, or a sweep panicked) sweeps on a request.
            AfterInsertion::SweepHere => {
                if !self.maintenance.running() && !self.maintenance.request() {
                    self.sweep_here();
                }
            }
        }
    }

    /// Sweeps on this thread, unless a sweep is running already (never waited for):
    /// for a limiter that has no sweeper thread to ask.
    fn sweep_here(&self) {
        if let Some(_sweeping) = self.watermark.try_lock() {
            self.sweep(|| {});
        }
    }

    /// The answer to a new key at the cap: asks for a sweep (at most once per margin)
    /// and answers by the overflow policy at once.
    #[cold]
    fn overflow(&self, now: u64, cost: u32) -> Decision {
        if self.watermark.automatic() && self.watermark.cap_sweep_allowed(now) {
            self.upkeep(AfterInsertion::Request);
        }
        self.watermark.count_overflow();
        let retry_after = self.watermark.next_cap_sweep_in(now);
        match &self.overflow {
            Some(shared) => match (shared.0)(self.watermark.reading(now), cost) {
                Decision::Overflow { .. } => Decision::Overflow { retry_after },
                decision => decision,
            },
            None => Decision::Overflow { retry_after },
        }
    }

    /// One request applied to the state found for a key. A reading older than the
    /// latest forgetting counts as its watermark (see `evict/`); read after the
    /// state is found, which orders it.
    #[inline(always)]
    fn apply(&self, state: &A::State, now: u64, cost: u32) -> Result<Decision, Blocked> {
        self.algorithm
            .acquire(state, self.watermark.reading(now), cost)
    }

    /// The first request of a key with no state: make room if the store is at its cap,
    /// store the key's state (exactly once, however many threads race) with the
    /// request applied, and ask for a sweep if one is due. Unless `create` runs user
    /// code, under the epoch guard of the lookup that missed the key.
    #[cold]
    fn acquire_new<Q>(&self, key: &Q, now: u64, cost: u32) -> Result<Decision, Blocked>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        // No cap, no need to count the keys (a sum over sixteen cells). At the cap,
        // the key is looked for under the store's lock before it is refused: the
        // lock-free lookup that missed it can miss a key whose entry a move is
        // replacing.
        if self.watermark.max_keys != usize::MAX && self.states.len() >= self.watermark.max_keys {
            if active(Mutant::TrustFirstMiss) {
                return Ok(self.overflow(now, cost));
            }
            let found = self
                .states
                .get_locked(key, |state| self.apply(state, now, cost));
            return found.unwrap_or_else(|| Ok(self.overflow(now, cost)));
        }
        let create = |key: &K| self.algorithm.create(key);
        // The first request applied to the new state before it is stored, at the
        // watermark as read once the insertion is registered: a sweep that raises it
        // later waits for this insertion to publish or lose before it forgets anything
        // (`evict/insertions.rs`). Registered after `create` (user code, for per-key
        // rules), so no sweep waits on a resolver; held until the store answers.
        let early = active(Mutant::EarlyReading).then(|| self.watermark.reading(now));
        let mut registration = None;
        let first = |state: &mut A::State| {
            registration = Some(self.watermark.register_insertion());
            let reading = early.unwrap_or_else(|| self.watermark.reading(now));
            self.algorithm.acquire_unshared(state, reading, cost)
        };
        let found = self
            .states
            .get_or_insert(key, create, first, |state| self.apply(state, now, cost));
        drop(registration);
        self.after_insertion(now);
        // Gone before we could use it (forgotten at once), or hidden for a moment by a
        // move: the next look finds the key absent, fresh or moved, as after meeting a
        // retired state.
        found.unwrap_or(Err(Blocked::Retired))
    }

    /// A request that met a state it could not use: clear what kept it, look again,
    /// and repeat until the request is decided. Out of line, so the hot path carries
    /// nothing of the loop.
    #[cold]
    #[inline(never)]
    fn acquire_blocked<Q>(&self, key: &Q, mut blocked: Blocked, now: u64, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        loop {
            self.unblock(key, blocked, now);
            match self.look(key, now, cost) {
                Ok(decision) => return decision,
                Err(again) => blocked = again,
            }
        }
    }

    /// One look for `key`'s state and one request applied to it: the stored state if
    /// there is one, else a new one (`acquire_new`).
    #[inline(always)]
    fn look<Q>(&self, key: &Q, now: u64, cost: u32) -> Result<Decision, Blocked>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let apply = |state: &A::State| self.apply(state, now, cost);
        let new = || self.acquire_new(key, now, cost);
        if A::CREATE_CALLS_USER_CODE {
            self.states.get(key, apply).unwrap_or_else(new)
        } else {
            // The insertion under the lookup's guard (see `Store::get_or_else`): it
            // runs no user code but a metrics recorder's gauge.
            self.states.get_or_else(key, apply, new)
        }
    }

    /// Clears what kept a request from `key`'s state, so that the next look finds it
    /// usable, absent or fresh.
    #[cold]
    fn unblock<Q>(&self, key: &Q, blocked: Blocked, now: u64)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        match blocked {
            Blocked::Retired => self.remove_retired(key),
            // The mover replaces the entry next, with no user code in between.
            Blocked::Moving => yield_now(),
            Blocked::Outdated => self.renew(key, now),
            // The next look finds the copy.
            Blocked::Relocated => {}
        }
    }

    /// A retired state was found for `key`: help remove it, so the next look finds
    /// the key absent or fresh.
    fn remove_retired<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.states
            .remove_if(key, |state| self.algorithm.is_retired(state));
    }

    /// `key`'s state predates the current quotas: ask for them first (user code, with
    /// nothing frozen), then move the state — in place if no rule changes, else by
    /// freezing it and swapping in its successor.
    fn renew<Q>(&self, key: &Q, now: u64)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let owned = key.to_key();
        let resolved = self.algorithm.resolve(&owned);
        // The owned key is made before anything is frozen: between the freeze and the
        // swap only the store runs (hashing and comparing the key).
        let renewal = self.states.get(key, |state| {
            let now = self.watermark.reading(now);
            let swap = |successor| self.states.swap(owned, state, successor);
            self.algorithm.renew(state, &resolved, now, swap)
        });
        match renewal {
            Some(Renewal::Moving) => yield_now(),
            Some(Renewal::Retired) => self.remove_retired(key),
            Some(Renewal::Current | Renewal::Relocated) | None => {}
        }
    }
}

impl<A, K, C, S> RateLimiter<K> for KeyedLimiter<A, K, C, S>
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + 'static,
    C: Clock,
    S: BuildHasher + Clone + 'static,
{
    #[inline]
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        KeyedLimiter::acquire(self, key, cost)
    }

    #[inline]
    fn try_acquire<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        KeyedLimiter::try_acquire(self, key)
    }

    fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        KeyedLimiter::peek(self, key)
    }

    fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        KeyedLimiter::refund(self, key, cost)
    }
}
