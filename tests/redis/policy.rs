//! Redis, leased and in-process checks in one policy: all or nothing across them (a
//! refused request leaves every key as it found it, Redis refunds included), the
//! longest wait of all, fallbacks as an outcome of their own, and exact admission
//! counts under concurrency. Clocks are `ManualClock`s: no count depends on timing.

use crate::server::RedisServer;
use crate::{fresh_prefix, manager};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use turnstile::policy::{
    Check, KeyExtractor, Limit, MissingKey, Outcome, Policy, PolicyCheck, SharedLimiter,
};
use turnstile::redis::lease::RedisLeasedTokenBucket;
use turnstile::redis::{CircuitBreaker, FailurePolicy, RedisFixedWindow, RedisTokenBucket};
use turnstile::{ManualClock, Quota, TokenBucket};

struct Request {
    user: String,
    ip: u32,
}

fn request(user: &str, ip: u32) -> Request {
    Request {
        user: user.into(),
        ip,
    }
}

/// A quota that never refills within a test: `capacity` a day.
fn per_day(capacity: u32) -> Quota {
    Quota::new(capacity, Duration::from_secs(24 * 3600) / capacity).unwrap()
}

/// A Redis token bucket on `clock` with key expiry off (the clock does not run in real
/// time), on a prefix of its own.
fn redis_bucket(
    conn: ::redis::aio::ConnectionManager,
    quota: Quota,
    policy: FailurePolicy,
    clock: &ManualClock,
) -> Arc<RedisTokenBucket> {
    let limiter = RedisTokenBucket::builder(quota, policy)
        .prefix(fresh_prefix("policy"))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .timeout(Duration::from_secs(5))
        .build(conn)
        .unwrap();
    Arc::new(limiter)
}

/// A Redis token bucket on `server` under `quota` that fails closed.
async fn closed_bucket(
    server: &RedisServer,
    quota: Quota,
    clock: &ManualClock,
) -> Arc<RedisTokenBucket> {
    redis_bucket(manager(server).await, quota, FailurePolicy::Closed, clock)
}

/// `shared`, then a per-IP check in process.
fn then_per_ip(
    shared: impl Into<PolicyCheck<Request>>,
    ips: &Arc<TokenBucket<u32, ManualClock>>,
) -> Policy<Request> {
    let per_ip = Check::new(
        "per-ip",
        ips.clone(),
        Limit::steady(ips.quota()),
        |r: &Request| Some(r.ip),
    );
    Policy::builder()
        .check(shared)
        .check(per_ip)
        .build()
        .unwrap()
}

/// A per-user check in Redis, then a per-IP check in process.
fn two_checks(
    users: &Arc<RedisTokenBucket>,
    ips: &Arc<TokenBucket<u32, ManualClock>>,
) -> Policy<Request> {
    let per_user = Check::shared(
        "per-user",
        users.clone(),
        Limit::steady(users.quota()),
        |r: &Request| Some(r.user.clone()),
    );
    then_per_ip(per_user, ips)
}

#[tokio::test]
async fn a_refused_request_leaves_the_redis_key_and_the_in_process_key_as_it_found_them() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let users = closed_bucket(&server, per_day(3), &clock).await;
    let ips = Arc::new(TokenBucket::<u32, _>::with_clock(per_day(2), clock.clone()).unwrap());
    let policy = two_checks(&users, &ips);
    assert!(policy.is_shared());

    for _ in 0..2 {
        assert!(
            policy
                .acquire_async(&request("alice", 7))
                .await
                .is_allowed()
        );
    }
    // The IP is spent: the request is denied by it, and Redis gets its token back.
    let verdict = policy.acquire_async(&request("alice", 7)).await;
    assert!(matches!(verdict.outcome(), Outcome::Denied { .. }));
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [1]);
    assert_eq!(users.peek("alice").await.unwrap(), 1);

    // The last of alice's tokens, from another IP; then Redis denies, and that IP's
    // token goes back.
    assert!(
        policy
            .acquire_async(&request("alice", 8))
            .await
            .is_allowed()
    );
    let verdict = policy.acquire_async(&request("alice", 9)).await;
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [0]);
    assert_eq!(ips.peek(&9), 2);
    assert_eq!(users.peek("alice").await.unwrap(), 0);
}

#[tokio::test]
async fn the_wait_is_the_longest_of_the_redis_and_the_in_process_checks() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    // Redis: 1 token per 10 s; in process: 1 per 3 s.
    let users = redis_bucket(
        manager(&server).await,
        Quota::new(1, Duration::from_secs(10)).unwrap(),
        FailurePolicy::Closed,
        &clock,
    );
    let ips = Arc::new(
        TokenBucket::<u32, _>::with_clock(
            Quota::new(1, Duration::from_secs(3)).unwrap(),
            clock.clone(),
        )
        .unwrap(),
    );
    let policy = two_checks(&users, &ips);
    assert!(policy.acquire_async(&request("bob", 1)).await.is_allowed());
    clock.set(Duration::from_secs(1));
    let verdict = policy.acquire_async(&request("bob", 1)).await;
    // Both deny; Redis's wait (9 s) is the longer one, and it binds.
    assert_eq!(verdict.retry_after(), Some(Duration::from_secs(9)));
    assert_eq!(verdict.binding().map(|binding| binding.check), Some(0));
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [0, 1]);
}

#[tokio::test]
async fn refunds_in_redis_are_capped_at_the_capacity_and_a_window_gives_back_only_its_own() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let bucket = closed_bucket(&server, per_day(5), &clock).await;
    assert!(bucket.acquire("k", 2).await.is_allowed());
    SharedLimiter::refund(&*bucket, b"k", 1).await;
    assert_eq!(bucket.peek("k").await.unwrap(), 4);
    SharedLimiter::refund(&*bucket, b"k", 100).await;
    assert_eq!(bucket.peek("k").await.unwrap(), 5);
    // A key never seen is full: a refund leaves it full.
    SharedLimiter::refund(&*bucket, b"new", 3).await;
    assert_eq!(bucket.peek("new").await.unwrap(), 5);

    let window = RedisFixedWindow::builder(5, Duration::from_secs(10), FailurePolicy::Closed)
        .prefix(fresh_prefix("policy-fw"))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .build(manager(&server).await)
        .unwrap();
    assert!(window.acquire("k", 3).await.is_allowed());
    SharedLimiter::refund(&window, b"k", 1).await;
    assert_eq!(window.peek("k").await.unwrap(), 3);
    SharedLimiter::refund(&window, b"k", 10).await;
    assert_eq!(window.peek("k").await.unwrap(), 5);
    // The next window counts afresh; the last one's count is not the next one's.
    assert!(window.acquire("k", 4).await.is_allowed());
    clock.set(Duration::from_secs(10));
    SharedLimiter::refund(&window, b"k", 4).await;
    assert!(window.acquire("k", 5).await.is_allowed());
    assert_eq!(window.peek("k").await.unwrap(), 0);
    assert_eq!(bucket.failures().errors + window.failures().errors, 0);
}

/// A leased limiter on `clock` whose key `"t"` holds at least `held` tokens.
async fn warm_lease(
    server: &RedisServer,
    clock: &ManualClock,
    held: u32,
) -> Arc<RedisLeasedTokenBucket> {
    let limiter = RedisLeasedTokenBucket::builder(per_day(100_000), FailurePolicy::Closed)
        .prefix(fresh_prefix("policy-lease"))
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .lifetime(Duration::from_secs(3600))
        .max_lease(1024)
        .refill_ahead(false)
        .timeout(Duration::from_secs(5))
        .build(manager(server).await)
        .unwrap();
    while limiter.held("t") < held {
        assert!(limiter.acquire("t", 1).await.is_allowed());
    }
    Arc::new(limiter)
}

/// Lends the user name borrowed from the request: no copy.
struct ByUser;

impl KeyExtractor<Request> for ByUser {
    type Key = str;

    fn with_key<T>(&self, request: &Request, with: impl FnOnce(&str) -> T) -> Option<T> {
        Some(with(&request.user))
    }
}

fn leased_then_per_ip(
    tenants: &Arc<RedisLeasedTokenBucket>,
    ips: &Arc<TokenBucket<u32, ManualClock>>,
) -> Policy<Request> {
    let per_tenant = Check::shared(
        "per-tenant",
        tenants.clone(),
        Limit::steady(tenants.quota()),
        ByUser,
    );
    then_per_ip(per_tenant, ips)
}

#[tokio::test]
async fn a_leased_take_that_another_check_refuses_goes_back_to_the_lease() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let tenants = warm_lease(&server, &clock, 10).await;
    let ips = Arc::new(TokenBucket::<u32, _>::with_clock(per_day(1), clock.clone()).unwrap());
    let policy = leased_then_per_ip(&tenants, &ips);
    let held = tenants.held("t");
    let fetches = tenants.counts().fetches;

    // Served from the lease, without waiting.
    let verdict = policy
        .acquire_now(&request("t", 1))
        .expect("answered from the lease");
    assert!(verdict.is_allowed());
    assert_eq!(tenants.held("t"), held - 1);
    // The IP is spent: the lease gets its token back.
    let verdict = policy
        .acquire_now(&request("t", 1))
        .expect("answered from the lease");
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [1]);
    assert_eq!(tenants.held("t"), held - 1);
    assert_eq!(tenants.counts().refunded, 1);
    assert_eq!(tenants.counts().fetches, fetches, "no round trip");
}

#[tokio::test]
async fn a_leased_key_without_a_lease_is_refunded_in_redis() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let tenants = warm_lease(&server, &clock, 0).await;
    let ips = Arc::new(TokenBucket::<u32, _>::with_clock(per_day(1), clock.clone()).unwrap());
    let policy = leased_then_per_ip(&tenants, &ips);
    assert!(policy.acquire_async(&request("x", 1)).await.is_allowed());
    // A key seen once has no lease entry: its check took its cost from Redis, and the
    // refund gives it back there.
    let verdict = policy.acquire_async(&request("y", 1)).await;
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [1]);
    assert_eq!(tenants.held("y"), 0);
    assert_eq!(tenants.peek("y").await.unwrap(), 100_000);
}

/// Polls `future` once on this thread.
fn poll_once<F: std::future::Future>(future: F) -> std::task::Poll<F::Output> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::pin!(future).poll(&mut context)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_served_from_a_lease_allocates_nothing_and_waits_for_nothing() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let tenants = warm_lease(&server, &clock, 700).await;
    let ips = Arc::new(TokenBucket::<u32, _>::with_clock(per_day(300), clock.clone()).unwrap());
    let policy = leased_then_per_ip(&tenants, &ips);
    let alice = request("t", 1);
    assert!(policy.acquire_now(&alice).unwrap().is_allowed());
    let (mut allowed, mut denied) = (0, 0);
    let info = allocation_counter::measure(|| {
        for _ in 0..600 {
            match poll_once(policy.acquire_async(&alice)) {
                std::task::Poll::Ready(verdict) if verdict.is_allowed() => allowed += 1,
                std::task::Poll::Ready(_) => denied += 1,
                std::task::Poll::Pending => panic!("a check served from a lease waited"),
            }
        }
    });
    // 299 left at the IP; the 301 after are refused there, and refunded to the lease.
    assert_eq!((allowed, denied), (299, 301));
    assert_eq!(tenants.counts().refunded, 301);
    assert_eq!(info.count_total, 0, "{info:?}");
}

#[tokio::test]
async fn a_check_answered_by_its_failure_policy_is_an_outcome_of_its_own() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let conn = manager(&server).await;
    let quota = per_day(10);
    let build = |policy| {
        let limiter = RedisTokenBucket::builder(quota, policy)
            .prefix(fresh_prefix("policy-down"))
            .client_clock(clock.clone())
            .expire_idle_keys(false)
            .timeout(Duration::from_millis(100))
            .circuit_breaker(CircuitBreaker::off())
            .build(conn.clone())
            .unwrap();
        Arc::new(limiter)
    };
    let open = build(FailurePolicy::Open);
    let closed = build(FailurePolicy::Closed);
    let ips = Arc::new(TokenBucket::<u32, _>::with_clock(per_day(5), clock.clone()).unwrap());
    server.kill();

    // Open: allowed, and the fallback shows; the in-process check took its token.
    let verdict = two_checks(&open, &ips)
        .acquire_async(&request("a", 1))
        .await;
    assert_eq!(verdict.outcome(), Outcome::Allowed);
    assert_eq!(verdict.fell_back().collect::<Vec<_>>(), [0]);
    assert_eq!(verdict.binding().map(|binding| binding.check), Some(1));
    assert_eq!(ips.peek(&1), 4);

    // Closed: unavailable, no wait, and the in-process token goes back.
    let verdict = two_checks(&closed, &ips)
        .acquire_async(&request("a", 1))
        .await;
    assert_eq!(verdict.outcome(), Outcome::Unavailable);
    assert_eq!(verdict.retry_after(), None);
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [0]);
    assert_eq!(verdict.fell_back().collect::<Vec<_>>(), [0]);
    assert_eq!(ips.peek(&1), 4);
    assert_eq!((open.failures().allowed, closed.failures().denied), (1, 1));

    // A denial with a wait outranks a fallback: the client learns when to come back.
    let spent = Arc::new(TokenBucket::<u32, _>::with_clock(per_day(1), clock.clone()).unwrap());
    assert!(spent.try_acquire(&2));
    let verdict = two_checks(&closed, &spent)
        .acquire_async(&request("a", 2))
        .await;
    assert!(matches!(verdict.outcome(), Outcome::Denied { .. }));
    assert_eq!(verdict.refused().collect::<Vec<_>>(), [0, 1]);
}

#[tokio::test]
async fn asked_without_waiting_a_redis_check_is_answered_by_its_failure_policy() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let users = closed_bucket(&server, per_day(3), &clock).await;
    let ips = Arc::new(TokenBucket::<u32, _>::with_clock(per_day(2), clock.clone()).unwrap());
    let policy = two_checks(&users, &ips);
    assert!(policy.acquire_now(&request("c", 1)).is_none());
    let verdict = policy.acquire(&request("c", 1));
    assert_eq!(verdict.outcome(), Outcome::Unavailable);
    assert_eq!(verdict.fell_back().collect::<Vec<_>>(), [0]);
    // Nothing was taken anywhere.
    assert_eq!(users.peek("c").await.unwrap(), 3);
    assert_eq!(ips.peek(&1), 2);
}

#[tokio::test]
async fn a_keyless_request_follows_the_shared_checks_missing_key_rule() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let users = closed_bucket(&server, per_day(2), &clock).await;
    let by_user = |r: &Request| (!r.user.is_empty()).then(|| r.user.clone());
    let check = || {
        Check::shared(
            "per-user",
            users.clone(),
            Limit::steady(users.quota()),
            by_user,
        )
    };
    let reject: Policy<Request> = Policy::builder().check(check()).build().unwrap();
    assert_eq!(
        reject.acquire_async(&request("", 1)).await.outcome(),
        Outcome::MissingKey
    );
    let shared: Policy<Request> = Policy::builder()
        .check(check().on_missing_key(MissingKey::Shared(b"anonymous".to_vec())))
        .build()
        .unwrap();
    for _ in 0..2 {
        assert!(shared.acquire_async(&request("", 1)).await.is_allowed());
    }
    assert!(!shared.acquire_async(&request("", 1)).await.is_allowed());
    assert_eq!(users.peek("anonymous").await.unwrap(), 0);
}

#[tokio::test]
async fn a_dry_run_redis_check_refuses_nothing_and_keeps_only_what_would_have_passed() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let users = closed_bucket(&server, per_day(1), &clock).await;
    let policy: Policy<Request> = Policy::builder()
        .check(
            Check::shared(
                "per-user",
                users.clone(),
                Limit::steady(users.quota()),
                |r: &Request| Some(r.user.clone()),
            )
            .dry_run(),
        )
        .build()
        .unwrap();
    assert!(policy.acquire_async(&request("d", 1)).await.is_allowed());
    let verdict = policy.acquire_async(&request("d", 1)).await;
    assert!(verdict.is_allowed());
    assert_eq!(verdict.refused_in_dry_run().collect::<Vec<_>>(), [0]);
    assert_eq!(users.peek("d").await.unwrap(), 0);
}

/// `tasks` tasks of `each` requests for one user, spread over `ips` IPs.
async fn admitted_concurrently(
    policy: Arc<Policy<Request>>,
    tasks: u32,
    each: u32,
    ips: u32,
) -> u32 {
    let mut set = JoinSet::new();
    for task in 0..tasks {
        let policy = Arc::clone(&policy);
        set.spawn(async move {
            let mut admitted = 0;
            for i in 0..each {
                let request = request("hot", (task * each + i) % ips);
                admitted += u32::from(policy.acquire_async(&request).await.is_allowed());
            }
            admitted
        });
    }
    set.join_all().await.into_iter().sum()
}

/// 8 tasks of 40 requests for one user over 4 IPs, against a Redis limit of 100 for
/// the user and an in-process one of `per_ip` per IP: the requests admitted, what
/// Redis has left, and what the IPs gave.
async fn contend(server: &RedisServer, per_ip: u32) -> (u32, u32, u32) {
    let clock = ManualClock::new();
    let users = closed_bucket(server, per_day(100), &clock).await;
    let ips = Arc::new(TokenBucket::<u32, _>::with_clock(per_day(per_ip), clock.clone()).unwrap());
    let admitted = admitted_concurrently(Arc::new(two_checks(&users, &ips)), 8, 40, 4).await;
    let left = users.peek("hot").await.unwrap();
    let taken_in_process = (0..4).map(|ip| per_ip - ips.peek(&ip)).sum();
    (admitted, left, taken_in_process)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_admit_exactly_the_tightest_limit_and_refunds_return_exactly() {
    let server = RedisServer::start();
    // Redis is the tight limit: exactly its 100, and the IPs gave exactly as many.
    assert_eq!(contend(&server, 1000).await, (100, 0, 100));
    // The IPs are: 15 each, 60 in all, and every token Redis gave a refused request
    // came back.
    assert_eq!(contend(&server, 15).await, (60, 40, 60));
}
