//! The keyed limiter every algorithm runs in: a store of per-key states, the clock,
//! and the forgetting of idle keys (see [`crate::evict`]). Algorithms know nothing of
//! maps or forgetting; this module knows nothing of tokens or windows.

mod reconfigure;

use crate::algorithm::{Algorithm, Blocked, Renewal, Retirement};
use crate::builder::{Builder, DefaultHasher};
use crate::clock::{Clock, Epoch, QuantaClock};
use crate::evict::{KeyStats, Overflow, Sweeper};
use crate::store::{KeyMap, Store};
use crate::sync::yield_now;
use crate::{Decision, KeyRef, Quota, RateLimiter};
use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

/// A keyed rate limiter running algorithm `A`: [`TokenBucket`](crate::TokenBucket),
/// [`FixedWindow`](crate::FixedWindow), [`SlidingWindowCounter`](crate::SlidingWindowCounter),
/// [`SlidingLog`](crate::SlidingLog) and [`Gcra`](crate::Gcra) are this type with
/// their own `A`; see each of them for what its limit means. With `A` a
/// [`PerKey`](crate::per_key::PerKey) wrapper, each key has its own quota and the
/// limiter can be reconfigured while it runs.
///
/// Keys are created on their first request and forgotten once their state carries no
/// information ([`crate::evict`]): memory follows the active keys, never a throttled
/// key's allowance.
pub struct KeyedLimiter<A, K, C = QuantaClock, S = DefaultHasher>
where
    A: Algorithm<K>,
{
    states: KeyMap<K, A::State, S>,
    algorithm: A,
    epoch: Epoch<C>,
    sweeper: Sweeper,
    /// The allowance shared by new keys that find the map full, under
    /// `Overflow::Shared`.
    overflow: Option<SharedAllowance>,
    quota: Quota,
}

/// One allowance shared by every new key that finds the map full (`Overflow::Shared`):
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

impl<A: Algorithm<K>, K: Hash + Eq> KeyedLimiter<A, K> {
    /// A builder for the clock, the hasher, the expected number of keys and how keys
    /// are forgotten.
    pub fn builder(quota: Quota) -> Builder<Self> {
        Builder::new(quota)
    }
}

impl<L, C: Clock, S: BuildHasher> Builder<L, C, S> {
    /// The limiter running `algorithm`, with `rules` making the shared overflow
    /// allowance's rules if there is one; its epoch is now.
    pub(crate) fn assemble<A, K, R, E>(
        self,
        algorithm: A,
        rules: impl Fn(&Quota) -> Result<R, E>,
    ) -> Result<KeyedLimiter<A, K, C, S>, E>
    where
        A: Algorithm<K>,
        K: Hash + Eq,
        R: Algorithm<()> + 'static,
    {
        let overflow = match self.forgetting.max_keys {
            Some((_, Overflow::Shared(quota))) => Some(SharedAllowance::new(rules(&quota)?)),
            _ => None,
        };
        Ok(KeyedLimiter {
            states: KeyMap::with_hasher(self.hasher, self.expected_keys),
            algorithm,
            epoch: Epoch::start(self.clock),
            sweeper: Sweeper::new(&self.forgetting, self.expected_keys),
            overflow,
            quota: self.quota,
        })
    }
}

impl<A, K, C, S> KeyedLimiter<A, K, C, S>
where
    A: Algorithm<K>,
    K: Hash + Eq,
    C: Clock,
    S: BuildHasher,
{
    /// Asks for `cost` tokens for `key`, all or nothing (see
    /// [`RateLimiter::acquire`]).
    #[inline]
    pub fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        loop {
            // The hot path: a known key, one lookup and one compare-and-set. Its only
            // call of `apply`, so it inlines.
            let found = match self.states.get(key, |state| self.apply(state, now, cost)) {
                Some(found) => found,
                None => self.acquire_new(key, now, cost),
            };
            match found {
                Ok(decision) => return decision,
                Err(blocked) => self.unblock(key, blocked, now),
            }
        }
    }

    /// Asks for one token for `key`: `acquire(key, 1).is_allowed()`.
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.acquire(key, 1).is_allowed()
    }

    /// What `key` has now, taking nothing and creating nothing (see
    /// [`RateLimiter::peek`]).
    pub fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        loop {
            let found = self.states.get(key, |state| {
                self.algorithm.available(state, self.sweeper.reading(now))
            });
            match found {
                Some(Ok(available)) => return available,
                // No state, or a retired one: the key is as good as new.
                None | Some(Err(Blocked::Retired)) => {
                    return self
                        .algorithm
                        .fresh_available(|| key.to_key(), self.sweeper.reading(now));
                }
                Some(Err(blocked)) => self.unblock(key, blocked, now),
            }
        }
    }

    /// Gives back `cost` tokens an allowed request took but did not use (see
    /// [`RateLimiter::refund`]).
    pub fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        let now = self.epoch.elapsed();
        loop {
            let found = self.states.get(key, |state| {
                self.algorithm
                    .refund(state, self.sweeper.reading(now), cost)
            });
            match found {
                // No state, or a retired one, was full: nothing to give back.
                None | Some(Ok(())) | Some(Err(Blocked::Retired)) => return,
                Some(Err(blocked)) => self.unblock(key, blocked, now),
            }
        }
    }

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
    /// margin; returns how many. Forgetting never changes a decision (see
    /// [`crate::evict`]). Waits for a sweep already running to finish.
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
        self.states.retain(|state| {
            match self.algorithm.retire_if_forgettable(state, at) {
                Retirement::Kept | Retirement::Moving => true,
                Retirement::Retired => {
                    forgotten += 1;
                    false
                }
                // Retired by a race with another pass, or by an earlier call for this
                // entry: every retired entry is removable.
                Retirement::AlreadyRetired => false,
            }
        });
        self.sweeper.end(forgotten, self.states.len());
        forgotten
    }

    /// After an insertion: sweeps if the map has doubled since the last sweep and no
    /// other sweep is running (a request never waits for another's sweep).
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
        if self.sweeper.cap_sweep_allowed(now)
            && let Some(_sweeping) = self.sweeper.try_lock()
        {
            self.sweep();
            if self.states.len() < self.sweeper.max_keys {
                return None;
            }
        }
        self.sweeper.count_overflow();
        let retry_after = self.sweeper.next_cap_sweep_in(now);
        Some(match &self.overflow {
            Some(shared) => match (shared.0)(self.sweeper.reading(now), cost) {
                Decision::Overflow { .. } => Decision::Overflow { retry_after },
                decision => decision,
            },
            None => Decision::Overflow { retry_after },
        })
    }

    /// One request applied to the state found for a key. A reading older than the
    /// latest forgetting counts as its watermark (see `evict.rs`); read after the
    /// state is found, which orders it.
    #[inline(always)]
    fn apply(&self, state: &A::State, now: u64, cost: u32) -> Result<Decision, Blocked> {
        self.algorithm
            .acquire(state, self.sweeper.reading(now), cost)
    }

    /// The first request of a key with no state: make room if the map is at its cap,
    /// store the key's state (exactly once, however many threads race), apply the
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
        let create = |key: &K| self.algorithm.create(key);
        let found = self
            .states
            .get_or_insert(key, create, |state| self.apply(state, now, cost));
        self.sweep_if_due();
        found
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
        }
    }

    /// A retired state was found for `key`: help remove it, so the next look finds
    /// the key absent or fresh.
    fn remove_retired<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
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
        let resolved = self.algorithm.resolve(&key.to_key());
        let now = self.sweeper.reading(now);
        let renewal = self.states.get(key, |state| {
            match self.algorithm.renew(state, &resolved, now) {
                Renewal::Replace(successor) => {
                    // Frozen by this thread, so nobody else replaces or removes it.
                    let swapped = self.states.swap(key, state, successor);
                    debug_assert!(swapped, "a frozen entry is only replaced by its mover");
                    Renewal::Current
                }
                other => other,
            }
        });
        match renewal {
            Some(Renewal::Moving) => yield_now(),
            Some(Renewal::Retired) => self.remove_retired(key),
            _ => {}
        }
    }

    /// The limiter's algorithm.
    pub(crate) fn algorithm(&self) -> &A {
        &self.algorithm
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

    /// A broken sweep for a loom mutant: removes forgettable states without retiring
    /// them first.
    #[cfg(turnstile_loom)]
    pub(crate) fn sweep_without_retiring(&self, forgettable: impl Fn(&A::State, u64) -> bool) {
        let at = self.sweeper.begin(self.epoch.elapsed());
        self.states.retain(|state| !forgettable(state, at));
    }
}

impl<A, K, C, S> RateLimiter<K> for KeyedLimiter<A, K, C, S>
where
    A: Algorithm<K>,
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
        KeyedLimiter::acquire(self, key, cost)
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
