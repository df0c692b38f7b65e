//! Where a keyed limiter keeps each key's rules: one set shared by every key
//! ([`Shared`], the default), or each key's own ([`PerKey`]) — resolved once, when the
//! key's state is created, and carried over when the limiter is reconfigured.
//!
//! # Carrying a key over to a new quota
//! After [`reconfigure`](crate::KeyedLimiter::reconfigure), each existing key moves to
//! its new quota at its next request (or refund, or peek). The key keeps what it had
//! left at that moment, capped at what the new quota holds; the rest counts as used at
//! that moment under the new quota. For a token bucket: its tokens, capped at the new
//! capacity, refilling from then on at the new rate on the new grid. A key whose quota
//! grows keeps its tokens (it does not jump to the new capacity); one whose quota
//! shrinks keeps at most the new capacity.
//!
//! The move is exact under concurrency: the state is frozen by the same compare-and-set
//! that retires a forgotten key (so no request can change it any more), and the key's
//! entry is replaced by one with the carried-over state in one atomic step of the map.
//! A request that meets the frozen state waits for that step; it is the only wait in
//! turnstile, and it happens only to a key while it moves to a new quota, between two
//! steps of the thread moving it (no user code runs in between). Requests to other
//! keys, and to keys already moved, never wait. Model-checked: loom model 8.

use crate::Quota;
use crate::builder::Builder;
use crate::clock::Clock;
use crate::keyed::{Algorithm, KeyedLimiter};
use crate::sync::{AtomicU64, Ordering, RwLock};
use std::convert::Infallible;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

/// Where the rules for a key's requests come from.
pub trait Mode<A: Algorithm, K>: Send + Sync {
    /// What the map stores for a key.
    type Entry: Send + Sync;

    /// The entry of a key seen for the first time.
    fn create(&self, shared: &A, key: &K) -> Self::Entry;

    /// The entry's rules and state; `None` when the entry predates the current
    /// configuration and must be carried over first.
    fn current<'e>(&self, shared: &'e A, entry: &'e Self::Entry) -> Option<(&'e A, &'e A::State)>;

    /// The entry's rules and state, whichever configuration it was made under.
    fn any<'e>(shared: &'e A, entry: &'e Self::Entry) -> (&'e A, &'e A::State);

    /// `key`'s entry under the current configuration, keeping `left` of its allowance
    /// (at most what the new quota holds) and counting the rest as used at `now`.
    fn renew(&self, shared: &A, key: &K, left: u32, now: u64) -> Self::Entry;

    /// What a key with no state has at `now`; `key` makes the owned key, if needed.
    fn fresh_allowance(&self, shared: &A, key: impl FnOnce() -> K, now: u64) -> u32;
}

/// Every key under the limiter's one quota: the map holds each key's bare state.
#[derive(Debug, Default)]
pub struct Shared;

impl<A: Algorithm, K> Mode<A, K> for Shared {
    type Entry = A::State;

    #[inline]
    fn create(&self, shared: &A, _key: &K) -> A::State {
        shared.fresh()
    }

    #[inline]
    fn current<'e>(&self, shared: &'e A, entry: &'e A::State) -> Option<(&'e A, &'e A::State)> {
        Some((shared, entry))
    }

    #[inline]
    fn any<'e>(shared: &'e A, entry: &'e A::State) -> (&'e A, &'e A::State) {
        (shared, entry)
    }

    /// Never needed: a shared entry never predates its configuration.
    fn renew(&self, shared: &A, _key: &K, _left: u32, _now: u64) -> A::State {
        shared.fresh()
    }

    fn fresh_allowance(&self, shared: &A, _key: impl FnOnce() -> K, now: u64) -> u32 {
        shared.available(&shared.fresh(), now).unwrap_or(0)
    }
}

/// A key's quota, as the limiter's resolver currently says.
type Resolver<K> = Arc<dyn Fn(&K) -> Quota + Send + Sync>;

/// Each key under its own quota, from a resolver called once when the key's state is
/// created (and again when the limiter is reconfigured): the map holds each key's
/// rules beside its state, so a request still takes one lookup and one
/// compare-and-set.
pub struct PerKey<A, K> {
    /// The resolver and the configuration it belongs to. Read when a key is created or
    /// carried over, never on the path of a known key.
    resolver: RwLock<(u64, Resolver<K>)>,
    /// The current configuration; a key whose entry was made under another is carried
    /// over at its next request.
    configuration: AtomicU64,
    /// The algorithm's rules for a quota.
    rules: fn(&Quota) -> A,
}

/// A key's entry under [`PerKey`]: the configuration it was made under, its rules and
/// its state.
pub struct Entry<A: Algorithm> {
    configuration: u64,
    rules: A,
    state: A::State,
}

impl<A, K> PerKey<A, K> {
    pub(crate) fn new(rules: fn(&Quota) -> A, resolve: Resolver<K>) -> Self {
        Self {
            resolver: RwLock::new((0, resolve)),
            configuration: AtomicU64::new(0),
            rules,
        }
    }

    /// Makes `resolve` the source of every key's quota from now on.
    pub(crate) fn reconfigure(&self, resolve: Resolver<K>) {
        let mut resolver = self
            .resolver
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let next = resolver.0 + 1;
        *resolver = (next, resolve);
        // Release: a request that sees the new configuration and carries its key over
        // then reads the new resolver (through the lock, which orders it anyway).
        self.configuration.store(next, Ordering::Release);
    }

    /// The current resolver's quota for `key`, and the configuration it belongs to.
    fn resolve(&self, key: &K) -> (u64, Quota) {
        let (configuration, resolve) = {
            let resolver = self
                .resolver
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            (resolver.0, Arc::clone(&resolver.1))
        };
        // The user's resolver runs outside the lock.
        (configuration, resolve(key))
    }
}

impl<A: Algorithm, K: Send + Sync> Mode<A, K> for PerKey<A, K> {
    type Entry = Entry<A>;

    fn create(&self, _shared: &A, key: &K) -> Entry<A> {
        let (configuration, quota) = self.resolve(key);
        let rules = (self.rules)(&quota);
        let state = rules.fresh();
        Entry {
            configuration,
            rules,
            state,
        }
    }

    #[inline]
    fn current<'e>(&self, _shared: &'e A, entry: &'e Entry<A>) -> Option<(&'e A, &'e A::State)> {
        // Acquire: pairs with `reconfigure`'s Release. An entry made under an older
        // configuration is carried over; a request that still reads the old value is
        // one that took effect before the reconfiguration.
        let current = self.configuration.load(Ordering::Acquire);
        (entry.configuration == current).then_some((&entry.rules, &entry.state))
    }

    #[inline]
    fn any<'e>(_shared: &'e A, entry: &'e Entry<A>) -> (&'e A, &'e A::State) {
        (&entry.rules, &entry.state)
    }

    fn renew(&self, shared: &A, key: &K, left: u32, now: u64) -> Entry<A> {
        let entry = self.create(shared, key);
        // A fresh state holds the whole new allowance; count all but what is kept as
        // used now. Never refused: at most the fresh allowance is taken.
        let full = entry.rules.available(&entry.state, now).unwrap_or(0);
        let _ = entry
            .rules
            .acquire(&entry.state, now, full - left.min(full));
        entry
    }

    fn fresh_allowance(&self, shared: &A, key: impl FnOnce() -> K, now: u64) -> u32 {
        let entry = self.create(shared, &key());
        entry.rules.available(&entry.state, now).unwrap_or(0)
    }
}

/// An algorithm that holds every [`Quota`] (the token bucket, the fixed window and the
/// sliding log), so any quota a resolver returns can be applied.
pub trait AnyQuota: Algorithm {
    /// The rules for `quota`.
    fn for_quota(quota: &Quota) -> Self;
}

/// A quota for each key, from `quota_for`.
fn resolver<K>(quota_for: impl Fn(&K) -> Quota + Send + Sync + 'static) -> Resolver<K> {
    Arc::new(quota_for)
}

impl<A, K, C, S> Builder<KeyedLimiter<A, K>, C, S>
where
    A: AnyQuota,
    K: Hash + Eq + Send + Sync,
    C: Clock,
    S: BuildHasher,
{
    /// Builds a limiter in which each key gets `quota_for(key)`, asked once when the
    /// key's state is created (premium users more, say). The builder's quota is what
    /// [`quota`](KeyedLimiter::quota) reports. A known key's request still takes one
    /// lookup and one compare-and-set: its rules are stored beside its state.
    pub fn build_per_key(
        self,
        quota_for: impl Fn(&K) -> Quota + Send + Sync + 'static,
    ) -> KeyedLimiter<A, K, C, S, PerKey<A, K>> {
        let mode = PerKey::new(A::for_quota, resolver(quota_for));
        match self.assemble(mode, |quota| Ok::<_, Infallible>(A::for_quota(quota))) {
            Ok(limiter) => limiter,
            Err(never) => match never {},
        }
    }

    /// Builds a limiter whose quota can be changed while it runs
    /// ([`set_quota`](KeyedLimiter::set_quota), [`reconfigure`](KeyedLimiter::reconfigure)):
    /// every key gets the builder's quota until then.
    pub fn build_reconfigurable(self) -> KeyedLimiter<A, K, C, S, PerKey<A, K>> {
        let quota = self.quota;
        self.build_per_key(move |_| quota)
    }
}

impl<A, K, C, S> KeyedLimiter<A, K, C, S, PerKey<A, K>>
where
    A: AnyQuota,
    K: Hash + Eq + Send + Sync,
    C: Clock,
    S: BuildHasher,
{
    /// From now on each key gets `quota_for(key)`: new keys at once, existing keys at
    /// their next request, keeping what they have left up to what the new quota holds
    /// (see the [module docs](self)). No request waits for this call, which only
    /// publishes the new resolver.
    pub fn reconfigure(&self, quota_for: impl Fn(&K) -> Quota + Send + Sync + 'static) {
        self.mode().reconfigure(resolver(quota_for));
    }

    /// From now on every key gets `quota`, as [`reconfigure`](Self::reconfigure) says.
    pub fn set_quota(&self, quota: Quota) {
        self.reconfigure(move |_| quota);
    }
}
