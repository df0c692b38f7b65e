//! What a leased limiter counts: fetches, tokens leased and expired, denials answered
//! locally, and how lease sizes moved, so tests and dashboards see the leases work
//! without timing anything.

use super::size::Resize;
use crate::sync::{AtomicU64, Ordering};

/// A leased limiter's counts since it was built (shared by its clones). A snapshot:
/// each field is read on its own, so one taken while checks run may be off by the
/// fetches in flight.
///
/// Every token taken from Redis is accounted for exactly: at any moment,
/// `leased + refunded = served_by_fetch + served_locally + expired + held`, where
/// `refunded` is what went back into the leases (a policy's refused requests, settles
/// below their estimate), `held` is what the process's leases still hold
/// ([`RedisLeasedTokenBucket::held`](super::RedisLeasedTokenBucket::held) per key)
/// and `served_locally` the tokens requests took from leases without a round trip, a
/// settle's charge taken from a lease among them ([`LeaseCounts::served_locally`]
/// computes it for a set of keys whose held tokens you know). A token served and
/// then given back to Redis by a settle (the part a lease could not take back) stays
/// counted as served: these counts follow the tokens fetches took, not the bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseCounts {
    /// Lease fetches Redis answered: each one round trip (failed ones are in
    /// [`FailureCounts`](crate::redis::FailureCounts)).
    pub fetches: u64,
    /// Of those, fetches started ahead of need, off the request path.
    pub fetched_ahead: u64,
    /// Tokens taken from Redis's buckets by the fetches.
    pub leased: u64,
    /// Of those, the costs of the requests that fetched, served at once.
    pub served_by_fetch: u64,
    /// Tokens that stopped counting unused at their lease's expiry. They are not
    /// returned to Redis (see the [module docs](super#expiry-tokens-stop-counting)).
    /// Tokens a policy's refused request gave back to a lease that had expired, or
    /// that had no room under `max_lease` for them, are counted here too: dropped.
    /// (A settle's refund that a lease cannot take goes to Redis instead: not here.)
    pub expired: u64,
    /// Tokens given back to a key's lease, where later requests take them: by a
    /// refused request of a [`Policy`](crate::policy::Policy) (what found no room is
    /// in `expired`), and by a settle below its estimate
    /// ([`RedisLeasedTokenBucket::settle`](super::RedisLeasedTokenBucket::settle):
    /// what found no room went to Redis, counted in neither).
    pub refunded: u64,
    /// Requests denied without a round trip, from a denial Redis gave for the key.
    pub denied_locally: u64,
    /// Times a key's lease size doubled.
    pub grew: u64,
    /// Times a key's lease size halved.
    pub shrank: u64,
    /// Fetches that got no answer — timed out, lost with their connection, or dropped
    /// by their caller (a timeout or `select!` of its own) — after being sent. Redis may
    /// still have run them: each may have taken up to what it asked without this
    /// process knowing (tokens lost to every process: under-admission, never more).
    pub unanswered: u64,
    /// The most tokens the `unanswered` fetches can have taken: the sum of what each
    /// asked for.
    pub unanswered_asked: u64,
}

impl LeaseCounts {
    /// Tokens requests took from leases without a round trip, given `held`, the
    /// tokens the leases still hold (summed over every key that ever had a lease).
    /// A `held` read after these counts (a fetch landing in between) can exceed what
    /// they allow; the answer then saturates at 0.
    pub fn served_locally(&self, held: u64) -> u64 {
        (self.leased + self.refunded)
            .saturating_sub(self.served_by_fetch)
            .saturating_sub(self.expired)
            .saturating_sub(held)
    }
}

/// The live counters behind [`LeaseCounts`].
#[derive(Debug, Default)]
pub(super) struct LeaseCounters {
    fetches: AtomicU64,
    fetched_ahead: AtomicU64,
    leased: AtomicU64,
    served_by_fetch: AtomicU64,
    expired: AtomicU64,
    refunded: AtomicU64,
    denied_locally: AtomicU64,
    grew: AtomicU64,
    shrank: AtomicU64,
    unanswered: AtomicU64,
    unanswered_asked: AtomicU64,
}

/// Adds `n` to `counter`.
fn bump(counter: &AtomicU64, n: u64) {
    if n > 0 {
        // Relaxed: statistics; the counters guard no other memory.
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

impl LeaseCounters {
    /// A fetch Redis answered: `taken` tokens, `cost` of them to the request that
    /// fetched; `ahead` when no request fetched.
    pub(super) fn fetched(&self, ahead: bool, taken: u32, cost: u32) {
        bump(&self.fetches, 1);
        bump(&self.fetched_ahead, u64::from(ahead));
        bump(&self.leased, u64::from(taken));
        bump(&self.served_by_fetch, u64::from(cost.min(taken)));
    }

    /// A fetch sent that got no answer, asking for at most `asked`.
    pub(super) fn unanswered(&self, asked: u32) {
        bump(&self.unanswered, 1);
        bump(&self.unanswered_asked, u64::from(asked));
    }

    /// Tokens that expired unused.
    pub(super) fn expired(&self, tokens: u32) {
        bump(&self.expired, u64::from(tokens));
    }

    /// `cost` given back by a refused request: `back` of it into the lease, the rest
    /// dropped.
    pub(super) fn refunded(&self, cost: u32, back: u32) {
        bump(&self.refunded, u64::from(back));
        bump(&self.expired, u64::from(cost - back));
    }

    /// A request denied from a remembered denial.
    pub(super) fn denied_locally(&self) {
        bump(&self.denied_locally, 1);
    }

    /// A lease size that moved.
    pub(super) fn resized(&self, resize: Resize) {
        match resize {
            Resize::Grew => bump(&self.grew, 1),
            Resize::Shrank => bump(&self.shrank, 1),
            Resize::Kept => {}
        }
    }

    /// A snapshot.
    pub(super) fn snapshot(&self) -> LeaseCounts {
        // Relaxed: as in `bump`; the fields are independent statistics.
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LeaseCounts {
            fetches: read(&self.fetches),
            fetched_ahead: read(&self.fetched_ahead),
            leased: read(&self.leased),
            served_by_fetch: read(&self.served_by_fetch),
            expired: read(&self.expired),
            refunded: read(&self.refunded),
            denied_locally: read(&self.denied_locally),
            grew: read(&self.grew),
            shrank: read(&self.shrank),
            unanswered: read(&self.unanswered),
            unanswered_asked: read(&self.unanswered_asked),
        }
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn served_locally_saturates_when_held_was_read_after_the_counts() {
        let counts = LeaseCounts {
            leased: 10,
            served_by_fetch: 2,
            expired: 1,
            ..LeaseCounts::default()
        };
        assert_eq!(counts.served_locally(3), 4);
        assert_eq!(counts.served_locally(16), 0);
        assert_eq!(LeaseCounts::default().served_locally(16), 0);
    }
}
