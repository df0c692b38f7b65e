//! Off the hot path: a check its key's lease could not answer (a remembered denial, a
//! wait for the fetch in flight, a fetch), and fetches themselves, on the request path
//! or ahead of need in a task, one per key at a time.

use super::Core;
use super::hold::{self, tick};
use super::local::{Denial, KeyLease, Slow, held};
use super::size::{self, Observed, refill_below};
use crate::Decision;
use crate::SharedDecision;
use crate::redis::engine::{Checked, Leased};
use crate::redis::{CheckError, CircuitState};
use crate::sync::Ordering;
use ::redis::aio::ConnectionLike;
use std::sync::Arc;
use std::time::Duration;

/// What a fetch came to.
enum Fetched {
    /// The sweep removed the key's entry before the fetch began: look it up again.
    Retired,
    /// Ahead of need, with the lease already at its size: nothing asked.
    Full,
    /// Redis's answer (or why there was none), and the tokens held after it.
    Done(Result<Leased, CheckError>, u32),
}

/// A fetch's ask, and the lease size and step it would set once answered.
struct Sizing {
    up_to: u32,
    size: u32,
    resize: size::Resize,
    at: u64,
    /// The key's charges ([`Slow::charges`]) when the fetch was sized, before it was
    /// sent.
    charges: u64,
}

/// Counts a fetch as unanswered when dropped before an answer came (see
/// `LeaseCounts::unanswered`).
struct Unanswered<'a> {
    counters: &'a super::counts::LeaseCounters,
    /// What the fetch asked for, until it is answered or known not to have been sent.
    asked: Option<u32>,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(asked) = self.asked {
            self.counters.unanswered(asked);
        }
    }
}

/// Whether a fetch that failed with `error` may still have run in Redis: it was sent
/// and its answer lost. An open breaker sends nothing; an error reply is an answer.
fn may_have_run(error: &CheckError) -> bool {
    matches!(
        error,
        CheckError::Timeout(_) | CheckError::TaskLost | CheckError::UnexpectedReply(_)
    ) || matches!(error, CheckError::Redis(e)
        if e.is_io_error() || e.is_timeout() || e.is_connection_dropped())
}

/// Holds a key's one fetch slot: released however the fetch ends (its future dropped
/// included), waking the requests that waited on it.
struct FetchSlot(Arc<KeyLease>);

impl Drop for FetchSlot {
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the next fetcher's swap, so that it reads
        // the lease after this fetch's grant (and asks for no more than the size).
        self.0.fetching.store(false, Ordering::Release);
        self.0.fetched.notify_waiters();
    }
}

impl<C> Core<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Starts one task fetching `key`'s next lease, unless a fetch is in flight or
    /// there is no tokio runtime to run it.
    #[cold]
    pub(super) fn start_refill(self: &Arc<Self>, lease: &Arc<KeyLease>, key: &[u8]) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Acquire: see `FetchSlot::drop`.
        if lease.fetching.swap(true, Ordering::Acquire) {
            return;
        }
        let slot = FetchSlot(Arc::clone(lease));
        if matches!(self.limiter.circuit(), CircuitState::Open { retry_in } if !retry_in.is_zero())
        {
            // The breaker would refuse it at once: no task, no allocation, no failure
            // counted for a check the lease answered. A request that finds the lease
            // short asks Redis itself, the probe included.
            return;
        }
        let inner = Arc::clone(self);
        let key = key.to_vec();
        runtime.spawn(async move {
            let fetched = inner.fetch(&slot.0, &key, 0).await;
            if let Fetched::Done(result, _) = &fetched {
                inner.limiter.count_background(&key, result);
            }
            drop(slot);
        });
    }

    /// A check the lease could not answer: a remembered denial, a wait for the fetch in
    /// flight (within the timeout), or a fetch of its own (within the timeout).
    pub(super) async fn acquire_slow(
        self: &Arc<Self>,
        key: &[u8],
        cost: u32,
    ) -> SharedDecision<CheckError> {
        let mut seen_before = None;
        if self.leases.with(key, |_| ()).is_none() {
            // A key with no entry gets one when it is seen again within a lifetime;
            // seen once, its request is a plain check: one round trip, its cost alone.
            seen_before = self.seen.sighting(key, self.now(), self.lifetime);
            if seen_before.is_none() {
                return self.first_sighting(key, cost).await;
            }
        }
        let timeout = self.limiter.timeout();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let lease = self
                .leases
                .entry(key, |lease, slow| self.removable(lease, slow));
            if let Some(first) = seen_before.take() {
                // The first sighting's fetch is the new entry's previous one.
                let mut slow = lease.slow();
                slow.last_fetch = slow.last_fetch.or(Some(first));
            }
            let now = self.now();
            let held = match self.acquire_fast(&lease, key, cost, now) {
                Ok(remaining) => return SharedDecision::Decided(Decision::Allowed { remaining }),
                Err(held) => held,
            };
            if let Some(denied) = self.remembered_denial(&lease, cost, held, now) {
                return SharedDecision::Decided(denied);
            }
            let notified = lease.fetched.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Acquire: see `FetchSlot::drop`.
            if lease.fetching.swap(true, Ordering::Acquire) {
                // Another fetch is in flight: wait for it rather than start a second.
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    return self.limiter.settle(key, Err(CheckError::Timeout(timeout)));
                }
                let now = self.now();
                if let Ok(remaining) = self.acquire_fast(&lease, key, cost, now) {
                    return SharedDecision::Decided(Decision::Allowed { remaining });
                }
                let failure = lease.slow().failure.as_ref().map(copy_error);
                if let Some(error) = failure {
                    return self.limiter.settle(key, Err(error));
                }
                // It answered, for less than this cost: a remembered denial, or this
                // request's own fetch, next.
                continue;
            }
            let slot = FetchSlot(Arc::clone(&lease));
            match self.fetch(&lease, key, cost).await {
                Fetched::Retired => continue,
                // A fetch for a cost of at least one always asks.
                Fetched::Full => unreachable!("a request's fetch asks for its cost"),
                Fetched::Done(result, held) => {
                    drop(slot);
                    let result = result.map(|leased| Checked {
                        decision: with_remaining(leased.checked.decision, held),
                        replaced: leased.checked.replaced,
                    });
                    return self.limiter.settle(key, result);
                }
            }
        }
    }

    /// The request of a key seen for the first time (lately): the plain limiter's
    /// check, taking exactly `cost` and leaving no lease, no entry.
    async fn first_sighting(&self, key: &[u8], cost: u32) -> SharedDecision<CheckError> {
        let result = self.limiter.lease(key, cost, cost).await;
        let result = result.map(|leased| {
            self.counters.fetched(false, leased.taken, cost);
            Checked {
                decision: with_remaining(leased.checked.decision, 0),
                replaced: leased.checked.replaced,
            }
        });
        self.limiter.settle(key, result)
    }

    /// A denial from the one Redis gave `key` for a cost at most `cost`, while its wait
    /// lasts. A larger cost waits that long and one interval more per token more: the
    /// grid point where the bucket has the denied cost, then one token per interval.
    fn remembered_denial(
        &self,
        lease: &KeyLease,
        cost: u32,
        held: u32,
        now: u64,
    ) -> Option<Decision> {
        let denial = lease.slow().denied?;
        if now >= denial.until || cost < denial.cost {
            return None;
        }
        self.counters.denied_locally();
        let more = self.quota.refill_every().saturating_mul(cost - denial.cost);
        Some(Decision::Denied {
            remaining: held,
            retry_after: Duration::from_nanos(denial.until - now).saturating_add(more),
        })
    }

    /// One fetch for `key`, by the holder of its fetch slot: sizes the lease by the
    /// rule (`size.rs`), then runs the check of `cost` (zero ahead of need) taking up
    /// to the size less what the lease holds; the grant beyond the cost goes into the
    /// lease, and a denial is remembered.
    async fn fetch(&self, lease: &KeyLease, key: &[u8], cost: u32) -> Fetched {
        let Some(sizing) = self.size_lease(lease, cost) else {
            return Fetched::Retired;
        };
        let up_to = sizing.up_to;
        if up_to == 0 {
            return Fetched::Full;
        }
        // Within the engine's timeout alone: a deadline of our own around it would
        // drop the request at that same moment, and a dropped request tells the
        // circuit breaker nothing. Until it answers, the fetch counts as unanswered
        // (if its caller drops this future, so it stays).
        let mut pending = Unanswered {
            counters: &self.counters,
            asked: Some(up_to),
        };
        let result = self.limiter.lease(key, cost, up_to).await;
        let now = self.now();
        let mut slow = lease.slow();
        let held = match &result {
            Ok(leased) => {
                pending.asked = None;
                // Only an answered fetch moves the size: a run of failures says
                // nothing about the key's traffic.
                slow.size = sizing.size;
                slow.last_fetch = Some(sizing.at);
                self.counters.resized(sizing.resize);
                // Relaxed: a hint for the hot path (see `acquire_fast`).
                lease
                    .refill_below
                    .store(u64::from(refill_below(sizing.size)), Ordering::Relaxed);
                self.counters.fetched(cost == 0, leased.taken, cost);
                self.settle_lease(lease, &mut slow, leased, cost, now, sizing.charges)
            }
            Err(error) => {
                if !may_have_run(error) {
                    pending.asked = None;
                }
                slow.failure = Some(copy_error(error));
                held(lease, now)
            }
        };
        Fetched::Done(result, held)
    }

    /// Before a fetch: drops the lease's expired tokens, works out its next size by the
    /// rule (kept if the fetch is answered), and how many tokens to ask for at most
    /// (`None`: the entry was swept away).
    fn size_lease(&self, lease: &KeyLease, cost: u32) -> Option<Sizing> {
        let now = self.now();
        let mut slow = lease.slow();
        if slow.retired {
            return None;
        }
        // Whatever the last fetch failed with is this one's to say now.
        slow.failure = None;
        let expired = hold::drop_expired(&lease.word, tick(now));
        self.counters.expired(expired);
        let observed = Observed {
            since_last_fetch: slow.last_fetch.map(|last| now.saturating_sub(last)),
            expired,
        };
        let (size, resize) = size::next(slow.size, self.max_lease, self.lifetime, observed);
        Some(Sizing {
            up_to: size.saturating_sub(held(lease, now)).max(cost),
            size,
            resize,
            at: now,
            charges: slow.charges,
        })
    }

    /// Puts what a fetch Redis answered into the lease, or remembers its denial
    /// unless a settle charged the key in Redis since the fetch was sized (`charges`,
    /// then): the denial may have been decided before that charge, and its wait not
    /// count the debt. The tokens held after it.
    fn settle_lease(
        &self,
        lease: &KeyLease,
        slow: &mut Slow,
        leased: &Leased,
        cost: u32,
        now: u64,
        charges: u64,
    ) -> u32 {
        match leased.checked.decision {
            Decision::Allowed { .. } => {
                slow.denied = None;
                let leftover = leased.taken - cost;
                if leftover == 0 {
                    return held(lease, now);
                }
                let until = tick(now.saturating_add(self.lifetime));
                let added = hold::add(&lease.word, leftover, until, tick(now));
                // Tokens that expired during the round trip, and any grant beyond the
                // word (never, within `max_lease`), are dropped and counted.
                self.counters.expired(added.expired + added.overflow);
                added.held
            }
            Decision::Denied { retry_after, .. } => {
                // A charge counted after the fetch was sized came back after it was
                // sent: the fetch may have run in Redis before the charge. Not
                // remembered, the next request asks Redis (a charge that ran first
                // costs only that round trip).
                if slow.charges == charges {
                    let wait = u64::try_from(retry_after.as_nanos()).unwrap_or(u64::MAX);
                    slow.denied = Some(Denial {
                        until: now.saturating_add(wait),
                        cost,
                    });
                }
                held(lease, now)
            }
            _ => held(lease, now),
        }
    }

    /// Whether the sweep may forget `lease`: nothing held (expired tokens are dropped
    /// and counted here), its last fetch a lifetime old, no denial remembered.
    pub(super) fn removable(&self, lease: &KeyLease, slow: &Slow) -> bool {
        let now = self.now();
        self.counters
            .expired(hold::drop_expired(&lease.word, tick(now)));
        held(lease, now) == 0
            && slow
                .last_fetch
                .is_none_or(|last| now.saturating_sub(last) >= self.lifetime)
            && slow.denied.is_none_or(|denial| now >= denial.until)
    }
}

/// `decision` with `remaining` set to the tokens this process holds.
fn with_remaining(decision: Decision, held: u32) -> Decision {
    match decision {
        Decision::Allowed { .. } => Decision::Allowed { remaining: held },
        Decision::Denied { retry_after, .. } => Decision::Denied {
            remaining: held,
            retry_after,
        },
        Decision::ExceedsCapacity { capacity, .. } => Decision::ExceedsCapacity {
            remaining: held,
            capacity,
        },
        other => other,
    }
}

/// A copy of `error` for each request that waited on the fetch that got it.
fn copy_error(error: &CheckError) -> CheckError {
    match error {
        CheckError::Timeout(after) => CheckError::Timeout(*after),
        CheckError::Redis(error) => CheckError::Redis(error.clone()),
        CheckError::UnexpectedReply(reply) => CheckError::UnexpectedReply(reply.clone()),
        CheckError::TaskLost => CheckError::TaskLost,
        CheckError::CircuitOpen { retry_in } => CheckError::CircuitOpen {
            retry_in: *retry_in,
        },
    }
}
