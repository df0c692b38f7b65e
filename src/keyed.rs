//! The keyed limiter every algorithm runs in: a store of per-key states, the clock,
//! and the forgetting of idle keys (see [`crate::evict`]). Algorithms know nothing of
//! maps or forgetting; this module knows nothing of tokens or windows.

use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, Epoch, QuantaClock};
use crate::evict::{KeyStats, Overflow, Sweeper};
use crate::store::{KeyMap, Store};
use crate::{Decision, KeyRef, Quota, RateLimiter};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// A key's state was retired: the key is being forgotten; look it up again.
#[derive(Debug)]
pub struct Retired;

/// What a sweep did with one key's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retirement {
    /// It carries information: keep it.
    Kept,
    /// It carried none and is retired now: remove it.
    Retired,
    /// It was retired earlier (a race with another sweep): remove it.
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
}

/// A keyed rate limiter running algorithm `A`: [`TokenBucket`](crate::TokenBucket),
/// [`FixedWindow`](crate::FixedWindow), [`SlidingWindowCounter`](crate::SlidingWindowCounter),
/// [`SlidingLog`](crate::SlidingLog) and [`Gcra`](crate::Gcra) are this type with
/// their own `A`; see each of them for what its limit means.
///
/// Every key gets the same quota. Keys are created on their first request and
/// forgotten once their state carries no information ([`crate::evict`]): memory
/// follows the active keys, never a throttled key's allowance.
pub struct KeyedLimiter<A: Algorithm, K, C = QuantaClock, S = DefaultHasher> {
    states: KeyMap<K, A::State, S>,
    algorithm: A,
    epoch: Epoch<C>,
    sweeper: Sweeper,
    /// The allowance shared by new keys that find the map full, under
    /// `Overflow::Shared`.
    overflow: Option<(A, A::State)>,
    quota: Quota,
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
    /// the shared overflow allowance's if any); its epoch is now.
    pub(crate) fn assemble<E>(
        self,
        rules: impl Fn(&Quota) -> Result<A, E>,
    ) -> Result<KeyedLimiter<A, K, C, S>, E> {
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
            epoch: Epoch::start(self.clock),
            sweeper: Sweeper::new(&self.forgetting, self.expected_keys),
            overflow,
            quota: self.quota,
        })
    }
}

impl<A, K, C, S> KeyedLimiter<A, K, C, S>
where
    A: Algorithm,
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
{
    /// The quota every key gets.
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

    /// One pass over the map; the caller holds the sweep lock.
    fn sweep(&self) -> usize {
        let at = self.sweeper.begin(self.epoch.elapsed());
        let mut forgotten = 0;
        self.states.retain(
            |state| match self.algorithm.retire_if_forgettable(state, at) {
                Retirement::Kept => true,
                Retirement::Retired => {
                    forgotten += 1;
                    false
                }
                Retirement::AlreadyRetired => false,
            },
        );
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
        if self.states.len() < self.sweeper.max_keys {
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

    /// A retired state was found for `key`: help remove it, so the next look finds
    /// the key absent or fresh.
    #[cold]
    fn remove_retired<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.states
            .remove_if(key, |state| self.algorithm.is_retired(state));
    }

    /// The raw state of `key`, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn with_state<Q, R>(&self, key: &Q, f: impl FnOnce(&A::State) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        self.states.get(key, f)
    }

    /// The algorithm, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// A broken sweep for a loom mutant: removes forgettable states without retiring
    /// them first.
    #[cfg(turnstile_loom)]
    pub(crate) fn sweep_without_retiring(&self, forgettable: impl Fn(&A, &A::State, u64) -> bool) {
        let at = self.sweeper.begin(self.epoch.elapsed());
        self.states
            .retain(|state| !forgettable(&self.algorithm, state, at));
    }
}

impl<A, K, C, S> RateLimiter<K> for KeyedLimiter<A, K, C, S>
where
    A: Algorithm,
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
{
    #[inline]
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        // A reading older than the latest forgetting counts as its watermark (see
        // `evict.rs`); read after the key's state is found, which orders it.
        let apply = |state: &A::State| {
            self.algorithm
                .acquire(state, self.sweeper.reading(now), cost)
        };
        loop {
            let found = match self.states.get(key, apply) {
                Some(found) => found,
                None => match self.admit_new_key(now, cost) {
                    Some(decision) => return decision,
                    None => {
                        let found =
                            self.states
                                .get_or_insert(key, || self.algorithm.fresh(), apply);
                        self.sweep_if_due();
                        found
                    }
                },
            };
            match found {
                Ok(decision) => return decision,
                Err(Retired) => self.remove_retired(key),
            }
        }
    }

    #[inline]
    fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let now = self.epoch.elapsed();
        let answer = |state: &A::State| self.algorithm.available(state, self.sweeper.reading(now));
        match self.states.get(key, answer).flatten() {
            Some(available) => available,
            // No state, or a retired one: the key is as good as new.
            None => {
                let fresh = self.algorithm.fresh();
                self.algorithm.available(&fresh, now).unwrap_or(0)
            }
        }
    }

    fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let now = self.epoch.elapsed();
        // An unknown key is fresh: there is nothing to give back.
        self.states.get(key, |state| {
            self.algorithm
                .refund(state, self.sweeper.reading(now), cost)
        });
    }
}
