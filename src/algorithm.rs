//! The algorithm contract: what one key's state is and how a request steps it.
//!
//! The keyed limiter (`keyed/`) knows stores, clocks and forgetting, and nothing of
//! tokens or windows; an [`Algorithm`] knows one key's state and nothing of stores. The
//! single-word algorithms implement it through [`WordAlgorithm`](crate::word::WordAlgorithm)
//! and its compare-and-set loop, the sliding log directly, and per-key quotas as a
//! wrapper around either ([`PerKey`](crate::per_key::PerKey)).

#[cfg(not(turnstile_loom))]
use crate::sync::AtomicU64;
use crate::{Decision, Quota, QuotaError, Settlement};

/// Why a request could not be applied to the state it found. Each is transient: the
/// keyed limiter resolves it and looks the key up again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// The state is retired: the key is being forgotten. Remove the entry and look
    /// again, to find the key absent or fresh.
    Retired,
    /// The state is frozen by a thread moving the key to a new quota, which replaces
    /// the entry next, with no user code in between. Yield and look again.
    Moving,
    /// The state predates the limiter's current quotas: move it first
    /// ([`Rules::renew`]).
    Outdated,
    /// The state was relocated: frozen where it is while a copy takes its place (the
    /// key promoted to the young generation, or moved to a segment's larger table).
    /// Look again, to find the copy, or to make it ([`Rules::relocate`]).
    Relocated,
}

/// What a sweep did with one key's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retirement {
    /// It carries information: keep it. It is not forgettable before this instant
    /// unless a request changes it (`u64::MAX`: not within the clock's range), which
    /// tells when the next sweep could forget it.
    Kept(u64),
    /// It carried none and is retired now: remove it.
    Retired,
    /// It was retired earlier (by a race with another pass, or an earlier call for
    /// the same entry): remove it.
    AlreadyRetired,
    /// It is being moved to a new quota: keep it; its mover replaces it.
    Moving,
    /// It was relocated ([`Rules::relocate`]): its copy is the key's state now, or
    /// is made from it by whoever finishes the relocation.
    Relocated,
}

/// What [`Rules::renew`] did with an outdated state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Nothing left to do: the state is current now (swapped for its successor, or
    /// moved by another thread), or must be resolved again.
    Current,
    /// Another thread is moving the key: yield and look again.
    Moving,
    /// The state is retired: remove it and look again.
    Retired,
    /// The state was relocated: look again, for its copy.
    Relocated,
}

/// One algorithm's rules, and how they create and step a key's state. Keys of type
/// `K` matter only to per-key rules, which resolve each key's quota. The methods of
/// the public, sealed [`Algorithm`]: a public trait in this private module, so that
/// it can be `Algorithm`'s supertrait while no code outside the crate can name it.
pub trait Rules<K>: Send + Sync {
    /// One key's state; the keyed store knows where to keep it.
    type State: Send + Sync + Stored + 'static;

    /// What moving a key to the current quotas needs to know, from
    /// [`resolve`](Self::resolve).
    type Resolved;

    /// Whether [`create`](Self::create) runs user code (a per-key resolver). The
    /// keyed limiter then makes a new key's state only once the lookup that missed
    /// the key has let go of its epoch guard, so that slow user code holds up no
    /// other thread's reclamation of memory.
    const CREATE_CALLS_USER_CODE: bool = false;

    /// The state of a key seen for the first time, or again after it was forgotten.
    fn create(&self, key: &K) -> Self::State;

    /// One request for `cost` at `now` (nanoseconds since the epoch).
    fn acquire(&self, state: &Self::State, now: u64, cost: u32) -> Result<Decision, Blocked>;

    /// [`acquire`](Self::acquire) asked only whether: the same step, with the same
    /// change to the state, answering only whether the request was allowed. For a
    /// caller that reads nothing else of the [`Decision`] (`try_acquire`): the token
    /// bucket and the GCRA then decide without dividing and compute no `remaining`
    /// and no `retry_after`; the other algorithms take the whole step.
    #[inline]
    fn admit(&self, state: &Self::State, now: u64, cost: u32) -> Result<bool, Blocked> {
        self.acquire(state, now, cost)
            .map(|decision| decision.is_allowed())
    }

    /// [`acquire`](Self::acquire) on a state no other thread can see yet: a new key's,
    /// just made by [`create`](Self::create) and not yet stored. The same step; the
    /// single-word algorithms take it without an atomic read-modify-write (a locked
    /// instruction saved on the first request of every key: results/ANALYSIS.md,
    /// "The ring of papaya maps").
    fn acquire_unshared(
        &self,
        state: &mut Self::State,
        now: u64,
        cost: u32,
    ) -> Result<Decision, Blocked> {
        self.acquire(state, now, cost)
    }

    /// What the key has left at `now`, taking nothing.
    fn available(&self, state: &Self::State, now: u64) -> Result<u32, Blocked>;

    /// Gives `cost` back at `now`, never beyond what a key holds.
    fn refund(&self, state: &Self::State, now: u64, cost: u32) -> Result<(), Blocked>;

    /// Settles a request that took `estimate` at what it `actual`ly cost, at `now`, in
    /// one step on the state (one compare-and-set for a word): the difference given
    /// back (never beyond what the key holds; [`Settlement::refunded`] is what it got
    /// back; nothing on the windows and the sliding log) or charged beyond what the
    /// key has left, up to the debt cap (what passes it is [`Settlement::forgiven`]).
    /// See [`Settlement`] for what debt means in each algorithm.
    fn settle(
        &self,
        state: &Self::State,
        now: u64,
        estimate: u32,
        actual: u32,
    ) -> Result<Settlement, Blocked>;

    /// What a key with no state has at `now`; `key` makes the owned key, if needed.
    fn fresh_available(&self, key: impl FnOnce() -> K, now: u64) -> u32;

    /// Freezes `state` where it is and returns the copy that takes its place: the
    /// key's state from then on, to be stored in its new place (the young generation,
    /// or a segment's larger table). No request changes the frozen state again. Any
    /// thread may call it for the same state, before or after another did, and gets
    /// an equal copy: a relocation a thread began and did not finish is finished by
    /// the next thread that meets it, so none waits for another. Fails if the state is
    /// retired, or frozen for a move to a new quota.
    fn relocate(&self, state: &Self::State) -> Result<Self::State, Blocked>;

    /// A copy of `state` — a new key's, not yet stored — that is already relocated:
    /// [`relocate`](Self::relocate) on it gives back a copy of `state`. The claim a new
    /// key stakes in the ring's old generation (`store/ring/`).
    fn relocated_copy(&self, state: &Self::State) -> Self::State;

    /// Whether the state is retired (moving is not retired).
    fn is_retired(&self, state: &Self::State) -> bool;

    /// Retires the state if it carries no information as of `at`, so that no request
    /// can change it any more.
    fn retire_if_forgettable(&self, state: &Self::State, at: u64) -> Retirement;

    /// The current quotas' word on `key`, asked before any state is touched: user code
    /// (a per-key resolver) runs here, never while a state is frozen.
    fn resolve(&self, key: &K) -> Self::Resolved;

    /// Moves an [`Outdated`](Blocked::Outdated) state to what `resolved` says, at
    /// `now`: by freezing it and handing its successor (the same state when no rule
    /// changes) to `swap`, which replaces the state in the store (`false` if it could
    /// not, and then the state is thawed as it was).
    fn renew(
        &self,
        state: &Self::State,
        resolved: &Self::Resolved,
        now: u64,
        swap: impl FnOnce(Self::State) -> bool,
    ) -> Renewal;
}

/// Rules that hold every [`Quota`] and whose keys can move from one quota to another:
/// the methods of the public, sealed [`Reconfigurable`].
pub trait Movable: Rules<()> + PartialEq + Clone + Sized + 'static {
    /// A state as it was when frozen.
    type Frozen;

    /// The rules for `quota`.
    fn for_quota(quota: &Quota) -> Self;

    /// Freezes `state` so that no request changes it any more, and returns what it
    /// held. Fails if it is retired or frozen already.
    fn freeze(&self, state: &Self::State) -> Result<Self::Frozen, Blocked>;

    /// The frozen state's own latest time: every reading before it answers as it
    /// does. A move reads the key's allowance no earlier than this, so that a lagging
    /// reading cannot take the key's state back in time.
    fn moment(&self, frozen: &Self::Frozen) -> u64;

    /// What the frozen state had left at `now`.
    fn frozen_available(&self, frozen: &Self::Frozen, now: u64) -> u32;

    /// What the frozen state owed at `now`, in units (tokens, requests): the debt a
    /// move carries into the new quota, so that no move gives a key in debt an
    /// allowance it has not repaid.
    fn frozen_debt(&self, frozen: &Self::Frozen, now: u64) -> u32;

    /// Undoes [`freeze`](Self::freeze): `state` holds `frozen` again and requests may
    /// change it. Only the thread that froze it may thaw it.
    fn thaw(&self, state: &Self::State, frozen: Self::Frozen);

    /// A new state holding exactly what `frozen` held: the successor of a key moved to
    /// the rules it already has.
    fn restored(&self, frozen: &Self::Frozen) -> Self::State;
}

/// Rules made from a limiter's quota when it is built (the five algorithms' rules,
/// not per-key ones). The token bucket, the fixed window and the sliding log hold
/// every quota; the GCRA and the sliding window counter refuse the few their word
/// cannot hold exactly.
pub trait RulesFromQuota: Sized {
    /// The rules for `quota`.
    fn from_quota(quota: &Quota) -> Result<Self, QuotaError>;
}

/// Every reconfigurable rule holds every quota.
impl<R: Movable> RulesFromQuota for R {
    fn from_quota(quota: &Quota) -> Result<Self, QuotaError> {
        Ok(R::for_quota(quota))
    }
}

/// The rules a limiter runs: which algorithm, and for per-key limiters which inner
/// algorithm under which resolver. [`KeyedLimiter<A, K>`](crate::KeyedLimiter) and
/// [`DirectLimiter<A>`](crate::DirectLimiter) are generic over it; each algorithm has
/// a type alias ([`TokenBucket`](crate::TokenBucket), [`Gcra`](crate::Gcra), ...), so
/// code names this trait only to be generic over the algorithm:
///
/// ```
/// use turnstile::{Algorithm, Decision, KeyedLimiter};
///
/// fn first_request<A: Algorithm<u64>>(limiter: &KeyedLimiter<A, u64>) -> Decision {
///     limiter.acquire(&1, 1)
/// }
///
/// let quota = turnstile::Quota::per_second(5)?;
/// assert!(first_request(&turnstile::TokenBucket::new(quota)?).is_allowed());
/// assert!(first_request(&turnstile::Gcra::new(quota)?).is_allowed());
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
///
/// Sealed: implemented by turnstile's rules only. Its methods live on a private
/// supertrait, so that a new algorithm or a change to how a request steps a key's
/// state is not a breaking change:
///
/// ```compile_fail
/// struct MyRules;
/// impl turnstile::Algorithm<u64> for MyRules {}
/// ```
pub trait Algorithm<K>: Rules<K> {}

impl<K, R: Rules<K>> Algorithm<K> for R {}

/// An [`Algorithm`] made from one [`Quota`] for every key: the five algorithms'
/// rules, which `new`, `with_clock` and [`Builder::build`](crate::Builder) build a
/// limiter from (per-key rules are built with a resolver instead). Sealed, as
/// [`Algorithm`].
pub trait FromQuota: Algorithm<()> + RulesFromQuota {}

impl<R: Algorithm<()> + RulesFromQuota> FromQuota for R {}

/// An [`Algorithm`] that holds every [`Quota`] and whose keys can move from one quota
/// to another: what per-key quotas and reconfiguration need — the token bucket, the
/// fixed window and the sliding log. Sealed, as [`Algorithm`].
pub trait Reconfigurable: FromQuota + Movable {}

impl<R: FromQuota + Movable> Reconfigurable for R {}

/// A state's shape, as the keyed store needs to know it: a single word, which the word
/// store (`store/words/`, opt-in) can keep beside its key, or anything else, which
/// the ring of papaya maps (`store/ring/`, the default) holds in its own entry.
#[cfg(not(turnstile_loom))]
pub trait Stored: Sized + Send + Sync {
    /// Whether the state is a single word, which the word store can hold beside its
    /// key (`store/words/`): only `AtomicU64`. Every other state lives in papaya.
    #[doc(hidden)]
    const WORD: bool = false;

    /// The state a word of the word store is. Called only when [`WORD`](Self::WORD).
    #[doc(hidden)]
    fn of_word(word: &AtomicU64) -> &Self {
        let _ = word;
        unreachable!("turnstile: only single words live in the word store")
    }

    /// The state a word of the word store is, mutably. Called only when
    /// [`WORD`](Self::WORD).
    #[doc(hidden)]
    fn of_word_mut(word: &mut AtomicU64) -> &mut Self {
        let _ = word;
        unreachable!("turnstile: only single words live in the word store")
    }

    /// The word a state is. Called only when [`WORD`](Self::WORD).
    #[doc(hidden)]
    fn into_word(self) -> AtomicU64 {
        unreachable!("turnstile: only single words live in the word store")
    }
}

/// The word algorithms' state: in papaya, or beside its key in the word store
/// (`store/built.rs`).
#[cfg(not(turnstile_loom))]
impl Stored for AtomicU64 {
    const WORD: bool = true;

    #[inline(always)]
    fn of_word(word: &AtomicU64) -> &Self {
        word
    }

    #[inline(always)]
    fn of_word_mut(word: &mut AtomicU64) -> &mut Self {
        word
    }

    #[inline(always)]
    fn into_word(self) -> AtomicU64 {
        self
    }
}

/// The sliding log's state and the mutex-per-key baseline's: always in papaya.
#[cfg(not(turnstile_loom))]
impl<T: Send> Stored for std::sync::Mutex<T> {}

/// A state's shape under loom: any (loom's stores keep every state in an `Arc`, and
/// its stand-in for the word store holds any state).
#[cfg(turnstile_loom)]
pub trait Stored {
    /// Whether the word store may hold the state: any, under loom.
    #[doc(hidden)]
    const WORD: bool = true;
}
#[cfg(turnstile_loom)]
impl<T> Stored for T {}
