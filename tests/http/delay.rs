//! Delay mode in simulated time: tokio's clock is paused and the limiters read it too
//! (`TokioClock`), so the server's sleeps and the limiters' refill grid share one
//! simulated time. Real sockets still carry the requests; when the runtime has nothing
//! else to do, tokio jumps its paused clock to the next timer — the layer's sleep.

use crate::server::{TokioClock, get, per_user, serve};
use http::StatusCode;
use std::time::Duration;
use tokio::time::Instant;
use turnstile::Quota;
use turnstile::http::RateLimitLayer;
use turnstile::policy::Policy;
use turnstile::wait::Wait;

/// Delay mode, waiting up to `wait`, for one per-user check of 1 per `interval`.
async fn delaying(interval: Duration, wait: Wait) -> std::net::SocketAddr {
    let clock = TokioClock::new();
    let quota = Quota::new(1, interval).unwrap();
    let policy = Policy::builder()
        .check(per_user("per-user", quota, &clock))
        .build()
        .unwrap();
    serve(RateLimitLayer::builder(policy).delay(wait).build().unwrap()).await
}

#[tokio::test(start_paused = true)]
async fn a_request_that_can_pass_within_the_maximum_is_served_after_its_exact_wait() {
    let server = delaying(
        Duration::from_millis(500),
        Wait::up_to(Duration::from_secs(2)),
    )
    .await;
    let start = Instant::now();
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::OK);
    // The token is due at 500 ms; tokio's timer fires at that millisecond.
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    assert_eq!(reply.header("ratelimit"), Some(r#""per-user";r=0;t=1"#));
}

#[tokio::test(start_paused = true)]
async fn a_request_beyond_the_maximum_is_refused_at_once() {
    let server = delaying(Duration::from_secs(5), Wait::up_to(Duration::from_secs(2))).await;
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
    let start = Instant::now();
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "refused without sleeping first"
    );
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), Some("5"));
}

#[tokio::test(start_paused = true)]
async fn delayed_requests_queue_for_tokens_and_jitter_only_adds() {
    // Four concurrent requests for one key with a token every 200 ms and up to 50 ms
    // of jitter: each is served no earlier than a token is due and no later than the
    // jitter allows, and the fourth, whose token is due at 800 ms, needs more than
    // the 700 ms maximum, so it is refused, at the latest when the maximum runs out.
    let wait = Wait::up_to(Duration::from_millis(700)).jitter(Duration::from_millis(50));
    let server = delaying(Duration::from_millis(200), wait).await;
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
    let start = Instant::now();
    let requests: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(async move {
                let reply = get(server, 1, "/", Some("alice")).await;
                (reply.status, start.elapsed())
            })
        })
        .collect();
    let mut served = Vec::new();
    let mut refused = Vec::new();
    for request in requests {
        let (status, at) = request.await.unwrap();
        match status {
            StatusCode::OK => served.push(at),
            StatusCode::TOO_MANY_REQUESTS => refused.push(at),
            other => panic!("status {other}"),
        }
    }
    served.sort();
    assert_eq!(
        served.len(),
        3,
        "served at {served:?}, refused at {refused:?}"
    );
    for (i, at) in served.iter().enumerate() {
        let due = Duration::from_millis(200 * (i as u64 + 1));
        assert!(
            *at >= due,
            "request {i} served at {at:?}, before its token at {due:?}"
        );
    }
    assert!(served[2] <= Duration::from_millis(700 + 1));
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0] <= Duration::from_millis(700 + 1),
        "refused at {refused:?}"
    );
}

/// A store of its own behind the shared-check contract: an in-process token bucket
/// on tokio's clock that answers only after yielding, as a remote store does, so the
/// layer takes its awaiting path.
struct Remote(turnstile::TokenBucket<Vec<u8>, TokioClock>);

impl turnstile::policy::SharedLimiter for Remote {
    fn acquire<'a>(
        &'a self,
        key: &'a [u8],
        cost: u32,
    ) -> turnstile::policy::SharedFuture<'a, turnstile::SharedDecision> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            turnstile::SharedDecision::Decided(turnstile::RateLimiter::acquire(&self.0, key, cost))
        })
    }

    fn refund<'a>(&'a self, key: &'a [u8], cost: u32) -> turnstile::policy::SharedFuture<'a, ()> {
        Box::pin(async move { turnstile::RateLimiter::refund(&self.0, key, cost) })
    }

    fn settle<'a>(
        &'a self,
        key: &'a [u8],
        estimate: u32,
        actual: u32,
    ) -> turnstile::policy::SharedFuture<'a, Result<turnstile::Settlement, turnstile::SharedError>>
    {
        Box::pin(async move {
            Ok(turnstile::RateLimiter::settle(
                &self.0, key, estimate, actual,
            ))
        })
    }

    fn fails_open(&self) -> bool {
        false
    }
}

#[tokio::test(start_paused = true)]
async fn a_route_awaiting_a_shared_check_is_delayed_by_its_exact_wait_too() {
    let clock = TokioClock::new();
    let quota = Quota::new(1, Duration::from_millis(500)).unwrap();
    let store = std::sync::Arc::new(Remote(
        turnstile::TokenBucket::with_clock(quota, clock).unwrap(),
    ));
    let key = turnstile::http::HeaderKey::new(crate::server::API_KEY);
    let check = turnstile::policy::Check::shared(
        "per-user",
        store,
        turnstile::policy::Limit::steady(quota),
        key,
    );
    let policy = Policy::builder().check(check).build().unwrap();
    assert!(policy.is_shared());
    let layer = RateLimitLayer::builder(policy)
        .delay(Wait::up_to(Duration::from_secs(2)))
        .build()
        .unwrap();
    let server = serve(layer).await;
    let start = Instant::now();
    assert_eq!(
        get(server, 1, "/", Some("alice")).await.status,
        StatusCode::OK
    );
    let reply = get(server, 1, "/", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    assert_eq!(reply.header("ratelimit"), Some(r#""per-user";r=0;t=1"#));
}
