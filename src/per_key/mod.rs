//! Per-key quotas: each key under its own quota, from a resolver asked when the key's
//! state is created, and moved to a new quota when the limiter is reconfigured.
//!
//! [`PerKey`] is an algorithm wrapper: a key's state is the configuration it was made
//! under, its own rules and the inner algorithm's state, side by side in the map's
//! entry, so a known key's request still takes one lookup and one compare-and-set.
//!
//! # Moving a key to a new quota
//! [`reconfigure`](crate::KeyedLimiter::reconfigure) only publishes the new resolver.
//! Each existing key moves at its next request (acquire, peek, refund or settle), directly to
//! the quota the resolver current then gives it:
//!
//! 1. **The same quota as before changes nothing**: the key keeps its state exactly,
//!    so reconfiguring to the same quota changes no decision, for every algorithm,
//!    under any clock readings.
//! 2. **A key with its whole allowance** (one that carries no information, like a
//!    new key) starts afresh under the new quota, exactly as if it had been
//!    forgotten: so forgetting idle keys never changes a decision, reconfigured or
//!    not (but for a request still running under an older configuration: see
//!    [below](#requests-of-one-configuration)). Like any new key it has no history: a
//!    later reading that lags behind the move is not raised to it (a forgotten key's
//!    readings are raised to the sweep's watermark instead, which bounds that lag by
//!    the eviction margin).
//! 3. **Otherwise the key keeps what it had left**, capped at what the new quota
//!    holds; the rest counts as used under the new quota. Both are taken at the
//!    request's reading raised to the key's own latest time — the earliest instant
//!    its state can have been written at: a fixed window's start, a sliding log's
//!    newest admission, a token bucket's grid point `capacity` intervals before it is
//!    full again — and the new state starts at that instant. A reading that lags
//!    behind the key's own history reads what that history left, never more. For a
//!    token bucket: its tokens, capped at the new capacity, refilling from then on at
//!    the new rate on the new grid. For a sliding log, the kept-back requests are
//!    recorded at that reading, so they leave the window no earlier than the
//!    originals would: across a move the log may admit less than an exact log would,
//!    never more than its limit.
//!
//!    **A key in debt** (a settle charged it beyond what it had:
//!    [`Settlement`]) has nothing left, and owes the same
//!    units under the new quota — tokens, requests — charged at that instant, capped
//!    at the new quota's debt cap (one capacity): a move never gives a key in debt an
//!    allowance it has not repaid, and repays nothing itself. It repays at the new
//!    rate from then on.
//!
//!    One corner is not exact, and is bounded. A token bucket's word records when it
//!    will be full, not when it was last written, so a moving request whose clock
//!    lags behind the key's latest request (clocks that disagree) reads fewer tokens
//!    — never more — but starts the new quota that much earlier. If the new quota
//!    refills faster, the key gains the new refill over the lag: at most `lag / new
//!    interval` tokens more than a move at the latest request's time would give,
//!    never beyond the new capacity, and the lag is below `(capacity + debt cap) ×
//!    old interval` (a settle may have stored the word that far ahead of its reading).
//!    Each quota's own limit holds over its stretch. Stamping the move at the latest
//!    instant the write could have had instead would hold every move to a faster quota
//!    back at the old rate until the old bucket was nearly full; we chose exactness
//!    for moves by clocks that agree.
//!
//!    The same lag can also leave the key **owing**. The word cannot tell a settle's
//!    charge from a reading behind the key's latest refill (as a cost of 0 cannot:
//!    [`Settlement`]), so a moving reading that lags by `j` of the old intervals
//!    across the key's latest refill reads `j` tokens fewer than the key has, and
//!    what falls below none counts as debt: the key can leave the move owing up to
//!    `min(j, capacity)` tokens more than a move at the latest request's time would
//!    leave it, charged in the new quota's units — its next admission up to that many
//!    new intervals later. A restriction, never an admission, repaid at the new rate.
//!    (Telling a lag from a charge would take a second word per key.)
//!
//! # Exact under concurrency, and what runs when
//! The resolver — user code — runs first, with nothing frozen: a resolver that
//! panics, panics in the caller's request and leaves the key as it was; one that is
//! slow delays only its own caller. Then the key's state is frozen by a
//! compare-and-set to a *moving* marker (distinct from the *retired* marker of
//! forgetting, so a sweep always knows what it may remove), and the entry is replaced
//! by its successor in one step of the map (papaya: one `compute`; the word store:
//! under the key's segment lock) — the same state under the new number when the rules
//! do not change. The owned key is made before the freeze, so only the map's hashing,
//! comparing and copying of it run in between; if one of those panics, the key is
//! thawed on the way out. A mover that finds a newer configuration published after it
//! resolved thaws the key and resolves again, so no key moves to a quota that was not
//! current when it was frozen.
//!
//! **A key's configuration changes only with its entry.** An entry's number is fixed
//! when it is made, and the map publishes the entry whole, so a thread that finds it
//! reads its number, rules and state as they were made, on any memory model. Only
//! the thread that froze the state replaces the entry, so two moves of one key (to
//! two configurations, or a move and a relocation) never both land: the one that
//! loses finds the successor and looks at its number, which only grows. (Moving a key
//! to unchanged rules costs a new entry rather than a store of the number in place:
//! once per key and reconfiguration, and it keeps the number out of reach of a
//! relocation's stale read.) A request that meets the moving marker yields and looks
//! again; it waits only between two steps of the moving thread. Requests to other
//! keys, and to keys already moved, never wait. The resolver sits behind a read-write
//! lock that key creation and moves read and only `set_quota` and `reconfigure` write.
//!
//! # Requests of one configuration
//! A reloaded configuration file's checks do not read the limiter's current
//! configuration: each carries its own (`Pinned`, crate-internal), so a request of
//! the new file moves every key it meets to the new quota at once, and one of the
//! old file decides under the old quota unless a request of the new one has moved the
//! key already (then under the key's, as a key moves forward only). No resolver runs
//! for them, and no lock is taken.
//!
//! Forgetting is then not quite invisible: a key a request of the new file moved and
//! that was forgotten since (full, idle past the eviction margin) is a new key
//! again, and a request of the old file still in flight makes it afresh under the old
//! quota, where the kept key would have decided under the new one. (Exact would take
//! remembering forgotten keys, or a new key of an old request made under a quota its
//! configuration does not carry.) Only those requests see it; every request of the
//! newest configuration decides as if nothing had been forgotten.
//!
//! On the word store a lock-free lookup can miss a key for the moment its entry is
//! swapped (papaya's never does), so the answers a miss would change — a peek's "new
//! key: full", a refund's "nothing to give back", a refusal at the key cap — look
//! again under the segment's lock first. Model-checked: loom models 8, 9 and 10 (the
//! move), 13 and 14 (the missed lookup, on a store as weak as the word store's), 22
//! (requests of two configurations racing: forward only), each with a mutant.

// Carried by a reloaded configuration file's checks (and loom's models of them).
#[cfg(any(feature = "config", turnstile_loom))]
mod pinned;

#[cfg(any(feature = "config", turnstile_loom))]
pub(crate) use pinned::Pinned;

use crate::algorithm::{Algorithm, Blocked, Reconfigurable, Renewal, Retirement, Rules};
use crate::decision::Decision;
use crate::sync::mutants::{Mutant, active, choose};
use crate::sync::{AtomicU64, Ordering, RwLock, Unpoisoned};
use crate::{Quota, Settlement};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// A key's quota, as the limiter's resolver says.
pub(crate) type Resolver<K> = Arc<dyn Fn(&K) -> Quota + Send + Sync>;

/// Rules `A` for each key under its own quota, from a resolver called when the key's
/// state is created, and again when the key moves after a reconfiguration.
pub struct PerKey<A, K> {
    /// The resolver and the configuration it belongs to. Read when a key is created or
    /// moved, never on the path of a known key.
    resolver: RwLock<(u64, Resolver<K>)>,
    /// The current configuration; a key whose entry was made under an older one is
    /// moved at its next request.
    configuration: AtomicU64,
    rules: PhantomData<fn() -> A>,
}

/// A key's state under [`PerKey`]: the configuration it was made under, its rules and
/// the rules' state. The configuration never changes: a key moves to another one
/// only with a new entry, which the map publishes whole, so every thread that finds
/// an entry reads its number, rules and state as they were made.
pub struct Entry<A: Algorithm<()>> {
    configuration: u64,
    rules: A,
    state: A::State,
}

/// An entry is more than one word: the store boxes it.
#[cfg(not(turnstile_loom))]
impl<A: Algorithm<()>> crate::algorithm::Stored for Entry<A> {}

impl<A: Reconfigurable> Entry<A> {
    /// A new key's entry under `quota`.
    fn fresh(configuration: u64, quota: &Quota) -> Self {
        Self::fresh_under(configuration, A::for_quota(quota))
    }

    /// A new key's entry under `rules`, which belong to `configuration`.
    fn fresh_under(configuration: u64, rules: A) -> Self {
        Self {
            configuration,
            state: rules.create(&()),
            rules,
        }
    }

    /// The successor, under `rules`, of a key whose state under `old` was frozen as
    /// `frozen`, moved at `now` (see the module docs).
    fn carried(configuration: u64, rules: A, old: &A, frozen: &A::Frozen, now: u64) -> Self {
        let state = rules.create(&());
        let at = choose(Mutant::MoveAtRawReading, now.max(old.moment(frozen)), now);
        let left = old.frozen_available(frozen, at);
        if left < old.fresh_available(|| (), at) {
            // Stamp the state at `at` (take one and give it back there), so that a
            // reading before `at` sees the state as of `at` at the most (for the
            // token bucket: fewer tokens; for the windows: as `at`); then take all but
            // what the key keeps. A fresh state is never blocked, and
            // taking at most its whole allowance is never refused.
            let whole = rules.available(&state, at).unwrap_or(0);
            let _ = rules.acquire(&state, at, 1);
            let _ = rules.refund(&state, at, 1);
            let _ = rules.acquire(&state, at, whole - left.min(whole));
            // A key in debt (it has nothing left) owes the same units under the new
            // quota, up to its debt cap: a move never wipes a debt out.
            let debt = old.frozen_debt(frozen, at);
            if debt > 0 {
                let _ = rules.settle(&state, at, 0, debt);
            }
        }
        Self {
            configuration,
            rules,
            state,
        }
    }

    /// The successor at `configuration` of a key whose rules do not change: its state
    /// exactly as frozen (rule 1 of the module docs).
    fn kept(&self, configuration: u64, frozen: &A::Frozen) -> Self {
        Self {
            configuration,
            state: self.rules.restored(frozen),
            rules: self.rules.clone(),
        }
    }

    /// The configuration the entry is at, for loom models.
    #[cfg(turnstile_loom)]
    pub(crate) fn configuration(&self) -> u64 {
        self.configuration
    }

    /// The rules and state, if the entry is at configuration `wanted` or a later one.
    /// An unpinned request wants the limiter's current configuration, which no entry
    /// is past; a pinned one (`Pinned`) wants its own, and a key a later configuration
    /// has moved already is decided under that one (a key moves forward only).
    #[inline]
    fn current(&self, wanted: u64) -> Result<(&A, &A::State), Blocked> {
        if self.configuration >= wanted {
            Ok((&self.rules, &self.state))
        } else {
            Err(Blocked::Outdated)
        }
    }

    /// The inner state relocated by its own rules, beside the entry's configuration
    /// and rules (which never change).
    fn relocate(&self) -> Result<Self, Blocked> {
        let state = self.rules.relocate(&self.state)?;
        Ok(Self {
            configuration: self.configuration,
            rules: self.rules.clone(),
            state,
        })
    }

    /// A relocated copy of a new key's entry (see [`Rules::relocated_copy`]).
    fn relocated_copy(&self) -> Self {
        Self {
            configuration: self.configuration,
            rules: self.rules.clone(),
            state: self.rules.relocated_copy(&self.state),
        }
    }

    /// Whether the state is retired; under the `SharedMarker` mutant, a state that is
    /// not at configuration `wanted` reads as moving instead.
    fn is_retired(&self, wanted: u64) -> bool {
        if active(Mutant::SharedMarker) && self.current(wanted).is_err() {
            return false; // "retired and outdated" read as "being moved"
        }
        self.rules.is_retired(&self.state)
    }

    /// By the entry's own rules, whatever its configuration: a key with its whole
    /// allowance would start afresh when moved, as it does when forgotten. (`wanted`
    /// only for the `SharedMarker` mutant, as in `is_retired`.)
    fn retire_if_forgettable(&self, at: u64, wanted: u64) -> Retirement {
        let retirement = self.rules.retire_if_forgettable(&self.state, at);
        if active(Mutant::SharedMarker)
            && retirement == Retirement::AlreadyRetired
            && self.current(wanted).is_err()
        {
            return Retirement::Moving; // "retired and outdated" read as "being moved"
        }
        retirement
    }

    /// Moves the key to `rules`, configuration `configuration`, at `now` (see the
    /// module docs): its state frozen, and its successor — the same state if the rules
    /// are the same, else the state carried over — handed to `swap`. `superseded` says
    /// whether the move should give way because a newer configuration was published
    /// meanwhile (an unpinned mover then resolves again; a pinned one never gives way:
    /// its configuration is its request's).
    fn renew(
        &self,
        configuration: u64,
        rules: A,
        now: u64,
        swap: impl FnOnce(Self) -> bool,
        superseded: impl FnOnce() -> bool,
    ) -> Renewal {
        if self.configuration >= configuration && !active(Mutant::MoveBackward) {
            // Moved already, by another request (configurations only grow: a slower
            // mover must not take a key back to an older quota).
            return Renewal::Current;
        }
        // Frozen even when the rules are the same: only the thread that froze the
        // state replaces the entry, so two moves of one key (to two configurations,
        // or a move and a relocation) never both land.
        let frozen = match self.rules.freeze(&self.state) {
            Ok(frozen) => frozen,
            Err(Blocked::Retired) => return Renewal::Retired,
            Err(Blocked::Moving) => return Renewal::Moving,
            // Relocated meanwhile: the copy is the key's state; look again.
            Err(Blocked::Relocated) => return Renewal::Relocated,
            // Inner rules have one quota: never outdated.
            Err(Blocked::Outdated) => return Renewal::Current,
        };
        // From here to the swap, a panic (a key whose `Eq` or `Clone` panics inside
        // the map) must not leave the key frozen: every later request would wait for
        // a mover that is gone. The guard thaws it on the way out.
        let mut thaw = ThawUnlessMoved {
            rules: &self.rules,
            state: &self.state,
            frozen: Some(frozen),
        };
        if superseded() {
            // A newer configuration came while this thread resolved: moving to the
            // quota it resolved would apply one no longer current. Undo (the guard
            // thaws); the request resolves again.
            return Renewal::Current;
        }
        let Some(frozen) = thaw.frozen.as_ref() else {
            return Renewal::Current;
        };
        let same = rules == self.rules && !active(Mutant::MoveUnchangedRules);
        let successor = if same {
            // The same rules: the state stays exactly as it is.
            self.kept(configuration, frozen)
        } else {
            Self::carried(configuration, rules, &self.rules, frozen, now)
        };
        if swap(successor) {
            // Replaced: the frozen state is gone with its entry, never to be thawed.
            thaw.frozen = None;
        }
        // Otherwise (only the mover replaces a frozen entry, so this does not happen)
        // the guard thaws it: the key must not stay frozen.
        Renewal::Current
    }
}

/// The configuration's number (how many reconfigurations so far), not the resolver.
impl<A, K> fmt::Debug for PerKey<A, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerKey")
            .field("configuration", &self.configuration())
            .finish_non_exhaustive()
    }
}

/// The configuration the entry was made under, not its rules or state.
impl<A: Algorithm<()>> fmt::Debug for Entry<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("configuration", &self.configuration)
            .finish_non_exhaustive()
    }
}

impl<A, K> PerKey<A, K> {
    pub(crate) fn new(resolve: Resolver<K>) -> Self {
        Self {
            resolver: RwLock::new((0, resolve)),
            configuration: AtomicU64::new(0),
            rules: PhantomData,
        }
    }

    /// Makes `resolve` the source of every key's quota from now on; returns the new
    /// configuration's number.
    pub(crate) fn reconfigure(&self, resolve: Resolver<K>) -> u64 {
        let mut resolver = self.resolver.write().unpoisoned();
        let next = resolver.0 + 1;
        *resolver = (next, resolve);
        // Relaxed: a request that sees the new number and moves its key reads the
        // resolver under the lock, taken after this store's critical section (a load
        // cannot read a store that happens after it), so it finds this resolver or a
        // newer one; a request that still sees the old number takes effect before the
        // reconfiguration.
        self.configuration.store(next, Ordering::Relaxed);
        next
    }

    /// The current configuration.
    #[inline]
    fn configuration(&self) -> u64 {
        // Relaxed: see `reconfigure`.
        self.configuration.load(Ordering::Relaxed)
    }

    /// The current resolver's quota for `key`, and the configuration it belongs to.
    fn resolve_now(&self, key: &K) -> (u64, Quota) {
        let (configuration, resolve) = {
            let resolver = self.resolver.read().unpoisoned();
            (resolver.0, Arc::clone(&resolver.1))
        };
        // The user's resolver runs outside the lock, with nothing frozen.
        (configuration, resolve(key))
    }
}

impl<A: Reconfigurable, K: Send + Sync> Rules<K> for PerKey<A, K> {
    type State = Entry<A>;
    /// The configuration the quota belongs to, and the quota.
    type Resolved = (u64, Quota);

    /// The resolver.
    const CREATE_CALLS_USER_CODE: bool = true;

    fn create(&self, key: &K) -> Entry<A> {
        let (configuration, quota) = self.resolve_now(key);
        Entry::fresh(configuration, &quota)
    }

    #[inline(always)]
    fn acquire(&self, entry: &Entry<A>, now: u64, cost: u32) -> Result<Decision, Blocked> {
        let (rules, state) = entry.current(self.configuration())?;
        rules.acquire(state, now, cost)
    }

    /// As `acquire`: an outdated entry is [`Blocked::Outdated`], for the full path
    /// to move first; a current one answers by its own rules' `admit`.
    #[inline(always)]
    fn admit(&self, entry: &Entry<A>, now: u64, cost: u32) -> Result<bool, Blocked> {
        let (rules, state) = entry.current(self.configuration())?;
        rules.admit(state, now, cost)
    }

    fn acquire_unshared(
        &self,
        entry: &mut Entry<A>,
        now: u64,
        cost: u32,
    ) -> Result<Decision, Blocked> {
        // The configuration checked as `current` does (a new entry made just before a
        // reconfiguration is outdated at once); the rules' own unshared step.
        entry.current(self.configuration())?;
        let Entry { rules, state, .. } = entry;
        rules.acquire_unshared(state, now, cost)
    }

    fn available(&self, entry: &Entry<A>, now: u64) -> Result<u32, Blocked> {
        let (rules, state) = entry.current(self.configuration())?;
        rules.available(state, now)
    }

    fn refund(&self, entry: &Entry<A>, now: u64, cost: u32) -> Result<(), Blocked> {
        let (rules, state) = entry.current(self.configuration())?;
        rules.refund(state, now, cost)
    }

    fn settle(
        &self,
        entry: &Entry<A>,
        now: u64,
        estimate: u32,
        actual: u32,
    ) -> Result<Settlement, Blocked> {
        let (rules, state) = entry.current(self.configuration())?;
        rules.settle(state, now, estimate, actual)
    }

    fn fresh_available(&self, key: impl FnOnce() -> K, now: u64) -> u32 {
        let (_, quota) = self.resolve_now(&key());
        A::for_quota(&quota).fresh_available(|| (), now)
    }

    fn relocate(&self, entry: &Entry<A>) -> Result<Entry<A>, Blocked> {
        entry.relocate()
    }

    fn relocated_copy(&self, entry: &Entry<A>) -> Entry<A> {
        entry.relocated_copy()
    }

    fn is_retired(&self, entry: &Entry<A>) -> bool {
        entry.is_retired(self.configuration())
    }

    /// By the entry's own rules, whatever its configuration.
    fn retire_if_forgettable(&self, entry: &Entry<A>, at: u64) -> Retirement {
        entry.retire_if_forgettable(at, self.configuration())
    }

    fn resolve(&self, key: &K) -> (u64, Quota) {
        self.resolve_now(key)
    }

    fn renew(
        &self,
        entry: &Entry<A>,
        resolved: &(u64, Quota),
        now: u64,
        swap: impl FnOnce(Entry<A>) -> bool,
    ) -> Renewal {
        let &(configuration, quota) = resolved;
        entry.renew(configuration, A::for_quota(&quota), now, swap, || {
            self.configuration() != configuration
        })
    }
}

/// A frozen state that is thawed when this is dropped, unless `frozen` was taken
/// because the entry was replaced: so an early return or a panic between freezing and
/// swapping never leaves a key frozen.
struct ThawUnlessMoved<'a, A: Reconfigurable> {
    rules: &'a A,
    state: &'a A::State,
    frozen: Option<A::Frozen>,
}

impl<A: Reconfigurable> Drop for ThawUnlessMoved<'_, A> {
    fn drop(&mut self) {
        if let Some(frozen) = self.frozen.take() {
            self.rules.thaw(self.state, frozen);
        }
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::{PerKey, Resolver};
    use crate::Quota;
    use crate::algorithm::{Blocked, Rules};
    use crate::token_bucket::TokenBucketRules;
    use std::sync::Arc;

    fn per_second(n: u32) -> Resolver<u64> {
        Arc::new(move |_: &u64| Quota::per_second(n).unwrap())
    }

    /// What is left of a key's allowance at time 0.
    fn available_at_zero(
        rules: &PerKey<TokenBucketRules, u64>,
        entry: &super::Entry<TokenBucketRules>,
    ) -> u32 {
        rules.available(entry, 0).unwrap()
    }

    #[test]
    fn a_new_entry_stepped_unshared_takes_as_a_stored_one_does() {
        let rules = PerKey::<TokenBucketRules, u64>::new(per_second(10));
        let (mut unshared, shared) = (rules.create(&1), rules.create(&1));
        let answers = (
            rules.acquire_unshared(&mut unshared, 0, 4),
            rules.acquire(&shared, 0, 4),
        );
        assert_eq!(answers.0, answers.1);
        assert!(matches!(answers.0, Ok(decision) if decision.is_allowed()));
        assert_eq!(
            (
                available_at_zero(&rules, &unshared),
                available_at_zero(&rules, &shared)
            ),
            (6, 6)
        );
    }

    /// A relocated entry keeps its configuration, rules and state for every thread
    /// that copies it, and takes no request itself.
    #[test]
    fn a_relocated_entry_is_copied_with_its_quota_and_refuses_requests() {
        let rules = PerKey::<TokenBucketRules, u64>::new(per_second(10));
        let entry = rules.create(&1);
        assert!(rules.acquire(&entry, 0, 4).unwrap().is_allowed());
        let copy = rules.relocate(&entry).unwrap();
        let again = rules.relocate(&entry).unwrap();
        assert_eq!(rules.acquire(&entry, 0, 1), Err(Blocked::Relocated));
        for copy in [&copy, &again] {
            assert_eq!(available_at_zero(&rules, copy), 6);
        }
        // Reconfigured since: the copy is outdated, as its original would be.
        rules.reconfigure(per_second(20));
        assert_eq!(rules.acquire(&copy, 0, 1), Err(Blocked::Outdated));
    }

    #[test]
    fn a_new_entry_made_before_a_reconfiguration_is_outdated_unshared_too() {
        let rules = PerKey::<TokenBucketRules, u64>::new(per_second(10));
        let mut entry = rules.create(&1);
        rules.reconfigure(per_second(20));
        assert_eq!(
            rules.acquire_unshared(&mut entry, 0, 4),
            Err(Blocked::Outdated)
        );
        // Untouched: the whole of the old quota is still there for the move.
        assert_eq!(
            Rules::<()>::available(&entry.rules, &entry.state, 0),
            Ok(10)
        );
    }
}
