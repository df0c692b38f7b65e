//! The one contract every limiter implements.

use crate::{Decision, Settlement};
use std::borrow::Borrow;
use std::hash::Hash;

/// A keyed rate limiter: each key has its own allowance under one quota.
///
/// Methods take the key in a borrowed form, as `HashMap::get` does: a
/// `String`-keyed limiter answers `limiter.try_acquire("alice")`, a `u64`-keyed one
/// `limiter.try_acquire(&42)`. An owned key is made only the first time a key is seen.
///
/// All methods may be called from any number of threads at once.
///
/// Its methods are generic over the borrowed key, so `dyn RateLimiter<K>` is not a
/// type; to hold limiters of different types in one collection, use its object-safe
/// form, [`DynRateLimiter`], which every `RateLimiter` implements.
pub trait RateLimiter<K> {
    /// Asks for `cost` tokens for `key`, all or nothing.
    ///
    /// A key's first request finds it full. A denied request changes nothing and is
    /// not counted against the key, so a client retrying while denied is not locked
    /// out. A request is allowed iff what the key has covers its cost: a cost of zero
    /// takes nothing and is allowed, unless the key is in debt (a
    /// [`settle`](Self::settle) charged it beyond what it had, and refill has not yet
    /// repaid it). A key in debt has less than nothing, so even a cost of zero is
    /// denied, its `retry_after` the exact time until the debt is repaid. A reading
    /// that lags the key's state can read the same with no settle: on the token bucket
    /// and GCRA a reading behind the key's last refill, on the sliding window counter a
    /// late reading inside the key's window (one per second, drained at 5 s: a cost of
    /// zero read at 4.999 s is denied for 1 ms) — the state cannot tell such a lag from
    /// a debt.
    fn acquire<Q>(&self, key: &Q, cost: u32) -> Decision
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>;

    /// Asks for one token for `key`: `acquire(key, 1).is_allowed()`. A limiter may
    /// answer it by a cheaper step with the same answer and the same effect on the
    /// key (turnstile's keyed and direct token bucket and GCRA compute no `remaining`
    /// and no `retry_after` for it).
    #[inline]
    fn try_acquire<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>,
    {
        self.acquire(key, 1).is_allowed()
    }

    /// Tokens `key` has now, without taking any or creating the key (an unknown key
    /// is full).
    fn peek<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>;

    /// Gives back `cost` tokens taken from `key` by an allowed request that did not go
    /// ahead (a later check of the same request refused it), capped at the capacity.
    /// A key with no state is full: there is nothing to give back.
    fn refund<Q>(&self, key: &Q, cost: u32)
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>;

    /// Settles a request that took `estimate` for `key` (an allowed
    /// [`acquire`](Self::acquire)) at what it `actual`ly cost, known only later (the
    /// tokens a model call used, the bytes a response sent): charges the difference
    /// when it cost more, even beyond what the key has left, and when it cost less,
    /// gives the difference back on the token bucket and GCRA only. **The fixed
    /// window, the sliding window counter and the sliding log give nothing back on
    /// settle** (`refunded: 0`): their state cannot tell which window (which log
    /// entries) counted the estimate, and giving it to a later window would admit
    /// more than the limit there; for refunds on settle, use the token bucket or
    /// GCRA. ([`refund`](Self::refund), right after the take, is unchanged.)
    ///
    /// A key that owes is refused, even a cost of zero, until its refill has repaid
    /// the debt, and the denial's `retry_after` counts the debt exactly. Debt is
    /// capped at one capacity (fixed, not configurable: see [`Settlement`]); what the
    /// cap turns away is reported in [`Settlement::forgiven`]. A reservation never
    /// settled stays at its estimate: settling at `actual == estimate` changes
    /// nothing.
    fn settle<Q>(&self, key: &Q, estimate: u32, actual: u32) -> Settlement
    where
        K: Borrow<Q>,
        Q: ?Sized + KeyRef<K>;
}

/// [`RateLimiter`] in a form that can be a trait object: a limiter of keys `K`, asked
/// with keys borrowed as `Q` (`K` itself by default), for a collection of limiters of
/// different algorithms, stores or clocks, or a limiter chosen at run time.
///
/// Every `RateLimiter<K>` that can be shared between threads is one, for every `Q` it
/// can be asked with, so there is nothing to implement: box or share the limiter, and
/// name `Q` where the keys are asked for in a borrowed form (`str` for `String` keys).
/// Each call is one dynamic call to the limiter's own method; a limiter used through
/// its own type pays nothing for this trait.
///
/// ```
/// use std::sync::Arc;
/// use turnstile::{DynRateLimiter, Gcra, Quota, TokenBucket};
///
/// // One limit per route, each the algorithm that suits it, in one list.
/// let limits: Vec<(&str, Arc<dyn DynRateLimiter<String, str>>)> = vec![
///     ("/login", Arc::new(Gcra::<String>::new(Quota::per_minute(5)?)?)),
///     ("/search", Arc::new(TokenBucket::<String>::new(Quota::per_second(20)?)?)),
/// ];
/// for (route, limiter) in &limits {
///     assert!(limiter.try_acquire("alice"), "{route}: a new key starts full");
/// }
/// # Ok::<(), turnstile::QuotaError>(())
/// ```
pub trait DynRateLimiter<K, Q: ?Sized = K>: Send + Sync {
    /// As [`RateLimiter::acquire`].
    fn acquire(&self, key: &Q, cost: u32) -> Decision;

    /// As [`RateLimiter::try_acquire`].
    fn try_acquire(&self, key: &Q) -> bool;

    /// As [`RateLimiter::peek`].
    fn peek(&self, key: &Q) -> u32;

    /// As [`RateLimiter::refund`].
    fn refund(&self, key: &Q, cost: u32);

    /// As [`RateLimiter::settle`].
    fn settle(&self, key: &Q, estimate: u32, actual: u32) -> Settlement;
}

/// Each method forwards to the limiter's own, inlined into it where the limiter's type
/// is known, so a caller generic over this trait pays no more than one over
/// [`RateLimiter`] (the policy's checks ask their limiters through it).
impl<K, Q, L> DynRateLimiter<K, Q> for L
where
    L: RateLimiter<K> + Send + Sync + ?Sized,
    K: Borrow<Q>,
    Q: ?Sized + KeyRef<K>,
{
    #[inline(always)]
    fn acquire(&self, key: &Q, cost: u32) -> Decision {
        RateLimiter::acquire(self, key, cost)
    }

    #[inline(always)]
    fn try_acquire(&self, key: &Q) -> bool {
        RateLimiter::try_acquire(self, key)
    }

    #[inline(always)]
    fn peek(&self, key: &Q) -> u32 {
        RateLimiter::peek(self, key)
    }

    #[inline(always)]
    fn refund(&self, key: &Q, cost: u32) {
        RateLimiter::refund(self, key, cost)
    }

    #[inline(always)]
    fn settle(&self, key: &Q, estimate: u32, actual: u32) -> Settlement {
        RateLimiter::settle(self, key, estimate, actual)
    }
}

/// A borrowed form of a key `K` that can make an owned `K` — `str` for `String`,
/// `u64` for `u64`, `str` for `Arc<str>`. Implemented for every `Q` whose
/// `to_owned()` converts into `K`.
pub trait KeyRef<K>: Hash + Eq {
    /// The owned key, made when a key is stored for the first time.
    fn to_key(&self) -> K;
}

impl<K, Q> KeyRef<K> for Q
where
    Q: ?Sized + Hash + Eq + ToOwned,
    Q::Owned: Into<K>,
{
    #[inline]
    fn to_key(&self) -> K {
        self.to_owned().into()
    }
}
