//! Redis Sentinel: a master, a replica and three sentinels the test starts, the
//! master killed mid-run. The failure policy answers during the failover, checks are
//! decided again after the promotion, and — the replica caught up before the kill
//! (`WAIT`), so the replication-lag bound is zero here — every key admits exactly its
//! limit, for the async and the blocking limiter alike.

use crate::runtime;
use crate::sentinel_set::{SentinelSet, wait_for};
use std::time::Duration;
use turnstile::SharedDecision;
use turnstile::redis::{CheckError, CircuitBreaker, FailurePolicy, RedisTokenBucket};
use turnstile::{ManualClock, Quota};

/// A limiter's builder: `capacity` a day (no refill within the test), failing closed,
/// no breaker (so each check during the failover tries Redis), a client clock that
/// does not move.
fn builder(
    capacity: u32,
    prefix: &str,
    clock: &ManualClock,
) -> turnstile::redis::RedisTokenBucketBuilder {
    let quota = Quota::new(capacity, Duration::from_secs(24 * 3600) / capacity).unwrap();
    RedisTokenBucket::builder(quota, FailurePolicy::Closed)
        .prefix(prefix)
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .timeout(Duration::from_millis(250))
        .circuit_breaker(CircuitBreaker::off())
}

/// What the checks of one phase came to.
#[derive(Default, Debug)]
struct Tally {
    admitted: u32,
    fallbacks: u32,
}

impl Tally {
    fn add(&mut self, outcome: &SharedDecision<CheckError>) -> bool {
        match outcome {
            SharedDecision::Decided(decision) => {
                self.admitted += u32::from(decision.is_allowed());
                decision.is_allowed()
            }
            SharedDecision::Fallback { allowed, .. } => {
                assert!(!allowed, "the policy is Closed");
                self.fallbacks += 1;
                false
            }
        }
    }
}

#[test]
fn checks_follow_the_master_through_a_failover_and_admit_exactly_the_limit() {
    let set = SentinelSet::start();
    let runtime = runtime();
    let clock = ManualClock::new();
    let limit = 100;
    let async_limiter = runtime.block_on(async {
        builder(limit, "sentinel:async:", &clock)
            .connect_sentinel(set.client())
            .unwrap()
    });
    let blocking = builder(limit, "sentinel:blocking:", &clock)
        .build_blocking_sentinel(set.client())
        .unwrap();
    let mut async_tally = Tally::default();
    let mut blocking_tally = Tally::default();
    let check = |async_tally: &mut Tally, blocking_tally: &mut Tally| {
        let outcome = runtime.block_on(async_limiter.acquire("k", 1));
        let decided = outcome.decision().is_some();
        async_tally.add(&outcome);
        let outcome = blocking.acquire("k", 1);
        let both = decided && outcome.decision().is_some();
        blocking_tally.add(&outcome);
        both
    };

    for _ in 0..40 {
        assert!(check(&mut async_tally, &mut blocking_tally));
    }
    assert_eq!((async_tally.admitted, blocking_tally.admitted), (40, 40));
    set.replicated();
    let mut set = set;
    set.master.kill();

    // Until the replica is promoted, the sentinels name the dead master: the policy
    // answers. Then the checks are decided again, on the new master.
    wait_for("checks decided on the new master", || {
        check(&mut async_tally, &mut blocking_tally)
    });
    assert!(set.promoted());
    assert!(async_tally.fallbacks >= 1, "{async_tally:?}");
    assert!(blocking_tally.fallbacks >= 1, "{blocking_tally:?}");

    // The new master holds what the old one had admitted: exactly the limit in all.
    for _ in 0..2 * limit {
        check(&mut async_tally, &mut blocking_tally);
    }
    assert_eq!(async_tally.admitted, limit, "{async_tally:?}");
    assert_eq!(blocking_tally.admitted, limit, "{blocking_tally:?}");
}
