//! `RedisLeasedTokenBucket`: tokens leased from the Redis bucket and served in process.
//! Five limiters on connections of their own admit exactly what the bucket gave up;
//! leases expire, grow and shrink as counted; a killed Redis leaves the held tokens
//! served, then the policy. Every clock here is a `ManualClock`, so no count depends
//! on timing.

use crate::server::RedisServer;
use crate::{fresh_prefix, manager};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use turnstile::SharedDecision;
use turnstile::redis::lease::{LeaseCounts, RedisLeasedTokenBucket, RedisLeasedTokenBucketBuilder};
use turnstile::redis::{CircuitBreaker, FailurePolicy, RedisTokenBucket};
use turnstile::{Decision, ManualClock, Quota};

const LIFETIME: Duration = Duration::from_millis(100);

/// A leased limiter's builder on `clock` (which the tests move by hand), with Redis's
/// key expiry off, as a clock that does not run in real time needs.
fn builder(
    quota: Quota,
    policy: FailurePolicy,
    prefix: &str,
    clock: &ManualClock,
) -> RedisLeasedTokenBucketBuilder {
    RedisLeasedTokenBucket::builder(quota, policy)
        .prefix(prefix)
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .lifetime(LIFETIME)
        .timeout(Duration::from_secs(5))
}

/// A quota that never refills within a test: `capacity` a day.
fn per_day(capacity: u32) -> Quota {
    Quota::new(capacity, Duration::from_secs(24 * 3600) / capacity).unwrap()
}

/// Waits until no fetch for `key` is in flight (a fetch ahead of need runs as a task).
async fn settled<C>(limiter: &RedisLeasedTokenBucket<C>, key: &str)
where
    C: ::redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while limiter.lease(key).is_some_and(|lease| lease.fetching) {
        assert!(Instant::now() < deadline, "a fetch never ended");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One allowed request, from the lease or a fetch.
async fn allowed(limiter: &RedisLeasedTokenBucket, key: &str) -> u32 {
    match limiter.acquire(key, 1).await {
        SharedDecision::Decided(Decision::Allowed { remaining }) => remaining,
        other => panic!("expected an allowed request, got {other:?}"),
    }
}

/// Gives `key` an entry whose lease is empty: the first fetches take leases of 1 and
/// 2, and the third request takes the one left.
async fn empty_lease(limiter: &RedisLeasedTokenBucket, key: &str) {
    for _ in 0..3 {
        allowed(limiter, key).await;
    }
    assert_eq!(limiter.held(key), 0);
}

/// Every token a limiter took from Redis is served, held, or expired.
fn assert_accounted(counts: &LeaseCounts, held: u32, admitted: u64) {
    assert_eq!(
        counts.served_by_fetch + counts.served_locally(u64::from(held)),
        admitted,
        "{counts:?}, held {held}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_leased_limiters_and_a_plain_one_admit_exactly_what_the_one_bucket_gave_up() {
    const CAPACITY: u32 = 1000;
    const MAX_LEASE: u32 = 16;
    const SERVERS: usize = 5;
    const TASKS: usize = 4;
    const TRIES: usize = 120;
    let server = RedisServer::start();
    let prefix = fresh_prefix("lease-five");
    let clock = ManualClock::new();
    let quota = per_day(CAPACITY);

    let mut limiters = Vec::new();
    for _ in 0..SERVERS {
        let limiter = builder(quota, FailurePolicy::Closed, &prefix, &clock)
            .max_lease(MAX_LEASE)
            .build(manager(&server).await)
            .unwrap();
        limiters.push(limiter);
    }
    // A plain limiter on the same prefix takes from the same bucket.
    let plain = RedisTokenBucket::builder(quota, FailurePolicy::Closed)
        .prefix(&prefix)
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(manager(&server).await)
        .unwrap();

    let mut tasks = JoinSet::new();
    for (server, limiter) in limiters.iter().enumerate() {
        for _ in 0..TASKS {
            let limiter = limiter.clone();
            tasks.spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..TRIES {
                    admitted += u64::from(limiter.try_acquire("the-one-client").await);
                }
                (Some(server), admitted)
            });
        }
    }
    let other = plain.clone();
    tasks.spawn(async move {
        let mut admitted = 0u64;
        for _ in 0..TRIES {
            admitted += u64::from(other.try_acquire("the-one-client").await);
        }
        (None, admitted)
    });
    let mut per_server = [0u64; SERVERS];
    let mut by_plain = 0;
    while let Some(result) = tasks.join_next().await {
        match result.expect("a task finished") {
            (Some(server), admitted) => per_server[server] += admitted,
            (None, admitted) => by_plain += admitted,
        }
    }

    let mut held = 0;
    for (limiter, &admitted) in limiters.iter().zip(&per_server) {
        settled(limiter, "the-one-client").await;
        assert_eq!(
            limiter.failures(),
            Default::default(),
            "every fetch answered"
        );
        let counts = limiter.counts();
        let mine = limiter.held("the-one-client");
        assert!(mine <= MAX_LEASE, "a process holds at most max_lease");
        assert_eq!(counts.expired, 0, "the clock stood still");
        assert_accounted(&counts, mine, admitted);
        held += u64::from(mine);
    }
    let admitted: u64 = per_server.iter().sum::<u64>() + by_plain;
    let left = u64::from(plain.peek("the-one-client").await.unwrap());
    // Exactly what the bucket gave up was admitted or is still held.
    assert_eq!(admitted + held, u64::from(CAPACITY) - left);
    // So never more than the one bucket; less by at most what the leases hold.
    assert!(admitted <= u64::from(CAPACITY));
    assert!(
        admitted >= u64::from(CAPACITY) - SERVERS as u64 * u64::from(MAX_LEASE),
        "{admitted} admitted"
    );
    // With 2,520 tries for 1,000 tokens, the bucket ran dry.
    assert_eq!(left, 0);
    // The leases did their job: far fewer fetches than admissions.
    let fetches: u64 = limiters.iter().map(|l| l.counts().fetches).sum();
    let by_leases: u64 = per_server.iter().sum();
    assert!(
        fetches < by_leases / 2,
        "{fetches} fetches for {by_leases} admitted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_tokens_stop_counting_at_the_lease_expiry_and_are_not_returned() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let prefix = fresh_prefix("lease-expiry");
    let limiter = builder(per_day(1000), FailurePolicy::Closed, &prefix, &clock)
        .max_lease(8)
        .refill_ahead(false)
        .build(manager(&server).await)
        .unwrap();
    // A fetch sizes the lease before it asks: 1; 2 (one left, taken next); 4 (three
    // left).
    for _ in 0..4 {
        allowed(&limiter, "k").await;
    }
    assert_eq!(limiter.held("k"), 3);
    let before = limiter.counts();
    assert_eq!((before.fetches, before.leased, before.grew), (3, 7, 2));
    assert_eq!(limiter.peek("k").await.unwrap(), 1000 - 7);

    // Just before the expiry the tokens count; from it, they do not.
    clock.advance(LIFETIME - Duration::from_millis(2));
    assert_eq!(limiter.held("k"), 3);
    clock.advance(Duration::from_millis(2));
    assert_eq!(limiter.held("k"), 0);

    // The next request fetches, drops the three expired, and halves the size first.
    assert_eq!(allowed(&limiter, "k").await, 1, "a lease of 2, one taken");
    let after = limiter.counts();
    assert_eq!(after.expired, 3);
    assert_eq!(after.shrank, 1);
    assert_eq!(after.fetches, 4);
    assert_eq!(limiter.lease("k").unwrap().size, 2);
    // Not returned: the bucket lost them.
    assert_eq!(limiter.peek("k").await.unwrap(), 1000 - 9);
    assert_accounted(&after, limiter.held("k"), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_grows_its_lease_to_the_maximum_and_an_idle_one_shrinks_it_to_one() {
    const MAX_LEASE: u32 = 32;
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = builder(
        per_day(100_000),
        FailurePolicy::Closed,
        &fresh_prefix("lease-size"),
        &clock,
    )
    .max_lease(MAX_LEASE)
    .build(manager(&server).await)
    .unwrap();

    // A key seen once costs one fetch of exactly its cost, as the plain limiter.
    allowed(&limiter, "hot").await;
    let first = limiter.counts();
    assert_eq!((first.fetches, first.leased, first.grew), (1, 1, 0));
    assert!(
        limiter.lease("hot").is_none(),
        "a key seen once has no entry"
    );

    // Hot: with the clock still, every fetch comes at once after the last.
    for _ in 0..400 {
        allowed(&limiter, "hot").await;
        settled(&limiter, "hot").await;
    }
    let hot = limiter.counts();
    assert_eq!(limiter.lease("hot").unwrap().size, MAX_LEASE);
    assert_eq!(hot.grew, 5, "1 → 32 in five doublings");
    assert_eq!(hot.shrank, 0);
    assert!(hot.fetched_ahead > 0, "refills ahead of need");
    // Amortised: most of the 401 requests were served without a round trip.
    let held = limiter.held("hot");
    assert!(hot.served_locally(u64::from(held)) > 300, "{hot:?}");
    assert!(hot.fetches < 40, "{hot:?}");
    assert_accounted(&hot, held, 401);

    // Idle: each lease expires unused, and the next fetch halves the size.
    for step in 1..=5 {
        clock.advance(LIFETIME);
        allowed(&limiter, "hot").await;
        settled(&limiter, "hot").await;
        assert_eq!(limiter.lease("hot").unwrap().size, MAX_LEASE >> step);
    }
    let idle = limiter.counts();
    assert_eq!(idle.shrank, 5);
    assert!(idle.expired > 0);
    assert_accounted(&idle, limiter.held("hot"), 406);
}

async fn killed_mid_run(policy: FailurePolicy, refill_ahead: bool) {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = builder(per_day(1000), policy, &fresh_prefix("lease-killed"), &clock)
        .max_lease(8)
        .refill_ahead(refill_ahead)
        .timeout(Duration::from_millis(100))
        .circuit_breaker(CircuitBreaker::off())
        .build(manager(&server).await)
        .unwrap();
    // Grow the lease to 8 and take one: seven held.
    for _ in 0..9 {
        allowed(&limiter, "k").await;
        settled(&limiter, "k").await;
    }
    let held = limiter.held("k");
    assert!(held >= 4, "held {held}");

    server.kill();
    // The held tokens are still served, every one decided.
    for _ in 0..held {
        allowed(&limiter, "k").await;
    }
    // Then the lease is spent and the fetch gets no answer: the policy answers.
    let outcome = limiter.acquire("k", 1).await;
    assert!(outcome.is_fallback(), "{outcome:?}");
    assert_eq!(outcome.is_allowed(), policy == FailurePolicy::Open);
    let failures = limiter.failures();
    let expected = match policy {
        FailurePolicy::Open => (1, 0),
        FailurePolicy::Closed => (0, 1),
    };
    assert_eq!(
        (failures.allowed, failures.denied),
        expected,
        "{failures:?}"
    );
    assert!(failures.timeouts + failures.errors >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_leaves_the_held_tokens_served_then_fails_closed() {
    killed_mid_run(FailurePolicy::Closed, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_leaves_the_held_tokens_served_then_fails_open() {
    killed_mid_run(FailurePolicy::Open, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_find_a_fetch_in_flight_wait_for_it_rather_than_start_another() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = builder(
        per_day(1000),
        FailurePolicy::Closed,
        &fresh_prefix("lease-wait"),
        &clock,
    )
    .refill_ahead(false)
    .timeout(Duration::from_millis(300))
    .circuit_breaker(CircuitBreaker::off())
    .build(manager(&server).await)
    .unwrap();
    empty_lease(&limiter, "cold").await;
    // Frozen: the next fetch (up to a lease of 4) times out, and every request waited
    // on it.
    server.pause();
    let mut tasks = JoinSet::new();
    for _ in 0..10 {
        let limiter = limiter.clone();
        tasks.spawn(async move { limiter.acquire("cold", 1).await });
    }
    while let Some(outcome) = tasks.join_next().await {
        let outcome = outcome.unwrap();
        assert!(
            outcome.is_fallback() && !outcome.is_allowed(),
            "{outcome:?}"
        );
    }
    server.resume();
    let failures = limiter.failures();
    assert_eq!(failures.denied, 10);
    assert_eq!(limiter.counts().fetches, 2, "only the warm-up was answered");
    // One fetch went out for the ten: once Redis runs what it was sent, the bucket has
    // lost at most that one's lease of 4 (ten fetches would have taken 40).
    let left = limiter.peek("cold").await.unwrap();
    assert!(
        left >= 1000 - 3 - 4,
        "{left} left: more than one fetch reached Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_is_remembered_until_its_wait_is_over() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    // Two tokens, one per 10 s.
    let quota = Quota::new(2, Duration::from_secs(10)).unwrap();
    let limiter = builder(
        quota,
        FailurePolicy::Closed,
        &fresh_prefix("lease-denied"),
        &clock,
    )
    .lifetime(Duration::from_secs(60))
    .build(manager(&server).await)
    .unwrap();
    allowed(&limiter, "k").await;
    allowed(&limiter, "k").await;
    let denied = limiter.acquire("k", 1).await;
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(10)));
    let fetches = limiter.counts().fetches;
    clock.advance(Duration::from_secs(4));
    // Answered locally, with the rest of Redis's wait.
    let again = limiter.acquire("k", 1).await;
    assert_eq!(again.retry_after(), Some(Duration::from_secs(6)));
    assert_eq!(limiter.counts().fetches, fetches);
    assert_eq!(limiter.counts().denied_locally, 1);
    // Once the wait is over, Redis is asked, and the refilled token is there.
    clock.advance(Duration::from_secs(6));
    allowed(&limiter, "k").await;
    assert_eq!(limiter.counts().fetches, fetches + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_seen_once_cost_one_fetch_of_their_cost_and_idle_entries_are_swept() {
    const KEYS: u32 = 3000;
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = builder(
        per_day(100),
        FailurePolicy::Closed,
        &fresh_prefix("lease-cold"),
        &clock,
    )
    .max_lease(3)
    .build(manager(&server).await)
    .unwrap();
    // Seen once: one fetch of exactly the cost, and no entry.
    for key in 0..KEYS {
        allowed(&limiter, &format!("once-{key}")).await;
    }
    let counts = limiter.counts();
    assert_eq!(
        (counts.fetches, counts.leased),
        (u64::from(KEYS), u64::from(KEYS))
    );
    assert_eq!(limiter.keys(), 0);
    assert_eq!(limiter.peek("once-7").await.unwrap(), 99);

    // Seen twice in a row: an entry each.
    for key in 0..KEYS {
        for _ in 0..2 {
            allowed(&limiter, &format!("old-{key}")).await;
        }
    }
    assert_eq!(limiter.keys(), u64::from(KEYS));
    // A lifetime later the old entries are idle; new keys make sweeps due, which the
    // limiter's own thread runs (the requests only ask): every sweep it runs from now
    // on removes every old entry it finds, and no new one.
    clock.advance(LIFETIME);
    for key in 0..KEYS {
        for _ in 0..2 {
            allowed(&limiter, &format!("new-{key}")).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while limiter.keys() > u64::from(KEYS) {
        // A hang detector, not a timing assertion: the thread sweeps when it runs.
        assert!(Instant::now() < deadline, "no sweep came");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        limiter.keys(),
        u64::from(KEYS),
        "only the new keys are kept"
    );
    assert!(limiter.lease("old-7").is_none());
    assert!(limiter.lease("new-7").is_some());
    assert!(
        lease_threads() >= 1,
        "the sweeps ran on the limiter's own thread"
    );
    // The thread ends with the last clone of the limiter.
    let clone = limiter.clone();
    drop(limiter);
    assert!(clone.lease("new-7").is_some());
    drop(clone);
    let deadline = Instant::now() + Duration::from_secs(30);
    while lease_threads() > 0 {
        // A hang detector, as above (no other test here keeps enough keys to start
        // a thread).
        assert!(
            Instant::now() < deadline,
            "dropping the limiter did not end its thread"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Threads of this process named like the leases' sweeper.
fn lease_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("Linux /proc")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "turnstile-lease")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_leased_limiters_on_a_cluster_admit_what_each_bucket_gave_up() {
    const KEYS: usize = 30;
    const CAPACITY: u32 = 40;
    const MAX_LEASE: u32 = 4;
    let cluster = crate::cluster_server::Cluster::start();
    let prefix = fresh_prefix("lease-cluster");
    let clock = ManualClock::new();
    let mut limiters = Vec::new();
    for _ in 0..5 {
        let limiter = builder(per_day(CAPACITY), FailurePolicy::Closed, &prefix, &clock)
            .max_lease(MAX_LEASE)
            .circuit_breaker(CircuitBreaker::off())
            .build(cluster.connection().await)
            .unwrap();
        limiters.push(limiter);
    }
    let mut tasks = JoinSet::new();
    for limiter in limiters.clone() {
        tasks.spawn(async move {
            let mut admitted = vec![0u32; KEYS];
            for _ in 0..12 {
                for (key, count) in admitted.iter_mut().enumerate() {
                    match limiter.acquire(format!("user{key}"), 1).await {
                        SharedDecision::Decided(decision) => {
                            *count += u32::from(decision.is_allowed())
                        }
                        SharedDecision::Fallback { error, .. } => {
                            panic!("no fallback expected: {error}")
                        }
                    }
                }
            }
            admitted
        });
    }
    let mut total = [0u32; KEYS];
    while let Some(admitted) = tasks.join_next().await {
        for (sum, n) in total.iter_mut().zip(admitted.unwrap()) {
            *sum += n;
        }
    }
    for (key, &admitted) in total.iter().enumerate() {
        let key = format!("user{key}");
        let mut held = 0;
        for limiter in &limiters {
            settled(limiter, &key).await;
            held += limiter.held(&key);
        }
        let left = limiters[0].peek(&key).await.unwrap();
        assert_eq!(admitted + held, CAPACITY - left, "{key}");
        assert!(admitted <= CAPACITY);
        assert!(admitted >= CAPACITY - 5 * MAX_LEASE, "{key}: {admitted}");
    }
}

/// Polls `future` once on this thread: the hot path completes without waiting.
fn poll_once<F: std::future::Future>(future: F) -> std::task::Poll<F::Output> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::pin!(future).poll(&mut context)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_served_from_a_lease_or_a_remembered_denial_allocates_nothing() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let hot = builder(
        per_day(100_000),
        FailurePolicy::Closed,
        &fresh_prefix("lease-alloc"),
        &clock,
    )
    .max_lease(1024)
    .refill_ahead(false)
    .build(manager(&server).await)
    .unwrap();
    while hot.held("k") < 600 {
        allowed(&hot, "k").await;
    }
    let quota = Quota::new(1, Duration::from_secs(10)).unwrap();
    let dry = builder(
        quota,
        FailurePolicy::Closed,
        &fresh_prefix("lease-alloc-dry"),
        &clock,
    )
    .build(manager(&server).await)
    .unwrap();
    allowed(&dry, "k").await;
    assert!(
        !dry.try_acquire("k").await,
        "denied, and the denial remembered"
    );

    let (mut served, mut denied) = (0, 0);
    let info = allocation_counter::measure(|| {
        for _ in 0..500 {
            match poll_once(hot.acquire("k", 1)) {
                std::task::Poll::Ready(outcome) => served += u32::from(outcome.is_allowed()),
                std::task::Poll::Pending => panic!("a leased check waited"),
            }
            match poll_once(dry.acquire("k", 1)) {
                std::task::Poll::Ready(outcome) => denied += u32::from(!outcome.is_allowed()),
                std::task::Poll::Pending => panic!("a remembered denial waited"),
            }
        }
    });
    assert_eq!((served, denied), (500, 500));
    assert_eq!(dry.counts().denied_locally, 500);
    assert_eq!(info.count_total, 0, "{info:?}");
}

#[tokio::test]
async fn lease_settings_out_of_range_are_refused() {
    let build = |max_lease: Option<u32>, lifetime: Duration| {
        let builder =
            RedisLeasedTokenBucket::builder(per_day(100), FailurePolicy::Closed).lifetime(lifetime);
        let builder = match max_lease {
            Some(tokens) => builder.max_lease(tokens),
            None => builder,
        };
        builder.connect("redis://127.0.0.1:1/")
    };
    assert!(build(None, LIFETIME).is_ok());
    assert_eq!(
        build(None, LIFETIME).unwrap().max_lease(),
        3,
        "capacity / 32"
    );
    assert!(build(Some(100), LIFETIME).is_ok());
    // The largest capacity: the default is capped at what the lease word holds.
    let largest = Quota::new(u32::MAX, Duration::from_secs(1)).unwrap();
    let roomy = RedisLeasedTokenBucket::builder(largest, FailurePolicy::Closed)
        .connect("redis://127.0.0.1:1/")
        .unwrap();
    assert_eq!(roomy.max_lease(), (1 << 24) - 1);
    for refused in [
        build(Some(0), LIFETIME),
        build(Some(101), LIFETIME),
        build(None, Duration::from_millis(1)),
    ] {
        assert!(
            matches!(refused, Err(turnstile::redis::RedisConfigError::Lease(_))),
            "{refused:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_circuit_breaker_applies_to_fetches_and_held_tokens_are_served_while_it_is_open() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = builder(
        per_day(1000),
        FailurePolicy::Closed,
        &fresh_prefix("lease-breaker"),
        &clock,
    )
    .max_lease(8)
    .refill_ahead(false)
    .timeout(Duration::from_millis(100))
    .circuit_breaker(CircuitBreaker::new(
        3,
        Duration::from_millis(20),
        Duration::from_millis(80),
    ))
    .build(manager(&server).await)
    .unwrap();
    // Two keys: one with six tokens held, one never fetched.
    for _ in 0..9 {
        allowed(&limiter, "leased").await;
    }
    let held = limiter.held("leased");
    assert_eq!(held, 6);

    server.kill();
    // Three fetches that get no answer open the breaker; the next is not sent.
    for _ in 0..3 {
        let outcome = limiter.acquire("other", 1).await;
        assert!(
            outcome.is_fallback() && !outcome.is_allowed(),
            "{outcome:?}"
        );
    }
    let outcome = limiter.acquire("other", 1).await;
    assert!(
        matches!(
            outcome,
            SharedDecision::Fallback {
                allowed: false,
                error: turnstile::redis::CheckError::CircuitOpen { .. }
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(limiter.failures().trips, 1);
    // The breaker is open, and the held tokens are still served, decided.
    for _ in 0..held {
        allowed(&limiter, "leased").await;
    }
    assert!(limiter.acquire("leased", 1).await.is_fallback());
    assert_eq!(limiter.failures().short_circuited, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_time_with_expiry_every_token_taken_is_admitted_or_held() {
    const CAPACITY: u32 = 500;
    let server = RedisServer::start();
    let mut inspect = crate::inspector(&server).await;
    let prefix = fresh_prefix("lease-server-time");
    let quota = per_day(CAPACITY);
    // The production path: Redis's clock, keys expiring, the default lifetime.
    let mut limiters = Vec::new();
    for _ in 0..3 {
        let limiter = RedisLeasedTokenBucket::builder(quota, FailurePolicy::Closed)
            .prefix(&prefix)
            .max_lease(20)
            .timeout(Duration::from_secs(5))
            .build(manager(&server).await)
            .unwrap();
        limiters.push(limiter);
    }
    let before = crate::server_time(&mut inspect).await;
    let mut tasks = JoinSet::new();
    for limiter in limiters.clone() {
        tasks.spawn(async move {
            let mut admitted = 0u32;
            for _ in 0..300 {
                admitted += u32::from(limiter.try_acquire("k").await);
            }
            admitted
        });
    }
    let mut admitted = 0;
    while let Some(count) = tasks.join_next().await {
        admitted += count.unwrap();
    }
    let (mut held, mut expired) = (0, 0);
    for limiter in &limiters {
        settled(limiter, "k").await;
        held += limiter.held("k");
        // Within a lease's lifetime on a quiet machine none expire; a loaded one may
        // take longer, and expired tokens are accounted for all the same.
        expired += u32::try_from(limiter.counts().expired).unwrap();
    }
    let left = limiters[0].peek("k").await.unwrap();
    let after = crate::server_time(&mut inspect).await;
    let interval = quota.refill_every().as_micros() as u64;
    let refills = (after / interval - before / interval) as u32;
    // What the bucket gave up, refills included, was admitted, is held or expired.
    let taken = admitted + held + expired;
    assert!(
        (CAPACITY - left..=CAPACITY - left + refills).contains(&taken),
        "{admitted} admitted, {held} held, {expired} expired, {left} left, {refills} refills"
    );
    assert!(admitted <= CAPACITY + refills);
}

/// A fetch whose answer is lost (it timed out while Redis was stopped, and Redis ran it
/// later) may take its whole ask without this process knowing: every such fetch is
/// counted, with what it asked, and a failed fetch does not grow the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_whose_answers_are_lost_are_counted_with_what_they_asked() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let prefix = fresh_prefix("lease-lost");
    let limiter = builder(per_day(1000), FailurePolicy::Closed, &prefix, &clock)
        .max_lease(8)
        .refill_ahead(false)
        .timeout(Duration::from_millis(100))
        .circuit_breaker(CircuitBreaker::off())
        .build(manager(&server).await)
        .unwrap();
    empty_lease(&limiter, "k").await;
    let grew = limiter.counts().grew;
    for _ in 0..5 {
        server.pause();
        assert!(limiter.acquire("k", 1).await.is_fallback());
        server.resume();
        // Redis has run the late fetch once it answers the next command.
        let _ = limiter.peek("k").await.unwrap();
    }
    let counts = limiter.counts();
    assert_eq!(counts.unanswered, 5, "{counts:?}");
    assert_eq!(
        counts.grew, grew,
        "failed fetches grew the lease: {counts:?}"
    );
    // What the bucket gave up that no request got is held, expired, or taken by a
    // fetch whose answer was lost: at most what those asked.
    let gave_up = u64::from(1000 - limiter.peek("k").await.unwrap());
    let unaccounted = gave_up - 3 - u64::from(limiter.held("k")) - counts.expired;
    assert!(
        (1..=counts.unanswered_asked).contains(&unaccounted),
        "{unaccounted} taken unseen, {counts:?}"
    );
}

/// While the breaker is open, a check served from held tokens starts no fetch ahead
/// of need: nothing allocated, no failure counted for a check the lease answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_starts_no_fetch_ahead_of_need() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let prefix = fresh_prefix("lease-open");
    let limiter = builder(per_day(100_000), FailurePolicy::Closed, &prefix, &clock)
        .lifetime(Duration::from_secs(3600))
        .max_lease(64)
        .timeout(Duration::from_millis(100))
        .circuit_breaker(CircuitBreaker::new(
            3,
            Duration::from_secs(600),
            Duration::from_secs(600),
        ))
        .build(manager(&server).await)
        .unwrap();
    for _ in 0..200 {
        allowed(&limiter, "k").await;
        settled(&limiter, "k").await;
    }
    server.kill();
    for _ in 0..3 {
        assert!(limiter.acquire("other", 1).await.is_fallback());
    }
    let before = limiter.failures();
    let held = limiter.held("k");
    assert!(held > 0);
    let mut served = 0;
    let info = allocation_counter::measure(|| {
        for _ in 0..held {
            let mut context = std::task::Context::from_waker(std::task::Waker::noop());
            let check = std::pin::pin!(limiter.acquire("k", 1)).poll(&mut context);
            if let std::task::Poll::Ready(outcome) = check {
                served += u32::from(outcome.is_allowed());
            }
        }
    });
    assert_eq!(served, held);
    assert_eq!(
        info.count_total, 0,
        "checks served from held tokens allocated"
    );
    assert_eq!(limiter.failures().short_circuited, before.short_circuited);
}

/// A remembered denial answers a larger cost with its own exact wait: the denied
/// cost's, and one interval more per token more (as Redis would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_denial_answers_a_larger_cost_with_its_own_wait() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let quota = Quota::new(2, Duration::from_secs(10)).unwrap();
    let prefix = fresh_prefix("lease-larger");
    let leased = builder(quota, FailurePolicy::Closed, &prefix, &clock)
        .lifetime(Duration::from_secs(60))
        .build(manager(&server).await)
        .unwrap();
    let plain = RedisTokenBucket::builder(quota, FailurePolicy::Closed)
        .prefix(&prefix)
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(manager(&server).await)
        .unwrap();
    allowed(&leased, "k").await;
    allowed(&leased, "k").await;
    let denied = leased.acquire("k", 1).await;
    assert_eq!(denied.retry_after(), Some(Duration::from_secs(10)));
    let before = leased.counts().denied_locally;
    let local = leased.acquire("k", 2).await.retry_after();
    assert_eq!(
        leased.counts().denied_locally,
        before + 1,
        "answered locally"
    );
    assert_eq!(local, plain.acquire("k", 2).await.retry_after());
    assert_eq!(local, Some(Duration::from_secs(20)));
}
