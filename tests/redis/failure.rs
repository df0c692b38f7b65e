//! When Redis dies or stalls, the chosen policy answers within the timeout, the
//! failures are counted, nothing panics or hangs; when it comes back, checks succeed.

use crate::server::RedisServer;
use crate::{fresh_prefix, manager};
use std::time::{Duration, Instant};
use turnstile::SharedDecision;
use turnstile::redis::{
    CheckError, CircuitBreaker, FailureCounts, FailurePolicy, RedisTokenBucket,
};
use turnstile::{Decision, ManualClock, Quota};

const TIMEOUT: Duration = Duration::from_millis(100);
/// A check taking this long has hung: ten times its timeout.
const HUNG: Duration = Duration::from_secs(1);
/// How long Redis may take to be reachable again after a restart.
const RECOVERY: Duration = Duration::from_secs(15);

/// A limiter of 10 tokens an hour, on a clock that stands still, so that the counts
/// below are exact however long the outage lasts. Without a circuit breaker: every
/// check asks Redis (tests/redis/breaker.rs has the breaker).
async fn limiter(server: &RedisServer, policy: FailurePolicy) -> RedisTokenBucket {
    RedisTokenBucket::builder(Quota::per_hour(10).unwrap(), policy)
        .prefix(fresh_prefix("failure"))
        .timeout(TIMEOUT)
        .client_clock(ManualClock::new())
        .circuit_breaker(CircuitBreaker::off())
        .build(manager(server).await)
        .unwrap()
}

/// Runs one check, failing the test if it takes longer than [`HUNG`].
async fn check(limiter: &RedisTokenBucket) -> (SharedDecision<CheckError>, Duration) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(HUNG, limiter.acquire("k", 1))
        .await
        .expect("a check returns within its timeout, not hangs");
    (outcome, started.elapsed())
}

/// Checks until Redis decides again, as an app server would keep serving.
async fn until_decided(limiter: &RedisTokenBucket) -> Decision {
    let deadline = Instant::now() + RECOVERY;
    loop {
        if let (SharedDecision::Decided(decision), _) = check(limiter).await {
            return decision;
        }
        assert!(
            Instant::now() < deadline,
            "no decision {RECOVERY:?} after the restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn killed_and_restarted(policy: FailurePolicy) {
    let mut server = RedisServer::start();
    let limiter = limiter(&server, policy).await;
    assert!(matches!(
        check(&limiter).await.0,
        SharedDecision::Decided(_)
    ));

    server.kill();
    for _ in 0..5 {
        let (outcome, _) = check(&limiter).await;
        assert!(outcome.is_fallback(), "{outcome:?}");
        assert_eq!(outcome.is_allowed(), policy == FailurePolicy::Open);
        assert_eq!(outcome.decision(), None);
        assert_eq!(outcome.retry_after(), None);
    }
    let counts = limiter.failures();
    assert_eq!(counts.timeouts + counts.errors, 5, "{counts:?}");
    let (allowed, denied) = match policy {
        FailurePolicy::Open => (5, 0),
        FailurePolicy::Closed => (0, 5),
    };
    assert_eq!((counts.allowed, counts.denied), (allowed, denied));
    // A peek has nothing to allow or deny: an error, counted.
    assert!(limiter.peek("k").await.is_err());
    let after_peek = limiter.failures();
    assert_eq!(after_peek.timeouts + after_peek.errors, 6);
    assert_eq!((after_peek.allowed, after_peek.denied), (allowed, denied));

    server.restart();
    // The restarted server is empty: the key is full again, less any check that timed
    // out just before but still ran (as documented), so at most 9 are left.
    let decision = until_decided(&limiter).await;
    assert!(
        matches!(decision, Decision::Allowed { remaining } if remaining <= 9),
        "{decision:?}"
    );
    assert_eq!(limiter.peek("k").await.unwrap(), decision.remaining());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_fails_closed_then_checks_succeed_after_its_restart() {
    killed_and_restarted(FailurePolicy::Closed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_fails_open_then_checks_succeed_after_its_restart() {
    killed_and_restarted(FailurePolicy::Open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_times_out_at_the_timeout_and_the_policy_answers() {
    let server = RedisServer::start();
    let limiter = limiter(&server, FailurePolicy::Closed).await;
    assert!(matches!(
        check(&limiter).await.0,
        SharedDecision::Decided(_)
    ));

    server.pause();
    for _ in 0..3 {
        let (outcome, took) = check(&limiter).await;
        assert!(
            matches!(
                outcome,
                SharedDecision::Fallback {
                    allowed: false,
                    error: CheckError::Timeout(after)
                } if after == TIMEOUT
            ),
            "{outcome:?}"
        );
        assert!(
            took >= TIMEOUT,
            "gave up after {took:?}, before the timeout"
        );
    }
    assert_eq!(
        limiter.failures(),
        FailureCounts {
            timeouts: 3,
            errors: 0,
            short_circuited: 0,
            trips: 0,
            allowed: 0,
            denied: 3,
            replaced: 0,
        }
    );

    server.resume();
    // Once thawed, Redis answers the queued checks and the new ones.
    let decision = until_decided(&limiter).await;
    assert!(decision.is_allowed() || decision.retry_after().is_some());
}

/// A named limiter reports what its failure counters count: fallbacks among its
/// decisions, failures by error, and a warning event per fallback that carries the
/// key's hash, not the key.
#[cfg(all(feature = "metrics", feature = "tracing"))]
#[tokio::test]
async fn a_named_limiter_reports_its_fallbacks_as_metrics_and_warnings() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tracing_subscriber::layer::SubscriberExt;

    /// Counts warnings and keeps their fields' text.
    #[derive(Clone, Default)]
    struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);
    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            struct Text(String);
            impl tracing::field::Visit for Text {
                fn record_debug(
                    &mut self,
                    field: &tracing::field::Field,
                    value: &dyn std::fmt::Debug,
                ) {
                    self.0 += &format!("{}={value:?} ", field.name());
                }
            }
            if *event.metadata().level() == tracing::Level::WARN {
                let mut text = Text(String::new());
                event.record(&mut text);
                self.0.lock().unwrap().push(text.0);
            }
        }
    }

    let server = RedisServer::start();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let conn = manager(&server).await;
    let limiter = metrics::with_local_recorder(&recorder, || {
        RedisTokenBucket::builder(Quota::per_hour(10).unwrap(), FailurePolicy::Open)
            .prefix(fresh_prefix("observe"))
            .timeout(TIMEOUT)
            .client_clock(ManualClock::new())
            .name("shared")
            .build(conn)
            .unwrap()
    });
    let warnings = Warnings::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    // As in tests/observe.rs: a callsite another test's thread met first, with no
    // subscriber, may have cached "never"; ask every callsite again.
    tracing::callsite::rebuild_interest_cache();

    assert!(matches!(
        check(&limiter).await.0,
        SharedDecision::Decided(_)
    ));
    server.pause();
    for _ in 0..2 {
        assert!(check(&limiter).await.0.is_fallback());
    }
    server.resume();
    let _ = until_decided(&limiter).await;

    let series: std::collections::HashMap<String, DebugValue> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            (format!("{}{{{}}}", key.name(), labels.join(",")), value)
        })
        .collect();
    let fallbacks = &series["turnstile_decisions_total{limiter=shared,outcome=fallback}"];
    assert_eq!(*fallbacks, DebugValue::Counter(limiter.failures().allowed));
    assert_eq!(
        series["turnstile_redis_failures_total{limiter=shared,error=timeout}"],
        DebugValue::Counter(limiter.failures().timeouts)
    );
    assert!(limiter.failures().timeouts >= 2);
    let warnings = warnings.0.lock().unwrap();
    assert_eq!(
        warnings.len() as u64,
        limiter.failures().allowed,
        "{warnings:?}"
    );
    let hash = format!("key_hash={}", turnstile::observe::key_hash(b"k".as_slice()));
    assert!(
        warnings
            .iter()
            .all(|w| w.contains(&hash) && w.contains("allowed=true")),
        "{warnings:?}"
    );
}
