//! The one contract every limiter implements.

use crate::Decision;
use std::borrow::Borrow;
use std::hash::Hash;

/// A keyed rate limiter: each key has its own allowance under one quota.
///
/// Methods take the key in a borrowed form, as `HashMap::get` does: a
/// `String`-keyed limiter answers `limiter.try_acquire("alice")`, a `u64`-keyed one
/// `limiter.try_acquire(&42)`. An owned key is made only the first time a key is seen.
///
/// All methods may be called from any number of threads at once.
pub trait RateLimiter<K> {
    /// Asks for `cost` tokens for `key`, all or nothing.
    ///
    /// A key's first request finds it full. A denied request changes nothing and is
    /// not counted against the key, so a client retrying while denied is not locked
    /// out. A cost of zero is always allowed and takes nothing.
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
