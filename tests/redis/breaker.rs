//! The circuit breaker against a real server, stopped (SIGSTOP) and killed: after
//! consecutive failures checks are answered by the failure policy without asking
//! Redis, one probe at a time goes through after each back-off, and the first that
//! Redis answers closes the breaker. The limiters run on a client `ManualClock`, which
//! the breaker's back-off follows, so no assertion depends on how fast the machine is.

use crate::server::RedisServer;
use crate::{fresh_prefix, manager};
use std::time::Duration;
use turnstile::SharedDecision;
use turnstile::redis::{CheckError, CircuitBreaker, CircuitState, FailurePolicy, RedisTokenBucket};
use turnstile::{ManualClock, Quota};

const TIMEOUT: Duration = Duration::from_millis(100);
const BACKOFF: Duration = Duration::from_millis(20);

async fn limiter(server: &RedisServer, clock: &ManualClock) -> RedisTokenBucket {
    RedisTokenBucket::builder(Quota::per_hour(100).unwrap(), FailurePolicy::Closed)
        .prefix(fresh_prefix("breaker"))
        .timeout(TIMEOUT)
        .client_clock(clock.clone())
        .expire_idle_keys(false)
        .circuit_breaker(CircuitBreaker::new(3, BACKOFF, BACKOFF * 4))
        .build(manager(server).await)
        .unwrap()
}

fn short_circuited(outcome: &SharedDecision<CheckError>) -> bool {
    matches!(
        outcome,
        SharedDecision::Fallback {
            allowed: false,
            error: CheckError::CircuitOpen { .. }
        }
    )
}

/// Checks until one is decided, advancing the clock past each back-off so a probe
/// goes out; gives up after 15 s of real time.
async fn until_decided(limiter: &RedisTokenBucket, clock: &ManualClock) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut checks = 0;
    loop {
        checks += 1;
        if limiter.acquire("k", 1).await.decision().is_some() {
            return checks;
        }
        assert!(std::time::Instant::now() < deadline, "never decided again");
        clock.advance(BACKOFF * 4);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Trips the breaker on a server that `fail` makes unresponsive, checks what the
/// open breaker does, then lets `heal` bring Redis back.
async fn trips_and_recovers(
    fail: impl FnOnce(&mut RedisServer),
    heal: impl FnOnce(&mut RedisServer),
) {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = limiter(&server, &clock).await;
    assert!(limiter.acquire("k", 1).await.decision().is_some());
    assert_eq!(limiter.circuit(), CircuitState::Closed);

    fail(&mut server);
    // Three failures, each asking Redis; the third opens the breaker.
    for _ in 0..3 {
        let outcome = limiter.acquire("k", 1).await;
        assert!(
            outcome.is_fallback() && !short_circuited(&outcome),
            "{outcome:?}"
        );
    }
    assert_eq!(limiter.circuit(), CircuitState::Open { retry_in: BACKOFF });
    // While the back-off lasts (the clock stands still), nothing asks Redis.
    for _ in 0..50 {
        assert!(short_circuited(&limiter.acquire("k", 1).await));
        assert!(matches!(
            limiter.peek("k").await,
            Err(CheckError::CircuitOpen { .. })
        ));
    }
    let counts = limiter.failures();
    assert_eq!(counts.timeouts + counts.errors, 3, "{counts:?}");
    assert_eq!(
        (counts.short_circuited, counts.trips, counts.denied),
        (100, 1, 53)
    );

    // After the back-off, one probe; it fails, and the back-off doubles.
    clock.advance(BACKOFF);
    let probe = limiter.acquire("k", 1).await;
    assert!(probe.is_fallback() && !short_circuited(&probe), "{probe:?}");
    assert_eq!(
        limiter.circuit(),
        CircuitState::Open {
            retry_in: BACKOFF * 2
        }
    );
    assert_eq!(limiter.failures().trips, 1, "a failed probe is no new trip");

    heal(&mut server);
    until_decided(&limiter, &clock).await;
    assert_eq!(limiter.circuit(), CircuitState::Closed);
    assert!(!limiter.acquire("k", 1).await.is_fallback());
    assert_eq!(limiter.failures().trips, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_trips_the_breaker_and_a_probe_closes_it_after_resume() {
    trips_and_recovers(|server| server.pause(), |server| server.resume()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_trips_the_breaker_and_a_probe_closes_it_after_restart() {
    trips_and_recovers(|server| server.kill(), |server| server.restart()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_reply_is_an_answer_not_an_outage() {
    // The server is told to refuse writes (it wants a replica it does not have), so
    // every script's write fails with an error reply: Redis is up and answering.
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = limiter(&server, &clock).await;
    let mut admin = crate::inspector(&server).await;
    let _: () = ::redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg("1")
        .query_async(&mut admin)
        .await
        .unwrap();
    for _ in 0..10 {
        let outcome = limiter.acquire("k", 1).await;
        assert!(
            matches!(
                &outcome,
                SharedDecision::Fallback {
                    error: CheckError::Redis(_),
                    ..
                }
            ),
            "{outcome:?}"
        );
    }
    assert_eq!(
        limiter.circuit(),
        CircuitState::Closed,
        "Redis answered every time"
    );
    assert_eq!(limiter.failures().trips, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_breaker_every_check_asks_redis() {
    let mut server = RedisServer::start();
    let limiter = RedisTokenBucket::builder(Quota::per_hour(100).unwrap(), FailurePolicy::Open)
        .prefix(fresh_prefix("no-breaker"))
        .timeout(TIMEOUT)
        .circuit_breaker(CircuitBreaker::off())
        .build(manager(&server).await)
        .unwrap();
    server.kill();
    for _ in 0..6 {
        let outcome = limiter.acquire("k", 1).await;
        assert!(
            outcome.is_fallback() && !short_circuited(&outcome),
            "{outcome:?}"
        );
    }
    let counts = limiter.failures();
    assert_eq!(
        (counts.timeouts + counts.errors, counts.short_circuited),
        (6, 0)
    );
}
