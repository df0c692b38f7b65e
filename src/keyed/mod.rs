//! The keyed limiter every algorithm runs in: a store of per-key states, the clock,
//! and the forgetting of idle keys (see [`crate::evict`]). Algorithms know nothing of
//! stores or forgetting; this module knows nothing of tokens or windows.

mod carried;
mod limiters;
// A reloaded configuration file's checks (and loom's models of them).
#[cfg(any(feature = "config", turnstile_loom))]
mod pinned;
mod reconfigure;
#[cfg(all(test, not(turnstile_loom)))]
mod relocation_tests;
#[cfg(all(test, not(turnstile_loom)))]
mod settle_tests;
#[cfg(all(test, not(turnstile_loom)))]
mod try_acquire_tests;
#[cfg(all(test, not(turnstile_loom)))]
mod unshared_tests;

pub use limiters::{
    FixedWindow, Gcra, PerKeyFixedWindow, PerKeySlidingLog, PerKeyTokenBucket, SlidingLog,
    SlidingWindowCounter, TokenBucket,
};

use crate::algorithm::{Algorithm, Blocked, Renewal, Rules};
use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, Epoch, QuantaClock};
use crate::evict::{Eviction, KeyStats, Keys, Overflow, SharedAllowance, Sweeper};
use crate::store::ring::{Missed, View};
use crate::store::{KeyedStore, Relocator};
use crate::sync::mutants::{Mutant, active};
use crate::sync::yield_now;
use crate::{Decision, KeyRef, Quota, RateLimiter, Settlement};
use carried::{Carried, Own};
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
/// key's allowance. The limiter's own sweeper thread (started when first needed and
/// joined when the limiter is dropped) and new keys' insertions share the
/// forgetting: each new key drains a bounded share of a drain under way, and no
/// request waits for the thread (when there is no thread, or it is overdue, one
/// request opens a drain, finishing a resize the old map may still be in). So
/// building one needs keys, hashers and clocks that can be shared with that thread:
/// `Send + Sync + 'static` (every key type in std and the usual hashers are). Keys
/// are also `Clone`, as governor's are: a new key's entry owns a copy, and a key
/// relocated or moved to a new quota gets an entry that does too. States live in a
/// ring of papaya maps, lock-free, by default: looking up, inserting and removing keys
/// take no lock, and a thread stalled inside the key's `Hash`, `Eq` or `Clone` keeps
/// no other thread's request waiting (a request can wait only for a key being moved
/// to a new quota, or inside papaya for an entry a resize is copying);
/// [`Builder::word_store`] trades that for memory and churn speed. A key type's `Hash`
/// and `Drop` must not panic: the stores guarantee their own consistency only then. A
/// panicking `Eq` or `Clone`, resolver or clock reaches its caller and leaves the key
/// usable (a move it interrupts thaws the key).
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
    eviction: Eviction,
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
        self.core.eviction.sweeper.stop();
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
    A: Algorithm<K>,
    S: BuildHasher,
{
    /// Keeps the keys' state words in the word store instead of the ring of papaya
    /// maps: for memory-bound services with heavy key churn. The word store keeps each
    /// key and its 8-byte word side by side in a table of its own (no allocation per
    /// key): fewer heap bytes per key, a cheaper new key, and sweeps far cheaper per
    /// key forgotten (results/README.md). The price is locks: insertions, removals,
    /// sweeps and table growth take one of 1,024 segment locks, so a thread stalled
    /// while it holds one (descheduled, or inside the key's `Eq`, `Hash` or `Clone`)
    /// keeps every insertion into that segment waiting — on the ring no request waits
    /// for such a thread (`tests/stall.rs`). Lookups of stored keys take no lock on
    /// either store. Only single words live in the word store: a
    /// [`SlidingLog`](crate::SlidingLog), and per-key limiters built from this builder
    /// ([`build_per_key`](Builder::build_per_key)), keep the ring whatever this says.
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
            eviction: Eviction::new(
                &self.eviction,
                self.expected_keys,
                crate::evict::sweeper::for_limiter(automatic, weak.clone()),
            ),
            overflow,
            quota: self.quota,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            observer,
        });
        Ok(KeyedLimiter { core })
    }
}

impl<A: Algorithm<K>, K, C, S: BuildHasher> KeyedLimiter<A, K, C, S> {
    /// The quota the limiter was built with (under a per-key resolver, its default).
    pub fn quota(&self) -> Quota {
        self.core.quota
    }

    /// The limiter's algorithm.
    pub(crate) fn algorithm(&self) -> &A {
        &self.core.algorithm
    }
}

impl<A, K, C, S> KeyedLimiter<A, K, C, S>
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// Asks for `cost` tokens for `key`, all or nothing (see
    /// [`RateLimiter::acquire`]).
    #[inline]
    pub fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.core.acquire(Own, key, cost)
    }

    /// Asks for one token for `key`: `acquire(key, 1).is_allowed()`, and the same
    /// step, asked only whether. A known key's request returns no [`Decision`]; for
    /// the token bucket and the GCRA it computes no `remaining` and no `retry_after`
    /// and reaches its verdict without dividing (a full bucket's new word still
    /// divides), while the other algorithms take their whole step. A new key, a key
    /// being forgotten, relocated or moved, and every request of a named limiter
    /// (whose metrics see each decision) take `acquire`'s path.
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.core.try_acquire(Own, key)
    }

    /// What `key` has now, taking nothing and creating nothing (see
    /// [`RateLimiter::peek`]).
    pub fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.core.peek(Own, key)
    }

    /// Gives back `cost` tokens an allowed request took but did not use (see
    /// [`RateLimiter::refund`]).
    pub fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.core.refund(Own, key, cost)
    }

    /// Settles a request that took `estimate` for `key` at what it actually cost:
    /// the difference given back, or charged even beyond what the key has left (see
    /// [`RateLimiter::settle`]).
    pub fn settle<Q>(&self, key: &Q, estimate: u32, actual: u32) -> crate::Settlement
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.core.settle(Own, key, estimate, actual)
    }

    /// Number of keys that have state.
    pub fn len(&self) -> usize {
        self.core.states.len()
    }

    /// Whether no key has state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys held now, keys forgotten so far, and new keys answered by the
    /// [`Overflow`](crate::Overflow) policy (or charged nothing by a settle) because
    /// the store held `max_keys` keys.
    pub fn stats(&self) -> KeyStats {
        let (evicted, overflowed) = self.core.eviction.tally();
        KeyStats {
            keys: self.len(),
            evicted,
            overflowed,
        }
    }

    /// Forgets every key whose state has carried no information for the eviction
    /// margin; returns how many keys were forgotten while it ran (new keys' shares of
    /// its drain included). Forgetting never changes a decision (see
    /// [`crate::evict`]). Waits for forgetting already under way to finish.
    pub fn evict_idle(&self) -> usize {
        self.core.evict_idle(|| {})
    }

    /// Also forgets every `period` on a thread of its own, whether or not new keys
    /// come (the limiter's own sweeper thread runs only when requests find work for
    /// it). The thread holds the limiter weakly: it ends when the returned handle is
    /// dropped, or with the limiter.
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
        C: 'static,
    {
        let core = Arc::downgrade(&self.core);
        crate::evict::BackgroundSweeper::spawn(period, move || match core.upgrade() {
            Some(core) => {
                // A thread of its own: it yields as the limiter's own does (`TurnTimer`).
                let pace = crate::evict::sweeper::TurnTimer::new();
                core.evict_idle(|| pace.breathe());
                true
            }
            None => false,
        })
    }

    /// The raw state of `key` wherever it is, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn with_state<Q, R>(&self, key: &Q, f: impl Fn(&A::State) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.core.states.peek_state(key, f)
    }

    /// Rotates the ring and closes its claims, as the eviction cycle's first two
    /// stages do, without aging or draining: for loom models of a rotation alone.
    /// The model's thread is the only one to run the cycle.
    #[cfg(turnstile_loom)]
    pub(crate) fn rotate_ring(&self) {
        let Some(ring) = self.core.states.ring() else {
            return;
        };
        assert!(ring.rotate(), "turnstile: a model rotates a drained ring");
        while !ring.close_claims() {
            crate::sync::yield_now();
        }
    }
}

impl<A, K, C, S> Core<A, K, C, S>
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    /// The store and the algorithm, as forgetting sees them.
    fn keys(&self) -> Keys<'_, K, A, S> {
        Keys {
            store: &self.states,
            algorithm: &self.algorithm,
        }
    }

    /// Asks for `cost` tokens for `key`, all or nothing (see
    /// [`RateLimiter::acquire`]).
    ///
    /// Every request path takes the rules it steps states by (`rules`, see
    /// [`Carried`]): the limiter's own algorithm, or a pinned view of its per-key
    /// rules that a check of one configuration carries in.
    #[inline]
    fn acquire<R, Q>(&self, rules: R, key: &Q, cost: u32) -> Decision
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let reading = self.epoch.read();
        let now = reading.since;
        // The hot path: a known key, one lookup and one compare-and-set; anything
        // else is out of line (`acquire_new`, `acquire_blocked`).
        let decision = reading.tell(match self.look(rules, key, now, cost) {
            Ok(decision) => decision,
            Err(missed) => self.acquire_slow(rules, key, missed, now, cost),
        });
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = &self.observer {
            observer.decided(key, &decision);
        }
        decision
    }

    /// `acquire(key, 1).is_allowed()`, with `acquire`'s hot path (one lookup, one step
    /// on the state found) asking the algorithm only whether ([`Rules::admit`]).
    /// Everything else is `acquire`'s own slow path, at the same reading: a new key
    /// (`acquire_new`, whose overflow answer at the key cap is the same), a key in the
    /// old generation (relocated, then asked in full), a blocked state
    /// (`acquire_blocked`: retired, relocated, moving, outdated), and a named limiter's
    /// every request, which its observer must see decided.
    #[inline]
    fn try_acquire<R, Q>(&self, rules: R, key: &Q) -> bool
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if self.observer.is_some() {
            return self.try_acquire_observed(rules, key);
        }
        let now = self.epoch.elapsed();
        let admit = move |state: &A::State| {
            rules
                .of(&self.algorithm)
                .admit(state, self.eviction.reading(now), 1)
        };
        match self
            .states
            .look(key, admit, &Relocator::of(&self.algorithm))
        {
            Ok(allowed) => allowed,
            Err(missed) => self.try_acquire_slow(rules, key, missed, now),
        }
    }

    /// `try_acquire` on a key it found no usable state for: `acquire_slow`, at the same
    /// reading, which decides by the full step.
    #[cold]
    #[inline(never)]
    fn try_acquire_slow<R, Q>(&self, rules: R, key: &Q, missed: Missed, now: u64) -> bool
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.acquire_slow(rules, key, missed, now, 1).is_allowed()
    }

    /// A named limiter's `try_acquire`: the full `acquire`, so that its observer sees
    /// the decision.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cold]
    #[inline(never)]
    fn try_acquire_observed<R, Q>(&self, rules: R, key: &Q) -> bool
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.acquire(rules, key, 1).is_allowed()
    }

    /// What `key` has now, taking nothing and creating nothing (see
    /// [`RateLimiter::peek`]).
    fn peek<R, Q>(&self, rules: R, key: &Q) -> u32
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let available = |state: &A::State| {
            rules
                .of(&self.algorithm)
                .available(state, self.eviction.reading(now))
        };
        loop {
            match self.settled(key, available) {
                Some(Ok(available)) => return available,
                // No state, or a retired one: the key is as good as new.
                None | Some(Err(Blocked::Retired)) => {
                    return rules
                        .of(&self.algorithm)
                        .fresh_available(|| key.to_key(), self.eviction.reading(now));
                }
                Some(Err(blocked)) => self.unblock(rules, key, blocked, now),
            }
        }
    }

    /// Gives back `cost` tokens an allowed request took but did not use (see
    /// [`RateLimiter::refund`]).
    fn refund<R, Q>(&self, rules: R, key: &Q, cost: u32)
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let refund = |state: &A::State| {
            rules
                .of(&self.algorithm)
                .refund(state, self.eviction.reading(now), cost)
        };
        loop {
            match self.settled(key, refund) {
                // No state, or a retired one, was full: nothing to give back.
                None | Some(Ok(())) | Some(Err(Blocked::Retired)) => return,
                Some(Err(blocked)) => self.unblock(rules, key, blocked, now),
            }
        }
    }

    /// Settles a request that took `estimate` for `key` at what it `actual`ly cost
    /// (see [`RateLimiter::settle`]): one step on the key's state (one compare-and-set
    /// for a word), looked up as a refund looks when it gives back, and as a request
    /// looks when it charges. A refund finds a key with no state full, with nothing
    /// to give back; a charge makes the key's state as a first request does
    /// (`settle_new`) and charges it from full.
    fn settle<R, Q>(&self, rules: R, key: &Q, estimate: u32, actual: u32) -> Settlement
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        if actual == estimate {
            // Settled at the estimate: the reservation stands as it was taken.
            return Settlement::default();
        }
        let now = self.epoch.elapsed();
        let step = |state: &A::State| {
            rules
                .of(&self.algorithm)
                .settle(state, self.eviction.reading(now), estimate, actual)
        };
        if actual < estimate {
            // Only what was given back leaves the step: a `u32` where a whole
            // `Settlement` would go through memory (a refund's settle measured 314
            // instructions that way, against a refund's 251).
            let give_back = |state: &A::State| step(state).map(|settled| settled.refunded);
            loop {
                match self.settled(key, give_back) {
                    Some(Ok(refunded)) => return Settlement::of_refund(refunded),
                    // No state, or a retired one, was full: nothing to give back.
                    None | Some(Err(Blocked::Retired)) => return Settlement::default(),
                    Some(Err(blocked)) => self.unblock(rules, key, blocked, now),
                }
            }
        }
        // As above, only what was charged leaves the step.
        let extra = actual - estimate;
        let charge = |state: &A::State| step(state).map(|settled| settled.charged);
        let relocator = Relocator::of(&self.algorithm);
        let mut missed = match self.states.look(key, charge, &relocator) {
            Ok(charged) => return Settlement::of_charge(extra, charged),
            Err(missed) => missed,
        };
        // As `acquire_slow`: a new key, or a blocked state cleared and looked again
        // for, until the charge lands.
        loop {
            let next = match missed {
                Missed::Absent(view) => self
                    .settle_new(rules, view, key, now, charge)
                    .map_err(Missed::Blocked),
                Missed::Blocked(blocked) => {
                    self.unblock(rules, key, blocked, now);
                    self.states.look(key, charge, &relocator)
                }
            };
            match next {
                Ok(charged) => return Settlement::of_charge(extra, charged),
                Err(again) => missed = again,
            }
        }
    }

    /// A charge on a key with no state (as of `view`): its state made and stored with
    /// the charge (`charge`, which says how much it charged) applied, as
    /// `acquire_new` stores a new key's with its first request (at the watermark read
    /// once the insertion is registered). At the key cap, a key the store does not
    /// hold has nowhere to owe: nothing is charged, and the settlement says the
    /// whole charge was forgiven. It goes through the cap's path as a new key's
    /// request does (`Eviction::at_cap`): counted as an overflow and room asked for
    /// — the answer, for a request, is dropped: a settle admits nothing, and the
    /// overflow allowance is not charged for a key it does not hold.
    #[cold]
    fn settle_new<R, Q>(
        &self,
        rules: R,
        view: View,
        key: &Q,
        now: u64,
        charge: impl Fn(&A::State) -> Result<u32, Blocked> + Copy,
    ) -> Result<u32, Blocked>
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let max_keys = self.eviction.max_keys;
        if max_keys != usize::MAX && self.states.len() >= max_keys {
            if !active(Mutant::TrustFirstMiss)
                && let Some(found) = self.states.get_locked(key, charge)
            {
                return found;
            }
            // A cost of 0 and no allowance: only the count and the room asked for.
            let _ = self.eviction.at_cap(&self.keys(), now, 0, None);
            return Ok(0);
        }
        let create = |key: &K| rules.of(&self.algorithm).create(key);
        // The state is no other thread's yet: the same step, its compare-and-set
        // uncontended.
        let first = |state: &mut A::State| charge(state);
        let found = self.states.insert_new(
            view,
            key,
            create,
            first,
            charge,
            &Relocator::of(&self.algorithm),
        );
        self.after_insertion(now);
        found
    }

    /// `f` on `key`'s state, for a caller that takes no state to mean something (see
    /// `KeyedStore::settled`). Loom model 13 checks the word store's second look, with
    /// a mutant that trusts the first miss.
    fn settled<Q, T>(
        &self,
        key: &Q,
        f: impl Fn(&A::State) -> Result<T, Blocked>,
    ) -> Option<Result<T, Blocked>>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.states.settled(
            key,
            f,
            &Relocator::of(&self.algorithm),
            active(Mutant::TrustFirstMiss),
        )
    }

    /// Forgets every key whose state has carried no information for the eviction
    /// margin; returns how many (see `Eviction::evict_idle`). `pause` between steps.
    fn evict_idle(&self, pause: impl FnMut()) -> usize {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        let started = std::time::Instant::now();
        let forgotten = self
            .eviction
            .evict_idle(&self.keys(), || self.epoch.elapsed(), pause);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = &self.observer {
            observer.swept(forgotten, self.states.len(), started.elapsed());
        }
        forgotten
    }

    /// One request applied to the state found for a key. A reading older than the
    /// latest forgetting counts as its watermark (see `evict/`); read after the
    /// state is found, which orders it.
    #[inline(always)]
    fn apply<R>(&self, rules: R, state: &A::State, now: u64, cost: u32) -> Result<Decision, Blocked>
    where
        R: Carried<K, A>,
    {
        rules
            .of(&self.algorithm)
            .acquire(state, self.eviction.reading(now), cost)
    }

    /// The first request of a key with no state (as of `view`): refused at the cap,
    /// else stored (exactly once, however many threads race) with the request applied,
    /// and forgetting given its due (`Eviction::after_insertion`). Unless `create` runs
    /// user code, under the epoch guard of the lookup that missed the key.
    #[cold]
    fn acquire_new<R, Q>(
        &self,
        rules: R,
        view: View,
        key: &Q,
        now: u64,
        cost: u32,
    ) -> Result<Decision, Blocked>
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        // No cap, no need to count the keys. At the cap, the key is looked for under
        // the store's lock before it is refused: the lock-free lookup that missed it
        // can miss a key whose entry a move is replacing (the word store).
        let max_keys = self.eviction.max_keys;
        if max_keys != usize::MAX && self.states.len() >= max_keys {
            if !active(Mutant::TrustFirstMiss)
                && let Some(found) = self
                    .states
                    .get_locked(key, |state| self.apply(rules, state, now, cost))
            {
                return found;
            }
            return Ok(self
                .eviction
                .at_cap(&self.keys(), now, cost, self.overflow.as_ref()));
        }
        let create = |key: &K| rules.of(&self.algorithm).create(key);
        // The first request applied to the new state before it is stored, at the
        // watermark as read once the insertion is registered: a forgetting that raises
        // it later waits for this insertion to be done before it forgets anything
        // (`store/insertions.rs`). Registered after `create` (user code, for per-key
        // rules), so nothing waits on a resolver.
        let early = active(Mutant::EarlyReading).then(|| self.eviction.reading(now));
        let first = |state: &mut A::State| {
            let reading = early.unwrap_or_else(|| self.eviction.reading(now));
            rules
                .of(&self.algorithm)
                .acquire_unshared(state, reading, cost)
        };
        let found = self.states.insert_new(
            view,
            key,
            create,
            first,
            |state| self.apply(rules, state, now, cost),
            &Relocator::of(&self.algorithm),
        );
        self.after_insertion(now);
        found
    }

    /// After an insertion: forgetting's due (a share of a drain under way; on about one
    /// insertion in `SIZE_SAMPLE`, the cycle's cheap steps; see `evict/`).
    #[inline]
    fn after_insertion(&self, now: u64) {
        // A named limiter's key gauge follows every insertion (forgetting sets it
        // too), so it reads right between cycles; only named limiters pay the count.
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = &self.observer {
            observer.keys(self.states.len());
        }
        self.eviction.after_insertion(&self.keys(), now);
    }

    /// A request that found no state it could use: a new key's first request, or a
    /// blocked state cleared (what kept it) and looked again for, until the request is
    /// decided. Out of line, so the hot path carries nothing of the loop.
    #[cold]
    #[inline(never)]
    fn acquire_slow<R, Q>(
        &self,
        rules: R,
        key: &Q,
        mut missed: Missed,
        now: u64,
        cost: u32,
    ) -> Decision
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        loop {
            let next = match missed {
                Missed::Absent(view) => self
                    .acquire_new(rules, view, key, now, cost)
                    .map_err(Missed::Blocked),
                Missed::Blocked(blocked) => {
                    self.unblock(rules, key, blocked, now);
                    self.look(rules, key, now, cost)
                }
            };
            match next {
                Ok(decision) => return decision,
                Err(again) => missed = again,
            }
        }
    }

    /// One look for `key`'s state and one request applied to it: the stored state if
    /// there is one (relocated from the old generation if that is where it is).
    #[inline(always)]
    fn look<R, Q>(&self, rules: R, key: &Q, now: u64, cost: u32) -> Result<Decision, Missed>
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let apply = move |state: &A::State| self.apply(rules, state, now, cost);
        self.states
            .look(key, apply, &Relocator::of(&self.algorithm))
    }

    /// Clears what kept a request from `key`'s state, so that the next look finds it
    /// usable, absent or fresh.
    #[cold]
    fn unblock<R, Q>(&self, rules: R, key: &Q, blocked: Blocked, now: u64)
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        match blocked {
            Blocked::Retired => self.remove_retired(key),
            // The mover replaces the entry next, with no user code in between.
            Blocked::Moving => yield_now(),
            Blocked::Outdated => self.renew(rules, key, now),
            // The next look finds the copy, or makes it.
            Blocked::Relocated => {}
        }
    }

    /// A retired state was found for `key`: on the word store, help remove it, so the
    /// next look finds the key absent or fresh (the ring's drain removes its own).
    fn remove_retired<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.states
            .remove_retired(key, |state| self.algorithm.is_retired(state));
    }

    /// `key`'s state predates the quotas the request wants: ask for them first (user
    /// code, with nothing frozen), then move the state by freezing it and swapping in
    /// its successor (the same state when no rule changes).
    fn renew<R, Q>(&self, rules: R, key: &Q, now: u64)
    where
        R: Carried<K, A>,
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let owned = key.to_key();
        let resolved = rules.of(&self.algorithm).resolve(&owned);
        // The owned key is made before anything is frozen: between the freeze and the
        // swap only the store runs (hashing and comparing the key). One look, so the
        // closure runs at most once and `owned` is moved into the swap once.
        let owned = std::cell::Cell::new(Some(owned));
        let renewal = self.states.get(key, |state| {
            let Some(owned) = owned.take() else {
                return Renewal::Current;
            };
            let now = self.eviction.reading(now);
            let swap = |successor| self.states.swap(owned, state, successor);
            rules.of(&self.algorithm).renew(state, &resolved, now, swap)
        });
        match renewal {
            Some(Renewal::Moving) => yield_now(),
            Some(Renewal::Retired) => self.remove_retired(key),
            Some(Renewal::Current | Renewal::Relocated) | None => {}
        }
    }
}

/// What the sweeper thread does for the limiter (`crate::evict::sweeper::for_limiter`).
impl<A, K, C, S> crate::evict::sweeper::Forgetting for Core<A, K, C, S>
where
    A: Algorithm<K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + 'static,
    S: BuildHasher + Clone + Send + Sync + 'static,
{
    fn sweeper(&self) -> &Sweeper {
        &self.eviction.sweeper
    }

    /// The sweeper thread's forgetting on a wake-up (`Eviction::work`); `None` once the
    /// limiter is being dropped.
    fn forget(&self, breathe: impl FnMut()) -> Option<()> {
        let (forgotten, took) =
            self.eviction
                .work(&self.keys(), || self.epoch.elapsed(), breathe)?;
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if let Some(observer) = &self.observer
            && forgotten > 0
        {
            observer.swept(forgotten, self.states.len(), took);
        }
        let _ = (forgotten, took);
        Some(())
    }

    /// The word store's next stretch of memory, prepared on the sweeper thread.
    fn prepare(&self, stop: impl Fn() -> bool) {
        if let Some(words) = self.states.words() {
            crate::store::InPlace::prepare(words, stop);
        }
    }
}

impl<A, K, C, S> RateLimiter<K> for KeyedLimiter<A, K, C, S>
where
    A: Algorithm<K>,
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock,
    S: BuildHasher + Clone + Send + Sync + 'static,
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

    fn settle<Q>(&self, key: &Q, estimate: u32, actual: u32) -> crate::Settlement
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        KeyedLimiter::settle(self, key, estimate, actual)
    }
}
