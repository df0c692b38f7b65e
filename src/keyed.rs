//! The keyed limiter every algorithm runs in: a store of per-key states, the clock,
//! the forgetting of idle keys (see [`crate::evict`]) and where keys' rules come from
//! (see `per_key.rs`). Algorithms know nothing of maps or forgetting; this module
//! knows nothing of tokens or windows.

use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, Epoch, QuantaClock};
use crate::evict::{KeyStats, Overflow, Sweeper};
use crate::per_key::{Mode, Shared};
use crate::store::{KeyMap, Store};
use crate::sync::yield_now;
use crate::{Decision, KeyRef, Quota, RateLimiter};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// A key's state was retired: the key is being forgotten (or carried over to a new
/// configuration); look it up again.
#[derive(Debug)]
pub struct Retired;

/// What a sweep did with one key's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retirement {
    /// It carries information: keep it.
    Kept,
    /// It carried none and is retired now: remove it.
    Retired,
    /// It was retired earlier, by a race with another pass or by a move to a new
    /// configuration.
    AlreadyRetired,
}

/// One algorithm's rules for a quota, and how they keep and step a key's state.
///
/// Implemented by turnstile's algorithms: every single-word one through
/// [`WordAlgorithm`](crate::word::WordAlgorithm), the sliding log directly.
pub trait Algorithm: Send + Sync + Sized {
    /// One key's state.
    type State: Send + Sync;

    /// The state of a key seen for the first time, or again after it was forgotten.
    fn fresh(&self) -> Self::State;

    /// One request for `cost` at `now` (nanoseconds since the epoch).
    fn acquire(&self, state: &Self::State, now: u64, cost: u32) -> Result<Decision, Retired>;

    /// What the key has left at `now`; `None` if the state is retired.
    fn available(&self, state: &Self::State, now: u64) -> Option<u32>;

    /// Whether the state is retired.
    fn is_retired(&self, state: &Self::State) -> bool;

    /// Gives `cost` back at `now`, never beyond what a key holds. A retired state
    /// carried no information, so it has nothing to give back.
    fn refund(&self, state: &Self::State, now: u64, cost: u32);

    /// Retires the state if it carries no information as of `at`, so that no request
    /// can change it any more.
    fn retire_if_forgettable(&self, state: &Self::State, at: u64) -> Retirement;

    /// Retires the state whatever it holds, so that no request can change it any more,
    /// and returns what the key had left at `now`; `None` if it was retired already.
    fn freeze(&self, state: &Self::State, now: u64) -> Option<u32>;
}

/// A keyed rate limiter running algorithm `A`: [`TokenBucket`](crate::TokenBucket),
/// [`FixedWindow`](crate::FixedWindow), [`SlidingWindowCounter`](crate::SlidingWindowCounter),
/// [`SlidingLog`](crate::SlidingLog) and [`Gcra`](crate::Gcra) are this type with
/// their own `A`; see each of them for what its limit means.
///
/// Keys are created on their first request and forgotten once their state carries no
/// information ([`crate::evict`]): memory follows the active keys, never a throttled
/// key's allowance. By default every key gets the limiter's quota (`M` =
/// [`Shared`]); built with a per-key resolver, each key gets its own and the limiter
/// can be reconfigured while it runs (`M` = [`PerKey`](crate::per_key::PerKey)).
pub struct KeyedLimiter<A, K, C = QuantaClock, S = DefaultHasher, M = Shared>
where
    A: Algorithm,
    M: Mode<A, K>,
{
    states: KeyMap<K, M::Entry, S>,
    /// The rules of the limiter's quota.
    algorithm: A,
    mode: M,
    epoch: Epoch<C>,
    sweeper: Sweeper,
    /// The allowance shared by new keys that find the map full, under
    /// `Overflow::Shared`.
    overflow: Option<(A, A::State)>,
    quota: Quota,
    /// A loom mutant: carry keys over without freezing their state first.
    #[cfg(turnstile_loom)]
    pub(crate) carry_without_freezing: bool,
}

/// Why a request could not be applied to the entry it found.
enum Blocked {
    /// The entry's state is retired: the key is being forgotten.
    Retired,
    /// The entry predates the current configuration: carry it over first.
    Outdated,
}

impl<A: Algorithm, K: Hash + Eq> KeyedLimiter<A, K> {
    /// A builder for the clock, the hasher, the expected number of keys and how keys
    /// are forgotten.
    pub fn builder(quota: Quota) -> Builder<Self> {
        Builder::new(quota)
    }
}

impl<A: Algorithm, K: Hash + Eq, C: Clock, S: BuildHasher> Builder<KeyedLimiter<A, K>, C, S> {
    /// The limiter, with `rules` making the algorithm for a quota (the limiter's, and
    /// the shared overflow allowance's if any) and keys' rules kept as `mode` says;
    /// its epoch is now.
    pub(crate) fn assemble<M: Mode<A, K>, E>(
        self,
        mode: M,
        rules: impl Fn(&Quota) -> Result<A, E>,
    ) -> Result<KeyedLimiter<A, K, C, S, M>, E> {
        let overflow = match self.forgetting.max_keys {
            Some((_, Overflow::Shared(quota))) => {
                let algorithm = rules(&quota)?;
                let state = algorithm.fresh();
                Some((algorithm, state))
            }
            _ => None,
        };
        Ok(KeyedLimiter {
            states: KeyMap::with_hasher(self.hasher, self.expected_keys),
            algorithm: rules(&self.quota)?,
            mode,
            epoch: Epoch::start(self.clock),
            sweeper: Sweeper::new(&self.forgetting, self.expected_keys),
            overflow,
            quota: self.quota,
            #[cfg(turnstile_loom)]
            carry_without_freezing: false,
        })
    }
}

impl<A, K, C, S, M> KeyedLimiter<A, K, C, S, M>
where
    A: Algorithm,
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
    M: Mode<A, K>,
{
    /// The quota the limiter was built with (under a per-key resolver, its default).
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Number of keys that have state.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether no key has state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys held now, keys forgotten so far, and requests that met the `max_keys`
    /// cap with nothing to forget.
    pub fn stats(&self) -> KeyStats {
        let (evicted, overflowed) = self.sweeper.stats();
        KeyStats {
            keys: self.len(),
            evicted,
            overflowed,
        }
    }

    /// Forgets every key whose state has carried no information for the eviction
    /// margin; returns how many. Forgetting never changes a decision.
    pub fn evict_idle(&self) -> usize {
        let _sweeping = self.sweeper.lock();
        self.sweep()
    }

    /// Sweeps every `period` on a thread of its own, so that no request pays for a
    /// sweep (pair it with [`Builder::manual_eviction`] to turn off the sweeps that
    /// insertions run). The thread holds only a weak reference: it ends when the
    /// returned handle is dropped, or with the limiter.
    ///
    /// # Errors
    /// The OS refused to spawn the thread.
    #[cfg(not(turnstile_loom))]
    pub fn sweep_in_background(
        self: &std::sync::Arc<Self>,
        period: std::time::Duration,
    ) -> std::io::Result<crate::evict::BackgroundSweeper>
    where
        Self: Send + Sync + 'static,
    {
        let limiter = std::sync::Arc::downgrade(self);
        crate::evict::BackgroundSweeper::spawn(period, move || match limiter.upgrade() {
            Some(limiter) => {
                limiter.evict_idle();
                true
            }
            None => false,
        })
    }

    /// One pass over the map; the caller holds the sweep lock.
    fn sweep(&self) -> usize {
        let at = self.sweeper.begin(self.epoch.elapsed());
        let mut forgotten = 0;
        self.states.retain(|entry| {
            let (rules, state) = M::any(&self.algorithm, entry);
            match rules.retire_if_forgettable(state, at) {
                Retirement::Kept => true,
                Retirement::Retired => {
                    forgotten += 1;
                    false
                }
                // Retired by a race with an earlier pass: finish removing it — unless
                // it is being carried over to a new configuration, which its mover
                // finishes by replacing it.
                Retirement::AlreadyRetired => self.mode.current(&self.algorithm, entry).is_none(),
            }
        });
        self.sweeper.end(forgotten, self.states.len());
        forgotten
    }

    /// After an insertion: sweeps if the map has doubled since the last sweep and no
    /// other sweep is running.
    fn sweep_if_due(&self) {
        if self.sweeper.due(self.states.len())
            && let Some(_sweeping) = self.sweeper.try_lock()
        {
            self.sweep();
        }
    }

    /// For a key with no state: `None` if it may be stored, or the answer if the map is
    /// at its cap and nothing could be forgotten.
    #[cold]
    fn admit_new_key(&self, now: u64, cost: u32) -> Option<Decision> {
        // No cap, no need to count the keys (a sum over per-core counters).
        if self.sweeper.max_keys == usize::MAX || self.states.len() < self.sweeper.max_keys {
            return None;
        }
        if self.sweeper.cap_sweep_allowed(now) {
            self.evict_idle();
            if self.states.len() < self.sweeper.max_keys {
                return None;
            }
        }
        self.sweeper.count_overflow();
        let overflow = Decision::Overflow {
            retry_after: self.sweeper.next_cap_sweep_in(now),
        };
        Some(match &self.overflow {
            // The shared allowance is never retired.
            Some((algorithm, state)) => algorithm.acquire(state, now, cost).unwrap_or(overflow),
            None => overflow,
        })
    }

    /// One request applied to the entry found for a key. A reading older than the
    /// latest forgetting counts as its watermark (see `evict.rs`); read after the
    /// entry is found, which orders it.
    #[inline]
    fn apply(&self, entry: &M::Entry, now: u64, cost: u32) -> Result<Decision, Blocked> {
        match self.mode.current(&self.algorithm, entry) {
            Some((rules, state)) => rules
                .acquire(state, self.sweeper.reading(now), cost)
                .map_err(|Retired| Blocked::Retired),
            None => Err(Blocked::Outdated),
        }
    }

    /// The first request of a key with no state: make room if the map is at its cap,
    /// store the key's entry (exactly once, however many threads race), apply the
    /// request, and sweep if the map has doubled since the last sweep.
    #[cold]
    fn acquire_new<Q>(&self, key: &Q, now: u64, cost: u32) -> Result<Decision, Blocked>
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        if let Some(decision) = self.admit_new_key(now, cost) {
            return Ok(decision);
        }
        let create = |key: &K| self.mode.create(&self.algorithm, key);
        let found = self
            .states
            .get_or_insert(key, create, |entry| self.apply(entry, now, cost));
        self.sweep_if_due();
        found
    }

    /// A retired state was found for `key`: help remove it, so the next look finds
    /// the key absent or fresh — unless the entry is being carried over to a new
    /// configuration, which its mover finishes (see `per_key.rs`).
    #[cold]
    fn remove_retired<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.states.remove_if(key, |entry| {
            self.mode
                .current(&self.algorithm, entry)
                .is_some_and(|(rules, state)| rules.is_retired(state))
        });
    }

    /// `key`'s entry predates the current configuration: freeze its state and replace
    /// the entry with one carrying the state over, in one atomic step of the map.
    /// Returns once the entry is current or gone — or, when another thread froze it
    /// first, after yielding once for that thread to finish.
    #[cold]
    fn carry_over<Q>(&self, key: &Q, now: u64)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.sweeper.reading(now);
        let owned = key.to_key();
        // What the frozen state had left, once this thread froze it (the map may run
        // the closure more than once).
        let mut frozen: Option<u32> = None;
        let mut waiting = false;
        self.states.replace(key, |entry| {
            let entry = entry?; // gone: the next look creates it afresh
            if self.mode.current(&self.algorithm, entry).is_some() {
                return None; // already carried over
            }
            let left = match frozen {
                Some(left) => left,
                None => {
                    let (rules, state) = M::any(&self.algorithm, entry);
                    #[cfg(turnstile_loom)]
                    if self.carry_without_freezing {
                        return rules
                            .available(state, now)
                            .map(|left| self.mode.renew(&self.algorithm, &owned, left, now));
                    }
                    let Some(left) = rules.freeze(state, now) else {
                        waiting = true; // frozen by another thread, which replaces it
                        return None;
                    };
                    *frozen.insert(left)
                }
            };
            Some(self.mode.renew(&self.algorithm, &owned, left, now))
        });
        if waiting {
            yield_now();
        }
    }

    /// Where the keys' rules come from.
    pub(crate) fn mode(&self) -> &M {
        &self.mode
    }

    /// The raw state of `key`, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn with_state<Q, R>(&self, key: &Q, f: impl FnOnce(&A::State) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.states
            .get(key, |entry| f(M::any(&self.algorithm, entry).1))
    }

    /// The limiter's rules, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// A broken sweep for a loom mutant: removes forgettable states without retiring
    /// them first.
    #[cfg(turnstile_loom)]
    pub(crate) fn sweep_without_retiring(&self, forgettable: impl Fn(&A, &A::State, u64) -> bool) {
        let at = self.sweeper.begin(self.epoch.elapsed());
        self.states.retain(|entry| {
            let (rules, state) = M::any(&self.algorithm, entry);
            !forgettable(rules, state, at)
        });
    }
}

impl<A, K, C, S, M> RateLimiter<K> for KeyedLimiter<A, K, C, S, M>
where
    A: Algorithm,
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
    M: Mode<A, K>,
{
    #[inline]
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        loop {
            // The hot path: a known key, one lookup and one compare-and-set. Its only
            // call of `apply`, so it inlines.
            let found = match self.states.get(key, |entry| self.apply(entry, now, cost)) {
                Some(found) => found,
                None => self.acquire_new(key, now, cost),
            };
            match found {
                Ok(decision) => return decision,
                Err(Blocked::Retired) => self.remove_retired(key),
                Err(Blocked::Outdated) => self.carry_over(key, now),
            }
        }
    }

    fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let answer = |entry: &M::Entry| match self.mode.current(&self.algorithm, entry) {
            Some((rules, state)) => rules
                .available(state, self.sweeper.reading(now))
                .ok_or(Blocked::Retired),
            None => Err(Blocked::Outdated),
        };
        loop {
            match self.states.get(key, answer) {
                Some(Ok(available)) => return available,
                Some(Err(Blocked::Outdated)) => self.carry_over(key, now),
                // No state, or a retired one: the key is as good as new.
                Some(Err(Blocked::Retired)) | None => {
                    return self
                        .mode
                        .fresh_allowance(&self.algorithm, || key.to_key(), now);
                }
            }
        }
    }

    fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        let give_back = |entry: &M::Entry| match self.mode.current(&self.algorithm, entry) {
            Some((rules, state)) => {
                rules.refund(state, self.sweeper.reading(now), cost);
                true
            }
            None => false,
        };
        // An unknown key is fresh: there is nothing to give back.
        while self.states.get(key, give_back) == Some(false) {
            self.carry_over(key, now);
        }
    }
}
