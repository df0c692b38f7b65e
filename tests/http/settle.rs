//! Charging from the response: the layer settles each request's settled checks at the
//! cost its response head reports, before the response is returned; a response that
//! reports nothing, never comes, or reports garbage leaves the request at its
//! estimate (or, past `u32::MAX`, charges it to the debt cap).

use crate::server::{API_KEY, bucket, get, per_user, serve_app};
use axum::Router;
use axum::routing::get as route_get;
use http::header::RETRY_AFTER;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode, response};
use std::convert::Infallible;
use std::future::{Future, Pending};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tower::{Layer, Service};
use turnstile::http::{HeaderKey, RateLimitLayer, cost_in_header};
use turnstile::policy::{Check, Limit, Policy, SharedFuture, SharedLimiter};
use turnstile::{ManualClock, Quota, Settlement, SharedDecision, SharedError, TokenBucket};

const TOKENS_USED: HeaderName = HeaderName::from_static("x-tokens-used");

/// 100 tokens a user, one back a second.
fn tokens_quota() -> Quota {
    Quota::new(100, Duration::from_secs(1)).unwrap()
}

type Tokens = Arc<TokenBucket<String, ManualClock>>;

/// A policy of one tokens check, estimated at `estimate`, settled.
fn tokens_policy(tokens: &Tokens, estimate: u32) -> Policy<http::request::Parts> {
    Policy::builder()
        .check(
            Check::new(
                "tokens",
                tokens.clone(),
                Limit::steady(tokens_quota()),
                HeaderKey::new(API_KEY),
            )
            .cost(estimate)
            .settled(),
        )
        .build()
        .unwrap()
}

/// The layer over `policy`, reading the cost from `x-tokens-used`.
fn by_header(policy: Policy<http::request::Parts>) -> RateLimitLayer {
    RateLimitLayer::builder(policy)
        .settle_from(|head| cost_in_header(head, &TOKENS_USED))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_response_reporting_more_drives_the_key_into_debt_counted_by_the_next_retry_after() {
    let clock = ManualClock::new();
    let tokens: Tokens = bucket(tokens_quota(), &clock);
    let app = Router::new()
        .route(
            "/chat",
            route_get(|| async { ([(TOKENS_USED, "60")], "answer") }),
        )
        .layer(by_header(tokens_policy(&tokens, 10)));
    let server = serve_app(app).await;

    let reply = get(server, 1, "/chat", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(tokens.peek("alice"), 40, "10 estimated, 50 more charged");
    get(server, 1, "/chat", Some("alice")).await;
    // 100 - 60 - 60: the key owes 20, and a request estimated at 10 waits for 30.
    let reply = get(server, 1, "/chat", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), Some("30"));
    clock.advance(Duration::from_secs(29));
    assert_eq!(
        get(server, 1, "/chat", Some("alice")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        get(server, 1, "/chat", Some("alice")).await.status,
        StatusCode::OK
    );
}

/// The `t` of a `RateLimit` field value.
fn t_of(field: &str) -> u64 {
    field.rsplit_once(";t=").unwrap().1.parse().unwrap()
}

#[tokio::test]
async fn a_key_in_debt_is_told_a_t_no_earlier_than_its_retry_after() {
    let clock = ManualClock::new();
    let tokens: Tokens = bucket(tokens_quota(), &clock);
    let app = Router::new()
        .route(
            "/chat",
            route_get(|| async { ([(TOKENS_USED, "141")], "answer") }),
        )
        .layer(by_header(tokens_policy(&tokens, 1)));
    let server = serve_app(app).await;

    // Estimated at 1, charged 141: the key owes 41 (under the debt cap of 100).
    assert_eq!(
        get(server, 1, "/chat", Some("alice")).await.status,
        StatusCode::OK
    );
    let reply = get(server, 1, "/chat", Some("alice")).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), Some("42"), "41 owed, 1 asked");
    let field = reply.header("ratelimit").unwrap();
    assert!(field.starts_with(r#""tokens";r=0;t="#), "{field}");
    // A client that waits `t` must not be refused again for the same debt.
    assert!(t_of(field) >= 42, "t under-reports the debt: {field}");
    clock.advance(Duration::from_secs(t_of(field)));
    assert_eq!(
        get(server, 1, "/chat", Some("alice")).await.status,
        StatusCode::OK
    );
}

/// A service answering each request with `respond`'s response, at once.
#[derive(Clone)]
struct Answer<F>(F);

impl<F, B> Service<Request<B>> for Answer<F>
where
    F: Fn() -> Response<Body>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        std::future::ready(Ok((self.0)()))
    }
}

/// A response body: text, or a stream whose end never comes.
#[derive(Debug)]
enum Body {
    Text(String),
    Endless,
}

impl From<String> for Body {
    fn from(text: String) -> Self {
        Body::Text(text)
    }
}

/// A request from `user`.
fn from(user: &str) -> Request<()> {
    Request::builder()
        .uri("/chat")
        .header(API_KEY, user)
        .body(())
        .unwrap()
}

/// The layer's response to `request`, from a future that must answer at once.
fn at_once<S: Service<Request<()>>>(service: &mut S, request: Request<()>) -> S::Response
where
    S::Error: std::fmt::Debug,
{
    let mut context = Context::from_waker(Waker::noop());
    let Poll::Ready(response) = pin!(service.call(request)).poll(&mut context) else {
        panic!("every answer here is at once");
    };
    response.unwrap()
}

/// A response with an `x-tokens-used` field line for each of `values`.
fn reporting(values: &[&'static str], body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    for value in values {
        response
            .headers_mut()
            .append(TOKENS_USED, HeaderValue::from_static(value));
    }
    response
}

#[test]
fn the_cost_of_a_streaming_body_is_taken_from_its_head_before_the_body_ends() {
    let clock = ManualClock::new();
    let tokens: Tokens = bucket(tokens_quota(), &clock);
    let mut service =
        by_header(tokens_policy(&tokens, 10)).layer(Answer(|| reporting(&["35"], Body::Endless)));
    let response = at_once(&mut service, from("alice"));
    // The body has not ended (it never will): the request is settled already.
    assert!(matches!(response.body(), Body::Endless));
    assert_eq!(tokens.peek("alice"), 65);
    assert_eq!(
        response.extensions().get::<Settlement>(),
        Some(&Settlement {
            refunded: 0,
            charged: 25,
            forgiven: 0
        })
    );
}

/// The cost the handler left in the response's extensions.
#[derive(Clone, Copy)]
struct TokensUsed(u32);

#[test]
fn a_cost_can_come_from_an_extension_the_handler_sets() {
    let clock = ManualClock::new();
    let tokens: Tokens = bucket(tokens_quota(), &clock);
    let layer = RateLimitLayer::builder(tokens_policy(&tokens, 50))
        .settle_from(|head: &response::Parts| head.extensions.get::<TokensUsed>().map(|t| t.0))
        .build()
        .unwrap();
    let mut service = layer.layer(Answer(|| {
        let mut response = Response::new(Body::Text("answer".into()));
        response.extensions_mut().insert(TokensUsed(5));
        response
    }));
    let response = at_once(&mut service, from("alice"));
    assert!(matches!(response.body(), Body::Text(text) if text == "answer"));
    assert_eq!(
        tokens.peek("alice"),
        95,
        "45 of the 50 estimated given back"
    );
}

/// A login route's layer: one check of 3 failures a minute per user, estimated at
/// `estimate`, settled at 1 for a 401 and 0 otherwise; the inner service fails while
/// `fail` is 1.
fn logins(
    failures: &Tokens,
    estimate: u32,
    fail: &Arc<AtomicU32>,
) -> impl Service<Request<()>, Response = Response<Body>, Error = Infallible> + use<> {
    let quota = Quota::per_minute(3).unwrap();
    let policy = Policy::builder()
        .check(
            Check::new(
                "failed-logins",
                failures.clone(),
                Limit::steady(quota),
                HeaderKey::new(API_KEY),
            )
            .cost(estimate)
            .settled(),
        )
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder(policy)
        .settle_from(|head| Some(u32::from(head.status == StatusCode::UNAUTHORIZED)))
        .build()
        .unwrap();
    let failing = Arc::clone(fail);
    layer.layer(Answer(move || {
        let mut response = Response::new(Body::Text(String::new()));
        if failing.load(Ordering::Relaxed) == 1 {
            *response.status_mut() = StatusCode::UNAUTHORIZED;
        }
        response
    }))
}

#[test]
fn only_failed_logins_are_charged_with_an_estimate_of_zero() {
    let clock = ManualClock::new();
    let failures: Tokens = bucket(Quota::per_minute(3).unwrap(), &clock);
    let fail = Arc::new(AtomicU32::new(0));
    let mut service = logins(&failures, 0, &fail);
    for _ in 0..10 {
        assert_eq!(
            at_once(&mut service, from("mallory")).status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        failures.peek("mallory"),
        3,
        "successful logins count nothing"
    );
    fail.store(1, Ordering::Relaxed);
    for _ in 0..3 {
        at_once(&mut service, from("mallory"));
    }
    assert_eq!(failures.peek("mallory"), 0, "each failure is charged");
    // The fourth failure is still tried (nothing left, but nothing owed: an estimate
    // of 0 fits) and charged into debt.
    let response = at_once(&mut service, from("mallory"));
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.extensions().get::<Settlement>(),
        Some(&Settlement {
            refunded: 0,
            charged: 1,
            forgiven: 0
        })
    );
    // A key in debt has less than nothing: even an estimate of 0 is refused until
    // the debt is repaid, one refill of 20 s.
    let refused = at_once(&mut service, from("mallory"));
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()[RETRY_AFTER], "20");
    clock.advance(Duration::from_secs(20));
    fail.store(0, Ordering::Relaxed);
    assert_eq!(
        at_once(&mut service, from("mallory")).status(),
        StatusCode::OK
    );
}

#[test]
fn failed_logins_past_the_quota_are_refused_with_an_estimate_of_one() {
    let clock = ManualClock::new();
    let failures: Tokens = bucket(Quota::per_minute(3).unwrap(), &clock);
    let fail = Arc::new(AtomicU32::new(0));
    let mut service = logins(&failures, 1, &fail);
    for _ in 0..10 {
        assert_eq!(
            at_once(&mut service, from("mallory")).status(),
            StatusCode::OK
        );
    }
    assert_eq!(failures.peek("mallory"), 3, "a success gives its unit back");
    fail.store(1, Ordering::Relaxed);
    for _ in 0..3 {
        let status = at_once(&mut service, from("mallory")).status();
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    fail.store(0, Ordering::Relaxed);
    let refused = at_once(&mut service, from("mallory"));
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()[RETRY_AFTER], "20");
    clock.advance(Duration::from_secs(20));
    assert_eq!(
        at_once(&mut service, from("mallory")).status(),
        StatusCode::OK
    );
}

#[test]
fn hostile_cost_headers_have_their_documented_outcomes() {
    let clock = ManualClock::new();
    let tokens: Tokens = bucket(tokens_quota(), &clock);
    let layer = by_header(tokens_policy(&tokens, 10));
    let ask = |user: &str, headers: &'static [&'static str]| {
        let mut service = layer.clone().layer(Answer(move || {
            reporting(headers, Body::Text(String::new()))
        }));
        at_once(&mut service, from(user))
    };
    // Not a number, a sign, a fraction, several values: the estimate stands.
    for (user, headers) in [
        ("a", &["lots"][..]),
        ("b", &["-5"]),
        ("c", &["5.5"]),
        ("d", &["5, 6"]),
        ("e", &["5", "6"]),
        ("f", &[]),
    ] {
        let response = ask(user, headers);
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(tokens.peek(user), 90, "{headers:?}");
        assert_eq!(response.extensions().get::<Settlement>(), None);
    }
    // Past u32::MAX: charged to the debt cap (one capacity), the rest forgiven.
    let response = ask("g", &["99999999999999999999"]);
    assert_eq!(
        response.extensions().get::<Settlement>(),
        Some(&Settlement {
            refunded: 0,
            charged: 190,
            forgiven: u32::MAX - 10 - 190
        })
    );
    assert_eq!(tokens.peek("g"), 0);
}

/// A service whose response never comes.
#[derive(Clone)]
struct Never;

impl<B> Service<Request<B>> for Never {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pending<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        std::future::pending()
    }
}

#[test]
fn a_response_future_dropped_before_the_response_leaves_the_estimate() {
    let clock = ManualClock::new();
    let tokens: Tokens = bucket(tokens_quota(), &clock);
    let asked = Arc::new(AtomicU32::new(0));
    let counting = Arc::clone(&asked);
    let layer = RateLimitLayer::builder(tokens_policy(&tokens, 10))
        .settle_from(move |_| {
            counting.fetch_add(1, Ordering::Relaxed);
            Some(0)
        })
        .build()
        .unwrap();
    let mut service = layer.layer(Never);
    let mut context = Context::from_waker(Waker::noop());
    {
        let mut future = pin!(service.call(from("alice")));
        assert!(future.as_mut().poll(&mut context).is_pending());
    } // The client went away.
    assert_eq!(tokens.peek("alice"), 90);
    assert_eq!(asked.load(Ordering::Relaxed), 0);
}

#[test]
fn a_route_whose_policy_settles_nothing_never_reads_the_response() {
    let clock = ManualClock::new();
    let asked = Arc::new(AtomicU32::new(0));
    let counting = Arc::clone(&asked);
    let policy = Policy::builder()
        .check(per_user("per-user", tokens_quota(), &clock))
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder(policy)
        .settle_from(move |_| {
            counting.fetch_add(1, Ordering::Relaxed);
            Some(1000)
        })
        .build()
        .unwrap();
    let mut service = layer.layer(Answer(|| reporting(&["1000"], Body::Endless)));
    let response = at_once(&mut service, from("alice"));
    assert_eq!(response.extensions().get::<Settlement>(), None);
    assert_eq!(asked.load(Ordering::Relaxed), 0);
}

/// A store of its own behind the shared-check contract, answering only after a
/// yield, as a remote store does: the layer awaits it, and its settlements.
struct Remote(TokenBucket<Vec<u8>, ManualClock>);

impl SharedLimiter for Remote {
    fn acquire<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, SharedDecision> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            SharedDecision::Decided(self.0.acquire(key, cost))
        })
    }

    fn refund<'a>(&'a self, key: &'a [u8], cost: u32) -> SharedFuture<'a, ()> {
        Box::pin(async move { self.0.refund(key, cost) })
    }

    fn settle<'a>(
        &'a self,
        key: &'a [u8],
        estimate: u32,
        actual: u32,
    ) -> SharedFuture<'a, Result<Settlement, SharedError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            Ok(self.0.settle(key, estimate, actual))
        })
    }

    fn fails_open(&self) -> bool {
        false
    }
}

#[tokio::test]
async fn a_shared_check_is_settled_on_its_store_before_the_response_returns() {
    let clock = ManualClock::new();
    let store = Arc::new(Remote(
        TokenBucket::with_clock(tokens_quota(), clock).unwrap(),
    ));
    let policy = Policy::builder()
        .check(
            Check::shared(
                "tokens",
                store.clone(),
                Limit::steady(tokens_quota()),
                HeaderKey::new(API_KEY),
            )
            .cost(10)
            .settled(),
        )
        .build()
        .unwrap();
    let mut service = by_header(policy).layer(Answer(|| reporting(&["70"], Body::Endless)));
    let response = service.call(from("alice")).await.unwrap();
    assert_eq!(store.0.peek(b"alice".as_slice()), 30);
    assert_eq!(
        response.extensions().get::<Settlement>().map(|s| s.charged),
        Some(60)
    );
}

#[tokio::test(start_paused = true)]
async fn a_delayed_request_is_settled_too_and_waits_out_the_debt_before_it() {
    let clock = crate::server::TokioClock::new();
    let quota = Quota::new(10, Duration::from_millis(100)).unwrap();
    let tokens = bucket::<String, _>(quota, &clock);
    let policy = Policy::builder()
        .check(
            Check::new(
                "tokens",
                tokens.clone(),
                Limit::steady(quota),
                HeaderKey::new(API_KEY),
            )
            .settled(),
        )
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder(policy)
        .delay(turnstile::wait::Wait::up_to(Duration::from_secs(2)))
        .settle_from(|head| cost_in_header(head, &TOKENS_USED))
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/chat",
            route_get(|| async { ([(TOKENS_USED, "15")], "answer") }),
        )
        .layer(layer);
    let server = serve_app(app).await;
    let start = tokio::time::Instant::now();
    // 1 estimated, 15 used: the key owes 5.
    assert_eq!(
        get(server, 1, "/chat", Some("alice")).await.status,
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    // Held until the 5 owed and its own 1 have refilled, then served and settled:
    // 14 more owed, of which the debt cap (10) charges 10.
    assert_eq!(
        get(server, 1, "/chat", Some("alice")).await.status,
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::from_millis(600));
    assert_eq!(
        get(server, 1, "/chat", Some("alice")).await.status,
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::from_millis(600 + 1100));
}
