//! The Redis limiters as checks of a [`Policy`](crate::policy::Policy): the
//! [`SharedLimiter`] contract, with refunds and settles as one atomic script each.

use super::engine::ScriptLimiter;
use super::failure::CheckError;
use super::lease::RedisLeasedTokenBucket;
use super::limiter::{LimiterScript, RedisLimiter};
use crate::policy::{SharedFuture, SharedLimiter};
use crate::{Settlement, SharedDecision, SharedError};
use ::redis::aio::ConnectionLike;
use std::future::Future;

/// The contract's answer from a Redis limiter's: the error boxed. (The limiter has
/// counted and reported it already.)
fn boxed(answer: SharedDecision<CheckError>) -> SharedDecision {
    answer.map_error(Into::into)
}

impl<C> ScriptLimiter<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Gives back `cost` to `key` in Redis, counting (and reporting) a failure: a lost
    /// refund restricts the key until it refills, never admits more.
    fn refund(&self, key: &[u8], cost: u32) -> impl Future<Output = ()> + Send {
        let give_back = self.give_back(key, cost);
        async move {
            if let Err(error) = give_back.await {
                self.count_error(key, &error);
            }
        }
    }
}

/// The contract for a limiter that is a script call per check.
impl<S, C> SharedLimiter for RedisLimiter<S, C>
where
    S: LimiterScript,
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn acquire<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, SharedDecision> {
        Box::pin(async move { boxed(RedisLimiter::acquire(self, key, cost).await) })
    }

    fn refund<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, ()> {
        Box::pin(self.limiter.refund(key, cost))
    }

    fn settle<'a>(
        &'a self,
        key: &'a [u8],
        estimate: u32,
        actual: u32,
    ) -> SharedFuture<'a, Result<Settlement, SharedError>> {
        Box::pin(async move {
            RedisLimiter::settle(self, key, estimate, actual)
                .await
                .map_err(Into::into)
        })
    }

    fn fails_open(&self) -> bool {
        self.limiter.fails_open()
    }
}

/// A leased check answers from its lease without waiting when the lease holds the
/// cost, and gives refunds back to the lease; only a key without a lease entry is
/// refunded in Redis. A settle charges the lease first, then Redis
/// ([`RedisLeasedTokenBucket::settle`]).
impl<C> SharedLimiter for RedisLeasedTokenBucket<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    #[inline]
    fn acquire_now(&self, key: &[u8], cost: u32) -> Option<SharedDecision> {
        self.decide_now(key, cost).map(SharedDecision::Decided)
    }

    fn acquire<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, SharedDecision> {
        Box::pin(async move { boxed(RedisLeasedTokenBucket::acquire(self, key, cost).await) })
    }

    fn refund_now(&self, key: &[u8], cost: u32) {
        // `acquire_now` takes only from a lease, so the entry is there (unless a sweep
        // removed it meanwhile: the tokens are then dropped, an under-admission).
        self.give_back_locally(key, cost);
    }

    fn refund<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, ()> {
        let local = self.give_back_locally(key, cost);
        Box::pin(async move {
            if !local {
                self.script_limiter().refund(key, cost).await;
            }
        })
    }

    fn settle<'a>(
        &'a self,
        key: &'a [u8],
        estimate: u32,
        actual: u32,
    ) -> SharedFuture<'a, Result<Settlement, SharedError>> {
        Box::pin(async move {
            RedisLeasedTokenBucket::settle(self, key, estimate, actual)
                .await
                .map_err(Into::into)
        })
    }

    fn fails_open(&self) -> bool {
        self.script_limiter().fails_open()
    }

    fn answers_now(&self) -> bool {
        true
    }
}
